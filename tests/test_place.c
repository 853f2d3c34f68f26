/* Placement on virtual GPUs: device-set strings, placements that can never
 * run refused at spawn, each kind of device set, compute shares and memory
 * reserved and given back (after failures and cancellation too), variants,
 * multi-GPU tasks, tasks waiting for resources, the policies, a failing GPU
 * task cancelling its dependents, destroy with GPU work in flight. */
#include "check.h"
#include "testing.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static weft_runtime *make_dev(const char *devices, const char *policy) {
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = 2;
    cfg.devices = devices;
    cfg.policy = policy;
    cfg.vgpu_memory = 1u << 20;
    weft_runtime *rt = NULL;
    CHECKF(weft_runtime_create(&cfg, &rt) == 0, "%s: %s", devices, weft_last_error());
    return rt;
}

static weft_placement parsed(const char *s) {
    weft_placement p;
    memset(&p, 0x5a, sizeof p); /* parse resets it all */
    CHECKF(weft_placement_parse(s, &p) == 0, "'%s': %s", s, weft_last_error());
    return p;
}

static void test_parse(void) {
    weft_placement p = parsed("cpu");
    CHECK(p.cpu == 1 && p.gpus == 0);
    p = parsed(" gpu ");
    CHECK(p.cpu == 0 && p.gpus == 1 && p.gpu == -1 && p.share == 0 && p.memory == 0 && p.body == NULL);
    p = parsed("gpu:3");
    CHECK(p.gpus == 1 && p.gpu == 3);
    p = parsed("2*gpu");
    CHECK(p.gpus == 2 && p.gpu == -1);
    p = parsed("4xgpu");
    CHECK(p.gpus == 4);
    p = parsed("cpu+gpu:1");
    CHECK(p.cpu == 1 && p.gpus == 1 && p.gpu == 1);
    p = parsed("cpu + 2*gpu");
    CHECK(p.cpu == 1 && p.gpus == 2);
    const char *bad[] = {"", "tpu", "gpu:", "gpu:x", "0*gpu", "2*gpu:1", "cpu+", "cpu+cpu", "gpu+cpu", "99*gpu"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        weft_placement q;
        weft_placement_init(&q);
        CHECK_ERR(weft_placement_parse(bad[i], &q), WEFT_EINVAL);
        CHECKF(strstr(weft_last_error(), "not a device set") != NULL, "'%s': %s", bad[i], weft_last_error());
    }
    CHECK_ERR(weft_placement_parse(NULL, &p), WEFT_EINVAL);
}

/* What a body saw. */
typedef struct seen {
    atomic_int ran;
    unsigned variant, ngpu;
    int gpu[4];
    int body; /* which body ran */
} seen;

static void record(weft_ctx *ctx, seen *s, int body) {
    s->variant = weft_ctx_variant(ctx);
    s->ngpu = weft_ctx_gpu_count(ctx);
    for (unsigned i = 0; i < s->ngpu && i < 4; i++) s->gpu[i] = weft_ctx_gpu(ctx, i);
    s->body = body;
    atomic_store(&s->ran, 1);
}
static int body_a(weft_ctx *ctx, void *arg) { record(ctx, arg, 1); return 0; }
static int body_b(weft_ctx *ctx, void *arg) { record(ctx, arg, 2); return 0; }

static int spawn_placed(weft_runtime *rt, const weft_placement *pl, size_t n, weft_body_fn body, void *arg,
                        weft_task **out) {
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = body;
    d.arg = arg;
    d.placements = pl;
    d.nplacements = n;
    return weft_spawn(rt, &d, out);
}

static weft_task_status status_of(weft_task *t) {
    weft_task_status st;
    CHECK_OK(weft_task_status_get(t, &st));
    return st;
}

static seen run_one(weft_runtime *rt, const weft_placement *pl, size_t n) {
    static seen s;
    memset(&s, 0, sizeof s);
    weft_task *t;
    CHECK_OK(spawn_placed(rt, pl, n, body_a, &s, &t));
    CHECK_OK(weft_task_wait(t));
    weft_task_release(t);
    CHECK(atomic_load(&s.ran) == 1);
    return s;
}

static void test_refused(void) {
    weft_runtime *rt = make_dev("cpu,vgpu:2", NULL);
    weft_placement p[2];
    seen s;
    struct {
        const char *set;
        double share;
        size_t memory;
        const char *why;
        int code; /* WEFT_ENODEV: the runtime lacks it; WEFT_EINVAL: malformed */
    } bad[] = {{"4*gpu", 0, 0, "4 GPUs asked for, this runtime has 2", WEFT_ENODEV},
               {"gpu:2", 0, 0, "GPU 2 asked for", WEFT_ENODEV},
               {"gpu", 1.5, 0, "share 1.5", WEFT_EINVAL},
               {"gpu", -0.5, 0, "share -0.5", WEFT_EINVAL},
               {"gpu", 0, 2u << 20, "bytes of memory", WEFT_ENODEV}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p[0] = parsed(bad[i].set);
        p[0].share = bad[i].share;
        p[0].memory = bad[i].memory;
        CHECK_ERR(spawn_placed(rt, p, 1, body_a, &s, NULL), bad[i].code);
        CHECKF(strstr(weft_last_error(), bad[i].why) && strstr(weft_last_error(), "alternative 0"), "%s: %s",
               bad[i].set, weft_last_error());
    }
    /* both impossible: both named */
    p[0] = parsed("4*gpu");
    p[1] = parsed("gpu:7");
    CHECK_ERR(spawn_placed(rt, p, 2, body_a, &s, NULL), WEFT_ENODEV);
    CHECK(strstr(weft_last_error(), "alternative 0") && strstr(weft_last_error(), "alternative 1"));
    CHECK_ERR(spawn_placed(rt, NULL, 1, body_a, &s, NULL), WEFT_EINVAL);
    /* one possible: accepted, and that one runs */
    p[0] = parsed("4*gpu");
    p[1] = parsed("gpu:1");
    s = run_one(rt, p, 2);
    CHECK(s.variant == 1 && s.ngpu == 1 && s.gpu[0] == 2);
    CHECK_OK(weft_runtime_destroy(rt));
    /* a CPU-only runtime: any GPU set is impossible */
    rt = make_dev("cpu", NULL);
    p[0] = parsed("gpu");
    CHECK_ERR(spawn_placed(rt, p, 1, body_a, &s, NULL), WEFT_ENODEV);
    CHECK(strstr(weft_last_error(), "this runtime has 0"));
    CHECK_OK(weft_runtime_destroy(rt));
    /* unknown policy */
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.policy = "fastest";
    weft_runtime *bad_rt;
    CHECK_ERR(weft_runtime_create(&cfg, &bad_rt), WEFT_EINVAL);
    CHECK(strstr(weft_last_error(), "fastest"));
}

static void test_sets(void) {
    weft_runtime *rt = make_dev("cpu,vgpu:4", NULL);
    weft_placement p = parsed("cpu");
    seen s = run_one(rt, &p, 1);
    CHECK(s.ngpu == 0 && weft_ctx_gpu(NULL, 0) == -1);
    p = parsed("gpu");
    s = run_one(rt, &p, 1);
    CHECK(s.ngpu == 1 && s.gpu[0] >= 1 && s.gpu[0] <= 4);
    p = parsed("gpu:2");
    s = run_one(rt, &p, 1);
    CHECK(s.ngpu == 1 && s.gpu[0] == 3);
    p = parsed("3*gpu");
    s = run_one(rt, &p, 1);
    CHECK(s.ngpu == 3 && s.gpu[0] != s.gpu[1] && s.gpu[1] != s.gpu[2] && s.gpu[0] != s.gpu[2]);
    p = parsed("cpu+gpu");
    s = run_one(rt, &p, 1);
    CHECK(s.ngpu == 1);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- kernels on the task's streams ------------------------------------ */

static atomic_int started, running, max_running, kernels_done;
static int barrier_kernel(void *arg) { /* waits until *arg kernels have started */
    int want = (int)(intptr_t)arg;
    atomic_fetch_add(&started, 1);
    uint64_t end = now_ns() + 10000000000ull;
    while (atomic_load(&started) < want && now_ns() < end) sleep_ns(100000);
    atomic_fetch_add(&kernels_done, 1);
    return atomic_load(&started) >= want ? 0 : 1;
}
static int busy_kernel(void *arg) { /* 5 ms; counts how many run at once */
    int r = atomic_fetch_add(&running, 1) + 1;
    int m = atomic_load(&max_running);
    while (r > m && !atomic_compare_exchange_weak(&max_running, &m, r)) {}
    sleep_ms(5);
    atomic_fetch_sub(&running, 1);
    atomic_fetch_add(&kernels_done, 1);
    return (int)(intptr_t)arg;
}
typedef struct kq {
    int (*fn)(void *);
    intptr_t arg;
    size_t *used;      /* memory_used of its GPU seen from the body */
} kq;
static weft_runtime *g_rt;
static int queue_body(weft_ctx *ctx, void *arg) {
    kq *k = arg;
    for (unsigned i = 0; i < weft_ctx_gpu_count(ctx); i++) {
        CHECK(weft_ctx_stream(ctx, i) != NULL);
        if (weft_ctx_queue(ctx, i, k->fn, (void *)k->arg, 0) != 0) return -1;
        if (k->used) {
            weft_device_info info;
            CHECK_OK(weft_device_info_get(g_rt, (unsigned)weft_ctx_gpu(ctx, i), &info));
            *k->used = info.memory_used;
        }
    }
    return 0;
}

static void spawn_kernels(weft_runtime *rt, const char *set, double share, size_t memory, int n, kq *k) {
    weft_placement p = parsed(set);
    p.share = share;
    p.memory = memory;
    for (int i = 0; i < n; i++) CHECK_OK(spawn_placed(rt, &p, 1, queue_body, k, NULL));
}

static void test_shares_and_memory(void) {
    /* "load": a task that does not fit waits (parked).  Under "dmda" the
     * second whole-GPU task below would ride on the first instead (its
     * work queued after the holder's; test_dmda). */
    weft_runtime *rt = g_rt = make_dev("cpu,vgpu:2", "load");
    /* four quarter-GPU tasks run at once on one GPU: each kernel waits for
     * all four to have started */
    atomic_store(&started, 0);
    atomic_store(&kernels_done, 0);
    kq k = {barrier_kernel, 4, NULL};
    spawn_kernels(rt, "gpu:0", 0.25, 0, 4, &k);
    CHECK_OK(weft_wait_all(rt));
    CHECK(atomic_load(&kernels_done) == 4);
    /* half-GPU tasks: never more than two at once on the GPU */
    atomic_store(&max_running, 0);
    atomic_store(&kernels_done, 0);
    kq b = {busy_kernel, 0, NULL};
    spawn_kernels(rt, "gpu:1", 0.5, 0, 12, &b);
    CHECK_OK(weft_wait_all(rt));
    CHECK(atomic_load(&kernels_done) == 12);
    CHECKF(atomic_load(&max_running) <= 2, "%d half-GPU kernels at once", atomic_load(&max_running));
    /* memory: reserved while the task holds it, given back after; whole-GPU
     * tasks of 600 KiB on a 1 MiB GPU wait for each other */
    size_t used = 0;
    kq m = {busy_kernel, 0, &used};
    atomic_store(&max_running, 0);
    spawn_kernels(rt, "gpu:0", 0.1, 600u << 10, 6, &m);
    CHECK_OK(weft_wait_all(rt));
    CHECK(used == 600u << 10);
    CHECK(atomic_load(&max_running) == 1);
    weft_device_info info;
    CHECK_OK(weft_device_info_get(rt, 1, &info));
    CHECK(info.memory_used == 0);
    /* failures give back too, and cancel the dependents wherever they run */
    kq f = {busy_kernel, 7, NULL};
    weft_placement p = parsed("gpu:0");
    p.memory = 100000;
    weft_task *bad, *after;
    CHECK_OK(spawn_placed(rt, &p, 1, queue_body, &f, &bad));
    weft_placement q = parsed("gpu:1");
    q.memory = 100000;
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = queue_body;
    d.arg = &b;
    d.placements = &q;
    d.nplacements = 1;
    d.deps = &bad;
    d.ndeps = 1;
    CHECK_OK(weft_spawn(rt, &d, &after));
    CHECK_ERR(weft_task_wait(bad), WEFT_ETASKFAILED);
    CHECK_ERR(weft_task_wait(after), WEFT_ECANCELLED);
    weft_task_release(bad);
    weft_task_release(after);
    CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED);
    for (unsigned i = 1; i <= 2; i++) {
        CHECK_OK(weft_device_info_get(rt, i, &info));
        CHECK(info.memory_used == 0);
    }
    /* cancelled while waiting for resources: nothing kept */
    atomic_store(&started, 0);
    kq hold = {barrier_kernel, 2, NULL}; /* holds gpu:0 until a second kernel starts */
    p = parsed("gpu:0");
    p.memory = 500000;
    weft_task *holder, *waiter;
    CHECK_OK(spawn_placed(rt, &p, 1, queue_body, &hold, &holder));
    CHECK_OK(spawn_placed(rt, &p, 1, queue_body, &hold, &waiter));
    sleep_ms(20);
    CHECK(status_of(waiter) == WEFT_TASK_WAITING);
    int c = weft_task_cancel(waiter);
    CHECKF(c >= 0, "cancel: %d", c);
    atomic_fetch_add(&started, 1); /* let the holder finish */
    CHECK_OK(weft_task_wait(holder));
    int w = weft_task_wait(waiter);
    CHECKF(w == WEFT_ECANCELLED || w == 0, "waiter: %d", w);
    weft_task_release(holder);
    weft_task_release(waiter);
    int wa = weft_wait_all(rt);
    CHECK(wa == 0 || wa == WEFT_ECANCELLED);
    CHECK_OK(weft_device_info_get(rt, 1, &info));
    CHECK(info.memory_used == 0);
    CHECK_OK(weft_runtime_destroy(rt));
}


/* Shares and memory of the CPU (a placement on "cpu" alone): two tasks of
 * 0.75 never run at once, two of 0.5 may; a plain "cpu" placement reserves
 * nothing; memory beyond the host's is refused; a body that waits for a
 * child needing its share lends it meanwhile (no hang). */
static int cpu_busy_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    return busy_kernel(arg);
}
static int cpu_parent_body(weft_ctx *ctx, void *arg) {
    (void)arg;
    weft_placement p = parsed("cpu");
    p.share = 0.75;
    weft_task *child;
    if (spawn_placed(weft_ctx_runtime(ctx), &p, 1, cpu_busy_body, NULL, &child) != 0) return 9;
    int rc = weft_task_wait(child);
    weft_task_release(child);
    return rc;
}
static void test_cpu_shares(void) {
    weft_runtime *rt = make_dev("cpu", NULL); /* 2 workers */
    struct { double share; int most; } cases[] = {{0.75, 1}, {0.5, 2}, {0, 2}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        atomic_store(&max_running, 0);
        atomic_store(&kernels_done, 0);
        weft_placement p = parsed("cpu");
        p.share = cases[c].share;
        for (int i = 0; i < 12; i++) CHECK_OK(spawn_placed(rt, &p, 1, cpu_busy_body, NULL, NULL));
        CHECK_OK(weft_wait_all(rt));
        CHECK(atomic_load(&kernels_done) == 12);
        if (cases[c].most == 1)
            CHECKF(atomic_load(&max_running) == 1, "share %g: %d at once", cases[c].share, atomic_load(&max_running));
        else
            CHECKF(atomic_load(&max_running) <= 2, "share %g: %d at once", cases[c].share, atomic_load(&max_running));
    }
    /* memory: two tasks of 60% of the host's never at once */
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    size_t host = (size_t)pages * (size_t)page;
    atomic_store(&max_running, 0);
    weft_placement m = parsed("cpu");
    m.memory = host / 10 * 6;
    for (int i = 0; i < 6; i++) CHECK_OK(spawn_placed(rt, &m, 1, cpu_busy_body, NULL, NULL));
    CHECK_OK(weft_wait_all(rt));
    CHECKF(atomic_load(&max_running) == 1, "%d tasks of 60%% of the host's memory at once", atomic_load(&max_running));
    m.memory = host + 1;
    CHECK_ERR(spawn_placed(rt, &m, 1, cpu_busy_body, NULL, NULL), WEFT_ENODEV);
    CHECKF(strstr(weft_last_error(), "memory on the CPU"), "%s", weft_last_error());
    /* a parent of 0.75 waiting for its child of 0.75 */
    weft_placement pp = parsed("cpu");
    pp.share = 0.75;
    weft_task *parent;
    CHECK_OK(spawn_placed(rt, &pp, 1, cpu_parent_body, NULL, &parent));
    CHECK_OK(weft_task_wait(parent));
    weft_task_release(parent);
    CHECK_OK(weft_runtime_destroy(rt));
}

static atomic_int ran_on[5]; /* tasks run on the CPU (0) and on each GPU, by device index */
static int where_kernel(void *arg) { (void)arg; sleep_ms(2); return 0; }
static int where_body(weft_ctx *ctx, void *arg) {
    (void)arg;
    if (weft_ctx_gpu_count(ctx) == 0) {
        sleep_ms(2);
        atomic_fetch_add(&ran_on[0], 1);
        return 0;
    }
    atomic_fetch_add(&ran_on[weft_ctx_gpu(ctx, 0)], 1);
    return weft_ctx_queue(ctx, 0, where_kernel, NULL, 0);
}

static void test_variants_and_policies(void) {
    /* "load"'s first fit (the default with GPUs, "dmda", decides by
     * predicted finish instead: test_dmda) */
    weft_runtime *rt = g_rt = make_dev("cpu,vgpu:2", "load");
    /* [2*gpu, cpu]: the GPUs while free, else the CPU body */
    weft_placement p[2];
    p[0] = parsed("2*gpu");
    p[0].body = body_b;
    p[1] = parsed("cpu");
    seen s = run_one(rt, p, 2);
    CHECK(s.variant == 0 && s.body == 2 && s.ngpu == 2);
    /* while a task holds GPU 0 whole, the variant list falls to the CPU */
    atomic_store(&started, 0);
    kq hold = {barrier_kernel, 2, NULL};
    weft_placement h = parsed("gpu:0");
    weft_task *holder;
    CHECK_OK(spawn_placed(rt, &h, 1, queue_body, &hold, &holder));
    while (status_of(holder) != WEFT_TASK_ENQUEUED) sleep_ms(1);
    s = run_one(rt, p, 2);
    CHECK(s.variant == 1 && s.body == 1 && s.ngpu == 0);
    atomic_fetch_add(&started, 1);
    CHECK_OK(weft_task_wait(holder));
    weft_task_release(holder);
    CHECK_OK(weft_runtime_destroy(rt));

    /* round-robin: one-GPU tasks take the GPUs in turn */
    rt = make_dev("cpu,vgpu:4", "round-robin");
    weft_placement g = parsed("gpu");
    g.share = 0.01;
    int seen_gpu[8];
    for (int i = 0; i < 8; i++) {
        s = run_one(rt, &g, 1);
        seen_gpu[i] = s.gpu[0];
    }
    for (int i = 0; i < 8; i++) CHECKF(seen_gpu[i] == 1 + i % 4, "task %d on device %d", i, seen_gpu[i]);
    CHECK_OK(weft_runtime_destroy(rt));
    /* load: concurrent one-GPU tasks spread over the GPUs */
    rt = g_rt = make_dev("cpu,vgpu:4", "load");
    atomic_store(&started, 0);
    atomic_store(&kernels_done, 0);
    kq all4 = {barrier_kernel, 4, NULL}; /* only if all four run at once */
    spawn_kernels(rt, "gpu", 0, 0, 4, &all4);
    CHECK_OK(weft_wait_all(rt));
    CHECK(atomic_load(&kernels_done) == 4);
    CHECK_OK(weft_runtime_destroy(rt));
    /* Parla's list [cpu, gpu:0 .. gpu:3]: under "load" the CPU, first and
     * always free, takes every task; under "balance" they spread */
    for (int balance = 0; balance < 2; balance++) {
        rt = g_rt = make_dev("cpu,vgpu:4", balance ? "balance" : "load");
        weft_placement list[5];
        list[0] = parsed("cpu");
        for (int i = 0; i < 4; i++) {
            char gs[8];
            snprintf(gs, sizeof gs, "gpu:%d", i);
            list[1 + i] = parsed(gs);
            list[1 + i].share = 0.05; /* (room for all forty at once) */
        }
        for (int i = 0; i < 40; i++) CHECK_OK(spawn_placed(rt, list, 5, where_body, NULL, NULL));
        CHECK_OK(weft_wait_all(rt));
        int on[5];
        for (int d = 0; d < 5; d++) on[d] = atomic_exchange(&ran_on[d], 0);
        if (!balance) {
            CHECKF(on[0] == 40, "load: %d of 40 on the CPU", on[0]);
        } else {
            for (int d = 0; d < 5; d++) CHECKF(on[d] > 0, "balance: none on device %d (%d %d %d %d %d)", d, on[0],
                                               on[1], on[2], on[3], on[4]);
            CHECKF(on[0] < 20, "balance: %d of 40 on the CPU", on[0]);
        }
        CHECK_OK(weft_runtime_destroy(rt));
    }
}

static atomic_int multi_done[2];
static int mark0(void *a) { (void)a; sleep_ms(10); atomic_store(&multi_done[0], 1); return 0; }
static int mark1(void *a) { (void)a; sleep_ms(20); atomic_store(&multi_done[1], 1); return 0; }
static int multi_body(weft_ctx *ctx, void *arg) {
    (void)arg;
    if (weft_ctx_gpu_count(ctx) != 2 || weft_ctx_gpu(ctx, 0) == weft_ctx_gpu(ctx, 1)) return -1;
    CHECK_ERR(weft_ctx_queue(ctx, 2, mark0, NULL, 0), WEFT_EINVAL);
    if (weft_ctx_queue(ctx, 0, mark0, NULL, 0) || weft_ctx_queue(ctx, 1, mark1, NULL, 0)) return -1;
    return 0;
}

static void test_multi_gpu_and_destroy(void) {
    weft_runtime *rt = make_dev("cpu,vgpu:2", NULL);
    weft_placement p = parsed("2*gpu");
    weft_task *t;
    CHECK_OK(spawn_placed(rt, &p, 1, multi_body, NULL, &t));
    CHECK_OK(weft_task_wait(t)); /* completes when both GPUs finished */
    CHECK(atomic_load(&multi_done[0]) && atomic_load(&multi_done[1]));
    weft_task_release(t);
    /* destroy with GPU work in flight: it all runs first */
    atomic_store(&kernels_done, 0);
    kq b = {busy_kernel, 0, NULL};
    spawn_kernels(rt, "gpu", 0.25, 0, 16, &b);
    CHECK_OK(weft_runtime_destroy(rt));
    CHECK(atomic_load(&kernels_done) == 16);
}

/* ---- ordering between GPU tasks by events, without the host ----------- */

static atomic_int slow_done, body_saw, kernel_saw;
static int slow_kernel(void *a) { sleep_ms(50); atomic_store(&slow_done, 1); return (int)(intptr_t)a; }
static int check_kernel(void *a) { (void)a; atomic_store(&kernel_saw, atomic_load(&slow_done) ? 1 : 2); return 0; }
static int slow_body(weft_ctx *ctx, void *arg) { return weft_ctx_queue(ctx, 0, slow_kernel, arg, 0); }
static int after_body(weft_ctx *ctx, void *arg) {
    (void)arg;
    atomic_store(&body_saw, atomic_load(&slow_done) ? 1 : 2);
    return weft_ctx_queue(ctx, 0, check_kernel, NULL, 0);
}

/* A chain step: its kernel checks it runs i-th. */
static atomic_int chain_pos, chain_bad;
static int chain_kernel(void *a) {
    int i = (int)(intptr_t)a;
    if (atomic_load(&chain_pos) != i) atomic_store(&chain_bad, 1);
    atomic_store(&chain_pos, i + 1);
    return 0;
}
static int chain_cell[16]; /* what each step reads and writes (checking mode) */
static int chain_body(weft_ctx *ctx, void *arg) {
    weft_range rw = {chain_cell, sizeof chain_cell, WEFT_RW};
    return weft_ctx_queue_rw(ctx, 0, chain_kernel, arg, 0, &rw, 1);
}

/* Steps 0 .. n-1 of a chain through acc, each on pl. */
static void spawn_chain(weft_runtime *rt, const weft_placement *pl, const weft_access *acc, int n) {
    for (int i = 0; i < n; i++) {
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.body = chain_body;
        d.arg = (void *)(intptr_t)i;
        d.placements = pl;
        d.nplacements = 1;
        d.accesses = acc;
        d.naccesses = 1;
        CHECK_OK(weft_spawn(rt, &d, NULL));
    }
}

static void test_event_order(void) {
    weft_runtime *rt = make_dev("cpu,vgpu:2", NULL);
    /* s (GPU 1) after p (GPU 0): s's body runs while p's kernel is still
     * running (released early), and s's kernel after p's (by the event) */
    for (int fail = 0; fail < 2; fail++) {
        atomic_store(&slow_done, 0);
        atomic_store(&body_saw, 0);
        atomic_store(&kernel_saw, 0);
        weft_placement g0 = parsed("gpu:0"), g1 = parsed("gpu:1"), c = parsed("cpu");
        weft_task *p, *s, *after;
        CHECK_OK(spawn_placed(rt, &g0, 1, slow_body, (void *)(intptr_t)(fail ? 9 : 0), &p));
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.body = after_body;
        d.placements = &g1;
        d.nplacements = 1;
        d.deps = &p;
        d.ndeps = 1;
        CHECK_OK(weft_spawn(rt, &d, &s));
        d.body = test_noop; /* a CPU task after s: waits for s on the host */
        d.placements = &c;
        d.deps = &s;
        CHECK_OK(weft_spawn(rt, &d, &after));
        if (!fail) {
            CHECK_OK(weft_task_wait(after));
            CHECK_OK(weft_task_wait(s));
            CHECKF(atomic_load(&body_saw) == 2, "the dependent's body waited for the host (%d)", atomic_load(&body_saw));
            CHECK(atomic_load(&kernel_saw) == 1); /* ordered by the event */
        } else {
            /* p's kernel fails after s started: s ends cancelled, so does after */
            CHECK_ERR(weft_task_wait(p), WEFT_ETASKFAILED);
            CHECK_ERR(weft_task_wait(s), WEFT_ECANCELLED);
            CHECK_ERR(weft_task_wait(after), WEFT_ECANCELLED);
            CHECK(atomic_load(&body_saw) == 2);
            CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED);
        }
        weft_task_release(p);
        weft_task_release(s);
        weft_task_release(after);
    }
    /* a long chain over both GPUs through one data handle: in order */
    int steps = test_pick(3000, 300);
    atomic_store(&chain_pos, 0);
    atomic_store(&chain_bad, 0);
    int token = 0;
    weft_data *h;
    CHECK_OK(weft_data_register(rt, &token, sizeof token, &h));
    weft_access acc = {h, WEFT_RW};
    weft_placement any = parsed("gpu");
    any.share = 0.5;
    uint64_t t0 = now_ns();
    spawn_chain(rt, &any, &acc, steps);
    CHECK_OK(weft_wait_all(rt));
    printf("  chain of %d GPU tasks: %.1f us each\n", steps, (double)(now_ns() - t0) / 1e3 / steps);
    CHECK(atomic_load(&chain_pos) == steps && atomic_load(&chain_bad) == 0);
    CHECK_OK(weft_data_unregister(h));
    /* destroy while a chain is in flight */
    atomic_store(&chain_pos, 0);
    CHECK_OK(weft_data_register(rt, &token, sizeof token, &h));
    acc.data = h;
    spawn_chain(rt, &any, &acc, 200);
    CHECK_OK(weft_data_unregister(h));
    CHECK_OK(weft_runtime_destroy(rt));
    CHECK(atomic_load(&chain_pos) == 200 && atomic_load(&chain_bad) == 0);
}

/* ---- riding on a predecessor's reservation ------------------------------ */

static atomic_int ride_running, ride_max, ride_early_bodies, ride_fail_at;
static int ride_kernel(void *a) { /* in chain order; counts how many run at once */
    int i = (int)(intptr_t)a;
    int r = atomic_fetch_add(&ride_running, 1) + 1;
    int m = atomic_load(&ride_max);
    while (r > m && !atomic_compare_exchange_weak(&ride_max, &m, r)) {}
    if (atomic_load(&chain_pos) != i) atomic_store(&chain_bad, 1);
    sleep_ms(i == 0 ? 40 : 1);
    atomic_store(&chain_pos, i + 1);
    atomic_fetch_sub(&ride_running, 1);
    return i == atomic_load(&ride_fail_at) ? 5 : 0;
}
static size_t ride_used[8];
static int ride_body(weft_ctx *ctx, void *arg) {
    int i = (int)(intptr_t)arg;
    if (i > 0 && atomic_load(&chain_pos) == 0) atomic_fetch_add(&ride_early_bodies, 1); /* step 0 still runs */
    weft_device_info info;
    CHECK_OK(weft_device_info_get(g_rt, (unsigned)weft_ctx_gpu(ctx, 0), &info));
    if (i < 8) ride_used[i] = info.memory_used;
    return weft_ctx_queue(ctx, 0, ride_kernel, arg, 0);
}

/* n whole-GPU steps on gpu:0, each after the one before (and, with fan,
 * also a second dependent of step 0).  Returns the tasks through out. */
static void spawn_ride(weft_runtime *rt, int n, size_t memory, weft_task **out) {
    weft_placement p = parsed("gpu:0");
    p.memory = memory;
    weft_task *prev = NULL;
    for (int i = 0; i < n; i++) {
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.body = ride_body;
        d.arg = (void *)(intptr_t)i;
        d.placements = &p;
        d.nplacements = 1;
        d.deps = prev ? &prev : NULL;
        d.ndeps = prev ? 1 : 0;
        CHECK_OK(weft_spawn(rt, &d, &out[i]));
        prev = out[i];
    }
}

static void ride_reset(int fail_at) {
    atomic_store(&chain_pos, 0);
    atomic_store(&chain_bad, 0);
    atomic_store(&ride_running, 0);
    atomic_store(&ride_max, 0);
    atomic_store(&ride_early_bodies, 0);
    atomic_store(&ride_fail_at, fail_at);
    memset(ride_used, 0, sizeof ride_used);
}

static void test_riding(void) {
    weft_runtime *rt = g_rt = make_dev("cpu,vgpu:2", NULL);
    weft_device_info info;
    /* a chain of whole-GPU tasks with 300 KiB each on a 1 MiB GPU: each step
     * rides on the share of the one before, so the next bodies run while
     * step 0's kernel does; the kernels still run one at a time, in order.
     * Memory is not ridden on (both tasks' data are held at once): at most
     * three such reservations are held together. */
    enum { N = 6 };
    weft_task *t[N];
    ride_reset(-1);
    spawn_ride(rt, N, 300u << 10, t);
    CHECK_OK(weft_wait_all(rt));
    CHECK(atomic_load(&chain_pos) == N && atomic_load(&chain_bad) == 0);
    CHECK(atomic_load(&ride_max) == 1);
    CHECKF(atomic_load(&ride_early_bodies) >= 1, "no body ran before step 0's kernel finished");
    for (int i = 0; i < N; i++) {
        CHECKF(ride_used[i] >= 300u << 10 && ride_used[i] <= 900u << 10, "step %d saw %zu bytes used", i,
               ride_used[i]);
        weft_task_release(t[i]);
    }
    CHECK_OK(weft_device_info_get(rt, 1, &info));
    CHECK(info.memory_used == 0);
    /* two dependents of one task: one rides, the other waits for the GPU;
     * their kernels never overlap */
    ride_reset(-1);
    spawn_ride(rt, 2, 0, t);
    weft_placement p = parsed("gpu:0");
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = ride_body;
    d.arg = (void *)(intptr_t)1;
    d.placements = &p;
    d.nplacements = 1;
    d.deps = &t[0];
    d.ndeps = 1;
    CHECK_OK(weft_spawn(rt, &d, &t[2]));
    CHECK_OK(weft_wait_all(rt));
    CHECK(atomic_load(&ride_max) == 1);
    for (int i = 0; i < 3; i++) weft_task_release(t[i]);
    /* failures: step 0's kernel fails (its riders are cancelled), then a
     * rider's kernel fails; the GPU is whole again after each (a whole-GPU
     * task runs, no memory kept) */
    for (int fail_at = 0; fail_at <= 2; fail_at += 2) {
        ride_reset(fail_at);
        spawn_ride(rt, N, 300u << 10, t);
        CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED);
        CHECK_ERR(weft_task_wait(t[fail_at]), WEFT_ETASKFAILED);
        for (int i = 0; i < N; i++) {
            if (i < fail_at) CHECK_OK(weft_task_wait(t[i]));
            if (i > fail_at) CHECK_ERR(weft_task_wait(t[i]), WEFT_ECANCELLED);
            weft_task_release(t[i]);
        }
        CHECK_OK(weft_device_info_get(rt, 1, &info));
        CHECK(info.memory_used == 0);
        ride_reset(-1);
        spawn_ride(rt, 1, 1u << 20, t);
        CHECK_OK(weft_task_wait(t[0]));
        weft_task_release(t[0]);
    }
    /* destroy with riders in flight */
    ride_reset(-1);
    spawn_ride(rt, N, 0, t);
    for (int i = 0; i < N; i++) weft_task_release(t[i]);
    CHECK_OK(weft_runtime_destroy(rt));
    CHECK(atomic_load(&chain_pos) == N && atomic_load(&chain_bad) == 0);
}

/* ---- on_finish: each task's own outcome ---------------------------------- */

typedef struct fin {
    atomic_int calls, status, destroyed_before;
    atomic_int destroyed;
} fin;
static void fin_on_finish(void *arg, int status) {
    fin *f = arg;
    atomic_fetch_add(&f->calls, 1);
    atomic_store(&f->status, status);
    if (atomic_load(&f->destroyed)) atomic_store(&f->destroyed_before, 1);
}
static void fin_destroy(void *arg) { atomic_store(&((fin *)arg)->destroyed, 1); }
static int fin_fail_kernel(void *a) { (void)a; return 3; }
static int fin_body(weft_ctx *ctx, void *arg) {
    (void)arg;
    if (weft_ctx_gpu_count(ctx) == 0) return 7; /* the CPU alternative fails in its body */
    return weft_ctx_queue(ctx, 0, fin_fail_kernel, NULL, 0);
}

static void test_on_finish(void) {
    weft_runtime *rt = make_dev("cpu,vgpu:2", NULL);
    enum { OK, BODY_FAIL, DEVICE_FAIL, CANCELLED, N };
    fin f[N];
    memset(f, 0, sizeof f);
    weft_task *t[N];
    weft_placement cpu = parsed("cpu"), gpu = parsed("gpu");
    for (int i = 0; i < N; i++) {
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.body = i == OK ? test_noop : fin_body;
        d.arg = &f[i];
        d.arg_destroy = fin_destroy;
        d.on_finish = fin_on_finish;
        d.placements = i == DEVICE_FAIL || i == CANCELLED ? &gpu : &cpu;
        d.nplacements = 1;
        d.deps = i == CANCELLED ? &t[DEVICE_FAIL] : NULL;
        d.ndeps = i == CANCELLED ? 1 : 0;
        CHECK_OK(weft_spawn(rt, &d, &t[i]));
    }
    CHECK_OK(weft_task_wait(t[OK]));
    CHECK_ERR(weft_task_wait(t[BODY_FAIL]), WEFT_ETASKFAILED);
    CHECK_ERR(weft_task_wait(t[DEVICE_FAIL]), WEFT_ETASKFAILED);
    CHECK_ERR(weft_task_wait(t[CANCELLED]), WEFT_ECANCELLED);
    const int want[N] = {0, WEFT_ETASKFAILED, WEFT_ETASKFAILED, WEFT_ECANCELLED};
    for (int i = 0; i < N; i++) {
        /* once, with the task's own outcome, before arg_destroy, before the wait returned */
        CHECKF(atomic_load(&f[i].calls) == 1, "task %d: on_finish called %d times", i, atomic_load(&f[i].calls));
        CHECKF(atomic_load(&f[i].status) == want[i], "task %d: status %d", i, atomic_load(&f[i].status));
        CHECK(atomic_load(&f[i].destroyed) && !atomic_load(&f[i].destroyed_before));
        weft_task_release(t[i]);
    }
    CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- checking mode at the task level ---------------------------------- */

static unsigned char cbuf[2][256];
static atomic_int cwriter_started;
static atomic_int cwriter_release; /* the writer holds its stream until set */
static int cwrite_kernel(void *arg) {
    atomic_store(&cwriter_started, 1);
    /* Still running (not reported to the host) when the unordered reader
     * starts, whatever the machine's load: the host cannot have ordered it. */
    if (wait_flag(&cwriter_release, 20000) != 0) return 5;
    memset(arg, 3, 256);
    return 0;
}
static int cread_kernel(void *arg) { return ((unsigned char *)arg)[0] == 3 ? 0 : 4; }
static int cwrite_body(weft_ctx *ctx, void *arg) {
    weft_range w = {arg, 256, WEFT_W};
    return weft_ctx_queue_rw(ctx, 0, cwrite_kernel, arg, 0, &w, 1);
}
static int cread_body(weft_ctx *ctx, void *arg) {
    weft_range r = {arg, 256, WEFT_R};
    return weft_ctx_queue_rw(ctx, 0, cread_kernel, arg, 0, &r, 1);
}
/* The planted bug: reads what a task it does not depend on is writing. */
static int cread_unordered_body(weft_ctx *ctx, void *arg) {
    if (wait_flag(&cwriter_started, 20000) != 0) return -1;
    return cread_body(ctx, arg);
}

static void test_check_mode(void) {
    CHECK(setenv("WEFT_VGPU_CHECK", "1", 1) == 0);
    weft_runtime *rt = make_dev("cpu,vgpu:2", NULL);
    unsetenv("WEFT_VGPU_CHECK");
    weft_placement g0 = parsed("gpu:0"), g1 = parsed("gpu:1");
    /* a dependency orders them (by the writer's event): fine */
    weft_task *w, *r;
    atomic_store(&cwriter_release, 1);
    CHECK_OK(spawn_placed(rt, &g0, 1, cwrite_body, cbuf[0], &w));
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = cread_body;
    d.arg = cbuf[0];
    d.placements = &g1;
    d.nplacements = 1;
    d.deps = &w;
    d.ndeps = 1;
    CHECK_OK(weft_spawn(rt, &d, &r));
    CHECK_OK(weft_task_wait(r));
    weft_task_release(w);
    weft_task_release(r);
    /* no dependency: caught, whatever the timing */
    atomic_store(&cwriter_started, 0);
    atomic_store(&cwriter_release, 0);
    CHECK_OK(spawn_placed(rt, &g0, 1, cwrite_body, cbuf[1], &w));
    CHECK_OK(spawn_placed(rt, &g1, 1, cread_unordered_body, cbuf[1], &r));
    int rr = weft_task_wait(r);
    atomic_store(&cwriter_release, 1);
    CHECK_OK(weft_task_wait(w));
    CHECK_RC(rr, WEFT_ETASKFAILED);
    char msg[320];
    weft__test_vcheck_last(msg, sizeof msg);
    CHECKF(strstr(msg, "not ordered after") != NULL, "message: %s", msg);
    weft_task_release(w);
    weft_task_release(r);
    CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED);
    CHECK_OK(weft_runtime_destroy(rt));
}

static int noop_kernel(void *a) { (void)a; return 0; }
static int traced_body(weft_ctx *ctx, void *arg) {
    record(ctx, arg, 2);
    for (unsigned i = 0; i < weft_ctx_gpu_count(ctx); i++)
        if (weft_ctx_queue(ctx, i, noop_kernel, NULL, 1000) != 0) return -1;
    return 0;
}

/* The trace names the variant and the devices of each placed task, and has
 * a track per stream with its kernels. */
static void test_trace(void) {
    const char *path = "test_place_trace.json";
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = 1;
    cfg.devices = "cpu,vgpu:2";
    cfg.trace_path = path;
    weft_runtime *rt;
    CHECK_OK(weft_runtime_create(&cfg, &rt));
    weft_placement p[2];
    p[0] = parsed("4*gpu"); /* impossible here: skipped */
    p[1] = parsed("2*gpu");
    p[1].body = traced_body;
    seen s;
    weft_task *t;
    CHECK_OK(spawn_placed(rt, p, 2, body_a, &s, &t));
    CHECK_OK(weft_task_wait(t));
    weft_task_release(t);
    CHECK_OK(weft_runtime_destroy(rt));
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    remove(path);
    CHECKF(strstr(buf, "\"variant\":1,\"devices\":\"vgpu:") != NULL, "trace: %s", buf);
    CHECK(strstr(buf, "+vgpu:") != NULL);
    /* a track per stream, and the two kernels (one per GPU) on them */
    CHECK(strstr(buf, "\"name\":\"vgpu:0 stream 0\"") && strstr(buf, "\"name\":\"vgpu:1 stream 3\""));
    char *k1 = strstr(buf, "\"name\":\"kernel\",\"cat\":\"device\"");
    CHECK(k1 && strstr(k1 + 1, "\"name\":\"kernel\",\"cat\":\"device\""));
}

/* ---- random graphs of CPU, GPU, 2-GPU and variant tasks ----------------
 * against a sequential model: each task's work (its kernel, or its body on
 * the CPU) must come after the work of every dependency, a task that ran
 * must have dependencies that all ran, and the final statuses must be the
 * model's: cancelled if a dependency did not complete, else failed if its
 * work failed (a kernel's return, after the body returned: the path of a
 * GPU predecessor failing after an early-released dependent started), else
 * completed. */

enum { K_CPU, K_GPU, K_GPU2, K_GPUI, K_VARIANT, K_KINDS };
#define SMAX_DEPS 3

typedef struct snode {
    int kind, ndeps, deps[SMAX_DEPS], fails;
    weft_placement pl[2];
    struct snode *all;
    atomic_int done;    /* its work ran */
    atomic_int bad;     /* its work ran before a dependency's */
} snode;

static void work(snode *n) {
    for (int k = 0; k < n->ndeps; k++)
        if (!atomic_load(&n->all[n->deps[k]].done)) atomic_store(&n->bad, 1);
    atomic_store(&n->done, 1);
}
static int s_kernel(void *arg) {
    snode *n = arg;
    work(n);
    return n->fails ? 3 : 0;
}
static int s_kernel_second(void *arg) { /* the 2-GPU task's other GPU */
    snode *n = arg;
    for (int k = 0; k < n->ndeps; k++)
        if (!atomic_load(&n->all[n->deps[k]].done)) atomic_store(&n->bad, 1);
    return 0;
}
static int s_body(weft_ctx *ctx, void *arg) {
    snode *n = arg;
    unsigned g = weft_ctx_gpu_count(ctx);
    if (g == 0) { /* on the CPU: the work is the body */
        work(n);
        return n->fails ? 3 : 0;
    }
    for (unsigned i = 0; i < g; i++)
        if (weft_ctx_queue(ctx, i, i == 0 ? s_kernel : s_kernel_second, n, 0) != 0) return -1;
    return 0;
}

static void stress_one(uint64_t seed, int ntasks) {
    test_rng r = {seed};
    snode *nodes = calloc((size_t)ntasks, sizeof *nodes);
    weft_task **h = calloc((size_t)ntasks, sizeof *h);
    int *expect = calloc((size_t)ntasks, sizeof *expect);
    CHECK(nodes && h && expect);
    weft_runtime *rt = make_dev("cpu,vgpu:3", rng_below(&r, 2) ? NULL : "round-robin");
    for (int i = 0; i < ntasks; i++) {
        snode *n = &nodes[i];
        n->all = nodes;
        n->kind = (int)rng_below(&r, K_KINDS);
        n->fails = rng_below(&r, 40) == 0;
        n->ndeps = i ? (int)rng_below(&r, SMAX_DEPS + 1) : 0;
        for (int k = 0; k < n->ndeps; k++) n->deps[k] = (int)rng_below(&r, (uint32_t)i);
        static const char *const sets[] = {"cpu", "gpu", "2*gpu", "gpu:1", "gpu"};
        weft_placement_init(&n->pl[0]);
        CHECK_OK(weft_placement_parse(sets[n->kind], &n->pl[0]));
        n->pl[0].share = (double)(1 + rng_below(&r, 4)) / 4;
        n->pl[0].memory = rng_below(&r, 3) * 100000;
        CHECK_OK(weft_placement_parse("cpu", &n->pl[1]));
        weft_task *deps[SMAX_DEPS];
        for (int k = 0; k < n->ndeps; k++) deps[k] = h[n->deps[k]];
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.body = s_body;
        d.arg = n;
        d.deps = deps;
        d.ndeps = (size_t)n->ndeps;
        d.placements = n->kind == K_CPU ? NULL : n->pl;
        d.nplacements = n->kind == K_CPU ? 0 : n->kind == K_VARIANT ? 2 : 1;
        CHECK_OK(weft_spawn(rt, &d, &h[i]));
        /* the model, in spawn order */
        int st = WEFT_TASK_COMPLETED;
        for (int k = 0; k < n->ndeps; k++)
            if (expect[n->deps[k]] != WEFT_TASK_COMPLETED) st = WEFT_TASK_CANCELLED;
        if (st == WEFT_TASK_COMPLETED && n->fails) st = WEFT_TASK_FAILED;
        expect[i] = st;
    }
    int w = weft_wait_all(rt);
    CHECK(w == 0 || w == WEFT_ETASKFAILED);
    for (int i = 0; i < ntasks; i++) {
        weft_task_status st;
        CHECK_OK(weft_task_status_get(h[i], &st));
        CHECKF((int)st == expect[i], "seed %llu task %d (kind %d, fails %d): status %d, the model says %d",
               (unsigned long long)seed, i, nodes[i].kind, nodes[i].fails, (int)st, expect[i]);
        CHECKF(!atomic_load(&nodes[i].bad), "seed %llu task %d: its work ran before a dependency's",
               (unsigned long long)seed, i);
        if (atomic_load(&nodes[i].done))
            for (int k = 0; k < nodes[i].ndeps; k++)
                CHECK(atomic_load(&nodes[nodes[i].deps[k]].done));
        if (st == WEFT_TASK_COMPLETED || st == WEFT_TASK_FAILED)
            CHECK(atomic_load(&nodes[i].done));
        weft_task_release(h[i]);
    }
    for (unsigned dv = 1; dv < weft_device_count(rt); dv++) {
        weft_device_info info;
        CHECK_OK(weft_device_info_get(rt, dv, &info));
        CHECK(info.memory_used == 0);
    }
    CHECK_OK(weft_runtime_destroy(rt));
    free(nodes);
    free(h);
    free(expect);
}

static int stress(void) {
    test_watchdog(test_pick(120, 300));
    test_step("random graphs");
    int seeds = test_pick(30, 10), ntasks = test_pick(1500, 300);
    uint64_t t0 = now_ns();
    for (int s = 0; s < seeds; s++) stress_one(0x9e3779b97f4a7c15ull * (uint64_t)(s + 1), ntasks);
    printf("test_place stress: ok (%d graphs of %d tasks, %.1f s)\n", seeds, ntasks, (double)(now_ns() - t0) / 1e9);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "stress") == 0)
        return stress();
    test_watchdog(test_pick(60, 240));
    test_step("parse");
    test_parse();
    test_step("refused");
    test_refused();
    test_step("device sets");
    test_sets();
    test_step("shares and memory");
    test_shares_and_memory();
    test_step("shares and memory of the CPU");
    test_cpu_shares();
    test_step("variants and policies");
    test_variants_and_policies();
    test_step("event order");
    test_event_order();
    test_step("riding");
    test_riding();
    test_step("on_finish");
    test_on_finish();
    test_step("checking mode");
    test_check_mode();
    test_step("event order, checked");
    CHECK(setenv("WEFT_VGPU_CHECK", "1", 1) == 0);
    test_event_order(); /* every step's read of the chain's cell is ordered */
    unsetenv("WEFT_VGPU_CHECK");
    test_step("trace");
    test_trace();
    test_step("multi-GPU, destroy");
    test_multi_gpu_and_destroy();
    printf("test_place: ok\n");
    return 0;
}
