/* Data on devices: each handle has a replica per device; a task on a GPU
 * gets its GPU's copy (weft_ctx_data), made valid there before its body
 * runs, a writer's copy becomes the only valid one, a host task or
 * unregister gets the newest value back.  Random graphs of tasks on the CPU
 * and on virtual GPUs against a sequential run, also in the virtual GPUs'
 * checking mode (every kernel names the replica ranges it reads and
 * writes); WEFT_HOST; a replica that does not fit. */
#include "check.h"
#include "testing.h"

#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static weft_runtime *make(const char *devices, size_t vgpu_memory) {
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = 2;
    cfg.devices = devices;
    cfg.vgpu_memory = vgpu_memory;
    weft_runtime *rt = NULL;
    CHECKF(weft_runtime_create(&cfg, &rt) == 0, "%s: %s", devices, weft_last_error());
    return rt;
}

static uint64_t copied(weft_runtime *rt) {
    weft_stats st;
    CHECK_OK(weft_runtime_stats(rt, &st));
    return st.bytes_copied;
}

/* ---- one array through GPUs and the host --------------------------------- */

enum { N = 1000 };
typedef struct inc {
    double *p;     /* the replica the kernel works on */
    double add;
    void *host;    /* the user's memory: the replica must not be it */
    int saw_host;
} inc;
static int inc_kernel(void *arg) {
    inc *k = arg;
    for (int i = 0; i < N; i++) k->p[i] += k->add;
    return 0;
}
static int inc_body(weft_ctx *ctx, void *arg) {
    inc *k = arg;
    k->p = weft_ctx_data(ctx, 0);
    k->saw_host = k->p == k->host;
    if (weft_ctx_gpu_count(ctx) == 0) return inc_kernel(k);
    weft_range rw = {k->p, N * sizeof(double), WEFT_RW};
    return weft_ctx_queue_rw(ctx, 0, inc_kernel, k, 0, &rw, 1);
}
static int check_body(weft_ctx *ctx, void *arg) { /* on the CPU: every element is *arg */
    const double *p = weft_ctx_data(ctx, 0), want = *(double *)arg;
    for (int i = 0; i < N; i++)
        if (p[i] != want) return 1;
    return 0;
}

/* On a GPU: reads its replica in a kernel (every element is *arg). */
typedef struct gcheck { const double *p; double want; int bad; } gcheck;
static int gcheck_kernel(void *arg) {
    gcheck *g = arg;
    for (int i = 0; i < 16; i++)
        if (g->p[i] != g->want) g->bad = 1;
    return g->bad;
}
static int check_body_gpu(weft_ctx *ctx, void *arg) {
    static gcheck g[64];
    static _Atomic int next;
    gcheck *k = &g[atomic_fetch_add(&next, 1) % 64];
    *k = (gcheck){weft_ctx_data(ctx, 0), *(double *)arg, 0};
    return weft_ctx_queue(ctx, 0, gcheck_kernel, k, 0);
}

static double g_share; /* share of spawn_on's placements (0: whole GPUs) */
static void spawn_on(weft_runtime *rt, const char *where, weft_body_fn body, void *arg, weft_data *h,
                     unsigned mode, weft_task **out) {
    weft_placement p;
    CHECK_OK(weft_placement_parse(where, &p));
    p.share = g_share;
    weft_access acc = {h, mode};
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = body;
    d.arg = arg;
    d.accesses = &acc;
    d.naccesses = 1;
    d.placements = &p;
    d.nplacements = 1;
    CHECK_OK(weft_spawn(rt, &d, out));
}

static void test_one_array(void) {
    weft_runtime *rt = make("cpu,vgpu:2", 0);
    static double a[N];
    for (int i = 0; i < N; i++) a[i] = 1;
    weft_data *h;
    CHECK_OK(weft_data_register(rt, a, sizeof a, &h));
    inc k0 = {NULL, 1, a, 0}, k1 = {NULL, 10, a, 0}, kc = {NULL, 100, a, 0}, kh = {NULL, 1000, a, 0};
    double want2 = 2, want12 = 12, want112 = 112;
    /* gpu:0 adds 1 on its copy; the host sees 2; gpu:1 adds 10 (copied from
     * the host's, or from gpu:0's); the CPU adds 100 on the user's memory */
    spawn_on(rt, "gpu:0", inc_body, &k0, h, WEFT_RW, NULL);
    spawn_on(rt, "cpu", check_body, &want2, h, WEFT_R, NULL);
    spawn_on(rt, "gpu:1", inc_body, &k1, h, WEFT_RW, NULL);
    spawn_on(rt, "cpu", check_body, &want12, h, WEFT_R, NULL);
    spawn_on(rt, "cpu", inc_body, &kc, h, WEFT_RW, NULL);
    spawn_on(rt, "gpu:0", check_body, &want112, h, WEFT_R | WEFT_HOST, NULL); /* the host's copy on a GPU */
    spawn_on(rt, "gpu:1", inc_body, &kh, h, WEFT_RW | WEFT_HOST, NULL);     /* writes the user's memory */
    CHECK_OK(weft_wait_all(rt));
    CHECK(k0.saw_host == 0 && k1.saw_host == 0); /* their GPU's own copies */
    CHECK(kc.saw_host == 1 && kh.saw_host == 1);
    /* a last writer on a GPU: the user's memory is stale until unregister */
    inc k2 = {NULL, 5, a, 0};
    spawn_on(rt, "gpu:0", inc_body, &k2, h, WEFT_RW, NULL);
    CHECK_OK(weft_wait_all(rt));
    CHECK(a[0] == 1112 && a[N - 1] == 1112);
    uint64_t bytes = copied(rt);
    CHECKF(bytes >= 4 * sizeof a, "%llu bytes copied", (unsigned long long)bytes);
    CHECK_OK(weft_data_unregister(h));
    for (int i = 0; i < N; i++) CHECKF(a[i] == 1117, "a[%d] = %g after unregister", i, a[i]);
    /* memory of the replicas given back */
    weft_device_info info;
    for (unsigned g = 1; g <= 2; g++) {
        CHECK_OK(weft_device_info_get(rt, g, &info));
        CHECKF(info.memory_used == 0, "GPU %u: %zu bytes used", g, info.memory_used);
    }
    /* destroy writes back too */
    for (int i = 0; i < N; i++) a[i] = 0;
    CHECK_OK(weft_data_register(rt, a, sizeof a, &h));
    inc k3 = {NULL, 7, a, 0};
    spawn_on(rt, "gpu:1", inc_body, &k3, h, WEFT_RW, NULL);
    CHECK_OK(weft_runtime_destroy(rt));
    CHECK(a[0] == 7 && a[N - 1] == 7);
}

/* ---- a replica that does not fit ----------------------------------------- */

static void test_no_room(void) {
    weft_runtime *rt = make("cpu,vgpu:1", 64u << 10);
    /* data larger than the GPU: refused at spawn, naming the sizes */
    static double big[16384]; /* 128 KiB, the GPU has 64 */
    big[0] = 3;
    weft_data *h;
    CHECK_OK(weft_data_register(rt, big, sizeof big, &h));
    weft_placement p;
    CHECK_OK(weft_placement_parse("gpu", &p));
    weft_access acc = {h, WEFT_R};
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = check_body;
    d.accesses = &acc;
    d.naccesses = 1;
    d.placements = &p;
    d.nplacements = 1;
    CHECK_ERR(weft_spawn(rt, &d, NULL), WEFT_ENODEV);
    CHECKF(strstr(weft_last_error(), "131072 bytes of data") != NULL, "%s", weft_last_error());
    /* with the host's copy (WEFT_HOST) it runs on the GPU */
    double want = 3;
    big[1] = big[2] = 0;
    for (int i = 0; i < N; i++) big[i] = 3;
    acc.mode = WEFT_R | WEFT_HOST;
    d.arg = &want;
    CHECK_OK(weft_spawn(rt, &d, NULL));
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_unregister(h));
    /* five arrays of 24 KiB, used in turn by GPU writers and readers: the GPU
     * holds two at a time, so older replicas are evicted (written back to
     * the host when they are the newest value) */
    enum { K = 5, M = 3072 };
    static double arr[K][M];
    weft_data *hs[K];
    for (int k = 0; k < K; k++) {
        for (int i = 0; i < M; i++) arr[k][i] = k;
        CHECK_OK(weft_data_register(rt, arr[k], sizeof arr[k], &hs[k]));
    }
    static inc incs[4][K];
    for (int round = 0; round < 4; round++)
        for (int k = 0; k < K; k++) {
            incs[round][k] = (inc){NULL, 1, arr[k], 0};
            spawn_on(rt, "gpu", inc_body, &incs[round][k], hs[k], WEFT_RW, NULL);
        }
    CHECK_OK(weft_wait_all(rt));
    weft_device_info info;
    CHECK_OK(weft_device_info_get(rt, 1, &info));
    CHECKF(info.memory_used <= info.memory, "%zu used", info.memory_used);
    for (int k = 0; k < K; k++) CHECK_OK(weft_data_unregister(hs[k]));
    for (int k = 0; k < K; k++)
        for (int i = 0; i < N && i < M; i++) /* inc_body adds over the first N elements */
            CHECKF(arr[k][i] == k + 4, "arr[%d][%d] = %g", k, i, arr[k][i]);
    CHECK_OK(weft_device_info_get(rt, 1, &info));
    CHECK(info.memory_used == 0);
    CHECK_OK(weft_runtime_destroy(rt));
}


/* ---- weft_data_wont_use: evicted first ----------------------------------- */

/* A GPU of room for two 24 KiB arrays: A then B read there (B the most
 * recent).  Without the hint, C evicts A; with wont_use(B), C evicts B —
 * seen by which of A and B a later reader on the GPU must copy again. */
static void test_wont_use(void) {
    for (int hint = 0; hint < 2; hint++) {
        weft_runtime *rt = make("cpu,vgpu:1", 64u << 10);
        enum { M = 3072 };
        static double arr[3][M];
        weft_data *h[3];
        for (int k = 0; k < 3; k++) {
            for (int i = 0; i < M; i++) arr[k][i] = k;
            CHECK_OK(weft_data_register(rt, arr[k], sizeof arr[k], &h[k]));
        }
        double want[3] = {0, 1, 2};
        for (int k = 0; k < 2; k++) {
            spawn_on(rt, "gpu", check_body_gpu, &want[k], h[k], WEFT_R, NULL);
            CHECK_OK(weft_wait_all(rt));
        }
        if (hint) CHECK_OK(weft_data_wont_use(h[1]));
        spawn_on(rt, "gpu", check_body_gpu, &want[2], h[2], WEFT_R, NULL);
        CHECK_OK(weft_wait_all(rt));
        /* the one kept is read again without a copy */
        int kept = hint ? 0 : 1;
        uint64_t b0 = copied(rt);
        spawn_on(rt, "gpu", check_body_gpu, &want[kept], h[kept], WEFT_R, NULL);
        CHECK_OK(weft_wait_all(rt));
        CHECKF(copied(rt) == b0, "hint %d: %llu bytes copied to read the array that should have stayed", hint,
               (unsigned long long)(copied(rt) - b0));
        b0 = copied(rt);
        spawn_on(rt, "gpu", check_body_gpu, &want[1 - kept], h[1 - kept], WEFT_R, NULL);
        CHECK_OK(weft_wait_all(rt));
        CHECKF(copied(rt) == b0 + sizeof arr[0], "hint %d: the evicted array was not copied again", hint);
        CHECK_ERR(weft_data_wont_use(NULL), WEFT_EINVAL);
        for (int k = 0; k < 3; k++) CHECK_OK(weft_data_unregister(h[k]));
        CHECK_OK(weft_runtime_destroy(rt));
    }
}

/* ---- a failed copy keeps the last good value ------------------------------ */

static int set_kernel(void *arg) { /* the whole array := 7 */
    inc *k = arg;
    for (int i = 0; i < N; i++) k->p[i] = 7;
    return 0;
}
static int set_body(weft_ctx *ctx, void *arg) {
    inc *k = arg;
    k->p = weft_ctx_data(ctx, 0);
    return weft_ctx_queue(ctx, 0, set_kernel, k, 0);
}

static void test_copy_failure(void) {
    weft_runtime *rt = make("cpu,vgpu:2", 0);
    static double a[N];
    for (int i = 0; i < N; i++) a[i] = 5;
    weft_data *h;
    CHECK_OK(weft_data_register(rt, a, sizeof a, &h));
    /* the copy in of a GPU reader-writer fails: it fails, its reader is
     * cancelled; the GPU's copy is not taken for valid afterwards */
    inc k1 = {NULL, 1, a, 0}, k2 = {NULL, 1, a, 0};
    double six = 6, seven = 7;
    weft_task *t1, *r1;
    weft__test_vgpu_fail_copies(1);
    spawn_on(rt, "gpu:0", inc_body, &k1, h, WEFT_RW, &t1);
    spawn_on(rt, "cpu", check_body, &six, h, WEFT_R, &r1);
    CHECK_ERR(weft_task_wait(t1), WEFT_ETASKFAILED);
    CHECK_ERR(weft_task_wait(r1), WEFT_ECANCELLED);
    weft_task_release(t1);
    weft_task_release(r1);
    CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED);
    spawn_on(rt, "gpu:0", inc_body, &k2, h, WEFT_RW, NULL); /* copied in again: 6 */
    spawn_on(rt, "cpu", check_body, &six, h, WEFT_R, NULL);
    CHECK_OK(weft_wait_all(rt));
    /* gpu:0 sets 7; a reader-writer on gpu:1 fails to copy it over; the
     * value is still 7, on gpu:0 (the host's copy was 6) */
    inc ks = {NULL, 0, a, 0}, k3 = {NULL, 1, a, 0};
    spawn_on(rt, "gpu:0", set_body, &ks, h, WEFT_W, NULL);
    CHECK_OK(weft_wait_all(rt));
    weft__test_vgpu_fail_copies(1);
    spawn_on(rt, "gpu:1", inc_body, &k3, h, WEFT_RW, &t1);
    CHECK_ERR(weft_task_wait(t1), WEFT_ETASKFAILED);
    weft_task_release(t1);
    CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED);
    weft__test_vgpu_fail_copies(0);
    spawn_on(rt, "cpu", check_body, &seven, h, WEFT_R, NULL);
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_unregister(h));
    CHECK(a[0] == 7 && a[N - 1] == 7);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- locality: independent chains over their own data -------------------- */

/* one_by_one: each chain's first step spawned after the one before
 * finished, so that every GPU is idle at each (the tie between them goes
 * to one not chosen yet; not always the first, where all the data would
 * meet and have to move later) */
static void test_locality(bool one_by_one) {
    weft_runtime *rt = make("cpu,vgpu:4", 0);
    enum { C = 4, STEPS = 50 };
    static double arr[C][N];
    static inc incs[C][STEPS];
    weft_data *h[C];
    memset(arr, 0, sizeof arr);
    for (int c = 0; c < C; c++) CHECK_OK(weft_data_register(rt, arr[c], sizeof arr[c], &h[c]));
    uint64_t before = copied(rt);
    g_share = 0.25; /* a chain's GPU always has room for its next step */
    for (int s = 0; s < STEPS; s++)
        for (int c = 0; c < C; c++) {
            incs[c][s] = (inc){NULL, 1, arr[c], 0};
            spawn_on(rt, "gpu", inc_body, &incs[c][s], h[c], WEFT_RW, NULL);
            if (s == 0 && one_by_one) CHECK_OK(weft_wait_all(rt));
        }
    CHECK_OK(weft_wait_all(rt));
    /* each chain settles on one GPU: one copy in, at its first step */
    uint64_t bytes = copied(rt) - before;
    printf("  %d chains of %d steps%s: %llu bytes copied (%zu per chain)\n", C, STEPS,
           one_by_one ? ", started one by one" : "", (unsigned long long)bytes, sizeof arr[0]);
    CHECKF(bytes == C * sizeof arr[0], "%llu bytes copied, %zu expected", (unsigned long long)bytes, C * sizeof arr[0]);
    /* again, each step spawned after the one before finished (no event
     * between them to place it near): the mapping follows the data */
    before = copied(rt);
    for (int s = 0; s < 10; s++) {
        for (int c = 0; c < C; c++) {
            incs[c][s] = (inc){NULL, 1, arr[c], 0};
            spawn_on(rt, "gpu", inc_body, &incs[c][s], h[c], WEFT_RW, NULL);
        }
        CHECK_OK(weft_wait_all(rt));
    }
    CHECKF(copied(rt) == before, "%llu bytes copied", (unsigned long long)(copied(rt) - before));
    for (int c = 0; c < C; c++) CHECK_OK(weft_data_unregister(h[c]));
    for (int c = 0; c < C; c++) CHECK(arr[c][0] == STEPS + 10 && arr[c][N - 1] == STEPS + 10);
    g_share = 0;
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- random graphs against a sequential run ------------------------------- */

enum { MAXA = 6, MAXT = 400, MAXACC = 3 };
typedef struct rtask {
    int id;
    int na;
    int arr[MAXACC];
    unsigned mode[MAXACC];
    size_t len[MAXACC];
    uint32_t *p[MAXACC]; /* where it runs: set by the body */
} rtask;

/* The work of a task over the arrays it names (pointers into whichever copy):
 * a mix of what it reads, folded into what it writes. */
static void work(rtask *t) {
    uint32_t mix = (uint32_t)t->id * 2654435761u;
    for (int k = 0; k < t->na; k++)
        if (t->mode[k] & WEFT_R)
            for (size_t i = 0; i < t->len[k]; i++) mix = mix * 31u + t->p[k][i];
    for (int k = 0; k < t->na; k++)
        if (t->mode[k] & WEFT_W)
            for (size_t i = 0; i < t->len[k]; i++)
                t->p[k][i] = (t->mode[k] & WEFT_R ? t->p[k][i] * 3u : 0u) + mix + (uint32_t)i;
}
static int r_kernel(void *arg) {
    work(arg);
    return 0;
}
static int r_body(weft_ctx *ctx, void *arg) {
    rtask *t = arg;
    weft_range rw[MAXACC];
    for (int k = 0; k < t->na; k++) {
        t->p[k] = weft_ctx_data(ctx, (size_t)k);
        rw[k] = (weft_range){t->p[k], t->len[k] * sizeof(uint32_t), t->mode[k] & WEFT_RW};
    }
    if (weft_ctx_gpu_count(ctx) == 0) {
        work(t);
        return 0;
    }
    return weft_ctx_queue_rw(ctx, 0, r_kernel, t, 0, rw, (size_t)t->na);
}

static uint64_t rng;
static uint32_t rnd(uint32_t n) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

static void random_graph(uint64_t seed, int ntasks, bool check, size_t vgpu_memory) {
    rng = seed | 1;
    int narr = 2 + (int)rnd(MAXA - 1);
    static uint32_t mem[MAXA][4099], ref[MAXA][4099];
    size_t len[MAXA];
    for (int a = 0; a < narr; a++) {
        len[a] = 1 + rnd(4099);
        for (size_t i = 0; i < len[a]; i++) mem[a][i] = ref[a][i] = (uint32_t)(a * 1000 + i);
    }
    if (check) CHECK(setenv("WEFT_VGPU_CHECK", "1", 1) == 0);
    weft_runtime *rt = make("cpu,vgpu:4", vgpu_memory);
    if (check) unsetenv("WEFT_VGPU_CHECK");
    weft_data *h[MAXA];
    for (int a = 0; a < narr; a++) CHECK_OK(weft_data_register(rt, mem[a], len[a] * sizeof(uint32_t), &h[a]));
    static rtask tasks[MAXT];
    static const char *const where[] = {"cpu", "gpu", "gpu:0", "gpu:1", "gpu:2", "gpu:3", "2*gpu"};
    static const unsigned modes[] = {WEFT_R, WEFT_W, WEFT_RW, WEFT_R, WEFT_RW};
    for (int i = 0; i < ntasks; i++) {
        rtask *t = &tasks[i];
        memset(t, 0, sizeof *t);
        t->id = i;
        t->na = 1 + (int)rnd((uint32_t)(narr < MAXACC ? narr : MAXACC));
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
            t->mode[k] = modes[rnd(5)];
            t->len[k] = len[a];
            acc[k] = (weft_access){h[a], t->mode[k]};
        }
        weft_placement p;
        CHECK_OK(weft_placement_parse(where[rnd(7)], &p));
        p.share = 0.25;
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.body = r_body;
        d.arg = t;
        d.accesses = acc;
        d.naccesses = (size_t)t->na;
        d.placements = &p;
        d.nplacements = 1;
        CHECK_OK(weft_spawn(rt, &d, NULL));
    }
    CHECKF(weft_wait_all(rt) == 0, "seed %llu: %s", (unsigned long long)seed, weft_last_error());
    for (int a = 0; a < narr; a++) CHECK_OK(weft_data_unregister(h[a]));
    for (unsigned g = 1; g <= 4; g++) { /* every replica given back */
        weft_device_info info;
        CHECK_OK(weft_device_info_get(rt, g, &info));
        CHECKF(info.memory_used == 0, "seed %llu: GPU %u keeps %zu bytes", (unsigned long long)seed, g,
               info.memory_used);
    }
    CHECK_OK(weft_runtime_destroy(rt));
    /* the same tasks one after another, in spawn order, on the user's memory */
    for (int i = 0; i < ntasks; i++) {
        rtask *t = &tasks[i];
        for (int k = 0; k < t->na; k++) t->p[k] = ref[t->arr[k]];
        work(t);
    }
    for (int a = 0; a < narr; a++)
        CHECKF(memcmp(mem[a], ref[a], len[a] * sizeof(uint32_t)) == 0, "seed %llu: array %d differs",
               (unsigned long long)seed, a);
}

/* ---- data that lives on a GPU ----------------------------------------------- */

static void test_on_device(void) {
    weft_runtime *rt = make("cpu,vgpu:2", 64u << 10);
    double *p;
    CHECK_ERR(weft_device_alloc(rt, 0, sizeof(double) * N, (void **)&p), WEFT_EINVAL); /* the host */
    CHECK_ERR(weft_device_alloc(rt, 3, sizeof(double) * N, (void **)&p), WEFT_EINVAL);
    CHECK_OK(weft_device_alloc(rt, 2, sizeof(double) * N, (void **)&p)); /* on gpu:1 */
    for (int i = 0; i < N; i++) p[i] = 1; /* a virtual GPU's memory is the process's */
    weft_data *h;
    CHECK_ERR(weft_data_register_device(rt, 0, p, sizeof(double) * N, &h), WEFT_EINVAL);
    CHECK_ERR(weft_data_register_device(rt, 2, NULL, sizeof(double) * N, &h), WEFT_EINVAL);
    CHECK_OK(weft_data_register_device(rt, 2, p, sizeof(double) * N, &h));
    void *host;
    size_t n;
    CHECK_OK(weft_data_host(h, &host, &n));
    CHECK(host == NULL && n == sizeof(double) * N);
    weft_tiling t = {sizeof(double), 1, N, 0, 1, 2, 0};
    weft_data *tl[2];
    CHECK_ERR(weft_data_partition(h, &t, tl), WEFT_EINVAL);
    uint64_t before = copied(rt);
    /* gpu:1 works on the user's memory in place: nothing copied */
    inc k1 = {NULL, 1, NULL, 0};
    spawn_on(rt, "gpu:1", inc_body, &k1, h, WEFT_RW, NULL);
    CHECK_OK(weft_wait_all(rt));
    CHECK(k1.p == p && copied(rt) == before && p[0] == 2);
    /* the host reads it (Weft's copy), gpu:0 adds 10 (a peer copy), the CPU 100 */
    double two = 2;
    spawn_on(rt, "cpu", check_body, &two, h, WEFT_R, NULL);
    inc k0 = {NULL, 10, p, 0}, kc = {NULL, 100, p, 0};
    spawn_on(rt, "gpu:0", inc_body, &k0, h, WEFT_RW, NULL);
    spawn_on(rt, "cpu", inc_body, &kc, h, WEFT_RW, NULL);
    CHECK_OK(weft_wait_all(rt));
    CHECK(k0.saw_host == 0 && kc.saw_host == 0 && kc.p != p);
    CHECK(p[0] == 2); /* the newest value is on the host now */
    /* other data fill the small GPU: the user's memory is never evicted */
    enum { K = 4, M = 3072 };
    static double arr[K][M];
    weft_data *hs[K];
    static inc incs[K];
    for (int k = 0; k < K; k++) {
        CHECK_OK(weft_data_register(rt, arr[k], sizeof arr[k], &hs[k]));
        incs[k] = (inc){NULL, 1, arr[k], 0};
        spawn_on(rt, "gpu:1", inc_body, &incs[k], hs[k], WEFT_RW, NULL);
    }
    inc k2 = {NULL, 1000, NULL, 0};
    spawn_on(rt, "gpu:1", inc_body, &k2, h, WEFT_RW, NULL);
    CHECK_OK(weft_wait_all(rt));
    CHECK(k2.p == p);
    for (int k = 0; k < K; k++) CHECK_OK(weft_data_unregister(hs[k]));
    /* last written on gpu:1 in place; then gpu:0 adds 5: unregister brings it back */
    inc k3 = {NULL, 5, NULL, 0};
    spawn_on(rt, "gpu:0", inc_body, &k3, h, WEFT_RW, NULL);
    CHECK_OK(weft_wait_all(rt));
    CHECK(p[0] == 1112);
    CHECK_OK(weft_data_unregister(h));
    for (int i = 0; i < N; i++) CHECKF(p[i] == 1117, "p[%d] = %g after unregister", i, p[i]);
    weft_device_info info;
    CHECK_OK(weft_device_info_get(rt, 1, &info));
    CHECKF(info.memory_used == 0, "gpu:0 keeps %zu bytes", info.memory_used);
    CHECK_OK(weft_device_free(rt, 2, p, sizeof(double) * N));
    CHECK_OK(weft_device_info_get(rt, 2, &info));
    CHECKF(info.memory_used == 0, "gpu:1 keeps %zu bytes", info.memory_used);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- the data checking mode catches a stale pointer ------------------------ */

/* Queues a kernel on a pointer it was given, not its own data's. */
static int stale_body(weft_ctx *ctx, void *arg) {
    inc *k = arg;
    weft_range rw = {k->p, N * sizeof(double), WEFT_RW};
    return weft_ctx_queue_rw(ctx, 0, inc_kernel, k, 0, &rw, 1);
}

static void test_data_check(void) {
    CHECK(setenv("WEFT_VGPU_CHECK", "1", 1) == 0);
    weft_runtime *rt = make("cpu,vgpu:2", 0);
    unsetenv("WEFT_VGPU_CHECK");
    static double a[N];
    for (int i = 0; i < N; i++) a[i] = 1;
    weft_data *h;
    CHECK_OK(weft_data_register(rt, a, sizeof a, &h));
    inc k0 = {NULL, 1, a, 0};
    double two = 2;
    spawn_on(rt, "gpu:0", inc_body, &k0, h, WEFT_RW, NULL); /* valid on gpu:0 only (2) */
    spawn_on(rt, "cpu", check_body, &two, h, WEFT_R, NULL); /* and the host */
    CHECK_OK(weft_wait_all(rt));
    weft_task *t;
    char why[400];
    /* a pointer kept from an earlier task: a later task on the same GPU that
     * does not access the data queues a kernel naming it: refused */
    static double b[N];
    weft_data *hb;
    CHECK_OK(weft_data_register(rt, b, sizeof b, &hb));
    inc k1 = {NULL, 1, a, 0};
    spawn_on(rt, "gpu:0", inc_body, &k1, h, WEFT_RW, NULL); /* k1.p: h's replica on gpu:0 */
    CHECK_OK(weft_wait_all(rt));
    CHECK(k1.p != NULL && k1.p != a);
    inc stale = {k1.p, 1, b, 0};
    spawn_on(rt, "gpu:0", stale_body, &stale, hb, WEFT_RW, &t);
    CHECK_ERR(weft_task_wait(t), WEFT_ETASKFAILED);
    weft_task_release(t);
    weft__test_vcheck_last(why, sizeof why);
    CHECKF(strstr(why, "does not access") && strstr(why, "d1"), "%s", why);
    CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED);
    CHECK_OK(weft_data_unregister(hb));
    CHECK_OK(weft_data_unregister(h));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- copies in flight with no worker waiting for them -------------------- */

/* The order in which bodies ran (one worker: no race on it). */
static char order[8];
static int norder;
static int mark_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    if (norder < (int)sizeof order - 1) order[norder++] = *(const char *)arg;
    return 0;
}
typedef struct seen { char tag; double want; } seen;
static int read_mark_body(weft_ctx *ctx, void *arg) { /* on the CPU: every element is want */
    const seen *s = arg;
    const double *p = weft_ctx_data(ctx, 0);
    for (int i = 0; i < N; i++)
        if (p[i] != s->want) return 1;
    return mark_body(ctx, (void *)&s->tag);
}

static void test_host_prefetch(void) {
    /* host <-> GPU at 20 kB/s: a copy of 8000 bytes takes 0.4 s, the time
     * the test's main thread has for a step that must come before the copy
     * lands (spawning the second task, cancelling the reader) */
    CHECK(setenv("WEFT_VGPU_HOST_GBPS", "0.00002", 1) == 0);
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = 1;
    cfg.devices = "cpu,vgpu:1";
    weft_runtime *rt;
    CHECK_OK(weft_runtime_create(&cfg, &rt));
    unsetenv("WEFT_VGPU_HOST_GBPS");
    static double a[N];
    weft_data *h;
    CHECK_OK(weft_data_register(rt, a, sizeof a, &h));
    for (int round = 0; round < 3; round++) {
        /* a GPU writer, then a CPU reader and, spawned after it, a CPU task
         * with no data: the reader waits for its copy to the host without
         * the only worker, which runs the other task meanwhile */
        inc ks = {NULL, 0, a, 0};
        spawn_on(rt, "gpu:0", set_body, &ks, h, WEFT_W, NULL);
        CHECK_OK(weft_wait_all(rt));
        norder = 0;
        seen r = {'R', 7};
        static const char x = 'X';
        spawn_on(rt, "cpu", read_mark_body, &r, h, WEFT_R, NULL);
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.body = mark_body;
        d.arg = (void *)&x;
        CHECK_OK(weft_spawn(rt, &d, NULL));
        CHECK_OK(weft_wait_all(rt));
        order[norder] = 0;
        CHECKF(!strcmp(order, "XR"), "round %d: bodies ran in the order %s", round, order);
        inc k = {NULL, 1, a, 0}; /* back on the GPU: 8 there, the host's copy invalid */
        spawn_on(rt, "gpu:0", inc_body, &k, h, WEFT_RW, NULL);
        CHECK_OK(weft_wait_all(rt));
        /* a CPU reader cancelled while its copy is in flight (weft_cancel_pending
         * once the copy was queued): the copy is the host's replica after all,
         * and the next reader takes it without copying again; after a
         * GPU writer, the next reader copies the new value (not that copy) */
        uint64_t b0 = copied(rt);
        seen r2 = {'C', 8}, r3 = {'D', 8}, r4 = {'E', 9};
        weft_task *t2;
        spawn_on(rt, "cpu", read_mark_body, &r2, h, WEFT_R, &t2);
        uint64_t t0 = now_ns();
        while (copied(rt) == b0 && now_ns() - t0 < 5000000000ull)
            sched_yield();
        CHECK(copied(rt) == b0 + sizeof a);
        CHECK_OK(weft_cancel_pending(rt));
        CHECK_ERR(weft_task_wait(t2), WEFT_ECANCELLED);
        weft_task_release(t2);
        spawn_on(rt, "cpu", read_mark_body, &r3, h, WEFT_R, NULL);
        CHECK_OK(weft_wait_all(rt));
        CHECKF(copied(rt) == b0 + sizeof a, "round %d: %llu bytes copied, one copy is %zu", round,
               (unsigned long long)(copied(rt) - b0), sizeof a);
        spawn_on(rt, "gpu:0", inc_body, &k, h, WEFT_RW, NULL); /* 9 on the GPU */
        CHECK_OK(weft_wait_all(rt));
        uint64_t b1 = copied(rt);
        spawn_on(rt, "cpu", read_mark_body, &r4, h, WEFT_R, &t2); /* once more, cancelled */
        t0 = now_ns();
        while (copied(rt) == b1 && now_ns() - t0 < 5000000000ull)
            sched_yield();
        CHECK_OK(weft_cancel_pending(rt));
        CHECK_ERR(weft_task_wait(t2), WEFT_ECANCELLED);
        weft_task_release(t2);
        spawn_on(rt, "gpu:0", inc_body, &k, h, WEFT_RW, NULL); /* 10 on the GPU */
        r4.want = 10;
        spawn_on(rt, "cpu", read_mark_body, &r4, h, WEFT_R, NULL);
        CHECK_OK(weft_wait_all(rt));
        /* and a GPU writer after all that */
        spawn_on(rt, "gpu:0", set_body, &ks, h, WEFT_W, NULL);
        CHECK_OK(weft_wait_all(rt));
    }
    CHECK_OK(weft_data_unregister(h));
    CHECK(a[0] == 7 && a[N - 1] == 7);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- the source of a copy: among equal peers, the least loaded ------------ */

static int wait_kernel(void *arg) {
    (void)arg;
    return 0;
}
static int read_long_body(weft_ctx *ctx, void *arg) { /* a GPU reader whose kernel takes 1 s */
    (void)arg;
    return weft_ctx_data(ctx, 0) ? weft_ctx_queue(ctx, 0, wait_kernel, NULL, 1000000000ull) : 1;
}

static int touch_body_r(weft_ctx *ctx, void *arg) {
    (void)arg;
    return weft_ctx_data(ctx, 0) ? 0 : 1;
}

static void test_least_loaded_source(void) {
    weft_runtime *rt = make("cpu,vgpu:4", 0);
    static double a[N];
    for (int i = 0; i < N; i++) a[i] = 1;
    weft_data *h;
    CHECK_OK(weft_data_register(rt, a, sizeof a, &h));
    /* valid (shared) on vgpu:0 and vgpu:1 (devices 1 and 2) and the host */
    inc k = {NULL, 1, a, 0};
    spawn_on(rt, "gpu:0", inc_body, &k, h, WEFT_RW, NULL);
    spawn_on(rt, "gpu:1", touch_body_r, NULL, h, WEFT_R, NULL);
    CHECK_OK(weft_wait_all(rt));
    CHECK(weft__test_data_source(h, 3) == 1); /* a peer before the host; the lowest among equals */
    /* while a reader on vgpu:2 copies from vgpu:0 (and holds it until its
     * 1 s kernel is done), vgpu:3's copy comes from vgpu:1 */
    uint64_t b0 = copied(rt);
    weft_task *t;
    spawn_on(rt, "gpu:2", read_long_body, NULL, h, WEFT_R, &t);
    uint64_t t0 = now_ns();
    while (copied(rt) == b0 && now_ns() - t0 < 5000000000ull)
        sched_yield();
    weft_task_status st;
    CHECK_OK(weft_task_status_get(t, &st));
    CHECK(st != WEFT_TASK_COMPLETED);
    CHECKF(weft__test_data_source(h, 4) == 2, "source %d", weft__test_data_source(h, 4));
    CHECK_OK(weft_task_wait(t));
    weft_task_release(t);
    CHECK(weft__test_data_source(h, 4) == 1); /* equal again */
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_unregister(h));
    CHECK(a[0] == 2);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- copies in beside kernels already on the stream (prefetch) ----------- */

static uint64_t prefetched(weft_runtime *rt) {
    weft_stats st;
    CHECK_OK(weft_runtime_stats(rt, &st));
    return st.bytes_prefetched;
}
static int check_kernel(void *arg) { /* every element is 7 + add */
    inc *k = arg;
    for (int i = 0; i < N; i++)
        if (k->p[i] != 7 + k->add) return 1;
    return 0;
}
static int check_gpu_body(weft_ctx *ctx, void *arg) {
    inc *k = arg;
    k->p = weft_ctx_data(ctx, 0);
    weft_range r = {k->p, N * sizeof(double), WEFT_R};
    return weft_ctx_queue_rw(ctx, 0, check_kernel, k, 0, &r, 1);
}

static int busy_body(weft_ctx *ctx, void *arg) { /* a kernel of 0.3 s on the task's stream */
    (void)arg;
    return weft_ctx_queue(ctx, 0, wait_kernel, NULL, 300000000ull);
}
static void spawn_busy(weft_runtime *rt, weft_task **out) {
    weft_placement p;
    CHECK_OK(weft_placement_parse("gpu:0", &p));
    p.share = 0.2;
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = busy_body;
    d.placements = &p;
    d.nplacements = 1;
    CHECK_OK(weft_spawn(rt, &d, out));
}
/* Every stream of gpu:0 busy with a 0.3 s kernel: four tasks in flight. */
static void busy_streams(weft_runtime *rt, weft_task *busy[4]) {
    for (int k = 0; k < 4; k++) spawn_busy(rt, &busy[k]);
    for (int k = 0; k < 4; k++) {
        weft_task_status st = WEFT_TASK_WAITING;
        uint64_t t0 = now_ns();
        while (st != WEFT_TASK_ENQUEUED && now_ns() - t0 < 5000000000ull) {
            CHECK_OK(weft_task_status_get(busy[k], &st));
            sched_yield();
        }
        CHECKF(st == WEFT_TASK_ENQUEUED, "busy task %d not in flight (%d)", k, (int)st);
    }
}
static int set_cpu_body(weft_ctx *ctx, void *arg) {
    (void)arg;
    double *p = weft_ctx_data(ctx, 0);
    for (int i = 0; i < N; i++) p[i] = 7;
    return 0;
}

static void test_prefetch_beside_kernels(bool check) {
    if (check) CHECK(setenv("WEFT_VGPU_CHECK", "1", 1) == 0);
    weft_runtime *rt = make("cpu,vgpu:1", 0);
    if (check) unsetenv("WEFT_VGPU_CHECK");
    static double a[N];
    weft_data *h;
    for (int i = 0; i < N; i++) a[i] = 7;
    CHECK_OK(weft_data_register(rt, a, sizeof a, &h));
    for (int round = 0; round < 3; round++) {
        weft_task *busy[4];
        busy_streams(rt, busy);
        /* a reader of host data lands on a busy stream: its copy goes on the
         * GPU's prefetch queue and its kernel (after the 0.3 s one) sees it */
        uint64_t p0 = prefetched(rt);
        g_share = 0.1;
        inc k1 = {NULL, 0, a, 0};
        weft_task *t;
        if (round == 1) weft__test_vgpu_fail_copies(1); /* the prefetch fails: its reader does */
        spawn_on(rt, "gpu:0", check_gpu_body, &k1, h, WEFT_R, &t);
        if (round == 1) {
            CHECK_ERR(weft_task_wait(t), WEFT_ETASKFAILED);
            weft__test_vgpu_fail_copies(0);
            weft_task_release(t);
            /* a writer there next copies nothing, and takes no failure */
            inc ks = {NULL, 0, a, 0};
            spawn_on(rt, "gpu:0", set_body, &ks, h, WEFT_W, &t);
            CHECK_OK(weft_task_wait(t));
            weft_task_release(t);
            seen r = {'r', 7};
            spawn_on(rt, "cpu", read_mark_body, &r, h, WEFT_R, NULL);
            CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED);
        } else {
            CHECK_OK(weft_task_wait(t));
            weft_task_release(t);
            CHECK_OK(weft_wait_all(rt));
        }
        CHECKF(prefetched(rt) - p0 == sizeof a, "round %d: %llu bytes prefetched", round,
               (unsigned long long)(prefetched(rt) - p0));
        for (int k = 0; k < 4; k++) weft_task_release(busy[k]);
        /* the host's copy the only valid one again: a CPU writer */
        g_share = 0;
        spawn_on(rt, "cpu", set_cpu_body, NULL, h, WEFT_W, NULL);
        CHECK_OK(weft_wait_all(rt));
    }
    g_share = 0;
    CHECK_OK(weft_data_unregister(h));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* A tile's copy in goes beside the kernels too, when it has no halo (a
 * halo's copies are queued on the task's stream, after the interior's). */
typedef struct tcheck { double *p; size_t n; double want; } tcheck;
static int tcheck_kernel(void *arg) {
    tcheck *k = arg;
    for (size_t i = 0; i < k->n; i++)
        if (k->p[i] != k->want) return 1;
    return 0;
}
static int tcheck_body(weft_ctx *ctx, void *arg) {
    tcheck *k = arg;
    k->p = weft_ctx_data(ctx, 0);
    weft_range r = {k->p, k->n * sizeof(double), WEFT_R};
    return weft_ctx_queue_rw(ctx, 0, tcheck_kernel, k, 0, &r, 1);
}

static void test_prefetch_tiles(unsigned halo) {
    enum { ROWS = 40, COLS = 25 }; /* N elements */
    weft_runtime *rt = make("cpu,vgpu:1", 0);
    static double a[ROWS * COLS];
    for (int i = 0; i < ROWS * COLS; i++) a[i] = 7;
    weft_data *h, *tl[2];
    CHECK_OK(weft_data_register(rt, a, sizeof a, &h));
    weft_tiling tg = {sizeof(double), ROWS, COLS, 0, 2, 1, halo};
    CHECK_OK(weft_data_partition(h, &tg, tl));
    weft_task *busy[4];
    busy_streams(rt, busy);
    weft_tile_info ti;
    CHECK_OK(weft_data_tile_info(tl[0], &ti));
    uint64_t p0 = prefetched(rt);
    g_share = 0.1;
    tcheck k1 = {NULL, ti.rows * ti.cols, 7};
    weft_task *t;
    spawn_on(rt, "gpu:0", tcheck_body, &k1, tl[0], WEFT_R, &t);
    CHECK_OK(weft_task_wait(t));
    weft_task_release(t);
    g_share = 0;
    if (halo == 0)
        CHECKF(prefetched(rt) - p0 == ti.rows * ti.cols * sizeof(double), "%llu bytes prefetched",
               (unsigned long long)(prefetched(rt) - p0));
    for (int k = 0; k < 4; k++) weft_task_release(busy[k]);
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_unregister(h));
    CHECK_OK(weft_runtime_destroy(rt));
}

int main(int argc, char **argv) {
    test_watchdog(test_pick(150, 300));
    if (argc > 5 && strcmp(argv[1], "graph") == 0) { /* (to rerun one graph: seed ntasks check vgpu_memory) */
        uint64_t seed = strtoull(argv[2], NULL, 0);
        random_graph(seed, atoi(argv[3]), atoi(argv[4]) != 0, (size_t)strtoull(argv[5], NULL, 0));
        printf("graph %llu ok\n", (unsigned long long)seed); /* a failed check has exited with 1 */
        return 0;
    }
    if (argc > 2 && strcmp(argv[1], "locality") == 0) { /* (to rerun the locality test: times) */
        for (int i = atoi(argv[2]); i > 0; i--) {
            test_locality(false);
            test_locality(true);
        }
        return 0;
    }
    test_step("one array");
    test_one_array();
    test_step("no room");
    test_no_room();
    test_step("copy failure");
    test_copy_failure();
    test_step("copies to the host without a worker waiting");
    test_host_prefetch();
    test_step("copies in beside kernels already queued (prefetch)");
    test_prefetch_beside_kernels(false);
    test_prefetch_beside_kernels(true);
    test_prefetch_tiles(0);
    test_prefetch_tiles(1);
    test_step("the least loaded source");
    test_least_loaded_source();
    test_step("locality");
    test_locality(false);
    test_locality(true);
    test_step("data living on a GPU");
    test_on_device();
    test_step("data checking mode");
    test_data_check();
    test_step("random graphs");
    int seeds = test_pick(16, 6), ntasks = test_pick(250, 120);
    for (int s = 0; s < seeds; s++) random_graph(0x9e3779b97f4a7c15ull * (uint64_t)(s + 1), ntasks, false, 0);
    test_step("wont_use");
    test_wont_use();
    test_step("random graphs, small GPUs (eviction)");
    for (int s = 0; s < seeds; s++) random_graph(0x51ed270b27cd9e5bull * (uint64_t)(s + 3), ntasks, false, 56u << 10);
    test_step("random graphs, checked");
    for (int s = 0; s < seeds / 4 + 1; s++) random_graph(0xdeadbeefull * (uint64_t)(s + 7), ntasks, true, 0);
    for (int s = 0; s < seeds / 4 + 1; s++) random_graph(0xfeedull * (uint64_t)(s + 11), ntasks, true, 56u << 10);
    printf("test_replicas: ok\n");
    return 0;
}
