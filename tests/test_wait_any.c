/* weft_task_wait_any: from the program's thread (polling, timing out, woken
 * by whichever task finishes, whatever its outcome, duplicates, a task
 * finished already), from a body on one worker (it runs the awaited tasks
 * meanwhile), its refusals (no tasks, NULL, tasks of two runtimes, the
 * calling task itself), and a body stuck in it letting the runtime settle. */
#include "check.h"

static atomic_int gates[2];

static int gated_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    atomic_int *g = arg;
    return wait_flag(g, 20000) != 0;
}

static int fail_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    atomic_int *g = arg;
    return wait_flag(g, 20000) == 0 ? 5 : 0;
}

static void test_outside(unsigned workers) {
    test_step("outside");
    atomic_store(&gates[0], 0);
    atomic_store(&gates[1], 0);
    weft_runtime *rt = make_rt(workers);
    weft_task *ts[3];
    CHECK_OK(weft_spawn_simple(rt, gated_body, &gates[0], &ts[0]));
    CHECK_OK(weft_spawn_simple(rt, fail_body, &gates[1], &ts[1]));
    ts[2] = ts[0]; /* a duplicate */
    size_t which = 99;
    CHECK_ERR(weft_task_wait_any(ts, 3, 0, &which), WEFT_ETIMEDOUT);
    const uint64_t timeout = 30 * 1000000ull;
    uint64_t t0 = now_ns();
    CHECK_ERR(weft_task_wait_any(ts, 3, timeout, &which), WEFT_ETIMEDOUT);
    CHECKF(now_ns() - t0 + 1000000 >= timeout, "timed out after %" PRIu64 " ns", now_ns() - t0);
    CHECK(which == 99);

    /* The second finishes (it fails): the wait reports it, not its outcome. */
    atomic_store(&gates[1], 1);
    CHECK_OK(weft_task_wait_any(ts, 3, UINT64_MAX, &which));
    CHECK(which == 1);
    CHECK_RC(weft_task_wait(ts[1]), WEFT_ETASKFAILED);
    weft_task_status s;
    CHECK_OK(weft_task_status_get(ts[0], &s));
    CHECK(s == WEFT_TASK_RUNNING || s == WEFT_TASK_READY);
    /* A task finished already: at once, with 0 (polling) too. */
    CHECK_OK(weft_task_wait_any(ts, 3, 0, &which));
    CHECK(which == 1);

    /* The duplicate: reported by its first index. */
    weft_task *dup[2] = {ts[0], ts[0]};
    atomic_store(&gates[0], 1);
    CHECK_OK(weft_task_wait_any(dup, 2, 10000000000ull, &which));
    CHECK(which == 0);
    CHECK_RC(weft_wait_all_timed(rt, 10000000000ull), WEFT_ETASKFAILED);
    weft_task_release(ts[0]);
    weft_task_release(ts[1]);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* A body on the only worker waits for the first of its children: the
 * worker runs them while it waits (no other thread could). */
static atomic_int inner_rc;
static weft_runtime *inner_rt;
static weft_task *self_task;

static int child_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    return 0;
}

static int parent_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    weft_task *kids[3];
    CHECK_OK(weft_spawn_simple(inner_rt, child_body, NULL, &kids[0]));
    CHECK_OK(weft_spawn_simple(inner_rt, child_body, NULL, &kids[1]));
    size_t which = 99;
    int rc = weft_task_wait_any(kids, 2, UINT64_MAX, &which);
    if (rc == 0 && which > 1) rc = -100;
    /* The calling task itself among them: refused, never a hang. */
    kids[2] = self_task;
    if (rc == 0 && self_task) {
        int r2 = weft_task_wait_any(kids, 3, UINT64_MAX, &which);
        if (r2 != WEFT_EBUSY) rc = -200 + r2;
    }
    CHECK_OK(weft_task_wait(kids[0]));
    CHECK_OK(weft_task_wait(kids[1]));
    weft_task_release(kids[0]);
    weft_task_release(kids[1]);
    atomic_store(&inner_rc, rc);
    return 0;
}

static atomic_int self_known;

static int parent_gated(weft_ctx *ctx, void *arg) {
    if (wait_flag(&self_known, 20000) != 0) return 1;
    return parent_body(ctx, arg);
}

static void test_inside(void) {
    test_step("inside");
    inner_rt = make_rt(1);
    atomic_store(&inner_rc, 1);
    atomic_store(&self_known, 0);
    weft_task *p;
    CHECK_OK(weft_spawn_simple(inner_rt, parent_gated, NULL, &p));
    self_task = p;
    atomic_store(&self_known, 1);
    CHECK_OK(weft_task_timedwait(p, 20000000000ull));
    CHECK_RC(atomic_load(&inner_rc), 0);
    weft_task_release(p);
    CHECK_OK(weft_runtime_destroy(inner_rt));
}

static void test_misuse(void) {
    test_step("misuse");
    weft_runtime *a = make_rt(1), *b = make_rt(1);
    weft_task *ts[2];
    size_t which;
    CHECK_OK(weft_spawn_simple(a, child_body, NULL, &ts[0]));
    CHECK_OK(weft_spawn_simple(b, child_body, NULL, &ts[1]));
    CHECK_ERR(weft_task_wait_any(ts, 2, UINT64_MAX, &which), WEFT_EINVAL);
    CHECK(strstr(weft_last_error(), "another runtime") != NULL);
    CHECK_ERR(weft_task_wait_any(ts, 0, UINT64_MAX, &which), WEFT_EINVAL);
    CHECK_ERR(weft_task_wait_any(NULL, 1, UINT64_MAX, &which), WEFT_EINVAL);
    CHECK_ERR(weft_task_wait_any(ts, 1, UINT64_MAX, NULL), WEFT_EINVAL);
    weft_task *null1[2] = {ts[0], NULL};
    CHECK_ERR(weft_task_wait_any(null1, 2, UINT64_MAX, &which), WEFT_EINVAL);
    CHECK_OK(weft_task_wait_any(ts, 1, UINT64_MAX, &which));
    CHECK(which == 0);
    weft_task_release(ts[0]);
    weft_task_release(ts[1]);
    CHECK_OK(weft_runtime_destroy(a));
    CHECK_OK(weft_runtime_destroy(b));
}

/* A body in an untimed wait for any of keys nobody spawns is stuck: the
 * runtime settles beside it (weft_wait_settled_timed returns, and
 * weft_runtime_stalled names a key), and the destroy cancels the keys,
 * which ends the wait.  Twenty keys (past the first copy's room), and on
 * one worker a wait for any that runs the task it waits for nested, whose
 * body waits for a key in turn (frames one over the other). */
static weft_space *keys_space;
static atomic_int keys_rc, keys_which;

static int any_keys_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    size_t n = (size_t)(uintptr_t)arg;
    weft_task *ts[20];
    for (size_t i = 0; i < n; i++) {
        int64_t k = 100 + (int64_t)i;
        if (weft_space_task(keys_space, &k, 1, &ts[i]) != 0) return 1;
    }
    size_t which = SIZE_MAX;
    atomic_store(&keys_rc, weft_task_wait_any(ts, n, UINT64_MAX, &which));
    atomic_store(&keys_which, (int)which);
    return 0;
}

static int key_waiter_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    int64_t k = 7;
    weft_task *t;
    if (weft_space_task(keys_space, &k, 1, &t) != 0) return 1;
    return weft_task_wait(t) == WEFT_ECANCELLED ? 0 : 1;
}

static weft_task *_Atomic nested_target;
static atomic_int nested_known;

static int any_nested_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    if (wait_flag(&nested_known, 20000) != 0) return 1;
    weft_task *t = atomic_load(&nested_target);
    size_t which = SIZE_MAX;
    atomic_store(&keys_rc, weft_task_wait_any(&t, 1, UINT64_MAX, &which));
    atomic_store(&keys_which, (int)which);
    return 0;
}

static void test_settles(void) {
    test_step("a body waiting for any of keys nobody spawns lets the runtime settle");
    for (int nested = 0; nested < 2; nested++) {
        weft_runtime *rt = make_rt(nested ? 1 : 2);
        CHECK_OK(weft_space_create(rt, "K", &keys_space));
        atomic_store(&keys_rc, -1);
        atomic_store(&keys_which, -1);
        atomic_store(&nested_known, 0);
        weft_task *b;
        if (!nested) {
            CHECK_OK(weft_spawn_simple(rt, any_keys_body, (void *)(uintptr_t)20, &b));
        } else {
            /* (the waiting body runs first, on the one worker, and waits
             * for the waiter once it is queued: it runs it on its stack) */
            CHECK_OK(weft_spawn_simple(rt, any_nested_body, NULL, &b));
            weft_task *t;
            CHECK_OK(weft_spawn_simple(rt, key_waiter_body, NULL, &t));
            atomic_store(&nested_target, t);
            atomic_store(&nested_known, 1);
        }
        CHECK_OK(weft_wait_settled_timed(rt, 20ull * 1000000000ull));
        char key[32] = "";
        CHECK(weft_runtime_stalled(rt, key) >= 1);
        CHECKF(strncmp(key, "K[", 2) == 0, "key: %s", key);
        CHECK(atomic_load(&keys_rc) == -1); /* still waiting */
        weft_task_status st;
        CHECK_OK(weft_task_status_get(b, &st));
        CHECK(st == WEFT_TASK_RUNNING);
        CHECK_ERR(weft_runtime_destroy(rt), WEFT_ECANCELLED); /* (the keys) */
        CHECK_RC(atomic_load(&keys_rc), 0);
        CHECKF(nested ? atomic_load(&keys_which) == 0 : atomic_load(&keys_which) >= 0 && atomic_load(&keys_which) < 20,
               "which: %d", atomic_load(&keys_which));
        CHECK_OK(weft_task_wait(b));
        weft_task_release(b);
        if (nested) {
            CHECK_OK(weft_task_wait(atomic_load(&nested_target)));
            weft_task_release(atomic_load(&nested_target));
        }
    }
}

int main(void) {
    test_watchdog(test_pick(60, 150));
    test_outside(2); /* (each gated task holds a worker) */
    test_outside(3);
    test_inside();
    test_misuse();
    test_settles();
    printf("test_wait_any: ok\n");
    return 0;
}
