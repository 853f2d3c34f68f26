/*
 * testing.h — hooks for Weft's own tests (not installed, not public API).
 * Tests link the static library, so these internal symbols resolve there.
 */
#ifndef WEFT_TESTING_H
#define WEFT_TESTING_H

#include <stdint.h>

/* Make the n-th internal allocation from now on fail (n >= 1), once.
 * n == 0 disables injection.  Thread-safe. */
void weft__alloc_fail_at(long n);

/* Number of internal allocations performed since the process started. */
long weft__alloc_count(void);

/* Blocks currently allocated through the internal allocator (type-stable
 * handle slots are counted while they are in use, not while pooled). */
long weft__alloc_live(void);

#endif
