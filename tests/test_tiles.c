/* Tiles (issue 10): an array partitioned into a grid of tiles with halos,
 * each a handle of its own.  Stencil steps with each tile on its own device
 * (the halos copied from the neighbours' devices) against a sequential run,
 * bit for bit; the parent used whole between steps (reassembled from the
 * tiles, the tiles made again from it); padding between rows never touched;
 * random programs with small GPUs (eviction) and in the checking mode; bad
 * tilings and misuse refused with clear errors. */
#include "check.h"
#include "testing.h"

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
} step;

#define AT(p, pitch, r, c) (*(uint32_t *)((char *)(p) + (r) * (pitch) + (c) * sizeof(uint32_t)))

static int step_kernel(void *arg) {
    step *k = arg;
    const weft_tile_info *t = &k->ti;
    for (size_t r = t->in_row0; r < t->in_row0 + t->in_rows; r++)
        for (size_t c = t->in_col0; c < t->in_col0 + t->in_cols; c++) {
            size_t lr = r - t->row0, lc = c - t->col0;
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
} whole;
static int whole_kernel(void *arg) {
    whole *k = arg;
    for (size_t r = 0; r < k->rows; r++)
        for (size_t c = 0; c < k->cols; c++) {
            if (k->want) {
                if (AT(k->p, k->pitch, r, c) != k->want[r * k->cols + c]) *k->mismatch = 1;
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
static void ref_step(const uint32_t *s, uint32_t *d, size_t rows, size_t cols, uint32_t salt) {
    step k = {{0, 0, rows, cols, 0, 0, rows, cols, 0}, rows, cols, s, d, cols * 4, cols * 4, salt};
    step_kernel(&k);
}
static void ref_whole(uint32_t *p, size_t rows, size_t cols) {
    whole k = {p, rows, cols, cols * 4, NULL, NULL};
    whole_kernel(&k);
}

/* ---- a program: steps, whole-array writes and checks ---------------------- */

typedef struct prog {
    size_t rows, cols, pitch;          /* pitch: bytes, more than a row (padding) */
    unsigned gr, gc, halo;
    int steps;
    bool random_where, whole_ops, check;
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
            for (size_t i = 0; i < pw; i++)
                mem[a][r * pw + i] = i < cols ? (uint32_t)(a * 7919 + r * 131 + i) : PAD;
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
    int mismatch = 0;
    static const char *const where[] = {"cpu", "gpu:0", "gpu:1", "gpu:2", "gpu:3", "gpu"};
    int cur = 0;
    for (int s = 0; s < pg->steps; s++) {
        uint32_t salt = (uint32_t)s * 977u;
        for (size_t i = 0; i < ntiles; i++) {
            step *k = &steps[(size_t)s * ntiles + i];
            CHECK_OK(weft_data_tile_info(tl[cur][i], &k->ti));
            k->rows = rows;
            k->cols = cols;
            k->salt = salt;
            weft_access acc[2] = {{tl[cur][i], WEFT_R}, {tl[1 - cur][i], WEFT_W}};
            /* a tile stays on its GPU (i mod 4) unless placed at random */
            const char *w = pg->random_where ? where[rnd(6)] : where[1 + i % 4];
            spawn(rt, w, step_body, k, acc, 2);
        }
        ref_step(ref[cur], ref[1 - cur], rows, cols, salt);
        cur = 1 - cur;
        if (pg->whole_ops && rnd(4) == 0) { /* the whole array, written then read */
            whole *k = &wholes[s];
            *k = (whole){NULL, rows, cols, pg->pitch, NULL, &mismatch};
            weft_access acc = {h[cur], WEFT_RW};
            spawn(rt, pg->random_where ? where[rnd(6)] : "gpu", whole_body, k, &acc, 1);
            ref_whole(ref[cur], rows, cols);
        } else if (pg->whole_ops && rnd(3) == 0) {
            wants[s] = malloc(rows * cols * 4);
            memcpy(wants[s], ref[cur], rows * cols * 4);
            whole *k = &wholes[s];
            *k = (whole){NULL, rows, cols, pg->pitch, wants[s], &mismatch};
            weft_access acc = {h[cur], WEFT_R};
            spawn(rt, pg->random_where ? where[rnd(6)] : "cpu", whole_body, k, &acc, 1);
        }
    }
    CHECKF(weft_wait_all(rt) == 0, "seed %llu: %s", (unsigned long long)pg->seed, weft_last_error());
    CHECKF(!mismatch, "seed %llu: a whole-array reader saw another value than the sequential run",
           (unsigned long long)pg->seed);
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
    free(wholes);
    free(steps);
    for (int a = 0; a < 2; a++) {
        free(tl[a]);
        free(mem[a]);
        free(ref[a]);
    }
}

/* ---- geometry ------------------------------------------------------------- */

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
}

int main(void) {
    test_watchdog(test_pick(200, 400));
    test_step("geometry");
    test_geometry();
    test_step("bad input");
    test_misuse();
    test_step("stencils on fixed GPUs");
    test_fixed();
    test_step("random placement, whole-array phases");
    int seeds = test_pick(10, 4);
    for (int s = 0; s < seeds; s++) {
        prog p = {.rows = 24 + (size_t)(s * 7) % 20, .cols = 20 + (size_t)(s * 13) % 30, .gr = 1 + s % 3,
                  .gc = 1 + (s / 3) % 3, .halo = 1 + s % 2, .steps = 12, .random_where = true, .whole_ops = true,
                  .seed = 0x9e3779b97f4a7c15ull * (uint64_t)(s + 1)};
        p.pitch = p.cols * 4 + 4 * (size_t)(s % 3);
        run(&p);
    }
    test_step("random placement, small GPUs (eviction), checked");
    for (int s = 0; s < seeds; s++) {
        prog p = {.rows = 40, .cols = 36, .pitch = 36 * 4 + 8, .gr = 2 + s % 2, .gc = 2, .halo = 1 + s % 2,
                  .steps = 10, .random_where = true, .whole_ops = true, .check = s % 2 == 0,
                  .vgpu_memory = 16u << 10, .seed = 0x51ed270b27cd9e5bull * (uint64_t)(s + 3)};
        run(&p);
    }
    printf("test_tiles: ok\n");
    return 0;
}
