/* halo_mpi.c — weft-demo-halo: a 2-D stencil over 2 MPI ranks x 2 virtual
 * GPUs each, its halos exchanged by communication tasks.
 *
 *   mpirun -np 2 weft-demo-halo [trace-prefix]
 *
 * A 192 x 256 grid is split into 2 x 2 blocks (weft_grid): rank r owns the
 * blocks of rows r, one on each of its virtual GPUs, each stored with a
 * halo of one cell; weft_grid_exchange lists the halo transfers.  Each step: the halos are exchanged — between a rank's two GPUs by
 * a communicator over them (the virtual communicator, on their streams),
 * between the ranks by a communicator over MPI (through host memory) — and
 * each block takes a Jacobi step on its GPU.  Nothing waits on the host
 * between steps: the order comes from the data each task names.  At the end
 * every rank compares its blocks with the sequential computation (which it
 * can redo: the start is deterministic), prints the result, and each
 * rank's trace (one timeline per rank: workers, GPU streams, and the MPI
 * operations on a track of their own) is written to <prefix>.<rank>.json.
 */
#include <weft.h>

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { HR = 192, HC = 256, STEPS = 40 };

typedef struct block {
    int r0, c0, rows, cols, pitch; /* pitch in doubles: cols + 2 */
    double *host, *scratch_host;
    weft_data *d, *scratch;
} block;

typedef struct step_job {
    const block *b;
    double *cur, *next;
} step_job;

static int rank;

static void die(const char *what, int rc)
{
    fprintf(stderr, "weft-demo-halo (rank %d): %s: %s (%s)\n", rank, what, weft_strerror(rc), weft_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static double start_value(int r, int c) { return (double)((r * 7919 + c * 104729) % 1000) / 7.0; }

static int step_kernel(void *arg)
{
    step_job *j = arg;
    const block *b = j->b;
    int p = b->pitch;
    for (int r = 1; r <= b->rows; r++)
        for (int c = 1; c <= b->cols; c++) {
            int gr = b->r0 + r - 1, gc = b->c0 + c - 1;
            j->next[r * p + c] = gr == 0 || gc == 0 || gr == HR - 1 || gc == HC - 1
                                     ? j->cur[r * p + c]
                                     : 0.25 * (j->cur[(r - 1) * p + c] + j->cur[(r + 1) * p + c] +
                                               j->cur[r * p + c - 1] + j->cur[r * p + c + 1]);
        }
    for (int r = 1; r <= b->rows; r++)
        memcpy(j->cur + r * p + 1, j->next + r * p + 1, (size_t)b->cols * sizeof(double));
    return 0;
}

static int step_body(weft_ctx *ctx, void *arg)
{
    step_job *j = arg;
    j->cur = weft_ctx_data(ctx, 0);
    j->next = weft_ctx_data(ctx, 1);
    size_t bytes = (size_t)(j->b->rows + 2) * (size_t)j->b->pitch * sizeof(double);
    weft_range rg[2] = {{j->cur, bytes, WEFT_RW}, {j->next, bytes, WEFT_W}};
    uint64_t ns = (uint64_t)j->b->rows * (uint64_t)j->b->cols * 2; /* a modelled GPU: ~2 ns a cell */
    return weft_ctx_queue_rw(ctx, 0, step_kernel, j, ns, rg, 2);
}

int main(int argc, char **argv)
{
    int provided, nranks;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (nranks != 2 || provided < MPI_THREAD_MULTIPLE) {
        if (rank == 0)
            fprintf(stderr, "weft-demo-halo: run it as mpirun -np 2 (with MPI_THREAD_MULTIPLE)\n");
        MPI_Finalize();
        return 2;
    }
    const char *prefix = argc > 1 ? argv[1] : "demo-trace-halo";
    char trace[512];
    snprintf(trace, sizeof trace, "%s.%d.json", prefix, rank);
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = 1;
    cfg.devices = "cpu,vgpu:2";
    cfg.trace_path = trace;
    weft_runtime *rt;
    int rc = weft_runtime_create(&cfg, &rt);
    if (rc)
        die("runtime_create", rc);
    weft_comm *node, *ranks;
    MPI_Comm world = MPI_COMM_WORLD;
    if ((rc = weft_comm_create(rt, NULL, &node)) || (rc = weft_comm_create_mpi(rt, &world, NULL, &ranks)))
        die("comm_create", rc);

    /* The four blocks (weft_grid: every rank knows their shapes; it holds
     * two, block rank*2 + g on its GPU g). */
    weft_grid grid = {HR, HC, sizeof(double), 1, 2, 2};
    block b[4];
    weft_data *handles[4] = {NULL, NULL, NULL, NULL};
    for (int k = 0; k < 4; k++) {
        weft_grid_block gb;
        if ((rc = weft_grid_block_get(&grid, (unsigned)k, &gb)))
            die("grid", rc);
        b[k].r0 = (int)gb.row0;
        b[k].c0 = (int)gb.col0;
        b[k].rows = (int)gb.rows;
        b[k].cols = (int)gb.cols;
        b[k].pitch = (int)(gb.pitch / sizeof(double));
        b[k].host = b[k].scratch_host = NULL;
        b[k].d = b[k].scratch = NULL;
        if (k / 2 != rank)
            continue;
        b[k].host = calloc(gb.bytes, 1);
        b[k].scratch_host = calloc(gb.bytes, 1);
        for (int r = 0; r < b[k].rows; r++)
            for (int c = 0; c < b[k].cols; c++)
                b[k].host[(r + 1) * b[k].pitch + c + 1] = start_value(b[k].r0 + r, b[k].c0 + c);
        if ((rc = weft_data_register(rt, b[k].host, gb.bytes, &b[k].d)) ||
            (rc = weft_data_register(rt, b[k].scratch_host, gb.bytes, &b[k].scratch)))
            die("register", rc);
        handles[k] = b[k].d;
    }
    /* Halo transfers: within this rank (the node communicator: member g
     * is GPU g) and across ranks (member = rank); weft_grid_exchange leaves
     * out the pairs of one member. */
    int on_node[4], on_ranks[4];
    for (int k = 0; k < 4; k++) {
        on_node[k] = k / 2 == rank ? k % 2 : -1;
        on_ranks[k] = k / 2;
    }
    weft_xfer local[16], remote[16];
    size_t nl, nr;
    if ((rc = weft_grid_exchange(&grid, on_node, handles, local, 16, &nl)) ||
        (rc = weft_grid_exchange(&grid, on_ranks, handles, remote, 16, &nr)))
        die("grid_exchange", rc);
    static step_job jobs[STEPS][2];
    double t0 = MPI_Wtime();
    for (int step = 0; step < STEPS; step++) {
        if ((rc = weft_comm_exchange(node, local, nl, "halo (node)", NULL)) ||
            (rc = weft_comm_exchange(ranks, remote, nr, "halo (ranks)", NULL)))
            die("exchange", rc);
        for (int g = 0; g < 2; g++) {
            block *bk = &b[rank * 2 + g];
            jobs[step][g].b = bk;
            weft_placement p;
            weft_placement_init(&p);
            p.gpu = g;
            p.share = 0.5;
            weft_access a[2] = {{bk->d, WEFT_RW}, {bk->scratch, WEFT_W}};
            weft_task_desc d;
            weft_task_desc_init(&d);
            d.body = step_body;
            d.arg = &jobs[step][g];
            d.accesses = a;
            d.naccesses = 2;
            d.placements = &p;
            d.nplacements = 1;
            d.name = "jacobi";
            if ((rc = weft_spawn(rt, &d, NULL)))
                die("spawn", rc);
        }
    }
    if ((rc = weft_wait_all(rt)))
        die("wait_all", rc);
    double secs = MPI_Wtime() - t0;
    if ((rc = weft_comm_destroy(node)) || (rc = weft_comm_destroy(ranks)))
        die("comm_destroy", rc);

    /* The sequential computation, and this rank's blocks against it. */
    double *g = malloc(HR * HC * sizeof(double)), *g2 = malloc(HR * HC * sizeof(double));
    for (int r = 0; r < HR; r++)
        for (int c = 0; c < HC; c++)
            g[r * HC + c] = start_value(r, c);
    for (int step = 0; step < STEPS; step++) {
        for (int r = 0; r < HR; r++)
            for (int c = 0; c < HC; c++)
                g2[r * HC + c] = r == 0 || c == 0 || r == HR - 1 || c == HC - 1
                                     ? g[r * HC + c]
                                     : 0.25 * (g[(r - 1) * HC + c] + g[(r + 1) * HC + c] + g[r * HC + c - 1] +
                                               g[r * HC + c + 1]);
        memcpy(g, g2, HR * HC * sizeof(double));
    }
    long bad = 0;
    for (int k = rank * 2; k < rank * 2 + 2; k++) {
        if ((rc = weft_data_unregister(b[k].d)))
            die("unregister", rc);
        if ((rc = weft_data_unregister(b[k].scratch)))
            die("unregister", rc);
        for (int r = 0; r < b[k].rows; r++)
            for (int c = 0; c < b[k].cols; c++)
                bad += b[k].host[(r + 1) * b[k].pitch + c + 1] != g[(b[k].r0 + r) * HC + b[k].c0 + c];
    }
    weft_stats st;
    if ((rc = weft_runtime_stats(rt, &st)))
        die("stats", rc);
    if ((rc = weft_runtime_destroy(rt)))
        die("destroy", rc);
    /* Rank 0 prints for both (one stream of output). */
    long all_bad = 0;
    MPI_Reduce(&bad, &all_bad, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    double mine[2] = {secs, (double)st.bytes_copied}, both[4];
    MPI_Gather(mine, 2, MPI_DOUBLE, both, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        for (int r = 0; r < 2; r++)
            printf("rank %d: %d steps of its %dx%d half on 2 virtual GPUs in %.3f s, %.0f bytes copied; trace: "
                   "%s.%d.json\n", r, STEPS, HR / 2, HC, both[2 * r], both[2 * r + 1], prefix, r);
        printf("weft-demo-halo: 2 ranks x 2 virtual GPUs, halos by communication tasks (GPU to GPU within a rank, "
               "MPI between ranks, on the trace's \"communication\" track): %s\n",
               all_bad ? "DIFFERS from the sequential computation" : "equal to the sequential computation");
    }
    for (int k = rank * 2; k < rank * 2 + 2; k++) {
        free(b[k].host);
        free(b[k].scratch_host);
    }
    free(g);
    free(g2);
    MPI_Finalize();
    return all_bad ? 1 : 0;
}
