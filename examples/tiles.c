/*
 * weft-demo-tiles — one array tiled over "cpu,vgpu:4": a 2-D heat equation
 * on a 512 x 512 grid split into 2 x 3 tiles with a halo of one cell.  Four
 * tiles live on the four virtual GPUs, two on the CPU; each time step of
 * each tile is a task that reads its tile of the old grid (halo included)
 * and writes its tile of the new one.  Weft copies each tile to its device
 * once, then only the halo cells its neighbours changed, from wherever they
 * are; between the phases a CPU task reads the whole grid (Weft puts it
 * back together from the tiles) and a GPU task rescales the whole grid
 * (the tiles are then made again from it).  Every phase is checked cell by
 * cell against a sequential computation, and the demo prints the bytes
 * copied per phase.  The trace (argv[1]) shows, for each task, its tile's
 * replica state and where it was copied from (args.data), and the copies
 * on the virtual GPUs' stream tracks.
 */
#include <weft.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 512
#define GR 2
#define GC 3
#define NT (GR * GC)

static const char *const where[NT] = {"gpu:0", "gpu:1", "cpu", "gpu:2", "gpu:3", "cpu"};

/* One Jacobi step over a tile's interior; s and d point at its span. */
typedef struct step {
    weft_tile_info ti;
    const double *s;
    double *d;
    size_t sp, dp;                     /* row pitches, bytes */
} step;

#define AT(p, pitch, r, c) (*(double *)((char *)(p) + (r) * (pitch) + (c) * sizeof(double)))

static int step_kernel(void *arg)
{
    step *k = arg;
    const weft_tile_info *t = &k->ti;
    for (size_t r = t->in_row0; r < t->in_row0 + t->in_rows; r++)
        for (size_t c = t->in_col0; c < t->in_col0 + t->in_cols; c++) {
            size_t lr = r - t->row0, lc = c - t->col0;
            double self = AT(k->s, k->sp, lr, lc);
            double up = r > 0 ? AT(k->s, k->sp, lr - 1, lc) : self;
            double down = r + 1 < N ? AT(k->s, k->sp, lr + 1, lc) : self;
            double left = c > 0 ? AT(k->s, k->sp, lr, lc - 1) : self;
            double right = c + 1 < N ? AT(k->s, k->sp, lr, lc + 1) : self;
            AT(k->d, k->dp, lr, lc) = self + 0.2 * (up + down + left + right - 4 * self);
        }
    return 0;
}

static int step_body(weft_ctx *ctx, void *arg)
{
    step *k = arg;
    k->s = weft_ctx_data(ctx, 0);
    k->d = weft_ctx_data(ctx, 1);
    k->sp = weft_ctx_pitch(ctx, 0);
    k->dp = weft_ctx_pitch(ctx, 1);
    if (weft_ctx_gpu_count(ctx) == 0)
        return step_kernel(k);
    return weft_ctx_queue(ctx, 0, step_kernel, k, 0);
}

/* The whole grid: checked against the sequential run (a reader on the CPU),
 * or rescaled (a writer on a GPU). */
typedef struct whole {
    double *p;
    const double *want;
    int same;
} whole;
static int scale_kernel(void *arg)
{
    whole *k = arg;
    for (size_t i = 0; i < (size_t)N * N; i++)
        k->p[i] = 0.5 * k->p[i] + 1;
    return 0;
}
static int whole_body(weft_ctx *ctx, void *arg)
{
    whole *k = arg;
    k->p = weft_ctx_data(ctx, 0);
    if (k->want) {
        k->same = memcmp(k->p, k->want, sizeof(double) * N * N) == 0;
        return 0;
    }
    return weft_ctx_queue(ctx, 0, scale_kernel, k, 0);
}

static void ref_step(const double *s, double *d)
{
    step k = {{0, 0, N, N, 0, 0, N, N, 0}, s, d, N * sizeof(double), N * sizeof(double)};
    step_kernel(&k);
}

static int spawn(weft_runtime *rt, const char *at, weft_body_fn body, void *arg, const weft_access *acc, size_t n,
                 const char *name)
{
    weft_placement p;
    if (weft_placement_parse(at, &p) != 0)
        return 1;
    p.share = 0.5;
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = body;
    d.arg = arg;
    d.accesses = acc;
    d.naccesses = n;
    d.placements = &p;
    d.nplacements = 1;
    d.name = name;
    if (weft_spawn(rt, &d, NULL) != 0) {
        fprintf(stderr, "weft-demo-tiles: %s\n", weft_last_error());
        return 1;
    }
    return 0;
}

static uint64_t copied(weft_runtime *rt)
{
    weft_stats st;
    return weft_runtime_stats(rt, &st) == 0 ? st.bytes_copied : 0;
}

int main(int argc, char **argv)
{
    const char *trace = argc > 1 ? argv[1] : "weft-demo-tiles-trace.json";
    static double grid[2][N * N], ref[2][N * N];
    for (size_t r = 0; r < N; r++)
        for (size_t c = 0; c < N; c++)
            grid[0][r * N + c] = ref[0][r * N + c] = (r > N / 3 && r < N / 2 && c > N / 4 && c < N / 2) ? 100 : 0;
    memcpy(grid[1], grid[0], sizeof grid[0]);
    memcpy(ref[1], ref[0], sizeof ref[0]);

    weft_config cfg;
    weft_config_init(&cfg);
    cfg.devices = "cpu,vgpu:4";
    cfg.trace_path = trace;
    weft_runtime *rt;
    if (weft_runtime_create(&cfg, &rt) != 0) {
        fprintf(stderr, "weft-demo-tiles: %s\n", weft_last_error());
        return 1;
    }
    weft_data *g[2], *tiles[2][NT];
    weft_tiling t = {sizeof(double), N, N, 0, GR, GC, 1};
    for (int a = 0; a < 2; a++)
        if (weft_data_register(rt, grid[a], sizeof grid[a], &g[a]) != 0 ||
            weft_data_partition(g[a], &t, tiles[a]) != 0) {
            fprintf(stderr, "weft-demo-tiles: %s\n", weft_last_error());
            return 1;
        }

    enum { STEPS1 = 20, STEPS2 = 10 };
    static step steps[STEPS1 + STEPS2][NT];
    static whole check[2], scale;
    uint64_t phase[5], before = copied(rt);
    int cur = 0, rc = 0;
    char name[32];
    /* phase 1: the first step (each tile copied to its GPU), then the rest
     * (halos only) */
    for (int s = 0; s < STEPS1 + STEPS2 && rc == 0; s++) {
        if (s == STEPS1) {
            /* the whole grid: read on the CPU, then rescaled on a GPU */
            check[0] = (whole){NULL, ref[cur], 0};
            weft_access acc = {g[cur], WEFT_R};
            rc |= spawn(rt, "cpu", whole_body, &check[0], &acc, 1, "check whole grid");
            scale = (whole){NULL, NULL, 0};
            acc.mode = WEFT_RW;
            rc |= spawn(rt, "gpu:0", whole_body, &scale, &acc, 1, "rescale whole grid");
            if (weft_wait_all(rt) != 0)
                rc = 1;
            phase[2] = copied(rt) - before;
            before = copied(rt);
            for (size_t i = 0; i < (size_t)N * N; i++)
                ref[cur][i] = 0.5 * ref[cur][i] + 1;
        }
        for (int i = 0; i < NT; i++) {
            step *k = &steps[s][i];
            if (weft_data_tile_info(tiles[cur][i], &k->ti) != 0)
                rc = 1;
            weft_access acc[2] = {{tiles[cur][i], WEFT_R}, {tiles[1 - cur][i], WEFT_W}};
            snprintf(name, sizeof name, "step %d tile %d", s, i);
            rc |= spawn(rt, where[i], step_body, k, acc, 2, name);
        }
        ref_step(ref[cur], ref[1 - cur]);
        cur = 1 - cur;
        if (s == 0 || s == STEPS1 - 1 || s == STEPS1) {
            if (weft_wait_all(rt) != 0)
                rc = 1;
            phase[s == 0 ? 0 : s == STEPS1 ? 3 : 1] = copied(rt) - before;
            before = copied(rt);
        }
    }
    check[1] = (whole){NULL, ref[cur], 0};
    weft_access acc = {g[cur], WEFT_R};
    rc |= spawn(rt, "cpu", whole_body, &check[1], &acc, 1, "check whole grid");
    if (weft_wait_all(rt) != 0)
        rc = 1;
    phase[4] = copied(rt) - before;
    for (int a = 0; a < 2; a++)
        if (weft_data_unregister(g[a]) != 0)
            rc = 1;
    int same = memcmp(grid[cur], ref[cur], sizeof grid[0]) == 0;
    if (weft_runtime_destroy(rt) != 0)
        rc = 1;

    size_t tile_bytes = sizeof grid[0] / NT;
    printf("\nweft-demo tiles: a %d x %d grid (%zu KiB) in %d x %d tiles with a halo of 1 cell, on cpu,vgpu:4\n"
           "  (tiles 0, 1, 3, 4 on gpu:0-3, tiles 2 and 5 on the CPU); %d + %d Jacobi steps, a task per tile and step\n",
           N, N, sizeof grid[0] / 1024, GR, GC, STEPS1, STEPS2);
    printf("  %-46s %12s\n", "phase", "KiB copied");
    printf("  %-46s %12.1f\n", "step 1 (each GPU tile copied in once)", phase[0] / 1024.0);
    printf("  %-46s %12.1f\n", "steps 2-20 (halo cells only, per step)", phase[1] / 1024.0 / (STEPS1 - 1));
    printf("  %-46s %12.1f\n", "whole grid read on the CPU, rescaled on gpu:0", phase[2] / 1024.0);
    printf("  %-46s %12.1f\n", "step 21 (tiles made again from the grid)", phase[3] / 1024.0);
    printf("  %-46s %12.1f\n", "steps 22-30 and the final check", phase[4] / 1024.0);
    printf("  (a tile is about %zu KiB; its halo about %zu KiB)\n", tile_bytes / 1024,
           (size_t)(2 * (N / GR + N / GC) * sizeof(double)) / 1024);
    printf("  whole grid against the sequential computation: after step 20 %s, after step 30 %s, final %s\n",
           check[0].same ? "equal" : "DIFFERS", check[1].same ? "equal" : "DIFFERS", same ? "equal" : "DIFFERS");
    printf("  trace written to %s: each task's args.data gives its tiles' replica state there\n"
           "  (S shared, M modified: the only valid copy) and where they were copied from; the vgpu stream\n"
           "  tracks show the copies (open it in https://ui.perfetto.dev)\n",
           trace);
    return rc || !same || !check[0].same || !check[1].same;
}
