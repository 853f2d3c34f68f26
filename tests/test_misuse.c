/* Misuse: every documented error case, NULL arguments everywhere.  Each call
 * returns its documented code, leaves a non-empty weft_last_error(), leaves
 * out-parameters untouched, and the runtime keeps working afterwards (and
 * misuse is not counted as a task failure). */
#include "check.h"

static atomic_int destroyed;

static void count_destroy(void *arg) {
    (void)arg;
    atomic_fetch_add(&destroyed, 1);
}

/* Spawn with desc, expecting code; arg_destroy must have been called once. */
static void expect_spawn_error(weft_runtime *rt, weft_task_desc *d, int code, int line) {
    d->arg_destroy = count_destroy;
    int before = atomic_load(&destroyed);
    weft_task *sentinel = (weft_task *)(uintptr_t)0xdead0;
    weft_task *out = sentinel;
    int rc = weft_spawn(rt, d, &out);
    if (rc != code) {
        fprintf(stderr, "line %d: ", line);
        CHECK_RC(rc, code);
    }
    const char *msg = weft_last_error();
    CHECKF(msg && msg[0], "line %d: empty weft_last_error after a failed spawn", line);
    CHECKF(out == sentinel, "line %d: *out changed by a failed spawn", line);
    CHECKF(atomic_load(&destroyed) == before + 1, "line %d: arg_destroy called %d times", line,
           atomic_load(&destroyed) - before);
}

#define EXPECT_SPAWN_ERROR(rt, d, code) expect_spawn_error(rt, d, code, __LINE__)

static void check_still_works(weft_runtime *rt) {
    weft_task *t;
    CHECK_OK(weft_spawn_simple(rt, test_noop, NULL, &t));
    CHECK_OK(weft_task_wait(t));
    weft_task_release(t);
    CHECK_OK(weft_wait_all(rt)); /* misuse never counts as a task failure */
}

static void test_spawn_args(void) {
    weft_runtime *rt = make_rt(2);
    weft_runtime *other = make_rt(1);
    int x = 0, y = 0;
    weft_data *d, *dother;
    CHECK_OK(weft_data_register(rt, &x, sizeof x, &d));
    CHECK_OK(weft_data_register(other, &y, sizeof y, &dother));
    weft_task *good, *released, *foreign;
    CHECK_OK(weft_spawn_simple(rt, test_noop, NULL, &good));
    CHECK_OK(weft_spawn_simple(rt, test_noop, NULL, &released));
    CHECK_OK(weft_task_wait(released));
    weft_task_release(released);
    CHECK_OK(weft_spawn_simple(other, test_noop, NULL, &foreign));

    weft_task_desc desc;
    /* NULL rt / desc / body */
    weft_task_desc_init(&desc);
    desc.body = test_noop;
    EXPECT_SPAWN_ERROR(NULL, &desc, WEFT_EINVAL);
    weft_task *out = NULL;
    CHECK_ERR(weft_spawn(rt, NULL, &out), WEFT_EINVAL);
    CHECK(out == NULL);
    weft_task_desc_init(&desc);
    EXPECT_SPAWN_ERROR(rt, &desc, WEFT_EINVAL);

    /* deps: NULL element, released, foreign, NULL array with ndeps > 0 */
    weft_task *bad_deps[2];
    weft_task_desc_init(&desc);
    desc.body = test_noop;
    bad_deps[0] = good;
    bad_deps[1] = NULL;
    desc.deps = bad_deps;
    desc.ndeps = 2;
    EXPECT_SPAWN_ERROR(rt, &desc, WEFT_EINVAL);
    bad_deps[1] = released;
    EXPECT_SPAWN_ERROR(rt, &desc, WEFT_EINVAL);
    bad_deps[1] = foreign;
    EXPECT_SPAWN_ERROR(rt, &desc, WEFT_EINVAL);
    desc.deps = NULL;
    desc.ndeps = 1;
    EXPECT_SPAWN_ERROR(rt, &desc, WEFT_EINVAL);

    /* accesses: NULL data, foreign data, unregistered data, bad modes, NULL
     * array with naccesses > 0 */
    weft_access acc[2];
    weft_task_desc_init(&desc);
    desc.body = test_noop;
    desc.accesses = acc;
    desc.naccesses = 2;
    acc[0].data = d;
    acc[0].mode = WEFT_R;
    acc[1].data = NULL;
    acc[1].mode = WEFT_R;
    EXPECT_SPAWN_ERROR(rt, &desc, WEFT_EINVAL);
    acc[1].data = dother;
    EXPECT_SPAWN_ERROR(rt, &desc, WEFT_EINVAL);
    /* Modes: only R, W, RW and RW|COMMUTE are valid ("WEFT_COMMUTE may be
     * added to WEFT_RW"). */
    static const unsigned bad_modes[] = {0u, WEFT_COMMUTE, WEFT_R | WEFT_COMMUTE,
                                         WEFT_W | WEFT_COMMUTE, 8u, 0x10u | WEFT_R, ~0u};
    desc.naccesses = 1;
    for (size_t i = 0; i < sizeof bad_modes / sizeof bad_modes[0]; i++) {
        acc[0].data = d;
        acc[0].mode = bad_modes[i];
        int before = atomic_load(&destroyed);
        desc.arg_destroy = count_destroy;
        weft_task *o = (weft_task *)(uintptr_t)0xdead0;
        int rc = weft_spawn(rt, &desc, &o);
        CHECKF(rc == WEFT_EINVAL, "access mode 0x%x: rc %d (%s), want WEFT_EINVAL", bad_modes[i],
               rc, weft_strerror(rc));
        CHECK(weft_last_error()[0] != '\0');
        CHECK(o == (weft_task *)(uintptr_t)0xdead0);
        CHECK(atomic_load(&destroyed) == before + 1);
    }
    desc.accesses = NULL;
    desc.naccesses = 1;
    EXPECT_SPAWN_ERROR(rt, &desc, WEFT_EINVAL);

    /* unknown flags */
    static const unsigned bad_flags[] = {2u, 0x100u, WEFT_SPAWN_NOWAIT | 8u, ~0u};
    for (size_t i = 0; i < sizeof bad_flags / sizeof bad_flags[0]; i++) {
        weft_task_desc_init(&desc);
        desc.body = test_noop;
        desc.flags = bad_flags[i];
        EXPECT_SPAWN_ERROR(rt, &desc, WEFT_EINVAL);
    }

    /* unregistered data */
    int z = 0;
    weft_data *dz;
    CHECK_OK(weft_data_register(rt, &z, sizeof z, &dz));
    CHECK_OK(weft_data_unregister(dz));
    acc[0].data = dz;
    acc[0].mode = WEFT_RW;
    desc.accesses = acc;
    desc.naccesses = 1;
    EXPECT_SPAWN_ERROR(rt, &desc, WEFT_EINVAL);

    /* Kinds the models could not keep apart: "", longer than the models
     * keep, a control character (each refused, naming what is wrong). */
    weft_task_desc_init(&desc);
    desc.body = test_noop;
    desc.kind = "";
    EXPECT_SPAWN_ERROR(rt, &desc, WEFT_EINVAL);
    CHECKF(strstr(weft_last_error(), "kind is \"\"") != NULL, "%s", weft_last_error());
    char longkind[WEFT_KIND_MAX + 2];
    memset(longkind, 'k', sizeof longkind - 1);
    longkind[sizeof longkind - 1] = 0;
    desc.kind = longkind;
    EXPECT_SPAWN_ERROR(rt, &desc, WEFT_EINVAL);
    CHECK(strstr(weft_last_error(), "64 bytes, more than the 63") != NULL);
    desc.kind = "gemm\n2";
    EXPECT_SPAWN_ERROR(rt, &desc, WEFT_EINVAL);
    CHECK(strstr(weft_last_error(), "control character (0x0a) at byte 4") != NULL);
    longkind[WEFT_KIND_MAX] = 0; /* (63 bytes: kept whole) */
    desc.kind = longkind;
    desc.arg_destroy = NULL;
    CHECK_OK(weft_spawn(rt, &desc, NULL));
    desc.kind = NULL;

    /* spawn_simple */
    CHECK_ERR(weft_spawn_simple(NULL, test_noop, NULL, &out), WEFT_EINVAL);
    CHECK_ERR(weft_spawn_simple(rt, NULL, NULL, &out), WEFT_EINVAL);

    check_still_works(rt);
    check_still_works(other);

    /* Failed spawns are not tasks: ids continue without gaps. */
    weft_task *t;
    CHECK_OK(weft_spawn_simple(rt, test_noop, NULL, &t));
    weft_task_info info;
    CHECK_OK(weft_task_info_get(t, &info));
    CHECKF(info.id == 5, "next task has id %" PRIu64 " (4 tasks were accepted before)", info.id);
    weft_task_release(t);

    weft_stats st;
    CHECK_OK(weft_runtime_stats(rt, &st));
    CHECK(st.tasks_spawned == 5 && st.tasks_failed == 0 && st.tasks_cancelled == 0);

    weft_task_release(good);
    weft_task_release(foreign);
    CHECK_OK(weft_data_unregister(d));
    CHECK_OK(weft_data_unregister(dother));
    CHECK_OK(weft_runtime_destroy(other));
    CHECK_OK(weft_runtime_destroy(rt));
}

static void test_null_args(void) {
    CHECK_ERR(weft_runtime_create(NULL, NULL), WEFT_EINVAL);
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = 1;
    CHECK_ERR(weft_runtime_create(&cfg, NULL), WEFT_EINVAL);

    CHECK(weft_runtime_workers(NULL) == 0);
    weft_stats st;
    CHECK_ERR(weft_runtime_stats(NULL, &st), WEFT_EINVAL);
    CHECK_ERR(weft_wait_all(NULL), WEFT_EINVAL);
    CHECK_ERR(weft_wait_all_timed(NULL, 1000), WEFT_EINVAL);
    CHECK_ERR(weft_cancel_pending(NULL), WEFT_EINVAL);
    CHECK_OK(weft_runtime_destroy(NULL));

    CHECK_ERR(weft_task_wait(NULL), WEFT_EINVAL);
    CHECK_ERR(weft_task_timedwait(NULL, 0), WEFT_EINVAL);
    CHECK_ERR(weft_task_timedwait(NULL, 1000000), WEFT_EINVAL);
    weft_task_status s;
    CHECK_ERR(weft_task_status_get(NULL, &s), WEFT_EINVAL);
    weft_task_info info;
    CHECK_ERR(weft_task_info_get(NULL, &info), WEFT_EINVAL);
    CHECK_ERR(weft_task_cancel(NULL), WEFT_EINVAL);
    weft_task_release(NULL);

    void *p;
    size_t n;
    CHECK_ERR(weft_data_host(NULL, &p, &n), WEFT_EINVAL);
    CHECK_ERR(weft_data_unregister(NULL), WEFT_EINVAL);

    weft_runtime *rt = make_rt(2);
    CHECK_ERR(weft_runtime_stats(rt, NULL), WEFT_EINVAL);
    int x;
    weft_data *d = (weft_data *)(uintptr_t)0xbeef0;
    CHECK_ERR(weft_data_register(NULL, &x, sizeof x, &d), WEFT_EINVAL);
    CHECK_ERR(weft_data_register(rt, &x, 0, &d), WEFT_EINVAL);
    CHECK_ERR(weft_data_register(rt, NULL, 0, &d), WEFT_EINVAL);
    CHECK(d == (weft_data *)(uintptr_t)0xbeef0);
    /* (a NULL pointer registers a handle for scratch accesses only: test_scratch) */
    CHECK_OK(weft_data_register(rt, NULL, sizeof x, &d));
    CHECK_OK(weft_data_unregister(d));
    CHECK_ERR(weft_data_register(rt, &x, sizeof x, NULL), WEFT_EINVAL);

    weft_task *t;
    CHECK_OK(weft_spawn_simple(rt, test_noop, NULL, &t));
    CHECK_ERR(weft_task_status_get(t, NULL), WEFT_EINVAL);
    CHECK_ERR(weft_task_info_get(t, NULL), WEFT_EINVAL);
    CHECK_OK(weft_task_wait(t));
    weft_task_release(t);

    /* weft_config_init(NULL) is not documented; not called. */
    check_still_works(rt);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* Misuse from inside a task. */
typedef struct inside_arg {
    weft_runtime *rt;
    weft_data *d;
    int rc_wait_self, rc_timedwait_self, rc_wait_all, rc_wait_all_timed, rc_destroy,
        rc_unregister, rc_unregister_other;
    char msg_wait_self[128], msg_wait_all[128], msg_destroy[128], msg_unregister[128];
    weft_data *other;
    weft_task *self;     /* the task's own handle, stored by the spawner */
    atomic_int self_set; /* ... before this is set */
} inside_arg;

static void copy_msg(char *dst) {
    const char *m = weft_last_error();
    snprintf(dst, 128, "%s", m ? m : "");
}

static int inside_body(weft_ctx *ctx, void *arg) {
    inside_arg *a = arg;
    (void)ctx;
    if (wait_flag(&a->self_set, 10000) != 0) return 1;
    weft_task *self = a->self;
    a->rc_wait_self = weft_task_wait(self);
    copy_msg(a->msg_wait_self);
    a->rc_timedwait_self = weft_task_timedwait(self, 1000000);
    a->rc_wait_all = weft_wait_all(a->rt);
    copy_msg(a->msg_wait_all);
    a->rc_wait_all_timed = weft_wait_all_timed(a->rt, 1000000);
    a->rc_destroy = weft_runtime_destroy(a->rt);
    copy_msg(a->msg_destroy);
    a->rc_unregister = weft_data_unregister(a->d);
    copy_msg(a->msg_unregister);
    /* Data this task does not access can be unregistered from inside. */
    a->rc_unregister_other = weft_data_unregister(a->other);
    return 0;
}

static void test_inside_task(void) {
    weft_runtime *rt = make_rt(2);
    int x = 0, y = 0;
    inside_arg a;
    memset(&a, 0, sizeof a);
    a.rt = rt;
    CHECK_OK(weft_data_register(rt, &x, sizeof x, &a.d));
    CHECK_OK(weft_data_register(rt, &y, sizeof y, &a.other));
    weft_access acc = {a.d, WEFT_R};
    weft_task_desc desc;
    weft_task_desc_init(&desc);
    desc.body = inside_body;
    desc.arg = &a;
    desc.accesses = &acc;
    desc.naccesses = 1;
    weft_task *t;
    CHECK_OK(weft_spawn(rt, &desc, &t));
    a.self = t;
    atomic_store(&a.self_set, 1);
    CHECK_OK(weft_task_wait(t));
    CHECK_RC(a.rc_wait_self, WEFT_EBUSY);
    CHECK(a.msg_wait_self[0] != '\0');
    CHECK_RC(a.rc_timedwait_self, WEFT_EBUSY);
    CHECK_RC(a.rc_wait_all, WEFT_EDEADLK);
    CHECK(a.msg_wait_all[0] != '\0');
    CHECK_RC(a.rc_wait_all_timed, WEFT_EDEADLK);
    CHECK_RC(a.rc_destroy, WEFT_EDEADLK);
    CHECK(a.msg_destroy[0] != '\0');
    CHECK_RC(a.rc_unregister, WEFT_EBUSY);
    CHECK(a.msg_unregister[0] != '\0');
    CHECK_RC(a.rc_unregister_other, 0);
    weft_task_release(t);
    /* Nothing was destroyed or unregistered by the failed calls. */
    CHECK(weft_runtime_workers(rt) == 2);
    void *p;
    size_t n;
    CHECK_OK(weft_data_host(a.d, &p, &n));
    CHECK(p == &x && n == sizeof x);
    check_still_works(rt);
    CHECK_OK(weft_data_unregister(a.d));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* Everything on a destroyed runtime. */
static void test_destroyed_runtime(void) {
    weft_runtime *rt = make_rt(2);
    int x = 0;
    weft_data *d;
    CHECK_OK(weft_data_register(rt, &x, sizeof x, &d));
    weft_task *t;
    CHECK_OK(weft_spawn_simple(rt, test_noop, NULL, &t));
    CHECK_OK(weft_runtime_destroy(rt));

    /* Task handles that outlive the runtime stay valid for wait, status,
     * info and release (the task has finished); data handles are invalid. */
    CHECK_OK(weft_task_wait(t));
    CHECK_OK(weft_task_timedwait(t, 0));
    weft_task_status s;
    CHECK_OK(weft_task_status_get(t, &s));
    CHECK(s == WEFT_TASK_COMPLETED);
    weft_task_info info;
    CHECK_OK(weft_task_info_get(t, &info));
    CHECK(info.id == 1 && info.status == WEFT_TASK_COMPLETED);
    weft_task_release(t);
    CHECK_ERR(weft_task_wait(t), WEFT_EINVAL); /* released now */
    void *p;
    size_t n;
    CHECK_ERR(weft_data_host(d, &p, &n), WEFT_EINVAL);
    CHECK_ERR(weft_data_unregister(d), WEFT_EINVAL);

    /* The runtime itself: ECLOSED. */
    atomic_store(&destroyed, 0);
    weft_task_desc desc;
    weft_task_desc_init(&desc);
    desc.body = test_noop;
    EXPECT_SPAWN_ERROR(rt, &desc, WEFT_ECLOSED);
    weft_task *out = (weft_task *)(uintptr_t)0xdead0;
    CHECK_ERR(weft_spawn_simple(rt, test_noop, NULL, &out), WEFT_ECLOSED);
    CHECK(out == (weft_task *)(uintptr_t)0xdead0);
    weft_data *dd = (weft_data *)(uintptr_t)0xdead0;
    CHECK_ERR(weft_data_register(rt, &x, sizeof x, &dd), WEFT_ECLOSED);
    CHECK(dd == (weft_data *)(uintptr_t)0xdead0);
    weft_stats st;
    CHECK_ERR(weft_runtime_stats(rt, &st), WEFT_ECLOSED);
    CHECK_ERR(weft_wait_all(rt), WEFT_ECLOSED);
    CHECK_ERR(weft_wait_all_timed(rt, 1000), WEFT_ECLOSED);
    CHECK_ERR(weft_cancel_pending(rt), WEFT_ECLOSED);
    CHECK(weft_runtime_workers(rt) == 0);
    CHECK_ERR(weft_runtime_destroy(rt), WEFT_ECLOSED);

    /* A new runtime works (it may even reuse the memory); the stale handle
     * still reports ECLOSED and does not reach the new runtime. */
    weft_runtime *rt2 = make_rt(1);
    check_still_works(rt2);
    CHECK_ERR(weft_spawn_simple(rt, test_noop, NULL, NULL), WEFT_ECLOSED);
    CHECK_ERR(weft_runtime_stats(rt, &st), WEFT_ECLOSED);
    CHECK_ERR(weft_runtime_destroy(rt), WEFT_ECLOSED);
    CHECK(weft_runtime_workers(rt) == 0);
    CHECK_OK(weft_runtime_stats(rt2, &st));
    CHECKF(st.tasks_spawned == 1, "the new runtime counts %" PRIu64 " spawns, want 1",
           st.tasks_spawned);
    check_still_works(rt2);
    CHECK_OK(weft_runtime_destroy(rt2));
}

/* Slots are reused: stale task and data handles stay detected (generation
 * tags) and never reach the object that now occupies the slot. */
static void test_stale_handles(void) {
    weft_runtime *rt = make_rt(2);
    for (int round = 0; round < 50; round++) {
        weft_task *t, *u;
        CHECK_OK(weft_spawn_simple(rt, test_noop, NULL, &t));
        CHECK_OK(weft_task_wait(t));
        weft_task_info ti;
        CHECK_OK(weft_task_info_get(t, &ti));
        weft_task_release(t);
        CHECK_OK(weft_spawn_simple(rt, test_noop, NULL, &u));
        CHECK_OK(weft_task_wait(u));
        CHECK_ERR(weft_task_wait(t), WEFT_EINVAL);
        weft_task_info info;
        CHECK_ERR(weft_task_info_get(t, &info), WEFT_EINVAL);
        CHECK_ERR(weft_task_cancel(t), WEFT_EINVAL);
        weft_task_release(t); /* ignored: must not release u */
        CHECK_OK(weft_task_info_get(u, &info));
        CHECK(info.id == ti.id + 1);
        weft_task_release(u);

        int x = 0, y = 0;
        weft_data *d, *d2;
        CHECK_OK(weft_data_register(rt, &x, sizeof x, &d));
        CHECK_OK(weft_data_unregister(d));
        CHECK_OK(weft_data_register(rt, &y, sizeof y, &d2));
        weft_access acc = {d, WEFT_RW};
        weft_task_desc desc;
        weft_task_desc_init(&desc);
        desc.body = test_noop;
        desc.accesses = &acc;
        desc.naccesses = 1;
        CHECK_ERR(weft_spawn(rt, &desc, NULL), WEFT_EINVAL);
        CHECK_ERR(weft_data_unregister(d), WEFT_EINVAL); /* must not unregister d2 */
        void *p;
        size_t n;
        CHECK_ERR(weft_data_host(d, &p, &n), WEFT_EINVAL);
        CHECK_OK(weft_data_host(d2, &p, &n));
        CHECK(p == &y && n == sizeof y);
        CHECK_OK(weft_data_unregister(d2));
    }
    check_still_works(rt);
    CHECK_OK(weft_runtime_destroy(rt));
}

int main(void) {
    test_watchdog(test_pick(60, 150));
    test_null_args();
    test_spawn_args();
    test_inside_task();
    test_destroyed_runtime();
    test_stale_handles();
    printf("test_misuse: ok\n");
    return 0;
}
