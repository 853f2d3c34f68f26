/*
 * data/scratch.c — scratch buffers (data/scratch.h): a task's memory of its
 * handle's size where it runs, kept per handle and GPU between tasks.
 */
#include "data/scratch.h"

#include <string.h>

/* A record for a buffer on dev, without its memory yet; NULL on ENOMEM. */
static weft__scratch *record_new(weft__data *d, unsigned dev)
{
    weft__scratch *s = weft__alloc(sizeof *s);
    if (!s)
        return NULL;
    memset(s, 0, sizeof *s);
    s->r.tag = WEFT__TAG_GARBAGE;
    s->r.owner = d;
    s->r.scratch = true;
    atomic_init(&s->r.pins, 0);
    s->dev = dev;
    return s;
}

/* A buffer in host memory, pinned by nobody (no one else ever sees it). */
static int host_buffer(weft__data *d, weft__scratch **out)
{
    weft__scratch *s = record_new(d, 0);
    if (!s)
        return WEFT_ENOMEM;
    int rc = d->devs[0]->ops->mem_alloc(d->devs[0], d->size, &s->r.ptr);
    if (rc != 0) {
        weft__free(s);
        return rc;
    }
    *out = s;
    return 0;
}

/* One of d's buffers on dev that no task uses, pinned; NULL if none (the
 * lock held: pins rise only under it, so one seen at 0 stays free). */
static weft__scratch *take_kept(weft__data *d, unsigned dev)
{
    for (weft__scratch *s = d->scratch; s; s = s->next)
        if (s->dev == dev && atomic_load(&s->r.pins) == 0) {
            atomic_fetch_add(&s->r.pins, 1);
            return s;
        }
    return NULL;
}

/* A new buffer of d on dev, pinned and listed, room made by eviction (the
 * lock held).  0, WEFT__DATA_RETRY or WEFT_ENOMEM. */
static int gpu_buffer(weft__data *d, unsigned dev, weft__scratch **out)
{
    weft__scratch *s = record_new(d, dev);
    if (!s)
        return WEFT_ENOMEM;
    int rc = weft__data_alloc_evicting(d, dev, &s->r.ptr);
    if (rc != 0) {
        weft__free(s);
        return rc;
    }
    atomic_fetch_add(&s->r.pins, 1);
    s->next = d->scratch;
    d->scratch = s;
    *out = s;
    return 0;
}

int weft__scratch_acquire(weft__data *d, unsigned dev, weft__scratch **out)
{
    *out = NULL;
    if (dev >= d->nrep)
        dev = 0; /* a device added after registration: host memory */
    if (dev == 0)
        return host_buffer(d, out);
    pthread_mutex_lock(&d->lock);
    weft__scratch *s = take_kept(d, dev);
    int rc = s ? 0 : gpu_buffer(d, dev, &s);
    pthread_mutex_unlock(&d->lock);
    if (rc != 0)
        return rc;
    weft__data_lru_touch(d, dev, &s->r); /* the most recently used of its node (pinned meanwhile) */
    *out = s;
    return 0;
}

void weft__scratch_release(weft__data *d, weft__scratch *s, bool notify)
{
    if (s->dev == 0) {
        d->devs[0]->ops->mem_free(d->devs[0], s->r.ptr, d->size);
        weft__free(s);
        return;
    }
    unsigned dev = s->dev; /* (read first: unpinned, it may be evicted and freed at once) */
    if (atomic_fetch_sub(&s->r.pins, 1) == 1 && notify) {
        atomic_fetch_add(&d->mnodes[dev].unpinned, 1);
        weft__wake(d->ws, &d->mnodes[dev]);
    }
}

/* Give s's memory and record back (the lock held or not needed; s out of
 * the list and unpinned). */
static void buffer_free(weft__data *d, weft__scratch *s)
{
    d->devs[s->dev]->ops->mem_free(d->devs[s->dev], s->r.ptr, d->size);
    atomic_fetch_sub(&d->devs[s->dev]->replicas, weft__device_bytes(d->size));
    weft__free(s);
}

void weft__scratch_evict(weft__data *e, weft__replica *r, unsigned dev)
{
    weft__scratch *s = (weft__scratch *)r;
    WEFT__CHECK(s->dev == dev);
    for (weft__scratch **p = &e->scratch; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    buffer_free(e, s);
}

void weft__scratch_free_all(weft__data *d)
{
    pthread_mutex_lock(&d->lock);
    while (d->scratch) {
        weft__scratch *s = d->scratch;
        d->scratch = s->next;
        WEFT__CHECK(atomic_load(&s->r.pins) == 0); /* (every task that used d has finished) */
        weft__data_lru_unlink(d, s->dev, &s->r);
        buffer_free(d, s);
    }
    pthread_mutex_unlock(&d->lock);
}
