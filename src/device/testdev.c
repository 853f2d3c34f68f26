/*
 * device/testdev.c — a device for Weft's own tests: its memory is host
 * memory with capacity accounting, and each queue is served by a thread of
 * its own that runs the queued work in order, each kernel or copy after a
 * delay.  Completions are therefore reported from a thread that is neither a
 * worker nor a waiter, which is what the tests of the pipeline need to prove
 * (dependents released, failures propagated, waits woken, nothing run twice).
 * It implements the whole interface so that the virtual GPU (devices issue)
 * can grow from it.  Reachable only through src/testing.h.
 */
#include "device/device.h"

#include <string.h>
#include <time.h>

typedef enum item_kind { IT_KERNEL, IT_COPY, IT_RECORD, IT_WAIT, IT_NOTIFY, IT_STOP } item_kind;

typedef struct item {
    item_kind kind;
    struct item *next;
    weft__kernel_fn fn;
    void *arg;
    uint64_t ns;
    void *dst;
    const void *src;
    size_t n;
    weft__devent *event;
    weft__done_fn done;
    void *cookie;
} item;

typedef struct tdev {
    uint64_t delay_ns;
    /* lock protects every queue's list and every event's status; events
     * firing broadcast fired.  Nothing nests under it. */
    pthread_mutex_t lock;
    pthread_cond_t fired;
} tdev;

struct weft__dqueue {
    weft__device *dev;
    pthread_t thread;
    pthread_cond_t more;       /* under tdev.lock */
    item *head, *tail;
    int error;                 /* first error since the last notify (queue thread only) */
};

struct weft__devent {
    weft__device *dev;
    _Atomic int status;        /* 1 fired (or never recorded), 0 pending, < 0 error */
    uint64_t seq;              /* records pending on it (under tdev.lock) */
};

static tdev *T(weft__device *dev) { return dev->impl; }

static void sleep_ns(uint64_t ns)
{
    if (!ns)
        return;
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static void *serve(void *arg)
{
    weft__dqueue *q = arg;
    tdev *td = T(q->dev);
    for (;;) {
        pthread_mutex_lock(&td->lock);
        while (!q->head)
            pthread_cond_wait(&q->more, &td->lock);
        item *it = q->head;
        q->head = it->next;
        if (!q->head)
            q->tail = NULL;
        if (it->kind == IT_WAIT)
            while (atomic_load(&it->event->status) == 0)
                pthread_cond_wait(&td->fired, &td->lock);
        pthread_mutex_unlock(&td->lock);
        switch (it->kind) {
        case IT_KERNEL: {
            sleep_ns(it->ns ? it->ns : td->delay_ns);
            int r = it->fn(it->arg);
            if (r != 0 && q->error == 0)
                q->error = r;
            break;
        }
        case IT_COPY:
            sleep_ns(td->delay_ns);
            memmove(it->dst, it->src, it->n);
            break;
        case IT_RECORD:
            pthread_mutex_lock(&td->lock);
            if (--it->event->seq == 0)
                atomic_store(&it->event->status, q->error ? q->error : 1);
            pthread_cond_broadcast(&td->fired);
            pthread_mutex_unlock(&td->lock);
            weft__wake(q->dev->ws, it->event);
            break;
        case IT_NOTIFY: {
            int status = q->error;
            q->error = 0;
            it->done(it->cookie, status);
            break;
        }
        case IT_WAIT:
            break;
        case IT_STOP:
            weft__free(it);
            return NULL;
        }
        weft__free(it);
    }
}

static int push(weft__dqueue *q, item *it)
{
    tdev *td = T(q->dev);
    it->next = NULL;
    pthread_mutex_lock(&td->lock);
    if (q->tail)
        q->tail->next = it;
    else
        q->head = it;
    q->tail = it;
    pthread_cond_signal(&q->more);
    pthread_mutex_unlock(&td->lock);
    return 0;
}

static item *new_item(item_kind k)
{
    item *it = weft__alloc(sizeof *it);
    if (it) {
        memset(it, 0, sizeof *it);
        it->kind = k;
    }
    return it;
}

static int td_queue_create(weft__device *dev, weft__dqueue **out)
{
    weft__dqueue *q = weft__alloc(sizeof *q);
    if (!q)
        return WEFT_ENOMEM;
    memset(q, 0, sizeof *q);
    q->dev = dev;
    pthread_cond_init(&q->more, NULL);
    if (pthread_create(&q->thread, NULL, serve, q) != 0) {
        pthread_cond_destroy(&q->more);
        weft__free(q);
        return WEFT_ESYSTEM;
    }
    *out = q;
    return 0;
}

static void td_queue_destroy(weft__dqueue *q)
{
    item *it = new_item(IT_STOP);
    WEFT__CHECK(it != NULL); /* cannot report: a leaked thread would be worse */
    push(q, it);
    pthread_join(q->thread, NULL);
    pthread_cond_destroy(&q->more);
    weft__free(q);
}

static int td_start(weft__device *dev) { return td_queue_create(dev, &dev->default_queue); }

static void td_stop(weft__device *dev)
{
    if (dev->default_queue)
        td_queue_destroy(dev->default_queue);
    dev->default_queue = NULL;
    tdev *td = T(dev);
    pthread_mutex_destroy(&td->lock);
    pthread_cond_destroy(&td->fired);
    weft__free(td);
    dev->impl = NULL;
}

static int td_event_create(weft__device *dev, weft__devent **out)
{
    weft__devent *e = weft__alloc(sizeof *e);
    if (!e)
        return WEFT_ENOMEM;
    e->dev = dev;
    atomic_init(&e->status, 1);
    e->seq = 0;
    *out = e;
    return 0;
}

static void td_event_destroy(weft__devent *e) { weft__free(e); }

static int td_event_record(weft__devent *e, weft__dqueue *q)
{
    item *it = new_item(IT_RECORD);
    if (!it)
        return WEFT_ENOMEM;
    it->event = e;
    tdev *td = T(q->dev);
    pthread_mutex_lock(&td->lock);
    e->seq++;
    atomic_store(&e->status, 0);
    pthread_mutex_unlock(&td->lock);
    return push(q, it);
}

static int td_queue_wait(weft__dqueue *q, weft__devent *e)
{
    item *it = new_item(IT_WAIT);
    if (!it)
        return WEFT_ENOMEM;
    it->event = e;
    return push(q, it);
}

static int td_event_query(weft__devent *e) { return atomic_load(&e->status); }

static int td_copy(weft__dqueue *q, void *dst, const void *src, size_t n)
{
    item *it = new_item(IT_COPY);
    if (!it)
        return WEFT_ENOMEM;
    it->dst = dst;
    it->src = src;
    it->n = n;
    return push(q, it);
}

static int td_launch(weft__dqueue *q, weft__kernel_fn fn, void *arg, uint64_t model_ns)
{
    item *it = new_item(IT_KERNEL);
    if (!it)
        return WEFT_ENOMEM;
    it->fn = fn;
    it->arg = arg;
    it->ns = model_ns;
    return push(q, it);
}

static int td_notify(weft__dqueue *q, weft__done_fn done, void *cookie)
{
    item *it = new_item(IT_NOTIFY);
    if (!it)
        return WEFT_ENOMEM;
    it->done = done;
    it->cookie = cookie;
    return push(q, it);
}

static const weft__device_ops test_ops = {
    .kind = "test",
    .start = td_start,
    .stop = td_stop,
    .mem_alloc = weft__device_host_mem_alloc,
    .mem_free = weft__device_host_mem_free,
    .queue_create = td_queue_create,
    .queue_destroy = td_queue_destroy,
    .event_create = td_event_create,
    .event_destroy = td_event_destroy,
    .event_record = td_event_record,
    .queue_wait = td_queue_wait,
    .event_query = td_event_query,
    .copy = td_copy,
    .launch = td_launch,
    .notify = td_notify,
    .progress = NULL,
};

weft__device *weft__test_device_new(weft__waitset *ws, uint64_t delay_ns, size_t capacity)
{
    weft__device *dev = weft__alloc(sizeof *dev);
    tdev *td = weft__alloc(sizeof *td);
    if (!dev || !td) {
        weft__free(dev);
        weft__free(td);
        return NULL;
    }
    memset(dev, 0, sizeof *dev);
    td->delay_ns = delay_ns;
    pthread_mutex_init(&td->lock, NULL);
    pthread_cond_init(&td->fired, NULL);
    dev->ops = &test_ops;
    dev->capacity = capacity ? capacity : SIZE_MAX;
    dev->ws = ws;
    dev->impl = td;
    strcpy(dev->name, "test");
    if (td_start(dev) != 0) {
        pthread_mutex_destroy(&td->lock);
        pthread_cond_destroy(&td->fired);
        weft__free(td);
        weft__free(dev);
        return NULL;
    }
    return dev;
}
