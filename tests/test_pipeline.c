/* The task pipeline with completion from another thread: tasks whose bodies
 * queue work on the test device (src/testing.h) stay ENQUEUED after their
 * body returned and are completed by the device's own thread.  Checks that
 * dependents are released, failures propagate, waits (task, wait_all) are
 * woken by the completion and not by a timer, and nothing runs twice. */
#include <pthread.h>

#include "check.h"
#include "testing.h"

#define N 64

static atomic_int kernel_runs[N], body_runs[N];
static atomic_int order_bad;
static atomic_int done_upto; /* the chain's progress, checked by each kernel */

typedef struct karg {
    int i;
    int fail;
} karg;

static atomic_int kernel_gate; /* kernel 0 of the chain waits for it */

static int kernel(void *arg) {
    karg *k = arg;
    if (k->i == 0 && !k->fail && wait_flag(&kernel_gate, 20000) != 0) return 99;
    atomic_fetch_add(&kernel_runs[k->i], 1);
    /* A chain: kernel i runs only after kernel i-1 finished. */
    if (atomic_load(&done_upto) != k->i) atomic_fetch_add(&order_bad, 1);
    atomic_store(&done_upto, k->i + 1);
    return k->fail ? 42 : 0;
}

static unsigned dev_index;
static karg kargs[N];

static int body(weft_ctx *ctx, void *arg) {
    karg *k = arg;
    atomic_fetch_add(&body_runs[k->i], 1);
    return weft__test_launch(ctx, dev_index, kernel, k, 0);
}

static weft_runtime *make_dev_rt(unsigned workers, uint64_t delay_ns) {
    weft_runtime *rt = make_rt(workers);
    CHECK_OK(weft__test_device_add(rt, delay_ns, 1 << 20, &dev_index));
    CHECK(dev_index == 1);
    return rt;
}

/* A chain of N device tasks: each dependent is released by the completion
 * reported on the device's thread; every kernel and body runs once. */
static void test_chain(unsigned workers) {
    weft_runtime *rt = make_dev_rt(workers, 20000);
    atomic_store(&kernel_gate, 0);
    atomic_store(&done_upto, 0);
    atomic_store(&order_bad, 0);
    weft_task *t[N];
    for (int i = 0; i < N; i++) {
        atomic_store(&kernel_runs[i], 0);
        atomic_store(&body_runs[i], 0);
        kargs[i] = (karg){i, 0};
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.body = body;
        d.arg = &kargs[i];
        d.deps = i ? &t[i - 1] : NULL;
        d.ndeps = i ? 1 : 0;
        CHECK_OK(weft_spawn(rt, &d, &t[i]));
    }
    /* The first task's body returns at once; its kernel waits for the gate:
     * the task is ENQUEUED (body done, device work in flight), and its
     * dependent still waits. */
    weft_task_status s0, s1;
    do {
        CHECK_OK(weft_task_status_get(t[0], &s0));
        sleep_ns(100000);
    } while (s0 != WEFT_TASK_ENQUEUED);
    CHECK_OK(weft_task_status_get(t[1], &s1));
    CHECK(s1 == WEFT_TASK_WAITING);
    CHECK(atomic_load(&body_runs[1]) == 0);
    atomic_store(&kernel_gate, 1);
    CHECK_OK(weft_task_wait(t[N - 1]));
    CHECK_OK(weft_wait_all(rt));
    for (int i = 0; i < N; i++) {
        CHECK(atomic_load(&kernel_runs[i]) == 1);
        CHECK(atomic_load(&body_runs[i]) == 1);
        weft_task_status s;
        CHECK_OK(weft_task_status_get(t[i], &s));
        CHECK(s == WEFT_TASK_COMPLETED);
        weft_task_release(t[i]);
    }
    CHECK(atomic_load(&order_bad) == 0);
    weft_stats st;
    CHECK_OK(weft_runtime_stats(rt, &st));
    CHECK(st.wait_wakeups_timer == 0);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* A kernel that fails fails its task (with the kernel's value) and cancels
 * the dependents, naming the failed task; a task already running is not. */
static void test_failure(void) {
    weft_runtime *rt = make_dev_rt(2, 100000);
    atomic_store(&done_upto, 0);
    for (int i = 0; i < 3; i++) {
        atomic_store(&kernel_runs[i], 0);
        atomic_store(&body_runs[i], 0);
    }
    kargs[0] = (karg){0, 1};
    kargs[1] = (karg){1, 0};
    weft_task *a, *b;
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = body;
    d.arg = &kargs[0];
    d.name = "device-fails";
    CHECK_OK(weft_spawn(rt, &d, &a));
    d.arg = &kargs[1];
    d.deps = &a;
    d.ndeps = 1;
    d.name = "dependent";
    CHECK_OK(weft_spawn(rt, &d, &b));
    CHECK_RC(weft_task_wait(a), WEFT_ETASKFAILED);
    CHECK_RC(weft_task_wait(b), WEFT_ECANCELLED);
    weft_task_info info;
    CHECK_OK(weft_task_info_get(a, &info));
    CHECK(info.status == WEFT_TASK_FAILED && info.result == 42);
    CHECK_OK(weft_task_info_get(b, &info));
    CHECK(strcmp(info.cause_name, "device-fails") == 0);
    CHECK(atomic_load(&body_runs[1]) == 0 && atomic_load(&kernel_runs[1]) == 0);
    CHECK_RC(weft_wait_all(rt), WEFT_ETASKFAILED);
    weft_stats st;
    CHECK_OK(weft_runtime_stats(rt, &st));
    CHECK(st.tasks_failed == 1 && st.tasks_cancelled == 1);
    weft_task_release(a);
    weft_task_release(b);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* A waiter sleeps until the device's thread completes the task: woken by the
 * event, exactly, not by polling (a few sleeps at most, none ended by a
 * timer), and the worker that ran the body is free meanwhile. */
static atomic_int slow_done;
static int slow_kernel(void *arg) {
    (void)arg;
    atomic_store(&slow_done, 1);
    return 0;
}
static int slow_body(weft_ctx *ctx, void *arg) {
    (void)arg;
    return weft__test_launch(ctx, dev_index, slow_kernel, NULL, 300000000); /* 300 ms */
}

static void test_wake(void) {
    weft_runtime *rt = make_dev_rt(1, 0);
    atomic_store(&slow_done, 0);
    weft_task *t;
    CHECK_OK(weft_spawn_simple(rt, slow_body, NULL, &t));
    /* The only worker is free while the device works: another task runs. */
    weft_task *other;
    CHECK_OK(weft_spawn_simple(rt, blocker, NULL, &other));
    atomic_store(&gate, 1);
    CHECK_OK(weft_task_wait(other));
    CHECK(!atomic_load(&slow_done));
    weft_stats before, after;
    CHECK_OK(weft_runtime_stats(rt, &before));
    CHECK_OK(weft_task_wait(t));
    CHECK(atomic_load(&slow_done));
    CHECK_OK(weft_runtime_stats(rt, &after));
    uint64_t sleeps = after.wait_sleeps - before.wait_sleeps;
    CHECKF(sleeps <= 3, "%llu sleeps for one wait", (unsigned long long)sleeps);
    CHECK(after.wait_wakeups_event - before.wait_wakeups_event == sleeps);
    CHECK(after.wait_wakeups_timer == 0);
    weft_task_release(t);
    weft_task_release(other);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* Destroy with device work in flight waits for it; many tasks on several
 * workers, each completed from the device's thread exactly once. */
static atomic_int many_runs;
static int count_kernel(void *arg) {
    (void)arg;
    atomic_fetch_add(&many_runs, 1);
    return 0;
}
static int many_body(weft_ctx *ctx, void *arg) {
    (void)arg;
    return weft__test_launch(ctx, dev_index, count_kernel, NULL, 1000);
}

static void test_many(void) {
    weft_runtime *rt = make_dev_rt(2, 0);
    atomic_store(&many_runs, 0);
    int n = test_pick(5000, 500);
    for (int i = 0; i < n; i++) CHECK_OK(weft_spawn_simple(rt, many_body, NULL, NULL));
    CHECK_OK(weft_runtime_destroy(rt));
    CHECK(atomic_load(&many_runs) == n);
}

int main(void) {
    test_watchdog(test_pick(60, 200));
    test_step("chain, 1 worker");
    test_chain(1);
    test_step("chain, 2 workers");
    test_chain(2);
    test_step("failure");
    test_failure();
    test_step("wake");
    block_workers_reset();
    test_wake();
    test_step("many");
    test_many();
    printf("test_pipeline: ok\n");
    return 0;
}
