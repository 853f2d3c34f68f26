/*
 * comm/mpi.c — communicators across MPI ranks: one Weft runtime per rank,
 * one member per rank (its buffers in host memory; the data layer brings a
 * value made on a GPU to the host first and takes it back after).
 *
 * The operations complete by polling, never by a worker blocked in MPI: a
 * task's body starts its operation itself with MPI's non-blocking calls
 * when it is next in number (mpost), tests it once, and returns; the task
 * counts it as work in flight (weft__comm_work_begin).  Whoever polls the
 * communicator (mpoll, the engine's progress: idle workers and the
 * runtime's waits, through the poller api/comm.c registers with the
 * runtime) tests what is in flight and reports each end to its task
 * (weft__comm_work_done) right there, so the successor is released on the
 * polling thread: a round trip needs no thread hand-off.  The communicator's progress thread is the fallback: it
 * watches, and polls only while nobody else has for a period (every worker
 * busy or parked, no wait spinning).  Only the communicator's lock
 * serialises its MPI calls (a duplicate of the user's communicator, so
 * that its messages never meet the program's); MPI must have been
 * initialised with MPI_THREAD_MULTIPLE (several threads call it).
 *
 * Order: MPI matches collectives by the order each rank starts them, and a
 * task's body runs whenever its dependencies allow, which differs between
 * ranks.  So every operation takes a number when it is posted (programs
 * post a communicator's operations in one order on every rank) and they
 * start in that order: whoever holds the lock after the number before an
 * operation's passed (its own body, a later body, a skip, a poll that saw
 * a collective's check come back) starts it; an operation that will never
 * run here (its task cancelled) gives its number up (skip).  Point-to-point
 * messages are tagged with their operation's number.
 *
 * Reductions are gathers followed by a fold on the host in rank order, so
 * that every rank gets the same result bit for bit, equal to a sequential
 * fold over the members (MPI's own reductions may combine in any order);
 * reduce-scatter exchanges blocks (all-to-all) and folds its own.
 *
 * A started operation that has not completed within the communicator's
 * timeout (a rank that never takes part) fails its task with a message;
 * its MPI request cannot be taken back, so the communicator is broken from
 * then on: later operations fail at once.
 */
#include "comm/comm.h"
#include "data/reduce.h"

#include <limits.h>
#include <mpi.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

enum { NSIG = 4 }; /* a collective's signature: operation, type and operator, count, root */
static const char *const sig_names[NSIG] = {"operation", "element type and operator", "count", "root"};

/* What of a resolved operation (weft__coll_run) an operation across ranks
 * needs: its own copy, without the tables per member of GPUs. */
typedef struct mrun {
    unsigned op, key, root, me;        /* as weft__coll_run's */
    size_t elem, count;
    const char *name;                  /* the task's (alive until it has finished) */
    const void *my_send;
    void *my_recv;
    uint64_t seq;
    const weft__xfer_run *xfer;        /* an exchange's: xfer_in, or allocated and owned */
    size_t nxfer;
} mrun;

/* Small operations keep their transfers, requests and types in the record
 * itself (one allocation per operation): an exchange of up to XFER_IN
 * transfers, a collective (one request). */
enum { XFER_IN = 2, REQ_IN = 2 * XFER_IN };

typedef struct mop {
    struct mop *next;
    mrun r;
    void *cookie;                      /* the task's work (weft__comm_work_begin) */
    MPI_Request *req;                  /* req_in, or allocated */
    int nreq;
    MPI_Datatype *types;               /* strided transfers' types, freed at the end: types_in, or allocated */
    int ntypes;
    char *stage;                       /* gathered contributions (reductions) */
    uint64_t started;
    /* A collective first checks that every rank posted the same one: the
     * minimum over the ranks of its signature and of its negation (the
     * maximum), by one small all-reduce. */
    bool checking;
    int64_t sig[2 * NSIG], agreed[2 * NSIG];
    /* How it ended (its task's status: 0, or an error), once it has; an
     * error met after some of its requests started is kept here until they
     * end (they were matched, or will be, or time out). */
    int status;
    bool abandoned;                    /* timed out: its requests (and it) stay with MPI */
    /* Last (a new record is cleared up to here): the inline tables. */
    MPI_Request req_in[REQ_IN];
    MPI_Datatype types_in[XFER_IN];
    weft__xfer_run xfer_in[XFER_IN];
} mop;

typedef struct mstate {
    weft__comm *c;
    MPI_Comm comm;
    int rank, size;
    pthread_t thread;
    /* lock protects pending (by number), skipped, next, gate, active,
     * tests and broken (and polls is written only under it), and serialises this communicator's MPI calls: it is held
     * across the non-blocking calls that start and test operations (they
     * return at once, but a test may copy a large message), never across a
     * blocking one.  Taken by bodies (mpost) and skips; polls, the progress
     * thread's among them, only try it (a poller never waits for it).
     * Only wake_lock nests under it (watch); what ended is reported after
     * it is released (end_all). */
    pthread_mutex_t lock;
    /* wake_lock protects stop and the progress thread's sleep on cv
     * (thread_idle is atomic so that a post reads it without the lock;
     * see watch).  Nothing nests under it. */
    pthread_mutex_t wake_lock;
    pthread_condattr_t cattr;          /* CLOCK_MONOTONIC, for the thread's watch */
    pthread_cond_t cv;
    mop *pending;                      /* posted, waiting for an earlier number */
    uint64_t *skipped;                 /* numbers given up, not yet passed */
    size_t nskipped, capskipped;
    uint64_t next;                     /* the number to start next */
    /* A collective whose check is in flight: nothing after it starts until
     * it comes back, so that every rank starts MPI's collectives in one
     * order. */
    mop *gate;
    mop *active;                       /* started, not ended */
    unsigned tests;                    /* calls of test_active (every 8th checks the timeouts) */
    bool stop, broken;
    _Atomic bool thread_idle;          /* the thread sleeps until something is active */
    _Atomic uint32_t nactive;          /* the length of active (a poller's cheap first look) */
    _Atomic uint64_t polls;            /* polls by other threads (the thread watches it; written under lock) */
} mstate;

/* The progress thread's watch: while something is active it wakes this
 * often, and polls only if nobody else polled in between. */
#define WATCH_NS 200000u

/* Fold n contributions of B bytes each (stage, rank order) into out. */
static void fold_all(const mop *o, const char *stage, int n, size_t B, void *out)
{
    memmove(out, stage, B);
    for (int j = 1; j < n; j++)
        weft__red_combine(o->r.key, out, stage + (size_t)j * B, B);
}

/* Start a collective's check (under lock): 0 or an MPI error. */
static int start_check(mstate *m, mop *o)
{
    const mrun *r = &o->r;
    int64_t v[NSIG] = {(int64_t)r->op, (int64_t)r->key, (int64_t)r->count, (int64_t)r->root};
    for (int i = 0; i < NSIG; i++) {
        o->sig[i] = v[i];
        o->sig[NSIG + i] = -v[i];
    }
    o->req = o->req_in;
    o->req[0] = MPI_REQUEST_NULL; /* tested as such if the call below fails */
    o->nreq = 1;
    o->checking = true;
    return MPI_Iallreduce(o->sig, o->agreed, 2 * NSIG, MPI_INT64_T, MPI_MIN, m->comm, o->req);
}

/* The check came back: which field the ranks disagree on (message in why),
 * or -1. */
static int disagreement(const mop *o, char *why, size_t len)
{
    for (int i = 0; i < NSIG; i++)
        if (o->agreed[i] != -o->agreed[NSIG + i]) {
            snprintf(why, len, "the ranks posted different operations as number %llu: its %s is %lld here, "
                               "from %lld to %lld among the ranks",
                     (unsigned long long)o->r.seq, sig_names[i], (long long)o->sig[i], (long long)o->agreed[i],
                     (long long)-o->agreed[NSIG + i]);
            return i;
        }
    return -1;
}

/* Start o (under lock): a collective's check first (the
 * operation itself when it comes back: start_op), an exchange at once.
 * 0 or an MPI error. */
static int start_op(mstate *m, mop *o);
static int start(mstate *m, mop *o)
{
    o->started = weft__now_ns();
    return o->r.op ? start_check(m, o) : start_op(m, o);
}

static int start_op(mstate *m, mop *o)
{
    mrun *r = &o->r;
    size_t B = r->count * r->elem;
    int n = m->size, rc = MPI_SUCCESS;
    MPI_Datatype byte = MPI_BYTE;
    o->checking = false;
    o->req = o->req_in; /* a collective's check, if any, has ended: its request is free again */
    o->nreq = 0;
    if (r->op == 0) { /* an exchange: this rank's sends and receives, tagged with the number */
        int tag = (int)(r->seq % 32767);
        if (r->nxfer > XFER_IN) {
            o->req = weft__alloc(2 * r->nxfer * sizeof *o->req);
            o->types = weft__alloc(r->nxfer * sizeof *o->types);
            if (!o->req || !o->types) {
                weft__free(o->req);
                o->req = o->req_in; /* nothing started: mop_free frees types */
                return MPI_ERR_NO_MEM;
            }
        } else {
            o->types = o->types_in;
        }
        for (size_t i = 0; i < 2 * r->nxfer; i++)
            o->req[i] = MPI_REQUEST_NULL; /* a send or receive that failed to start is tested as none */
        for (size_t i = 0; i < r->nxfer && rc == MPI_SUCCESS; i++) {
            const weft__xfer_run *x = &r->xfer[i];
            if (!x->bytes || (x->from != r->me && x->to != r->me))
                continue;
            MPI_Datatype t;
            bool strided = x->rows > 1;
            if (x->from == r->me) {
                if (strided) {
                    rc = MPI_Type_create_hvector((int)x->rows, (int)x->bytes, (MPI_Aint)x->src_pitch, MPI_BYTE, &t);
                    if (rc == MPI_SUCCESS && (rc = MPI_Type_commit(&t)) == MPI_SUCCESS)
                        o->types[o->ntypes++] = t;
                }
                if (rc == MPI_SUCCESS)
                    rc = MPI_Isend(x->src, strided ? 1 : (int)x->bytes, strided ? t : MPI_BYTE, (int)x->to, tag,
                                   m->comm, &o->req[o->nreq++]);
            }
            if (rc == MPI_SUCCESS && x->to == r->me) {
                if (strided) {
                    rc = MPI_Type_create_hvector((int)x->rows, (int)x->bytes, (MPI_Aint)x->dst_pitch, MPI_BYTE, &t);
                    if (rc == MPI_SUCCESS && (rc = MPI_Type_commit(&t)) == MPI_SUCCESS)
                        o->types[o->ntypes++] = t;
                }
                if (rc == MPI_SUCCESS)
                    rc = MPI_Irecv(x->dst, strided ? 1 : (int)x->bytes, strided ? t : MPI_BYTE, (int)x->from, tag,
                                   m->comm, &o->req[o->nreq++]);
            }
        }
        return rc;
    }
    o->req[0] = MPI_REQUEST_NULL; /* tested as such if the call below fails */
    o->nreq = 1;
    const void *in = r->my_send ? r->my_send : r->my_recv;
    switch (r->op) {
    case WEFT_COLL_ALLREDUCE:
        if (!(o->stage = weft__alloc(B * (size_t)n + 1)))
            return MPI_ERR_NO_MEM;
        return MPI_Iallgather(in, (int)B, byte, o->stage, (int)B, byte, m->comm, o->req);
    case WEFT_COLL_REDUCE:
        if (r->me == r->root && !(o->stage = weft__alloc(B * (size_t)n + 1)))
            return MPI_ERR_NO_MEM;
        return MPI_Igather(in, (int)B, byte, o->stage, (int)B, byte, (int)r->root, m->comm, o->req);
    case WEFT_COLL_REDUCE_SCATTER: /* block k of every rank's input to rank k */
        if (!(o->stage = weft__alloc(B * (size_t)n + 1)))
            return MPI_ERR_NO_MEM;
        return MPI_Ialltoall(in, (int)B, byte, o->stage, (int)B, byte, m->comm, o->req);
    case WEFT_COLL_BROADCAST: {
        void *buf = r->me == r->root ? (void *)in : r->my_recv;
        if (r->me == r->root && r->my_recv && r->my_recv != in && B)
            memcpy(r->my_recv, in, B);
        return MPI_Ibcast(buf, (int)B, byte, (int)r->root, m->comm, o->req);
    }
    default: /* all-gather */
        return MPI_Iallgather(in, (int)B, byte, r->my_recv, (int)B, byte, m->comm, o->req);
    }
}

/* o's requests completed: its results in place (no lock needed: o is
 * nobody else's now). */
static void conclude(mstate *m, mop *o)
{
    mrun *r = &o->r;
    size_t B = r->count * r->elem;
    if (!B)
        return;
    if (r->op == WEFT_COLL_ALLREDUCE || r->op == WEFT_COLL_REDUCE_SCATTER)
        fold_all(o, o->stage, m->size, B, r->my_recv);
    else if (r->op == WEFT_COLL_REDUCE && r->me == r->root)
        fold_all(o, o->stage, m->size, B, r->my_recv);
}

/* Bytes this rank sent and received in o (for the trace). */
static size_t mop_bytes(const mop *o)
{
    const mrun *r = &o->r;
    if (r->op)
        return r->count * r->elem;
    size_t b = 0;
    for (size_t i = 0; i < r->nxfer; i++)
        if (r->xfer[i].from == r->me || r->xfer[i].to == r->me)
            b += r->xfer[i].bytes * r->xfer[i].rows;
    return b;
}

static void mop_free(mop *o)
{
    for (int i = 0; i < o->ntypes; i++)
        MPI_Type_free(&o->types[i]);
    if (o->types != o->types_in)
        weft__free(o->types);
    if (o->req != o->req_in)
        weft__free(o->req);
    weft__free(o->stage);
    if (o->r.xfer != o->xfer_in)
        weft__free((void *)o->r.xfer);
    weft__free(o);
}

/* Whether number s was given up (under lock); forgets it. */
static bool take_skipped(mstate *m, uint64_t s)
{
    for (size_t i = 0; i < m->nskipped; i++)
        if (m->skipped[i] == s) {
            m->skipped[i] = m->skipped[--m->nskipped];
            return true;
        }
    return false;
}

/* An MPI error code in words. */
static void mpi_words(int rc, char *buf, size_t len)
{
    char es[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(rc, es, &n) != MPI_SUCCESS)
        snprintf(es, sizeof es, "error %d", rc);
    snprintf(buf, len, "MPI failed it (%s)", es);
}

/* o ended with status (under lock, o off every list): onto *ended, for
 * end_all once the lock is released; why, if any, is said now. */
static void end_op(mop *o, int status, const char *why, mop **ended)
{
    if (why)
        fprintf(stderr, "weft: operation %llu '%s': %s\n", (unsigned long long)o->r.seq, o->r.name, why);
    o->status = status;
    o->next = *ended;
    *ended = o;
}

static void activate(mstate *m, mop *o)
{
    o->next = m->active;
    m->active = o;
    atomic_fetch_add(&m->nactive, 1);
}

/* Start what is next in number (under lock), skipping numbers given up,
 * until a number not yet posted or a collective's check in flight (gate). */
static void start_ready(mstate *m, mop **ended)
{
    char why[320];
    while (!m->gate) {
        if (take_skipped(m, m->next)) {
            m->next++;
            continue;
        }
        mop **pp = &m->pending;
        while (*pp && (*pp)->r.seq != m->next)
            pp = &(*pp)->next;
        mop *o = *pp;
        if (!o)
            return;
        *pp = o->next;
        o->next = NULL;
        m->next++;
        if (m->broken) {
            end_op(o, WEFT_ECLOSED, NULL, ended);
            continue;
        }
        int rc = start(m, o);
        if (rc != MPI_SUCCESS) {
            mpi_words(rc, why, sizeof why);
            if (!o->nreq) {
                end_op(o, WEFT_EDEVICE, why, ended);
                continue;
            }
            /* Requests started before the error: it ends when they do. */
            fprintf(stderr, "weft: operation %llu '%s': %s\n", (unsigned long long)o->r.seq, o->r.name, why);
            o->status = WEFT_EDEVICE;
            o->checking = false;
        }
        if (o->checking)
            m->gate = o;
        activate(m, o);
    }
}

/* Test what is in flight (under lock), each operation once: what ended
 * goes onto *ended; a collective whose check came back starts (or fails
 * on every rank alike), and what waited for it after it.  Every 8th call
 * also checks the timeouts (the clock costs as much as a test: an idle
 * poll is mostly this). */
static void test_active(mstate *m, mop **ended)
{
    char why[320];
    bool timing = (++m->tests & 7) == 0;
    uint64_t now = 0; /* read once, when an operation is found not done */
    bool opened = false;
    for (mop **pp = &m->active; *pp;) {
        mop *o = *pp;
        int done = 0;
        int rc = MPI_Testall(o->nreq, o->req, &done, MPI_STATUSES_IGNORE);
        if (rc == MPI_SUCCESS && done && o->checking) {
            /* Every rank sees the same agreement: all go on, or all fail. */
            if (o == m->gate) {
                m->gate = NULL;
                opened = true;
            }
            if (disagreement(o, why, sizeof why) >= 0) {
                *pp = o->next;
                atomic_fetch_sub(&m->nactive, 1);
                end_op(o, WEFT_EINVAL, why, ended);
                continue;
            }
            if ((rc = start_op(m, o)) == MPI_SUCCESS) {
                pp = &o->next;
                continue;
            }
            if (o->nreq) { /* some started: it ends when they do */
                mpi_words(rc, why, sizeof why);
                fprintf(stderr, "weft: operation %llu '%s': %s\n", (unsigned long long)o->r.seq, o->r.name, why);
                o->status = WEFT_EDEVICE;
                pp = &o->next;
                continue;
            }
        }
        if (rc != MPI_SUCCESS) { /* errors are returned on the communicator's copy */
            *pp = o->next;
            atomic_fetch_sub(&m->nactive, 1);
            if (o == m->gate) {
                m->gate = NULL;
                opened = true;
            }
            mpi_words(rc, why, sizeof why);
            end_op(o, WEFT_EDEVICE, why, ended);
            continue;
        }
        if (done) {
            *pp = o->next;
            atomic_fetch_sub(&m->nactive, 1);
            end_op(o, o->status, NULL, ended);
            continue;
        }
        if (timing && !now)
            now = weft__now_ns();
        if (timing && now - o->started > m->c->timeout_ns) {
            snprintf(why, sizeof why,
                     "on a communicator of %d ranks (this is rank %d), it did not complete within %.3f s: a rank "
                     "never took part; the communicator is broken from now on",
                     m->size, m->rank, (double)m->c->timeout_ns / 1e9);
            *pp = o->next;
            atomic_fetch_sub(&m->nactive, 1);
            if (o == m->gate) {
                m->gate = NULL;
                opened = true;
            }
            m->broken = true;
            o->abandoned = true;
            end_op(o, WEFT_ETIMEDOUT, why, ended);
            continue;
        }
        pp = &o->next;
    }
    if (opened)
        start_ready(m, ended);
}

/* Report what ended to its tasks (no lock held: a task's completion may
 * skip a number, or post); how many. */
static unsigned end_all(mstate *m, mop *ended)
{
    unsigned n = 0;
    while (ended) {
        mop *o = ended;
        ended = o->next;
        if (o->status == 0) {
            conclude(m, o);
            weft__comm_trace(m->c, o->r.name, o->started, mop_bytes(o));
        }
        weft__comm_work_done(m->c, o->cookie, o->status);
        if (!o->abandoned)
            mop_free(o);
        n++;
    }
    return n;
}

/* The progress thread: the fallback that guarantees progress while nobody
 * else polls.  Idle (nothing active): it sleeps until a body starts
 * something.  Otherwise it watches: wakes every WATCH_NS, and while no
 * other thread polled in between, polls itself (yielding its core between
 * polls) until somebody else does again or nothing is active. */
static void *progress(void *arg)
{
    mstate *m = arg;
    pthread_mutex_lock(&m->wake_lock);
    while (!m->stop) {
        /* Idle until a post or a skip activates something (watch): the
         * flag is set before the count is read again, and a post reads the
         * flag after it raised the count, so one of them sees the other. */
        atomic_store(&m->thread_idle, true);
        if (atomic_load(&m->nactive) == 0) {
            pthread_cond_wait(&m->cv, &m->wake_lock);
            continue;
        }
        atomic_store(&m->thread_idle, false);
        uint64_t seen = atomic_load(&m->polls);
        uint64_t until = weft__now_ns() + WATCH_NS;
        struct timespec ts = {(time_t)(until / 1000000000u), (long)(until % 1000000000u)};
        pthread_cond_timedwait(&m->cv, &m->wake_lock, &ts);
        if (m->stop)
            break;
        pthread_mutex_unlock(&m->wake_lock);
        /* Nobody else polled for a period: poll until somebody does again
         * (or holds the lock: a post, a poll), or nothing is active. */
        while (atomic_load(&m->nactive) > 0 && atomic_load(&m->polls) == seen &&
               pthread_mutex_trylock(&m->lock) == 0) {
            mop *ended = NULL;
            test_active(m, &ended);
            pthread_mutex_unlock(&m->lock);
            if (ended)
                end_all(m, ended);
            else
                sched_yield(); /* a progress step: poll again soon */
        }
        pthread_mutex_lock(&m->wake_lock);
    }
    pthread_mutex_unlock(&m->wake_lock);
    return NULL;
}

/* A poll from another thread (an idle worker, a waiting thread). */
static int mpoll(weft__comm *c)
{
    mstate *m = c->impl;
    if (atomic_load_explicit(&m->nactive, memory_order_relaxed) == 0)
        return WEFT__POLL_IDLE;
    if (pthread_mutex_trylock(&m->lock) != 0)
        return WEFT__POLL_BUSY;
    /* every writer holds the lock: no read-modify-write needed */
    atomic_store_explicit(&m->polls, atomic_load_explicit(&m->polls, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    mop *ended = NULL;
    test_active(m, &ended);
    pthread_mutex_unlock(&m->lock);
    return ended && end_all(m, ended) > 0 ? WEFT__POLL_ENDED : WEFT__POLL_BUSY;
}

static int mopen(weft__comm *c, const void *group, char *why, size_t len)
{
    const MPI_Comm *user = group;
    int inited = 0, finalized = 0, level = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (!inited || finalized) {
        snprintf(why, len, "MPI is %s", finalized ? "finalized" : "not initialised (MPI_Init_thread first)");
        return WEFT_EINVAL;
    }
    MPI_Query_thread(&level);
    if (level < MPI_THREAD_MULTIPLE) {
        snprintf(why, len, "MPI was initialised with thread level %d; Weft needs MPI_THREAD_MULTIPLE (its "
                           "workers and progress thread call MPI beside the program's threads)", level);
        return WEFT_EINVAL;
    }
    mstate *m = weft__alloc(sizeof *m);
    if (!m)
        return WEFT_ENOMEM;
    memset(m, 0, sizeof *m);
    m->c = c;
    if (MPI_Comm_dup(*user, &m->comm) != MPI_SUCCESS) {
        weft__free(m);
        snprintf(why, len, "MPI_Comm_dup failed");
        return WEFT_EDEVICE;
    }
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN); /* errors reach the operation, not abort() */
    MPI_Comm_rank(m->comm, &m->rank);
    MPI_Comm_size(m->comm, &m->size);
    pthread_mutex_init(&m->lock, NULL);
    pthread_mutex_init(&m->wake_lock, NULL);
    pthread_condattr_init(&m->cattr);
    pthread_condattr_setclock(&m->cattr, CLOCK_MONOTONIC);
    pthread_cond_init(&m->cv, &m->cattr);
    if (pthread_create(&m->thread, NULL, progress, m) != 0) {
        MPI_Comm_free(&m->comm);
        pthread_mutex_destroy(&m->lock);
        pthread_mutex_destroy(&m->wake_lock);
        pthread_cond_destroy(&m->cv);
        pthread_condattr_destroy(&m->cattr);
        weft__free(m);
        snprintf(why, len, "its progress thread could not start");
        return WEFT_ESYSTEM;
    }
    c->impl = m;
    c->n = (unsigned)m->size;
    c->me = (unsigned)m->rank;
    return 0;
}

static void mclose(weft__comm *c)
{
    mstate *m = c->impl;
    pthread_mutex_lock(&m->wake_lock);
    m->stop = true;
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->wake_lock);
    pthread_join(m->thread, NULL);
    for (mop *o = m->pending; o;) { /* posted, never reached (an earlier number never came) */
        mop *next = o->next;
        weft__comm_work_done(c, o->cookie, WEFT_ECLOSED);
        mop_free(o);
        o = next;
    }
    if (!m->broken)
        MPI_Comm_free(&m->comm);
    pthread_mutex_destroy(&m->lock);
    pthread_mutex_destroy(&m->wake_lock);
    pthread_cond_destroy(&m->cv);
    pthread_condattr_destroy(&m->cattr);
    weft__free(m->skipped);
    weft__free(m);
    c->impl = NULL;
}

/* After a post or a skip (under lock): the thread watches what is active
 * (woken only if it sleeps idle). */
static void watch(mstate *m)
{
    if (m->active && atomic_load(&m->thread_idle)) {
        pthread_mutex_lock(&m->wake_lock);
        pthread_cond_signal(&m->cv);
        pthread_mutex_unlock(&m->wake_lock);
    }
}

/* From the task's body: start the operation if it is next in number (and
 * what waited for it), test what is in flight once, and return; what ended
 * is reported here, the rest by whoever polls next. */
static int mpost(weft__comm *c, const weft_ctx *ctx, const weft__coll_run *r, const bool *part, void **state)
{
    (void)part;
    *state = NULL;
    mstate *m = c->impl;
    size_t B = r->count * r->elem;
    if (B > INT_MAX) {
        fprintf(stderr, "weft: operation '%s': %zu bytes per rank, more than MPI's int counts allow\n", r->name, B);
        return WEFT_EINVAL;
    }
    mop *o = weft__alloc(sizeof *o);
    if (!o)
        return WEFT_ENOMEM;
    memset(o, 0, offsetof(mop, req_in)); /* the inline tables are set as they are used */
    o->req = o->req_in;
    o->r = (mrun){.op = r->op, .key = r->key, .root = r->root, .me = r->me, .elem = r->elem, .count = r->count,
                  .name = r->name, .my_send = r->my_send, .my_recv = r->my_recv, .seq = r->seq,
                  .nxfer = r->nxfer};
    if (r->nxfer) {
        weft__xfer_run *x = r->nxfer <= XFER_IN ? o->xfer_in : weft__alloc(r->nxfer * sizeof *x);
        if (!x) {
            weft__free(o);
            return WEFT_ENOMEM;
        }
        memcpy(x, r->xfer, r->nxfer * sizeof *x);
        o->r.xfer = x;
    }
    o->cookie = weft__comm_work_begin(c, ctx);
    mop *ended = NULL;
    pthread_mutex_lock(&m->lock);
    o->next = m->pending;
    m->pending = o;
    start_ready(m, &ended);
    if (m->active)
        test_active(m, &ended);
    watch(m);
    pthread_mutex_unlock(&m->lock);
    end_all(m, ended);
    return 0;
}

static void mskip(weft__comm *c, uint64_t seq)
{
    mstate *m = c->impl;
    mop *ended = NULL;
    pthread_mutex_lock(&m->lock);
    if (m->nskipped == m->capskipped) {
        size_t cap = m->capskipped ? m->capskipped * 2 : 8;
        uint64_t *v = weft__alloc(cap * sizeof *v);
        if (!v) { /* out of memory: the numbers after it never start (their tasks time out) */
            pthread_mutex_unlock(&m->lock);
            return;
        }
        if (m->nskipped)
            memcpy(v, m->skipped, m->nskipped * sizeof *v);
        weft__free(m->skipped);
        m->skipped = v;
        m->capskipped = cap;
    }
    m->skipped[m->nskipped++] = seq;
    start_ready(m, &ended);
    watch(m);
    pthread_mutex_unlock(&m->lock);
    end_all(m, ended);
}

static int mgather_counts(weft__comm *net, unsigned mine, unsigned *all)
{
    mstate *m = net->impl;
    /* the communicator is fresh: no operation of its is in flight, so the
     * progress thread makes no MPI call on it meanwhile */
    return MPI_Allgather(&mine, 1, MPI_UNSIGNED, all, 1, MPI_UNSIGNED, m->comm) == MPI_SUCCESS ? 0 : WEFT_EDEVICE;
}

/* MPI_COMM_WORLD as an object with an address (it is a constant). */
static MPI_Comm world_comm;
static pthread_once_t world_once = PTHREAD_ONCE_INIT;
static void world_init(void) { world_comm = MPI_COMM_WORLD; }

static const void *mworld(void)
{
    pthread_once(&world_once, world_init);
    return &world_comm;
}

static int minit(char *why, size_t len)
{
    int inited = 0, finalized = 0, provided = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized) {
        snprintf(why, len, "MPI was finalized already (it cannot start again)");
        return WEFT_EINVAL;
    }
    if (inited) {
        MPI_Query_thread(&provided);
        if (provided < MPI_THREAD_MULTIPLE) {
            snprintf(why, len, "MPI was initialised already with thread level %d, not MPI_THREAD_MULTIPLE", provided);
            return WEFT_EINVAL;
        }
        return 0;
    }
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
        snprintf(why, len, "MPI_Init_thread failed");
        return WEFT_EDEVICE;
    }
    if (provided < MPI_THREAD_MULTIPLE) {
        snprintf(why, len, "this MPI gives thread level %d, not MPI_THREAD_MULTIPLE", provided);
        return WEFT_EINVAL;
    }
    return 0;
}

static int mfinalize(char *why, size_t len)
{
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (!inited || finalized)
        return 0;
    if (MPI_Finalize() != MPI_SUCCESS) {
        snprintf(why, len, "MPI_Finalize failed");
        return WEFT_EDEVICE;
    }
    return 0;
}

const weft__comm_engine weft__mpi_engine = {
    .name = "mpi",
    .kind = "mpi",
    .open = mopen,
    .post = mpost,
    .progress = mpoll,
    .skip = mskip,
    .close = mclose,
    .gather_counts = mgather_counts,
    .init = minit,
    .finalize = mfinalize,
    .world = mworld,
};
