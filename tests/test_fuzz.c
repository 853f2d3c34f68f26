/*
 * test_fuzz — random programs against a sequential model of weft.h.
 *
 * For each seed: a random program (data handles of a few int64 elements,
 * some partitioned into tiles with a halo of 0 or 1; 5 to 40 tasks with
 * random accesses — R, W, RW, RW|COMMUTE, REDUCE|SUM|I64, any of them
 * |HOST —, random placements over cpu,vgpu:K, explicit dependencies, bodies
 * or queued kernels that fail, cancellations, kernels of random modelled
 * lengths) runs on a runtime of its own.  Each task records what it read
 * (in its body or its kernel); its writes are a function of what it read
 * and of its number, so a stale read or a lost write changes the result.
 * Then a sequential model of weft.h's rules replays the tasks in spawn
 * order on plain arrays, and every task's final status, every value a
 * completed task read and every handle's final content (after unregister)
 * must agree with it.  A difference is a MISMATCH: the seed, the program
 * and the first difference are printed (then the program is minimised).
 *
 *   test_fuzz [--seeds N] [--first S] [--seed S] [--features LIST]
 *             [--no-minimise] [--quiet]
 *
 * --seed S replays one seed verbosely.  LIST is comma-separated: "all",
 * "none", a feature name (tiles, reduce, commute, host, fail, cancel,
 * evict, multi-gpu, checkmode, invalid, deps, sleep, schedule), "-name" to
 * remove one: e.g. --features all,-host,-cancel.  Exit status 1 on any
 * mismatch.
 *
 * With "schedule", half the programs run in the virtual GPUs' seeded
 * schedule (WEFT_VGPU_SCHEDULE set to the program's seed, device/vsched.h):
 * the order in which the GPUs' queues progress, copies land and events fire
 * is then the seed's choice, with modelled time and seeded stragglers and
 * pauses, rather than the machine's timing — the tester explores
 * interleavings the machine rarely produces, and a seed replays the same
 * device schedule (given the same order of work queued by the host).
 *
 * The model (weft.h, "Dependencies inferred from data accesses"):
 *   - a task is cancelled when an explicit dependency failed or was
 *     cancelled, or when it reads (R, RW, COMMUTE, REDUCE) an element whose
 *     last writer failed or was cancelled; after a commute or reduction
 *     group, when any member failed or was cancelled (members follow what
 *     came before their group, not each other).  Failure flows with the
 *     data, element by element (a tile's halo reads its neighbours'
 *     elements; a task on the parent reads every tile's);
 *   - a WEFT_W writer is not cancelled by what came before and makes its
 *     elements valid again;
 *   - a cancelled task leaves no trace; a failed one writes nothing (its
 *     body fails before writing), but what a failed WEFT_W access covers is
 *     not compared afterwards (a write-only replica is not copied in, and
 *     is filled with 0xDB in the checking mode);
 *   - a task cancelled by request (weft_task_cancel) may have started
 *     already: its observed outcome is taken for it alone, then the rules
 *     propagate it;
 *   - reductions add each completed member's private copy (which starts as
 *     0, the identity: checked) to the value; commute members add, so their
 *     order does not matter (their reads of the commuted data are not
 *     compared).
 */
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "check.h"

enum { MAXR = 4, MAXTL = 4, MAXE = 24, MAXT = 40, MAXA = 4, MAXALT = 3, MAXD = 2, MAXG = 4, MAXRANGES = 20 };

enum {
    F_TILES = 1 << 0,
    F_REDUCE = 1 << 1,
    F_COMMUTE = 1 << 2,
    F_HOST = 1 << 3,
    F_FAIL = 1 << 4,
    F_CANCEL = 1 << 5,
    F_EVICT = 1 << 6,
    F_MULTI = 1 << 7,
    F_CHECK = 1 << 8,
    F_INVALID = 1 << 9,
    F_DEPS = 1 << 10,
    F_SLEEP = 1 << 11,
    F_SCHED = 1 << 12,
    F_ALL = (1 << 13) - 1
};
static const char *const feat_names[] = {"tiles", "reduce", "commute",   "host",    "fail", "cancel",
                                         "evict", "multi-gpu", "checkmode", "invalid", "deps", "sleep",
                                         "schedule"};
enum { NFEAT = sizeof feat_names / sizeof feat_names[0] };

#define RED_MODE (WEFT_REDUCE | WEFT_RED_SUM | WEFT_RED_I64)

typedef struct rect {
    int r0, c0, rows, cols;
} rect;

typedef struct root_spec {
    int rows, cols, n;
    int ntiles, gr, gc, halo; /* ntiles 0: not partitioned */
    rect span[MAXTL], in[MAXTL];
    int64_t init[MAXE];
} root_spec;

typedef struct acc_spec {
    int root, tile; /* tile -1: the whole handle (the parent if partitioned) */
    unsigned mode;
    int orig;       /* its index in the generated task (kept by minimisation) */
} acc_spec;

enum { FAIL_NONE, FAIL_BODY, FAIL_KERNEL };
enum {
    INV_NONE,
    INV_RED_R,
    INV_RED_PARENT,
    INV_RED_TWICE,
    INV_RED_TILE_PARENT,
    INV_ONGPU,
    INV_NOGPU,
    INV_MEMORY,
    INV_RED_HALO,
    INV_RED_NOTYPE,
    INV_TILE_PARENT_W,
    INV_COUNT
};
static const char *const inv_names[] = {"",           "reduce|R",      "reduce of a partitioned handle",
                                        "reduce+same data", "reduce tile+parent", "ON_GPU(1) on 1 GPU",
                                        "GPU that does not exist", "memory over the GPU's",
                                        "reduce tile+read of halo", "reduce without type",
                                        "tile+parent with a write"};

typedef struct task_spec {
    int id; /* its number in the generated program (kept by minimisation) */
    int nacc;
    acc_spec acc[MAXA];
    int nalt; /* 0: no placements (a plain CPU task) */
    char alt[MAXALT][24];
    double share[MAXALT];
    int ndeps;
    int deps[MAXD]; /* indices of earlier tasks */
    int fail;
    int cancel;    /* 0 none, 1 right after its spawn, 2 right after the spawn of task cancel_at */
    int cancel_at;
    unsigned sleep_us;
    uint64_t model_ns;
    int invalid;
} task_spec;

typedef struct prog {
    uint64_t seed;
    unsigned feat;
    int ngpu;
    size_t vgpu_mem; /* 0: the default */
    int check;
    int sched; /* the virtual GPUs' seeded schedule (WEFT_VGPU_SCHEDULE=seed) */
    int nroots;
    root_spec roots[MAXR];
    int ntasks;
    task_spec t[MAXT];
} prog;

/* ---- options and output ------------------------------------------------ */

static int verbose, quiet, in_child;
/* --strict-fail: a failed RW task (whose body writes nothing) must leave
 * the data's value as it was; weft.h leaves data whose last writer failed
 * invalid, its value unspecified, so by default it is not compared. */
static int strict_fail;
static int saved_err = -1; /* the real stderr while a seed's is captured */

static void out(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void out(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
}

/* ---- random numbers ---------------------------------------------------- */

static test_rng R;
static uint32_t rnd(uint32_t n) { return n ? rng_below(&R, n) : 0; }

/* ---- geometry ---------------------------------------------------------- */

/* Block k's first cell of len split in n (weft.h: the first len % n blocks
 * get one more). */
static int split(int len, int n, int k) { return k * (len / n) + (k < len % n ? k : len % n); }

static void make_tiles(root_spec *r) {
    int h = r->halo, nt = 0;
    for (int a = 0; a < r->gr; a++)
        for (int b = 0; b < r->gc; b++, nt++) {
            int r0 = split(r->rows, r->gr, a), r1 = split(r->rows, r->gr, a + 1);
            int c0 = split(r->cols, r->gc, b), c1 = split(r->cols, r->gc, b + 1);
            int er0 = r0 > h ? r0 - h : 0, er1 = r1 + h < r->rows ? r1 + h : r->rows;
            int ec0 = c0 > h ? c0 - h : 0, ec1 = c1 + h < r->cols ? c1 + h : r->cols;
            r->in[nt] = (rect){r0, c0, r1 - r0, c1 - c0};
            r->span[nt] = (rect){er0, ec0, er1 - er0, ec1 - ec0};
        }
    r->ntiles = nt;
}

static uint32_t rect_mask(const root_spec *r, rect x) {
    uint32_t m = 0;
    for (int i = 0; i < x.rows; i++)
        for (int j = 0; j < x.cols; j++) m |= 1u << ((x.r0 + i) * r->cols + x.c0 + j);
    return m;
}
static uint32_t all_mask(const root_spec *r) { return r->n >= 32 ? ~0u : (1u << r->n) - 1; }
static uint32_t span_mask(const prog *p, int root, int tile) {
    const root_spec *r = &p->roots[root];
    return tile < 0 ? all_mask(r) : rect_mask(r, r->span[tile]);
}
static uint32_t in_mask(const prog *p, int root, int tile) {
    const root_spec *r = &p->roots[root];
    return tile < 0 ? all_mask(r) : rect_mask(r, r->in[tile]);
}

static unsigned base_mode(unsigned m) {
    if (m & WEFT_REDUCE) return WEFT_REDUCE;
    return m & (WEFT_RW | WEFT_COMMUTE);
}
static bool is_commute(unsigned m) { return !(m & WEFT_REDUCE) && (m & WEFT_COMMUTE); }
static bool is_reduce(unsigned m) { return (m & WEFT_REDUCE) != 0; }
/* Reads the data's value (R or RW, not commute: a commute member's reads
 * depend on the order the group ran in). */
static bool reads_value(unsigned m) { return !is_reduce(m) && !is_commute(m) && (m & WEFT_R); }
static bool writes(unsigned m) { return is_reduce(m) || (m & WEFT_W); }
static int on_gpu_index(unsigned m) {
    unsigned k = (m & WEFT_ON_GPU_MASK) >> 20;
    return k ? (int)k - 1 : 0;
}

/* What a task's pointer for access a shows: rows x cols elements; element
 * (i, j) is the parent's element base + i * gstride + j; wr: what it
 * writes, in these coordinates. */
typedef struct view {
    int rows, cols, base, gstride;
    rect wr;
} view;

static view acc_view(const prog *p, const acc_spec *a) {
    const root_spec *r = &p->roots[a->root];
    view v;
    if (a->tile < 0) {
        v.rows = 1, v.cols = r->n, v.base = 0, v.gstride = r->n;
        v.wr = (rect){0, 0, 1, r->n};
        return v;
    }
    rect in = r->in[a->tile], s = is_reduce(a->mode) ? in : r->span[a->tile];
    v.rows = s.rows, v.cols = s.cols, v.base = s.r0 * r->cols + s.c0, v.gstride = r->cols;
    v.wr = (rect){in.r0 - s.r0, in.c0 - s.c0, in.rows, in.cols};
    return v;
}

/* ---- the program's work (the same code runs in tasks and in the model) --- */

typedef struct trec trec;
typedef struct karg {
    trec *r;
    int dom;
} karg;

struct trec {
    const prog *p;
    const task_spec *ts;
    int64_t *ptr[MAXA];
    size_t pitch[MAXA];
    int64_t readv[MAXA][MAXE];
    int on_gpu;       /* the body saw GPUs (its domains: host and one per GPU) */
    atomic_int ran;   /* the body started */
    int bad;          /* the body found something wrong with what Weft gave it */
    char badmsg[128];
    karg ka[MAXG + 1];
};

/* Domain of access k: 0 on the host (a CPU task, or WEFT_HOST), 1 + g on
 * the set's g-th GPU. */
static int dom_of(const trec *r, int k) {
    unsigned m = r->ts->acc[k].mode;
    if (!r->on_gpu || (m & WEFT_HOST)) return 0;
    return 1 + on_gpu_index(m);
}

#define ELEM(r, k, i, j) (*(int64_t *)((char *)(r)->ptr[k] + (size_t)(i) * (r)->pitch[k] + (size_t)(j) * 8))

static uint64_t wval(uint64_t id, int k, int g, uint64_t d) {
    return mix64(id * 0x100000001b3ull + (uint64_t)k * 7919 + (uint64_t)g * 131 + d);
}
/* What a commute member or a reducer adds to element g (not a function of
 * what the commute member read: the group's order is free). */
static int64_t addend(uint64_t id, int k, int g) {
    return (int64_t)(mix64(id * 31 + (uint64_t)k * 977 + (uint64_t)g + 0x5bd1e995u) % 1000003u) + 1;
}

/* The accesses of one domain: first every read (recorded), then every
 * write if do_writes. */
static void compute(trec *r, int dom, bool do_writes) {
    const task_spec *t = r->ts;
    uint64_t d = mix64(((uint64_t)t->id << 8) + (uint64_t)dom + 0x1234);
    for (int k = 0; k < t->nacc; k++) {
        if (dom_of(r, k) != dom) continue;
        unsigned m = t->acc[k].mode;
        view v = acc_view(r->p, &t->acc[k]);
        if (reads_value(m) || is_reduce(m))
            for (int i = 0; i < v.rows; i++)
                for (int j = 0; j < v.cols; j++) {
                    int64_t x = ELEM(r, k, i, j);
                    r->readv[k][i * v.cols + j] = x;
                    if (!is_reduce(m)) d = mix64(d + (uint64_t)x + (uint64_t)(i * v.cols + j));
                }
    }
    if (!do_writes) return;
    for (int k = 0; k < t->nacc; k++) {
        if (dom_of(r, k) != dom) continue;
        unsigned m = t->acc[k].mode;
        if (!writes(m)) continue;
        view v = acc_view(r->p, &t->acc[k]);
        for (int i = v.wr.r0; i < v.wr.r0 + v.wr.rows; i++)
            for (int j = v.wr.c0; j < v.wr.c0 + v.wr.cols; j++) {
                int g = v.base + i * v.gstride + j;
                int64_t *e = &ELEM(r, k, i, j);
                if (is_reduce(m) || is_commute(m))
                    *e += addend((uint64_t)t->id, k, g);
                else if (m & WEFT_R)
                    *e = (int64_t)(wval((uint64_t)t->id, k, g, d) ^ ((uint64_t)*e * 3));
                else
                    *e = (int64_t)wval((uint64_t)t->id, k, g, d);
            }
    }
}

static int kernel(void *arg) {
    karg *a = arg;
    bool fail = a->r->ts->fail == FAIL_KERNEL;
    compute(a->r, a->dom, !fail);
    return fail && a->dom == 1 ? 1 : 0;
}

static void set_bad(trec *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_bad(trec *r, const char *fmt, ...) {
    if (r->bad) return;
    r->bad = 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->badmsg, sizeof r->badmsg, fmt, ap);
    va_end(ap);
}

static int body(weft_ctx *ctx, void *arg) {
    trec *r = arg;
    const task_spec *t = r->ts;
    atomic_store(&r->ran, 1);
    unsigned ng = weft_ctx_gpu_count(ctx);
    r->on_gpu = ng > 0;
    if (t->fail == FAIL_BODY) return 1;
    for (int k = 0; k < t->nacc; k++) {
        const acc_spec *a = &t->acc[k];
        const root_spec *rs = &r->p->roots[a->root];
        r->ptr[k] = weft_ctx_data(ctx, (size_t)k);
        r->pitch[k] = weft_ctx_pitch(ctx, (size_t)k);
        size_t want; /* weft_ctx_pitch's rules */
        if (a->tile < 0)
            want = (size_t)rs->n * 8;
        else if (is_reduce(a->mode))
            want = (size_t)rs->in[a->tile].cols * 8;
        else if (dom_of(r, k) == 0)
            want = (size_t)rs->cols * 8;
        else
            want = (size_t)rs->span[a->tile].cols * 8;
        if (!r->ptr[k]) set_bad(r, "weft_ctx_data(%d) is NULL", k);
        else if (r->pitch[k] != want)
            set_bad(r, "weft_ctx_pitch(%d) is %zu, weft.h says %zu", k, r->pitch[k], want);
    }
    if (r->bad) return 99;
    if (!ng) {
        if (t->sleep_us) sleep_ns((uint64_t)t->sleep_us * 1000);
        compute(r, 0, t->fail == FAIL_NONE);
        return t->fail ? 1 : 0;
    }
    compute(r, 0, t->fail == FAIL_NONE); /* the WEFT_HOST accesses, on the host */
    for (unsigned g = 0; g < ng && g < MAXG; g++) {
        weft_range rg[MAXRANGES];
        size_t n = 0;
        for (int k = 0; k < t->nacc; k++) {
            if (dom_of(r, k) != (int)(1 + g)) continue;
            unsigned m = t->acc[k].mode;
            view v = acc_view(r->p, &t->acc[k]);
            size_t all = (size_t)v.rows * r->pitch[k];
            if (is_reduce(m)) {
                rg[n++] = (weft_range){r->ptr[k], all, WEFT_RW};
                continue;
            }
            if (m & WEFT_R) rg[n++] = (weft_range){r->ptr[k], all, WEFT_R};
            if (m & WEFT_W)
                for (int i = v.wr.r0; i < v.wr.r0 + v.wr.rows && n < MAXRANGES; i++)
                    rg[n++] = (weft_range){&ELEM(r, k, i, v.wr.c0), (size_t)v.wr.cols * 8,
                                           (m & WEFT_R) ? WEFT_RW : WEFT_W};
        }
        if (g > 0 && n == 0) continue;
        r->ka[1 + g] = (karg){r, (int)(1 + g)};
        int rc = weft_ctx_queue_rw(ctx, g, kernel, &r->ka[1 + g], g == 0 ? t->model_ns : 0, rg, n);
        if (rc != 0) {
            set_bad(r, "weft_ctx_queue_rw on GPU %u: %s (%s)", g, weft_strerror(rc), weft_last_error());
            return 98;
        }
    }
    return 0;
}

/* ---- generation -------------------------------------------------------- */

static bool pair_ok(const prog *p, const acc_spec *a, const acc_spec *b) {
    if (a->root != b->root) return true;
    if (a->tile == b->tile) /* the same data: only to read it on several GPUs */
        return base_mode(a->mode) == WEFT_R && base_mode(b->mode) == WEFT_R && !(a->mode & WEFT_HOST) &&
               !(b->mode & WEFT_HOST) && on_gpu_index(a->mode) != on_gpu_index(b->mode);
    if (a->tile < 0 || b->tile < 0) /* a tile and its parent: only to read both (weft_data_partition) */
        return a->mode == WEFT_R && b->mode == WEFT_R;
    /* two tiles: what one writes must not be in what the other sees */
    if (writes(a->mode) && (in_mask(p, a->root, a->tile) & span_mask(p, b->root, b->tile))) return false;
    if (writes(b->mode) && (in_mask(p, b->root, b->tile) & span_mask(p, a->root, a->tile))) return false;
    return true;
}

static int pick_tile(const root_spec *r) { return r->ntiles ? (int)rnd((uint32_t)r->ntiles + 1) - 1 : -1; }

static void gen_task(prog *p, int i) {
    task_spec *t = &p->t[i];
    unsigned f = p->feat;
    memset(t, 0, sizeof *t);
    t->id = i;
    bool multi = (f & F_MULTI) && p->ngpu >= 2 && rnd(6) == 0;
    if (multi) {
        t->nalt = 1 + (int)rnd(2);
        for (int a = 0; a < t->nalt; a++) {
            int c = (int)rnd(p->ngpu >= 3 ? 3 : 2);
            strcpy(t->alt[a], c == 0 ? "2*gpu" : c == 1 ? "cpu+2*gpu" : "3*gpu");
        }
    } else if (rnd(5) == 0) {
        t->nalt = 0;
    } else {
        t->nalt = 1 + (int)rnd(3);
        for (int a = 0; a < t->nalt; a++) {
            int c = (int)rnd((f & F_MULTI) && p->ngpu >= 2 ? 6 : 5);
            switch (c) {
            case 0: strcpy(t->alt[a], "cpu"); break;
            case 1: strcpy(t->alt[a], "gpu"); break;
            case 2: snprintf(t->alt[a], sizeof t->alt[a], "gpu:%u", rnd((uint32_t)p->ngpu)); break;
            case 3: strcpy(t->alt[a], "cpu+gpu"); break;
            case 4: snprintf(t->alt[a], sizeof t->alt[a], "cpu+gpu:%u", rnd((uint32_t)p->ngpu)); break;
            default: strcpy(t->alt[a], "2*gpu"); break;
            }
        }
    }
    static const double shares[] = {1.0, 0.5, 0.25};
    for (int a = 0; a < t->nalt; a++) t->share[a] = shares[rnd(3)];
    bool all_multi = t->nalt > 0;
    for (int a = 0; a < t->nalt; a++) all_multi &= strchr(t->alt[a], '*') != NULL;

    int want = 1 + (int)rnd(MAXA);
    for (int k = 0; k < want; k++) {
        for (int tries = 0; tries < 12; tries++) {
            acc_spec a;
            a.root = (int)rnd((uint32_t)p->nroots);
            const root_spec *rs = &p->roots[a.root];
            a.tile = pick_tile(rs);
            uint32_t w = rnd(100);
            bool red_ok = (f & F_REDUCE) && !(a.tile < 0 && rs->ntiles);
            if (w < 30) a.mode = WEFT_R;
            else if (w < 45) a.mode = WEFT_W;
            else if (w < 70) a.mode = WEFT_RW;
            else if (w < 85) a.mode = (f & F_COMMUTE) ? WEFT_RW | WEFT_COMMUTE : WEFT_RW;
            else a.mode = red_ok ? RED_MODE : WEFT_R;
            if ((f & F_HOST) && rnd(5) == 0) a.mode |= WEFT_HOST;
            if (all_multi && !(a.mode & (WEFT_HOST | WEFT_COMMUTE | WEFT_REDUCE)) && rnd(3) == 0)
                a.mode |= WEFT_ON_GPU(1);
            /* sometimes the same data read on a second GPU */
            if (all_multi && k > 0 && rnd(4) == 0 && base_mode(t->acc[k - 1].mode) == WEFT_R &&
                !(t->acc[k - 1].mode & WEFT_HOST)) {
                a = t->acc[k - 1];
                a.mode = WEFT_R | WEFT_ON_GPU(on_gpu_index(a.mode) == 0 ? 1 : 0);
            }
            bool ok = true;
            for (int j = 0; j < t->nacc && ok; j++) ok = pair_ok(p, &t->acc[j], &a);
            if (ok) {
                a.orig = t->nacc;
                t->acc[t->nacc++] = a;
                break;
            }
        }
    }
    if ((f & F_DEPS) && i > 0 && rnd(5) == 0) {
        int nd = 1 + (int)rnd(MAXD);
        for (int d = 0; d < nd; d++) {
            int j = (int)rnd((uint32_t)i);
            if (!p->t[j].invalid) t->deps[t->ndeps++] = j;
        }
    }
    if (f & F_FAIL) {
        uint32_t x = rnd(100);
        t->fail = x < 6 ? FAIL_BODY : x < 12 ? FAIL_KERNEL : FAIL_NONE;
    }
    if ((f & F_CANCEL) && rnd(100) < 8) {
        t->cancel = rnd(2) ? 1 : 2;
        t->cancel_at = i + 1 + (int)rnd(3);
    }
    if (f & F_SLEEP) {
        t->sleep_us = rnd(3) == 0 ? rnd(300) : 0;
        t->model_ns = rnd(2) ? rnd(400000) : 0;
    }
    if ((f & F_INVALID) && rnd(30) == 0) {
        int kind = 1 + (int)rnd(INV_COUNT - 1);
        int pr = -1, hr = -1; /* a partitioned root; one with a halo */
        for (int r = 0; r < p->nroots; r++) {
            if (p->roots[r].ntiles && pr < 0) pr = r;
            if (p->roots[r].ntiles && p->roots[r].halo && hr < 0) hr = r;
        }
        if ((kind == INV_RED_PARENT || kind == INV_RED_TILE_PARENT) && pr < 0) kind = INV_RED_R;
        if (kind == INV_RED_HALO && hr < 0) kind = INV_RED_NOTYPE;
        if (kind == INV_TILE_PARENT_W && pr < 0) kind = INV_RED_NOTYPE;
        t->invalid = kind;
        t->ndeps = 0;
        t->fail = FAIL_NONE;
        t->cancel = 0;
        acc_spec plain = {0, p->roots[0].ntiles ? 0 : -1, 0, 0};
        switch (kind) {
        case INV_RED_R:
            t->nacc = 1, t->acc[0] = plain, t->acc[0].mode = RED_MODE | WEFT_R;
            break;
        case INV_RED_PARENT:
            t->nacc = 1, t->acc[0] = (acc_spec){pr, -1, RED_MODE, 0};
            break;
        case INV_RED_TWICE:
            t->nacc = 2, t->acc[0] = plain, t->acc[0].mode = RED_MODE;
            t->acc[1] = plain, t->acc[1].mode = WEFT_R, t->acc[1].orig = 1;
            break;
        case INV_RED_TILE_PARENT:
            t->nacc = 2, t->acc[0] = (acc_spec){pr, 0, RED_MODE, 0}, t->acc[1] = (acc_spec){pr, -1, WEFT_R, 1};
            break;
        case INV_ONGPU:
            t->nacc = 1, t->acc[0] = plain, t->acc[0].mode = WEFT_R | WEFT_ON_GPU(1);
            t->nalt = 1, strcpy(t->alt[0], "gpu"), t->share[0] = 1;
            break;
        case INV_NOGPU:
            t->nalt = 1, snprintf(t->alt[0], sizeof t->alt[0], "gpu:%d", p->ngpu), t->share[0] = 1;
            break;
        case INV_MEMORY:
            t->nalt = 1, strcpy(t->alt[0], "gpu"), t->share[0] = 1;
            break;
        case INV_RED_HALO:
            t->nacc = 2, t->acc[0] = (acc_spec){hr, 0, RED_MODE, 0}, t->acc[1] = (acc_spec){hr, 1, WEFT_R, 1};
            break;
        case INV_TILE_PARENT_W: {
            static const unsigned wm[] = {WEFT_W, WEFT_RW, WEFT_RW | WEFT_COMMUTE};
            int w = (int)rnd(2);
            t->nacc = 2, t->acc[0] = (acc_spec){pr, (int)rnd((uint32_t)p->roots[pr].ntiles), w ? wm[rnd(3)] : WEFT_R, 0};
            t->acc[1] = (acc_spec){pr, -1, w ? WEFT_R : wm[rnd(3)], 1};
            break;
        }
        default:
            t->nacc = 1, t->acc[0] = plain, t->acc[0].mode = WEFT_REDUCE | WEFT_RED_SUM;
            break;
        }
    }
}

static void gen(prog *p, uint64_t seed, unsigned feat) {
    memset(p, 0, sizeof *p);
    R.s = seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
    p->seed = seed;
    p->feat = feat;
    p->ngpu = (feat & F_MULTI) ? 1 + (int)rnd(4) : 1;
    p->check = (feat & F_CHECK) && rnd(4) == 0;
    p->nroots = 1 + (int)rnd(MAXR);
    for (int r = 0; r < p->nroots; r++) {
        root_spec *rs = &p->roots[r];
        rs->rows = rnd(10) < 7 ? 1 : 2 + (int)rnd(2);
        rs->cols = rs->rows == 1 ? 2 + (int)rnd(11) : 2 + (int)rnd((uint32_t)(MAXE / rs->rows - 1));
        rs->n = rs->rows * rs->cols;
        for (int e = 0; e < rs->n; e++) rs->init[e] = (int64_t)(mix64(seed * 131 + (uint64_t)(r * 64 + e)) % 100000);
        if ((feat & F_TILES) && rnd(5) < 2) {
            rs->gr = rs->rows > 1 ? 1 + (int)rnd(2) : 1;
            rs->gc = 1 + (int)rnd(rs->cols < 3 ? (uint32_t)rs->cols : 3);
            while (rs->gr * rs->gc > MAXTL) rs->gc--;
            if (rs->gr * rs->gc < 2) rs->gc = 2;
            rs->halo = (int)rnd(2);
            if ((rs->gr > 1 && rs->halo > rs->rows / rs->gr) || (rs->gc > 1 && rs->halo > rs->cols / rs->gc))
                rs->halo = 0;
            make_tiles(rs);
        }
    }
    p->ntasks = 5 + (int)rnd(MAXT - 4);
    for (int i = 0; i < p->ntasks; i++) gen_task(p, i);
    if ((feat & F_EVICT) && rnd(5) < 2) {
        int most = 1; /* arena allocations of one task on one GPU (256 bytes each, data <= 192) */
        for (int i = 0; i < p->ntasks; i++) {
            int n = 0;
            for (int k = 0; k < p->t[i].nacc; k++) n += !(p->t[i].acc[k].mode & WEFT_HOST);
            if (n > most) most = n;
        }
        p->vgpu_mem = 256 * (size_t)(most + 1 + (int)rnd(3));
    }
    p->sched = (feat & F_SCHED) && rnd(2); /* drawn last: the other features' programs do not change */
}

/* ---- listing ----------------------------------------------------------- */

static void mode_str(unsigned m, char *b, size_t n) {
    const char *s = is_reduce(m) ? "REDUCE+" : is_commute(m) ? "RW|COMMUTE" : (m & WEFT_RW) == WEFT_RW ? "RW"
                    : (m & WEFT_R) ? "R" : (m & WEFT_W) ? "W" : "?";
    snprintf(b, n, "%s%s", s, (m & WEFT_HOST) ? "|HOST" : "");
    if (m & WEFT_ON_GPU_MASK) snprintf(b + strlen(b), n - strlen(b), "|ON_GPU(%d)", on_gpu_index(m));
    if (is_reduce(m) && (m & (WEFT_RW | WEFT_COMMUTE))) snprintf(b + strlen(b), n - strlen(b), "|R/W");
    if (is_reduce(m) && !(m & WEFT_RED_TYPE_MASK)) snprintf(b + strlen(b), n - strlen(b), "(no type)");
}

static void obj_str(const acc_spec *a, char *b, size_t n) {
    if (a->tile < 0) snprintf(b, n, "d%d", a->root);
    else snprintf(b, n, "d%d.t%d", a->root, a->tile);
}

static const char *status_name(int s) {
    switch (s) {
    case WEFT_TASK_COMPLETED: return "COMPLETED";
    case WEFT_TASK_FAILED: return "FAILED";
    case WEFT_TASK_CANCELLED: return "CANCELLED";
    case WEFT_TASK_WAITING: return "WAITING";
    case WEFT_TASK_READY: return "READY";
    case WEFT_TASK_RUNNING: return "RUNNING";
    case WEFT_TASK_ENQUEUED: return "ENQUEUED";
    default: return "?";
    }
}

static void feat_str(unsigned f, char *b, size_t n) {
    b[0] = 0;
    if (f == F_ALL) {
        snprintf(b, n, "all");
        return;
    }
    for (int i = 0; i < NFEAT; i++)
        if (f & (1u << i)) snprintf(b + strlen(b), n - strlen(b), "%s%s", b[0] ? "," : "", feat_names[i]);
    if (!b[0]) snprintf(b, n, "none");
}

/* The listing, into buf (also what the watchdog prints). */
static size_t listing(const prog *p, const int *status, const int *expect, char *buf, size_t cap) {
    size_t o = 0;
#define PUT(...) (o += (size_t)snprintf(buf + o, o < cap ? cap - o : 0, __VA_ARGS__), o = o < cap ? o : cap)
    char fs[160];
    feat_str(p->feat, fs, sizeof fs);
    PUT("program of seed %llu (features %s): devices cpu,vgpu:%d, 2 workers, vgpu_memory %zu%s%s\n",
        (unsigned long long)p->seed, fs, p->ngpu, p->vgpu_mem, p->check ? ", WEFT_VGPU_CHECK=1" : "",
        p->sched ? ", WEFT_VGPU_SCHEDULE=seed" : "");
    for (int r = 0; r < p->nroots; r++) {
        const root_spec *rs = &p->roots[r];
        PUT("  d%d: %d x %d int64", r, rs->rows, rs->cols);
        if (rs->ntiles) {
            PUT(", tiles %d x %d halo %d:", rs->gr, rs->gc, rs->halo);
            for (int t = 0; t < rs->ntiles; t++)
                PUT(" t%d=in(%d,%d %dx%d)span(%d,%d %dx%d)", t, rs->in[t].r0, rs->in[t].c0, rs->in[t].rows,
                    rs->in[t].cols, rs->span[t].r0, rs->span[t].c0, rs->span[t].rows, rs->span[t].cols);
        }
        PUT("\n");
    }
    for (int i = 0; i < p->ntasks; i++) {
        const task_spec *t = &p->t[i];
        PUT("  T%d:", t->id);
        for (int k = 0; k < t->nacc; k++) {
            char ob[24], mb[48];
            obj_str(&t->acc[k], ob, sizeof ob);
            mode_str(t->acc[k].mode, mb, sizeof mb);
            PUT(" %s %s%s", ob, mb, k + 1 < t->nacc ? "," : "");
        }
        PUT("  on [");
        if (!t->nalt) PUT("plain");
        for (int a = 0; a < t->nalt; a++) {
            PUT("%s%s", a ? " | " : "", t->alt[a]);
            if (t->share[a] != 1.0) PUT(" share %.2g", t->share[a]);
        }
        PUT("]");
        if (t->ndeps) {
            PUT(" deps");
            for (int d = 0; d < t->ndeps; d++) PUT(" T%d", p->t[t->deps[d]].id);
        }
        if (t->fail) PUT(" fail=%s", t->fail == FAIL_BODY ? "body" : "kernel");
        if (t->cancel == 1) PUT(" cancel=at-spawn");
        if (t->cancel == 2)
            PUT(" cancel=after-T%d", t->cancel_at < p->ntasks ? p->t[t->cancel_at].id : -1);
        if (t->model_ns) PUT(" kernel %lluus", (unsigned long long)(t->model_ns / 1000));
        if (t->sleep_us) PUT(" sleep %uus", t->sleep_us);
        if (t->invalid) PUT(" INVALID(%s)", inv_names[t->invalid]);
        if (status && !t->invalid) PUT("  -> %s", status_name(status[i]));
        if (expect && !t->invalid && expect[i] != status[i]) PUT(" (model: %s)", status_name(expect[i]));
        PUT("\n");
    }
#undef PUT
    return o;
}

static char hang_listing[16384];
static size_t hang_len;
static void hang_handler(int sig) {
    (void)sig;
    static const char msg[] = "test_fuzz: HANG: the seed below did not finish in 20 s\n";
    if (in_child) _exit(1);
    int fd = saved_err >= 0 ? saved_err : 2;
    ssize_t r = write(fd, msg, sizeof msg - 1);
    r = write(fd, hang_listing, hang_len);
    (void)r;
    _exit(1);
}

/* ---- running ----------------------------------------------------------- */

typedef struct result {
    int status[MAXT];
    int expect[MAXT];
    int cap_report; /* something printed on stderr */
    int hung;       /* some task did not finish in time: the runtime was left as it was */
    char msg[1024]; /* the first difference ("" if none) */
    char captured[2048];
} result;

static int64_t (*mem)[MAXE]; /* the registered memory (a hung run's is leaked) */
static trec recs[MAXT], mrecs[MAXT];
static int cap_fd = -1;

static void fail_msg(result *res, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail_msg(result *res, const char *fmt, ...) {
    if (res->msg[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->msg, sizeof res->msg, fmt, ap);
    va_end(ap);
}

static int build_placements(const prog *p, const task_spec *t, weft_placement *pl) {
    for (int a = 0; a < t->nalt; a++) {
        CHECKF(weft_placement_parse(t->alt[a], &pl[a]) == 0, "%s: %s", t->alt[a], weft_last_error());
        pl[a].share = t->share[a];
        if (t->invalid == INV_MEMORY) pl[a].memory = (p->vgpu_mem ? p->vgpu_mem : (size_t)1 << 30) + 1;
    }
    return t->nalt;
}

/* The sequential model; fills res->expect and compares. */
static void model(const prog *p, result *res, const bool *requested) {
    int64_t val[MAXR][MAXE];
    uint32_t poison[MAXR] = {0}, unknown[MAXR] = {0};
    /* groups per object: index 0 the whole handle, 1 + t tile t */
    int gkind[MAXR][MAXTL + 1] = {{0}}, gfail[MAXR][MAXTL + 1] = {{0}};
    for (int r = 0; r < p->nroots; r++) memcpy(val[r], p->roots[r].init, sizeof val[r]);
    int *st = res->expect;
    for (int i = 0; i < p->ntasks; i++) {
        const task_spec *t = &p->t[i];
        if (t->invalid) continue;
        /* groups: an access touching a group's elements other than as a
         * member of it closes it */
        for (int k = 0; k < t->nacc; k++) {
            const acc_spec *a = &t->acc[k];
            unsigned m = a->mode;
            int kind = is_reduce(m) ? 2 : is_commute(m) ? 1 : 0;
            uint32_t touch = (reads_value(m) || is_commute(m)) ? span_mask(p, a->root, a->tile)
                                                                : in_mask(p, a->root, a->tile);
            const root_spec *rs = &p->roots[a->root];
            for (int o = 0; o <= rs->ntiles; o++) {
                if (!gkind[a->root][o]) continue;
                if (o == a->tile + 1 && gkind[a->root][o] == kind) continue;
                if (touch & in_mask(p, a->root, o - 1)) {
                    if (gfail[a->root][o]) poison[a->root] |= in_mask(p, a->root, o - 1);
                    gkind[a->root][o] = 0;
                    gfail[a->root][o] = 0;
                }
            }
            if (kind && gkind[a->root][a->tile + 1] != kind) {
                gkind[a->root][a->tile + 1] = kind;
                gfail[a->root][a->tile + 1] = 0;
            }
        }
        bool cancelled = false;
        for (int d = 0; d < t->ndeps; d++)
            cancelled |= st[t->deps[d]] == WEFT_TASK_FAILED || st[t->deps[d]] == WEFT_TASK_CANCELLED;
        for (int k = 0; k < t->nacc; k++) {
            const acc_spec *a = &t->acc[k];
            unsigned m = a->mode;
            uint32_t rd = is_reduce(m) ? in_mask(p, a->root, a->tile)
                          : (m & WEFT_R) ? span_mask(p, a->root, a->tile) : 0;
            cancelled |= (rd & poison[a->root]) != 0;
        }
        int s;
        if (cancelled) s = WEFT_TASK_CANCELLED;
        else if (requested[i] && res->status[i] == WEFT_TASK_CANCELLED) s = WEFT_TASK_CANCELLED;
        else if (t->fail) s = WEFT_TASK_FAILED;
        else s = WEFT_TASK_COMPLETED;
        st[i] = s;
        if (s == WEFT_TASK_COMPLETED) {
            trec *mr = &mrecs[i];
            memset(mr, 0, sizeof *mr);
            mr->p = p;
            mr->ts = t;
            mr->on_gpu = recs[i].on_gpu;
            static int64_t tmp[MAXA][MAXE];
            for (int k = 0; k < t->nacc; k++) {
                const acc_spec *a = &t->acc[k];
                const root_spec *rs = &p->roots[a->root];
                view v = acc_view(p, a);
                if (is_reduce(a->mode)) {
                    memset(tmp[k], 0, sizeof tmp[k]);
                    mr->ptr[k] = tmp[k];
                    mr->pitch[k] = (size_t)v.cols * 8;
                } else {
                    mr->ptr[k] = &val[a->root][v.base];
                    mr->pitch[k] = a->tile < 0 ? (size_t)rs->n * 8 : (size_t)rs->cols * 8;
                }
            }
            for (int dom = 0; dom <= MAXG; dom++) compute(mr, dom, true);
            for (int k = 0; k < t->nacc; k++) {
                const acc_spec *a = &t->acc[k];
                view v = acc_view(p, a);
                if (is_reduce(a->mode))
                    for (int x = 0; x < v.rows; x++)
                        for (int y = 0; y < v.cols; y++) val[a->root][v.base + x * v.gstride + y] += tmp[k][x * v.cols + y];
                if ((a->mode & WEFT_W) && !is_commute(a->mode) && !is_reduce(a->mode)) {
                    poison[a->root] &= ~in_mask(p, a->root, a->tile);
                    unknown[a->root] &= ~in_mask(p, a->root, a->tile);
                }
            }
        } else {
            for (int k = 0; k < t->nacc; k++) {
                const acc_spec *a = &t->acc[k];
                unsigned m = a->mode;
                if (is_reduce(m) || is_commute(m)) {
                    gfail[a->root][a->tile + 1] = 1;
                    if (is_commute(m) && s == WEFT_TASK_FAILED && !strict_fail)
                        unknown[a->root] |= in_mask(p, a->root, a->tile);
                }
                else if (m & WEFT_W) {
                    poison[a->root] |= in_mask(p, a->root, a->tile);
                    if (s == WEFT_TASK_FAILED && (strict_fail ? !(m & WEFT_R) : 1))
                        unknown[a->root] |= in_mask(p, a->root, a->tile);
                }
            }
        }
    }
    /* compare: statuses in spawn order, then reads, then the data */
    for (int i = 0; i < p->ntasks; i++) {
        const task_spec *t = &p->t[i];
        if (t->invalid) continue;
        if (res->status[i] != st[i]) {
            fail_msg(res, "T%d ended %s, the model says %s", t->id, status_name(res->status[i]), status_name(st[i]));
            return;
        }
    }
    for (int i = 0; i < p->ntasks; i++) {
        const task_spec *t = &p->t[i];
        if (t->invalid || st[i] != WEFT_TASK_COMPLETED) continue;
        for (int k = 0; k < t->nacc; k++) {
            const acc_spec *a = &t->acc[k];
            if (!reads_value(a->mode) && !is_reduce(a->mode)) continue;
            view v = acc_view(p, a);
            for (int x = 0; x < v.rows * v.cols; x++)
                if (recs[i].readv[k][x] != mrecs[i].readv[k][x]) {
                    char ob[24], mb[48];
                    obj_str(a, ob, sizeof ob);
                    mode_str(a->mode, mb, sizeof mb);
                    int g = v.base + (x / v.cols) * v.gstride + x % v.cols;
                    fail_msg(res,
                             "T%d (ran on %s) read %s (access %d, %s) element %d (of d%d) = %lld, the model "
                             "says %lld%s",
                             t->id, recs[i].on_gpu ? "GPUs" : "the CPU", ob, k, mb, g, a->root,
                             (long long)recs[i].readv[k][x], (long long)mrecs[i].readv[k][x],
                             is_reduce(a->mode) ? " (a reduction's private copy must start as 0)" : "");
                    return;
                }
        }
    }
    for (int r = 0; r < p->nroots; r++)
        for (int e = 0; e < p->roots[r].n; e++) {
            if (unknown[r] & (1u << e)) continue;
            if (mem[r][e] != val[r][e]) {
                fail_msg(res, "after unregister d%d[%d] = %lld, the model says %lld", r, e, (long long)mem[r][e],
                         (long long)val[r][e]);
                return;
            }
        }
}

/* Run p once; 0 if it agrees with the model, 1 with res->msg otherwise. */
static int run_prog(const prog *p, result *res) {
    memset(res, 0, sizeof *res);
    hang_len = listing(p, NULL, NULL, hang_listing, sizeof hang_listing);
    alarm(20);
    /* stderr into a file while the runtime runs */
    fflush(stderr);
    if (cap_fd >= 0) {
        CHECK(ftruncate(cap_fd, 0) == 0);
        CHECK(lseek(cap_fd, 0, SEEK_SET) == 0);
        dup2(cap_fd, 2);
    }
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = 2;
    cfg.trace_path = NULL;
    char devs[32];
    snprintf(devs, sizeof devs, "cpu,vgpu:%d", p->ngpu);
    cfg.devices = devs;
    cfg.vgpu_memory = p->vgpu_mem;
    if (p->check) setenv("WEFT_VGPU_CHECK", "1", 1);
    else unsetenv("WEFT_VGPU_CHECK");
    char sched[24];
    snprintf(sched, sizeof sched, "%llu", (unsigned long long)p->seed);
    if (p->sched) setenv("WEFT_VGPU_SCHEDULE", sched, 1);
    else unsetenv("WEFT_VGPU_SCHEDULE");
    weft_runtime *rt = NULL;
    mem = calloc(MAXR, sizeof *mem);
    CHECK(mem != NULL);
    CHECKF(weft_runtime_create(&cfg, &rt) == 0, "%s", weft_last_error());
    unsetenv("WEFT_VGPU_CHECK");
    unsetenv("WEFT_VGPU_SCHEDULE");
    weft_data *h[MAXR], *tiles[MAXR][MAXTL];
    for (int r = 0; r < p->nroots; r++) {
        const root_spec *rs = &p->roots[r];
        memcpy(mem[r], rs->init, sizeof mem[r]);
        CHECK_OK(weft_data_register(rt, mem[r], (size_t)rs->n * 8, &h[r]));
        if (rs->ntiles) {
            weft_tiling tl = {8, (size_t)rs->rows, (size_t)rs->cols, 0, (unsigned)rs->gr, (unsigned)rs->gc,
                              (unsigned)rs->halo};
            CHECKF(weft_data_partition(h[r], &tl, tiles[r]) == 0, "%s", weft_last_error());
            for (int t = 0; t < rs->ntiles; t++) {
                weft_tile_info ti;
                CHECK_OK(weft_data_tile_info(tiles[r][t], &ti));
                rect in = rs->in[t], s = rs->span[t];
                if (ti.in_row0 != (size_t)in.r0 || ti.in_col0 != (size_t)in.c0 || ti.in_rows != (size_t)in.rows ||
                    ti.in_cols != (size_t)in.cols || ti.row0 != (size_t)s.r0 || ti.col0 != (size_t)s.c0 ||
                    ti.rows != (size_t)s.rows || ti.cols != (size_t)s.cols)
                    fail_msg(res, "d%d tile %d: weft_data_tile_info differs from the tester's geometry", r, t);
            }
        }
    }
    weft_task *th[MAXT] = {0};
    bool requested[MAXT] = {0};
    for (int i = 0; i < p->ntasks; i++) {
        const task_spec *t = &p->t[i];
        trec *rc = &recs[i];
        memset(rc, 0, sizeof *rc);
        rc->p = p;
        rc->ts = t;
        weft_access acc[MAXA];
        for (int k = 0; k < t->nacc; k++)
            acc[k] = (weft_access){t->acc[k].tile < 0 ? h[t->acc[k].root] : tiles[t->acc[k].root][t->acc[k].tile],
                                   t->acc[k].mode};
        weft_placement pl[MAXALT];
        weft_task *deps[MAXD];
        for (int d = 0; d < t->ndeps; d++) deps[d] = th[t->deps[d]];
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.body = body;
        d.arg = rc;
        d.accesses = acc;
        d.naccesses = (size_t)t->nacc;
        d.deps = deps;
        d.ndeps = (size_t)t->ndeps;
        d.placements = pl;
        d.nplacements = (size_t)build_placements(p, t, pl);
        char name[16];
        snprintf(name, sizeof name, "T%d", t->id);
        d.name = name;
        int rcode = weft_spawn(rt, &d, &th[i]);
        if (t->invalid) {
            /* a placement the runtime lacks the devices for: WEFT_ENODEV;
             * but a malformed request comes first (an access ON_GPU(1) of
             * the one-GPU placement that asks for what the runtime lacks) */
            bool malformed = false;
            for (int k = 0; k < t->nacc; k++) malformed |= on_gpu_index(t->acc[k].mode) >= 1;
            int want = (t->invalid == INV_NOGPU || t->invalid == INV_MEMORY) && !malformed ? WEFT_ENODEV : WEFT_EINVAL;
            if (rcode != want)
                fail_msg(res, "T%d (%s) spawned with %s, weft.h says %s", t->id, inv_names[t->invalid],
                         weft_strerror(rcode), weft_strerror(want));
            if (rcode == 0) weft_task_release(th[i]);
            th[i] = NULL;
            continue;
        }
        if (rcode != 0) {
            fail_msg(res, "T%d: weft_spawn returned %s: %s", t->id, weft_strerror(rcode), weft_last_error());
            th[i] = NULL;
            continue;
        }
        if (t->cancel == 1) {
            CHECK_OK(weft_task_cancel(th[i]));
            requested[i] = true;
        }
        for (int j = 0; j < i; j++)
            if (p->t[j].cancel == 2 && p->t[j].cancel_at == i && th[j]) {
                CHECK_OK(weft_task_cancel(th[j]));
                requested[j] = true;
            }
    }
    for (int j = 0; j < p->ntasks; j++) /* cancels due after the last spawn */
        if (p->t[j].cancel == 2 && p->t[j].cancel_at >= p->ntasks && th[j]) {
            CHECK_OK(weft_task_cancel(th[j]));
            requested[j] = true;
        }
    /* wait for each task (in reverse order half the time), then for all */
    bool rev = (p->seed & 1) != 0;
    uint64_t deadline = now_ns() + (in_child ? 3ull : 15ull) * 1000000000u;
    for (int x = 0; x < p->ntasks; x++) {
        int i = rev ? p->ntasks - 1 - x : x;
        if (!th[i]) {
            res->status[i] = -1;
            continue;
        }
        uint64_t now = now_ns();
        int w = weft_task_timedwait(th[i], deadline > now ? deadline - now : 0);
        if (w == WEFT_ETIMEDOUT) { /* a hang: report it, leave the runtime as it is */
            char b[768];
            size_t o = 0;
            for (int j = 0; j < p->ntasks && o < sizeof b - 40; j++) {
                weft_task_status s;
                if (th[j] && weft_task_status_get(th[j], &s) == 0 && s != WEFT_TASK_COMPLETED &&
                    s != WEFT_TASK_FAILED && s != WEFT_TASK_CANCELLED)
                    o += (size_t)snprintf(b + o, sizeof b - o, " T%d %s", p->t[j].id, status_name(s));
            }
            b[o < sizeof b ? o : sizeof b - 1] = 0;
            snprintf(res->msg, sizeof res->msg, "HANG: tasks not finished after 15 s:%s", b);
            res->hung = 1;
            for (int j = 0; j < p->ntasks; j++) {
                weft_task_status s;
                res->status[j] = th[j] && weft_task_status_get(th[j], &s) == 0 ? (int)s : -1;
                res->expect[j] = res->status[j];
            }
            alarm(0);
            fflush(stderr);
            if (cap_fd >= 0) dup2(saved_err, 2);
            return 1;
        }
        weft_task_status s;
        CHECK_OK(weft_task_status_get(th[i], &s));
        res->status[i] = (int)s;
        int want = s == WEFT_TASK_COMPLETED ? 0 : s == WEFT_TASK_FAILED ? WEFT_ETASKFAILED
                   : s == WEFT_TASK_CANCELLED ? WEFT_ECANCELLED : 12345;
        if (w != want)
            fail_msg(res, "T%d: weft_task_wait returned %s with status %s", p->t[i].id, weft_strerror(w),
                     status_name(s));
        if (recs[i].bad) fail_msg(res, "T%d: %s", p->t[i].id, recs[i].badmsg);
    }
    int wa = weft_wait_all(rt);
    if (wa != 0 && wa != WEFT_ETASKFAILED) fail_msg(res, "weft_wait_all returned %s", weft_strerror(wa));
    for (int i = 0; i < p->ntasks; i++) weft_task_release(th[i]);
    for (int r = 0; r < p->nroots; r++) {
        int u = weft_data_unregister(h[r]);
        if (u != 0) fail_msg(res, "weft_data_unregister(d%d) returned %s: %s", r, weft_strerror(u), weft_last_error());
    }
    for (int g = 1; g <= p->ngpu; g++) {
        weft_device_info info;
        CHECK_OK(weft_device_info_get(rt, (unsigned)g, &info));
        if (info.memory_used != 0)
            fail_msg(res, "GPU %d keeps %zu bytes after every handle was unregistered", g - 1, info.memory_used);
    }
    (void)weft_runtime_destroy(rt);
    alarm(0);
    int64_t(*m)[MAXE] = mem;
    fflush(stderr);
    if (cap_fd >= 0) {
        dup2(saved_err, 2);
        off_t n = lseek(cap_fd, 0, SEEK_CUR);
        if (n > 0) {
            CHECK(lseek(cap_fd, 0, SEEK_SET) == 0);
            ssize_t got = read(cap_fd, res->captured, sizeof res->captured - 1);
            res->captured[got > 0 ? got : 0] = 0;
            res->cap_report = 1;
        }
    }
    if (!res->msg[0]) model(p, res, requested);
    else
        for (int i = 0; i < p->ntasks; i++) res->expect[i] = res->status[i];
    free(m);
    mem = NULL;
    /* the checking mode's reports (nothing here violates a rule on purpose;
     * the invalid spawns' refusals are not printed) */
    if (res->cap_report && p->check && !res->msg[0])
        fail_msg(res, "the checking mode printed a report: %s", res->captured);
    return res->msg[0] != 0;
}

/* ---- minimisation ------------------------------------------------------ */

static void drop_task(const prog *p, int i, prog *q) {
    *q = *p;
    q->ntasks = p->ntasks - 1;
    for (int j = i; j < q->ntasks; j++) q->t[j] = p->t[j + 1];
    for (int j = 0; j < q->ntasks; j++) {
        task_spec *t = &q->t[j];
        int nd = 0;
        for (int d = 0; d < t->ndeps; d++)
            if (t->deps[d] != i) t->deps[nd++] = t->deps[d] > i ? t->deps[d] - 1 : t->deps[d];
        t->ndeps = nd;
        if (t->cancel == 2 && t->cancel_at > i) t->cancel_at--;
    }
}

static void drop_access(const prog *p, int i, int k, prog *q) {
    *q = *p;
    task_spec *t = &q->t[i];
    for (int j = k; j + 1 < t->nacc; j++) t->acc[j] = t->acc[j + 1];
    t->nacc--;
}

/* Whether q still mismatches (in any of `tries` runs), each run in a child
 * process (a hang ends it; the parent may hold a hung runtime). */
static bool still_fails(const prog *q, int tries) {
    for (int n = 0; n < tries; n++) {
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            in_child = 1;
            int dn = open("/dev/null", O_WRONLY);
            if (dn >= 0 && !getenv("FUZZ_CHILD_DEBUG")) dup2(dn, 1);
            result res;
            _exit(run_prog(q, &res) ? 1 : 0);
        }
        int st = 0;
        while (waitpid(pid, &st, 0) < 0) {
        }
        if (getenv("FUZZ_CHILD_DEBUG")) fprintf(stderr, "child: %d tasks, status %x\n", q->ntasks, st);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return true;
    }
    return false;
}

/* "--keep 1,4,7 --drop 4.0": the tasks of these numbers only, without
 * access 0 (as generated) of T4. */
static void apply_keep(prog *p, const char *keep, const char *drop) {
    if (keep) {
        bool want[MAXT] = {0};
        char buf[512];
        snprintf(buf, sizeof buf, "%s", keep);
        for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ","))
            if (atoi(tok) >= 0 && atoi(tok) < MAXT) want[atoi(tok)] = true;
        for (int i = p->ntasks - 1; i >= 0; i--)
            if (!want[p->t[i].id]) {
                prog q;
                drop_task(p, i, &q);
                *p = q;
            }
    }
    if (drop) {
        char buf[512];
        snprintf(buf, sizeof buf, "%s", drop);
        for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
            int id = atoi(tok), a = strchr(tok, '.') ? atoi(strchr(tok, '.') + 1) : -1;
            for (int i = 0; i < p->ntasks; i++)
                for (int k = 0; k < p->t[i].nacc; k++)
                    if (p->t[i].id == id && p->t[i].acc[k].orig == a) {
                        prog q;
                        drop_access(p, i, k, &q);
                        *p = q;
                    }
        }
    }
}

static void replay_args(const prog *p, char *b, size_t n) {
    char fs[160];
    feat_str(p->feat, fs, sizeof fs);
    size_t o = (size_t)snprintf(b, n, "--seed %llu --features %s --keep ", (unsigned long long)p->seed, fs);
    for (int i = 0; i < p->ntasks && o < n; i++) o += (size_t)snprintf(b + o, n - o, "%s%d", i ? "," : "", p->t[i].id);
    bool any = false;
    prog full;
    gen(&full, p->seed, p->feat);
    for (int i = 0; i < p->ntasks && o < n; i++) {
        const task_spec *g = &full.t[p->t[i].id];
        for (int a = 0; a < g->nacc && o < n; a++) {
            bool kept = false;
            for (int k = 0; k < p->t[i].nacc; k++) kept |= p->t[i].acc[k].orig == a;
            if (!kept) o += (size_t)snprintf(b + o, n - o, "%s%d.%d", any ? "," : " --drop ", p->t[i].id, a), any = true;
        }
    }
}

static void minimise(prog *p) {
    uint64_t end = now_ns() + 60ull * 1000000000u;
    bool changed = true;
    for (int pass = 0; pass < 3 && changed && now_ns() < end; pass++) {
        changed = false;
        for (int i = p->ntasks - 1; i >= 0 && now_ns() < end; i--) {
            prog q;
            drop_task(p, i, &q);
            if (q.ntasks > 0 && still_fails(&q, 4)) {
                *p = q;
                changed = true;
            }
        }
        for (int i = p->ntasks - 1; i >= 0 && now_ns() < end; i--)
            for (int k = p->t[i].nacc - 1; k >= 0 && p->t[i].nacc > 1 && !p->t[i].invalid; k--) {
                prog q;
                drop_access(p, i, k, &q);
                if (still_fails(&q, 4)) {
                    *p = q;
                    changed = true;
                }
            }
    }
}

/* ---- main -------------------------------------------------------------- */

static unsigned parse_features(const char *s) {
    unsigned f = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        bool minus = tok[0] == '-', plus = tok[0] == '+';
        const char *name = tok + (minus || plus);
        unsigned bit = 0;
        if (!strcmp(name, "all")) bit = F_ALL;
        else if (!strcmp(name, "none")) bit = 0, f = minus ? f : 0;
        else {
            for (int i = 0; i < NFEAT; i++)
                if (!strcmp(name, feat_names[i])) bit = 1u << i;
            if (!strcmp(name, "multi")) bit = F_MULTI;
            if (!bit) {
                fprintf(stderr, "test_fuzz: unknown feature '%s' (known: all, none", name);
                for (int i = 0; i < NFEAT; i++) fprintf(stderr, ", %s", feat_names[i]);
                fprintf(stderr, ")\n");
                exit(2);
            }
        }
        if (minus) f &= ~bit;
        else f |= bit;
    }
    return f;
}

static void usage(void) {
    fprintf(stderr, "usage: test_fuzz [--seeds N] [--first S] [--seed S] [--features LIST] [--no-minimise] "
                    "[--quiet]\n");
    exit(2);
}

int main(int argc, char **argv) {
    uint64_t first = 1, nseeds = 200;
    const char *keep = NULL, *drop = NULL;
    long long one = -1;
    unsigned feat = F_ALL;
    bool do_min = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seeds") && i + 1 < argc) nseeds = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--first") && i + 1 < argc) first = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) one = strtoll(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--features") && i + 1 < argc) feat = parse_features(argv[++i]);
        else if (!strcmp(argv[i], "--no-minimise") || !strcmp(argv[i], "--no-minimize")) do_min = false;
        else if (!strcmp(argv[i], "--quiet")) quiet = 1;
        else if (!strcmp(argv[i], "--strict-fail")) strict_fail = 1;
        else if (!strcmp(argv[i], "--keep") && i + 1 < argc) keep = argv[++i];
        else if (!strcmp(argv[i], "--drop") && i + 1 < argc) drop = argv[++i];
        else usage();
    }
    if (test_small() && one < 0 && nseeds > 200) nseeds = nseeds / 8 > 50 ? nseeds / 8 : 50;
    setvbuf(stdout, NULL, _IOLBF, 0);
    saved_err = dup(2);
    char tmpl[] = "/tmp/test_fuzz.XXXXXX";
    cap_fd = mkstemp(tmpl);
    if (cap_fd >= 0) unlink(tmpl);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = hang_handler;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);

    if (one >= 0) {
        verbose = 1;
        first = (uint64_t)one;
        nseeds = 1;
    }
    static prog p;
    static result res;
    static char lbuf[16384];
    uint64_t mismatches = 0, t0 = now_ns(), tasks = 0;
    for (uint64_t s = first; s < first + nseeds; s++) {
        gen(&p, s, feat);
        if (one >= 0) apply_keep(&p, keep, drop);
        tasks += (uint64_t)p.ntasks;
        int bad = run_prog(&p, &res);
        if (verbose || bad) {
            listing(&p, res.status, res.expect, lbuf, sizeof lbuf);
            out("%s%s", bad ? "MISMATCH " : "", lbuf);
            if (res.captured[0]) out("stderr during the run:\n%s\n", res.captured);
            out("%s: %s\n", bad ? "MISMATCH" : "ok", bad ? res.msg : "agrees with the model");
        }
        if (bad) {
            mismatches++;
            if (do_min && one < 0) {
                prog q = p;
                minimise(&q);
                result r2;
                if (run_prog(&q, &r2)) {
                    char ra[1024];
                    replay_args(&q, ra, sizeof ra);
                    listing(&q, r2.status, r2.expect, lbuf, sizeof lbuf);
                    out("minimised (seed %llu; replay: test_fuzz %s):\n%s%s\n", (unsigned long long)s, ra, lbuf,
                        r2.msg);
                } else {
                    out("minimised (seed %llu): the minimised program did not mismatch again\n",
                        (unsigned long long)s);
                }
            }
        }
    }
    double secs = (double)(now_ns() - t0) / 1e9;
    char fs[160];
    feat_str(feat, fs, sizeof fs);
    if (!quiet || mismatches)
        out("test_fuzz: %llu seeds (%llu..%llu, features %s), %llu tasks, %llu mismatches, %.1f s (%.0f seeds/s)\n",
            (unsigned long long)nseeds, (unsigned long long)first, (unsigned long long)(first + nseeds - 1), fs,
            (unsigned long long)tasks, (unsigned long long)mismatches, secs, (double)nseeds / (secs > 0 ? secs : 1));
    return mismatches ? 1 : 0;
}
