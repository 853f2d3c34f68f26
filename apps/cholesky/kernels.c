/*
 * kernels.c — the tile kernels on the CPU (CBLAS and LAPACKE, from
 * OpenBLAS), their flop counts and the modelled GPU's times.
 *
 * Tiles are row-major.  CBLAS takes row-major operands as they are; the
 * LAPACKE call factors the tile in place through the column-major view of
 * the same memory: a row-major lower factor L is, read column-major, the
 * upper factor U = L^T of the same (symmetric) matrix, so dpotrf('U') on
 * the column-major view writes L where the row-major lower triangle is,
 * with no transposed copy (LAPACKE's row-major path would make one).
 */
#include <cblas.h>
#include <lapacke.h>

#include "chol.h"

const char *chol_kernel_name(int kernel)
{
    static const char *const names[CHOL_NKERNELS] = {"potrf", "trsm", "syrk", "gemm"};
    return kernel >= 0 && kernel < CHOL_NKERNELS ? names[kernel] : "?";
}

int chol_call_cpu(const chol_call *c)
{
    switch (c->kernel) {
    case CHOL_POTRF:
        return (int)LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'U', c->m, c->c, c->ldc);
    case CHOL_TRSM: /* C = C L^-T: solve X L^T = C from the right */
        cblas_dtrsm(CblasRowMajor, CblasRight, CblasLower, CblasTrans, CblasNonUnit, c->m, c->n, 1.0, c->a,
                    c->lda, c->c, c->ldc);
        return 0;
    case CHOL_SYRK: /* C -= A A^T, lower triangle */
        cblas_dsyrk(CblasRowMajor, CblasLower, CblasNoTrans, c->m, c->k, -1.0, c->a, c->lda, 1.0, c->c, c->ldc);
        return 0;
    case CHOL_GEMM: /* C -= A B^T */
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, c->m, c->n, c->k, -1.0, c->a, c->lda, c->b, c->ldb,
                    1.0, c->c, c->ldc);
        return 0;
    default:
        return -1;
    }
}

double chol_call_flops(const chol_call *c)
{
    double m = c->m, n = c->n, k = c->k;
    switch (c->kernel) {
    case CHOL_POTRF:
        return m * m * m / 3.0;
    case CHOL_TRSM:
        return m * n * n;
    case CHOL_SYRK:
        return m * m * k;
    case CHOL_GEMM:
        return 2.0 * m * n * k;
    default:
        return 0.0;
    }
}

void chol_blas_threads(int n)
{
    openblas_set_num_threads(n);
}

void chol_gpu_model_default(chol_gpu_model *m)
{
    /* GEMM at 400 GF/s: about ten single-threaded OpenBLAS cores; the
     * panel kernels less efficient, as on a real GPU at tile sizes. */
    m->gflops = 400.0;
    m->eff[CHOL_POTRF] = 0.25;
    m->eff[CHOL_TRSM] = 0.6;
    m->eff[CHOL_SYRK] = 0.8;
    m->eff[CHOL_GEMM] = 1.0;
}

void chol_cpu_model_default(chol_gpu_model *m)
{
    m->gflops = 40.0;
    m->eff[CHOL_POTRF] = 0.6;
    m->eff[CHOL_TRSM] = 0.8;
    m->eff[CHOL_SYRK] = 0.9;
    m->eff[CHOL_GEMM] = 1.0;
}

uint64_t chol_gpu_model_ns(const chol_gpu_model *m, const chol_call *call)
{
    double rate = m->gflops * m->eff[call->kernel]; /* flops per ns */
    if (!(rate > 0))
        return 0;
    return (uint64_t)(chol_call_flops(call) / rate);
}

int chol_lapack(double *a, size_t n)
{
    return (int)LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'U', (lapack_int)n, a, (lapack_int)n);
}
