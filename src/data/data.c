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

void weft__mnode_init(weft__mnode *m)
{
    pthread_mutex_init(&m->lock, NULL);
    m->head = m->tail = NULL;
    m->copyq[0] = m->copyq[1] = NULL;
    m->dev = NULL;
    atomic_init(&m->unpinned, 0);
}

void weft__mnode_fini(weft__mnode *m)
{
    for (int i = 0; i < 2; i++)
        if (m->copyq[i])
            m->dev->ops->queue_destroy(m->copyq[i]);
    m->copyq[0] = m->copyq[1] = NULL;
    pthread_mutex_destroy(&m->lock);
}

/* Under m->lock. */
static void lru_unlink(weft__mnode *m, weft__replica *r)
{
    if (!r->in_lru)
        return;
    if (r->lru_prev)
        r->lru_prev->lru_next = r->lru_next;
    else
        m->head = r->lru_next;
    if (r->lru_next)
        r->lru_next->lru_prev = r->lru_prev;
    else
        m->tail = r->lru_prev;
    r->lru_prev = r->lru_next = NULL;
    r->in_lru = false;
}

/* r was used: the most recently used of its node. */
static void lru_touch(weft__mnode *m, weft__replica *r)
{
    pthread_mutex_lock(&m->lock);
    lru_unlink(m, r);
    r->lru_prev = m->tail;
    r->lru_next = NULL;
    if (m->tail)
        m->tail->lru_next = r;
    else
        m->head = r;
    m->tail = r;
    r->in_lru = true;
    pthread_mutex_unlock(&m->lock);
}

weft__data *weft__data_new(weft__waitset *ws, const void *rt_handle, void *ptr, size_t n,
                           weft__device *const *devs, weft__mnode *mnodes, unsigned ndev,
                           _Atomic uint64_t *copied)
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
    atomic_store_explicit(&d->rt_handle, rt_handle, memory_order_relaxed);
    d->ptr = ptr;
    d->size = n;
    pthread_mutex_init(&d->lock, NULL);
    atomic_init(&d->on_devices, false);
    atomic_init(&d->home, 0);
    d->devs = devs;
    d->mnodes = mnodes;
    d->nrep = ndev ? ndev : 1;
    d->rep = rep;
    d->copied = copied;
    for (unsigned i = 0; i < d->nrep; i++)
        d->rep[i] = (weft__replica){.state = WEFT__REP_INVALID, .owner = d};
    d->rep[0].ptr = ptr;
    d->rep[0].state = WEFT__REP_MODIFIED;
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

enum { FETCH_Q = 0, EVICT_Q = 1 };

/* Queue a copy of device replica src into the host's on the device's copy
 * queue `which` (see weft__mnode), and an event after it (*e, for the
 * caller to wait for and destroy). */
static int copy_to_host_async(weft__data *d, unsigned src, int which, weft__devent **e)
{
    weft__device *dev = d->devs[src];
    weft__mnode *m = &d->mnodes[src];
    *e = NULL;
    pthread_mutex_lock(&m->lock);
    int rc = 0;
    if (!m->copyq[which]) {
        rc = dev->ops->queue_create(dev, &m->copyq[which]);
        if (rc == 0)
            m->dev = dev;
        else
            m->copyq[which] = NULL;
    }
    weft__dqueue *q = m->copyq[which];
    pthread_mutex_unlock(&m->lock);
    if (rc != 0)
        return rc;
    rc = wait_ready(d, src, q);
    if (rc == 0)
        rc = dev->ops->copy(q, d->ptr, d->rep[src].ptr, d->size);
    if (rc == 0)
        rc = dev->ops->event_create(dev, e);
    if (rc == 0 && (rc = dev->ops->event_record(*e, q)) != 0) {
        (void)weft__device_event_wait(dev, *e);
        dev->ops->event_destroy(*e);
        *e = NULL;
    }
    if (rc == 0)
        atomic_fetch_add_explicit(d->copied, d->size, memory_order_relaxed);
    return rc;
}

/* Copy device replica src into the host's and wait for it. */
static int copy_to_host(weft__data *d, unsigned src, int which)
{
    weft__devent *e;
    int rc = copy_to_host_async(d, src, which, &e);
    if (rc == 0) {
        rc = weft__device_event_wait(d->devs[src], e);
        d->devs[src]->ops->event_destroy(e);
    }
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

/* Note where the data is now (the lock held): see weft__data.home. */
static void set_home(weft__data *d)
{
    unsigned home = 0;
    for (unsigned i = 1; i < d->nrep; i++)
        if (d->rep[i].state == WEFT__REP_MODIFIED || (!home && d->rep[i].state == WEFT__REP_SHARED))
            home = i;
    atomic_store_explicit(&d->home, home, memory_order_relaxed);
}

/* Make replica dev valid (the lock held). */
static int fetch(weft__data *d, unsigned dev, weft__dqueue *q)
{
    int src = source_for(d, dev);
    if (src == -1)
        return WEFT_EDEVICE; /* no valid copy anywhere: cannot happen while the states hold */
    if (src < 0) {
        /* only on a device of another kind: through the host */
        /* (waited for under the lock: only with two kinds of GPU at once) */
        int rc = copy_to_host(d, (unsigned)(-1 - src), FETCH_Q);
        if (rc != 0)
            return rc;
        d->rep[-1 - src].state = WEFT__REP_SHARED;
        d->rep[0].state = WEFT__REP_SHARED;
        src = 0;
    }
    if (dev == 0) { /* the caller waits for it, without the lock (fetch_to_host) */
        return WEFT_EINVAL;
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

/* Make the host's replica valid for a host reader (the lock held; released
 * while it waits, so that nothing waits for a task stream under a handle's
 * lock: a stream's thread may be finishing a task that takes it).  Readers
 * at once share one copy. */
static int fetch_to_host(weft__data *d)
{
    int rc = 0;
    if (!d->host_fetch) {
        int src = source_for(d, 0);
        if (src <= 0)
            return WEFT_EDEVICE; /* no valid copy anywhere: cannot happen while the states hold */
        rc = copy_to_host_async(d, (unsigned)src, FETCH_Q, &d->host_fetch);
        if (rc != 0)
            return rc;
        d->host_fetch_dev = (unsigned)src;
    }
    unsigned src = d->host_fetch_dev;
    weft__devent *e = d->host_fetch;
    d->host_fetch_users++;
    atomic_fetch_add(&d->rep[src].pins, 1); /* not evicted while it is copied from */
    pthread_mutex_unlock(&d->lock);
    rc = weft__device_event_wait(d->devs[src], e);
    pthread_mutex_lock(&d->lock);
    atomic_fetch_sub(&d->rep[src].pins, 1);
    if (--d->host_fetch_users == 0) {
        d->devs[src]->ops->event_destroy(e);
        d->host_fetch = NULL;
    }
    if (rc != 0)
        return rc;
    /* Only readers ran meanwhile (a writer follows them): the source is as it was. */
    if (d->rep[src].state == WEFT__REP_MODIFIED)
        d->rep[src].state = WEFT__REP_SHARED;
    d->rep[0].state = WEFT__REP_SHARED;
    return 0;
}

/* Give replica dev of e back to its device (e's lock held, not pinned): a
 * modified one is copied to the host first.  false if that copy failed
 * (nothing is dropped then). */
static bool drop_replica(weft__data *e, unsigned dev)
{
    weft__replica *r = &e->rep[dev];
    bool only = r->state != WEFT__REP_INVALID;
    for (unsigned i = 0; i < e->nrep && only; i++)
        only = i == dev || e->rep[i].state == WEFT__REP_INVALID;
    if (only) { /* the newest value: to the host first */
        if (copy_to_host(e, dev, EVICT_Q) != 0)
            return false;
        e->rep[0].state = WEFT__REP_MODIFIED;
    } else if (r->ready) {
        (void)weft__device_event_wait(e->devs[dev], r->ready); /* its last copy in has landed */
    }
    if (r->ready)
        ops_of(e, dev)->event_destroy(r->ready);
    ops_of(e, dev)->mem_free(e->devs[dev], r->ptr, e->size);
    atomic_fetch_sub(&e->devs[dev]->replicas, e->size);
    r->ptr = NULL;
    r->ready = NULL;
    r->ready_q = NULL;
    r->state = WEFT__REP_INVALID;
    set_home(e);
    return true;
}

/* Make room on dev for d's replica by evicting the least recently used
 * replicas of other handles that no task uses (d's lock held; the others'
 * only tried).  0 once the allocation succeeded; WEFT__DATA_RETRY when
 * nothing is left to evict but pinned replicas (of running tasks, whose
 * end makes room: the placer keeps their data within the capacity);
 * WEFT_ENOMEM otherwise. */
static int alloc_evicting(weft__data *d, unsigned dev)
{
    weft__mnode *m = &d->mnodes[dev];
    for (;;) {
        if (ops_of(d, dev)->mem_alloc(d->devs[dev], d->size, &d->rep[dev].ptr) == 0) {
            atomic_fetch_add(&d->devs[dev]->replicas, d->size);
            return 0;
        }
        d->rep[dev].ptr = NULL;
        weft__data *victim = NULL;
        bool pinned = false;
        pthread_mutex_lock(&m->lock);
        for (weft__replica *r = m->head; r && !victim; r = r->lru_next) {
            pinned |= r->owner != d && atomic_load(&r->pins) > 0;
            weft__data *e = r->owner;
            if (e == d || atomic_load(&r->pins) || pthread_mutex_trylock(&e->lock) != 0)
                continue;
            if (atomic_load(&r->pins)) { /* pinned since (pins rise under e's lock) */
                pthread_mutex_unlock(&e->lock);
                continue;
            }
            lru_unlink(m, r);
            victim = e;
        }
        pthread_mutex_unlock(&m->lock);
        if (!victim)
            return pinned ? WEFT__DATA_RETRY : WEFT_ENOMEM;
        bool dropped = drop_replica(victim, dev);
        if (!dropped)
            lru_touch(m, &victim->rep[dev]); /* kept: back in the list */
        pthread_mutex_unlock(&victim->lock);
        if (!dropped)
            return WEFT_ENOMEM;
    }
}

int weft__data_acquire(weft__data *d, unsigned dev, unsigned mode, weft__dqueue *q, int *on, int *from,
                       weft__data_undo *undo)
{
    *on = *from = -1;
    undo->after = 0;
    if (dev >= d->nrep)
        dev = 0; /* a device added after registration: the task uses the host's copy */
    /* The host's replica is the only one ever valid: nothing to do. */
    if (dev == 0 && !atomic_load_explicit(&d->on_devices, memory_order_acquire))
        return 0;
    int rc = 0;
    pthread_mutex_lock(&d->lock);
    weft__data_undo was = {d->version, 0, 0, -1};
    for (unsigned i = 0; i < d->nrep && i < 64; i++)
        if (d->rep[i].state != WEFT__REP_INVALID) {
            was.valid |= (uint64_t)1 << i;
            if (d->rep[i].state == WEFT__REP_MODIFIED)
                was.modified = (int8_t)i;
        }
    weft__replica *r = &d->rep[dev];
    if (dev && !r->ptr)
        rc = alloc_evicting(d, dev);
    int src = -1;
    bool fetched = false;
    if (rc == 0 && dev == 0 && (mode & WEFT_R) && r->state == WEFT__REP_INVALID) {
        rc = fetch_to_host(d);
        fetched = true;
    } else if (rc == 0 && (mode & WEFT_R) && r->state == WEFT__REP_INVALID) {
        src = source_for(d, dev);
        rc = fetch(d, dev, q);
        fetched = true;
    } else if (rc == 0 && dev && q) {
        rc = wait_ready(d, dev, q); /* valid, but maybe filled on another queue */
    }
    if (rc == 0 && (mode & WEFT_W)) {
        for (unsigned i = 0; i < d->nrep; i++)
            if (i != dev)
                d->rep[i].state = WEFT__REP_INVALID;
        r->state = WEFT__REP_MODIFIED;
    }
    if (rc == 0 && dev) {
        atomic_fetch_add(&r->pins, 1);
        *on = (int)dev;
        if (src > 0 && dev) { /* a device copied from: kept until the copy has run */
            atomic_fetch_add(&d->rep[src].pins, 1);
            *from = src;
        }
        atomic_store_explicit(&d->on_devices, true, memory_order_release);
    }
    if (rc == 0 && d->nrep <= 64 && ((mode & WEFT_W) || fetched)) {
        d->version = ++d->next_version;
        was.after = d->version;
        *undo = was;
    }
    set_home(d);
    bool listed = dev && r->ptr;
    pthread_mutex_unlock(&d->lock);
    if (listed)
        lru_touch(&d->mnodes[dev], r);
    return rc;
}

unsigned weft__data_home(weft__data *d) { return atomic_load_explicit(&d->home, memory_order_relaxed); }

void weft__data_undo_acquire(weft__data *d, const weft__data_undo *undo)
{
    if (!undo->after)
        return;
    pthread_mutex_lock(&d->lock);
    if (d->version == undo->after) {
        bool any = false;
        for (unsigned i = 0; i < d->nrep; i++) {
            bool valid = (undo->valid >> i & 1) && (i == 0 || d->rep[i].ptr);
            d->rep[i].state = !valid ? WEFT__REP_INVALID
                              : (int)i == undo->modified ? WEFT__REP_MODIFIED
                                                         : WEFT__REP_SHARED;
            any |= valid;
        }
        if (!any) /* every copy it had was evicted since: the user's memory is all there is */
            d->rep[0].state = WEFT__REP_MODIFIED;
        d->version = undo->before;
        set_home(d);
    }
    pthread_mutex_unlock(&d->lock);
}

uint64_t weft__data_room_epoch(const weft__data *d, unsigned dev)
{
    return dev < d->nrep ? atomic_load(&d->mnodes[dev].unpinned) : 0;
}

typedef struct room_wait {
    weft__mnode *m;
    uint64_t seen;
} room_wait;

static bool room_changed(const void *arg)
{
    const room_wait *w = arg;
    return atomic_load(&w->m->unpinned) != w->seen;
}

bool weft__data_wait_room(weft__data *d, unsigned dev, uint64_t seen)
{
    room_wait rw = {&d->mnodes[dev], seen};
    weft__wait w = {.key = rw.m, .done = room_changed, .arg = &rw, .deadline = weft__now_ns() + 20000000u,
                    .spin = 64};
    return weft__wait_until(d->ws, &w) == 0;
}

static void unpin(weft__data *d, int i, bool notify)
{
    if (i > 0 && atomic_fetch_sub(&d->rep[i].pins, 1) == 1 && notify) {
        atomic_fetch_add(&d->mnodes[i].unpinned, 1);
        weft__wake(d->ws, &d->mnodes[i]);
    }
}

void weft__data_release(weft__data *d, int on, int from, bool notify)
{
    unpin(d, on, notify);
    unpin(d, from, notify);
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
            if (src > 0 && copy_to_host(d, (unsigned)src, EVICT_Q) == 0)
                d->rep[0].state = WEFT__REP_SHARED;
        }
        for (unsigned i = 1; i < d->nrep; i++) {
            weft__replica *r = &d->rep[i];
            pthread_mutex_lock(&d->mnodes[i].lock);
            lru_unlink(&d->mnodes[i], r);
            pthread_mutex_unlock(&d->mnodes[i].lock);
            if (r->ready) {
                (void)weft__device_event_wait(d->devs[i], r->ready); /* fired: its task finished */
                ops_of(d, i)->event_destroy(r->ready);
            }
            if (r->ptr) {
                ops_of(d, i)->mem_free(d->devs[i], r->ptr, d->size);
                atomic_fetch_sub(&d->devs[i]->replicas, d->size);
            }
            *r = (weft__replica){.state = WEFT__REP_INVALID, .owner = d};
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
