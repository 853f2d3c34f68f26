/*
 * sched/queue.c — per-worker ready queues, stealing, parking and waking.
 *
 * Each worker owns a priority queue (an intrusive pairing heap ordered by
 * priority, then spawn order) behind its own mutex; other workers steal from
 * it when theirs is empty.  There is no central queue and no scheduler
 * thread.  size mirrors the heap size so that thieves and parkers can look
 * without locking.
 */
#include "sched/sched.h"

#include <string.h>

_Thread_local weft__readyq *weft__tls_q;

static bool before(const weft__qnode *a, const weft__qnode *b)
{
    return a->priority != b->priority ? a->priority > b->priority : a->seq < b->seq;
}

/* Links: child is the first child; next the right sibling; prev the left
 * sibling, or the parent for a first child (NULL for the root).  prev lets a
 * waiter take one particular node out of the middle. */
static weft__qnode *meld(weft__qnode *a, weft__qnode *b)
{
    if (!a)
        return b;
    if (!b)
        return a;
    if (before(b, a)) {
        weft__qnode *tmp = a;
        a = b;
        b = tmp;
    }
    b->next = a->child;
    if (a->child)
        a->child->prev = b;
    b->prev = a;
    a->child = b;
    return a;
}

/* Two-pass pairing of the root's children. */
static weft__qnode *merge_pairs(weft__qnode *first)
{
    weft__qnode *paired = NULL;
    while (first) {
        weft__qnode *a = first, *b = first->next;
        first = b ? b->next : NULL;
        a->next = NULL;
        if (b)
            b->next = NULL;
        weft__qnode *m = meld(a, b);
        m->next = paired; /* reversed list of pairs */
        paired = m;
    }
    weft__qnode *root = NULL;
    while (paired) {
        weft__qnode *m = paired;
        paired = m->next;
        m->next = NULL;
        root = meld(root, m);
    }
    if (root)
        root->prev = NULL;
    return root;
}

int weft__sched_init(weft__sched *s, unsigned nq, weft__waitset *ws)
{
    memset(s, 0, sizeof *s);
    s->ws = ws;
    size_t bytes = sizeof(weft__readyq) * nq;
    s->q = weft__alloc_aligned(WEFT__CACHELINE, bytes);
    if (!s->q)
        return WEFT_ENOMEM;
    memset(s->q, 0, bytes);
    s->nq = nq;
    for (unsigned i = 0; i < nq; i++) {
        weft__readyq *q = &s->q[i];
        q->sched = s;
        q->rng = 0x9E3779B97F4A7C15ull * (i + 1);
        pthread_mutex_init(&q->lock, NULL);
        pthread_mutex_init(&q->park_lock, NULL);
        pthread_cond_init(&q->park_cond, NULL);
    }
    return 0;
}

void weft__sched_fini(weft__sched *s)
{
    for (unsigned i = 0; i < s->nq; i++) {
        pthread_mutex_destroy(&s->q[i].lock);
        pthread_mutex_destroy(&s->q[i].park_lock);
        pthread_cond_destroy(&s->q[i].park_cond);
    }
    weft__free(s->q);
    s->q = NULL;
    s->nq = 0;
}

static void queue_push(weft__readyq *q, weft__qnode *n)
{
    n->child = n->next = n->prev = NULL;
    pthread_mutex_lock(&q->lock);
    q->heap = meld(q->heap, n);
    q->heap->prev = NULL;
    atomic_store_explicit(&n->on, q, memory_order_relaxed);
    atomic_fetch_add(&q->size, 1);
    atomic_fetch_add(&q->pushes, 1);
    pthread_mutex_unlock(&q->lock);
}

/* Under q->lock: unlink n (anywhere in q's heap). */
static void heap_remove(weft__readyq *q, weft__qnode *n)
{
    weft__qnode *sub = merge_pairs(n->child);
    if (n == q->heap) {
        q->heap = sub;
    } else {
        weft__qnode *p = n->prev;
        if (p->child == n)
            p->child = n->next;
        else
            p->next = n->next;
        if (n->next)
            n->next->prev = p;
        q->heap = meld(q->heap, sub);
        q->heap->prev = NULL;
    }
    n->child = n->next = n->prev = NULL;
    atomic_store_explicit(&n->on, NULL, memory_order_relaxed);
    atomic_fetch_sub(&q->size, 1);
}

static weft__qnode *queue_pop(weft__readyq *q)
{
    if (atomic_load_explicit(&q->size, memory_order_relaxed) == 0)
        return NULL;
    pthread_mutex_lock(&q->lock);
    weft__qnode *n = q->heap;
    if (n)
        heap_remove(q, n);
    pthread_mutex_unlock(&q->lock);
    return n;
}

bool weft__sched_take(weft__qnode *n)
{
    weft__readyq *q = atomic_load_explicit(&n->on, memory_order_relaxed);
    if (!q)
        return false;
    bool taken = false;
    pthread_mutex_lock(&q->lock);
    if (atomic_load_explicit(&n->on, memory_order_relaxed) == q) {
        heap_remove(q, n);
        taken = true;
    }
    pthread_mutex_unlock(&q->lock);
    return taken;
}

static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

weft__qnode *weft__sched_find(weft__sched *s, weft__readyq *own)
{
    weft__qnode *n = queue_pop(own);
    if (n)
        return n;
    unsigned nq = s->nq;
    if (nq == 1)
        return NULL;
    /* Random first victim (multiply-shift instead of a division), then in order. */
    unsigned i = (unsigned)(((next_rand(&own->rng) >> 32) * nq) >> 32);
    for (unsigned k = 0; k < nq; k++, i = i + 1 == nq ? 0 : i + 1) {
        weft__readyq *v = &s->q[i];
        if (v == own)
            continue;
        n = queue_pop(v);
        if (n) {
            weft__count(&own->n_steals, 1);
            return n;
        }
    }
    return NULL;
}

bool weft__sched_any(weft__sched *s)
{
    for (unsigned i = 0; i < s->nq; i++)
        if (atomic_load(&s->q[i].size) > 0)
            return true;
    return false;
}

size_t weft__sched_queued(weft__sched *s)
{
    size_t n = 0;
    for (unsigned i = 0; i < s->nq; i++)
        n += atomic_load(&s->q[i].size);
    return n;
}

uint64_t weft__sched_pushes(weft__sched *s)
{
    uint64_t n = 0;
    for (unsigned i = 0; i < s->nq; i++)
        n += atomic_load(&s->q[i].pushes);
    return n;
}

void weft__sched_park(weft__sched *s, weft__readyq *q)
{
    pthread_mutex_lock(&q->park_lock);
    atomic_store(&q->parked, true);
    atomic_fetch_add(&s->nparked, 1);
    if (!weft__sched_any(s) && !atomic_load(&s->stop)) {
        weft__count(&q->n_parks, 1);
        while (!q->wake)
            pthread_cond_wait(&q->park_cond, &q->park_lock);
    }
    q->wake = false;
    atomic_store(&q->parked, false);
    atomic_fetch_sub(&s->nparked, 1);
    pthread_mutex_unlock(&q->park_lock);
}

static bool try_wake(weft__readyq *v)
{
    if (!atomic_load(&v->parked))
        return false;
    bool woke = false;
    pthread_mutex_lock(&v->park_lock);
    if (atomic_load(&v->parked) && !v->wake) {
        v->wake = true;
        pthread_cond_signal(&v->park_cond);
        woke = true;
    }
    pthread_mutex_unlock(&v->park_lock);
    return woke;
}

static void wake_one(weft__sched *s, weft__readyq *prefer)
{
    if (prefer && try_wake(prefer))
        return;
    for (unsigned i = 0; i < s->nq; i++)
        if (try_wake(&s->q[i]))
            return;
}

void weft__sched_wake_all(weft__sched *s)
{
    for (unsigned i = 0; i < s->nq; i++) {
        weft__readyq *v = &s->q[i];
        pthread_mutex_lock(&v->park_lock);
        v->wake = true;
        pthread_cond_signal(&v->park_cond);
        pthread_mutex_unlock(&v->park_lock);
    }
}

/* The push and the parked count are both sequentially consistent, and a
 * parking consumer re-checks the queues after announcing itself, so no
 * wake-up is lost; likewise for helpers sleeping in the wait engine. */
void weft__sched_push(weft__sched *s, weft__qnode *n, weft__qnode **next)
{
    weft__readyq *own = weft__tls_q;
    if (own && own->sched != s)
        own = NULL;
    /* The finishing worker runs the first node it releases right away (no
     * queue round trip) unless its queue holds ready work, which may have
     * higher priority: then the queue decides. */
    if (next && !*next && own && atomic_load_explicit(&own->size, memory_order_relaxed) == 0) {
        *next = n;
        return;
    }
    weft__readyq *target = own;
    if (!target) {
        unsigned k = atomic_fetch_add_explicit(&s->rr, 1, memory_order_relaxed);
        target = &s->q[k % s->nq];
    }
    queue_push(target, n);
    if (atomic_load(&s->nparked) > 0)
        wake_one(s, target == own ? NULL : target);
    if (weft__wake_work_wanted(s->ws))
        weft__wake_work(s->ws);
}
