/*
 * main.c — weft-cholesky, the C driver of tiled Cholesky on Weft.
 *
 *   weft-cholesky [-n N] [-b B] [--devices STR] [--policy NAME] [--workers W]
 *                 [--cpu-first] [--check] [--trace FILE] [--seed S]
 *                 [--gpu-gflops F] [--gpu-eff P,T,S,G] [--vs-lapack R]
 *                 [--lapack-threads T] [--model-only] [--cpu-gflops F]
 *                 [--bound] [--vs-firstfit R]
 *
 * Factors the SPD matrix of chol_matrix_fill (N x N doubles, tiles of at
 * most B x B) and prints the wall time, GF/s (N^3/3 flops) and the tasks of
 * each kernel on each device.  --check verifies ||L L^T - A||_F / ||A||_F
 * and ||L - L_lapack||_F / ||L_lapack||_F (LAPACKE_dpotrf on the same
 * matrix) against 1e-12; the exit status is 1 when a check fails.
 * --vs-lapack R alternates R factorisations with Weft and R with
 * LAPACKE_dpotrf on T OpenBLAS threads (default 2), and prints their
 * medians and `chol_vs_lapack weft <LAPACK's time / Weft's>`.
 * Virtual GPUs run the CPU kernels stretched to the modelled GPU's time:
 * --gpu-gflops (default 400) at the efficiencies --gpu-eff of POTRF, TRSM,
 * SYRK and GEMM (default 0.25,0.6,0.8,1).
 * --model-only computes nothing: CPU kernels sleep for their time on a
 * modelled core (--cpu-gflops, default 40, at efficiencies 0.6, 0.8, 0.9,
 * 1), virtual GPUs' are empty kernels stretched to the GPU model's; for
 * scheduling at sizes this machine could not factor soon (no --check).
 * --bound prints the makespan against its lower bound from the runtime's
 * models (weft_runtime_bound; policy "dmda": the default with GPUs; under
 * --model-only from the modelled kernels' times) and `chol_bound_ratio
 * weft <makespan / bound>`.  --vs-firstfit R alternates R runs under "dmda"
 * and R under today's first-fit ("load"), and prints their medians,
 * `chol_vs_firstfit weft <first-fit's time / dmda's>` and the median
 * bound ratio.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chol.h"

#define TOL 1e-12

static void usage(FILE *f)
{
    fprintf(f, "usage: weft-cholesky [-n N] [-b B] [--devices STR] [--policy NAME] [--workers W]\n"
               "                     [--cpu-first] [--check] [--trace FILE] [--seed S]\n"
               "                     [--gpu-gflops F] [--gpu-eff P,T,S,G] [--vs-lapack R]\n"
               "                     [--lapack-threads T] [--model-only] [--cpu-gflops F]\n"
               "                     [--bound] [--vs-firstfit R]\n");
}

typedef struct cli {
    chol_opts o;
    int check;
    uint64_t seed;
    int vs_lapack;       /* repetitions, 0: a single run */
    int vs_firstfit;     /* repetitions of --vs-firstfit */
    int lapack_threads;
} cli;

/* Parse argv into *c.  Returns 0, 1 after --help, 2 on a bad option. */
static int parse(int argc, char **argv, cli *c)
{
    memset(c, 0, sizeof *c);
    c->o.n = 1024;
    c->o.b = 128;
    c->o.gpu_first = 1;
    c->seed = 1;
    c->lapack_threads = 2;
    chol_gpu_model_default(&c->o.model);
    chol_cpu_model_default(&c->o.cpu_model);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int used = 1;
        if (!strcmp(a, "--check"))
            c->check = 1, used = 0;
        else if (!strcmp(a, "--cpu-first"))
            c->o.gpu_first = 0, used = 0;
        else if (!strcmp(a, "--model-only"))
            c->o.model_only = 1, used = 0;
        else if (!strcmp(a, "--bound"))
            c->o.bound = 1, used = 0;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return usage(stdout), 1;
        else if (!v)
            return fprintf(stderr, "weft-cholesky: %s needs a value\n", a), usage(stderr), 2;
        else if (!strcmp(a, "-n"))
            c->o.n = strtoull(v, NULL, 10);
        else if (!strcmp(a, "-b"))
            c->o.b = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--devices"))
            c->o.devices = v;
        else if (!strcmp(a, "--policy"))
            c->o.policy = v;
        else if (!strcmp(a, "--workers"))
            c->o.workers = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--trace"))
            c->o.trace = v;
        else if (!strcmp(a, "--seed"))
            c->seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--gpu-gflops"))
            c->o.model.gflops = strtod(v, NULL);
        else if (!strcmp(a, "--gpu-eff")) {
            double *e = c->o.model.eff;
            if (sscanf(v, "%lf,%lf,%lf,%lf", &e[0], &e[1], &e[2], &e[3]) != 4)
                return fprintf(stderr, "weft-cholesky: --gpu-eff wants P,T,S,G\n"), 2;
        } else if (!strcmp(a, "--vs-lapack"))
            c->vs_lapack = atoi(v);
        else if (!strcmp(a, "--lapack-threads"))
            c->lapack_threads = atoi(v);
        else if (!strcmp(a, "--cpu-gflops"))
            c->o.cpu_model.gflops = strtod(v, NULL);
        else if (!strcmp(a, "--vs-firstfit"))
            c->vs_firstfit = atoi(v);
        else
            return fprintf(stderr, "weft-cholesky: unknown option %s\n", a), usage(stderr), 2;
        i += used;
    }
    if (c->o.n == 0 || c->o.b == 0 || c->o.model.gflops <= 0 || c->o.cpu_model.gflops <= 0)
        return fprintf(stderr, "weft-cholesky: N, B, --gpu-gflops and --cpu-gflops must be positive\n"), 2;
    if (c->o.model_only && (c->check || c->vs_lapack))
        return fprintf(stderr, "weft-cholesky: --model-only computes no factor: it cannot be checked nor timed "
                               "against LAPACK (drop --check / --vs-lapack)\n"),
               2;
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double gflops(size_t n, double s)
{
    return (double)n * (double)n * (double)n / 3.0 / s * 1e-9;
}

/* Check l, the factor of the matrix of c, as chol_check does (the
 * reference from LAPACKE_dpotrf).  Returns 0 when both are below TOL. */
static int check(const cli *c, const double *l)
{
    size_t n = c->o.n;
    double *a = malloc(n * n * sizeof *a), *ref = malloc(n * n * sizeof *ref);
    double res = 1, diff = 1;
    int rc = 1;
    if (a && ref) {
        chol_matrix_fill(a, n, c->seed);
        memcpy(ref, a, n * n * sizeof *a);
        if (chol_lapack(ref, n) == 0 && chol_check(a, l, ref, n, &res, &diff) == 0)
            rc = !(res < TOL && diff < TOL);
    }
    printf("check: ||L L^T - A||_F / ||A||_F = %.3e, ||L - L_lapack||_F / ||L_lapack||_F = %.3e (< %.0e): %s\n",
           res, diff, TOL, rc ? "FAIL" : "PASS");
    free(a);
    free(ref);
    return rc;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* --vs-lapack: c->vs_lapack runs of each, alternated; medians. */
static int vs_lapack(const cli *c, double *a)
{
    int r = c->vs_lapack;
    size_t n = c->o.n;
    double *tw = calloc((size_t)r, sizeof *tw), *tl = calloc((size_t)r, sizeof *tl);
    int rc = !tw || !tl;
    for (int i = 0; rc == 0 && i < r; i++) {
        chol_result res;
        chol_matrix_fill(a, n, c->seed);
        chol_blas_threads(1);
        rc = chol_weft(a, &c->o, &res);
        tw[i] = res.seconds;
        chol_matrix_fill(a, n, c->seed);
        chol_blas_threads(c->lapack_threads);
        double t0 = now_s();
        rc = rc ? rc : chol_lapack(a, n);
        tl[i] = now_s() - t0;
        chol_blas_threads(1);
        printf("run %d: weft %.3f s (%.1f GF/s), lapack %.3f s (%.1f GF/s)\n", i, tw[i], gflops(n, tw[i]), tl[i],
               gflops(n, tl[i]));
    }
    if (rc == 0) {
        qsort(tw, (size_t)r, sizeof *tw, cmp_double);
        qsort(tl, (size_t)r, sizeof *tl, cmp_double);
        double mw = tw[r / 2], ml = tl[r / 2];
        printf("median: weft %.3f s (%.1f GF/s), LAPACKE_dpotrf on %d threads %.3f s (%.1f GF/s)\n", mw,
               gflops(n, mw), c->lapack_threads, ml, gflops(n, ml));
        printf("chol_vs_lapack weft %.3f\n", ml / mw);
    }
    free(tw);
    free(tl);
    return rc;
}

/* The bound's line of one run (--bound). */
static double print_bound(const chol_result *res)
{
    if (!(res->bound > 0)) {
        printf("bound: none (the runtime's policy keeps no models: \"dmda\" does)\n");
        return 0;
    }
    printf("bound: critical path %.4f s, area %.4f s over %u CPU worker(s) and %u GPU(s); makespan %.4f s = %.3f x "
           "the bound\n",
           res->bound_path, res->bound_area, res->cpu_slots, res->gpus, res->seconds, res->seconds / res->bound);
    printf("models: %llu decisions from history, %llu from fits, %llu calibrating, %llu mispredicted\n",
           (unsigned long long)res->model_hits, (unsigned long long)res->model_fits,
           (unsigned long long)res->model_calibrating, (unsigned long long)res->model_mispredicted);
    return res->seconds / res->bound;
}

/* --vs-firstfit: c->vs_firstfit runs under each policy, alternated; the
 * first "dmda" run is a warm-up (its models calibrate) and not counted. */
static int vs_firstfit(const cli *c, double *a)
{
    int r = c->vs_firstfit;
    double *td = calloc((size_t)r, sizeof *td), *tf = calloc((size_t)r, sizeof *tf);
    double *rb = calloc((size_t)r, sizeof *rb);
    int rc = !td || !tf || !rb;
    chol_opts dm = c->o, ff = c->o;
    dm.policy = "dmda";
    dm.bound = 1;
    ff.policy = "load";
    chol_blas_threads(1);
    for (int i = -1; rc == 0 && i < r; i++) {
        chol_result res;
        chol_matrix_fill(a, c->o.n, c->seed);
        rc = chol_weft(a, &dm, &res);
        if (rc || i < 0)
            continue;
        td[i] = res.seconds;
        rb[i] = res.bound > 0 ? res.seconds / res.bound : 0;
        chol_matrix_fill(a, c->o.n, c->seed);
        rc = chol_weft(a, &ff, &res);
        tf[i] = res.seconds;
        printf("run %d: dmda %.3f s (%.3f x its bound), first-fit %.3f s\n", i, td[i], rb[i], tf[i]);
    }
    if (rc == 0) {
        qsort(td, (size_t)r, sizeof *td, cmp_double);
        qsort(tf, (size_t)r, sizeof *tf, cmp_double);
        qsort(rb, (size_t)r, sizeof *rb, cmp_double);
        printf("median: dmda %.3f s, first-fit (load) %.3f s\n", td[r / 2], tf[r / 2]);
        printf("chol_vs_firstfit weft %.3f\n", tf[r / 2] / td[r / 2]);
        printf("chol_bound_ratio weft %.3f\n", rb[r / 2]);
    }
    free(td);
    free(tf);
    free(rb);
    return rc;
}

int main(int argc, char **argv)
{
    cli c;
    int prc = parse(argc, argv, &c);
    if (prc)
        return prc == 1 ? 0 : 2;
    size_t n = c.o.n;
    double *a = malloc(n * n * sizeof *a);
    if (!a)
        return fprintf(stderr, "weft-cholesky: no memory for a %zu x %zu matrix\n", n, n), 1;
    size_t nt = (n + c.o.b - 1) / c.o.b;
    printf("weft-cholesky: N=%zu B=%zu (%zu x %zu tiles), devices %s, policy %s\n", n, c.o.b, nt, nt,
           c.o.devices ? c.o.devices : "(default)", c.o.policy ? c.o.policy : "(default)");
    if (c.vs_lapack > 0 || c.vs_firstfit > 0) {
        int rc = c.vs_lapack > 0 ? vs_lapack(&c, a) : vs_firstfit(&c, a);
        free(a);
        return rc ? 1 : 0;
    }
    chol_blas_threads(1); /* one thread per task */
    chol_matrix_fill(a, n, c.seed);
    chol_result res;
    int rc = chol_weft(a, &c.o, &res);
    if (rc == 0) {
        printf("time %.4f s  GF/s %.2f  bytes copied %llu\n", res.seconds, gflops(n, res.seconds),
               (unsigned long long)res.bytes_copied);
        printf("tasks per kernel per device:\n");
        chol_result_print(&res);
        if (c.o.bound && print_bound(&res) > 0)
            printf("chol_bound_ratio weft %.3f\n", res.seconds / res.bound);
        if (c.check)
            rc = check(&c, a);
    }
    free(a);
    return rc ? 1 : 0;
}
