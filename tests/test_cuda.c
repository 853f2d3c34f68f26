/* The CUDA device kind (src/device/cuda.c) on a real GPU: device strings,
 * the device interface (pool memory, non-blocking streams, events ordering
 * one stream after another with no host wait, copies, host functions,
 * completion reports found by the poller, errors), tasks whose work runs on
 * the GPU after the body returned, and destroy with GPU work in flight.
 *
 * Exits 77 (skipped) in a build without the CUDA kind or on a machine with
 * no GPU; scripts/gpu-check.sh runs it where there is one.  The kernels are
 * in cuda_kernels.cu (built when CMake finds nvcc); without them the parts
 * that need a real kernel are skipped and say so. */
#include "check.h"
#include "device/cuda.h"
#include "testing.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef WEFT_TEST_CUDA_KERNELS
int weft_test_cuda_add(void *stream, float *p, size_t n, float v);
int weft_test_cuda_step(void *stream, const unsigned *s, size_t sp, unsigned *d, size_t dp, size_t row0, size_t col0,
                        size_t in_row0, size_t in_col0, size_t in_rows, size_t in_cols, size_t rows, size_t cols,
                        unsigned salt);
int weft_test_cuda_spin(void *stream, long long cycles);
#endif

static atomic_int reports, report_status;
static void on_done(void *cookie, int status) {
    (void)cookie;
    atomic_store(&report_status, status);
    atomic_fetch_add(&reports, 1);
}

static weft_runtime *make_with(const char *devices, unsigned workers) {
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = workers;
    cfg.devices = devices;
    weft_runtime *rt = NULL;
    CHECKF(weft_runtime_create(&cfg, &rt) == 0, "devices \"%s\": %s", devices, weft_last_error());
    return rt;
}

static void test_device_strings(int ngpu) {
    const char *specs[] = {NULL, "cpu,cuda", "cuda:0", "cpu,cuda:0,vgpu:2"};
    for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
        weft_runtime *rt = make_with(specs[k], 1);
        unsigned n = weft_device_count(rt);
        unsigned want = k == 0 || k == 1 ? 1 + (unsigned)ngpu : k == 2 ? 2 : 4;
        CHECKF(n == want, "devices \"%s\": %u devices, want %u", specs[k] ? specs[k] : "(default)", n, want);
        weft_device_info info;
        CHECK_OK(weft_device_info_get(rt, 1, &info));
        CHECK(info.kind == WEFT_DEVICE_CUDA && info.ordinal == 0 && info.index == 1);
        CHECK(info.memory > (1u << 30) && info.name[0] != '\0');
        if (k == 0)
            printf("  CUDA device 0: %s, %.1f GiB\n", info.name, (double)info.memory / (1u << 30));
        if (k == 3) {
            CHECK_OK(weft_device_info_get(rt, 2, &info));
            CHECK(info.kind == WEFT_DEVICE_VGPU);
        }
        CHECK_OK(weft_runtime_destroy(rt));
    }
    char bad[32];
    snprintf(bad, sizeof bad, "cpu,cuda:%d", ngpu);
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.devices = bad;
    weft_runtime *rt;
    CHECK_ERR(weft_runtime_create(&cfg, &rt), WEFT_EINVAL);
    CHECK(strstr(weft_last_error(), bad + 4) != NULL);
}

static int host_fn_log[8];
static atomic_int host_fn_n;
static int host_fn(void *arg) {
    host_fn_log[atomic_fetch_add(&host_fn_n, 1)] = (int)(intptr_t)arg;
    return (int)(intptr_t)arg == 13 ? -13 : 0;
}

static void test_layer(void) {
    weft__waitset ws;
    weft__waitset_init(&ws);
    weft__device *d;
    CHECKF(weft__cuda_new(&ws, 0, &d) == 0, "weft__cuda_new: %s", weft_last_error());
    const weft__device_ops *o = d->ops;
    CHECK(strcmp(o->kind, "cuda") == 0);

    /* memory: charged, freed, refused past the capacity */
    size_t n = 1u << 22; /* 4 Mi floats */
    void *dev;
    CHECK_OK(o->mem_alloc(d, n * sizeof(float), &dev));
    CHECK(atomic_load(&d->used) == n * sizeof(float));
    void *huge;
    CHECK_RC(o->mem_alloc(d, d->capacity, &huge), WEFT_ENOMEM);

    /* host -> device on q1, an event, q2 waits for it with no host wait,
     * (a kernel adds 1 on q2), device -> host on q2, a report */
    float *host = malloc(n * sizeof(float));
    CHECK(host != NULL);
    for (size_t i = 0; i < n; i++) host[i] = (float)i;
    weft__dqueue *q1, *q2;
    CHECK_OK(o->queue_create(d, &q1));
    CHECK_OK(o->queue_create(d, &q2));
    CHECK(o->native_queue(q1) != NULL && o->native_queue(q1) != o->native_queue(q2));
    weft__devent *e;
    CHECK_OK(o->event_create(d, &e));
    CHECK(o->event_query(e) == 1); /* never recorded: fired */
    CHECK_OK(o->copy(q1, dev, host, n * sizeof(float)));
    CHECK_OK(o->event_record(e, q1));
    CHECK_OK(o->queue_wait(q2, e));
    float add = 0;
#ifdef WEFT_TEST_CUDA_KERNELS
    CHECK_OK(weft_test_cuda_add(o->native_queue(q2), dev, n, 1.0f));
    add = 1;
#else
    printf("  (no kernels in this build: the copy round trip alone)\n");
#endif
    memset(host, 0, n * sizeof(float));
    CHECK_OK(o->copy(q2, host, dev, n * sizeof(float)));
    atomic_store(&reports, 0);
    atomic_store(&report_status, 1);
    CHECK_OK(o->notify(q2, on_done, NULL));
    CHECK(wait_flag(&reports, 20000) == 0);
    CHECK(atomic_load(&report_status) == 0);
    for (size_t i = 0; i < n; i += 4099)
        CHECKF(host[i] == (float)i + add, "host[%zu] = %g", i, host[i]);
    CHECK_OK(weft__device_event_wait(d, e));

    /* host functions run in order; a failing one fails the next report */
    atomic_store(&host_fn_n, 0);
    atomic_store(&reports, 0);
    CHECK_OK(weft__device_launch(o, q1, host_fn, (void *)(intptr_t)1, 0));
    CHECK_OK(weft__device_launch(o, q1, host_fn, (void *)(intptr_t)13, 0));
    CHECK_OK(weft__device_launch(o, q1, host_fn, (void *)(intptr_t)2, 0));
    CHECK_OK(o->notify(q1, on_done, NULL));
    CHECK(wait_flag(&reports, 20000) == 0);
    CHECK(atomic_load(&report_status) == -13);
    CHECK(host_fn_log[0] == 1 && host_fn_log[1] == 13 && host_fn_log[2] == 2);
    atomic_store(&reports, 0);
    CHECK_OK(o->notify(q1, on_done, NULL));
    CHECK(wait_flag(&reports, 20000) == 0);
    CHECK(atomic_load(&report_status) == 0); /* reported once */

    /* many reports in flight on two queues: each once */
    atomic_store(&reports, 0);
    for (int i = 0; i < 1000; i++)
        CHECK_OK(o->notify(i % 2 ? q1 : q2, on_done, NULL));
    uint64_t end = now_ns() + 20000000000ull;
    while (atomic_load(&reports) < 1000 && now_ns() < end) sleep_ns(100000);
    CHECK(atomic_load(&reports) == 1000);

#ifdef WEFT_TEST_CUDA_KERNELS
    /* a queue destroyed with work in flight finishes it and reports first */
    atomic_store(&reports, 0);
    CHECK_OK(weft_test_cuda_spin(o->native_queue(q1), 200000000LL)); /* ~0.1 s */
    CHECK_OK(o->notify(q1, on_done, NULL));
#endif
    o->queue_destroy(q1);
#ifdef WEFT_TEST_CUDA_KERNELS
    CHECK(atomic_load(&reports) == 1);
#endif
    o->queue_destroy(q2);
    o->event_destroy(e);
    o->mem_free(d, dev, n * sizeof(float));
    CHECK(atomic_load(&d->used) == 0);
    free(host);
    weft__device_delete(d);
}

/* ---- tasks whose work runs on the GPU --------------------------------- */

typedef struct gpu_arg {
    float *dev;
    size_t n;
    atomic_int *order;
    int id;
} gpu_arg;

static int step_fn(void *arg) {
    gpu_arg *g = arg;
    if (!g->order)
        return 0;
    int expect = g->id;
    return atomic_compare_exchange_strong(g->order, &expect, g->id + 1) ? 0 : -1;
}

/* A step that queues one kernel and a completion report: no host function. */
static int kernel_body(weft_ctx *ctx, void *arg) {
    gpu_arg *g = arg;
#ifdef WEFT_TEST_CUDA_KERNELS
    if (weft_test_cuda_add(weft__test_native_queue(ctx, 1), g->dev, g->n, 1.0f) != 0)
        return -1;
#else
    (void)g;
#endif
    return weft__test_enqueued(ctx, 1);
}

/* A placed task: the kernel goes on the task's own stream. */
static int placed_body(weft_ctx *ctx, void *arg) {
    gpu_arg *g = arg;
    if (weft_ctx_gpu_count(ctx) != 1 || weft_ctx_stream(ctx, 0) == NULL)
        return -1;
#ifdef WEFT_TEST_CUDA_KERNELS
    if (weft_test_cuda_add(weft_ctx_stream(ctx, 0), g->dev, g->n, 1.0f) != 0)
        return -1;
#else
    (void)g;
#endif
    return 0;
}

/* Queue this step's work on the GPU and return at once: the task completes
 * when the GPU has done it (found by the poller, not by this worker). */
static int gpu_body(weft_ctx *ctx, void *arg) {
    gpu_arg *g = arg;
#ifdef WEFT_TEST_CUDA_KERNELS
    if (weft_test_cuda_add(weft__test_native_queue(ctx, 1), g->dev, g->n, 1.0f) != 0)
        return -1;
#endif
    return weft__test_launch(ctx, 1, step_fn, g, 0);
}

/* A chain of steps through one data handle, each adding 1 to every float of
 * dev on the GPU: spawn it, wait, copy dev back and check it holds `expect`
 * everywhere.  Microseconds per step. */
typedef struct chain_run {
    weft_runtime *rt;
    weft__device *d; /* the GPU's own handle, for the copy back */
    weft__devent *e;
    float *host, *dev;
    size_t n;
    gpu_arg *args;
    int steps;
    const weft_access *acc;
} chain_run;

static double run_chain(const chain_run *c, weft_body_fn body, const weft_placement *pl, float expect) {
    uint64_t t0 = now_ns();
    for (int i = 0; i < c->steps; i++) {
        weft_task_desc desc;
        weft_task_desc_init(&desc);
        desc.body = body;
        desc.arg = &c->args[i];
        desc.accesses = c->acc;
        desc.naccesses = 1;
        desc.placements = pl;
        desc.nplacements = pl ? 1 : 0;
        CHECK_OK(weft_spawn(c->rt, &desc, NULL));
    }
    CHECK_OK(weft_wait_all(c->rt));
    double us = (double)(now_ns() - t0) / 1e3 / c->steps;
    weft__dqueue *q = c->d->default_queue;
    CHECK_OK(c->d->ops->copy(q, c->host, c->dev, c->n * sizeof(float)));
    CHECK_OK(c->d->ops->event_record(c->e, q));
    CHECK_OK(weft__device_event_wait(c->d, c->e));
#ifdef WEFT_TEST_CUDA_KERNELS
    for (size_t i = 0; i < c->n; i += 997) CHECKF(c->host[i] == expect, "host[%zu] = %g", i, c->host[i]);
#else
    (void)expect;
#endif
    return us;
}

#ifdef WEFT_TEST_CUDA_KERNELS
/* Data on the GPU: the body adds 1 to the task's copy of the array on its
 * GPU, on its stream; a CPU task and unregister see the sums. */
static int replica_add_body(weft_ctx *ctx, void *arg) {
    size_t n = *(size_t *)arg;
    float *p = weft_ctx_data(ctx, 0);
    return p ? weft_test_cuda_add(weft_ctx_stream(ctx, 0), p, n, 1.0f) : 1;
}
static int replica_check_body(weft_ctx *ctx, void *arg) {
    const float *p = weft_ctx_data(ctx, 0), want = *(float *)arg;
    for (size_t i = 0; i < 1000; i++)
        if (p[i] != want) return 1;
    return 0;
}
static void test_replicas(void) {
    weft_runtime *rt = make_with("cpu,cuda:0", 2);
    size_t n = 1u << 20;
    float *a = calloc(n, sizeof(float));
    CHECK(a != NULL);
    weft_data *h;
    CHECK_OK(weft_data_register(rt, a, n * sizeof(float), &h));
    weft_placement gpu, cpu;
    CHECK_OK(weft_placement_parse("gpu", &gpu));
    CHECK_OK(weft_placement_parse("cpu", &cpu));
    float one = 1, three = 3;
    weft_access acc = {h, WEFT_RW};
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.accesses = &acc;
    d.naccesses = 1;
    d.nplacements = 1;
    for (int i = 0; i < 4; i++) { /* GPU +1, CPU checks 1, GPU +1, GPU +1 */
        d.body = i == 1 ? replica_check_body : replica_add_body;
        d.arg = i == 1 ? (void *)&one : (void *)&n;
        d.placements = i == 1 ? &cpu : &gpu;
        acc.mode = i == 1 ? WEFT_R : WEFT_RW;
        CHECK_OK(weft_spawn(rt, &d, NULL));
    }
    CHECK_OK(weft_wait_all(rt));
    CHECK(a[0] == 1); /* the newest value is on the GPU */
    d.body = replica_check_body;
    d.arg = &three;
    d.placements = &cpu;
    acc.mode = WEFT_R;
    CHECK_OK(weft_spawn(rt, &d, NULL));
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_unregister(h));
    CHECK(a[0] == 3 && a[n - 1] == 3);
    weft_device_info info;
    CHECK_OK(weft_device_info_get(rt, 1, &info));
    CHECK(info.memory_used == 0);
    weft_stats st;
    CHECK_OK(weft_runtime_stats(rt, &st));
    printf("  data on the GPU: %llu bytes copied\n", (unsigned long long)st.bytes_copied);
    CHECK_OK(weft_runtime_destroy(rt));
    free(a);
}
#endif

#ifdef WEFT_TEST_CUDA_KERNELS
/* Tiles on the GPU and the host: a 2 x 2 tiling with a halo of one cell,
 * tiles 0 and 3 on the GPU (2-D copies with cudaMemcpy2DAsync, halos from
 * the host's tiles), 1 and 2 on the CPU; stencil steps against a sequential
 * run, the whole array read back (reassembled) and unregistered. */
enum { TR = 64, TC = 96, TPITCH = TC * 4 + 16 };
typedef struct tstep {
    weft_tile_info ti;
    unsigned salt;
} tstep;
#define TAT(p, pitch, r, c) (*(unsigned *)((char *)(p) + (r) * (pitch) + (c) * sizeof(unsigned)))
static void tile_step_cpu(const tstep *k, const unsigned *s, size_t sp, unsigned *d, size_t dp) {
    const weft_tile_info *t = &k->ti;
    for (size_t r = t->in_row0; r < t->in_row0 + t->in_rows; r++)
        for (size_t c = t->in_col0; c < t->in_col0 + t->in_cols; c++) {
            size_t lr = r - t->row0, lc = c - t->col0;
            unsigned v = 3u * TAT(s, sp, lr, lc) + k->salt;
            if (r > 0) v += TAT(s, sp, lr - 1, lc);
            if (r + 1 < TR) v += TAT(s, sp, lr + 1, lc);
            if (c > 0) v += TAT(s, sp, lr, lc - 1);
            if (c + 1 < TC) v += TAT(s, sp, lr, lc + 1);
            TAT(d, dp, lr, lc) = v;
        }
}
static int tile_step_body(weft_ctx *ctx, void *arg) {
    const tstep *k = arg;
    const unsigned *s = weft_ctx_data(ctx, 0);
    unsigned *d = weft_ctx_data(ctx, 1);
    size_t sp = weft_ctx_pitch(ctx, 0), dp = weft_ctx_pitch(ctx, 1);
    if (weft_ctx_gpu_count(ctx) == 0) {
        tile_step_cpu(k, s, sp, d, dp);
        return 0;
    }
    const weft_tile_info *t = &k->ti;
    return weft_test_cuda_step(weft_ctx_stream(ctx, 0), s, sp, d, dp, t->row0, t->col0, t->in_row0, t->in_col0,
                               t->in_rows, t->in_cols, TR, TC, k->salt);
}
static int tile_check_body(weft_ctx *ctx, void *arg) { /* the whole array on the CPU */
    const unsigned *p = weft_ctx_data(ctx, 0), *want = arg;
    for (size_t r = 0; r < TR; r++)
        for (size_t c = 0; c < TC; c++)
            if (TAT(p, TPITCH, r, c) != want[r * TC + c]) return 1;
    return 0;
}
static void test_tiles(void) {
    weft_runtime *rt = make_with("cpu,cuda:0", 2);
    static unsigned mem[2][TR * TPITCH / 4], ref[2][TR * TC];
    for (int a = 0; a < 2; a++)
        for (size_t r = 0; r < TR; r++)
            for (size_t c = 0; c < TPITCH / 4; c++) {
                mem[a][r * (TPITCH / 4) + c] = (unsigned)(a * 7 + r * 131 + c);
                if (c < TC) ref[a][r * TC + c] = mem[a][r * (TPITCH / 4) + c];
            }
    weft_data *h[2], *tl[2][4];
    weft_tiling t = {4, TR, TC, TPITCH, 2, 2, 1};
    for (int a = 0; a < 2; a++) {
        CHECK_OK(weft_data_register(rt, mem[a], sizeof mem[a], &h[a]));
        CHECK_OK(weft_data_partition(h[a], &t, tl[a]));
    }
    weft_placement gpu, cpu;
    CHECK_OK(weft_placement_parse("gpu", &gpu));
    CHECK_OK(weft_placement_parse("cpu", &cpu));
    gpu.share = 0.25;
    enum { STEPS = 6 };
    static tstep steps[STEPS][4];
    int cur = 0;
    for (int s = 0; s < STEPS; s++) {
        for (int i = 0; i < 4; i++) {
            tstep *k = &steps[s][i];
            CHECK_OK(weft_data_tile_info(tl[cur][i], &k->ti));
            k->salt = (unsigned)s * 977u;
            weft_access acc[2] = {{tl[cur][i], WEFT_R}, {tl[1 - cur][i], WEFT_W}};
            weft_task_desc d;
            weft_task_desc_init(&d);
            d.body = tile_step_body;
            d.arg = k;
            d.accesses = acc;
            d.naccesses = 2;
            d.placements = i == 0 || i == 3 ? &gpu : &cpu;
            d.nplacements = 1;
            CHECK_OK(weft_spawn(rt, &d, NULL));
        }
        tstep whole = {{0, 0, TR, TC, 0, 0, TR, TC, 0}, (unsigned)s * 977u};
        tile_step_cpu(&whole, ref[cur], TC * 4, ref[1 - cur], TC * 4);
        cur = 1 - cur;
    }
    weft_access acc = {h[cur], WEFT_R};
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = tile_check_body;
    d.arg = ref[cur];
    d.accesses = &acc;
    d.naccesses = 1;
    d.placements = &cpu;
    d.nplacements = 1;
    weft_task *check;
    CHECK_OK(weft_spawn(rt, &d, &check));
    CHECKF(weft_task_wait(check) == 0, "tiles: the whole array differs from the sequential run (%s)",
           weft_last_error());
    weft_task_release(check);
    CHECK_OK(weft_wait_all(rt));
    weft_stats st;
    CHECK_OK(weft_runtime_stats(rt, &st));
    for (int a = 0; a < 2; a++) CHECK_OK(weft_data_unregister(h[a]));
    for (int a = 0; a < 2; a++)
        for (size_t r = 0; r < TR; r++)
            for (size_t c = 0; c < TC; c++)
                CHECKF(mem[a][r * (TPITCH / 4) + c] == ref[a][r * TC + c], "array %d (%zu, %zu) after unregister", a,
                       r, c);
    weft_device_info info;
    CHECK_OK(weft_device_info_get(rt, 1, &info));
    CHECK(info.memory_used == 0);
    printf("  tiles on the GPU and the CPU: %d steps equal to the sequential run, %llu bytes copied\n", STEPS,
           (unsigned long long)st.bytes_copied);
    CHECK_OK(weft_runtime_destroy(rt));
}
#endif

static void test_tasks(void) {
    weft_runtime *rt = make_with("cpu,cuda:0", 2);
    weft__waitset ws;
    weft__waitset_init(&ws);
    size_t n = 1u << 20;
    int steps = test_pick(2000, 200);
    weft__device *d; /* for its memory only */
    CHECK_OK(weft__cuda_new(&ws, 0, &d));
    void *dev;
    CHECK_OK(d->ops->mem_alloc(d, n * sizeof(float), &dev));
    weft__dqueue *q = d->default_queue;
    float *host = calloc(n, sizeof(float));
    CHECK(host != NULL);
    CHECK_OK(d->ops->copy(q, dev, host, n * sizeof(float)));
    weft__devent *e;
    CHECK_OK(d->ops->event_create(d, &e));
    CHECK_OK(d->ops->event_record(e, q));
    CHECK_OK(weft__device_event_wait(d, e));

    /* a chain of tasks through one data handle: each step's GPU work ends
     * before the next step starts */
    weft_data *h;
    int token = 0;
    CHECK_OK(weft_data_register(rt, &token, sizeof token, &h));
    atomic_int order = 0;
    gpu_arg *args = calloc((size_t)steps, sizeof *args);
    CHECK(args != NULL);
    weft_access acc = {h, WEFT_RW};
    for (int i = 0; i < steps; i++) args[i] = (gpu_arg){dev, n, &order, i};
    chain_run c = {rt, d, e, host, dev, n, args, steps, &acc};
    double us = run_chain(&c, gpu_body, NULL, (float)steps);
    CHECK(atomic_load(&order) == steps);
    printf("  %d dependent GPU tasks: %.1f us each (a 1 Mi-float kernel and a host function each)\n", steps, us);
    us = run_chain(&c, kernel_body, NULL, (float)(2 * steps));
    printf("  %d dependent GPU tasks: %.1f us each (a 1 Mi-float kernel each)\n", steps, us);
    /* placed on "gpu" with a quarter share: each task's kernel on its
     * stream, ordered by its predecessor's events */
    weft_placement pl;
    CHECK_OK(weft_placement_parse("gpu", &pl));
    pl.share = 0.25;
    pl.memory = 1u << 20;
    us = run_chain(&c, placed_body, &pl, (float)(3 * steps));
    weft_device_info info;
    CHECK_OK(weft_device_info_get(rt, 1, &info));
    CHECK(info.memory_used == 0);
    printf("  %d dependent placed GPU tasks: %.1f us each (a 1 Mi-float kernel on the task's stream)\n", steps, us);

    /* a failing host function on the GPU fails its task and cancels the
     * dependents */
    atomic_store(&order, 0);
    args[0] = (gpu_arg){dev, n, &order, 5}; /* expects 5: fails */
    weft_task_desc desc;
    weft_task_desc_init(&desc);
    desc.body = gpu_body;
    desc.arg = &args[0];
    desc.accesses = &acc;
    desc.naccesses = 1;
    weft_task *bad, *after;
    CHECK_OK(weft_spawn(rt, &desc, &bad));
    desc.body = test_noop;
    desc.arg = NULL;
    CHECK_OK(weft_spawn(rt, &desc, &after));
    CHECK_ERR(weft_task_wait(bad), WEFT_ETASKFAILED);
    CHECK_ERR(weft_task_wait(after), WEFT_ECANCELLED);
    weft_task_release(bad);
    weft_task_release(after);
    CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED); /* reported once, here */

#ifdef WEFT_TEST_CUDA_KERNELS
    /* destroy with GPU work in flight: waits for it, nothing lost */
    for (int i = 0; i < 4; i++) {
        args[i] = (gpu_arg){dev, n, NULL, 0};
        weft_task_desc_init(&desc);
        desc.body = gpu_body;
        desc.arg = &args[i];
        CHECK_OK(weft_spawn(rt, &desc, NULL));
    }
#endif
    CHECK_OK(weft_data_unregister(h));
    CHECK_OK(weft_runtime_destroy(rt));
    d->ops->event_destroy(e);
    d->ops->mem_free(d, dev, n * sizeof(float));
    weft__device_delete(d);
    free(args);
    free(host);
}

/* Communication over every CUDA GPU with NCCL: all-reduce
 * (sum of doubles, in place and not) and broadcast of host-registered
 * buffers, copied to each member's GPU by the data layer, against the
 * sequential result; an exchange when there are two GPUs.  Skipped (said so)
 * where NCCL cannot be loaded. */
static void test_comm(int ngpu) {
    weft_runtime *rt = make_with("cpu,cuda", 2);
    weft_comm *c = NULL;
    unsigned n = (unsigned)(ngpu < 8 ? ngpu : 8), gpus[8];
    for (unsigned k = 0; k < n; k++)
        gpus[k] = k;
    weft_comm_config cfg;
    weft_comm_config_init(&cfg);
    cfg.gpus = gpus;
    cfg.ngpus = n;
    int rc = weft_comm_create(rt, &cfg, &c);
    if (rc != 0) {
        printf("  communication: skipped (%s)\n", weft_last_error());
        CHECK_OK(weft_runtime_destroy(rt));
        return;
    }
    CHECK(weft_comm_size(c) == n);
    enum { N = 1 << 16 };
    double *x[8], *y[8];
    weft_data *dx[8], *dy[8];
    for (unsigned k = 0; k < n; k++) {
        x[k] = malloc(N * sizeof(double));
        y[k] = malloc(N * sizeof(double));
        for (unsigned i = 0; i < N; i++)
            x[k][i] = (double)(k + 1) * (i % 7) / 3.0;
        CHECK_OK(weft_data_register(rt, x[k], N * sizeof(double), &dx[k]));
        CHECK_OK(weft_data_register(rt, y[k], N * sizeof(double), &dy[k]));
    }
    weft_coll o;
    weft_coll_init(&o);
    o.op = WEFT_COLL_ALLREDUCE;
    o.type = WEFT_RED_F64 | WEFT_RED_SUM;
    o.count = N;
    o.send = dx;
    o.recv = dy;
    CHECKF(weft_comm_post(c, &o, NULL) == 0, "%s", weft_last_error());
    o.send = NULL; /* in place on x: x = sum */
    o.recv = dx;
    CHECKF(weft_comm_post(c, &o, NULL) == 0, "%s", weft_last_error());
    o.op = WEFT_COLL_BROADCAST;
    o.type = WEFT_RED_F64;
    o.root = n - 1;
    o.recv = dy; /* y = y[root] everywhere */
    CHECKF(weft_comm_post(c, &o, NULL) == 0, "%s", weft_last_error());
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_comm_destroy(c));
    for (unsigned k = 0; k < n; k++) {
        CHECK_OK(weft_data_unregister(dx[k]));
        CHECK_OK(weft_data_unregister(dy[k]));
    }
    for (unsigned k = 0; k < n; k++)
        for (unsigned i = 0; i < N; i += 97) {
            double s = 0;
            for (unsigned j = 0; j < n; j++)
                s += (double)(j + 1) * (i % 7) / 3.0;
            CHECKF(fabs(x[k][i] - s) <= 1e-12 * fabs(s) && fabs(y[k][i] - s) <= 1e-12 * fabs(s),
                   "member %u element %u: %g %g, want %g", k, i, x[k][i], y[k][i], s);
        }
    for (unsigned k = 0; k < n; k++) {
        free(x[k]);
        free(y[k]);
    }
    printf("  communication: all-reduce and broadcast over %u GPU%s (NCCL)\n", n, n == 1 ? "" : "s");
    CHECK_OK(weft_runtime_destroy(rt));
}

int main(void) {
    test_watchdog(test_pick(120, 300));
    if (!weft__test_cuda_compiled()) {
        printf("skipped: this build of Weft has no CUDA device kind (no toolkit at build time)\n");
        return TEST_SKIP;
    }
    int ngpu = weft__test_cuda_count();
    if (ngpu == 0) {
        printf("skipped: no CUDA device on this machine (the CUDA kind is compiled in)\n");
        return TEST_SKIP;
    }
    printf("%d CUDA device%s\n", ngpu, ngpu == 1 ? "" : "s");
    test_step("device strings");
    test_device_strings(ngpu);
    test_step("device layer");
    test_layer();
    test_step("tasks");
    test_tasks();
    test_step("communication");
    test_comm(ngpu);
#ifdef WEFT_TEST_CUDA_KERNELS
    test_step("data on the GPU");
    test_replicas();
    test_step("tiles on the GPU and the CPU");
    test_tiles();
#endif
    printf("test_cuda: passed\n");
    return 0;
}
