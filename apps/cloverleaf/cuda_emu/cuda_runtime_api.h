/* A host emulation of the part of the CUDA runtime API that kernels.cu
 * and plain_cuda.c use, so that both run here, where no GPU is: CUDA's C
 * types and functions over host memory (cuda_emu.cpp).  Built into the
 * tests only (test_clover_cuemu, test_clover_cuvgpu, and the library
 * python/tests/test_cloverleaf.py builds), never into a program that runs
 * on a GPU: its include folder comes first there, so <cuda_runtime_api.h>
 * and <cuda_runtime.h> resolve to these files.
 *
 * What it emulates: device memory is host memory (cudaMalloc'd blocks are
 * recorded, and a copy or fill that names a device pointer outside them
 * fails with cudaErrorInvalidValue, as one that names host memory would
 * on a GPU); a stream is a token and every operation on it is done before
 * the call returns (so the emulation checks the arithmetic and the
 * indices of what is queued, never the ordering of streams); the launch
 * limits are checked (cudaErrorInvalidConfiguration).  Error values are
 * the real runtime's.  Thread safety: every function may be called from
 * any thread; a launch runs on the calling thread. */
#ifndef CLOVER_CUDA_EMU_RUNTIME_API_H
#define CLOVER_CUDA_EMU_RUNTIME_API_H

#include <stddef.h>

#define CLOVER_CUDA_EMU 1

/* Its own names at link time: a program may link the real runtime too
 * (weft's CUDA device kind links cudart_static). */
#define cudaMalloc clover_emu_cudaMalloc
#define cudaFree clover_emu_cudaFree
#define cudaMemcpyAsync clover_emu_cudaMemcpyAsync
#define cudaMemcpy2DAsync clover_emu_cudaMemcpy2DAsync
#define cudaMemsetAsync clover_emu_cudaMemsetAsync
#define cudaStreamCreateWithFlags clover_emu_cudaStreamCreateWithFlags
#define cudaStreamDestroy clover_emu_cudaStreamDestroy
#define cudaStreamSynchronize clover_emu_cudaStreamSynchronize
#define cudaSetDevice clover_emu_cudaSetDevice
#define cudaGetLastError clover_emu_cudaGetLastError
#define cudaGetErrorString clover_emu_cudaGetErrorString

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevice = 101,
    cudaErrorLaunchFailure = 719
} cudaError_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};

typedef struct clover_emu_stream *cudaStream_t;

#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01

cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                              size_t height, enum cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaSetDevice(int ordinal);
/* The calling thread's last launch error (then cleared), as CUDA's. */
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorString(cudaError_t e);

/* The emulation's own: bytes cudaMalloc'd and not freed (a test's leak
 * check), and the launches run since the program started. */
size_t clover_emu_live_bytes(void);
unsigned long long clover_emu_launches(void);
/* Run later launches' blocks, and each block's threads, last first
 * (reverse 1) or first first (0, the default); for every thread. */
void clover_emu_set_reverse(int reverse);
/* Take any non-NULL pointer for device memory (1), or only cudaMalloc'd
 * blocks (0, the default): for kernels run on memory the emulation did
 * not allocate (a virtual GPU's replicas, test_clover_cuvgpu). */
void clover_emu_set_any_memory(int any);

#ifdef __cplusplus
}
#endif

#endif
