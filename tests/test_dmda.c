/* The earliest-finish policy ("dmda") on virtual GPUs, over kinds whose
 * best device is known: a kind modelled ten times faster on GPUs goes to
 * them once calibrated; a kind with only a CPU alternative stays there;
 * a task whose large data is on GPU 2 goes to GPU 2.  Models persist:
 * a second runtime decides from the first one's (no calibration), and a
 * corrupt model file is ignored with a warning.  A GPU task's model learns
 * what its kernels ran, whatever else delays its completion. */
#include "check.h"
#include "testing.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char dir[256];

static weft_runtime *make(void) {
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = 2;
    cfg.devices = "cpu,vgpu:4";
    cfg.policy = "dmda";
    cfg.vgpu_memory = 256u << 20;
    weft_runtime *rt = NULL;
    CHECKF(weft_runtime_create(&cfg, &rt) == 0, "%s", weft_last_error());
    return rt;
}

static void sleep_us(unsigned us) {
    struct timespec ts = {0, (long)us * 1000};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static uint64_t g_gpu_ns = 2000000; /* a GPU body's kernel */

/* Where each task ran: -1 the CPU, else its GPU. */
static _Atomic int on_gpu[64], on_cpu;

static int cpu_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    atomic_fetch_add(&on_cpu, 1);
    sleep_us(20000); /* ten times the GPU's */
    return 0;
}

static int empty(void *arg) {
    (void)arg;
    return 0;
}

static int gpu_body(weft_ctx *ctx, void *arg) {
    (void)arg;
    atomic_fetch_add(&on_gpu[weft_ctx_gpu(ctx, 0) - 1], 1);
    return weft_ctx_queue(ctx, 0, empty, NULL, g_gpu_ns);
}

static void reset(void) {
    for (int g = 0; g < 64; g++)
        atomic_store(&on_gpu[g], 0);
    atomic_store(&on_cpu, 0);
}

static int gpus_total(void) {
    int n = 0;
    for (int g = 0; g < 64; g++)
        n += atomic_load(&on_gpu[g]);
    return n;
}

static double g_cost; /* weft_task_desc.cost of the waves' tasks */

/* n independent tasks of `kind` with alternatives `where` (bodies by kind
 * of device), then a wait. */
static void wave(weft_runtime *rt, const char *kind, const char *const *where, size_t nw, int n,
                 const weft_access *acc, size_t nacc) {
    weft_placement pl[2];
    for (size_t i = 0; i < nw; i++) {
        CHECK_OK(weft_placement_parse(where[i], &pl[i]));
        pl[i].body = pl[i].gpus ? gpu_body : cpu_body;
    }
    for (int i = 0; i < n; i++) {
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.placements = pl;
        d.nplacements = nw;
        d.kind = kind;
        d.cost = g_cost;
        d.accesses = acc;
        d.naccesses = nacc;
        CHECK_OK(weft_spawn(rt, &d, NULL));
    }
    CHECK_OK(weft_wait_all(rt));
}

static weft_stats stats(weft_runtime *rt) {
    weft_stats s;
    CHECK_OK(weft_runtime_stats(rt, &s));
    return s;
}

static const char *both[] = {"cpu", "gpu"};
static const char *cpu_only[] = {"cpu"};

static void test_first_run(void) {
    weft_runtime *rt = make();
    /* calibration: some on each kind of device */
    reset();
    for (int w = 0; w < 4; w++)
        wave(rt, "fast_on_gpu", both, 2, 8, NULL, 0);
    printf("  calibrating: %d on the CPU, %d on GPUs\n", atomic_load(&on_cpu), gpus_total());
    CHECK(atomic_load(&on_cpu) >= 3 && gpus_total() >= 3);
    double on_cpu_ns = 0, on_gpu_ns = 0, ns;
    CHECK(weft_runtime_predict(rt, "fast_on_gpu", 0, 0, &on_cpu_ns) == 1);
    CHECK(weft_runtime_predict(rt, "fast_on_gpu", 1, 0, &on_gpu_ns) == 1);
    printf("  predicted: %.1f ms on the CPU, %.1f ms on a GPU\n", on_cpu_ns / 1e6, on_gpu_ns / 1e6);
    CHECK(on_cpu_ns > 3 * on_gpu_ns); /* (ten times, less what a loaded machine adds to both) */
    CHECK(weft_runtime_predict(rt, "never_seen", 1, 0, &ns) == 0);
    /* calibrated: on GPUs (a GPU runs ten in the time the CPU runs one) */
    reset();
    wave(rt, "fast_on_gpu", both, 2, 8, NULL, 0);
    printf("  calibrated: %d on the CPU, %d on GPUs\n", atomic_load(&on_cpu), gpus_total());
    CHECK(atomic_load(&on_cpu) == 0 && gpus_total() == 8);
    /* only on the CPU */
    reset();
    wave(rt, "cpu_kind", cpu_only, 1, 4, NULL, 0);
    CHECK(atomic_load(&on_cpu) == 4 && gpus_total() == 0);
    /* data on GPU 2 (its only valid copy there, 64 MiB over links
     * modelled at 1 GB/s: moving it costs 67 ms, far more than waiting
     * for GPU 2's 0.2 ms kernels, even as a loaded machine stretches
     * them) */
    g_gpu_ns = 200000;
    size_t big = 64u << 20;
    char *buf = malloc(big);
    CHECK(buf != NULL);
    memset(buf, 1, big);
    weft_data *h;
    CHECK_OK(weft_data_register(rt, buf, big, &h));
    const char *gpu2[] = {"gpu:2"}, *any[] = {"gpu"};
    weft_access w = {h, WEFT_RW};
    reset();
    wave(rt, "writer", gpu2, 1, 1, &w, 1);
    CHECK(atomic_load(&on_gpu[2]) == 1);
    weft_access r = {h, WEFT_R};
    reset();
    for (int i = 0; i < 4; i++) /* calibrates on whichever GPU first; then by the data */
        wave(rt, "reader", any, 1, 1, &r, 1);
    reset();
    wave(rt, "reader", any, 1, 3, &r, 1);
    printf("  readers of GPU 2's data: %d %d %d %d\n", atomic_load(&on_gpu[0]), atomic_load(&on_gpu[1]),
           atomic_load(&on_gpu[2]), atomic_load(&on_gpu[3]));
    CHECK(atomic_load(&on_gpu[2]) == 3);
    CHECK_OK(weft_data_unregister(h));
    free(buf);
    g_gpu_ns = 2000000;
    weft_stats s = stats(rt);
    CHECK(s.model_calibrating > 0 && s.model_hits > 0);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* Costs: tasks of a kind never seen, with a cost, are predicted from the
 * time per unit of cost tasks with a cost took on each kind of device,
 * instead of calibrating; a negative or NaN cost is refused. */
static void test_costs(void) {
    weft_runtime *rt = make();
    g_cost = 1e6;
    for (int w = 0; w < 4; w++) /* the rates: CPU 20 ns, GPU 2 ns per unit */
        wave(rt, "rated", both, 2, 8, NULL, 0);
    weft_stats before = stats(rt);
    reset();
    wave(rt, "hinted", both, 2, 8, NULL, 0); /* a new kind: no calibration */
    weft_stats after = stats(rt);
    printf("  a new kind with a cost: %d on the CPU, %d on GPUs; %llu calibrating\n", atomic_load(&on_cpu),
           gpus_total(), (unsigned long long)(after.model_calibrating - before.model_calibrating));
    CHECK(after.model_calibrating == before.model_calibrating && after.model_fits >= before.model_fits + 8);
    CHECK(atomic_load(&on_cpu) == 0 && gpus_total() == 8);
    g_cost = 0;
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = cpu_body;
    for (int i = 0; i < 2; i++) {
        d.cost = i ? -1.0 : 0.0 / 0.0;
        CHECK_ERR(weft_spawn(rt, &d, NULL), WEFT_EINVAL);
        CHECKF(strstr(weft_last_error(), "cost") != NULL, "%s", weft_last_error());
    }
    CHECK_OK(weft_runtime_destroy(rt));
}

/* A task on two GPUs at once goes to the two with the least decided on
 * them, and its data's GPU among them. */
static _Atomic int pair_seen[64];
static int pair_body(weft_ctx *ctx, void *arg) {
    (void)arg;
    atomic_fetch_add(&pair_seen[weft_ctx_gpu(ctx, 0) - 1], 1);
    atomic_fetch_add(&pair_seen[weft_ctx_gpu(ctx, 1) - 1], 1);
    CHECK_OK(weft_ctx_queue(ctx, 0, empty, NULL, 200000));
    return weft_ctx_queue(ctx, 1, empty, NULL, 200000);
}

static void test_two_gpus(void) {
    weft_runtime *rt = make();
    weft_placement two;
    CHECK_OK(weft_placement_parse("2*gpu", &two));
    two.body = pair_body;
    for (int i = 0; i < 16; i++) {
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.placements = &two;
        d.nplacements = 1;
        d.kind = "pair";
        CHECK_OK(weft_spawn(rt, &d, NULL));
    }
    CHECK_OK(weft_wait_all(rt));
    printf("  16 two-GPU tasks: %d %d %d %d\n", atomic_load(&pair_seen[0]), atomic_load(&pair_seen[1]),
           atomic_load(&pair_seen[2]), atomic_load(&pair_seen[3]));
    for (int g = 0; g < 4; g++) /* spread: each GPU takes some */
        CHECKF(atomic_load(&pair_seen[g]) >= 2, "GPU %d ran %d", g, atomic_load(&pair_seen[g]));
    CHECK_OK(weft_runtime_destroy(rt));
}

static void test_second_run(void) {
    weft_runtime *rt = make();
    reset();
    wave(rt, "fast_on_gpu", both, 2, 8, NULL, 0);
    weft_stats s = stats(rt);
    printf("  second run: %d on the CPU, %d on GPUs; %llu calibrating, %llu hits\n", atomic_load(&on_cpu),
           gpus_total(), (unsigned long long)s.model_calibrating, (unsigned long long)s.model_hits);
    CHECK(s.model_calibrating == 0 && s.model_hits == 8);
    CHECK(atomic_load(&on_cpu) == 0 && gpus_total() == 8);
    CHECK_OK(weft_runtime_destroy(rt));
}

static void test_corrupt_file(void) {
    char host[128] = "localhost", path[512];
    CHECK(gethostname(host, sizeof host - 1) == 0);
    snprintf(path, sizeof path, "%s/%s.models", dir, host);
    FILE *f = fopen(path, "r");
    CHECKF(f != NULL, "no model file at %s", path);
    fclose(f);
    f = fopen(path, "w");
    CHECK(f != NULL);
    fputs("# weft performance models 1\nfast_on_gpu\tvgpu\tnot a number\n\x01\x02\n", f);
    fclose(f);
    fprintf(stderr, "  (a warning about %s is expected next)\n", path);
    weft_runtime *rt = make();
    reset();
    wave(rt, "fast_on_gpu", both, 2, 8, NULL, 0);
    weft_stats s = stats(rt);
    CHECK(s.model_calibrating > 0); /* learned again */
    CHECK_OK(weft_runtime_destroy(rt));
    f = fopen(path, "r"); /* and written over, whole */
    CHECK(f != NULL);
    char line[128];
    CHECK(fgets(line, sizeof line, f) && strcmp(line, "# weft performance models 1\n") == 0);
    fclose(f);
}

/* n tasks of `kind` on GPU 0, each with `share` of it, then a wait. */
static void on_gpu0(weft_runtime *rt, const char *kind, double share, int n) {
    weft_placement pl;
    CHECK_OK(weft_placement_parse("gpu:0", &pl));
    pl.body = gpu_body;
    pl.share = share;
    for (int i = 0; i < n; i++) {
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.placements = &pl;
        d.nplacements = 1;
        d.kind = kind;
        CHECK_OK(weft_spawn(rt, &d, NULL));
    }
    CHECK_OK(weft_wait_all(rt));
}

/* A GPU task's time, for its model, is what its kernels ran on the GPU:
 * kernels running beside others (four at once, each on a quarter of the
 * GPU) each count whole, and a task whose completion is reported late (a
 * recorder held up on the host) counts no more than its kernel. */
static void test_device_time(void) {
    weft_runtime *rt = make();
    g_gpu_ns = 4000000;
    on_gpu0(rt, "beside", 0.25, 8);
    double ns = 0;
    CHECK(weft_runtime_predict(rt, "beside", 1, 0, &ns) == 1);
    printf("  four at once, 4 ms kernels: model %.2f ms\n", ns * 1e-6);
    CHECK(ns >= 3.9e6 && ns < 40e6);

    g_gpu_ns = 2000000;
    weft__test_vgpu_record_delay(60000000);
    uint64_t t0 = now_ns();
    on_gpu0(rt, "held_up", 1.0, 1);
    uint64_t took = now_ns() - t0;
    CHECK(weft_runtime_predict(rt, "held_up", 1, 0, &ns) == 1);
    printf("  completion held up: took %.1f ms, 2 ms kernel: model %.2f ms\n", (double)took * 1e-6, ns * 1e-6);
    CHECK(took >= 60000000); /* (the hold-up happened) */
    CHECK(ns >= 1.9e6 && ns < 30e6);
    g_gpu_ns = 2000000;
    CHECK_OK(weft_runtime_destroy(rt));
}

/* weft_runtime_policy: the policy in use, the default resolved. */
static void test_policy_name(void) {
    static const struct { const char *devices, *policy, *want; } cases[] = {
        {"cpu", NULL, "load"}, {"cpu,vgpu:1", NULL, "dmda"}, {"cpu,vgpu:1", "load", "load"}, {"cpu", "dmda", "dmda"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        weft_config cfg;
        weft_config_init(&cfg);
        cfg.workers = 1;
        cfg.devices = cases[i].devices;
        cfg.policy = cases[i].policy;
        weft_runtime *rt = NULL;
        CHECKF(weft_runtime_create(&cfg, &rt) == 0, "%s", weft_last_error());
        const char *name = NULL;
        CHECK_OK(weft_runtime_policy(rt, &name));
        CHECKF(name && strcmp(name, cases[i].want) == 0, "%s, policy %s: \"%s\", not \"%s\"", cases[i].devices,
               cases[i].policy ? cases[i].policy : "(default)", name ? name : "(null)", cases[i].want);
        CHECK_ERR(weft_runtime_policy(rt, NULL), WEFT_EINVAL);
        CHECK_OK(weft_runtime_destroy(rt));
    }
    const char *name = NULL;
    CHECK_ERR(weft_runtime_policy(NULL, &name), WEFT_EINVAL);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/weft-test-dmda-%ld", (long)getpid());
    setenv("WEFT_PERFMODEL_DIR", dir, 1);
    setenv("WEFT_VGPU_HOST_GBPS", "1", 1);
    setenv("WEFT_VGPU_PEER_GBPS", "1", 1);
    unsetenv("WEFT_PERFMODEL");
    unsetenv("WEFT_POLICY"); /* (the defaults are tested) */
    test_watchdog(test_pick(60, 240));
    test_step("policy name");
    test_policy_name();
    test_step("first run");
    test_first_run();
    test_step("second run");
    test_second_run();
    test_step("costs");
    test_costs();
    test_step("two GPUs");
    test_two_gpus();
    test_step("device time");
    test_device_time();
    test_step("corrupt file");
    test_corrupt_file();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return 0;
}
