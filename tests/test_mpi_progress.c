/* How MPI operations progress, run as `mpirun -np 2`: bodies start their
 * operations themselves when next in number, and whoever polls (idle
 * workers, waits, the communicator's own thread as the fallback) completes
 * them.  One runtime per rank ("cpu", 2 workers), a communicator over the
 * ranks:
 *   - operations whose bodies ran out of number order (the first one's
 *     input not yet written) wait, started neither early nor at all, and
 *     start in number order once it is (collectives of different
 *     signatures among them: an order mixed up between the ranks fails
 *     their checks);
 *   - a ping-pong chain of many exchange tasks, each receive followed by a
 *     host task adding one, ends with the count of every trip;
 *   - an exchange completes while both workers are busy (spinning bodies
 *     that wait for it) and no thread of the program waits in Weft: only
 *     the progress thread polls;
 *   - more communicators than the runtime's poller slots (those without
 *     one progress by their thread alone), twice (slots are reused);
 *   - last, a receive from a rank that never sends, nobody waiting for it:
 *     it still fails after the communicator's timeout (found by a poll),
 *     and the communicator is broken from then on. */
#include "check.h"
#include "mpi_check.h"

#include <mpi.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>


static weft_task_status status_of(weft_task *t) {
    weft_task_status s;
    CHECK_OK(weft_task_status_get(t, &s));
    return s;
}

static atomic_int go;

/* Writes its buffer once the main thread says go. */
static int gated_writer(weft_ctx *ctx, void *arg) {
    (void)arg;
    int64_t *v = weft_ctx_data(ctx, 0);
    while (!atomic_load(&go))
        sleep_ms(1);
    v[0] = 100 + rank;
    return 0;
}

static weft_task *post(weft_comm *c, unsigned op, unsigned type, size_t count, unsigned root, weft_data *d) {
    weft_data *v[2] = {0};
    v[rank] = d;
    weft_coll o;
    weft_coll_init(&o);
    o.op = op;
    o.type = type;
    o.count = count;
    o.root = root;
    o.recv = v;
    weft_task *t;
    CHECKF(weft_comm_post(c, &o, &t) == 0, "%s", weft_last_error());
    return t;
}

static void test_out_of_order(weft_runtime *rt, weft_comm *c) {
    test_step("bodies out of number order");
    int64_t a[3] = {0, 1, 2}, b[5] = {0}, x[2] = {rank, -1}, g[4] = {-1, -1, -1, -1};
    for (int i = 0; i < 5; i++)
        b[i] = rank == 1 ? 7 * i : -1;
    weft_data *da, *db, *dx, *dg;
    CHECK_OK(weft_data_register(rt, a, sizeof a, &da));
    CHECK_OK(weft_data_register(rt, b, sizeof b, &db));
    CHECK_OK(weft_data_register(rt, x, sizeof x, &dx));
    CHECK_OK(weft_data_register(rt, g, sizeof g, &dg));
    atomic_store(&go, 0);
    weft_access w = {da, WEFT_RW};
    test_spawn_at(rt, "cpu", 0, gated_writer, NULL, &w, 1, false);
    /* number n: waits for its input; n+1..n+3 ready at once */
    weft_task *ta = post(c, WEFT_COLL_ALLREDUCE, WEFT_RED_I64 | WEFT_RED_SUM, 3, 0, da);
    weft_task *tb = post(c, WEFT_COLL_BROADCAST, WEFT_RED_I64, 5, 1, db);
    weft_data *h[2] = {dx, dx};
    weft_xfer xf[2] = {{0, 1, h[0], 0, 0, h[1], 8, 0, 8, 0}, {1, 0, h[1], 0, 0, h[0], 8, 0, 8, 0}};
    weft_task *tx;
    CHECKF(weft_comm_exchange(c, xf, 2, "swap", &tx) == 0, "%s", weft_last_error());
    int64_t gin[2] = {rank * 10, rank * 10 + 1};
    weft_data *dgin;
    CHECK_OK(weft_data_register(rt, gin, sizeof gin, &dgin));
    weft_data *gs[2] = {0}, *gr[2] = {0};
    gs[rank] = dgin;
    gr[rank] = dg;
    weft_coll o;
    weft_coll_init(&o);
    o.op = WEFT_COLL_ALLGATHER;
    o.type = WEFT_RED_I64;
    o.count = 2;
    o.send = gs;
    o.recv = gr;
    weft_task *tg;
    CHECKF(weft_comm_post(c, &o, &tg) == 0, "%s", weft_last_error());
    /* The later ones' bodies run (the second worker is free) and their
     * operations wait: none may start before number n, on either rank. */
    uint64_t t0 = now_ns();
    while ((status_of(tb) != WEFT_TASK_ENQUEUED || status_of(tx) != WEFT_TASK_ENQUEUED ||
            status_of(tg) != WEFT_TASK_ENQUEUED) &&
           now_ns() - t0 < 10000000000ull)
        sleep_ms(1);
    CHECKF(status_of(tb) == WEFT_TASK_ENQUEUED && status_of(tx) == WEFT_TASK_ENQUEUED &&
               status_of(tg) == WEFT_TASK_ENQUEUED,
           "rank %d: the later operations' bodies did not run (%d %d %d)", rank, status_of(tb), status_of(tx),
           status_of(tg));
    MPI_Barrier(MPI_COMM_WORLD); /* both ranks hold them */
    sleep_ms(50);
    CHECKF(status_of(ta) == WEFT_TASK_WAITING || status_of(ta) == WEFT_TASK_READY, "rank %d: %d", rank,
           status_of(ta));
    CHECKF(status_of(tb) == WEFT_TASK_ENQUEUED && status_of(tx) == WEFT_TASK_ENQUEUED &&
               status_of(tg) == WEFT_TASK_ENQUEUED,
           "rank %d: an operation ended before the one numbered before it started", rank);
    atomic_store(&go, 1);
    CHECKF(weft_task_wait(ta) == 0 && weft_task_wait(tb) == 0 && weft_task_wait(tx) == 0 && weft_task_wait(tg) == 0,
           "rank %d: %s", rank, weft_last_error());
    weft_task_release(ta);
    weft_task_release(tb);
    weft_task_release(tx);
    weft_task_release(tg);
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_unregister(da));
    CHECK_OK(weft_data_unregister(db));
    CHECK_OK(weft_data_unregister(dx));
    CHECK_OK(weft_data_unregister(dg));
    CHECK_OK(weft_data_unregister(dgin));
    CHECKF(a[0] == 100 + 101 && a[1] == 2 && a[2] == 4, "rank %d: all-reduce %lld %lld %lld", rank, (long long)a[0],
           (long long)a[1], (long long)a[2]);
    for (int i = 0; i < 5; i++)
        CHECKF(b[i] == 7 * i, "rank %d: broadcast [%d] %lld", rank, i, (long long)b[i]);
    CHECKF(x[0] == rank && x[1] == 1 - rank, "rank %d: exchange %lld %lld", rank, (long long)x[0], (long long)x[1]);
    CHECKF(g[0] == 0 && g[1] == 1 && g[2] == 10 && g[3] == 11, "rank %d: all-gather %lld %lld %lld %lld", rank,
           (long long)g[0], (long long)g[1], (long long)g[2], (long long)g[3]);
}

static int add_one(weft_ctx *ctx, void *arg) {
    (void)arg;
    int64_t *v = weft_ctx_data(ctx, 0);
    v[0]++;
    return 0;
}

static void test_chain(weft_runtime *rt, weft_comm *c) {
    test_step("a ping-pong chain of exchange tasks");
    int trips = test_pick(2000, 300);
    int64_t v = 0;
    weft_data *d;
    CHECK_OK(weft_data_register(rt, &v, sizeof v, &d));
    weft_data *h[2] = {d, d};
    weft_xfer there = {0, 1, h[0], 0, 0, h[1], 0, 0, 8, 0}, back = {1, 0, h[1], 0, 0, h[0], 0, 0, 8, 0};
    weft_access w = {d, WEFT_RW};
    uint64_t t0 = now_ns();
    for (int i = 0; i < trips; i++) {
        CHECKF(weft_comm_exchange(c, &there, 1, "ping", NULL) == 0, "%s", weft_last_error());
        if (rank == 1)
            test_spawn_at(rt, "cpu", 0, add_one, NULL, &w, 1, false);
        CHECKF(weft_comm_exchange(c, &back, 1, "pong", NULL) == 0, "%s", weft_last_error());
        if (rank == 0)
            test_spawn_at(rt, "cpu", 0, add_one, NULL, &w, 1, false);
    }
    CHECKF(weft_wait_all(rt) == 0, "rank %d: %s", rank, weft_last_error());
    double us = (double)(now_ns() - t0) / 1e3 / trips;
    CHECK_OK(weft_data_unregister(d));
    CHECKF(v == (rank == 0 ? 2 * trips : 2 * trips - 1), "rank %d: %lld after %d trips", rank, (long long)v, trips);
    if (rank == 0)
        printf("test_mpi_progress: %d round trips, %.1f us each (with a host task per leg)\n", trips, us);
}

static atomic_int spinning;

/* Spins (holding its worker, polling nothing) until the task it is given
 * is final, for at most 20 s. */
static int spin_until_final(weft_ctx *ctx, void *arg) {
    (void)ctx;
    weft_task *t = arg;
    atomic_fetch_add(&spinning, 1);
    uint64_t t0 = now_ns();
    for (;;) {
        weft_task_status s;
        if (weft_task_status_get(t, &s) != 0)
            return 2;
        if (s == WEFT_TASK_COMPLETED)
            return 0;
        if (s == WEFT_TASK_FAILED || s == WEFT_TASK_CANCELLED || now_ns() - t0 > 20000000000ull)
            return 1;
    }
}

/* Waits for t without waiting in Weft (a wait would poll). */
static weft_task_status final_status(weft_task *t) {
    uint64_t t0 = now_ns();
    weft_task_status s;
    while ((s = status_of(t)) != WEFT_TASK_COMPLETED && s != WEFT_TASK_FAILED && s != WEFT_TASK_CANCELLED &&
           now_ns() - t0 < 30000000000ull)
        sleep_ms(1);
    return s;
}

/* Rank 0 sends 64 KiB (more than an eager message: the send ends only
 * once rank 0 hears back), then keeps both its workers spinning in bodies
 * and its main thread asleep before rank 1 posts the receive: only rank
 * 0's progress thread polls there. */
static void test_busy_workers(weft_runtime *rt, weft_comm *c) {
    test_step("an exchange while every worker is busy");
    static char buf[64 << 10];
    memset(buf, rank == 0 ? 'a' : 0, sizeof buf);
    weft_data *d;
    CHECK_OK(weft_data_register(rt, buf, sizeof buf, &d));
    weft_data *h[2] = {d, d};
    weft_xfer x = {0, 1, h[0], 0, 0, h[1], 0, 0, sizeof buf, 0};
    weft_task *t;
    if (rank == 0) {
        CHECKF(weft_comm_exchange(c, &x, 1, "busy", &t) == 0, "%s", weft_last_error());
        while (status_of(t) != WEFT_TASK_ENQUEUED && status_of(t) != WEFT_TASK_COMPLETED)
            sleep_ms(1);
        atomic_store(&spinning, 0);
        weft_task *s[2];
        for (int i = 0; i < 2; i++)
            s[i] = test_spawn_at(rt, "cpu", 0, spin_until_final, t, NULL, 0, true);
        while (atomic_load(&spinning) < 2)
            sleep_ms(1);
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < 2; i++) {
            CHECKF(final_status(s[i]) == WEFT_TASK_COMPLETED,
                   "rank 0: the exchange did not end while the workers were busy");
            weft_task_release(s[i]);
        }
    } else {
        MPI_Barrier(MPI_COMM_WORLD);
        CHECKF(weft_comm_exchange(c, &x, 1, "busy", &t) == 0, "%s", weft_last_error());
    }
    CHECK_OK(weft_task_wait(t));
    weft_task_release(t);
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_data_unregister(d));
    CHECK(buf[0] == 'a' && buf[sizeof buf - 1] == 'a');
}

/* More communicators than the runtime has poller slots: those without one
 * progress by their own thread alone; then slots freed by destroyed ones
 * serve new ones. */
static void test_many_comms(weft_runtime *rt) {
    test_step("more communicators than poller slots");
    enum { N = 20 };
    for (int round = 0; round < 2; round++) {
        weft_comm *c[N];
        int64_t v[N][2];
        weft_data *d[N];
        weft_task *t[N];
        for (int i = 0; i < N; i++) {
            CHECKF(weft_comm_create_mpi(rt, NULL, NULL, &c[i]) == 0, "%s", weft_last_error());
            v[i][0] = i + rank;
            v[i][1] = 1;
            CHECK_OK(weft_data_register(rt, v[i], sizeof v[i], &d[i]));
        }
        for (int i = N; i-- > 0;) /* the last ones first: each its own communicator */
            t[i] = post(c[i], WEFT_COLL_ALLREDUCE, WEFT_RED_I64 | WEFT_RED_SUM, 2, 0, d[i]);
        for (int i = 0; i < N; i++) {
            CHECKF(weft_task_wait(t[i]) == 0, "rank %d comm %d: %s", rank, i, weft_last_error());
            weft_task_release(t[i]);
        }
        CHECK_OK(weft_wait_all(rt));
        for (int i = 0; i < N; i++) {
            CHECK_OK(weft_data_unregister(d[i]));
            CHECKF(v[i][0] == 2 * i + 1 && v[i][1] == 2, "rank %d comm %d: %lld %lld", rank, i, (long long)v[i][0],
                   (long long)v[i][1]);
            CHECK_OK(weft_comm_destroy(c[i]));
        }
    }
}

static void test_silent_rank(weft_runtime *rt) {
    test_step("a receive from a rank that never sends");
    weft_comm *c;
    weft_comm_config cfg;
    weft_comm_config_init(&cfg);
    cfg.timeout_ns = 300000000ull;
    CHECKF(weft_comm_create_mpi(rt, NULL, &cfg, &c) == 0, "%s", weft_last_error());
    int64_t v = 0;
    weft_data *d;
    CHECK_OK(weft_data_register(rt, &v, sizeof v, &d));
    int64_t v2 = 0;
    weft_data *d2;
    CHECK_OK(weft_data_register(rt, &v2, sizeof v2, &d2));
    if (rank == 0) {
        weft_data *h[2] = {d, d};
        weft_xfer x = {1, 0, h[1], 0, 0, h[0], 0, 0, 8, 0};
        weft_task *t;
        uint64_t t0 = now_ns();
        CHECKF(weft_comm_exchange(c, &x, 1, "unanswered", &t) == 0, "%s", weft_last_error());
        /* Nobody waits in Weft: an idle worker polling past its spin (or
         * the progress thread, while no worker does) notices the time
         * out. */
        CHECKF(final_status(t) == WEFT_TASK_FAILED, "rank 0: status %d", status_of(t));
        CHECK_RC(weft_task_wait(t), WEFT_ETASKFAILED);
        CHECK(now_ns() - t0 >= cfg.timeout_ns);
        weft_task_release(t);
        CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED);
        /* broken from now on: the next one fails at once (its data fresh) */
        h[0] = h[1] = d2;
        x.src = h[1];
        x.dst = h[0];
        uint64_t t1 = now_ns();
        CHECKF(weft_comm_exchange(c, &x, 1, "after", &t) == 0, "%s", weft_last_error());
        CHECK_RC(weft_task_wait(t), WEFT_ETASKFAILED);
        CHECK(now_ns() - t1 < 250000000ull);
        weft_task_release(t);
        CHECK_ERR(weft_wait_all(rt), WEFT_ETASKFAILED);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK_OK(weft_comm_destroy(c));
    CHECK_OK(weft_data_unregister(d));
    CHECK_OK(weft_data_unregister(d2));
}

int main(int argc, char **argv) {
    if (test_mpi_start(&argc, &argv, 240) != 0)
        return TEST_SKIP;
    weft_runtime *rt = test_make_devices("cpu", 2, 0, false);
    weft_comm *c;
    MPI_Comm world = MPI_COMM_WORLD;
    CHECKF(weft_comm_create_mpi(rt, &world, NULL, &c) == 0, "%s", weft_last_error());
    test_out_of_order(rt, c);
    test_chain(rt, c);
    test_busy_workers(rt, c);
    CHECK_OK(weft_comm_destroy(c));
    test_many_comms(rt);
    test_silent_rank(rt);
    CHECK_OK(weft_runtime_destroy(rt));
    MPI_Barrier(MPI_COMM_WORLD);
    printf("test_mpi_progress: rank %d ok\n", rank);
    MPI_Finalize();
    return 0;
}
