/*
 * sched/sched.h — the scheduling layer: ready queues (one per worker), work
 * stealing, parking and waking idle consumers, and mapping a ready task to a
 * device.
 *
 * The layer knows tasks only as queue nodes (weft__qnode, embedded in the
 * graph's task); it calls nothing above it.
 */
#ifndef WEFT_SCHED_H
#define WEFT_SCHED_H

#include "internal.h"
#include "wait.h"

typedef struct weft__readyq weft__readyq;
typedef struct weft__sched weft__sched;

/* A queued item: intrusive pairing-heap links plus its ordering key. */
typedef struct weft__qnode {
    struct weft__qnode *child, *next, *prev;
    _Atomic(weft__readyq *) on;  /* the queue that holds it, or NULL */
    int priority;                /* higher first */
    uint64_t seq;                /* then lower first (spawn order) */
} weft__qnode;

struct weft__readyq {
    weft__sched *sched;
    /* lock protects heap; size mirrors its size for lock-free peeking.
     * Nothing nests under it. */
    pthread_mutex_t lock;
    weft__qnode *heap;
    _Atomic size_t size;
    _Atomic uint64_t pushes;     /* nodes ever queued here (counted under lock, after the node) */
    /* park_lock protects wake; parked is read without it by wakers.
     * Nothing nests under it. */
    pthread_mutex_t park_lock;
    pthread_cond_t park_cond;
    bool wake;
    _Atomic bool parked;
    uint64_t rng;
    _Atomic uint64_t n_steals, n_parks; /* written by the consumer only */
} __attribute__((aligned(WEFT__CACHELINE)));

struct weft__sched {
    unsigned nq;
    weft__readyq *q;             /* nq queues, one per worker */
    _Atomic uint32_t rr;         /* round-robin target for pushes from outside */
    _Atomic int nparked;
    _Atomic bool stop;           /* consumers should exit */
    weft__waitset *ws;           /* helpers that wait are woken by new work */
};

/* The queue of the worker running on this thread (NULL elsewhere). */
extern _Thread_local weft__readyq *weft__tls_q;

int weft__sched_init(weft__sched *s, unsigned nq, weft__waitset *ws); /* 0 or WEFT_ENOMEM */
void weft__sched_fini(weft__sched *s);

/* Queue a ready node: on the calling worker's own queue, or round-robin from
 * outside; wake a parked consumer and the helpers.  If next is non-NULL and
 * still empty, and the caller is a worker of s with an empty queue, the node
 * is handed back through *next instead (the caller runs it at once). */
void weft__sched_push(weft__sched *s, weft__qnode *n, weft__qnode **next);
/* Remove n from whatever queue holds it; false if none does. */
bool weft__sched_take(weft__qnode *n);
/* Pop from own queue, else steal. */
weft__qnode *weft__sched_find(weft__sched *s, weft__readyq *own);
bool weft__sched_any(weft__sched *s);
/* Nodes queued now, and nodes ever queued, over all queues (each queue's
 * count read once: exact only while nothing is pushed or taken). */
size_t weft__sched_queued(weft__sched *s);
uint64_t weft__sched_pushes(weft__sched *s);
/* Sleep until woken, unless work or stop shows up first. */
void weft__sched_park(weft__sched *s, weft__readyq *q);
void weft__sched_wake_all(weft__sched *s);

/* Mapping: the device a ready task runs on.  Only the host (device 0) so far;
 * the placement policies of the devices issue go here. */
static inline unsigned weft__sched_map(const weft__sched *s)
{
    (void)s;
    return 0;
}

#endif
