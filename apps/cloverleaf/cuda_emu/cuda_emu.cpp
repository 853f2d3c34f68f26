/* The host emulation of CUDA (cuda_runtime_api.h, cuda_runtime.h): device
 * memory, streams, launches. */
#include "cuda_runtime.h"

#include <atomic>
#include <map>
#include <mutex>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <vector>

/* Under AddressSanitizer the fibers tell it each switch of stacks
 * (otherwise it takes a fiber's stack for a wild one). */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define EMU_SWITCH_START(save, bottom, size) __sanitizer_start_switch_fiber(save, bottom, size)
#define EMU_SWITCH_FINISH(save, bottom, size) __sanitizer_finish_switch_fiber(save, bottom, size)
#else
#define EMU_SWITCH_START(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#define EMU_SWITCH_FINISH(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#endif

namespace clover_emu {

thread_local Index idx;

namespace {

/* ---- device memory: cudaMalloc'd blocks, by address ---------------------- */

std::mutex mem_lock; /* protects blocks and live */
std::map<uintptr_t, size_t> blocks; /* start -> bytes */
size_t live;

/* Whether [p, p + n) lies within one live block. */
std::atomic<int> any_memory{0};

bool on_device(const void *p, size_t n)
{
    if (any_memory.load(std::memory_order_relaxed))
        return p != nullptr;
    std::lock_guard<std::mutex> g(mem_lock);
    const uintptr_t a = (uintptr_t)p;
    auto it = blocks.upper_bound(a);
    if (it == blocks.begin())
        return false;
    --it;
    return a >= it->first && a - it->first <= it->second && n <= it->second - (a - it->first);
}

/* ---- launches ---------------------------------------------------------- */

std::atomic<unsigned long long> launches{0};
std::atomic<int> reverse_order{0};
thread_local cudaError_t last_error = cudaSuccess;

constexpr size_t FIBER_STACK = 128 * 1024;

/* One OS thread's cooperative block in flight, and its fibers' stacks
 * (kept for the next launch; unmapped when the thread ends). */
struct Block {
    ucontext_t sched;
    std::vector<ucontext_t> ctx;
    std::vector<char> done;
    std::vector<void *> stacks;
    Body body = nullptr;
    void *arg = nullptr;
    int cur = -1;
    bool active = false;
    const void *sched_bottom = nullptr; /* the scheduler's stack (for the sanitizer's switches) */
    size_t sched_size = 0;
    ~Block()
    {
        for (void *s : stacks)
            munmap(s, FIBER_STACK);
    }
};
thread_local Block blk;

void set_thread(unsigned t, const dim3 &b)
{
    idx.thread.x = t % b.x;
    idx.thread.y = t / b.x % b.y;
    idx.thread.z = t / (b.x * b.y);
}

void fiber_main()
{
    EMU_SWITCH_FINISH(nullptr, &blk.sched_bottom, &blk.sched_size);
    blk.body(blk.arg);
    blk.done[(size_t)blk.cur] = 1;
    /* returning resumes blk.sched (uc_link); this fiber's stack is done with */
    EMU_SWITCH_START(nullptr, blk.sched_bottom, blk.sched_size);
}

/* One block's threads as fibers, round by round: in each round every
 * live fiber runs to its next __syncthreads or to its end.  Returns
 * false when a barrier was met by some threads while others had ended. */
bool run_cooperative(unsigned n, const dim3 &b, bool rev)
{
    while (blk.stacks.size() < n) {
        void *s = mmap(nullptr, FIBER_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                       -1, 0);
        if (s == MAP_FAILED) {
            fprintf(stderr, "cuda emulation: no memory for a block's %u fibers\n", n);
            abort();
        }
        blk.stacks.push_back(s);
    }
    blk.ctx.resize(n);
    blk.done.assign(n, 0);
    for (unsigned t = 0; t < n; t++) {
        ucontext_t &c = blk.ctx[t];
        getcontext(&c);
        c.uc_stack.ss_sp = blk.stacks[t];
        c.uc_stack.ss_size = FIBER_STACK;
        c.uc_link = &blk.sched;
        makecontext(&c, fiber_main, 0);
    }
    blk.active = true;
    bool ok = true;
    for (;;) {
        unsigned waiting = 0, ended = 0;
        for (unsigned i = 0; i < n; i++) {
            const unsigned t = rev ? n - 1 - i : i;
            if (blk.done[t])
                continue;
            blk.cur = (int)t;
            set_thread(t, b);
            void *fake = nullptr;
            EMU_SWITCH_START(&fake, blk.stacks[t], FIBER_STACK);
            swapcontext(&blk.sched, &blk.ctx[t]);
            EMU_SWITCH_FINISH(fake, nullptr, nullptr);
            if (blk.done[t])
                ended++;
            else
                waiting++;
        }
        if (waiting == 0)
            break;
        if (ended > 0) { /* the waiting fibers are dropped where they stand */
            ok = false;
            break;
        }
    }
    blk.active = false;
    blk.cur = -1;
    return ok;
}

} // namespace

void syncthreads()
{
    if (!blk.active) {
        fprintf(stderr, "cuda emulation: __syncthreads in a kernel launched with CLOVER_LAUNCH "
                        "(launch it with CLOVER_LAUNCH_SYNC)\n");
        abort();
    }
    const int t = blk.cur;
    void *fake = nullptr;
    EMU_SWITCH_START(&fake, blk.sched_bottom, blk.sched_size);
    swapcontext(&blk.ctx[(size_t)t], &blk.sched);
    EMU_SWITCH_FINISH(fake, &blk.sched_bottom, &blk.sched_size);
    /* resumed by the next round: the scheduler has set idx again */
}

void launch(dim3 grid, dim3 block, cudaStream_t, bool cooperative, Body body, void *arg)
{
    const unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535
        || block.x == 0 || block.y == 0 || block.z == 0 || block.x > 1024 || block.y > 1024 || block.z > 64
        || threads > 1024) {
        last_error = cudaErrorInvalidConfiguration;
        return;
    }
    if (blk.active) {
        fprintf(stderr, "cuda emulation: a launch from inside a kernel\n");
        abort();
    }
    launches.fetch_add(1, std::memory_order_relaxed);
    const bool rev = reverse_order.load(std::memory_order_relaxed) != 0;
    const unsigned long long nblocks = (unsigned long long)grid.x * grid.y * grid.z;
    const unsigned n = (unsigned)threads;
    idx.block_dim = block;
    idx.grid_dim = grid;
    for (unsigned long long i = 0; i < nblocks; i++) {
        const unsigned long long bi = rev ? nblocks - 1 - i : i;
        idx.block.x = (unsigned)(bi % grid.x);
        idx.block.y = (unsigned)(bi / grid.x % grid.y);
        idx.block.z = (unsigned)(bi / ((unsigned long long)grid.x * grid.y));
        if (cooperative) {
            blk.body = body;
            blk.arg = arg;
            if (!run_cooperative(n, block, rev)) {
                fprintf(stderr, "cuda emulation: block (%u, %u, %u): __syncthreads reached by some threads "
                                "after others had returned\n",
                        idx.block.x, idx.block.y, idx.block.z);
                last_error = cudaErrorLaunchFailure;
                return;
            }
            continue;
        }
        for (unsigned j = 0; j < n; j++) {
            set_thread(rev ? n - 1 - j : j, block);
            body(arg);
        }
    }
}

} // namespace clover_emu

using namespace clover_emu;

extern "C" {

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    if (!p)
        return cudaErrorInvalidValue;
    const size_t rounded = (bytes + 255) / 256 * 256;
    void *m = aligned_alloc(256, rounded ? rounded : 256);
    if (!m) {
        *p = nullptr;
        return cudaErrorMemoryAllocation;
    }
    memset(m, 0xff, rounded ? rounded : 256); /* cudaMalloc does not clear: NaNs where nothing was written */
    {
        std::lock_guard<std::mutex> g(mem_lock);
        blocks[(uintptr_t)m] = bytes;
        live += bytes;
    }
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    if (!p)
        return cudaSuccess;
    {
        std::lock_guard<std::mutex> g(mem_lock);
        auto it = blocks.find((uintptr_t)p);
        if (it == blocks.end())
            return cudaErrorInvalidValue;
        live -= it->second;
        blocks.erase(it);
    }
    free(p);
    return cudaSuccess;
}

static bool sides_ok(void *dst, size_t dn, const void *src, size_t sn, cudaMemcpyKind kind)
{
    switch (kind) {
    case cudaMemcpyHostToHost:
    case cudaMemcpyDefault:
        return true;
    case cudaMemcpyHostToDevice:
        return on_device(dst, dn);
    case cudaMemcpyDeviceToHost:
        return on_device(src, sn);
    case cudaMemcpyDeviceToDevice:
        return on_device(dst, dn) && on_device(src, sn);
    }
    return false;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t)
{
    if (bytes == 0)
        return cudaSuccess;
    if (!dst || !src || !sides_ok(dst, bytes, src, bytes, kind))
        return cudaErrorInvalidValue;
    memmove(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t)
{
    if (width == 0 || height == 0)
        return cudaSuccess;
    if (!dst || !src || width > dpitch || width > spitch)
        return cudaErrorInvalidValue;
    const size_t dn = dpitch * (height - 1) + width, sn = spitch * (height - 1) + width;
    if (!sides_ok(dst, dn, src, sn, kind))
        return cudaErrorInvalidValue;
    for (size_t r = 0; r < height; r++)
        memmove((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t)
{
    if (bytes == 0)
        return cudaSuccess;
    if (!p || !on_device(p, bytes))
        return cudaErrorInvalidValue;
    memset(p, value, bytes);
    return cudaSuccess;
}

struct clover_emu_stream {
    unsigned flags;
};

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    if (!s)
        return cudaErrorInvalidValue;
    *s = new (std::nothrow) clover_emu_stream{flags};
    return *s ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    delete s;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }

/* As many devices as a caller names (all of them this host). */
cudaError_t cudaSetDevice(int ordinal) { return ordinal >= 0 ? cudaSuccess : cudaErrorInvalidDevice; }

cudaError_t cudaGetLastError(void)
{
    const cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess:
        return "no error";
    case cudaErrorInvalidValue:
        return "invalid argument";
    case cudaErrorMemoryAllocation:
        return "out of memory";
    case cudaErrorInvalidConfiguration:
        return "invalid configuration argument";
    case cudaErrorInvalidDevice:
        return "invalid device ordinal";
    case cudaErrorLaunchFailure:
        return "unspecified launch failure";
    }
    return "unknown error";
}

size_t clover_emu_live_bytes(void)
{
    std::lock_guard<std::mutex> g(mem_lock);
    return live;
}

unsigned long long clover_emu_launches(void) { return launches.load(); }

void clover_emu_set_reverse(int reverse) { reverse_order.store(reverse != 0); }

void clover_emu_set_any_memory(int any) { any_memory.store(any != 0); }

} // extern "C"
