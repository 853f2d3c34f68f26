/* Continuations (weft_ctx_continue): a body suspends its task without
 * holding a worker and is continued by a task that runs once what it
 * awaits has finished.  The task ends with its last continuation; its
 * dependents (explicit and through data) wait for that end; failure and
 * cancellation of a continuation become the task's; misuse is refused; and
 * the GPU reservation of a suspended task, or of a body waiting for its
 * child, is lent to the tasks that need it. */
#include "check.h"

/* A task in steps: step k (k < nsteps) spawns a child and continues once
 * it has finished; the last step returns `last_rc`. */
typedef struct steps {
    int nsteps;
    atomic_int step;        /* steps run so far */
    atomic_int child_done;  /* children that ran */
    atomic_int suspended;   /* set once the first step continued */
    int last_rc;
    int child_rc;           /* what each child returns */
    int seen_failed;        /* a step saw its child failed */
    atomic_int *gate;       /* children wait for it (NULL: they don't) */
    const char *child_where; /* children placed there (NULL: the CPU) */
    const char *cont_where;  /* continuations placed there (NULL: the CPU) */
    weft_task *child;        /* the last child (released by the next step) */
} steps;

static int child_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    steps *s = arg;
    if (s->gate && wait_flag(s->gate, 20000) != 0) return 99;
    atomic_fetch_add(&s->child_done, 1);
    return s->child_rc;
}

static int step_body(weft_ctx *ctx, void *arg) {
    steps *s = arg;
    int k = atomic_fetch_add(&s->step, 1);
    if (s->child) {
        weft_task_status st;
        if (weft_task_status_get(s->child, &st) != 0) return 90;
        if (st != WEFT_TASK_COMPLETED && st != WEFT_TASK_FAILED && st != WEFT_TASK_CANCELLED) return 91;
        if (st == WEFT_TASK_FAILED) s->seen_failed = 1;
        weft_task_release(s->child);
        s->child = NULL;
    }
    if (k == s->nsteps) return s->last_rc;
    weft_runtime *rt = weft_ctx_runtime(ctx);
    weft_task_desc c;
    weft_task_desc_init(&c);
    c.body = child_body;
    c.arg = s;
    c.name = "child";
    weft_placement p;
    if (s->child_where) {
        if (weft_placement_parse(s->child_where, &p) != 0) return 92;
        c.placements = &p;
        c.nplacements = 1;
    }
    if (weft_spawn(rt, &c, &s->child) != 0) return 93;
    weft_task_desc n;
    weft_task_desc_init(&n);
    n.body = step_body;
    n.arg = s;
    n.deps = &s->child;
    n.ndeps = 1;
    n.name = "cont";
    weft_placement q;
    if (s->cont_where) {
        if (weft_placement_parse(s->cont_where, &q) != 0) return 94;
        n.placements = &q;
        n.nplacements = 1;
    }
    if (weft_ctx_continue(ctx, &n, NULL) != 0) return 95;
    atomic_store(&s->suspended, 1);
    return 0;
}

static atomic_int after_ran, after_saw_steps;
static steps *after_of;

static int after_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    atomic_store(&after_saw_steps, atomic_load(&after_of->step));
    atomic_store(&after_ran, 1);
    return 0;
}

static weft_task *spawn_steps(weft_runtime *rt, steps *s, const char *where, const weft_access *acc, size_t nacc) {
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = step_body;
    d.arg = s;
    d.name = "root";
    d.accesses = acc;
    d.naccesses = nacc;
    weft_placement p;
    if (where) {
        CHECK_OK(weft_placement_parse(where, &p));
        d.placements = &p;
        d.nplacements = 1;
    }
    weft_task *t;
    CHECKF(weft_spawn(rt, &d, &t) == 0, "%s", weft_last_error());
    return t;
}

static weft_task *spawn_after(weft_runtime *rt, steps *s, weft_task *dep, const weft_access *acc, size_t nacc) {
    after_of = s;
    atomic_store(&after_ran, 0);
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = after_body;
    d.deps = dep ? &dep : NULL;
    d.ndeps = dep ? 1 : 0;
    d.accesses = acc;
    d.naccesses = nacc;
    d.name = "after";
    weft_task *t;
    CHECKF(weft_spawn(rt, &d, &t) == 0, "%s", weft_last_error());
    return t;
}

/* Steps on 1 and 2 workers: the task ends with its last step, its
 * dependent runs after that, and it waits (status) while suspended. */
static void test_steps(unsigned workers, int nsteps) {
    test_step("steps");
    weft_runtime *rt = make_rt(workers);
    atomic_int gate = 0;
    steps s = {.nsteps = nsteps, .gate = &gate};
    weft_task *root = spawn_steps(rt, &s, NULL, NULL, 0);
    weft_task *after = spawn_after(rt, &s, root, NULL, 0);
    CHECK(wait_flag(&s.suspended, 20000) == 0);
    weft_task_status st;
    CHECK_OK(weft_task_status_get(root, &st));
    CHECKF(st == WEFT_TASK_WAITING, "a suspended task is waiting, not %d", (int)st);
    CHECK(atomic_load(&after_ran) == 0);
    atomic_store(&gate, 1);
    CHECK_OK(weft_task_wait(root));
    CHECK_OK(weft_task_wait(after));
    CHECKF(atomic_load(&after_saw_steps) == nsteps + 1, "the dependent ran after step %d of %d",
           atomic_load(&after_saw_steps), nsteps + 1);
    CHECK(atomic_load(&s.child_done) == nsteps);
    CHECK_OK(weft_wait_all(rt));
    weft_task_release(root);
    weft_task_release(after);
    weft_runtime_destroy(rt);
}

/* A failed continuation fails the task, and its dependents are cancelled
 * naming the task; an awaited child's failure does not cancel the
 * continuation (it sees the failure). */
static void test_failures(void) {
    test_step("failures");
    weft_runtime *rt = make_rt(2);
    steps s = {.nsteps = 1, .last_rc = 7, .child_rc = 3};
    weft_task *root = spawn_steps(rt, &s, NULL, NULL, 0);
    weft_task *after = spawn_after(rt, &s, root, NULL, 0);
    CHECK_RC(weft_task_wait(root), WEFT_ETASKFAILED);
    CHECK(s.seen_failed == 1);
    weft_task_info ri, ai;
    CHECK_OK(weft_task_info_get(root, &ri));
    CHECK(ri.status == WEFT_TASK_FAILED && ri.result == 7);
    CHECK_RC(weft_task_wait(after), WEFT_ECANCELLED);
    CHECK_OK(weft_task_info_get(after, &ai));
    CHECKF(ai.cause_id == ri.id, "the dependent's cause is %llu, not the task %llu",
           (unsigned long long)ai.cause_id, (unsigned long long)ri.id);
    CHECK(atomic_load(&after_ran) == 0);
    CHECK_RC(weft_wait_all(rt), WEFT_ETASKFAILED);
    weft_task_release(root);
    weft_task_release(after);
    weft_runtime_destroy(rt);
}

/* Cancelling a suspended task cancels its continuation: the task ends
 * cancelled (by request, naming itself), and so do its dependents. */
static void test_cancel_suspended(void) {
    test_step("cancel suspended");
    weft_runtime *rt = make_rt(2);
    atomic_int gate = 0;
    steps s = {.nsteps = 1, .gate = &gate};
    weft_task *root = spawn_steps(rt, &s, NULL, NULL, 0);
    weft_task *after = spawn_after(rt, &s, root, NULL, 0);
    CHECK(wait_flag(&s.suspended, 20000) == 0);
    CHECK_OK(weft_task_cancel(root));
    atomic_store(&gate, 1);
    CHECK_RC(weft_task_wait(root), WEFT_ECANCELLED);
    weft_task_info ri, ai;
    CHECK_OK(weft_task_info_get(root, &ri));
    CHECK(ri.cause_id == ri.id);
    CHECK_RC(weft_task_wait(after), WEFT_ECANCELLED);
    CHECK_OK(weft_task_info_get(after, &ai));
    CHECK(ai.cause_id == ri.id);
    CHECK(atomic_load(&s.step) == 1); /* the continuation never ran */
    CHECK_OK(weft_wait_all(rt));      /* a cancellation is no failure */
    if (s.child) weft_task_release(s.child);
    weft_task_release(root);
    weft_task_release(after);
    weft_runtime_destroy(rt);
}

/* A task that writes data holds it while suspended: a reader spawned after
 * it runs after its last step. */
static void test_data_held(void) {
    test_step("data held");
    weft_runtime *rt = make_rt(2);
    char buf[64];
    weft_data *d;
    CHECK_OK(weft_data_register(rt, buf, sizeof buf, &d));
    atomic_int gate = 0;
    steps s = {.nsteps = 2, .gate = &gate};
    weft_access w = {d, WEFT_W}, r = {d, WEFT_R};
    weft_task *root = spawn_steps(rt, &s, NULL, &w, 1);
    weft_task *after = spawn_after(rt, &s, NULL, &r, 1);
    CHECK(wait_flag(&s.suspended, 20000) == 0);
    sleep_ms(20);
    CHECK(atomic_load(&after_ran) == 0);
    atomic_store(&gate, 1);
    CHECK_OK(weft_task_wait(after));
    CHECK(atomic_load(&after_saw_steps) == 3);
    CHECK_OK(weft_wait_all(rt));
    weft_task_release(root);
    weft_task_release(after);
    CHECK_OK(weft_data_unregister(d));
    weft_runtime_destroy(rt);
}

/* Misuse: twice in one body, data, awaiting itself, outside a body. */
static int misuse_rc[4];

static int misuse_body(weft_ctx *ctx, void *arg) {
    weft_data *d = arg;
    weft_task_desc n;
    weft_task_desc_init(&n);
    n.body = test_noop;
    weft_access a = {d, WEFT_R};
    n.accesses = &a;
    n.naccesses = 1;
    misuse_rc[0] = weft_ctx_continue(ctx, &n, NULL);
    n.accesses = NULL;
    n.naccesses = 0;
    weft_task *self = weft_ctx_task(ctx);
    n.deps = &self;
    n.ndeps = 1;
    misuse_rc[1] = weft_ctx_continue(ctx, &n, NULL);
    n.deps = NULL;
    n.ndeps = 0;
    int ok = weft_ctx_continue(ctx, &n, NULL);
    misuse_rc[2] = weft_ctx_continue(ctx, &n, NULL);
    return ok;
}

static void test_misuse(void) {
    test_step("misuse");
    weft_runtime *rt = make_rt(2);
    char buf[8];
    weft_data *d;
    CHECK_OK(weft_data_register(rt, buf, sizeof buf, &d));
    weft_task *t;
    CHECK_OK(weft_spawn_simple(rt, misuse_body, d, &t));
    CHECK_OK(weft_task_wait(t));
    CHECK_RC(misuse_rc[0], WEFT_EINVAL);
    CHECK_RC(misuse_rc[1], WEFT_EDEADLK);
    CHECK_RC(misuse_rc[2], WEFT_EINVAL);
    weft_task_desc n;
    weft_task_desc_init(&n);
    n.body = test_noop;
    CHECK_RC(weft_ctx_continue(NULL, &n, NULL), WEFT_EINVAL);
    CHECK_OK(weft_wait_all(rt));
    weft_task_release(t);
    CHECK_OK(weft_data_unregister(d));
    weft_runtime_destroy(rt);
}

/* GPUs: a suspended task gives its reservation back (a child needing the
 * whole GPU runs meanwhile), and continuations may be placed too. */
static void test_gpu_suspend(void) {
    test_step("gpu suspend");
    weft_runtime *rt = test_make_devices("cpu,vgpu:1", 2, 0, false);
    steps s = {.nsteps = 2, .child_where = "gpu:0", .cont_where = "gpu:0"};
    weft_task *root = spawn_steps(rt, &s, "gpu:0", NULL, 0);
    CHECK_OK(weft_task_wait(root));
    CHECK(atomic_load(&s.child_done) == 2);
    CHECK_OK(weft_wait_all(rt));
    weft_task_release(root);
    weft_runtime_destroy(rt);
}

/* A continuation placed on a GPU, awaiting a child on the same GPU whose
 * body queued 30 ms of work there: it runs once the child has finished
 * (its body asks how it ended), not as soon as the child's body returned,
 * as a GPU-only task ordered behind GPU work by events may. */
static atomic_int slow_kernel_done, cont_saw_status = -1;

static int slow_kernel(void *arg) {
    (void)arg;
    atomic_store(&slow_kernel_done, 1);
    return 0;
}

static int slow_child(weft_ctx *ctx, void *arg) {
    (void)arg;
    return weft_ctx_queue(ctx, 0, slow_kernel, NULL, 30000000);
}

static weft_task *slow_child_task;

static int cont_after_slow(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    weft_task_status st;
    if (weft_task_status_get(slow_child_task, &st) != 0) return 1;
    atomic_store(&cont_saw_status, (int)st);
    return 0;
}

static int root_awaiting_slow(weft_ctx *ctx, void *arg) {
    (void)arg;
    weft_placement p;
    if (weft_placement_parse("gpu:0", &p) != 0) return 1;
    weft_task_desc c;
    weft_task_desc_init(&c);
    c.body = slow_child;
    c.name = "slow child";
    c.placements = &p;
    c.nplacements = 1;
    if (weft_spawn(weft_ctx_runtime(ctx), &c, &slow_child_task) != 0) return 2;
    weft_task_desc n;
    weft_task_desc_init(&n);
    n.body = cont_after_slow;
    n.name = "cont";
    n.deps = &slow_child_task;
    n.ndeps = 1;
    n.placements = &p;
    n.nplacements = 1;
    return weft_ctx_continue(ctx, &n, NULL) != 0 ? 3 : 0;
}

static void test_gpu_continuation_waits_for_device_work(void) {
    test_step("gpu continuation after device work");
    weft_runtime *rt = test_make_devices("cpu,vgpu:1", 2, 0, false);
    weft_placement p;
    CHECK_OK(weft_placement_parse("gpu:0", &p));
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = root_awaiting_slow;
    d.name = "root";
    d.placements = &p;
    d.nplacements = 1;
    weft_task *root;
    CHECKF(weft_spawn(rt, &d, &root) == 0, "%s", weft_last_error());
    CHECKF(weft_task_wait(root) == 0, "%s", weft_last_error());
    CHECKF(atomic_load(&cont_saw_status) == WEFT_TASK_COMPLETED,
           "the continuation ran while the child it awaits was in status %d, not completed (%d)",
           atomic_load(&cont_saw_status), (int)WEFT_TASK_COMPLETED);
    CHECK(atomic_load(&slow_kernel_done) == 1);
    CHECK_OK(weft_wait_all(rt));
    weft_task_release(slow_child_task);
    weft_task_release(root);
    weft_runtime_destroy(rt);
}

/* A body on a GPU that waits for its child placed on the same GPU lends it
 * its reservation while it waits. */
static int gpu_parent(weft_ctx *ctx, void *arg) {
    (void)arg;
    weft_placement p;
    if (weft_placement_parse("gpu:0", &p) != 0) return 1;
    weft_task_desc c;
    weft_task_desc_init(&c);
    c.body = test_noop;
    c.placements = &p;
    c.nplacements = 1;
    weft_task *t;
    if (weft_spawn(weft_ctx_runtime(ctx), &c, &t) != 0) return 2;
    int rc = weft_task_wait(t);
    weft_task_release(t);
    return rc == 0 ? 0 : 3;
}

static void test_gpu_lend(unsigned workers) {
    test_step("gpu lend");
    weft_runtime *rt = test_make_devices("cpu,vgpu:1", workers, 0, false);
    weft_task *t = test_spawn_at(rt, "gpu:0", 1.0, gpu_parent, NULL, NULL, 0, true);
    CHECK_OK(weft_task_wait(t));
    CHECK_OK(weft_wait_all(rt));
    weft_task_release(t);
    weft_runtime_destroy(rt);
}

/* A continuation reaches the continued task's data where it is: on the
 * host (a CPU task), or on its GPU when placed there (NULL elsewhere); what
 * the body queued on its stream runs first, and what the continuation
 * writes is the task's output. */
typedef struct reach {
    const char *root_where, *cont_where; /* NULL: the CPU */
    int32_t *host;                       /* the registered memory */
    void *root_ptr;                      /* where the root's body found it */
    atomic_int cont_saw;                 /* 1: same pointer; 2: NULL; 3: another */
    size_t cont_bytes;
} reach;

static int set_first(void *arg) {
    ((int32_t *)arg)[0] = 7;
    return 0;
}

static int add_first(void *arg) {
    ((int32_t *)arg)[0] += 1;
    return 0;
}

static int reach_cont(weft_ctx *ctx, void *arg) {
    reach *r = arg;
    int32_t *p = weft_ctx_data(ctx, 0);
    r->cont_bytes = weft_ctx_bytes(ctx, 0);
    atomic_store(&r->cont_saw, p == r->root_ptr ? 1 : p == NULL ? 2 : 3);
    if (!p)
        return 0;
    if (!weft_ctx_gpu_count(ctx)) {
        add_first(p);
        return 0;
    }
    weft_range rg = {p, sizeof(int32_t), WEFT_RW};
    return weft_ctx_queue_rw(ctx, 0, add_first, p, 0, &rg, 1);
}

static int reach_root(weft_ctx *ctx, void *arg) {
    reach *r = arg;
    int32_t *p = weft_ctx_data(ctx, 0);
    r->root_ptr = p;
    if (weft_ctx_gpu_count(ctx)) {
        weft_range rg = {p, sizeof(int32_t), WEFT_W};
        if (weft_ctx_queue_rw(ctx, 0, set_first, p, 2000000, &rg, 1) != 0) /* (slow: the continuation must wait) */
            return 1;
    } else {
        set_first(p);
    }
    weft_task *child;
    if (weft_spawn_simple(weft_ctx_runtime(ctx), test_noop, NULL, &child) != 0)
        return 2;
    weft_task_desc n;
    weft_task_desc_init(&n);
    n.body = reach_cont;
    n.arg = r;
    n.deps = &child;
    n.ndeps = 1;
    weft_placement q;
    if (r->cont_where) {
        if (weft_placement_parse(r->cont_where, &q) != 0)
            return 3;
        n.placements = &q;
        n.nplacements = 1;
    }
    int rc = weft_ctx_continue(ctx, &n, NULL);
    weft_task_release(child);
    return rc ? 4 : 0;
}

static void reach_case(const char *devices, const char *root_where, const char *cont_where, int want_saw,
                       int32_t want) {
    weft_runtime *rt = test_make_devices(devices, 2, 0, true);
    int32_t host[4] = {0, 0, 0, 0};
    weft_data *d;
    CHECK_OK(weft_data_register(rt, host, sizeof host, &d));
    reach r = {.root_where = root_where, .cont_where = cont_where, .host = host};
    weft_access rw = {d, WEFT_RW};
    weft_task_desc t;
    weft_task_desc_init(&t);
    t.body = reach_root;
    t.arg = &r;
    t.accesses = &rw;
    t.naccesses = 1;
    weft_placement p;
    if (root_where) {
        CHECK_OK(weft_placement_parse(root_where, &p));
        t.placements = &p;
        t.nplacements = 1;
    }
    weft_task *root;
    CHECKF(weft_spawn(rt, &t, &root) == 0, "%s", weft_last_error());
    CHECKF(weft_task_wait(root) == 0, "%s", weft_last_error());
    CHECKF(atomic_load(&r.cont_saw) == want_saw, "%s -> %s: continuation saw %d", root_where ? root_where : "cpu",
           cont_where ? cont_where : "cpu", atomic_load(&r.cont_saw));
    CHECK(want_saw == 2 ? r.cont_bytes == 0 : r.cont_bytes == sizeof host);
    if (!root_where)
        CHECK(r.root_ptr == host);
    weft_task_release(root);
    CHECK_OK(weft_data_unregister(d)); /* the newest value back in host */
    CHECKF(host[0] == want, "host[0] = %d, want %d", host[0], want);
    CHECK_OK(weft_runtime_destroy(rt));
}

static void test_data_reached(void) {
    test_step("data reached by a continuation");
    reach_case("cpu", NULL, NULL, 1, 8);
    reach_case("cpu,vgpu:2", NULL, NULL, 1, 8);
    reach_case("cpu,vgpu:2", "gpu:0", "gpu:0", 1, 8);
    reach_case("cpu,vgpu:2", "gpu:1", "gpu:1", 1, 8);
    reach_case("cpu,vgpu:2", "gpu:0", "gpu:1", 2, 7); /* not where the data is */
    reach_case("cpu,vgpu:2", "gpu:0", NULL, 2, 7);
}

int main(void) {
    test_watchdog(120);
    test_steps(1, 1);
    test_steps(2, 1);
    test_steps(1, 50);
    test_steps(2, 200);
    test_failures();
    test_cancel_suspended();
    test_data_held();
    test_data_reached();
    test_misuse();
    test_gpu_suspend();
    test_gpu_continuation_waits_for_device_work();
    test_gpu_lend(1);
    test_gpu_lend(2);
    printf("test_continue: ok\n");
    return 0;
}
