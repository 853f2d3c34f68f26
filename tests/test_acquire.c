/* weft_data_acquire / weft_data_release: the application thread reads and
 * writes a registered buffer's host memory between tasks.  On "cpu" and on
 * "cpu,vgpu:2": a GPU task's write is brought to the host by acquire(R);
 * what the application writes under acquire(W) reaches a GPU reader; tasks
 * spawned while the data is acquired wait for the release; timeouts (and a
 * timed-out WEFT_W leaves the value alone); every misuse refused with its
 * message; a failed writer before acquire(R) reported, nothing held; the
 * runtime usable after each error; acquire from a task refused; several
 * handles at once; wait_all and destroy with data held; an acquisition
 * cancelled by weft_cancel_pending while it waits leaves no trace. */
#include "check.h"

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

enum { N = 1000 };

static weft_runtime *make(const char *devices) { return test_make_devices(devices, 2, 0, false); }

#define CHECK_MSG(has) CHECKF(strstr(weft_last_error(), has) != NULL, "message \"%s\" lacks \"%s\"", \
                              weft_last_error(), has)

/* ---- task bodies: on a GPU (a kernel on its replica) or on the CPU --------- */

typedef struct job {
    double *p;         /* the replica the kernel works on */
    double val;        /* fill: written; check: expected */
    _Atomic int ok;    /* check: 1 if every element was val */
    _Atomic int ran;
    _Atomic int *gate; /* if set: the body waits until *gate != 0 */
} job;

static int fill_kernel(void *arg) {
    job *j = arg;
    for (int i = 0; i < N; i++) j->p[i] = j->val;
    return 0;
}
static int check_kernel(void *arg) {
    job *j = arg;
    int ok = 1;
    for (int i = 0; i < N; i++) ok &= j->p[i] == j->val;
    atomic_store(&j->ok, ok);
    return 0;
}
static int run_kernel(weft_ctx *ctx, job *j, int (*k)(void *), unsigned mode) {
    atomic_store(&j->ran, 1);
    if (j->gate)
        while (!atomic_load(j->gate)) sched_yield();
    j->p = weft_ctx_data(ctx, 0);
    if (weft_ctx_gpu_count(ctx) == 0) return k(j);
    weft_range r = {j->p, N * sizeof(double), mode};
    return weft_ctx_queue_rw(ctx, 0, k, j, 0, &r, 1);
}
static int fill_body(weft_ctx *ctx, void *arg) { return run_kernel(ctx, arg, fill_kernel, WEFT_W); }
static int check_body(weft_ctx *ctx, void *arg) { return run_kernel(ctx, arg, check_kernel, WEFT_R); }
static int fail_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    return 3;
}

/* Spawn body(j) with (h, mode), on a GPU when the runtime has one. */
static weft_task *spawn(weft_runtime *rt, bool gpu, weft_body_fn body, job *j, weft_data *h, unsigned mode,
                        const char *name) {
    weft_placement p;
    CHECK_OK(weft_placement_parse("gpu", &p));
    weft_access acc = {h, mode};
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = body;
    d.arg = j;
    d.accesses = &acc;
    d.naccesses = 1;
    d.name = name;
    if (gpu) {
        d.placements = &p;
        d.nplacements = 1;
    }
    weft_task *t = NULL;
    CHECK_OK(weft_spawn(rt, &d, &t));
    return t;
}

static weft_task_status status(weft_task *t) {
    weft_task_status s;
    CHECK_OK(weft_task_status_get(t, &s));
    return s;
}

static bool all(const double *a, double v) {
    for (int i = 0; i < N; i++)
        if (a[i] != v) return false;
    return true;
}

/* ---- acquire from inside a task: refused ---------------------------------- */

typedef struct inside {
    weft_data *h;
    int rc;
    char msg[256];
} inside;
static int inside_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    inside *in = arg;
    in->rc = weft_data_acquire(in->h, WEFT_R, 0);
    snprintf(in->msg, sizeof in->msg, "%s", weft_last_error());
    if (in->rc == 0 && weft_data_release(in->h) != 0) return 1;
    return 0;
}

/* ---- the scenarios, on one device string ---------------------------------- */

static void run(const char *devices) {
    weft_runtime *rt = make(devices);
    bool gpu = strstr(devices, "vgpu") != NULL;
    static double a[N];
    for (int i = 0; i < N; i++) a[i] = 1;
    weft_data *h;
    CHECK_OK(weft_data_register(rt, a, sizeof a, &h));

    /* 1. A (GPU) writer; wait_all leaves the host stale on a GPU; acquire(R)
     * brings the newest value into a[]. */
    job w = {.val = 5};
    weft_task *t = spawn(rt, gpu, fill_body, &w, h, WEFT_W, "writer");
    CHECK_OK(weft_wait_all(rt));
    weft_task_release(t);
    if (gpu) CHECKF(a[0] == 1, "a[0] = %g: the GPU's write should still be on the GPU", a[0]);
    CHECK_OK(weft_data_acquire(h, WEFT_R, 0));
    CHECKF(all(a, 5), "a[0] = %g after acquire(R)", a[0]);
    /* a reader may run while it is held for reading; a writer waits */
    job r1 = {.val = 5};
    weft_task *tr = spawn(rt, gpu, check_body, &r1, h, WEFT_R, "reader-during-R");
    job w2 = {.val = 6};
    weft_task *tw = spawn(rt, gpu, fill_body, &w2, h, WEFT_W, "writer-after-R");
    CHECK_OK(weft_task_wait(tr));
    CHECK(atomic_load(&r1.ok) == 1);
    sleep_ms(30);
    CHECK(atomic_load(&w2.ran) == 0 && status(tw) == WEFT_TASK_WAITING);
    CHECK(all(a, 5));
    CHECK_OK(weft_data_release(h));
    CHECK_OK(weft_task_wait(tw));
    weft_task_release(tr);
    weft_task_release(tw);

    /* 2. acquire(W): the application writes; tasks spawned meanwhile wait
     * for the release; a GPU reader then sees what it wrote. */
    CHECK_OK(weft_data_acquire(h, WEFT_W, 0));
    job r2 = {.val = 7};
    tr = spawn(rt, gpu, check_body, &r2, h, WEFT_R, "reader-after-W");
    CHECK_OK(weft_wait_all_timed(rt, 0) == WEFT_ETIMEDOUT ? 0 : 1); /* the reader waits */
    CHECK_OK(weft_wait_settled_timed(rt, 5000000000ull)); /* only the release can move it */
    for (int i = 0; i < N; i++) a[i] = 7;
    sleep_ms(30);
    CHECK(atomic_load(&r2.ran) == 0 && status(tr) == WEFT_TASK_WAITING);
    CHECK_OK(weft_data_release(h));
    CHECK_OK(weft_task_wait(tr));
    CHECK(atomic_load(&r2.ok) == 1);
    weft_task_release(tr);

    /* 3. wait_all does not wait for a held acquisition (only for tasks
     * behind it); RW acquire of a value on a GPU. */
    job w3 = {.val = 8};
    t = spawn(rt, gpu, fill_body, &w3, h, WEFT_RW, "writer-8");
    CHECK_OK(weft_data_acquire(h, WEFT_RW, 0));
    CHECK(all(a, 8));
    CHECK_OK(weft_wait_all(rt));
    for (int i = 0; i < N; i++) a[i] = 9;
    CHECK_OK(weft_data_release(h));
    weft_task_release(t);

    /* 4. Timeouts: a slow writer; acquire(R) and a timed acquire(W) give up,
     * hold nothing, and leave the writer's value alone. */
    _Atomic int gate = 0;
    job slow = {.val = 10, .gate = &gate};
    t = spawn(rt, gpu, fill_body, &slow, h, WEFT_RW, "slow-writer");
    CHECK_ERR(weft_data_acquire(h, WEFT_R, 20 * 1000000ull), WEFT_ETIMEDOUT);
    CHECK_MSG("nothing is held");
    CHECK_ERR(weft_data_acquire(h, WEFT_W, 1000000ull), WEFT_ETIMEDOUT); /* not "acquired already" */
    CHECK_ERR(weft_data_release(h), WEFT_EINVAL);
    CHECK_MSG("not acquired");
    atomic_store(&gate, 1);
    CHECK_OK(weft_task_wait(t));
    weft_task_release(t);
    CHECK_OK(weft_data_acquire(h, WEFT_R, 1000000000ull));
    CHECKF(all(a, 10), "a[0] = %g: an abandoned acquire(W) must not change the value", a[0]);
    CHECK_OK(weft_data_release(h));
    CHECK_OK(weft_wait_all(rt));

    /* 5. Misuse, each refused with a message; nothing changes. */
    CHECK_ERR(weft_data_acquire(NULL, WEFT_R, 0), WEFT_EINVAL);
    CHECK_MSG("NULL");
    CHECK_ERR(weft_data_acquire(h, 0, 0), WEFT_EINVAL);
    CHECK_MSG("WEFT_R, WEFT_W or WEFT_RW");
    CHECK_ERR(weft_data_acquire(h, WEFT_RW | WEFT_COMMUTE, 0), WEFT_EINVAL);
    CHECK_MSG("for tasks");
    CHECK_ERR(weft_data_acquire(h, WEFT_R | WEFT_HOST, 0), WEFT_EINVAL);
    CHECK_MSG("WEFT_HOST");
    CHECK_ERR(weft_data_acquire(h, WEFT_REDUCE | WEFT_RED_SUM | WEFT_RED_F64, 0), WEFT_EINVAL);
    CHECK_MSG("WEFT_REDUCE");
    CHECK_ERR(weft_data_acquire(h, 0x40, 0), WEFT_EINVAL);
    CHECK_ERR(weft_data_release(NULL), WEFT_EINVAL);
    CHECK_ERR(weft_data_release(h), WEFT_EINVAL);
    CHECK_MSG("not acquired");
    CHECK_OK(weft_data_acquire(h, WEFT_R, 0));
    CHECK_ERR(weft_data_acquire(h, WEFT_R, 0), WEFT_EINVAL);
    CHECK_MSG("acquired already");
    CHECK_MSG("weft_data_release");
    CHECK_ERR(weft_data_unregister(h), WEFT_EBUSY);
    CHECK_MSG("release it first");
    CHECK_OK(weft_data_release(h));
    CHECK_ERR(weft_data_release(h), WEFT_EINVAL); /* twice */
    CHECK_ERR(weft_data_acquire_many(NULL, 1, 0), WEFT_EINVAL);
    weft_access twice[2] = {{h, WEFT_R}, {h, WEFT_W}};
    CHECK_ERR(weft_data_acquire_many(twice, 2, 0), WEFT_EINVAL);
    CHECK_MSG("same data");
    CHECK_ERR(weft_data_acquire_many(twice, 0, 0), WEFT_EINVAL);

    /* 6. From a task: refused. */
    inside in = {h, 0, ""};
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = inside_body;
    d.arg = &in;
    CHECK_OK(weft_spawn(rt, &d, &t));
    CHECK_OK(weft_task_wait(t));
    weft_task_release(t);
    CHECKF(in.rc == WEFT_EINVAL && strstr(in.msg, "from a task"), "rc %d: %s", in.rc, in.msg);

    /* 7. A failed writer: acquire(R) is cancelled as a reader would be,
     * naming it, and holds nothing; acquire(W) makes the data valid again. */
    job none = {0};
    t = spawn(rt, gpu, fail_body, &none, h, WEFT_RW, "bad-writer");
    CHECK_ERR(weft_data_acquire(h, WEFT_R, 0), WEFT_ECANCELLED);
    CHECK_MSG("bad-writer");
    CHECK_MSG("nothing is held");
    CHECK_ERR(weft_data_acquire(h, WEFT_RW, 0), WEFT_ECANCELLED);
    CHECK_ERR(weft_data_release(h), WEFT_EINVAL);
    CHECK_RC(weft_wait_all(rt), WEFT_ETASKFAILED); /* the writer's own failure, once */
    weft_task_release(t);
    CHECK_OK(weft_data_acquire(h, WEFT_W, 0));
    for (int i = 0; i < N; i++) a[i] = 11;
    CHECK_OK(weft_data_release(h));
    job r7 = {.val = 11};
    t = spawn(rt, gpu, check_body, &r7, h, WEFT_R, "reader-after-fix");
    CHECK_OK(weft_task_wait(t));
    CHECK(atomic_load(&r7.ok) == 1);
    weft_task_release(t);
    CHECK_OK(weft_wait_all(rt));

    /* 8. Two handles at once; each released; the tasks behind them wait
     * for the last release. */
    static double b[N];
    weft_data *hb;
    CHECK_OK(weft_data_register(rt, b, sizeof b, &hb));
    job wb = {.val = 12};
    t = spawn(rt, gpu, fill_body, &wb, hb, WEFT_W, "writer-b");
    weft_task_release(t);
    weft_access both[2] = {{h, WEFT_R}, {hb, WEFT_RW}};
    CHECK_OK(weft_data_acquire_many(both, 2, 0));
    CHECK(all(a, 11) && all(b, 12));
    for (int i = 0; i < N; i++) b[i] = 13;
    job rb = {.val = 13};
    weft_task *tb = spawn(rt, gpu, check_body, &rb, hb, WEFT_R, "reader-b");
    CHECK_OK(weft_data_release(hb));
    /* released, but its group is held through h: what follows hb waits */
    CHECK_ERR(weft_data_acquire(hb, WEFT_R, 20 * 1000000ull), WEFT_ETIMEDOUT);
    sleep_ms(20);
    CHECK(status(tb) == WEFT_TASK_WAITING);
    CHECK_OK(weft_data_release(h));
    CHECK_OK(weft_task_wait(tb));
    CHECK(atomic_load(&rb.ok) == 1);
    weft_task_release(tb);
    CHECK_OK(weft_data_unregister(hb));
    CHECK(all(b, 13));

    /* 9. A writer on a GPU, read back by acquire(R) with a timeout. */
    job w9 = {.val = 14};
    t = spawn(rt, gpu, fill_body, &w9, h, WEFT_W, "writer-14");
    weft_task_release(t);
    CHECK_OK(weft_data_acquire(h, WEFT_R, 10ull * 1000000000ull));
    CHECK(all(a, 14));
    CHECK_OK(weft_data_release(h));

    /* 10. The runtime still works; unregister brings the value back;
     * destroy releases what is held. */
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_acquire(h, WEFT_R, 0));
    CHECK(all(a, 14));
    CHECK_OK(weft_data_release(h));
    CHECK_OK(weft_data_unregister(h));
    CHECK_OK(weft_data_register(rt, a, sizeof a, &h));
    CHECK_OK(weft_data_acquire(h, WEFT_RW, 0));
    a[0] = 15;
    job r10 = {.val = 15};
    t = spawn(rt, gpu, check_body, &r10, h, WEFT_R, "reader-at-destroy");
    CHECK_OK(weft_runtime_destroy(rt)); /* releases h: the reader runs, then h goes */
    CHECK(atomic_load(&r10.ran) == 1);
    weft_task_release(t);
}

/* ---- cancelled by weft_cancel_pending while it waits: as if never made ----- */

typedef struct acq_arg {
    weft_data *h;
    unsigned mode;
    int rc;
} acq_arg;
static void *acquirer(void *arg) {
    acq_arg *a = arg;
    a->rc = weft_data_acquire(a->h, a->mode, 0);
    if (a->rc == 0) CHECK_OK(weft_data_release(a->h)); /* (it came after the request: acquired) */
    return NULL;
}

static void cancelled_while_waiting(const char *devices, unsigned mode) {
    weft_runtime *rt = make(devices);
    bool gpu = strstr(devices, "vgpu") != NULL;
    static double a[N];
    for (int i = 0; i < N; i++) a[i] = 1;
    weft_data *h;
    CHECK_OK(weft_data_register(rt, a, sizeof a, &h));
    _Atomic int gate = 0;
    job w = {.val = 6, .gate = &gate};
    weft_task *t = spawn(rt, gpu, fill_body, &w, h, WEFT_W, "writer");
    while (!atomic_load(&w.ran)) sched_yield(); /* started: the request does not cancel it */
    acq_arg arg = {h, mode, -1};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, acquirer, &arg) == 0);
    sleep_ns(20 * 1000 * 1000); /* (the acquisition waits for the writer by now, almost always) */
    CHECK_OK(weft_cancel_pending(rt));
    atomic_store(&gate, 1);
    CHECK(pthread_join(th, NULL) == 0);
    CHECKF(arg.rc == 0 || arg.rc == WEFT_ECANCELLED, "acquire: %d", arg.rc);
    CHECK_OK(weft_task_wait(t));
    weft_task_release(t);
    /* the data is as if that acquisition had never been made */
    CHECK_OK(weft_data_acquire(h, WEFT_R, 0));
    CHECK(all(a, 6));
    CHECK_OK(weft_data_release(h));
    job r = {.val = 6};
    t = spawn(rt, gpu, check_body, &r, h, WEFT_R, "reader");
    CHECK_OK(weft_task_wait(t));
    CHECK(atomic_load(&r.ok) == 1);
    weft_task_release(t);
    CHECK_OK(weft_data_unregister(h));
    CHECK(all(a, 6));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* Partition while the data is acquired: refused, and the message says so. */
static void partition_while_acquired(void) {
    weft_runtime *rt = make("cpu");
    static double a[N];
    weft_data *h, *tiles[2];
    CHECK_OK(weft_data_register(rt, a, sizeof a, &h));
    CHECK_OK(weft_data_acquire(h, WEFT_RW, 0));
    weft_tiling tl = {.elem = sizeof(double), .rows = 1, .cols = N, .grid_rows = 1, .grid_cols = 2};
    CHECK_ERR(weft_data_partition(h, &tl, tiles), WEFT_EBUSY);
    CHECK_MSG("acquired");
    CHECK_OK(weft_data_release(h));
    CHECK_OK(weft_data_partition(h, &tl, tiles));
    CHECK_OK(weft_data_unregister(h));
    CHECK_OK(weft_runtime_destroy(rt));
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    run("cpu");
    run("cpu,vgpu:2");
    partition_while_acquired();
    static const unsigned modes[] = {WEFT_R, WEFT_W, WEFT_RW};
    for (int m = 0; m < 3; m++) {
        cancelled_while_waiting("cpu", modes[m]);
        cancelled_while_waiting("cpu,vgpu:2", modes[m]);
    }
    printf("test_acquire: ok\n");
    return 0;
}
