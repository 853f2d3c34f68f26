/* Data access modes: readers run concurrently, writers are ordered after
 * readers and writers, RW chains, commute groups, unregister. */
#include "check.h"

/* ---- two readers overlap ----------------------------------------------------- */

static atomic_int rendezvous;
static atomic_int rendezvous_timeouts;

/* Both readers must be inside their bodies at the same time: each arrives and
 * waits (up to 5 s) for the other.  If the runtime serialized them, the first
 * one times out instead of hanging. */
static int reader_meet(weft_ctx *ctx, void *arg) {
    (void)arg;
    const int *x = weft_ctx_data(ctx, 0);
    if (x == NULL || *x != 41) atomic_fetch_add(&rendezvous_timeouts, 100);
    atomic_fetch_add(&rendezvous, 1);
    uint64_t end = now_ns() + 5000000000ull;
    while (atomic_load(&rendezvous) < 2) {
        if (now_ns() > end) {
            atomic_fetch_add(&rendezvous_timeouts, 1);
            return 0;
        }
        sleep_ns(50000);
    }
    return 0;
}

static void test_readers_overlap(void) {
    weft_runtime *rt = make_rt(2);
    int x = 41;
    weft_data *d;
    CHECK_OK(weft_data_register(rt, &x, sizeof x, &d));
    for (int round = 0; round < 3; round++) {
        atomic_store(&rendezvous, 0);
        atomic_store(&rendezvous_timeouts, 0);
        weft_access acc = {d, WEFT_R};
        weft_task_desc desc;
        weft_task_desc_init(&desc);
        desc.body = reader_meet;
        desc.accesses = &acc;
        desc.naccesses = 1;
        CHECK_OK(weft_spawn(rt, &desc, NULL));
        CHECK_OK(weft_spawn(rt, &desc, NULL));
        CHECK_OK(weft_wait_all(rt));
        CHECKF(atomic_load(&rendezvous_timeouts) == 0,
               "two WEFT_R readers of the same data did not run concurrently (%d)",
               atomic_load(&rendezvous_timeouts));
    }
    CHECK_OK(weft_data_unregister(d));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- ordering between readers and writers ------------------------------------ */

typedef struct order_state {
    atomic_int readers_done;
    atomic_int writer_done;
    atomic_int bad;
} order_state;

static order_state ost;

static int slow_reader(weft_ctx *ctx, void *arg) {
    (void)arg;
    int *x = weft_ctx_data(ctx, 0);
    int v = *x;
    sleep_ms(30);
    if (*x != v) atomic_store(&ost.bad, 1); /* a writer ran concurrently */
    if (atomic_load(&ost.writer_done)) atomic_store(&ost.bad, 2);
    atomic_fetch_add(&ost.readers_done, 1);
    return 0;
}

static int writer_after_readers(weft_ctx *ctx, void *arg) {
    (void)arg;
    int *x = weft_ctx_data(ctx, 0);
    if (atomic_load(&ost.readers_done) != 2) atomic_store(&ost.bad, 3);
    *x = 100;
    atomic_store(&ost.writer_done, 1);
    return 0;
}

static int slow_writer(weft_ctx *ctx, void *arg) {
    (void)arg;
    int *x = weft_ctx_data(ctx, 0);
    sleep_ms(30);
    *x = 200;
    return 0;
}

static atomic_int seen_value;

static int reader_records(weft_ctx *ctx, void *arg) {
    (void)arg;
    int *x = weft_ctx_data(ctx, 0);
    atomic_store(&seen_value, *x);
    return 0;
}

static int w_only_writer(weft_ctx *ctx, void *arg) {
    int *x = weft_ctx_data(ctx, 0);
    sleep_ms(20);
    *x = (int)(intptr_t)arg;
    return 0;
}

static void spawn1(weft_runtime *rt, weft_body_fn body, void *arg, weft_data *d, unsigned mode,
                   weft_task **out) {
    weft_access acc = {d, mode};
    weft_task_desc desc;
    weft_task_desc_init(&desc);
    desc.body = body;
    desc.arg = arg;
    desc.accesses = &acc;
    desc.naccesses = 1;
    CHECK_OK(weft_spawn(rt, &desc, out));
}

static void test_rw_ordering(unsigned workers) {
    weft_runtime *rt = make_rt(workers);
    int x = 1;
    weft_data *d;
    CHECK_OK(weft_data_register(rt, &x, sizeof x, &d));

    /* W after R waits for both readers. */
    memset(&ost, 0, sizeof ost);
    spawn1(rt, slow_reader, NULL, d, WEFT_R, NULL);
    spawn1(rt, slow_reader, NULL, d, WEFT_R, NULL);
    spawn1(rt, writer_after_readers, NULL, d, WEFT_W, NULL);
    CHECK_OK(weft_wait_all(rt));
    CHECKF(atomic_load(&ost.bad) == 0, "writer overlapped or preceded readers (%d)",
           atomic_load(&ost.bad));
    CHECK(x == 100);

    /* RW after R waits too. */
    memset(&ost, 0, sizeof ost);
    spawn1(rt, slow_reader, NULL, d, WEFT_R, NULL);
    spawn1(rt, slow_reader, NULL, d, WEFT_R, NULL);
    spawn1(rt, writer_after_readers, NULL, d, WEFT_RW, NULL);
    CHECK_OK(weft_wait_all(rt));
    CHECK(atomic_load(&ost.bad) == 0);

    /* R after W sees the write. */
    atomic_store(&seen_value, -1);
    spawn1(rt, slow_writer, NULL, d, WEFT_W, NULL);
    spawn1(rt, reader_records, NULL, d, WEFT_R, NULL);
    CHECK_OK(weft_wait_all(rt));
    CHECKF(atomic_load(&seen_value) == 200, "reader after a writer saw %d",
           atomic_load(&seen_value));

    /* W after W: the later write wins. */
    spawn1(rt, w_only_writer, (void *)(intptr_t)7, d, WEFT_W, NULL);
    spawn1(rt, w_only_writer, (void *)(intptr_t)8, d, WEFT_W, NULL);
    spawn1(rt, reader_records, NULL, d, WEFT_R, NULL);
    CHECK_OK(weft_wait_all(rt));
    CHECK(x == 8 && atomic_load(&seen_value) == 8);

    CHECK_OK(weft_data_unregister(d));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- RW chain ------------------------------------------------------------------- */

static int rw_step(weft_ctx *ctx, void *arg) {
    uint64_t *v = weft_ctx_data(ctx, 0);
    *v = mix64(*v + (uint64_t)(uintptr_t)arg);
    return 0;
}

/* Two data handles: RW on a, R on a + RW on b. */
static int rw_cross(weft_ctx *ctx, void *arg) {
    (void)arg;
    const uint64_t *a = weft_ctx_data(ctx, 0);
    uint64_t *b = weft_ctx_data(ctx, 1);
    *b = mix64(*b ^ *a);
    return 0;
}

static void test_rw_chain(unsigned workers, int len) {
    weft_runtime *rt = make_rt(workers);
    uint64_t a = 1, b = 2;
    weft_data *da, *db;
    CHECK_OK(weft_data_register(rt, &a, sizeof a, &da));
    CHECK_OK(weft_data_register(rt, &b, sizeof b, &db));
    uint64_t ea = 1, eb = 2;
    for (int i = 0; i < len; i++) {
        spawn1(rt, rw_step, (void *)(uintptr_t)i, da, WEFT_RW, NULL);
        ea = mix64(ea + (uint64_t)i);
        if (i % 3 == 0) {
            weft_access acc[2] = {{da, WEFT_R}, {db, WEFT_RW}};
            weft_task_desc desc;
            weft_task_desc_init(&desc);
            desc.body = rw_cross;
            desc.accesses = acc;
            desc.naccesses = 2;
            CHECK_OK(weft_spawn(rt, &desc, NULL));
            eb = mix64(eb ^ ea);
        }
    }
    CHECK_OK(weft_wait_all(rt));
    CHECKF(a == ea && b == eb, "RW chain of %d: a %" PRIx64 " (want %" PRIx64 "), b %" PRIx64
           " (want %" PRIx64 ")", len, a, ea, b, eb);
    CHECK_OK(weft_data_unregister(da));
    CHECK_OK(weft_data_unregister(db));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- commute groups ------------------------------------------------------------ */

static atomic_int commute_inside;
static atomic_int commute_overlaps;
static atomic_int commute_ran;

static int commute_add(weft_ctx *ctx, void *arg) {
    (void)arg;
    long *acc = weft_ctx_data(ctx, 0);
    if (atomic_exchange(&commute_inside, 1) != 0) atomic_fetch_add(&commute_overlaps, 1);
    long v = *acc;
    for (volatile int spin = 0; spin < 200; spin++) {
    }
    *acc = v + 1;
    atomic_store(&commute_inside, 0);
    atomic_fetch_add(&commute_ran, 1);
    return 0;
}

static atomic_long commute_reader_saw;

static int commute_reader(weft_ctx *ctx, void *arg) {
    (void)arg;
    const long *acc = weft_ctx_data(ctx, 0);
    atomic_store(&commute_reader_saw, *acc);
    return 0;
}

static atomic_int first_group_bad;

/* A second reader of the value after the first group: it must see the
 * whole first group and none of the second. */
static int check_first_group(weft_ctx *ctx, void *arg) {
    const long *acc = weft_ctx_data(ctx, 0);
    if (*acc != (long)(intptr_t)arg) atomic_store(&first_group_bad, (int)*acc + 1);
    return 0;
}

static int long_writer(weft_ctx *ctx, void *arg) {
    long *x = weft_ctx_data(ctx, 0);
    sleep_ms(20);
    *x = (long)(intptr_t)arg;
    return 0;
}

/* N commute tasks increment a plain long; none may overlap, the reader after
 * the group sees all N increments on top of the writer before the group. */
static void test_commute(unsigned workers, int n) {
    weft_runtime *rt = make_rt(workers);
    long acc = 0;
    weft_data *d;
    CHECK_OK(weft_data_register(rt, &acc, sizeof acc, &d));
    atomic_store(&commute_inside, 0);
    atomic_store(&commute_overlaps, 0);
    atomic_store(&commute_ran, 0);
    atomic_store(&commute_reader_saw, -1);
    atomic_store(&first_group_bad, 0);

    /* Writer before the group: the group follows it. */
    spawn1(rt, long_writer, (void *)(intptr_t)1000, d, WEFT_W, NULL);
    for (int i = 0; i < n; i++) spawn1(rt, commute_add, NULL, d, WEFT_RW | WEFT_COMMUTE, NULL);
    spawn1(rt, commute_reader, NULL, d, WEFT_R, NULL);
    spawn1(rt, check_first_group, (void *)(intptr_t)(1000 + n), d, WEFT_R, NULL);
    /* A second group after the reader, then an RW. */
    for (int i = 0; i < n; i++) spawn1(rt, commute_add, NULL, d, WEFT_RW | WEFT_COMMUTE, NULL);
    spawn1(rt, commute_reader, NULL, d, WEFT_RW, NULL);
    CHECK_OK(weft_wait_all(rt));
    CHECKF(acc == 1000 + 2 * n, "after two commute groups of %d: %ld", n, acc);
    CHECKF(atomic_load(&commute_reader_saw) == 1000 + 2 * n, "RW after the second group saw %ld",
           atomic_load(&commute_reader_saw));
    CHECKF(atomic_load(&commute_overlaps) == 0, "%d commute tasks overlapped",
           atomic_load(&commute_overlaps));
    CHECK(atomic_load(&commute_ran) == 2 * n);
    CHECKF(atomic_load(&first_group_bad) == 0,
           "reader after the first commute group saw %d, want %d",
           atomic_load(&first_group_bad) - 1, 1000 + n);
    CHECK_OK(weft_data_unregister(d));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- unregister ----------------------------------------------------------------- */

static atomic_int slow_done;

static int slow_user(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    sleep_ms(20);
    atomic_fetch_add(&slow_done, 1);
    return 0;
}

static void test_unregister(void) {
    weft_runtime *rt = make_rt(2);
    int x = 0;
    weft_data *d;
    CHECK_OK(weft_data_register(rt, &x, sizeof x, &d));
    atomic_store(&slow_done, 0);
    for (int i = 0; i < 4; i++) spawn1(rt, slow_user, NULL, d, i % 2 ? WEFT_R : WEFT_RW, NULL);
    CHECK_OK(weft_data_unregister(d)); /* blocks until all four finished */
    CHECKF(atomic_load(&slow_done) == 4, "unregister returned with %d of 4 users finished",
           atomic_load(&slow_done));
    /* The handle is gone: spawning with it, querying it, unregistering it. */
    weft_access acc = {d, WEFT_R};
    weft_task_desc desc;
    weft_task_desc_init(&desc);
    desc.body = slow_user;
    desc.accesses = &acc;
    desc.naccesses = 1;
    CHECK_ERR(weft_spawn(rt, &desc, NULL), WEFT_EINVAL);
    void *p = (void *)&desc;
    size_t n = 12345;
    CHECK_ERR(weft_data_host(d, &p, &n), WEFT_EINVAL);
    CHECK(p == (void *)&desc && n == 12345);
    CHECK_ERR(weft_data_unregister(d), WEFT_EINVAL);
    /* The same memory can be registered again. */
    CHECK_OK(weft_data_register(rt, &x, sizeof x, &d));
    spawn1(rt, slow_user, NULL, d, WEFT_RW, NULL);
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_unregister(d));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* A data handle still registered at destroy is reclaimed by destroy. */
static void test_destroy_with_registered_data(void) {
    weft_runtime *rt = make_rt(2);
    int x = 0;
    weft_data *d;
    CHECK_OK(weft_data_register(rt, &x, sizeof x, &d));
    spawn1(rt, slow_user, NULL, d, WEFT_RW, NULL);
    CHECK_OK(weft_runtime_destroy(rt));
    CHECK_ERR(weft_data_unregister(d), WEFT_EINVAL);
    void *p;
    size_t n;
    CHECK_ERR(weft_data_host(d, &p, &n), WEFT_EINVAL);
}

/* The same data named twice in one task (not forbidden by the header): the
 * task sees the host pointer at both indexes, and ordering follows the
 * strongest access (R + W behaves as RW). */
static int twice_body(weft_ctx *ctx, void *arg) {
    (void)arg;
    long *a = weft_ctx_data(ctx, 0), *b = weft_ctx_data(ctx, 1);
    if (a == NULL || a != b) return 1;
    long v = *a;
    sleep_ms(10);
    *b = v + 1;
    return 0;
}

static void test_same_data_twice(unsigned workers) {
    weft_runtime *rt = make_rt(workers);
    long x = 0;
    weft_data *d;
    CHECK_OK(weft_data_register(rt, &x, sizeof x, &d));
    weft_access acc[2] = {{d, WEFT_R}, {d, WEFT_W}};
    weft_task_desc desc;
    weft_task_desc_init(&desc);
    desc.body = twice_body;
    desc.accesses = acc;
    desc.naccesses = 2;
    for (int i = 0; i < 20; i++) CHECK_OK(weft_spawn(rt, &desc, NULL));
    CHECK_OK(weft_wait_all(rt));
    CHECKF(x == 20, "20 tasks naming the data as R and W: %ld increments survived", x);
    CHECK_OK(weft_data_unregister(d));
    CHECK_OK(weft_runtime_destroy(rt));
}

int main(void) {
    test_watchdog(test_pick(60, 200));
    test_readers_overlap();
    test_unregister();
    test_destroy_with_registered_data();
    int chain = test_pick(20000, 3000);
    int group = test_pick(2000, 300);
    for (unsigned w = 1; w <= 4; w *= 2) {
        test_rw_ordering(w);
        test_rw_chain(w, chain);
        test_commute(w, group);
        test_same_data_twice(w);
    }
    printf("test_data: ok\n");
    return 0;
}
