/* kernel.c — the task kernels of weft-bench.
 *
 * Lengths are in units (loop iterations, or 64-byte lines for memory_bound),
 * never in time: a kernel preempted by the OS does not finish early, so the
 * efficiency of a system cannot look better than the machine allows.  The
 * driver converts units to nanoseconds by timing the same kernel with no
 * runtime at all (main.c, baseline). */
#include "wb.h"

#include <stdlib.h>
#include <string.h>

static const char *const kernel_names[WB_KERNEL_COUNT] = {
    "empty", "busy_wait", "compute_bound", "memory_bound", "load_imbalance",
};

const char *wb_kernel_name(wb_kernel_kind k)
{
    return (unsigned)k < WB_KERNEL_COUNT ? kernel_names[k] : "?";
}

int wb_kernel_parse(const char *s, wb_kernel_kind *out)
{
    for (int k = 0; k < WB_KERNEL_COUNT; k++) {
        if (strcmp(s, kernel_names[k]) == 0) {
            *out = (wb_kernel_kind)k;
            return 0;
        }
    }
    return -1;
}

/* One iteration: an increment the compiler must keep (it cannot see through
 * the empty asm), about one cycle. */
static uint64_t busy_wait(uint64_t n)
{
    uint64_t k;
    for (k = 0; k < n; k++) __asm__ __volatile__("" : "+r"(k));
    return k;
}

/* One iteration: 16 independent multiply-adds (32 FLOPs). */
#define CB_LANES 16
static uint64_t compute_bound(uint64_t n)
{
    double x[CB_LANES];
    for (int j = 0; j < CB_LANES; j++) x[j] = 1.0 + j * 1e-3;
    const double a = 0.999999, b = 1e-6;
    for (uint64_t k = 0; k < n; k++) {
        for (int j = 0; j < CB_LANES; j++) x[j] = x[j] * a + b; /* no -ffast-math: kept */
    }
    double s = 0;
    for (int j = 0; j < CB_LANES; j++) s += x[j];
    uint64_t bits;
    memcpy(&bits, &s, sizeof bits);
    return bits;
}

/* One unit: read and write back one 64-byte line of the worker's scratch
 * buffer, continuing where that worker's previous task stopped, so that
 * consecutive tasks sweep the whole buffer (128 bytes of traffic). */
static uint64_t memory_bound(uint64_t n, wb_scratch *s)
{
    if (!s || !s->buf || s->lines == 0) return busy_wait(n);
    uint64_t acc = 0;
    size_t pos = s->pos;
    for (uint64_t k = 0; k < n; k++) {
        uint64_t *l = (uint64_t *)(void *)(s->buf + pos * 64);
        for (int j = 0; j < 8; j++) l[j] += 1;
        acc += l[0];
        if (++pos == s->lines) pos = 0;
    }
    s->pos = pos;
    return acc;
}

uint64_t wb_kernel_exec(wb_kernel_kind kind, uint64_t n, wb_scratch *scr)
{
    switch (kind) {
    case WB_K_EMPTY:
        return 0;
    case WB_K_BUSY_WAIT:
    case WB_K_LOAD_IMBALANCE:
        return busy_wait(n);
    case WB_K_COMPUTE_BOUND:
        return compute_bound(n);
    case WB_K_MEMORY_BOUND:
        return memory_bound(n, scr);
    default:
        return 0;
    }
}

double wb_kernel_flops_per_unit(wb_kernel_kind kind)
{
    return kind == WB_K_COMPUTE_BOUND ? 2.0 * CB_LANES : 0.0;
}

double wb_kernel_bytes_per_unit(wb_kernel_kind kind)
{
    return kind == WB_K_MEMORY_BOUND ? 128.0 : 0.0;
}

double wb_task_factor(const wb_kernel *k, uint32_t graph, uint32_t point)
{
    if (k->kind != WB_K_LOAD_IMBALANCE) return 1.0;
    uint64_t h = wb_mix64(((uint64_t)graph << 32) ^ point ^ 0x1b873593ULL);
    double u = (double)(h >> 11) * (1.0 / 9007199254740992.0); /* [0,1) */
    return 1.0 - k->imbalance / 2 + k->imbalance * u;
}

uint64_t wb_task_units(const wb_kernel *k, uint32_t graph, uint32_t point)
{
    if (k->kind != WB_K_LOAD_IMBALANCE) return k->iterations;
    double f = wb_task_factor(k, graph, point);
    double u = (double)k->iterations * f;
    return u < 0 ? 0 : (uint64_t)(u + 0.5);
}

int wb_scratch_init(wb_scratch *s, size_t bytes)
{
    memset(s, 0, sizeof *s);
    if (bytes < 64) return 0;
    size_t lines = bytes / 64;
    void *p = NULL;
    if (posix_memalign(&p, 4096, lines * 64) != 0) return -1;
    memset(p, 0, lines * 64); /* fault the pages in now, not in a timed run */
    s->buf = p;
    s->lines = lines;
    return 0;
}

void wb_scratch_free(wb_scratch *s)
{
    free(s->buf);
    memset(s, 0, sizeof *s);
}
