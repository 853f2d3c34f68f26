/*
 * comm/comm.h — communicators (weft.h, "Communication"): a group of GPUs of
 * one runtime, and the backends that move data between them.
 *
 * The API (api/comm.c) checks an operation, resolves it against its data
 * handles and spawns one task over the members' GPUs (an exact device set,
 * each buffer WEFT_ON_GPU its member's place in that set).  The task's body
 * hands the resolved operation (weft__coll_run: device pointers per member)
 * to the communicator's backend, which queues each member's part on that
 * member's stream and returns; the task completes with its streams.
 *
 * Backends are a table of functions per device kind (as the device layer's
 * are): the virtual communicator (comm/vcomm.c) over virtual GPUs, NCCL
 * (comm/nccl.c, or comm/nccl_absent.c without NCCL) over CUDA devices.
 * A backend sees ctx only through weft.h's body functions.
 */
#ifndef WEFT_COMM_COMM_H
#define WEFT_COMM_COMM_H

#include "internal.h"
#include "weft.h"

#define WEFT__COMM_MAX 64u

typedef struct weft__comm weft__comm;

/* One transfer of an exchange, resolved: device pointers. */
typedef struct weft__xfer_run {
    unsigned from, to;
    const char *src;
    char *dst;
    size_t bytes, rows, src_pitch, dst_pitch;
} weft__xfer_run;

/* An operation as a backend runs it (built by the task's body). */
typedef struct weft__coll_run {
    unsigned op;                       /* WEFT_COLL_*, or 0: an exchange */
    unsigned key;                      /* type | operator (data/reduce.h's key) */
    size_t elem, count;                /* element bytes, elements (weft_coll.count) */
    unsigned root;
    const char *name;
    const void *send[WEFT__COMM_MAX];  /* member k's input on its GPU (recv[k] in place) */
    void *recv[WEFT__COMM_MAX];        /* member k's output (NULL: none, REDUCE off the root) */
    bool in_place;
    unsigned setk[WEFT__COMM_MAX];     /* member k's place in the task's device set */
    const weft__xfer_run *xfer;        /* an exchange's transfers (across ranks: src NULL
                                          where this rank does not send, dst where it
                                          does not receive) */
    size_t nxfer;
    /* Across ranks (a communicator over MPI): this rank's member, its
     * buffers on the host (my_send = my_recv in place; NULL where it has
     * none), and the operation's number in the communicator's sequence. */
    unsigned me;
    const void *my_send;
    void *my_recv;
    uint64_t seq;
} weft__coll_run;

typedef struct weft__comm_backend {
    const char *name;
    /* Set up c's backend state (c->impl) for its members; 0, or an error
     * with a message in why. */
    int (*open)(weft__comm *c, char *why, size_t len);
    void (*close)(weft__comm *c);
    /* From the task's body: queue member k's part of r on the stream of
     * the task's GPU r->setk[k], for every member taking part (part[k]),
     * and return (0, or an error: the task fails; what was queued fails or
     * finishes on its own); r and its transfers are the body's, valid during
     * the call only (a backend copies what it keeps).  *state (NULL if none) is handed to finish once
     * the task has finished — after every part queued has run or been
     * skipped (a stream that failed skips its later work). */
    int (*post)(weft__comm *c, const weft_ctx *ctx, const weft__coll_run *r, const bool *part, void **state);
    void (*finish)(void *state);
    /* Across ranks only (NULL otherwise): operation `seq` will never be
     * posted here (its task was cancelled or failed before its body ran). */
    void (*skip)(weft__comm *c, uint64_t seq);
    /* Across ranks only (NULL otherwise): one progress step, from any
     * thread that would otherwise spin (registered with the runtime as a
     * poller for idle workers and waits: api/comm.c): test what is in
     * flight and report what ended.  Never blocks (returns at once when
     * another thread is polling); returns what it found: WEFT__POLL_IDLE
     * (nothing in flight), _BUSY or _ENDED (internal.h). */
    int (*poll)(weft__comm *c);
} weft__comm_backend;

/* api/comm.c, for api/comm_ranks.c: communicators without handles, and
 * operations on them (errors and messages as the public functions'). */
int weft__comm_new(weft_runtime *rt, const weft_comm_config *cfg, weft__comm **out);
int weft__comm_new_mpi(weft_runtime *rt, const void *mpi_comm, uint64_t timeout_ns, weft__comm **out);
void weft__comm_free(weft__comm *c);
int weft__comm_post(weft__comm *c, const weft_coll *o, weft_task **out);
/* A collective's name ("allreduce", ...; "?" for an unknown one), and the
 * checks of its arguments every communicator makes first (operation, type
 * and operator, root among n members, recv, send where it has no in-place
 * form, count, deps): 0, or WEFT_EINVAL with a message that starts with
 * fn.  *elem: the element's size. */
const char *weft__coll_name(unsigned op);
int weft__coll_check(const weft_coll *o, unsigned n, const char *fn, size_t *elem);
int weft__comm_exchange(weft__comm *c, const weft_xfer *x, size_t n, const char *name, weft_task **out);
/* api/comm_ranks.c: a communicator over the GPUs of several ranks. */
int weft__comm_new_hybrid(weft_runtime *rt, const void *mpi_comm, const weft_comm_config *cfg, weft__comm **out);
int weft__hybrid_post(weft__comm *c, const weft_coll *o, weft_task **out);
int weft__hybrid_exchange(weft__comm *c, const weft_xfer *x, size_t n, const char *name, weft_task **out);
/* comm/mpi.c: every rank's count (collective over net's ranks; blocks). */
int weft__mpi_allgather_counts(weft__comm *net, unsigned mine, unsigned *all);

/* For backends whose operations complete off the streams (MPI): from the
 * body, count one piece of work in flight for the task (its completion
 * waits for it); the cookie to give weft__comm_work_done(cookie, status)
 * from any thread once (status 0, or an error: the task fails). */
void *weft__comm_work_begin(const weft_ctx *ctx);
void weft__comm_work_done(void *cookie, int status);
/* The trace's communication track: an operation from t0 to now (call it
 * before weft__comm_work_done). */
void weft__comm_trace(weft__comm *c, const char *name, uint64_t t0, size_t bytes);

struct weft__comm {
    weft__slot slot;                   /* must be first */
    weft_runtime *rt;
    unsigned n;                        /* members */
    unsigned gpu[WEFT__COMM_MAX];      /* member k's GPU number */
    unsigned dev[WEFT__COMM_MAX];      /* its runtime device index */
    int ordinal[WEFT__COMM_MAX];       /* its ordinal among devices of its kind (NCCL: the CUDA device) */
    uint64_t set;                      /* the GPUs, bit g for GPU g */
    uint64_t timeout_ns;
    const weft__comm_backend *be;
    void *impl;                        /* the backend's */
    /* Across ranks with GPUs (api/comm_ranks.c): members numbered rank by
     * rank, this rank's nlocal from base[rank] (base[] has a rank's first
     * member per rank, and the total last); operations composed of ones on
     * node (its GPUs) and net (the ranks). */
    bool hybrid;
    struct weft__comm *node, *net;
    unsigned nlocal, *base;
    /* Across ranks (MPI): one member per rank, this rank's is `me`; the
     * next operation's number (under lock: every rank posts a
     * communicator's operations in one order, so numbers match). */
    bool ranks;
    unsigned me;
    uint64_t next_seq;
    int poll_slot;                     /* its poller in the runtime (be->poll), or -1 */
    /* Virtual backend: the model of its members' links. */
    uint64_t link_latency_ns;
    double link_bw;
    /* lock protects inflight (operations spawned and not finished);
     * idle is signalled when it drops to 0. */
    pthread_mutex_t lock;
    pthread_cond_t idle;
    size_t inflight;
};

extern const weft__comm_backend weft__vcomm_backend;
/* MPI's (comm/mpi.c), or NULL when Weft was built without MPI.  Its open
 * takes the MPI communicator from c->impl (a pointer to an MPI_Comm) and
 * sets c->n and c->me. */
extern const weft__comm_backend *const weft__mpi_backend;
/* MPI's own initialisation and end, for programs that do not call MPI
 * themselves (comm/mpi.c; WEFT_EINVAL without MPI): 0 or an error with a
 * message in why.  weft__mpi_world: MPI_COMM_WORLD's address, or NULL. */
int weft__mpi_init(char *why, size_t len);
int weft__mpi_finalize(char *why, size_t len);
const void *weft__mpi_world(void);
/* NCCL's, or NULL when Weft was built without NCCL. */
extern const weft__comm_backend *const weft__nccl_backend;

/* Every backend's operations are queued under this lock, so that any two
 * operations' parts are queued in the same order on every stream they
 * share (comm/comm.c). */
void weft__comm_launch_lock(void);
void weft__comm_launch_unlock(void);

#endif
