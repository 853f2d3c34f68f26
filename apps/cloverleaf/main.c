/* weft-cloverleaf: run a CloverLeaf input deck with the C driver.
 *
 *   weft-cloverleaf [--devices LIST] [--chunks N] [--cpu-chunks N] [--workers N]
 *                   [--trace FILE] [--png FILE] [--serial] [--mpi]
 *                   [--triad] [--roofline] [--no-exchange] [--split] [--no-split] [--split-advection] [--plain-cuda] DECK
 *
 * --devices  Weft's devices ("cpu", "cpu,vgpu:4"; default: WEFT_DEVICES or
 *            every device found); chunks go one per GPU, or on the CPU
 * --chunks   chunks on the CPU when there is no GPU (default: one per worker)
 * --cpu-chunks  with GPUs, N chunks on the CPU beside one per GPU (on
 *            each rank; the halo updates then go through the host)
 * --serial   the sequential oracle instead (no Weft; --chunks chunks)
 * --mpi      the mesh over the ranks of MPI_COMM_WORLD (the default when
 *            started by mpirun: OMPI_COMM_WORLD_SIZE or PMI_SIZE above 1);
 *            each rank holds as many chunks as it would alone
 * --triad    first measure STREAM triad on every core (the bandwidth the
 *            achieved figure is compared with)
 * --roofline first measure what the kernels allow without Weft (roofline.h:
 *            each kernel in cache and streaming, one thread per core;
 *            implies --triad), and compare the run with it
 * --no-exchange  benchmarks only: no halo exchange between chunks (wrong
 *            results: to time the rest of the step alone)
 * --split, --no-split  the halo updates before viscosity and accelerate
 *            overlapped with those kernels' interiors, or not (the update
 *            writes the ghosts, then the kernel runs whole); default: split
 *            where the chunks are on GPUs (clover_weft_opts.split)
 * --split-advection  with the split, the advection kernels split as well
 *            (out of place over their updates)
 * --plain-cuda  the hand-written CUDA loop instead (plain_cuda.c: one
 *            chunk, one stream, no Weft), where the CUDA kernels are built
 * Prints the field summary table, the verification line (a deck with a
 * test_problem), the kernel profile, and where the trace and picture went.
 * Exit status: 0 (PASS, or no test problem), 1 (FAIL), 2 (an error). */
#include "clover.h"
#include "roofline.h"
#include "run_weft.h"
#include "serial.h"
#include "traffic.h"
#ifdef CLOVER_HAVE_CUDA
#include "plain_cuda.h"
#endif

#include <weft.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(void)
{
    fprintf(stderr, "usage: weft-cloverleaf [--devices LIST] [--chunks N] [--cpu-chunks N] [--workers N] [--trace FILE] "
                    "[--png FILE] [--serial] [--mpi] [--triad] [--roofline] [--no-exchange] [--split] [--no-split] [--split-advection] [--plain-cuda] DECK\n");
}

static int number(const char *opt, const char *s, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < 1 || v > 4096) {
        fprintf(stderr, "weft-cloverleaf: %s: not a count from 1 to 4096: '%s'\n", opt, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static void report(const clover_deck *dp, const clover_weft_opts *op, const clover_weft_result *rp, double triad_bw,
                   double bound_bw)
{
    printf("\n %d steps to time %.6f on %d chunks (%d x %d) over %d rank(s): %.3f s, %.3g cell-steps/s\n", rp->steps,
           rp->time, rp->nchunks, rp->chunks_x, rp->chunks_y, rp->nranks, rp->wall_s,
           rp->wall_s > 0 ? (double)dp->x_cells * dp->y_cells * rp->steps / rp->wall_s : 0.0);
    double cells = (double)dp->x_cells * dp->y_cells * rp->steps;
    double bytes = cells * clover_traffic_step_bytes() +
                   (double)dp->x_cells * dp->y_cells * rp->summaries * clover_traffic_summary_bytes();
    if (rp->wall_s > 0) {
        printf(" Memory traffic (the kernels' model, traffic.c): %.0f bytes per cell-step, %.2f GB/s achieved",
               clover_traffic_step_bytes(), bytes / rp->wall_s * 1e-9);
        if (triad_bw > 0)
            printf(", %.1f%% of triad", 100.0 * bytes / rp->wall_s / triad_bw);
        if (bound_bw > 0)
            printf(", %.1f%% of the kernels' roofline bound", 100.0 * bytes / rp->wall_s / bound_bw);
        printf("\n");
    }
    if (op->no_exchange)
        printf(" (--no-exchange: the chunks exchanged no halos; the results above are not this deck's)\n");
    if (op->trace_path)
        printf(" Trace: %s (chrome://tracing or ui.perfetto.dev)\n", op->trace_path);
    if (op->png_path)
        printf(" Density picture: %s\n", op->png_path);
}

int main(int argc, char **argv)
{
    clover_weft_opts o = {0};
    o.out = stdout;
    const char *deck_path = NULL;
    int serial = 0, workers = 0, triad = 0, roof = 0, plain = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "--devices") && has)
            o.devices = argv[++i];
        else if (!strcmp(a, "--chunks") && has) {
            if (number(a, argv[++i], &o.chunks))
                return 2;
        } else if (!strcmp(a, "--cpu-chunks") && has) {
            if (number(a, argv[++i], &o.cpu_chunks))
                return 2;
        } else if (!strcmp(a, "--workers") && has) {
            if (number(a, argv[++i], &workers))
                return 2;
            o.workers = (unsigned)workers;
        } else if (!strcmp(a, "--trace") && has)
            o.trace_path = argv[++i];
        else if (!strcmp(a, "--png") && has)
            o.png_path = argv[++i];
        else if (!strcmp(a, "--serial"))
            serial = 1;
        else if (!strcmp(a, "--mpi"))
            o.mpi = 1;
        else if (!strcmp(a, "--triad"))
            triad = 1;
        else if (!strcmp(a, "--roofline"))
            roof = triad = 1;
        else if (!strcmp(a, "--no-exchange"))
            o.no_exchange = 1;
        else if (!strcmp(a, "--no-split"))
            o.split = CLOVER_SPLIT_OFF;
        else if (!strcmp(a, "--split"))
            o.split = CLOVER_SPLIT_ON;
        else if (!strcmp(a, "--split-advection"))
            o.split_advection = 1;
        else if (!strcmp(a, "--plain-cuda"))
            plain = 1;
        else if (a[0] == '-' || deck_path) {
            usage();
            return 2;
        } else
            deck_path = a;
    }
    if (!deck_path) {
        usage();
        return 2;
    }
    clover_deck d;
    char err[512];
    if (clover_deck_load(deck_path, &d, err, sizeof err) != 0) {
        fprintf(stderr, "weft-cloverleaf: %s\n", err);
        return 2;
    }
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    if (!rank || atoi(rank) == 0)
        printf(" CloverLeaf on Weft: %s, %d x %d cells\n", deck_path, d.x_cells, d.y_cells);
    if (serial) {
        double sums[CS_N];
        if (clover_serial_run(&d, o.chunks > 0 ? o.chunks : 1, stdout, sums, NULL) != 0)
            return 2;
        int v = clover_verify(NULL, &d, sums[CS_KE]);
        return v == 0 ? 1 : 0;
    }
    double triad_bw = 0;
    if (triad) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        triad_bw = clover_triad_bw((size_t)1 << 25, cores > 0 ? (int)cores : 1, 10);
        printf(" STREAM triad: %.2f GB/s (%ld threads, 3 x 256 MiB, best of 10)\n", triad_bw * 1e-9, cores);
    }
    double bound_bw = 0;
    if (roof) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        clover_roofline rl;
        if (clover_roofline_measure(&d, cores > 0 ? (int)cores : 1, &rl) != 0)
            return 2;
        clover_roofline_print(stdout, &rl, triad_bw);
        bound_bw = clover_roofline_bound_bw(&rl, triad_bw);
    }
    if (plain) {
#ifdef CLOVER_HAVE_CUDA
        clover_plain_result pr = {0};
        if (clover_plain_cuda_run(&d, stdout, &pr) != 0)
            return 2;
        printf("\n %d steps to time %.6f, plain CUDA (one chunk, one stream): %.3f s, %.3g cell-steps/s\n",
               pr.steps, pr.time, pr.wall_s, pr.wall_s > 0 ? (double)d.x_cells * d.y_cells * pr.steps / pr.wall_s : 0.0);
        return pr.verified == 0 ? 1 : 0;
#else
        fprintf(stderr, "weft-cloverleaf: --plain-cuda: built without the CUDA kernels (no nvcc found)\n");
        return 2;
#endif
    }
    if (!o.mpi) {
        const char *sz = getenv("OMPI_COMM_WORLD_SIZE");
        if (!sz)
            sz = getenv("PMI_SIZE");
        o.mpi = sz && atoi(sz) > 1;
    }
    if (o.mpi && weft_mpi_init() != 0) {
        fprintf(stderr, "weft-cloverleaf: --mpi: %s\n", weft_last_error());
        return 2;
    }
    clover_weft_result r;
    int rc = clover_weft_run(&d, &o, &r);
    /* Rank 0 reports before MPI ends: a rank that exits first with 1 (a
     * FAIL, as every --no-exchange run is) makes mpirun end the others. */
    if (rc == 0 && r.rank == 0)
        report(&d, &o, &r, triad_bw, bound_bw);
    fflush(stdout);
    if (o.mpi && weft_mpi_finalize() != 0)
        fprintf(stderr, "weft-cloverleaf: MPI_Finalize: %s\n", weft_last_error());
    if (rc != 0)
        return 2;
    return r.verified == 0 ? 1 : 0;
}
