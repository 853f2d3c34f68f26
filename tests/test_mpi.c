/* Communication across MPI ranks, run as `mpirun -np 2`: one runtime per
 * rank (cpu + 2 virtual GPUs), a communicator over the ranks; every
 * collective for every operator and type at sizes 0, 1, odd and large, in
 * place and not, inputs made on a GPU and results read back on one, against
 * a sequential computation bit for bit (every rank computes every rank's
 * inputs); operations whose tasks become ready in opposite orders on the
 * two ranks (started in post order all the same); a ring exchange and a
 * strided one (a column); bad arguments; on ranks x GPUs (2 x 2 virtual
 * GPUs, and 2 + 1) reduce, all-gather and reduce-scatter for every operator
 * over int32, int64, float and double at counts 0, 1, odd and large,
 * reduce's root on every member, against a sequential fold (floating-point
 * sums: each rank's, then the ranks'), and their misuse; and last, an
 * operation cancelled on one rank: the other fails after its timeout with a
 * message, and nothing hangs. */
#include "check.h"
#include "mpi_check.h"
#include "comm_check.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>


static void one(weft_runtime *rt, weft_comm *c, unsigned op, unsigned key, size_t count, bool in_place,
                unsigned root, bool via_gpu, uint64_t seed) {
    unsigned n = (unsigned)nranks, me = (unsigned)rank;
    size_t E = tsize(key);
    size_t in_b = (op == WEFT_COLL_REDUCE_SCATTER ? count * n : count) * E;
    size_t out_b = (op == WEFT_COLL_ALLGATHER ? count * n : count) * E;
    size_t rb = (in_place ? (in_b > out_b ? in_b : out_b) : out_b) + E; /* one element more: kept */
    char *input[8], *send = malloc(in_b + 1), *recv = malloc(rb), *want = malloc(rb), *got = malloc(rb);
    for (unsigned k = 0; k < n; k++) {
        input[k] = malloc(in_b + 1);
        for (size_t i = 0; i < in_b / E; i++)
            value(key, k, i, seed, input[k] + i * E);
    }
    memset(recv, 0x5a, rb);
    memcpy(want, recv, rb);
    comm_oracle(op, key, count, n, root, in_place, (const char *const *)input, me, want);
    memcpy(in_place ? recv : send, input[me], in_b);
    weft_data *sd, *rd;
    CHECK_OK(weft_data_register(rt, send, in_b ? in_b : 1, &sd));
    CHECK_OK(weft_data_register(rt, recv, rb, &rd));
    gpu_job fill = {NULL, in_b, input[me], NULL}, back = {NULL, rb, NULL, got};
    if (via_gpu && in_b) { /* the input made on a GPU: brought to the host for MPI */
        memset(in_place ? recv : send, 0, in_b);
        gpu_task(rt, me % 2, in_place ? rd : sd, &fill, NULL);
    }
    weft_data *sv[8] = {0}, *rv[8] = {0};
    sv[me] = sd;
    rv[me] = rd;
    weft_task *t = post_coll(c, op, key, count, root, in_place ? NULL : sv, rv);
    if (via_gpu)
        gpu_task(rt, (me + 1) % 2, rd, &back, NULL);
    CHECKF(weft_task_wait(t) == 0, "rank %d op %u key 0x%x count %zu: %s", rank, op, key, count, weft_last_error());
    weft_task_release(t);
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_unregister(sd));
    CHECK_OK(weft_data_unregister(rd));
    bool writes = op != WEFT_COLL_REDUCE || me == root || in_place;
    if (writes) {
        CHECKF(memcmp(recv, want, rb) == 0, "rank %d: op %u key 0x%x count %zu in_place %d differs", rank, op, key,
               count, in_place);
        if (via_gpu)
            CHECKF(memcmp(got, want, rb) == 0, "rank %d: op %u read on a GPU differs", rank, op);
    }
    CHECK(in_place || memcmp(send, input[me], in_b) == 0);
    for (unsigned k = 0; k < n; k++)
        free(input[k]);
    free(send);
    free(recv);
    free(want);
    free(got);
}

static void test_collectives(weft_runtime *rt, weft_comm *c) {
    test_step("collectives across ranks");
    size_t sizes[] = {0, 1, 1001, 65537};
    uint64_t seed = 100;
    for (unsigned s = 0; s < 4; s++)
        for (unsigned op = WEFT_COLL_ALLREDUCE; op <= WEFT_COLL_REDUCE_SCATTER; op++) {
            bool reduces = op == WEFT_COLL_ALLREDUCE || op == WEFT_COLL_REDUCE || op == WEFT_COLL_REDUCE_SCATTER;
            for (unsigned ti = 0; ti < 6; ti++)
                for (unsigned oi = 0; oi < (reduces ? 3u : 1u); oi++) {
                    if ((!reduces && ti % 3 != 0) || (s == 3 && (ti % 2 || oi)))
                        continue;
                    unsigned key = TYPES[ti] | (reduces ? OPS[oi] : 0);
                    seed++;
                    one(rt, c, op, key, sizes[s], false, (unsigned)(seed % (uint64_t)nranks), (seed & 1) != 0, seed);
                    if (op <= WEFT_COLL_REDUCE)
                        one(rt, c, op, key, sizes[s], true, (unsigned)((seed + 1) % (uint64_t)nranks),
                            (seed & 2) != 0, seed);
                }
        }
}

/* Two all-reduces whose tasks become ready in opposite orders on the two
 * ranks (each waits for a slow task on one rank only): started in post
 * order everywhere, so they match. */
static int slow_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    sleep_ms(200);
    return 0;
}

static void test_order(weft_runtime *rt, weft_comm *c) {
    test_step("operations ready in opposite orders");
    int64_t a[4] = {rank + 1, 1, 1, 1}, b[4] = {10 * (rank + 1), 1, 1, 1};
    weft_data *da, *db;
    CHECK_OK(weft_data_register(rt, a, sizeof a, &da));
    CHECK_OK(weft_data_register(rt, b, sizeof b, &db));
    /* rank 0: a's writer is slow; rank 1: b's */
    weft_access w = {rank == 0 ? da : db, WEFT_RW};
    test_spawn_at(rt, "cpu", 0, slow_body, NULL, &w, 1, false);
    weft_data *va[8] = {0}, *vb[8] = {0};
    va[rank] = da;
    vb[rank] = db;
    weft_coll o;
    weft_coll_init(&o);
    o.op = WEFT_COLL_ALLREDUCE;
    o.type = WEFT_RED_I64 | WEFT_RED_SUM;
    o.count = 4;
    o.recv = va;
    CHECK_OK(weft_comm_post(c, &o, NULL));
    o.recv = vb;
    CHECK_OK(weft_comm_post(c, &o, NULL));
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_unregister(da));
    CHECK_OK(weft_data_unregister(db));
    int64_t sa = 0, sb = 0;
    for (int r = 0; r < nranks; r++) {
        sa += r + 1;
        sb += 10 * (r + 1);
    }
    CHECKF(a[0] == sa && b[0] == sb && a[3] == nranks, "rank %d: %lld %lld", rank, (long long)a[0], (long long)b[0]);
}

/* A ring (each rank sends its row to the next) and a column: rank r sends
 * column 1 of its 8 x 8 block to the next rank's column 0 (strided). */
static void test_exchange(weft_runtime *rt, weft_comm *c) {
    test_step("exchanges across ranks");
    enum { R = 8 };
    int32_t blk[R][R];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < R; j++)
            blk[i][j] = rank * 1000 + i * R + j;
    weft_data *d;
    CHECK_OK(weft_data_register(rt, blk, sizeof blk, &d));
    weft_data *h[8] = {0};
    h[rank] = d;
    weft_xfer x[16];
    size_t nx = 0;
    for (int r = 0; r < nranks; r++) { /* the whole group, as every rank passes it */
        unsigned to = (unsigned)((r + 1) % nranks);
        /* row 1 of r -> row 7 of next (but column 0); column 1 of r -> column
         * 0 of next (but row 7: nothing read is written) */
        x[nx++] = (weft_xfer){(unsigned)r, to, h[r], (R + 1) * 4, 0, h[to], (7 * R + 1) * 4, 0, (R - 1) * 4, 0};
        x[nx++] = (weft_xfer){(unsigned)r, to, h[r], 4, R * 4, h[to], 0, R * 4, 4, R - 1};
    }
    CHECKF(weft_comm_exchange(c, x, nx, "ring", NULL) == 0, "%s", weft_last_error());
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_unregister(d));
    int prev = (rank + nranks - 1) % nranks;
    for (int j = 1; j < R; j++)
        CHECKF(blk[7][j] == prev * 1000 + 1 * R + j, "rank %d row 7 col %d: %d", rank, j, blk[7][j]);
    for (int i = 0; i < R - 1; i++)
        CHECKF(blk[i][0] == prev * 1000 + i * R + 1, "rank %d col 0 row %d: %d", rank, i, blk[i][0]);
    CHECK(blk[R - 1][0] == rank * 1000 + (R - 1) * R);
    CHECK(blk[3][3] == rank * 1000 + 3 * R + 3);
}

static int refill_body(weft_ctx *ctx, void *arg) {
    (void)arg;
    double *p = weft_ctx_data(ctx, 0);
    for (int i = 0; i < 4; i++)
        p[i] = 5 + i;
    return 0;
}

static void test_misuse(weft_runtime *rt, weft_comm *c) {
    test_step("bad arguments across ranks");
    weft_comm *bad;
    MPI_Comm world = MPI_COMM_WORLD;
    CHECK_ERR(weft_comm_create_mpi(rt, &world, NULL, NULL), WEFT_EINVAL);
    CHECK_OK(weft_mpi_init()); /* running already, with MPI_THREAD_MULTIPLE: nothing to do */
    unsigned g[1] = {0};
    weft_comm_config cfg;
    weft_comm_config_init(&cfg);
    g[0] = 7; /* every rank names a GPU it lacks: each fails (after learning the others did) */
    cfg.gpus = g;
    cfg.ngpus = 1;
    CHECK_ERR(weft_comm_create_mpi(rt, &world, &cfg, &bad), WEFT_ENODEV);
    CHECKF(strstr(weft_last_error(), "GPU 7") != NULL, "%s", weft_last_error());
    weft_coll o;
    weft_coll_init(&o);
    o.op = WEFT_COLL_BROADCAST;
    o.type = WEFT_RED_F64;
    o.root = (unsigned)nranks;
    weft_data *none[8] = {0};
    o.recv = none;
    CHECK_ERR(weft_comm_post(c, &o, NULL), WEFT_EINVAL);
    CHECKF(strstr(weft_last_error(), "root 2") != NULL, "%s", weft_last_error());
    o.root = 0;
    o.count = 1;
    CHECK_ERR(weft_comm_post(c, &o, NULL), WEFT_EINVAL); /* this rank's recv is missing */
    CHECKF(strstr(weft_last_error(), "is NULL") != NULL, "%s", weft_last_error());
    CHECK(weft_comm_size(c) == (unsigned)nranks && weft_comm_rank(c) == (unsigned)rank);
    /* The ranks disagree on a collective (its count): it fails on every
     * rank, saying so, and the communicator goes on. */
    double v[4] = {1, 2, 3, 4};
    weft_data *d;
    CHECK_OK(weft_data_register(rt, v, sizeof v, &d));
    weft_data *dv[8] = {0};
    dv[rank] = d;
    weft_task *t = post_coll(c, WEFT_COLL_ALLREDUCE, WEFT_RED_F64 | WEFT_RED_SUM, rank == 0 ? 4 : 3, 0, NULL, dv);
    CHECK_RC(weft_task_wait(t), WEFT_ETASKFAILED);
    weft_task_release(t);
    CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED);
    CHECK(v[0] == 1 && v[3] == 4);
    weft_access w = {d, WEFT_W}; /* a writer makes it valid again */
    test_spawn_at(rt, "cpu", 0, refill_body, v, &w, 1, false);
    t = post_coll(c, WEFT_COLL_ALLREDUCE, WEFT_RED_F64 | WEFT_RED_SUM, 4, 0, NULL, dv);
    CHECK_OK(weft_task_wait(t));
    weft_task_release(t);
    CHECK_OK(weft_data_unregister(d));
    CHECKF(v[0] == 2 * 5 && v[3] == 2 * 8, "rank %d: %g %g", rank, v[0], v[3]);
}

/* A communicator over 2 ranks x 2 virtual GPUs (4 members, rank 0's
 * first): all-reduce (integers exactly; doubles as each rank's sum then
 * the ranks'), broadcast from a GPU of either rank, and a ring exchange
 * through all four members, the inputs made on the GPUs. */
static void test_hybrid(weft_runtime *rt) {
    test_step("ranks x GPUs");
    unsigned g[2] = {0, 1};
    weft_comm_config cfg;
    weft_comm_config_init(&cfg);
    cfg.gpus = g;
    cfg.ngpus = 2;
    weft_comm *c;
    CHECKF(weft_comm_create_mpi(rt, NULL, &cfg, &c) == 0, "%s", weft_last_error());
    CHECK(weft_comm_size(c) == 4 && weft_comm_rank(c) == (unsigned)(2 * rank));
    enum { N = 777 };
    int64_t iv[2][N], want_i[N];
    double dv[2][N], ds[2][N], want_d[N];
    weft_data *di[4] = {0}, *dd[4] = {0}, *dsd[4] = {0};
    gpu_job fills[2];
    for (int j = 0; j < 2; j++) {
        int k = 2 * rank + j;
        for (int i = 0; i < N; i++) {
            iv[j][i] = (int64_t)(k * 1000003 + i);
            ds[j][i] = (double)(k + 1) / 3.0 + i;
            dv[j][i] = 0;
        }
        CHECK_OK(weft_data_register(rt, iv[j], sizeof iv[j], &di[k]));
        CHECK_OK(weft_data_register(rt, dv[j], sizeof dv[j], &dd[k]));
        CHECK_OK(weft_data_register(rt, ds[j], sizeof ds[j], &dsd[k]));
        fills[j] = (gpu_job){NULL, sizeof iv[j], iv[j], NULL}; /* rewrites the same values on GPU j */
        gpu_task(rt, (unsigned)j, di[k], &fills[j], NULL);
    }
    for (int i = 0; i < N; i++) {
        want_i[i] = 0;
        double r0 = 0, r1 = 0;
        for (int k = 0; k < 4; k++)
            want_i[i] += (int64_t)(k * 1000003 + i);
        r0 = (1.0 / 3.0 + i) + (2.0 / 3.0 + i);
        r1 = (3.0 / 3.0 + i) + (4.0 / 3.0 + i);
        want_d[i] = r0 + r1;
    }
    weft_task *t = post_coll(c, WEFT_COLL_ALLREDUCE, WEFT_RED_I64 | WEFT_RED_SUM, N, 0, NULL, di);
    CHECKF(weft_task_wait(t) == 0, "%s", weft_last_error());
    weft_task_release(t);
    t = post_coll(c, WEFT_COLL_ALLREDUCE, WEFT_RED_F64 | WEFT_RED_SUM, N, 0, dsd, dd);
    CHECKF(weft_task_wait(t) == 0, "%s", weft_last_error());
    weft_task_release(t);
    CHECK_OK(weft_wait_all(rt));
    for (int j = 0; j < 2; j++) {
        CHECK_OK(weft_data_unregister(di[2 * rank + j]));
        CHECK_OK(weft_data_unregister(dd[2 * rank + j]));
        for (int i = 0; i < N; i++) {
            CHECKF(iv[j][i] == want_i[i], "rank %d gpu %d element %d: %lld, want %lld", rank, j, i,
                   (long long)iv[j][i], (long long)want_i[i]);
            CHECKF(memcmp(&dv[j][i], &want_d[i], sizeof(double)) == 0, "rank %d gpu %d element %d: %.17g, want %.17g",
                   rank, j, i, dv[j][i], want_d[i]);
        }
    }
    /* broadcast from member 3 (rank 1's second GPU), then from member 0 */
    for (unsigned root = 3;; root = 0) {
        for (int j = 0; j < 2; j++) {
            int k = 2 * rank + j;
            for (int i = 0; i < N; i++)
                iv[j][i] = (int64_t)(k * 100 + i);
            CHECK_OK(weft_data_register(rt, iv[j], sizeof iv[j], &di[k]));
        }
        weft_coll o;
        weft_coll_init(&o);
        o.op = WEFT_COLL_BROADCAST;
        o.type = WEFT_RED_I64;
        o.count = N;
        o.root = root;
        o.recv = di;
        CHECKF(weft_comm_post(c, &o, &t) == 0, "%s", weft_last_error());
        CHECKF(weft_task_wait(t) == 0, "%s", weft_last_error());
        weft_task_release(t);
        CHECK_OK(weft_wait_all(rt));
        for (int j = 0; j < 2; j++) {
            CHECK_OK(weft_data_unregister(di[2 * rank + j]));
            for (int i = 0; i < N; i++)
                CHECKF(iv[j][i] == (int64_t)(root * 100 + i), "broadcast from %u: rank %d gpu %d: %lld", root, rank,
                       j, (long long)iv[j][i]);
        }
        if (root == 0)
            break;
    }
    /* a ring through the four members: member k's first half to k+1's second */
    for (int j = 0; j < 2; j++) {
        int k = 2 * rank + j;
        for (int i = 0; i < N; i++)
            iv[j][i] = i < N / 2 ? (int64_t)(k * 100 + i) : -1;
        CHECK_OK(weft_data_register(rt, iv[j], sizeof iv[j], &di[k]));
    }
    weft_xfer x[4];
    for (unsigned k = 0; k < 4; k++)
        x[k] = (weft_xfer){k, (k + 1) % 4, di[k], 0, 0, di[(k + 1) % 4], (N / 2) * 8, 0, (N / 2) * 8, 0};
    CHECKF(weft_comm_exchange(c, x, 4, "ring", &t) == 0, "%s", weft_last_error());
    CHECKF(weft_task_wait(t) == 0, "%s", weft_last_error());
    weft_task_release(t);
    CHECK_OK(weft_wait_all(rt));
    for (int j = 0; j < 2; j++) {
        int k = 2 * rank + j, from = (k + 3) % 4;
        CHECK_OK(weft_data_unregister(di[k]));
        for (int i = 0; i < N / 2; i++)
            CHECKF(iv[j][N / 2 + i] == (int64_t)(from * 100 + i) && iv[j][i] == (int64_t)(k * 100 + i),
                   "ring: rank %d gpu %d element %d", rank, j, i);
    }
    CHECK_OK(weft_comm_destroy(c));
    for (int j = 0; j < 2; j++)
        CHECK_OK(weft_data_unregister(dsd[2 * rank + j]));
}

/* ---- Reduce, all-gather and reduce-scatter on ranks x GPUs -------------- */

/* A communicator over GPUs gpus[0 .. nl-1] of this rank (the ranks may
 * differ), its members numbered rank by rank: rank r's from base[r]. */
typedef struct hyb {
    weft_comm *c;
    unsigned n, nl, first;
    const unsigned *gpus;
    unsigned base[3];
} hyb;

static void hyb_open(weft_runtime *rt, hyb *h, const unsigned *gpus, unsigned nl) {
    weft_comm_config cfg;
    weft_comm_config_init(&cfg);
    cfg.gpus = gpus;
    cfg.ngpus = nl;
    CHECKF(weft_comm_create_mpi(rt, NULL, &cfg, &h->c) == 0, "%s", weft_last_error());
    unsigned counts[2], mine = nl;
    MPI_Allgather(&mine, 1, MPI_UNSIGNED, counts, 1, MPI_UNSIGNED, MPI_COMM_WORLD);
    h->base[0] = 0;
    for (int r = 0; r < nranks; r++)
        h->base[r + 1] = h->base[r] + counts[r];
    h->n = h->base[nranks];
    h->nl = nl;
    h->first = h->base[rank];
    h->gpus = gpus;
    CHECK(weft_comm_size(h->c) == h->n && weft_comm_rank(h->c) == h->first);
}

static bool float_sum(unsigned key) {
    unsigned t = key & WEFT_RED_TYPE_MASK;
    return (key & WEFT_RED_OP_MASK) == WEFT_RED_SUM && (t == WEFT_RED_F32 || t == WEFT_RED_F64);
}

/* The element at byte off of a sum across ranks x GPUs: each rank's
 * members folded in member order, then those sums in rank order. */
static void rank_fold(unsigned key, const char *const *input, const unsigned *base, size_t off, char *out) {
    size_t E = tsize(key);
    char acc[8], part[8];
    for (int r = 0; r < nranks; r++) {
        memcpy(part, input[base[r]] + off, E);
        for (unsigned k = base[r] + 1; k < base[r + 1]; k++)
            apply(key, part, input[k] + off);
        if (r == 0)
            memcpy(acc, part, E);
        else
            apply(key, acc, part);
    }
    memcpy(out, acc, E);
}

/* One collective on h: every member's input made by a task on its GPU,
 * its result read back by a task on the other GPU and in host memory,
 * against a sequential fold (integers, min and max: in member order; a
 * floating-point sum: rank_fold).  null_recv: REDUCE's recv NULL off the
 * root. */
static void hyb_one(weft_runtime *rt, const hyb *h, unsigned op, unsigned key, size_t count, unsigned root,
                    bool in_place, bool null_recv, uint64_t seed) {
    unsigned n = h->n, nl = h->nl;
    size_t E = tsize(key);
    size_t in_b = (op == WEFT_COLL_REDUCE_SCATTER ? count * n : count) * E;
    size_t out_b = (op == WEFT_COLL_ALLGATHER ? count * n : count) * E;
    size_t rb = (in_place && in_b > out_b ? in_b : out_b) + E; /* one element more: kept */
    char *input[8], *send[2], *recv[2], *want[2], *got[2];
    for (unsigned k = 0; k < n; k++) {
        input[k] = malloc(in_b + 1);
        for (size_t i = 0; i < in_b / E; i++)
            value(key, k, i, seed, input[k] + i * E);
    }
    weft_data *sv[8] = {0}, *rv[8] = {0};
    gpu_job fill[2], back[2];
    bool skip_recv[2];
    for (unsigned j = 0; j < nl; j++) {
        unsigned g = h->first + j;
        send[j] = malloc(in_b + 1);
        recv[j] = malloc(rb);
        want[j] = malloc(rb);
        got[j] = malloc(rb);
        memset(recv[j], 0x5a, rb);
        memset(send[j], 0, in_b + 1);
        memcpy(want[j], recv[j], rb);
        if (in_place)
            memset(recv[j], 0, in_b);
        comm_oracle(op, key, count, n, root, in_place, (const char *const *)input, g, want[j]);
        bool reduces = op != WEFT_COLL_ALLGATHER;
        bool writes = op != WEFT_COLL_REDUCE || g == root;
        if (reduces && writes && float_sum(key))
            for (size_t i = 0; i < count; i++)
                rank_fold(key, (const char *const *)input, h->base,
                          (op == WEFT_COLL_REDUCE_SCATTER ? g * count + i : i) * E, want[j] + i * E);
        skip_recv[j] = null_recv && !in_place && op == WEFT_COLL_REDUCE && g != root;
        CHECK_OK(weft_data_register(rt, send[j], in_b + 1, &sv[g]));
        if (!skip_recv[j])
            CHECK_OK(weft_data_register(rt, recv[j], rb, &rv[g]));
        fill[j] = (gpu_job){NULL, in_b, input[g], NULL};
        back[j] = (gpu_job){NULL, rb, NULL, got[j]};
        if (in_b) /* the input made on the member's GPU */
            gpu_task(rt, h->gpus[j], in_place ? rv[g] : sv[g], &fill[j], NULL);
    }
    weft_task *t = post_coll(h->c, op, key, count, root, in_place ? NULL : sv, rv);
    for (unsigned j = 0; j < nl; j++)
        if (!skip_recv[j])
            gpu_task(rt, (h->gpus[j] + 1) % 2, rv[h->first + j], &back[j], NULL);
    CHECKF(weft_task_wait(t) == 0, "rank %d op %u key 0x%x count %zu root %u: %s", rank, op, key, count, root,
           weft_last_error());
    weft_task_release(t);
    CHECKF(weft_wait_all(rt) == 0, "%s", weft_last_error());
    for (unsigned j = 0; j < nl; j++) {
        unsigned g = h->first + j;
        CHECK_OK(weft_data_unregister(sv[g]));
        if (!skip_recv[j]) {
            CHECK_OK(weft_data_unregister(rv[g]));
            size_t bad = rb;
            for (size_t i = 0; i < rb && bad == rb; i++)
                if (recv[j][i] != want[j][i])
                    bad = i;
            CHECKF(bad == rb, "rank %d member %u: op %u key 0x%x count %zu root %u in_place %d: byte %zu differs "
                              "(of %zu)", rank, g, op, key, count, root, in_place, bad, rb);
            CHECKF(memcmp(got[j], want[j], rb) == 0, "rank %d member %u: op %u key 0x%x count %zu read on a GPU "
                                                     "differs", rank, g, op, key, count);
        }
        CHECK(in_place || memcmp(send[j], input[g], in_b) == 0);
        free(send[j]);
        free(recv[j]);
        free(want[j]);
        free(got[j]);
    }
    for (unsigned k = 0; k < n; k++)
        free(input[k]);
}

/* Every new collective for every operator over int32, int64, float and
 * double at counts 0, 1, odd and large; reduce's root on every member
 * (either rank, first GPU or not), in place or not, recv NULL off the
 * root or not. */
static void hyb_all(weft_runtime *rt, const hyb *h, bool large) {
    static const unsigned types[4] = {WEFT_RED_I32, WEFT_RED_I64, WEFT_RED_F32, WEFT_RED_F64};
    size_t sizes[] = {0, 1, 1001, 65537};
    uint64_t seed = 7000 + h->n;
    unsigned ops[3] = {WEFT_COLL_REDUCE, WEFT_COLL_ALLGATHER, WEFT_COLL_REDUCE_SCATTER};
    for (unsigned s = 0; s < (large ? 4u : 3u); s++)
        for (unsigned oi = 0; oi < 3; oi++) {
            unsigned op = ops[oi];
            bool reduces = op != WEFT_COLL_ALLGATHER;
            for (unsigned ti = 0; ti < 4; ti++)
                for (unsigned ri = 0; ri < (reduces ? 3u : 1u); ri++) {
                    unsigned key = types[ti] | (reduces ? OPS[ri] : 0);
                    seed++;
                    unsigned root = (unsigned)(seed % h->n);
                    bool in_place = op == WEFT_COLL_REDUCE && (seed & 1);
                    hyb_one(rt, h, op, key, sizes[s], root, in_place, (seed & 2) != 0, seed);
                }
        }
    for (unsigned root = 0; root < h->n; root++) /* every root, in place and not */
        for (int ip = 0; ip < 2; ip++)
            hyb_one(rt, h, WEFT_COLL_REDUCE, WEFT_RED_F64 | WEFT_RED_SUM, 1001, root, ip, !ip, 9100 + root);
}

/* Misuse on ranks x GPUs: refused with a message naming the argument,
 * nothing posted (the operations after it still match across ranks). */
static void hyb_misuse(weft_runtime *rt, const hyb *h) {
    enum { C = 5 };
    double sb[2][4 * C], rbuf[2][4 * C], small[2][C];
    weft_data *sv[8] = {0}, *rv[8] = {0}, *tiny[8] = {0}, *own[2];
    for (unsigned j = 0; j < h->nl; j++) {
        unsigned g = h->first + j;
        for (int i = 0; i < 4 * C; i++)
            sb[j][i] = g + i;
        CHECK_OK(weft_data_register(rt, sb[j], sizeof sb[j], &sv[g]));
        CHECK_OK(weft_data_register(rt, rbuf[j], sizeof rbuf[j], &rv[g]));
        own[j] = rv[g];
        CHECK_OK(weft_data_register(rt, small[j], sizeof small[j], &tiny[g]));
    }
    weft_coll o;
    weft_coll_init(&o);
    o.type = WEFT_RED_F64 | WEFT_RED_SUM;
    o.count = C;
    o.send = sv;
    o.recv = rv;
    char want[64];
    o.op = WEFT_COLL_REDUCE;
    o.root = h->n;
    CHECK_ERR(weft_comm_post(h->c, &o, NULL), WEFT_EINVAL);
    snprintf(want, sizeof want, "root %u", h->n);
    CHECKF(strstr(weft_last_error(), want) != NULL, "%s", weft_last_error());
    o.root = 0;
    o.recv = NULL;
    CHECK_ERR(weft_comm_post(h->c, &o, NULL), WEFT_EINVAL);
    CHECKF(strstr(weft_last_error(), "recv is NULL") != NULL, "%s", weft_last_error());
    o.recv = rv;
    o.root = h->first + h->nl - 1; /* this rank's last member: its recv missing */
    rv[o.root] = NULL;
    CHECK_ERR(weft_comm_post(h->c, &o, NULL), WEFT_EINVAL);
    snprintf(want, sizeof want, "recv of member %u is NULL", o.root);
    CHECKF(strstr(weft_last_error(), want) != NULL, "%s", weft_last_error());
    rv[o.root] = tiny[o.root]; /* too small for an all-gather (n * C doubles) */
    o.op = WEFT_COLL_ALLGATHER;
    o.type = WEFT_RED_F64;
    CHECK_ERR(weft_comm_post(h->c, &o, NULL), WEFT_EINVAL);
    snprintf(want, sizeof want, "recv of member %u has %zu bytes, %zu needed", o.root, sizeof small[0],
             (size_t)h->n * C * 8);
    CHECKF(strstr(weft_last_error(), want) != NULL, "%s", weft_last_error());
    rv[o.root] = rv[h->first]; /* two members, one recv */
    if (h->nl > 1) {
        CHECK_ERR(weft_comm_post(h->c, &o, NULL), WEFT_EINVAL);
        CHECKF(strstr(weft_last_error(), "name the same handle") != NULL, "%s", weft_last_error());
    }
    o.send = NULL;
    CHECK_ERR(weft_comm_post(h->c, &o, NULL), WEFT_EINVAL);
    CHECKF(strstr(weft_last_error(), "needs send buffers") != NULL, "%s", weft_last_error());
    o.op = WEFT_COLL_REDUCE_SCATTER;
    o.type = WEFT_RED_F64 | WEFT_RED_SUM;
    CHECK_ERR(weft_comm_post(h->c, &o, NULL), WEFT_EINVAL);
    CHECKF(strstr(weft_last_error(), "needs send buffers") != NULL, "%s", weft_last_error());
    o.send = tiny; /* each send needs n * C */
    CHECK_ERR(weft_comm_post(h->c, &o, NULL), WEFT_EINVAL);
    snprintf(want, sizeof want, "send of member %u has %zu bytes, %zu needed", h->first, sizeof small[0],
             (size_t)h->n * C * 8);
    CHECKF(strstr(weft_last_error(), want) != NULL, "%s", weft_last_error());
    o.send = sv;
    o.type = WEFT_RED_F64; /* no operator */
    CHECK_ERR(weft_comm_post(h->c, &o, NULL), WEFT_EINVAL);
    CHECKF(strstr(weft_last_error(), "needs an operator") != NULL, "%s", weft_last_error());
    o.type = WEFT_RED_F64 | WEFT_RED_SUM;
    o.op = WEFT_COLL_ALLGATHER; /* an all-gather takes no operator */
    CHECK_ERR(weft_comm_post(h->c, &o, NULL), WEFT_EINVAL);
    CHECKF(strstr(weft_last_error(), "not an operator") != NULL, "%s", weft_last_error());
    CHECK_OK(weft_wait_all(rt)); /* nothing was posted */
    for (unsigned j = 0; j < h->nl; j++) {
        unsigned g = h->first + j;
        CHECK_OK(weft_data_unregister(sv[g]));
        CHECK_OK(weft_data_unregister(tiny[g]));
    }
    for (unsigned j = 0; j < h->nl; j++)
        CHECK_OK(weft_data_unregister(own[j]));
}

static void test_hybrid_more(weft_runtime *rt) {
    test_step("ranks x GPUs: reduce, all-gather, reduce-scatter");
    static const unsigned both[2] = {0, 1}, second[1] = {1};
    hyb h;
    hyb_open(rt, &h, both, 2); /* 2 ranks x 2 GPUs */
    hyb_misuse(rt, &h);
    hyb_all(rt, &h, true);
    CHECK_OK(weft_comm_destroy(h.c));
    test_step("ranks x GPUs, uneven: rank 0 on GPUs 0 and 1, rank 1 on GPU 1");
    hyb_open(rt, &h, rank == 0 ? both : second, rank == 0 ? 2 : 1);
    hyb_misuse(rt, &h);
    hyb_all(rt, &h, false);
    CHECK_OK(weft_comm_destroy(h.c));
}

static int fail_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    return 3;
}

/* Last: on rank 1 the input's writer fails, so its all-reduce is cancelled
 * and never starts there; rank 0's fails after the timeout. */
static void test_fault(weft_runtime *rt) {
    test_step("a rank whose operation is cancelled");
    weft_comm *c;
    weft_comm_config cfg;
    weft_comm_config_init(&cfg);
    cfg.timeout_ns = 1000000000ull;
    CHECKF(weft_comm_create_mpi(rt, NULL, &cfg, &c) == 0, "%s", weft_last_error()); /* NULL: the world */
    CHECK(weft_comm_size(c) == 2);
    double v[4] = {1, 2, 3, 4};
    weft_data *d;
    CHECK_OK(weft_data_register(rt, v, sizeof v, &d));
    if (rank == 1) {
        weft_access w = {d, WEFT_RW};
        test_spawn_at(rt, "cpu", 0, fail_body, NULL, &w, 1, false);
    }
    weft_data *dv[8] = {0};
    dv[rank] = d;
    weft_coll o;
    weft_coll_init(&o);
    o.op = WEFT_COLL_ALLREDUCE;
    o.type = WEFT_RED_F64 | WEFT_RED_SUM;
    o.count = 4;
    o.recv = dv;
    o.name = "half";
    weft_task *t;
    CHECK_OK(weft_comm_post(c, &o, &t));
    uint64_t t0 = now_ns();
    int rc = weft_task_wait(t);
    CHECKF(rc == (rank == 1 ? WEFT_ECANCELLED : WEFT_ETASKFAILED), "rank %d: %d", rank, rc);
    CHECKF(now_ns() - t0 < 20000000000ull, "rank %d waited %.1f s", rank, (double)(now_ns() - t0) / 1e9);
    weft_task_release(t);
    CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED);
    double v2[4] = {0};
    weft_data *d2;
    CHECK_OK(weft_data_register(rt, v2, sizeof v2, &d2));
    if (rank == 0) { /* broken from now on: fails at once (its data fresh) */
        dv[0] = d2;
        o.name = "after";
        uint64_t t1 = now_ns();
        CHECK_OK(weft_comm_post(c, &o, &t));
        CHECK_RC(weft_task_wait(t), WEFT_ETASKFAILED);
        CHECK(now_ns() - t1 < 500000000ull);
        weft_task_release(t);
        CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED);
    }
    CHECK_OK(weft_comm_destroy(c));
    CHECK_OK(weft_data_unregister(d));
    CHECK_OK(weft_data_unregister(d2));
}

int main(int argc, char **argv) {
    if (test_mpi_start(&argc, &argv, 240) != 0)
        return TEST_SKIP;
    weft_runtime *rt = test_make_devices("cpu,vgpu:2", 2, 0, getenv("WEFT_VGPU_CHECK") != NULL);
    weft_comm *c;
    weft_comm_config cfg;
    weft_comm_config_init(&cfg);
    cfg.timeout_ns = 60000000000ull;
    MPI_Comm world = MPI_COMM_WORLD;
    CHECKF(weft_comm_create_mpi(rt, &world, &cfg, &c) == 0, "%s", weft_last_error());
    CHECK(weft_comm_size(c) == 2 && weft_comm_rank(c) == (unsigned)rank);
    test_collectives(rt, c);
    test_order(rt, c);
    test_exchange(rt, c);
    test_misuse(rt, c);
    CHECK_OK(weft_comm_destroy(c));
    test_hybrid(rt);
    test_hybrid_more(rt);
    test_fault(rt);
    CHECK_OK(weft_runtime_destroy(rt));
    MPI_Barrier(MPI_COMM_WORLD);
    printf("test_mpi: rank %d ok\n", rank);
    MPI_Finalize();
    return 0;
}
