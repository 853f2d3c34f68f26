/* Reductions: WEFT_REDUCE tasks accumulate into private copies of the data,
 * one per task, on whatever device they run (the CPU, virtual GPUs),
 * combined into the value on the host, in spawn order, when the data is
 * next used otherwise.  Every operator and type against a sequential run,
 * bit for bit (floating-point sums included: the order is fixed); identity
 * where nothing was contributed; reduce then read (CPU, GPU), write,
 * read-write, another operator, unregister, destroy; bad modes refused with
 * messages; failed and cancelled reducers (body, kernel, injected copy
 * failures) contribute nothing; small GPUs (private copies evicted to host
 * memory) and CPU reducers in bounded memory; random graphs of
 * R/W/RW/REDUCE tasks on cpu + 4 virtual GPUs against a sequential run,
 * also in the checking mode and with failures. */
#include "check.h"
#include "testing.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static weft_runtime *make(const char *devices, unsigned workers, size_t vgpu_memory, bool check) {
    return test_make_devices(devices, workers, vgpu_memory, check);
}

static weft_task *spawn_acc(weft_runtime *rt, const char *where, weft_body_fn body, void *arg,
                            const weft_access *acc, size_t nacc, bool want) {
    return test_spawn_at(rt, where, 0.25, body, arg, acc, nacc, want);
}

static weft_task *spawn1(weft_runtime *rt, const char *where, weft_body_fn body, void *arg, weft_data *h,
                         unsigned mode, bool want) {
    weft_access acc = {h, mode};
    return spawn_acc(rt, where, body, arg, &acc, 1, want);
}

static void memory_back(weft_runtime *rt, const char *what) { /* every device, the host included */
    for (unsigned i = 0; i < weft_device_count(rt); i++) {
        weft_device_info info;
        CHECK_OK(weft_device_info_get(rt, i, &info));
        CHECKF(info.memory_used == 0, "%s: %s keeps %zu bytes", what, info.name, info.memory_used);
    }
}

/* ---- the operators, as weft.h defines them -------------------------------- */

static const unsigned TYPES[6] = {WEFT_RED_I32, WEFT_RED_I64, WEFT_RED_U32,
                                  WEFT_RED_U64, WEFT_RED_F32, WEFT_RED_F64};
static const unsigned OPS[3] = {WEFT_RED_SUM, WEFT_RED_MIN, WEFT_RED_MAX};
static const char *const TYPE_NAMES[7] = {"?", "i32", "i64", "u32", "u64", "f32", "f64"};
static const char *const OP_NAMES[4] = {"?", "sum", "min", "max"};

static size_t tsize(unsigned key) {
    unsigned t = key & WEFT_RED_TYPE_MASK;
    return t == WEFT_RED_I32 || t == WEFT_RED_U32 || t == WEFT_RED_F32 ? 4 : 8;
}
static const char *kname(unsigned key, char *buf) {
    sprintf(buf, "%s %s", OP_NAMES[(key & WEFT_RED_OP_MASK) >> 12], TYPE_NAMES[(key & WEFT_RED_TYPE_MASK) >> 16]);
    return buf;
}

typedef union elem {
    int32_t i32;
    int64_t i64;
    uint32_t u32;
    uint64_t u64;
    float f32;
    double f64;
} elem;

#define FMIN(a, b) (isnan(a) ? (a) : isnan(b) ? (b) : ((b) < (a) || ((b) == (a) && signbit(b))) ? (b) : (a))
#define FMAX(a, b) (isnan(a) ? (a) : isnan(b) ? (b) : ((b) > (a) || ((b) == (a) && !signbit(b))) ? (b) : (a))
#define IMIN(a, b) ((b) < (a) ? (b) : (a))
#define IMAX(a, b) ((b) > (a) ? (b) : (a))

/* *p = *p OP y for one element of key's type. */
static void apply(unsigned key, void *p, elem y) {
    elem a;
    memcpy(&a, p, tsize(key));
    unsigned op = key & WEFT_RED_OP_MASK;
    switch (key & WEFT_RED_TYPE_MASK) {
    case WEFT_RED_I32:
        a.i32 = op == WEFT_RED_SUM ? (int32_t)(a.u32 + y.u32) : op == WEFT_RED_MIN ? IMIN(a.i32, y.i32) : IMAX(a.i32, y.i32);
        break;
    case WEFT_RED_I64:
        a.i64 = op == WEFT_RED_SUM ? (int64_t)(a.u64 + y.u64) : op == WEFT_RED_MIN ? IMIN(a.i64, y.i64) : IMAX(a.i64, y.i64);
        break;
    case WEFT_RED_U32:
        a.u32 = op == WEFT_RED_SUM ? a.u32 + y.u32 : op == WEFT_RED_MIN ? IMIN(a.u32, y.u32) : IMAX(a.u32, y.u32);
        break;
    case WEFT_RED_U64:
        a.u64 = op == WEFT_RED_SUM ? a.u64 + y.u64 : op == WEFT_RED_MIN ? IMIN(a.u64, y.u64) : IMAX(a.u64, y.u64);
        break;
    case WEFT_RED_F32:
        a.f32 = op == WEFT_RED_SUM ? a.f32 + y.f32 : op == WEFT_RED_MIN ? FMIN(a.f32, y.f32) : FMAX(a.f32, y.f32);
        break;
    default:
        a.f64 = op == WEFT_RED_SUM ? a.f64 + y.f64 : op == WEFT_RED_MIN ? FMIN(a.f64, y.f64) : FMAX(a.f64, y.f64);
        break;
    }
    memcpy(p, &a, tsize(key));
}

static elem identity(unsigned key) {
    elem e;
    memset(&e, 0, sizeof e);
    unsigned op = key & WEFT_RED_OP_MASK;
    bool min = op == WEFT_RED_MIN;
    switch (key & WEFT_RED_TYPE_MASK) {
    case WEFT_RED_I32: e.i32 = op == WEFT_RED_SUM ? 0 : min ? INT32_MAX : INT32_MIN; break;
    case WEFT_RED_I64: e.i64 = op == WEFT_RED_SUM ? 0 : min ? INT64_MAX : INT64_MIN; break;
    case WEFT_RED_U32: e.u32 = min ? UINT32_MAX : 0; break;
    case WEFT_RED_U64: e.u64 = min ? UINT64_MAX : 0; break;
    case WEFT_RED_F32: e.f32 = op == WEFT_RED_SUM ? -0.0f : min ? INFINITY : -INFINITY; break;
    default: e.f64 = op == WEFT_RED_SUM ? -0.0 : min ? (double)INFINITY : -(double)INFINITY; break;
    }
    return e;
}

/* A value of key's type from a hash: any bits for integers; for floating
 * point, thirds (sums round: their order shows in the last bits). */
static elem value_of(unsigned key, uint64_t h) {
    elem e;
    memset(&e, 0, sizeof e);
    double x = (double)((int64_t)(h % 20001) - 10000) / 3.0;
    switch (key & WEFT_RED_TYPE_MASK) {
    case WEFT_RED_I32: case WEFT_RED_U32: e.u32 = (uint32_t)h; break;
    case WEFT_RED_I64: case WEFT_RED_U64: e.u64 = h; break;
    case WEFT_RED_F32: e.f32 = (float)((int64_t)(h % 20001) - 10000) / 3.0f; break;
    default: e.f64 = x; break;
    }
    return e;
}

static void fill_values(unsigned key, void *p, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) {
        elem e = value_of(key, mix64(seed + i));
        memcpy((char *)p + i * tsize(key), &e, tsize(key));
    }
}

static void fill_identity(unsigned key, void *p, size_t n) {
    elem e = identity(key);
    for (size_t i = 0; i < n; i++) memcpy((char *)p + i * tsize(key), &e, tsize(key));
}

static bool is_identity(unsigned key, const void *p, size_t n) {
    elem e = identity(key);
    for (size_t i = 0; i < n; i++)
        if (memcmp((const char *)p + i * tsize(key), &e, tsize(key)) != 0) return false;
    return true;
}

/* dst = dst OP src, element by element. */
static void combine(unsigned key, void *dst, const void *src, size_t n) {
    for (size_t i = 0; i < n; i++) {
        elem y;
        memcpy(&y, (const char *)src + i * tsize(key), tsize(key));
        apply(key, (char *)dst + i * tsize(key), y);
    }
}

/* ---- a reducing task ------------------------------------------------------ */

typedef struct red {
    unsigned key;      /* operator | type */
    uint64_t salt;     /* its contributions */
    size_t n;          /* elements */
    int nterms;        /* contributions per element */
    int fail;          /* 1: the body fails (after working), 2: the kernel fails */
    void *p;           /* its private copy (set by the body) */
    void *host;        /* the user's memory */
    int saw_host, saw_not_identity;
} red;

static elem term(const red *r, size_t i, int k) {
    return value_of(r->key, mix64(r->salt * 0x9e3779b97f4a7c15ull + i * 131 + (uint64_t)k));
}

static void red_work(red *r, void *p) {
    for (size_t i = 0; i < r->n; i++)
        for (int k = 0; k < r->nterms; k++) apply(r->key, (char *)p + i * tsize(r->key), term(r, i, k));
}

/* What the task adds to the reference: an identity-initialised temporary
 * with its contributions, combined into the value. */
static void red_reference(red *r, void *value) {
    static unsigned char tmp[1 << 17];
    CHECK(r->n * tsize(r->key) <= sizeof tmp);
    fill_identity(r->key, tmp, r->n);
    red_work(r, tmp);
    combine(r->key, value, tmp, r->n);
}

static int red_kernel(void *arg) {
    red *r = arg;
    if (!is_identity(r->key, r->p, r->n)) {
        r->saw_not_identity = 1;
        return 98;
    }
    red_work(r, r->p);
    return r->fail == 2 ? 7 : 0;
}

static int red_body(weft_ctx *ctx, void *arg) {
    red *r = arg;
    r->p = weft_ctx_data(ctx, 0);
    r->saw_host = r->p == r->host;
    if (r->fail == 1) {
        red_work(r, r->p); /* what it wrote must not count */
        return 5;
    }
    if (weft_ctx_gpu_count(ctx) == 0) return red_kernel(r);
    weft_range rw = {r->p, r->n * tsize(r->key), WEFT_RW};
    return weft_ctx_queue_rw(ctx, 0, red_kernel, r, 0, &rw, 1);
}

/* A reader that compares the data with what is expected, bit for bit. */
typedef struct rd {
    const void *want;
    size_t bytes;
    const void *p;
    _Atomic int ok;
} rd;
static int rd_kernel(void *arg) {
    rd *r = arg;
    if (memcmp(r->p, r->want, r->bytes) != 0) return 1;
    atomic_store(&r->ok, 1);
    return 0;
}
static int rd_body(weft_ctx *ctx, void *arg) {
    rd *r = arg;
    r->p = weft_ctx_data(ctx, 0);
    if (weft_ctx_gpu_count(ctx) == 0) return rd_kernel(r);
    weft_range rr = {(void *)r->p, r->bytes, WEFT_R};
    return weft_ctx_queue_rw(ctx, 0, rd_kernel, r, 0, &rr, 1);
}

/* A writer: every byte := x (W) or += x (RW, as bytes). */
typedef struct wr {
    unsigned char x;
    size_t bytes;
    unsigned mode;
    unsigned char *p;
} wr;
static int wr_kernel(void *arg) {
    wr *w = arg;
    for (size_t i = 0; i < w->bytes; i++) w->p[i] = (unsigned char)((w->mode & WEFT_R ? w->p[i] : 0) + w->x);
    return 0;
}
static int wr_body(weft_ctx *ctx, void *arg) {
    wr *w = arg;
    w->p = weft_ctx_data(ctx, 0);
    if (weft_ctx_gpu_count(ctx) == 0) return wr_kernel(w);
    weft_range r = {w->p, w->bytes, w->mode & WEFT_RW};
    return weft_ctx_queue_rw(ctx, 0, wr_kernel, w, 0, &r, 1);
}

static const char *const PLACES[6] = {"cpu", "gpu:0", "gpu:1", "gpu:2", "gpu:3", "gpu"};

/* ---- every operator and type ---------------------------------------------- */

enum { N = 1000, K = 24 };
static unsigned char g_data[N * 8], g_ref[N * 8];
static red g_reds[256];

static void test_basic(void) {
    weft_runtime *rt = make("cpu,vgpu:4", 2, 0, false);
    char name[32];
    for (int ti = 0; ti < 6; ti++)
        for (int oi = 0; oi < 3; oi++) {
            unsigned key = OPS[oi] | TYPES[ti];
            size_t bytes = N * tsize(key);
            fill_values(key, g_data, N, (uint64_t)key);
            memcpy(g_ref, g_data, bytes);
            weft_data *h;
            CHECK_OK(weft_data_register(rt, g_data, bytes, &h));
            for (int k = 0; k < K; k++) {
                g_reds[k] = (red){key, (uint64_t)(k + 1) * 77 + key, N, 1 + k % 3, 0, NULL, g_data, 0, 0};
                spawn1(rt, PLACES[k % 6], red_body, &g_reds[k], h, WEFT_REDUCE | key, false);
            }
            for (int k = 0; k < K; k++) red_reference(&g_reds[k], g_ref);
            /* readers after the group, on the CPU and on a GPU, see it all */
            rd r1 = {g_ref, bytes, NULL, 0}, r2 = {g_ref, bytes, NULL, 0};
            spawn1(rt, "cpu", rd_body, &r1, h, WEFT_R, false);
            spawn1(rt, "gpu:1", rd_body, &r2, h, WEFT_R, false);
            CHECKF(weft_wait_all(rt) == 0, "%s: %s", kname(key, name), weft_last_error());
            CHECKF(atomic_load(&r1.ok) && atomic_load(&r2.ok), "%s", kname(key, name));
            for (int k = 0; k < K; k++)
                CHECKF(!g_reds[k].saw_host && !g_reds[k].saw_not_identity, "%s: reducer %d", kname(key, name), k);
            CHECK_OK(weft_data_unregister(h));
            CHECKF(memcmp(g_data, g_ref, bytes) == 0, "%s: the value differs from the sequential run",
                   kname(key, name));
        }
    memory_back(rt, "basic");
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- identity: reducers that contribute nothing change no bit ------------ */

static void test_identity(void) {
    weft_runtime *rt = make("cpu,vgpu:4", 2, 0, false);
    static double v[16], before[16];
    double specials[16] = {-0.0, 0.0, NAN, INFINITY, -INFINITY, 1.5, -2.25, 1e308, -1e308, 5e-324,
                           -5e-324, 3.0, 0.1, -0.1, 42.0, -0.0};
    for (int oi = 0; oi < 3; oi++) {
        unsigned key = OPS[oi] | WEFT_RED_F64;
        memcpy(v, specials, sizeof v);
        memcpy(before, v, sizeof v);
        weft_data *h;
        CHECK_OK(weft_data_register(rt, v, sizeof v, &h));
        red r[6];
        for (int k = 0; k < 6; k++) {
            r[k] = (red){key, (uint64_t)k, 16, 0, 0, NULL, v, 0, 0}; /* no term */
            spawn1(rt, PLACES[k], red_body, &r[k], h, WEFT_REDUCE | key, false);
        }
        CHECK_OK(weft_wait_all(rt));
        CHECK_OK(weft_data_unregister(h));
        CHECKF(memcmp(v, before, sizeof v) == 0, "op %d changed the value", oi);
    }
    /* integers at their limits */
    static int64_t w[4];
    for (int oi = 0; oi < 3; oi++) {
        w[0] = INT64_MIN, w[1] = INT64_MAX, w[2] = 0, w[3] = -1;
        weft_data *h;
        CHECK_OK(weft_data_register(rt, w, sizeof w, &h));
        red r = {OPS[oi] | WEFT_RED_I64, 1, 4, 0, 0, NULL, w, 0, 0};
        spawn1(rt, "gpu:3", red_body, &r, h, WEFT_REDUCE | r.key, false);
        CHECK_OK(weft_wait_all(rt));
        CHECK_OK(weft_data_unregister(h));
        CHECK(w[0] == INT64_MIN && w[1] == INT64_MAX && w[2] == 0 && w[3] == -1);
    }
    /* every reducer on one GPU: the others hold nothing, and the result is
     * as if they had contributed identities */
    static double a[N], ref[N];
    fill_values(WEFT_RED_F64, a, N, 9);
    memcpy(ref, a, sizeof a);
    weft_data *h;
    CHECK_OK(weft_data_register(rt, a, sizeof a, &h));
    red r[8];
    for (int k = 0; k < 8; k++) {
        r[k] = (red){WEFT_RED_SUM | WEFT_RED_F64, (uint64_t)k + 100, N, 2, 0, NULL, a, 0, 0};
        spawn1(rt, "gpu:2", red_body, &r[k], h, WEFT_REDUCE | r[k].key, false);
        red_reference(&r[k], ref);
    }
    CHECK_OK(weft_wait_all(rt));
    for (unsigned g = 1; g <= 4; g++) {
        weft_device_info info;
        CHECK_OK(weft_device_info_get(rt, g, &info));
        CHECKF(g == 3 || info.memory_used == 0, "GPU %u holds %zu bytes", g, info.memory_used);
    }
    CHECK_OK(weft_data_unregister(h));
    CHECK(memcmp(a, ref, sizeof a) == 0);
    /* -0.0: a sum of -0.0s stays -0.0; min(+0.0, -0.0) is -0.0, max +0.0 */
    static double z[2] = {-0.0, 0.0};
    CHECK_OK(weft_data_register(rt, z, sizeof z, &h));
    red rz = {WEFT_RED_SUM | WEFT_RED_F64, 1, 2, 0, 0, NULL, z, 0, 0};
    spawn1(rt, "gpu:0", red_body, &rz, h, WEFT_REDUCE | rz.key, false);
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_unregister(h));
    CHECK(signbit(z[0]) && z[0] == 0 && !signbit(z[1]) && z[1] == 0);
    memory_back(rt, "identity");
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- what follows a group ------------------------------------------------- */

static void spawn_group(weft_runtime *rt, weft_data *h, unsigned key, red *r, int n, uint64_t salt, void *host,
                        void *ref, size_t nelem) {
    for (int k = 0; k < n; k++) {
        r[k] = (red){key, salt + (uint64_t)k, nelem, 1 + k % 2, 0, NULL, host, 0, 0};
        spawn1(rt, PLACES[(k + salt) % 6], red_body, &r[k], h, WEFT_REDUCE | key, false);
        if (ref) red_reference(&r[k], ref);
    }
}

static void test_sequences(void) {
    weft_runtime *rt = make("cpu,vgpu:4", 2, 0, false);
    static double a[N], ref[N];
    static red r[12];
    const unsigned SUM = WEFT_RED_SUM | WEFT_RED_F64, MIN = WEFT_RED_MIN | WEFT_RED_F64;
    weft_data *h;

    /* the value first on a GPU (a writer there), then a group, then
     * read-write on another GPU, then a group of another operator straight
     * after (combined when it starts), then readers on every device */
    fill_values(SUM, a, N, 1);
    memcpy(ref, a, sizeof a);
    CHECK_OK(weft_data_register(rt, a, sizeof a, &h));
    wr w1 = {3, sizeof a, WEFT_RW, NULL};
    spawn1(rt, "gpu:0", wr_body, &w1, h, WEFT_RW, false);
    for (size_t i = 0; i < sizeof a; i++) ((unsigned char *)ref)[i] += 3;
    spawn_group(rt, h, SUM, r, 6, 10, a, ref, N);
    wr w2 = {1, sizeof a, WEFT_RW, NULL};
    spawn1(rt, "gpu:1", wr_body, &w2, h, WEFT_RW, false);
    for (size_t i = 0; i < sizeof a; i++) ((unsigned char *)ref)[i] += 1;
    spawn_group(rt, h, SUM, r + 6, 3, 20, a, ref, N);
    spawn_group(rt, h, MIN, r + 9, 3, 30, a, ref, N); /* no reader between */
    rd rds[6];
    for (int k = 0; k < 6; k++) {
        rds[k] = (rd){ref, sizeof a, NULL, 0};
        spawn1(rt, PLACES[k], rd_body, &rds[k], h, WEFT_R, false);
    }
    CHECKF(weft_wait_all(rt) == 0, "%s", weft_last_error());
    for (int k = 0; k < 6; k++) CHECKF(atomic_load(&rds[k].ok), "reader on %s", PLACES[k]);
    /* a group, a reader, a group of the same operator: two groups */
    spawn_group(rt, h, SUM, r, 4, 40, a, ref, N);
    rd mid = {NULL, sizeof a, NULL, 0};
    static double mid_want[N];
    memcpy(mid_want, ref, sizeof a);
    mid.want = mid_want;
    spawn1(rt, "gpu:2", rd_body, &mid, h, WEFT_R, false);
    spawn_group(rt, h, SUM, r + 4, 4, 50, a, ref, N);
    CHECK_OK(weft_wait_all(rt));
    CHECK(atomic_load(&mid.ok));
    /* then unregister: the newest value back in the user's memory */
    CHECK_OK(weft_data_unregister(h));
    CHECK(memcmp(a, ref, sizeof a) == 0);

    /* reduce then write: the writer's value wins; then reduce with
     * WEFT_HOST (the private copy in host memory, on a GPU task) */
    CHECK_OK(weft_data_register(rt, a, sizeof a, &h));
    spawn_group(rt, h, SUM, r, 5, 60, a, NULL, N);
    wr w3 = {9, sizeof a, WEFT_W, NULL};
    spawn1(rt, "gpu:3", wr_body, &w3, h, WEFT_W, false);
    memset(ref, 9, sizeof ref);
    red rh = {SUM, 70, N, 1, 0, NULL, a, 0, 0};
    spawn1(rt, "gpu:1", red_body, &rh, h, WEFT_REDUCE | WEFT_HOST | SUM, false);
    red_reference(&rh, ref);
    CHECK_OK(weft_wait_all(rt));
    CHECK(!rh.saw_host && !rh.saw_not_identity);
    CHECK_OK(weft_data_unregister(h));
    CHECK(memcmp(a, ref, sizeof a) == 0);
    memory_back(rt, "sequences");

    /* reduce then destroy: destroy combines too */
    fill_values(SUM, a, N, 2);
    memcpy(ref, a, sizeof a);
    CHECK_OK(weft_data_register(rt, a, sizeof a, &h));
    spawn_group(rt, h, SUM, r, 6, 80, a, ref, N);
    CHECK_OK(weft_runtime_destroy(rt));
    CHECK(memcmp(a, ref, sizeof a) == 0);
}

/* ---- bad modes ------------------------------------------------------------ */

static void test_bad(void) {
    weft_runtime *rt = make("cpu,vgpu:4", 2, 0, false);
    static double a[8];
    static char odd[12];
    weft_data *h, *h2, *hodd;
    CHECK_OK(weft_data_register(rt, a, sizeof a, &h));
    CHECK_OK(weft_data_register(rt, a, sizeof a, &h2));
    CHECK_OK(weft_data_register(rt, odd, sizeof odd, &hodd));
    static const struct {
        unsigned mode;
        int on_odd;
        const char *msg;
    } bad[] = {
        {WEFT_REDUCE | WEFT_R | WEFT_RED_SUM | WEFT_RED_F64, 0, "cannot be combined with WEFT_R, WEFT_W, WEFT_COMMUTE or WEFT_UNORDERED"},
        {WEFT_REDUCE | WEFT_W | WEFT_RED_SUM | WEFT_RED_F64, 0, "cannot be combined"},
        {WEFT_REDUCE | WEFT_RW | WEFT_RED_SUM | WEFT_RED_F64, 0, "cannot be combined"},
        {WEFT_REDUCE | WEFT_COMMUTE | WEFT_RED_SUM | WEFT_RED_F64, 0, "cannot be combined"},
        {WEFT_REDUCE | WEFT_RED_F64, 0, "operator 0x0"},
        {WEFT_REDUCE | (8u << 12) | WEFT_RED_F64, 0, "operator 0x8000"},
        {WEFT_REDUCE | WEFT_RED_USER, 0, "names no reduction"}, /* (test_user_reduce: the rest) */
        {WEFT_REDUCE | WEFT_RED_SUM, 0, "type 0x0"},
        {WEFT_REDUCE | WEFT_RED_SUM | (7u << 16), 0, "type 0x70000"},
        {WEFT_REDUCE | WEFT_RED_SUM | 0x4000000u, 0, "unknown bits 0x4000000"},
        {WEFT_REDUCE | WEFT_RED_SUM | WEFT_RED_F64 | WEFT_ON_GPU(0), 0, "WEFT_ON_GPU goes with"},
        {WEFT_REDUCE | WEFT_RED_MIN | WEFT_RED_F64, 1, "8-byte elements, but its data's 12 bytes"},
        {WEFT_RW | WEFT_RED_SUM | WEFT_RED_F64, 0, "invalid mode"}, /* an operator without WEFT_REDUCE */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        weft_access acc[2] = {{h2, WEFT_R}, {bad[i].on_odd ? hodd : h, bad[i].mode}};
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.body = test_noop;
        d.accesses = acc;
        d.naccesses = 2;
        CHECK_ERR(weft_spawn(rt, &d, NULL), WEFT_EINVAL);
        CHECKF(strstr(weft_last_error(), "access 1") && strstr(weft_last_error(), bad[i].msg), "case %zu: %s", i,
               weft_last_error());
    }
    /* the same data twice, one of them a reduction */
    weft_access twice[2] = {{h, WEFT_R}, {h, WEFT_REDUCE | WEFT_RED_SUM | WEFT_RED_F64}};
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = test_noop;
    d.accesses = twice;
    d.naccesses = 2;
    CHECK_ERR(weft_spawn(rt, &d, NULL), WEFT_EINVAL);
    CHECKF(strstr(weft_last_error(), "access 1 reduces data that access 0 names too"), "%s", weft_last_error());
    twice[0].mode = twice[1].mode;
    CHECK_ERR(weft_spawn(rt, &d, NULL), WEFT_EINVAL);
    CHECKF(strstr(weft_last_error(), "access 0 reduces data that access 1 names too"), "%s", weft_last_error());
    /* data partitioned into tiles is refused (its tiles are reduced: test_tiles) */
    static uint32_t big[64];
    weft_data *hb, *tiles[2];
    CHECK_OK(weft_data_register(rt, big, sizeof big, &hb));
    weft_tiling t = {sizeof(uint32_t), 1, 64, 0, 1, 2, 0};
    CHECK_OK(weft_data_partition(hb, &t, tiles));
    weft_access one = {hb, WEFT_REDUCE | WEFT_RED_SUM | WEFT_RED_U32};
    d.accesses = &one;
    d.naccesses = 1;
    CHECK_ERR(weft_spawn(rt, &d, NULL), WEFT_EINVAL);
    CHECKF(strstr(weft_last_error(), "access 0 reduces data partitioned into tiles: reduce its tiles"), "%s",
           weft_last_error());
    /* partitioning data with a reducer pending is refused, as with any task */
    static uint32_t pend[64];
    weft_data *hpend, *pt[2];
    CHECK_OK(weft_data_register(rt, pend, sizeof pend, &hpend));
    block_workers_reset();
    weft_task *blk;
    CHECK_OK(weft_spawn_simple(rt, blocker, NULL, &blk));
    red rp = {WEFT_RED_MAX | WEFT_RED_U32, 3, 64, 1, 0, NULL, pend, 0, 0};
    weft_access racc = {hpend, WEFT_REDUCE | rp.key};
    weft_task_desc rd_desc;
    weft_task_desc_init(&rd_desc);
    rd_desc.body = red_body;
    rd_desc.arg = &rp;
    rd_desc.accesses = &racc;
    rd_desc.naccesses = 1;
    rd_desc.deps = &blk;
    rd_desc.ndeps = 1;
    CHECK_OK(weft_spawn(rt, &rd_desc, NULL));
    CHECK_ERR(weft_data_partition(hpend, &t, pt), WEFT_EBUSY);
    atomic_store(&gate, 1);
    weft_task_release(blk);
    CHECK_OK(weft_wait_all(rt));
    static uint32_t pend_ref[64];
    red_reference(&rp, pend_ref);
    CHECK_OK(weft_data_partition(hpend, &t, pt));
    /* data that was reduced, then partitioned: the tiles see the sums */
    static uint32_t pre[64];
    weft_data *hp, *ptiles[2];
    CHECK_OK(weft_data_register(rt, pre, sizeof pre, &hp));
    red r[3];
    static uint32_t pref[64];
    spawn_group(rt, hp, WEFT_RED_SUM | WEFT_RED_U32, r, 3, 5, pre, pref, 64);
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_partition(hp, &t, ptiles));
    rd pr = {pref + 32, 32 * sizeof(uint32_t), NULL, 0};
    spawn1(rt, "gpu:0", rd_body, &pr, ptiles[1], WEFT_R, false);
    CHECK_OK(weft_wait_all(rt));
    CHECK(atomic_load(&pr.ok));
    /* a task reducing other data beside a tile (whose neighbours' order
     * the spawn adds) */
    static uint32_t halo_arr[64];
    weft_data *hh, *htiles[2];
    weft_tiling th = {sizeof(uint32_t), 1, 64, 0, 1, 2, 1};
    CHECK_OK(weft_data_register(rt, halo_arr, sizeof halo_arr, &hh));
    CHECK_OK(weft_data_partition(hh, &th, htiles));
    static int64_t other[16], other_ref[16];
    weft_data *ho;
    CHECK_OK(weft_data_register(rt, other, sizeof other, &ho));
    static red ro[4];
    for (int k = 0; k < 4; k++) {
        ro[k] = (red){WEFT_RED_MIN | WEFT_RED_I64, (uint64_t)k + 40, 16, 2, 0, NULL, other, 0, 0};
        weft_access two[2] = {{ho, WEFT_REDUCE | ro[k].key}, {htiles[k % 2], WEFT_R}};
        spawn_acc(rt, PLACES[k], red_body, &ro[k], two, 2, false);
        red_reference(&ro[k], other_ref);
    }
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_unregister(ho));
    CHECK(memcmp(other, other_ref, sizeof other) == 0);
    CHECK_OK(weft_runtime_destroy(rt));
    CHECK(memcmp(pre, pref, sizeof pre) == 0);
    CHECK(memcmp(pend, pend_ref, sizeof pend) == 0);
}

/* ---- failures --------------------------------------------------------------- */

static void test_failures(void) {
    weft_runtime *rt = make("cpu,vgpu:4", 2, 0, false);
    static double a[N], ref[N];
    static red r[8];
    const unsigned SUM = WEFT_RED_SUM | WEFT_RED_F64;
    for (int how = 1; how <= 2; how++) { /* the body fails; the kernel fails */
        fill_values(SUM, a, N, 3);
        memcpy(ref, a, sizeof a);
        weft_data *h;
        CHECK_OK(weft_data_register(rt, a, sizeof a, &h));
        weft_task *bad = NULL;
        for (int k = 0; k < 6; k++) {
            r[k] = (red){SUM, (uint64_t)k + 7, N, 1, k == 3 ? how : 0, NULL, a, 0, 0};
            weft_task *t = spawn1(rt, PLACES[k % 5 + 1], red_body, &r[k], h, WEFT_REDUCE | SUM, k == 3);
            if (k == 3) bad = t;
            else red_reference(&r[k], ref);
        }
        rd reader = {ref, sizeof a, NULL, 0};
        weft_task *rt1 = spawn1(rt, "cpu", rd_body, &reader, h, WEFT_R, true);
        CHECK_ERR(weft_task_wait(bad), WEFT_ETASKFAILED);
        CHECK_ERR(weft_task_wait(rt1), WEFT_ECANCELLED); /* it would read a failed reduction */
        weft_task_info info;
        CHECK_OK(weft_task_info_get(rt1, &info));
        weft_task_info binfo;
        CHECK_OK(weft_task_info_get(bad, &binfo));
        CHECK(info.cause_id == binfo.id);
        weft_task_release(bad);
        weft_task_release(rt1);
        CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED);
        /* the others' copies are combined, the failed one's is not */
        CHECK_OK(weft_data_unregister(h));
        CHECKF(memcmp(a, ref, sizeof a) == 0, "how %d", how);
    }
    /* a writer after a failed group runs (it makes the data valid again) */
    weft_data *h;
    CHECK_OK(weft_data_register(rt, a, sizeof a, &h));
    r[0] = (red){SUM, 1, N, 1, 1, NULL, a, 0, 0};
    spawn1(rt, "gpu:0", red_body, &r[0], h, WEFT_REDUCE | SUM, false);
    wr w = {4, sizeof a, WEFT_W, NULL};
    weft_task *wt = spawn1(rt, "gpu:1", wr_body, &w, h, WEFT_W, true);
    CHECK_OK(weft_task_wait(wt));
    weft_task_release(wt);
    CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED);
    CHECK_OK(weft_data_unregister(h));
    for (size_t i = 0; i < sizeof a; i++) CHECK(((unsigned char *)a)[i] == 4);

    /* a reducer cancelled before it ran contributes nothing; its readers
     * are cancelled naming it */
    fill_values(SUM, a, N, 4);
    memcpy(ref, a, sizeof a);
    CHECK_OK(weft_data_register(rt, a, sizeof a, &h));
    block_workers_reset();
    weft_task *blk;
    CHECK_OK(weft_spawn_simple(rt, blocker, NULL, &blk));
    r[0] = (red){SUM, 11, N, 1, 0, NULL, a, 0, 0};
    r[1] = (red){SUM, 12, N, 1, 0, NULL, a, 0, 0};
    weft_access acc = {h, WEFT_REDUCE | SUM};
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = red_body;
    d.arg = &r[0];
    d.accesses = &acc;
    d.naccesses = 1;
    d.deps = &blk;
    d.ndeps = 1;
    weft_task *c0;
    CHECK_OK(weft_spawn(rt, &d, &c0));
    CHECK_OK(weft_task_cancel(c0));
    spawn1(rt, "gpu:2", red_body, &r[1], h, WEFT_REDUCE | SUM, false);
    red_reference(&r[1], ref);
    rd reader = {ref, sizeof a, NULL, 0};
    weft_task *rt2 = spawn1(rt, "gpu:0", rd_body, &reader, h, WEFT_R, true);
    atomic_store(&gate, 1);
    CHECK_ERR(weft_task_wait(rt2), WEFT_ECANCELLED);
    weft_task_info info;
    CHECK_OK(weft_task_info_get(rt2, &info));
    weft_task_info cinfo;
    CHECK_OK(weft_task_info_get(c0, &cinfo));
    CHECK(cinfo.status == WEFT_TASK_CANCELLED && info.cause_id == cinfo.id);
    weft_task_release(c0);
    weft_task_release(rt2);
    weft_task_release(blk);
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_unregister(h));
    CHECK(memcmp(a, ref, sizeof a) == 0);

    /* the fill of a GPU reducer's private copy fails (an injected copy
     * failure): the task fails and contributes nothing */
    fill_values(SUM, a, N, 5);
    memcpy(ref, a, sizeof a);
    CHECK_OK(weft_data_register(rt, a, sizeof a, &h));
    r[0] = (red){SUM, 21, N, 1, 0, NULL, a, 0, 0};
    weft__test_vgpu_fail_copies(1);
    weft_task *f0 = spawn1(rt, "gpu:1", red_body, &r[0], h, WEFT_REDUCE | SUM, true);
    CHECK_ERR(weft_task_wait(f0), WEFT_ETASKFAILED);
    weft_task_release(f0);
    weft__test_vgpu_fail_copies(0);
    CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED);
    CHECK_OK(weft_data_unregister(h));
    CHECK(memcmp(a, ref, sizeof a) == 0);
    CHECK_OK(weft_data_register(rt, a, sizeof a, &h));
    /* combining fails (an injected failure of a copy from a GPU): the
     * reader fails; what was combined stays, the rest is combined by the
     * next reader */
    r[1] = (red){SUM, 22, N, 2, 0, NULL, a, 0, 0};
    r[2] = (red){SUM, 23, N, 1, 0, NULL, a, 0, 0};
    r[3] = (red){SUM, 24, N, 3, 0, NULL, a, 0, 0};
    spawn1(rt, "cpu", red_body, &r[1], h, WEFT_REDUCE | SUM, false);
    spawn1(rt, "gpu:2", red_body, &r[2], h, WEFT_REDUCE | SUM, false);
    spawn1(rt, "gpu:3", red_body, &r[3], h, WEFT_REDUCE | SUM, false);
    for (int k = 1; k <= 3; k++) red_reference(&r[k], ref);
    CHECK_OK(weft_wait_all(rt));
    weft__test_vgpu_fail_copies(1);
    rd r3 = {ref, sizeof a, NULL, 0};
    weft_task *ft = spawn1(rt, "cpu", rd_body, &r3, h, WEFT_R, true);
    CHECK_ERR(weft_task_wait(ft), WEFT_ETASKFAILED);
    weft_task_release(ft);
    weft__test_vgpu_fail_copies(0);
    CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED);
    rd r4 = {ref, sizeof a, NULL, 0}, r5 = {ref, sizeof a, NULL, 0};
    spawn1(rt, "gpu:0", rd_body, &r4, h, WEFT_R, false);
    spawn1(rt, "cpu", rd_body, &r5, h, WEFT_R, false);
    CHECKF(weft_wait_all(rt) == 0, "%s", weft_last_error());
    CHECK(atomic_load(&r4.ok) && atomic_load(&r5.ok));
    CHECK_OK(weft_data_unregister(h));
    CHECK(memcmp(a, ref, sizeof a) == 0);
    memory_back(rt, "failures");
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- memory: small GPUs, many CPU reducers ------------------------------------ */

static _Atomic size_t g_host_peak;
static weft_runtime *g_rt;
static int peak_body(weft_ctx *ctx, void *arg) {
    weft_device_info info;
    if (weft_device_info_get(g_rt, 0, &info) != 0) return 1;
    size_t peak = atomic_load(&g_host_peak);
    while (info.memory_used > peak && !atomic_compare_exchange_weak(&g_host_peak, &peak, info.memory_used)) {
    }
    return red_body(ctx, arg);
}

static void test_memory(void) {
    /* 40 reducers of 16 KiB on one 64 KiB GPU: the private copies of the
     * finished ones go to host memory */
    weft_runtime *rt = make("cpu,vgpu:2", 2, 64u << 10, false);
    enum { M = 2048 };
    static double a[M], ref[M];
    static red r[40];
    const unsigned SUM = WEFT_RED_SUM | WEFT_RED_F64;
    fill_values(SUM, a, M, 6);
    memcpy(ref, a, sizeof a);
    weft_data *h;
    CHECK_OK(weft_data_register(rt, a, sizeof a, &h));
    for (int k = 0; k < 40; k++) {
        r[k] = (red){SUM, (uint64_t)k + 300, M, 1 + k % 2, 0, NULL, a, 0, 0};
        spawn1(rt, k % 4 ? "gpu:0" : "gpu", red_body, &r[k], h, WEFT_REDUCE | SUM, false);
        red_reference(&r[k], ref);
    }
    rd reader = {ref, sizeof a, NULL, 0};
    spawn1(rt, "gpu:1", rd_body, &reader, h, WEFT_R, false);
    CHECKF(weft_wait_all(rt) == 0, "%s", weft_last_error());
    CHECK(atomic_load(&reader.ok));
    weft_device_info info;
    CHECK_OK(weft_device_info_get(rt, 1, &info));
    CHECKF(info.memory_used <= info.memory, "%zu used", info.memory_used);
    CHECK_OK(weft_data_unregister(h));
    CHECK(memcmp(a, ref, sizeof a) == 0);
    memory_back(rt, "memory");
    CHECK_OK(weft_runtime_destroy(rt));

    /* many CPU reducers of an integer sum: the finished ones are combined
     * as later ones start, so host memory stays bounded */
    rt = g_rt = make("cpu", 2, 0, false);
    static uint64_t u[M], uref[M];
    static red ur[600];
    const unsigned USUM = WEFT_RED_SUM | WEFT_RED_U64;
    int nred = test_pick(600, 200);
    fill_values(USUM, u, M, 7);
    memcpy(uref, u, sizeof u);
    CHECK_OK(weft_data_register(rt, u, sizeof u, &h));
    atomic_store(&g_host_peak, 0);
    for (int k = 0; k < nred; k++) {
        ur[k] = (red){USUM, (uint64_t)k + 900, M, 1, 0, NULL, u, 0, 0};
        weft_access acc = {h, WEFT_REDUCE | USUM};
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.body = peak_body;
        d.arg = &ur[k];
        d.accesses = &acc;
        d.naccesses = 1;
        CHECK_OK(weft_spawn(rt, &d, NULL));
        red_reference(&ur[k], uref);
    }
    CHECK_OK(weft_wait_all(rt));
    size_t peak = atomic_load(&g_host_peak);
    printf("  %d CPU reducers of %zu bytes: at most %zu bytes of private copies at once\n", nred, sizeof u, peak);
    CHECKF(peak <= 16 * sizeof u, "%zu bytes of private copies at once", peak);
    CHECK_OK(weft_data_unregister(h));
    CHECK(memcmp(u, uref, sizeof u) == 0);
    memory_back(rt, "cpu reducers");
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- determinism: floating-point sums whatever the placement -------------- */

static void test_determinism(void) {
    enum { M = 512, R = 40 };
    static float base[M], out[4][M], ref[M], direct[M];
    static red r[R];
    const unsigned SUM = WEFT_RED_SUM | WEFT_RED_F32;
    fill_values(SUM, base, M, 8);
    static const char *const where[4][2] = {{"cpu", "cpu"}, {"gpu:0", "gpu:1"}, {"gpu", "cpu"}, {"gpu:3", "gpu"}};
    for (int run = 0; run < 4; run++) {
        weft_runtime *rt = make("cpu,vgpu:4", run == 3 ? 1 : 2, 0, false);
        memcpy(out[run], base, sizeof base);
        weft_data *h;
        CHECK_OK(weft_data_register(rt, out[run], sizeof base, &h));
        for (int k = 0; k < R; k++) {
            r[k] = (red){SUM, (uint64_t)k + 5000, M, 1 + k % 3, 0, NULL, out[run], 0, 0};
            spawn1(rt, where[run][k % 2], red_body, &r[k], h, WEFT_REDUCE | SUM, false);
        }
        CHECK_OK(weft_wait_all(rt));
        CHECK_OK(weft_data_unregister(h));
        CHECK_OK(weft_runtime_destroy(rt));
    }
    memcpy(ref, base, sizeof base);
    for (int k = 0; k < R; k++) red_reference(&r[k], ref);
    for (int run = 0; run < 4; run++) CHECKF(memcmp(out[run], ref, sizeof ref) == 0, "run %d", run);
    /* one term per task: the same as adding each to the value directly */
    weft_runtime *rt = make("cpu,vgpu:4", 2, 0, false);
    memcpy(out[0], base, sizeof base);
    memcpy(direct, base, sizeof base);
    weft_data *h;
    CHECK_OK(weft_data_register(rt, out[0], sizeof base, &h));
    for (int k = 0; k < R; k++) {
        r[k] = (red){SUM, (uint64_t)k + 6000, M, 1, 0, NULL, out[0], 0, 0};
        spawn1(rt, PLACES[k % 6], red_body, &r[k], h, WEFT_REDUCE | SUM, false);
        red_work(&r[k], direct);
    }
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_unregister(h));
    CHECK(memcmp(out[0], direct, sizeof direct) == 0);
    /* and it does depend on the order: a different order changes bits */
    memcpy(ref, base, sizeof base);
    for (int k = R; k-- > 0;) red_work(&r[k], ref);
    CHECK(memcmp(ref, direct, sizeof direct) != 0);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- random graphs against a sequential run --------------------------------- */

enum { MAXA = 6, MAXT = 400, MAXACC = 3, MAXBYTES = 16384 };
typedef struct rtask {
    int id;
    int na;
    int arr[MAXACC];
    unsigned mode[MAXACC];
    unsigned key[MAXACC];      /* the array's type, and the operator of a reduction */
    size_t len[MAXACC];
    void *p[MAXACC];
    bool fail;
    int gpu;                   /* where its body ran: a GPU's device index, or -1 */
} rtask;

/* A mix of what the task reads, then its writes and reductions. */
static void rwork(rtask *t) {
    uint64_t mix = (uint64_t)t->id * 2654435761u;
    for (int k = 0; k < t->na; k++)
        if (t->mode[k] & WEFT_R) {
            const unsigned char *b = t->p[k];
            for (size_t i = 0; i < t->len[k] * tsize(t->key[k]); i++) mix = mix * 31u + b[i];
        }
    for (int k = 0; k < t->na; k++) {
        unsigned key = t->key[k];
        size_t sz = tsize(key);
        char *p = t->p[k];
        if (t->mode[k] & WEFT_REDUCE) {
            red r = {key, mix ^ (uint64_t)k, t->len[k], 1 + t->id % 2, 0, NULL, NULL, 0, 0};
            red_work(&r, p);
        } else if (t->mode[k] & WEFT_W) {
            bool rw = t->mode[k] & WEFT_R;
            for (size_t i = 0; i < t->len[k]; i++) {
                elem e;
                memcpy(&e, p + i * sz, sz);
                uint64_t v = mix + i;
                unsigned ty = key & WEFT_RED_TYPE_MASK;
                if (ty == WEFT_RED_F32) e.f32 = (rw ? e.f32 * 0.5f : 0.0f) + (float)(v % 1000) / 7.0f;
                else if (ty == WEFT_RED_F64) e.f64 = (rw ? e.f64 * 0.5 : 0.0) + (double)(v % 1000) / 7.0;
                else if (sz == 4) e.u32 = (rw ? e.u32 * 3u : 0u) + (uint32_t)v;
                else e.u64 = (rw ? e.u64 * 3u : 0u) + v;
                memcpy(p + i * sz, &e, sz);
            }
        }
    }
}
static int rkernel(void *arg) {
    rtask *t = arg;
    for (int k = 0; k < t->na; k++) /* a reduction starts from the identity */
        if ((t->mode[k] & WEFT_REDUCE) && !is_identity(t->key[k], t->p[k], t->len[k])) {
            fprintf(stderr, "task %d (on %s%d): its reduction of array %d (%zu elements at %p) does not start from the "
                    "identity\n", t->id, t->gpu < 0 ? "the host" : "device ", t->gpu, t->arr[k], t->len[k], t->p[k]);
            return 98;
        }
    rwork(t);
    return 0;
}
static int rbody(weft_ctx *ctx, void *arg) {
    rtask *t = arg;
    if (t->fail) return 3;
    weft_range rw[MAXACC];
    for (int k = 0; k < t->na; k++) {
        t->p[k] = weft_ctx_data(ctx, (size_t)k);
        unsigned m = t->mode[k] & WEFT_REDUCE ? WEFT_RW : t->mode[k] & WEFT_RW;
        rw[k] = (weft_range){t->p[k], t->len[k] * tsize(t->key[k]), m};
    }
    t->gpu = weft_ctx_gpu_count(ctx) ? weft_ctx_gpu(ctx, 0) : -1;
    if (weft_ctx_gpu_count(ctx) == 0) return rkernel(t);
    return weft_ctx_queue_rw(ctx, 0, rkernel, t, 0, rw, (size_t)t->na);
}

/* The sequential run, with the failure rules of weft.h: per array, whether
 * its last writers (a task, or a group's members) include a failed or
 * cancelled one, and the open reduction group (its key, and whether what
 * came before it was bad). */
typedef struct shadow {
    bool writers_bad, open, base_bad;
    unsigned key;
} shadow;

static uint64_t rng;
static uint32_t rnd(uint32_t n) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

static void random_graph(uint64_t seed, int ntasks, bool check, size_t vgpu_memory, bool failures) {
    rng = seed | 1;
    int narr = 2 + (int)rnd(MAXA - 1);
    static unsigned char mem[MAXA][MAXBYTES], ref[MAXA][MAXBYTES];
    size_t len[MAXA];
    unsigned ty[MAXA], cur_op[MAXA];
    for (int a = 0; a < narr; a++) {
        ty[a] = TYPES[rnd(6)];
        len[a] = 1 + rnd((uint32_t)(MAXBYTES / tsize(ty[a])));
        cur_op[a] = OPS[rnd(3)];
        fill_values(ty[a] | WEFT_RED_SUM, mem[a], len[a], seed + (uint64_t)a);
        memcpy(ref[a], mem[a], len[a] * tsize(ty[a]));
    }
    weft_runtime *rt = make("cpu,vgpu:4", 2, vgpu_memory, check);
    weft_data *h[MAXA];
    for (int a = 0; a < narr; a++) CHECK_OK(weft_data_register(rt, mem[a], len[a] * tsize(ty[a]), &h[a]));
    static rtask tasks[MAXT];
    static weft_task *th[MAXT]; /* (kept to say which failed, should one) */
    static const char *const where[] = {"cpu", "gpu", "gpu:0", "gpu:1", "gpu:2", "gpu:3", "2*gpu"};
    bool any_failed = false;
    for (int i = 0; i < ntasks; i++) {
        rtask *t = &tasks[i];
        memset(t, 0, sizeof *t);
        t->id = i;
        t->na = 1 + (int)rnd((uint32_t)(narr < MAXACC ? narr : MAXACC));
        t->fail = failures && rnd(12) == 0;
        weft_access acc[MAXACC];
        for (int k = 0; k < t->na; k++) {
            int a;
            bool dup;
            do { /* distinct arrays within a task */
                a = (int)rnd((uint32_t)narr);
                dup = false;
                for (int j = 0; j < k; j++) dup |= t->arr[j] == a;
            } while (dup);
            t->arr[k] = a;
            uint32_t m = rnd(8);
            if (rnd(10) == 0) cur_op[a] = OPS[rnd(3)]; /* now and then another operator */
            t->mode[k] = m < 2 ? WEFT_R : m == 2 ? WEFT_W : m == 3 ? WEFT_RW : WEFT_REDUCE | cur_op[a] | ty[a];
            t->key[k] = (t->mode[k] & WEFT_REDUCE) ? cur_op[a] | ty[a] : ty[a];
            t->len[k] = len[a];
            acc[k] = (weft_access){h[a], t->mode[k]};
        }
        weft_placement p;
        CHECK_OK(weft_placement_parse(where[rnd(7)], &p));
        p.share = 0.25;
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.body = rbody;
        d.arg = t;
        d.accesses = acc;
        d.naccesses = (size_t)t->na;
        d.placements = &p;
        d.nplacements = 1;
        CHECKF(weft_spawn(rt, &d, &th[i]) == 0, "seed %llu: %s", (unsigned long long)seed, weft_last_error());
    }
    int rc = weft_wait_all(rt);
    for (int i = 0; i < ntasks; i++) {
        weft_task_info info;
        if (weft_task_info_get(th[i], &info) == 0 && info.status == WEFT_TASK_FAILED && !tasks[i].fail)
            fprintf(stderr, "seed %llu: task %d failed (body result %d, on %s%d)\n", (unsigned long long)seed, i,
                    info.result, tasks[i].gpu < 0 ? "the host" : "device ", tasks[i].gpu);
        weft_task_release(th[i]);
    }
    for (int a = 0; a < narr; a++) CHECK_OK(weft_data_unregister(h[a]));
    memory_back(rt, "random graph");
    CHECK_OK(weft_runtime_destroy(rt));
    /* the same tasks one after another, in spawn order */
    shadow sh[MAXA];
    memset(sh, 0, sizeof sh);
    for (int i = 0; i < ntasks; i++) {
        rtask *t = &tasks[i];
        bool cancelled = false;
        for (int k = 0; k < t->na; k++) {
            shadow *s = &sh[t->arr[k]];
            if (t->mode[k] & WEFT_REDUCE)
                cancelled |= s->open && s->key == t->key[k] ? s->base_bad : s->writers_bad;
            else if (t->mode[k] & WEFT_R)
                cancelled |= s->writers_bad;
        }
        bool ok = !cancelled && !t->fail;
        any_failed |= t->fail && !cancelled;
        for (int k = 0; k < t->na; k++) {
            shadow *s = &sh[t->arr[k]];
            if (t->mode[k] & WEFT_REDUCE) {
                if (s->open && s->key == t->key[k]) {
                    s->writers_bad |= !ok;
                } else {
                    s->base_bad = s->writers_bad;
                    s->writers_bad = !ok;
                    s->open = true;
                    s->key = t->key[k];
                }
            } else if (t->mode[k] & WEFT_W) {
                s->writers_bad = !ok;
                s->open = false;
            } else {
                s->open = false; /* a reader closes the group */
            }
        }
        if (!ok) continue;
        for (int k = 0; k < t->na; k++) t->p[k] = ref[t->arr[k]];
        /* reductions go through an identity-initialised temporary */
        static unsigned char tmp[MAXACC][MAXBYTES];
        for (int k = 0; k < t->na; k++)
            if (t->mode[k] & WEFT_REDUCE) {
                fill_identity(t->key[k], tmp[k], t->len[k]);
                t->p[k] = tmp[k];
            }
        rwork(t);
        for (int k = 0; k < t->na; k++)
            if (t->mode[k] & WEFT_REDUCE) combine(t->key[k], ref[t->arr[k]], tmp[k], t->len[k]);
    }
    CHECKF(rc == (any_failed ? WEFT_ETASKFAILED : 0), "seed %llu: wait_all %d: %s", (unsigned long long)seed, rc,
           weft_last_error());
    for (int a = 0; a < narr; a++)
        CHECKF(memcmp(mem[a], ref[a], len[a] * tsize(ty[a])) == 0, "seed %llu: array %d (%s) differs",
               (unsigned long long)seed, a, TYPE_NAMES[ty[a] >> 16]);
}

int main(int argc, char **argv) {
    test_watchdog(test_pick(120, 400));
    if (argc > 1 && strcmp(argv[1], "random") == 0) { /* (for reruns: random graphs only) */
        int seeds = argc > 2 ? atoi(argv[2]) : 50;
        for (int s = 0; s < seeds; s++) {
            random_graph(0x9e3779b97f4a7c15ull * (uint64_t)(s + 1), 250, s % 4 == 0, s % 2 ? 56u << 10 : 0, s % 3 == 0);
            printf("seed %d ok\n", s);
        }
        return 0;
    }
    if (argc > 6 && strcmp(argv[1], "graph") == 0) { /* (to rerun one graph: seed ntasks check vgpu_memory failures) */
        uint64_t seed = strtoull(argv[2], NULL, 0);
        random_graph(seed, atoi(argv[3]), atoi(argv[4]) != 0, (size_t)strtoull(argv[5], NULL, 0), atoi(argv[6]) != 0);
        printf("graph %llu ok\n", (unsigned long long)seed); /* a failed check has exited with 1 */
        return 0;
    }
    test_step("every operator and type");
    test_basic();
    test_step("identity");
    test_identity();
    test_step("what follows a group");
    test_sequences();
    test_step("bad modes");
    test_bad();
    test_step("failures");
    test_failures();
    test_step("memory");
    test_memory();
    test_step("determinism");
    test_determinism();
    int seeds = test_pick(10, 5), ntasks = test_pick(200, 120);
    test_step("random graphs");
    for (int s = 0; s < seeds; s++) random_graph(0x9e3779b97f4a7c15ull * (uint64_t)(s + 1), ntasks, false, 0, false);
    test_step("random graphs, small GPUs (eviction)");
    for (int s = 0; s < seeds; s++)
        random_graph(0x51ed270b27cd9e5bull * (uint64_t)(s + 3), ntasks, false, 56u << 10, false);
    test_step("random graphs, checked");
    for (int s = 0; s < seeds / 4 + 1; s++) random_graph(0xdeadbeefull * (uint64_t)(s + 7), ntasks, true, 0, false);
    for (int s = 0; s < seeds / 4 + 1; s++) random_graph(0xfeedull * (uint64_t)(s + 11), ntasks, true, 56u << 10, false);
    test_step("random graphs with failures");
    for (int s = 0; s < seeds / 2 + 1; s++)
        random_graph(0xc0ffeeull * (uint64_t)(s + 13), ntasks, false, s % 2 ? 56u << 10 : 0, true);
    printf("test_reduce: ok\n");
    return 0;
}
