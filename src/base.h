/*
 * base.h — the bottom of Weft's layers: error reporting and the clock.
 * Every layer may call these (internal.h includes this header); they call
 * nothing of Weft's.
 */
#ifndef WEFT_BASE_H
#define WEFT_BASE_H

#include "weft.h"

#include <stdint.h>

/* Record a message for weft_last_error() (the calling thread's) and return
 * code. */
int weft__error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Forget the calling thread's message: a public call starts with this. */
void weft__clear_error(void);

/* The monotonic clock (CLOCK_MONOTONIC), in nanoseconds: what every
 * deadline, span and idle period is measured in. */
uint64_t weft__now_ns(void);
/* An absolute deadline timeout_ns from now (UINT64_MAX: none; no overflow). */
uint64_t weft__deadline(uint64_t timeout_ns);

#endif
