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
/* Queue b's call (clover_bound_get, clover_cu_call_run): -1 for a bad b. */
int clover_cu_bound_run(const void *b, void *stream);
/* clover_cu_bound_run on the default stream, as int (*)(void *) for
 * ctx.queue_native: only for the host emulation of CUDA (cuda_emu/), where
 * a launch runs when it is made, so that a virtual GPU's stream thread,
 * standing in for a CUDA device, makes them in its stream's order (the
 * Python driver's tests; run_weft.c's CLOVER_CUDA_ON_VGPU does the same).
 * On a GPU a host function may not call CUDA. */
int clover_cu_bound_run_now(void *b);
#endif
