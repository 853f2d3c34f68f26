/*
 * chol_cuda.h — the CUDA variant of the tile kernels (cuda.c): cuBLAS and
 * cuSOLVER on the task's stream.  Built when the CUDA toolkit is found
 * (CHOL_HAVE_CUDA); otherwise these are stubs and no task runs on CUDA.
 */
#ifndef CHOL_CUDA_H
#define CHOL_CUDA_H

#include "chol.h"

typedef struct chol_cuda chol_cuda;

#ifdef CHOL_HAVE_CUDA
/* Per-(worker, device) cuBLAS / cuSOLVER handles for rt's CUDA devices,
 * made when first used.  *out is NULL when rt has no CUDA device.
 * Returns 0 or WEFT_ENOMEM. */
int chol_cuda_new(weft_runtime *rt, chol_cuda **out);
/* Destroy the handles and workspaces; NULL does nothing. */
void chol_cuda_free(chol_cuda *c);
/* Queue call, whose pointers are device memory of the task's first GPU (a
 * CUDA device), on the task's stream.  Returns 0, or WEFT_EDEVICE with a
 * message on stderr. */
int chol_cuda_call(chol_cuda *c, weft_ctx *ctx, const chol_call *call);
#else
static inline int chol_cuda_new(weft_runtime *rt, chol_cuda **out)
{
    (void)rt;
    *out = NULL;
    return 0;
}
static inline void chol_cuda_free(chol_cuda *c)
{
    (void)c;
}
static inline int chol_cuda_call(chol_cuda *c, weft_ctx *ctx, const chol_call *call)
{
    (void)c;
    (void)ctx;
    (void)call;
    return WEFT_EDEVICE; /* no CUDA device without CUDA */
}
#endif

#endif
