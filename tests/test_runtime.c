#include <pthread.h>
#include <sched.h>

/* Runtime: config defaults and environment overrides, create/destroy cycles
 * without thread or memory leaks, stats counters, destroy semantics. */
#include "check.h"
#include "testing.h"

static void clear_env(void) {
    unsetenv("WEFT_WORKERS");
    unsetenv("WEFT_TRACE");
    unsetenv("WEFT_SPIN_NS");
    unsetenv("WEFT_MAX_INFLIGHT");
    unsetenv("WEFT_MAX_NESTING");
    unsetenv("WEFT_PIN_WORKERS");
}

static unsigned online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (unsigned)n : 1u;
}

static void test_config_defaults(void) {
    clear_env();
    weft_config cfg;
    memset(&cfg, 0xAB, sizeof cfg);
    weft_config_init(&cfg);
    /* 0 means "one per online core"; a resolved count is also acceptable. */
    CHECKF(cfg.workers == 0 || cfg.workers == online_cpus(), "default workers = %u",
           cfg.workers);
    CHECK(cfg.trace_path == NULL);
    CHECK(cfg.trace_max_events > 0);
    CHECKF(cfg.max_inflight == 0 || cfg.max_inflight >= 65536, "default max_inflight = %zu",
           cfg.max_inflight);
    CHECK(cfg.on_worker_start == NULL && cfg.on_worker_stop == NULL && cfg.on_worker_let_go == NULL &&
          cfg.hook_arg == NULL);
    CHECKF(cfg.max_nesting == 0 || cfg.max_nesting == 64, "default max_nesting %u",
           cfg.max_nesting);

    /* workers = 0: one per online CPU core. */
    weft_runtime *rt = NULL;
    cfg.workers = 0;
    CHECK_OK(weft_runtime_create(&cfg, &rt));
    CHECKF(weft_runtime_workers(rt) == online_cpus(), "workers %u, cpus %u",
           weft_runtime_workers(rt), online_cpus());
    weft_stats st;
    CHECK_OK(weft_runtime_stats(rt, &st));
    CHECK(st.workers == online_cpus());
    CHECK_OK(weft_runtime_destroy(rt));

    /* NULL config: defaults. */
    rt = NULL;
    CHECK_OK(weft_runtime_create(NULL, &rt));
    CHECK(weft_runtime_workers(rt) == online_cpus());
    CHECK_OK(weft_runtime_destroy(rt));
}

static void test_config_env(void) {
    clear_env();
    weft_config cfg;

    setenv("WEFT_WORKERS", "3", 1);
    setenv("WEFT_SPIN_NS", "12345", 1);
    setenv("WEFT_MAX_INFLIGHT", "777", 1);
    setenv("WEFT_MAX_NESTING", "5", 1);
    weft_config_init(&cfg);
    CHECKF(cfg.max_nesting == 5, "WEFT_MAX_NESTING=5 gave %u", cfg.max_nesting);
    CHECKF(cfg.workers == 3, "WEFT_WORKERS=3 gave %u", cfg.workers);
    CHECKF(cfg.spin_ns == 12345, "WEFT_SPIN_NS=12345 gave %" PRIu64, cfg.spin_ns);
    CHECKF(cfg.max_inflight == 777, "WEFT_MAX_INFLIGHT=777 gave %zu", cfg.max_inflight);

    weft_runtime *rt = NULL;
    CHECK_OK(weft_runtime_create(NULL, &rt));
    CHECKF(weft_runtime_workers(rt) == 3, "create(NULL) with WEFT_WORKERS=3 gave %u workers",
           weft_runtime_workers(rt));
    CHECK_OK(weft_runtime_destroy(rt));

    /* An explicit config is used as given (the env was applied by init). */
    weft_config_init(&cfg);
    cfg.workers = 1;
    CHECK_OK(weft_runtime_create(&cfg, &rt));
    CHECK(weft_runtime_workers(rt) == 1);
    CHECK_OK(weft_runtime_destroy(rt));

    /* Malformed values are ignored: the defaults stay. */
    clear_env();
    weft_config def;
    weft_config_init(&def);
    setenv("WEFT_WORKERS", "lots", 1);
    setenv("WEFT_SPIN_NS", "fast", 1);
    setenv("WEFT_MAX_INFLIGHT", "", 1);
    setenv("WEFT_MAX_NESTING", "-3", 1);
    weft_config_init(&cfg);
    CHECK(cfg.max_nesting == def.max_nesting);
    CHECKF(cfg.workers == def.workers, "WEFT_WORKERS=lots gave %u", cfg.workers);
    CHECK(cfg.spin_ns == def.spin_ns);
    CHECK(cfg.max_inflight == def.max_inflight);
    clear_env();
}

/* weft_runtime_create refuses a malformed WEFT_* variable, whatever
 * configuration it is given, naming it; well-formed spellings pass. */
static void test_config_env_refused(void) {
    clear_env();
    static const struct { const char *var, *value, *says; } bad[] = {
        {"WEFT_WORKERS", "lots", "whole number from 0 to 4096"},
        {"WEFT_WORKERS", "-1", "whole number from 0 to 4096"},
        {"WEFT_WORKERS", "5000", "whole number from 0 to 4096"},
        {"WEFT_SPIN_NS", "-3", "whole number"},
        {"WEFT_MAX_NESTING", "99999999", "from 1 to 1048576"},
        {"WEFT_MAX_INFLIGHT", "1e6", "whole number"},
        {"WEFT_BOUND", "2", "1 or 0"},
        {"WEFT_VGPU_CHECK", "maybe", "1 or 0"},
        {"WEFT_PREFETCH", "never", "1 or 0"},
        {"WEFT_PERFMODEL", "none", "1 or 0"},
        {"WEFT_VGPU_HOST_GBPS", "fast", "positive number"},
        {"WEFT_VGPU_LATENCY_US", "0", "positive number"},
        {"WEFT_PIN_WORKERS", "sometimes", "one of: auto, 1, on, yes, true, 0, off, no, false"},
        {"WEFT_VGPU_COPIES", "none", "timing"},
        {"WEFT_VGPU_SCHEDULE", "seed", "whole number"},
        {"WEFT_STALL_WARN_MS", "99999999999999999999999", "whole number"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv(bad[i].var, bad[i].value, 1);
        weft_config cfg;
        weft_config_init(&cfg); /* skips it, and never fails */
        cfg.workers = 1;
        for (int explicit = 0; explicit < 2; explicit++) {
            weft_runtime *rt = NULL;
            int rc = weft_runtime_create(explicit ? &cfg : NULL, &rt);
            CHECKF(rc == WEFT_EINVAL && rt == NULL, "%s=%s: create gave %d", bad[i].var, bad[i].value, rc);
            char want[96];
            snprintf(want, sizeof want, "%s=\"%s\"", bad[i].var, bad[i].value);
            CHECKF(strstr(weft_last_error(), want) && strstr(weft_last_error(), bad[i].says) &&
                       strstr(weft_last_error(), "unset it"),
                   "%s=%s: message: %s", bad[i].var, bad[i].value, weft_last_error());
        }
        unsetenv(bad[i].var);
    }
    /* Other spellings of good values pass, blanks around them too. */
    static const struct { const char *var, *value; } good[] = {
        {"WEFT_WORKERS", " 2 "}, {"WEFT_BOUND", "off"}, {"WEFT_VGPU_CHECK", "No"}, {"WEFT_PREFETCH", "true"},
        {"WEFT_PIN_WORKERS", "AUTO"}, {"WEFT_VGPU_SCHEDULE", "0x2a"}, {"WEFT_VGPU_PEER_GBPS", "12.5"},
        {"WEFT_PERFMODEL", "off"}, {"WEFT_SPIN_NS", ""},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        setenv(good[i].var, good[i].value, 1);
    weft_config cfg;
    weft_config_init(&cfg);
    CHECKF(cfg.workers == 2, "WEFT_WORKERS=' 2 ' gave %u", cfg.workers);
    CHECK(cfg.bound == WEFT_BOUND_OFF);
    weft_runtime *rt = NULL;
    int rc = weft_runtime_create(NULL, &rt);
    CHECKF(rc == 0, "good spellings refused: %s", weft_last_error());
    if (rc == 0) {
        CHECK(weft_runtime_workers(rt) == 2);
        CHECK_OK(weft_runtime_destroy(rt));
    }
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        unsetenv(good[i].var);
    /* WEFT_WORKERS=0 means what workers = 0 means: one per CPU core. */
    unsigned per_core = 0;
    weft_config_init(&cfg);
    if (weft_runtime_create(&cfg, &rt) == 0) {
        per_core = weft_runtime_workers(rt);
        CHECK_OK(weft_runtime_destroy(rt));
    }
    setenv("WEFT_WORKERS", "0", 1);
    weft_config_init(&cfg);
    CHECKF(cfg.workers == 0, "WEFT_WORKERS=0 gave %u", cfg.workers);
    rc = weft_runtime_create(NULL, &rt);
    CHECKF(rc == 0, "WEFT_WORKERS=0 refused: %s", weft_last_error());
    if (rc == 0) {
        CHECKF(per_core >= 1 && weft_runtime_workers(rt) == per_core, "WEFT_WORKERS=0: %u workers, not %u",
               weft_runtime_workers(rt), per_core);
        CHECK_OK(weft_runtime_destroy(rt));
    }
    clear_env();
}

static int add_one(weft_ctx *ctx, void *arg) {
    (void)ctx;
    atomic_fetch_add((atomic_int *)arg, 1);
    return 0;
}

static int slow_add_one(weft_ctx *ctx, void *arg) {
    (void)ctx;
    sleep_ms(1);
    atomic_fetch_add((atomic_int *)arg, 1);
    return 0;
}

static int fail_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    return 3;
}

static void test_create_destroy_cycles(void) {
    clear_env();
    int threads0 = thread_count_stable();
    CHECK(threads0 >= 1);
    long live0 = weft__alloc_live();
    int cycles = test_pick(200, 40);
    for (int i = 0; i < cycles; i++) {
        unsigned w = 1 + (unsigned)(i % 4);
        weft_runtime *rt = make_rt(w);
        if (i % 2 == 0) {
            atomic_int n = 0;
            for (int k = 0; k < 10; k++) CHECK_OK(weft_spawn_simple(rt, add_one, &n, NULL));
            CHECK_OK(weft_wait_all(rt));
            CHECK(atomic_load(&n) == 10);
        }
        CHECK_OK(weft_runtime_destroy(rt));
        int tc = thread_count_settled(threads0);
        CHECKF(tc == threads0, "cycle %d: %d threads, %d before the first create", i, tc,
               threads0);
    }
    long live1 = weft__alloc_live();
    CHECKF(live1 == live0, "alloc_live %ld after %d cycles, %ld before", live1, cycles, live0);
}

/* destroy lets outstanding tasks run to completion. */
static void test_destroy_runs_everything(void) {
    weft_runtime *rt = make_rt(2);
    atomic_int n = 0;
    for (int k = 0; k < 200; k++) CHECK_OK(weft_spawn_simple(rt, slow_add_one, &n, NULL));
    CHECK_OK(weft_runtime_destroy(rt));
    CHECKF(atomic_load(&n) == 200, "only %d of 200 tasks ran before destroy returned",
           atomic_load(&n));
}

/* destroy reports a failure not collected by weft_wait_all. */
static void test_destroy_reports_failure(void) {
    weft_runtime *rt = make_rt(2);
    CHECK_OK(weft_spawn_simple(rt, fail_body, NULL, NULL));
    CHECK_RC(weft_runtime_destroy(rt), WEFT_ETASKFAILED);

    rt = make_rt(2);
    CHECK_OK(weft_spawn_simple(rt, fail_body, NULL, NULL));
    CHECK_RC(weft_wait_all(rt), WEFT_ETASKFAILED);
    CHECK_OK(weft_spawn_simple(rt, test_noop, NULL, NULL));
    CHECK_OK(weft_runtime_destroy(rt)); /* the failure was already reported */

    CHECK_OK(weft_runtime_destroy(NULL));
}

/* Task handles held across destroy stay valid for wait/status/info/release;
 * the memory comes back once they are released. */
static void test_handles_outlive_runtime(void) {
    long live0 = weft__alloc_live();
    weft_runtime *rt = make_rt(2);
    weft_task *t_ok, *t_fail, *t_cancel;
    atomic_int n = 0;
    CHECK_OK(weft_spawn_simple(rt, slow_add_one, &n, &t_ok));
    CHECK_OK(weft_spawn_simple(rt, fail_body, NULL, &t_fail));
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = test_noop;
    d.deps = &t_fail;
    d.ndeps = 1;
    d.name = "dependent";
    CHECK_OK(weft_spawn(rt, &d, &t_cancel));
    CHECK_RC(weft_runtime_destroy(rt), WEFT_ETASKFAILED);
    CHECK(atomic_load(&n) == 1);
    CHECK_OK(weft_task_wait(t_ok));
    CHECK_RC(weft_task_wait(t_fail), WEFT_ETASKFAILED);
    CHECK_RC(weft_task_wait(t_cancel), WEFT_ECANCELLED);
    weft_task_info info;
    CHECK_OK(weft_task_info_get(t_cancel, &info));
    CHECK(info.status == WEFT_TASK_CANCELLED && info.cause_id == 2 && info.id == 3);
    CHECK(strcmp(info.name, "dependent") == 0);
    weft_task_status s;
    CHECK_OK(weft_task_status_get(t_fail, &s));
    CHECK(s == WEFT_TASK_FAILED);
    CHECK_RC(weft_runtime_destroy(rt), WEFT_ECLOSED);
    weft_task_release(t_ok);
    weft_task_release(t_fail);
    weft_task_release(t_cancel);
    CHECK_ERR(weft_task_wait(t_ok), WEFT_EINVAL);
    long live1 = weft__alloc_live();
    CHECKF(live1 == live0, "alloc_live %ld after destroy and release, %ld before", live1, live0);
}

/* Worker start/stop hooks. */
enum { HOOK_MAX = 8 };
typedef struct hook_state {
    atomic_int starts[HOOK_MAX], stops[HOOK_MAX], bad;
    pthread_t thread[HOOK_MAX];
    atomic_int tasks_run;
} hook_state;

static void on_start(unsigned w, void *arg) {
    hook_state *h = arg;
    if (w >= HOOK_MAX) {
        atomic_fetch_add(&h->bad, 1);
        return;
    }
    h->thread[w] = pthread_self();
    atomic_fetch_add(&h->starts[w], 1);
}

static void on_stop(unsigned w, void *arg) {
    hook_state *h = arg;
    if (w >= HOOK_MAX) {
        atomic_fetch_add(&h->bad, 1);
        return;
    }
    if (!pthread_equal(h->thread[w], pthread_self())) atomic_fetch_add(&h->bad, 1);
    sleep_ms(30); /* a blocking stop hook: destroy waits for it */
    atomic_fetch_add(&h->stops[w], 1);
}

static hook_state *hook_global;

static int hook_task(weft_ctx *ctx, void *arg) {
    (void)arg;
    hook_state *h = hook_global;
    unsigned w = weft_ctx_worker(ctx);
    if (w >= HOOK_MAX || atomic_load(&h->starts[w]) != 1 || atomic_load(&h->stops[w]) != 0 ||
        !pthread_equal(h->thread[w], pthread_self()))
        atomic_fetch_add(&h->bad, 100);
    atomic_fetch_add(&h->tasks_run, 1);
    sleep_ns(20000);
    return 0;
}

static void test_worker_hooks(void) {
    for (unsigned workers = 1; workers <= 4; workers *= 2) {
        hook_state *h = calloc(1, sizeof *h);
        CHECK(h);
        hook_global = h;
        weft_config cfg;
        weft_config_init(&cfg);
        cfg.workers = workers;
        cfg.trace_path = NULL;
        cfg.on_worker_start = on_start;
        cfg.on_worker_stop = on_stop;
        cfg.hook_arg = h;
        weft_runtime *rt;
        CHECK_OK(weft_runtime_create(&cfg, &rt));
        for (int i = 0; i < 200; i++) CHECK_OK(weft_spawn_simple(rt, hook_task, NULL, NULL));
        CHECK_OK(weft_wait_all(rt));
        CHECK_OK(weft_runtime_destroy(rt));
        CHECKF(atomic_load(&h->bad) == 0, "%u workers: hook misuse count %d", workers,
               atomic_load(&h->bad));
        CHECK(atomic_load(&h->tasks_run) == 200);
        for (unsigned w = 0; w < HOOK_MAX; w++) {
            int want = w < workers ? 1 : 0;
            CHECKF(atomic_load(&h->starts[w]) == want && atomic_load(&h->stops[w]) == want,
                   "%u workers: worker %u started %d, stopped %d times (after destroy)", workers,
                   w, atomic_load(&h->starts[w]), atomic_load(&h->stops[w]));
        }
        free(h);
    }
}

/* weft_ctx_hold_over: a lock shaped like the Python GIL (one owner at a
 * time, taken by the "kept" bodies), kept by a worker from one body to the
 * next.  Every other body, a kept-kind body with data, and an idle worker
 * must find it let go first; a nested body must never keep it. */
typedef struct {
    atomic_int owner;      /* 1 + the worker holding the lock, 0: free */
    atomic_int holds, reused, let_go, bad, ran;
    atomic_int refused_nested, probe_elsewhere, refused_data, refused_continue, continued;
} hold_state;
static hold_state *hold_global;
static _Thread_local int hold_tl; /* this worker kept the lock from its last body */

static void hold_lock(hold_state *h, unsigned w) {
    int free_ = 0;
    while (!atomic_compare_exchange_weak(&h->owner, &free_, (int)w + 1)) {
        free_ = 0;
        sched_yield();
    }
}

static void hold_unlock(hold_state *h, unsigned w) {
    if (atomic_exchange(&h->owner, 0) != (int)w + 1)
        atomic_fetch_add(&h->bad, 1);
}

static void hold_on_let_go(unsigned worker, void *arg) {
    hold_state *h = arg;
    if (!hold_tl)
        atomic_fetch_add(&h->bad, 1000); /* told to let go of nothing */
    hold_tl = 0;
    atomic_fetch_add(&h->let_go, 1);
    hold_unlock(h, worker);
}

static int hold_kept_body(weft_ctx *ctx, void *arg);

/* The body that keeps the lock.  arg: non-NULL to spawn and wait for a
 * child of the same body (which may then run nested here). */
static int hold_kept_body(weft_ctx *ctx, void *arg) {
    hold_state *h = hold_global;
    unsigned w = weft_ctx_worker(ctx);
    if (hold_tl) {
        hold_tl = 0; /* kept from the last body: this one's now */
        atomic_fetch_add(&h->reused, 1);
        if (atomic_load(&h->owner) != (int)w + 1)
            atomic_fetch_add(&h->bad, 1);
    } else {
        hold_lock(h, w);
    }
    atomic_fetch_add(&h->ran, 1);
    if (arg) {
        /* Waiting, the body lets the lock go (as a Python body's wait
         * releases the GIL), and takes it again after. */
        weft_task *child = NULL;
        hold_unlock(h, w);
        if (weft_spawn_simple(weft_ctx_runtime(ctx), hold_kept_body, NULL, &child) != 0 ||
            weft_task_wait(child) != 0)
            atomic_fetch_add(&h->bad, 1);
        weft_task_release(child);
        hold_lock(h, w);
    }
    if (weft_ctx_hold_over(ctx)) {
        hold_tl = 1;
        atomic_fetch_add(&h->holds, 1);
        return 0;
    }
    hold_unlock(h, w);
    return 0;
}

/* A body run nested in its spawner's wait must not keep.  arg: 1 + the
 * spawner's worker; another worker may take the probe first, and runs it
 * as any other body (not nested: nothing to probe). */
static int hold_nested_probe(weft_ctx *ctx, void *arg) {
    if (weft_ctx_worker(ctx) + 1 != (uintptr_t)arg) {
        atomic_fetch_add(&hold_global->probe_elsewhere, 1);
        return 0;
    }
    if (hold_tl)
        atomic_fetch_add(&hold_global->bad, 1);
    if (weft_ctx_hold_over(ctx)) /* (depth 2: refused) */
        atomic_fetch_add(&hold_global->bad, 1);
    else
        atomic_fetch_add(&hold_global->refused_nested, 1);
    return 0;
}

static int hold_waits_body(weft_ctx *ctx, void *arg) {
    (void)arg;
    weft_task *child = NULL;
    if (weft_spawn_simple(weft_ctx_runtime(ctx), hold_nested_probe,
                          (void *)(uintptr_t)(weft_ctx_worker(ctx) + 1), &child) != 0 ||
        weft_task_wait(child) != 0)
        atomic_fetch_add(&hold_global->bad, 1);
    weft_task_release(child);
    return 0;
}

/* Any other body, or the kept kind's with data: the lock was let go. */
static int hold_other_body(weft_ctx *ctx, void *arg) {
    (void)arg;
    hold_state *h = hold_global;
    if (hold_tl || atomic_load(&h->owner) == (int)weft_ctx_worker(ctx) + 1)
        atomic_fetch_add(&h->bad, 1);
    return 0;
}

static int hold_data_body(weft_ctx *ctx, void *arg) {
    hold_state *h = hold_global;
    unsigned w = weft_ctx_worker(ctx);
    if (hold_tl)
        atomic_fetch_add(&h->bad, 1);
    hold_lock(h, w);
    if (weft_ctx_hold_over(ctx))
        atomic_fetch_add(&h->bad, 1), hold_tl = 1;
    else
        atomic_fetch_add(&h->refused_data, 1), hold_unlock(h, w);
    (void)arg;
    return 0;
}

static int hold_noop(weft_ctx *ctx, void *arg) {
    (void)ctx, (void)arg;
    return 0;
}

/* A kept-kind body that continues: after weft_ctx_hold_over the continue
 * is refused (hold_over must be the last step); before it, hold_over
 * declines (a task that continues keeps nothing). */
static int hold_continue_body(weft_ctx *ctx, void *arg) {
    hold_state *h = hold_global;
    unsigned w = weft_ctx_worker(ctx);
    if (hold_tl) {
        /* Kept by the last body, one of this function (of another, it
         * would have been let go before this one): this one's now. */
        hold_tl = 0;
        atomic_fetch_add(&h->reused, 1);
        if (atomic_load(&h->owner) != (int)w + 1)
            atomic_fetch_add(&h->bad, 1);
    } else {
        hold_lock(h, w);
    }
    weft_task_desc next;
    weft_task_desc_init(&next);
    next.body = hold_noop;
    if (arg) { /* continue first */
        if (weft_ctx_continue(ctx, &next, NULL) != 0)
            atomic_fetch_add(&h->bad, 1);
        if (weft_ctx_hold_over(ctx))
            atomic_fetch_add(&h->bad, 1), hold_tl = 1;
        else
            atomic_fetch_add(&h->continued, 1), hold_unlock(h, w);
        return 0;
    }
    if (!weft_ctx_hold_over(ctx)) { /* nothing queued: nothing to try */
        hold_unlock(h, w);
        return 0;
    }
    hold_tl = 1;
    atomic_fetch_add(&h->holds, 1);
    if (weft_ctx_continue(ctx, &next, NULL) == WEFT_EINVAL && strstr(weft_last_error(), "weft_ctx_hold_over"))
        atomic_fetch_add(&h->refused_continue, 1);
    else
        atomic_fetch_add(&h->bad, 1);
    return 0;
}

static void test_hold_over(void) {
    CHECK(weft_ctx_hold_over(NULL) == 0);
    hold_state *h = calloc(1, sizeof *h);
    CHECK(h);
    hold_global = h;
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = 2;
    cfg.trace_path = NULL;
    cfg.on_worker_let_go = hold_on_let_go;
    cfg.hook_arg = h;
    weft_runtime *rt;
    CHECK_OK(weft_runtime_create(&cfg, &rt));
    static char buf[64];
    weft_data *d;
    CHECK_OK(weft_data_register(rt, buf, sizeof buf, &d));
    enum { ROUNDS = 40, RUN = 25 };
    int kept = 0;
    for (int r = 0; r < ROUNDS; r++) {
        /* A run of kept bodies, then one of each kind that must find the
         * lock let go, and some with waits. */
        for (int i = 0; i < RUN; i++, kept++) CHECK_OK(weft_spawn_simple(rt, hold_kept_body, NULL, NULL));
        CHECK_OK(weft_spawn_simple(rt, hold_other_body, NULL, NULL));
        weft_access acc = {d, WEFT_RW};
        weft_task_desc dd;
        weft_task_desc_init(&dd);
        dd.body = hold_data_body;
        dd.accesses = &acc;
        dd.naccesses = 1;
        CHECK_OK(weft_spawn(rt, &dd, NULL));
        for (int i = 0; i < RUN; i++, kept++) CHECK_OK(weft_spawn_simple(rt, hold_kept_body, NULL, NULL));
        CHECK_OK(weft_spawn_simple(rt, hold_kept_body, (void *)1, NULL));
        kept += 2;
        CHECK_OK(weft_spawn_simple(rt, hold_waits_body, NULL, NULL));
        CHECK_OK(weft_spawn_simple(rt, hold_continue_body, (void *)(intptr_t)(r % 2), NULL));
        for (int i = 0; i < 4; i++, kept++) CHECK_OK(weft_spawn_simple(rt, hold_kept_body, NULL, NULL));
        if (r % 8 == 0)
            CHECK_OK(weft_wait_all(rt)); /* the workers idle: each lets go first */
        if (r % 8 == 0)
            CHECK(atomic_load(&h->owner) == 0);
    }
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_unregister(d));
    CHECK_OK(weft_runtime_destroy(rt));
    CHECKF(atomic_load(&h->bad) == 0, "misuse count %d", atomic_load(&h->bad));
    CHECK(atomic_load(&h->ran) == kept);
    CHECK(atomic_load(&h->owner) == 0);
    CHECK(atomic_load(&h->refused_data) == ROUNDS);
    CHECKF(atomic_load(&h->refused_nested) + atomic_load(&h->probe_elsewhere) == ROUNDS,
           "nested probes refused %d, run elsewhere %d, of %d", atomic_load(&h->refused_nested),
           atomic_load(&h->probe_elsewhere), ROUNDS);
    CHECK(atomic_load(&h->continued) == ROUNDS / 2);
    CHECKF(atomic_load(&h->refused_continue) > 0, "no continue after hold_over was tried (of %d)", ROUNDS / 2);
    /* Every keep was either taken up by the next body or let go. */
    CHECKF(atomic_load(&h->holds) == atomic_load(&h->reused) + atomic_load(&h->let_go),
           "kept %d, taken up %d, let go %d", atomic_load(&h->holds), atomic_load(&h->reused),
           atomic_load(&h->let_go));
    CHECKF(atomic_load(&h->reused) > 0, "no body found the lock kept (kept %d)", atomic_load(&h->holds));

    /* Without on_worker_let_go, no body may keep anything. */
    h->holds = 0;
    weft_config_init(&cfg);
    cfg.workers = 2;
    cfg.trace_path = NULL;
    CHECK_OK(weft_runtime_create(&cfg, &rt));
    for (int i = 0; i < 50; i++) CHECK_OK(weft_spawn_simple(rt, hold_kept_body, NULL, NULL));
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_runtime_destroy(rt));
    CHECK(atomic_load(&h->holds) == 0 && atomic_load(&h->owner) == 0);
    free(h);
}

static void test_stats(void) {
    weft_runtime *rt = make_rt(2);
    weft_stats st;
    CHECK_OK(weft_runtime_stats(rt, &st));
    CHECK(st.tasks_spawned == 0);
    CHECK(st.tasks_run == 0);
    CHECK(st.tasks_failed == 0);
    CHECK(st.tasks_cancelled == 0);
    CHECK(st.inflight == 0);
    CHECK(st.workers == 2);

    atomic_int n = 0;
    enum { N = 100 };
    weft_task *failed = NULL;
    CHECK_OK(weft_spawn_simple(rt, fail_body, NULL, &failed));
    for (int k = 0; k < N; k++) CHECK_OK(weft_spawn_simple(rt, slow_add_one, &n, NULL));
    /* Two dependents of the failed task: cancelled. */
    for (int k = 0; k < 2; k++) {
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.body = add_one;
        d.arg = &n;
        d.deps = &failed;
        d.ndeps = 1;
        CHECK_OK(weft_spawn(rt, &d, NULL));
    }
    CHECK_RC(weft_wait_all(rt), WEFT_ETASKFAILED);
    weft_task_release(failed);
    CHECK(atomic_load(&n) == N);

    CHECK_OK(weft_runtime_stats(rt, &st));
    CHECKF(st.tasks_spawned == N + 3, "tasks_spawned %" PRIu64, st.tasks_spawned);
    CHECKF(st.tasks_run == N + 1, "tasks_run %" PRIu64, st.tasks_run);
    CHECKF(st.tasks_failed == 1, "tasks_failed %" PRIu64, st.tasks_failed);
    CHECKF(st.tasks_cancelled == 2, "tasks_cancelled %" PRIu64, st.tasks_cancelled);
    CHECKF(st.inflight == 0, "inflight %" PRIu64 " after wait_all", st.inflight);
    CHECKF(st.inflight_peak >= 1 && st.inflight_peak <= N + 3, "inflight_peak %" PRIu64,
           st.inflight_peak);
    CHECKF(st.bytes_per_task > 0 && st.bytes_per_task < 65536, "bytes_per_task %" PRIu64,
           st.bytes_per_task);
    CHECK(st.workers == 2);
    CHECK(st.trace_dropped == 0);

    CHECK_OK(weft_runtime_destroy(rt));
}

/* Idle workers park (eventually) and account the time they spend idle,
 * including the idle period in progress when the snapshot is taken. */
static void test_idle_stats(void) {
    weft_runtime *rt = make_rt(2);
    atomic_int n = 0;
    for (int k = 0; k < 20; k++) CHECK_OK(weft_spawn_simple(rt, slow_add_one, &n, NULL));
    CHECK_OK(weft_wait_all(rt));
    sleep_ms(200);
    weft_stats st;
    CHECK_OK(weft_runtime_stats(rt, &st));
    CHECKF(st.parks >= 1, "parks %" PRIu64 " after 200 ms idle", st.parks);
    CHECKF(st.idle_ns >= 100000000ull,
           "idle_ns %" PRIu64 " after both workers sat idle for 200 ms", st.idle_ns);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* With many independent tasks spawned from outside, the second worker must
 * get some of them (steal, or however the scheduler distributes work). */
static int record_worker(weft_ctx *ctx, void *arg) {
    atomic_int *seen = arg;
    unsigned w = weft_ctx_worker(ctx);
    if (w < 2) atomic_fetch_add(&seen[w], 1);
    else atomic_fetch_add(&seen[2], 1);
    sleep_ms(1);
    return 0;
}

static void test_both_workers_used(void) {
    weft_runtime *rt = make_rt(2);
    atomic_int seen[3] = {0, 0, 0};
    for (int k = 0; k < 100; k++) CHECK_OK(weft_spawn_simple(rt, record_worker, seen, NULL));
    CHECK_OK(weft_wait_all(rt));
    CHECK(atomic_load(&seen[2]) == 0); /* weft_ctx_worker in 0..workers-1 */
    CHECKF(atomic_load(&seen[0]) > 0 && atomic_load(&seen[1]) > 0,
           "worker 0 ran %d, worker 1 ran %d of 100 sleeping tasks", atomic_load(&seen[0]),
           atomic_load(&seen[1]));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* weft_ctx_task_id is the id weft_task_info reports for the same task;
 * weft_ctx_task is the handle its spawner got (NULL if it asked for none). */
static _Atomic(weft_task *) ctx_handles[4];
static int record_id(weft_ctx *ctx, void *arg) {
    _Atomic uint64_t *ids = arg;
    uint64_t id = weft_ctx_task_id(ctx);
    ids[0] = id;
    weft_task *self = weft_ctx_task(ctx);
    if (self) {
        weft_task_info info;
        if (weft_task_info_get(self, &info) != 0 || info.id != id) return 1;
    }
    return 0;
}
static int record_handle(weft_ctx *ctx, void *arg) {
    atomic_store(&ctx_handles[(intptr_t)arg], weft_ctx_task(ctx));
    return 0;
}

static void test_ctx_task_id(void) {
    weft_runtime *rt = make_rt(2);
    _Atomic uint64_t ids[3];
    weft_task *h[3];
    for (int k = 0; k < 3; k++) CHECK_OK(weft_spawn_simple(rt, record_id, &ids[k], &h[k]));
    for (int k = 0; k < 3; k++) {
        CHECK_OK(weft_task_wait(h[k]));
        weft_task_info info;
        CHECK_OK(weft_task_info_get(h[k], &info));
        CHECK(info.id != 0 && atomic_load(&ids[k]) == info.id);
        weft_task_release(h[k]);
    }
    CHECK(weft_ctx_task_id(NULL) == 0);
    CHECK(weft_ctx_task(NULL) == NULL);
    weft_task *mine;
    CHECK_OK(weft_spawn_simple(rt, record_handle, (void *)(intptr_t)0, &mine));
    CHECK_OK(weft_spawn_simple(rt, record_handle, (void *)(intptr_t)1, NULL));
    CHECK_OK(weft_wait_all(rt));
    CHECK(atomic_load(&ctx_handles[0]) == mine && atomic_load(&ctx_handles[1]) == NULL);
    weft_task_release(mine);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* An outside spawner blocks while max_inflight tasks are in flight. */
static atomic_int bp_gate;

static int gated(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    return wait_flag(&bp_gate, 20000) == 0 ? 0 : 1;
}

typedef struct bp_spawner {
    weft_runtime *rt;
    atomic_int returned; /* spawns that have returned */
    int rc[2];
} bp_spawner;

static void *bp_thread(void *p) {
    bp_spawner *b = p;
    for (int i = 0; i < 2; i++) {
        b->rc[i] = weft_spawn_simple(b->rt, gated, NULL, NULL);
        atomic_fetch_add(&b->returned, 1);
    }
    return NULL;
}

/* With max_inflight 4 and 4 gated tasks in flight, a helper thread spawns two
 * more: at most the first of them may return before the gate opens (whether
 * "4 in flight" already blocks or only "more than 4" does), and both return
 * once the tasks can finish. */
static void test_outside_backpressure(void) {
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = 1;
    cfg.trace_path = NULL;
    cfg.max_inflight = 4;
    weft_runtime *rt;
    CHECK_OK(weft_runtime_create(&cfg, &rt));
    atomic_store(&bp_gate, 0);
    for (int i = 0; i < 4; i++) CHECK_OK(weft_spawn_simple(rt, gated, NULL, NULL));
    bp_spawner b;
    memset(&b, 0, sizeof b);
    b.rt = rt;
    pthread_t th;
    CHECK(pthread_create(&th, NULL, bp_thread, &b) == 0);
    sleep_ms(100);
    CHECKF(atomic_load(&b.returned) <= 1,
           "an outside thread spawned a 6th task with max_inflight 4 and nothing finishing");
    weft_stats st;
    CHECK_OK(weft_runtime_stats(rt, &st));
    /* (approximate while tasks run: a spawn blocked in backpressure may be
     * counted) */
    CHECKF(st.inflight >= 4 && st.inflight <= 6, "inflight %" PRIu64, st.inflight);
    atomic_store(&bp_gate, 1);
    CHECK(pthread_join(th, NULL) == 0);
    CHECK_OK(b.rc[0]);
    CHECK_OK(b.rc[1]);
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_runtime_stats(rt, &st));
    CHECK(st.tasks_run == 6 && st.inflight_peak <= 6);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* WEFT_SPAWN_NOWAIT: where backpressure would block, WEFT_EAGAIN, and the
 * caller keeps arg (arg_destroy not called, *out untouched); a retry after
 * the tasks finished succeeds. */
static atomic_int nw_destroyed;

static void nw_destroy(void *arg) {
    (void)arg;
    atomic_fetch_add(&nw_destroyed, 1);
}

static atomic_int nw_inner_rc;

static int nw_producer(weft_ctx *ctx, void *arg) {
    (void)arg;
    /* Inside a task: where it would help, NOWAIT gives EAGAIN instead. */
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = gated;
    d.flags = WEFT_SPAWN_NOWAIT;
    int rc = 0;
    for (int i = 0; i < 64 && rc == 0; i++) rc = weft_spawn(weft_ctx_runtime(ctx), &d, NULL);
    atomic_store(&nw_inner_rc, rc);
    return 0;
}

static void test_spawn_nowait(void) {
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = 1;
    cfg.trace_path = NULL;
    cfg.max_inflight = 4;
    weft_runtime *rt;
    CHECK_OK(weft_runtime_create(&cfg, &rt));
    atomic_store(&bp_gate, 0);
    atomic_store(&nw_destroyed, 0);
    weft_task_desc d;
    weft_task_desc_init(&d);
    CHECK(d.flags == 0);
    d.body = gated;
    d.arg = &cfg;
    d.arg_destroy = nw_destroy;
    d.flags = WEFT_SPAWN_NOWAIT;
    int accepted = 0, rc = 0;
    weft_task *sentinel = (weft_task *)(uintptr_t)0xdead0, *out = sentinel;
    for (int i = 0; i < 10; i++) {
        out = sentinel;
        rc = weft_spawn(rt, &d, &out);
        if (rc != 0) break;
        weft_task_release(out);
        accepted++;
    }
    CHECKF(rc == WEFT_EAGAIN, "NOWAIT spawn with max_inflight 4 and nothing finishing: %d (%s) "
           "after %d accepted", rc, weft_strerror(rc), accepted);
    CHECK(accepted >= 4 && accepted <= 5);
    CHECK(out == sentinel);
    CHECK(weft_last_error()[0] != '\0');
    CHECKF(atomic_load(&nw_destroyed) == 0, "arg_destroy called %d times for EAGAIN",
           atomic_load(&nw_destroyed));
    atomic_store(&bp_gate, 1);
    CHECK_OK(weft_wait_all(rt));
    CHECK(atomic_load(&nw_destroyed) == accepted);
    CHECK_OK(weft_spawn(rt, &d, NULL)); /* the retry goes through */
    CHECK_OK(weft_wait_all(rt));
    CHECK(atomic_load(&nw_destroyed) == accepted + 1);

    /* From inside a task. */
    atomic_store(&bp_gate, 0);
    atomic_store(&nw_inner_rc, 1);
    CHECK_OK(weft_spawn_simple(rt, nw_producer, NULL, NULL));
    uint64_t end = now_ns() + 10000000000ull;
    while (atomic_load(&nw_inner_rc) == 1 && now_ns() < end) sleep_ms(1);
    CHECKF(atomic_load(&nw_inner_rc) == WEFT_EAGAIN,
           "64 NOWAIT spawns from a task with max_inflight 4: last rc %d",
           atomic_load(&nw_inner_rc));
    atomic_store(&bp_gate, 1);
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* Tasks still running during weft_runtime_destroy may spawn children: they
 * are accepted and run before destroy returns. */
static atomic_int dn_children, dn_bad;

static int dn_child(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    atomic_fetch_add(&dn_children, 1);
    return 0;
}

static int dn_parent(weft_ctx *ctx, void *arg) {
    (void)arg;
    sleep_ms(50); /* destroy has started by now */
    for (int i = 0; i < 10; i++)
        if (weft_spawn_simple(weft_ctx_runtime(ctx), dn_child, NULL, NULL) != 0)
            atomic_fetch_add(&dn_bad, 1);
    return 0;
}

static void test_destroy_with_nested_spawns(void) {
    weft_runtime *rt = make_rt(2);
    atomic_store(&dn_children, 0);
    atomic_store(&dn_bad, 0);
    for (int i = 0; i < 3; i++) CHECK_OK(weft_spawn_simple(rt, dn_parent, NULL, NULL));
    CHECK_OK(weft_runtime_destroy(rt));
    CHECKF(atomic_load(&dn_bad) == 0 && atomic_load(&dn_children) == 30,
           "spawns from tasks during destroy: %d refused, %d children ran (want 0, 30)",
           atomic_load(&dn_bad), atomic_load(&dn_children));
}

/* weft_wait_all waits for tasks spawned while it waits; stats and
 * cancel_pending may be called from a task. */
static atomic_int late_done;

static int late_child(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    sleep_ms(50);
    atomic_store(&late_done, 1);
    return 0;
}

static int spawner_body(weft_ctx *ctx, void *arg) {
    (void)arg;
    sleep_ms(20);
    weft_stats st;
    if (weft_runtime_stats(weft_ctx_runtime(ctx), &st) != 0 || st.inflight < 1) return 1;
    return weft_spawn_simple(weft_ctx_runtime(ctx), late_child, NULL, NULL) == 0 ? 0 : 2;
}

static atomic_int cp_ran;

static int cp_victim(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    atomic_fetch_add(&cp_ran, 1);
    return 0;
}

static atomic_int cp_gate;

static int cp_body(weft_ctx *ctx, void *arg) {
    (void)arg;
    /* Only after every victim was spawned (later spawns are not affected). */
    if (wait_flag(&cp_gate, 10000) != 0) return 2;
    return weft_cancel_pending(weft_ctx_runtime(ctx)) == 0 ? 0 : 1;
}

static void test_wait_all_and_calls_from_tasks(void) {
    weft_runtime *rt = make_rt(2);
    atomic_store(&late_done, 0);
    CHECK_OK(weft_spawn_simple(rt, spawner_body, NULL, NULL));
    CHECK_OK(weft_wait_all(rt));
    CHECKF(atomic_load(&late_done), "wait_all returned before a task spawned during the wait");
    CHECK_OK(weft_runtime_destroy(rt));

    /* cancel_pending from a task: the caller finishes, the others never run. */
    rt = make_rt(1);
    atomic_store(&cp_ran, 0);
    atomic_store(&cp_gate, 0);
    weft_task *c;
    CHECK_OK(weft_spawn_simple(rt, cp_body, NULL, &c));
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = cp_victim;
    d.deps = &c;
    d.ndeps = 1;
    for (int i = 0; i < 10; i++) CHECK_OK(weft_spawn(rt, &d, NULL));
    atomic_store(&cp_gate, 1);
    CHECK_OK(weft_task_wait(c));
    CHECK_OK(weft_wait_all(rt));
    CHECKF(atomic_load(&cp_ran) == 0, "%d tasks ran after cancel_pending from a task",
           atomic_load(&cp_ran));
    weft_task_release(c);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* pin_workers: each worker's CPUs, as its start hook saw them. */
#define PIN_MAX 8
static cpu_set_t pin_seen[PIN_MAX];
static atomic_int pin_started;
static void pin_on_start(unsigned worker, void *arg) {
    (void)arg;
    if (worker < PIN_MAX) CHECK(sched_getaffinity(0, sizeof pin_seen[worker], &pin_seen[worker]) == 0);
    atomic_fetch_add(&pin_started, 1);
}

/* The (i mod n)-th CPU of set. */
static int pin_nth(const cpu_set_t *set, unsigned i) {
    int k = (int)(i % (unsigned)CPU_COUNT(set));
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, set) && k-- == 0) return c;
    return -1;
}

static void test_pin_workers(void) {
    clear_env();
    weft_config cfg;
    weft_config_init(&cfg);
    CHECKF(cfg.pin_workers == WEFT_PIN_AUTO, "default pin_workers %u", cfg.pin_workers);
    CHECK(WEFT_PIN_OFF == 0 && WEFT_PIN_ON == 1); /* (0 and 1 keep their meaning) */
    static const struct { const char *env; unsigned want; } envs[] = {
        {"1", WEFT_PIN_ON}, {"0", WEFT_PIN_OFF}, {"auto", WEFT_PIN_AUTO},
        {"yes", WEFT_PIN_ON}, {"On", WEFT_PIN_ON}, {"false", WEFT_PIN_OFF}, {"AUTO", WEFT_PIN_AUTO},
        {"2", WEFT_PIN_AUTO}, {"sometimes", WEFT_PIN_AUTO}, /* malformed: the default */
    };
    for (size_t i = 0; i < sizeof envs / sizeof envs[0]; i++) {
        setenv("WEFT_PIN_WORKERS", envs[i].env, 1);
        weft_config_init(&cfg);
        CHECKF(cfg.pin_workers == envs[i].want, "WEFT_PIN_WORKERS=%s gave %u", envs[i].env, cfg.pin_workers);
    }
    clear_env();

    weft_runtime *rt = NULL;
    weft_config_init(&cfg);
    cfg.pin_workers = 3;
    CHECK(weft_runtime_create(&cfg, &rt) == WEFT_EINVAL);
    CHECKF(strstr(weft_last_error(), "pin_workers is 3") != NULL && strstr(weft_last_error(), "WEFT_PIN_AUTO"),
           "message: %s", weft_last_error());

    cpu_set_t mine;
    CHECK(sched_getaffinity(0, sizeof mine, &mine) == 0);
    /* More workers than CPUs too: they wrap around. */
    unsigned n = (unsigned)CPU_COUNT(&mine) + 1 < PIN_MAX ? (unsigned)CPU_COUNT(&mine) + 1 : PIN_MAX;
    for (unsigned pin = WEFT_PIN_OFF; pin <= WEFT_PIN_AUTO; pin++) { /* auto: unpinned at first */
        atomic_store(&pin_started, 0);
        weft_config_init(&cfg);
        cfg.workers = n;
        cfg.pin_workers = pin;
        cfg.on_worker_start = pin_on_start;
        CHECK_OK(weft_runtime_create(&cfg, &rt));
        atomic_int count = 0;
        for (int k = 0; k < 50; k++) CHECK_OK(weft_spawn_simple(rt, add_one, &count, NULL));
        CHECK_OK(weft_wait_all(rt));
        CHECK_OK(weft_runtime_destroy(rt));
        CHECK(atomic_load(&count) == 50);
        CHECK(atomic_load(&pin_started) == (int)n);
        for (unsigned w = 0; w < n; w++) {
            if (pin != WEFT_PIN_ON) {
                CHECKF(CPU_EQUAL(&pin_seen[w], &mine), "unpinned worker %u (pin_workers %u): not the creator's CPUs",
                       w, pin);
                continue;
            }
            int want = pin_nth(&mine, w);
            CHECKF(CPU_COUNT(&pin_seen[w]) == 1 && CPU_ISSET(want, &pin_seen[w]),
                   "pinned worker %u: %d CPUs, CPU %d %s", w, CPU_COUNT(&pin_seen[w]), want,
                   CPU_ISSET(want, &pin_seen[w]) ? "among them" : "not among them");
        }
    }
}

int main(void) {
    test_watchdog(test_pick(60, 150));
    test_config_defaults();
    test_config_env();
    test_config_env_refused();
    test_create_destroy_cycles();
    test_destroy_runs_everything();
    test_destroy_reports_failure();
    test_handles_outlive_runtime();
    test_worker_hooks();
    test_step("hold over");
    test_hold_over();
    test_stats();
    test_both_workers_used();
    test_step("ctx task id");
    test_ctx_task_id();
    test_outside_backpressure();
    test_spawn_nowait();
    test_destroy_with_nested_spawns();
    test_wait_all_and_calls_from_tasks();
    test_idle_stats();
    test_step("pin workers");
    test_pin_workers();
    printf("test_runtime: ok\n");
    return 0;
}
