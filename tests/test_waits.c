/* The wait engine: every kind of wait (a task from outside and from a task,
 * wait_all, backpressure, unregister) is ended by the event it waits for,
 * not by a timer.  Shown by counters (weft_stats: sleeps and how they
 * ended), not by timings: another thread holds the event back until the
 * wait under test has gone to sleep, and the wait must wake a bounded number
 * of times, every time because of an event, never because of a timer. */
#include <pthread.h>
#include <time.h>

#include "check.h"

/* Open the gate once the wait under test has gone to sleep (so the test
 * does not depend on how fast the machine is), or after 10 s. */
typedef struct opener {
    weft_runtime *rt;
    uint64_t sleeps_before;
} opener;

static void *open_gate_later(void *arg) {
    opener *o = arg;
    for (int i = 0; i < 10000; i++) {
        weft_stats st;
        if (weft_runtime_stats(o->rt, &st) == 0 && st.wait_sleeps > o->sleeps_before) break;
        sleep_ms(1);
    }
    sleep_ms(20);
    atomic_store(&gate, 1);
    return NULL;
}

/* Run fn with the gate opened by another thread 100 ms later; check the
 * sleeps fn's waits took. */
static void measured(weft_runtime *rt, const char *what, void (*fn)(weft_runtime *, void *), void *arg,
                     unsigned max_sleeps) {
    weft_stats a, b;
    CHECK_OK(weft_runtime_stats(rt, &a));
    pthread_t th;
    opener o = {rt, a.wait_sleeps};
    CHECK(pthread_create(&th, NULL, open_gate_later, &o) == 0);
    fn(rt, arg);
    pthread_join(th, NULL);
    CHECK_OK(weft_runtime_stats(rt, &b));
    uint64_t sleeps = b.wait_sleeps - a.wait_sleeps, ev = b.wait_wakeups_event - a.wait_wakeups_event,
             timer = b.wait_wakeups_timer - a.wait_wakeups_timer;
    printf("%-28s waits %llu, sleeps %llu, woken by event %llu, by timer %llu\n", what,
           (unsigned long long)(b.waits - a.waits), (unsigned long long)sleeps, (unsigned long long)ev,
           (unsigned long long)timer);
    CHECKF(sleeps >= 1, "%s: did not sleep", what);
    CHECKF(sleeps <= max_sleeps, "%s: %llu sleeps (polling?)", what, (unsigned long long)sleeps);
    CHECKF(timer == 0, "%s: woken by a timer", what);
    CHECKF(ev == sleeps, "%s: %llu sleeps but %llu event wake-ups", what, (unsigned long long)sleeps,
           (unsigned long long)ev);
}

static void task_wait_outside(weft_runtime *rt, void *arg) {
    (void)arg;
    weft_task *t;
    CHECK_OK(weft_spawn_simple(rt, blocker, NULL, &t));
    CHECK_OK(weft_task_wait(t));
    weft_task_release(t);
}

static void wait_all(weft_runtime *rt, void *arg) {
    (void)arg;
    CHECK_OK(weft_spawn_simple(rt, blocker, NULL, NULL));
    CHECK_OK(weft_wait_all(rt));
}

static int waits_for_arg(weft_ctx *ctx, void *arg) {
    (void)ctx;
    return weft_task_wait((weft_task *)arg) == 0 ? 0 : 1;
}

static void task_wait_inside(weft_runtime *rt, void *arg) {
    (void)arg;
    weft_task *b, *w;
    CHECK_OK(weft_spawn_simple(rt, blocker, NULL, &b));
    CHECK(wait_flag(&blocker_in, 10000) == 0);
    CHECK_OK(weft_spawn_simple(rt, waits_for_arg, b, &w));
    /* Wait from outside without sleeping, so only the inner wait counts. */
    weft_task_status s;
    do {
        CHECK_OK(weft_task_status_get(w, &s));
    } while (s != WEFT_TASK_COMPLETED && s != WEFT_TASK_FAILED);
    CHECK(s == WEFT_TASK_COMPLETED);
    weft_task_release(b);
    weft_task_release(w);
}

static void backpressure(weft_runtime *rt, void *arg) {
    (void)arg;
    /* max_inflight is 4: two blockers (one per worker) plus two queued
     * tasks fill it; the next spawn sleeps until the gate opens and the
     * backlog drains. */
    CHECK_OK(weft_spawn_simple(rt, blocker, NULL, NULL));
    CHECK_OK(weft_spawn_simple(rt, blocker, NULL, NULL));
    for (int i = 0; i < 8; i++) CHECK_OK(weft_spawn_simple(rt, test_noop, NULL, NULL));
    CHECK(atomic_load(&gate) == 1); /* it could only get here after the gate opened */
}

static void unregister(weft_runtime *rt, void *arg) {
    (void)arg;
    long cell = 0;
    weft_data *d;
    CHECK_OK(weft_data_register(rt, &cell, sizeof cell, &d));
    weft_access a = {d, WEFT_RW};
    weft_task_desc desc;
    weft_task_desc_init(&desc);
    desc.body = blocker;
    desc.accesses = &a;
    desc.naccesses = 1;
    CHECK_OK(weft_spawn(rt, &desc, NULL));
    CHECK_OK(weft_data_unregister(d));
    CHECK(atomic_load(&gate) == 1);
}

static void timed_out(weft_runtime *rt) {
    block_workers_reset();
    weft_stats a, b;
    CHECK_OK(weft_runtime_stats(rt, &a));
    weft_task *t;
    CHECK_OK(weft_spawn_simple(rt, blocker, NULL, &t));
    CHECK_ERR(weft_task_timedwait(t, 50 * 1000000ull), WEFT_ETIMEDOUT);
    CHECK_OK(weft_runtime_stats(rt, &b));
    /* The only timer is the caller's own deadline: one sleep, ended by it. */
    CHECK(b.wait_wakeups_timer - a.wait_wakeups_timer == 1);
    atomic_store(&gate, 1);
    CHECK_OK(weft_task_wait(t));
    weft_task_release(t);
}

/* With one task left, a wait for all (or for the runtime to settle) is
 * woken early and lingers a little, so that its wake-up overlaps the last
 * task (weft__graph_leave); through a long last task it then sleeps again,
 * woken by its end, rather than spin. */
static void *open_gate_after_200ms(void *arg) {
    (void)arg;
    sleep_ms(200);
    atomic_store(&gate, 1);
    return NULL;
}

static int sleep_100ms(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    sleep_ms(100);
    return 0;
}

static void one_task_left(weft_runtime *rt) {
    for (int settle = 0; settle < 2; settle++) {
        block_workers_reset();
        CHECK_OK(weft_spawn_simple(rt, blocker, NULL, NULL));
        CHECK_OK(weft_spawn_simple(rt, sleep_100ms, NULL, NULL)); /* ends while the wait sleeps */
        weft_stats a, b;
        CHECK_OK(weft_runtime_stats(rt, &a));
        pthread_t th;
        CHECK(pthread_create(&th, NULL, open_gate_after_200ms, NULL) == 0);
        struct timespec c0, c1;
        CHECK(clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0) == 0);
        CHECK_OK(settle ? weft_wait_settled_timed(rt, UINT64_MAX) : weft_wait_all(rt));
        CHECK(clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1) == 0);
        CHECK(atomic_load(&gate) == 1);
        pthread_join(th, NULL);
        CHECK_OK(weft_runtime_stats(rt, &b));
        double cpu_ms = (double)(c1.tv_sec - c0.tv_sec) * 1e3 + (double)(c1.tv_nsec - c0.tv_nsec) / 1e6;
        printf("%-28s %.2f ms of CPU through a 200 ms wait; sleeps %llu\n",
               settle ? "wait_settled, one left" : "wait_all, one left", cpu_ms,
               (unsigned long long)(b.wait_sleeps - a.wait_sleeps));
        CHECKF(cpu_ms < 50, "the wait spun through the last task: %.1f ms of CPU", cpu_ms);
        /* Woken early (with one task left), then by the end. */
        CHECKF(b.wait_sleeps - a.wait_sleeps == 2 && b.wait_wakeups_event - a.wait_wakeups_event == 2,
               "%llu sleeps, %llu woken by an event", (unsigned long long)(b.wait_sleeps - a.wait_sleeps),
               (unsigned long long)(b.wait_wakeups_event - a.wait_wakeups_event));
        CHECK(b.wait_wakeups_timer == a.wait_wakeups_timer);
    }
}

int main(void) {
    test_watchdog(test_pick(60, 200));
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = 2;
    cfg.trace_path = NULL;
    cfg.max_inflight = 4;
    weft_runtime *rt;
    CHECK_OK(weft_runtime_create(&cfg, &rt));
    struct {
        const char *name;
        void (*fn)(weft_runtime *, void *);
        unsigned max_sleeps;
    } cases[] = {
        {"task wait (outside)", task_wait_outside, 2},
        {"wait_all", wait_all, 2},
        {"task wait (inside a task)", task_wait_inside, 3},
        {"backpressure (outside)", backpressure, 4},
        {"unregister (outside)", unregister, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        test_step(cases[i].name);
        block_workers_reset();
        measured(rt, cases[i].name, cases[i].fn, NULL, cases[i].max_sleeps);
        CHECK_OK(weft_wait_all(rt));
    }
    test_step("one task left");
    one_task_left(rt);
    test_step("timed out");
    timed_out(rt);
    CHECK_OK(weft_runtime_destroy(rt));
    printf("test_waits: ok\n");
    return 0;
}
