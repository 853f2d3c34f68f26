/*
 * Mistakes a StarPU user may make when porting, each as a scenario:
 *   misuse <scenario>     (no argument: list them)
 * Each prints what Weft did; none asserts.  Use WEFT_PERFMODEL_DIR to keep
 * the model file of these runs away from the machine's own.
 */
#define _POSIX_C_SOURCE 200809L
#include <weft.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void report(const char *what, int rc)
{
    printf("  %-58s -> %s%s%s\n", what, rc == 0 ? "0 (accepted)" : weft_strerror(rc), rc ? ": " : "",
           rc ? weft_last_error() : "");
}

static weft_runtime *mk(const char *devices, const char *policy)
{
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.devices = devices;
    cfg.policy = policy;
    weft_runtime *rt = NULL;
    int rc = weft_runtime_create(&cfg, &rt);
    if (rc != 0) { report("weft_runtime_create", rc); exit(2); }
    return rt;
}

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static int k_slow(void *p) { double *v = p; sleep_us(20000); v[0] += 1; return 0; }
static int gpu_slow(weft_ctx *ctx, void *arg)
{
    (void)arg;
    return weft_ctx_queue(ctx, 0, k_slow, weft_ctx_data(ctx, 0), 0);
}
static int cpu_inc(weft_ctx *ctx, void *arg) { (void)arg; double *v = weft_ctx_data(ctx, 0); v[0] += 1; return 0; }
static int cpu_slow(weft_ctx *ctx, void *arg) { (void)arg; sleep_us(5000); double *v = weft_ctx_data(ctx, 0); v[0] += 1; return 0; }
static int cpu_fast(weft_ctx *ctx, void *arg) { (void)arg; double *v = weft_ctx_data(ctx, 0); v[0] += 1; return 0; }

static int spawn1(weft_runtime *rt, weft_data *d, const char *where, weft_body_fn body, const char *kind)
{
    weft_placement p;
    int rc = weft_placement_parse(where, &p);
    if (rc) return rc;
    p.body = body;
    weft_access a = {d, WEFT_RW};
    weft_task_desc t;
    weft_task_desc_init(&t);
    t.accesses = &a;
    t.naccesses = 1;
    t.placements = &p;
    t.nplacements = 1;
    t.kind = kind;
    return weft_spawn(rt, &t, NULL);
}

/* 1. touching registered data from the host while a GPU task works on it */
static void host_touch(void)
{
    weft_runtime *rt = mk("cpu,vgpu:1", NULL);
    double v[1024] = {41};
    weft_data *d;
    report("register", weft_data_register(rt, v, sizeof v, &d));
    report("spawn gpu task (RW, 20 ms kernel)", spawn1(rt, d, "gpu", gpu_slow, "touch"));
    sleep_us(5000);
    v[0] = 1000; /* StarPU: undefined without starpu_data_acquire; a user may do it anyway */
    printf("  host wrote v[0] = 1000 while the task ran; host reads v[0] = %g right after\n", v[0]);
    report("unregister", weft_data_unregister(d));
    printf("  after unregister v[0] = %g (the GPU's 42 overwrote the host write, silently)\n", v[0]);
    report("destroy", weft_runtime_destroy(rt));
}

/* 2. forgetting to unregister before shutdown */
static void no_unregister(void)
{
    weft_runtime *rt = mk("cpu,vgpu:1", NULL);
    double v[4] = {1};
    weft_data *d;
    report("register", weft_data_register(rt, v, sizeof v, &d));
    report("spawn gpu task", spawn1(rt, d, "gpu", gpu_slow, "forgot"));
    report("destroy without unregister", weft_runtime_destroy(rt));
    printf("  v[0] after destroy = %g (expect 2: destroy unregisters)\n", v[0]);
    report("unregister after destroy", weft_data_unregister(d));
}

/* 3. two different codelets with the same model symbol */
static void kind_collision(void)
{
    weft_runtime *rt = mk("cpu,vgpu:1", "dmda");
    double a = 0, b = 0;
    weft_data *da, *db;
    report("register a, b", weft_data_register(rt, &a, sizeof a, &da) | weft_data_register(rt, &b, sizeof b, &db));
    for (int i = 0; i < 10; i++) {
        int rc = spawn1(rt, da, "cpu", cpu_slow, "same_symbol");
        rc |= spawn1(rt, db, "cpu", cpu_fast, "same_symbol");
        if (rc) report("spawn", rc);
    }
    report("wait_all", weft_wait_all(rt));
    double ns = 0;
    int rc = weft_runtime_predict(rt, "same_symbol", 0, sizeof(double), &ns);
    printf("  5 ms body and ~0 ms body share kind 'same_symbol': predict rc %d -> %.0f us (one mixed model, no warning)\n",
           rc, ns / 1e3);
    report("destroy", weft_runtime_destroy(rt));
}

/* 4. variant lists no device fits */
static void no_fit(void)
{
    weft_runtime *rt = mk("cpu", NULL);
    double v = 0;
    weft_data *d;
    report("register", weft_data_register(rt, &v, sizeof v, &d));
    report("'gpu' only on devices=cpu", spawn1(rt, d, "gpu", cpu_inc, "nofit"));
    report("destroy", weft_runtime_destroy(rt));
    rt = mk("cpu,vgpu:1", NULL);
    report("register", weft_data_register(rt, &v, sizeof v, &d));
    report("'2*gpu' on devices=cpu,vgpu:1", spawn1(rt, d, "2*gpu", cpu_inc, "nofit"));
    report("'gpu:3' on devices=cpu,vgpu:1", spawn1(rt, d, "gpu:3", cpu_inc, "nofit"));
    weft_placement p[2];
    if (weft_placement_parse("2*gpu", &p[0]) || weft_placement_parse("gpu", &p[1])) return;
    p[1].memory = (size_t)1 << 40;
    weft_access a = {d, WEFT_RW};
    weft_task_desc t;
    weft_task_desc_init(&t);
    t.body = cpu_inc;
    t.accesses = &a;
    t.naccesses = 1;
    t.placements = p;
    t.nplacements = 2;
    report("['2*gpu', 'gpu' with 1 TiB memory]", weft_spawn(rt, &t, NULL));
    t.nplacements = 0;
    t.placements = NULL;
    t.cost = -1;
    report("cost -1 (negative STARPU_FLOPS)", weft_spawn(rt, &t, NULL));
    report("destroy", weft_runtime_destroy(rt));
}

/* 5. a model (kind, cost) on the "load" policy */
static void model_on_load(void)
{
    weft_runtime *rt = mk("cpu,vgpu:1", "load");
    double v = 0;
    weft_data *d;
    report("register", weft_data_register(rt, &v, sizeof v, &d));
    report("spawn with kind 'on_load' under policy load", spawn1(rt, d, "gpu", cpu_inc, "on_load"));
    report("wait_all", weft_wait_all(rt));
    double ns = 0;
    report("weft_runtime_predict('on_load')", weft_runtime_predict(rt, "on_load", 1, sizeof v, &ns));
    weft_bound b;
    report("weft_runtime_bound without bound recording", weft_runtime_bound(rt, &b));
    report("destroy", weft_runtime_destroy(rt));
}

/* 6. kind names the model file cannot hold, or that are truncated */
static void odd_kinds(void)
{
    weft_runtime *rt = mk("cpu,vgpu:1", "dmda");
    double v = 0;
    weft_data *d;
    report("register", weft_data_register(rt, &v, sizeof v, &d));
    report("kind with a tab 'bad\\tkind'", spawn1(rt, d, "cpu", cpu_inc, "bad\tkind"));
    report("kind with a newline 'bad\\nkind'", spawn1(rt, d, "cpu", cpu_inc, "bad\nkind"));
    report("kind ''", spawn1(rt, d, "cpu", cpu_inc, ""));
    char l1[100], l2[100];
    memset(l1, 'k', 99); l1[99] = 0;
    memcpy(l2, l1, 100); l2[80] = 'X';
    for (int i = 0; i < 4; i++) {
        if (spawn1(rt, d, "cpu", cpu_slow, l1) | spawn1(rt, d, "cpu", cpu_fast, l2)) report("spawn long kinds", -1);
    }
    report("wait_all", weft_wait_all(rt));
    double n1 = 0, n2 = 0;
    int r1 = weft_runtime_predict(rt, l1, 0, sizeof v, &n1), r2 = weft_runtime_predict(rt, l2, 0, sizeof v, &n2);
    printf("  two 99-char kinds differing at char 80: predict %d/%d -> %.0f us / %.0f us%s\n", r1, r2, n1 / 1e3,
           n2 / 1e3, n1 == n2 ? " (the same model: truncated to 63, silently)" : "");
    report("destroy (writes the model file)", weft_runtime_destroy(rt));
}

/* 7. waiting from a completion callback, StarPU-style (starpu_data_unregister in a callback) */
static weft_data *cb_d;
static void on_finish(void *arg, int status)
{
    (void)arg;
    (void)status;
    report("unregister from on_finish", weft_data_unregister(cb_d));
}
static void callback_wait(void)
{
    weft_runtime *rt = mk("cpu,vgpu:1", NULL);
    double v = 0;
    report("register", weft_data_register(rt, &v, sizeof v, &cb_d));
    weft_access a = {cb_d, WEFT_RW};
    weft_task_desc t;
    weft_task_desc_init(&t);
    t.body = cpu_inc;
    t.accesses = &a;
    t.naccesses = 1;
    t.on_finish = on_finish;
    report("spawn", weft_spawn(rt, &t, NULL));
    report("wait_all", weft_wait_all(rt));
    report("destroy", weft_runtime_destroy(rt));
}

/* 8. registering the same buffer twice (StarPU refuses: "already registered") */
static void double_register(void)
{
    weft_runtime *rt = mk("cpu,vgpu:1", NULL);
    double v[8] = {0};
    weft_data *d1, *d2;
    report("register v", weft_data_register(rt, v, sizeof v, &d1));
    report("register v again", weft_data_register(rt, v, sizeof v, &d2));
    report("spawn 'gpu' on the second handle (no WEFT_HOST)", spawn1(rt, d2, "gpu", gpu_slow, "dup"));
    report("destroy", weft_runtime_destroy(rt));
}

int main(int argc, char **argv)
{
    static const struct { const char *name; void (*fn)(void); } sc[] = {
        {"host_touch", host_touch},       {"no_unregister", no_unregister}, {"kind_collision", kind_collision},
        {"no_fit", no_fit},               {"model_on_load", model_on_load}, {"odd_kinds", odd_kinds},
        {"callback_wait", callback_wait}, {"double_register", double_register}};
    for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++)
        if (argc > 1 && !strcmp(argv[1], sc[i].name)) {
            printf("%s:\n", sc[i].name);
            sc[i].fn();
            return 0;
        }
    printf("usage: %s SCENARIO; scenarios:", argv[0]);
    for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++) printf(" %s", sc[i].name);
    printf("\n");
    return 2;
}
