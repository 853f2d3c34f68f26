/*
 * data/data.c — data handles: creation, pinning by tasks, closing, and the
 * coherence of their replicas (data/data.h).
 *
 * A replica is allocated on its device the first time a task there needs
 * it and kept until the handle is freed or it is evicted.  Copies between
 * replicas go on the queue of the task that needs them; one into a host
 * replica (a host task reading what a GPU wrote) is queued on the source
 * device's copy queue and waited for, since the task runs right after.
 */
#include "data/data.h"
#include "device/vcheck.h"
#include "data/overlap.h"
#include "data/reduce.h"
#include "data/scratch.h"
#include "data/tile.h"

#include <stdio.h>
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
    for (unsigned i = 0; i < 2 + WEFT__PREFETCH_QUEUES; i++)
        m->copyq[i] = NULL;
    atomic_init(&m->prefetch_next, 0);
    m->dev = NULL;
    atomic_init(&m->unpinned, 0);
    atomic_init(&m->sourcing, 0);
}

void weft__mnode_fini(weft__mnode *m)
{
    for (unsigned i = 0; i < 2 + WEFT__PREFETCH_QUEUES; i++) {
        if (m->copyq[i])
            m->dev->ops->queue_destroy(m->copyq[i]);
        m->copyq[i] = NULL;
    }
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

void weft__data_lru_touch(weft__data *d, unsigned dev, weft__replica *r) { lru_touch(&d->mnodes[dev], r); }

void weft__data_wont_use(weft__data *d)
{
    pthread_mutex_lock(&d->lock);
    for (unsigned dev = 1; dev < d->nrep; dev++) {
        weft__replica *r = &d->rep[dev];
        weft__mnode *m = &d->mnodes[dev];
        pthread_mutex_lock(&m->lock);
        if (r->in_lru) { /* the least recently used of its node: evicted first */
            lru_unlink(m, r);
            r->lru_next = m->head;
            if (m->head)
                m->head->lru_prev = r;
            else
                m->tail = r;
            m->head = r;
            r->in_lru = true;
        }
        pthread_mutex_unlock(&m->lock);
    }
    pthread_mutex_unlock(&d->lock);
}

void weft__data_lru_unlink(weft__data *d, unsigned dev, weft__replica *r)
{
    weft__mnode *m = &d->mnodes[dev];
    pthread_mutex_lock(&m->lock);
    lru_unlink(m, r);
    pthread_mutex_unlock(&m->lock);
}

weft__data *weft__data_new(weft__waitset *ws, const void *rt_handle, void *ptr, size_t n,
                           weft__device *const *devs, weft__mnode *mnodes, unsigned ndev,
                           weft__copy_counts *copied)
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
    d->rows = d->in_rows = 1;
    d->row_bytes = d->hpitch = d->in_bytes = n;
    atomic_init(&d->fam, NULL);
    pthread_mutex_init(&d->lock, NULL);
    atomic_init(&d->on_devices, false);
    atomic_init(&d->has_partials, false);
    atomic_init(&d->home, 0);
    atomic_init(&d->valid, 1);
    d->devs = devs;
    d->mnodes = mnodes;
    d->nrep = ndev ? ndev : 1;
    d->rep = rep;
    d->copied = copied;
    for (unsigned i = 0; i < d->nrep; i++)
        d->rep[i] = (weft__replica){.tag = WEFT__TAG_GARBAGE, .owner = d};
    d->rep[0].ptr = ptr;
    d->cur = d->last_tag = 1; /* the user's value */
    d->rep[0].tag = d->cur;
    d->watch = WEFT__WATCH_OFF;
    atomic_init(&d->watch_tripped, false);
    atomic_store(&d->users, 0);
    return d;
}

void weft__data_live_on(weft__data *d, unsigned dev, void *p)
{
    d->user_dev = dev;
    d->rep[0].tag = WEFT__TAG_GARBAGE;
    d->rep[dev].ptr = p;
    d->rep[dev].tag = d->cur;
    atomic_store(&d->on_devices, true);
    atomic_store(&d->home, dev);
    atomic_store(&d->valid, dev < 64 ? 1ull << dev : 0);
}

/* The host's replica of data registered on a device: Weft's own buffer,
 * made on first use (the lock held).  0 or WEFT_ENOMEM. */
static int host_buffer(weft__data *d)
{
    if (d->ptr)
        return 0;
    d->ptr = weft__alloc(d->size);
    if (!d->ptr)
        return WEFT_ENOMEM;
    d->rep[0].ptr = d->ptr;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The host watch (the checking mode)                                       */
/* ------------------------------------------------------------------------ */

/* When a device's write commits and the host's replica is stale from then
 * on (holding no value an open write may fall back to), the checking mode
 * marks the user's memory (weft__data_end): the poison fill, or, for a
 * family's memory (a parent and its tiles, which the fill spares: the
 * parent's memory is every tile's, and a tile's border band is brought
 * there for its neighbours' host tasks while its host replica stays
 * stale), a digest of the handle's interior there.  Until the newest
 * value comes back, nothing but the program may change that memory: the
 * runtime's own writes there are copies of the newest value (each
 * compares first), a tile's border band (compared, then watched as it
 * left it) and the next commit's fill (compared first).  So a change found
 * is the program's write (outside any task naming the data, without
 * weft_data_acquire), lost under the value that replaces it: reported,
 * and tripped for the next task, acquire or unregister to fail for.  A
 * host write acquired ends the watch (the memory is the writer's, its
 * value what the writer writes, whatever the memory held), and so does
 * any other new tag of the host's replica (an undo's).  A host replica
 * that holds no value (an aborted host write's garbage) is not watched:
 * the same tag may come back, over other bytes, after another such write. */

/* Whether the watch is in force (the lock held). */
static bool watch_on(const weft__data *d)
{
    return d->watch != WEFT__WATCH_OFF && d->rep[0].tag == d->watch_tag && !weft__rep_valid(d, 0);
}

/* FNV-1a over d's interior in the user's memory, row by row. */
static uint64_t interior_digest(const weft__data *d)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t r = 0; r < d->in_rows; r++) {
        const unsigned char *row = (const unsigned char *)d->ptr + (d->in_r0 + r) * d->hpitch + d->in_c0;
        for (size_t c = 0; c < d->in_bytes; c++)
            h = (h ^ row[c]) * 1099511628211ull;
    }
    return h;
}

/* Whether the user's memory holds what the watch saw (the lock held). */
static bool watch_holds(const weft__data *d)
{
    if (d->watch == WEFT__WATCH_DIGEST)
        return interior_digest(d) == d->watch_digest;
    const unsigned char *p = d->ptr;
    for (size_t i = 0; i < d->size; i++)
        if (p[i] != WEFT__DATA_POISON)
            return false;
    return true;
}

/* A change found (the lock held): reported, and tripped.  dev: the device
 * whose value goes over it; refill: a newer value's commit (the memory is
 * marked again), not a copy back. */
static void watch_report(weft__data *d, unsigned dev, bool refill)
{
    char name[64], msg[1000];
    if (d->tile)
        snprintf(name, sizeof name, "tile %u of data d%u", d->tile->index, d->tile->fam->parent_id);
    else
        snprintf(name, sizeof name, "data d%u", d->id);
    snprintf(msg, sizeof msg,
             "data check: the memory registered as %s (at %p) was written on the host while the data's newest "
             "value was on %s only (%s), by code that neither runs in a task naming the data nor holds it "
             "acquired: that write is lost, %s.  Make the memory the newest value before writing it: "
             "weft_data_acquire(d, WEFT_RW, 0) (WEFT_W to overwrite all of it), then weft_data_release(d); or "
             "write it in a task on the host that names the data with WEFT_RW or WEFT_W (from Python: "
             "with rt.acquire(buf, \"rw\"), or a task with readwrites= or writes=)",
             name, d->ptr, d->devs[dev]->name,
             d->watch == WEFT__WATCH_POISON ? "the memory held the checking mode's 0xDB fill" : "the host's copy stale",
             refill ? "a newer value written there replaces it" : "the value brought back from there replaces it");
    weft__vcheck_report(msg);
    atomic_store(&d->watch_tripped, true);
}

/* The newest value (or a newer one, refill) from device dev is about to
 * go over the user's memory (the lock held): compare; off from here. */
static void watch_compare(weft__data *d, unsigned dev, bool refill)
{
    if (watch_on(d) && !watch_holds(d))
        watch_report(d, dev, refill);
    d->watch = WEFT__WATCH_OFF;
}

/* Watch what the memory holds now (the lock held; the watch in force). */
static void watch_rebase(weft__data *d)
{
    d->watch = WEFT__WATCH_DIGEST;
    d->watch_digest = interior_digest(d);
}

/* A device's write committed on device dev, the host's replica stale from
 * now on (the lock held): the memory compared (a change since the last
 * commit is lost too), then marked. */
static void watch_arm(weft__data *d, unsigned dev)
{
    watch_compare(d, dev, true);
    bool fam = atomic_load(&d->fam) != NULL;
    if (!fam)
        memset(d->ptr, WEFT__DATA_POISON, d->size);
    /* A host replica holding no value (an aborted host write's) may be
     * written and hold no value again later under the same tag: not
     * watched. */
    if (d->rep[0].tag == WEFT__TAG_GARBAGE)
        return;
    if (fam)
        watch_rebase(d);
    else
        d->watch = WEFT__WATCH_POISON;
    d->watch_tag = d->rep[0].tag;
}

bool weft__data_watch_take(weft__data *d)
{
    return atomic_load_explicit(&d->watch_tripped, memory_order_relaxed) && atomic_exchange(&d->watch_tripped, false);
}

void weft__data_watch_pass(weft__data *from, weft__data *d)
{
    if (from && from != d && weft__data_watch_take(from))
        atomic_store(&d->watch_tripped, true);
}

void weft__data_watch_rebase(weft__data *d)
{
    if (!d->ptr)
        return;
    pthread_mutex_lock(&d->lock);
    if (watch_on(d))
        watch_rebase(d);
    pthread_mutex_unlock(&d->lock);
}

void weft__data_watch_before_copy(weft__data *d, unsigned src) { watch_compare(d, src, false); }

void weft__data_watch_off(weft__data *d) { d->watch = WEFT__WATCH_OFF; }

/* ------------------------------------------------------------------------ */
/* Copies between replicas (the handle's lock held)                         */
/* ------------------------------------------------------------------------ */

static const weft__device_ops *ops_of(const weft__data *d, unsigned i) { return d->devs[i]->ops; }

/* Make q wait for the last copy into replica i, if it went on another queue. */
int weft__data_wait_ready(weft__data *d, unsigned i, weft__dqueue *q)
{
    weft__replica *r = &d->rep[i];
    if (!r->ready || r->ready_q == q)
        return 0;
    return ops_of(d, i)->queue_wait(q, r->ready);
}

/* Note a copy into device replica i queued on q: later users on other
 * queues wait for its event. */
int weft__data_note_ready(weft__data *d, unsigned i, weft__dqueue *q)
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

enum { FETCH_Q = 0, EVICT_Q = 1, PREFETCH_Q = 2 }; /* the prefetch queues: PREFETCH_Q + 0 .. 3 */

int weft__data_copy_rect(const weft__device_ops *ops, weft__dqueue *q, weft__data *dst, unsigned di, size_t dr,
                         size_t dc, weft__data *src, unsigned si, size_t r, size_t c, size_t rows, size_t bytes)
{
    if (!rows || !bytes)
        return 0;
    char *to = weft__data_at(dst, di, dr, dc);
    const char *from = weft__data_at(src, si, r, c);
    size_t tp = weft__data_pitch(dst, di), fp = weft__data_pitch(src, si);
    int rc = rows == 1 || (tp == bytes && fp == bytes) ? ops->copy(q, to, from, rows * bytes)
                                                       : ops->copy2d(q, to, tp, from, fp, bytes, rows);
    if (rc == 0)
        atomic_fetch_add_explicit(&src->copied->bytes, rows * bytes, memory_order_relaxed);
    return rc;
}

/* The interior of replica src into replica dst (a tile's halo is the
 * neighbours' and comes from them: data/tile.c). */
static int copy_interior(weft__data *d, const weft__device_ops *ops, weft__dqueue *q, unsigned dst, unsigned src)
{
    return weft__data_copy_rect(ops, q, d, dst, d->in_r0, d->in_c0, d, src, d->in_r0, d->in_c0, d->in_rows,
                                d->in_bytes);
}

/* Device dev's copy queue `which` (see weft__mnode), made on first use. */
static int copy_queue(weft__data *d, unsigned dev, int which, weft__dqueue **out)
{
    weft__mnode *m = &d->mnodes[dev];
    int rc = 0;
    pthread_mutex_lock(&m->lock);
    if (!m->copyq[which]) {
        rc = d->devs[dev]->ops->queue_create(d->devs[dev], &m->copyq[which]);
        if (rc == 0)
            m->dev = d->devs[dev];
        else
            m->copyq[which] = NULL;
    }
    *out = m->copyq[which];
    pthread_mutex_unlock(&m->lock);
    return rc;
}

static void ignore_report(void *cookie, int status)
{
    (void)cookie;
    (void)status;
}

/* A copy on device src's copy queue `which` failed: the queue keeps its
 * first error until a report takes it (a copy queue has none otherwise),
 * so ask for one, lest every later copy there be reported failed too. */
static void copy_queue_failed(weft__data *d, unsigned src, int which)
{
    weft__dqueue *q = d->mnodes[src].copyq[which];
    if (q)
        (void)d->devs[src]->ops->notify(q, ignore_report, NULL);
}

/* Queue a copy of the part (r, c, rows, bytes) of device replica src into
 * the host's on the device's copy queue `which` (see weft__mnode), and an
 * event after it (*e, for the caller to wait for and destroy). */
static int copy_rect_to_host_async(weft__data *d, unsigned src, int which, size_t r, size_t c, size_t rows,
                                   size_t bytes, weft__devent **e)
{
    weft__device *dev = d->devs[src];
    *e = NULL;
    /* Every copy is ordered after the last write of its source: a copy
     * queue waits for copies only, so the replica's writer must have
     * ended (the graph releases a task reading on the host only after its
     * predecessors completed).  Refused loudly otherwise. */
    for (const weft__wrec *w = d->open; w; w = w->next)
        if (w->tag == d->rep[src].tag)
            return weft__error(WEFT_EDEVICE, "coherence: a copy of data d%u to the host would read its replica on "
                                             "%s while a writer still changes it (an ordering error in Weft: "
                                             "please report it)", d->id, dev->name);
    weft__dqueue *q;
    int rc = host_buffer(d);
    if (rc == 0)
        rc = copy_queue(d, src, which, &q);
    if (rc != 0)
        return rc;
    rc = weft__data_wait_ready(d, src, q);
    if (rc == 0)
        rc = weft__data_copy_rect(dev->ops, q, d, 0, r, c, d, src, r, c, rows, bytes);
    if (rc == 0)
        rc = dev->ops->event_create(dev, e);
    if (rc == 0 && (rc = dev->ops->event_record(*e, q)) != 0) {
        (void)weft__device_event_wait(dev, *e);
        dev->ops->event_destroy(*e);
        *e = NULL;
    }
    return rc;
}

/* The interior of device replica src into the host's (see above); of a
 * tile, the part not in the user's memory already (weft__tile_host_part). */
static int copy_to_host_async(weft__data *d, unsigned src, int which, weft__devent **e)
{
    watch_compare(d, src, false); /* (the checking mode: what the memory held until now) */
    weft__rect p = {d->in_r0, d->in_c0, d->in_rows, d->in_bytes};
    if (d->tile)
        weft__tile_host_part(d, &p);
    return copy_rect_to_host_async(d, src, which, p.r, p.c, p.rows, p.bytes, e);
}

static void wait_overwritable(weft__data *d, unsigned dev);

int weft__data_parts_to_host(weft__data *d, const weft__rect *parts, unsigned n)
{
    if (n)
        wait_overwritable(d, 0); /* the parts overwrite the host's */
    if (weft__rep_valid(d, 0) || n == 0)
        return 0;
    if (n > 4)
        return WEFT_EINVAL;
    int src = weft__data_source_for(d, 0);
    if (src <= 0)
        return WEFT_EDEVICE; /* no valid copy anywhere: cannot happen while the states hold */
    weft__device *dev = d->devs[src];
    weft__devent *e[4] = {NULL, NULL, NULL, NULL};
    int rc = 0;
    unsigned queued = 0;
    /* The checking mode: the memory compared before the parts land on it,
     * and watched again as they left it (the host's replica stays stale). */
    bool watched = watch_on(d);
    if (watched && !watch_holds(d))
        watch_report(d, (unsigned)src, false);
    for (; queued < n && rc == 0; queued++)
        rc = copy_rect_to_host_async(d, (unsigned)src, FETCH_Q, parts[queued].r, parts[queued].c,
                                     parts[queued].rows, parts[queued].bytes, &e[queued]);
    atomic_fetch_add(&d->rep[src].pins, 1); /* not evicted (nor written back) meanwhile */
    pthread_mutex_unlock(&d->lock);
    for (unsigned i = 0; i < queued; i++)
        if (e[i]) {
            int wrc = weft__device_event_wait(dev, e[i]);
            if (rc == 0)
                rc = wrc;
            dev->ops->event_destroy(e[i]);
        }
    pthread_mutex_lock(&d->lock);
    atomic_fetch_sub(&d->rep[src].pins, 1);
    if (rc != 0)
        copy_queue_failed(d, (unsigned)src, FETCH_Q);
    if (watched && watch_on(d))
        watch_rebase(d);
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
    if (rc != 0)
        copy_queue_failed(d, src, which);
    return rc;
}

int weft__data_copy_out_queue(weft__data *d, unsigned dev, void *dst, const void *src, size_t n)
{
    weft__dqueue *q;
    int rc = copy_queue(d, dev, EVICT_Q, &q);
    if (rc == 0)
        rc = d->devs[dev]->ops->copy(q, dst, src, n);
    if (rc == 0)
        atomic_fetch_add_explicit(&d->copied->bytes, n, memory_order_relaxed);
    return rc;
}

int weft__data_copy_out_wait(weft__data *d, unsigned dev)
{
    weft__device *x = d->devs[dev];
    weft__dqueue *q;
    weft__devent *e = NULL;
    int rc = copy_queue(d, dev, EVICT_Q, &q);
    if (rc == 0 && (rc = x->ops->event_create(x, &e)) != 0)
        e = NULL;
    if (rc == 0)
        rc = x->ops->event_record(e, q);
    if (e) {
        int w = weft__device_event_wait(x, e);
        rc = rc ? rc : w;
        x->ops->event_destroy(e);
    }
    if (rc != 0)
        copy_queue_failed(d, dev, EVICT_Q);
    return rc;
}

int weft__data_copy_out(weft__data *d, unsigned dev, void *dst, const void *src, size_t n)
{
    int rc = weft__data_copy_out_queue(d, dev, dst, src, n);
    int w = weft__data_copy_out_wait(d, dev);
    return rc ? rc : w;
}

int weft__data_to_host_now(weft__data *d)
{
    if (weft__rep_valid(d, 0))
        return 0;
    int src = weft__data_source_for(d, 0);
    if (src <= 0)
        return WEFT_EDEVICE; /* no valid copy anywhere: cannot happen while the states hold */
    int rc = copy_to_host(d, (unsigned)src, EVICT_Q);
    if (rc == 0)
        weft__data_host_copied(d, (unsigned)src);
    return rc;
}

/* The replica to copy from for device dst: a modified one first, then a
 * shared one on a device of dst's kind (a peer; among several, the one
 * whose links out are least loaded), then the host's; -1 if the only
 * valid one is on a device of another kind (stage through the host). */
/* Whether the last copy into device replica i failed (its `ready` fired
 * with the error): its tag may still say valid while a task that shares it
 * has not ended, but it holds no value. */
static bool copy_in_failed(const weft__data *d, unsigned i)
{
    const weft__replica *r = &d->rep[i];
    return i > 0 && r->ready && ops_of(d, i)->event_query(r->ready) < 0;
}

int weft__data_source_for(const weft__data *d, unsigned dst)
{
    int peer = -1, host = weft__rep_valid(d, 0) ? 0 : -1, other = -1, failed = -1;
    uint32_t peer_load = 0;
    for (unsigned i = 1; i < d->nrep; i++) {
        if (i == dst || !weft__rep_valid(d, i))
            continue;
        bool same_kind = dst == 0 || ops_of(d, i) == ops_of(d, dst);
        if (copy_in_failed(d, i)) { /* the last resort: a copy from it fails in turn */
            failed = same_kind ? (int)i : -1 - (int)i;
            continue;
        }
        if (!same_kind) {
            other = (int)i;
            continue;
        }
        uint32_t load = atomic_load_explicit(&d->mnodes[i].sourcing, memory_order_relaxed);
        if (peer < 0 || load < peer_load) {
            peer = (int)i;
            peer_load = load;
        }
    }
    if (peer >= 0)
        return peer;
    if (host >= 0)
        return host;
    if (other >= 0)
        return -1 - other; /* -(1 + the other-kind replica) */
    return failed;
}

/* Note where the data is now (the lock held): see weft__data.home. */
static void set_home(weft__data *d)
{
    unsigned home = 0;
    uint64_t valid = 0;
    for (unsigned i = 0; i < d->nrep; i++)
        if (weft__rep_valid(d, i)) {
            if (!home && i)
                home = i;
            if (i < 64)
                valid |= 1ull << i;
        }
    atomic_store_explicit(&d->home, home, memory_order_relaxed);
    atomic_store_explicit(&d->valid, valid, memory_order_relaxed);
}

/* Queue on the prefetch queue pq of device dev the copy of d's interior
 * from replica src into replica dev, and make q wait for it by the
 * replica's `ready` event.  The queue waits for nothing but copies (the
 * source's own `ready`), so the copy runs beside the kernels q queued
 * before.  A failed copy fails the users of the replica: the event fires
 * with the queue's error, which q takes by waiting for it (device.h,
 * queue_wait); a report right after the record clears the prefetch
 * queue's error, so that it fails nothing queued later. */
static int prefetch(weft__data *d, unsigned dev, unsigned src, weft__dqueue *pq, weft__dqueue *q)
{
    const weft__device_ops *ops = ops_of(d, dev);
    int rc = src ? weft__data_wait_ready(d, src, pq) : 0;
    if (rc == 0 && (rc = copy_interior(d, ops, pq, dev, src)) == 0)
        atomic_fetch_add_explicit(&d->copied->prefetched, d->in_rows * d->in_bytes, memory_order_relaxed);
    if (rc == 0)
        rc = weft__data_note_ready(d, dev, pq);
    if (rc == 0)
        rc = ops->notify(pq, ignore_report, NULL);
    if (rc == 0)
        rc = weft__data_wait_ready(d, dev, q);
    return rc;
}

/* Make replica dev valid (the lock held).  may_prefetch: the copy may go
 * on the device's prefetch queue (WEFT__DATA_PREFETCH). */
static int fetch(weft__data *d, unsigned dev, weft__dqueue *q, bool may_prefetch)
{
    int src = weft__data_source_for(d, dev);
    if (src == -1)
        return WEFT_EDEVICE; /* no valid copy anywhere: cannot happen while the states hold */
    if (src < 0) {
        /* only on a device of another kind: through the host */
        /* (waited for under the lock: only with two kinds of GPU at once) */
        int rc = copy_to_host(d, (unsigned)(-1 - src), FETCH_Q);
        if (rc != 0)
            return rc;
        d->rep[0].tag = d->cur;
        src = 0;
    }
    if (dev == 0) /* the caller waits for it, without the lock (fetch_to_host) */
        return WEFT_EINVAL;
    /* On the prefetch queue only when q has work in flight that the copy
     * can run beside: on an idle q the copy starts at once, with no trip
     * through another queue. */
    const weft__device_ops *ops = ops_of(d, dev);
    weft__dqueue *pq = NULL;
    if (may_prefetch && !(d->tile && d->tile->nnb) && q && (!ops->queue_busy || ops->queue_busy(q))) {
        unsigned k = atomic_fetch_add_explicit(&d->mnodes[dev].prefetch_next, 1, memory_order_relaxed);
        if (copy_queue(d, dev, PREFETCH_Q + (int)(k % WEFT__PREFETCH_QUEUES), &pq) != 0)
            pq = NULL; /* (no queue for it: on q, as without) */
    }
    int rc;
    if (pq) {
        rc = prefetch(d, dev, (unsigned)src, pq, q);
    } else {
        rc = src ? weft__data_wait_ready(d, (unsigned)src, q) : 0;
        if (rc == 0)
            rc = copy_interior(d, ops, q, dev, (unsigned)src);
        if (rc == 0 && d->tile)
            weft__tile_halo_stale(d, dev); /* the interior only came */
        if (rc == 0)
            rc = weft__data_note_ready(d, dev, q);
    }
    if (rc != 0)
        return rc;
    d->rep[dev].tag = d->cur;
    return 0;
}

/* Start a copy of the newest value to the host for host readers (the lock
 * held): d->host_fetch, an event after it on the copy queue of the device
 * it comes from, which stays pinned until the event is destroyed.  The
 * device counts it among the copies it is a source of (mnode.sourcing), so
 * that fetches started together spread over the devices that hold the
 * value.  0, or the error that kept it from being queued. */
static int start_host_fetch(weft__data *d)
{
    int src = weft__data_source_for(d, 0);
    if (src <= 0)
        return WEFT_EDEVICE; /* no valid copy anywhere: cannot happen while the states hold */
    int rc = copy_to_host_async(d, (unsigned)src, FETCH_Q, &d->host_fetch);
    if (rc != 0)
        return rc;
    d->host_fetch_dev = (unsigned)src;
    d->host_fetch_tag = d->cur;
    atomic_fetch_add(&d->rep[src].pins, 1); /* not evicted while it is copied from */
    atomic_fetch_add_explicit(&d->mnodes[src].sourcing, 1, memory_order_relaxed);
    return 0;
}

void weft__data_host_fetch_start(weft__data *d)
{
    pthread_mutex_lock(&d->lock);
    if (atomic_load_explicit(&d->on_devices, memory_order_acquire) && !d->user_dev &&
        !atomic_load_explicit(&d->has_partials, memory_order_acquire) && !weft__rep_valid(d, 0) &&
        !d->host_fetch && d->nrep > 1)
        (void)start_host_fetch(d); /* (not started: the free copies it itself) */
    pthread_mutex_unlock(&d->lock);
}

/* Make the host's replica valid for a host reader (the lock held; released
 * while it waits, so that nothing waits for a task stream under a handle's
 * lock: a stream's thread may be finishing a task that takes it).  Readers
 * at once share one copy, and a copy a reader started before it began
 * (weft__data_prefetch_host) is the one it waits for. */
static int fetch_to_host(weft__data *d)
{
    int rc = 0;
    if (!d->host_fetch && (rc = start_host_fetch(d)) != 0)
        return rc;
    unsigned src = d->host_fetch_dev;
    uint64_t tag = d->host_fetch_tag;
    weft__devent *e = d->host_fetch;
    d->host_fetch_users++;
    pthread_mutex_unlock(&d->lock);
    rc = weft__device_event_wait(d->devs[src], e);
    pthread_mutex_lock(&d->lock);
    if (--d->host_fetch_users == 0) {
        d->devs[src]->ops->event_destroy(e);
        d->host_fetch = NULL;
        atomic_fetch_sub(&d->rep[src].pins, 1); /* (no wake-up under the lock: a waiter for room looks again) */
        atomic_fetch_sub_explicit(&d->mnodes[src].sourcing, 1, memory_order_relaxed);
        if (rc != 0)
            copy_queue_failed(d, src, FETCH_Q);
    }
    if (rc != 0)
        return rc;
    /* The value it copied (only readers ran meanwhile: a writer follows
     * them, so it is still the newest), unless a reader that waited for
     * the same copy went on to make the host's replica the only valid one
     * (weft__data_host_sync, for an overlapping range's writer). */
    if (!weft__rep_valid(d, 0))
        d->rep[0].tag = tag;
    return 0;
}

int weft__data_prefetch_host(weft__data *d, weft__done_fn done, void *cookie)
{
    if (!atomic_load_explicit(&d->on_devices, memory_order_acquire) || atomic_load(&d->fam) ||
        atomic_load_explicit(&d->has_partials, memory_order_acquire) || d->user_dev)
        return 0;
    int rc = 0;
    pthread_mutex_lock(&d->lock);
    if (!weft__rep_valid(d, 0) && d->nrep > 1 && (d->host_fetch || start_host_fetch(d) == 0)) {
        weft__device *dev = d->devs[d->host_fetch_dev];
        weft__dqueue *q;
        /* Not landed yet: called back once it has (the queue's report
         * comes after the copy).  A report that cannot be asked for leaves
         * the wait to the acquire. */
        if (dev->ops->event_query(d->host_fetch) == 0 &&
            (!done || (copy_queue(d, d->host_fetch_dev, FETCH_Q, &q) == 0 && dev->ops->notify(q, done, cookie) == 0)))
            rc = 1;
    }
    pthread_mutex_unlock(&d->lock);
    return rc;
}

int weft__data_host_sync(weft__data *d, bool write, uint64_t seq)
{
    bool partials = atomic_load_explicit(&d->has_partials, memory_order_acquire);
    if (!partials && !atomic_load_explicit(&d->on_devices, memory_order_acquire))
        return 0; /* the host's replica is the only one there is */
    int rc = 0;
    pthread_mutex_lock(&d->lock);
    if (partials)
        rc = weft__reduce_fold(d, seq);
    if (rc == 0 && !weft__rep_valid(d, 0))
        rc = fetch_to_host(d);
    if (rc == 0 && write)
        for (unsigned i = 1; i < d->nrep; i++)
            if (weft__rep_valid(d, i)) { /* stale once the task writes the host's memory */
                weft__data_reset_to_host(d);
                break;
            }
    if (rc == 0)
        set_home(d);
    pthread_mutex_unlock(&d->lock);
    return rc;
}

void weft__data_prefetch_settle(weft__data *d)
{
    pthread_mutex_lock(&d->lock);
    if (d->host_fetch && !weft__rep_valid(d, 0) && fetch_to_host(d) == 0)
        set_home(d);
    pthread_mutex_unlock(&d->lock);
}

int weft__data_to_host(weft__data *d)
{
    return weft__rep_valid(d, 0) ? 0 : fetch_to_host(d);
}

void weft__data_host_copied(weft__data *d, unsigned src)
{
    d->rep[0].tag = d->rep[src].tag;
    set_home(d);
}

void weft__data_reset_to_host(weft__data *d)
{
    d->cur = ++d->last_tag;
    d->rep[0].tag = d->cur;
    set_home(d);
}

weft__replica_state weft__rep_state(const weft__data *d, unsigned i)
{
    if (!weft__rep_valid(d, i))
        return WEFT__REP_INVALID;
    for (unsigned j = 0; j < d->nrep; j++)
        if (j != i && weft__rep_valid(d, j))
            return WEFT__REP_SHARED;
    return WEFT__REP_MODIFIED;
}

/* Whether the value of tag must be kept (the lock held): the newest, or
 * one that an open write replaces (its abort makes it the newest again). */
static bool tag_live(const weft__data *d, uint64_t tag)
{
    if (tag == WEFT__TAG_GARBAGE)
        return false;
    if (tag == d->cur)
        return true;
    for (const weft__wrec *w = d->open; w; w = w->next)
        if (w->prev == tag)
            return true;
    return false;
}

/* Whether replica j holds its value now: the last copy into it has
 * landed, and did not fail (the host's is filled before its tag is set). */
static bool landed(const weft__data *d, unsigned j)
{
    const weft__replica *r = &d->rep[j];
    return j == 0 || !r->ready || ops_of(d, j)->event_query(r->ready) == 1;
}

/* Whether replica i is the last one holding a value that must be kept
 * (others whose copy of it has not landed do not count: it may fail). */
static bool last_of_live(const weft__data *d, unsigned i)
{
    uint64_t tag = d->rep[i].tag;
    if (!tag_live(d, tag))
        return false;
    for (unsigned j = 0; j < d->nrep; j++)
        if (j != i && d->rep[j].tag == tag && landed(d, j))
            return false;
    return true;
}

typedef struct ends_wait {
    weft__data *d;
    uint64_t seen;
} ends_wait;

static bool ends_changed(const void *arg)
{
    const ends_wait *w = arg;
    return atomic_load(&w->d->ends) != w->seen;
}

/* acquire_read and acquire_write overwrite replica dev (the lock held):
 * if it is the last copy of a value that an open write may fall back to
 * (not the newest: that one the acquiring task's own write replaces, or
 * its read fetches), wait until that value is no longer live — the open
 * writers whose prev it is end; they all precede the acquiring task, so
 * nothing they wait for waits for it.  The lock is let go meanwhile. */
static void wait_overwritable(weft__data *d, unsigned dev)
{
    while (d->rep[dev].tag != d->cur && last_of_live(d, dev)) {
        ends_wait ew = {d, atomic_load(&d->ends)};
        pthread_mutex_unlock(&d->lock);
        weft__wait w = {.key = &d->ends, .done = ends_changed, .arg = &ew, .deadline = UINT64_MAX, .spin = 64};
        (void)weft__wait_until(d->ws, &w);
        pthread_mutex_lock(&d->lock);
    }
}

void weft__data_wait_overwritable(weft__data *d, unsigned dev) { wait_overwritable(d, dev); }

/* Whether device replica i of e (not pinned) may be evicted now: it holds
 * no value that must be kept, or the host's can take it (the host's own is
 * not the last of one). */
static bool evictable(const weft__data *e, unsigned i)
{
    if (!last_of_live(e, i))
        return true;
    /* The host can take it, unless a fetch to the host is in flight: that
     * copy lands after this one, over it (from a replica whose own copy in
     * may yet fail). */
    bool fetching = e->host_fetch && ops_of(e, e->host_fetch_dev)->event_query(e->host_fetch) != 1;
    return !fetching && !last_of_live(e, 0);
}

/* Give replica r (on device dev) of e back to its device (e's lock held,
 * not pinned, evictable): the last copy of a value that must be kept goes
 * to the host first (a reducer's private copy, to host memory; a scratch
 * buffer holds nothing).  false if that copy failed (nothing is dropped
 * then). */
static bool drop_replica(weft__data *e, weft__replica *r, unsigned dev)
{
    if (r->partial)
        return weft__reduce_evict(e, r, dev);
    if (r->scratch) {
        weft__scratch_evict(e, r, dev);
        return true;
    }
    if (last_of_live(e, dev)) { /* to the host first */
        if (copy_to_host(e, dev, EVICT_Q) != 0)
            return false;
        e->rep[0].tag = r->tag;
    } else if (r->ready) {
        (void)weft__device_event_wait(e->devs[dev], r->ready); /* its last copy in has landed */
    }
    if (r->ready)
        ops_of(e, dev)->event_destroy(r->ready);
    ops_of(e, dev)->mem_free(e->devs[dev], r->ptr, e->size);
    atomic_fetch_sub(&e->devs[dev]->replicas, weft__device_bytes(e->size));
    r->ptr = NULL;
    r->ready = NULL;
    r->ready_q = NULL;
    r->tag = WEFT__TAG_GARBAGE;
    set_home(e);
    return true;
}

/* Make room on dev for d->size bytes (*out) by evicting the least recently
 * used replicas and reducers' private copies that no task uses (d's lock
 * held; other handles' only tried; d's own are private copies, or its
 * replica there when a reducer allocates).  0 once the allocation
 * succeeded; WEFT__DATA_RETRY when nothing is left to evict but pinned
 * replicas (of running tasks, whose end makes room: the placer keeps their
 * data within the capacity) or replicas whose handle's lock another thread
 * holds (a moment later they may go: a loaded machine preempts lock
 * holders, and an ENOMEM for that failed tasks under load); WEFT_ENOMEM
 * otherwise. */
static int alloc_evicting(weft__data *d, unsigned dev, void **out)
{
    weft__mnode *m = &d->mnodes[dev];
    for (;;) {
        if (ops_of(d, dev)->mem_alloc(d->devs[dev], d->size, out) == 0) {
            atomic_fetch_add(&d->devs[dev]->replicas, weft__device_bytes(d->size));
            return 0;
        }
        *out = NULL;
        weft__data *victim = NULL;
        weft__replica *vr = NULL;
        bool pinned = false; /* (or its handle's lock was taken: evictable in a moment) */
        pthread_mutex_lock(&m->lock);
        for (weft__replica *r = m->head; r && !victim; r = r->lru_next) {
            pinned |= atomic_load(&r->pins) > 0;
            weft__data *e = r->owner;
            if (atomic_load(&r->pins))
                continue;
            if (e != d && pthread_mutex_trylock(&e->lock) != 0) {
                pinned = true;
                continue;
            }
            /* Pinned since (pins rise under e's lock); or the last copy of
             * a value an open write may fall back to, which the host
             * cannot take now (that write's end frees it, as a pin's). */
            bool keep = atomic_load(&r->pins) || (!r->partial && !r->scratch && !evictable(e, dev));
            if (keep) {
                pinned = true;
                if (e != d)
                    pthread_mutex_unlock(&e->lock);
                continue;
            }
            lru_unlink(m, r);
            victim = e;
            vr = r;
        }
        pthread_mutex_unlock(&m->lock);
        if (!victim)
            return pinned ? WEFT__DATA_RETRY : WEFT_ENOMEM;
        bool dropped = drop_replica(victim, vr, dev);
        if (!dropped)
            lru_touch(m, vr); /* kept: back in the list */
        if (victim != d)
            pthread_mutex_unlock(&victim->lock);
        if (!dropped)
            return WEFT_ENOMEM;
    }
}

int weft__data_alloc_evicting(weft__data *d, unsigned dev, void **out) { return alloc_evicting(d, dev, out); }

int weft__data_acquire(weft__data *d, unsigned dev, unsigned mode, uint64_t seq, weft__dqueue *q,
                       weft__data_hold *hold, weft__wrec *rec)
{
    weft__data_hold_clear(hold);
    weft__wrec_clear(rec);
    if (atomic_load_explicit(&d->fam, memory_order_acquire))
        return weft__family_acquire(d, dev, mode, seq, q, hold, rec); /* (its reductions there: data/tile.c) */
    if (atomic_load_explicit(&d->has_partials, memory_order_acquire)) {
        /* Reduction groups spawned before this task: their private copies
         * into the value first (their tasks have finished: the graph orders
         * this one after them). */
        pthread_mutex_lock(&d->lock);
        int rc = weft__reduce_fold(d, seq);
        pthread_mutex_unlock(&d->lock);
        if (rc != 0)
            return rc;
    }
    return weft__data_acquire_one(d, dev, mode, q, hold, rec);
}

int weft__data_acquire_one(weft__data *d, unsigned dev, unsigned mode, weft__dqueue *q, weft__data_hold *hold,
                           weft__wrec *rec)
{
    if (dev >= d->nrep)
        dev = 0; /* a device added after registration: the task uses the host's copy */
    /* The host's replica is the only one ever valid: nothing to do. */
    if (dev == 0 && !atomic_load_explicit(&d->on_devices, memory_order_acquire)) {
        hold->state = WEFT__REP_MODIFIED;
        return 0;
    }
    int rc = 0;
    pthread_mutex_lock(&d->lock);
    weft__replica *r = &d->rep[dev];
    if (mode & (WEFT_R | WEFT_W))
        wait_overwritable(d, dev);
    if (dev && !r->ptr && (rc = alloc_evicting(d, dev, &r->ptr)) == 0 && d->tile)
        weft__tile_halo_stale(d, dev); /* a new replica: no halo yet */
    if (dev == 0 && rc == 0)
        rc = host_buffer(d); /* data registered on a device: the host's copy is made now */
    int src = -1;
    bool fetched = false;
    /* acquire_read: the newest value into the replica, if it lacks it. */
    if (rc == 0 && dev == 0 && (mode & WEFT_R) && !weft__rep_valid(d, 0)) {
        hold->src = (int8_t)weft__data_source_for(d, 0);
        rc = fetch_to_host(d);
        fetched = true;
    } else if (rc == 0 && (mode & WEFT_R) && !weft__rep_valid(d, dev)) {
        src = weft__data_source_for(d, dev);
        rc = fetch(d, dev, q, (mode & WEFT__DATA_PREFETCH) != 0);
        fetched = true;
    } else if (rc == 0 && dev && q) {
        rc = weft__data_wait_ready(d, dev, q); /* valid, but maybe filled on another queue */
    }
    if (rc == 0 && fetched) {
        rec->fetched = (int16_t)dev;
        rec->fetched_tag = d->cur;
    }
    /* acquire_write: a new value, in this replica only, recorded open. */
    if (rc == 0 && (mode & WEFT_W)) {
        if (dev == 0)
            d->watch = WEFT__WATCH_OFF; /* (the writer's memory from now on, whatever it held) */
        rec->tag = ++d->last_tag;
        rec->prev = d->cur;
        rec->dev = (int16_t)dev;
        rec->was = r->tag;
        rec->status = WEFT__WREC_OPEN;
        rec->next = d->open;
        d->open = rec;
        d->cur = r->tag = rec->tag;
    }
    if (rc == 0 && dev) {
        atomic_fetch_add(&r->pins, 1);
        hold->on = (int16_t)dev;
        if (src > 0 && dev) { /* a device copied from: kept until the copy has run */
            atomic_fetch_add(&d->rep[src].pins, 1);
            hold->from = (int16_t)src;
            atomic_fetch_add_explicit(&d->mnodes[src].sourcing, 1, memory_order_relaxed);
        }
        atomic_store_explicit(&d->on_devices, true, memory_order_release);
    }
    set_home(d);
    if (rc == 0) {
        if (fetched && src != -1)
            hold->src = (int8_t)(src < 0 ? 0 : src); /* another kind's: through the host */
        hold->state = (uint8_t)weft__rep_state(d, dev);
    }
    bool listed = dev && r->ptr && dev != d->user_dev; /* the user's own memory is never evicted */
    pthread_mutex_unlock(&d->lock);
    if (listed)
        lru_touch(&d->mnodes[dev], r);
    return rc;
}

int weft__data_check(weft__data *d, unsigned dev, unsigned mode, char *why, size_t len)
{
    if (dev >= d->nrep)
        dev = 0;
    if (dev == 0 && !atomic_load_explicit(&d->on_devices, memory_order_acquire))
        return d->tile ? weft__tile_check(d, 0, mode, why, len) : 0;
    int rc = 0;
    pthread_mutex_lock(&d->lock);
    if (!weft__rep_valid(d, dev)) {
        snprintf(why, len, "its replica on %s is invalid", d->devs[dev]->name);
        rc = WEFT_EDEVICE;
    }
    for (unsigned i = 0; i < d->nrep && rc == 0 && (mode & WEFT_W); i++)
        if (i != dev && weft__rep_valid(d, i)) {
            snprintf(why, len, "its replica on %s is valid too while the task writes it on %s", d->devs[i]->name,
                     d->devs[dev]->name);
            rc = WEFT_EDEVICE;
        }
    pthread_mutex_unlock(&d->lock);
    return rc == 0 && d->tile ? weft__tile_check(d, dev, mode, why, len) : rc;
}

const weft__data *weft__data_at_address(weft__mnode *m, const void *p, size_t n)
{
    const weft__data *found = NULL;
    uintptr_t lo = (uintptr_t)p, hi = lo + n;
    pthread_mutex_lock(&m->lock);
    for (const weft__replica *r = m->head; r && !found; r = r->lru_next) {
        uintptr_t rlo = (uintptr_t)r->ptr, rhi = rlo + r->owner->size;
        if (r->ptr && lo < rhi && rlo < hi)
            found = r->owner;
    }
    pthread_mutex_unlock(&m->lock);
    return found;
}

unsigned weft__data_home(weft__data *d) { return atomic_load_explicit(&d->home, memory_order_relaxed); }

bool weft__data_host_seal(weft__data *d, uint64_t *digest, bool *poisoned)
{
    if (!d->ptr || d->user_dev || atomic_load(&d->fam) || atomic_load(&d->no_memory))
        return false;
    pthread_mutex_lock(&d->lock);
    const unsigned char *p = d->ptr;
    bool all = d->size > 0;
    for (size_t i = 0; i < d->size && all; i++)
        all = p[i] == WEFT__DATA_POISON;
    *poisoned = all;
    *digest = weft__vcheck_digest_of(d->ptr, d->size);
    pthread_mutex_unlock(&d->lock);
    return true;
}

uint64_t weft__data_valid_mask(weft__data *d)
{
    if (!atomic_load_explicit(&d->on_devices, memory_order_acquire))
        return 1;
    return atomic_load_explicit(&d->valid, memory_order_relaxed);
}

/* Replica i holds no value now (the lock held).  A copy into it may have
 * failed (its `ready` fired with the error, which a queue that waits for
 * it takes): `ready` is recorded once more on its queue, after the report
 * that took the error there, so that a later writer there, which waits
 * for it without copying, does not take the failure of a copy it does not
 * use. */
static void garbage(weft__data *d, unsigned i)
{
    weft__replica *r = &d->rep[i];
    r->tag = WEFT__TAG_GARBAGE;
    if (i && r->ready && r->ready_q)
        (void)ops_of(d, i)->event_record(r->ready, r->ready_q);
}

void weft__data_end(weft__data *d, weft__wrec *rec, bool ok, bool untouched, bool copies_failed, bool poison)
{
    if (rec->status != WEFT__WREC_OPEN && (ok || !copies_failed || rec->fetched < 0))
        return; /* nothing written, nothing to take back */
    bool restored = false, ended = rec->status == WEFT__WREC_OPEN;
    pthread_mutex_lock(&d->lock);
    if (ended) {
        for (weft__wrec **p = &d->open; *p; p = &(*p)->next) /* out of the open list */
            if (*p == rec) {
                *p = rec->next;
                break;
            }
        rec->next = NULL;
        rec->status = ok ? WEFT__WREC_COMMITTED : WEFT__WREC_ABORTED;
        /* The checking mode: the user's memory, which holds an older value
         * no write may fall back to, shows it (the poison fill; a family's
         * is watched by a digest) until the newest value is brought back
         * (a host task, acquire, unregister), and is watched until then
         * ("The host watch", above). */
        if (ok && poison && rec->dev > 0 && (unsigned)rec->dev < d->nrep && d->ptr && !d->user_dev &&
            !tag_live(d, d->rep[0].tag))
            watch_arm(d, (unsigned)rec->dev);
    }
    if (rec->status == WEFT__WREC_ABORTED) {
        /* commit's opposite: no replica holds the aborted value (the one
         * written holds what the task left there); writes that replaced it
         * replace what it replaced; if it was the newest, that is again. */
        for (unsigned i = 0; i < d->nrep; i++)
            if (d->rep[i].tag == rec->tag) {
                if (untouched)
                    d->rep[i].tag = rec->was; /* (a copy of it holds what it held) */
                else
                    garbage(d, i);
            }
        for (weft__wrec *w = d->open; w; w = w->next)
            if (w->prev == rec->tag)
                w->prev = rec->prev;
        if (d->cur == rec->tag) {
            d->cur = rec->prev;
            restored = true;
            bool held = false;
            for (unsigned i = 0; i < d->nrep && !held; i++)
                held = d->rep[i].tag == d->cur;
            /* No replica holds it: the task wrote over the only copy in
             * place.  What it left there is all there is (the value is
             * unspecified, weft.h): that replica holds it — the one it
             * wrote, if it held the value, else the user's memory. */
            if (!held) {
                bool wrote_it = rec->was == d->cur && rec->dev >= 0 && (unsigned)rec->dev < d->nrep;
                d->rep[wrote_it ? (unsigned)rec->dev : d->user_dev].tag = d->cur;
            }
        }
    }
    if (!ok && copies_failed && rec->fetched >= 0) {
        /* A copy into the replica it fetched may have failed: no value
         * there, unless another task uses the replica (then it took the
         * copy's error too, and is the last to end), or it is the last
         * copy of a value that must be kept (lost if the copy failed:
         * nothing better is left). */
        unsigned i = (unsigned)rec->fetched;
        if (i > 0 && d->rep[i].tag == rec->fetched_tag && atomic_load(&d->rep[i].pins) <= 1 && !last_of_live(d, i))
            garbage(d, i);
    }
    set_home(d);
    pthread_mutex_unlock(&d->lock);
    rec->fetched = -1;
    if (ended) { /* acquires waiting to overwrite a value it kept live look again */
        atomic_fetch_add(&d->ends, 1);
        weft__wake(d->ws, &d->ends);
    }
    if (restored && atomic_load(&d->fam))
        weft__family_undone(d); /* its value changed back: the rest of the family refreshes from it */
}

uint64_t weft__data_room_epoch(const weft__data *d, unsigned dev)
{
    return dev < d->nrep ? atomic_load(&d->mnodes[dev].unpinned) : 0;
}

bool weft__data_room_held(const weft__data *d, unsigned dev)
{
    if (dev == 0 || dev >= d->nrep)
        return false;
    weft__mnode *m = &d->mnodes[dev];
    bool held = false;
    pthread_mutex_lock(&m->lock);
    for (weft__replica *r = m->head; r && !held; r = r->lru_next)
        held = atomic_load(&r->pins) > 0;
    pthread_mutex_unlock(&m->lock);
    return held;
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

void weft__data_unpin_replica(weft__data *d, int i, bool notify) { unpin(d, i, notify); }

void weft__data_release(weft__data *d, const weft__data_hold *hold, bool notify)
{
    unpin(d, hold->on, notify);
    if (hold->from > 0) {
        atomic_fetch_sub_explicit(&d->mnodes[hold->from].sourcing, 1, memory_order_relaxed);
        unpin(d, hold->from, notify);
    }
    if (d->tile)
        weft__tile_release_halo(d, hold, notify);
}

/* Data registered on a device: its newest value into the user's memory
 * there (the lock held; waited for on the device's write-back queue). */
static int copy_into_user(weft__data *d)
{
    unsigned u = d->user_dev;
    if (weft__rep_valid(d, u))
        return 0;
    int src = weft__data_source_for(d, u), rc = 0;
    if (src < -1) { /* only on a device of another kind: through the host */
        if ((rc = copy_to_host(d, (unsigned)(-1 - src), EVICT_Q)) != 0)
            return rc;
        src = 0;
    }
    if (src < 0)
        return WEFT_EDEVICE; /* no valid copy anywhere: cannot happen while the states hold */
    weft__dqueue *q;
    weft__devent *e = NULL;
    const weft__device_ops *ops = ops_of(d, u);
    if ((rc = copy_queue(d, u, EVICT_Q, &q)) != 0)
        return rc;
    if (src > 0)
        rc = weft__data_wait_ready(d, (unsigned)src, q);
    if (rc == 0)
        rc = copy_interior(d, ops, q, u, (unsigned)src);
    if (rc == 0 && (rc = ops->event_create(d->devs[u], &e)) == 0 && (rc = ops->event_record(e, q)) == 0)
        rc = weft__device_event_wait(d->devs[u], e);
    if (e)
        ops->event_destroy(e);
    if (rc != 0)
        copy_queue_failed(d, u, EVICT_Q);
    return rc;
}

bool weft__data_free(weft__data *d)
{
    weft__scratch_free_all(d); /* (under its lock: another handle's eviction may take one meanwhile) */
    if (atomic_load(&d->fam))
        weft__family_leave(d); /* up to date with its family first (a tile's reductions combined); it leaves it */
    if (d->partials || d->image) { /* reductions not combined yet: into the value first */
        pthread_mutex_lock(&d->lock);
        weft__reduce_free(d);
        pthread_mutex_unlock(&d->lock);
    }
    if (atomic_load(&d->on_devices)) {
        pthread_mutex_lock(&d->lock);
        if (d->host_fetch) /* (started for a reader that neither ran nor settled it: cannot happen) */
            (void)fetch_to_host(d);
        /* The newest value into the user's memory.  A failed copy back
         * leaves it as it was: the runtime cannot report it from here
         * (unregister has no task). */
        if (d->user_dev) {
            (void)copy_into_user(d);
        } else if (!weft__rep_valid(d, 0)) {
            int src = weft__data_source_for(d, 0);
            if (src > 0 && copy_to_host(d, (unsigned)src, EVICT_Q) == 0)
                d->rep[0].tag = d->cur;
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
            if (r->ptr && i != d->user_dev) {
                ops_of(d, i)->mem_free(d->devs[i], r->ptr, d->size);
                atomic_fetch_sub(&d->devs[i]->replicas, weft__device_bytes(d->size));
            }
            *r = (weft__replica){.tag = WEFT__TAG_GARBAGE, .owner = d};
        }
        pthread_mutex_unlock(&d->lock);
    }
    if (d->user_dev)
        weft__free(d->ptr); /* the host's copy was Weft's */
    bool tripped = weft__data_watch_take(d);
    pthread_mutex_destroy(&d->lock);
    weft__free(d->rep);
    d->rep = NULL;
    weft__slot_free(d);
    return tripped;
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
