/* StarPU users' idioms in C: a task's on_finish callback that spawns the
 * next task (on a virtual GPU, under backpressure, and while destroy
 * drains), on_finish's own argument (finish_arg), waits refused inside a
 * callback, WEFT_ENODEV for placements no device of the runtime satisfies,
 * and tasks whose every placement alternative has a body of its own (no
 * top-level body). */
#include "check.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Set on the runtime's worker threads (on_worker_start): a callback that
 * runs elsewhere ran on a device's thread. */
static _Thread_local int tl_worker;
static void mark_worker(unsigned worker, void *arg) {
    (void)worker;
    (void)arg;
    tl_worker = 1;
}

static weft_runtime *make(const char *devices, unsigned workers, size_t max_inflight) {
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = workers;
    cfg.trace_path = NULL;
    cfg.devices = devices;
    cfg.max_inflight = max_inflight;
    cfg.vgpu_memory = 1u << 20;
    cfg.on_worker_start = mark_worker;
    weft_runtime *rt = NULL;
    CHECKF(weft_runtime_create(&cfg, &rt) == 0, "%s: %s", devices, weft_last_error());
    return rt;
}

static weft_placement parsed(const char *s) {
    weft_placement p;
    CHECKF(weft_placement_parse(s, &p) == 0, "'%s': %s", s, weft_last_error());
    return p;
}

/* ---- on_finish spawns the next task (StarPU's callback idiom) ---------- */

/* One chain: each link's on_finish (finish_arg: the chain) spawns the next
 * link until `length` have run.  The body's arg is the chain's `body_arg`,
 * so that each side's argument is checked. */
typedef struct chain {
    weft_runtime *rt;
    const weft_placement *where; /* NULL: a plain CPU task */
    unsigned flags;              /* of the spawns from the callbacks */
    int length;
    atomic_int bodies;           /* bodies run */
    atomic_int finished;         /* callbacks run (each with status 0) */
    atomic_int off_worker;       /* callbacks run on a device's thread */
    atomic_int bad;              /* a wrong argument or status, or a failed spawn */
    int body_arg;
} chain;

static int tick(void *arg) {
    (void)arg;
    return 0;
}

static int link_body(weft_ctx *ctx, void *arg) {
    chain *c = (chain *)((char *)arg - offsetof(chain, body_arg));
    atomic_fetch_add(&c->bodies, 1);
    if (weft_ctx_gpu_count(ctx) == 0)
        return 0;
    /* Work on the stream, modelled long enough that the queue's thread (not
     * the body's worker) reports the task's completion. */
    return weft_ctx_queue(ctx, 0, tick, NULL, 50000);
}

static void link_finished(void *arg, int status);

static int link_spawn(chain *c, unsigned flags) {
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = link_body;
    d.arg = &c->body_arg;
    d.on_finish = link_finished;
    d.finish_arg = c;
    d.placements = c->where;
    d.nplacements = c->where ? 1 : 0;
    d.flags = flags;
    d.name = "link";
    return weft_spawn(c->rt, &d, NULL);
}

static void link_finished(void *arg, int status) {
    chain *c = arg;
    if (status != 0)
        atomic_store(&c->bad, 1);
    if (!tl_worker)
        atomic_fetch_add(&c->off_worker, 1);
    if (atomic_fetch_add(&c->finished, 1) + 1 < c->length && link_spawn(c, c->flags) != 0) {
        fprintf(stderr, "link_finished: the spawn from the callback failed: %s\n", weft_last_error());
        atomic_store(&c->bad, 1);
    }
}

enum { CHAINS = 4 };

static void chains_start(chain *c, weft_runtime *rt, const weft_placement *where, unsigned flags, int length) {
    for (int i = 0; i < CHAINS; i++) {
        memset(&c[i], 0, sizeof c[i]);
        c[i].rt = rt;
        c[i].where = where;
        c[i].flags = flags;
        c[i].length = length;
        CHECK_OK(link_spawn(&c[i], 0));
    }
}

static void chains_check(chain *c, int length) {
    for (int i = 0; i < CHAINS; i++) {
        CHECKF(atomic_load(&c[i].finished) == length && atomic_load(&c[i].bodies) == length,
               "chain %d: %d of %d links finished, %d bodies", i, atomic_load(&c[i].finished), length,
               atomic_load(&c[i].bodies));
        CHECK(atomic_load(&c[i].bad) == 0);
    }
}

/* Chains on a virtual GPU with max_inflight 2: the GPU's queue thread runs
 * the callbacks, whose spawns must not wait for backpressure (a wait there
 * would park the one thread that finishes the tasks in flight, and every
 * thread with it).  Meanwhile the main thread spawns CPU tasks of its own, and
 * waits for backpressure as usual. */
static void test_chain_on_gpu(void) {
    weft_runtime *rt = make("cpu,vgpu:1", 2, 2);
    weft_placement gpu = parsed("gpu");
    int length = test_pick(400, 80);
    chain c[CHAINS];
    chains_start(c, rt, &gpu, 0, length);
    for (int i = 0; i < test_pick(200, 50); i++)
        CHECK_OK(weft_spawn_simple(rt, test_noop, NULL, NULL));
    CHECK_OK(weft_wait_all(rt));
    chains_check(c, length);
    int off = 0;
    for (int i = 0; i < CHAINS; i++)
        off += atomic_load(&c[i].off_worker);
    CHECKF(off > 0, "no callback ran on the virtual GPU's thread: the test missed the device path");
    CHECK_OK(weft_runtime_destroy(rt));
}

/* CPU chains (callbacks on the workers) with max_inflight 1, their spawns
 * with WEFT_SPAWN_NOWAIT: from a callback that never answers WEFT_EAGAIN. */
static void test_chain_on_cpu(void) {
    weft_runtime *rt = make("cpu", 2, 1);
    int length = test_pick(2000, 300);
    chain c[CHAINS];
    chains_start(c, rt, NULL, WEFT_SPAWN_NOWAIT, length); /* (the first links wait, as the main thread's) */
    CHECK_OK(weft_wait_all(rt));
    chains_check(c, length);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* Destroy without a wait_all first: it finishes the outstanding tasks, and
 * the callbacks of those may still spawn (as their bodies could). */
static void test_chain_while_destroying(void) {
    weft_runtime *rt = make("cpu,vgpu:2", 2, 4);
    weft_placement gpu = parsed("gpu");
    int length = test_pick(200, 50);
    chain c[CHAINS];
    chains_start(c, rt, &gpu, 0, length);
    CHECK_OK(weft_runtime_destroy(rt));
    chains_check(c, length);
}

/* ---- finish_arg -------------------------------------------------------- */

typedef struct seen_arg {
    void *got;
    int calls, destroyed;
} seen_arg;

static void record_finish(void *arg, int status) {
    (void)status;
    seen_arg **slot = arg; /* arg or finish_arg: both point at a seen_arg pointer */
    (*slot)->got = arg;
    (*slot)->calls++;
}

static void record_destroy(void *arg) {
    seen_arg **slot = arg;
    (*slot)->destroyed++;
}

static void test_finish_arg(void) {
    weft_runtime *rt = make("cpu", 2, 0);
    seen_arg s;
    seen_arg *body_side = &s, *finish_side = &s;
    weft_task_desc d;
    weft_task *t;

    /* only on_finish set: it gets the body's arg, as before finish_arg */
    memset(&s, 0, sizeof s);
    weft_task_desc_init(&d);
    d.body = test_noop;
    d.arg = &body_side;
    d.arg_destroy = record_destroy;
    d.on_finish = record_finish;
    CHECK_OK(weft_spawn(rt, &d, &t));
    CHECK_OK(weft_task_wait(t));
    weft_task_release(t);
    CHECK(s.calls == 1 && s.got == (void *)&body_side && s.destroyed == 1);

    /* finish_arg set: on_finish gets it; arg_destroy still gets arg */
    memset(&s, 0, sizeof s);
    d.finish_arg = &finish_side;
    CHECK_OK(weft_spawn(rt, &d, &t));
    CHECK_OK(weft_task_wait(t));
    weft_task_release(t);
    CHECK(s.calls == 1 && s.got == (void *)&finish_side && s.destroyed == 1);

    /* a spawn that fails: arg destroyed, on_finish never called */
    memset(&s, 0, sizeof s);
    d.flags = 0x80; /* unknown */
    CHECK_ERR(weft_spawn(rt, &d, NULL), WEFT_EINVAL);
    CHECK(s.calls == 0 && s.destroyed == 1);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- waits inside a callback: refused at once -------------------------- */

enum { W_TASK, W_TIMED, W_ALL, W_ALL_TIMED, W_SETTLED, W_UNREGISTER, W_ACQUIRE, W_ACQUIRE_MANY, W_PARTITION,
       W_COMM, W_DESTROY, W_STATUS, NW };
static const char *const wname[NW] = {"weft_task_wait", "weft_task_timedwait", "weft_wait_all",
                                      "weft_wait_all_timed", "weft_wait_settled_timed", "weft_data_unregister",
                                      "weft_data_acquire", "weft_data_acquire_many", "weft_data_partition",
                                      "weft_comm_destroy", "weft_runtime_destroy", "weft_task_status_get"};
/* What each refusal's message names (the timed waits by their untimed names) */
static const char *const wneedle[NW] = {"weft_task_wait", "weft_task_wait", "weft_wait_all", "weft_wait_all",
                                        "weft_wait_settled", "weft_data_unregister", "weft_data_acquire",
                                        "weft_data_acquire_many", "weft_data_partition", "weft_comm_destroy",
                                        "weft_runtime_destroy", ""};

typedef struct waiter {
    weft_runtime *rt;
    weft_task *other;   /* a task to wait for (finished or not) */
    weft_data *data;
    weft_comm *comm;    /* NULL: not tried */
    int rc[NW];
    int named[NW];      /* the message names the callback and the function */
    atomic_int done;
} waiter;

static void try_waits(void *arg, int status) {
    (void)status;
    waiter *w = arg;
    weft_tiling tl = {sizeof(double), 1, 8, 0, 1, 2, 0};
    weft_data *tiles[2];
    weft_access acc = {w->data, WEFT_R};
    weft_task_status st;
    for (int i = 0; i < NW; i++) {
        int rc = 0;
        switch (i) {
        case W_TASK: rc = weft_task_wait(w->other); break;
        case W_TIMED: rc = weft_task_timedwait(w->other, 1000000); break;
        case W_ALL: rc = weft_wait_all(w->rt); break;
        case W_ALL_TIMED: rc = weft_wait_all_timed(w->rt, 1000000); break;
        case W_SETTLED: rc = weft_wait_settled_timed(w->rt, 1000000); break;
        case W_UNREGISTER: rc = weft_data_unregister(w->data); break;
        case W_ACQUIRE: rc = weft_data_acquire(w->data, WEFT_R, 0); break;
        case W_ACQUIRE_MANY: rc = weft_data_acquire_many(&acc, 1, 0); break;
        case W_PARTITION: rc = weft_data_partition(w->data, &tl, tiles); break;
        case W_COMM: rc = w->comm ? weft_comm_destroy(w->comm) : WEFT_EDEADLK; break;
        case W_DESTROY: rc = weft_runtime_destroy(w->rt); break;
        case W_STATUS: rc = weft_task_status_get(w->other, &st); break; /* looks without waiting */
        }
        w->rc[i] = rc;
        const char *msg = weft_last_error();
        w->named[i] = rc == 0 || (w->comm == NULL && i == W_COMM) ||
                      (strstr(msg, "on_finish") && strstr(msg, wneedle[i]));
    }
    atomic_store(&w->done, 1);
}

static void wait_refusals(const char *devices, const char *where) {
    weft_runtime *rt = make(devices, 2, 0);
    static double buf[8];
    waiter w;
    memset(&w, 0, sizeof w);
    w.rt = rt;
    CHECK_OK(weft_data_register(rt, buf, sizeof buf, &w.data));
    if (strstr(devices, "vgpu"))
        CHECK_OK(weft_comm_create(rt, NULL, &w.comm));
    /* `other` waits on a gate, so that a wait for it would block */
    block_workers_reset();
    CHECK_OK(weft_spawn_simple(rt, blocker, NULL, &w.other));
    weft_placement p = parsed(where);
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = link_body; /* (queues work when on a GPU) */
    chain unused;
    memset(&unused, 0, sizeof unused);
    d.arg = &unused.body_arg;
    d.on_finish = try_waits;
    d.finish_arg = &w;
    d.placements = &p;
    d.nplacements = 1;
    weft_task *t;
    CHECK_OK(weft_spawn(rt, &d, &t));
    CHECK_OK(weft_task_wait(t));
    CHECK(atomic_load(&w.done) == 1);
    for (int i = 0; i < NW; i++) {
        int want = i == W_STATUS ? 0 : WEFT_EDEADLK;
        CHECKF(w.rc[i] == want, "%s on %s: %s from the callback returned %d, expected %d", devices, where, wname[i],
               w.rc[i], want);
        CHECKF(w.named[i], "%s on %s: %s's message does not name on_finish and the function", devices, where,
               wname[i]);
    }
    atomic_store(&gate, 1);
    CHECK_OK(weft_task_wait(w.other));
    weft_task_release(w.other);
    weft_task_release(t);
    if (w.comm)
        CHECK_OK(weft_comm_destroy(w.comm));
    CHECK_OK(weft_data_unregister(w.data));
    CHECK_OK(weft_runtime_destroy(rt));
}

static void test_waits_refused(void) {
    wait_refusals("cpu", "cpu");          /* the callback on a worker */
    wait_refusals("cpu,vgpu:2", "gpu");   /* on a device's thread, mostly */
}

/* ---- WEFT_ENODEV -------------------------------------------------------- */

static int spawn_at(weft_runtime *rt, const weft_placement *p, size_t n) {
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = test_noop;
    d.placements = p;
    d.nplacements = n;
    return weft_spawn(rt, &d, NULL);
}

static void expect(int rc, int code, const char *needle) {
    CHECK_ERR(rc, code);
    CHECKF(strstr(weft_last_error(), needle) != NULL, "message \"%s\" lacks \"%s\"", weft_last_error(), needle);
}

static void test_enodev(void) {
    CHECKF(strstr(weft_strerror(WEFT_ENODEV), "WEFT_ENODEV") != NULL, "%s", weft_strerror(WEFT_ENODEV));
    /* a GPU placement on a runtime without GPUs */
    weft_runtime *rt = make("cpu", 2, 0);
    weft_placement p[2];
    p[0] = parsed("gpu");
    expect(spawn_at(rt, p, 1), WEFT_ENODEV, "1 GPU asked for, this runtime has 0");
    expect(spawn_at(rt, p, 1), WEFT_ENODEV, "\"cpu\""); /* says what to write instead */
    weft_space *sp;
    CHECK_OK(weft_space_create(rt, "T", &sp));
    int64_t key = 1;
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = test_noop;
    d.placements = p;
    d.nplacements = 1;
    expect(weft_space_spawn(sp, &key, 1, &d, NULL), WEFT_ENODEV, "this runtime has 0");
    CHECK_OK(weft_space_destroy(sp));
    weft_comm *c;
    expect(weft_comm_create(rt, NULL, &c), WEFT_ENODEV, "no GPUs");
    /* with a CPU alternative it runs there */
    p[1] = parsed("cpu");
    CHECK_OK(spawn_at(rt, p, 2));
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_runtime_destroy(rt));

    rt = make("cpu,vgpu:2", 2, 0);
    p[0] = parsed("4*gpu");
    expect(spawn_at(rt, p, 1), WEFT_ENODEV, "4 GPUs asked for, this runtime has 2");
    p[0] = parsed("gpu:5");
    expect(spawn_at(rt, p, 1), WEFT_ENODEV, "GPU 5 asked for");
    p[0] = parsed("gpu");
    p[0].memory = 4u << 20; /* each virtual GPU has 1 MiB */
    expect(spawn_at(rt, p, 1), WEFT_ENODEV, "bytes of memory");
    /* malformed stays WEFT_EINVAL, and wins over what is merely lacking */
    p[0] = parsed("gpu");
    p[0].share = 1.5;
    expect(spawn_at(rt, p, 1), WEFT_EINVAL, "share 1.5");
    p[1] = parsed("4*gpu");
    expect(spawn_at(rt, p, 2), WEFT_EINVAL, "alternative 1");
    unsigned far = 7;
    weft_comm_config cc;
    weft_comm_config_init(&cc);
    cc.gpus = &far;
    cc.ngpus = 1;
    expect(weft_comm_create(rt, &cc, &c), WEFT_ENODEV, "GPU 7");
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- alternatives with bodies of their own, no top-level body ----------- */

static atomic_int ran_cpu, ran_gpu;
static int body_cpu(weft_ctx *ctx, void *arg) {
    (void)arg;
    CHECK(weft_ctx_gpu_count(ctx) == 0);
    atomic_fetch_add(&ran_cpu, 1);
    return 0;
}
static int body_gpu(weft_ctx *ctx, void *arg) {
    (void)arg;
    CHECK(weft_ctx_gpu_count(ctx) == 1);
    atomic_fetch_add(&ran_gpu, 1);
    return weft_ctx_queue(ctx, 0, tick, NULL, 0);
}

static void test_variant_bodies(void) {
    weft_placement p[2] = {parsed("gpu"), parsed("cpu")};
    p[0].body = body_gpu;
    p[1].body = body_cpu;
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.placements = p;
    d.nplacements = 2;
    /* every alternative has a body: no top-level one needed */
    weft_runtime *rt = make("cpu,vgpu:1", 2, 0);
    weft_task *t;
    CHECK_OK(weft_spawn(rt, &d, &t));
    CHECK_OK(weft_task_wait(t));
    weft_task_release(t);
    CHECK(atomic_load(&ran_gpu) + atomic_load(&ran_cpu) == 1);
    weft_space *sp;
    CHECK_OK(weft_space_create(rt, "V", &sp));
    int64_t key = 3;
    CHECK_OK(weft_space_spawn(sp, &key, 1, &d, NULL));
    CHECK_OK(weft_wait_all(rt));
    CHECK(atomic_load(&ran_gpu) + atomic_load(&ran_cpu) == 2);
    CHECK_OK(weft_space_destroy(sp));
    /* one alternative without a body, and no top-level one: refused, saying what to set */
    p[1].body = NULL;
    expect(weft_spawn(rt, &d, NULL), WEFT_EINVAL, "placements[1].body");
    expect(weft_spawn(rt, &d, NULL), WEFT_EINVAL, "desc.body");
    /* ... accepted with a top-level body, the CPU alternative's */
    d.body = body_cpu;
    CHECK_OK(weft_spawn(rt, &d, NULL));
    CHECK_OK(weft_wait_all(rt));
    CHECK(atomic_load(&ran_gpu) + atomic_load(&ran_cpu) == 3);
    /* no body and no placements */
    weft_task_desc_init(&d);
    expect(weft_spawn(rt, &d, NULL), WEFT_EINVAL, "set desc.body");
    CHECK_OK(weft_runtime_destroy(rt));
    /* on a runtime without GPUs the GPU alternative is skipped; the CPU one's body runs */
    rt = make("cpu", 2, 0);
    weft_task_desc_init(&d);
    p[1].body = body_cpu;
    d.placements = p;
    d.nplacements = 2;
    int before = atomic_load(&ran_cpu);
    CHECK_OK(weft_spawn(rt, &d, NULL));
    CHECK_OK(weft_wait_all(rt));
    CHECK(atomic_load(&ran_cpu) == before + 1);
    CHECK_OK(weft_runtime_destroy(rt));
}

int main(void) {
    test_watchdog(test_pick(60, 200));
    test_step("on_finish spawns on a virtual GPU, max_inflight 2");
    test_chain_on_gpu();
    test_step("on_finish spawns on the CPU, max_inflight 1, WEFT_SPAWN_NOWAIT");
    test_chain_on_cpu();
    test_step("on_finish spawns while destroy drains");
    test_chain_while_destroying();
    test_step("finish_arg");
    test_finish_arg();
    test_step("waits refused in on_finish");
    test_waits_refused();
    test_step("WEFT_ENODEV");
    test_enodev();
    test_step("alternatives' own bodies");
    test_variant_bodies();
    printf("test_idioms: ok\n");
    return 0;
}
