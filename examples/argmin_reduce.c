/*
 * argmin_reduce.c — StarPU's argmin and dot-product examples, in Weft.
 *
 * A vector x of N doubles is cut into blocks (one data handle each).  One
 * task per block, on the CPU or on either of two virtual GPUs, scans its
 * block and reduces into two results at once:
 *   - dot = sum of x[i] * y[i], with the built-in WEFT_RED_SUM | WEFT_RED_F64;
 *   - best = the (value, index) pair of the smallest x[i], ties going to
 *     the lowest index, with a user reduction: an identity element and a
 *     combine function registered once (StarPU's init and redux codelets).
 * Each task folds into a private copy of the result; Weft combines the
 * copies into the result on the host, in spawn order, so the answers are
 * the same bits on every run, wherever the tasks ran.
 *
 * Usage: weft-argmin-reduce [N].  Prints the answers and checks them
 * against a sequential scan ("equal to the sequential scan", or "DIFFERS"
 * and exit status 1).
 */
#include "weft.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCKS 32

/* The argmin's element: a value and where it was. */
typedef struct argmin {
    double value;
    int64_t index;
} argmin;

/* The reduction's combine: inout[k] = the smaller of inout[k] and in[k]. */
static void argmin_combine(void *inout, const void *in, size_t count, void *arg) {
    (void)arg;
    argmin *a = inout;
    const argmin *b = in;
    for (size_t k = 0; k < count; k++)
        if (b[k].value < a[k].value || (b[k].value == a[k].value && b[k].index < a[k].index)) a[k] = b[k];
}

/* One block's work: its part of the vectors and where its results go. */
typedef struct block {
    int64_t first;         /* the index of its first element */
    size_t n;
    const double *x, *y;   /* set by the body: the block's copies where it runs */
    double *dot;           /* its private copies of the results */
    argmin *best;
} block;

static int scan_kernel(void *arg) {
    block *b = arg;
    for (size_t i = 0; i < b->n; i++) {
        *b->dot += b->x[i] * b->y[i];
        argmin here = {b->x[i], b->first + (int64_t)i};
        argmin_combine(b->best, &here, 1, NULL);
    }
    return 0;
}

/* Accesses: 0 x's block (R), 1 y's block (R), 2 dot (reduce), 3 best (reduce). */
static int scan_body(weft_ctx *ctx, void *arg) {
    block *b = arg;
    b->x = weft_ctx_data(ctx, 0);
    b->y = weft_ctx_data(ctx, 1);
    b->dot = weft_ctx_data(ctx, 2);
    b->best = weft_ctx_data(ctx, 3);
    if (weft_ctx_gpu_count(ctx) == 0) return scan_kernel(b);
    weft_range rw[4] = {{(void *)b->x, b->n * sizeof(double), WEFT_R},
                        {(void *)b->y, b->n * sizeof(double), WEFT_R},
                        {b->dot, sizeof(double), WEFT_RW},
                        {b->best, sizeof(argmin), WEFT_RW}};
    return weft_ctx_queue_rw(ctx, 0, scan_kernel, b, 0, rw, 4);
}

#define TRY(call)                                                                                            \
    do {                                                                                                     \
        if ((call) != 0) {                                                                                   \
            fprintf(stderr, "%s: %s\n", #call, weft_last_error());                                           \
            exit(2);                                                                                         \
        }                                                                                                    \
    } while (0)

int main(int argc, char **argv) {
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000;
    if (n < BLOCKS) n = BLOCKS;
    double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    if (!x || !y) return 2;
    for (size_t i = 0; i < n; i++) { /* a few equal minima: the lowest index must win */
        x[i] = (double)((i * 7919u + 12345u) % 100003u) - 50000.0;
        y[i] = 1.0 / (double)(i + 1);
    }

    weft_config cfg;
    weft_config_init(&cfg);
    cfg.devices = "cpu,vgpu:2";
    weft_runtime *rt;
    TRY(weft_runtime_create(&cfg, &rt));

    /* The user reduction, registered once. */
    const argmin none = {INFINITY, INT64_MAX};
    weft_reduction_desc argmin_desc = {
        .elem_size = sizeof(argmin), .identity = &none, .combine = argmin_combine, .name = "argmin"};
    unsigned ARGMIN;
    TRY(weft_reduction_register(rt, &argmin_desc, &ARGMIN));

    /* The data: x and y by blocks, and the two results. */
    double dot = 0.0;
    argmin best = none;
    weft_data *hx[BLOCKS], *hy[BLOCKS], *hdot, *hbest;
    block blocks[BLOCKS];
    size_t per = n / BLOCKS;
    for (int k = 0; k < BLOCKS; k++) {
        size_t first = (size_t)k * per, len = k == BLOCKS - 1 ? n - first : per;
        blocks[k] = (block){.first = (int64_t)first, .n = len};
        TRY(weft_data_register(rt, x + first, len * sizeof *x, &hx[k]));
        TRY(weft_data_register(rt, y + first, len * sizeof *y, &hy[k]));
    }
    TRY(weft_data_register(rt, &dot, sizeof dot, &hdot));
    TRY(weft_data_register(rt, &best, sizeof best, &hbest));

    /* One task per block, anywhere. */
    weft_placement where[2];
    TRY(weft_placement_parse("gpu", &where[0]));
    TRY(weft_placement_parse("cpu", &where[1]));
    where[0].share = 0.5;
    for (int k = 0; k < BLOCKS; k++) {
        weft_access acc[4] = {{hx[k], WEFT_R},
                              {hy[k], WEFT_R},
                              {hdot, WEFT_REDUCE | WEFT_RED_SUM | WEFT_RED_F64},
                              {hbest, WEFT_REDUCE | ARGMIN}};
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.body = scan_body;
        d.arg = &blocks[k];
        d.accesses = acc;
        d.naccesses = 4;
        d.placements = &where[k % 2];
        d.nplacements = 1;
        d.name = "scan";
        TRY(weft_spawn(rt, &d, NULL));
    }
    TRY(weft_wait_all(rt));
    TRY(weft_data_unregister(hdot)); /* the copies combined into dot and best, in spawn order */
    TRY(weft_data_unregister(hbest));
    TRY(weft_runtime_destroy(rt));

    /* The sequential scan, block by block as the tasks did. */
    double want_dot = 0.0;
    argmin want = none;
    for (int k = 0; k < BLOCKS; k++) {
        double part = -0.0;
        argmin mine = none;
        for (size_t i = 0; i < blocks[k].n; i++) {
            size_t j = (size_t)blocks[k].first + i;
            part += x[j] * y[j];
            argmin here = {x[j], (int64_t)j};
            argmin_combine(&mine, &here, 1, NULL);
        }
        want_dot += part;
        argmin_combine(&want, &mine, 1, NULL);
    }
    printf("argmin: x[%lld] = %g; dot(x, y) = %.17g\n", (long long)best.index, best.value, dot);
    int same = best.index == want.index && best.value == want.value && memcmp(&dot, &want_dot, sizeof dot) == 0;
    printf("%s\n", same ? "equal to the sequential scan" : "DIFFERS from the sequential scan");
    free(x);
    free(y);
    return same ? 0 : 1;
}
