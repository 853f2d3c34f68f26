/*
 * device/vsched.c — the virtual GPUs' seeded schedule (see vsched.h).
 */
#include "device/vsched.h"
#include "env.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

/* The schedule.  mu protects every field here and every field of each
 * member queue's weft__vsched_q; nothing nests under it (a `ready` test
 * reads atomics only).  `turn` is broadcast when a turn is granted. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t turn;
    int devices;               /* virtual GPUs in the mode */
    uint64_t seed;
    uint64_t now;              /* modelled time: the last granted item's finish */
    uint64_t queues;           /* queues added since the schedule started */
    weft__vsched_q *members;   /* every queue in the schedule */
    weft__vsched_q *offered;   /* waiting for a turn */
    weft__vsched_q *running;   /* holds the turn (NULL: free) */
} S = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, NULL, NULL, NULL};

bool weft__vsched_wanted(uint64_t *seed)
{
    return weft__env_uint("WEFT_VGPU_SCHEDULE", seed);
}

/* The seeded choice for item `seq` of queue `id` (splitmix64's finaliser
 * over the three). */
static uint64_t choice(uint64_t id, uint64_t seq)
{
    uint64_t z = S.seed + 0x9e3779b97f4a7c15ull * (1 + id * 0x10001ull + (seq << 20));
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void weft__vsched_join(uint64_t seed)
{
    pthread_mutex_lock(&S.mu);
    if (S.devices++ == 0) {
        S.seed = seed;
        S.now = 0;
        S.queues = 0;
    }
    pthread_mutex_unlock(&S.mu);
}

void weft__vsched_leave(void)
{
    pthread_mutex_lock(&S.mu);
    S.devices--;
    pthread_mutex_unlock(&S.mu);
}

void weft__vsched_add(weft__vsched_q *q, const _Atomic unsigned *pending)
{
    pthread_mutex_lock(&S.mu);
    *q = (weft__vsched_q){.pending = pending, .id = S.queues++};
    q->next_member = S.members;
    S.members = q;
    pthread_mutex_unlock(&S.mu);
}

static void decide(bool force);

void weft__vsched_remove(weft__vsched_q *q)
{
    pthread_mutex_lock(&S.mu);
    for (weft__vsched_q **pp = &S.members; *pp; pp = &(*pp)->next_member)
        if (*pp == q) {
            *pp = q->next_member;
            break;
        }
    decide(false); /* (it no longer holds the choice up) */
    pthread_mutex_unlock(&S.mu);
}

/* Whether every member with work has offered it (or holds the turn, or
 * runs a report's callback, which may take as long as the host likes). */
static bool all_offered(void)
{
    for (weft__vsched_q *m = S.members; m; m = m->next_member)
        if (!m->offered && !m->reporting && m != S.running && atomic_load(m->pending) > 0)
            return false;
    return true;
}

/* Grant the turn, if it is free and every queue with work has offered
 * (unless forced), to the ready offer that finishes first in modelled
 * time; a tie goes to the older queue, then the earlier item.  Under S.mu. */
static void decide(bool force)
{
    if (S.running || !S.offered || (!force && !all_offered()))
        return;
    weft__vsched_q **best = NULL;
    for (weft__vsched_q **pp = &S.offered; *pp; pp = &(*pp)->next_offer) {
        weft__vsched_q *c = *pp, *b = best ? *best : NULL;
        if (c->ready && !c->ready(c->ready_arg))
            continue;
        if (!b || c->finish < b->finish || (c->finish == b->finish && c->id < b->id))
            best = pp;
    }
    if (!best)
        return;
    weft__vsched_q *c = *best;
    *best = c->next_offer;
    c->offered = false;
    if (c->finish > S.now)
        S.now = c->finish;
    c->free_at = c->finish;
    S.running = c;
    pthread_cond_broadcast(&S.turn);
}

/* The seeded factor on an item's modelled duration: mostly near its model,
 * now and then much longer (a straggler that later work overtakes). */
static uint64_t stretched(uint64_t ns, uint64_t r)
{
    static const unsigned quarters[8] = {1, 2, 4, 4, 8, 16, 4, 64}; /* x1/4 .. x16 */
    return ns * quarters[r % 8] / 4;
}

/* The seeded real pause before a granted item runs: mostly none. */
static uint64_t pause_for(uint64_t r)
{
    static const uint64_t pauses[4] = {20000, 100000, 400000, 1000000};
    return (r >> 8) % 16 == 0 ? pauses[(r >> 16) % 4] : 0;
}

void weft__vsched_turn(weft__vsched_q *q, uint64_t ns, bool (*ready)(void *), void *ready_arg)
{
    if (ns < 2000)
        ns = 2000; /* no item is free: a record or a wait costs as a small kernel */
    pthread_mutex_lock(&S.mu);
    uint64_t r = choice(q->id, q->seq++);
    uint64_t start = S.now > q->free_at ? S.now : q->free_at;
    q->finish = start + stretched(ns, r);
    q->pause_ns = pause_for(r);
    q->ready = ready;
    q->ready_arg = ready_arg;
    q->offered = true;
    q->next_offer = S.offered;
    S.offered = q;
    decide(false);
    int idle_ms = 0;
    while (S.running != q) {
        /* Every change that may allow a choice decides again (an offer, a
         * turn given back, a queue removed).  The timeout guards what the
         * schedule does not see: after 100 ms without a turn, a queue that
         * has work but never offers it no longer holds the others up. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        if (pthread_cond_timedwait(&S.turn, &S.mu, &ts) == ETIMEDOUT)
            decide(++idle_ms >= 100);
    }
    uint64_t pause = q->pause_ns;
    pthread_mutex_unlock(&S.mu);
    if (pause) {
        struct timespec ts = {0, (long)pause};
        while (nanosleep(&ts, &ts) != 0)
            ;
    }
}

void weft__vsched_report(weft__vsched_q *q)
{
    pthread_mutex_lock(&S.mu);
    if (S.running == q)
        S.running = NULL;
    q->reporting = true;
    decide(false);
    pthread_mutex_unlock(&S.mu);
}

void weft__vsched_done(weft__vsched_q *q)
{
    pthread_mutex_lock(&S.mu);
    if (S.running == q)
        S.running = NULL;
    q->reporting = false;
    decide(false);
    pthread_mutex_unlock(&S.mu);
}
