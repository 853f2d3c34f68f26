/*
 * env.h — the environment variables weft.h names: one table of what each
 * accepts, one parser per kind of value, and the check weft_runtime_create
 * makes of them all.  Part of the base layer: it calls only weft__error.
 *
 * Every reader of a WEFT_* variable goes through these, so that what the
 * check refuses and what the readers take are decided by the same code.
 * An unset or empty variable counts as unset.
 */
#ifndef WEFT_ENV_H
#define WEFT_ENV_H

#include <stdbool.h>
#include <stdint.h>

/* A whole-number variable within its table range (WEFT_WORKERS, ...):
 * 1 with *out set when it is set and well formed, 0 when unset or
 * malformed.  name must be one of the table's whole-number variables. */
int weft__env_uint(const char *name, uint64_t *out);
/* A yes/no variable (WEFT_VGPU_CHECK, ...: 1, 0, on, off, yes, no, true,
 * false, any case): 1 with *out set, 0 when unset or malformed. */
int weft__env_flag(const char *name, bool *out);
/* A positive number below 1e12 (WEFT_VGPU_LATENCY_US, ...): 1 with *out
 * set, 0 when unset or malformed. */
int weft__env_number(const char *name, double *out);
/* A word from the variable's table list, any case (WEFT_PIN_WORKERS: auto,
 * then 1, on, yes, true, then 0, off, no, false; WEFT_VGPU_COPIES: timing):
 * 1 with *out the word's index in that list, 0 when unset or malformed. */
int weft__env_word(const char *name, unsigned *out);

/* 0 when every variable of the table is unset or well formed; else
 * WEFT_EINVAL with a message (weft__error) naming the first malformed one,
 * its value and what it accepts, prefixed with fn.  Never blocks. */
int weft__env_check(const char *fn);

#endif
