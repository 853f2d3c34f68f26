/* Allocation-failure injection: for N = 1, 2, 3, ... make the N-th internal
 * allocation fail, (a) during a small graph (explicit deps, readers and
 * writers, a nested spawn and wait), (b) during weft_runtime_create, until a
 * run completes without reaching the N-th allocation.  Every call must either
 * succeed or return WEFT_ENOMEM (nothing hangs: watchdog), spawned tasks
 * finish, arg_destroy runs exactly once per spawn attempt, and
 * weft__alloc_live() is back to its starting value after destroy. */
#include <pthread.h>

#include "check.h"
#include "testing.h"

static void *nothing(void *arg) { return arg; }

/* Sanitizer runtimes start a helper thread of their own with the first
 * pthread_create; start it now so that thread counts compare like with like. */
static void start_sanitizer_threads(void) {
    pthread_t th;
    CHECK(pthread_create(&th, NULL, nothing, NULL) == 0);
    CHECK(pthread_join(th, NULL) == 0);
}

static atomic_int destroyed;
static atomic_int attempts;
static atomic_int enomem_seen;
static atomic_int unexpected;

static void count_destroy(void *arg) {
    (void)arg;
    atomic_fetch_add(&destroyed, 1);
}

static void note_rc(int rc, const char *what, int allow_enomem) {
    if (rc == 0) return;
    if (rc == WEFT_ENOMEM && allow_enomem) {
        atomic_store(&enomem_seen, 1);
        return;
    }
    fprintf(stderr, "%s returned %d (%s): %s\n", what, rc, weft_strerror(rc), weft_last_error());
    atomic_fetch_add(&unexpected, 1);
}

typedef struct graph {
    weft_runtime *rt;
    int x, y;
    weft_data *dx, *dy;
    atomic_int seen_x, seen_y;
} graph;

static int write_x(weft_ctx *ctx, void *arg) {
    (void)arg;
    *(int *)weft_ctx_data(ctx, 0) = 1;
    return 0;
}

static int x_to_y(weft_ctx *ctx, void *arg) {
    (void)arg;
    int *x = weft_ctx_data(ctx, 0), *y = weft_ctx_data(ctx, 1);
    *y = *x + 10;
    return 0;
}

static int read_x(weft_ctx *ctx, void *arg) {
    (void)arg;
    volatile int v = *(int *)weft_ctx_data(ctx, 0);
    (void)v;
    return 0;
}

static int double_x(weft_ctx *ctx, void *arg) {
    (void)arg;
    int *x = weft_ctx_data(ctx, 0);
    *x *= 2;
    return 0;
}

static int inc_y(weft_ctx *ctx, void *arg) {
    (void)arg;
    *(int *)weft_ctx_data(ctx, 0) += 1;
    return 0;
}

static int spawn_acc(weft_runtime *rt, weft_body_fn body, weft_task **deps, size_t ndeps,
                     weft_data *d0, unsigned m0, weft_data *d1, unsigned m1, weft_task **out) {
    weft_access acc[2] = {{d0, m0}, {d1, m1}};
    size_t nacc = d0 ? (d1 ? 2 : 1) : 0;
    /* drop NULL deps (their spawn failed) */
    weft_task *dv[8];
    size_t nd = 0;
    for (size_t i = 0; i < ndeps; i++)
        if (deps[i]) dv[nd++] = deps[i];
    weft_task_desc desc;
    weft_task_desc_init(&desc);
    desc.body = body;
    desc.arg_destroy = count_destroy;
    desc.deps = dv;
    desc.ndeps = nd;
    desc.accesses = acc;
    desc.naccesses = nacc;
    desc.name = "alloc";
    atomic_fetch_add(&attempts, 1);
    return weft_spawn(rt, &desc, out);
}

#define NKIDS 6

/* Nested: spawn NKIDS commuting increments of y and wait for them. */
static int parent(weft_ctx *ctx, void *arg) {
    graph *g = arg;
    weft_runtime *rt = weft_ctx_runtime(ctx);
    weft_task *kids[NKIDS] = {NULL};
    int fail = 0;
    for (int i = 0; i < NKIDS; i++) {
        int rc = spawn_acc(rt, inc_y, NULL, 0, g->dy, WEFT_RW | WEFT_COMMUTE, NULL, 0, &kids[i]);
        note_rc(rc, "nested weft_spawn", 1);
        if (rc != 0) {
            kids[i] = NULL;
            fail = 1;
        }
    }
    for (int i = 0; i < NKIDS; i++) {
        if (!kids[i]) continue;
        int rc = weft_task_wait(kids[i]);
        if (rc != 0) {
            note_rc(rc, "nested weft_task_wait", 0);
            fail = 1;
        }
        weft_task_release(kids[i]);
    }
    return fail;
}

/* Reads x as data and y directly: y is ordered by the explicit dependency on
 * the parent (which waited for its children).  Accessing y as data here would
 * deadlock the program itself: the children, spawned later, would be writers
 * after this reader while this reader waits for their parent. */
static int final_read(weft_ctx *ctx, void *arg) {
    graph *g = arg;
    atomic_store(&g->seen_x, *(int *)weft_ctx_data(ctx, 0));
    atomic_store(&g->seen_y, g->y);
    return 0;
}

/* Run the graph on rt; if no injected failure was reported, check the result. */
static void run_graph(weft_runtime *rt) {
    graph *g = calloc(1, sizeof *g);
    CHECK(g);
    g->rt = rt;
    int rc;
    rc = weft_data_register(rt, &g->x, sizeof g->x, &g->dx);
    note_rc(rc, "weft_data_register(x)", 1);
    if (rc) g->dx = NULL;
    rc = weft_data_register(rt, &g->y, sizeof g->y, &g->dy);
    note_rc(rc, "weft_data_register(y)", 1);
    if (rc) g->dy = NULL;

    /* t0 W x; t1 R x, RW y; t2..t10 R x (the readers array grows); t11 after
     * five tasks (out-of-line edges); t12 RW x after t1, t2 and, through x,
     * all readers; t13 the nested parent (six commuting children on y);
     * t14 reads x after t11, t12, t13. */
    enum { NT = 15 };
    weft_task *t[NT];
    memset(t, 0, sizeof t);
    int skip = !g->dx || !g->dy;
    if (!skip) {
        rc = spawn_acc(rt, write_x, NULL, 0, g->dx, WEFT_W, NULL, 0, &t[0]);
        note_rc(rc, "weft_spawn t0", 1);
        rc = spawn_acc(rt, x_to_y, NULL, 0, g->dx, WEFT_R, g->dy, WEFT_RW, &t[1]);
        note_rc(rc, "weft_spawn t1", 1);
        for (int i = 2; i <= 10; i++) {
            rc = spawn_acc(rt, read_x, NULL, 0, g->dx, WEFT_R, NULL, 0, &t[i]);
            note_rc(rc, "weft_spawn reader", 1);
        }
        rc = spawn_acc(rt, test_noop, &t[1], 5, NULL, 0, NULL, 0, &t[11]);
        note_rc(rc, "weft_spawn fan-in", 1);
        rc = spawn_acc(rt, double_x, &t[1], 2, g->dx, WEFT_RW, NULL, 0, &t[12]);
        note_rc(rc, "weft_spawn t12", 1);
        /* parent: no data, arg is the graph */
        weft_task_desc desc;
        weft_task_desc_init(&desc);
        desc.body = parent;
        desc.arg = g;
        desc.arg_destroy = count_destroy;
        atomic_fetch_add(&attempts, 1);
        rc = weft_spawn(rt, &desc, &t[13]);
        note_rc(rc, "weft_spawn parent", 1);
        weft_task *deps[3] = {t[11], t[12], t[13]};
        weft_task_desc_init(&desc);
        weft_access acc[1] = {{g->dx, WEFT_R}};
        size_t nd = 0;
        weft_task *dv[3];
        for (int i = 0; i < 3; i++)
            if (deps[i]) dv[nd++] = deps[i];
        desc.body = final_read;
        desc.arg = g;
        desc.arg_destroy = count_destroy;
        desc.deps = dv;
        desc.ndeps = nd;
        desc.accesses = acc;
        desc.naccesses = 1;
        atomic_fetch_add(&attempts, 1);
        rc = weft_spawn(rt, &desc, &t[14]);
        note_rc(rc, "weft_spawn final", 1);
    }
    for (int i = 0; i < NT; i++) {
        if (!t[i]) continue;
        rc = weft_task_wait(t[i]);
        /* Failures and cancellations are possible only as a consequence of
         * an injected failure. */
        if (rc == WEFT_ETASKFAILED || rc == WEFT_ECANCELLED) {
            if (!atomic_load(&enomem_seen)) note_rc(rc, "weft_task_wait", 0);
        } else {
            note_rc(rc, "weft_task_wait", 0);
        }
    }
    rc = weft_wait_all(rt);
    if (rc == WEFT_ETASKFAILED) {
        if (!atomic_load(&enomem_seen)) note_rc(rc, "weft_wait_all", 0);
    } else {
        note_rc(rc, "weft_wait_all", 0);
    }
    if (!atomic_load(&enomem_seen) && !atomic_load(&unexpected) && t[NT - 1]) {
        CHECKF(atomic_load(&g->seen_x) == 2 && atomic_load(&g->seen_y) == 11 + NKIDS &&
                   g->x == 2 && g->y == 11 + NKIDS,
               "graph without injected failure: x %d y %d (seen %d %d), want 2 and 11 + "
               "NKIDS", g->x, g->y,
               atomic_load(&g->seen_x), atomic_load(&g->seen_y));
    }
    weft__alloc_fail_at(0);
    for (int i = 0; i < NT; i++) weft_task_release(t[i]);
    if (g->dx) CHECK_OK(weft_data_unregister(g->dx));
    if (g->dy) CHECK_OK(weft_data_unregister(g->dy));
    free(g);
}

static void reset_counters(void) {
    atomic_store(&destroyed, 0);
    atomic_store(&attempts, 0);
    atomic_store(&enomem_seen, 0);
    atomic_store(&unexpected, 0);
}

static void check_after_destroy(long live0, int threads0, long n, const char *phase) {
    long live = weft__alloc_live();
    CHECKF(live == live0, "%s, fail at %ld: alloc_live %ld after destroy, %ld before", phase, n,
           live, live0);
    CHECKF(atomic_load(&destroyed) == atomic_load(&attempts),
           "%s, fail at %ld: %d spawn attempts, %d arg_destroy calls", phase, n,
           atomic_load(&attempts), atomic_load(&destroyed));
    CHECKF(atomic_load(&unexpected) == 0, "%s, fail at %ld: unexpected return codes (above)",
           phase, n);
    int tc = thread_count_settled(threads0);
    CHECKF(tc == threads0, "%s, fail at %ld: %d threads left, %d at start", phase, n, tc,
           threads0);
}

/* (a) failures during spawn / run / wait. */
static long test_graph_phase(unsigned workers) {
    int threads0 = thread_count_stable();
    long n;
    for (n = 1; n < 100000; n++) {
        alarm(0);
        test_watchdog(test_pick(20, 60));
        reset_counters();
        if (getenv("WEFT_TEST_VERBOSE")) fprintf(stderr, "graph phase %u workers: fail at %ld\n", workers, n);
        long live0 = weft__alloc_live();
        weft_runtime *rt = make_rt(workers);
        long c0 = weft__alloc_count();
        weft__alloc_fail_at(n);
        run_graph(rt);
        weft__alloc_fail_at(0);
        long used = weft__alloc_count() - c0;
        int rc = weft_runtime_destroy(rt);
        CHECKF(rc == 0 || (rc == WEFT_ETASKFAILED && atomic_load(&enomem_seen)),
               "graph phase, fail at %ld: destroy %d", n, rc);
        check_after_destroy(live0, threads0, n, "graph phase");
        if (used < n && !atomic_load(&enomem_seen)) break; /* never reached */
    }
    CHECK(n < 100000);
    return n;
}

/* (b) failures inside weft_runtime_create. */
static long test_create_phase(unsigned workers) {
    int threads0 = thread_count_stable();
    long n;
    for (n = 1; n < 100000; n++) {
        alarm(0);
        test_watchdog(test_pick(20, 60));
        reset_counters();
        long live0 = weft__alloc_live();
        weft_config cfg;
        weft_config_init(&cfg);
        cfg.workers = workers;
        cfg.trace_path = NULL;
        weft_runtime *rt = (weft_runtime *)(uintptr_t)0xdead0;
        long c0 = weft__alloc_count();
        weft__alloc_fail_at(n);
        int rc = weft_runtime_create(&cfg, &rt);
        weft__alloc_fail_at(0);
        long used = weft__alloc_count() - c0;
        if (rc != 0) {
            CHECKF(rc == WEFT_ENOMEM, "create with fail at %ld: %d (%s)", n, rc,
                   weft_strerror(rc));
            CHECK(weft_last_error()[0] != '\0');
            CHECKF(rt == (weft_runtime *)(uintptr_t)0xdead0, "create failed but set *out");
            check_after_destroy(live0, threads0, n, "create phase");
            continue;
        }
        run_graph(rt);
        CHECK_OK(weft_runtime_destroy(rt));
        check_after_destroy(live0, threads0, n, "create phase");
        if (used < n) break;
    }
    CHECK(n < 100000);
    return n;
}

/* (c) the same with a trace configured: trace buffers are allocations too. */
static long test_trace_create_phase(const char *path) {
    int threads0 = thread_count_stable();
    long n;
    for (n = 1; n < 100000; n++) {
        alarm(0);
        test_watchdog(test_pick(20, 60));
        reset_counters();
        long live0 = weft__alloc_live();
        weft_config cfg;
        weft_config_init(&cfg);
        cfg.workers = 2;
        cfg.trace_path = path;
        cfg.trace_max_events = 64;
        weft_runtime *rt = NULL;
        long c0 = weft__alloc_count();
        weft__alloc_fail_at(n);
        int rc = weft_runtime_create(&cfg, &rt);
        weft__alloc_fail_at(0);
        long used = weft__alloc_count() - c0;
        if (rc != 0) {
            CHECK_RC(rc, WEFT_ENOMEM);
            check_after_destroy(live0, threads0, n, "create phase with trace");
            continue;
        }
        run_graph(rt);
        CHECK_OK(weft_runtime_destroy(rt));
        check_after_destroy(live0, threads0, n, "create phase with trace");
        if (used < n) break;
    }
    CHECK(n < 100000);
    return n;
}

int main(int argc, char **argv) {
    start_sanitizer_threads();
    /* The CUDA runtime starts threads of its own the first time a runtime
     * opens a GPU, and keeps them: open it once before counting.  (The
     * create phase uses the default devices, so on a machine with a GPU it
     * fails allocations inside the CUDA device's start as well.) */
    weft_runtime *warm;
    CHECK_OK(weft_runtime_create(NULL, &warm));
    CHECK_OK(weft_runtime_destroy(warm));
    long a1 = test_graph_phase(1);
    long a2 = test_graph_phase(2);
    long b = test_create_phase(2);
    char path[4096];
    snprintf(path, sizeof path, "%s/alloc-trace.json", argc > 1 ? argv[1] : ".");
    long c = test_trace_create_phase(path);
    remove(path);
    alarm(0);
    printf("test_alloc: ok (graph phase: %ld / %ld injection points, create: %ld, create with "
           "trace: %ld)\n", a1 - 1, a2 - 1, b - 1, c - 1);
    return 0;
}
