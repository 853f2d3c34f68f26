/* Tasks: spawn / wait / status / info / release, arg_destroy exactly once,
 * priorities, names, the weft_ctx accessors. */
#include "check.h"

static int ret_arg(weft_ctx *ctx, void *arg) {
    (void)ctx;
    return (int)(intptr_t)arg;
}

/* ---- basic spawn / wait / status / info ---------------------------------- */

static void test_basic(void) {
    weft_runtime *rt = make_rt(2);
    weft_task *t[3];
    CHECK_OK(weft_spawn_simple(rt, test_noop, NULL, &t[0]));
    CHECK_OK(weft_spawn_simple(rt, ret_arg, (void *)(intptr_t)42, &t[1]));
    CHECK_OK(weft_spawn_simple(rt, ret_arg, (void *)(intptr_t)-7, &t[2]));
    CHECK_OK(weft_task_wait(t[0]));
    CHECK_RC(weft_task_wait(t[1]), WEFT_ETASKFAILED);
    CHECK_RC(weft_task_wait(t[2]), WEFT_ETASKFAILED);
    /* The handle stays valid after a wait: waiting again gives the same. */
    CHECK_OK(weft_task_wait(t[0]));
    CHECK_RC(weft_task_wait(t[1]), WEFT_ETASKFAILED);

    weft_task_status s = WEFT_TASK_WAITING;
    CHECK_OK(weft_task_status_get(t[0], &s));
    CHECK(s == WEFT_TASK_COMPLETED);
    CHECK_OK(weft_task_status_get(t[1], &s));
    CHECK(s == WEFT_TASK_FAILED);

    weft_task_info info;
    for (int i = 0; i < 3; i++) {
        memset(&info, 0x5A, sizeof info);
        CHECK_OK(weft_task_info_get(t[i], &info));
        CHECKF(info.id == (uint64_t)i + 1, "task %d has id %" PRIu64, i, info.id);
        CHECK(info.name[0] == '\0'); /* no name given */
        CHECK(memchr(info.name, '\0', sizeof info.name) != NULL);
        CHECK(memchr(info.cause_name, '\0', sizeof info.cause_name) != NULL);
    }
    CHECK_OK(weft_task_info_get(t[0], &info));
    CHECK(info.status == WEFT_TASK_COMPLETED);
    CHECK(info.result == 0);
    CHECK_OK(weft_task_info_get(t[1], &info));
    CHECK(info.status == WEFT_TASK_FAILED);
    CHECKF(info.result == 42, "result %d, body returned 42", info.result);
    CHECK_OK(weft_task_info_get(t[2], &info));
    CHECKF(info.result == -7, "result %d, body returned -7", info.result);

    CHECK_RC(weft_wait_all(rt), WEFT_ETASKFAILED);
    CHECK_OK(weft_wait_all(rt));

    for (int i = 0; i < 3; i++) weft_task_release(t[i]);
    /* Released handles are detected; out-parameters stay untouched. */
    CHECK_ERR(weft_task_wait(t[0]), WEFT_EINVAL);
    s = (weft_task_status)99;
    CHECK_ERR(weft_task_status_get(t[0], &s), WEFT_EINVAL);
    CHECK(s == (weft_task_status)99);
    memset(&info, 0x5A, sizeof info);
    CHECK_ERR(weft_task_info_get(t[1], &info), WEFT_EINVAL);
    CHECK(info.id == 0x5A5A5A5A5A5A5A5Aull);
    weft_task_release(t[0]); /* twice: ignored */
    weft_task_release(NULL);

    /* The runtime still works. */
    weft_task *u;
    CHECK_OK(weft_spawn_simple(rt, test_noop, NULL, &u));
    CHECK_OK(weft_task_wait(u));
    CHECK_OK(weft_task_info_get(u, &info));
    CHECK(info.id == 4);
    weft_task_release(u);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- status while waiting / ready / running ------------------------------ */

static void test_status_transitions(void) {
    block_workers_reset();
    weft_runtime *rt = make_rt(1);
    weft_task *b, *r, *w;
    CHECK_OK(weft_spawn_simple(rt, blocker, NULL, &b));
    CHECK(wait_flag(&blocker_in, 10000) == 0);
    CHECK_OK(weft_spawn_simple(rt, test_noop, NULL, &r));
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = test_noop;
    d.deps = &b;
    d.ndeps = 1;
    CHECK_OK(weft_spawn(rt, &d, &w));

    weft_task_status s;
    CHECK_OK(weft_task_status_get(b, &s));
    CHECKF(s == WEFT_TASK_RUNNING, "blocked body: status %d", (int)s);
    CHECK_OK(weft_task_status_get(r, &s));
    CHECKF(s == WEFT_TASK_READY, "queued task behind the only worker: status %d", (int)s);
    CHECK_OK(weft_task_status_get(w, &s));
    CHECKF(s == WEFT_TASK_WAITING, "task with an unfinished dependency: status %d", (int)s);
    weft_task_info info;
    CHECK_OK(weft_task_info_get(w, &info));
    CHECK(info.status == WEFT_TASK_WAITING);

    atomic_store(&gate, 1);
    CHECK_OK(weft_task_wait(w));
    CHECK_OK(weft_task_wait(r));
    CHECK_OK(weft_task_status_get(b, &s));
    CHECK(s == WEFT_TASK_COMPLETED);
    weft_task_release(b);
    weft_task_release(r);
    weft_task_release(w);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- arg_destroy exactly once --------------------------------------------- */

typedef struct counted_arg {
    atomic_int ran;
    atomic_int destroyed;
    atomic_int destroyed_before_run_end; /* destroy came while the body ran */
    atomic_int in_body;
    int ret;
} counted_arg;

static int counted_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    counted_arg *a = arg;
    atomic_store(&a->in_body, 1);
    atomic_fetch_add(&a->ran, 1);
    if (atomic_load(&a->destroyed)) atomic_store(&a->destroyed_before_run_end, 1);
    atomic_store(&a->in_body, 0);
    return a->ret;
}

static void counted_destroy(void *arg) {
    counted_arg *a = arg;
    if (atomic_load(&a->in_body)) atomic_store(&a->destroyed_before_run_end, 1);
    atomic_fetch_add(&a->destroyed, 1);
}

static void test_arg_destroy(void) {
    weft_runtime *rt = make_rt(2);
    enum { N = 6 };
    counted_arg a[N];
    memset(a, 0, sizeof a);
    weft_task *t[N];

    /* 0: runs and completes.  1: runs and fails.  2: cancelled (dependency
     * 1 failed).  3: out == NULL.  4: cancelled by request.  5: spawned after
     * its dependency had already failed. */
    a[1].ret = 5;
    weft_task_desc d;
    for (int i = 0; i < 4; i++) {
        weft_task_desc_init(&d);
        d.body = counted_body;
        d.arg = &a[i];
        d.arg_destroy = counted_destroy;
        if (i == 2) {
            d.deps = &t[1];
            d.ndeps = 1;
        }
        CHECK_OK(weft_spawn(rt, &d, i == 3 ? NULL : &t[i]));
    }
    CHECK_OK(weft_task_wait(t[0]));
    CHECK_RC(weft_task_wait(t[1]), WEFT_ETASKFAILED);
    CHECK_RC(weft_task_wait(t[2]), WEFT_ECANCELLED);

    /* 4: cancelled by request while blocked behind a running task. */
    block_workers_reset();
    weft_task *b1;
    CHECK_OK(weft_spawn_simple(rt, blocker, NULL, &b1));
    weft_task_desc_init(&d);
    d.body = counted_body;
    d.arg = &a[4];
    d.arg_destroy = counted_destroy;
    d.deps = &b1;
    d.ndeps = 1;
    CHECK_OK(weft_spawn(rt, &d, &t[4]));
    CHECK_OK(weft_task_cancel(t[4]));
    atomic_store(&gate, 1);
    CHECK_OK(weft_task_wait(b1));
    CHECK_RC(weft_task_wait(t[4]), WEFT_ECANCELLED);

    /* 5: dependency already failed at spawn time: accepted, ends cancelled. */
    weft_task_desc_init(&d);
    d.body = counted_body;
    d.arg = &a[5];
    d.arg_destroy = counted_destroy;
    d.deps = &t[1];
    d.ndeps = 1;
    CHECK_OK(weft_spawn(rt, &d, &t[5]));
    CHECK_RC(weft_task_wait(t[5]), WEFT_ECANCELLED);

    CHECK_RC(weft_wait_all(rt), WEFT_ETASKFAILED);
    /* arg_destroy may run on a worker just after the task is marked finished;
     * wait_all covers that. */
    static const int expect_ran[N] = {1, 1, 0, 1, 0, 0};
    for (int i = 0; i < N; i++) {
        CHECKF(atomic_load(&a[i].ran) == expect_ran[i], "case %d: body ran %d times", i,
               atomic_load(&a[i].ran));
        CHECKF(atomic_load(&a[i].destroyed) == 1, "case %d: arg_destroy called %d times", i,
               atomic_load(&a[i].destroyed));
        CHECKF(atomic_load(&a[i].destroyed_before_run_end) == 0,
               "case %d: arg_destroy called before the body finished", i);
    }

    /* Failed spawns call arg_destroy exactly once, before returning. */
    counted_arg f[4];
    memset(f, 0, sizeof f);
    weft_task *sentinel = (weft_task *)(uintptr_t)0x1234;
    weft_task *out = sentinel;
    weft_task *null_dep = NULL;
    weft_task_desc_init(&d);
    d.body = counted_body;
    d.arg = &f[0];
    d.arg_destroy = counted_destroy;
    d.deps = &null_dep;
    d.ndeps = 1;
    CHECK_ERR(weft_spawn(rt, &d, &out), WEFT_EINVAL);
    CHECK(out == sentinel);
    CHECK(atomic_load(&f[0].destroyed) == 1);

    weft_access acc = {NULL, WEFT_R};
    weft_task_desc_init(&d);
    d.body = counted_body;
    d.arg = &f[1];
    d.arg_destroy = counted_destroy;
    d.accesses = &acc;
    d.naccesses = 1;
    CHECK_ERR(weft_spawn(rt, &d, &out), WEFT_EINVAL);
    CHECK(out == sentinel);
    CHECK(atomic_load(&f[1].destroyed) == 1);

    weft_task_desc_init(&d); /* body == NULL */
    d.arg = &f[2];
    d.arg_destroy = counted_destroy;
    CHECK_ERR(weft_spawn(rt, &d, &out), WEFT_EINVAL);
    CHECK(atomic_load(&f[2].destroyed) == 1);

    for (int i = 0; i < N; i++)
        if (i != 3) weft_task_release(t[i]);
    weft_task_release(b1);
    CHECK_OK(weft_runtime_destroy(rt));

    /* Spawn on a destroyed runtime: WEFT_ECLOSED, arg_destroy called. */
    weft_task_desc_init(&d);
    d.body = counted_body;
    d.arg = &f[3];
    d.arg_destroy = counted_destroy;
    CHECK_ERR(weft_spawn(rt, &d, &out), WEFT_ECLOSED);
    CHECK(out == sentinel);
    CHECK(atomic_load(&f[3].destroyed) == 1);
    for (int i = 0; i < 4; i++) CHECK(atomic_load(&f[i].ran) == 0);
}

/* arg_destroy of tasks still pending at destroy, and with out == NULL. */
static void test_arg_destroy_at_destroy(void) {
    weft_runtime *rt = make_rt(1);
    enum { N = 50 };
    counted_arg a[N];
    memset(a, 0, sizeof a);
    for (int i = 0; i < N; i++) {
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.body = counted_body;
        d.arg = &a[i];
        d.arg_destroy = counted_destroy;
        CHECK_OK(weft_spawn(rt, &d, NULL));
    }
    CHECK_OK(weft_runtime_destroy(rt));
    for (int i = 0; i < N; i++) {
        CHECK(atomic_load(&a[i].ran) == 1);
        CHECK(atomic_load(&a[i].destroyed) == 1);
    }
}

/* ---- priority -------------------------------------------------------------- */

static atomic_int order_pos;
static int order_log[64];

static int log_prio(weft_ctx *ctx, void *arg) {
    (void)ctx;
    int p = atomic_fetch_add(&order_pos, 1);
    if (p < 64) order_log[p] = (int)(intptr_t)arg;
    return 0;
}

static void test_priority(void) {
    block_workers_reset();
    atomic_store(&order_pos, 0);
    weft_runtime *rt = make_rt(1);
    weft_task *b;
    CHECK_OK(weft_spawn_simple(rt, blocker, NULL, &b));
    CHECK(wait_flag(&blocker_in, 10000) == 0);
    /* Low ones first (a FIFO would run them first), then high ones, then a
     * middle one.  Tags: 100+i low (prio -5), 200+i default (0), 300+i high
     * (prio 10). */
    enum { K = 8 };
    weft_task_desc d;
    for (int i = 0; i < K; i++) {
        weft_task_desc_init(&d);
        d.body = log_prio;
        d.arg = (void *)(intptr_t)(100 + i);
        d.priority = -5;
        CHECK_OK(weft_spawn(rt, &d, NULL));
    }
    for (int i = 0; i < K; i++) {
        weft_task_desc_init(&d);
        d.body = log_prio;
        d.arg = (void *)(intptr_t)(200 + i);
        CHECK_OK(weft_spawn(rt, &d, NULL));
    }
    for (int i = 0; i < K; i++) {
        weft_task_desc_init(&d);
        d.body = log_prio;
        d.arg = (void *)(intptr_t)(300 + i);
        d.priority = 10;
        CHECK_OK(weft_spawn(rt, &d, NULL));
    }
    atomic_store(&gate, 1);
    CHECK_OK(weft_wait_all(rt));
    CHECK(atomic_load(&order_pos) == 3 * K);
    for (int i = 0; i < 3 * K; i++) {
        int want_class = i < K ? 300 : i < 2 * K ? 200 : 100;
        CHECKF(order_log[i] / 100 * 100 == want_class,
               "position %d ran task tagged %d; expected class %d (priority order)", i,
               order_log[i], want_class);
    }
    weft_task_release(b);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* A task released by a finishing dependency must not overtake a
 * higher-priority task that was already ready (one worker). */
static void test_priority_after_release(void) {
    block_workers_reset();
    atomic_store(&order_pos, 0);
    weft_runtime *rt = make_rt(1);
    weft_task *b;
    CHECK_OK(weft_spawn_simple(rt, blocker, NULL, &b));
    CHECK(wait_flag(&blocker_in, 10000) == 0);
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = log_prio;
    d.arg = (void *)(intptr_t)1; /* low, released when b finishes */
    d.priority = -10;
    d.deps = &b;
    d.ndeps = 1;
    CHECK_OK(weft_spawn(rt, &d, NULL));
    weft_task_desc_init(&d);
    d.body = log_prio;
    d.arg = (void *)(intptr_t)2; /* high, ready (queued) all along */
    d.priority = 10;
    CHECK_OK(weft_spawn(rt, &d, NULL));
    atomic_store(&gate, 1);
    CHECK_OK(weft_wait_all(rt));
    CHECK(atomic_load(&order_pos) == 2);
    CHECKF(order_log[0] == 2 && order_log[1] == 1,
           "the low-priority task released by its finished dependency ran before the "
           "high-priority task that was already ready (order %d, %d)", order_log[0],
           order_log[1]);
    weft_task_release(b);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- names ------------------------------------------------------------------ */

static void test_names(void) {
    weft_runtime *rt = make_rt(2);
    char buf[64];
    strcpy(buf, "hello");
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = test_noop;
    d.name = buf;
    weft_task *t1, *t2;
    CHECK_OK(weft_spawn(rt, &d, &t1));
    strcpy(buf, "overwritten"); /* the name was copied */

    char longname[64];
    for (int i = 0; i < 63; i++) longname[i] = (char)('a' + i % 26);
    longname[63] = '\0';
    d.name = longname;
    CHECK_OK(weft_spawn(rt, &d, &t2));
    CHECK_OK(weft_wait_all(rt));

    weft_task_info info;
    CHECK_OK(weft_task_info_get(t1, &info));
    CHECKF(strcmp(info.name, "hello") == 0, "name \"%.32s\"", info.name);
    CHECK_OK(weft_task_info_get(t2, &info));
    CHECK(memchr(info.name, '\0', sizeof info.name) != NULL);
    CHECKF(strlen(info.name) == 31 && strncmp(info.name, longname, 31) == 0,
           "long name kept as \"%.32s\" (want its first 31 bytes)", info.name);
    weft_task_release(t1);
    weft_task_release(t2);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- weft_task_desc_init ---------------------------------------------------- */

static void test_desc_init(void) {
    weft_task_desc d;
    memset(&d, 0xFF, sizeof d);
    weft_task_desc_init(&d);
    CHECK(d.body == NULL);
    CHECK(d.arg == NULL);
    CHECK(d.arg_destroy == NULL);
    CHECK(d.deps == NULL);
    CHECK(d.ndeps == 0);
    CHECK(d.accesses == NULL);
    CHECK(d.naccesses == 0);
    CHECK(d.name == NULL);
    CHECK(d.priority == 0);
    CHECK(d.flags == 0);
}

/* ---- ctx accessors ------------------------------------------------------------ */

typedef struct ctx_probe {
    weft_runtime *rt;
    int x, y;
    weft_task *self;
    atomic_int ok;
} ctx_probe;

static int probe_ctx(weft_ctx *ctx, void *arg) {
    ctx_probe *p = arg;
    int ok = 1;
    if (weft_ctx_runtime(ctx) != p->rt) ok = 0;
    if (weft_ctx_worker(ctx) >= weft_runtime_workers(p->rt)) ok = 0;
    if (weft_ctx_data(ctx, 0) != &p->y) ok = 0; /* descriptor order */
    if (weft_ctx_data(ctx, 1) != &p->x) ok = 0;
    if (weft_ctx_data(ctx, 2) != NULL) ok = 0;
    if (weft_ctx_data(ctx, (size_t)-1) != NULL) ok = 0;
    /* The task's own handle (stored by the spawner before the gate opened). */
    weft_task_info info;
    if (weft_task_info_get(p->self, &info) != 0) {
        ok = 0;
    } else {
        if (info.status != WEFT_TASK_RUNNING) ok = 0;
        if (strcmp(info.name, "probe") != 0) ok = 0;
    }
    atomic_store(&p->ok, ok ? 1 : -1);
    return 0;
}

static void test_ctx(void) {
    weft_runtime *rt = make_rt(2);
    ctx_probe p;
    memset(&p, 0, sizeof p);
    p.rt = rt;
    weft_data *dx, *dy;
    CHECK_OK(weft_data_register(rt, &p.x, sizeof p.x, &dx));
    CHECK_OK(weft_data_register(rt, &p.y, sizeof p.y, &dy));
    void *hp = NULL;
    size_t hn = 0;
    CHECK_OK(weft_data_host(dx, &hp, &hn));
    CHECK(hp == &p.x && hn == sizeof p.x);

    /* Block the task until p.self is filled in. */
    block_workers_reset();
    weft_task *b;
    CHECK_OK(weft_spawn_simple(rt, blocker, NULL, &b));
    weft_access acc[2] = {{dy, WEFT_R}, {dx, WEFT_RW}};
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = probe_ctx;
    d.arg = &p;
    d.deps = &b;
    d.ndeps = 1;
    d.accesses = acc;
    d.naccesses = 2;
    d.name = "probe";
    CHECK_OK(weft_spawn(rt, &d, &p.self));
    /* The descriptor and its arrays are only read during weft_spawn. */
    acc[0].data = dx;
    acc[0].mode = WEFT_W;
    acc[1].data = dy;
    d.name = "scribbled";
    d.naccesses = 0;
    atomic_store(&gate, 1);
    CHECK_OK(weft_task_wait(p.self));
    CHECKF(atomic_load(&p.ok) == 1, "a weft_ctx_* accessor gave a wrong answer (%d)",
           atomic_load(&p.ok));
    weft_task_release(p.self);
    weft_task_release(b);
    CHECK_OK(weft_data_unregister(dx));
    CHECK_OK(weft_data_unregister(dy));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- strerror ------------------------------------------------------------------ */

static void test_strerror(void) {
    const char *names[11];
    for (int c = 0; c >= -10; c--) {
        const char *s = weft_strerror(c);
        CHECK(s != NULL && s[0] != '\0');
        names[-c] = s;
        for (int k = 0; k < -c; k++) CHECKF(strcmp(names[k], s) != 0, "codes %d and %d", -k, c);
    }
    CHECK(strstr(weft_strerror(WEFT_EINVAL), "EINVAL") != NULL);
    CHECK(strstr(weft_strerror(WEFT_ETIMEDOUT), "ETIMEDOUT") != NULL);
    CHECK(strstr(weft_strerror(WEFT_EAGAIN), "EAGAIN") != NULL);
    CHECK(weft_strerror(-1000) != NULL && weft_strerror(-1000)[0] != '\0');
    CHECK(weft_strerror(12345) != NULL);
    CHECK(weft_strerror(INT32_MIN) != NULL);
    CHECK(weft_last_error() != NULL);
}

int main(void) {
    test_watchdog(test_pick(60, 150));
    CHECK(weft_last_error() != NULL && weft_last_error()[0] == '\0'); /* nothing failed yet */
    test_desc_init();
    test_strerror();
    test_basic();
    test_status_transitions();
    test_arg_destroy();
    test_arg_destroy_at_destroy();
    test_priority();
    test_names();
    test_ctx();
    test_priority_after_release();
    printf("test_task: ok\n");
    return 0;
}
