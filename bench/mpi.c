/* mpi.c — weft-bench-mpi: communication across 2 MPI ranks.
 *
 *   mpirun -np 2 weft-bench-mpi [--quick] [--repeats R]
 *
 * One runtime per rank (1 worker, "cpu"), a communicator over the ranks.
 * Medians of R repeats:
 *   p2p_extra_us weft       an 8-byte ping-pong: the round trip as two Weft
 *                           exchange tasks (0 -> 1, then 1 -> 0, chained
 *                           through their buffers) minus the raw MPI
 *                           MPI_Send/MPI_Recv round trip measured in the same
 *                           run (microseconds per round trip)
 *   halo_overlap_ratio weft steps of a halo exchange (MPI, 2 MiB each way)
 *                           beside an independent interior computation (a
 *                           CPU task streaming over 16 MiB) sized to take
 *                           about as long: the time of the steps with both
 *                           over the larger of the steps with only one of
 *                           them (1: hidden entirely; 2: not at all)
 * Rank 0 prints.  Lines starting with '#' are details.
 */
#define _POSIX_C_SOURCE 200809L
#include <weft.h>

#include "wb.h"

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int rank;

static void die(const char *what, int rc)
{
    fprintf(stderr, "weft-bench-mpi (rank %d): %s: %s (%s)\n", rank, what, weft_strerror(rc), weft_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* ---- latency ---------------------------------------------------------------- */

static double raw_rtt_us(int iters)
{
    char b[8] = {0};
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = wb_now();
    for (int i = 0; i < iters; i++) {
        if (rank == 0) {
            MPI_Send(b, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(b, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(b, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(b, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
        }
    }
    return (wb_now() - t0) * 1e6 / iters;
}

static double weft_rtt_us(weft_runtime *rt, weft_comm *c, int iters)
{
    char b[8] = {0};
    weft_data *d;
    int rc = weft_data_register(rt, b, 8, &d);
    if (rc)
        die("register", rc);
    weft_data *h[2] = {d, d};
    weft_xfer there = {0, 1, h[0], 0, 0, h[1], 0, 0, 8, 0}, back = {1, 0, h[1], 0, 0, h[0], 0, 0, 8, 0};
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = wb_now();
    for (int i = 0; i < iters; i++) {
        if ((rc = weft_comm_exchange(c, &there, 1, "ping", NULL)) || (rc = weft_comm_exchange(c, &back, 1, "pong", NULL)))
            die("exchange", rc);
    }
    if ((rc = weft_wait_all(rt)))
        die("wait_all", rc);
    double us = (wb_now() - t0) * 1e6 / iters;
    if ((rc = weft_data_unregister(d)))
        die("unregister", rc);
    return us;
}

/* ---- overlap ------------------------------------------------------------------ */

#define HALO ((size_t)2 << 20)
#define INTERIOR ((size_t)16 << 20)

static int passes = 1;

static int compute_body(weft_ctx *ctx, void *arg)
{
    (void)arg;
    volatile double *p = weft_ctx_data(ctx, 0);
    size_t n = INTERIOR / sizeof(double);
    for (int k = 0; k < passes; k++)
        for (size_t i = 0; i < n; i++)
            p[i] = p[i] * 0.5 + 1.0;
    return 0;
}

/* Time of `steps` steps with the exchange and/or the computation. */
static double steps_ms(weft_runtime *rt, weft_comm *c, weft_data *halo_out, weft_data *halo_in, weft_data *inter,
                       int steps, bool ex, bool comp)
{
    weft_data *src[2] = {halo_out, halo_out}, *dst[2] = {halo_in, halo_in};
    weft_xfer x[2] = {{0, 1, src[0], 0, 0, dst[1], 0, 0, HALO, 0}, {1, 0, src[1], 0, 0, dst[0], 0, 0, HALO, 0}};
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = wb_now();
    for (int s = 0; s < steps; s++) {
        int rc;
        if (ex && (rc = weft_comm_exchange(c, x, 2, "halo", NULL)))
            die("exchange", rc);
        if (comp) {
            weft_access a = {inter, WEFT_RW};
            weft_task_desc d;
            weft_task_desc_init(&d);
            d.body = compute_body;
            d.accesses = &a;
            d.naccesses = 1;
            if ((rc = weft_spawn(rt, &d, NULL)))
                die("spawn", rc);
        }
        /* the step's end: both done (the next step's exchange needs the halo read) */
        if ((rc = weft_wait_all(rt)))
            die("wait_all", rc);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return (wb_now() - t0) * 1e3;
}

int main(int argc, char **argv)
{
    int provided, nranks, repeats = 5;
    bool quick = false;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) {
            quick = true;
            repeats = 1;
        } else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) {
            repeats = atoi(argv[++i]);
        }
    }
    if (repeats < 1)
        repeats = 1;
    if (repeats > 32)
        repeats = 32;
    if (nranks != 2 || provided < MPI_THREAD_MULTIPLE) {
        if (rank == 0)
            fprintf(stderr, "weft-bench-mpi: needs 2 ranks and MPI_THREAD_MULTIPLE\n");
        MPI_Finalize();
        return 2;
    }
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = 1;
    cfg.devices = "cpu";
    weft_runtime *rt;
    int rc = weft_runtime_create(&cfg, &rt);
    if (rc)
        die("runtime_create", rc);
    weft_comm *c;
    MPI_Comm world = MPI_COMM_WORLD;
    if ((rc = weft_comm_create_mpi(rt, &world, NULL, &c)))
        die("comm_create_mpi", rc);
    int iters = quick ? 200 : 2000;
    double raw[32], wft[32];
    raw_rtt_us(iters / 4); /* warm-up */
    weft_rtt_us(rt, c, iters / 4);
    for (int r = 0; r < repeats; r++) {
        raw[r] = raw_rtt_us(iters);
        wft[r] = weft_rtt_us(rt, c, iters);
    }
    double raw_m = wb_median(raw, (size_t)repeats), wft_m = wb_median(wft, (size_t)repeats);

    char *ho = calloc(HALO, 1), *hi = calloc(HALO, 1);
    double *in = calloc(INTERIOR / sizeof(double), sizeof(double));
    weft_data *dho, *dhi, *din;
    if ((rc = weft_data_register(rt, ho, HALO, &dho)) || (rc = weft_data_register(rt, hi, HALO, &dhi)) ||
        (rc = weft_data_register(rt, in, INTERIOR, &din)))
        die("register", rc);
    int steps = quick ? 3 : 20;
    /* size the computation to about the exchange's time */
    double t_ex1 = steps_ms(rt, c, dho, dhi, din, steps, true, false);
    double t_cp1 = steps_ms(rt, c, dho, dhi, din, steps, false, true);
    int p = (int)(t_ex1 / (t_cp1 > 0 ? t_cp1 : 1) + 0.5);
    passes = p < 1 ? 1 : p > 64 ? 64 : p;
    MPI_Bcast(&passes, 1, MPI_INT, 0, MPI_COMM_WORLD);
    double ex[32], cp[32], both[32], ratio[32];
    for (int r = 0; r < repeats; r++) {
        ex[r] = steps_ms(rt, c, dho, dhi, din, steps, true, false);
        cp[r] = steps_ms(rt, c, dho, dhi, din, steps, false, true);
        both[r] = steps_ms(rt, c, dho, dhi, din, steps, true, true);
        ratio[r] = both[r] / (ex[r] > cp[r] ? ex[r] : cp[r]);
    }
    double ov = wb_median(ratio, (size_t)repeats);
    if ((rc = weft_data_unregister(dho)) || (rc = weft_data_unregister(dhi)) || (rc = weft_data_unregister(din)))
        die("unregister", rc);
    if ((rc = weft_comm_destroy(c)) || (rc = weft_runtime_destroy(rt)))
        die("destroy", rc);
    if (rank == 0) {
        printf("# weft-bench-mpi: 2 ranks, 1 worker each, %d repeats\n", repeats);
        printf("# 8-byte round trip: raw MPI %.2f us, as Weft exchange tasks %.2f us\n", raw_m, wft_m);
        printf("# halo steps (%d, 2 MiB each way; interior %d pass%s over 16 MiB): exchange %.1f ms, compute %.1f "
               "ms, both %.1f ms (medians)\n",
               steps, passes, passes == 1 ? "" : "es", wb_median(ex, (size_t)repeats), wb_median(cp, (size_t)repeats),
               wb_median(both, (size_t)repeats));
        printf("p2p_extra_us weft %.2f\n", wft_m - raw_m);
        printf("halo_overlap_ratio weft %.3f\n", ov);
    }
    free(ho);
    free(hi);
    free(in);
    MPI_Finalize();
    return 0;
}
