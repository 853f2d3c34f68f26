/* Real CUDA kernels for test_cuda.c (compiled when CMake finds nvcc; the
 * test itself is C and sees only these functions). */
#include <cuda_runtime.h>
#include <stddef.h>

__global__ void add_kernel(float *p, size_t n, float v)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] += v;
}

__global__ void spin_kernel(long long cycles)
{
    long long t0 = clock64();
    while (clock64() - t0 < cycles)
        ;
}

/* p[i] += v for i < n, queued on stream; 0, or -1 if the launch failed. */
extern "C" int weft_test_cuda_add(void *stream, float *p, size_t n, float v)
{
    unsigned blocks = (unsigned)((n + 255) / 256);
    if (blocks)
        add_kernel<<<blocks, 256, 0, (cudaStream_t)stream>>>(p, n, v);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

/* A kernel that keeps the GPU busy for about `cycles` clock cycles. */
extern "C" int weft_test_cuda_spin(void *stream, long long cycles)
{
    spin_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(cycles);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
