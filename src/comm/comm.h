/*
 * comm/comm.h — communicators (weft.h, "Communication"): a group of GPUs of
 * one runtime, or of ranks, and the engines that move data between them.
 *
 * The API (api/comm.c) checks an operation, resolves it against its data
 * handles and spawns one task over the members' GPUs (an exact device set,
 * each buffer WEFT_ON_GPU its member's place in that set).  The task's body
 * hands the resolved operation (weft__coll_run: device pointers per member)
 * to weft__comm_run, which hands it to the communicator's engine; the engine
 * queues each member's part on that member's stream (or starts it across
 * ranks) and returns; the task completes with its streams (and the work it
 * counted in flight).
 *
 * An engine is a table of named operations (weft__comm_engine), one per
 * kind of communicator, found by that kind in comm/comm.c's registry: the
 * virtual communicator (comm/vcomm.c, "vgpu") over virtual GPUs, NCCL
 * (comm/nccl.c, or comm/nccl_absent.c without NCCL; "cuda") over CUDA
 * devices, MPI (comm/mpi.c, or comm/mpi_absent.c; "mpi") across ranks.
 * comm/comm.c holds what every engine shares: the communicator's life
 * (open; drain and close), its operations' count and numbers, the launch
 * lock, and the services through which an engine reaches the task and the
 * runtime (weft__comm_host, handed over by the api layer when it opens a
 * communicator).  Nothing in comm/ calls a function of api/.
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

typedef struct weft__comm_engine weft__comm_engine;

/* The api layer's services to the engines (api/comm.c hands its table to
 * every communicator it opens): what an engine's operation needs of its
 * task and of the runtime.  Engines call them through weft__comm_queue,
 * weft__comm_stream, weft__comm_work_begin/done and weft__comm_trace. */
typedef struct weft__comm_host {
    /* weft.h's weft_ctx_queue_rw: queue fn(arg) on the stream of the
     * task's GPU i, naming the ranges it touches for the checking mode. */
    int (*queue)(const weft_ctx *ctx, unsigned i, int (*fn)(void *arg), void *arg, uint64_t model_ns,
                 const weft_range *ranges, size_t n);
    /* weft.h's weft_ctx_stream: the native stream of the task's GPU i. */
    void *(*stream)(const weft_ctx *ctx, unsigned i);
    /* One piece of work in flight for the body's task (its completion
     * waits for it): a cookie for work_done, called once from any thread
     * (status 0, or an error: the task fails). */
    void *(*work_begin)(const weft_ctx *ctx);
    void (*work_done)(void *cookie, int status);
    /* The trace's communication track of runtime rt (if it traces): an
     * operation from t0 to now, with its bytes. */
    void (*trace)(weft_runtime *rt, const char *name, uint64_t t0, size_t bytes);
} weft__comm_host;

/* An engine: the named operations every kind of communicator has, and
 * those only some have (NULL where it has none). */
struct weft__comm_engine {
    const char *name;                  /* "virtual", "nccl", "mpi" */
    const char *kind;                  /* the communicators it serves: a GPU kind ("vgpu", "cuda"), or "mpi" */
    const char *absent;                /* NULL, or why it serves none (Weft was built without its library) */
    /* Set up c's engine state (c->impl) for its members: over GPUs group
     * is NULL; across ranks it is the MPI communicator (a pointer to an
     * MPI_Comm), and open sets c->n and c->me.  0, or an error with a
     * message in why. */
    int (*open)(weft__comm *c, const void *group, char *why, size_t len);
    /* From the task's body: queue member k's part of r on the stream of
     * the task's GPU r->setk[k], for every member taking part (part[k]),
     * or start this rank's part across ranks, and return (0, or an error:
     * the task fails; what was queued fails or finishes on its own); r and
     * its transfers are the body's, valid during the call only (an engine
     * copies what it keeps).  *state (NULL if none) is handed to finish. */
    int (*post)(weft__comm *c, const weft_ctx *ctx, const weft__coll_run *r, const bool *part, void **state);
    /* One progress step, from any thread that would otherwise spin (the
     * api layer registers it with the runtime as a poller): test what is
     * in flight and report what ended.  Never blocks (returns at once when
     * another thread is polling); returns what it found: WEFT__POLL_IDLE,
     * _BUSY or _ENDED (internal.h).  NULL: operations complete with the
     * task's streams. */
    int (*progress)(weft__comm *c);
    /* Operation `seq` of c's sequence will never be posted here (its task
     * was cancelled or failed before its body ran, or was never spawned).
     * NULL: the engine does not order operations by number. */
    void (*skip)(weft__comm *c, uint64_t seq);
    /* The operation's task has finished — after every part queued has run
     * or been skipped (a stream that failed skips its later work): its
     * state goes.  NULL: post keeps none. */
    void (*finish)(weft__comm *c, void *state);
    /* Once nothing of c's is in flight: its engine state goes. */
    void (*close)(weft__comm *c);
    /* Across ranks (NULL otherwise): every member's count (collective over
     * c's members; blocks; c is fresh, with nothing in flight). */
    int (*gather_counts)(weft__comm *c, unsigned mine, unsigned *all);
    /* The engine's library, process-wide, for programs that do not start
     * it themselves (NULL where there is nothing to start): 0 or an error
     * with a message in why; world: the group of every process (the
     * address of MPI_COMM_WORLD), for open. */
    int (*init)(char *why, size_t len);
    int (*finalize)(char *why, size_t len);
    const void *(*world)(void);
};

/* Each engine file's one engine (comm/comm.c's registry lists them). */
extern const weft__comm_engine weft__vcomm_engine;
extern const weft__comm_engine weft__nccl_engine;
extern const weft__comm_engine weft__mpi_engine;

/* ---- comm/comm.c: what the engines share ----------------------------- */

/* The engine serving communicators of `kind` (a GPU kind, or "mpi"), or
 * NULL with the reason in why (none for that kind, or built without it). */
const weft__comm_engine *weft__comm_engine_find(const char *kind, char *why, size_t len);

/* c's life: open it with engine e (its lock, its host's services, the
 * engine's state over `group`, see open): 0, or an error with a message in
 * why, nothing left to undo.  weft__comm_drain waits until none of its
 * operations is in flight; weft__comm_close (once drained, and once
 * nobody polls it) closes its engine. */
int weft__comm_open(weft__comm *c, const weft__comm_engine *e, const weft__comm_host *host, const void *group,
                    char *why, size_t len);
void weft__comm_drain(weft__comm *c);
void weft__comm_close(weft__comm *c);
/* Whether c's operations complete by progress steps (weft__comm_progress,
 * to be registered as a poller) rather than with the task's streams. */
bool weft__comm_progresses(const weft__comm *c);
int weft__comm_progress(weft__comm *c);
/* Across ranks: every member's count (see gather_counts; WEFT_EINVAL if
 * c's engine has none). */
int weft__comm_gather_counts(weft__comm *c, unsigned mine, unsigned *all);

/* An operation's accounting: weft__comm_op_begin counts it in flight on c
 * (drain waits for it) and gives it the next number of c's sequence (in
 * post order: the same on every rank); weft__comm_op_end, once its task
 * has finished (or its spawn failed), gives its number up if it was never
 * handed to the engine (posted false) and counts it out. */
uint64_t weft__comm_op_begin(weft__comm *c);
void weft__comm_op_end(weft__comm *c, uint64_t seq, bool posted);
/* From the operation's body: the engine's post (see post); then, once its
 * task has finished, weft__comm_finish hands the engine its state. */
int weft__comm_run(weft__comm *c, const weft_ctx *ctx, const weft__coll_run *r, const bool *part, void **state);
void weft__comm_finish(weft__comm *c, void *state);

/* Every engine's operations are queued under this lock, so that any two
 * operations' parts are queued in the same order on every stream they
 * share. */
void weft__comm_launch_lock(void);
void weft__comm_launch_unlock(void);

/* For engines, from an operation's body: the host's services of c (see
 * weft__comm_host). */
int weft__comm_queue(const weft__comm *c, const weft_ctx *ctx, unsigned i, int (*fn)(void *arg), void *arg,
                     uint64_t model_ns, const weft_range *ranges, size_t n);
void *weft__comm_stream(const weft__comm *c, const weft_ctx *ctx, unsigned i);
void *weft__comm_work_begin(const weft__comm *c, const weft_ctx *ctx);
void weft__comm_work_done(const weft__comm *c, void *cookie, int status);
void weft__comm_trace(const weft__comm *c, const char *name, uint64_t t0, size_t bytes);

/* ---- api/comm.c, for api/comm_ranks.c -------------------------------- */

/* Communicators without handles, and operations on them (errors and
 * messages as the public functions'). */
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

struct weft__comm {
    weft__slot slot;                   /* must be first */
    weft_runtime *rt;
    unsigned n;                        /* members */
    unsigned gpu[WEFT__COMM_MAX];      /* member k's GPU number */
    unsigned dev[WEFT__COMM_MAX];      /* its runtime device index */
    struct weft__device *device[WEFT__COMM_MAX]; /* its device (its kind, ordinal and copy model) */
    uint64_t set;                      /* the GPUs, bit g for GPU g */
    uint64_t timeout_ns;
    const weft__comm_engine *engine;   /* (none for ranks x GPUs: its two parts have theirs) */
    const weft__comm_host *host;
    void *impl;                        /* the engine's */
    /* Across ranks with GPUs (api/comm_ranks.c): members numbered rank by
     * rank, this rank's nlocal from base[rank] (base[] has a rank's first
     * member per rank, and the total last); operations composed of ones on
     * node (its GPUs) and net (the ranks). */
    bool hybrid;
    struct weft__comm *node, *net;
    unsigned nlocal, *base;
    /* Across ranks (MPI): one member per rank, this rank's is `me`. */
    bool ranks;
    unsigned me;
    int poll_slot;                     /* its poller in the runtime (weft__comm_progress), or -1 */
    /* lock protects inflight (operations spawned and not finished) and
     * next_seq (the next operation's number: every rank posts a
     * communicator's operations in one order, so numbers match); idle is
     * signalled when inflight drops to 0 (comm/comm.c). */
    pthread_mutex_t lock;
    pthread_cond_t idle;
    size_t inflight;
    uint64_t next_seq;
};

#endif
