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

#endif
