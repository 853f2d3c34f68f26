/* Explicit dependencies: diamond, fan-in, fan-out, a long chain.  Order is
 * checked with a global atomic sequence: every body records the sequence
 * number at its start and at its end; a task must start after each of its
 * dependencies ended. */
#include "check.h"

static atomic_long seq;

typedef struct node {
    long start, end;
    int ndeps;
    struct node *deps[4];
    atomic_int bad;
    int spin_us;
} node;

static int node_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    node *n = arg;
    n->start = atomic_fetch_add(&seq, 1);
    for (int i = 0; i < n->ndeps; i++) {
        node *d = n->deps[i];
        /* d->end was written before d finished; the runtime must order it. */
        if (d->end < 0 || d->end >= n->start) atomic_store(&n->bad, 1);
    }
    if (n->spin_us) {
        uint64_t until = now_ns() + (uint64_t)n->spin_us * 1000u;
        while (now_ns() < until) {
        }
    }
    n->end = atomic_fetch_add(&seq, 1);
    return 0;
}

static void node_init(node *n) {
    memset(n, 0, sizeof *n);
    n->start = n->end = -1;
}

static weft_task *spawn_node(weft_runtime *rt, node *n, weft_task **deps, int ndeps) {
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = node_body;
    d.arg = n;
    d.deps = deps;
    d.ndeps = (size_t)ndeps;
    weft_task *t = NULL;
    CHECK_OK(weft_spawn(rt, &d, &t));
    return t;
}

static void test_diamond(unsigned workers, int rounds) {
    weft_runtime *rt = make_rt(workers);
    for (int r = 0; r < rounds; r++) {
        node a, b, c, e;
        node_init(&a);
        node_init(&b);
        node_init(&c);
        node_init(&e);
        b.ndeps = c.ndeps = 1;
        b.deps[0] = c.deps[0] = &a;
        e.ndeps = 2;
        e.deps[0] = &b;
        e.deps[1] = &c;
        a.spin_us = r % 3 == 0 ? 50 : 0;
        weft_task *ta = spawn_node(rt, &a, NULL, 0);
        weft_task *tb = spawn_node(rt, &b, &ta, 1);
        weft_task *tc = spawn_node(rt, &c, &ta, 1);
        weft_task *bc[2] = {tb, tc};
        weft_task *te = spawn_node(rt, &e, bc, 2);
        CHECK_OK(weft_task_wait(te));
        CHECK_OK(weft_task_wait(ta)); /* already finished */
        CHECKF(!atomic_load(&b.bad) && !atomic_load(&c.bad) && !atomic_load(&e.bad),
               "round %d: a task started before a dependency ended", r);
        CHECK(b.start > a.end && c.start > a.end && e.start > b.end && e.start > c.end);
        weft_task_release(ta);
        weft_task_release(tb);
        weft_task_release(tc);
        weft_task_release(te);
    }
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* Fan-in: one task after 100; fan-out: 100 tasks after one. */
static void test_fan(unsigned workers) {
    enum { N = 100 };
    weft_runtime *rt = make_rt(workers);
    static node srcs[N];
    weft_task *ts[N];
    for (int i = 0; i < N; i++) {
        node_init(&srcs[i]);
        srcs[i].spin_us = (i * 37) % 200;
        ts[i] = spawn_node(rt, &srcs[i], NULL, 0);
    }
    /* node.deps holds 4; check the fan-in by hand instead. */
    node sink;
    node_init(&sink);
    weft_task *tsink = spawn_node(rt, &sink, ts, N);

    static node outs[N];
    weft_task *to[N];
    for (int i = 0; i < N; i++) {
        node_init(&outs[i]);
        outs[i].ndeps = 1;
        outs[i].deps[0] = &sink;
        to[i] = spawn_node(rt, &outs[i], &tsink, 1);
    }
    CHECK_OK(weft_wait_all(rt));
    for (int i = 0; i < N; i++) {
        CHECKF(srcs[i].end >= 0 && srcs[i].end < sink.start,
               "fan-in: sink started at %ld before source %d ended at %ld", sink.start, i,
               srcs[i].end);
        CHECKF(outs[i].start > sink.end && !atomic_load(&outs[i].bad),
               "fan-out: task %d started at %ld, sink ended at %ld", i, outs[i].start,
               sink.end);
        weft_task_release(ts[i]);
        weft_task_release(to[i]);
    }
    weft_task_release(tsink);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* A duplicated dependency and a dependency that already finished. */
static void test_dup_and_done_deps(void) {
    weft_runtime *rt = make_rt(2);
    node a, b;
    node_init(&a);
    node_init(&b);
    weft_task *ta = spawn_node(rt, &a, NULL, 0);
    CHECK_OK(weft_task_wait(ta));
    weft_task *dd[3] = {ta, ta, ta};
    b.ndeps = 1;
    b.deps[0] = &a;
    weft_task *tb = spawn_node(rt, &b, dd, 3);
    CHECK_OK(weft_task_wait(tb));
    CHECK(!atomic_load(&b.bad));
    weft_task_release(ta);
    weft_task_release(tb);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* Chain: task i checks that task i-1 ran just before (non-atomic counter,
 * ordered only by the dependencies). */
typedef struct chain_arg {
    long *counter;
    long index;
    atomic_int *bad;
} chain_arg;

static int chain_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    chain_arg *c = arg;
    if (*c->counter != c->index) atomic_store(c->bad, 1);
    *c->counter = c->index + 1;
    return 0;
}

static void test_chain(unsigned workers, long len, int keep_handles) {
    weft_runtime *rt = make_rt(workers);
    long counter = 0;
    atomic_int bad = 0;
    chain_arg *args = malloc(sizeof *args * (size_t)len);
    weft_task **ts = keep_handles ? malloc(sizeof *ts * (size_t)len) : NULL;
    CHECK(args);
    weft_task *prev = NULL;
    for (long i = 0; i < len; i++) {
        args[i].counter = &counter;
        args[i].index = i;
        args[i].bad = &bad;
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.body = chain_body;
        d.arg = &args[i];
        d.deps = &prev;
        d.ndeps = prev ? 1 : 0;
        weft_task *t;
        CHECK_OK(weft_spawn(rt, &d, &t));
        if (keep_handles) ts[i] = t;
        else weft_task_release(prev);
        prev = t;
    }
    CHECK_OK(weft_task_wait(prev));
    CHECK_OK(weft_wait_all(rt));
    CHECKF(!atomic_load(&bad) && counter == len, "chain of %ld: counter %ld, bad %d", len,
           counter, atomic_load(&bad));
    if (keep_handles) {
        weft_task_info info;
        CHECK_OK(weft_task_info_get(ts[len - 1], &info));
        CHECK(info.id == (uint64_t)len);
        for (long i = 0; i < len; i++) weft_task_release(ts[i]);
    } else {
        weft_task_release(prev);
    }
    CHECK_OK(weft_runtime_destroy(rt));
    free(args);
    free(ts);
}

int main(void) {
    test_watchdog(test_pick(60, 200));
    int rounds = test_pick(2000, 200);
    long chain = test_pick(10000, 2000);
    test_dup_and_done_deps();
    for (unsigned w = 1; w <= 4; w *= 2) {
        test_diamond(w, rounds);
        test_fan(w);
        test_chain(w, chain, w != 2);
    }
    printf("test_deps: ok\n");
    return 0;
}
