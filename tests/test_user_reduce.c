/* User-defined reductions: weft_reduction_register gives an operator of any
 * element size (an identity, or an init function, and an associative
 * combine over count elements at once), used as
 * {d, WEFT_REDUCE | op}.  Checked here: argmin over (double value, int64
 * index) pairs with ties broken by the lowest index, a complex-double sum,
 * and a struct whose combine does not commute (2x2 matrix products with
 * wrapping integers: any order but the spawn order gives another result),
 * each with many members on the CPU and on two virtual GPUs, equal bit for
 * bit to the sequential fold in spawn order (so the same on every run); an
 * init function and the arg both reach the callbacks; groups of different
 * operators on one data, user and built-in; a failed and a cancelled member
 * contribute nothing and cancel the readers after their group, as for the
 * built-in operators; tiles; misuse refused with messages that say what to
 * do. */
#include "check.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define NELEM 64

static const char *const PLACES[4] = {"cpu", "gpu:0", "gpu:1", "gpu"};

/* ---- the three operators ---------------------------------------------------- */

typedef struct pair {
    double v;
    int64_t i;
} pair;

typedef struct cplx {
    double re, im;
} cplx;

typedef struct mat2 { /* [[a, b], [c, d]], products wrap around */
    uint64_t a, b, c, d;
} mat2;

static _Atomic long combine_calls, init_calls;

static void argmin_combine(void *inout, const void *in, size_t count, void *arg) {
    (void)arg;
    pair *x = inout;
    const pair *y = in;
    for (size_t k = 0; k < count; k++)
        if (y[k].v < x[k].v || (y[k].v == x[k].v && y[k].i < x[k].i)) x[k] = y[k];
    atomic_fetch_add(&combine_calls, 1);
}

static void cplx_combine(void *inout, const void *in, size_t count, void *arg) {
    (void)arg;
    cplx *x = inout;
    const cplx *y = in;
    for (size_t k = 0; k < count; k++) {
        x[k].re += y[k].re;
        x[k].im += y[k].im;
    }
}

static mat2 mat_mul(mat2 x, mat2 y) {
    return (mat2){x.a * y.a + x.b * y.c, x.a * y.b + x.b * y.d, x.c * y.a + x.d * y.c, x.c * y.b + x.d * y.d};
}

static void mat_combine(void *inout, const void *in, size_t count, void *arg) {
    CHECK(arg == (void *)&combine_calls); /* the description's arg */
    mat2 *x = inout;
    const mat2 *y = in;
    for (size_t k = 0; k < count; k++) x[k] = mat_mul(x[k], y[k]);
}

static void mat_init(void *out, size_t count, void *arg) {
    CHECK(arg == (void *)&combine_calls);
    mat2 *m = out;
    for (size_t k = 0; k < count; k++) m[k] = (mat2){1, 0, 0, 1};
    atomic_fetch_add(&init_calls, 1);
}

enum kind { ARGMIN, CPLX, MAT };

static size_t esize(enum kind k) { return k == ARGMIN ? sizeof(pair) : k == CPLX ? sizeof(cplx) : sizeof(mat2); }

static unsigned reg(weft_runtime *rt, enum kind k) {
    static const pair pair_id = {INFINITY, INT64_MAX};
    static const cplx cplx_id = {-0.0, -0.0};
    weft_reduction_desc d = {0};
    d.elem_size = esize(k);
    d.combine = k == ARGMIN ? argmin_combine : k == CPLX ? cplx_combine : mat_combine;
    d.identity = k == ARGMIN ? (const void *)&pair_id : k == CPLX ? (const void *)&cplx_id : NULL;
    d.init = k == MAT ? mat_init : NULL;
    d.arg = k == MAT ? (void *)&combine_calls : NULL;
    d.name = k == ARGMIN ? "argmin" : k == CPLX ? "complex sum" : "matrix product";
    unsigned op = 0;
    CHECK_OK(weft_reduction_register(rt, &d, &op));
    CHECK((op & WEFT_RED_OP_MASK) == WEFT_RED_USER && (op & WEFT_RED_USER_ID_MASK) != 0);
    return op;
}

/* ---- a reducing task: its contributions, folded on its device ---------------- */

static uint64_t mix(uint64_t x) {
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    x ^= x >> 27;
    x *= 0x81dadef4bc2d2f8bull;
    return x ^ (x >> 33);
}

typedef struct red {
    enum kind kind;
    int task;          /* its place in spawn order */
    int nterms;        /* contributions per element */
    int fail;          /* the body fails, after folding */
    void *p;           /* its private copy */
} red;

/* Contribution j of task t to element e, into one element at x. */
static void term(enum kind k, int t, int e, int j, void *x) {
    uint64_t h = mix(((uint64_t)t << 40) ^ ((uint64_t)e << 20) ^ (uint64_t)j);
    if (k == ARGMIN) /* few distinct values: ties are common, the lowest index wins */
        *(pair *)x = (pair){(double)(h % 7), (int64_t)(h >> 40)};
    else if (k == CPLX)
        *(cplx *)x = (cplx){(double)(int64_t)(h % 2001 - 1000) / 7.0, ldexp((double)(h >> 11), -53) * 1e3};
    else
        *(mat2 *)x = (mat2){h | 1, h >> 7, h >> 13, (h >> 3) | 1};
}

static void combine_one(enum kind k, void *x, const void *y, size_t n) {
    if (k == ARGMIN) argmin_combine(x, y, n, NULL);
    else if (k == CPLX) cplx_combine(x, y, n, NULL);
    else mat_combine(x, y, n, (void *)&combine_calls);
}

static void identity(enum kind k, void *x, size_t n) {
    for (size_t e = 0; e < n; e++) {
        char *p = (char *)x + e * esize(k);
        if (k == ARGMIN) *(pair *)p = (pair){INFINITY, INT64_MAX};
        else if (k == CPLX) *(cplx *)p = (cplx){-0.0, -0.0};
        else *(mat2 *)p = (mat2){1, 0, 0, 1};
    }
}

/* Task t's contributions folded into the elements at p (its copy). */
static void fold_terms(const red *r, void *p) {
    unsigned char one[sizeof(mat2)];
    for (int e = 0; e < NELEM; e++)
        for (int j = 0; j < r->nterms; j++) {
            term(r->kind, r->task, e, j, one);
            combine_one(r->kind, (char *)p + (size_t)e * esize(r->kind), one, 1);
        }
}

static int red_kernel(void *arg) {
    red *r = arg;
    fold_terms(r, r->p);
    return 0;
}

static int red_body(weft_ctx *ctx, void *arg) {
    red *r = arg;
    r->p = weft_ctx_data(ctx, 0);
    int rc = 0;
    if (weft_ctx_gpu_count(ctx) == 0) {
        rc = red_kernel(r);
    } else {
        weft_range rw = {r->p, NELEM * esize(r->kind), WEFT_RW};
        rc = weft_ctx_queue_rw(ctx, 0, red_kernel, r, 0, &rw, 1);
    }
    return r->fail ? 5 : rc;
}

/* The sequential run: value = value OP (identity OP task's terms), in
 * spawn order, for the tasks that contribute. */
static void reference(const red *r, int ntasks, void *value) {
    static unsigned char tmp[NELEM * sizeof(mat2)];
    for (int t = 0; t < ntasks; t++) {
        if (r[t].fail < 0 || r[t].fail > 0) continue; /* failed or cancelled: nothing */
        identity(r[t].kind, tmp, NELEM);
        fold_terms(&r[t], tmp);
        combine_one(r[t].kind, value, tmp, NELEM);
    }
}

static void initial(enum kind k, void *a, uint64_t seed) {
    for (int e = 0; e < NELEM; e++) term(k, 1000 + (int)seed, e, 0, (char *)a + (size_t)e * esize(k));
}

static weft_task *spawn_red(weft_runtime *rt, const char *where, red *r, weft_data *h, unsigned op,
                            weft_task *dep, bool want) {
    weft_placement p;
    CHECK_OK(weft_placement_parse(where, &p));
    p.share = 0.25;
    weft_access acc = {h, WEFT_REDUCE | op};
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = red_body;
    d.arg = r;
    d.accesses = &acc;
    d.naccesses = 1;
    d.placements = &p;
    d.nplacements = 1;
    d.deps = dep ? &dep : NULL;
    d.ndeps = dep ? 1 : 0;
    weft_task *t = NULL;
    CHECKF(weft_spawn(rt, &d, want ? &t : NULL) == 0, "%s", weft_last_error());
    return t;
}

/* ---- many members, on the CPU and on virtual GPUs ----------------------------- */

static void run_kind(weft_runtime *rt, enum kind k, int ntasks, bool gpus, int round) {
    static unsigned char a[NELEM * sizeof(mat2)], ref[NELEM * sizeof(mat2)];
    static red r[256];
    CHECK(ntasks <= 256);
    size_t bytes = NELEM * esize(k);
    unsigned op = reg(rt, k);
    initial(k, a, (uint64_t)round);
    memcpy(ref, a, bytes);
    weft_data *h;
    CHECK_OK(weft_data_register(rt, a, bytes, &h));
    for (int t = 0; t < ntasks; t++) {
        r[t] = (red){k, t, 1 + t % 3, 0, NULL};
        spawn_red(rt, gpus ? PLACES[t % 4] : "cpu", &r[t], h, op, NULL, false);
    }
    reference(r, ntasks, ref);
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_unregister(h)); /* combines them, in spawn order */
    CHECKF(memcmp(a, ref, bytes) == 0, "kind %d, %d tasks%s: not the sequential fold", k, ntasks,
           gpus ? " on cpu and GPUs" : "");
}

static void test_members(void) {
    int ntasks = test_pick(200, 60);
    weft_runtime *cpu = test_make_devices("cpu", 4, 0, false);
    weft_runtime *mixed = test_make_devices("cpu,vgpu:2", 4, 0, false);
    for (int round = 0; round < 2; round++) /* the same bits on every run */
        for (int k = ARGMIN; k <= MAT; k++) {
            run_kind(cpu, (enum kind)k, ntasks, false, round);
            run_kind(mixed, (enum kind)k, ntasks, true, round);
        }
    CHECK(atomic_load(&init_calls) > 0 && atomic_load(&combine_calls) > 0);
    CHECK_OK(weft_runtime_destroy(cpu));
    CHECK_OK(weft_runtime_destroy(mixed));
}

/* A reader task that checks the value before it is done with it. */
typedef struct rd {
    const void *want;
    size_t bytes;
    _Atomic int ok;
} rd;
static int rd_body(weft_ctx *ctx, void *arg) {
    rd *r = arg;
    const void *p = weft_ctx_data(ctx, 0);
    if (memcmp(p, r->want, r->bytes) != 0) return 1;
    atomic_store(&r->ok, 1);
    return 0;
}
static weft_task *spawn_reader(weft_runtime *rt, rd *r, weft_data *h) {
    weft_access acc = {h, WEFT_R};
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = rd_body;
    d.arg = r;
    d.accesses = &acc;
    d.naccesses = 1;
    weft_task *t = NULL;
    CHECK_OK(weft_spawn(rt, &d, &t));
    return t;
}

/* Groups of different operators on one data handle: a complex sum, the same
 * sum registered again (another operator: another group), the built-in
 * double sum (on the same bytes: the same sums, component by component),
 * and reads between them. */
static void test_groups(void) {
    weft_runtime *rt = test_make_devices("cpu,vgpu:2", 3, 0, false);
    unsigned op1 = reg(rt, CPLX), op2 = reg(rt, CPLX);
    CHECK(op1 != op2);
    static cplx a[NELEM], ref[NELEM];
    initial(CPLX, a, 7);
    memcpy(ref, a, sizeof a);
    weft_data *h;
    CHECK_OK(weft_data_register(rt, a, sizeof a, &h));
    static red r[40];
    rd readers[4];
    weft_task *rt_[4];
    int t = 0;
    for (int g = 0; g < 4; g++) {
        unsigned op = g == 0 || g == 3 ? op1 : g == 1 ? op2 : (unsigned)(WEFT_RED_SUM | WEFT_RED_F64);
        for (int j = 0; j < 10; j++, t++) {
            r[t] = (red){CPLX, t, 2, 0, NULL};
            spawn_red(rt, PLACES[t % 4], &r[t], h, op, NULL, false);
            reference(&r[t], 1, ref);
        }
        readers[g].want = memcpy(malloc(sizeof ref), ref, sizeof ref);
        readers[g].bytes = sizeof ref;
        atomic_init(&readers[g].ok, 0);
        rt_[g] = spawn_reader(rt, &readers[g], h);
    }
    CHECK_OK(weft_wait_all(rt));
    for (int g = 0; g < 4; g++) {
        CHECK_OK(weft_task_wait(rt_[g]));
        CHECK(atomic_load(&readers[g].ok));
        weft_task_release(rt_[g]);
        free((void *)readers[g].want);
    }
    CHECK_OK(weft_data_unregister(h));
    CHECK(memcmp(a, ref, sizeof a) == 0);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- failure and cancellation, as for the built-in operators ------------------- */

static int fail_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    return 9;
}

static void test_failures(void) {
    weft_runtime *rt = test_make_devices("cpu,vgpu:2", 3, 0, false);
    unsigned op = reg(rt, MAT);
    static mat2 a[NELEM], ref[NELEM];
    static red r[12];
    initial(MAT, a, 3);
    memcpy(ref, a, sizeof a);
    weft_data *h;
    CHECK_OK(weft_data_register(rt, a, sizeof a, &h));
    weft_task *failer;
    CHECK_OK(weft_spawn_simple(rt, fail_body, NULL, &failer));
    weft_task *bad = NULL, *cancelled = NULL;
    for (int t = 0; t < 12; t++) {
        r[t] = (red){MAT, t, 2, t == 4, NULL};
        if (t == 7) {
            r[t].fail = -1; /* cancelled: it follows a failed task */
            cancelled = spawn_red(rt, PLACES[t % 4], &r[t], h, op, failer, true);
        } else {
            weft_task *x = spawn_red(rt, PLACES[t % 4], &r[t], h, op, NULL, t == 4);
            if (t == 4) bad = x;
        }
    }
    reference(r, 12, ref);
    rd reader = {ref, sizeof ref, 0};
    weft_task *after = spawn_reader(rt, &reader, h);
    CHECK_ERR(weft_task_wait(bad), WEFT_ETASKFAILED);
    CHECK_ERR(weft_task_wait(cancelled), WEFT_ECANCELLED);
    CHECK_ERR(weft_task_wait(after), WEFT_ECANCELLED); /* it would read a failed reduction */
    CHECK(!atomic_load(&reader.ok));
    weft_task_release(bad);
    weft_task_release(cancelled);
    weft_task_release(after);
    weft_task_release(failer);
    CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED);
    /* the other members' copies are combined, in spawn order */
    CHECK_OK(weft_data_unregister(h));
    CHECK(memcmp(a, ref, sizeof a) == 0);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- tiles: the interior, row by row ------------------------------------------------ */

static int tile_body(weft_ctx *ctx, void *arg) {
    const int *t = arg;
    cplx *p = weft_ctx_data(ctx, 0);
    size_t pitch = weft_ctx_pitch(ctx, 0) / sizeof(cplx);
    for (size_t y = 0; y < 4; y++)
        for (size_t x = 0; x < pitch; x++) {
            p[y * pitch + x].re += *t + 0.25;
            p[y * pitch + x].im -= *t;
        }
    return 0;
}

static void test_tiles(void) {
    weft_runtime *rt = test_make_devices("cpu", 2, 0, false);
    unsigned op = reg(rt, CPLX);
    static cplx a[8][8];
    memset(a, 0, sizeof a);
    weft_data *h, *tiles[4];
    CHECK_OK(weft_data_register(rt, a, sizeof a, &h));
    weft_tiling tl = {0};
    tl.rows = 8;
    tl.cols = 8;
    tl.elem = sizeof(cplx);
    tl.grid_rows = 2;
    tl.grid_cols = 2;
    tl.halo = 1; /* (the copies are of the 4x4 interiors; the halo is not reduced) */
    CHECK_OK(weft_data_partition(h, &tl, tiles));
    static int who[4 * 5];
    for (int k = 0; k < 5; k++)
        for (int i = 0; i < 4; i++) {
            who[k * 4 + i] = k;
            weft_access acc = {tiles[i], WEFT_REDUCE | op};
            weft_task_desc d;
            weft_task_desc_init(&d);
            d.body = tile_body;
            d.arg = &who[k * 4 + i];
            d.accesses = &acc;
            d.naccesses = 1;
            CHECK_OK(weft_spawn(rt, &d, NULL));
        }
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_unregister(h));
    double re = 0, im = 0; /* -0.0 + 0.25 + 1.25 + ... in spawn order, from 0 */
    for (int k = 0; k < 5; k++) re += -0.0 + (k + 0.25), im += -0.0 - k;
    for (int y = 0; y < 8; y++)
        for (int x = 0; x < 8; x++) CHECKF(a[y][x].re == re && a[y][x].im == im, "(%d, %d)", y, x);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- misuse ---------------------------------------------------------------------- */

static void expect_spawn_error(weft_runtime *rt, weft_data *h, unsigned mode, const char *why) {
    weft_access acc = {h, mode};
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = fail_body;
    d.accesses = &acc;
    d.naccesses = 1;
    CHECK_ERR(weft_spawn(rt, &d, NULL), WEFT_EINVAL);
    CHECKF(strstr(weft_last_error(), why) != NULL, "\"%s\" lacks \"%s\"", weft_last_error(), why);
}

static void expect_register_error(weft_runtime *rt, const weft_reduction_desc *d, int code, const char *why) {
    unsigned op = 12345;
    CHECK_ERR(weft_reduction_register(rt, d, &op), code);
    CHECK(op == 12345);
    CHECKF(strstr(weft_last_error(), why) != NULL, "\"%s\" lacks \"%s\"", weft_last_error(), why);
}

static void test_misuse(void) {
    weft_runtime *rt = test_make_devices("cpu", 2, 0, false);
    weft_runtime *other = test_make_devices("cpu", 1, 0, false);
    pair id = {INFINITY, INT64_MAX};
    weft_reduction_desc good = {sizeof(pair), &id, NULL, argmin_combine, NULL, "argmin"};
    weft_reduction_desc d = good;
    unsigned op;
    expect_register_error(rt, NULL, WEFT_EINVAL, "desc is NULL");
    CHECK_ERR(weft_reduction_register(rt, &good, NULL), WEFT_EINVAL);
    d.elem_size = 0;
    expect_register_error(rt, &d, WEFT_EINVAL, "elem_size is 0");
    d = good;
    d.combine = NULL;
    expect_register_error(rt, &d, WEFT_EINVAL, "combine is NULL");
    d = good;
    d.identity = NULL;
    expect_register_error(rt, &d, WEFT_EINVAL, "neither identity");
    d = good;
    d.init = mat_init;
    expect_register_error(rt, &d, WEFT_EINVAL, "both identity and init");
    expect_register_error(NULL, &good, WEFT_EINVAL, "");

    unsigned argmin = 0, foreign = 0;
    CHECK_OK(weft_reduction_register(rt, &good, &argmin));
    CHECK_OK(weft_reduction_register(other, &good, &foreign));
    static char bytes[24];
    weft_data *h24, *h32;
    static pair p2[2];
    CHECK_OK(weft_data_register(rt, bytes, sizeof bytes, &h24));
    CHECK_OK(weft_data_register(rt, p2, sizeof p2, &h32));
    expect_spawn_error(rt, h24, WEFT_REDUCE | argmin,
                       "reduces 16-byte elements (user reduction \"argmin\"), but its data's 24 bytes");
    expect_spawn_error(rt, h32, WEFT_REDUCE | WEFT_RED_USER, "names no reduction");
    expect_spawn_error(rt, h32, WEFT_REDUCE | foreign, "which this runtime did not register");
    expect_spawn_error(rt, h32, WEFT_REDUCE | argmin | WEFT_RED_SUM, "cannot be combined with WEFT_RED_SUM");
    expect_spawn_error(rt, h32, WEFT_REDUCE | argmin | WEFT_RED_F64, "drop the type");
    expect_spawn_error(rt, h32, WEFT_REDUCE | WEFT_R | argmin, "cannot be combined with");
    /* the operator of a destroyed runtime */
    CHECK_OK(weft_runtime_destroy(other));
    expect_spawn_error(rt, h32, WEFT_REDUCE | foreign, "which this runtime did not register");
    /* and the right one works */
    weft_access acc = {h32, WEFT_REDUCE | argmin};
    weft_task_desc td;
    weft_task_desc_init(&td);
    td.body = fail_body;
    td.accesses = &acc;
    td.naccesses = 1;
    CHECK_OK(weft_spawn(rt, &td, NULL));
    CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED);
    (void)op;
    CHECK_OK(weft_data_unregister(h24));
    CHECK_OK(weft_data_unregister(h32));
    CHECK_OK(weft_runtime_destroy(rt));
    /* registering with a destroyed runtime */
    CHECK_ERR(weft_reduction_register(rt, &good, &op), WEFT_ECLOSED);
}

int main(void) {
    test_watchdog(test_pick(120, 400));
    test_step("misuse");
    test_misuse();
    test_step("many members, cpu and vgpu:2");
    test_members();
    test_step("groups of several operators");
    test_groups();
    test_step("failures and cancellation");
    test_failures();
    test_step("tiles");
    test_tiles();
    printf("test_user_reduce: ok\n");
    return 0;
}
