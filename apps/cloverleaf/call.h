/* One kernel call on one chunk as a task runs it, the same for both
 * drivers: the kernel and its arguments, the views of the chunk's arrays
 * where it runs, a split kernel's border job's unpack and reflection first,
 * the fold into a reduction's private copy, the time added to a profile.
 * The C driver's job bodies run it (run_weft.c's job_run); the Python
 * driver's tasks on the CPU and on virtual GPUs have clover_call_bound_run
 * as their body (weft.native: no Python on the workers or the stream
 * threads).  On a CUDA device call_cuda.h's clover_cu_call_run queues the
 * same call.  Part of the kernel library (no Weft in it). */
#ifndef CLOVER_CALL_H
#define CLOVER_CALL_H

#include "clover.h"

#include <stdatomic.h>
#include <stdint.h>

/* The kernels (the profile counts each; both drivers name them). */
enum clover_kern {
    K_INIT, K_GENERATE, K_IDEAL_GAS, K_VISCOSITY, K_CALC_DT, K_PDV, K_REVERT, K_ACCELERATE,
    K_FLUX_CALC, K_ADVEC_CELL, K_ADVEC_MOM, K_RESET, K_SUMMARY, K_REFLECT, K_HALO, K_UNPACK, K_N
};

/* The parts of a split kernel (a kernel after a staged halo update): the
 * whole kernel, its interior alone, or its border ring (after the staged
 * ghosts are copied into the fields). */
enum { PART_WHOLE, PART_INTERIOR, PART_BORDER };

#define MAX_HALO_FIELDS 10

/* Time and calls per kernel, added to by concurrent calls (relaxed atomics). */
typedef struct clover_prof {
    _Atomic uint64_t ns[K_N], calls[K_N];
} clover_prof;

typedef struct clover_call {
    int kern;                    /* K_INIT .. K_REFLECT */
    int part;                    /* PART_*: what of the kernel's domain it computes */
    int a, b, c;                 /* predict, dir, sweep, vel as the kernel takes them */
    double dt;
    /* The reflection's fields and depth (K_REFLECT), or a border job's
     * staged update's (unpack: its ghosts copied from stage first, then
     * reflected on the mesh's boundary). */
    int fields[MAX_HALO_FIELDS], nfields, depth;
    int unpack;
    clover_view v;               /* the chunk's arrays where it runs */
    clover_view out;             /* a split advection part's second arrays (it writes them) */
    clover_view stage;           /* the staging arrays (unpack; v's shape, only f[] used) */
    void *red;                   /* the reduction's private copy: a double (calc_dt), an int32_t
                                    (pdv's error), CS_N doubles (field_summary) */
    const clover_deck *d;        /* initialise, calc_dt */
    const clover_chunk *chunk;   /* initialise, calc_dt, the unpack, the reflection's edges */
    clover_prof *prof;           /* where its times go, or NULL */
} clover_call;

/* What a task's data access is to a call (the drivers' access lists):
 * field f (>= 0), the geometry, the reduction's private copy, field f's
 * staging array (CALL_STAGE - f) or its second array (CALL_OUT - f). */
enum { CALL_GEOM = -1, CALL_RED = -2, CALL_STAGE = -3, CALL_OUT = CALL_STAGE - CF_NFIELDS };
#define CLOVER_CALL_MAX_ACC 24

/* Point the call's views (and its reduction) at where the task's n
 * accesses are: ptr[i] is access i, what[i] says which it is. */
void clover_call_bind(clover_call *c, const signed char *what, void *const *ptr, int n);

/* A call with its accesses, bound where it runs (clover_call_bound_run):
 * the Python driver's argument, made of bytes (a template, then dt and the
 * pointers its task's context gives); ptr has n entries. */
typedef struct clover_bound {
    clover_call c;
    int32_t n;
    signed char what[CLOVER_CALL_MAX_ACC];
    double dt;                   /* the call's dt (a kernel that takes none ignores it) */
    void *ptr[];
} clover_bound;

/* *out: a copy of b's call with its dt, bound to b's pointers
 * (clover_call_bind).  Returns 0, or -1 for a bad b->n. */
int clover_bound_get(const clover_bound *b, clover_call *out);
/* Run b's call (clover_bound_get, clover_call_run): -1 for a bad b.  As
 * int (*)(void *) for a weft.native body. */
int clover_call_bound_run(void *b);

/* sizeof(clover_bound) (where ptr starts) and sizeof(clover_prof), for the
 * Python driver's check of its ctypes layouts. */
size_t clover_bound_sizeof(void);
size_t clover_prof_sizeof(void);

/* Run the call.  Returns 0, or -1 (nothing run) for an unknown kernel.
 * Thread-safe for calls on distinct arrays (the profile is atomic). */
int clover_call_run(const clover_call *c);

/* The parts of its kernel's domain a split call computes (the interior, or
 * the four strips of the border ring; kernels.cu's too): *out, returns how
 * many. */
int clover_call_ranges(const clover_call *c, clover_range out[4]);

/* sizeof(clover_call), for the Python driver's check of its ctypes layout. */
size_t clover_call_sizeof(void);

/* The kernel's name in the profile (K_*; "unknown" for another value). */
const char *clover_kern_name(int k);
/* Nanoseconds of a monotonic clock (the profile's kernel times). */
uint64_t clover_now_ns(void);

#endif
