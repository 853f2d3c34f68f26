/*
 * wb.h — internals of weft-bench, the Task Bench style benchmark of Weft.
 *
 * A benchmark run is: a task-graph shape (pattern, width W, steps T), ngraphs
 * independent copies of it, a kernel of a given length, and a system (Weft,
 * OpenMP tasks, StarPU, bulk-synchronous pthreads, spinning barrier) that
 * executes every point (t, i) after the points of step t-1 it depends on.
 * Every system runs the same point function, wb_point(), which checks its
 * inputs, runs the kernel and writes its output; only the way the points are
 * ordered differs.
 */
#ifndef WB_H
#define WB_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------ */
/* Patterns (graph.c)                                                        */
/* ------------------------------------------------------------------------ */

typedef enum wb_pattern {
    WB_TRIVIAL,
    WB_NO_COMM,
    WB_STENCIL_1D,
    WB_STENCIL_1D_PERIODIC,
    WB_DOM,
    WB_TREE,
    WB_FFT,
    WB_ALL_TO_ALL,
    WB_NEAREST,
    WB_SPREAD,
    WB_RANDOM_NEAREST,
    WB_PATTERN_COUNT
} wb_pattern;

const char *wb_pattern_name(wb_pattern p);
int wb_pattern_parse(const char *s, wb_pattern *out); /* 0 or -1 */

typedef struct wb_shape {
    wb_pattern pattern;
    int width;  /* W */
    int steps;  /* T */
    int radix;  /* nearest, spread, random_nearest */
    int period; /* spread */
} wb_shape;

/* Live points of step t: indices offset(t) .. offset(t)+width(t)-1. */
int wb_shape_width(const wb_shape *s, int t);
int wb_shape_offset(const wb_shape *s, int t);

/* The topology of one graph, precomputed so that no system pays for the
 * pattern arithmetic.  Points are numbered step by step (point ids).  Each
 * point has two lists of producers in step t-1: `inputs`, which its body reads
 * and checks, and `deps`, the ordering the system is told about.  They are the
 * same list except for a deliberately dropped dependency (--drop-dep), which
 * exists to prove that the validation catches a wrong graph. */
typedef struct wb_graph {
    wb_shape shape;
    uint32_t npoints;   /* points per graph */
    uint32_t *step_start; /* [steps+1]: first point id of each step */
    int32_t *point_i;   /* [npoints]: column index of each point */
    int32_t *point_t;   /* [npoints]: step of each point */
    uint32_t *in_start; /* [npoints+1] CSR into inputs */
    uint32_t *inputs;
    uint32_t *dep_start; /* [npoints+1] CSR into deps */
    uint32_t *deps;
    uint32_t maxdeps;   /* longest input list */
    uint64_t nedges;    /* total inputs */
    int dropped;        /* 1 when a dependency was dropped */
    uint32_t drop_point, drop_input; /* which (point id, producer point id) */
} wb_graph;

/* Build the topology.  drop_t < 0: drop nothing; otherwise drop the
 * dependency of point (drop_t, drop_i) on (drop_t-1, drop_j), or on its first
 * input when drop_j < 0.  Returns 0, or -1 with a message in err. */
int wb_graph_build(wb_graph *g, const wb_shape *s, int drop_t, int drop_i, int drop_j,
                   char *err, size_t errn);
void wb_graph_free(wb_graph *g);

/* ------------------------------------------------------------------------ */
/* Kernels (kernel.c)                                                        */
/* ------------------------------------------------------------------------ */

typedef enum wb_kernel_kind {
    WB_K_EMPTY,
    WB_K_BUSY_WAIT,
    WB_K_COMPUTE_BOUND,
    WB_K_MEMORY_BOUND,
    WB_K_LOAD_IMBALANCE,
    WB_KERNEL_COUNT
} wb_kernel_kind;

const char *wb_kernel_name(wb_kernel_kind k);
int wb_kernel_parse(const char *s, wb_kernel_kind *out);

/* Per-worker scratch for memory_bound: its own buffer and cursor, padded so
 * that two workers never share a cache line. */
typedef struct wb_scratch {
    unsigned char *buf;
    size_t lines;  /* 64-byte lines in buf */
    size_t pos;    /* next line to touch */
    char pad[64 - 3 * sizeof(size_t)];
} wb_scratch;

typedef struct wb_kernel {
    wb_kernel_kind kind;
    uint64_t iterations; /* length: loop iterations (busy_wait/load_imbalance/compute_bound), 64-byte lines (memory_bound) */
    double imbalance;    /* load_imbalance: a task runs iterations * f, f uniform in [1-imb/2, 1+imb/2) */
    size_t scratch_bytes;
} wb_kernel;

/* Run the kernel for `iterations` units.  Returns a value the caller folds
 * into nothing but a volatile sink (so the compiler cannot drop the work). */
uint64_t wb_kernel_exec(wb_kernel_kind kind, uint64_t iterations, wb_scratch *scr);
/* FLOPs / bytes one unit of the kernel does (0 where not meaningful). */
double wb_kernel_flops_per_unit(wb_kernel_kind kind);
double wb_kernel_bytes_per_unit(wb_kernel_kind kind);

/* Units a task runs: kernel length, scaled for load_imbalance by a
 * deterministic factor of (graph, point). */
uint64_t wb_task_units(const wb_kernel *k, uint32_t graph, uint32_t point);
/* The factor itself (1.0 except for load_imbalance). */
double wb_task_factor(const wb_kernel *k, uint32_t graph, uint32_t point);

int wb_scratch_init(wb_scratch *s, size_t bytes);
void wb_scratch_free(wb_scratch *s);

/* ------------------------------------------------------------------------ */
/* A benchmark run (run.c)                                                   */
/* ------------------------------------------------------------------------ */

typedef struct wb_run {
    wb_graph graph;
    uint32_t ngraphs;
    unsigned workers;
    wb_kernel kernel;
    size_t output_bytes;  /* bytes each task writes (>= 16) */
    size_t slot_stride;   /* output_bytes rounded up to a cache line */
    bool validate;
    unsigned char **slots; /* [ngraphs] -> npoints * slot_stride bytes */
    uint64_t **ref;        /* [ngraphs][npoints]: the value each point must hold */
    wb_scratch *scratch;   /* [workers] */
    uint64_t salt;         /* changes every execution: stale outputs never pass */
    uint64_t tasks;        /* ngraphs * npoints */
    /* Validation results of the current execution. */
    _Atomic uint64_t mismatches;
    _Atomic int first_claimed;
    char first_msg[256];
    _Atomic uint64_t bad_worker; /* worker index outside 0..workers-1 */
} wb_run;

int wb_run_init(wb_run *r, const wb_shape *s, uint32_t ngraphs, unsigned workers,
                const wb_kernel *k, size_t output_bytes, bool validate, int drop_t, int drop_i,
                int drop_j, char *err, size_t errn);
void wb_run_free(wb_run *r);
/* Prepare a new execution (new salt, cleared error state). */
void wb_run_begin(wb_run *r);
/* After an execution: check every output (when validating).  Returns the
 * number of mismatches found during and after the execution. */
uint64_t wb_run_check(wb_run *r);

/* The body every system runs for point p of graph g, on worker `worker`. */
void wb_point(wb_run *r, uint32_t g, uint32_t p, unsigned worker);

/* ------------------------------------------------------------------------ */
/* Systems (sys_*.c)                                                         */
/* ------------------------------------------------------------------------ */

typedef struct wb_system {
    const char *name;
    const char *what; /* one line: how it orders the graph */
    /* NULL when usable; otherwise why not ("not built: libstarpu-dev missing"). */
    const char *(*missing)(void);
    /* Start the system's threads for this run.  Returns 0 or -1 (msg in err). */
    int (*init)(wb_run *r, void **state, char *err, size_t errn);
    /* Execute every point of every graph once, returning when all finished.
     * Returns 0 or -1 (msg in err). */
    int (*exec)(void *state, wb_run *r, char *err, size_t errn);
    void (*fini)(void *state);
    /* Optional: stop / restart the system's idle threads around a baseline
     * measurement, for a system whose idle workers never stop polling. */
    void (*pause)(void *state);
    void (*resume)(void *state);
    /* Dependencies are enforced per edge (1) or by a barrier per step (0):
     * a dropped dependency can only be caught in the former. */
    int edge_ordered;
} wb_system;

extern const wb_system wb_sys_weft;
extern const wb_system wb_sys_weft_root;
extern const wb_system wb_sys_openmp;
extern const wb_system wb_sys_starpu;
extern const wb_system wb_sys_bsp;
extern const wb_system wb_sys_spin;

/* ------------------------------------------------------------------------ */
/* Utilities (util.c)                                                        */
/* ------------------------------------------------------------------------ */

double wb_now(void);         /* monotonic seconds */
double wb_cpu_time(void);    /* process CPU seconds, all threads */
uint64_t wb_mix64(uint64_t x);
double wb_median(double *v, size_t n); /* sorts v */
void wb_cpu_relax(void);
/* Results of kernels end here, so the compiler cannot drop the work. */
extern volatile uint64_t wb_sink;

#endif /* WB_H */
