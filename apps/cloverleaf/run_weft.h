/* The C driver: CloverLeaf's time-step loop over Weft's C API.
 *
 * The mesh is split into chunks (clover_decompose), one per GPU when the
 * runtime has GPUs, else `chunks` (default: one per worker) on the CPU.
 * Every field of every chunk is a data handle; each kernel on each chunk
 * is a task on the chunk's device naming the fields it reads and writes,
 * so Weft orders the chunks' kernels and keeps each chunk's fields on its
 * device.  Halo updates between chunks on GPUs are communication tasks
 * (weft_comm_exchange over a communicator of the chunks' GPUs); between
 * chunks on the CPU, one host task copies the strips.  The updates before
 * viscosity and accelerate are staged (into arrays beside the fields) and
 * those kernels split per chunk into an interior task, which runs while
 * the ghosts move, and a border task (run_weft.c, "staged halo updates").  The time-step
 * minimum, the PdV check and the field summary are reductions
 * (WEFT_REDUCE) read by one small host task per step. */
#ifndef CLOVER_RUN_WEFT_H
#define CLOVER_RUN_WEFT_H

#include "clover.h"

typedef struct clover_weft_opts {
    const char *devices;         /* Weft's device list ("cpu", "cpu,vgpu:4"); NULL: the default */
    int chunks;                  /* chunks on the CPU when there is no GPU; 0: one per worker */
    int cpu_chunks;              /* with GPUs, this many chunks on the CPU beside one per GPU (the
                                    halo updates then all on the host); 0: none.  One rank only */
    unsigned workers;            /* 0: Weft's default */
    const char *trace_path;      /* Chrome trace, or NULL */
    const char *png_path;        /* the final density picture, or NULL (across ranks: the whole
                                    mesh's, gathered, written by rank 0) */
    FILE *out;                   /* summary table, verification, profile; NULL: silent */
    double *density;             /* NULL, or x_cells * y_cells doubles: the final density0 (across
                                    ranks every rank gets the whole mesh's, gathered) */
    double *energy;              /* the same for energy0 */
    int mpi;                     /* 1: the mesh over the ranks of MPI_COMM_WORLD (MPI initialised
                                    with MPI_THREAD_MULTIPLE, e.g. by weft_mpi_init); each rank
                                    holds as many chunks as it would alone */
    int no_exchange;             /* benchmarks only: skip the exchanges between chunks (the
                                    boundary's reflection stays), to time the rest alone; the
                                    results are then wrong */
    int split;                   /* the halo updates before viscosity and accelerate overlapped with
                                    those kernels' interiors (split into interior and border tasks)
                                    or not (the updates write the ghosts, the kernels run whole):
                                    CLOVER_SPLIT_AUTO (0) where the chunks are on GPUs, whose
                                    exchanges run beside the kernels (on the CPU the workers copy
                                    the blocks themselves and the split only adds tasks: measured
                                    1-8% slower there), CLOVER_SPLIT_ON, CLOVER_SPLIT_OFF.  Never
                                    with no_exchange or cpu_chunks */
    int split_advection;         /* 1 (with the split on): the advection kernels split as well,
                                    out of place over their updates (on CUDA GPUs kernels.cu's
                                    parts, tested here on the host emulation only).  Off by default:
                                    on 4 virtual GPUs on 2 cores it measured about 10% slower
                                    (docs/performance.md) */
} clover_weft_opts;

enum { CLOVER_SPLIT_AUTO = 0, CLOVER_SPLIT_ON = 1, CLOVER_SPLIT_OFF = 2 };

typedef struct clover_weft_result {
    double sums0[CS_N];          /* the field summary at step 0 */
    double sums[CS_N];           /* the last field summary */
    int steps;
    int summaries;               /* field summaries within the timed loop */
    double time;                 /* simulated */
    double wall_s;               /* the time-step loop's wall time */
    int nchunks, chunks_x, chunks_y;
    int verified;                /* clover_verify's result */
    int rank, nranks;            /* this rank, of how many (1 without MPI) */
} clover_weft_result;

/* Run the deck.  Returns 0, or -1 with a message on stderr (the runtime,
 * a kernel's error check, dt below dtmin, a failed task). */
int clover_weft_run(const clover_deck *d, const clover_weft_opts *o, clover_weft_result *res);

#endif
