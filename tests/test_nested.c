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

static void test_fib(unsigned workers, int n) {
    weft_runtime *rt = make_rt(workers);
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
    weft_runtime *rt = make_rt(workers);
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
    weft_runtime *rt = make_rt(workers);
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

int main(void) {
    test_watchdog(test_pick(90, 200));
    int fibn = test_pick(18, 12);
    int depth = test_pick(6, 4);
    int deep = test_pick(200, 50);
    for (unsigned w = 1; w <= 4; w *= 2) {
        test_fib(w, fibn);
        test_tree(w, depth);
        test_deep(w, deep);
        test_outside_threads(w, fibn - 3);
    }
    printf("test_nested: ok\n");
    return 0;
}
