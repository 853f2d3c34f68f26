/* Timed waits: WEFT_ETIMEDOUT on a long task (the task is still pending and
 * completes afterwards), polling with timeout 0, weft_wait_all_timed. */
#include "check.h"

static atomic_int gate;
static atomic_int started;

static int long_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    atomic_store(&started, 1);
    if (wait_flag(&gate, 20000) != 0) return 1;
    return 0;
}

static int sleepy_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    sleep_ms(30);
    return 0;
}

static int fail_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    return 1;
}

static void test_timedwait(unsigned workers) {
    atomic_store(&gate, 0);
    atomic_store(&started, 0);
    weft_runtime *rt = make_rt(workers);
    weft_task *t;
    CHECK_OK(weft_spawn_simple(rt, long_body, NULL, &t));

    /* Poll (0) before and after it starts. */
    CHECK_RC(weft_task_timedwait(t, 0), WEFT_ETIMEDOUT);
    CHECK(wait_flag(&started, 10000) == 0);
    CHECK_RC(weft_task_timedwait(t, 0), WEFT_ETIMEDOUT);

    const uint64_t timeout = 50 * 1000000ull;
    uint64_t t0 = now_ns();
    CHECK_RC(weft_task_timedwait(t, timeout), WEFT_ETIMEDOUT);
    uint64_t el = now_ns() - t0;
    CHECKF(el + 1000000 >= timeout, "timed out after %" PRIu64 " ns, asked %" PRIu64, el, timeout);
    CHECKF(el < 5000000000ull, "a 50 ms timed wait took %" PRIu64 " ns", el);

    weft_task_status s;
    CHECK_OK(weft_task_status_get(t, &s));
    CHECK(s == WEFT_TASK_RUNNING);

    t0 = now_ns();
    CHECK_RC(weft_wait_all_timed(rt, timeout), WEFT_ETIMEDOUT);
    el = now_ns() - t0;
    CHECKF(el + 1000000 >= timeout, "wait_all_timed gave up after %" PRIu64 " ns", el);
    CHECK_RC(weft_wait_all_timed(rt, 0), WEFT_ETIMEDOUT);

    atomic_store(&gate, 1);
    CHECK_OK(weft_task_timedwait(t, 10000000000ull));
    CHECK_OK(weft_task_timedwait(t, 0)); /* finished: polling succeeds */
    CHECK_OK(weft_task_status_get(t, &s));
    CHECK(s == WEFT_TASK_COMPLETED);
    CHECK_OK(weft_wait_all_timed(rt, 10000000000ull));
    CHECK_OK(weft_wait_all_timed(rt, 0));

    /* Timed waits report failure and cancellation like weft_task_wait. */
    weft_task *f, *c;
    CHECK_OK(weft_spawn_simple(rt, fail_body, NULL, &f));
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = long_body;
    d.deps = &f;
    d.ndeps = 1;
    CHECK_OK(weft_spawn(rt, &d, &c));
    CHECK_RC(weft_task_timedwait(f, 10000000000ull), WEFT_ETASKFAILED);
    CHECK_RC(weft_task_timedwait(c, 10000000000ull), WEFT_ECANCELLED);
    CHECK_RC(weft_wait_all_timed(rt, 10000000000ull), WEFT_ETASKFAILED);
    CHECK_OK(weft_wait_all_timed(rt, 10000000000ull));

    /* A huge timeout does not overflow into "poll". */
    weft_task *u;
    CHECK_OK(weft_spawn_simple(rt, sleepy_body, NULL, &u));
    CHECK_OK(weft_task_timedwait(u, UINT64_MAX));

    weft_task_release(t);
    weft_task_release(f);
    weft_task_release(c);
    weft_task_release(u);
    CHECK_OK(weft_runtime_destroy(rt));
}

int main(void) {
    test_watchdog(test_pick(60, 150));
    test_timedwait(1);
    test_timedwait(2);
    printf("test_timedwait: ok\n");
    return 0;
}
