/*
 * run_weft.c — the tiled Cholesky task graph on Weft.
 *
 * The matrix is registered once and partitioned into nt x nt tiles
 * (weft_data_partition); each kernel call of the right-looking algorithm
 * is a task on its tiles (chol.h's table), with two placement
 * alternatives, each a variant of its own:
 *   "cpu"  the CBLAS / LAPACKE call on the host's tiles, on the worker;
 *   "gpu"  on a virtual GPU, the same call queued on the task's stream
 *          (weft_ctx_queue_rw, naming the tiles it reads and writes),
 *          stretched to the modelled GPU time; on a CUDA GPU, cuBLAS /
 *          cuSOLVER on the task's stream (cuda.c, built with CUDA only).
 * The runtime's placement policy picks the alternative; each variant
 * counts its task against its device, so the run can say where the work
 * went.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chol.h"
#include "chol_cuda.h"

#define MAX_DEV 65

typedef struct chol_run {
    const chol_opts *o;
    weft_runtime *rt;
    weft_data **tiles;     /* nt x nt, row-major */
    size_t *span;          /* rows (= columns) of block i */
    unsigned nt;
    unsigned ndev;
    weft_device_kind kind[MAX_DEV];
    weft_placement pl[2];
    size_t npl;
    chol_cuda *cuda;       /* CUDA handles, or NULL */
    _Atomic uint64_t tasks[CHOL_NKERNELS][MAX_DEV];
} chol_run;

/* One task: its kernel and sizes (set at spawn), its tiles' addresses
 * (set by the body, where it runs). */
typedef struct chol_task {
    chol_run *run;
    chol_call call;
    unsigned nacc;
} chol_task;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Point t's call at its tiles where the body runs: the inputs are
 * accesses 0 (and 1 for GEMM), the tile written is the last one. */
static void bind_tiles(const weft_ctx *ctx, chol_task *t)
{
    chol_call *c = &t->call;
    size_t w = t->nacc - 1;
    c->c = weft_ctx_data(ctx, w);
    c->ldc = (int)(weft_ctx_pitch(ctx, w) / sizeof(double));
    if (t->nacc > 1) {
        c->a = weft_ctx_data(ctx, 0);
        c->lda = (int)(weft_ctx_pitch(ctx, 0) / sizeof(double));
    }
    if (t->nacc > 2) {
        c->b = weft_ctx_data(ctx, 1);
        c->ldb = (int)(weft_ctx_pitch(ctx, 1) / sizeof(double));
    }
}

/* Run t's call where the caller is (a worker, or a virtual GPU's stream
 * thread); a failed POTRF says so. */
static int run_call(chol_task *t)
{
    int info = chol_call_cpu(&t->call);
    if (info != 0)
        fprintf(stderr, "weft-cholesky: %s failed (info %d): the matrix is not positive definite\n",
                chol_kernel_name(t->call.kernel), info);
    return info;
}

static int vgpu_kernel(void *arg)
{
    return run_call(arg);
}

/* The "cpu" variant: the call on the host's tiles. */
static int body_cpu(weft_ctx *ctx, void *arg)
{
    chol_task *t = arg;
    bind_tiles(ctx, t);
    atomic_fetch_add(&t->run->tasks[t->call.kernel][0], 1);
    return run_call(t);
}

/* The "gpu" variant: on the task's GPU's stream. */
static int body_gpu(weft_ctx *ctx, void *arg)
{
    chol_task *t = arg;
    chol_run *r = t->run;
    int dev = weft_ctx_gpu(ctx, 0);
    bind_tiles(ctx, t);
    atomic_fetch_add(&r->tasks[t->call.kernel][dev], 1);
    if (r->kind[dev] == WEFT_DEVICE_CUDA)
        return chol_cuda_call(r->cuda, ctx, &t->call);
    weft_range rg[3];
    for (unsigned i = 0; i < t->nacc; i++) {
        rg[i].ptr = weft_ctx_data(ctx, i);
        rg[i].bytes = weft_ctx_bytes(ctx, i);
        rg[i].mode = i + 1 == t->nacc ? WEFT_RW : WEFT_R;
    }
    uint64_t ns = chol_gpu_model_ns(&r->o->model, &t->call);
    return weft_ctx_queue_rw(ctx, 0, vgpu_kernel, t, ns, rg, t->nacc);
}

/* Spawn kernel `kernel` of step k on tiles (i, j): reads A[i][k] (TRSM:
 * A[k][k]), GEMM also A[j][k], writes A[i][j] (POTRF: A[k][k]). */
static int spawn_kernel(chol_run *r, int kernel, unsigned k, unsigned i, unsigned j)
{
    chol_task *t = calloc(1, sizeof *t);
    if (!t)
        return WEFT_ENOMEM;
    weft_data **T = r->tiles;
    unsigned nt = r->nt;
    weft_access acc[3];
    t->run = r;
    t->call.kernel = kernel;
    t->call.m = (int)r->span[i];
    t->call.n = (int)r->span[j];
    t->call.k = (int)r->span[k];
    if (kernel == CHOL_POTRF) {
        acc[t->nacc++] = (weft_access){T[k * nt + k], WEFT_RW};
    } else if (kernel == CHOL_TRSM) {
        acc[t->nacc++] = (weft_access){T[k * nt + k], WEFT_R};
        acc[t->nacc++] = (weft_access){T[i * nt + k], WEFT_RW};
    } else {
        acc[t->nacc++] = (weft_access){T[i * nt + k], WEFT_R};
        if (kernel == CHOL_GEMM)
            acc[t->nacc++] = (weft_access){T[j * nt + k], WEFT_R};
        acc[t->nacc++] = (weft_access){T[i * nt + j], WEFT_RW};
    }
    char name[32];
    snprintf(name, sizeof name, "%s.%u.%u.%u", chol_kernel_name(kernel), k, i, j);
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = body_cpu;
    d.arg = t;
    d.arg_destroy = free;
    d.accesses = acc;
    d.naccesses = t->nacc;
    d.name = name;
    d.placements = r->pl;
    d.nplacements = r->npl;
    /* The panel first: earlier steps before later ones, and within a step
     * POTRF, then TRSM, then the updates of the next panel. */
    int bonus = kernel == CHOL_POTRF ? 3 : kernel == CHOL_TRSM ? 2 : j == k + 1 ? 1 : 0;
    d.priority = 4 * (int)(nt - k) + bonus;
    int rc = weft_spawn(r->rt, &d, NULL);
    if (rc != 0)
        fprintf(stderr, "weft-cholesky: spawning %s: %s\n", name, weft_last_error());
    return rc;
}

/* Spawn the whole graph, step by step. */
static int spawn_graph(chol_run *r)
{
    unsigned nt = r->nt;
    for (unsigned k = 0; k < nt; k++) {
        int rc = spawn_kernel(r, CHOL_POTRF, k, k, k);
        for (unsigned i = k + 1; rc == 0 && i < nt; i++)
            rc = spawn_kernel(r, CHOL_TRSM, k, i, k);
        for (unsigned i = k + 1; rc == 0 && i < nt; i++) {
            rc = spawn_kernel(r, CHOL_SYRK, k, i, i);
            for (unsigned j = k + 1; rc == 0 && j < i; j++)
                rc = spawn_kernel(r, CHOL_GEMM, k, i, j);
        }
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* The devices of r->rt, and the placement alternatives that follow from
 * them: "cpu" when the CPU runs tasks, "gpu" when there are GPUs. */
static int setup_devices(chol_run *r, chol_result *res)
{
    r->ndev = weft_device_count(r->rt);
    if (r->ndev > MAX_DEV)
        r->ndev = MAX_DEV;
    int cpu_tasks = 1;
    for (unsigned i = 0; i < r->ndev; i++) {
        weft_device_info info;
        if (weft_device_info_get(r->rt, i, &info) != 0)
            return WEFT_EINVAL;
        r->kind[i] = info.kind;
        snprintf(res->dev_name[i], sizeof res->dev_name[i], "%s", info.name);
        if (i == 0)
            cpu_tasks = info.cpu_tasks;
    }
    weft_placement cpu, gpu;
    if (weft_placement_parse("cpu", &cpu) != 0 || weft_placement_parse("gpu", &gpu) != 0)
        return WEFT_EINVAL;
    cpu.body = body_cpu;
    gpu.body = body_gpu;
    r->npl = 0;
    int has_gpu = r->ndev > 1;
    if (has_gpu && r->o->gpu_first)
        r->pl[r->npl++] = gpu;
    if (cpu_tasks || !has_gpu)
        r->pl[r->npl++] = cpu;
    if (has_gpu && !r->o->gpu_first)
        r->pl[r->npl++] = gpu;
    res->ndev = r->ndev;
    return chol_cuda_new(r->rt, &r->cuda);
}

/* Register a, partition it into tiles, run the graph, unregister (the
 * factor is then in a).  The time runs from the first spawn until a holds
 * the factor. */
static int factor(chol_run *r, double *a, chol_result *res)
{
    size_t n = r->o->n;
    weft_data *d = NULL;
    int rc = weft_data_register(r->rt, a, n * n * sizeof(double), &d);
    weft_tiling tl = {.elem = sizeof(double), .rows = n, .cols = n, .grid_rows = r->nt, .grid_cols = r->nt};
    if (rc == 0)
        rc = weft_data_partition(d, &tl, r->tiles);
    for (unsigned i = 0; rc == 0 && i < r->nt; i++) {
        weft_tile_info ti;
        rc = weft_data_tile_info(r->tiles[i * r->nt + i], &ti);
        r->span[i] = ti.rows;
    }
    if (rc != 0) {
        fprintf(stderr, "weft-cholesky: tiling: %s\n", weft_last_error());
        if (d && weft_data_unregister(d) != 0)
            fprintf(stderr, "weft-cholesky: unregistering: %s\n", weft_last_error());
        return rc;
    }
    double t0 = now_s();
    rc = spawn_graph(r);
    int wrc = weft_wait_all(r->rt);
    int urc = weft_data_unregister(d);
    res->seconds = now_s() - t0;
    if (rc == 0 && wrc != 0) {
        fprintf(stderr, "weft-cholesky: the factorisation failed: %s\n", weft_last_error());
        rc = wrc;
    }
    return rc != 0 ? rc : urc;
}

int chol_weft(double *a, const chol_opts *o, chol_result *res)
{
    memset(res, 0, sizeof *res);
    if (o->n == 0 || o->b == 0) {
        fprintf(stderr, "weft-cholesky: N and B must be positive\n");
        return WEFT_EINVAL;
    }
    chol_run *r = calloc(1, sizeof *r);
    if (!r)
        return WEFT_ENOMEM;
    r->o = o;
    r->nt = (unsigned)((o->n + o->b - 1) / o->b);
    r->tiles = calloc((size_t)r->nt * r->nt, sizeof *r->tiles);
    r->span = calloc(r->nt, sizeof *r->span);
    weft_config cfg;
    weft_config_init(&cfg);
    if (o->devices)
        cfg.devices = o->devices;
    if (o->policy)
        cfg.policy = o->policy;
    if (o->trace)
        cfg.trace_path = o->trace;
    if (o->workers)
        cfg.workers = o->workers;
    int rc = !r->tiles || !r->span ? WEFT_ENOMEM : weft_runtime_create(&cfg, &r->rt);
    if (rc != 0)
        fprintf(stderr, "weft-cholesky: starting the runtime: %s\n", weft_last_error());
    if (rc == 0)
        rc = setup_devices(r, res);
    if (rc == 0)
        rc = factor(r, a, res);
    weft_stats st;
    if (r->rt && weft_runtime_stats(r->rt, &st) == 0)
        res->bytes_copied = st.bytes_copied;
    for (unsigned k = 0; k < CHOL_NKERNELS; k++)
        for (unsigned i = 0; i < r->ndev; i++)
            res->tasks[k][i] = atomic_load(&r->tasks[k][i]);
    if (r->rt) {
        int drc = weft_runtime_destroy(r->rt);
        rc = rc != 0 ? rc : drc;
    }
    chol_cuda_free(r->cuda);
    free(r->tiles);
    free(r->span);
    free(r);
    return rc;
}

void chol_result_print(const chol_result *res)
{
    printf("  %-8s %8s %8s %8s %8s %8s\n", "device", "potrf", "trsm", "syrk", "gemm", "all");
    for (unsigned d = 0; d < res->ndev; d++) {
        uint64_t all = 0;
        for (int k = 0; k < CHOL_NKERNELS; k++)
            all += res->tasks[k][d];
        printf("  %-8s %8llu %8llu %8llu %8llu %8llu\n", res->dev_name[d],
               (unsigned long long)res->tasks[CHOL_POTRF][d], (unsigned long long)res->tasks[CHOL_TRSM][d],
               (unsigned long long)res->tasks[CHOL_SYRK][d], (unsigned long long)res->tasks[CHOL_GEMM][d],
               (unsigned long long)all);
    }
}
