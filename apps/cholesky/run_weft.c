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
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
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
    bool models;           /* the runtime's policy keeps models ("dmda"): tasks get kinds */
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

/* A modelled kernel's work: none (its time is the stretch). */
static int empty_kernel(void *arg)
{
    (void)arg;
    return 0;
}

/* Sleep ns (a modelled CPU kernel). */
static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* The "cpu" variant: the call on the host's tiles. */
static int body_cpu(weft_ctx *ctx, void *arg)
{
    chol_task *t = arg;
    bind_tiles(ctx, t);
    atomic_fetch_add(&t->run->tasks[t->call.kernel][0], 1);
    if (t->run->o->model_only) {
        sleep_ns(chol_gpu_model_ns(&t->run->o->cpu_model, &t->call));
        return 0;
    }
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
    return weft_ctx_queue_rw(ctx, 0, r->o->model_only ? empty_kernel : vgpu_kernel, t, ns, rg, t->nacc);
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
    d.kind = r->models ? chol_kernel_name(kernel) : NULL; /* (the performance models' name) */
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
    for (unsigned i = 1; r->o->model_only && i < r->ndev; i++)
        if (r->kind[i] == WEFT_DEVICE_CUDA) {
            fprintf(stderr, "weft-cholesky: --model-only models virtual GPUs and the CPU; %s is a CUDA GPU (use "
                            "vgpu:N, or run the real kernels without --model-only)\n",
                    res->dev_name[i]);
            return WEFT_EINVAL;
        }
    return chol_cuda_new(r->rt, &r->cuda);
}

/* ------------------------------------------------------------------------ */
/* The makespan's lower bound                                                */
/* ------------------------------------------------------------------------ */

/* A normal run's bound is the runtime's (weft_runtime_bound: it records
 * the graph and predicts each task from its models).  A --model-only
 * run's is computed here, from the modelled kernels' own times: the
 * runtime's models learn what the run observed, which there includes what
 * simulating the machine costs this one (a sleep's wake-up and each
 * task's overhead, beside modelled kernels that may take microseconds),
 * while a scheduling study wants the bound of the machine it models. */

/* The runtime's bound of the run (res->bound 0 when no task had a model:
 * a policy other than "dmda" keeps none). */
static void runtime_bound(chol_run *r, chol_result *res)
{
    weft_bound b;
    if (weft_runtime_bound(r->rt, &b) != 0) {
        fprintf(stderr, "weft-cholesky: the bound: %s\n", weft_last_error());
        return;
    }
    res->bound_path = b.path;
    res->bound_area = b.area;
    res->bound = b.no_model < b.tasks ? b.bound : 0;
    res->cpu_slots = b.cpu_slots;
    res->gpus = b.gpus;
}

/* The tasks of the graph as the modelled bound sees them: each one's time
 * on the CPU and on a GPU (seconds; INFINITY where it cannot run). */
typedef struct bound_task {
    double tc, tg;
} bound_task;

/* Whether the tasks fit in time T on cs CPU slots and gs GPUs, each task
 * split between the two where that is best (the order: the tasks the CPU
 * is relatively best at first). */
static bool area_fits(const bound_task *bt, const size_t *order, size_t n, unsigned cs, unsigned gs, double T)
{
    double cpu = cs * T, gpu = 0;
    for (size_t i = 0; i < n; i++) { /* what must go on one kind */
        if (!isfinite(bt[i].tg))
            cpu -= bt[i].tc;
        else if (!isfinite(bt[i].tc))
            gpu += bt[i].tg;
    }
    for (size_t o = 0; o < n; o++) {
        const bound_task *b = &bt[order[o]];
        if (!isfinite(b->tc) || !isfinite(b->tg))
            continue;
        double on_cpu = cpu <= 0 ? 0 : cpu >= b->tc ? 1 : cpu / b->tc;
        cpu -= on_cpu * b->tc;
        gpu += (1 - on_cpu) * b->tg;
    }
    return cpu >= -1e-12 && gpu <= gs * T * (1 + 1e-12);
}

static const bound_task *sort_base;
static int by_ratio(const void *x, const void *y)
{
    const bound_task *a = &sort_base[*(const size_t *)x], *b = &sort_base[*(const size_t *)y];
    double ra = a->tc / a->tg, rb = b->tc / b->tg;
    return (ra > rb) - (ra < rb);
}

/* The area bound by bisection on T (area_fits is monotone in T). */
static double area_bound(const bound_task *bt, size_t n, unsigned cs, unsigned gs)
{
    size_t *order = malloc(n * sizeof *order);
    if (!order)
        return 0;
    double hi = 0;
    for (size_t i = 0; i < n; i++) {
        order[i] = i;
        double best = bt[i].tc < bt[i].tg ? bt[i].tc : bt[i].tg;
        hi += isfinite(best) ? best : 0;
    }
    sort_base = bt;
    qsort(order, n, sizeof *order, by_ratio);
    double lo = 0;
    for (int it = 0; it < 100 && hi - lo > 1e-9 * hi; it++) {
        double mid = (lo + hi) / 2;
        if (area_fits(bt, order, n, cs ? cs : 1, gs ? gs : 1, mid))
            hi = mid;
        else
            lo = mid;
    }
    free(order);
    return hi;
}

/* The task of `kernel` at step k on tiles (i, j), into *b; the path's
 * finish times of the tiles it touches are updated (ready: per tile, the
 * earliest its last write can finish). */
static void bound_step(chol_run *r, int kernel, unsigned k, unsigned i, unsigned j, double *ready,
                       bound_task *b, bool cpu, bool gpu)
{
    unsigned nt = r->nt;
    size_t t[3], n = 0; /* tiles: the inputs, then the one written */
    if (kernel == CHOL_TRSM)
        t[n++] = k * nt + k;
    else if (kernel != CHOL_POTRF)
        t[n++] = i * nt + k;
    if (kernel == CHOL_GEMM)
        t[n++] = j * nt + k;
    t[n++] = i * nt + j;
    double start = 0;
    for (size_t x = 0; x < n; x++)
        start = ready[t[x]] > start ? ready[t[x]] : start;
    chol_call call = {.kernel = kernel, .m = (int)r->span[i], .n = (int)r->span[j], .k = (int)r->span[k]};
    b->tc = cpu ? (double)chol_gpu_model_ns(&r->o->cpu_model, &call) * 1e-9 : INFINITY;
    b->tg = gpu ? (double)chol_gpu_model_ns(&r->o->model, &call) * 1e-9 : INFINITY;
    double best = b->tc < b->tg ? b->tc : b->tg;
    ready[t[n - 1]] = start + (isfinite(best) ? best : 0);
}

/* res->bound*: under --model-only, the lower bound of this graph's
 * makespan from the modelled kernels' own times. */
static void model_bound(chol_run *r, chol_result *res)
{
    unsigned nt = r->nt;
    size_t ntask = (size_t)nt * (nt + 1) * (nt + 2) / 6 + 1;
    double *ready = calloc((size_t)nt * nt, sizeof *ready);
    bound_task *bt = calloc(ntask, sizeof *bt);
    bool cpu = false, gpu = r->ndev > 1;
    for (size_t i = 0; i < r->npl; i++)
        cpu |= r->pl[i].gpus == 0;
    res->gpus = gpu ? r->ndev - 1 : 0;
    unsigned w = weft_runtime_workers(r->rt);
    res->cpu_slots = !cpu ? 0 : gpu && w > 1 ? w - 1 : w; /* (as "dmda" keeps a worker for the GPUs) */
    size_t n = 0;
    for (unsigned k = 0; ready && bt && k < nt; k++) {
        bound_step(r, CHOL_POTRF, k, k, k, ready, &bt[n++], cpu, gpu);
        for (unsigned i = k + 1; i < nt; i++)
            bound_step(r, CHOL_TRSM, k, i, k, ready, &bt[n++], cpu, gpu);
        for (unsigned i = k + 1; i < nt; i++) {
            bound_step(r, CHOL_SYRK, k, i, i, ready, &bt[n++], cpu, gpu);
            for (unsigned j = k + 1; j < i; j++)
                bound_step(r, CHOL_GEMM, k, i, j, ready, &bt[n++], cpu, gpu);
        }
    }
    bool known = n > 0;
    for (size_t i = 0; i < n; i++)
        known &= isfinite(bt[i].tc) || isfinite(bt[i].tg);
    if (known) {
        res->bound_path = ready[(size_t)nt * nt - 1];
        res->bound_area = area_bound(bt, n, res->cpu_slots, res->gpus);
        res->bound = res->bound_path > res->bound_area ? res->bound_path : res->bound_area;
    }
    free(ready);
    free(bt);
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
    if (o->bound && !o->model_only && !cfg.bound) /* (WEFT_BOUND=1 may have asked for its line too) */
        cfg.bound = WEFT_BOUND_RECORD;
    int rc = !r->tiles || !r->span ? WEFT_ENOMEM : weft_runtime_create(&cfg, &r->rt);
    if (rc != 0)
        fprintf(stderr, "weft-cholesky: starting the runtime: %s\n", weft_last_error());
    const char *policy = NULL;
    if (rc == 0 && (rc = weft_runtime_policy(r->rt, &policy)) == 0)
        r->models = strcmp(policy, "dmda") == 0;
    if (rc == 0)
        rc = setup_devices(r, res);
    if (rc == 0)
        rc = factor(r, a, res);
    weft_stats st;
    if (r->rt && weft_runtime_stats(r->rt, &st) == 0) {
        res->bytes_copied = st.bytes_copied;
        res->model_hits = st.model_hits;
        res->model_fits = st.model_fits;
        res->model_calibrating = st.model_calibrating;
        res->model_mispredicted = st.model_mispredicted;
    }
    if (rc == 0 && o->bound && o->model_only)
        model_bound(r, res);
    else if (rc == 0 && o->bound)
        runtime_bound(r, res);
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
