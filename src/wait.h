/*
 * wait.h — the one wait engine.  Every blocking wait in Weft (a task, all
 * tasks, backpressure, an unregister, a device event) is a weft__wait spec
 * run by weft__wait_until: it checks the condition, helps (runs eligible
 * tasks, through the caller's callback), polls device progress, spins a
 * little, and then sleeps until a notifier names the key it waits for.  No
 * wait in Weft sleeps on a timer: the only timed sleep is the caller's own
 * deadline.
 *
 * The notifying side (weft__wake, weft__wake_work) touches only the waitset,
 * so every layer may call it without calling upwards.
 *
 * Pollers: work that completes only when someone polls it (a communicator
 * across ranks: its MPI tests) registers a progress step in a pollset;
 * idle workers and waits run the steps while they spin.  The layers above
 * register into it; the engine calls nothing above itself.
 *
 * Lost wake-ups: a sleeper registers itself (and bumps the interest counter
 * its notifier reads) before it re-checks the condition; a notifier changes
 * the state before it reads the counters; both sides use sequentially
 * consistent atomics, so one of them always sees the other.
 */
#ifndef WEFT_WAIT_H
#define WEFT_WAIT_H

#include "internal.h"

typedef struct weft__sleeper weft__sleeper;

typedef struct weft__waitset {
    /* lock protects the sleeper list and each sleeper's woken flag; nothing
     * nests under it.  Initialised once and never destroyed (the waitset of
     * a runtime lives in its type-stable slot: a late notifier may still
     * take it while the runtime is destroyed). */
    pthread_mutex_t lock;
    pthread_condattr_t cattr;            /* CLOCK_MONOTONIC */
    weft__sleeper *head;
    _Atomic int32_t nsleepers;           /* registered sleepers (any key) */
    _Atomic int32_t nwork;               /* of those, how many want new-work wake-ups */
    /* counters (weft_stats) */
    _Atomic uint64_t n_waits, n_sleeps, n_wake_event, n_wake_timer;
} weft__waitset;

/* Well-known keys. */
extern const char weft__key_idle;     /* a runtime's in-flight count reached zero */
extern const char weft__key_throttle; /* backpressure may have eased, or a worker stopped running */
extern const char weft__key_settle;   /* a task completed: the runtime may have settled */
extern const char weft__key_any_final; /* a task finished: one of several may be (weft_task_wait_any) */

/* A spin that adapts to how waits of one thread end (weft__wait.adapt):
 * its length, halved when a wait had to sleep and doubled (up to the
 * wait's spin) when it ended while spinning; every
 * WEFT__SPIN_PROBE_EVERY-th wait spins the whole length (a probe), and one
 * that ends in it brings the whole length back.  For a thread outside the
 * workers: where it shares the cores with them (more runnable threads
 * than cores), its spin takes the core the worker with its task needs,
 * and the wait then sleeps anyway (measured: a program thread's round trip
 * of an empty Python task, 28-32 us spinning 2000 times against 5 us
 * without a spin, with one busy process beside), while on a quiet machine
 * the spin ends it before a sleep could (12 us against 46-51 us, a
 * wake-up of an idle virtual CPU being slow).  Zero-initialised: the
 * first wait spins the whole length. */
typedef struct weft__spin_adapt {
    unsigned len, waits;
} weft__spin_adapt;
#define WEFT__SPIN_PROBE_EVERY 16u
#define WEFT__SPIN_MIN 16u

typedef struct weft__wait {
    const void *key;                     /* what a notifier names to end the sleep */
    bool (*done)(const void *arg);       /* the condition; called often, must not block */
    const void *arg;
    /* One step of useful work (NULL: none); true if it ran something.  A
     * sleeper with a help step is also woken by new ready work. */
    bool (*help)(void *help_arg);
    void *help_arg;
    /* Poll device progress (NULL: none). */
    void (*progress)(void *progress_arg);
    void *progress_arg;
    _Atomic int32_t *interest;           /* bumped while asleep, so its notifier knows (may be NULL) */
    _Atomic int32_t *blocked;            /* bumped while asleep: a worker that cannot run tasks (may be NULL) */
    uint64_t deadline;                   /* absolute, weft__now_ns(); UINT64_MAX for none */
    unsigned spin;                       /* condition checks before the first sleep */
    weft__spin_adapt *adapt;             /* the calling thread's, when its spin adapts (may be NULL) */
    /* After the first wake-up that finds the condition false, keep
     * checking it for up to this long before sleeping again (0: never).
     * For waits whose notifier wakes them early, when the end is near
     * (weft__graph_leave), so that waking up overlaps the last work. */
    uint64_t linger_ns;
} weft__wait;

void weft__waitset_init(weft__waitset *ws);

/* Block until w->done(w->arg) holds (0) or the deadline passed
 * (WEFT_ETIMEDOUT).  Never holds a lock while it calls back. */
int weft__wait_until(weft__waitset *ws, const weft__wait *w);

/* Wake every sleeper waiting for key.  Cheap when nobody sleeps. */
void weft__wake(weft__waitset *ws, const void *key);

/* New ready work: wake the sleepers that help while they wait. */
static inline bool weft__wake_work_wanted(weft__waitset *ws) { return atomic_load(&ws->nwork) > 0; }
void weft__wake_work(weft__waitset *ws);

/* ------------------------------------------------------------------------ */
/* Pollers                                                                   */
/* ------------------------------------------------------------------------ */

/* A progress step, as its owner registers it: what it polls (a name for
 * whoever inspects the set, a debugger) and the step.  The step must never block and may be called
 * from any thread, several at once; it returns what it found
 * (WEFT__POLL_IDLE, _BUSY or _ENDED: internal.h). */
typedef int (*weft__poll_fn)(void *arg);
typedef struct weft__poll_ops {
    const char *name;
    weft__poll_fn poll;
} weft__poll_ops;

/* One registered step.  Lock-free: a caller counts itself in `users`
 * before it reads `poll`, and removing clears `poll` then waits for
 * `users` to drop to 0 (both sequentially consistent, so one side always
 * sees the other). */
#define WEFT__MAX_POLLERS 16
typedef struct weft__poller {
    _Atomic bool taken;                /* the slot is registered (claimed by compare-and-swap) */
    _Atomic(weft__poll_fn) poll;       /* NULL while free or being removed */
    _Atomic(void *) arg;
    const char *name;                  /* written by the registration that took the slot */
    _Atomic int32_t users;             /* callers inside poll, or about to be */
} weft__poller;

/* The progress steps of one runtime, and who runs them.  Zeroed to start
 * with none. */
typedef struct weft__pollset {
    weft__poller slot[WEFT__MAX_POLLERS];
    _Atomic uint32_t n;                /* registered steps, read first: none costs one load */
    /* The one idle worker that keeps polling past its spin while work that
     * completes by polling is in flight, instead of parking (index + 1; 0:
     * none); the others park (worker.c). */
    _Atomic uint32_t polling_worker;
    /* Idle workers spinning now (not parked) that run the steps, counted
     * only while some step is registered: while one is, a waiting thread
     * leaves the steps to it (weft__poll_waiting), so that one thread per
     * rank polls and the waiter does not take turns with it at a
     * communicator's lock. */
    _Atomic uint32_t idle_pollers;
} weft__pollset;

/* Register ops->poll(arg): 0, with its slot in *slot, or WEFT_ENOMEM when
 * all WEFT__MAX_POLLERS slots are taken (*slot -1: the caller must make
 * progress without, e.g. by a thread of its own). */
int weft__poller_add(weft__pollset *ps, const weft__poll_ops *ops, void *arg, int *slot);
/* Remove the step in slot: returns once no thread is inside it. */
void weft__poller_remove(weft__pollset *ps, int slot);

static inline bool weft__pollers_any(weft__pollset *ps)
{
    return atomic_load_explicit(&ps->n, memory_order_relaxed) > 0;
}

/* Run every registered step once: the most any found (WEFT__POLL_ENDED if
 * one completed something).  For idle workers and waits. */
static inline int weft__poll(weft__pollset *ps)
{
    if (!weft__pollers_any(ps))
        return WEFT__POLL_IDLE;
    int most = WEFT__POLL_IDLE;
    for (unsigned i = 0; i < WEFT__MAX_POLLERS; i++) {
        weft__poller *p = &ps->slot[i];
        if (!atomic_load_explicit(&p->poll, memory_order_relaxed))
            continue;
        atomic_fetch_add(&p->users, 1);
        weft__poll_fn fn = atomic_load(&p->poll);
        int r = fn ? fn(atomic_load(&p->arg)) : WEFT__POLL_IDLE;
        if (r > most)
            most = r;
        atomic_fetch_sub(&p->users, 1);
    }
    return most;
}

/* A waiting thread's turn at the steps: left to an idle worker that spins
 * on them, if there is one (the caller yields its core to it when
 * `yield`); otherwise run once here (the caller yields when they found
 * work in flight of which nothing ended, and `yield`). */
void weft__poll_waiting(weft__pollset *ps, bool yield);

#endif
