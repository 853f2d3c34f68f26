/*
 * api/runtime.h — the runtime object of the front end (api/): one per
 * weft_runtime handle, composed of each layer's own state.  The layers below
 * see only their own part (the graph its weft__graph, sched its weft__sched,
 * ...); the execution layer (worker.c) reads the worker table, the
 * configuration, the pollset and the observers, and the trace (trace.c) the
 * device table.
 */
#ifndef WEFT_API_RUNTIME_H
#define WEFT_API_RUNTIME_H

#include "internal.h"
#include "autopin.h"
#include "data/data.h"
#include "data/overlap.h"
#include "device/device.h"
#include "graph/graph.h"
#include "sched/sched.h"
#include "wait.h"
#include "worker.h"

typedef struct weft__space weft__space;

struct weft__rt {
    weft__slot slot;                   /* must be first */
    /* The waitset is initialised once per slot and never destroyed: a thread
     * that has just dropped the last in-flight count may still wake it while
     * destroy completes (the slot itself is type-stable). */
    weft__waitset waits;
    bool sync_ready;
    /* Before `open`: create leaves it to weft__graph_init, which keeps the
     * sleeper counts a late leaver of the slot's previous runtime may read. */
    weft__graph graph;
    _Atomic bool open;                 /* accepting calls; first field create resets */
    _Atomic bool closing;              /* destroy began: only its own tasks may spawn */
    weft_config cfg;
    char *trace_path;
    unsigned nworkers;
    unsigned cores;                    /* CPUs the creating thread could run on (set by workers_start) */
    weft__autopin autopin;             /* pin_workers = WEFT_PIN_AUTO (autopin.h) */
    weft__worker *workers;
    size_t max_inflight;
    weft__sched sched;
    weft__placer placer;               /* the GPUs of dev[] (not test devices) and the policy */
    bool placer_ready;
    weft__perfmodel models;            /* the earliest-finish policy's (sched/perfmodel.h) */
    bool models_ready;
    weft__device *dev[WEFT__MAX_DEVICES]; /* [0] the host; then the virtual GPUs (and test devices) */
    unsigned ndev;
    bool cpu_tasks;                    /* "cpu" was among the devices asked for */
    weft__copy_counts copied;          /* bytes copied between data replicas (weft_stats) */
    _Atomic uint32_t next_data_id;     /* data handles' numbers (the trace's d1, d2, ...) */
    _Atomic int32_t body_waits;        /* bodies in weft__wait_task or weft__wait_any now: settled
                                          looks for stuck bodies only while there are some */
    weft__mnode mnodes[WEFT__MAX_DEVICES]; /* each device's replicas (data layer) */
    _Atomic bool yield_idle;           /* idle workers yield their core now and then: virtual
                                          GPUs' queue threads and MPI communicators' progress
                                          threads need it (set with the device, or the first
                                          communicator across ranks; never cleared) */
    /* data_lock protects data_list, spaces, reductions and adding to dev
     * (devices are added before the tasks and data that use them).  Taken
     * alone. */
    pthread_mutex_t data_lock;
    weft__data *data_list;
    /* The registered host ranges, for the order of overlapping ones
     * (data/overlap.h; its own lock, taken alone or before histories'). */
    weft__ranges ranges;
    weft__space *spaces;
    struct weft__reduction *reductions; /* user reductions (weft_reduction_register), newest first;
                                          freed with the runtime, after its data */
    /* The data acquired by threads outside tasks (weft_data_acquire), or
     * being acquired: one record per handle (api/api_data.c), under data_lock. */
    struct weft__acq *acquired;
    /* Progress steps that complete work by polling (a communicator across
     * ranks: its MPI tests), run by idle workers and the runtime's waits. */
    weft__pollset polls;
    /* The tools watching the workers (worker.h), filled before they start;
     * the trace is one (NULL without a trace_path). */
    weft__observers observers;
    struct weft__tracer *tracer;
};

/* api/runtime.c */
/* Add `counts` to the in-flight count (so destroy waits for the caller) and
 * check the runtime is open; weft__rt_leave takes counts back.  A spawned
 * task keeps one count until it finishes.  While destroy drains, only the
 * runtime's own tasks may enter, unless `drain_ok`. */
weft__rt *weft__rt_enter(const weft_runtime *h, const char *fn, int *err, int64_t counts, bool drain_ok);
static inline void weft__rt_leave(weft__rt *rt, int64_t counts) { weft__graph_leave(&rt->graph, counts); }
weft__rt *weft__rt_get(const weft_runtime *h, const char *fn, int *err);

/* Is the calling thread one of rt's workers (i.e. inside one of its tasks)? */
static inline bool weft__on_own_worker(const weft__rt *rt)
{
    return weft__tls_worker && weft__tls_worker->rt == rt;
}

/* Is the calling thread running an on_finish callback (of any runtime's
 * task)?  Its spawns do not wait for backpressure; its waits are refused. */
static inline bool weft__in_callback(void) { return weft__tls_finishing != NULL; }

/* api/runtime.c: 0, or WEFT_EDEADLK with a message naming fn when the
 * calling thread runs an on_finish callback: fn would block the thread that
 * finishes tasks, which the wait may need. */
int weft__refuse_in_callback(const char *fn);

/* api/models.c: the makespan's bound of what rt has run (weft_runtime_bound's,
 * errors named after fn), and its line on stderr (weft_runtime_destroy,
 * under WEFT_BOUND_PRINT). */
int weft__bound_of(weft__rt *rt, weft_bound *out, const char *fn);
void weft__bound_print(weft__rt *rt);

/* api/api_wait.c: the runtime's waits, built on the wait engine. */
int weft__wait_task(weft__rt *rt, weft__task *t, uint64_t deadline);
/* Until one of ts[0..n) has finished (its index to *which, the first
 * entry of a task listed twice): 0 or WEFT_ETIMEDOUT. */
int weft__wait_any(weft__rt *rt, weft__task *const *ts, size_t n, uint64_t deadline, size_t *which);
/* The first index in ts of the task at ts[i]. */
size_t weft__first_index(weft__task *const *ts, size_t i);
int weft__wait_idle(weft__rt *rt, uint64_t deadline);           /* inflight == 0 (outside threads) */
/* Free the workers' copies of their waits for any (at destroy, the
 * workers stopped). */
void weft__wait_frames_fini(weft__rt *rt);
/* api/api_task.c: the task whose data accesses the body of ctx reaches:
 * its own; for a continuation (weft_ctx_continue, which names no data),
 * the task it continues. */
const weft__task *weft__ctx_data_task(const weft_ctx *ctx);

/* api/api_wait.c: when only a spawn of a task-space key can move what is
 * left (settled, and keys nobody spawned have tasks waiting for them), how
 * many such keys, the first one's label in key (32 bytes); else 0. */
size_t weft__stalled_keys(weft__rt *rt, char *key);
/* api/api_wait.c: when the runtime has settled with no such key and bodies
 * stuck in untimed waits (weft_runtime_deadlocked), how many workers hold
 * them, the tasks they wait for labelled in what (len bytes); else 0. */
size_t weft__deadlocked(weft__rt *rt, char *what, size_t len);
/* inflight == 0, or every task left waits for a task-space key nobody
 * spawned: no body running, nothing ready, no device work (outside threads). */
int weft__wait_settled(weft__rt *rt, uint64_t deadline);
void weft__wait_throttle(weft__rt *rt, int64_t self);            /* backpressure */
void weft__wait_data_unused(weft__rt *rt, weft__data *d);        /* every task using d finished */
/* Until done(arg), ended by a wake on key (no help: a body waiting for its
 * own streams, weft_ctx_sync). */
void weft__wait_cond(weft__rt *rt, const void *key, bool (*done)(const void *), const void *arg,
                     _Atomic int32_t *interest);
void weft__rt_progress(void *rt);  /* poll every device's progress and the registered progress steps */

/* api/api_wait.c: register fn(arg) as a progress step of rt (weft__poller_add
 * on rt's pollset: 0, or WEFT_ENOMEM with *slot -1 when every slot is
 * taken), and remove it (returns once no thread is inside fn). */
int weft__rt_poller_add(weft__rt *rt, weft__poll_fn fn, void *arg, int *slot);
void weft__rt_poller_remove(weft__rt *rt, int slot);

/* api/api_task.c: shared by weft_spawn and weft_space_spawn. */
int weft__desc_check(const weft_runtime *h, const weft_task_desc *d, const char *fn);
weft__rt *weft__spawn_enter(weft_runtime *h, const weft_task_desc *d, const char *fn, int *err, int64_t *held);
void weft__spawn_leave(weft__rt *rt, int64_t held, bool spawned);

/* api/api_wait.c: until t has finished or done(arg) holds (outside threads:
 * no help).  0 or WEFT_ETIMEDOUT.  Ended by a wake on key t. */
int weft__wait_task_or(weft__rt *rt, weft__task *t, bool (*done)(const void *), const void *arg,
                       uint64_t deadline);

/* api/api_data.c: destroy releases the acquisitions still held (not those
 * being made: their acquire sees the runtime closing). */
void weft__acquired_release_all(weft__rt *rt);

/* api/space.c: destroy every space of rt; returns how many keys nobody
 * spawned had tasks waiting for them (cancelled now), the first one's
 * label in first (32 bytes). */
size_t weft__spaces_close_all(weft__rt *rt, char *first);

/* api/space.c: how many keys nobody has spawned have tasks (or bodies in
 * weft_task_wait) waiting for them, the first one's label in first (32
 * bytes).  Changes nothing. */
size_t weft__spaces_unspawned(weft__rt *rt, char *first);

#endif
