/*
 * main.c — weft-cholesky, the C driver of tiled Cholesky on Weft.
 *
 *   weft-cholesky [-n N] [-b B] [--devices STR] [--policy NAME] [--workers W]
 *                 [--cpu-first] [--check] [--trace FILE] [--seed S]
 *                 [--gpu-gflops F] [--gpu-eff P,T,S,G] [--vs-lapack R]
 *                 [--lapack-threads T]
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
               "                     [--lapack-threads T]\n");
}

typedef struct cli {
    chol_opts o;
    int check;
    uint64_t seed;
    int vs_lapack;       /* repetitions, 0: a single run */
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
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int used = 1;
        if (!strcmp(a, "--check"))
            c->check = 1, used = 0;
        else if (!strcmp(a, "--cpu-first"))
            c->o.gpu_first = 0, used = 0;
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
        else
            return fprintf(stderr, "weft-cholesky: unknown option %s\n", a), usage(stderr), 2;
        i += used;
    }
    if (c->o.n == 0 || c->o.b == 0 || c->o.model.gflops <= 0)
        return fprintf(stderr, "weft-cholesky: N, B and --gpu-gflops must be positive\n"), 2;
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
    if (c.vs_lapack > 0) {
        int rc = vs_lapack(&c, a);
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
        if (c.check)
            rc = check(&c, a);
    }
    free(a);
    return rc ? 1 : 0;
}
