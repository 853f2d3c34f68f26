/*
 * cuda.c — the CUDA variant of the tile kernels: cuBLAS (TRSM, SYRK, GEMM)
 * and cuSOLVER (POTRF) queued on the task's stream.  Compiled when the
 * CUDA toolkit is found; NOT RUN on the machines this was written on (no
 * GPU there): scripts/gpu-check.sh is where it would be exercised.
 *
 * cuBLAS is column-major; the tiles are row-major.  A row-major m x n tile
 * is, read column-major, its n x m transpose, and the row-major lower
 * triangle the column-major upper one, so each call below is the
 * transposed form of kernels.c's:
 *   POTRF  dpotrf('U') on the tile                       (as kernels.c)
 *   TRSM   C^T = L^-1 C^T:  trsm(left, upper, T) with L^T's view
 *   SYRK   C  -= A A^T:     syrk(upper, T) on A^T's view
 *   GEMM   C^T -= B A^T:    gemm(T, N, n, m, k) on B^T's and A^T's views
 * POTRF's info stays on the device (reading it would wait for the
 * stream): a tile that is not positive definite shows in the check.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>
#include <stdio.h>
#include <stdlib.h>

#include "chol_cuda.h"

typedef struct cuda_slot {
    cublasHandle_t blas;
    cusolverDnHandle_t solver;
    double *work;   /* POTRF's workspace (device memory) */
    int lwork;      /* its size, in doubles */
    int *info;      /* POTRF's info (device memory) */
    int ready;
} cuda_slot;

struct chol_cuda {
    unsigned workers, ndev;
    int ordinal[65];     /* CUDA ordinal per runtime device, -1 if not CUDA */
    cuda_slot *slot;     /* workers x ndev */
};

int chol_cuda_new(weft_runtime *rt, chol_cuda **out)
{
    *out = NULL;
    unsigned ndev = weft_device_count(rt), ncuda = 0;
    if (ndev > 65)
        ndev = 65;
    chol_cuda *c = calloc(1, sizeof *c);
    if (!c)
        return WEFT_ENOMEM;
    for (unsigned i = 0; i < ndev; i++) {
        weft_device_info info;
        c->ordinal[i] = -1;
        if (weft_device_info_get(rt, i, &info) == 0 && info.kind == WEFT_DEVICE_CUDA) {
            c->ordinal[i] = info.ordinal;
            ncuda++;
        }
    }
    if (ncuda == 0) {
        free(c);
        return 0;
    }
    c->workers = weft_runtime_workers(rt);
    c->ndev = ndev;
    c->slot = calloc((size_t)c->workers * ndev, sizeof *c->slot);
    if (!c->slot) {
        free(c);
        return WEFT_ENOMEM;
    }
    *out = c;
    return 0;
}

void chol_cuda_free(chol_cuda *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < (size_t)c->workers * c->ndev; i++) {
        cuda_slot *s = &c->slot[i];
        if (!s->ready)
            continue;
        cudaSetDevice(c->ordinal[i % c->ndev]);
        cublasDestroy(s->blas);
        cusolverDnDestroy(s->solver);
        cudaFree(s->work);
        cudaFree(s->info);
    }
    free(c->slot);
    free(c);
}

/* The calling worker's handles for device dev, made on first use, and
 * POTRF's workspace grown to an m x m tile. */
static cuda_slot *slot_get(chol_cuda *c, unsigned worker, int dev, int potrf_m)
{
    cuda_slot *s = &c->slot[(size_t)worker * c->ndev + (unsigned)dev];
    if (!s->ready) {
        if (cublasCreate(&s->blas) != CUBLAS_STATUS_SUCCESS)
            return NULL;
        if (cusolverDnCreate(&s->solver) != CUSOLVER_STATUS_SUCCESS) {
            cublasDestroy(s->blas);
            return NULL;
        }
        if (cudaMalloc((void **)&s->info, sizeof(int)) != cudaSuccess) {
            cublasDestroy(s->blas);
            cusolverDnDestroy(s->solver);
            return NULL;
        }
        s->ready = 1;
    }
    if (potrf_m > 0) {
        int lwork = 0;
        if (cusolverDnDpotrf_bufferSize(s->solver, CUBLAS_FILL_MODE_UPPER, potrf_m, NULL, potrf_m, &lwork) !=
            CUSOLVER_STATUS_SUCCESS)
            return NULL;
        if (lwork > s->lwork) {
            cudaFree(s->work);
            s->work = NULL;
            s->lwork = 0;
            if (cudaMalloc((void **)&s->work, (size_t)lwork * sizeof(double)) != cudaSuccess)
                return NULL;
            s->lwork = lwork;
        }
    }
    return s;
}

int chol_cuda_call(chol_cuda *c, weft_ctx *ctx, const chol_call *k)
{
    int dev = weft_ctx_gpu(ctx, 0);
    if (!c || dev < 0 || c->ordinal[dev] < 0 || cudaSetDevice(c->ordinal[dev]) != cudaSuccess)
        return WEFT_EDEVICE;
    cuda_slot *s = slot_get(c, weft_ctx_worker(ctx), dev, k->kernel == CHOL_POTRF ? k->m : 0);
    if (!s) {
        fprintf(stderr, "weft-cholesky: cuBLAS / cuSOLVER set-up failed on %d\n", c->ordinal[dev]);
        return WEFT_EDEVICE;
    }
    cudaStream_t st = (cudaStream_t)weft_ctx_stream(ctx, 0);
    const double one = 1.0, minus1 = -1.0;
    int ok;
    if (k->kernel == CHOL_POTRF) {
        ok = cusolverDnSetStream(s->solver, st) == CUSOLVER_STATUS_SUCCESS &&
             cusolverDnDpotrf(s->solver, CUBLAS_FILL_MODE_UPPER, k->m, k->c, k->ldc, s->work, s->lwork,
                              s->info) == CUSOLVER_STATUS_SUCCESS;
    } else {
        cublasStatus_t b = cublasSetStream(s->blas, st);
        if (b == CUBLAS_STATUS_SUCCESS && k->kernel == CHOL_TRSM)
            b = cublasDtrsm(s->blas, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_T, CUBLAS_DIAG_NON_UNIT,
                            k->n, k->m, &one, k->a, k->lda, k->c, k->ldc);
        else if (b == CUBLAS_STATUS_SUCCESS && k->kernel == CHOL_SYRK)
            b = cublasDsyrk(s->blas, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_T, k->m, k->k, &minus1, k->a, k->lda, &one,
                            k->c, k->ldc);
        else if (b == CUBLAS_STATUS_SUCCESS)
            b = cublasDgemm(s->blas, CUBLAS_OP_T, CUBLAS_OP_N, k->n, k->m, k->k, &minus1, k->b, k->ldb, k->a,
                            k->lda, &one, k->c, k->ldc);
        ok = b == CUBLAS_STATUS_SUCCESS;
    }
    if (!ok) {
        fprintf(stderr, "weft-cholesky: %s failed on CUDA device %d\n", chol_kernel_name(k->kernel),
                c->ordinal[dev]);
        return WEFT_EDEVICE;
    }
    return 0;
}
