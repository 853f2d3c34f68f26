/*
 * gil_state.c — where CPython keeps the GIL's own state, for the workers'
 * GIL hand-off (gil.c).
 *
 * CPython's API has no call that tells whether another thread holds the
 * GIL.  Its GIL is a struct _gil_runtime_state whose `locked` (1 while a
 * thread holds it) and `last_holder` (the holder's thread state) the
 * interpreter itself reads without its mutex, and whose `switch_number`
 * counts the takes by a thread that was not the last holder.  Their layout is internal and
 * known per minor version; this is the only file that reads CPython's
 * internal headers:
 *   3.11       _PyRuntime.ceval.gil (one GIL for every interpreter)
 *   3.12, 3.13 the interpreter's ceval.gil (a pointer: an interpreter may
 *              have a GIL of its own)
 * The fields are then checked on the calling thread, which holds the GIL:
 * `locked` must read 1 and `last_holder` the caller's thread state, else
 * the view is refused (a patch release that moved them).  On any other
 * version, and on a free-threaded build, there is no view: the hand-off
 * then falls back to the workers' claim alone (gil.c).
 */
/* The version, before Python.h: the internal headers need Py_BUILD_CORE
 * defined before it. */
#include <patchlevel.h>
#include <pyconfig.h>
#if !defined(Py_GIL_DISABLED) && PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000
#define WEFT_PY_GIL_LAYOUT_KNOWN 1
#define Py_BUILD_CORE 1
#endif
#include <Python.h>

#include "gil_state.h"

#ifdef WEFT_PY_GIL_LAYOUT_KNOWN
#if PY_VERSION_HEX < 0x030C0000
#include "internal/pycore_runtime.h"
#else
#include "internal/pycore_interp.h"
#endif
#endif

int
weft_py_gil_view(weft_py_gil_state *out)
{
    out->locked = NULL;
    out->holder = NULL;
    out->switches = NULL;
#ifdef WEFT_PY_GIL_LAYOUT_KNOWN
#if PY_VERSION_HEX < 0x030C0000
    struct _gil_runtime_state *g = &_PyRuntime.ceval.gil;
#else
    struct _gil_runtime_state *g = PyInterpreterState_Get()->ceval.gil;
#endif
    if (g == NULL) return 0;
    /* `locked` is an int (in 3.11 and 3.12 wrapped in a one-member struct,
     * _Py_atomic_int), `last_holder` a pointer (_Py_atomic_address, a
     * uintptr_t in a struct, before 3.13); CPython reads and writes both
     * atomically. */
    _Atomic int *locked = (_Atomic int *)(void *)&g->locked;
    _Atomic uintptr_t *holder = (_Atomic uintptr_t *)(void *)&g->last_holder;
    if (atomic_load_explicit(locked, memory_order_relaxed) != 1 ||
        atomic_load_explicit(holder, memory_order_relaxed) != (uintptr_t)PyThreadState_Get())
        return 0;
    out->locked = locked;
    out->holder = holder;
    out->switches = &g->switch_number;
    return 1;
#else
    return 0;
#endif
}
