/*
 * chol.h — tiled Cholesky on Weft (apps/cholesky): the parts shared by the
 * C driver (main.c), the task graph (run_weft.c), the kernels (kernels.c,
 * cuda.c) and the checks (matrix.c).
 *
 * The matrix is N x N doubles, row-major, lda = N.  The factorisation is
 * lower: A = L L^T, L written over A's lower triangle (the upper one is
 * left as it was).  Tiles are weft_data_partition's: nt x nt near-equal
 * blocks, nt = ceil(N / B), so no tile is larger than B x B and the
 * diagonal tiles are square.
 */
#ifndef CHOL_H
#define CHOL_H

#include <stddef.h>
#include <stdint.h>

#include "weft.h"

/* The four kernels of right-looking tiled Cholesky, step k:
 *   POTRF  A[k][k] = chol(A[k][k])                 (lower)
 *   TRSM   A[i][k] = A[i][k] L[k][k]^-T            i > k
 *   SYRK   A[i][i] -= A[i][k] A[i][k]^T            i > k
 *   GEMM   A[i][j] -= A[i][k] A[j][k]^T            i > j > k */
enum chol_kernel { CHOL_POTRF, CHOL_TRSM, CHOL_SYRK, CHOL_GEMM, CHOL_NKERNELS };

/* "potrf", "trsm", "syrk", "gemm". */
const char *chol_kernel_name(int kernel);

/* One kernel call on tiles in row-major memory: a, b, c and their leading
 * dimensions in elements.  m, n, k as in the table of chol_kernel:
 *   POTRF  c (m x m)
 *   TRSM   a = L[k][k] (n x n), c = A[i][k] (m x n)
 *   SYRK   a = A[i][k] (m x k), c = A[i][i] (m x m)
 *   GEMM   a = A[i][k] (m x k), b = A[j][k] (n x k), c = A[i][j] (m x n) */
typedef struct chol_call {
    int kernel;
    int m, n, k;
    const double *a, *b;
    double *c;
    int lda, ldb, ldc;
} chol_call;

/* Run call on the calling thread with CBLAS / LAPACKE (single-threaded when
 * chol_blas_threads(1) was called).  Returns 0, or the LAPACK info of a
 * POTRF that failed (the tile is not positive definite). */
int chol_call_cpu(const chol_call *call);

/* Floating-point operations of call (the usual counts: POTRF m^3/3, TRSM
 * m n^2, SYRK m^2 k, GEMM 2 m n k). */
double chol_call_flops(const chol_call *call);

/* Set OpenBLAS's thread count for the calls that follow (process-wide). */
void chol_blas_threads(int n);

/* The modelled GPU: a kernel takes flops / (gflops * eff[kernel]) ns. */
typedef struct chol_gpu_model {
    double gflops;               /* the GPU's peak, GF/s */
    double eff[CHOL_NKERNELS];   /* of the peak, per kernel, in (0, 1] */
} chol_gpu_model;

/* Defaults: gflops and efficiencies that make a virtual GPU about ten times
 * one core of this kind of machine on GEMM (single-threaded OpenBLAS DGEMM
 * runs at some 30-60 GF/s on a current x86 core). */
void chol_gpu_model_default(chol_gpu_model *m);

/* Modelled time of call on a GPU, in ns. */
uint64_t chol_gpu_model_ns(const chol_gpu_model *m, const chol_call *call);

/* Fill a (n x n, row-major) with a symmetric positive definite matrix that
 * depends only on n and seed: entry (i, j) = (i, j)'s hash in [0, 1) for
 * i != j (the same for (j, i)), plus n on the diagonal (diagonally
 * dominant).  apps/cholesky/cholesky.py makes the same matrix. */
void chol_matrix_fill(double *a, size_t n, uint64_t seed);

/* The checks of a factorisation l (lower triangle of an n x n row-major
 * array) of a (the original, row-major, symmetric: its lower triangle is
 * read): *residual = ||L L^T - A||_F / ||A||_F (through DSYRK: O(n^3/3)
 * flops); if ref is not NULL, *ref_diff = ||L - ref||_F / ||ref||_F over
 * the lower triangles, ref a factor made otherwise (chol_lapack).
 * Returns 0, or WEFT_ENOMEM. */
int chol_check(const double *a, const double *l, const double *ref, size_t n, double *residual,
               double *ref_diff);

/* Factor a (n x n, row-major) in place with LAPACKE_dpotrf, as one call
 * (OpenBLAS's threads as set by chol_blas_threads).  Returns 0 or the
 * LAPACK info. */
int chol_lapack(double *a, size_t n);

/* Options of one factorisation with Weft (run_weft.c). */
typedef struct chol_opts {
    size_t n, b;             /* the matrix and its tiles */
    const char *devices;     /* weft_config.devices (NULL: the default) */
    const char *policy;      /* weft_config.policy (NULL: the default) */
    const char *trace;       /* Chrome trace path or NULL */
    unsigned workers;        /* 0: weft's default */
    chol_gpu_model model;    /* the virtual GPUs' kernels */
    int gpu_first;           /* placements: GPU before CPU (1) or CPU first (0) */
    /* Kernels modelled only (no arithmetic; the factor is not computed):
     * a CPU kernel sleeps for its time under cpu_model (per core), a
     * virtual GPU's is an empty kernel stretched to model's.  For
     * scheduling studies at sizes this machine could not compute soon. */
    int model_only;
    chol_gpu_model cpu_model;
    int bound;               /* compute the makespan's lower bound (chol_result.bound) */
} chol_opts;

/* Defaults of the modelled CPU core (model_only): 40 GF/s on GEMM, the
 * panel kernels less efficient. */
void chol_cpu_model_default(chol_gpu_model *m);

/* What a factorisation did. */
typedef struct chol_result {
    double seconds;          /* spawning the graph until it has finished */
    unsigned ndev;           /* devices of the runtime (the CPU is 0) */
    char dev_name[65][32];   /* their names */
    uint64_t tasks[CHOL_NKERNELS][65];   /* tasks per kernel per device */
    uint64_t bytes_copied;   /* weft_stats.bytes_copied */
    /* The makespan's lower bound: the runtime's (weft_runtime_bound, from
     * its models under policy "dmda"; bound 0 when it has none), or under
     * model_only the app's from the modelled kernels' times (run_weft.c
     * says why): the critical path with each task on its fastest device,
     * and the area bound (the work spread over the CPU's computing workers
     * and the GPUs at their speeds, each task split between them where
     * that is best: a linear program over two kinds of device, solved
     * exactly by bisection). */
    double bound, bound_path, bound_area;
    unsigned cpu_slots, gpus;  /* the devices the area bound spreads over */
    uint64_t model_hits, model_fits, model_calibrating, model_mispredicted;
} chol_result;

/* Factor a (opts->n x opts->n, row-major, symmetric positive definite) in
 * place with a Weft task per tile kernel on opts->devices; its lower
 * triangle becomes L.  Creates and destroys its own runtime.  Returns 0,
 * or a WEFT_E... code with a message on stderr (a failed POTRF: the matrix
 * is not positive definite). */
int chol_weft(double *a, const chol_opts *opts, chol_result *res);

/* Print res: one line per device with its tasks per kernel. */
void chol_result_print(const chol_result *res);

#endif
