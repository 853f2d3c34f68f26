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

/* One stencil step over a tile's interior (test_cuda's tiles): d(r, c) =
 * 3 s(r, c) + the four neighbours inside the rows x cols array + salt, in
 * uint32; s and d point at the tile's span (row0, col0), sp and dp its row
 * pitches in bytes on the device. */
__global__ void step_kernel(const unsigned *s, size_t sp, unsigned *d, size_t dp, size_t row0, size_t col0,
                            size_t in_row0, size_t in_col0, size_t in_rows, size_t in_cols, size_t rows,
                            size_t cols, unsigned salt)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= in_rows * in_cols)
        return;
    size_t r = in_row0 + i / in_cols, c = in_col0 + i % in_cols, lr = r - row0, lc = c - col0;
#define AT(p, pitch, rr, cc) (*(unsigned *)((char *)(p) + (rr) * (pitch) + (cc) * sizeof(unsigned)))
    unsigned v = 3u * AT(s, sp, lr, lc) + salt;
    if (r > 0)
        v += AT(s, sp, lr - 1, lc);
    if (r + 1 < rows)
        v += AT(s, sp, lr + 1, lc);
    if (c > 0)
        v += AT(s, sp, lr, lc - 1);
    if (c + 1 < cols)
        v += AT(s, sp, lr, lc + 1);
    AT(d, dp, lr, lc) = v;
#undef AT
}

extern "C" int weft_test_cuda_step(void *stream, const unsigned *s, size_t sp, unsigned *d, size_t dp, size_t row0,
                                   size_t col0, size_t in_row0, size_t in_col0, size_t in_rows, size_t in_cols,
                                   size_t rows, size_t cols, unsigned salt)
{
    size_t n = in_rows * in_cols;
    unsigned blocks = (unsigned)((n + 255) / 256);
    if (blocks)
        step_kernel<<<blocks, 256, 0, (cudaStream_t)stream>>>(s, sp, d, dp, row0, col0, in_row0, in_col0, in_rows,
                                                              in_cols, rows, cols, salt);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
