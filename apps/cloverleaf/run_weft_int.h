/* The C driver's internals (run_weft.c: kernels as tasks, the time step;
 * halo_weft.c: the halo updates between its chunks), shared by its two
 * files only.  Not part of run_weft.h's interface. */
#ifndef CLOVER_RUN_WEFT_INT_H
#define CLOVER_RUN_WEFT_INT_H

#include "call.h"
#include "clover.h"

#include <weft.h>

#include <stdatomic.h>
#include <stdint.h>

#define MAX_ACC CLOVER_CALL_MAX_ACC
/* What a job's access is, beside a field f (>= 0): call.h's CALL_GEOM,
 * CALL_RED, CALL_STAGE - f (field f's staging handle) or CALL_OUT - f
 * (the array a split advection job writes field f's new values into). */
enum { W_GEOM = CALL_GEOM, W_RED = CALL_RED, W_STAGE = CALL_STAGE, W_OUT = CALL_OUT };

typedef struct sim sim;

typedef struct chunk_rt {
    clover_chunk c;
    int gpu;                     /* GPU (placement numbering), -1 on the CPU */
    int cuda;                    /* 1: that GPU is a CUDA device (kernels.cu), else the C kernels */
    double *mem;                 /* host memory of every field, then the geometry */
    weft_data *f[CF_NFIELDS];
    weft_data *geom;
    /* Staged halo updates (sim.split): field f's ghosts as received, in
     * an array of the field's shape (the same offsets; only the ghost
     * blocks are ever written), for the fields of staged_fields; NULL for
     * the others and for other ranks' chunks. */
    double *stage_mem;
    weft_data *stage[CF_NFIELDS];
    /* Split advection (sim.split_adv): a second array of each field the
     * advection kernels update (density1, energy1, xvel1, yvel1).  A
     * split kernel's parts read f[] and write out[] (a part reads old
     * values of cells another part updates), then the two handles swap
     * (run_weft.c's swap_out), so f[] always names the field's newest values; twice a
     * step each, so that after a step f[] is the first array again. */
    double *out_mem;
    weft_data *out[CF_NFIELDS];
    size_t fbytes, gbytes;
} chunk_rt;

/* One kernel on one chunk: the task's argument, and on a GPU the work it
 * queues (freed when the task finishes). */
typedef struct job {
    sim *s;
    int chunk;
    /* The call (call.h): the kernel and its arguments; its views, stage
     * and reduction copy set where the body runs. */
    clover_call k;
    size_t nacc;
    weft_access acc[MAX_ACC];
    signed char what[MAX_ACC];   /* field, W_GEOM, W_RED or W_STAGE - field */
} job;

struct sim {
    weft_runtime *rt;
    const clover_deck *d;
    int n, cx, cy, ngpu;         /* chunks of the whole mesh; GPUs of this rank */
    int ncpu;                    /* chunks on the CPU beside the GPUs' (--cpu-chunks), or 0 */
    int rank, nranks, nloc;      /* this rank's chunks are lo .. hi-1, nloc of them */
    int lo, hi;
    int no_exchange;             /* clover_weft_opts' */
    int split;                   /* 1: the halo updates before viscosity and accelerate are staged
                                    and those kernels split (interior, then border) */
    int split_adv;               /* 1: so are the advection kernels and their updates (split, and
                                    clover_weft_opts.split_advection) */
    chunk_rt *ch;                /* every chunk (other ranks': geometry only) */
    weft_comm *comm;             /* the chunks' GPUs (of every rank), or NULL */
    weft_comm *net;              /* the ranks (members in host memory), or NULL */
    double dt_min;               /* REDUCE MIN: the chunks' smallest dt */
    int32_t err;                 /* REDUCE MAX: a PdV check failed */
    double sums[CS_N];           /* REDUCE SUM: the field summary */
    weft_data *dt_d, *err_d, *sums_d;
    clover_prof prof;
};

/* A halo update's fields and depth, as a split kernel's border job
 * unpacks them (NULL: the kernel is not split). */
typedef struct halo_upd {
    const int *fields;
    int nfields, depth;
} halo_upd;

/* Nanoseconds of a monotonic clock (the profile's kernel times). */
static inline uint64_t now_ns(void) { return clover_now_ns(); }

/* Whether chunk c is this rank's. */
static inline int local(const sim *s, int c) { return c >= s->lo && c < s->hi; }

/* run_weft.c: spawn the reflection of the listed fields on chunk c (on
 * its device; the mesh boundary's ghosts, clover_k_reflect). */
int cw_k_reflect(sim *s, int c, const int *fields, int nfields, int depth);

/* halo_weft.c: a halo update of the fields (depth 1 or 2) written into the
 * fields' ghosts: the reflection, then the blocks between chunks. */
int cw_halo(sim *s, const int *fields, int nfields, int depth);
/* halo_weft.c: a staged halo update of u's fields (into the chunks'
 * staging arrays; the next kernel's border jobs unpack it and reflect). */
int cw_halo_staged(sim *s, const halo_upd *u);

#endif /* CLOVER_RUN_WEFT_INT_H */
