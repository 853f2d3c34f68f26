/*
 * sched/queue.c — per-worker ready queues, stealing, parking and waking.
 *
 * Each worker owns a priority queue (an intrusive pairing heap ordered by
 * priority, then spawn order) behind its own mutex; other workers steal from
 * it when theirs is empty.  There is no central queue and no scheduler
 * thread.  qsize mirrors the heap size so that thieves and parkers can look
 * without locking.
 *
 * Future device kinds add their own queues per device (and a placement step
 * in front of submit); the host path stays as it is.
 */
#include "internal.h"

static bool before(const weft__task *a, const weft__task *b)
{
    return a->priority != b->priority ? a->priority > b->priority : a->id < b->id;
}

/* Links: hp_child is the first child; hp_next the right sibling; hp_prev
 * the left sibling, or the parent for a first child (NULL for the root).
 * hp_prev lets a waiter take one particular task out of the middle. */
static weft__task *meld(weft__task *a, weft__task *b)
{
    if (!a)
        return b;
    if (!b)
        return a;
    if (before(b, a)) {
        weft__task *tmp = a;
        a = b;
        b = tmp;
    }
    b->hp_next = a->hp_child;
    if (a->hp_child)
        a->hp_child->hp_prev = b;
    b->hp_prev = a;
    a->hp_child = b;
    return a;
}

/* Two-pass pairing of the root's children. */
static weft__task *merge_pairs(weft__task *first)
{
    weft__task *paired = NULL;
    while (first) {
        weft__task *a = first, *b = first->hp_next;
        first = b ? b->hp_next : NULL;
        a->hp_next = NULL;
        if (b)
            b->hp_next = NULL;
        weft__task *m = meld(a, b);
        m->hp_next = paired; /* reversed list of pairs */
        paired = m;
    }
    weft__task *root = NULL;
    while (paired) {
        weft__task *m = paired;
        paired = m->hp_next;
        m->hp_next = NULL;
        root = meld(root, m);
    }
    if (root)
        root->hp_prev = NULL;
    return root;
}

static void queue_push(weft__worker *w, weft__task *t)
{
    t->hp_child = t->hp_next = t->hp_prev = NULL;
    pthread_mutex_lock(&w->qlock);
    w->heap = meld(w->heap, t);
    w->heap->hp_prev = NULL;
    atomic_store_explicit(&t->queued_on, w, memory_order_relaxed);
    atomic_fetch_add(&w->qsize, 1);
    pthread_mutex_unlock(&w->qlock);
}

/* Under w->qlock: unlink t (anywhere in w's heap). */
static void heap_remove(weft__worker *w, weft__task *t)
{
    weft__task *sub = merge_pairs(t->hp_child);
    if (t == w->heap) {
        w->heap = sub;
    } else {
        weft__task *p = t->hp_prev;
        if (p->hp_child == t)
            p->hp_child = t->hp_next;
        else
            p->hp_next = t->hp_next;
        if (t->hp_next)
            t->hp_next->hp_prev = p;
        w->heap = meld(w->heap, sub);
        w->heap->hp_prev = NULL;
    }
    t->hp_child = t->hp_next = t->hp_prev = NULL;
    atomic_store_explicit(&t->queued_on, NULL, memory_order_relaxed);
    atomic_fetch_sub(&w->qsize, 1);
}

static weft__task *queue_pop(weft__worker *w)
{
    if (atomic_load_explicit(&w->qsize, memory_order_relaxed) == 0)
        return NULL;
    pthread_mutex_lock(&w->qlock);
    weft__task *t = w->heap;
    if (t)
        heap_remove(w, t);
    pthread_mutex_unlock(&w->qlock);
    return t;
}

bool weft__queue_take(weft__task *t)
{
    weft__worker *w = atomic_load_explicit(&t->queued_on, memory_order_relaxed);
    if (!w)
        return false;
    bool taken = false;
    pthread_mutex_lock(&w->qlock);
    if (atomic_load_explicit(&t->queued_on, memory_order_relaxed) == w) {
        heap_remove(w, t);
        taken = true;
    }
    pthread_mutex_unlock(&w->qlock);
    return taken;
}

static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

weft__task *weft__find_work(weft__worker *w)
{
    weft__task *t = queue_pop(w);
    if (t)
        return t;
    weft__rt *rt = w->rt;
    unsigned n = rt->nworkers;
    if (n == 1)
        return NULL;
    /* Random first victim (multiply-shift instead of a division), then in order. */
    unsigned i = (unsigned)(((next_rand(&w->rng) >> 32) * n) >> 32);
    for (unsigned k = 0; k < n; k++, i = i + 1 == n ? 0 : i + 1) {
        weft__worker *v = &rt->workers[i];
        if (v == w)
            continue;
        t = queue_pop(v);
        if (t) {
            weft__count(&w->n_steals, 1);
            return t;
        }
    }
    return NULL;
}

bool weft__any_work(weft__rt *rt)
{
    for (unsigned i = 0; i < rt->nworkers; i++)
        if (atomic_load(&rt->workers[i].qsize) > 0)
            return true;
    return false;
}

static bool try_wake(weft__worker *v)
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

static void wake_one(weft__rt *rt, weft__worker *prefer)
{
    if (prefer && try_wake(prefer))
        return;
    for (unsigned i = 0; i < rt->nworkers; i++)
        if (try_wake(&rt->workers[i]))
            return;
}

void weft__wake_all(weft__rt *rt)
{
    for (unsigned i = 0; i < rt->nworkers; i++) {
        weft__worker *v = &rt->workers[i];
        pthread_mutex_lock(&v->park_lock);
        v->wake = true;
        pthread_cond_signal(&v->park_cond);
        pthread_mutex_unlock(&v->park_lock);
    }
}

/* Queue a ready task: on the calling worker's own queue, or, from outside,
 * round-robin over the workers.  Then wake a parked worker if there is one
 * (the push and the parked count are both sequentially consistent, and a
 * parking worker re-checks the queues after announcing itself). */
void weft__submit(weft__rt *rt, weft__task *t)
{
    weft__worker *w = weft__tls_worker;
    weft__worker *target;
    if (w && w->rt == rt) {
        target = w;
    } else {
        unsigned k = atomic_fetch_add_explicit(&rt->rr, 1, memory_order_relaxed);
        target = &rt->workers[k % rt->nworkers];
    }
    queue_push(target, t);
    if (atomic_load(&rt->nparked) > 0)
        wake_one(rt, target == w ? NULL : target);
}
