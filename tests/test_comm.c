/* Communication as tasks, on virtual GPUs: communicators over a runtime's
 * GPUs; all-reduce, broadcast, reduce, all-gather and reduce-scatter for
 * every operator and type at sizes 0, 1, odd and large, in place and not,
 * against a sequential computation bit for bit; their data produced and
 * consumed by GPU tasks (ordering without the host, also in the checking
 * mode, which catches a planted missing dependency); exchanges: a ring
 * shift and a 2-D halo exchange of a block-decomposed array through stencil
 * steps, against the single-array computation; failure flowing through a
 * communication task; a member that never takes part (timeout, clear error,
 * no hang); operations from several threads on two communicators sharing
 * GPUs (no crosswise waits); bad arguments. */
#include "check.h"
#include "comm_check.h"
#include "testing.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define NG 4

static weft_comm *make_comm(weft_runtime *rt, const unsigned *gpus, unsigned n, uint64_t timeout_ns) {
    weft_comm_config cfg;
    weft_comm_config_init(&cfg);
    cfg.gpus = gpus;
    cfg.ngpus = n;
    cfg.timeout_ns = timeout_ns;
    weft_comm *c = NULL;
    CHECKF(weft_comm_create(rt, &cfg, &c) == 0, "%s", weft_last_error());
    return c;
}

/* ---- collectives against the oracle ---------------------------------------- */

/* One collective op/key/count on members of c (member k on GPU k), inputs
 * written by GPU tasks and results read back by GPU tasks (or the host). */
static void one_collective(weft_runtime *rt, weft_comm *c, unsigned op, unsigned key, size_t count, bool in_place,
                           unsigned root, bool via_gpu, uint64_t seed) {
    unsigned n = weft_comm_size(c);
    size_t E = tsize(key);
    size_t in_elems = op == WEFT_COLL_REDUCE_SCATTER ? count * n : count;
    size_t out_elems = op == WEFT_COLL_ALLGATHER ? count * n : count;
    size_t in_b = in_elems * E, out_b = out_elems * E;
    size_t rb = (in_place ? (in_b > out_b ? in_b : out_b) : out_b) + E; /* one element more: kept */
    char *send[NG], *recv[NG], *input[NG], *want[NG], *got[NG];
    weft_data *sd[NG], *rd[NG];
    for (unsigned k = 0; k < n; k++) {
        send[k] = malloc(in_b + 1);
        recv[k] = malloc(rb);
        input[k] = malloc(in_b + 1);
        want[k] = malloc(rb);
        got[k] = malloc(rb);
        for (size_t i = 0; i < in_elems; i++)
            value(key, k, i, seed, input[k] + i * E);
        memset(recv[k], 0x5a, rb);
        memcpy(want[k], recv[k], rb);
        if (in_place)
            memcpy(recv[k], input[k], in_b);
        memcpy(send[k], input[k], in_b);
        CHECK_OK(weft_data_register(rt, send[k], in_b ? in_b : 1, &sd[k]));
        CHECK_OK(weft_data_register(rt, recv[k], rb, &rd[k]));
    }
    for (unsigned k = 0; k < n; k++) /* the oracle: member order, left to right */
        comm_oracle(op, key, count, n, root, in_place, (const char *const *)input, k, want[k]);
    gpu_job fill[NG], back[NG];
    if (via_gpu) /* inputs made on the GPUs: the operation follows them there */
        for (unsigned k = 0; k < n; k++) {
            fill[k] = (gpu_job){NULL, in_b, input[k], NULL};
            memset(in_place ? recv[k] : send[k], 0, in_b); /* the host's copy is stale until then */
            if (in_b)
                gpu_task(rt, k, in_place ? rd[k] : sd[k], &fill[k], NULL);
        }
    weft_task *t = post_coll(c, op, key, count, root, in_place ? NULL : sd, rd);
    if (via_gpu)
        for (unsigned k = 0; k < n; k++) {
            back[k] = (gpu_job){NULL, rb, NULL, got[k]};
            gpu_task(rt, k, rd[k], &back[k], NULL);
        }
    CHECKF(weft_task_wait(t) == 0, "op %u key 0x%x count %zu: %s", op, key, count, weft_last_error());
    weft_task_release(t);
    CHECK_OK(weft_wait_all(rt));
    for (unsigned k = 0; k < n; k++) {
        CHECK_OK(weft_data_unregister(sd[k]));
        CHECK_OK(weft_data_unregister(rd[k]));
        bool writes = op != WEFT_COLL_REDUCE || k == root || in_place;
        if (writes) {
            size_t at = 0;
            while (at < rb && recv[k][at] == want[k][at])
                at++;
            CHECKF(at == rb, "op %u key 0x%x count %zu in_place %d via_gpu %d: member %u differs at byte %zu of %zu "
                   "(%02x, want %02x; got on the GPU %02x)", op, key, count, in_place, via_gpu, k, at, rb,
                   at < rb ? (unsigned char)recv[k][at] : 0, at < rb ? (unsigned char)want[k][at] : 0,
                   at < rb ? (unsigned char)got[k][at] : 0);
            if (via_gpu)
                CHECKF(memcmp(got[k], want[k], rb) == 0, "op %u: member %u read on its GPU differs", op, k);
        }
        CHECK(memcmp(send[k], input[k], in_b) == 0 || in_place); /* inputs untouched */
        free(send[k]);
        free(recv[k]);
        free(input[k]);
        free(want[k]);
        free(got[k]);
    }
}

static void test_collectives(bool check) {
    test_step(check ? "collectives (checking mode)" : "collectives");
    weft_runtime *rt = test_make_devices("cpu,vgpu:4", 2, 0, check);
    weft_comm *c = make_comm(rt, NULL, 0, 0);
    CHECK(weft_comm_size(c) == NG);
    size_t sizes[] = {0, 1, 1001, test_small() ? 4099 : 65537};
    uint64_t seed = 1;
    for (unsigned s = 0; s < 4; s++)
        for (unsigned op = WEFT_COLL_ALLREDUCE; op <= WEFT_COLL_REDUCE_SCATTER; op++) {
            bool reduces = op == WEFT_COLL_ALLREDUCE || op == WEFT_COLL_REDUCE || op == WEFT_COLL_REDUCE_SCATTER;
            for (unsigned ti = 0; ti < 6; ti++)
                for (unsigned oi = 0; oi < (reduces ? 3u : 1u); oi++) {
                    if (!reduces && ti % 3 != 0)
                        continue; /* moves: a 4- and an 8-byte type suffice */
                    if (s == 3 && (ti % 2 || oi)) /* large: fewer */
                        continue;
                    unsigned key = TYPES[ti] | (reduces ? OPS[oi] : 0);
                    bool ip_ok = op <= WEFT_COLL_REDUCE;
                    seed++;
                    one_collective(rt, c, op, key, sizes[s], false, (unsigned)(seed % NG), (seed & 1) != 0, seed);
                    if (ip_ok)
                        one_collective(rt, c, op, key, sizes[s], true, (unsigned)((seed + 1) % NG), (seed & 2) != 0,
                                       seed);
                }
        }
    /* A sub-communicator on GPUs 3 and 1, in that order (member 0 is GPU 3). */
    unsigned g31[2] = {3, 1};
    weft_comm *c2 = make_comm(rt, g31, 2, 0);
    one_collective(rt, c2, WEFT_COLL_ALLGATHER, WEFT_RED_I64, 33, false, 0, false, 99);
    one_collective(rt, c2, WEFT_COLL_ALLREDUCE, WEFT_RED_F64 | WEFT_RED_SUM, 777, true, 0, false, 98);
    CHECK_OK(weft_comm_destroy(c2));
    CHECK_OK(weft_comm_destroy(c));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- exchanges --------------------------------------------------------------- */

typedef struct shift_job {
    int64_t *ptr;
    size_t n;
} shift_job;

static int shift_kernel(void *arg) {
    shift_job *j = arg;
    memcpy(j->ptr, j->ptr + j->n, j->n * sizeof(int64_t)); /* value <- what arrived */
    return 0;
}

static int shift_body(weft_ctx *ctx, void *arg) {
    shift_job *j = arg;
    j->ptr = weft_ctx_data(ctx, 0);
    weft_range r = {j->ptr, 2 * j->n * sizeof(int64_t), WEFT_RW};
    return weft_ctx_queue_rw(ctx, 0, shift_kernel, j, 0, &r, 1);
}

/* Each round every member sends its value to the next (one exchange), then
 * a task on its GPU moves what arrived into its value: after NG rounds
 * every value is back home, having passed every GPU. */
static void test_ring(void) {
    test_step("ring shift");
    weft_runtime *rt = test_make_devices("cpu,vgpu:4", 2, 0, true);
    weft_comm *c = make_comm(rt, NULL, 0, 0);
    enum { N = 1000 };
    int64_t *buf[NG];
    weft_data *d[NG];
    shift_job jobs[NG][NG];
    for (unsigned k = 0; k < NG; k++) {
        buf[k] = malloc(2 * N * sizeof(int64_t)); /* [0, N): the value, [N, 2N): what arrives */
        for (unsigned i = 0; i < 2 * N; i++)
            buf[k][i] = i < N ? (int64_t)(k * 100000 + i) : -1;
        CHECK_OK(weft_data_register(rt, buf[k], 2 * N * sizeof(int64_t), &d[k]));
    }
    for (unsigned round = 0; round < NG; round++) {
        weft_xfer x[NG];
        for (unsigned k = 0; k < NG; k++)
            x[k] = (weft_xfer){k, (k + 1) % NG, d[k], 0, 0, d[(k + 1) % NG], N * sizeof(int64_t), 0,
                               N * sizeof(int64_t), 0};
        CHECKF(weft_comm_exchange(c, x, NG, "ring", NULL) == 0, "%s", weft_last_error());
        for (unsigned k = 0; k < NG; k++) {
            char where[16];
            snprintf(where, sizeof where, "gpu:%u", k);
            jobs[round][k] = (shift_job){NULL, N};
            weft_access a = {d[k], WEFT_RW};
            test_spawn_at(rt, where, 0.25, shift_body, &jobs[round][k], &a, 1, false);
        }
    }
    CHECK_OK(weft_wait_all(rt));
    for (unsigned k = 0; k < NG; k++) {
        CHECK_OK(weft_data_unregister(d[k]));
        for (unsigned i = 0; i < N; i++)
            CHECKF(buf[k][i] == (int64_t)(k * 100000 + i), "member %u element %u: %lld", k, i, (long long)buf[k][i]);
        free(buf[k]);
    }
    CHECK_OK(weft_comm_destroy(c));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* A 2-D array of R x C doubles split into 2 x 2 blocks, one per member, each
 * stored with a halo of 1 ((br+2) x (bc+2)); a Jacobi step on each block on
 * its GPU, halos exchanged between steps (rows and strided columns; corners
 * through the diagonal neighbours), against the whole array's steps. */
enum { HR = 37, HC = 53, STEPS = 6 };
static const size_t BR[2] = {HR / 2, HR - HR / 2}, BC[2] = {HC / 2, HC - HC / 2};

typedef struct block {
    size_t r0, c0, rows, cols, pitch; /* pitch in doubles: cols + 2 */
    double *host;
    weft_data *d;
} block;

typedef struct step_job {
    block *b;
    double *cur, *next; /* replicas: cur (halo read), next (written) */
} step_job;

static int step_kernel(void *arg) {
    step_job *j = arg;
    block *b = j->b;
    size_t p = b->pitch;
    for (size_t r = 1; r <= b->rows; r++)
        for (size_t c = 1; c <= b->cols; c++) {
            size_t gr = b->r0 + r - 1, gc = b->c0 + c - 1;
            if (gr == 0 || gc == 0 || gr == HR - 1 || gc == HC - 1)
                j->next[r * p + c] = j->cur[r * p + c]; /* the boundary stays */
            else
                j->next[r * p + c] = 0.25 * (j->cur[(r - 1) * p + c] + j->cur[(r + 1) * p + c] +
                                             j->cur[r * p + c - 1] + j->cur[r * p + c + 1]);
        }
    for (size_t r = 1; r <= b->rows; r++) /* back into cur's interior */
        memcpy(j->cur + r * p + 1, j->next + r * p + 1, b->cols * sizeof(double));
    return 0;
}

static int step_body(weft_ctx *ctx, void *arg) {
    step_job *j = arg;
    j->cur = weft_ctx_data(ctx, 0);
    j->next = weft_ctx_data(ctx, 1);
    size_t bytes = (j->b->rows + 2) * j->b->pitch * sizeof(double);
    weft_range r[2] = {{j->cur, bytes, WEFT_RW}, {j->next, bytes, WEFT_W}};
    return weft_ctx_queue_rw(ctx, 0, step_kernel, j, 0, r, 2);
}

static void test_halo(bool check) {
    test_step(check ? "2-D halo exchange (checking mode)" : "2-D halo exchange");
    weft_runtime *rt = test_make_devices("cpu,vgpu:4", 2, 0, check);
    weft_comm *c = make_comm(rt, NULL, 0, 0);
    double *g = malloc(HR * HC * sizeof(double)), *g2 = malloc(HR * HC * sizeof(double));
    for (size_t i = 0; i < HR * HC; i++)
        g[i] = (double)(mix64(i + 5) % 1000) / 7.0;
    block b[4];
    double *scratch[4];
    weft_data *sd[4];
    for (unsigned k = 0; k < 4; k++) {
        unsigned bi = k / 2, bj = k % 2;
        b[k].r0 = bi ? BR[0] : 0;
        b[k].c0 = bj ? BC[0] : 0;
        b[k].rows = BR[bi];
        b[k].cols = BC[bj];
        b[k].pitch = b[k].cols + 2;
        size_t n = (b[k].rows + 2) * b[k].pitch;
        b[k].host = calloc(n, sizeof(double));
        scratch[k] = calloc(n, sizeof(double));
        for (size_t r = 0; r < b[k].rows; r++)
            memcpy(b[k].host + (r + 1) * b[k].pitch + 1, g + (b[k].r0 + r) * HC + b[k].c0,
                   b[k].cols * sizeof(double));
        CHECK_OK(weft_data_register(rt, b[k].host, n * sizeof(double), &b[k].d));
        CHECK_OK(weft_data_register(rt, scratch[k], n * sizeof(double), &sd[k]));
    }
    /* The halo transfers: for each ordered pair of neighbours (8-neighbourhood). */
    weft_xfer x[32];
    size_t nx = 0;
    for (unsigned k = 0; k < 4; k++)
        for (unsigned m = 0; m < 4; m++) {
            if (k == m)
                continue;
            int di = (int)(m / 2) - (int)(k / 2), dj = (int)(m % 2) - (int)(k % 2); /* m relative to k */
            const block *s = &b[k], *t = &b[m];
            size_t sp = s->pitch * sizeof(double), tp = t->pitch * sizeof(double);
            weft_xfer e = {k, m, s->d, 0, sp, t->d, 0, tp, 0, 0};
            /* k's cells next to m go to m's halo on the side facing k */
            size_t sr0, srn, sc0, scn, tr0, tc0;
            if (di == 0) { sr0 = 1; srn = s->rows; tr0 = 1; }
            else if (di > 0) { sr0 = s->rows; srn = 1; tr0 = 0; }
            else { sr0 = 1; srn = 1; tr0 = t->rows + 1; }
            if (dj == 0) { sc0 = 1; scn = s->cols; tc0 = 1; }
            else if (dj > 0) { sc0 = s->cols; scn = 1; tc0 = 0; }
            else { sc0 = 1; scn = 1; tc0 = t->cols + 1; }
            e.src_off = (sr0 * s->pitch + sc0) * sizeof(double);
            e.dst_off = (tr0 * t->pitch + tc0) * sizeof(double);
            e.bytes = scn * sizeof(double);
            e.rows = srn;
            x[nx++] = e;
        }
    step_job jobs[STEPS][4]; /* each task's own (bodies fill in pointers) */
    for (unsigned step = 0; step < STEPS; step++) {
        CHECKF(weft_comm_exchange(c, x, nx, "halo", NULL) == 0, "%s", weft_last_error());
        for (unsigned k = 0; k < 4; k++) {
            jobs[step][k].b = &b[k];
            char where[16];
            snprintf(where, sizeof where, "gpu:%u", k);
            weft_access a[2] = {{b[k].d, WEFT_RW}, {sd[k], WEFT_W}};
            test_spawn_at(rt, where, 0.5, step_body, &jobs[step][k], a, 2, false);
        }
        /* the oracle */
        for (size_t r = 0; r < HR; r++)
            for (size_t cc = 0; cc < HC; cc++)
                g2[r * HC + cc] = r == 0 || cc == 0 || r == HR - 1 || cc == HC - 1
                                      ? g[r * HC + cc]
                                      : 0.25 * (g[(r - 1) * HC + cc] + g[(r + 1) * HC + cc] + g[r * HC + cc - 1] +
                                                g[r * HC + cc + 1]);
        memcpy(g, g2, HR * HC * sizeof(double));
    }
    CHECK_OK(weft_wait_all(rt));
    for (unsigned k = 0; k < 4; k++) {
        CHECK_OK(weft_data_unregister(b[k].d));
        CHECK_OK(weft_data_unregister(sd[k]));
        for (size_t r = 0; r < b[k].rows; r++)
            for (size_t cc = 0; cc < b[k].cols; cc++) {
                double got = b[k].host[(r + 1) * b[k].pitch + cc + 1], want = g[(b[k].r0 + r) * HC + b[k].c0 + cc];
                CHECKF(memcmp(&got, &want, sizeof got) == 0, "block %u cell (%zu, %zu): %.17g, want %.17g", k, r, cc,
                       got, want);
            }
        free(b[k].host);
        free(scratch[k]);
    }
    free(g);
    free(g2);
    CHECK_OK(weft_comm_destroy(c));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- 2-D decompositions ----------------------------------------------------- */

static double cell(size_t r, size_t c) { return (double)(r * 1000 + c); }

/* 2 x 2 blocks of a 30 x 41 grid with a halo of 2, one block per GPU: after
 * one exchange every halo cell inside the grid holds its neighbour's value
 * (sides and corners), and those outside the grid are untouched. */
static void test_grid(void) {
    test_step("2-D decomposition");
    weft_runtime *rt = test_make_devices("cpu,vgpu:4", 2, 0, true);
    weft_comm *c = make_comm(rt, NULL, 0, 0);
    weft_grid g = {30, 41, sizeof(double), 2, 2, 2};
    double *a[4];
    weft_data *d[4];
    weft_grid_block b[4];
    int member[4];
    for (unsigned k = 0; k < 4; k++) {
        CHECK_OK(weft_grid_block_get(&g, k, &b[k]));
        member[k] = (int)k;
        a[k] = malloc(b[k].bytes);
        size_t w = b[k].pitch / sizeof(double);
        for (size_t i = 0; i < b[k].bytes / sizeof(double); i++)
            a[k][i] = -1;
        for (size_t r = 0; r < b[k].rows; r++)
            for (size_t cc = 0; cc < b[k].cols; cc++)
                a[k][(r + 2) * w + cc + 2] = cell(b[k].row0 + r, b[k].col0 + cc);
        CHECK_OK(weft_data_register(rt, a[k], b[k].bytes, &d[k]));
    }
    CHECK(b[0].rows == 15 && b[1].cols == 20 && b[0].cols == 21 && b[3].row0 == 15 && b[3].col0 == 21);
    size_t n = 0;
    CHECK_OK(weft_grid_exchange(&g, member, d, NULL, 0, &n));
    CHECK(n == 12); /* 4 sides both ways, 2 diagonals both ways */
    weft_xfer x[12];
    CHECK_OK(weft_grid_exchange(&g, member, d, x, 12, &n));
    CHECKF(weft_comm_exchange(c, x, n, "grid halo", NULL) == 0, "%s", weft_last_error());
    CHECK_OK(weft_wait_all(rt));
    for (unsigned k = 0; k < 4; k++) {
        CHECK_OK(weft_data_unregister(d[k]));
        size_t w = b[k].pitch / sizeof(double);
        for (size_t r = 0; r < b[k].rows + 4; r++)
            for (size_t cc = 0; cc < w; cc++) {
                long gr = (long)b[k].row0 + (long)r - 2, gc = (long)b[k].col0 + (long)cc - 2;
                bool inside = gr >= 0 && gc >= 0 && gr < 30 && gc < 41;
                double want = inside ? cell((size_t)gr, (size_t)gc) : -1;
                CHECKF(a[k][r * w + cc] == want, "block %u stored (%zu, %zu): %g, want %g", k, r, cc, a[k][r * w + cc],
                       want);
            }
        free(a[k]);
    }
    /* blocks of one member are left out; misuse */
    int two[4] = {0, 0, 1, -1};
    CHECK_OK(weft_grid_exchange(&g, two, NULL, NULL, 0, &n));
    CHECK(n == 4); /* block 0 <-> 2 and 1 <-> 2 (a corner), each way; block 3 not in it */
    weft_grid bad = g;
    bad.halo = 16;
    CHECK_ERR(weft_grid_block_get(&bad, 0, &b[0]), WEFT_EINVAL);
    CHECKF(strstr(weft_last_error(), "narrower than the halo"), "%s", weft_last_error());
    bad = g;
    bad.brows = 31;
    CHECK_ERR(weft_grid_exchange(&bad, member, NULL, NULL, 0, &n), WEFT_EINVAL);
    CHECK_ERR(weft_grid_block_get(&g, 4, &b[0]), WEFT_EINVAL);
    CHECK_ERR(weft_grid_exchange(&g, NULL, NULL, NULL, 0, &n), WEFT_EINVAL);
    CHECK_OK(weft_comm_destroy(c));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- bad arguments ------------------------------------------------------------ */

static void expect_einval(int rc, const char *needle) {
    CHECK_RC(rc, WEFT_EINVAL);
    CHECKF(strstr(weft_last_error(), needle) != NULL, "message \"%s\" lacks \"%s\"", weft_last_error(), needle);
}

static void test_misuse(void) {
    test_step("bad arguments");
    weft_runtime *cpu = test_make_devices("cpu", 2, 0, false);
    weft_comm *c = NULL;
    CHECK_ERR(weft_comm_create(cpu, NULL, &c), WEFT_ENODEV);
    CHECKF(strstr(weft_last_error(), "no GPUs") != NULL, "%s", weft_last_error());
    CHECK_OK(weft_runtime_destroy(cpu));
    weft_runtime *rt = test_make_devices("cpu,vgpu:4", 2, 0, false);
    weft_comm_config cfg;
    weft_comm_config_init(&cfg);
    unsigned bad[2] = {1, 1}, far[1] = {7};
    cfg.gpus = bad;
    cfg.ngpus = 2;
    expect_einval(weft_comm_create(rt, &cfg, &c), "named twice");
    cfg.gpus = far;
    cfg.ngpus = 1;
    CHECK_ERR(weft_comm_create(rt, &cfg, &c), WEFT_ENODEV);
    CHECKF(strstr(weft_last_error(), "GPU 7") != NULL, "%s", weft_last_error());
    expect_einval(weft_comm_create(rt, NULL, NULL), "out is NULL");
    c = make_comm(rt, NULL, 0, 0);
    double a[NG][8], big[64], one[1];
    weft_data *d[NG], *small, *bigd;
    for (unsigned k = 0; k < NG; k++)
        CHECK_OK(weft_data_register(rt, a[k], sizeof a[k], &d[k]));
    /* (memory of its own: a range overlapping a[0] would make d[0] host-only) */
    CHECK_OK(weft_data_register(rt, one, sizeof one, &small));
    CHECK_OK(weft_data_register(rt, big, sizeof big, &bigd));
    weft_coll o;
    weft_coll_init(&o);
    o.recv = d;
    o.count = 8;
    expect_einval(weft_comm_post(c, &o, NULL), "unknown operation");
    o.op = WEFT_COLL_ALLREDUCE;
    expect_einval(weft_comm_post(c, &o, NULL), "no element type");
    o.type = WEFT_RED_F64;
    expect_einval(weft_comm_post(c, &o, NULL), "needs an operator");
    o.op = WEFT_COLL_BROADCAST;
    o.type = WEFT_RED_F64 | WEFT_RED_SUM;
    expect_einval(weft_comm_post(c, &o, NULL), "not an operator");
    o.type = WEFT_RED_F64;
    o.root = NG;
    expect_einval(weft_comm_post(c, &o, NULL), "root 4");
    o.root = 0;
    o.count = 9;
    expect_einval(weft_comm_post(c, &o, NULL), "recv of member 0 has 64 bytes, 72 needed");
    o.count = 8;
    o.op = WEFT_COLL_ALLGATHER;
    expect_einval(weft_comm_post(c, &o, NULL), "needs send buffers");
    o.op = WEFT_COLL_ALLREDUCE;
    o.type = WEFT_RED_I32 | WEFT_RED_MAX;
    o.send = d;
    expect_einval(weft_comm_post(c, &o, NULL), "one handle");
    weft_data *two[NG] = {d[0], d[0], d[2], d[3]};
    o.send = NULL;
    o.recv = two;
    expect_einval(weft_comm_post(c, &o, NULL), "same handle");
    weft_data *gone[NG] = {d[0], d[1], NULL, d[3]};
    o.recv = gone;
    expect_einval(weft_comm_post(c, &o, NULL), "recv of member 2 is NULL");
    o.recv = NULL;
    expect_einval(weft_comm_post(c, &o, NULL), "recv is NULL");
    expect_einval(weft_comm_post(c, NULL, NULL), "operation is NULL");
    expect_einval(weft_comm_post(NULL, &o, NULL), "communicator is NULL");
    /* exchanges */
    weft_xfer x = {0, 1, d[0], 0, 0, d[1], 0, 0, 64, 0};
    weft_xfer xs[2];
    x.to = 0;
    expect_einval(weft_comm_exchange(c, &x, 1, NULL, NULL), "to itself");
    x.to = 9;
    expect_einval(weft_comm_exchange(c, &x, 1, NULL, NULL), "from member 0 to 9");
    x.to = 1;
    x.bytes = 65;
    expect_einval(weft_comm_exchange(c, &x, 1, NULL, NULL), "outside its src");
    x.bytes = 8;
    x.rows = 3;
    x.src_pitch = 8;
    x.dst_pitch = 32;
    expect_einval(weft_comm_exchange(c, &x, 1, NULL, NULL), "outside its dst");
    x.rows = 2;
    x.dst_off = 8;
    xs[0] = x;
    xs[1] = x;
    xs[1].from = 2;
    xs[1].src = d[2];
    xs[1].dst_off = 40; /* row 1 of xs[0] is [40, 48) */
    xs[1].rows = 1;
    expect_einval(weft_comm_exchange(c, xs, 2, NULL, NULL), "write overlapping ranges");
    xs[1].dst_off = 16; /* [16, 24) and [48, 56): between xs[0]'s rows, fine */
    xs[1].rows = 2;
    weft_task *t;
    CHECKF(weft_comm_exchange(c, xs, 2, "interleaved", &t) == 0, "%s", weft_last_error());
    CHECK_OK(weft_task_wait(t));
    weft_task_release(t);
    xs[1] = (weft_xfer){1, 2, d[1], 16, 0, d[2], 0, 0, 8, 0}; /* d[1] written on member 1 and read there: fine */
    CHECKF(weft_comm_exchange(c, xs, 2, NULL, NULL) == 0, "%s", weft_last_error());
    xs[1] = (weft_xfer){1, 2, d[1], 40, 0, d[2], 0, 0, 8, 0}; /* reads where xs[0] writes */
    expect_einval(weft_comm_exchange(c, xs, 2, NULL, NULL), "writes where transfer 1 reads");
    xs[1] = (weft_xfer){3, 2, d[1], 0, 0, d[2], 0, 0, 8, 0}; /* d[1] written on member 1, read on 3 */
    expect_einval(weft_comm_exchange(c, xs, 2, NULL, NULL), "written on member 1 and used on member 3");
    expect_einval(weft_comm_exchange(c, NULL, 1, NULL, NULL), "x is NULL");
    CHECK_OK(weft_comm_exchange(c, NULL, 0, "empty", NULL)); /* orders only */
    /* tiles are refused */
    weft_tiling tl = {8, 1, 8, 0, 1, 2, 0};
    weft_data *tiles[2];
    CHECKF(weft_data_partition(bigd, &tl, tiles) == 0, "%s", weft_last_error());
    weft_data *with_tile[NG] = {tiles[0], d[1], d[2], d[3]};
    o.recv = with_tile;
    o.op = WEFT_COLL_BROADCAST;
    o.type = WEFT_RED_F64;
    o.count = 1;
    expect_einval(weft_comm_post(c, &o, NULL), "a tile");
    /* still usable */
    o.recv = d;
    CHECKF(weft_comm_post(c, &o, &t) == 0, "%s", weft_last_error());
    CHECK_OK(weft_task_wait(t));
    weft_task_release(t);
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_comm_destroy(c));
    CHECK_ERR(weft_comm_destroy(c), WEFT_EINVAL); /* stale */
    CHECK(weft_comm_size(c) == 0);
    for (unsigned k = 0; k < NG; k++)
        CHECK_OK(weft_data_unregister(d[k]));
    CHECK_OK(weft_data_unregister(small));
    CHECK_OK(weft_data_unregister(bigd));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- what communication is built on: exact GPU sets, accesses on a GPU -------- */

typedef struct where_job {
    void *ptr[3];
    int gpu[3];
} where_job;

static int where_body(weft_ctx *ctx, void *arg) {
    where_job *j = arg;
    for (unsigned i = 0; i < 3; i++) {
        j->ptr[i] = weft_ctx_data(ctx, i);
        j->gpu[i] = weft_ctx_gpu(ctx, i);
    }
    return 0;
}

static void test_sets(void) {
    test_step("exact GPU sets and WEFT_ON_GPU");
    weft_runtime *rt = test_make_devices("cpu,vgpu:4", 2, 0, true);
    double a[3][4] = {{1}, {2}, {3}};
    weft_data *d[3];
    for (unsigned i = 0; i < 3; i++)
        CHECK_OK(weft_data_register(rt, a[i], sizeof a[i], &d[i]));
    weft_placement p;
    weft_placement_init(&p);
    p.gpus = 3;
    p.gpu_set = (1u << 3) | (1u << 0) | (1u << 2); /* the set's GPUs in order: 0, 2, 3 */
    p.share = 0.25;
    weft_access acc[3] = {{d[0], WEFT_R | WEFT_ON_GPU(2)}, {d[1], WEFT_RW | WEFT_ON_GPU(0)},
                          {d[2], WEFT_W | WEFT_ON_GPU(1)}};
    where_job j;
    weft_task_desc td;
    weft_task_desc_init(&td);
    td.body = where_body;
    td.arg = &j;
    td.accesses = acc;
    td.naccesses = 3;
    td.placements = &p;
    td.nplacements = 1;
    weft_task *t;
    CHECKF(weft_spawn(rt, &td, &t) == 0, "%s", weft_last_error());
    CHECK_OK(weft_task_wait(t));
    weft_task_release(t);
    weft_device_info info[3];
    for (unsigned i = 0; i < 3; i++)
        CHECK_OK(weft_device_info_get(rt, (unsigned)j.gpu[i], &info[i]));
    CHECK(strcmp(info[0].name, "vgpu:0") == 0 && strcmp(info[1].name, "vgpu:2") == 0 &&
          strcmp(info[2].name, "vgpu:3") == 0);
    /* each access's replica is on its GPU: the address lies in that GPU's arena,
     * which the checking mode's own-data rule would refuse elsewhere */
    CHECK(j.ptr[0] != a[0] && j.ptr[1] != a[1] && j.ptr[2] != a[2]);
    CHECK(j.ptr[0] != j.ptr[1] && j.ptr[1] != j.ptr[2]);
    for (unsigned i = 1; i <= 4; i++) { /* replicas on vgpu:0, 2 and 3 (one each); none on vgpu:1 */
        weft_device_info di;
        CHECK_OK(weft_device_info_get(rt, i, &di));
        CHECKF((di.memory_used > 0) == (i != 2), "%s holds %zu bytes", di.name, di.memory_used);
    }
    /* misuse */
    weft_access bad = {d[0], WEFT_R | WEFT_ON_GPU(3)};
    td.accesses = &bad;
    td.naccesses = 1;
    expect_einval(weft_spawn(rt, &td, NULL), "alternative 0 has 3 GPUs");
    bad.mode = WEFT_R | WEFT_HOST | WEFT_ON_GPU(1);
    expect_einval(weft_spawn(rt, &td, NULL), "WEFT_ON_GPU goes with");
    weft_access twice[2] = {{d[0], WEFT_RW | WEFT_ON_GPU(1)}, {d[0], WEFT_R}};
    td.accesses = twice;
    td.naccesses = 2;
    expect_einval(weft_spawn(rt, &td, NULL), "only readers may share");
    twice[0].mode = WEFT_R | WEFT_ON_GPU(1);
    CHECKF(weft_spawn(rt, &td, NULL) == 0, "%s", weft_last_error()); /* two readers: fine */
    td.accesses = NULL;
    td.naccesses = 0;
    p.gpus = 2;
    expect_einval(weft_spawn(rt, &td, NULL), "of 3 GPUs with gpus = 2");
    p.gpus = 1;
    p.gpu_set = 1u << 5;
    CHECK_ERR(weft_spawn(rt, &td, NULL), WEFT_ENODEV); /* well formed, but the runtime lacks GPU 5 */
    CHECKF(strstr(weft_last_error(), "GPU 5 in its set") != NULL, "%s", weft_last_error());
    td.placements = NULL;
    td.nplacements = 0;
    bad.mode = WEFT_R | WEFT_ON_GPU(0);
    td.accesses = &bad;
    td.naccesses = 1;
    expect_einval(weft_spawn(rt, &td, NULL), "runs on the CPU");
    CHECK_OK(weft_wait_all(rt));
    for (unsigned i = 0; i < 3; i++)
        CHECK_OK(weft_data_unregister(d[i]));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- failure, a member that never comes, a planted missing dependency --------- */

static int fail_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    return 7;
}

static int rewrite_body(weft_ctx *ctx, void *arg) {
    (void)arg;
    int64_t *p = weft_ctx_data(ctx, 0);
    for (unsigned i = 0; i < 8; i++)
        p[i] = 3;
    return 0;
}

static atomic_int hold_started, hold_release;
static int hold_kernel(void *arg) {
    atomic_fetch_add(&hold_started, 1);
    if (wait_flag(&hold_release, 20000) != 0)
        return 5;
    memset(arg, 1, 64);
    return 0;
}
static int hold_body(weft_ctx *ctx, void *arg) {
    (void)arg;
    void *p = weft_ctx_data(ctx, 0);
    weft_range r = {p, 64, WEFT_W};
    return weft_ctx_queue_rw(ctx, 0, hold_kernel, p, 0, &r, 1);
}

static void test_faults(void) {
    test_step("faults");
    weft_runtime *rt = test_make_devices("cpu,vgpu:4", 2, 0, true);
    weft_comm *c = make_comm(rt, NULL, 0, 300u * 1000000u); /* 0.3 s */
    int64_t a[NG][8];
    weft_data *d[NG];
    for (unsigned k = 0; k < NG; k++) {
        for (unsigned i = 0; i < 8; i++)
            a[k][i] = k + 1;
        CHECK_OK(weft_data_register(rt, a[k], sizeof a[k], &d[k]));
    }
    weft_coll o;
    weft_coll_init(&o);
    o.op = WEFT_COLL_ALLREDUCE;
    o.type = WEFT_RED_I64 | WEFT_RED_SUM;
    o.count = 8;
    o.recv = d;
    /* 1. a writer of member 2's buffer fails: the all-reduce is cancelled,
     * and so is its reader; the buffers keep their last good values. */
    weft_access wa = {d[2], WEFT_RW};
    weft_task *w = test_spawn_at(rt, "gpu:2", 0.25, fail_body, NULL, &wa, 1, true);
    weft_task *t, *r;
    CHECK_OK(weft_comm_post(c, &o, &t));
    gpu_job back = {NULL, sizeof a[0], NULL, malloc(sizeof a[0])};
    gpu_task(rt, 0, d[0], &back, &r);
    CHECK_RC(weft_task_wait(w), WEFT_ETASKFAILED);
    CHECK_RC(weft_task_wait(t), WEFT_ECANCELLED);
    CHECK_RC(weft_task_wait(r), WEFT_ECANCELLED);
    weft_task_release(w);
    weft_task_release(t);
    weft_task_release(r);
    free(back.to);
    CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED);
    /* writers make the buffers valid again (the cancelled all-reduce was
     * the last writer of each); the runtime goes on */
    for (unsigned k = 0; k < NG; k++) {
        weft_access wk = {d[k], WEFT_W};
        test_spawn_at(rt, "cpu", 0, rewrite_body, NULL, &wk, 1, false);
    }
    CHECK_OK(weft_comm_post(c, &o, &t));
    CHECK_OK(weft_task_wait(t));
    weft_task_release(t);
    /* 2. every stream of member 3's GPU is held by a kernel that waits (no
     * dependency of the operation's): past the timeout the operation fails
     * on every member, with a message, and nothing hangs. */
    atomic_store(&hold_started, 0);
    atomic_store(&hold_release, 0);
    double hb[4][8];
    weft_data *hd[4];
    weft_task *h4[4];
    for (unsigned s4 = 0; s4 < 4; s4++) { /* streams are handed out in turn: one each */
        CHECK_OK(weft_data_register(rt, hb[s4], sizeof hb[s4], &hd[s4]));
        weft_access ha = {hd[s4], WEFT_W};
        h4[s4] = test_spawn_at(rt, "gpu:3", 0.2, hold_body, NULL, &ha, 1, true);
    }
    for (unsigned ms = 0; atomic_load(&hold_started) < 4 && ms < 20000; ms++)
        sleep_ms(1);
    CHECK(atomic_load(&hold_started) == 4);
    weft_coll o2 = o;
    o2.name = "late";
    CHECK_OK(weft_comm_post(c, &o2, &t));
    /* Members 0-2 give up after 0.3 s; the task ends once member 3's
     * stream reaches its part too (which then fails at once). */
    CHECK_RC(weft_task_timedwait(t, 1000000000ull), WEFT_ETIMEDOUT);
    uint64_t t0 = now_ns();
    atomic_store(&hold_release, 1);
    CHECK_RC(weft_task_wait(t), WEFT_ETASKFAILED);
    CHECKF(now_ns() - t0 < 5000000000ull, "member 3 took %.1f s to fail", (double)(now_ns() - t0) / 1e9);
    for (unsigned s4 = 0; s4 < 4; s4++) {
        CHECK_OK(weft_task_wait(h4[s4]));
        weft_task_release(h4[s4]);
        CHECK_OK(weft_data_unregister(hd[s4]));
    }
    weft_task_release(t);
    CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED);
    for (unsigned k = 0; k < NG; k++) { /* the failed operation was their last writer */
        weft_access wk = {d[k], WEFT_W};
        test_spawn_at(rt, "cpu", 0, rewrite_body, NULL, &wk, 1, false);
    }
    /* 3. the planted bug: the all-reduce skips its wait for a GPU writer
     * of member 0's buffer still running; the checking mode catches it. */
    atomic_store(&hold_started, 0);
    atomic_store(&hold_release, 0);
    weft_access h0 = {d[0], WEFT_W};
    weft_task *h = test_spawn_at(rt, "gpu:0", 0.25, hold_body, NULL, &h0, 1, true);
    CHECK(wait_flag(&hold_started, 20000) == 0);
    weft__test_skip_event_waits(1000);
    o2.name = "unordered";
    CHECK_OK(weft_comm_post(c, &o2, &t));
    /* (it completes after the writer it follows, even failed) */
    CHECK_RC(weft_task_timedwait(t, 500000000ull), WEFT_ETIMEDOUT);
    weft__test_skip_event_waits(0);
    atomic_store(&hold_release, 1);
    int rc = weft_task_wait(t);
    CHECK_OK(weft_task_wait(h));
    CHECK_RC(rc, WEFT_ETASKFAILED);
    char msg[320];
    weft__test_vcheck_last(msg, sizeof msg);
    CHECKF(strstr(msg, "not ordered after") != NULL, "message: %s", msg);
    weft_task_release(h);
    weft_task_release(t);
    CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED);
    /* usable still */
    for (unsigned k = 0; k < NG; k++) {
        weft_access wk = {d[k], WEFT_W};
        test_spawn_at(rt, "cpu", 0, rewrite_body, NULL, &wk, 1, false);
    }
    CHECK_OK(weft_comm_post(c, &o, NULL));
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_comm_destroy(c));
    for (unsigned k = 0; k < NG; k++)
        CHECK_OK(weft_data_unregister(d[k]));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* ---- many operations from several threads, two communicators sharing GPUs ---- */

typedef struct poster {
    weft_comm *c;
    weft_data **d;
    unsigned n, rounds;
} poster;

static void *post_thread(void *arg) {
    poster *p = arg;
    weft_coll o;
    weft_coll_init(&o);
    o.op = WEFT_COLL_ALLREDUCE;
    o.type = WEFT_RED_U64 | WEFT_RED_SUM;
    o.count = 16;
    o.recv = p->d;
    for (unsigned i = 0; i < p->rounds; i++)
        CHECKF(weft_comm_post(p->c, &o, NULL) == 0, "%s", weft_last_error());
    return NULL;
}

static void test_threads(void) {
    test_step("operations from threads on overlapping communicators");
    weft_runtime *rt = test_make_devices("cpu,vgpu:4", 2, 0, false);
    unsigned g12[2] = {2, 1};
    weft_comm *ca = make_comm(rt, NULL, 0, 0), *cb = make_comm(rt, g12, 2, 0);
    uint64_t va[NG][16], vb[2][16];
    weft_data *da[NG], *db[2];
    for (unsigned k = 0; k < NG; k++) {
        for (unsigned i = 0; i < 16; i++)
            va[k][i] = 1;
        CHECK_OK(weft_data_register(rt, va[k], sizeof va[k], &da[k]));
    }
    for (unsigned k = 0; k < 2; k++) {
        for (unsigned i = 0; i < 16; i++)
            vb[k][i] = 1;
        CHECK_OK(weft_data_register(rt, vb[k], sizeof vb[k], &db[k]));
    }
    unsigned rounds = test_small() ? 8 : 20;
    poster pa = {ca, da, NG, rounds}, pb = {cb, db, 2, rounds};
    pthread_t ta, tb;
    CHECK(pthread_create(&ta, NULL, post_thread, &pa) == 0);
    CHECK(pthread_create(&tb, NULL, post_thread, &pb) == 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CHECK_OK(weft_comm_destroy(ca)); /* waits for its operations */
    CHECK_OK(weft_comm_destroy(cb));
    CHECK_OK(weft_wait_all(rt));
    for (unsigned k = 0; k < NG; k++)
        CHECK_OK(weft_data_unregister(da[k]));
    for (unsigned k = 0; k < 2; k++)
        CHECK_OK(weft_data_unregister(db[k]));
    uint64_t wa = 1, wb = 1;
    for (unsigned i = 0; i < rounds; i++) {
        wa *= NG;
        wb *= 2;
    }
    for (unsigned k = 0; k < NG; k++)
        CHECKF(va[k][0] == wa && va[k][15] == wa, "member %u: %llu, want %llu", k, (unsigned long long)va[k][0],
               (unsigned long long)wa);
    CHECK(vb[0][3] == wb && vb[1][3] == wb);
    CHECK_OK(weft_runtime_destroy(rt));
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    test_watchdog(240);
    test_collectives(false);
    test_collectives(true);
    test_ring();
    test_halo(false);
    test_halo(true);
    test_grid();
    test_misuse();
    test_sets();
    test_faults();
    test_threads();
    printf("test_comm: ok\n");
    return 0;
}
