/*
 * weft-demo — a real task graph: heat diffusion along a rod split into
 * blocks.  Each time step of each block is a task that reads its neighbours'
 * previous values and writes its own (dependencies inferred from the access
 * modes); a commuting reduction task per block sums the energy at the end.
 * The result is checked against a plain sequential computation.
 *
 * Then the device part: the same rod (fewer steps) three times, on the
 * devices "cpu", "cpu,vgpu:2" and "cpu,vgpu:4" (virtual GPUs: simulated
 * GPUs whose kernels are host functions run by their streams' threads).
 * Each block update is a task placed on "gpu" (any one GPU, whole); on a
 * runtime without GPUs it also gets "cpu" as a second alternative, and the
 * "gpu" one, which no device set there can satisfy, is skipped.  On a GPU
 * the body queues the update as a kernel (weft_ctx_queue) modelled at
 * GPU_MODEL_NS; on the CPU it computes it itself, modelled at CPU_MODEL_NS.
 * Each run is checked cell by cell against the sequential computation, and
 * the demo prints its wall time, each device's utilisation (the time its
 * kernels or bodies were busy, summed, over the wall time) and where its
 * trace is.
 *
 * Why no "cpu" fallback where there are GPUs: the "load" policy takes the
 * first alternative that fits when a task's dependencies are done, so every
 * update that finds all GPUs busy would go to the CPU, whose alternative has
 * no limit, and those bodies would hold the workers that GPU tasks need to
 * queue their kernels.  Tried on this 2-core machine: two thirds of the
 * updates ran on the CPU, the GPUs were 10-17% busy, and "cpu,vgpu:4" took
 * 110 ms instead of 60.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep */
#include <weft.h>

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* What the update of block b reads (itself and its neighbours, buffer in)
 * and writes (itself, buffer out): the dependencies follow from these. */
static size_t block_accesses(weft_data *const blk[2][BLOCKS], int in, int out, int b, weft_access acc[4])
{
    size_t n = 0;
    acc[n++] = (weft_access){blk[in][b], WEFT_R};
    if (b > 0)
        acc[n++] = (weft_access){blk[in][b - 1], WEFT_R};
    if (b < BLOCKS - 1)
        acc[n++] = (weft_access){blk[in][b + 1], WEFT_R};
    acc[n++] = (weft_access){blk[out][b], WEFT_W};
    return n;
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

static int cpu_demo(void)
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

    char name[48]; /* "step T block B"; Weft keeps the first 31 bytes */
    for (int t = 0; t < STEPS; t++) {
        int in = t % 2, out = 1 - in;
        for (int b = 0; b < BLOCKS; b++) {
            block_step *bs = &args[t][b];
            bs->self = &buf[in][b * CELLS];
            bs->left = b > 0 ? &buf[in][(b - 1) * CELLS] : NULL;
            bs->right = b < BLOCKS - 1 ? &buf[in][(b + 1) * CELLS] : NULL;
            bs->out = &buf[out][b * CELLS];
            weft_access acc[4];
            size_t n = block_accesses(blk, in, out, b, acc);
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

/* ------------------------------------------------------------------------ */
/* The device part                                                           */
/* ------------------------------------------------------------------------ */

#define DEV_STEPS 40
#define GPU_MODEL_NS 200000u /* a block update as a kernel on a (virtual) GPU */
#define CPU_MODEL_NS 400000u /* the same update as a body on a CPU core */
#define MAX_DEVS 8

static atomic_uint_least64_t busy_ns[MAX_DEVS]; /* per runtime device index */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

typedef struct dev_step {
    block_step s;
    int b;       /* the block */
    int dev;     /* the runtime device index it ran on: 0 the CPU, 1.. a GPU */
    uint64_t t0; /* when its kernel started */
} dev_step;

/* The kernel, run by the stream's thread; the virtual GPU then stretches it
 * to GPU_MODEL_NS (it sleeps the rest once the function returns). */
static int step_kernel(void *arg)
{
    dev_step *ds = arg;
    ds->t0 = now_ns();
    step_cells(ds->s.left, ds->s.self, ds->s.right, ds->s.out);
    return 0;
}

/* Queued right after the kernel on the same stream: it runs once the kernel
 * and its stretch are over, so the GPU was busy from t0 until now. */
static int kernel_end(void *arg)
{
    dev_step *ds = arg;
    atomic_fetch_add(&busy_ns[ds->dev], now_ns() - ds->t0);
    return 0;
}

static void sleep_until(uint64_t t)
{
    for (uint64_t n = now_ns(); n < t; n = now_ns()) {
        struct timespec ts = {(time_t)((t - n) / 1000000000u), (long)((t - n) % 1000000000u)};
        nanosleep(&ts, NULL);
    }
}

/* The blocks where the task runs: Weft's copies of them on its GPU (made
 * valid there before the body runs), or the rod itself on the CPU; in the
 * order of block_accesses. */
static void bind_blocks(weft_ctx *ctx, dev_step *ds)
{
    size_t i = 0;
    ds->s.self = weft_ctx_data(ctx, i++);
    ds->s.left = ds->b > 0 ? weft_ctx_data(ctx, i++) : NULL;
    ds->s.right = ds->b < BLOCKS - 1 ? weft_ctx_data(ctx, i++) : NULL;
    ds->s.out = weft_ctx_data(ctx, i);
}

static int dev_step_body(weft_ctx *ctx, void *arg)
{
    dev_step *ds = arg;
    bind_blocks(ctx, ds);
    if (weft_ctx_gpu_count(ctx) > 0) { /* placed on a GPU: queue the kernel, return at once */
        uint64_t t0 = now_ns();
        ds->dev = weft_ctx_gpu(ctx, 0);
        if (ds->dev < 0 || ds->dev >= MAX_DEVS)
            return 1;
        int rc = weft_ctx_queue(ctx, 0, step_kernel, ds, GPU_MODEL_NS);
        if (rc == 0)
            rc = weft_ctx_queue(ctx, 0, kernel_end, ds, 0);
        atomic_fetch_add(&busy_ns[0], now_ns() - t0); /* the worker ran this body */
        return rc == 0 ? 0 : 2;
    }
    /* on the CPU: compute, stretched to the CPU's modelled time (the worker
     * is taken for that long, as it would be by a slower real update) */
    ds->dev = 0;
    uint64_t t0 = now_ns();
    step_cells(ds->s.left, ds->s.self, ds->s.right, ds->s.out);
    sleep_until(t0 + CPU_MODEL_NS);
    atomic_fetch_add(&busy_ns[0], now_ns() - t0);
    return 0;
}

typedef struct dev_run {
    const char *devices;
    char trace[512];
    double wall_ms;
    unsigned workers, ndev;
    char name[MAX_DEVS][32];
    double util[MAX_DEVS]; /* busy / wall; < 0: no such device in this run */
    unsigned long long on_gpu, on_cpu;
    bool same;
} dev_run;

/* Run the rod's DEV_STEPS steps on run->devices; 0, or 1 after printing why. */
static int dev_run_one(dev_run *run, const double *want)
{
    static double buf[2][BLOCKS * CELLS];
    static dev_step args[DEV_STEPS][BLOCKS];
    initial(buf[0]);
    memset(buf[1], 0, sizeof buf[1]);
    for (int i = 0; i < MAX_DEVS; i++)
        atomic_store(&busy_ns[i], 0);

    weft_config cfg;
    weft_config_init(&cfg);
    cfg.devices = run->devices;
    cfg.trace_path = run->trace;
    weft_runtime *rt;
    int rc = weft_runtime_create(&cfg, &rt);
    if (rc) {
        fprintf(stderr, "weft-demo: devices \"%s\": %s (%s)\n", run->devices, weft_strerror(rc), weft_last_error());
        return 1;
    }
    run->workers = weft_runtime_workers(rt);
    run->ndev = weft_device_count(rt);
    if (run->ndev > MAX_DEVS) {
        fprintf(stderr, "weft-demo: %u devices, at most %d shown\n", run->ndev, MAX_DEVS);
        run->ndev = MAX_DEVS;
    }
    for (unsigned i = 0; i < run->ndev; i++) {
        weft_device_info info;
        if (weft_device_info_get(rt, i, &info) != 0)
            return 1;
        snprintf(run->name[i], sizeof run->name[i], "%s", info.name);
    }
    weft_data *blk[2][BLOCKS];
    for (int k = 0; k < 2; k++)
        for (int b = 0; b < BLOCKS; b++)
            if (weft_data_register(rt, &buf[k][b * CELLS], CELLS * sizeof(double), &blk[k][b]))
                return 1;

    /* any one GPU, whole; on a runtime with no GPU, a CPU core */
    weft_placement where[2];
    if (weft_placement_parse("gpu", &where[0]) != 0 || weft_placement_parse("cpu", &where[1]) != 0)
        return 1;
    size_t nwhere = run->ndev > 1 ? 1 : 2;

    uint64_t t0 = now_ns();
    char name[48]; /* "step T block B"; Weft keeps the first 31 bytes */
    for (int t = 0; t < DEV_STEPS; t++) {
        int in = t % 2, out = 1 - in;
        for (int b = 0; b < BLOCKS; b++) {
            dev_step *ds = &args[t][b];
            ds->b = b;
            ds->dev = -1;
            weft_access acc[4];
            size_t n = block_accesses(blk, in, out, b, acc);
            snprintf(name, sizeof name, "step %d block %d", t, b);
            weft_task_desc d;
            weft_task_desc_init(&d);
            d.body = dev_step_body;
            d.arg = ds;
            d.accesses = acc;
            d.naccesses = n;
            d.name = name;
            d.placements = where;
            d.nplacements = nwhere;
            if ((rc = weft_spawn(rt, &d, NULL)) != 0) {
                fprintf(stderr, "weft-demo: devices \"%s\": spawn: %s\n", run->devices, weft_last_error());
                return 1;
            }
        }
    }
    if ((rc = weft_wait_all(rt)) != 0) {
        fprintf(stderr, "weft-demo: devices \"%s\": %s\n", run->devices, weft_last_error());
        return 1;
    }
    uint64_t wall = now_ns() - t0;
    if ((rc = weft_runtime_destroy(rt)) != 0) /* writes the trace */
        return 1;

    run->wall_ms = (double)wall / 1e6;
    for (unsigned i = 0; i < MAX_DEVS; i++)
        run->util[i] = i < run->ndev ? (double)atomic_load(&busy_ns[i]) / (double)wall : -1;
    run->on_gpu = run->on_cpu = 0;
    for (int t = 0; t < DEV_STEPS; t++)
        for (int b = 0; b < BLOCKS; b++)
            args[t][b].dev > 0 ? run->on_gpu++ : run->on_cpu++;
    run->same = memcmp(buf[DEV_STEPS % 2], want, sizeof buf[0]) == 0;
    return 0;
}

/* The trace of a run: beside WEFT_TRACE's file if set (build/demo-trace.json
 * gives build/demo-trace-vgpu4.json), else in the current directory. */
static void trace_path(char *out, size_t n, const char *tag)
{
    const char *env = getenv("WEFT_TRACE");
    char base[400];
    snprintf(base, sizeof base, "%s", env && *env ? env : "weft-demo-trace.json");
    size_t len = strlen(base);
    if (len > 5 && strcmp(base + len - 5, ".json") == 0)
        base[len - 5] = '\0';
    snprintf(out, n, "%s-%s.json", base, tag);
}

static int device_demo(void)
{
    /* the sequential result */
    static double ref[2][BLOCKS * CELLS];
    initial(ref[0]);
    for (int t = 0; t < DEV_STEPS; t++)
        for (int b = 0; b < BLOCKS; b++)
            step_cells(b > 0 ? &ref[t % 2][(b - 1) * CELLS] : NULL, &ref[t % 2][b * CELLS],
                       b < BLOCKS - 1 ? &ref[t % 2][(b + 1) * CELLS] : NULL, &ref[1 - t % 2][b * CELLS]);
    const double *want = ref[DEV_STEPS % 2];

    static dev_run runs[3] = {{.devices = "cpu"}, {.devices = "cpu,vgpu:2"}, {.devices = "cpu,vgpu:4"}};
    const char *tags[3] = {"cpu", "vgpu2", "vgpu4"};
    bool ok = true;
    for (int r = 0; r < 3; r++) {
        trace_path(runs[r].trace, sizeof runs[r].trace, tags[r]);
        if (dev_run_one(&runs[r], want) != 0)
            return 1;
        ok = ok && runs[r].same;
    }

    printf("\nweft-demo devices: the same rod, %d steps: %d block updates, each a task placed on \"gpu\"\n"
           "  (on \"cpu\" where there is no GPU); on a GPU a kernel modelled at %u us, on a CPU core a body\n"
           "  modelled at %u us.  utilisation = busy time / wall time (the cpu sums its %u workers: up to %u%%)\n",
           DEV_STEPS, DEV_STEPS * BLOCKS, GPU_MODEL_NS / 1000, CPU_MODEL_NS / 1000, runs[0].workers,
           100 * runs[0].workers);
    unsigned cols = 0;
    for (int r = 0; r < 3; r++)
        cols = runs[r].ndev > cols ? runs[r].ndev : cols;
    printf("  %-12s %8s  %-9s %9s", "devices", "wall ms", "result", "gpu/cpu");
    for (unsigned i = 0; i < cols; i++)
        printf(" %7s", runs[2].ndev > i ? runs[2].name[i] : "?");
    printf("\n");
    for (int r = 0; r < 3; r++) {
        char split[32];
        snprintf(split, sizeof split, "%llu/%llu", runs[r].on_gpu, runs[r].on_cpu);
        printf("  %-12s %8.1f  %-9s %9s", runs[r].devices, runs[r].wall_ms, runs[r].same ? "equal" : "DIFFERS", split);
        for (unsigned i = 0; i < cols; i++) {
            if (runs[r].util[i] < 0)
                printf(" %7s", "-");
            else
                printf(" %6.0f%%", 100 * runs[r].util[i]);
        }
        printf("\n");
    }
    printf("  (result: every cell against the sequential computation; gpu/cpu: block updates run on each)\n");
    for (int r = 0; r < 3; r++)
        printf("  trace of \"%s\" written to %s\n", runs[r].devices, runs[r].trace);
    return ok ? 0 : 1;
}

int main(void)
{
    int rc = cpu_demo();
    int drc = device_demo();
    return rc || drc;
}
