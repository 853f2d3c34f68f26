/*
 * weft-demo — a real task graph: heat diffusion along a rod split into
 * blocks.  Each time step of each block is a task that reads its neighbours'
 * previous values and writes its own (dependencies inferred from the access
 * modes); a commuting reduction task per block sums the energy at the end.
 * The result is checked against a plain sequential computation.
 */
#include <weft.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCKS 16
#define CELLS 4096 /* per block */
#define STEPS 200

typedef struct block_step {
    const double *left, *self, *right; /* previous values (right/left may be NULL) */
    double *out;
} block_step;

static void step_cells(const double *l, const double *s, const double *r, double *out)
{
    for (int i = 0; i < CELLS; i++) {
        double a = i > 0 ? s[i - 1] : (l ? l[CELLS - 1] : s[i]);
        double b = i < CELLS - 1 ? s[i + 1] : (r ? r[0] : s[i]);
        out[i] = s[i] + 0.25 * (a - 2 * s[i] + b);
    }
}

static int step_body(weft_ctx *ctx, void *arg)
{
    (void)ctx;
    block_step *bs = arg;
    step_cells(bs->left, bs->self, bs->right, bs->out);
    return 0;
}

typedef struct sum_arg {
    const double *block;
    double *total;
} sum_arg;

static int sum_body(weft_ctx *ctx, void *arg)
{
    (void)ctx;
    sum_arg *sa = arg;
    double s = 0;
    for (int i = 0; i < CELLS; i++)
        s += sa->block[i];
    *sa->total += s; /* safe: the WEFT_COMMUTE accesses exclude each other */
    return 0;
}

static void initial(double *rod)
{
    for (int i = 0; i < BLOCKS * CELLS; i++)
        rod[i] = (i / 1000) % 2 ? 100.0 : 0.0;
}

int main(void)
{
    static double buf[2][BLOCKS * CELLS], ref[2][BLOCKS * CELLS];
    static block_step args[STEPS][BLOCKS];
    static sum_arg sums[BLOCKS];
    double total = 0;
    initial(buf[0]);

    weft_config cfg;
    weft_config_init(&cfg);
    weft_runtime *rt;
    int rc = weft_runtime_create(&cfg, &rt);
    if (rc) {
        fprintf(stderr, "weft-demo: %s (%s)\n", weft_strerror(rc), weft_last_error());
        return 1;
    }
    weft_data *blk[2][BLOCKS], *tot;
    for (int k = 0; k < 2; k++)
        for (int b = 0; b < BLOCKS; b++)
            if (weft_data_register(rt, &buf[k][b * CELLS], CELLS * sizeof(double), &blk[k][b]))
                return 1;
    if (weft_data_register(rt, &total, sizeof total, &tot))
        return 1;

    char name[32];
    for (int t = 0; t < STEPS; t++) {
        int in = t % 2, out = 1 - in;
        for (int b = 0; b < BLOCKS; b++) {
            block_step *bs = &args[t][b];
            bs->self = &buf[in][b * CELLS];
            bs->left = b > 0 ? &buf[in][(b - 1) * CELLS] : NULL;
            bs->right = b < BLOCKS - 1 ? &buf[in][(b + 1) * CELLS] : NULL;
            bs->out = &buf[out][b * CELLS];
            weft_access acc[4];
            size_t n = 0;
            acc[n++] = (weft_access){blk[in][b], WEFT_R};
            if (b > 0)
                acc[n++] = (weft_access){blk[in][b - 1], WEFT_R};
            if (b < BLOCKS - 1)
                acc[n++] = (weft_access){blk[in][b + 1], WEFT_R};
            acc[n++] = (weft_access){blk[out][b], WEFT_W};
            snprintf(name, sizeof name, "step %d block %d", t, b);
            weft_task_desc d;
            weft_task_desc_init(&d);
            d.body = step_body;
            d.arg = bs;
            d.accesses = acc;
            d.naccesses = n;
            d.name = name;
            if ((rc = weft_spawn(rt, &d, NULL)) != 0) {
                fprintf(stderr, "weft-demo: spawn: %s\n", weft_last_error());
                return 1;
            }
        }
    }
    int last = STEPS % 2;
    for (int b = 0; b < BLOCKS; b++) {
        sums[b] = (sum_arg){&buf[last][b * CELLS], &total};
        weft_access acc[2] = {{blk[last][b], WEFT_R}, {tot, WEFT_RW | WEFT_COMMUTE}};
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.body = sum_body;
        d.arg = &sums[b];
        d.accesses = acc;
        d.naccesses = 2;
        snprintf(name, sizeof name, "sum block %d", b);
        d.name = name;
        if (weft_spawn(rt, &d, NULL) != 0)
            return 1;
    }
    if ((rc = weft_wait_all(rt)) != 0) {
        fprintf(stderr, "weft-demo: %s\n", weft_last_error());
        return 1;
    }
    weft_stats st;
    if (weft_runtime_stats(rt, &st) != 0)
        return 1;
    rc = weft_runtime_destroy(rt);

    /* The same computation, sequentially. */
    initial(ref[0]);
    for (int t = 0; t < STEPS; t++)
        for (int b = 0; b < BLOCKS; b++)
            step_cells(b > 0 ? &ref[t % 2][(b - 1) * CELLS] : NULL, &ref[t % 2][b * CELLS],
                       b < BLOCKS - 1 ? &ref[t % 2][(b + 1) * CELLS] : NULL, &ref[1 - t % 2][b * CELLS]);
    double want = 0;
    for (int i = 0; i < BLOCKS * CELLS; i++)
        want += ref[last][i];
    bool same = memcmp(ref[last], buf[last], sizeof buf[last]) == 0;

    printf("weft-demo: heat diffusion, %d blocks x %d cells, %d steps: %llu tasks on %u workers\n", BLOCKS,
           CELLS, STEPS, (unsigned long long)st.tasks_run, st.workers);
    printf("  total heat %.6f (sequential %.6f), every cell %s the sequential result\n", total, want,
           same ? "equals" : "DIFFERS FROM");
    printf("  steals %llu, parks %llu, peak tasks in flight %llu, %llu bytes per in-flight task\n",
           (unsigned long long)st.steals, (unsigned long long)st.parks, (unsigned long long)st.inflight_peak,
           (unsigned long long)st.bytes_per_task);
    if (cfg.trace_path)
        printf("  trace written to %s (open it in https://ui.perfetto.dev)\n", cfg.trace_path);
    else
        printf("  set WEFT_TRACE=trace.json to write a trace\n");
    return same && fabs(total - want) < 1e-6 * fabs(want) && rc == 0 ? 0 : 1;
}
