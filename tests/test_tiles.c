/* Tiles: an array partitioned into a grid of tiles with halos, each a
 * handle of its own.  Stencil steps with each tile on its own device (the
 * halos copied from the neighbours' devices) against a sequential run, bit
 * for bit; the parent used whole between steps (reassembled from the tiles,
 * the tiles made again from it); padding between rows never touched; random
 * programs with small GPUs (eviction) and in the checking mode, with random
 * tasks on single tiles between the steps: reductions (sum, min, max of
 * uint32 or float: private copies of the interior combined in spawn order,
 * so that float sums match bit for bit), updates in place and reads that
 * compare a tile and its halo with the sequential run; bad tilings and
 * misuse (reductions included) refused with clear errors. */
#include "check.h"
#include "testing.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>


static void spawn(weft_runtime *rt, const char *where, weft_body_fn body, void *arg, const weft_access *acc,
                  size_t nacc) {
    (void)test_spawn_at(rt, where, 0.25, body, arg, acc, nacc, false);
}

/* ---- the computation ------------------------------------------------------ */

/* One stencil step over the interior of a tile: dst(r, c) = 3 src(r, c) +
 * the four neighbours inside the array + salt, in uint32 (bit exact).  s, d
 * point at the tile's span (row0, col0) with pitches sp, dp bytes. */
typedef struct step {
    weft_tile_info ti;
    size_t rows, cols;                 /* the whole array */
    const uint32_t *s;
    uint32_t *d;
    size_t sp, dp;
    uint32_t salt;
    bool flt;                          /* the elements are floats (else uint32) */
} step;

#define AT(p, pitch, r, c) (*(uint32_t *)((char *)(p) + (r) * (pitch) + (c) * sizeof(uint32_t)))

/* The arrays are 32-bit words: uint32 or the bits of a float. */
static float F(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static uint32_t U(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static int step_kernel(void *arg) {
    step *k = arg;
    const weft_tile_info *t = &k->ti;
    for (size_t r = t->in_row0; r < t->in_row0 + t->in_rows; r++)
        for (size_t c = t->in_col0; c < t->in_col0 + t->in_cols; c++) {
            size_t lr = r - t->row0, lc = c - t->col0;
            if (k->flt) { /* the same sums, rounded in the same order */
                float v = 3.0f * F(AT(k->s, k->sp, lr, lc)) + (float)k->salt;
                if (r > 0) v += F(AT(k->s, k->sp, lr - 1, lc));
                if (r + 1 < k->rows) v += F(AT(k->s, k->sp, lr + 1, lc));
                if (c > 0) v += F(AT(k->s, k->sp, lr, lc - 1));
                if (c + 1 < k->cols) v += F(AT(k->s, k->sp, lr, lc + 1));
                AT(k->d, k->dp, lr, lc) = U(v);
                continue;
            }
            uint32_t v = 3u * AT(k->s, k->sp, lr, lc) + k->salt;
            if (r > 0) v += AT(k->s, k->sp, lr - 1, lc);
            if (r + 1 < k->rows) v += AT(k->s, k->sp, lr + 1, lc);
            if (c > 0) v += AT(k->s, k->sp, lr, lc - 1);
            if (c + 1 < k->cols) v += AT(k->s, k->sp, lr, lc + 1);
            AT(k->d, k->dp, lr, lc) = v;
        }
    return 0;
}

static int step_body(weft_ctx *ctx, void *arg) {
    step *k = arg;
    k->s = weft_ctx_data(ctx, 0);
    k->d = weft_ctx_data(ctx, 1);
    k->sp = weft_ctx_pitch(ctx, 0);
    k->dp = weft_ctx_pitch(ctx, 1);
    if (weft_ctx_gpu_count(ctx) == 0) return step_kernel(k);
    /* for the checking mode: it reads its span, writes each row of its
     * interior (not the halo: a write-only range is filled with garbage
     * before the kernel runs) */
    enum { MAXR = 64 };
    weft_range rw[1 + MAXR];
    size_t n = 0;
    rw[n++] = (weft_range){(void *)k->s, k->ti.rows * k->sp, WEFT_R};
    const weft_tile_info *t = &k->ti;
    for (size_t r = 0; r < t->in_rows && n < 1 + MAXR; r++)
        rw[n++] = (weft_range){(char *)k->d + (t->in_row0 - t->row0 + r) * k->dp + (t->in_col0 - t->col0) * 4,
                               t->in_cols * 4, WEFT_W};
    return weft_ctx_queue_rw(ctx, 0, step_kernel, k, 0, rw, n);
}

/* A whole-array task (the parent): every element times 5 plus its row. */
typedef struct whole {
    uint32_t *p;
    size_t rows, cols, pitch;
    const uint32_t *want;              /* a reader: compare with this (the sequential run's) */
    int *mismatch;
    bool flt;
} whole;
static int whole_kernel(void *arg) {
    whole *k = arg;
    for (size_t r = 0; r < k->rows; r++)
        for (size_t c = 0; c < k->cols; c++) {
            if (k->want) {
                if (AT(k->p, k->pitch, r, c) != k->want[r * k->cols + c]) __atomic_store_n(k->mismatch, 1, __ATOMIC_RELAXED);
            } else if (k->flt) {
                AT(k->p, k->pitch, r, c) = U(F(AT(k->p, k->pitch, r, c)) * 5.0f + (float)r);
            } else {
                AT(k->p, k->pitch, r, c) = AT(k->p, k->pitch, r, c) * 5u + (uint32_t)r;
            }
        }
    return 0;
}
static int whole_body(weft_ctx *ctx, void *arg) {
    whole *k = arg;
    k->p = weft_ctx_data(ctx, 0);
    if (weft_ctx_gpu_count(ctx) == 0) return whole_kernel(k);
    weft_range rw = {k->p, k->rows * k->pitch, k->want ? WEFT_R : WEFT_RW};
    return weft_ctx_queue_rw(ctx, 0, whole_kernel, k, 0, &rw, 1);
}

/* The sequential run: the same kernels on plain arrays (pitch cols). */
static void ref_step(const uint32_t *s, uint32_t *d, size_t rows, size_t cols, uint32_t salt, bool flt) {
    step k = {{0, 0, rows, cols, 0, 0, rows, cols, 0}, rows, cols, s, d, cols * 4, cols * 4, salt, flt};
    step_kernel(&k);
}
static void ref_whole(uint32_t *p, size_t rows, size_t cols, bool flt) {
    whole k = {p, rows, cols, cols * 4, NULL, NULL, flt};
    whole_kernel(&k);
}

/* ---- tasks on one tile: reductions, updates, checks ------------------------ */

/* a OP b for a reduction key (WEFT_RED_SUM/MIN/MAX | WEFT_RED_U32/F32), as
 * weft.h defines the operators (no NaN here; -0.0 below +0.0). */
static uint32_t op2(unsigned key, uint32_t a, uint32_t b) {
    unsigned op = key & WEFT_RED_OP_MASK;
    if ((key & WEFT_RED_TYPE_MASK) == WEFT_RED_U32)
        return op == WEFT_RED_SUM ? a + b : op == WEFT_RED_MIN ? (b < a ? b : a) : (b > a ? b : a);
    float x = F(a), y = F(b);
    if (op == WEFT_RED_SUM) return U(x + y);
    bool less = y < x || (y == x && signbit(y) && !signbit(x));
    bool more = y > x || (y == x && !signbit(y) && signbit(x));
    return (op == WEFT_RED_MIN ? less : more) ? b : a;
}
static uint32_t identity(unsigned key) {
    unsigned op = key & WEFT_RED_OP_MASK;
    if ((key & WEFT_RED_TYPE_MASK) == WEFT_RED_U32) return op == WEFT_RED_MIN ? UINT32_MAX : 0;
    return U(op == WEFT_RED_SUM ? -0.0f : op == WEFT_RED_MIN ? INFINITY : -INFINITY);
}

/* A reducing task: nterms contributions to each element of a tile's
 * interior, folded into its private copy (the interior's shape). */
typedef struct tred {
    weft_tile_info ti;
    unsigned key;
    uint64_t salt;
    int nterms;
    bool host;                         /* WEFT_HOST: its copy in host memory wherever it runs */
    bool fail;                         /* the body fails, after its work (which must not count) */
    uint32_t *p;
    size_t pitch;
} tred;
/* Floats of many magnitudes, so that the order of a sum shows in its bits. */
static uint32_t term(const tred *k, size_t i, int j) {
    uint64_t h = mix64(k->salt * 0x9e3779b97f4a7c15ull + i * 131 + (uint64_t)j);
    if ((k->key & WEFT_RED_TYPE_MASK) == WEFT_RED_U32) return (uint32_t)h;
    return U((float)((int)(h % 20001) - 10000) * ldexpf(1.0f, (int)((h >> 32) % 40) - 12));
}
static void tred_work(const tred *k, uint32_t *p, size_t pitch) {
    for (size_t r = 0; r < k->ti.in_rows; r++)
        for (size_t c = 0; c < k->ti.in_cols; c++)
            for (int j = 0; j < k->nterms; j++)
                AT(p, pitch, r, c) = op2(k->key, AT(p, pitch, r, c), term(k, r * k->ti.in_cols + c, j));
}
static int tred_kernel(void *arg) {
    tred *k = arg;
    for (size_t r = 0; r < k->ti.in_rows; r++) /* it starts as the identity */
        for (size_t c = 0; c < k->ti.in_cols; c++)
            if (AT(k->p, k->pitch, r, c) != identity(k->key)) return 3;
    tred_work(k, k->p, k->pitch);
    return 0;
}
static int tred_body(weft_ctx *ctx, void *arg) {
    tred *k = arg;
    k->p = weft_ctx_data(ctx, 0);
    k->pitch = weft_ctx_pitch(ctx, 0);
    if (!k->p || k->pitch != k->ti.in_cols * 4) return 4; /* the interior's rows, packed */
    if (k->fail) return tred_kernel(k) == 0 ? 5 : 6;
    if (weft_ctx_gpu_count(ctx) == 0 || k->host) return tred_kernel(k);
    weft_range rw = {k->p, k->ti.in_rows * k->pitch, WEFT_RW};
    return weft_ctx_queue_rw(ctx, 0, tred_kernel, k, 0, &rw, 1);
}
/* The sequential run: an identity-filled temporary with the task's
 * contributions, combined into the value. */
static void ref_tred(const tred *k, uint32_t *ref, size_t cols) {
    size_t n = k->ti.in_rows * k->ti.in_cols;
    uint32_t *tmp = malloc(n * 4);
    CHECK(tmp);
    for (size_t i = 0; i < n; i++) tmp[i] = identity(k->key);
    tred_work(k, tmp, k->ti.in_cols * 4);
    for (size_t r = 0; r < k->ti.in_rows; r++)
        for (size_t c = 0; c < k->ti.in_cols; c++) {
            uint32_t *v = &ref[(k->ti.in_row0 + r) * cols + k->ti.in_col0 + c];
            *v = op2(k->key, *v, tmp[r * k->ti.in_cols + c]);
        }
    free(tmp);
}

/* An update in place of a tile's interior (WEFT_RW): v = 3 v + 1. */
typedef struct tupd {
    weft_tile_info ti;                 /* (row0, col0 0 for the sequential run's whole array) */
    bool flt;
    uint32_t *p;
    size_t pitch;
} tupd;
static int tupd_kernel(void *arg) {
    tupd *k = arg;
    const weft_tile_info *t = &k->ti;
    for (size_t r = t->in_row0 - t->row0; r < t->in_row0 - t->row0 + t->in_rows; r++)
        for (size_t c = t->in_col0 - t->col0; c < t->in_col0 - t->col0 + t->in_cols; c++) {
            uint32_t v = AT(k->p, k->pitch, r, c);
            AT(k->p, k->pitch, r, c) = k->flt ? U(F(v) * 3.0f + 1.0f) : v * 3u + 1u;
        }
    return 0;
}
static int tupd_body(weft_ctx *ctx, void *arg) {
    tupd *k = arg;
    k->p = weft_ctx_data(ctx, 0);
    k->pitch = weft_ctx_pitch(ctx, 0);
    if (weft_ctx_gpu_count(ctx) == 0) return tupd_kernel(k);
    enum { MAXR = 64 };
    weft_range rw[MAXR];
    size_t n = 0;
    const weft_tile_info *t = &k->ti;
    for (size_t r = 0; r < t->in_rows && n < MAXR; r++)
        rw[n++] = (weft_range){(char *)k->p + (t->in_row0 - t->row0 + r) * k->pitch + (t->in_col0 - t->col0) * 4,
                               t->in_cols * 4, WEFT_RW};
    return weft_ctx_queue_rw(ctx, 0, tupd_kernel, k, 0, rw, n);
}
static void ref_tupd(const tupd *k, uint32_t *ref, size_t cols) {
    tupd x = *k;
    x.ti.row0 = x.ti.col0 = 0;
    x.p = ref;
    x.pitch = cols * 4;
    tupd_kernel(&x);
}

/* A read of a tile, halo included, compared with the sequential run's
 * array at that point (want). */
typedef struct tchk {
    weft_tile_info ti;
    const uint32_t *want;
    size_t cols;
    const uint32_t *p;
    size_t pitch;
    int *mismatch;
} tchk;
static int tchk_kernel(void *arg) {
    tchk *k = arg;
    for (size_t r = 0; r < k->ti.rows; r++)
        for (size_t c = 0; c < k->ti.cols; c++)
            if (AT(k->p, k->pitch, r, c) != k->want[(k->ti.row0 + r) * k->cols + k->ti.col0 + c])
                __atomic_store_n(k->mismatch, 1, __ATOMIC_RELAXED);
    return 0;
}
static int tchk_body(weft_ctx *ctx, void *arg) {
    tchk *k = arg;
    k->p = weft_ctx_data(ctx, 0);
    k->pitch = weft_ctx_pitch(ctx, 0);
    if (weft_ctx_gpu_count(ctx) == 0) return tchk_kernel(k);
    weft_range rr = {(void *)k->p, k->ti.rows * k->pitch, WEFT_R};
    return weft_ctx_queue_rw(ctx, 0, tchk_kernel, k, 0, &rr, 1);
}

/* ---- a program: steps, whole-array writes and checks ---------------------- */

typedef struct prog {
    size_t rows, cols, pitch;          /* pitch: bytes, more than a row (padding) */
    unsigned gr, gc, halo;
    int steps;
    bool random_where, whole_ops, check;
    bool tile_ops;                     /* random reductions, updates and checks of single tiles */
    bool flt;                          /* float elements (else uint32) */
    size_t vgpu_memory;
    uint64_t seed;
} prog;

static test_rng rng;
static uint32_t rnd(uint32_t n) { return rng_below(&rng, n); }

enum { PAD = 0xA5A5A5A5u };

static void run(const prog *pg) {
    rng = (test_rng){pg->seed};
    size_t rows = pg->rows, cols = pg->cols, pw = pg->pitch / 4, ntiles = (size_t)pg->gr * pg->gc;
    uint32_t *mem[2], *ref[2];
    for (int a = 0; a < 2; a++) {
        mem[a] = malloc(rows * pg->pitch);
        ref[a] = malloc(rows * cols * 4);
        CHECK(mem[a] && ref[a]);
        for (size_t r = 0; r < rows; r++)
            for (size_t i = 0; i < pw; i++) {
                uint32_t v = (uint32_t)(a * 7919 + r * 131 + i);
                mem[a][r * pw + i] = i >= cols ? PAD : pg->flt ? U((float)v) : v;
            }
        for (size_t r = 0; r < rows; r++)
            for (size_t c = 0; c < cols; c++) ref[a][r * cols + c] = mem[a][r * pw + c];
    }
    weft_runtime *rt = test_make_devices("cpu,vgpu:4", 2, pg->vgpu_memory, pg->check);
    weft_data *h[2], **tl[2];
    weft_tiling t = {4, rows, cols, pg->pitch, pg->gr, pg->gc, pg->halo};
    for (int a = 0; a < 2; a++) {
        CHECK_OK(weft_data_register(rt, mem[a], rows * pg->pitch, &h[a]));
        tl[a] = malloc(sizeof *tl[a] * ntiles);
        CHECKF(weft_data_partition(h[a], &t, tl[a]) == 0, "%s", weft_last_error());
    }
    step *steps = calloc((size_t)pg->steps * ntiles, sizeof *steps);
    whole *wholes = calloc((size_t)pg->steps, sizeof *wholes);
    uint32_t **wants = calloc((size_t)pg->steps, sizeof *wants);
    int mismatch = 0, tile_mismatch = 0;
    static const char *const where[] = {"cpu", "gpu:0", "gpu:1", "gpu:2", "gpu:3", "gpu"};
    static const unsigned ops[3] = {WEFT_RED_SUM, WEFT_RED_MIN, WEFT_RED_MAX};
    unsigned type = pg->flt ? WEFT_RED_F32 : WEFT_RED_U32, key[2] = {WEFT_RED_SUM | type, WEFT_RED_MAX | type};
    void **args = NULL; /* the tile tasks' arguments and snapshots, freed at the end */
    size_t nargs = 0;
    int nred = 0;
    size_t last_tile[2] = {0, 0};
    int cur = 0;
    for (int s = 0; s < pg->steps; s++) {
        uint32_t salt = (uint32_t)s * 977u;
        for (size_t i = 0; i < ntiles; i++) {
            step *k = &steps[(size_t)s * ntiles + i];
            CHECK_OK(weft_data_tile_info(tl[cur][i], &k->ti));
            k->rows = rows;
            k->cols = cols;
            k->salt = salt;
            k->flt = pg->flt;
            weft_access acc[2] = {{tl[cur][i], WEFT_R}, {tl[1 - cur][i], WEFT_W}};
            /* a tile stays on its GPU (i mod 4) unless placed at random */
            const char *w = pg->random_where ? where[rnd(6)] : where[1 + i % 4];
            spawn(rt, w, step_body, k, acc, 2);
        }
        ref_step(ref[cur], ref[1 - cur], rows, cols, salt, pg->flt);
        cur = 1 - cur;
        /* tasks on single tiles, mostly of the array the next step reads
         * (the other one's tiles the next step overwrites) */
        for (int j = pg->tile_ops ? (int)rnd(7) : 0; j > 0; j--) {
            int a = rnd(5) == 0 ? 1 - cur : cur;
            /* the last tile again, half the time: groups of reducers on one tile */
            size_t i = last_tile[a] = rnd(2) ? last_tile[a] : rnd((uint32_t)ntiles);
            const char *w = where[rnd(6)];
            uint32_t kind = rnd(10);
            void *arg;
            if (kind < 6) { /* a reduction: the same operator as the last one on the array, mostly (a group) */
                if (rnd(3) == 0) key[a] = ops[rnd(3)] | type;
                tred *k = calloc(1, sizeof *k);
                CHECK(k);
                CHECK_OK(weft_data_tile_info(tl[a][i], &k->ti));
                k->key = key[a];
                k->salt = pg->seed + (uint64_t)nred++ * 7919;
                k->nterms = 1 + (int)rnd(3);
                k->host = rnd(8) == 0;
                weft_access acc = {tl[a][i], WEFT_REDUCE | k->key | (k->host ? WEFT_HOST : 0u)};
                spawn(rt, w, tred_body, k, &acc, 1);
                ref_tred(k, ref[a], cols);
                arg = k;
            } else if (kind < 8) { /* an update in place */
                tupd *k = calloc(1, sizeof *k);
                CHECK(k);
                CHECK_OK(weft_data_tile_info(tl[a][i], &k->ti));
                k->flt = pg->flt;
                weft_access acc = {tl[a][i], WEFT_RW};
                ref_tupd(k, ref[a], cols); /* (before the spawn: it copies *k, which the body writes) */
                spawn(rt, w, tupd_body, k, &acc, 1);
                arg = k;
            } else { /* a read of the tile and its halo, compared with the sequential run's */
                tchk *k = calloc(1, sizeof *k);
                uint32_t *want = malloc(rows * cols * 4);
                CHECK(k && want);
                memcpy(want, ref[a], rows * cols * 4);
                CHECK_OK(weft_data_tile_info(tl[a][i], &k->ti));
                k->want = want;
                k->cols = cols;
                k->mismatch = &tile_mismatch;
                weft_access acc = {tl[a][i], WEFT_R};
                spawn(rt, w, tchk_body, k, &acc, 1);
                args = realloc(args, sizeof *args * (nargs + 1));
                CHECK(args);
                args[nargs++] = want;
                arg = k;
            }
            args = realloc(args, sizeof *args * (nargs + 1));
            CHECK(args);
            args[nargs++] = arg;
        }
        if (pg->whole_ops && rnd(4) == 0) { /* the whole array, written then read */
            whole *k = &wholes[s];
            *k = (whole){NULL, rows, cols, pg->pitch, NULL, &mismatch, pg->flt};
            weft_access acc = {h[cur], WEFT_RW};
            spawn(rt, pg->random_where ? where[rnd(6)] : "gpu", whole_body, k, &acc, 1);
            ref_whole(ref[cur], rows, cols, pg->flt);
        } else if (pg->whole_ops && rnd(3) == 0) {
            wants[s] = malloc(rows * cols * 4);
            memcpy(wants[s], ref[cur], rows * cols * 4);
            whole *k = &wholes[s];
            *k = (whole){NULL, rows, cols, pg->pitch, wants[s], &mismatch, pg->flt};
            weft_access acc = {h[cur], WEFT_R};
            spawn(rt, pg->random_where ? where[rnd(6)] : "cpu", whole_body, k, &acc, 1);
        }
    }
    CHECKF(weft_wait_all(rt) == 0, "seed %llu: %s", (unsigned long long)pg->seed, weft_last_error());
    CHECKF(!mismatch, "seed %llu: a whole-array reader saw another value than the sequential run",
           (unsigned long long)pg->seed);
    CHECKF(!tile_mismatch, "seed %llu: a tile's reader saw another value than the sequential run (its interior "
           "or its halo)", (unsigned long long)pg->seed);
    weft_stats st;
    CHECK_OK(weft_runtime_stats(rt, &st));
    for (int a = 0; a < 2; a++) CHECK_OK(weft_data_unregister(h[a]));
    for (unsigned g = 1; g <= 4; g++) { /* every replica given back */
        weft_device_info info;
        CHECK_OK(weft_device_info_get(rt, g, &info));
        CHECKF(info.memory_used == 0, "seed %llu: GPU %u keeps %zu bytes", (unsigned long long)pg->seed, g,
               info.memory_used);
    }
    CHECK_OK(weft_runtime_destroy(rt));
    for (int a = 0; a < 2; a++)
        for (size_t r = 0; r < rows; r++)
            for (size_t i = 0; i < pw; i++) {
                uint32_t want = i < cols ? ref[a][r * cols + i] : PAD;
                CHECKF(mem[a][r * pw + i] == want, "seed %llu: array %d (%zu, %zu) is %u, the sequential run's %u",
                       (unsigned long long)pg->seed, a, r, i, mem[a][r * pw + i], want);
            }
    for (int s = 0; s < pg->steps; s++) free(wants[s]);
    free(wants);
    for (size_t i = 0; i < nargs; i++) free(args[i]);
    free(args);
    free(wholes);
    free(steps);
    for (int a = 0; a < 2; a++) {
        free(tl[a]);
        free(mem[a]);
        free(ref[a]);
    }
}

/* ---- geometry ------------------------------------------------------------- */

static int bytes_body(weft_ctx *ctx, void *arg) {
    size_t *seen = arg;
    seen[0] = weft_ctx_bytes(ctx, 0);
    seen[1] = weft_ctx_bytes(ctx, 1);
    return weft_ctx_bytes(ctx, 2) == 0 ? 0 : 1;
}

static void test_geometry(void) {
    weft_runtime *rt = test_make_devices("cpu", 2, 0, false);
    static double a[10 * 12];
    weft_data *h, *tl[6];
    CHECK_OK(weft_data_register(rt, a, sizeof a, &h));
    weft_tiling t = {sizeof(double), 10, 12, 0, 2, 3, 1};
    CHECK_OK(weft_data_partition(h, &t, tl));
    weft_tile_info in;
    CHECK_OK(weft_data_tile_info(tl[0], &in)); /* rows 0-4, cols 0-3: span to row 5, col 4 */
    CHECK(in.row0 == 0 && in.col0 == 0 && in.rows == 6 && in.cols == 5);
    CHECK(in.in_row0 == 0 && in.in_col0 == 0 && in.in_rows == 5 && in.in_cols == 4 && in.index == 0);
    CHECK_OK(weft_data_tile_info(tl[4], &in)); /* rows 5-9, cols 4-7: span rows 4-9, cols 3-8 */
    CHECK(in.row0 == 4 && in.col0 == 3 && in.rows == 6 && in.cols == 6);
    CHECK(in.in_row0 == 5 && in.in_col0 == 4 && in.in_rows == 5 && in.in_cols == 4 && in.index == 4);
    void *p;
    size_t n;
    CHECK_OK(weft_data_host(tl[4], &p, &n)); /* its span's first element in the user's memory */
    CHECK(p == &a[4 * 12 + 3] && n == 6 * 6 * sizeof(double));
    CHECK_ERR(weft_data_tile_info(h, &in), WEFT_EINVAL);
    CHECKF(strstr(weft_last_error(), "not a tile") != NULL, "%s", weft_last_error());
    CHECK_OK(weft_data_unregister(h));
    CHECK_ERR(weft_data_tile_info(tl[0], &in), WEFT_EINVAL); /* gone with it */
    /* the remainder goes to the first blocks, as weft_grid's: 10 rows in 3
     * are 4, 3, 3; 11 columns in 4 are 3, 3, 3, 2 */
    static double b[10 * 11];
    weft_data *tb[12];
    CHECK_OK(weft_data_register(rt, b, sizeof b, &h));
    weft_tiling t2 = {sizeof(double), 10, 11, 0, 3, 4, 0};
    CHECK_OK(weft_data_partition(h, &t2, tb));
    size_t want_r[3] = {4, 3, 3}, want_c[4] = {3, 3, 3, 2};
    for (unsigned k = 0; k < 12; k++) {
        CHECK_OK(weft_data_tile_info(tb[k], &in));
        CHECKF(in.rows == want_r[k / 4] && in.cols == want_c[k % 4], "tile %u: %zu x %zu", k, in.rows, in.cols);
    }
    /* weft_ctx_bytes: a tile's span, the whole's size */
    size_t seen[2] = {0, 0};
    weft_access acc[2] = {{tb[5], WEFT_R}, {h, WEFT_R}};
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = bytes_body;
    d.arg = seen;
    d.accesses = acc;
    d.naccesses = 2;
    weft_task *tk;
    CHECK_OK(weft_spawn(rt, &d, &tk));
    CHECK_OK(weft_task_wait(tk));
    weft_task_release(tk);
    CHECKF(seen[0] == 3 * 3 * sizeof(double) && seen[1] == sizeof b, "%zu %zu", seen[0], seen[1]);
    CHECK_OK(weft_data_unregister(h));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- bad input -------------------------------------------------------------- */

static int nop_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    return 0;
}
static int wait_body(weft_ctx *ctx, void *arg) { /* until *arg is set */
    (void)ctx;
    while (!__atomic_load_n((int *)arg, __ATOMIC_ACQUIRE)) sleep_ms(1);
    return 0;
}

static void test_misuse(void) {
    weft_runtime *rt = test_make_devices("cpu,vgpu:2", 2, 0, false);
    static uint32_t a[8 * 8];
    weft_data *h, *tl[16];
    CHECK_OK(weft_data_register(rt, a, sizeof a, &h));
    struct {
        weft_tiling t;
        const char *why;
    } bad[] = {
        {{0, 8, 8, 0, 2, 2, 0}, "must not be zero"},
        {{4, 8, 8, 16, 2, 2, 0}, "pitch 16 is less"},
        {{4, 9, 8, 0, 2, 2, 0}, "do not fit"},
        {{4, 8, 8, 0, 0, 2, 0}, "grid of 0 x 2"},
        {{4, 8, 8, 0, 9, 1, 0}, "grid of 9 x 1"},
        {{4, 8, 8, 0, 4, 4, 3}, "halo 3 is wider"},
        {{4, 8, 8, 0, 100, 100, 0}, "at most 4096"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_ERR(weft_data_partition(h, &bad[i].t, tl), WEFT_EINVAL);
        CHECKF(strstr(weft_last_error(), bad[i].why) != NULL, "case %zu: %s", i, weft_last_error());
    }
    CHECK_ERR(weft_data_partition(h, NULL, tl), WEFT_EINVAL);
    CHECK_ERR(weft_data_partition(NULL, &bad[0].t, tl), WEFT_EINVAL);
    /* tasks pending on it: refused, nothing changes */
    int go = 0;
    weft_access acc = {h, WEFT_R};
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = wait_body;
    d.arg = &go;
    d.accesses = &acc;
    d.naccesses = 1;
    CHECK_OK(weft_spawn(rt, &d, NULL));
    weft_tiling t = {4, 8, 8, 0, 2, 2, 1};
    CHECK_ERR(weft_data_partition(h, &t, tl), WEFT_EBUSY);
    CHECKF(strstr(weft_last_error(), "pending") != NULL, "%s", weft_last_error());
    __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_partition(h, &t, tl));
    /* twice; a tile again; a tile alone unregistered */
    CHECK_ERR(weft_data_partition(h, &t, tl + 4), WEFT_EBUSY);
    CHECKF(strstr(weft_last_error(), "partitioned already") != NULL, "%s", weft_last_error());
    weft_tiling t1 = {4, 1, 4, 0, 1, 2, 0};
    CHECK_ERR(weft_data_partition(tl[0], &t1, tl + 4), WEFT_EINVAL);
    CHECKF(strstr(weft_last_error(), "is a tile") != NULL, "%s", weft_last_error());
    CHECK_ERR(weft_data_unregister(tl[1]), WEFT_EBUSY);
    CHECKF(strstr(weft_last_error(), "unregistered with the data they were partitioned from") != NULL, "%s",
           weft_last_error());
    /* still usable: a task on a tile, one on the parent */
    acc = (weft_access){tl[3], WEFT_RW};
    d.body = nop_body;
    CHECK_OK(weft_spawn(rt, &d, NULL));
    acc = (weft_access){h, WEFT_RW};
    CHECK_OK(weft_spawn(rt, &d, NULL));
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_unregister(h));
    /* the tiles went with it: spawns naming them are refused */
    acc = (weft_access){tl[0], WEFT_R};
    CHECK_ERR(weft_spawn(rt, &d, NULL), WEFT_EINVAL);
    CHECK_ERR(weft_data_unregister(tl[0]), WEFT_EINVAL);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* Each tile on a GPU of its own, its halo from the neighbours' GPUs. */
static void test_fixed(void) {
    prog p = {.rows = 6, .cols = 1000, .pitch = 4000, .gr = 1, .gc = 4, .halo = 1, .steps = 3, .seed = 5};
    run(&p); /* 1-D-like: 4 tiles in a row, each on its own GPU */
    p = (prog){.rows = 1, .cols = 4096, .pitch = 16384, .gr = 1, .gc = 8, .halo = 2, .steps = 5, .seed = 6};
    run(&p); /* 1-D */
    p = (prog){.rows = 48, .cols = 40, .pitch = 40 * 4 + 12, .gr = 3, .gc = 2, .halo = 2, .steps = 6, .seed = 7};
    run(&p); /* 2-D with padding between rows */
    p = (prog){.rows = 30, .cols = 30, .pitch = 120, .gr = 3, .gc = 3, .halo = 3, .steps = 4, .seed = 8};
    run(&p); /* a halo wider than the stencil needs */
    p = (prog){.rows = 20, .cols = 24, .pitch = 96, .gr = 2, .gc = 3, .halo = 1, .steps = 6, .tile_ops = true,
               .flt = true, .seed = 9};
    run(&p); /* tile reductions, updates, reads between the steps, each tile on its GPU */
}

/* ---- reductions of tiles: each place their combination must come first ---- */

static weft_task *spawn_after(weft_runtime *rt, const char *where, weft_body_fn body, void *arg,
                              const weft_access *acc, weft_task *dep) {
    weft_placement p;
    CHECK_OK(weft_placement_parse(where, &p));
    p.share = 0.25;
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = body;
    d.arg = arg;
    d.accesses = acc;
    d.naccesses = 1;
    d.placements = &p;
    d.nplacements = 1;
    d.deps = &dep;
    d.ndeps = dep ? 1 : 0;
    weft_task *t = NULL;
    CHECKF(weft_spawn(rt, &d, &t) == 0, "%s", weft_last_error());
    return t;
}

static void test_tile_reductions(void) {
    enum { R = 8, C = 12, NT = 4 };
    static uint32_t a[R * C], ref[R * C], want[3][R * C];
    for (size_t i = 0; i < R * C; i++) a[i] = ref[i] = U((float)i * 0.75f);
    weft_runtime *rt = test_make_devices("cpu,vgpu:4", 2, 0, true);
    weft_data *h, *tl[NT];
    CHECK_OK(weft_data_register(rt, a, sizeof a, &h));
    weft_tiling t = {4, R, C, 0, 2, 2, 1};
    CHECK_OK(weft_data_partition(h, &t, tl));
    int mismatch = 0;
    tred red[8];
    int nr = 0;
    const unsigned sum = WEFT_RED_SUM | WEFT_RED_F32;
#define RED(tile, where, dep)                                                                     \
    do {                                                                                          \
        tred *k_ = &red[nr];                                                                      \
        *k_ = (tred){.key = sum, .salt = 100u + (uint64_t)nr, .nterms = 3};                       \
        nr++;                                                                                     \
        CHECK_OK(weft_data_tile_info(tl[tile], &k_->ti));                                         \
        weft_access acc_ = {tl[tile], WEFT_REDUCE | sum};                                         \
        prev = spawn_after(rt, where, tred_body, k_, &acc_, dep);                                 \
        ref_tred(k_, ref, C);                                                                     \
    } while (0)
    /* 1. the parent updated on a GPU, then a group of two CPU reducers of
     * tile 0, the second after the first (were the first combined as the
     * second starts, into the tile's host copy, remaking the tiles from
     * the parent would then lose it), then tile 1 read on another GPU: its
     * halo holds tile 0's border, combined */
    whole w = {NULL, R, C, C * 4, NULL, &mismatch, true};
    weft_access wacc = {h, WEFT_RW};
    weft_task *prev = spawn_after(rt, "gpu:0", whole_body, &w, &wacc, NULL);
    weft_task_release(prev);
    ref_whole(ref, R, C, true);
    RED(0, "cpu", NULL);
    weft_task *first = prev;
    RED(0, "cpu", first);
    weft_task_release(first);
    weft_task_release(prev);
    memcpy(want[0], ref, sizeof ref);
    tchk c1 = {.want = want[0], .cols = C, .mismatch = &mismatch};
    CHECK_OK(weft_data_tile_info(tl[1], &c1.ti));
    weft_access cacc = {tl[1], WEFT_R};
    weft_task_release(spawn_after(rt, "gpu:1", tchk_body, &c1, &cacc, NULL));
    /* 2. reducers of tile 3 on GPUs and the host, then the parent read on a
     * GPU (reassembled from the tiles, tile 3 combined first) */
    RED(3, "gpu:2", NULL);
    weft_task_release(prev);
    RED(3, "cpu", NULL);
    weft_task_release(prev);
    RED(3, "gpu:3", NULL);
    weft_task_release(prev);
    memcpy(want[1], ref, sizeof ref);
    whole wr = {NULL, R, C, C * 4, want[1], &mismatch, true};
    wacc.mode = WEFT_R;
    weft_task_release(spawn_after(rt, "gpu:2", whole_body, &wr, &wacc, NULL));
    /* 3. a tile reduced by the last tasks: combined when it is unregistered */
    RED(2, "gpu:1", NULL);
    weft_task_release(prev);
    RED(2, "gpu:0", NULL);
    weft_task_release(prev);
#undef RED
    CHECKF(weft_wait_all(rt) == 0, "%s", weft_last_error());
    CHECKF(!mismatch, "a reader of tile 1's halo or of the whole array saw another value than the sequential run");
    CHECK_OK(weft_data_unregister(h));
    CHECK_OK(weft_runtime_destroy(rt));
    for (size_t i = 0; i < R * C; i++)
        CHECKF(a[i] == ref[i], "element %zu is %a, the sequential run's %a", i, (double)F(a[i]), (double)F(ref[i]));
}

/* A failed reducer of a tile contributes nothing; a neighbour's reader
 * after its group is cancelled (it would read the tile), as the data's own
 * readers are. */
static void test_tile_reduction_failure(void) {
    enum { C = 40 };
    static uint32_t a[C], ref[C];
    for (size_t i = 0; i < C; i++) a[i] = ref[i] = (uint32_t)i;
    weft_runtime *rt = test_make_devices("cpu,vgpu:4", 2, 0, false);
    weft_data *h, *tl[2];
    CHECK_OK(weft_data_register(rt, a, sizeof a, &h));
    weft_tiling t = {4, 1, C, 0, 1, 2, 2};
    CHECK_OK(weft_data_partition(h, &t, tl));
    const unsigned key = WEFT_RED_SUM | WEFT_RED_U32;
    tred ok = {.key = key, .salt = 1, .nterms = 2}, bad = {.key = key, .salt = 2, .nterms = 2, .fail = true};
    CHECK_OK(weft_data_tile_info(tl[0], &ok.ti));
    bad.ti = ok.ti;
    weft_access acc = {tl[0], WEFT_REDUCE | key};
    weft_task *t1 = spawn_after(rt, "gpu:0", tred_body, &ok, &acc, NULL);
    weft_task *t2 = spawn_after(rt, "cpu", tred_body, &bad, &acc, NULL);
    ref_tred(&ok, ref, C);
    static uint32_t want[C];
    memcpy(want, ref, sizeof want);
    int mismatch = 0;
    tchk c = {.want = want, .cols = C, .mismatch = &mismatch};
    CHECK_OK(weft_data_tile_info(tl[1], &c.ti));
    weft_access racc = {tl[1], WEFT_R};
    weft_task *x = spawn_after(rt, "gpu:1", tchk_body, &c, &racc, NULL);
    CHECK_RC(weft_wait_all(rt), WEFT_ETASKFAILED);
    CHECK_OK(weft_task_wait(t1));
    CHECK_RC(weft_task_wait(t2), WEFT_ETASKFAILED);
    CHECK_RC(weft_task_wait(x), WEFT_ECANCELLED);
    weft_task_release(t1);
    weft_task_release(t2);
    weft_task_release(x);
    CHECK_OK(weft_data_unregister(h));
    CHECK_OK(weft_runtime_destroy(rt));
    CHECKF(memcmp(a, ref, sizeof a) == 0, "the failed reducer's work counted, or the other's did not");
}

static void test_reduce_misuse(void) {
    weft_runtime *rt = test_make_devices("cpu,vgpu:2", 2, 0, false);
    static uint32_t a[6 * 9];
    weft_data *h, *tl[3];
    CHECK_OK(weft_data_register(rt, a, sizeof a, &h));
    weft_tiling t = {4, 6, 9, 0, 1, 3, 1}; /* 3 tiles of 3 columns (12 bytes a row), halo 1 */
    CHECK_OK(weft_data_partition(h, &t, tl));
    const unsigned red = WEFT_REDUCE | WEFT_RED_SUM | WEFT_RED_U32;
    struct {
        weft_access acc[2];
        const char *why;                   /* NULL: accepted */
    } cases[] = {
        {{{tl[0], red}, {h, WEFT_R}}, "access 0 reduces a tile of the data that access 1 names"},
        {{{h, WEFT_W}, {tl[2], red}}, "access 1 reduces a tile of the data that access 0 names"},
        {{{tl[0], red}, {tl[1], WEFT_R}}, "access 0 reduces tile 0, but access 1 reads tile 1, whose halo covers"},
        {{{tl[2], WEFT_RW}, {tl[1], red}}, "access 1 reduces tile 1, but access 0 reads tile 2, whose halo covers"},
        {{{tl[0], red}, {tl[0], WEFT_R}}, "access 0 reduces data that access 1 names too"},
        {{{h, red}, {tl[0], WEFT_R}}, "access 0 reduces data partitioned into tiles: reduce its tiles"},
        {{{tl[1], WEFT_REDUCE | WEFT_RED_SUM | WEFT_RED_F64}, {tl[0], WEFT_W}},
         "access 0 reduces 8-byte elements, but the rows of its tile's interior are 12 bytes"},
        /* accepted: a neighbour written (its halo is not read), a tile
         * whose halo does not reach it, two neighbours reduced */
        {{{tl[0], red}, {tl[1], WEFT_W}}, NULL},
        {{{tl[0], red}, {tl[2], WEFT_R}}, NULL},
        {{{tl[0], red}, {tl[1], red}}, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.body = nop_body;
        d.accesses = cases[i].acc;
        d.naccesses = 2;
        if (!cases[i].why) {
            CHECKF(weft_spawn(rt, &d, NULL) == 0, "case %zu: %s", i, weft_last_error());
            continue;
        }
        CHECK_ERR(weft_spawn(rt, &d, NULL), WEFT_EINVAL);
        CHECKF(strstr(weft_last_error(), cases[i].why) != NULL, "case %zu: %s", i, weft_last_error());
    }
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_unregister(h));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* A task that a wait saw finish no longer names its data: a partition
 * right after the wait is never refused as "pending" (the task's pins on
 * its data go before its state is final). */
static int touch_body(weft_ctx *ctx, void *arg) {
    (void)arg;
    ((double *)weft_ctx_data(ctx, 0))[0] += 1;
    return 0;
}
static void test_partition_after_wait(void) {
    weft_runtime *rt = test_make_devices("cpu", 2, 0, false);
    static double a[64];
    for (int round = 0; round < test_pick(2000, 300); round++) {
        weft_data *d, *tl[4];
        CHECK_OK(weft_data_register(rt, a, sizeof a, &d));
        weft_access acc = {d, WEFT_RW};
        weft_task_desc td;
        weft_task_desc_init(&td);
        td.body = touch_body;
        td.accesses = &acc;
        td.naccesses = 1;
        weft_task *t;
        CHECK_OK(weft_spawn(rt, &td, &t));
        CHECK_OK(weft_task_wait(t));
        weft_task_release(t);
        weft_tiling tg = {sizeof(double), 8, 8, 0, 2, 2, 0};
        int rc = weft_data_partition(d, &tg, tl);
        CHECKF(rc == 0, "round %d: %s", round, weft_last_error());
        CHECK_OK(weft_data_unregister(d));
    }
    CHECK(a[0] == test_pick(2000, 300));
    CHECK_OK(weft_runtime_destroy(rt));
}

int main(void) {
    test_watchdog(test_pick(200, 400));
    test_step("geometry");
    test_geometry();
    test_step("bad input");
    test_misuse();
    test_step("partition after a wait");
    test_partition_after_wait();
    test_step("tile reductions: misuse");
    test_reduce_misuse();
    test_step("tile reductions: combined before each kind of reader");
    test_tile_reductions();
    test_tile_reduction_failure();
    test_step("stencils on fixed GPUs");
    test_fixed();
    test_step("random placement, whole-array phases, tile reductions");
    int seeds = test_pick(10, 4);
    for (int s = 0; s < seeds; s++) { /* uint32 and float elements, in turn by pairs */
        prog p = {.rows = 24 + (size_t)(s * 7) % 20, .cols = 20 + (size_t)(s * 13) % 30, .gr = 1 + s % 3,
                  .gc = 1 + (s / 3) % 3, .halo = 1 + s % 2, .steps = 12, .random_where = true, .whole_ops = true,
                  .tile_ops = true, .flt = s % 4 >= 2, .seed = 0x9e3779b97f4a7c15ull * (uint64_t)(s + 1)};
        p.pitch = p.cols * 4 + 4 * (size_t)(s % 3);
        run(&p);
    }
    test_step("random placement, small GPUs (eviction), checked, tile reductions");
    for (int s = 0; s < seeds; s++) {
        prog p = {.rows = 40 + (size_t)(s % 3) * 9, .cols = 36 - (size_t)(s % 2) * 7, .gr = 2 + s % 2, .gc = 2,
                  .halo = 1 + s % 2, .steps = 10, .random_where = true, .whole_ops = true, .tile_ops = true,
                  .flt = s % 4 >= 2, .check = s % 2 == 0, .vgpu_memory = 16u << 10,
                  .seed = 0x51ed270b27cd9e5bull * (uint64_t)(s + 3)};
        p.pitch = p.cols * 4 + 8;
        run(&p);
    }
    printf("test_tiles: ok\n");
    return 0;
}
