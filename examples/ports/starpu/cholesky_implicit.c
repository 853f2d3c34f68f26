/*
 * Port of StarPU's examples/cholesky/cholesky_implicit.c: tiled Cholesky
 * with implicit (data-inferred) dependencies, its base priorities
 * (priority_attribution_p == 0), STARPU_FLOPS per task, a history-based
 * model per kernel, CPU and "GPU" implementations, and starpu_bound's
 * makespan lower bound (-bound there; --bound here: weft_runtime_bound).
 *
 *   StarPU                                   here
 *   starpu_matrix_data_register + filters    weft_data_register + weft_data_partition (nb x nb)
 *   starpu_data_get_sub_data(A, 2, m, k)     tiles[m * nb + k]
 *   cl_potrf/trsm/syrk/gemm + models         one kind per kernel ("chol_potrf" ...),
 *                                            placements "cpu" and "gpu", each with its body
 *   STARPU_PRIORITY, STARPU_FLOPS            desc.priority, desc.cost
 *   starpu_bound_start / starpu_bound_print  cfg.bound = WEFT_BOUND_RECORD, weft_runtime_bound
 *
 * Row-major, lower: A = L L^T.  The CPU variant calls OpenBLAS / LAPACKE on
 * the host's tile (one thread), then pads its time to flops / --cpu-gflops
 * (0: no padding); the GPU variant queues the same call on the virtual
 * GPU's stream, stretched to flops / --gpu-gflops (a virtual GPU computes on
 * a host thread: it cannot be faster than the real call).
 * The factor is checked against LAPACKE_dpotrf on the whole matrix
 * (||L - L_ref||_F / ||L_ref||_F < 1e-12): exit 1 otherwise.
 *
 * Usage: cholesky_implicit [-n N] [-b B] [--devices D] [--policy P]
 *                          [--cpu-gflops G] [--gpu-gflops G] [--bound] [--noprio]
 */
#define _XOPEN_SOURCE 700
#include <weft.h>

#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern void openblas_set_num_threads(int);

enum { POTRF, TRSM, SYRK, GEMM, NK };
static const char *kname[NK] = {"chol_potrf", "chol_trsm", "chol_syrk", "chol_gemm"};
static atomic_uint placed[NK][2];
static double cpu_gflops = 2.0, gpu_gflops = 20.0;

typedef struct call { int kernel; int b; double flops; } call;
struct kargs { call c; double *t[3]; int ld[3]; };

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* accesses: POTRF (Akk rw); TRSM (Akk r, Amk rw); SYRK (Amk r, Amm rw); GEMM (Amk r, Ank r, Amn rw) */
static int run_kernel(const call *c, double *const *t, const int *ld)
{
    int b = c->b;
    switch (c->kernel) {
    case POTRF: return LAPACKE_dpotrf_work(LAPACK_ROW_MAJOR, 'L', b, t[0], ld[0]) != 0;
    case TRSM:
        cblas_dtrsm(CblasRowMajor, CblasRight, CblasLower, CblasTrans, CblasNonUnit, b, b, 1.0, t[0], ld[0], t[1],
                    ld[1]);
        return 0;
    case SYRK:
        cblas_dsyrk(CblasRowMajor, CblasLower, CblasNoTrans, b, b, -1.0, t[0], ld[0], 1.0, t[1], ld[1]);
        return 0;
    case GEMM:
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, b, b, b, -1.0, t[0], ld[0], t[1], ld[1], 1.0, t[2],
                    ld[2]);
        return 0;
    }
    return 1;
}

static int nacc(int kernel) { return kernel == POTRF ? 1 : kernel == GEMM ? 3 : 2; }

static int body_cpu(weft_ctx *ctx, void *arg)
{
    const call *c = arg;
    uint64_t t0 = now_ns();
    double *t[3];
    int ld[3];
    for (int i = 0; i < nacc(c->kernel); i++) {
        t[i] = weft_ctx_data(ctx, (size_t)i);
        ld[i] = (int)(weft_ctx_pitch(ctx, (size_t)i) / sizeof(double));
    }
    int rc = run_kernel(c, t, ld);
    if (cpu_gflops > 0) {
        uint64_t want = (uint64_t)(c->flops / cpu_gflops);
        uint64_t spent = now_ns() - t0;
        if (spent < want) {
            uint64_t s = want - spent;
            struct timespec ts = {(time_t)(s / 1000000000u), (long)(s % 1000000000u)};
            nanosleep(&ts, NULL);
        }
    }
    atomic_fetch_add(&placed[c->kernel][0], 1);
    return rc;
}

static int gpu_kernel(void *p)
{
    struct kargs *k = p;
    int rc = run_kernel(&k->c, k->t, k->ld);
    free(k);
    return rc;
}

static int body_gpu(weft_ctx *ctx, void *arg)
{
    const call *c = arg;
    struct kargs *k = malloc(sizeof *k);
    if (!k) return 1;
    k->c = *c;
    for (int i = 0; i < nacc(c->kernel); i++) {
        k->t[i] = weft_ctx_data(ctx, (size_t)i);
        k->ld[i] = (int)(weft_ctx_pitch(ctx, (size_t)i) / sizeof(double));
    }
    atomic_fetch_add(&placed[c->kernel][1], 1);
    int rc = weft_ctx_queue(ctx, 0, gpu_kernel, k, (uint64_t)(c->flops / gpu_gflops));
    if (rc != 0) free(k);
    return rc;
}

#define CHECK(call_)                                                                                 \
    do {                                                                                             \
        int rc_ = (call_);                                                                           \
        if (rc_ != 0) {                                                                              \
            fprintf(stderr, "%s:%d: %s -> %s (%s)\n", __FILE__, __LINE__, #call_, weft_strerror(rc_), \
                    weft_last_error());                                                              \
            exit(2);                                                                                 \
        }                                                                                            \
    } while (0)

static weft_runtime *rt;
static weft_placement pl[2];
static int noprio;

static void insert(int kernel, int b, int prio, weft_data *a0, weft_data *a1, weft_data *a2)
{
    static const double fl[NK] = {1.0 / 3.0, 1.0, 1.0, 2.0}; /* flops / b^3 */
    call *c = malloc(sizeof *c);
    c->kernel = kernel;
    c->b = b;
    c->flops = fl[kernel] * (double)b * b * b;
    weft_access acc[3];
    int n = nacc(kernel);
    weft_data *h[3] = {a0, a1, a2};
    for (int i = 0; i < n; i++) acc[i] = (weft_access){h[i], i == n - 1 ? WEFT_RW : WEFT_R};
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.arg = c;
    d.arg_destroy = free;
    d.accesses = acc;
    d.naccesses = (size_t)n;
    d.placements = pl;
    d.nplacements = 2;
    d.kind = kname[kernel];
    d.name = kname[kernel] + 5;
    d.cost = c->flops;
    d.priority = noprio ? 0 : prio;
    CHECK(weft_spawn(rt, &d, NULL));
}

int main(int argc, char **argv)
{
    int N = 1024, B = 128, bound = 0;
    const char *devices = "cpu,vgpu:2", *policy = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-n") && i + 1 < argc) N = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-b") && i + 1 < argc) B = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--devices") && i + 1 < argc) devices = argv[++i];
        else if (!strcmp(argv[i], "--policy") && i + 1 < argc) policy = argv[++i];
        else if (!strcmp(argv[i], "--cpu-gflops") && i + 1 < argc) cpu_gflops = atof(argv[++i]);
        else if (!strcmp(argv[i], "--gpu-gflops") && i + 1 < argc) gpu_gflops = atof(argv[++i]);
        else if (!strcmp(argv[i], "--bound")) bound = 1;
        else if (!strcmp(argv[i], "--noprio")) noprio = 1;
        else {
            fprintf(stderr, "usage: %s [-n N] [-b B] [--devices D] [--policy P] [--cpu-gflops G] "
                            "[--gpu-gflops G] [--bound] [--noprio]\n", argv[0]);
            return 2;
        }
    }
    if (N % B) { fprintf(stderr, "N must be a multiple of B\n"); return 2; }
    int nb = N / B;
    openblas_set_num_threads(1);

    /* the matrix: symmetric positive definite (StarPU's: 1/(i+j+1) + N on the diagonal) */
    double *A = malloc((size_t)N * N * sizeof(double)), *R = malloc((size_t)N * N * sizeof(double));
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) A[(size_t)i * N + j] = 1.0 / (i + j + 1) + (i == j ? N : 0);
    memcpy(R, A, (size_t)N * N * sizeof(double));

    weft_config cfg;
    weft_config_init(&cfg);
    if (!getenv("WEFT_DEVICES")) cfg.devices = devices;
    if (policy) cfg.policy = policy;
    if (bound && cfg.bound == WEFT_BOUND_OFF) cfg.bound = WEFT_BOUND_RECORD;
    CHECK(weft_runtime_create(&cfg, &rt));
    CHECK(weft_placement_parse("cpu", &pl[0]));
    pl[0].body = body_cpu;
    CHECK(weft_placement_parse("gpu", &pl[1]));
    pl[1].body = body_gpu;

    weft_data *dA, **t = calloc((size_t)nb * nb, sizeof *t);
    CHECK(weft_data_register(rt, A, (size_t)N * N * sizeof(double), &dA));
    weft_tiling tl = {.elem = sizeof(double), .rows = (size_t)N, .cols = (size_t)N,
                      .grid_rows = (unsigned)nb, .grid_cols = (unsigned)nb};
    CHECK(weft_data_partition(dA, &tl, t));
#define T(m, k) t[(size_t)(m) * nb + (k)]

    uint64_t t0 = now_ns();
    for (int k = 0; k < nb; k++) {
        insert(POTRF, B, 2 * nb - 2 * k, T(k, k), NULL, NULL);
        for (int m = k + 1; m < nb; m++) insert(TRSM, B, 2 * nb - 2 * k - m, T(k, k), T(m, k), NULL);
        for (int n = k + 1; n < nb; n++) {
            insert(SYRK, B, 2 * nb - 2 * k - n, T(n, k), T(n, n), NULL);
            for (int m = n + 1; m < nb; m++) insert(GEMM, B, 2 * nb - 2 * k - m - n, T(m, k), T(n, k), T(m, n));
        }
    }
    CHECK(weft_wait_all(rt));
    double secs = (double)(now_ns() - t0) * 1e-9;

    printf("N %d B %d (%dx%d tiles): %.3f s, %.2f GF/s\n", N, B, nb, nb, secs, (double)N * N * N / 3 / secs * 1e-9);
    printf("%-11s %7s %7s %12s %12s\n", "kernel", "on cpu", "on gpu", "cpu pred us", "gpu pred us");
    for (int k = 0; k < NK; k++) {
        double pc = 0, pg = 0;
        size_t bytes = (size_t)nacc(k) * B * B * sizeof(double);
        int r0 = weft_runtime_predict(rt, kname[k], 0, bytes, &pc);
        int r1 = weft_device_count(rt) > 1 ? weft_runtime_predict(rt, kname[k], 1, bytes, &pg) : -1;
        printf("%-11s %7u %7u %12.1f %12.1f\n", kname[k], atomic_load(&placed[k][0]), atomic_load(&placed[k][1]),
               r0 > 0 ? pc / 1e3 : -1.0, r1 > 0 ? pg / 1e3 : -1.0);
    }
    if (bound) {
        weft_bound bd;
        if (weft_runtime_bound(rt, &bd) == 0)
            printf("bound: makespan %.4f s, path %.4f s, area %.4f s, bound %.4f s: makespan = %.2f x bound "
                   "(%llu tasks, %llu without model; cpu slots %u, gpus %u)\n",
                   bd.makespan, bd.path, bd.area, bd.bound, bd.bound > 0 ? bd.makespan / bd.bound : 0.0,
                   (unsigned long long)bd.tasks, (unsigned long long)bd.no_model, bd.cpu_slots, bd.gpus);
        else
            printf("bound: refused: %s\n", weft_last_error());
    }
    CHECK(weft_data_unregister(dA));
    CHECK(weft_runtime_destroy(rt));

    /* check against LAPACK on the whole matrix (lower triangle) */
    if (LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', N, R, N) != 0) { fprintf(stderr, "reference dpotrf failed\n"); return 2; }
    double num = 0, den = 0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j <= i; j++) {
            double d = A[(size_t)i * N + j] - R[(size_t)i * N + j];
            num += d * d;
            den += R[(size_t)i * N + j] * R[(size_t)i * N + j];
        }
    double rel = sqrt(num / den);
    printf("check: ||L - L_lapack||_F / ||L_lapack||_F = %.3g: %s\n", rel, rel < 1e-12 ? "ok" : "FAIL");
    free(A);
    free(R);
    free(t);
    return rel < 1e-12 ? 0 : 1;
}
