/*
 * graph/graph.h — the graph layer: task objects and their life cycle, edges,
 * dependencies inferred from data accesses (the per-data access history and
 * commute arbitration), failure and cancellation propagation, completion,
 * and the placeholders behind task spaces.
 *
 * Pipeline (docs/design.md): SPAWNING -> WAITING (dependencies pending) ->
 * MAPPED (device chosen: sched) -> RESERVED (data valid there: data) ->
 * READY (queued: sched) -> RUNNING (body: worker) -> ENQUEUED (device work the
 * body queued is in flight: device) -> COMPLETED | FAILED | CANCELLED.
 * weft__task_complete is the one completion function; any thread may call it
 * once the body returned (a device reports through weft__task_op_done).
 * A host task with no data skips MAPPED and RESERVED, and one that queued no
 * device work skips ENQUEUED.
 *
 * Calls go down only: to sched (queues), data (pins, replicas) and device.
 */
#ifndef WEFT_GRAPH_H
#define WEFT_GRAPH_H

#include "internal.h"
#include "data/data.h"
#include "device/device.h"
#include "sched/sched.h"
#include "sched/place.h"
#include "sched/bound.h"
#include "wait.h"

typedef struct weft__task weft__task;

/* Internal states.  Final states carry WEFT__T_FINAL: never compare states
 * by order. */
enum {
    WEFT__T_SPAWNING = 0,  /* being linked by weft_spawn (never seen by users) */
    WEFT__T_WAITING = 1,
    WEFT__T_MAPPED = 2,
    WEFT__T_RESERVED = 3,
    WEFT__T_READY = 4,
    WEFT__T_RUNNING = 5,
    WEFT__T_ENQUEUED = 6,
    WEFT__T_FINAL = 0x10,
    WEFT__T_COMPLETED = WEFT__T_FINAL | 0,
    WEFT__T_FAILED = WEFT__T_FINAL | 1,
    WEFT__T_CANCELLED = WEFT__T_FINAL | 2,
};
static inline bool weft__state_final(int s) { return (s & WEFT__T_FINAL) != 0; }
weft_task_status weft__state_public(int s);

/* Why a task was cancelled. */
enum { WEFT__CAUSE_FAILED = 0, WEFT__CAUSE_REQUEST = 1, WEFT__CAUSE_UNSPAWNED = 2 };

/* One edge of the graph, owned by its successor, linked into the
 * predecessor's successor list. */
typedef struct weft__edge {
    weft__task *succ;
    struct weft__edge *next;
    weft__task *pred;   /* valid only while pred's slot generation is pred_gen */
    uint32_t pred_gen;
    bool propagate;     /* does failure of the predecessor cancel succ? */
    bool late;          /* never claimed early: succ starts only once pred has completed
                           (pred reduces data succ uses otherwise: data/reduce.h) */
    _Atomic uint8_t claim; /* who releases succ from this edge: WEFT__EDGE_* */
} weft__edge;

/* weft__edge.claim: the first to claim an edge (compare-and-swap from OPEN)
 * releases its successor from it.  EARLY: pred's body returned and recorded
 * its completion events (release_early, or the successor's spawn linking
 * after that): succ's streams wait for the events, and succ holds an op
 * until pred completes.  DONE: pred's completion (the host order). */
enum { WEFT__EDGE_OPEN = 0, WEFT__EDGE_EARLY = 1, WEFT__EDGE_DONE = 2 };

/* An access mode bit of the graph's own: an access added only for the
 * order (a tile's neighbours, a partitioned handle's tiles: data/tile.h),
 * after the task's own; not acquired, no address for the body.  (Clear of
 * the public bits: WEFT_R..WEFT_SCRATCH are 0x3f, a reduction's operator
 * and type 0xff000.) */
#define WEFT__ORDER_ONLY 0x100u
_Static_assert((WEFT__ORDER_ONLY & (0x3fu | WEFT_RED_OP_MASK | WEFT_RED_TYPE_MASK)) == 0,
               "WEFT__ORDER_ONLY collides with a public mode bit");
/* With WEFT__ORDER_ONLY: the access of a tile that an access of its
 * partitioned parent implies (the parent's view of that tile's history:
 * graph/access.c keeps the two views' commute groups apart, and never
 * releases a task early across them). */
#define WEFT__VIA_PARENT 0x200u
_Static_assert((WEFT__VIA_PARENT & (WEFT__ORDER_ONLY | 0x3fu | WEFT_RED_OP_MASK | WEFT_RED_TYPE_MASK)) == 0,
               "WEFT__VIA_PARENT collides with a mode bit");

/* With WEFT__ORDER_ONLY: the access of a handle over memory that overlaps
 * the memory of a handle the task names (data/overlap.h), with the R and W
 * bits of that access.  In the history it is partial: it follows the
 * handle's own accesses that conflict with it, and they follow it, but two
 * partial accesses never order each other (their tasks' own handles
 * overlap, and order them there, or their memory is disjoint).  Its
 * acquire only brings the handle's value to the host
 * (weft__data_host_sync). */
#define WEFT__OVERLAP 0x400u
_Static_assert((WEFT__OVERLAP & (WEFT__ORDER_ONLY | WEFT__VIA_PARENT | 0x7fu | WEFT_RED_OP_MASK |
                                 WEFT_RED_TYPE_MASK | WEFT_ON_GPU_MASK)) == 0,
               "WEFT__OVERLAP collides with a mode bit");

typedef struct weft__task_access {
    weft__data *data;
    unsigned mode;
    weft__data_hold hold;              /* replicas pinned by weft__task_acquire */
    union {                            /* (by mode: one field, so that a task fits its slot) */
        struct weft__partial *part;    /* WEFT_REDUCE: its private copy, from spawn to completion
                                          (data/reduce.h) */
        struct weft__scratch *scratch; /* WEFT_SCRATCH: its buffer, from its acquire to the task's
                                          completion (data/scratch.h), NULL before and after.  A
                                          scratch access is in no history: it orders nothing */
    };
    weft__wrec rec;                    /* what its acquire did (committed or aborted at its end) */
} weft__task_access;

/* Access a's private copy (a reduction's), or NULL. */
static inline struct weft__partial *weft__access_part(const weft__task_access *a)
{
    return (a->mode & WEFT_REDUCE) ? a->part : NULL;
}
/* Access a's scratch buffer (WEFT_SCRATCH, while it holds one), or NULL. */
static inline struct weft__scratch *weft__access_scratch(const weft__task_access *a)
{
    return (a->mode & WEFT_SCRATCH) ? a->scratch : NULL;
}

/* weft__task.dev_fate. */
enum { WEFT__FATE_UNKNOWN = 0, WEFT__FATE_RUNS = 1, WEFT__FATE_SKIPPED = 2 };

/* run_gate values: who decides whether the body runs. */
enum { WEFT__GATE_OPEN = 0, WEFT__GATE_DOOMING = 1, WEFT__GATE_STARTED = 2, WEFT__GATE_DOOMED = 3 };

#define WEFT__INLINE_EDGES 3
#define WEFT__INLINE_ACCESSES 2

/* Counters of finished tasks: one block per worker (single writer), and one
 * shared block (atomic adds) for completions on other threads. */
typedef struct weft__task_stats {
    _Atomic uint64_t n_run, n_failed, n_cancelled;
    /* Tasks made ready here, tasks completed here (placeholders excluded):
     * their sums over all blocks balance when nothing is ready, running or
     * in flight on a device (weft__graph_settled). */
    _Atomic uint64_t n_ready, n_done;
    const struct weft__graph *owner;   /* counts here only for this graph's tasks */
    /* Set by its worker (only it reads or writes it) while its loop runs
     * tasks: the completions there leave waking the settle sleepers to the
     * worker's next idle moment (worker_main), once, rather than one
     * wake-up per task.  Nothing is settled while the worker still runs. */
    bool settle_later;
} weft__task_stats;
extern _Thread_local weft__task_stats *weft__tls_stats;

typedef struct weft__graph weft__graph;

struct weft__task {
    weft__slot slot;                   /* must be first */
    _Atomic int32_t refs;              /* execution + user handle + space + access histories holding it */
    _Atomic int state;                 /* WEFT__T_* */
    _Atomic int32_t pending;           /* unfinished dependencies (+1 while spawning) */
    _Atomic int run_gate;
    _Atomic int32_t waiters;           /* threads sleeping until this task finishes */
    /* Bodies of this task's runtime in weft_task_wait for it (weft__wait_task):
     * while it is a key's placeholder nobody spawned, closing the key's
     * space reports it as waited for (api/space.c). */
    _Atomic int32_t body_waiters;
    _Atomic int32_t ops;               /* device work in flight, +1 while the body runs (has_ops only) */
    _Atomic int op_error;              /* first error a device reported for its work */
    bool has_ops;                      /* the body queued device work (body thread only), or,
                                          set at spawn, a GPU-only placed task: its
                                          completion also waits for the early-released
                                          predecessors it holds ops for */
    /* Why a failed task failed, for its message: its body's result
     * (WEFT__FAIL_BODY), the checking mode's report on its body
     * (WEFT__FAIL_CHECK, result WEFT_EDEVICE), its device work
     * (WEFT__FAIL_DEVICE, result the device's error), or the checking
     * mode's host watch on its data (WEFT__FAIL_WATCH, result
     * WEFT_EDEVICE: data/data.h). */
    uint8_t fail_why;
    char *fail_msg;                    /* WEFT__FAIL_CHECK: the checking mode's report (owned; freed
                                          with the task), NULL if it could not be kept */
    bool start_cancelled;              /* cancelled at start with ops held (has_ops at spawn), or a
                                          continued task whose continuation was cancelled: it
                                          ends CANCELLED (final_of) */
    _Atomic uint8_t dev_fate;          /* WEFT__FATE_*: weft__task_skip_work's answer, once asked */
    _Atomic bool queue_error;          /* a report on its queues carried an error: a copy failed
                                          (its own, or one it waited for), not only a kernel */
    _Atomic bool pred_failed;          /* an early-released predecessor failed after this
                                          task started: it ends CANCELLED (cause_* set by
                                          the first such predecessor) */
    bool proxy;                        /* a task-space placeholder: no body, not counted in flight */
    bool early_ok;                     /* may be released early (set at spawn): every alternative
                                          that can run is GPUs only and it touches no data on the
                                          host; its streams wait for its predecessors' events */
    bool has_commute;
    bool body_copied;                  /* its body queued a copy (weft_ctx_copy), which runs even
                                          when its kernels are skipped (weft__task_skip_work) */
    bool prefetched;                   /* copies to the host started for it before it started
                                          (weft__data_prefetch_host; worker side only) */
    uint8_t cause_kind;                /* WEFT__CAUSE_* */
    _Atomic bool handle_live;          /* the user still holds the handle */
    _Atomic bool space_owned;          /* a task space lends out the handle */
    bool transparent;                  /* (set at spawn) an acquisition's: cancelled by request, it
                                          is as if never made — its successors are not cancelled
                                          for it (weft__task_fails_successors) */
    uint32_t epoch;                    /* g->cancel_epoch at spawn */
    /* Continuations (weft_ctx_continue).  A task whose body continued ends
     * with its last continuation, not with its body: */
    bool continued;                    /* this body run called weft_ctx_continue (body thread) */
    bool place_returned;               /* its reservation was given back when its body returned
                                          (a continued task): completion does not give it again */
    weft__task *cont_of;               /* a continuation: the task it continues (its root; kept
                                          alive by the op this task holds on it until it finishes) */
    _Atomic(weft__task *) cont;        /* a root: its newest continuation (not referenced: pin it
                                          with weft__task_cont_pin), NULL if none */
    _Atomic uint32_t cont_gen;         /* that continuation's slot generation */
    _Atomic int cont_final;            /* a root: the first continuation that failed or was
                                          cancelled (its final state), 0 if none */
    int cont_result;                   /* that continuation's result (written by the CAS winner
                                          of cont_final, read once every op of the root is done) */
    unsigned device;                   /* where it runs (MAPPED) */
    int result;
    _Atomic(weft__edge *) successors;  /* WEFT__CLOSED once finished */
    weft__graph *g;
    const void *rt_handle;             /* identifies the runtime even after its slot is reused */
    uint64_t id;
    /* When its accesses entered the histories (weft__access_link, under
     * their locks): the spawn order of two tasks that share a handle, or
     * handles over overlapping memory.  (id is taken before the locks.) */
    uint64_t linked;
    weft_body_fn body;
    void *arg;
    void (*arg_destroy)(void *);
    void (*on_finish)(void *, int);
    void *finish_arg;                  /* what on_finish receives: weft_task_desc's finish_arg, or arg */
    uint64_t cause_id;
    char cause_name[32];
    char name[32];
    weft__qnode qn;                    /* ready-queue node (sched) */
    weft__task *wait_next;             /* commute waiters, under the history's lock */
    weft__task *outer;                 /* task this one interrupted on its worker (nested help) */
    weft__task *done_next;             /* in the calling thread's list of completions to run */
    weft__place *place;                /* its placements (NULL: a plain CPU task) */
    weft__brec *brec;                  /* its record in the graph's log (weft_config.bound), or NULL */
    _Atomic uint32_t nedges;           /* edges[] in use; a placeholder publishes its one edge late (release) */
    uint16_t naccess;
    weft__edge *edges;
    weft__task_access *access;
    weft__edge edge_inline[WEFT__INLINE_EDGES];
    weft__task_access access_inline[WEFT__INLINE_ACCESSES];
};
/* The allocator leaves the reference count of a reused task slot alone. */
_Static_assert(offsetof(weft__task, refs) == sizeof(weft__slot) &&
                   sizeof(((weft__task *)0)->refs) == WEFT__TASK_SLOT_KEEP,
               "weft__task.refs must directly follow the slot header");

#define WEFT__CLOSED ((weft__edge *)(uintptr_t)1)

static inline weft__task *weft__task_of(weft__qnode *n) { return WEFT__CONTAINER(n, weft__task, qn); }

/* The graph state of one runtime. */
struct weft__graph {
    weft__sched *sched;
    weft__placer *placer;              /* the runtime's GPUs and mapping policy */
    weft__waitset *ws;
    _Atomic uint64_t next_id;
    /* Tasks spawned and not finished, plus calls in progress that destroy
     * must wait for (weft__graph_enter/leave). */
    _Atomic int64_t inflight;
    _Atomic int64_t inflight_peak;
    _Atomic uint64_t extra_bytes;      /* out-of-line allocations of all tasks */
    _Atomic uint64_t failures;         /* bodies failed since the last wait_all */
    _Atomic uint32_t cancel_epoch;
    _Atomic int32_t sleepers_all;      /* sleeping until inflight == 0 */
    _Atomic int32_t sleepers_throttle; /* sleeping for backpressure, outside threads */
    _Atomic int32_t sleepers_throttle_in; /* sleeping for backpressure, inside tasks */
    _Atomic int32_t sleepers_settle;   /* sleeping until settled (weft__key_settle) */
    _Atomic int32_t sleepers_any;      /* sleeping until one of several tasks finished
                                          (weft__key_any_final) */
    int64_t throttle_low;              /* backpressure resumes at or below this */
    weft__task_stats ext;
    /* Placeholders (proxies) that became final, which the blocks above do
     * not count: the settle check (weft_wait_settled_timed) reads it with
     * them, so that a body woken by a placeholder ending is seen to move. */
    _Atomic uint64_t proxies_final;
    bool check_data;                   /* the checking mode: each task's data checked as it starts */
    bool no_prefetch;                  /* WEFT_PREFETCH=0: copies in on the task's stream only */
    weft__bound_log *blog;             /* each task recorded for the makespan's bound
                                          (weft_config.bound; set before the workers start),
                                          NULL: not recording */
};

void weft__graph_init(weft__graph *g, weft__sched *s, weft__waitset *ws, int64_t throttle_low);
/* Take counts back from inflight; wakes wait_all at zero and backpressure
 * sleepers at the low mark. */
void weft__graph_leave(weft__graph *g, int64_t counts);

/* A live task behind a user handle (or a space's), or NULL. */
weft__task *weft__task_get(const weft_task *h);
void weft__task_ref(weft__task *t);
void weft__task_unref(weft__task *t);

/* What a spawn is asked to check and to link besides its descriptor: task
 * spaces refuse predecessors that would close a cycle, and hand the new task
 * to the placeholder of its key. */
typedef struct weft__spawn_extra {
    bool (*forbidden)(void *arg, const weft__task *pred);
    void *arg;
    const char *forbidden_what;       /* for the error message */
    weft__task *cont_of;              /* a continuation of this task (weft_ctx_continue): its
                                         explicit dependencies carry no failure, and the root
                                         holds one op for it (taken by the caller) */
    weft__task *fulfil;               /* placeholder to complete with the new task */
    bool space_owned;
    bool transparent;                 /* weft__task.transparent */
} weft__spawn_extra;

/* Spawn a validated descriptor (the front end checked handles and modes, and
 * holds one in-flight count the task takes over on success).  Returns 0 and
 * the task (*out, referenced for a handle if want_handle), or WEFT_ENOMEM /
 * WEFT_EINVAL (a handle being unregistered) / WEFT_EDEADLK (extra->forbidden)
 * with nothing linked. */
int weft__task_spawn(weft__graph *g, const void *rt_handle, const weft_task_desc *d,
                     const weft__spawn_extra *x, bool want_handle, weft__task **out);

/* "task 'name' (id N)", or "task id N" for a task without a name: for
 * messages. */
void weft__task_label(const weft__task *p, char *buf, size_t len);

/* A task-space placeholder named `name` (with a handle, lent by the space);
 * it completes as its fulfilling task does, or is cancelled by abandon. */
weft__task *weft__task_proxy_new(weft__graph *g, const void *rt_handle, const char *name);
void weft__task_proxy_abandon(weft__task *p, const char *cause);

/* Worker side of the pipeline. */
enum { WEFT__START_RUN, WEFT__START_CANCEL, WEFT__START_DEFER };
/* Decide whether the body runs (gate, epoch, commute).  DEFER: it waits
 * for a commute member, or for copies of what it reads on the host, with
 * no worker held; it is queued again when they are done. */
int weft__task_start(weft__task *t);
/* Before the body of a task that runs: its streams wait for the events of
 * its early-released GPU predecessors.  Returns whether it queued such a
 * wait (a predecessor not finished yet). */
bool weft__task_prepare(weft__task *t);
/* Then (a task with data): each access made valid on the task's device (or
 * the host's copy, WEFT_HOST), copies on its streams, or, when it waited
 * for no predecessor's events (waited_events false), on its devices'
 * prefetch queues, which its streams wait for.  0, or the error
 * that fails the task instead of running its body (WEFT_ENOMEM: no room for
 * a replica; a device's error). */
int weft__task_acquire(weft__task *t, bool waited_events);
/* The checking mode, around the body of a task on virtual GPUs: its
 * copies in landed, its streams held until the body returns, and then
 * whether the body changed a replica of its data from the host (the
 * memory of a virtual GPU is host memory; a real GPU's is not): the task
 * then fails (*result, if it succeeded) and it is reported.  begin returns
 * NULL when there is nothing to guard. */
struct weft__guard;
struct weft__guard *weft__task_guard_begin(weft__task *t);
void weft__task_guard_end(weft__task *t, struct weft__guard *g, int *result);
/* The body synchronised with its streams (weft_ctx_sync): what it changed
 * in its replicas on the host until now is reported (*result as
 * guard_end's), and from now on the replicas are the body's to use on the
 * host — the check is over for this body, and its streams run on. */
void weft__task_guard_sync(weft__task *t, struct weft__guard *g, int *result);
/* The checking mode, around a body that reads and writes (RW) a tile with
 * a halo on the host: its halo cells there are its neighbours' interiors,
 * which no task but it can change meanwhile (their writers are ordered
 * with it).  begin notes their digest (of the first WEFT__HALO_GUARDS
 * accesses); end reports a change and fails the task (*result, if it
 * succeeded). */
#define WEFT__HALO_GUARDS 8
typedef struct weft__halo_guard {
    uint64_t digest[WEFT__HALO_GUARDS];
} weft__halo_guard;
void weft__task_halo_begin(const weft__task *t, weft__halo_guard *g);
void weft__task_halo_end(weft__task *t, const weft__halo_guard *g, int *result);
/* Where access a of t (mapped) is: the device index (0: the host, for
 * WEFT_HOST) and, when q is not NULL, the stream there (NULL on the host):
 * the GPU its WEFT_ON_GPU names, else the task's device. */
unsigned weft__task_access_dev(const weft__task *t, const weft__task_access *a, struct weft__dqueue **q);
enum { WEFT__FAIL_BODY = 0, WEFT__FAIL_CHECK = 1, WEFT__FAIL_DEVICE = 2, WEFT__FAIL_WATCH = 3 };
/* t's outcome once it ends final (WEFT__T_COMPLETED, FAILED or CANCELLED),
 * as a wait on it reports it: 0, or WEFT_ETASKFAILED / WEFT_ECANCELLED with
 * the calling thread's message saying why (the checking mode's report on a
 * task it failed, what it was cancelled for). */
int weft__task_outcome(const weft__task *t, int final);

/* The body will not run (WEFT__START_CANCEL): complete t as cancelled. */
void weft__task_cancelled(weft__task *t, weft__qnode **next);
void weft__task_body_returned(weft__task *t, int result, weft__qnode **next);
/* The one completion function (any thread, after the body returned). */
void weft__task_complete(weft__task *t, int final, weft__qnode **next);
/* The task whose on_finish callback the calling thread is running (NULL:
 * none; the innermost one if a callback's spawn completes another task).
 * The front end reads it: a spawn from a callback never waits for
 * backpressure, and a wait from one is refused (api/). */
extern _Thread_local const weft__task *weft__tls_finishing;

/* Device work queued by a body: op_begin on the body's thread before handing
 * op_done (a weft__done_fn, cookie = t) to the device. */
void weft__task_op_begin(weft__task *t);
void weft__task_op_done(void *cookie, int status);
/* A piece of device work of task `cookie` failed (a weft__launch's
 * on_error): the task fails once its work is done.  Called before the
 * task's completion report, so the task is alive. */
void weft__task_op_failed(void *cookie, int status);

/* A kernel of task `cookie` is about to run on its queue (a device's
 * thread, weft__launch.skip): whether the task was cancelled meanwhile by
 * an early-released predecessor that failed (the queue waited for its
 * events, so its own work has ended and its failure is known), directly
 * or through such predecessors of its own.  Then none of its kernels runs
 * (the first one asked decides for all), and an abort of its writes knows
 * it left the replicas as they were. */
bool weft__task_skip_work(void *cookie);

/* t's newest continuation, referenced, if it is still alive; else NULL. */
weft__task *weft__task_cont_pin(weft__task *t);
/* The task a continuation spawned from t's body continues: t's root if t
 * is a continuation itself, else t.  The caller takes an op on it
 * (weft__task_op_begin) before spawning the continuation with
 * weft__spawn_extra.cont_of set to it, and drops it if the spawn fails. */
static inline weft__task *weft__task_cont_root(weft__task *t) { return t->cont_of ? t->cont_of : t; }

/* While t's body waits (weft_task_wait from inside it): lend its GPUs'
 * (or, on the CPU alone, the CPU's) compute share and memory reservation
 * to the tasks parked for them (queued here), and take them back (even
 * beyond what fits, for a while) when the wait returns.  No-ops for a task
 * that reserved nothing. */
void weft__task_lend(weft__task *t);
void weft__task_unlend(weft__task *t);

/* Mark t as not to run; the first caller wins. */
bool weft__task_doom(weft__task *t, uint64_t cause_id, const char *cause_name, uint8_t kind);

/* How many edges of t may be read (acquire: a placeholder's is written late). */
static inline uint32_t weft__task_nedges(const weft__task *t)
{
    return atomic_load_explicit(&((weft__task *)t)->nedges, memory_order_acquire);
}

/* Take a reference on an edge's predecessor if it is still the same task. */
bool weft__edge_pin_pred(const weft__edge *e);

/* The current members of a handle's history (last writers, readers since,
 * the commute group's base, its scratch users not finished), referenced; at
 * most max.  Every unfinished task that names the handle is one of them or
 * one of their predecessors. */
size_t weft__history_members(weft__data *d, weft__task **out, size_t max);

/* Scratch users (WEFT_SCRATCH accesses order nothing, but an unregister
 * waits for them, and a wait from a task helps run them): a spawn reserves
 * room for its task in d's list before it links (false: out of memory),
 * then adds it (a reference) or gives the room back. */
bool weft__history_scratch_reserve(weft__data *d);
void weft__history_scratch_add(weft__data *d, weft__task *t);
void weft__history_scratch_unreserve(weft__data *d);

/* access.c */
void *weft__history_new(void);              /* NULL on ENOMEM */
/* Hold d's history still (no spawn naming d plans meanwhile). */
void weft__history_lock(weft__data *d);
void weft__history_unlock(weft__data *d);
void weft__history_free(void *hist);        /* drops its references */
/* d is being unregistered and n overlaps it (the index lock held, so no
 * spawn reads the neighbour lists meanwhile): d's last writers and
 * readers since enter n's history as partial accesses, which n's later
 * tasks follow as they would have followed them through d.  false on
 * ENOMEM (nothing changed). */
bool weft__history_hand_over(weft__data *d, weft__data *n);
int weft__access_plan(weft__task_access *sorted, uint32_t n, uint32_t *ninferred);
/* Would any task this spawn is about to follow through its data be
 * forbidden?  false if one is: *hit (if not NULL) is then sorted[*hit_i]'s
 * forbidden predecessor (alive while the histories are locked), and
 * *hit_writer whether it writes that data. */
bool weft__access_check(const weft__task_access *sorted, uint32_t n,
                        bool (*forbidden)(void *arg, const weft__task *pred), void *arg,
                        const weft__task **hit, uint32_t *hit_i, bool *hit_writer);
void weft__access_link(weft__task *t, const weft__task_access *sorted, uint32_t n, weft__edge *edges);
bool weft__commute_acquire(weft__task *t);
void weft__commute_release(weft__task *t, weft__qnode **next);
void weft__access_lock_all(weft__task_access *sorted, uint32_t n);
void weft__access_unlock_all(weft__task_access *sorted, uint32_t n);
void weft__edge_add(weft__task *t, weft__edge *e, weft__task *p, bool propagate, bool late);
void weft__task_requeue(weft__task *t, weft__qnode **next); /* a commute waiter's turn */

#endif
