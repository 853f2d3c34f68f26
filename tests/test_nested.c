/* Nested parallelism: bodies spawn children and wait on them (fib-like tree),
 * with 1, 2 and 4 workers; a waiting body must help run other tasks, so
 * nothing deadlocks even with a single worker. */
#include <pthread.h>

#include "check.h"

typedef struct fib_arg {
    int n;
    long result;
} fib_arg;

static int fib_body(weft_ctx *ctx, void *arg) {
    fib_arg *a = arg;
    if (a->n < 2) {
        a->result = a->n;
        return 0;
    }
    weft_runtime *rt = weft_ctx_runtime(ctx);
    fib_arg x = {a->n - 1, -1}, y = {a->n - 2, -1};
    weft_task *tx, *ty;
    int rc = weft_spawn_simple(rt, fib_body, &x, &tx);
    if (rc != 0) return 100;
    rc = weft_spawn_simple(rt, fib_body, &y, &ty);
    if (rc != 0) return 101;
    int r1 = weft_task_wait(tx);
    int r2 = weft_task_wait(ty);
    weft_task_release(tx);
    weft_task_release(ty);
    if (r1 != 0 || r2 != 0) return 102;
    a->result = x.result + y.result;
    return 0;
}

static long fib_seq(int n) { return n < 2 ? n : fib_seq(n - 1) + fib_seq(n - 2); }

static unsigned max_nesting_cfg; /* 0: default */

static weft_runtime *make_nested_rt(unsigned workers) {
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = workers;
    cfg.trace_path = NULL;
    if (max_nesting_cfg) cfg.max_nesting = max_nesting_cfg;
    weft_runtime *rt;
    CHECK_OK(weft_runtime_create(&cfg, &rt));
    return rt;
}

static void test_fib(unsigned workers, int n) {
    weft_runtime *rt = make_nested_rt(workers);
    fib_arg a = {n, -1};
    weft_task *t;
    CHECK_OK(weft_spawn_simple(rt, fib_body, &a, &t));
    CHECK_OK(weft_task_wait(t));
    CHECKF(a.result == fib_seq(n), "fib(%d) = %ld with %u workers", n, a.result, workers);
    weft_task_release(t);
    CHECK_OK(weft_wait_all(rt));
    weft_stats st;
    CHECK_OK(weft_runtime_stats(rt, &st));
    CHECK(st.tasks_failed == 0 && st.tasks_cancelled == 0);
    CHECK(st.tasks_run == st.tasks_spawned);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* Children with explicit dependencies among themselves and on data, spawned
 * from a body; the parent waits on the last one. */
typedef struct tree_arg {
    int depth;
    atomic_long *leaves;
} tree_arg;

static int child_inc(weft_ctx *ctx, void *arg) {
    (void)arg;
    long *v = weft_ctx_data(ctx, 0);
    *v += 1;
    return 0;
}

static int tree_body(weft_ctx *ctx, void *arg) {
    tree_arg *a = arg;
    if (a->depth == 0) {
        atomic_fetch_add(a->leaves, 1);
        return 0;
    }
    weft_runtime *rt = weft_ctx_runtime(ctx);
    long local = 0;
    weft_data *d;
    if (weft_data_register(rt, &local, sizeof local, &d) != 0) return 200;
    tree_arg sub = {a->depth - 1, a->leaves};
    weft_task *kids[3];
    for (int i = 0; i < 3; i++)
        if (weft_spawn_simple(rt, tree_body, &sub, &kids[i]) != 0) return 201;
    /* A chain of RW children on the parent's local data, after the kids. */
    for (int i = 0; i < 4; i++) {
        weft_access acc = {d, WEFT_RW};
        weft_task_desc desc;
        weft_task_desc_init(&desc);
        desc.body = child_inc;
        desc.accesses = &acc;
        desc.naccesses = 1;
        desc.deps = kids;
        desc.ndeps = 3;
        if (weft_spawn(rt, &desc, NULL) != 0) return 202;
    }
    int bad = 0;
    for (int i = 0; i < 3; i++) {
        if (weft_task_wait(kids[i]) != 0) bad = 1;
        weft_task_release(kids[i]);
    }
    /* Unregister from inside a task: waits (helping) for the RW chain. */
    if (weft_data_unregister(d) != 0) return 203;
    if (local != 4) return 204;
    return bad ? 205 : 0;
}

static void test_tree(unsigned workers, int depth) {
    weft_runtime *rt = make_nested_rt(workers);
    atomic_long leaves = 0;
    tree_arg a = {depth, &leaves};
    weft_task *t;
    CHECK_OK(weft_spawn_simple(rt, tree_body, &a, &t));
    int rc = weft_task_wait(t);
    weft_task_info info;
    CHECK_OK(weft_task_info_get(t, &info));
    CHECKF(rc == 0, "tree of depth %d with %u workers: %s, body result %d", depth, workers,
           weft_strerror(rc), info.result);
    long want = 1;
    for (int i = 0; i < depth; i++) want *= 3;
    CHECK(atomic_load(&leaves) == want);
    weft_task_release(t);
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* A linear chain of nested waits: each body spawns one child and waits. */
static int deep_body(weft_ctx *ctx, void *arg) {
    intptr_t n = (intptr_t)arg;
    if (n == 0) return 0;
    weft_task *c;
    if (weft_spawn_simple(weft_ctx_runtime(ctx), deep_body, (void *)(n - 1), &c) != 0) return 1;
    int rc = weft_task_wait(c);
    weft_task_release(c);
    return rc == 0 ? 0 : 2;
}

static void test_deep(unsigned workers, int depth) {
    weft_runtime *rt = make_nested_rt(workers);
    weft_task *t;
    CHECK_OK(weft_spawn_simple(rt, deep_body, (void *)(intptr_t)depth, &t));
    CHECK_OK(weft_task_wait(t));
    weft_task_release(t);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* Many outside threads spawning and waiting concurrently into one runtime. */
typedef struct outside_arg {
    weft_runtime *rt;
    int n;
    int ok;
} outside_arg;

static void *outside_thread(void *p) {
    outside_arg *o = p;
    fib_arg a = {o->n, -1};
    weft_task *t;
    o->ok = 0;
    if (weft_spawn_simple(o->rt, fib_body, &a, &t) != 0) return NULL;
    if (weft_task_wait(t) == 0 && a.result == fib_seq(o->n)) o->ok = 1;
    weft_task_release(t);
    return NULL;
}

static void test_outside_threads(unsigned workers, int n) {
    weft_runtime *rt = make_rt(workers);
    enum { T = 4 };
    pthread_t th[T];
    outside_arg oa[T];
    for (int i = 0; i < T; i++) {
        oa[i].rt = rt;
        oa[i].n = n;
        CHECK(pthread_create(&th[i], NULL, outside_thread, &oa[i]) == 0);
    }
    for (int i = 0; i < T; i++) {
        CHECK(pthread_join(th[i], NULL) == 0);
        CHECKF(oa[i].ok, "outside thread %d: fib(%d) wrong or failed", i, n);
    }
    CHECK_OK(weft_runtime_destroy(rt));
}

/* Backpressure inside a task: a body that spawns many children (without
 * waiting) must help run them instead of blocking forever ("from a task it
 * then helps run other tasks instead"), even when max_inflight is smaller
 * than the number of such producers: the producers themselves are in flight,
 * so a spawn that finds nothing to help with must not wait for them. */
static atomic_int bp_ran;

static int bp_child(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    atomic_fetch_add(&bp_ran, 1);
    return 0;
}

static int bp_parent(weft_ctx *ctx, void *arg) {
    int n = (int)(intptr_t)arg;
    for (int i = 0; i < n; i++)
        if (weft_spawn_simple(weft_ctx_runtime(ctx), bp_child, NULL, NULL) != 0) return 1;
    return 0;
}

static void test_backpressure_in_task(unsigned workers, int n, size_t max_inflight) {
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = workers;
    cfg.trace_path = NULL;
    cfg.max_inflight = max_inflight;
    weft_runtime *rt;
    CHECK_OK(weft_runtime_create(&cfg, &rt));
    atomic_store(&bp_ran, 0);
    /* Several parents at once, from outside (which blocks) and inside. */
    for (int p = 0; p < 4; p++)
        CHECK_OK(weft_spawn_simple(rt, bp_parent, (void *)(intptr_t)n, NULL));
    CHECK_OK(weft_wait_all(rt));
    CHECK(atomic_load(&bp_ran) == 4 * n);
    /* No bound on inflight_peak here: a producer inside a task may be let
     * through when it cannot help, by design. */
    CHECK_OK(weft_runtime_destroy(rt));
}

/* A task B that waits for a task A which is itself waiting for its own child
 * (no cycle: B is not A's child).  With one worker, A's wait may run B while
 * it waits; B's wait on A must still end with A's result: weft_task_wait
 * documents 0 / ETASKFAILED / ECANCELLED / EINVAL / EBUSY only, and "nested
 * waits cannot starve the pool". */
static atomic_int a_started, a_gate;
static weft_task *task_a;
static atomic_int b_result;

static int body_a(weft_ctx *ctx, void *arg) {
    (void)arg;
    atomic_store(&a_started, 1);
    if (wait_flag(&a_gate, 10000) != 0) return 1;
    weft_task *c;
    if (weft_spawn_simple(weft_ctx_runtime(ctx), test_noop, NULL, &c) != 0) return 2;
    int rc = weft_task_wait(c);
    weft_task_release(c);
    return rc == 0 ? 0 : 3;
}

static int body_b(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    atomic_store(&b_result, weft_task_wait(task_a));
    return 0;
}

static void test_wait_on_waiting_task(unsigned workers) {
    weft_runtime *rt = make_rt(workers);
    atomic_store(&a_started, 0);
    atomic_store(&a_gate, 0);
    atomic_store(&b_result, 12345);
    CHECK_OK(weft_spawn_simple(rt, body_a, NULL, &task_a));
    CHECK(wait_flag(&a_started, 10000) == 0);
    weft_task *b;
    CHECK_OK(weft_spawn_simple(rt, body_b, NULL, &b));
    atomic_store(&a_gate, 1);
    CHECK_OK(weft_task_wait(task_a));
    CHECK_OK(weft_task_wait(b));
    int rc = atomic_load(&b_result);
    CHECKF(rc == 0, "%u worker(s): a task waiting for a task that waits for its own child got "
           "%d (%s) instead of 0", workers, rc, weft_strerror(rc));
    weft_task_release(task_a);
    weft_task_release(b);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* The same when A's child is not ready (it depends on X, which holds the
 * other worker): A's wait has nothing of its own to run and may run B; B's
 * wait on A must still end with A's result. */
static atomic_int x_in, x_gate, a2_in, a2_gate;
static weft_task *task_x, *task_a2;
static atomic_int b2_result;

static int body_x(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    atomic_store(&x_in, 1);
    return wait_flag(&x_gate, 10000) == 0 ? 0 : 1;
}

static int body_a2(weft_ctx *ctx, void *arg) {
    (void)arg;
    atomic_store(&a2_in, 1);
    if (wait_flag(&a2_gate, 10000) != 0) return 1;
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = test_noop;
    d.deps = &task_x;
    d.ndeps = 1;
    weft_task *c;
    if (weft_spawn(weft_ctx_runtime(ctx), &d, &c) != 0) return 2;
    int rc = weft_task_wait(c);
    weft_task_release(c);
    return rc == 0 ? 0 : 3;
}

static int body_b2(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    atomic_store(&b2_result, weft_task_wait(task_a2));
    return 0;
}

static void test_wait_on_waiting_task_not_ready(void) {
    weft_runtime *rt = make_rt(2);
    atomic_store(&x_in, 0);
    atomic_store(&x_gate, 0);
    atomic_store(&a2_in, 0);
    atomic_store(&a2_gate, 0);
    atomic_store(&b2_result, 12345);
    CHECK_OK(weft_spawn_simple(rt, body_a2, NULL, &task_a2));
    CHECK(wait_flag(&a2_in, 10000) == 0);
    CHECK_OK(weft_spawn_simple(rt, body_x, NULL, &task_x));
    CHECK(wait_flag(&x_in, 10000) == 0);
    weft_task *b;
    CHECK_OK(weft_spawn_simple(rt, body_b2, NULL, &b));
    sleep_ms(20);
    atomic_store(&a2_gate, 1);
    sleep_ms(100);
    atomic_store(&x_gate, 1);
    CHECK_OK(weft_task_wait(task_a2));
    CHECK_OK(weft_task_wait(b));
    int rc = atomic_load(&b2_result);
    CHECKF(rc == 0, "a task waiting for a task that waits for a not-yet-ready child got %d (%s) "
           "instead of 0", rc, weft_strerror(rc));
    weft_task_release(task_a2);
    weft_task_release(task_x);
    weft_task_release(b);
    CHECK_OK(weft_runtime_destroy(rt));
}

int main(int argc, char **argv) {
    /* argv[1]: "core" (default), "nesting1" (core with max_nesting 1),
     * "backpressure" or "wait-on-waiting". */
    const char *which = argc > 1 ? argv[1] : "core";
    if (strcmp(which, "nesting1") == 0) {
        max_nesting_cfg = 1;
        which = "core";
    }
    test_watchdog(test_pick(90, 200));
    int fibn = test_pick(18, 12);
    int depth = test_pick(6, 4);
    int deep = test_pick(200, 50);
    if (strcmp(which, "core") == 0) {
        for (unsigned w = 1; w <= 4; w *= 2) {
            test_step("fib");
            test_fib(w, fibn);
            test_step("tree");
            test_tree(w, depth);
            test_step("deep");
            test_deep(w, deep);
            test_step("outside threads");
            test_outside_threads(w, fibn - 3);
        }
    } else if (strcmp(which, "backpressure") == 0) {
        unsigned limit = test_pick(10, 40);
        static char step[128];
        for (unsigned w = 1; w <= 2; w++) {
            for (size_t max = 8; max >= 2; max /= 2) {
                snprintf(step, sizeof step,
                         "4 tasks spawning children, %u worker(s), max_inflight %zu", w, max);
                test_step(step);
                alarm(0);
                test_watchdog(limit);
                test_backpressure_in_task(w, test_pick(1000, 200), max);
            }
        }
    } else if (strcmp(which, "wait-on-waiting") == 0) {
        test_step("a task waiting for a task that waits for its child");
        test_wait_on_waiting_task(2);
        test_wait_on_waiting_task(1);
        test_step("a task waiting for a task that waits for a child that is not ready");
        test_wait_on_waiting_task_not_ready();
    } else {
        fprintf(stderr, "usage: test_nested [core|backpressure|wait-on-waiting]\n");
        return 2;
    }
    printf("test_nested %s: ok\n", which);
    return 0;
}
