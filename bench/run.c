/* run.c — the state of a benchmark run and the point body every system runs.
 *
 * Validation (on by default).  Every point owns an output slot of
 * output_bytes (padded to a cache line so that neighbours never share one):
 *   tag   = (execution salt << 32) | (point id + 1)
 *   value = a hash of the point and of its inputs' values, in input order
 *   fill  = output_bytes - 16 bytes derived from value.
 * A point first checks that each input slot holds exactly what its producer
 * writes in this execution (tag, value against a sequential reference, and
 * every fill byte), then runs the kernel, then writes its own slot.  A point
 * that ran before its producer finds a stale tag (the salt changes every
 * execution, so the previous execution's output never passes).  After the
 * execution every slot is checked again, which also catches points that never
 * ran.  A broken runtime therefore cannot look fast: the run fails. */
#include "wb.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEED 0x243f6a8885a308d3ULL

typedef struct slot_hdr {
    uint64_t tag;
    uint64_t value;
} slot_hdr;

static inline uint64_t point_seed(uint32_t g, uint32_t p)
{
    return wb_mix64(((uint64_t)g << 32) ^ p ^ SEED);
}

static inline uint64_t expected_tag(const wb_run *r, uint32_t q)
{
    return (r->salt << 32) | ((uint64_t)q + 1);
}

static inline unsigned char fill_byte(uint64_t v, size_t k)
{
    return (unsigned char)((v >> ((k & 7) * 8)) ^ (uint64_t)k);
}

static void record(wb_run *r, const char *fmt_what, uint32_t g, uint32_t p, uint32_t q,
                   const slot_hdr *s)
{
    atomic_fetch_add_explicit(&r->mismatches, 1, memory_order_relaxed);
    int expect = 0;
    if (!atomic_compare_exchange_strong(&r->first_claimed, &expect, 1)) return;
    const wb_graph *G = &r->graph;
    uint64_t tag = s->tag;
    const char *why = (tag >> 32) != r->salt ? "not written yet in this execution"
                      : (uint32_t)(tag & 0xffffffffu) != q + 1 ? "written for another point"
                                                               : "wrong contents";
    snprintf(r->first_msg, sizeof r->first_msg,
             "graph %" PRIu32 " point (t=%d,i=%d): %s (t=%d,i=%d) %s "
             "[tag %#" PRIx64 " value %#" PRIx64 ", expected tag %#" PRIx64 " value %#" PRIx64 "]",
             g, G->point_t[p], G->point_i[p], fmt_what, G->point_t[q], G->point_i[q], why, tag,
             s->value, expected_tag(r, q), r->ref[g][q]);
}

void wb_point(wb_run *r, uint32_t g, uint32_t p, unsigned worker)
{
    const wb_graph *G = &r->graph;
    unsigned char *base = r->slots[g];
    const size_t stride = r->slot_stride;
    uint64_t v = point_seed(g, p);
    const uint32_t *in = G->inputs + G->in_start[p];
    const uint32_t nin = G->in_start[p + 1] - G->in_start[p];
    if (r->validate) {
        const size_t fill = r->output_bytes - sizeof(slot_hdr);
        for (uint32_t k = 0; k < nin; k++) {
            uint32_t q = in[k];
            const unsigned char *sp = base + (size_t)q * stride;
            const slot_hdr *s = (const slot_hdr *)(const void *)sp;
            int bad = s->tag != expected_tag(r, q) || s->value != r->ref[g][q];
            for (size_t b = 0; b < fill && !bad; b++)
                bad = sp[sizeof(slot_hdr) + b] != fill_byte(s->value, b);
            if (bad) record(r, "input", g, p, q, s);
            v = wb_mix64(v ^ s->value);
        }
    } else {
        for (uint32_t k = 0; k < nin; k++) {
            const slot_hdr *s = (const slot_hdr *)(const void *)(base + (size_t)in[k] * stride);
            v = wb_mix64(v ^ s->value);
        }
    }
    if (worker >= r->workers) {
        atomic_fetch_add_explicit(&r->bad_worker, 1, memory_order_relaxed);
        worker %= r->workers;
    }
    if (r->kernel.kind != WB_K_EMPTY) {
        uint64_t x = wb_kernel_exec(r->kernel.kind, wb_task_units(&r->kernel, g, p),
                                    &r->scratch[worker]);
        if (x == 0x5555555555555555ULL) wb_sink = x; /* practically never: keeps x alive */
    }
    unsigned char *op = base + (size_t)p * stride;
    slot_hdr *o = (slot_hdr *)(void *)op;
    o->value = v;
    for (size_t b = 0; b < r->output_bytes - sizeof(slot_hdr); b++)
        op[sizeof(slot_hdr) + b] = fill_byte(v, b);
    o->tag = expected_tag(r, p);
}

void wb_run_free(wb_run *r)
{
    if (r->slots)
        for (uint32_t g = 0; g < r->ngraphs; g++) free(r->slots[g]);
    if (r->ref)
        for (uint32_t g = 0; g < r->ngraphs; g++) free(r->ref[g]);
    if (r->scratch)
        for (unsigned w = 0; w < r->workers; w++) wb_scratch_free(&r->scratch[w]);
    free(r->slots);
    free(r->ref);
    free(r->scratch);
    wb_graph_free(&r->graph);
    memset(r, 0, sizeof *r);
}

int wb_run_init(wb_run *r, const wb_shape *s, uint32_t ngraphs, unsigned workers,
                const wb_kernel *k, size_t output_bytes, bool validate, int drop_t, int drop_i,
                int drop_j, char *err, size_t errn)
{
    memset(r, 0, sizeof *r);
    if (ngraphs < 1 || workers < 1) {
        snprintf(err, errn, "ngraphs and workers must be >= 1");
        return -1;
    }
    if (output_bytes < sizeof(slot_hdr)) output_bytes = sizeof(slot_hdr);
    if (wb_graph_build(&r->graph, s, drop_t, drop_i, drop_j, err, errn) != 0) return -1;
    r->ngraphs = ngraphs;
    r->workers = workers;
    r->kernel = *k;
    r->output_bytes = output_bytes;
    r->slot_stride = (output_bytes + 63) / 64 * 64;
    r->validate = validate;
    r->tasks = (uint64_t)ngraphs * r->graph.npoints;
    r->slots = calloc(ngraphs, sizeof *r->slots);
    r->ref = calloc(ngraphs, sizeof *r->ref);
    r->scratch = calloc(workers, sizeof *r->scratch);
    if (!r->slots || !r->ref || !r->scratch) goto nomem;
    const wb_graph *G = &r->graph;
    for (uint32_t g = 0; g < ngraphs; g++) {
        void *p = NULL;
        size_t bytes = (size_t)G->npoints * r->slot_stride;
        if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) goto nomem;
        memset(p, 0, bytes);
        r->slots[g] = p;
        r->ref[g] = malloc(sizeof(uint64_t) * (G->npoints ? G->npoints : 1));
        if (!r->ref[g]) goto nomem;
        /* The sequential reference execution. */
        for (uint32_t q = 0; q < G->npoints; q++) {
            uint64_t v = point_seed(g, q);
            for (uint32_t e = G->in_start[q]; e < G->in_start[q + 1]; e++)
                v = wb_mix64(v ^ r->ref[g][G->inputs[e]]);
            r->ref[g][q] = v;
        }
    }
    if (k->kind == WB_K_MEMORY_BOUND)
        for (unsigned w = 0; w < workers; w++)
            if (wb_scratch_init(&r->scratch[w], k->scratch_bytes) != 0) goto nomem;
    return 0;
nomem:
    snprintf(err, errn, "out of memory setting up the run");
    wb_run_free(r);
    return -1;
}

void wb_run_begin(wb_run *r)
{
    r->salt = (r->salt + 1) & 0xffffffffu;
    if (r->salt == 0) r->salt = 1;
    atomic_store(&r->mismatches, 0);
    atomic_store(&r->first_claimed, 0);
    atomic_store(&r->bad_worker, 0);
    r->first_msg[0] = '\0';
}

uint64_t wb_run_check(wb_run *r)
{
    if (r->validate) {
        const wb_graph *G = &r->graph;
        const size_t fill = r->output_bytes - sizeof(slot_hdr);
        for (uint32_t g = 0; g < r->ngraphs; g++) {
            for (uint32_t q = 0; q < G->npoints; q++) {
                const unsigned char *sp = r->slots[g] + (size_t)q * r->slot_stride;
                const slot_hdr *s = (const slot_hdr *)(const void *)sp;
                int bad = s->tag != expected_tag(r, q) || s->value != r->ref[g][q];
                for (size_t b = 0; b < fill && !bad; b++)
                    bad = sp[sizeof(slot_hdr) + b] != fill_byte(s->value, b);
                if (bad) record(r, "after the execution, output of", g, q, q, s);
            }
        }
    }
    uint64_t bw = atomic_load(&r->bad_worker);
    if (bw) {
        atomic_fetch_add(&r->mismatches, bw);
        int expect = 0;
        if (atomic_compare_exchange_strong(&r->first_claimed, &expect, 1))
            snprintf(r->first_msg, sizeof r->first_msg,
                     "%" PRIu64 " points ran on a worker index outside 0..%u", bw, r->workers - 1);
    }
    return atomic_load(&r->mismatches);
}
