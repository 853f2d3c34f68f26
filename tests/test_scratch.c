/* Scratch buffers (WEFT_SCRATCH, StarPU's STARPU_SCRATCH): a task gets a
 * buffer of its data's size of its own where it runs — host memory on the
 * CPU or with WEFT_HOST, its GPU's memory on a virtual GPU (counted in its
 * memory_used) — and the access orders nothing.  Checked: the size, pitch
 * and place of the buffer (CPU, vgpu, WEFT_HOST, WEFT_ON_GPU on a 2-GPU
 * task, a tile); two tasks at once get two buffers; a scratch task runs
 * while another task holds the data WEFT_RW and the other way round (shown
 * by events, each side waiting for the other); a failed writer cancels no
 * scratch task; the data's value is left alone; many scratch tasks on a
 * small GPU beside replicas (eviction both ways) never run out and give
 * the memory back; placement counts the buffer (WEFT_ENODEV); handles
 * registered for scratch only (NULL) refuse other accesses, acquire and
 * partition; bad modes are refused with a message; the checking mode
 * poisons the buffer (0xDB) before the body, on the host and on a virtual
 * GPU's stream, also when a buffer is reused. */
#include "check.h"
#include "device/device.h"
#include "testing.h"

#include <stdlib.h>
#include <string.h>

static weft_runtime *make(const char *devices, unsigned workers, size_t vgpu_memory, bool check) {
    return test_make_devices(devices, workers, vgpu_memory, check);
}

/* Every device's memory_used is 0 (the host's included). */
static void memory_back(weft_runtime *rt, const char *what) {
    for (unsigned i = 0; i < weft_device_count(rt); i++) {
        weft_device_info info;
        CHECK_OK(weft_device_info_get(rt, i, &info));
        CHECKF(info.memory_used == 0, "%s: %s keeps %zu bytes", what, info.name, info.memory_used);
    }
}

static size_t used_on(weft_runtime *rt, unsigned dev) {
    weft_device_info info;
    CHECK_OK(weft_device_info_get(rt, dev, &info));
    return info.memory_used;
}

/* The device index whose memory holds p: a virtual GPU's, or 0 (host). */
static unsigned where(const void *p) {
    weft__device *d = weft__vgpu_of(p);
    return d ? d->index : 0;
}

static weft_task *spawn_plain(weft_runtime *rt, weft_body_fn body, void *arg, const weft_access *acc, size_t n) {
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = body;
    d.arg = arg;
    d.accesses = acc;
    d.naccesses = n;
    weft_task *t = NULL;
    CHECKF(weft_spawn(rt, &d, &t) == 0, "%s", weft_last_error());
    return t;
}

static void wait_ok(weft_task *t) {
    CHECKF(weft_task_wait(t) == 0, "%s", weft_last_error());
    weft_task_release(t);
}

/* ---- what a body sees ------------------------------------------------------ */

/* What a scratch body saw of its access `index` (and did). */
typedef struct seen {
    size_t index;
    void *ptr;
    size_t bytes, pitch;
    unsigned dev;          /* where ptr is (where()) */
    int gpu;               /* weft_ctx_gpu(ctx, gpu_k): the device the access should be on; -1 none */
    unsigned gpu_k;
    int poisoned;          /* every byte was 0xDB when the body started (host buffers) */
    unsigned char fill;    /* written over the whole buffer (host, or after weft_ctx_sync on a vgpu) */
} seen;

static int all_bytes(const unsigned char *p, size_t n, unsigned char v) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != v) return 0;
    return 1;
}

static int see_body(weft_ctx *ctx, void *arg) {
    seen *s = arg;
    s->ptr = weft_ctx_data(ctx, s->index);
    s->bytes = weft_ctx_bytes(ctx, s->index);
    s->pitch = weft_ctx_pitch(ctx, s->index);
    s->dev = where(s->ptr);
    s->gpu = weft_ctx_gpu_count(ctx) ? weft_ctx_gpu(ctx, s->gpu_k) : -1;
    if (!s->ptr) return 1;
    if (s->dev && weft_ctx_sync(ctx) != 0) return 2; /* (a virtual GPU's memory is then the body's) */
    s->poisoned = all_bytes(s->ptr, s->bytes, 0xDB);
    memset(s->ptr, s->fill, s->bytes);
    return 0;
}

static void test_cpu(void) {
    weft_runtime *rt = make("cpu", 2, 0, false);
    enum { N = 1000 };
    static unsigned char a[N];
    memset(a, 7, sizeof a);
    weft_data *s, *d;
    CHECK_OK(weft_data_register(rt, NULL, N, &s)); /* scratch only */
    CHECK_OK(weft_data_register(rt, a, sizeof a, &d));
    void *p = (void *)1;
    size_t n = 0;
    CHECK_OK(weft_data_host(s, &p, &n));
    CHECK(p == NULL && n == N);

    /* a scratch-only handle and an ordinary one (its value untouched) */
    seen s1 = {.index = 0, .fill = 0x55}, s2 = {.index = 1, .fill = 0x66};
    weft_access acc[2] = {{d, WEFT_R}, {s, WEFT_SCRATCH}};
    wait_ok(spawn_plain(rt, see_body, &s1, (weft_access[]){{s, WEFT_SCRATCH}}, 1));
    wait_ok(spawn_plain(rt, see_body, &s2, acc, 2));
    CHECK(s1.bytes == N && s1.pitch == N && s1.dev == 0 && s1.ptr != NULL);
    CHECK(s2.bytes == N && s2.pitch == N && s2.dev == 0);
    seen s3 = {.index = 0, .fill = 0x77};
    wait_ok(spawn_plain(rt, see_body, &s3, (weft_access[]){{d, WEFT_SCRATCH}}, 1));
    CHECK(s3.bytes == sizeof a && s3.ptr != (void *)a);
    CHECK(all_bytes(a, sizeof a, 7)); /* the data's value is neither read nor changed */
    CHECK_OK(weft_wait_all(rt));
    CHECK(used_on(rt, 0) == 0); /* host buffers freed with their tasks */
    CHECK_OK(weft_data_unregister(s));
    CHECK_OK(weft_data_unregister(d));
    memory_back(rt, "cpu");
    CHECK_OK(weft_runtime_destroy(rt));
}

/* Two accesses of one task, both scratch of the same handle: two buffers. */
static int two_body(weft_ctx *ctx, void *arg) {
    (void)arg;
    char *x = weft_ctx_data(ctx, 0), *y = weft_ctx_data(ctx, 1);
    size_t n = weft_ctx_bytes(ctx, 0);
    if (!x || !y || x == y || n != weft_ctx_bytes(ctx, 1)) return 1;
    if ((x < y && x + n > y) || (y < x && y + n > x)) return 2; /* (they must not overlap) */
    return 0;
}

static void test_two_in_one(void) {
    weft_runtime *rt = make("cpu,vgpu:1", 2, 0, false);
    weft_data *s;
    CHECK_OK(weft_data_register(rt, NULL, 4096, &s));
    weft_access acc[2] = {{s, WEFT_SCRATCH}, {s, WEFT_SCRATCH}};
    wait_ok(spawn_plain(rt, two_body, NULL, acc, 2));
    wait_ok(test_spawn_at(rt, "gpu", 1, two_body, NULL, acc, 2, true));
    CHECK_OK(weft_data_unregister(s));
    memory_back(rt, "two in one");
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- no ordering: shown by events ------------------------------------------- */

typedef struct meet {
    atomic_int a_in, b_in;   /* each side sets its own, then waits for the other's */
} meet;

static int side_a(weft_ctx *ctx, void *arg) {
    (void)ctx;
    meet *m = arg;
    atomic_store(&m->a_in, 1);
    return wait_flag(&m->b_in, 20000) == 0 ? 0 : 1; /* (a deadlock guard: never reached when unordered) */
}

static int side_b(weft_ctx *ctx, void *arg) {
    (void)ctx;
    meet *m = arg;
    atomic_store(&m->b_in, 1);
    return wait_flag(&m->a_in, 20000) == 0 ? 0 : 1;
}

/* A task holding d with `mode` at `where_a` and a scratch task on d at
 * `where_b` (spawned after it, or before it if scratch_first) run at once:
 * each body waits for the other's to have started. */
static void meet_once(weft_runtime *rt, weft_data *d, unsigned mode, const char *where_a, const char *where_b,
                      bool scratch_first) {
    meet m;
    atomic_init(&m.a_in, 0);
    atomic_init(&m.b_in, 0);
    weft_access holder = {d, mode}, scratch = {d, WEFT_SCRATCH};
    weft_task *ta, *tb;
    if (scratch_first) {
        tb = test_spawn_at(rt, where_b, 0.5, side_b, &m, &scratch, 1, true);
        ta = test_spawn_at(rt, where_a, 0.5, side_a, &m, &holder, 1, true);
    } else {
        ta = test_spawn_at(rt, where_a, 0.5, side_a, &m, &holder, 1, true);
        tb = test_spawn_at(rt, where_b, 0.5, side_b, &m, &scratch, 1, true);
    }
    wait_ok(ta);
    wait_ok(tb);
}

static int write_body(weft_ctx *ctx, void *arg) {
    unsigned char *p = weft_ctx_data(ctx, 0);
    if (weft_ctx_gpu_count(ctx) && weft_ctx_sync(ctx) != 0) return 1;
    memset(p, *(unsigned char *)arg, weft_ctx_bytes(ctx, 0));
    return 0;
}

static int fail_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    return 42;
}

static void test_unordered(void) {
    weft_runtime *rt = make("cpu,vgpu:1", 2, 1u << 20, false);
    enum { N = 4096 };
    static unsigned char a[N];
    memset(a, 3, sizeof a);
    weft_data *d;
    CHECK_OK(weft_data_register(rt, a, sizeof a, &d));
    const char *places[3] = {"cpu", "gpu:0", "gpu:0"};
    for (int k = 0; k < 3; k++) {
        const char *pa = places[k], *pb = places[(k + 1) % 3];
        meet_once(rt, d, WEFT_RW, pa, pb, false);  /* scratch while a writer holds d */
        meet_once(rt, d, WEFT_W, pa, pb, true);    /* a writer spawned after a scratch task holding on */
        meet_once(rt, d, WEFT_R, pa, pb, false);
    }
    CHECK_OK(weft_wait_all(rt));
    /* the writers wrote nothing: the value is the user's still, wherever it is */
    CHECK_OK(weft_data_acquire(d, WEFT_R, 0));
    CHECK(all_bytes(a, sizeof a, 3));
    CHECK_OK(weft_data_release(d));

    /* a failed writer cancels its readers, not a scratch task after it */
    unsigned char v = 9;
    weft_access w = {d, WEFT_W}, sc = {d, WEFT_SCRATCH}, r = {d, WEFT_R};
    weft_task *f = spawn_plain(rt, fail_body, NULL, &w, 1);
    weft_task *s1 = spawn_plain(rt, write_body, &v, &sc, 1);
    weft_task *s2 = test_spawn_at(rt, "gpu", 0.5, write_body, &v, &sc, 1, true);
    weft_task *rd = spawn_plain(rt, test_noop, NULL, &r, 1);
    CHECK_RC(weft_task_wait(f), WEFT_ETASKFAILED);
    CHECK_OK(weft_task_wait(s1));
    CHECK_OK(weft_task_wait(s2));
    CHECK_RC(weft_task_wait(rd), WEFT_ECANCELLED);
    weft_task_release(f);
    weft_task_release(s1);
    weft_task_release(s2);
    weft_task_release(rd);
    CHECK_RC(weft_wait_all(rt), WEFT_ETASKFAILED);
    /* the data's value is what the failed writer left (the user's), not the scratch fills */
    CHECK(all_bytes(a, sizeof a, 3));
    CHECK_OK(weft_data_unregister(d));
    memory_back(rt, "unordered");
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- virtual GPUs -------------------------------------------------------- */

/* Two scratch tasks on one virtual GPU at once: each body, on the GPU,
 * waits for the other to be in, then both buffers are looked at. */
typedef struct both {
    atomic_int in;
    void *ptr[2];
    size_t bytes[2];
    unsigned dev[2];
    size_t used_inside;      /* the GPU's memory_used with both inside */
    weft_runtime *rt;
} both;

typedef struct both_arg {
    both *b;
    int k;
} both_arg;

static int both_body(weft_ctx *ctx, void *arg) {
    both_arg *x = arg;
    both *b = x->b;
    b->ptr[x->k] = weft_ctx_data(ctx, 0);
    b->bytes[x->k] = weft_ctx_bytes(ctx, 0);
    b->dev[x->k] = where(b->ptr[x->k]);
    atomic_fetch_add(&b->in, 1);
    uint64_t end = now_ns() + 20000000000ull;
    while (atomic_load(&b->in) < 2) {
        if (now_ns() > end) return 1;
        sleep_ns(100000);
    }
    if (x->k == 0) b->used_inside = used_on(b->rt, (unsigned)weft_ctx_gpu(ctx, 0));
    /* (both stay in until both have looked) */
    atomic_fetch_add(&b->in, 1);
    while (atomic_load(&b->in) < 4) {
        if (now_ns() > end) return 1;
        sleep_ns(100000);
    }
    return 0;
}

static void test_vgpu_two_at_once(void) {
    enum { N = 24576 };
    weft_runtime *rt = make("cpu,vgpu:1", 2, 1u << 20, false);
    weft_data *s;
    CHECK_OK(weft_data_register(rt, NULL, N, &s));
    size_t before = used_on(rt, 1);
    both b;
    memset(&b, 0, sizeof b);
    atomic_init(&b.in, 0);
    b.rt = rt;
    both_arg x0 = {&b, 0}, x1 = {&b, 1};
    weft_access acc = {s, WEFT_SCRATCH};
    weft_task *t0 = test_spawn_at(rt, "gpu:0", 0.5, both_body, &x0, &acc, 1, true);
    weft_task *t1 = test_spawn_at(rt, "gpu:0", 0.5, both_body, &x1, &acc, 1, true);
    wait_ok(t0);
    wait_ok(t1);
    CHECK(b.ptr[0] && b.ptr[1] && b.ptr[0] != b.ptr[1]);
    CHECK(b.bytes[0] == N && b.bytes[1] == N);
    CHECK(b.dev[0] == 1 && b.dev[1] == 1); /* in the virtual GPU's memory */
    CHECKF(b.used_inside >= before + 2 * weft__device_bytes(N), "%zu used inside, %zu before", b.used_inside,
           before);
    /* kept for the next ones (no new allocation), and given back with the handle */
    size_t kept = used_on(rt, 1);
    CHECK(kept == before + 2 * weft__device_bytes(N));
    memset(&b, 0, sizeof b);
    atomic_init(&b.in, 0);
    b.rt = rt;
    t0 = test_spawn_at(rt, "gpu:0", 0.5, both_body, &x0, &acc, 1, true);
    t1 = test_spawn_at(rt, "gpu:0", 0.5, both_body, &x1, &acc, 1, true);
    wait_ok(t0);
    wait_ok(t1);
    CHECK(used_on(rt, 1) == kept);
    CHECK_OK(weft_data_unregister(s));
    memory_back(rt, "two at once");
    CHECK_OK(weft_runtime_destroy(rt));
}

/* Where a scratch buffer is: the task's GPU, its k-th GPU (WEFT_ON_GPU), or
 * the host (WEFT_HOST, a CPU alternative). */
static void test_vgpu_where(void) {
    weft_runtime *rt = make("cpu,vgpu:2", 2, 1u << 20, false);
    weft_data *s;
    CHECK_OK(weft_data_register(rt, NULL, 5000, &s));
    seen on = {.index = 0, .fill = 1}, host = {.index = 0, .fill = 2}, second = {.index = 1, .gpu_k = 1, .fill = 3};
    weft_access a1 = {s, WEFT_SCRATCH}, a2 = {s, WEFT_SCRATCH | WEFT_HOST};
    wait_ok(test_spawn_at(rt, "gpu:1", 1, see_body, &on, &a1, 1, true));
    CHECK(on.dev == 2 && on.gpu == 2 && on.bytes == 5000 && on.pitch == 5000);
    wait_ok(test_spawn_at(rt, "gpu", 1, see_body, &host, &a2, 1, true));
    CHECK(host.dev == 0 && host.bytes == 5000);
    weft_access a3[2] = {{s, WEFT_SCRATCH}, {s, WEFT_SCRATCH | WEFT_ON_GPU(1)}};
    wait_ok(test_spawn_at(rt, "2*gpu", 1, see_body, &second, a3, 2, true));
    CHECKF(second.dev == (unsigned)second.gpu && second.dev >= 1, "on %u, its 2nd GPU %d", second.dev, second.gpu);
    CHECK_OK(weft_data_unregister(s));
    memory_back(rt, "where");
    CHECK_OK(weft_runtime_destroy(rt));
}

/* Many scratch tasks on a small virtual GPU, beside replicas: buffers kept
 * by one handle are evicted for another's, and for replicas, and replicas
 * for them; nothing runs out, and the memory comes back with the handles. */

typedef struct fill {
    unsigned char *p;
    size_t n;
} fill;

/* Fill the buffer and read it back (the kernel owns its argument). */
static int fill_kernel(void *arg) {
    fill f = *(fill *)arg;
    free(arg);
    memset(f.p, 0x5A, f.n);
    return all_bytes(f.p, f.n, 0x5A) ? 0 : 1;
}

static int churn_body(weft_ctx *ctx, void *arg) {
    (void)arg;
    fill *f = malloc(sizeof *f);
    if (!f) return 1;
    f->p = weft_ctx_data(ctx, 1);
    f->n = weft_ctx_bytes(ctx, 1);
    if (!f->p || where(f->p) != (unsigned)weft_ctx_gpu(ctx, 0)) {
        free(f);
        return 2;
    }
    weft_range r = {f->p, f->n, WEFT_RW};
    int rc = weft_ctx_queue_rw(ctx, 0, fill_kernel, f, 20000, &r, 1);
    if (rc != 0) free(f);
    return rc;
}

static void test_vgpu_memory(bool check) {
    enum { H = 6, SB = 16384, DB = 8192 };
    size_t cap = 64u << 10;
    weft_runtime *rt = make("cpu,vgpu:1", 2, cap, check);
    weft_data *s[H], *d[H];
    static unsigned char a[H][DB];
    for (int k = 0; k < H; k++) {
        memset(a[k], k + 1, DB);
        CHECK_OK(weft_data_register(rt, NULL, SB, &s[k]));
        CHECK_OK(weft_data_register(rt, a[k], DB, &d[k]));
    }
    int n = test_pick(300, 80);
    for (int i = 0; i < n; i++) {
        weft_access acc[2] = {{d[(i * 5) % H], WEFT_R}, {s[i % H], WEFT_SCRATCH}};
        test_spawn_at(rt, "gpu:0", 0.25, churn_body, NULL, acc, 2, false);
    }
    CHECKF(weft_wait_all(rt) == 0, "%s", weft_last_error());
    weft_device_info info;
    CHECK_OK(weft_device_info_get(rt, 1, &info));
    CHECKF(info.memory_used <= info.memory, "%zu used of %zu", info.memory_used, info.memory);
    for (int k = 0; k < H; k++) {
        CHECK_OK(weft_data_unregister(s[k]));
        CHECK_OK(weft_data_unregister(d[k]));
        CHECK(all_bytes(a[k], DB, (unsigned char)(k + 1)));
    }
    memory_back(rt, "many on a small GPU");
    /* placement counts the buffer: one larger than the GPU can never run */
    weft_data *big;
    CHECK_OK(weft_data_register(rt, NULL, cap + 4096, &big));
    weft_placement p;
    CHECK_OK(weft_placement_parse("gpu", &p));
    weft_access acc = {big, WEFT_SCRATCH};
    weft_task_desc desc;
    weft_task_desc_init(&desc);
    desc.body = test_noop;
    desc.accesses = &acc;
    desc.naccesses = 1;
    desc.placements = &p;
    desc.nplacements = 1;
    CHECK_ERR(weft_spawn(rt, &desc, NULL), WEFT_ENODEV);
    acc.mode |= WEFT_HOST; /* in host memory: fine */
    CHECK_OK(weft_spawn(rt, &desc, NULL));
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_unregister(big));
    memory_back(rt, "big");
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- tiles ------------------------------------------------------------------ */

static void test_tile(void) {
    weft_runtime *rt = make("cpu,vgpu:1", 2, 1u << 20, false);
    enum { R = 12, C = 10 };
    static double g[R][C];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) g[i][j] = i * 100 + j;
    weft_data *d, *tiles[4];
    CHECK_OK(weft_data_register(rt, g, sizeof g, &d));
    weft_tiling t = {sizeof(double), R, C, 0, 2, 2, 1};
    CHECK_OK(weft_data_partition(d, &t, tiles));
    weft_tile_info ti;
    CHECK_OK(weft_data_tile_info(tiles[3], &ti));
    seen cpu = {.index = 0, .fill = 0xEE}, gpu = {.index = 0, .fill = 0xEF};
    weft_access acc = {tiles[3], WEFT_SCRATCH};
    wait_ok(spawn_plain(rt, see_body, &cpu, &acc, 1));
    wait_ok(test_spawn_at(rt, "gpu", 1, see_body, &gpu, &acc, 1, true));
    size_t width = ti.cols * sizeof(double);
    CHECK(cpu.bytes == ti.rows * width && cpu.pitch == width && cpu.dev == 0);
    CHECK(gpu.bytes == ti.rows * width && gpu.pitch == width && gpu.dev == 1);
    acc.data = d; /* the partitioned parent, whole */
    seen whole = {.index = 0, .fill = 0xED};
    wait_ok(spawn_plain(rt, see_body, &whole, &acc, 1));
    CHECK(whole.bytes == sizeof g);
    CHECK_OK(weft_data_unregister(d));
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) CHECK(g[i][j] == i * 100 + j);
    memory_back(rt, "tile");
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- misuse ------------------------------------------------------------------ */

static void refused(weft_runtime *rt, weft_data *h, unsigned mode, const char *where_, const char *needle) {
    weft_access acc = {h, mode};
    weft_placement p;
    weft_task_desc desc;
    weft_task_desc_init(&desc);
    desc.body = test_noop;
    desc.accesses = &acc;
    desc.naccesses = 1;
    if (where_) {
        CHECK_OK(weft_placement_parse(where_, &p));
        desc.placements = &p;
        desc.nplacements = 1;
    }
    CHECK_ERR(weft_spawn(rt, &desc, NULL), WEFT_EINVAL);
    CHECKF(strstr(weft_last_error(), needle) != NULL, "mode 0x%x: \"%s\" lacks \"%s\"", mode, weft_last_error(),
           needle);
}

static void test_misuse(void) {
    weft_runtime *rt = make("cpu,vgpu:1", 2, 1u << 20, false);
    static double a[64];
    weft_data *s, *d;
    CHECK_ERR(weft_data_register(rt, NULL, 0, &s), WEFT_EINVAL);
    CHECK_OK(weft_data_register(rt, NULL, 512, &s));
    CHECK_OK(weft_data_register(rt, a, sizeof a, &d));
    /* a handle with no memory: scratch only */
    const unsigned value_modes[] = {WEFT_R, WEFT_W, WEFT_RW, WEFT_RW | WEFT_COMMUTE, WEFT_R | WEFT_HOST,
                                    WEFT_REDUCE | WEFT_RED_SUM | WEFT_RED_F64};
    for (size_t i = 0; i < sizeof value_modes / sizeof *value_modes; i++)
        refused(rt, s, value_modes[i], NULL, "can only be a task's WEFT_SCRATCH access");
    refused(rt, s, WEFT_R, "gpu", "no memory");
    CHECK_ERR(weft_data_acquire(s, WEFT_R, 0), WEFT_EINVAL);
    CHECKF(strstr(weft_last_error(), "no memory") && strstr(weft_last_error(), "WEFT_SCRATCH"), "%s",
           weft_last_error());
    CHECK_ERR(weft_data_acquire(s, WEFT_W, 0), WEFT_EINVAL);
    weft_tiling t = {8, 8, 8, 0, 2, 2, 0};
    weft_data *tiles[4];
    CHECK_ERR(weft_data_partition(s, &t, tiles), WEFT_EINVAL);
    CHECKF(strstr(weft_last_error(), "no memory"), "%s", weft_last_error());
    /* WEFT_SCRATCH with what reads or writes the value */
    const unsigned bad[] = {WEFT_SCRATCH | WEFT_R, WEFT_SCRATCH | WEFT_W, WEFT_SCRATCH | WEFT_RW,
                            WEFT_SCRATCH | WEFT_RW | WEFT_COMMUTE,
                            WEFT_SCRATCH | WEFT_REDUCE | WEFT_RED_SUM | WEFT_RED_F64};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        refused(rt, d, bad[i], NULL, "WEFT_SCRATCH cannot be combined with");
        refused(rt, s, bad[i], NULL, "WEFT_SCRATCH cannot be combined with");
    }
    refused(rt, d, WEFT_SCRATCH | WEFT_HOST | WEFT_ON_GPU(0), "gpu", "WEFT_ON_GPU");
    refused(rt, d, WEFT_SCRATCH | WEFT_ON_GPU(1), "gpu", "alternative 0 has 1 GPU");
    refused(rt, d, WEFT_SCRATCH | WEFT_ON_GPU(0), NULL, "runs on the CPU");
    refused(rt, d, WEFT_SCRATCH | 0x400u, NULL, "unknown bits");
    /* acquire is no place for it */
    CHECK_ERR(weft_data_acquire(d, WEFT_SCRATCH, 0), WEFT_EINVAL);
    CHECKF(strstr(weft_last_error(), "WEFT_SCRATCH are for tasks"), "%s", weft_last_error());
    /* fine: a scratch buffer beside the data's value (even the same data,
     * written, and a reduction of it) */
    weft_access ok[3] = {{d, WEFT_RW}, {d, WEFT_SCRATCH}, {s, WEFT_SCRATCH | WEFT_HOST}};
    wait_ok(spawn_plain(rt, test_noop, NULL, ok, 3));
    weft_access red[2] = {{d, WEFT_REDUCE | WEFT_RED_SUM | WEFT_RED_F64}, {d, WEFT_SCRATCH}};
    wait_ok(spawn_plain(rt, test_noop, NULL, red, 2));
    weft_access gpus[2] = {{d, WEFT_W}, {d, WEFT_SCRATCH | WEFT_ON_GPU(1)}};
    weft_runtime *rt2 = make("cpu,vgpu:2", 2, 1u << 20, false);
    weft_data *d2;
    CHECK_OK(weft_data_register(rt2, a, sizeof a, &d2));
    gpus[0].data = gpus[1].data = d2;
    wait_ok(test_spawn_at(rt2, "2*gpu", 1, test_noop, NULL, gpus, 2, true));
    CHECK_OK(weft_data_unregister(d2));
    CHECK_OK(weft_runtime_destroy(rt2));
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_unregister(s));
    CHECK_OK(weft_data_unregister(d));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- the checking mode: poisoned before the body ------------------------------- */

typedef struct probe {
    void *ptr;
    size_t n;
    int poisoned;            /* what the kernel found */
    unsigned char write;     /* then wrote (0: nothing) */
} probe;

static int probe_kernel(void *arg) {
    probe *p = arg;
    p->poisoned = all_bytes(p->ptr, p->n, 0xDB);
    if (p->write) memset(p->ptr, p->write, p->n);
    return 0;
}

static int probe_body(weft_ctx *ctx, void *arg) {
    probe *p = arg;
    p->ptr = weft_ctx_data(ctx, 0);
    p->n = weft_ctx_bytes(ctx, 0);
    weft_range r = {p->ptr, p->n, p->write ? WEFT_RW : WEFT_R};
    return weft_ctx_queue_rw(ctx, 0, probe_kernel, p, 10000, &r, 1);
}

static void test_checked(void) {
    weft_runtime *rt = make("cpu,vgpu:1", 2, 1u << 20, true);
    weft_data *s;
    CHECK_OK(weft_data_register(rt, NULL, 3000, &s));
    weft_access acc = {s, WEFT_SCRATCH};
    /* on the host, a buffer written by the task before is poisoned again */
    for (int i = 0; i < 3; i++) {
        seen h = {.index = 0, .fill = 0x11};
        wait_ok(spawn_plain(rt, see_body, &h, &acc, 1));
        CHECK(h.poisoned && h.dev == 0);
    }
    /* on a virtual GPU: the kernel reads the buffer (no violation: the
     * poison fill is its writer, on its stream) and finds the poison, also
     * when the buffer is the one the task before wrote */
    char last[400];
    for (int i = 0; i < 3; i++) {
        probe p = {NULL, 0, 0, 0x22};
        wait_ok(test_spawn_at(rt, "gpu:0", 1, probe_body, &p, &acc, 1, true));
        CHECK(p.poisoned && p.n == 3000 && where(p.ptr) == 1);
    }
    probe p = {NULL, 0, 0, 0};
    wait_ok(test_spawn_at(rt, "gpu:0", 1, probe_body, &p, &acc, 1, true));
    CHECK(p.poisoned);
    weft__test_vcheck_last(last, sizeof last);
    CHECKF(last[0] == '\0', "a violation was reported: %s", last);
    CHECK_OK(weft_data_unregister(s));
    memory_back(rt, "checked");
    CHECK_OK(weft_runtime_destroy(rt));
}

/* A task that unregisters a handle whose scratch tasks are still queued,
 * with no other worker to run them: its wait runs them itself (they are in
 * the handle's history for that), so the unregister returns. */
static atomic_int scratch_ran;

static int scratch_user(weft_ctx *ctx, void *arg) {
    (void)arg;
    unsigned char *p = weft_ctx_data(ctx, 0);
    if (!p) return 1;
    p[0] = 1;
    atomic_fetch_add(&scratch_ran, 1);
    return 0;
}

static int unregistering_parent(weft_ctx *ctx, void *arg) {
    weft_data *s = arg;
    weft_access a = {s, WEFT_SCRATCH};
    for (int i = 0; i < 3; i++) {
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.body = scratch_user;
        d.accesses = &a;
        d.naccesses = 1;
        if (weft_spawn(weft_ctx_runtime(ctx), &d, NULL) != 0) return 2;
    }
    return weft_data_unregister(s) == 0 && atomic_load(&scratch_ran) == 3 ? 0 : 3;
}

static void test_unregister_from_a_task(void) {
    for (unsigned workers = 1; workers <= 2; workers++) {
        weft_runtime *rt = make("cpu", workers, 0, false);
        weft_data *s;
        CHECK_OK(weft_data_register(rt, NULL, 64, &s));
        atomic_store(&scratch_ran, 0);
        weft_task *t = spawn_plain(rt, unregistering_parent, s, NULL, 0);
        wait_ok(t);
        CHECK(atomic_load(&scratch_ran) == 3);
        CHECK_OK(weft_runtime_destroy(rt));
    }
}

int main(void) {
    test_watchdog(test_pick(120, 400));
    test_step("on the CPU");
    test_cpu();
    test_step("two buffers in one task");
    test_two_in_one();
    test_step("no ordering");
    test_unordered();
    test_step("two at once on a virtual GPU");
    test_vgpu_two_at_once();
    test_step("where the buffer is");
    test_vgpu_where();
    test_step("many on a small GPU");
    test_vgpu_memory(false);
    test_step("many on a small GPU, checked");
    test_vgpu_memory(true);
    test_step("tiles");
    test_tile();
    test_step("misuse");
    test_misuse();
    test_step("checking mode");
    test_checked();
    test_step("unregister from a task, its scratch tasks queued");
    test_unregister_from_a_task();
    printf("test_scratch: ok\n");
    return 0;
}
