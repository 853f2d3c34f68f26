/*
 * data/data.c — data handles: creation, pinning by tasks, closing, and the
 * coherence of their replicas (data/data.h).
 *
 * A replica is allocated on its device the first time a task there needs
 * it and kept until the handle is freed (eviction comes later).  Copies
 * between replicas go on the queue of the task that needs them; one into a
 * host replica (a host task reading what a GPU wrote) is queued on the
 * source device and waited for, since the task runs right after.
 */
#include "data/data.h"

#include <string.h>

weft__data *weft__data_get(const weft_data *h)
{
    weft__data *d = weft__handle_decode(h);
    if (!d || d->slot.pool_id != WEFT__POOL_DATA)
        return NULL;
    return d;
}

weft__data *weft__data_new(weft__waitset *ws, const void *rt_handle, void *ptr, size_t n,
                           weft__device *const *devs, unsigned ndev, _Atomic uint64_t *copied)
{
    weft__replica *rep = weft__alloc(sizeof *rep * (ndev ? ndev : 1));
    if (!rep)
        return NULL;
    weft__data *d = weft__slot_alloc(WEFT__POOL_DATA, sizeof(weft__data));
    if (!d) {
        weft__free(rep);
        return NULL;
    }
    size_t from = offsetof(weft__data, ws);
    memset((char *)d + from, 0, sizeof *d - from);
    d->ws = ws;
    d->rt_handle = rt_handle;
    d->ptr = ptr;
    d->size = n;
    pthread_mutex_init(&d->lock, NULL);
    atomic_init(&d->on_devices, false);
    d->devs = devs;
    d->nrep = ndev ? ndev : 1;
    d->rep = rep;
    d->copied = copied;
    for (unsigned i = 0; i < d->nrep; i++)
        d->rep[i] = (weft__replica){NULL, WEFT__REP_INVALID, NULL, NULL};
    d->rep[0] = (weft__replica){ptr, WEFT__REP_MODIFIED, NULL, NULL};
    atomic_store(&d->users, 0);
    return d;
}

/* ------------------------------------------------------------------------ */
/* Copies between replicas (the handle's lock held)                         */
/* ------------------------------------------------------------------------ */

static const weft__device_ops *ops_of(const weft__data *d, unsigned i) { return d->devs[i]->ops; }

/* Make q wait for the last copy into replica i, if it went on another queue. */
static int wait_ready(weft__data *d, unsigned i, weft__dqueue *q)
{
    weft__replica *r = &d->rep[i];
    if (!r->ready || r->ready_q == q)
        return 0;
    return ops_of(d, i)->queue_wait(q, r->ready);
}

/* Note a copy into device replica i queued on q: later users on other
 * queues wait for its event. */
static int note_ready(weft__data *d, unsigned i, weft__dqueue *q)
{
    weft__replica *r = &d->rep[i];
    const weft__device_ops *ops = ops_of(d, i);
    if (!r->ready) {
        int rc = ops->event_create(d->devs[i], &r->ready);
        if (rc != 0) {
            r->ready = NULL;
            return rc;
        }
    }
    r->ready_q = q;
    return ops->event_record(r->ready, q);
}

/* Copy device replica src into the host's and wait for it. */
static int copy_to_host(weft__data *d, unsigned src)
{
    weft__device *dev = d->devs[src];
    weft__dqueue *q = dev->default_queue;
    weft__devent *e = NULL;
    int rc = wait_ready(d, src, q);
    if (rc == 0)
        rc = dev->ops->copy(q, d->ptr, d->rep[src].ptr, d->size);
    if (rc == 0)
        rc = dev->ops->event_create(dev, &e);
    if (rc == 0)
        rc = dev->ops->event_record(e, q);
    if (rc == 0)
        rc = weft__device_event_wait(dev, e);
    else if (e) /* recorded nothing, or the record failed: wait for what was queued first */
        (void)weft__device_event_wait(dev, e);
    if (e)
        dev->ops->event_destroy(e);
    if (rc == 0)
        atomic_fetch_add_explicit(d->copied, d->size, memory_order_relaxed);
    return rc;
}

/* The replica to copy from for device dst: a modified one first, then a
 * shared one on a device of dst's kind (a peer), then the host's; -1 if
 * the only valid one is on a device of another kind (stage through the
 * host). */
static int source_for(const weft__data *d, unsigned dst)
{
    int peer = -1, host = d->rep[0].state != WEFT__REP_INVALID ? 0 : -1, other = -1;
    for (unsigned i = 1; i < d->nrep; i++) {
        if (i == dst || d->rep[i].state == WEFT__REP_INVALID)
            continue;
        bool same_kind = dst == 0 || ops_of(d, i) == ops_of(d, dst);
        if (same_kind && (peer < 0 || d->rep[i].state == WEFT__REP_MODIFIED))
            peer = (int)i;
        else if (!same_kind)
            other = (int)i;
    }
    if (peer >= 0)
        return peer;
    if (host >= 0)
        return host;
    return other >= 0 ? -1 - other : -1; /* -(1 + the other-kind replica) */
}

/* Make replica dev valid (the lock held). */
static int fetch(weft__data *d, unsigned dev, weft__dqueue *q)
{
    int src = source_for(d, dev);
    if (src < 0) {
        /* only on a device of another kind: through the host */
        int rc = copy_to_host(d, (unsigned)(-1 - src));
        if (rc != 0)
            return rc;
        d->rep[-1 - src].state = WEFT__REP_SHARED;
        d->rep[0].state = WEFT__REP_SHARED;
        src = 0;
    }
    if (dev == 0) {
        int rc = copy_to_host(d, (unsigned)src);
        if (rc != 0)
            return rc;
    } else {
        const weft__device_ops *ops = ops_of(d, dev);
        int rc = src ? wait_ready(d, (unsigned)src, q) : 0;
        if (rc == 0)
            rc = ops->copy(q, d->rep[dev].ptr, d->rep[src].ptr, d->size);
        if (rc == 0)
            rc = note_ready(d, dev, q);
        if (rc != 0)
            return rc;
        atomic_fetch_add_explicit(d->copied, d->size, memory_order_relaxed);
    }
    if (d->rep[src].state == WEFT__REP_MODIFIED)
        d->rep[src].state = WEFT__REP_SHARED;
    d->rep[dev].state = WEFT__REP_SHARED;
    return 0;
}

int weft__data_acquire(weft__data *d, unsigned dev, unsigned mode, weft__dqueue *q)
{
    if (dev >= d->nrep)
        dev = 0; /* a device added after registration: the task uses the host's copy */
    /* The host's replica is the only one ever valid: nothing to do. */
    if (dev == 0 && !atomic_load_explicit(&d->on_devices, memory_order_acquire))
        return 0;
    int rc = 0;
    pthread_mutex_lock(&d->lock);
    weft__replica *r = &d->rep[dev];
    if (dev && !r->ptr) {
        rc = ops_of(d, dev)->mem_alloc(d->devs[dev], d->size, &r->ptr);
        if (rc != 0)
            r->ptr = NULL;
    }
    if (rc == 0 && (mode & WEFT_R) && r->state == WEFT__REP_INVALID)
        rc = fetch(d, dev, q);
    else if (rc == 0 && dev && q)
        rc = wait_ready(d, dev, q); /* valid, but maybe filled on another queue */
    if (rc == 0 && (mode & WEFT_W)) {
        for (unsigned i = 0; i < d->nrep; i++)
            if (i != dev)
                d->rep[i].state = WEFT__REP_INVALID;
        r->state = WEFT__REP_MODIFIED;
    }
    if (rc == 0 && dev)
        atomic_store_explicit(&d->on_devices, true, memory_order_release);
    pthread_mutex_unlock(&d->lock);
    return rc;
}

void weft__data_free(weft__data *d)
{
    if (atomic_load(&d->on_devices)) {
        pthread_mutex_lock(&d->lock);
        if (d->rep[0].state == WEFT__REP_INVALID) {
            int src = -1;
            for (unsigned i = 1; i < d->nrep && src < 0; i++)
                if (d->rep[i].state != WEFT__REP_INVALID)
                    src = (int)i;
            /* A failed copy back leaves the user's memory as it was: the
             * runtime cannot report it from here (unregister has no task). */
            if (src > 0 && copy_to_host(d, (unsigned)src) == 0)
                d->rep[0].state = WEFT__REP_SHARED;
        }
        for (unsigned i = 1; i < d->nrep; i++) {
            weft__replica *r = &d->rep[i];
            if (r->ready) {
                (void)weft__device_event_wait(d->devs[i], r->ready); /* fired: its task finished */
                ops_of(d, i)->event_destroy(r->ready);
            }
            if (r->ptr)
                ops_of(d, i)->mem_free(d->devs[i], r->ptr, d->size);
            *r = (weft__replica){NULL, WEFT__REP_INVALID, NULL, NULL};
        }
        pthread_mutex_unlock(&d->lock);
    }
    pthread_mutex_destroy(&d->lock);
    weft__free(d->rep);
    d->rep = NULL;
    weft__slot_free(d);
}

weft__data *weft__data_pin(const weft_data *h)
{
    weft__data *d = weft__data_get(h);
    if (!d)
        return NULL;
    int64_t v = atomic_load(&d->users);
    do {
        if (v & WEFT__DATA_CLOSING)
            return NULL;
    } while (!atomic_compare_exchange_weak(&d->users, &v, v + 1));
    /* The slot may have been freed and reused between the check and the
     * pin: then the pin landed on another handle; take it back. */
    if (weft__handle_decode(h) != d) {
        weft__data_unpin(d);
        return NULL;
    }
    return d;
}

void weft__data_unpin(weft__data *d)
{
    weft__waitset *ws = d->ws; /* read first: d may be freed right after the decrement */
    if (atomic_fetch_sub(&d->users, 1) - 1 == WEFT__DATA_CLOSING)
        weft__wake(ws, d);
}

bool weft__data_close(weft__data *d)
{
    return !(atomic_fetch_or(&d->users, WEFT__DATA_CLOSING) & WEFT__DATA_CLOSING);
}
