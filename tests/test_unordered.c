/* WEFT_UNORDERED (StarPU's sequential consistency turned off): accesses of
 * one data that the data does not order among themselves — shown by
 * events, not by timing — while each still sees a whole value (no update
 * lost, on the CPU and on virtual GPUs), the next ordered access follows
 * them all, failure cancels only after a member that wrote, and the modes
 * it does not go with are refused with a message. */
#include "check.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

static weft_runtime *make(const char *devices, unsigned workers) {
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = workers;
    cfg.trace_path = NULL;
    cfg.devices = devices;
    weft_runtime *rt = NULL;
    CHECKF(weft_runtime_create(&cfg, &rt) == 0, "%s: %s", devices, weft_last_error());
    return rt;
}

static weft_task *spawn_one(weft_runtime *rt, weft_body_fn body, void *arg, weft_data *d, unsigned mode,
                            weft_task *const *deps, size_t ndeps) {
    weft_access a = {d, mode};
    weft_task_desc desc;
    weft_task_desc_init(&desc);
    desc.body = body;
    desc.arg = arg;
    desc.accesses = &a;
    desc.naccesses = 1;
    desc.deps = deps;
    desc.ndeps = ndeps;
    weft_task *t = NULL;
    CHECKF(weft_spawn(rt, &desc, &t) == 0, "spawn: %s", weft_last_error());
    return t;
}

/* ---- the data orders nothing among them ------------------------------- */

static int add_one(weft_ctx *ctx, void *arg) {
    (void)arg;
    long *v = weft_ctx_data(ctx, 0);
    *v += 1;
    return 0;
}

static int add_ten(weft_ctx *ctx, void *arg) {
    (void)arg;
    long *v = weft_ctx_data(ctx, 0);
    *v += 10;
    return 0;
}

static int read_into(weft_ctx *ctx, void *arg) {
    *(long *)arg = *(const long *)weft_ctx_data(ctx, 0);
    return 0;
}

/* A is spawned first but held back by an explicit dependency on a gated
 * task; B, spawned after A on the same data, finishes while A has not
 * started.  With ordered accesses B would wait for A: the wait on B would
 * time out.  A plain reader after both sees both updates. */
static void test_not_ordered(unsigned mode) {
    weft_runtime *rt = make("cpu", 2);
    block_workers_reset();
    long value = 0, seen = -1;
    weft_data *d;
    CHECK_OK(weft_data_register(rt, &value, sizeof value, &d));
    weft_task *hold = NULL;
    CHECK_OK(weft_spawn_simple(rt, blocker, NULL, &hold));
    weft_task *a = spawn_one(rt, add_one, NULL, d, mode | WEFT_UNORDERED, &hold, 1);
    weft_task *b = spawn_one(rt, add_ten, NULL, d, mode | WEFT_UNORDERED, NULL, 0);
    weft_task *r = spawn_one(rt, read_into, &seen, d, WEFT_R, NULL, 0);
    CHECKF(weft_task_timedwait(b, 20ull * 1000000000u) == 0, "the later unordered access waited for the earlier");
    weft_task_status st;
    CHECK_OK(weft_task_status_get(a, &st));
    CHECK(st == WEFT_TASK_WAITING);
    CHECK_OK(weft_task_status_get(r, &st));
    CHECK(st == WEFT_TASK_WAITING); /* follows the whole group: A too */
    atomic_store(&gate, 1);
    CHECK_OK(weft_task_wait(r));
    CHECK(seen == 11);
    weft_task_release(hold);
    weft_task_release(a);
    weft_task_release(b);
    weft_task_release(r);
    CHECK_OK(weft_data_unregister(d));
    CHECK(value == 11);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- each sees a whole value ------------------------------------------ */

/* Read, give the CPU away, write back: two of these at once would lose an
 * update. */
static int slow_increment(weft_ctx *ctx, void *arg) {
    (void)arg;
    volatile long *v = weft_ctx_data(ctx, 0);
    long x = *v;
    for (int i = 0; i < 20; i++)
        sched_yield();
    *v = x + 1;
    return 0;
}

static void test_exclusive(const char *devices, const char *where) {
    weft_runtime *rt = make(devices, 2);
    weft_placement p;
    if (where)
        CHECKF(weft_placement_parse(where, &p) == 0, "%s", weft_last_error());
    long value = 0;
    weft_data *d;
    CHECK_OK(weft_data_register(rt, &value, sizeof value, &d));
    int n = test_pick(400, 100);
    for (int i = 0; i < n; i++) {
        /* RW members, and now and then a reader among them */
        weft_access a = {d, (i % 5 == 4 ? WEFT_R : WEFT_RW) | WEFT_UNORDERED | (where ? WEFT_HOST : 0u)};
        weft_task_desc desc;
        weft_task_desc_init(&desc);
        desc.body = (a.mode & WEFT_W) ? slow_increment : test_noop;
        desc.accesses = &a;
        desc.naccesses = 1;
        desc.placements = where ? &p : NULL;
        desc.nplacements = where ? 1 : 0;
        CHECKF(weft_spawn(rt, &desc, NULL) == 0, "%s", weft_last_error());
    }
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_unregister(d));
    CHECKF(value == n - n / 5, "%ld updates of %d", value, n - n / 5);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* Unordered writers on virtual GPUs, each writing the whole array with its
 * number: the value after them is one writer's, whole. */
typedef struct fill_arg {
    long k;
} fill_arg;

static int fill_kernel(void *arg) {
    long *buf = ((void **)arg)[0];
    long k = (long)(intptr_t)((void **)arg)[1];
    for (int i = 0; i < 1024; i++) {
        buf[i] = k;
        if (i % 256 == 0)
            sched_yield();
    }
    free(arg);
    return 0;
}

static int fill_on_gpu(weft_ctx *ctx, void *arg) {
    void **p = malloc(2 * sizeof *p);
    if (!p)
        return 1;
    p[0] = weft_ctx_data(ctx, 0);
    p[1] = arg;
    int rc = weft_ctx_queue(ctx, 0, fill_kernel, p, 10000);
    if (rc)
        free(p);
    return rc;
}

static void test_gpu_writers(void) {
    weft_runtime *rt = make("cpu,vgpu:3", 2);
    weft_placement p;
    CHECK_OK(weft_placement_parse("gpu", &p));
    static long buf[1024];
    weft_data *d;
    CHECK_OK(weft_data_register(rt, buf, sizeof buf, &d));
    int n = test_pick(60, 20);
    for (int i = 1; i <= n; i++) {
        weft_access a = {d, (i % 2 ? WEFT_W : WEFT_RW) | WEFT_UNORDERED};
        weft_task_desc desc;
        weft_task_desc_init(&desc);
        desc.body = fill_on_gpu;
        desc.arg = (void *)(intptr_t)i;
        desc.accesses = &a;
        desc.naccesses = 1;
        desc.placements = &p;
        desc.nplacements = 1;
        CHECKF(weft_spawn(rt, &desc, NULL) == 0, "%s", weft_last_error());
    }
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_unregister(d));
    CHECK(buf[0] >= 1 && buf[0] <= n);
    for (int i = 1; i < 1024; i++)
        CHECKF(buf[i] == buf[0], "element %d is %ld, element 0 %ld: two writers overlapped", i, buf[i], buf[0]);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- failure ----------------------------------------------------------- */

static int fail_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    return 7;
}

/* A failed member that wrote cancels the reader after the group; a failed
 * unordered reader cancels nobody. */
static void test_failure(void) {
    weft_runtime *rt = make("cpu", 2);
    long value = 5, seen = -1;
    weft_data *d;
    CHECK_OK(weft_data_register(rt, &value, sizeof value, &d));
    weft_task *f = spawn_one(rt, fail_body, NULL, d, WEFT_R | WEFT_UNORDERED, NULL, 0);
    weft_task *w = spawn_one(rt, add_one, NULL, d, WEFT_RW | WEFT_UNORDERED, NULL, 0);
    weft_task *r = spawn_one(rt, read_into, &seen, d, WEFT_R, NULL, 0);
    CHECK_ERR(weft_task_wait(f), WEFT_ETASKFAILED);
    CHECK_OK(weft_task_wait(w));
    CHECK_OK(weft_task_wait(r));
    CHECK(seen == 6);
    weft_task_release(f);
    weft_task_release(w);
    weft_task_release(r);

    f = spawn_one(rt, fail_body, NULL, d, WEFT_W | WEFT_UNORDERED, NULL, 0);
    w = spawn_one(rt, add_one, NULL, d, WEFT_RW | WEFT_UNORDERED, NULL, 0);
    r = spawn_one(rt, read_into, &seen, d, WEFT_R, NULL, 0);
    CHECK_ERR(weft_task_wait(f), WEFT_ETASKFAILED);
    CHECK_ERR(weft_task_wait(r), WEFT_ECANCELLED);
    CHECK_OK(weft_task_wait(w)); /* before or after the failed writer: not cancelled by it */
    weft_task_release(f);
    weft_task_release(w);
    weft_task_release(r);
    CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED); /* (failures since the last one) */
    CHECK_OK(weft_data_unregister(d));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- refused ----------------------------------------------------------- */

static void expect_refused(weft_runtime *rt, weft_data *d, unsigned mode, const char *says) {
    weft_access a = {d, mode};
    weft_task_desc desc;
    weft_task_desc_init(&desc);
    desc.body = test_noop;
    desc.accesses = &a;
    desc.naccesses = 1;
    weft_placement p;
    CHECK_OK(weft_placement_parse("gpu", &p));
    if (mode & WEFT_ON_GPU_MASK) {
        desc.placements = &p;
        desc.nplacements = 1;
    }
    CHECK_ERR(weft_spawn(rt, &desc, NULL), WEFT_EINVAL);
    CHECKF(strstr(weft_last_error(), says), "mode 0x%x: '%s' lacks '%s'", mode, weft_last_error(), says);
}

static void test_refused(void) {
    weft_runtime *rt = make("cpu,vgpu:1", 1);
    double v[4] = {0};
    weft_data *d;
    CHECK_OK(weft_data_register(rt, v, sizeof v, &d));
    expect_refused(rt, d, WEFT_REDUCE | WEFT_RED_SUM | WEFT_RED_F64 | WEFT_UNORDERED, "WEFT_UNORDERED");
    expect_refused(rt, d, WEFT_R | WEFT_UNORDERED | WEFT_ON_GPU(0), "WEFT_UNORDERED");
    expect_refused(rt, d, WEFT_UNORDERED, "invalid mode");
    expect_refused(rt, d, WEFT_R | WEFT_COMMUTE, "add WEFT_UNORDERED");
    weft_access acc = {d, WEFT_RW | WEFT_UNORDERED};
    CHECK_ERR(weft_data_acquire_many(&acc, 1, 0), WEFT_EINVAL);
    CHECKF(strstr(weft_last_error(), "WEFT_UNORDERED"), "%s", weft_last_error());
    CHECK_OK(weft_data_unregister(d));
    CHECK_OK(weft_runtime_destroy(rt));
}

int main(void) {
    test_watchdog(test_pick(60, 240));
    test_step("unordered RW members are not ordered among themselves");
    test_not_ordered(WEFT_RW);
    test_step("each member sees a whole value (CPU)");
    test_exclusive("cpu", NULL);
    test_step("each member sees a whole value (host bodies placed on virtual GPUs)");
    test_exclusive("cpu,vgpu:2", "gpu");
    test_step("unordered writers on virtual GPUs");
    test_gpu_writers();
    test_step("failure");
    test_failure();
    test_step("refused");
    test_refused();
    printf("test_unordered: ok\n");
    return 0;
}
