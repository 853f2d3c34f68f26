/* Coherence of data across the CPU and virtual GPUs (docs/design.md,
 * "Coherence: the replica protocol").  Each case is a small program whose
 * timing is forced by slow or failing kernels, run a number of times, that
 * loses data or makes it wrong unless the protocol's rules hold: a copy
 * ordered after its source's last write, a task that will not run moves no
 * data, exact undo before successors are released, exclusion before
 * movement, release by what a task touches. */
#include "check.h"
#include "testing.h"

#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

enum { N = 8 }; /* int64 elements of each datum */

static weft_runtime *make(const char *devices) { return test_make_devices(devices, 2, 0, false); }

/* What a task does to its first access: set it to a value or add one to
 * it, after sleeping; or fail (in its body, or in its kernel). */
enum { OP_NONE, OP_SET, OP_ADD, OP_READ };
typedef struct job {
    int op;
    int64_t v;
    unsigned sleep_us;
    bool fail_body, fail_kernel;
    int64_t *p;         /* where it works (the replica, or the host's copy) */
    int64_t seen[N];    /* what a reader saw */
    bool host;          /* its access is WEFT_HOST (set by spawn) */
    _Atomic int ran;
} job;

static void apply(job *j) {
    if (j->sleep_us) sleep_ns((uint64_t)j->sleep_us * 1000);
    for (int i = 0; j->p && i < N; i++) {
        if (j->op == OP_SET) j->p[i] = j->v;
        else if (j->op == OP_ADD) j->p[i] += j->v;
        else if (j->op == OP_READ) j->seen[i] = j->p[i];
    }
    atomic_fetch_add(&j->ran, 1);
}
static int kernel(void *arg) {
    job *j = arg;
    apply(j);
    return j->fail_kernel ? 7 : 0;
}

/* On a GPU (without WEFT_HOST): queued on its stream; else in the body. */
static int body(weft_ctx *ctx, void *arg) {
    job *j = arg;
    if (j->fail_body) return 3;
    j->p = weft_ctx_data(ctx, 0);
    if (weft_ctx_gpu_count(ctx) == 0 || j->host) {
        apply(j);
        return j->fail_kernel ? 7 : 0;
    }
    unsigned mode = j->op == OP_READ ? WEFT_R : j->op == OP_SET ? WEFT_W : WEFT_RW;
    weft_range r = {j->p, sizeof(int64_t) * N, mode};
    return weft_ctx_queue_rw(ctx, 0, kernel, j, 0, &r, j->p ? 1 : 0);
}

/* Spawn job j on `where` with access (d, mode) (d NULL: none) after deps. */
static weft_task *spawn(weft_runtime *rt, const char *where, job *j, weft_data *d, unsigned mode,
                        weft_task *const *deps, size_t ndeps, const char *name) {
    weft_placement p;
    if (where) CHECK_OK(weft_placement_parse(where, &p));
    weft_access a = {d, mode};
    weft_task_desc desc;
    weft_task_desc_init(&desc);
    desc.body = body;
    desc.arg = j;
    desc.accesses = d ? &a : NULL;
    desc.naccesses = d ? 1 : 0;
    desc.placements = where ? &p : NULL; /* NULL: a plain CPU task */
    desc.nplacements = where ? 1 : 0;
    desc.deps = deps;
    desc.ndeps = ndeps;
    desc.name = name;
    weft_task *t = NULL;
    j->host = (mode & WEFT_HOST) != 0;
    CHECKF(weft_spawn(rt, &desc, &t) == 0, "%s: %s", name, weft_last_error());
    return t;
}

static weft_task_status status_of(weft_task *t) {
    weft_task_status s;
    CHECK_OK(weft_task_status_get(t, &s));
    return s;
}

static void all_equal(const int64_t *x, int64_t want, const char *what, int round) {
    for (int i = 0; i < N; i++)
        CHECKF(x[i] == want, "%s (round %d): element %d is %lld, want %lld", what, round, i, (long long)x[i],
               (long long)want);
}

static void fill(int64_t *x, int64_t v) {
    for (int i = 0; i < N; i++) x[i] = v;
}

/* A GPU-only task reading on the host (WEFT_HOST) after a GPU writer. */
static void host_read(int rounds) {
    weft_runtime *rt = make("cpu,vgpu:2");
    for (int round = 0; round < rounds; round++) {
        int64_t x[N];
        fill(x, 0);
        weft_data *d;
        CHECK_OK(weft_data_register(rt, x, sizeof x, &d));
        job w = {.op = OP_SET, .v = 7, .sleep_us = 20000}, r = {.op = OP_READ};
        weft_task *tw = spawn(rt, "gpu", &w, d, WEFT_W, NULL, 0, "W");
        weft_task *tr = spawn(rt, "gpu", &r, d, WEFT_R | WEFT_HOST, NULL, 0, "R");
        CHECK_OK(weft_wait_all(rt));
        CHECK(status_of(tr) == WEFT_TASK_COMPLETED);
        all_equal(r.seen, 7, "what R read on the host", round);
        CHECK_OK(weft_data_unregister(d));
        all_equal(x, 7, "X after unregister", round);
        weft_task_release(tw);
        weft_task_release(tr);
    }
    CHECK_OK(weft_runtime_destroy(rt));
}

/* A task cancelled after it started (its predecessor's kernel failed)
 * keeps no write, even when a reader on another GPU copied it meanwhile. */
static void undo_exact(int rounds) {
    weft_runtime *rt = make("cpu,vgpu:2");
    for (int round = 0; round < rounds; round++) {
        int64_t x[N];
        fill(x, -1);
        weft_data *d;
        CHECK_OK(weft_data_register(rt, x, sizeof x, &d));
        job f = {.op = OP_NONE, .sleep_us = 5000, .fail_kernel = true};
        job a = {.op = OP_SET, .v = 111}, b = {.op = OP_READ};
        weft_task *tf = spawn(rt, "gpu", &f, NULL, 0, NULL, 0, "F");
        weft_task *ta = spawn(rt, "gpu:0", &a, d, WEFT_RW, &tf, 1, "A");
        weft_task *tb = spawn(rt, "gpu:1", &b, d, WEFT_R, NULL, 0, "B");
        CHECK(weft_wait_all(rt) != 0);
        CHECK(status_of(tf) == WEFT_TASK_FAILED);
        CHECK(status_of(ta) == WEFT_TASK_CANCELLED);
        CHECK(status_of(tb) == WEFT_TASK_CANCELLED);
        CHECK_OK(weft_data_unregister(d));
        all_equal(x, -1, "X after unregister", round);
        weft_task_release(tf);
        weft_task_release(ta);
        weft_task_release(tb);
    }
    CHECK_OK(weft_runtime_destroy(rt));
}

/* A reader that will be cancelled (another dependency failed) moves no
 * data: the completed writer's value stays. */
static void doomed_reader(int rounds) {
    weft_runtime *rt = make("cpu,vgpu:2");
    for (int round = 0; round < rounds; round++) {
        int64_t x[N];
        fill(x, 5);
        weft_data *d;
        CHECK_OK(weft_data_register(rt, x, sizeof x, &d));
        job w = {.op = OP_SET, .v = 9, .sleep_us = 20000}, f = {.op = OP_NONE, .fail_body = true},
            c = {.op = OP_READ};
        weft_task *tw = spawn(rt, "gpu", &w, d, WEFT_W, NULL, 0, "W");
        weft_task *tf = spawn(rt, "cpu", &f, NULL, 0, NULL, 0, "F");
        weft_task *tc = spawn(rt, "gpu", &c, d, WEFT_R, &tf, 1, "C");
        CHECK(weft_wait_all(rt) != 0);
        CHECK(status_of(tw) == WEFT_TASK_COMPLETED);
        CHECK(status_of(tc) == WEFT_TASK_CANCELLED);
        CHECK_OK(weft_data_unregister(d));
        all_equal(x, 9, "X after unregister", round);
        weft_task_release(tw);
        weft_task_release(tf);
        weft_task_release(tc);
    }
    CHECK_OK(weft_runtime_destroy(rt));
}

/* RW|COMMUTE shared by a GPU task and a CPU task: both updates kept. */
static void commute_gpu_cpu(int rounds) {
    weft_runtime *rt = make("cpu,vgpu:2");
    for (int round = 0; round < rounds; round++) {
        int64_t x[N];
        fill(x, 0);
        weft_data *d;
        CHECK_OK(weft_data_register(rt, x, sizeof x, &d));
        job g = {.op = OP_ADD, .v = 1, .sleep_us = 10000}, c = {.op = OP_ADD, .v = 10};
        weft_task *tg = spawn(rt, "gpu", &g, d, WEFT_RW | WEFT_COMMUTE, NULL, 0, "G");
        weft_task *tc = spawn(rt, "cpu", &c, d, WEFT_RW | WEFT_COMMUTE, NULL, 0, "C");
        CHECK_OK(weft_wait_all(rt));
        CHECK_OK(weft_data_unregister(d));
        all_equal(x, 11, "X after unregister", round);
        weft_task_release(tg);
        weft_task_release(tc);
    }
    CHECK_OK(weft_runtime_destroy(rt));
}

/* A failed GPU writer's cancelled CPU readers leave no stale copy. */
static void failed_writer_readers(int rounds) {
    weft_runtime *rt = make("cpu,vgpu:2");
    for (int round = 0; round < rounds; round++) {
        int64_t x[N];
        fill(x, 0);
        weft_data *d;
        CHECK_OK(weft_data_register(rt, x, sizeof x, &d));
        job a = {.op = OP_ADD, .v = 1}, c = {.op = OP_ADD, .v = 10}, b = {.op = OP_SET, .v = 99, .fail_body = true};
        job r[12];
        spawn(rt, "gpu:0", &a, d, WEFT_RW, NULL, 0, "A");
        spawn(rt, "cpu", &c, d, WEFT_RW, NULL, 0, "C");
        spawn(rt, "gpu:0", &b, d, WEFT_W, NULL, 0, "B");
        weft_task *tr[12];
        for (int i = 0; i < 12; i++) {
            r[i] = (job){.op = OP_READ};
            tr[i] = spawn(rt, NULL, &r[i], d, WEFT_R, NULL, 0, "reader");
        }
        CHECK(weft_wait_all(rt) != 0);
        for (int i = 0; i < 12; i++) {
            CHECK(status_of(tr[i]) == WEFT_TASK_CANCELLED);
            weft_task_release(tr[i]);
        }
        CHECK_OK(weft_data_unregister(d));
        all_equal(x, 11, "X after unregister", round);
    }
    CHECK_OK(weft_runtime_destroy(rt));
}

/* Tiles: X of 2 x N int64 split into 1 x 2 tiles (each N elements wide,
 * one row of the parent's two... here one row of 2N elements, 2 columns). */
static void partition(weft_data *d, weft_data *tiles[2]) {
    weft_tiling t = {.elem = sizeof(int64_t), .rows = 1, .cols = 2 * N, .grid_rows = 1, .grid_cols = 2};
    CHECK_OK(weft_data_partition(d, &t, tiles));
}

/* After a tile's writer failed, a parent RW task is cancelled as a
 * parent R task is (it reads the whole array). */
static void tile_failure_parent(int rounds) {
    weft_runtime *rt = make("cpu,vgpu:2");
    for (int round = 0; round < rounds; round++) {
        int64_t x[2 * N];
        for (int i = 0; i < 2 * N; i++) x[i] = 1;
        weft_data *d, *tiles[2];
        CHECK_OK(weft_data_register(rt, x, sizeof x, &d));
        partition(d, tiles);
        job f = {.op = OP_SET, .v = 50, .fail_body = true}, pr = {.op = OP_READ}, prw = {.op = OP_ADD, .v = 1000};
        weft_task *tf = spawn(rt, "cpu", &f, tiles[1], WEFT_W, NULL, 0, "tile writer");
        weft_task *tr = spawn(rt, "cpu", &pr, d, WEFT_R, NULL, 0, "parent R");
        weft_task *trw = spawn(rt, "cpu", &prw, d, WEFT_RW, NULL, 0, "parent RW");
        CHECK(weft_wait_all(rt) != 0);
        CHECK(status_of(tf) == WEFT_TASK_FAILED);
        CHECK(status_of(tr) == WEFT_TASK_CANCELLED);
        CHECKF(status_of(trw) == WEFT_TASK_CANCELLED, "parent RW ran after its tile's writer failed");
        CHECK_OK(weft_data_unregister(d)); /* (its tiles with it) */
        for (int i = 0; i < 2 * N; i++) CHECKF(x[i] == 1, "round %d: x[%d] = %lld", round, i, (long long)x[i]);
        weft_task_release(tf);
        weft_task_release(tr);
        weft_task_release(trw);
    }
    CHECK_OK(weft_runtime_destroy(rt));
}

/* A task naming a tile to write and its partitioned parent is refused
 * at spawn (on a GPU its write would be lost), naming both accesses. */
static void tile_and_parent(void) {
    weft_runtime *rt = make("cpu,vgpu:2");
    int64_t x[2 * N];
    memset(x, 0, sizeof x);
    weft_data *d, *tiles[2];
    CHECK_OK(weft_data_register(rt, x, sizeof x, &d));
    partition(d, tiles);
    static const unsigned tile_modes[] = {WEFT_RW, WEFT_W, WEFT_R};
    static const unsigned parent_modes[] = {WEFT_R, WEFT_RW};
    static const char *const where[] = {"gpu", "cpu"};
    for (int w = 0; w < 2; w++)
        for (int i = 0; i < 3; i++)
            for (int k = 0; k < 2; k++) {
                if (tile_modes[i] == WEFT_R && parent_modes[k] == WEFT_R) continue; /* reads only: fine */
                weft_placement p;
                CHECK_OK(weft_placement_parse(where[w], &p));
                weft_access a[2] = {{tiles[0], tile_modes[i]}, {d, parent_modes[k]}};
                job j = {.op = OP_NONE};
                weft_task_desc desc;
                weft_task_desc_init(&desc);
                desc.body = body;
                desc.arg = &j;
                desc.accesses = a;
                desc.naccesses = 2;
                desc.placements = &p;
                desc.nplacements = 1;
                CHECK_ERR(weft_spawn(rt, &desc, NULL), WEFT_EINVAL);
                CHECKF(strstr(weft_last_error(), "partitioned") != NULL, "message: %s", weft_last_error());
            }
    /* still usable, and reading both is allowed */
    job j = {.op = OP_NONE};
    weft_access a[2] = {{tiles[0], WEFT_R}, {d, WEFT_R}};
    weft_task_desc desc;
    weft_task_desc_init(&desc);
    desc.body = body;
    desc.arg = &j;
    desc.accesses = a;
    desc.naccesses = 2;
    CHECK_OK(weft_spawn(rt, &desc, NULL));
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_unregister(d));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* A cancelled member of a commute group loses no completed member's
 * update, whether doomed before it started or cancelled while it waits
 * for the group's exclusion. */
static void commute_cancelled(int rounds) {
    weft_runtime *rt = make("cpu,vgpu:2");
    for (int round = 0; round < rounds; round++) {
        int64_t x[N];
        fill(x, 0);
        weft_data *d;
        CHECK_OK(weft_data_register(rt, x, sizeof x, &d));
        job g = {.op = OP_ADD, .v = 1, .sleep_us = 10000}, f = {.op = OP_NONE, .fail_body = true},
            m = {.op = OP_ADD, .v = 100}, e = {.op = OP_ADD, .v = 1000};
        weft_task *tg = spawn(rt, "gpu", &g, d, WEFT_RW | WEFT_COMMUTE, NULL, 0, "G");
        weft_task *tf = spawn(rt, "cpu", &f, NULL, 0, NULL, 0, "F");
        weft_task *tm = spawn(rt, "cpu", &m, d, WEFT_RW | WEFT_COMMUTE, &tf, 1, "D (doomed)");
        weft_task *te = spawn(rt, "cpu", &e, d, WEFT_RW | WEFT_COMMUTE, NULL, 0, "E (cancelled)");
        int rc = weft_task_cancel(te);
        CHECK(rc == 0 || rc == WEFT_EINVAL || rc == WEFT_EBUSY);
        int wrc = weft_wait_all(rt);
        (void)wrc; /* (a failure is expected in some rounds) */
        CHECK(status_of(tg) == WEFT_TASK_COMPLETED);
        CHECK(status_of(tm) == WEFT_TASK_CANCELLED);
        weft_task_status se = status_of(te);
        CHECK_OK(weft_data_unregister(d));
        all_equal(x, se == WEFT_TASK_COMPLETED ? 1001 : 1, "X after unregister", round);
        weft_task_release(tg);
        weft_task_release(tf);
        weft_task_release(tm);
        weft_task_release(te);
    }
    CHECK_OK(weft_runtime_destroy(rt));
}

/* A failed writer of a tiled buffer does not drop a later tile writer's
 * value. */
static void tiles_failed_writer(int rounds) {
    weft_runtime *rt = make("cpu,vgpu:2");
    for (int round = 0; round < rounds; round++) {
        int64_t x[2 * N];
        for (int i = 0; i < 2 * N; i++) x[i] = 0;
        weft_data *d, *tiles[2];
        CHECK_OK(weft_data_register(rt, x, sizeof x, &d));
        partition(d, tiles);
        job p = {.op = OP_SET, .v = 1}, f = {.op = OP_ADD, .v = 3, .fail_body = true, .sleep_us = 2000},
            w = {.op = OP_SET, .v = 5}, s = {.op = OP_READ};
        spawn(rt, "gpu:0", &p, d, WEFT_W, NULL, 0, "P");
        weft_task *tf = spawn(rt, "cpu", &f, d, WEFT_RW, NULL, 0, "F");
        weft_task *tw = spawn(rt, "gpu:1", &w, tiles[1], WEFT_W, NULL, 0, "W");
        spawn(rt, "cpu", &s, NULL, 0, &tf, 1, "S");
        CHECK(weft_wait_all(rt) != 0);
        CHECK(status_of(tw) == WEFT_TASK_COMPLETED);
        CHECK_OK(weft_data_unregister(d)); /* (its tiles with it) */
        for (int i = 0; i < 2 * N; i++)
            CHECKF(x[i] == (i < N ? 1 : 5), "round %d: x[%d] = %lld, want %d", round, i, (long long)x[i],
                   i < N ? 1 : 5);
        weft_task_release(tf);
        weft_task_release(tw);
    }
    CHECK_OK(weft_runtime_destroy(rt));
}

/* A failed reader leaves the host copy other readers use valid (in
 * checking mode they would report it invalid; a race, hence the many
 * rounds). */
static void reader_undo(int rounds) {
    setenv("WEFT_VGPU_CHECK", "1", 1);
    weft_runtime *rt = make("cpu,vgpu:2");
    unsetenv("WEFT_VGPU_CHECK");
    for (int round = 0; round < rounds; round++) {
        int64_t x[N];
        fill(x, 0);
        weft_data *d;
        CHECK_OK(weft_data_register(rt, x, sizeof x, &d));
        job w = {.op = OP_SET, .v = 4};
        spawn(rt, "gpu", &w, d, WEFT_W, NULL, 0, "W");
        job r[16];
        weft_task *tr[16];
        for (int i = 0; i < 16; i++) {
            r[i] = (job){.op = OP_READ, .fail_body = i % 2 == 0};
            tr[i] = spawn(rt, "cpu", &r[i], d, WEFT_R, NULL, 0, "reader");
        }
        job after = {.op = OP_READ};
        weft_task *ta = spawn(rt, "gpu:1", &after, d, WEFT_R, NULL, 0, "reader on gpu 1");
        int wrc = weft_wait_all(rt);
        (void)wrc; /* (a failure is expected in some rounds) */
        for (int i = 0; i < 16; i++) {
            CHECKF(status_of(tr[i]) == (r[i].fail_body ? WEFT_TASK_FAILED : WEFT_TASK_COMPLETED),
                   "round %d: reader %d ended %d", round, i, (int)status_of(tr[i]));
            if (!r[i].fail_body) all_equal(r[i].seen, 4, "what a reader read", round);
            weft_task_release(tr[i]);
        }
        CHECK(status_of(ta) == WEFT_TASK_COMPLETED);
        all_equal(after.seen, 4, "what the GPU reader read", round);
        weft_task_release(ta);
        CHECK_OK(weft_data_unregister(d));
        all_equal(x, 4, "X after unregister", round);
    }
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- the checking mode's holes ------------------------------------------ */

static weft_runtime *make_checked(void) { return test_make_devices("cpu,vgpu:2", 2, 0, true); }

/* A kernel that writes, or declares it writes, what its task only reads;
 * a kernel that reads (declared, or not) what its task only writes. */
typedef struct decl {
    unsigned task_mode, range_mode;
    bool declare;      /* name the range (weft_ctx_queue_rw) */
    int64_t add;       /* what the kernel adds to each element (0: none) */
    int64_t *p;
    int64_t first;     /* the first element as the kernel found it */
} decl;
static int decl_kernel(void *arg) {
    decl *k = arg;
    k->first = k->p[0];
    for (int i = 0; i < N && k->add; i++) k->p[i] += k->add;
    return 0;
}
static int decl_body(weft_ctx *ctx, void *arg) {
    decl *k = arg;
    k->p = weft_ctx_data(ctx, 0);
    weft_range r = {k->p, sizeof(int64_t) * N, k->range_mode};
    return k->declare ? weft_ctx_queue_rw(ctx, 0, decl_kernel, k, 0, &r, 1)
                      : weft_ctx_queue(ctx, 0, decl_kernel, k, 0);
}
static weft_task_status run_decl(weft_runtime *rt, weft_data *d, decl *k) {
    weft_placement p;
    CHECK_OK(weft_placement_parse("gpu", &p));
    weft_access a = {d, k->task_mode};
    weft_task_desc desc;
    weft_task_desc_init(&desc);
    desc.body = decl_body;
    desc.arg = k;
    desc.accesses = &a;
    desc.naccesses = 1;
    desc.placements = &p;
    desc.nplacements = 1;
    desc.name = "decl";
    weft_task *t;
    CHECK_OK(weft_spawn(rt, &desc, &t));
    int rc = weft_task_wait(t);
    weft_task_status s = status_of(t);
    weft_task_release(t);
    rc = weft_wait_all(rt); /* (its failure counted: wait_all reports it once) */
    (void)rc;
    return s;
}

/* Writes the task's data where weft_ctx_data points, from the body. */
static int host_write_body(weft_ctx *ctx, void *arg) {
    job *j = arg;
    j->p = weft_ctx_data(ctx, 0);
    apply(j);
    return 0;
}

/* Two readers share a GPU's replica; the first one's copy into it fails
 * (and it ends first, while the second still pins the replica): the
 * replica's tag still says valid, but unregister must copy the newest
 * value back from the GPU that holds it, not from the failed one.  Found
 * by the spin model (model/coherence.pml, variant 13). */
enum { FC_N = 1000 };
static int fc_set7(void *arg) {
    double *p = arg;
    for (int i = 0; i < FC_N; i++) p[i] = 7;
    return 0;
}
static int fc_nop(void *arg) { (void)arg; return 0; }
static int fc_set_body(weft_ctx *ctx, void *arg) {
    (void)arg;
    return weft_ctx_queue(ctx, 0, fc_set7, weft_ctx_data(ctx, 0), 0);
}
static int fc_read_body(weft_ctx *ctx, void *arg) {
    return weft_ctx_queue(ctx, 0, fc_nop, NULL, *(const uint64_t *)arg);
}
static weft_task *fc_spawn(weft_runtime *rt, const char *where, weft_body_fn body, void *arg, weft_data *h,
                           unsigned mode) {
    weft_access acc = {h, mode};
    return test_spawn_at(rt, where, 0.3, body, arg, &acc, 1, true);
}
static void failed_copy_shared(int rounds) {
    for (int round = 0; round < rounds; round++) {
        weft_runtime *rt = make("cpu,vgpu:2");
        static double a[FC_N];
        for (int i = 0; i < FC_N; i++) a[i] = 5;
        weft_data *h;
        CHECK_OK(weft_data_register(rt, a, sizeof a, &h));
        weft_task *w = fc_spawn(rt, "gpu:1", fc_set_body, NULL, h, WEFT_W); /* 7, on gpu:1 only */
        CHECK_OK(weft_wait_all(rt));
        weft_task_release(w);
        static uint64_t r1_ns = 80000000ull, r2_ns = 300000000ull;
        weft__test_vgpu_fail_copies(1); /* R1's copy to gpu:0 fails */
        weft_task *r1 = fc_spawn(rt, "gpu:0", fc_read_body, &r1_ns, h, WEFT_R);
        weft_task_status st = WEFT_TASK_WAITING;
        while (st != WEFT_TASK_ENQUEUED && st < WEFT_TASK_COMPLETED) {
            CHECK_OK(weft_task_status_get(r1, &st));
            sched_yield();
        }
        weft_task *r2 = fc_spawn(rt, "gpu:0", fc_read_body, &r2_ns, h, WEFT_R); /* shares it, ends last */
        CHECK_ERR(weft_task_wait(r1), WEFT_ETASKFAILED); /* its copy in failed */
        int e2 = weft_task_wait(r2); /* (it waits for that copy too: it may fail with it) */
        CHECKF(e2 == 0 || e2 == WEFT_ETASKFAILED, "R2: %d", e2);
        weft__test_vgpu_fail_copies(0);
        weft_task_release(r1);
        weft_task_release(r2);
        CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED);
        CHECK_OK(weft_data_unregister(h));
        for (int i = 0; i < FC_N; i++) CHECKF(a[i] == 7, "round %d: a[%d] = %g after unregister, not 7", round, i, a[i]);
        CHECK_OK(weft_runtime_destroy(rt));
    }
}

/* The checking mode: a CPU task updating a tile (RW) writes its interior
 * only; its halo cells in the user's memory are its neighbours' interiors
 * (a write there changed the neighbour's value, and nothing said so).
 * Reported, and the task fails; tasks writing only their interiors pass. */
typedef struct halo_job {
    int64_t v;
    bool over;      /* also write the cell just past the interior (the halo) */
    weft_data *tile;
} halo_job;
static int halo_body(weft_ctx *ctx, void *arg) {
    halo_job *j = arg;
    int64_t *p = weft_ctx_data(ctx, 0);
    weft_tile_info ti;
    if (weft_data_tile_info(j->tile, &ti) != 0) return 9;
    size_t in0 = ti.in_col0 - ti.col0;
    for (size_t c = 0; c < ti.in_cols; c++) p[in0 + c] = j->v;
    if (j->over && in0 > 0) p[in0 - 1] = j->v; /* (the left neighbour's last cell) */
    sleep_ns(2 * 1000 * 1000);
    return 0;
}
static weft_task *spawn_cpu(weft_runtime *rt, halo_job *j, const char *name) {
    weft_access a = {j->tile, WEFT_RW};
    weft_task_desc desc;
    weft_task_desc_init(&desc);
    desc.body = halo_body;
    desc.arg = j;
    desc.accesses = &a;
    desc.naccesses = 1;
    desc.name = name;
    weft_task *t;
    CHECK_OK(weft_spawn(rt, &desc, &t));
    return t;
}
static void halo_write(int rounds) {
    for (int round = 0; round < rounds; round++) {
        weft_runtime *rt = make_checked();
        int64_t x[20];
        fill(x, 1);
        weft_data *d, *t[2];
        CHECK_OK(weft_data_register(rt, x, sizeof x, &d));
        weft_tiling tl = {.elem = sizeof(int64_t), .rows = 1, .cols = 20, .grid_rows = 1, .grid_cols = 2, .halo = 1};
        CHECK_OK(weft_data_partition(d, &tl, t));
        halo_job a = {.v = 100, .tile = t[0]}, b = {.v = 200, .tile = t[1]};
        halo_job bad = {.v = 999, .over = true, .tile = t[1]};
        weft_task *ta = spawn_cpu(rt, &a, "left");
        weft_task *tb = spawn_cpu(rt, &b, "right");
        CHECK_OK(weft_task_wait(ta));
        CHECK_OK(weft_task_wait(tb));
        weft_task *tc = spawn_cpu(rt, &bad, "over the halo");
        CHECK_ERR(weft_task_wait(tc), WEFT_ETASKFAILED);
        /* The wait's message carries the report. */
        CHECKF(strstr(weft_last_error(), "checking mode found an error") && strstr(weft_last_error(), "wrote the halo"),
               "%s", weft_last_error());
        char why[400];
        weft__test_vcheck_last(why, sizeof why);
        CHECKF(strstr(why, "over the halo") && strstr(why, "wrote the halo"), "%s", why);
        weft_task_release(ta);
        weft_task_release(tb);
        weft_task_release(tc);
        (void)!weft_wait_all(rt);
        CHECK_OK(weft_runtime_destroy(rt));
    }
}

/* Writes the application's array itself (arg), wherever the task runs. */
static int user_write_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    ((int64_t *)arg)[0] = 5;
    return 0;
}

/* An on_finish callback: its status and what weft_last_error() says in it. */
static char finish_msg[1024];
static int finish_status;
static void keep_finish_message(void *arg, int status) {
    (void)arg;
    finish_status = status;
    snprintf(finish_msg, sizeof finish_msg, "%s", weft_last_error());
}

static void check_holes(void) {
    weft_runtime *rt = make_checked();
    char why[400];
    int64_t x[N];
    fill(x, 3);
    weft_data *d;
    CHECK_OK(weft_data_register(rt, x, sizeof x, &d));
    /* a range declared W in data the task reads only: refused when queued */
    decl w_on_r = {WEFT_R, WEFT_RW, true, 1, NULL, 0};
    CHECK(run_decl(rt, d, &w_on_r) == WEFT_TASK_FAILED);
    weft__test_vcheck_last(why, sizeof why);
    CHECKF(strstr(why, "WEFT_R only") && strstr(why, "written"), "%s", why);
    /* declared R, but the kernel writes it: found when it has run */
    decl sneaky = {WEFT_R, WEFT_R, true, 552, NULL, 0};
    CHECK(run_decl(rt, d, &sneaky) == WEFT_TASK_FAILED);
    weft__test_vcheck_last(why, sizeof why);
    CHECKF(strstr(why, "changed") && strstr(why, "WEFT_R only"), "%s", why);
    /* a range read in data the task only writes: refused when queued */
    decl r_on_w = {WEFT_W, WEFT_RW, true, 1, NULL, 0};
    CHECK(run_decl(rt, d, &r_on_w) == WEFT_TASK_FAILED);
    weft__test_vcheck_last(why, sizeof why);
    CHECKF(strstr(why, "WEFT_W only") && strstr(why, "read"), "%s", why);
    /* undeclared, it reads the poison fill (0xDB bytes), not a plausible value */
    decl blind = {WEFT_W, WEFT_W, false, 0, NULL, 0};
    CHECK(run_decl(rt, d, &blind) == WEFT_TASK_COMPLETED);
    CHECKF(blind.first == (int64_t)0xDBDBDBDBDBDBDBDBull, "a write-only replica held %llx",
           (unsigned long long)blind.first);
    /* a GPU task's body that writes its GPU's copy on the host */
    job hw = {.op = OP_SET, .v = 9, .host = true};
    weft_placement p;
    CHECK_OK(weft_placement_parse("gpu", &p));
    weft_access a = {d, WEFT_RW};
    weft_task_desc desc;
    weft_task_desc_init(&desc);
    desc.body = host_write_body;
    desc.arg = &hw;
    desc.accesses = &a;
    desc.naccesses = 1;
    desc.placements = &p;
    desc.nplacements = 1;
    desc.name = "host writer";
    weft_task *t;
    CHECK_OK(weft_spawn(rt, &desc, &t));
    CHECK_ERR(weft_task_wait(t), WEFT_ETASKFAILED);
    /* The wait says the checking mode failed it, not a body's return
     * value, and what it found. */
    CHECKF(strstr(weft_last_error(), "checking mode found an error") && !strstr(weft_last_error(), "returned") &&
               strstr(weft_last_error(), "'host writer'") && strstr(weft_last_error(), "call weft_ctx_sync first"),
           "%s", weft_last_error());
    weft_task_release(t);
    weft__test_vcheck_last(why, sizeof why);
    CHECKF(strstr(why, "host writer") && strstr(why, "on the host"), "%s", why);
    /* a GPU task's body that writes the application's own array (its data's
     * registered memory), not the task's copy: that write would be lost */
    desc.body = user_write_body;
    desc.arg = x;
    desc.name = "user-memory writer";
    weft_access over = {d, WEFT_W}; /* (an overwrite: the failed writer before does not cancel it) */
    desc.accesses = &over;
    desc.on_finish = keep_finish_message;
    CHECK_OK(weft_spawn(rt, &desc, &t));
    CHECK_ERR(weft_task_wait(t), WEFT_ETASKFAILED);
    CHECKF(strstr(weft_last_error(), "'user-memory writer'") && strstr(weft_last_error(), "write the copy instead"),
           "%s", weft_last_error());
    /* ... and so does its on_finish callback's thread, meanwhile */
    CHECK(finish_status == WEFT_ETASKFAILED);
    CHECKF(strstr(finish_msg, "checking mode found an error") && strstr(finish_msg, "write the copy instead"), "%s",
           finish_msg);
    desc.on_finish = NULL;
    weft_task_release(t);
    weft__test_vcheck_last(why, sizeof why);
    CHECKF(strstr(why, "user-memory writer") && strstr(why, "wrote the memory registered"), "%s", why);
    CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED);
    /* the application's copy of data whose newest value is on a GPU holds
     * the poison fill until acquired (or unregistered) */
    job w = {.op = OP_SET, .v = 42};
    spawn(rt, "gpu", &w, d, WEFT_W, NULL, 0, "W");
    CHECK_OK(weft_wait_all(rt));
    CHECKF(x[0] == (int64_t)0xDBDBDBDBDBDBDBDBull, "stale host copy reads %lld", (long long)x[0]);
    CHECK_OK(weft_data_acquire(d, WEFT_R, 0));
    all_equal(x, 42, "X acquired", 0);
    CHECK_OK(weft_data_release(d));
    CHECK_OK(weft_data_unregister(d));
    all_equal(x, 42, "X after unregister", 0);
    CHECK_OK(weft_runtime_destroy(rt));
}


/* A GPU body that computes on its data itself, after weft_ctx_sync (Parla's
 * and CuPy's idiom, with the host standing in for the GPU on a virtual
 * one): it sees what the slow kernel before it wrote, and what it writes is
 * the task's output; in the checking mode that is not reported.  Without
 * weft_ctx_sync the checking mode reports it (check_holes). */
static int sync_body(weft_ctx *ctx, void *arg) {
    job *j = arg;
    int rc = weft_ctx_sync(ctx);
    if (rc != 0) return rc;
    j->p = weft_ctx_data(ctx, 0);
    apply(j);
    return 0;
}
static void body_computes(bool check, int rounds) {
    if (check) setenv("WEFT_VGPU_CHECK", "1", 1);
    weft_runtime *rt = make("cpu,vgpu:2");
    unsetenv("WEFT_VGPU_CHECK");
    for (int round = 0; round < rounds; round++) {
        int64_t x[N];
        fill(x, 1);
        weft_data *d;
        CHECK_OK(weft_data_register(rt, x, sizeof x, &d));
        job w = {.op = OP_SET, .v = 42, .sleep_us = 3000};
        spawn(rt, "gpu:0", &w, d, WEFT_W, NULL, 0, "slow writer");
        job r = {.op = OP_ADD, .v = 1};
        weft_placement p;
        CHECK_OK(weft_placement_parse(round % 2 ? "gpu:1" : "gpu:0", &p));
        weft_access a = {d, WEFT_RW};
        weft_task_desc desc;
        weft_task_desc_init(&desc);
        desc.body = sync_body;
        desc.arg = &r;
        desc.accesses = &a;
        desc.naccesses = 1;
        desc.placements = &p;
        desc.nplacements = 1;
        desc.name = "body computes";
        weft_task *t;
        CHECK_OK(weft_spawn(rt, &desc, &t));
        CHECKF(weft_task_wait(t) == 0, "round %d: %s", round, weft_last_error());
        weft_task_release(t);
        CHECK_OK(weft_wait_all(rt));
        CHECK_OK(weft_data_unregister(d));
        all_equal(x, 43, "X after a body computed on its replica", round);
    }
    /* from a CPU task: returns at once */
    job c = {.op = OP_NONE};
    weft_task_desc desc;
    weft_task_desc_init(&desc);
    desc.body = sync_body;
    desc.arg = &c;
    weft_task *t;
    CHECK_OK(weft_spawn(rt, &desc, &t));
    CHECK_OK(weft_task_wait(t));
    weft_task_release(t);
    CHECK_ERR(weft_ctx_sync(NULL), WEFT_EINVAL);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- the checking mode's host watch --------------------------------------- */

/* Whether the checking mode's last report is the host watch's, naming what
 * (e.g. "data d3", "tile 0 of data d3") and dev. */
static bool watch_reported(const char *what, const char *dev) {
    char why[1024], name[80];
    weft__test_vcheck_last(why, sizeof why);
    snprintf(name, sizeof name, "registered as %s ", what);
    return strstr(why, "was written on the host while") && strstr(why, name) && strstr(why, dev) &&
           strstr(why, "weft_data_acquire") && strstr(why, "rt.acquire");
}

static void clear_report(void) { weft__test_vcheck_clear(); }

static unsigned data_id(weft_data *d) {
    unsigned id = weft__test_data_id(d);
    CHECK(id > 0);
    return id;
}

/* The program writes the memory of data whose newest value is on a GPU
 * only (written there by a task), outside any task naming it and without
 * acquiring it: the value brought back goes over that write.  The
 * checking mode reports it, naming the data and the GPU, and fails what
 * brought the value back (a host task, an acquire, unregister) or, when
 * an eviction did, the next task naming the data. */
static void host_watch(void) {
    weft_runtime *rt = make_checked();
    char name[64];
    int64_t x[N];
    fill(x, 1);
    weft_data *d;
    CHECK_OK(weft_data_register(rt, x, sizeof x, &d));
    snprintf(name, sizeof name, "data d%u", data_id(d));
    /* a host task reading it */
    job w = {.op = OP_SET, .v = 42};
    weft_task_release(spawn(rt, "gpu:0", &w, d, WEFT_W, NULL, 0, "W"));
    CHECK_OK(weft_wait_all(rt));
    x[0] = 5; /* lost */
    job r = {.op = OP_READ};
    weft_task *t = spawn(rt, "cpu", &r, d, WEFT_R, NULL, 0, "R");
    CHECK_ERR(weft_task_wait(t), WEFT_ETASKFAILED);
    CHECKF(strstr(weft_last_error(), "failed: data it names: the checking mode found the data's memory written"), "%s",
           weft_last_error());
    CHECK(atomic_load(&r.ran) == 0);
    weft_task_release(t);
    CHECKF(watch_reported(name, "vgpu:0"), "no report naming %s on vgpu:0", name);
    all_equal(x, 42, "X brought back over the program's write", 0);
    CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED);
    /* reported once: the next reader runs */
    job r2 = {.op = OP_READ};
    weft_task_release(spawn(rt, "cpu", &r2, d, WEFT_R, NULL, 0, "R2"));
    CHECK_OK(weft_wait_all(rt));
    all_equal(r2.seen, 42, "what R2 read", 0);
    /* an acquire; a second commit on a GPU before it (the program's write
     * found when the new value's fill goes over it) */
    clear_report();
    job w2 = {.op = OP_ADD, .v = 1};
    weft_task_release(spawn(rt, "gpu:1", &w2, d, WEFT_RW, NULL, 0, "RW"));
    CHECK_OK(weft_wait_all(rt));
    x[N - 1] = 5;
    job w3 = {.op = OP_ADD, .v = 1};
    weft_task_release(spawn(rt, "gpu:1", &w3, d, WEFT_RW, NULL, 0, "RW2"));
    CHECK_OK(weft_wait_all(rt));
    CHECKF(watch_reported(name, "vgpu:1"), "no report naming %s on vgpu:1", name);
    CHECK_ERR(weft_data_acquire(d, WEFT_R, 0), WEFT_EDEVICE);
    CHECKF(strstr(weft_last_error(), "weft_data_acquire: the checking mode found the data's memory written") &&
           strstr(weft_last_error(), "nothing is held"), "%s", weft_last_error());
    CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED); /* (the acquisition's task) */
    CHECK_OK(weft_data_acquire(d, WEFT_R, 0));
    all_equal(x, 44, "X acquired", 0);
    CHECK_OK(weft_data_release(d));
    /* unregister */
    clear_report();
    job w4 = {.op = OP_SET, .v = 77};
    weft_task_release(spawn(rt, "gpu:0", &w4, d, WEFT_W, NULL, 0, "W4"));
    CHECK_OK(weft_wait_all(rt));
    x[3] = 5;
    CHECK_ERR(weft_data_unregister(d), WEFT_EDEVICE);
    CHECKF(strstr(weft_last_error(), "weft_data_unregister: data d") &&
           strstr(weft_last_error(), ": the checking mode found the data's memory written") &&
           strstr(weft_last_error(), "the data is unregistered"), "%s", weft_last_error());
    CHECKF(watch_reported(name, "vgpu:0"), "no report naming %s on vgpu:0", name);
    all_equal(x, 77, "X after unregister", 0);
    CHECK_OK(weft_runtime_destroy(rt));

    /* an eviction writes it back: the next task naming it fails */
    clear_report();
    rt = test_make_devices("cpu,vgpu:1", 2, 64u << 10, true); /* room for two of the arrays below */
    enum { M = 3072 };
    static int64_t arr[3][M];
    weft_data *h[3];
    job fills[3];
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < M; i++) arr[k][i] = k;
        CHECK_OK(weft_data_register(rt, arr[k], sizeof arr[k], &h[k]));
    }
    snprintf(name, sizeof name, "data d%u", data_id(h[0]));
    for (int k = 0; k < 3; k++) {
        if (k == 2) arr[0][0] = 5; /* lost: the eviction below writes h[0] back */
        fills[k] = (job){.op = OP_SET, .v = 10 + k};
        weft_task_release(spawn(rt, "gpu", &fills[k], h[k], WEFT_W, NULL, 0, "fill"));
        CHECK_OK(weft_wait_all(rt));
    }
    CHECKF(watch_reported(name, "vgpu:0"), "no report naming %s on vgpu:0", name);
    CHECK(arr[0][0] == 10);
    job g = {.op = OP_READ};
    t = spawn(rt, "gpu", &g, h[0], WEFT_R, NULL, 0, "reads the evicted");
    CHECK_ERR(weft_task_wait(t), WEFT_ETASKFAILED);
    weft_task_release(t);
    CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED);
    for (int k = 0; k < 3; k++) CHECK_OK(weft_data_unregister(h[k]));
    CHECK_OK(weft_runtime_destroy(rt));

    /* tiles: a tile brought back, the parent brought back for a tile, and
     * a tile's border band brought to the host for its neighbour's halo */
    clear_report();
    rt = make_checked();
    int64_t z[2 * N];
    for (int i = 0; i < 2 * N; i++) z[i] = 1;
    weft_data *pd, *tiles[2];
    CHECK_OK(weft_data_register(rt, z, sizeof z, &pd));
    partition(pd, tiles);
    unsigned pid = data_id(pd);
    job tw = {.op = OP_SET, .v = 9};
    weft_task_release(spawn(rt, "gpu:1", &tw, tiles[0], WEFT_W, NULL, 0, "tile W"));
    CHECK_OK(weft_wait_all(rt));
    z[1] = 5;
    job tr = {.op = OP_READ};
    t = spawn(rt, "cpu", &tr, tiles[0], WEFT_R, NULL, 0, "tile R");
    CHECK_ERR(weft_task_wait(t), WEFT_ETASKFAILED);
    weft_task_release(t);
    snprintf(name, sizeof name, "tile 0 of data d%u", pid);
    CHECKF(watch_reported(name, "vgpu:1"), "no report naming %s on vgpu:1", name);
    CHECK(z[1] == 9);
    CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED);
    clear_report();
    job pw = {.op = OP_ADD, .v = 100};
    weft_task_release(spawn(rt, "gpu:0", &pw, pd, WEFT_RW, NULL, 0, "parent RW"));
    CHECK_OK(weft_wait_all(rt));
    z[2 * N - 1] = 5; /* in tile 1's part of the parent's memory */
    job tr1 = {.op = OP_READ};
    t = spawn(rt, "cpu", &tr1, tiles[1], WEFT_R, NULL, 0, "tile 1 R");
    CHECK_ERR(weft_task_wait(t), WEFT_ETASKFAILED);
    weft_task_release(t);
    snprintf(name, sizeof name, "data d%u", pid);
    CHECKF(watch_reported(name, "vgpu:0"), "no report naming %s on vgpu:0", name);
    CHECK(z[2 * N - 1] == 1 && z[0] == 109);
    CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED);
    CHECK_OK(weft_data_unregister(pd));
    clear_report();
    for (int i = 0; i < 2 * N; i++) z[i] = 1;
    CHECK_OK(weft_data_register(rt, z, sizeof z, &pd));
    pid = data_id(pd);
    weft_tiling tl = {.elem = sizeof(int64_t), .rows = 1, .cols = 2 * N, .grid_rows = 1, .grid_cols = 2, .halo = 1};
    CHECK_OK(weft_data_partition(pd, &tl, tiles));
    job bw = {.op = OP_SET, .v = 6}; /* tile 0's interior is the first N of its replica */
    weft_task_release(spawn(rt, "gpu:0", &bw, tiles[0], WEFT_RW, NULL, 0, "tile 0 RW"));
    CHECK_OK(weft_wait_all(rt));
    z[N - 1] = 5; /* tile 0's border band: tile 1's halo */
    job hr = {.op = OP_READ};
    t = spawn(rt, "cpu", &hr, tiles[1], WEFT_R, NULL, 0, "tile 1 reads its halo");
    CHECK_ERR(weft_task_wait(t), WEFT_ETASKFAILED);
    weft_task_release(t);
    snprintf(name, sizeof name, "tile 0 of data d%u", pid);
    CHECKF(watch_reported(name, "vgpu:0"), "no report naming %s on vgpu:0", name);
    CHECK(z[N - 1] == 6);
    CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED);
    clear_report();
    CHECK_OK(weft_data_unregister(pd)); /* (the band reported once: not again by the copy back) */
    for (int i = 0; i < 2 * N; i++) CHECKF(z[i] == (i < N ? 6 : 1), "z[%d] = %lld", i, (long long)z[i]);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* The legitimate ways to use the memory of data written on a GPU, in the
 * checking mode: nothing is reported, and every task completes. */
static void host_watch_quiet(void) {
    weft_runtime *rt = make_checked();
    int64_t x[N];
    fill(x, 1);
    weft_data *d;
    CHECK_OK(weft_data_register(rt, x, sizeof x, &d));
    job w = {.op = OP_SET, .v = 42};
    /* acquired, then written */
    weft_task_release(spawn(rt, "gpu:0", &w, d, WEFT_W, NULL, 0, "W"));
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_acquire(d, WEFT_RW, 0));
    x[0] = 5;
    CHECK_OK(weft_data_release(d));
    job adds[5]; /* (one per task: spawn writes its job) */
    for (int k = 0; k < 5; k++) adds[k] = (job){.op = OP_ADD, .v = 1};
    weft_task_release(spawn(rt, "gpu:1", &adds[0], d, WEFT_RW, NULL, 0, "RW"));
    CHECK_OK(weft_wait_all(rt));
    /* a write-only acquisition: nothing comes back, whatever the memory held */
    x[1] = 3;
    CHECK_OK(weft_data_acquire(d, WEFT_W, 0));
    fill(x, 7);
    CHECK_OK(weft_data_release(d));
    /* a host task writing it (RW: brought back first; W: not) */
    weft_task_release(spawn(rt, "gpu:0", &adds[1], d, WEFT_RW, NULL, 0, "RW"));
    job hw = {.op = OP_ADD, .v = 10};
    weft_task_release(spawn(rt, "cpu", &hw, d, WEFT_RW, NULL, 0, "host RW"));
    weft_task_release(spawn(rt, "gpu:1", &adds[2], d, WEFT_RW, NULL, 0, "RW"));
    CHECK_OK(weft_wait_all(rt));
    x[2] = 3; /* what a W task overwrites is not the data's value: not reported */
    job hs = {.op = OP_SET, .v = 20};
    weft_task_release(spawn(rt, "cpu", &hs, d, WEFT_W, NULL, 0, "host W"));
    /* readers on both GPUs and the host; a GPU reading the host's copy */
    weft_task_release(spawn(rt, "gpu:0", &adds[3], d, WEFT_RW, NULL, 0, "RW"));
    job r0 = {.op = OP_READ}, r1 = {.op = OP_READ}, rh = {.op = OP_READ}, rg = {.op = OP_READ};
    weft_task_release(spawn(rt, "gpu:1", &r1, d, WEFT_R, NULL, 0, "R gpu:1"));
    weft_task_release(spawn(rt, "gpu:0", &r0, d, WEFT_R, NULL, 0, "R gpu:0"));
    weft_task_release(spawn(rt, "cpu", &rh, d, WEFT_R, NULL, 0, "R host"));
    weft_task_release(spawn(rt, "gpu:1", &rg, d, WEFT_R | WEFT_HOST, NULL, 0, "R host on gpu:1"));
    CHECK_OK(weft_wait_all(rt));
    all_equal(rh.seen, 21, "what the host reader saw", 0);
    all_equal(rg.seen, 21, "what the GPU's host reader saw", 0);
    weft_task_release(spawn(rt, "gpu:1", &adds[4], d, WEFT_RW, NULL, 0, "RW"));
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_unregister(d));
    all_equal(x, 22, "X after unregister", 0);
    /* tiles with a halo: GPU writers, host readers of the halo, the parent */
    int64_t z[2 * N];
    for (int i = 0; i < 2 * N; i++) z[i] = 1;
    weft_data *pd, *tiles[2];
    CHECK_OK(weft_data_register(rt, z, sizeof z, &pd));
    weft_tiling tl = {.elem = sizeof(int64_t), .rows = 1, .cols = 2 * N, .grid_rows = 1, .grid_cols = 2, .halo = 1};
    CHECK_OK(weft_data_partition(pd, &tl, tiles));
    for (int round = 0; round < 3; round++) {
        job t0 = {.op = OP_SET, .v = 6}, h1 = {.op = OP_READ}, h0 = {.op = OP_READ}, p = {.op = OP_ADD, .v = 1};
        weft_task_release(spawn(rt, round ? "gpu:1" : "gpu:0", &t0, tiles[0], WEFT_RW, NULL, 0, "tile 0 RW"));
        weft_task_release(spawn(rt, "cpu", &h1, tiles[1], WEFT_R, NULL, 0, "tile 1 halo"));
        weft_task_release(spawn(rt, "cpu", &h0, tiles[0], WEFT_R, NULL, 0, "tile 0 R"));
        weft_task_release(spawn(rt, "gpu:0", &p, pd, WEFT_RW, NULL, 0, "parent RW"));
        CHECK_OK(weft_wait_all(rt));
        CHECK(h1.seen[0] == 6 && h0.seen[0] == 6);
    }
    CHECK_OK(weft_data_unregister(pd));
    for (int i = 0; i < 2 * N; i++) CHECKF(z[i] == (i < N ? 7 : 1), "z[%d] = %lld", i, (long long)z[i]);
    char why[1024];
    weft__test_vcheck_last(why, sizeof why);
    CHECKF(why[0] == '\0', "reported: %s", why);
    CHECK_OK(weft_runtime_destroy(rt));
}

int main(int argc, char **argv) {
    test_watchdog(120);
    const char *which = argc > 1 ? argv[1] : "all";
    int rounds = test_pick(20, 6);
    bool all = strcmp(which, "all") == 0;
#define CASE(name, call)                                  \
    if (all || strcmp(which, name) == 0) {                \
        test_step(name);                                  \
        call;                                             \
    }
    CASE("host-read", host_read(rounds / 2));
    CASE("undo-exact", undo_exact(rounds));
    CASE("doomed-reader", doomed_reader(rounds / 2));
    CASE("commute-gpu-cpu", commute_gpu_cpu(rounds / 2));
    CASE("failed-writer-readers", failed_writer_readers(rounds * 3));
    CASE("tile-failure-parent", tile_failure_parent(rounds / 4 + 1));
    CASE("tile-and-parent", tile_and_parent());
    CASE("commute-cancelled", commute_cancelled(rounds / 2));
    CASE("tiles-failed-writer", tiles_failed_writer(rounds));
    CASE("reader-undo", reader_undo(rounds * 10));
    CASE("check-holes", check_holes());
    CASE("failed-copy-shared", failed_copy_shared(rounds / 4 + 1));
    CASE("halo-write", halo_write(rounds / 4 + 1));
    CASE("body-computes", body_computes(false, rounds / 2 + 1));
    CASE("body-computes-checked", body_computes(true, rounds / 4 + 1));
    CASE("host-watch", host_watch());
    CASE("host-watch-quiet", host_watch_quiet());
    printf("test_coherence %s: ok\n", which);
    return 0;
}
