/* The makespan's lower bound (weft_runtime_bound) over the task graph
 * recorded while weft_config.bound is on.  Every check is exact arithmetic
 * on the runtime's own predictions (weft_runtime_predict) or a lower
 * bound that holds by construction (a task's observed time is at least its
 * sleep; the bound is at most the makespan): no check depends on how fast
 * the machine is.
 *   chain     a chain (through data) of one kind on the CPU: the path is
 *             the sum of the predictions, the area the sum over the slots
 *   indep     independent tasks on cpu,vgpu:2: the area is the two-class
 *             formula's, and the bound lies between it and the makespan
 *   off       recording off: the documented error; bad configurations
 *   nomodel   a task without placements (no model): its observed time
 *   rated     a kind with a cost never run on the CPU: timed there at the
 *             rate per unit of cost (no task without a model)
 *   space     a dependency through a task-space placeholder is kept
 *   print     WEFT_BOUND_PRINT: destroy's line on stderr
 *   lost      a record that could not be allocated: the bound refuses
 */
#include "check.h"
#include "testing.h"

#include <fcntl.h>
#include <math.h>

static weft_runtime *make(const char *devices, unsigned bound) {
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = 2;
    cfg.devices = devices;
    cfg.policy = "dmda";
    cfg.vgpu_memory = 64u << 20;
    cfg.bound = bound;
    weft_runtime *rt = NULL;
    CHECKF(weft_runtime_create(&cfg, &rt) == 0, "%s", weft_last_error());
    return rt;
}

static void sleep_us(unsigned us) {
    struct timespec ts = {(time_t)(us / 1000000u), (long)(us % 1000000u) * 1000};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static int cpu_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    sleep_us((unsigned)(uintptr_t)arg);
    return 0;
}

static int empty(void *arg) {
    (void)arg;
    return 0;
}

static int gpu_body(weft_ctx *ctx, void *arg) {
    return weft_ctx_queue(ctx, 0, empty, NULL, (uint64_t)(uintptr_t)arg * 1000u);
}

/* A task of `kind` (NULL: no placements, a plain CPU task) sleeping us on
 * the CPU (and, where "gpu" is allowed, a kernel of us on the GPU). */
static weft_task *spawn(weft_runtime *rt, const char *kind, bool gpu, unsigned us, const weft_access *acc,
                        size_t nacc, weft_task *const *deps, size_t ndeps, weft_space *s, int64_t key) {
    weft_placement pl[2];
    CHECK_OK(weft_placement_parse("cpu", &pl[0]));
    pl[0].body = cpu_body;
    if (gpu) {
        CHECK_OK(weft_placement_parse("gpu", &pl[1]));
        pl[1].body = gpu_body;
    }
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = cpu_body;
    d.arg = (void *)(uintptr_t)us;
    d.kind = kind;
    d.placements = kind ? pl : NULL;
    d.nplacements = kind ? (gpu ? 2 : 1) : 0;
    d.accesses = acc;
    d.naccesses = nacc;
    d.deps = deps;
    d.ndeps = ndeps;
    weft_task *t = NULL;
    if (s)
        CHECK_OK(weft_space_spawn(s, &key, 1, &d, &t));
    else
        CHECK_OK(weft_spawn(rt, &d, &t));
    return t;
}

static double predict(weft_runtime *rt, const char *kind, unsigned dev, size_t bytes) {
    double ns = 0;
    int how = weft_runtime_predict(rt, kind, dev, bytes, &ns);
    CHECKF(how == 1, "no history of %s on device %u at %zu bytes (%d)", kind, dev, bytes, how);
    return ns * 1e-9;
}

static bool near(double a, double b) { return fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b)) + 1e-15; }

static weft_bound bound_of(weft_runtime *rt) {
    weft_bound b;
    memset(&b, 0xff, sizeof b);
    CHECKF(weft_runtime_bound(rt, &b) == 0, "%s", weft_last_error());
    CHECKF(b.bound <= b.makespan, "bound %.9f s > makespan %.9f s", b.bound, b.makespan);
    CHECK(b.bound == fmax(b.path, b.area));
    return b;
}

static void test_chain(void) {
    weft_runtime *rt = make("cpu", WEFT_BOUND_RECORD);
    static char buf[4096];
    weft_data *d;
    CHECK_OK(weft_data_register(rt, buf, sizeof buf, &d));
    weft_access rw = {d, WEFT_RW};
    enum { N = 8 };
    for (int i = 0; i < N; i++)
        weft_task_release(spawn(rt, "chain", false, 2000, &rw, 1, NULL, 0, NULL, 0));
    CHECK_OK(weft_wait_all(rt));
    double t = predict(rt, "chain", 0, sizeof buf);
    weft_bound b = bound_of(rt);
    CHECK(b.tasks == N && b.pending == 0 && b.no_model == 0);
    CHECK(b.cpu_slots == 2 && b.gpus == 0); /* (no GPUs: every worker is a slot) */
    CHECKF(near(b.path, N * t), "path %.9f, the predictions' sum %.9f", b.path, N * t);
    CHECKF(near(b.area, N * t / 2), "area %.9f, expected %.9f", b.area, N * t / 2);
    CHECK(b.bound == b.path);
    CHECK_OK(weft_data_unregister(d));
    CHECK_OK(weft_runtime_destroy(rt));
}

static void test_indep(void) {
    weft_runtime *rt = make("cpu,vgpu:2", WEFT_BOUND_RECORD);
    enum { N = 24 };
    for (int i = 0; i < N; i++)
        weft_task_release(spawn(rt, "indep", true, 2000, NULL, 0, NULL, 0, NULL, 0));
    CHECK_OK(weft_wait_all(rt));
    /* (calibration sends at least three to each kind of device) */
    double tc = predict(rt, "indep", 0, 0), tg = fmin(predict(rt, "indep", 1, 0), predict(rt, "indep", 2, 0));
    weft_bound b = bound_of(rt);
    CHECK(b.tasks == N && b.pending == 0 && b.no_model == 0);
    CHECK(b.cpu_slots == 1 && b.gpus == 2); /* ("dmda" keeps one of the two workers for the GPUs) */
    /* n identical tasks split at will: T = n / (slots / tc + gpus / tg). */
    double area = N / (1 / tc + 2 / tg);
    CHECKF(near(b.area, area), "area %.9f, the formula's %.9f", b.area, area);
    CHECK(b.bound >= area * (1 - 1e-9));
    CHECKF(near(b.path, fmin(tc, tg)), "path %.9f, the fastest %.9f", b.path, fmin(tc, tg));
    CHECK_OK(weft_runtime_destroy(rt));
}

static void test_off(void) {
    weft_runtime *rt = make("cpu", WEFT_BOUND_OFF);
    weft_task_release(spawn(rt, "x", false, 10, NULL, 0, NULL, 0, NULL, 0));
    CHECK_OK(weft_wait_all(rt));
    weft_bound b;
    CHECK_ERR(weft_runtime_bound(rt, &b), WEFT_EINVAL);
    CHECK(strstr(weft_last_error(), "weft_config.bound") && strstr(weft_last_error(), "WEFT_BOUND=1"));
    CHECK_OK(weft_runtime_destroy(rt));
    rt = make("cpu", WEFT_BOUND_RECORD);
    CHECK_ERR(weft_runtime_bound(rt, NULL), WEFT_EINVAL);
    CHECK_OK(weft_runtime_destroy(rt));
    CHECK_ERR(weft_runtime_bound(rt, &b), WEFT_ECLOSED);
    /* A value beyond the three is refused; the environment turns it on. */
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.bound = 7;
    CHECK_ERR(weft_runtime_create(&cfg, &rt), WEFT_EINVAL);
    CHECK(strstr(weft_last_error(), "weft_config.bound") != NULL);
    setenv("WEFT_BOUND", "1", 1);
    weft_config_init(&cfg);
    CHECK(cfg.bound == WEFT_BOUND_PRINT);
    setenv("WEFT_BOUND", "0", 1);
    weft_config_init(&cfg);
    CHECK(cfg.bound == WEFT_BOUND_OFF);
    unsetenv("WEFT_BOUND");
}

static void test_nomodel(void) {
    weft_runtime *rt = make("cpu", WEFT_BOUND_RECORD);
    weft_task *a = spawn(rt, "modelled", false, 1000, NULL, 0, NULL, 0, NULL, 0);
    weft_task *p = spawn(rt, NULL, false, 5000, NULL, 0, &a, 1, NULL, 0); /* no placements: no model */
    weft_task *c = spawn(rt, "modelled", false, 1000, NULL, 0, &p, 1, NULL, 0);
    CHECK_OK(weft_wait_all(rt));
    double t = predict(rt, "modelled", 0, 0);
    weft_bound b = bound_of(rt);
    CHECK(b.tasks == 3 && b.no_model == 1);
    /* Its observed time is at least its sleep (5 ms). */
    CHECKF(b.path >= 2 * t + 0.005, "path %.9f < 2 x %.9f + 0.005", b.path, t);
    CHECK(b.area >= (2 * t + 0.005) / 2 * (1 - 1e-9));
    weft_task_release(a);
    weft_task_release(p);
    weft_task_release(c);
    CHECK_OK(weft_runtime_destroy(rt));
}

static void test_space(void) {
    weft_runtime *rt = make("cpu", WEFT_BOUND_RECORD);
    weft_space *s;
    CHECK_OK(weft_space_create(rt, "S", &s));
    int64_t k1 = 1;
    weft_task *first;
    CHECK_OK(weft_space_task(s, &k1, 1, &first)); /* a placeholder, fulfilled below */
    weft_task_release(spawn(rt, "link", false, 1000, NULL, 0, &first, 1, s, 2));
    weft_task_release(spawn(rt, "link", false, 1000, NULL, 0, NULL, 0, s, 1));
    CHECK_OK(weft_wait_all(rt));
    double t = predict(rt, "link", 0, 0);
    weft_bound b = bound_of(rt);
    CHECK(b.tasks == 2 && b.no_model == 0); /* (the placeholder is not a task) */
    CHECKF(near(b.path, 2 * t), "path %.9f, through the placeholder %.9f", b.path, 2 * t);
    CHECK_OK(weft_space_destroy(s));
    CHECK_OK(weft_runtime_destroy(rt));
}

static void test_print(void) {
    weft_runtime *rt = make("cpu", WEFT_BOUND_PRINT);
    weft_task_release(spawn(rt, "printed", false, 100, NULL, 0, NULL, 0, NULL, 0));
    char path[] = "/tmp/weft-bound-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    CHECK(saved >= 0 && dup2(fd, 2) == 2);
    int rc = weft_runtime_destroy(rt);
    fflush(stderr);
    CHECK(dup2(saved, 2) == 2);
    close(saved);
    CHECK_OK(rc);
    char text[1024] = {0};
    CHECK(pread(fd, text, sizeof text - 1, 0) > 0);
    close(fd);
    unlink(path);
    CHECKF(strstr(text, "weft: WEFT_BOUND: makespan ") && strstr(text, "critical path") &&
               strstr(text, "makespan / bound") && strstr(text, "(1 task, 0 without a model)"),
           "stderr: %s", text);
}

static void test_lost(void) {
    bool lost = false;
    for (long n = 1; n <= 32 && !lost; n++) {
        weft_runtime *rt = make("cpu", WEFT_BOUND_RECORD);
        weft_task *pre[4];
        for (int i = 0; i < 4; i++)
            pre[i] = spawn(rt, NULL, false, 10, NULL, 0, NULL, 0, NULL, 0);
        CHECK_OK(weft_wait_all(rt));
        /* Four dependencies: its record's list goes to the arena, the
         * allocation made for it fails at some n. */
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.body = cpu_body;
        d.deps = pre;
        d.ndeps = 4;
        weft__alloc_fail_at(n);
        int rc = weft_spawn(rt, &d, NULL);
        weft__alloc_fail_at(0);
        CHECK(rc == 0 || rc == WEFT_ENOMEM);
        CHECK_OK(weft_wait_all(rt));
        weft_bound b;
        int brc = weft_runtime_bound(rt, &b);
        if (rc == 0 && brc == WEFT_ENOMEM) {
            CHECK(strstr(weft_last_error(), "incomplete") && strstr(weft_last_error(), "1 task"));
            lost = true;
        } else {
            CHECKF(brc == 0, "%s", weft_last_error());
        }
        for (int i = 0; i < 4; i++)
            weft_task_release(pre[i]);
        CHECK_OK(weft_runtime_destroy(rt));
    }
    CHECK(lost);
}

static _Atomic int rated_on_cpu;

static int rated_cpu_body(weft_ctx *ctx, void *arg) {
    atomic_fetch_add(&rated_on_cpu, 1);
    return cpu_body(ctx, arg);
}

/* n tasks of `kind` with cost `cost`: on the CPU sleeping cpu_us, or (gpu_us
 * > 0) on a GPU with a kernel of gpu_us. */
static void spawn_costed(weft_runtime *rt, const char *kind, double cost, unsigned cpu_us, unsigned gpu_us, int n) {
    weft_placement pl[2];
    CHECK_OK(weft_placement_parse("cpu", &pl[0]));
    pl[0].body = rated_cpu_body;
    CHECK_OK(weft_placement_parse("gpu", &pl[1]));
    pl[1].body = gpu_body;
    for (int i = 0; i < n; i++) {
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.arg = (void *)(uintptr_t)(gpu_us ? gpu_us : cpu_us);
        d.kind = kind;
        d.cost = cost;
        d.placements = pl;
        d.nplacements = gpu_us ? 2 : 1;
        CHECK_OK(weft_spawn(rt, &d, NULL));
    }
}

/* A kind with a cost that never ran on the CPU is timed there at the rate
 * per unit of cost that other tasks showed on the CPU, as the policy
 * predicts it: it has a time on both classes.  (Models kept in a file of
 * the test's own: a first runtime learns the CPU's rate and the kind on
 * the GPU; the second decides from them, with nothing to calibrate, and
 * its GPU, a thousand times faster, takes every task.) */
static void test_rated(void) {
    char dir[] = "/tmp/weft-test-bound-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    setenv("WEFT_PERFMODEL_DIR", dir, 1);
    unsetenv("WEFT_PERFMODEL");
    weft_runtime *rt = make("cpu,vgpu:1", WEFT_BOUND_RECORD);
    spawn_costed(rt, "cpu_rate", 1e6, 200000, 0, 3);
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_runtime_destroy(rt));
    rt = make("cpu,vgpu:1", WEFT_BOUND_RECORD);
    weft_placement gpu;
    CHECK_OK(weft_placement_parse("gpu", &gpu));
    gpu.body = gpu_body;
    for (int i = 0; i < 3; i++) { /* (the kind on the GPU only) */
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.arg = (void *)(uintptr_t)200;
        d.kind = "gpu_fast";
        d.cost = 1e6;
        d.placements = &gpu;
        d.nplacements = 1;
        CHECK_OK(weft_spawn(rt, &d, NULL));
    }
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_runtime_destroy(rt));

    rt = make("cpu,vgpu:1", WEFT_BOUND_RECORD);
    atomic_store(&rated_on_cpu, 0);
    enum { N = 6 };
    spawn_costed(rt, "gpu_fast", 1e6, 200000, 200, N);
    CHECK_OK(weft_wait_all(rt));
    CHECKF(atomic_load(&rated_on_cpu) == 0, "%d gpu_fast tasks ran on the CPU", atomic_load(&rated_on_cpu));
    double none;
    CHECK(weft_runtime_predict(rt, "gpu_fast", 0, 0, &none) == 0); /* (no model of its own on the CPU) */
    double tc = 1e6 * predict(rt, "cpu_rate", 0, 0) / 1e6, tg = predict(rt, "gpu_fast", 1, 0);
    weft_bound b; /* (not bound_of: models learned in other runs may exceed this run's makespan) */
    CHECKF(weft_runtime_bound(rt, &b) == 0, "%s", weft_last_error());
    CHECKF(b.tasks == N && b.no_model == 0, "%llu tasks, %llu without a model", (unsigned long long)b.tasks,
           (unsigned long long)b.no_model);
    CHECK(b.cpu_slots == 1 && b.gpus == 1);
    double area = N / (1 / tc + 1 / tg);
    CHECKF(fabs(b.area - area) <= 1e-6 * area, "area %.9f, the formula's %.9f", b.area, area);
    CHECK_OK(weft_runtime_destroy(rt));
    setenv("WEFT_PERFMODEL", "off", 1);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

int main(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : NULL;
    struct {
        const char *name;
        void (*fn)(void);
    } tests[] = {{"chain", test_chain}, {"indep", test_indep}, {"off", test_off}, {"nomodel", test_nomodel},
                 {"rated", test_rated},
                 {"space", test_space}, {"print", test_print}, {"lost", test_lost}};
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
        if (!only || strcmp(only, tests[i].name) == 0) {
            tests[i].fn();
            printf("test_bound %s: ok\n", tests[i].name);
        }
    return 0;
}
