/* The host emulation of CUDA (cuda_runtime_api.h says what it is for):
 * the kernel language that kernels.cu uses, in C++.
 *
 * A kernel is an ordinary function; a launch (kernels.cu's CLOVER_LAUNCH
 * and CLOVER_LAUNCH_SYNC, which are <<<...>>> under nvcc) calls it once
 * per thread of every block, on the calling thread, before it returns.
 * threadIdx, blockIdx, blockDim and gridDim are the calling OS thread's
 * (each launch sets them before each call).  A kernel that calls
 * __syncthreads must be launched with CLOVER_LAUNCH_SYNC: then each thread
 * of a block runs as a fiber of its own (ucontext), every fiber runs to
 * its next barrier before any goes past it, and __shared__ variables are
 * one per OS thread (static thread_local: a block runs to its end before
 * the next starts).  A barrier that some threads of a block reach while
 * others have returned is an error (cudaErrorLaunchFailure, and a line on
 * stderr); __syncthreads in a launch that is not CLOVER_LAUNCH_SYNC aborts
 * with a message.  clover_emu_set_reverse(1) runs the blocks, and the
 * threads of a block, in the reverse order: a kernel whose result depends
 * on the order of its threads gives two results. */
#ifndef CLOVER_CUDA_EMU_RUNTIME_H
#define CLOVER_CUDA_EMU_RUNTIME_H

#include "cuda_runtime_api.h"

#ifdef __cplusplus

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static thread_local

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 {
    unsigned x, y, z;
};

namespace clover_emu {

struct Index {
    uint3 thread, block;
    dim3 block_dim, grid_dim;
};
extern thread_local Index idx;

using Body = void (*)(void *ctx);
/* Run body(ctx) once per thread of grid x block (cooperative: as fibers
 * that meet at __syncthreads); a bad configuration sets the calling
 * thread's last error instead. */
void launch(dim3 grid, dim3 block, cudaStream_t s, bool cooperative, Body body, void *ctx);
void syncthreads();

template <class K>
struct Launch {
    K kernel;
    dim3 grid, block;
    cudaStream_t stream;
    bool cooperative;
    template <class... A>
    void operator()(const A &...a) const
    {
        /* each thread gets its own copies of the arguments, as on a GPU */
        auto call = [&]() { kernel(a...); };
        using C = decltype(call);
        launch(grid, block, stream, cooperative, [](void *c) { (*static_cast<C *>(c))(); }, &call);
    }
};

template <class K>
Launch<K> make_launch(K kernel, dim3 grid, dim3 block, cudaStream_t s, bool cooperative)
{
    return Launch<K>{kernel, grid, block, s, cooperative};
}

} // namespace clover_emu

#define threadIdx (::clover_emu::idx.thread)
#define blockIdx (::clover_emu::idx.block)
#define blockDim (::clover_emu::idx.block_dim)
#define gridDim (::clover_emu::idx.grid_dim)

inline void __syncthreads() { ::clover_emu::syncthreads(); }

/* One OS thread runs a launch: a plain read-modify-write is atomic here. */
inline int atomicMax(int *a, int v)
{
    const int old = *a;
    if (v > old)
        *a = v;
    return old;
}

#define CLOVER_LAUNCH(k, g, b, s) ::clover_emu::make_launch(k, dim3(g), dim3(b), s, false)
#define CLOVER_LAUNCH_SYNC(k, g, b, s) ::clover_emu::make_launch(k, dim3(g), dim3(b), s, true)

#endif /* __cplusplus */

#endif
