/* Handles over overlapping memory: tasks whose accesses overlap, one of
 * them writing, are ordered in spawn order as if they named one handle;
 * disjoint parts of a registered whole stay concurrent; reads never order
 * reads; such handles are host-only, and the core refuses with a message
 * what it cannot keep coherent (a device access, a reduction, a partition,
 * a range over a partitioned one).  Order is shown by events (a task waits,
 * bounded, for a flag its successor would set if it ran early), never by
 * timing alone. */
#include "check.h"

#include <pthread.h>
#include <sched.h>

static void sleep_us(unsigned us) {
    struct timespec ts = {0, (long)us * 1000};
    nanosleep(&ts, NULL);
}

static weft_task *spawn1(weft_runtime *rt, weft_body_fn body, void *arg, weft_data *d, unsigned mode) {
    weft_access a = {d, mode};
    weft_task_desc desc;
    weft_task_desc_init(&desc);
    desc.body = body;
    desc.arg = arg;
    desc.accesses = &a;
    desc.naccesses = 1;
    weft_task *t = NULL;
    CHECKF(weft_spawn(rt, &desc, &t) == 0, "spawn: %s", weft_last_error());
    return t;
}

/* ---- (1) overlapping accesses are ordered ------------------------------ */

typedef struct order_probe {
    atomic_int first_running, second_ran, early; /* early: the second ran before the first ended */
    unsigned linger_ms;
    unsigned char *mem;
    size_t off, len;
    unsigned char value;
} order_probe;

/* The first task: it lingers (up to linger_ms) to give an unordered
 * second task every chance to run beside it, and notes if it did. */
static int first_body(weft_ctx *ctx, void *arg) {
    order_probe *p = arg;
    unsigned char *m = weft_ctx_data(ctx, 0);
    atomic_store(&p->first_running, 1);
    if (wait_flag(&p->second_ran, p->linger_ms) == 0) atomic_store(&p->early, 1);
    memset(m, p->value, p->len);
    return 0;
}

static int second_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    order_probe *p = arg;
    atomic_store(&p->second_ran, 1);
    return 0;
}

static void test_ordered(void) {
    weft_runtime *rt = make_rt(3);
    unsigned char buf[16] = {0};
    weft_data *a, *b;
    CHECK_OK(weft_data_register(rt, buf, 8, &a));      /* a[0:8) */
    CHECK_OK(weft_data_register(rt, buf + 4, 8, &b));  /* a[4:12) */
    static const unsigned modes[][2] = {{WEFT_W, WEFT_R},  {WEFT_R, WEFT_W},  {WEFT_W, WEFT_W},
                                        {WEFT_RW, WEFT_RW}, {WEFT_RW | WEFT_COMMUTE, WEFT_R},
                                        {WEFT_R, WEFT_RW | WEFT_COMMUTE}, {WEFT_RW | WEFT_UNORDERED, WEFT_R}};
    for (int rep = 0; rep < test_pick(6, 2); rep++)
        for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++)
            for (int swap = 0; swap < 2; swap++) {
                order_probe p;
                memset(&p, 0, sizeof p);
                p.linger_ms = 30;
                p.len = modes[k][0] & WEFT_W ? 8 : 0;
                p.value = (unsigned char)(k + 1);
                weft_data *first = swap ? b : a, *second = swap ? a : b;
                spawn1(rt, first_body, &p, first, modes[k][0]);
                spawn1(rt, second_body, &p, second, modes[k][1]);
                CHECK_OK(weft_wait_all(rt));
                CHECKF(!atomic_load(&p.early), "modes %u then %u (swap %d): the second task ran early",
                       modes[k][0], modes[k][1], swap);
            }
    /* Reads never order reads: two readers of overlapping ranges meet. */
    order_probe p;
    memset(&p, 0, sizeof p);
    p.linger_ms = 10000;
    spawn1(rt, first_body, &p, a, WEFT_R);
    spawn1(rt, second_body, &p, b, WEFT_R);
    CHECK_OK(weft_wait_all(rt));
    CHECK(atomic_load(&p.early)); /* (the first waits for it: 3 workers) */
    CHECK_OK(weft_data_unregister(a));
    CHECK_OK(weft_data_unregister(b));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- (2), (3) disjoint parts of a registered whole --------------------- */

typedef struct meet {
    atomic_int arrived, failed;
    unsigned char value;
} meet;

typedef struct part_arg {
    meet *m;
    unsigned char value;
} part_arg;

/* Both parts' writers must run at once: each waits (bounded) for the other. */
static int part_writer(weft_ctx *ctx, void *arg) {
    part_arg *pa = arg;
    unsigned char *mem = weft_ctx_data(ctx, 0);
    size_t n = 8;
    atomic_fetch_add(&pa->m->arrived, 1);
    uint64_t end = now_ns() + 5000000000ull;
    while (atomic_load(&pa->m->arrived) < 2 && now_ns() < end) sched_yield();
    if (atomic_load(&pa->m->arrived) < 2) atomic_store(&pa->m->failed, 1);
    memset(mem, pa->value, n);
    return 0;
}

typedef struct whole_check {
    unsigned char expect[16];
    atomic_int bad;
} whole_check;

static int whole_reader(weft_ctx *ctx, void *arg) {
    whole_check *w = arg;
    const unsigned char *mem = weft_ctx_data(ctx, 0);
    if (memcmp(mem, w->expect, 16) != 0) atomic_store(&w->bad, 1);
    return 0;
}

static int fill_body(weft_ctx *ctx, void *arg) {
    memset(weft_ctx_data(ctx, 0), *(unsigned char *)arg, 16);
    return 0;
}

static void test_disjoint(void) {
    weft_runtime *rt = make_rt(2);
    unsigned char buf[16] = {0};
    weft_data *whole, *lo, *hi;
    CHECK_OK(weft_data_register(rt, buf, 16, &whole));
    CHECK_OK(weft_data_register(rt, buf, 8, &lo));
    CHECK_OK(weft_data_register(rt, buf + 8, 8, &hi));
    for (int rep = 0; rep < test_pick(50, 10); rep++) {
        unsigned char base = (unsigned char)(3 * rep + 1);
        spawn1(rt, fill_body, &base, whole, WEFT_W);
        meet m;
        memset(&m, 0, sizeof m);
        part_arg pl = {&m, (unsigned char)(base + 1)}, ph = {&m, (unsigned char)(base + 2)};
        spawn1(rt, part_writer, &pl, lo, rep & 1 ? WEFT_RW : WEFT_W);
        spawn1(rt, part_writer, &ph, hi, rep & 2 ? WEFT_RW | WEFT_COMMUTE : WEFT_W);
        whole_check w;
        memset(&w, 0, sizeof w);
        memset(w.expect, pl.value, 8);
        memset(w.expect + 8, ph.value, 8);
        spawn1(rt, whole_reader, &w, whole, WEFT_R);
        CHECK_OK(weft_wait_all(rt));
        CHECKF(!atomic_load(&m.failed), "rep %d: the disjoint parts' writers did not run at once", rep);
        CHECKF(!atomic_load(&w.bad), "rep %d: the whole's reader missed a part's write", rep);
    }
    CHECK_OK(weft_data_unregister(lo));
    CHECK_OK(weft_data_unregister(whole));
    CHECK_OK(weft_data_unregister(hi));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- (4) what overlapping handles refuse -------------------------------- */

static int nop_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    return 0;
}

static int spawn_at(weft_runtime *rt, const char *where, weft_data *d, unsigned mode) {
    weft_placement p;
    CHECK_OK(weft_placement_parse(where, &p));
    weft_access a = {d, mode};
    weft_task_desc desc;
    weft_task_desc_init(&desc);
    desc.body = nop_body;
    desc.accesses = &a;
    desc.naccesses = 1;
    desc.placements = &p;
    desc.nplacements = 1;
    return weft_spawn(rt, &desc, NULL);
}

static void expect_msg(const char *what, const char *part) {
    const char *msg = weft_last_error();
    CHECKF(msg && strstr(msg, part), "%s: message \"%s\" lacks \"%s\"", what, msg ? msg : "(none)", part);
}

static void test_refused(void) {
    weft_runtime *rt = test_make_devices("cpu,vgpu:1", 2, 0, false);
    static double buf[64];
    weft_data *whole, *part, *alone, *scratch;
    CHECK_OK(weft_data_register(rt, buf, 32 * sizeof(double), &whole));
    /* Before an overlapping range exists: the whole goes to the GPU. */
    CHECK_OK(spawn_at(rt, "gpu", whole, WEFT_RW));
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_register(rt, buf + 8, 8 * sizeof(double), &part));
    CHECK_ERR(spawn_at(rt, "gpu", part, WEFT_R), WEFT_EINVAL);
    expect_msg("device access", "host-only");
    expect_msg("device access", "WEFT_HOST");
    CHECK_ERR(spawn_at(rt, "gpu", whole, WEFT_W), WEFT_EINVAL);
    expect_msg("device access", "overlaps d");
    CHECK_ERR(spawn_at(rt, "gpu", part, WEFT_RW | WEFT_ON_GPU(0)), WEFT_EINVAL);
    /* On the host they run, wherever the task does. */
    CHECK_OK(spawn_at(rt, "gpu", part, WEFT_RW | WEFT_HOST));
    CHECK_OK(spawn_at(rt, "cpu", whole, WEFT_R));
    CHECK_OK(weft_wait_all(rt));
    /* Reductions. */
    CHECK_ERR(spawn_at(rt, "cpu", part, WEFT_REDUCE | WEFT_RED_SUM | WEFT_RED_F64 | WEFT_HOST), WEFT_EINVAL);
    expect_msg("reduction", "reduction needs memory registered as one range");
    /* Partitions: of a handle with neighbours, and a range over a partitioned one. */
    weft_data *tiles[2];
    weft_tiling tl = {.elem = sizeof(double), .rows = 1, .cols = 32, .grid_rows = 1, .grid_cols = 2};
    CHECK_ERR(weft_data_partition(whole, &tl, tiles), WEFT_EINVAL);
    expect_msg("partition", "overlaps d");
    CHECK_OK(weft_data_register(rt, buf + 40, 16 * sizeof(double), &alone));
    weft_tiling t2 = {.elem = sizeof(double), .rows = 1, .cols = 16, .grid_rows = 1, .grid_cols = 2};
    CHECK_OK(weft_data_partition(alone, &t2, tiles));
    weft_data *over;
    CHECK_ERR(weft_data_register(rt, buf + 44, 8 * sizeof(double), &over), WEFT_EINVAL);
    expect_msg("register over tiles", "partitioned into tiles");
    /* Scratch-only handles overlap nothing; neither do device ranges. */
    CHECK_OK(weft_data_register(rt, NULL, 64, &scratch));
    CHECK_OK(spawn_at(rt, "gpu", scratch, WEFT_SCRATCH));
    /* Once the part is gone, the whole is a device handle again, and its
     * value (written on the host through the part) is the one it gets. */
    CHECK_OK(weft_data_unregister(part));
    CHECK_OK(spawn_at(rt, "gpu", whole, WEFT_RW));
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_unregister(whole));
    CHECK_OK(weft_data_unregister(alone));
    CHECK_OK(weft_data_unregister(scratch));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- (5) unregister in the middle --------------------------------------- */

typedef struct mid {
    atomic_int go, reader_ran, early, writer_done;
} mid;

static int mid_writer(weft_ctx *ctx, void *arg) {
    mid *m = arg;
    long *v = weft_ctx_data(ctx, 0);
    if (wait_flag(&m->go, 10000) != 0) atomic_store(&m->early, 2);
    if (wait_flag(&m->reader_ran, 20) == 0) atomic_store(&m->early, 1);
    for (int i = 0; i < 4; i++) v[i] = 100 + i;
    atomic_store(&m->writer_done, 1);
    return 0;
}

typedef struct mid_read {
    mid *m;
    long seen[8];
} mid_read;

static int mid_reader(weft_ctx *ctx, void *arg) {
    mid_read *r = arg;
    atomic_store(&r->m->reader_ran, 1);
    memcpy(r->seen, weft_ctx_data(ctx, 0), sizeof r->seen);
    return 0;
}

/* A reader of [3, 5) (a range registered over the part as it closes). */
static int small_nop(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    return 0;
}

typedef struct small_read {
    mid *m;
    long seen[2];
} small_read;

static int small_reader(weft_ctx *ctx, void *arg) {
    small_read *r = arg;
    atomic_store(&r->m->reader_ran, 1);
    memcpy(r->seen, weft_ctx_data(ctx, 0), sizeof r->seen);
    return 0;
}

/* A reader of d, or NULL once spawns on d are refused (it is closing). */
static weft_task *try_spawn(weft_runtime *rt, weft_data *d) {
    weft_access a = {d, WEFT_R};
    weft_task_desc desc;
    weft_task_desc_init(&desc);
    desc.body = small_nop;
    desc.accesses = &a;
    desc.naccesses = 1;
    weft_task *t = NULL;
    return weft_spawn(rt, &desc, &t) == 0 ? t : NULL;
}

typedef struct unreg_arg {
    weft_data *d;
    int rc;
} unreg_arg;

static void *unreg_thread(void *arg) {
    unreg_arg *u = arg;
    u->rc = weft_data_unregister(u->d);
    return NULL;
}

static void test_unregister_middle(void) {
    weft_runtime *rt = make_rt(3);
    for (int rep = 0; rep < test_pick(24, 8); rep++) {
        long buf[8] = {0};
        weft_data *whole, *part;
        mid m;
        memset(&m, 0, sizeof m);
        /* The whole registered before the part's writer (which then names
         * it for the order) or after (the part's history is handed over to
         * it when the part is unregistered). */
        if (rep & 4) CHECK_OK(weft_data_register(rt, buf, sizeof buf, &whole));
        CHECK_OK(weft_data_register(rt, buf + 2, 4 * sizeof(long), &part)); /* [2, 6) */
        spawn1(rt, mid_writer, &m, part, WEFT_W);
        if (!(rep & 4)) CHECK_OK(weft_data_register(rt, buf, sizeof buf, &whole));
        unreg_arg u = {part, -1};
        pthread_t th;
        CHECK(pthread_create(&th, NULL, unreg_thread, &u) == 0);
        weft_data *x = NULL;
        small_read xr;
        memset(&xr, 0, sizeof xr);
        xr.m = &m;
        if (rep & 1) {
            /* Once the unregister has begun (its writer is held back:
             * spawns on the part are refused), memory over the part may be
             * registered: its tasks follow the part's writer. */
            uint64_t end = now_ns() + 5000000000ull;
            weft_task *probe;
            while ((probe = try_spawn(rt, part)) != NULL && now_ns() < end) {
                weft_task_release(probe);
                sleep_us(200);
            }
            CHECK_OK(weft_data_register(rt, buf + 3, 2 * sizeof(long), &x)); /* [3, 5) */
            spawn1(rt, small_reader, &xr, x, rep & 2 ? WEFT_R : WEFT_RW);
        }
        mid_read r;
        memset(&r, 0, sizeof r);
        r.m = &m;
        spawn1(rt, mid_reader, &r, whole, rep & 2 ? WEFT_R : WEFT_RW);
        atomic_store(&m.go, 1);
        CHECK(pthread_join(th, NULL) == 0);
        CHECK_OK(u.rc);
        CHECK(atomic_load(&m.writer_done)); /* unregister waited for it */
        CHECK_OK(weft_wait_all(rt));
        CHECKF(atomic_load(&m.early) == 0, "rep %d: the whole's reader ran beside the part's writer (%d)", rep,
               atomic_load(&m.early));
        for (int i = 0; i < 8; i++)
            CHECKF(r.seen[i] == (i >= 2 && i < 6 ? 100 + i - 2 : 0), "rep %d: seen[%d] = %ld", rep, i, r.seen[i]);
        if (x) {
            CHECKF(xr.seen[0] == 101 && xr.seen[1] == 102, "rep %d: over the closing part, seen %ld %ld", rep,
                   xr.seen[0], xr.seen[1]);
            CHECK_OK(weft_data_unregister(x));
        }
        /* The memory may be registered again as a part at once. */
        CHECK_OK(weft_data_register(rt, buf + 1, 2 * sizeof(long), &part));
        CHECK_OK(weft_data_unregister(part));
        CHECK_OK(weft_data_unregister(whole));
    }
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- (6) failure through overlapping memory ------------------------------ */

static int fail_body(weft_ctx *ctx, void *arg) {
    (void)arg;
    memset(weft_ctx_data(ctx, 0), 0xee, weft_ctx_bytes(ctx, 0)); /* in place, then fails */
    return 7;
}

static weft_task *spawn_named(weft_runtime *rt, const char *name, weft_body_fn body, weft_data *d, unsigned mode) {
    weft_access a = {d, mode};
    weft_task_desc desc;
    weft_task_desc_init(&desc);
    desc.body = body;
    desc.accesses = &a;
    desc.naccesses = 1;
    desc.name = name;
    weft_task *t = NULL;
    CHECKF(weft_spawn(rt, &desc, &t) == 0, "spawn: %s", weft_last_error());
    return t;
}

/* t's final status (its handle released); a cancelled task's cause in *cause. */
static weft_task_status final_status(weft_task *t, uint64_t *cause) {
    int rc = weft_task_wait(t);
    (void)rc; /* (a failed or cancelled task: its status below) */
    weft_task_info info;
    CHECK_OK(weft_task_info_get(t, &info));
    if (cause) *cause = info.cause_id;
    weft_task_release(t);
    return info.status;
}

/* A reader of part of a range after a failed in-place writer of the whole
 * is cancelled, naming it (so is a reader of the whole after a failed
 * writer of a part); after a WEFT_W writer of the part (which never
 * inherits failure) the part's readers run: its memory is valid again. */
static void test_failure(void) {
    weft_runtime *rt = make_rt(2);
    for (int rep = 0; rep < 4; rep++) {
        unsigned char buf[16] = {0};
        weft_data *whole, *part;
        CHECK_OK(weft_data_register(rt, buf, 16, &whole));
        CHECK_OK(weft_data_register(rt, buf + 4, 8, &part)); /* [4, 12) */
        weft_data *wd = rep & 1 ? part : whole, *rd = rep & 1 ? whole : part;
        weft_task *w = spawn_named(rt, "fails", fail_body, wd, WEFT_RW);
        weft_task_info wi;
        CHECK_OK(weft_task_info_get(w, &wi));
        weft_task *r = spawn_named(rt, "reads", nop_body, rd, rep & 2 ? WEFT_RW : WEFT_R);
        weft_task *over = NULL, *after = NULL;
        if (!(rep & 1)) { /* the part written again since the failure */
            over = spawn_named(rt, "overwrites", nop_body, part, WEFT_W);
            after = spawn_named(rt, "reads again", nop_body, part, WEFT_R);
        }
        uint64_t cause = 0;
        CHECKF(final_status(w, NULL) == WEFT_TASK_FAILED, "rep %d: the writer did not fail", rep);
        weft_task_status st = final_status(r, &cause);
        CHECKF(st == WEFT_TASK_CANCELLED && cause == wi.id, "rep %d: reader after a failed overlapping writer: "
               "status %d, cause %llu (want cancelled by %llu)", rep, (int)st, (unsigned long long)cause,
               (unsigned long long)wi.id);
        if (over) {
            CHECKF(final_status(over, NULL) == WEFT_TASK_COMPLETED, "rep %d: the W overwrite did not run", rep);
            st = final_status(after, NULL);
            CHECKF(st == WEFT_TASK_COMPLETED, "rep %d: reader of the overwritten part: status %d", rep, (int)st);
        }
        CHECK(weft_wait_all(rt) != 0); /* (the failure reported) */
        CHECK_OK(weft_data_unregister(part));
        CHECK_OK(weft_data_unregister(whole));
    }
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- (7) random ranges, modes and timing against a sequential model ----- */

#define RBYTES 64
#define RHANDLES 8

typedef struct rtask {
    unsigned mode;       /* WEFT_R, WEFT_W, WEFT_RW, or commute/unordered adds */
    size_t lo, n;        /* its handle's range */
    unsigned char k;     /* what it writes or adds */
    unsigned sleep_us;
    uint32_t seen, want; /* a reader's checksum of its range, and the model's */
} rtask;

static uint32_t sum_of(const unsigned char *p, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 16777619u;
    return h;
}

/* What one task does to bytes p[0 .. n): the model and the body alike. */
static void apply(const rtask *t, unsigned char *p) {
    if (t->mode & (WEFT_COMMUTE | WEFT_UNORDERED)) {
        for (size_t i = 0; i < t->n; i++) p[i] = (unsigned char)(p[i] + t->k); /* (commutes) */
    } else if ((t->mode & WEFT_RW) == WEFT_RW) {
        for (size_t i = 0; i < t->n; i++) p[i] = (unsigned char)(p[i] * 3 + t->k); /* (does not) */
    } else if (t->mode & WEFT_W) {
        for (size_t i = 0; i < t->n; i++) p[i] = (unsigned char)(t->k + i);
    }
}

static int random_body(weft_ctx *ctx, void *arg) {
    rtask *t = arg;
    unsigned char *p = weft_ctx_data(ctx, 0);
    if (t->sleep_us) sleep_us(t->sleep_us);
    if (t->mode == WEFT_R)
        t->seen = sum_of(p, t->n);
    else
        apply(t, p);
    return 0;
}

static void test_random(void) {
    weft_runtime *rt = make_rt(4);
    int rounds = test_pick(30, 6), ntasks = test_pick(300, 80);
    rtask *tasks = calloc((size_t)ntasks, sizeof *tasks);
    CHECK(tasks);
    test_rng rng = {0x5eed0f0e};
    for (int round = 0; round < rounds; round++) {
        unsigned char buf[RBYTES], model[RBYTES];
        for (int i = 0; i < RBYTES; i++) buf[i] = model[i] = (unsigned char)(i * 7 + round);
        weft_data *h[RHANDLES];
        size_t lo[RHANDLES], n[RHANDLES];
        bool live[RHANDLES];
        for (int j = 0; j < RHANDLES; j++) {
            lo[j] = rng_below(&rng, RBYTES - 1);
            n[j] = 1 + rng_below(&rng, (uint32_t)(RBYTES - lo[j]));
            if (j == 0) lo[j] = 0, n[j] = RBYTES;                  /* the whole, */
            if (j == 1) lo[j] = lo[2 % RHANDLES], n[j] = 0;         /* (set below) */
            live[j] = true;
        }
        lo[1] = lo[2];
        n[1] = n[2]; /* and one range registered twice */
        for (int j = 0; j < RHANDLES; j++) CHECK_OK(weft_data_register(rt, buf + lo[j], n[j], &h[j]));
        int gone = -1;
        for (int i = 0; i < ntasks; i++) {
            if (i == ntasks / 2) { /* one handle goes in the middle */
                gone = 1 + (int)rng_below(&rng, RHANDLES - 1);
                CHECK_OK(weft_data_unregister(h[gone]));
                live[gone] = false;
            }
            int j;
            do j = (int)rng_below(&rng, RHANDLES);
            while (!live[j]);
            rtask *t = &tasks[i];
            static const unsigned modes[] = {WEFT_R, WEFT_R, WEFT_W, WEFT_RW, WEFT_RW | WEFT_COMMUTE,
                                             WEFT_RW | WEFT_UNORDERED};
            t->mode = modes[rng_below(&rng, sizeof modes / sizeof modes[0])];
            t->lo = lo[j];
            t->n = n[j];
            t->k = (unsigned char)(1 + rng_below(&rng, 250));
            t->sleep_us = rng_below(&rng, 4) == 0 ? rng_below(&rng, 200) : 0;
            t->seen = 0;
            if (t->mode == WEFT_R)
                t->want = sum_of(model + t->lo, t->n);
            else
                apply(t, model + t->lo);
            spawn1(rt, random_body, t, h[j], t->mode);
        }
        CHECK_OK(weft_wait_all(rt));
        for (int i = 0; i < ntasks; i++)
            CHECKF(tasks[i].mode != WEFT_R || tasks[i].seen == tasks[i].want,
                   "round %d: reader %d of [%zu, %zu) saw another value than in spawn order", round, i,
                   tasks[i].lo, tasks[i].lo + tasks[i].n);
        CHECKF(memcmp(buf, model, RBYTES) == 0, "round %d: the memory differs from the sequential model", round);
        for (int j = 0; j < RHANDLES; j++)
            if (live[j]) CHECK_OK(weft_data_unregister(h[j]));
    }
    free(tasks);
    CHECK_OK(weft_runtime_destroy(rt));
}

int main(void) {
    test_ordered();
    test_disjoint();
    test_refused();
    test_unregister_middle();
    test_failure();
    test_random();
    printf("test_overlap: ok\n");
    return 0;
}
