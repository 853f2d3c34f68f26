/* A kernel call (call.h) on a CUDA device: its border job's unpack and
 * reflection, then the kernel's launches (the whole kernel, or a split
 * part's ranges), queued on a stream with kernels.cu's functions.  The C
 * driver's bodies on CUDA chunks run it (run_weft.c's job_body), and the
 * Python driver's call it through ctypes with the task's device pointers
 * (clover_cu_bound_run).  Part of the CUDA kernel library (call_cuda.c,
 * beside kernels.cu; kernels_cuda.h stays C++-clean for nvcc, call.h is
 * not). */
#ifndef CLOVER_CALL_CUDA_H
#define CLOVER_CALL_CUDA_H
#include "call.h"

/* Queue the call on stream (a cudaStream_t; NULL: the default stream)
 * of the current device.  Returns 0, a cudaError_t value (printed, naming
 * the kernel), or -1 for an unknown kernel.  The call is counted in its
 * profile; its time is the device's, not counted.  Never waits for the
 * device. */
int clover_cu_call_run(const clover_call *c, void *stream);
/* Bind a copy of b's call (clover_call_bind, as clover_call_bound_run) and
 * queue it with clover_cu_call_run. */
int clover_cu_bound_run(const void *b, void *stream);
#endif
