/*
 * gil_state.h — the GIL's own state, read-only, for the workers' GIL
 * hand-off (gil.c).  gil_state.c, which reads CPython's internal headers,
 * includes only this of the extension's headers.
 */
#ifndef WEFT_PY_GIL_STATE_H
#define WEFT_PY_GIL_STATE_H

#include <stdatomic.h>
#include <stdint.h>

/* `locked` is 1 while a thread holds the GIL, `holder` the thread state
 * (PyThreadState *) that holds or last held it; `switches` counts the takes
 * by a thread other than the last holder (written under the GIL's mutex by
 * the thread that takes it: read it only while holding the GIL).  All NULL
 * where the layout is not known. */
typedef struct {
    _Atomic int *locked;
    _Atomic uintptr_t *holder;
    const unsigned long *switches;
} weft_py_gil_state;

/* Point out at the GIL of the calling thread's interpreter (the calling
 * thread holds the GIL): 1, or 0 (all NULL) where the layout is not known
 * or the check of the fields failed. */
int weft_py_gil_view(weft_py_gil_state *out);

#endif
