/*
 * device/host.c — the host device: CPU cores and ordinary memory.  Its queue
 * runs work inline, in order, on the calling thread, so every event has fired
 * by the time it is recorded and completions are reported at once.
 */
#include "device/device.h"

#include <string.h>

struct weft__dqueue {
    weft__device *dev;
    int error;                 /* first error since the last notify */
};
struct weft__devent {
    int status;
};

static int host_start(weft__device *dev) { return dev->ops->queue_create(dev, &dev->default_queue); }

static void host_stop(weft__device *dev)
{
    if (dev->default_queue)
        dev->ops->queue_destroy(dev->default_queue);
    dev->default_queue = NULL;
}

static int host_queue_create(weft__device *dev, weft__dqueue **out)
{
    weft__dqueue *q = weft__alloc(sizeof *q);
    if (!q)
        return WEFT_ENOMEM;
    q->dev = dev;
    q->error = 0;
    *out = q;
    return 0;
}

static void host_queue_destroy(weft__dqueue *q) { weft__free(q); }

static int host_event_create(weft__device *dev, weft__devent **out)
{
    (void)dev;
    weft__devent *e = weft__alloc(sizeof *e);
    if (!e)
        return WEFT_ENOMEM;
    e->status = 1;
    *out = e;
    return 0;
}

static void host_event_destroy(weft__devent *e) { weft__free(e); }

static int host_event_record(weft__devent *e, weft__dqueue *q)
{
    e->status = q->error ? q->error : 1;
    return 0;
}

static int host_queue_wait(weft__dqueue *q, weft__devent *e)
{
    (void)q;
    (void)e; /* everything recorded has run already */
    return 0;
}

static int host_event_query(weft__devent *e) { return e->status; }

static int host_copy(weft__dqueue *q, void *dst, const void *src, size_t n)
{
    (void)q;
    memmove(dst, src, n);
    return 0;
}

static int host_copy2d(weft__dqueue *q, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                       size_t rows)
{
    (void)q;
    for (size_t r = 0; r < rows; r++)
        memmove((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
    return 0;
}

static int host_launch(weft__dqueue *q, const weft__launch *k)
{
    uint64_t t0 = k->ran_ns ? weft__now_ns() : 0;
    int r = k->fn(k->arg);
    if (k->ran_ns)
        atomic_fetch_add_explicit(k->ran_ns, weft__now_ns() - t0, memory_order_relaxed);
    if (r != 0 && k->on_error)
        k->on_error(k->cookie, r);
    else if (r != 0 && q->error == 0)
        q->error = r;
    return 0;
}

static int host_notify(weft__dqueue *q, weft__done_fn done, void *cookie)
{
    int status = q->error;
    q->error = 0;
    done(cookie, status);
    return 0;
}

static const weft__device_ops host_ops = {
    .kind = "host",
    .start = host_start,
    .stop = host_stop,
    .mem_alloc = weft__device_host_mem_alloc,
    .mem_free = weft__device_host_mem_free,
    .queue_create = host_queue_create,
    .queue_destroy = host_queue_destroy,
    .event_create = host_event_create,
    .event_destroy = host_event_destroy,
    .event_record = host_event_record,
    .queue_wait = host_queue_wait,
    .event_query = host_event_query,
    .copy = host_copy,
    .copy2d = host_copy2d,
    .launch = host_launch,
    .notify = host_notify,
    .progress = NULL,
};

weft__device *weft__host_device_new(weft__waitset *ws)
{
    weft__device *dev = weft__alloc(sizeof *dev);
    if (!dev)
        return NULL;
    memset(dev, 0, sizeof *dev);
    dev->ops = &host_ops;
    dev->capacity = SIZE_MAX;
    dev->ws = ws;
    strcpy(dev->name, "cpu");
    strcpy(dev->arch, "cpu");
    dev->kind = WEFT_DEVICE_CPU;
    dev->ordinal = -1;
    if (dev->ops->start(dev) != 0) {
        weft__free(dev);
        return NULL;
    }
    return dev;
}
