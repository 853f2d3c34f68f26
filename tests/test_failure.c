/* Failure propagation and cancellation: cause ids and names, data-flow
 * propagation rules, weft_task_cancel, weft_cancel_pending. */
#include "check.h"

static atomic_int ran_count;

static int ok_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    atomic_fetch_add(&ran_count, 1);
    return 0;
}

static int fail_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    atomic_fetch_add(&ran_count, 1);
    return (int)(intptr_t)arg;
}

static weft_task *spawn_t(weft_runtime *rt, const char *name, weft_body_fn body, void *arg,
                          weft_task **deps, size_t ndeps, const weft_access *acc, size_t nacc) {
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = body;
    d.arg = arg;
    d.name = name;
    d.deps = deps;
    d.ndeps = ndeps;
    d.accesses = acc;
    d.naccesses = nacc;
    weft_task *t = NULL;
    CHECK_OK(weft_spawn(rt, &d, &t));
    return t;
}

static uint64_t id_of(weft_task *t) {
    weft_task_info info;
    CHECK_OK(weft_task_info_get(t, &info));
    return info.id;
}

#define CHECK_CANCELLED_BY(t, root, rootname)                                              \
    do {                                                                                  \
        weft_task_info i_;                                                                \
        CHECK_RC(weft_task_wait(t), WEFT_ECANCELLED);                                     \
        CHECK_OK(weft_task_info_get((t), &i_));                                           \
        CHECKF(i_.status == WEFT_TASK_CANCELLED, "task %" PRIu64 " (%s): status %d", i_.id, \
               i_.name, (int)i_.status);                                                  \
        CHECKF(i_.cause_id == id_of(root), "task %" PRIu64 " (%s): cause_id %" PRIu64      \
               ", want %" PRIu64, i_.id, i_.name, i_.cause_id, id_of(root));                \
        CHECKF(strcmp(i_.cause_name, (rootname)) == 0,                                    \
               "task %" PRIu64 " (%s): cause_name \"%s\", want \"%s\"", i_.id, i_.name,     \
               i_.cause_name, (rootname));                                                \
    } while (0)

/* A fails; B after A; C after B; D after C and E (E succeeds).  B, C, D are
 * cancelled with A as the cause; E is unaffected; nothing cancelled ran. */
static void test_explicit_propagation(unsigned workers) {
    weft_runtime *rt = make_rt(workers);
    atomic_store(&ran_count, 0);
    weft_task *a = spawn_t(rt, "A", fail_body, (void *)(intptr_t)9, NULL, 0, NULL, 0);
    weft_task *b = spawn_t(rt, "B", ok_body, NULL, &a, 1, NULL, 0);
    weft_task *c = spawn_t(rt, "C", ok_body, NULL, &b, 1, NULL, 0);
    weft_task *e = spawn_t(rt, "E", ok_body, NULL, NULL, 0, NULL, 0);
    weft_task *ce[2] = {e, c};
    weft_task *dd = spawn_t(rt, "D", ok_body, NULL, ce, 2, NULL, 0);
    CHECK_RC(weft_task_wait(a), WEFT_ETASKFAILED);
    CHECK_CANCELLED_BY(b, a, "A");
    CHECK_CANCELLED_BY(c, a, "A");
    CHECK_CANCELLED_BY(dd, a, "A");
    CHECK_OK(weft_task_wait(e));
    weft_task_info info;
    CHECK_OK(weft_task_info_get(a, &info));
    CHECK(info.status == WEFT_TASK_FAILED && info.result == 9);
    CHECK(strcmp(info.name, "A") == 0);
    CHECK_OK(weft_task_info_get(dd, &info));
    CHECK(strcmp(info.name, "D") == 0);
    CHECK_RC(weft_wait_all(rt), WEFT_ETASKFAILED);
    CHECKF(atomic_load(&ran_count) == 2, "%d bodies ran, want 2 (A and E)",
           atomic_load(&ran_count));

    /* Spawning after a dependency already failed (or was cancelled): accepted,
     * cancelled, with the root as cause. */
    weft_task *late1 = spawn_t(rt, "late1", ok_body, NULL, &a, 1, NULL, 0);
    weft_task *late2 = spawn_t(rt, "late2", ok_body, NULL, &c, 1, NULL, 0);
    CHECK_CANCELLED_BY(late1, a, "A");
    CHECK_CANCELLED_BY(late2, a, "A");
    /* Cancellations alone do not count as failures for wait_all. */
    CHECK_OK(weft_wait_all(rt));

    /* The runtime is still usable. */
    weft_task *f = spawn_t(rt, "F", ok_body, NULL, &e, 1, NULL, 0);
    CHECK_OK(weft_task_wait(f));
    CHECK_OK(weft_wait_all(rt));

    weft_stats st;
    CHECK_OK(weft_runtime_stats(rt, &st));
    CHECK(st.tasks_failed == 1);
    CHECKF(st.tasks_cancelled == 5, "tasks_cancelled %" PRIu64, st.tasks_cancelled);

    weft_task *all[] = {a, b, c, e, dd, late1, late2, f};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) weft_task_release(all[i]);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* Two failed roots: a task after both is cancelled with one of them. */
static void test_two_roots(void) {
    weft_runtime *rt = make_rt(2);
    weft_task *r1 = spawn_t(rt, "r1", fail_body, (void *)(intptr_t)1, NULL, 0, NULL, 0);
    weft_task *r2 = spawn_t(rt, "r2", fail_body, (void *)(intptr_t)2, NULL, 0, NULL, 0);
    weft_task *both[2] = {r1, r2};
    weft_task *x = spawn_t(rt, "x", ok_body, NULL, both, 2, NULL, 0);
    CHECK_RC(weft_task_wait(x), WEFT_ECANCELLED);
    weft_task_info info;
    CHECK_OK(weft_task_info_get(x, &info));
    CHECKF((info.cause_id == id_of(r1) && strcmp(info.cause_name, "r1") == 0) ||
               (info.cause_id == id_of(r2) && strcmp(info.cause_name, "r2") == 0),
           "cause %" PRIu64 " \"%s\"", info.cause_id, info.cause_name);
    /* Two failures, reported once. */
    CHECK_RC(weft_wait_all(rt), WEFT_ETASKFAILED);
    CHECK_OK(weft_wait_all(rt));
    weft_task_release(r1);
    weft_task_release(r2);
    weft_task_release(x);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* Data-flow propagation. */
static int write_val(weft_ctx *ctx, void *arg) {
    int *x = weft_ctx_data(ctx, 0);
    *x = (int)(intptr_t)arg;
    return 0;
}

static int write_then_fail(weft_ctx *ctx, void *arg) {
    (void)arg;
    int *x = weft_ctx_data(ctx, 0);
    *x = -1;
    return 4;
}

static atomic_int read_seen;

static int read_val(weft_ctx *ctx, void *arg) {
    (void)arg;
    const int *x = weft_ctx_data(ctx, 0);
    atomic_store(&read_seen, *x);
    return 0;
}

static void test_data_propagation(unsigned workers) {
    weft_runtime *rt = make_rt(workers);
    int x = 0;
    weft_data *d;
    CHECK_OK(weft_data_register(rt, &x, sizeof x, &d));
    weft_access r = {d, WEFT_R}, w = {d, WEFT_W}, rw = {d, WEFT_RW},
                cm = {d, WEFT_RW | WEFT_COMMUTE};

    weft_task *w0 = spawn_t(rt, "w0", write_val, (void *)(intptr_t)5, NULL, 0, &w, 1);
    weft_task *bad = spawn_t(rt, "bad", write_then_fail, NULL, NULL, 0, &rw, 1);
    weft_task *r1 = spawn_t(rt, "r1", read_val, NULL, NULL, 0, &r, 1);  /* cancelled */
    weft_task *rw1 = spawn_t(rt, "rw1", write_val, (void *)(intptr_t)6, NULL, 0, &rw, 1);
    /* rw1 was cancelled, so it is the last writer and is bad too. */
    weft_task *c1 = spawn_t(rt, "c1", write_val, (void *)(intptr_t)7, NULL, 0, &cm, 1);
    weft_task *w1 = spawn_t(rt, "w1", write_val, (void *)(intptr_t)8, NULL, 0, &w, 1); /* runs */
    weft_task *r2 = spawn_t(rt, "r2", read_val, NULL, NULL, 0, &r, 1);                  /* runs */
    CHECK_OK(weft_task_wait(w0));
    CHECK_RC(weft_task_wait(bad), WEFT_ETASKFAILED);
    CHECK_CANCELLED_BY(r1, bad, "bad");
    CHECK_CANCELLED_BY(rw1, bad, "bad");
    CHECK_CANCELLED_BY(c1, bad, "bad");
    CHECK_OK(weft_task_wait(w1));
    CHECK_OK(weft_task_wait(r2));
    CHECKF(atomic_load(&read_seen) == 8, "reader after the overwrite saw %d",
           atomic_load(&read_seen));
    CHECK(x == 8);
    CHECK_RC(weft_wait_all(rt), WEFT_ETASKFAILED);

    /* A writer after readers of failed data is an ordering edge only. */
    weft_task *bad2 = spawn_t(rt, "bad2", write_then_fail, NULL, NULL, 0, &w, 1);
    weft_task *r3 = spawn_t(rt, "r3", read_val, NULL, NULL, 0, &r, 1); /* cancelled */
    weft_task *w2 = spawn_t(rt, "w2", write_val, (void *)(intptr_t)10, NULL, 0, &w, 1);
    weft_task *r4 = spawn_t(rt, "r4", read_val, NULL, NULL, 0, &r, 1);
    CHECK_CANCELLED_BY(r3, bad2, "bad2");
    CHECK_OK(weft_task_wait(w2));
    CHECK_OK(weft_task_wait(r4));
    CHECK(x == 10);

    /* A W writer cancelled through an explicit dependency is a bad last
     * writer: its readers are cancelled too (cause: the explicit root). */
    weft_task *root = spawn_t(rt, "root", fail_body, (void *)(intptr_t)3, NULL, 0, NULL, 0);
    weft_task *w3 = spawn_t(rt, "w3", write_val, (void *)(intptr_t)11, &root, 1, &w, 1);
    weft_task *r5 = spawn_t(rt, "r5", read_val, NULL, NULL, 0, &r, 1);
    CHECK_CANCELLED_BY(w3, root, "root");
    CHECK_CANCELLED_BY(r5, root, "root");
    CHECK(x == 10);

    /* Commute group with one failing member: the other members run, the
     * reader after the group is cancelled with the failed member as cause. */
    weft_task *w4 = spawn_t(rt, "w4", write_val, (void *)(intptr_t)0, NULL, 0, &w, 1);
    weft_task *g[5];
    for (int i = 0; i < 5; i++)
        g[i] = spawn_t(rt, i == 2 ? "gbad" : "g", i == 2 ? fail_body : ok_body,
                       (void *)(intptr_t)(i == 2 ? 1 : 0), NULL, 0, &cm, 1);
    weft_task *r6 = spawn_t(rt, "r6", read_val, NULL, NULL, 0, &r, 1);
    weft_task *w5 = spawn_t(rt, "w5", write_val, (void *)(intptr_t)12, NULL, 0, &w, 1);
    CHECK_OK(weft_task_wait(w4));
    for (int i = 0; i < 5; i++) CHECK_RC(weft_task_wait(g[i]), i == 2 ? WEFT_ETASKFAILED : 0);
    CHECK_CANCELLED_BY(r6, g[2], "gbad");
    CHECK_OK(weft_task_wait(w5));
    CHECK(x == 12);
    CHECK_RC(weft_wait_all(rt), WEFT_ETASKFAILED);

    weft_task *all[] = {w0, bad, r1, rw1, c1, w1, r2, bad2, r3, w2, r4, root, w3, r5, w4,
                        r6, w5, g[0], g[1], g[2], g[3], g[4]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) weft_task_release(all[i]);
    CHECK_OK(weft_data_unregister(d));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* weft_task_cancel. */
static void test_task_cancel(void) {
    weft_runtime *rt = make_rt(1);
    block_workers_reset();
    atomic_store(&ran_count, 0);
    int x = 0;
    weft_data *d;
    CHECK_OK(weft_data_register(rt, &x, sizeof x, &d));
    weft_access r = {d, WEFT_R}, w = {d, WEFT_W};

    weft_task *b = spawn_t(rt, "blocker", blocker, NULL, NULL, 0, NULL, 0);
    CHECK(wait_flag(&blocker_in, 10000) == 0);
    weft_task *x1 = spawn_t(rt, "x1", write_val, (void *)(intptr_t)3, NULL, 0, &w, 1);
    weft_task *y1 = spawn_t(rt, "y1", ok_body, NULL, &x1, 1, NULL, 0);
    weft_task *rd = spawn_t(rt, "rd", read_val, NULL, NULL, 0, &r, 1);
    weft_task *free1 = spawn_t(rt, "free1", ok_body, NULL, NULL, 0, NULL, 0);
    weft_task *waiting = spawn_t(rt, "waiting", ok_body, NULL, &b, 1, NULL, 0);
    CHECK_OK(weft_task_cancel(x1));     /* ready, not started */
    CHECK_OK(weft_task_cancel(waiting)); /* waiting on a dependency */
    CHECK_OK(weft_task_cancel(b));      /* running: unaffected */
    CHECK_OK(weft_task_cancel(x1));     /* twice: harmless */
    atomic_store(&gate, 1);
    CHECK_OK(weft_task_wait(b));
    CHECK_CANCELLED_BY(x1, x1, "x1");
    CHECK_CANCELLED_BY(y1, x1, "x1");
    CHECK_CANCELLED_BY(rd, x1, "x1");
    CHECK_CANCELLED_BY(waiting, waiting, "waiting");
    CHECK_OK(weft_task_wait(free1));
    CHECK(x == 0);
    /* Cancelling a finished task changes nothing. */
    CHECK_OK(weft_task_cancel(free1));
    weft_task_status s;
    CHECK_OK(weft_task_status_get(free1, &s));
    CHECK(s == WEFT_TASK_COMPLETED);
    CHECK_OK(weft_task_cancel(b));
    CHECK_OK(weft_task_status_get(b, &s));
    CHECK(s == WEFT_TASK_COMPLETED);
    /* No body failed: wait_all reports success. */
    CHECK_OK(weft_wait_all(rt));
    CHECK(atomic_load(&ran_count) == 1);

    weft_task *all[] = {b, x1, y1, rd, free1, waiting};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) weft_task_release(all[i]);
    CHECK_OK(weft_data_unregister(d));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* Cancelling a commute task that is waiting for its group's exclusion (it is
 * ready but another member holds the data): it must not run; the reader
 * after the group is cancelled with it as the cause. */
static atomic_int c1_in;

static int commute_hold(weft_ctx *ctx, void *arg) {
    (void)arg;
    atomic_store(&c1_in, 1);
    if (wait_flag(&gate, 20000) != 0) return 1;
    *(int *)weft_ctx_data(ctx, 0) += 1;
    return 0;
}

static int commute_add(weft_ctx *ctx, void *arg) {
    (void)arg;
    atomic_fetch_add(&ran_count, 1);
    *(int *)weft_ctx_data(ctx, 0) += 10;
    return 0;
}

static void test_cancel_commute_waiter(void) {
    weft_runtime *rt = make_rt(2);
    atomic_store(&gate, 0);
    atomic_store(&c1_in, 0);
    atomic_store(&ran_count, 0);
    int x = 0;
    weft_data *d;
    CHECK_OK(weft_data_register(rt, &x, sizeof x, &d));
    weft_access cm = {d, WEFT_RW | WEFT_COMMUTE}, r = {d, WEFT_R};
    weft_task *c1 = spawn_t(rt, "c1", commute_hold, NULL, NULL, 0, &cm, 1);
    CHECK(wait_flag(&c1_in, 10000) == 0);
    weft_task *c2 = spawn_t(rt, "c2", commute_add, NULL, NULL, 0, &cm, 1);
    weft_task *c3 = spawn_t(rt, "c3", commute_add, NULL, NULL, 0, &cm, 1);
    sleep_ms(50); /* let the other worker try c2/c3 and find the data busy */
    weft_task_status s;
    CHECK_OK(weft_task_status_get(c2, &s));
    CHECKF(s == WEFT_TASK_READY || s == WEFT_TASK_WAITING, "c2 status %d while c1 holds the data",
           (int)s);
    CHECK_OK(weft_task_cancel(c2));
    weft_task *rd = spawn_t(rt, "rd", read_val, NULL, NULL, 0, &r, 1);
    atomic_store(&gate, 1);
    CHECK_OK(weft_task_wait(c1));
    CHECK_CANCELLED_BY(c2, c2, "c2");
    CHECK_OK(weft_task_wait(c3));
    CHECK_CANCELLED_BY(rd, c2, "c2");
    CHECK_OK(weft_wait_all(rt));
    CHECKF(x == 11 && atomic_load(&ran_count) == 1, "x %d, %d commute bodies ran", x,
           atomic_load(&ran_count));
    weft_task *all[] = {c1, c2, c3, rd};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) weft_task_release(all[i]);
    CHECK_OK(weft_data_unregister(d));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* weft_cancel_pending. */
static void test_cancel_pending(void) {
    weft_runtime *rt = make_rt(1);
    block_workers_reset();
    atomic_store(&ran_count, 0);
    weft_task *b = spawn_t(rt, "blocker", blocker, NULL, NULL, 0, NULL, 0);
    CHECK(wait_flag(&blocker_in, 10000) == 0);
    enum { N = 50 };
    weft_task *t[N];
    for (int i = 0; i < N; i++) {
        /* Half are independent (cause: themselves), half depend on the
         * blocker. */
        if (i % 2) t[i] = spawn_t(rt, "pend", ok_body, NULL, &b, 1, NULL, 0);
        else t[i] = spawn_t(rt, "pend", ok_body, NULL, NULL, 0, NULL, 0);
    }
    CHECK_OK(weft_cancel_pending(rt));
    /* Spawned afterwards: not affected. */
    weft_task *after = spawn_t(rt, "after", ok_body, NULL, &b, 1, NULL, 0);
    atomic_store(&gate, 1);
    CHECK_OK(weft_task_wait(b)); /* it was running */
    for (int i = 0; i < N; i++) CHECK_CANCELLED_BY(t[i], t[i], "pend");
    CHECK_OK(weft_task_wait(after));
    CHECK_OK(weft_wait_all(rt));
    CHECKF(atomic_load(&ran_count) == 1, "%d bodies ran, want only \"after\"",
           atomic_load(&ran_count));
    weft_stats st;
    CHECK_OK(weft_runtime_stats(rt, &st));
    CHECKF(st.tasks_cancelled == N, "tasks_cancelled %" PRIu64, st.tasks_cancelled);
    for (int i = 0; i < N; i++) weft_task_release(t[i]);
    weft_task_release(after);
    weft_task_release(b);
    /* Nothing pending: harmless. */
    CHECK_OK(weft_cancel_pending(rt));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* A failed child inside a nested spawn: the parent sees ETASKFAILED and may
 * still succeed; wait_all reports the child's failure. */
static int parent_body(weft_ctx *ctx, void *arg) {
    atomic_int *res = arg;
    weft_task *child;
    if (weft_spawn_simple(weft_ctx_runtime(ctx), fail_body, (void *)(intptr_t)2, &child) != 0)
        return 1;
    atomic_store(res, weft_task_wait(child));
    weft_task_release(child);
    return 0;
}

static void test_nested_failure(void) {
    weft_runtime *rt = make_rt(2);
    atomic_int res = 1;
    weft_task *p;
    CHECK_OK(weft_spawn_simple(rt, parent_body, &res, &p));
    CHECK_OK(weft_task_wait(p));
    CHECK_RC(atomic_load(&res), WEFT_ETASKFAILED);
    CHECK_RC(weft_wait_all(rt), WEFT_ETASKFAILED);
    weft_task_release(p);
    CHECK_OK(weft_runtime_destroy(rt));
}

int main(void) {
    test_watchdog(test_pick(60, 150));
    for (unsigned w = 1; w <= 4; w *= 2) {
        test_explicit_propagation(w);
        test_data_propagation(w);
    }
    test_two_roots();
    test_task_cancel();
    test_cancel_pending();
    test_cancel_commute_waiter();
    test_nested_failure();
    printf("test_failure: ok\n");
    return 0;
}
