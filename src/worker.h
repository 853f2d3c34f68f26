/*
 * worker.h — the execution layer: worker threads (find work, run it, spin,
 * park), running bodies with their context, and the help a waiting body
 * gives (what it may run nested on its stack).
 */
#ifndef WEFT_WORKER_H
#define WEFT_WORKER_H

#include "internal.h"
#include "graph/graph.h"
#include "sched/sched.h"

typedef struct weft__rt weft__rt;

typedef struct weft__worker {
    weft__rt *rt;
    unsigned index;
    pthread_t thread;
    bool started;
    int start_cpu;                     /* WEFT_PIN_AUTO: the CPU it starts on (placed there, not
                                        * pinned: weft__workers_start), -1: none */
    weft__readyq *q;                   /* its ready queue (sched) */
    weft__task *current;               /* task whose body runs now (innermost) */
    _Atomic int64_t depth;             /* bodies executing on this worker (nested waits) */
    _Atomic int32_t blocked;           /* asleep in a wait: runs nothing until woken */
    /* The innermost untimed weft_task_wait or weft_task_wait_any of a body
     * on this worker: the task it waits for (wait_on; NULL: none, or a
     * wait for any), or the tasks of a wait for any (wait_any_n > 0: a
     * copy in wait_any, a buffer of this worker's that only grows, the
     * buffers it outgrew kept until the runtime is destroyed, so that the
     * settle check never reads freed memory), and `depth` when it began.
     * Written by this worker only, under wait_seq (odd while they change),
     * and read by the settle check (api_wait.c). */
    _Atomic uint32_t wait_seq;
    weft__task *_Atomic wait_on;
    _Atomic size_t wait_any_n;
    struct weft__wait_set *_Atomic wait_any;
    weft__task *const *wait_any_src;   /* the caller's array of that wait for any (its own) */
    _Atomic int64_t wait_depth;
    /* The queues' push count (weft__sched_pushes) read before that wait's
     * last look for work it could run, which found none (UINT64_MAX: not
     * looked yet); written by this worker only. */
    _Atomic uint64_t wait_seen;
    weft__task_stats stats;            /* written by this worker only */
    _Atomic uint64_t idle_ns;
    _Atomic uint64_t idle_since;       /* start of the current idle period, 0 while busy */
    bool ran;                          /* ran tasks since its last idle moment (its own) */
    weft_body_fn held;                 /* the body function whose held resource it keeps for
                                        * its next body (weft_ctx_hold_over), NULL: none (its own) */
    /* WEFT_PIN_AUTO (autopin.h): tasks left until its next sample
     * (UINT64_MAX: it takes none) and between samples, the time of its
     * latest sample (its own); that sample in one word, written by it,
     * read by the worker deciding: (CPU + 1) << 48 | microseconds of
     * weft__now_ns (0: none). */
    uint64_t pin_left, pin_every, pin_last_ns;
    _Atomic uint64_t pin_sample;
} __attribute__((aligned(WEFT__CACHELINE))) weft__worker;

/* Observers of the workers (Taskflow's ObserverInterface): the tools that
 * watch tasks run (the trace) hook in through this table of named
 * operations, which the front end fills before the workers start and
 * leaves alone until they have stopped (so workers read it without a
 * lock).  on_exit: the body of t ran on worker `worker` from start_ns to
 * end_ns (weft__now_ns); called on that worker's thread after the body
 * returned, before its task completes (t and its data are as the body
 * left them); it must not block. */
typedef struct weft__observer_ops {
    const char *name;
    void (*on_exit)(void *self, unsigned worker, const weft__task *t, uint64_t start_ns, uint64_t end_ns);
    /* May be NULL.  Something happened to the workers worth a line (the
     * automatic pinning, autopin.h): `name` and a one-line `detail`, at
     * at_ns, told by worker `worker` on its thread, rarely (the strings
     * are the caller's: copy them); it must not block for long. */
    void (*on_note)(void *self, unsigned worker, uint64_t at_ns, const char *name, const char *detail);
} weft__observer_ops;

#define WEFT__MAX_OBSERVERS 4
typedef struct weft__observers {
    unsigned n;
    struct {
        const weft__observer_ops *ops;
        void *self;
    } at[WEFT__MAX_OBSERVERS];
} weft__observers;

/* Add an observer (before the workers start): 0, or WEFT_ENOMEM when
 * WEFT__MAX_OBSERVERS are added. */
int weft__observer_add(weft__observers *o, const weft__observer_ops *ops, void *self);

/* What a body sees (weft.h's weft_ctx). */
struct weft_ctx {
    weft__rt *rt;
    weft__worker *worker;
    weft__task *task;
    struct weft__guard *guard; /* the checking mode's guard of the body (NULL: none) */
};

/* The worker the calling thread is, if any. */
extern _Thread_local weft__worker *weft__tls_worker;

int weft__workers_start(weft__rt *rt);
void weft__workers_stop(weft__rt *rt);

/* Whether t's body may start with what the previous body left held
 * (weft_ctx_hold_over): nothing to wait for before or after it but itself. */
static inline bool weft__task_holdable(const weft__task *t)
{
    return !t->place && t->naccess == 0 && !t->cont_of;
}

/* Help while waiting for `awaited`: run it if it is queued, else (if
 * with_predecessors) one of its queued predecessors.  Only such tasks are safe to run nested: anything else
 * might wait for the body suspended underneath.  true if it ran something. */
bool weft__help_task(weft__worker *w, weft__task *awaited, bool with_predecessors);
/* Does `t` (transitively, through unfinished predecessors) depend on a task
 * suspended on w's stack?  Then waiting for it from there can never end. */
bool weft__depends_on_suspended(weft__worker *w, weft__task *t);
/* Is `t` `on`, or does it (transitively, through unfinished predecessors
 * and continuations, as far as a bounded walk shows) depend on it? */
bool weft__depends_on(weft__task *t, weft__task *on);
/* Could the runtime's tasks still make progress without the calling worker
 * (another worker running a body, or free to run queued work)? */
bool weft__others_can_progress(weft__rt *rt, const weft__worker *me);

#endif
