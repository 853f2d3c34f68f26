/*
 * device/cuda.c — the CUDA device kind: the device interface of device.h on
 * the CUDA runtime.  The only file of Weft that includes a CUDA header; it is
 * compiled whenever the CUDA toolkit is found (the library then links the
 * static CUDA runtime, which loads the driver only when asked), and
 * device/cuda_absent.c stands in for it otherwise.  With no driver or no GPU
 * at run time the kind reports no devices.
 *
 * How each operation maps:
 *   queue         a non-blocking stream (cudaStreamNonBlocking: never ordered
 *                 with the legacy default stream of other libraries)
 *   event         an event created without timing (cudaEventDisableTiming)
 *   queue_wait    cudaStreamWaitEvent: the host never waits
 *   memory        the device's default stream-ordered pool (cudaMallocAsync
 *                 pools), kept rather than trimmed at each synchronisation,
 *                 and open to every peer that can reach it
 *   copy          cudaMemcpyAsync with unified addressing; between two GPUs
 *                 a peer copy, which the driver stages through pinned host
 *                 memory where the two have no peer access
 *   copy2d        cudaMemcpy2DAsync (a tile and its halo: rows a pitch apart)
 *   launch        a host function queued on the stream (cudaLaunchHostFunc):
 *                 the interface's "kernel"; real CUDA kernels are launched
 *                 by bodies on the task's stream themselves
 *   notify        an event recorded on the stream; the device's poller
 *                 thread (and `progress`, from spinning host waiters) finds
 *                 it fired with cudaEventQuery and reports the completion,
 *                 with the stream's error if it has one.  No worker ever
 *                 blocks in CUDA to find out.  The poller spins for 200 us
 *                 after each report, then backs off to 50 us naps, and
 *                 sleeps when nothing is pending.
 *
 * Every call that creates something on a device selects the device first
 * and gives the calling thread its previous device back.
 */
#include "device/cuda.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

/* A pending completion report. */
typedef struct pending {
    cudaEvent_t ev;
    weft__dqueue *q;
    weft__done_fn done;
    void *cookie;
    struct pending *next;
} pending;

typedef struct cuda_dev {
    int ordinal;
    cudaMemPool_t pool;
    cudaStream_t alloc_stream;  /* stream of mem_alloc/mem_free */
    /* lock protects the pending list, the pool of spare records and
     * `stopping`; `more` wakes the poller.  Nothing nests under it except
     * cudaEventQuery (non-blocking). */
    pthread_mutex_t lock;
    pthread_cond_t more;
    pending *head, *tail;
    pending *spare;             /* records (with their events) to reuse */
    bool stopping;
    bool poller_running;
    pthread_t poller;
} cuda_dev;

struct weft__dqueue {
    weft__device *dev;
    cudaStream_t s;
    _Atomic int error;          /* first failure of a host function since the last report */
};

struct weft__devent {
    weft__device *dev;
    cudaEvent_t e;
};

static cuda_dev *C(weft__device *dev) { return dev->impl; }

/* Every CUDA failure is reported as WEFT_EDEVICE with CUDA's own name for it
 * in the thread's error message. */
static int cu_fail(cudaError_t e, const char *what)
{
    return weft__error(WEFT_EDEVICE, "CUDA: %s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

/* Select dev's GPU on this thread; *prev receives the one to give back. */
static int enter(weft__device *dev, int *prev)
{
    if (cudaGetDevice(prev) != cudaSuccess)
        *prev = -1;
    cudaError_t e = *prev == C(dev)->ordinal ? cudaSuccess : cudaSetDevice(C(dev)->ordinal);
    return e == cudaSuccess ? 0 : cu_fail(e, "cudaSetDevice");
}

static void leave(weft__device *dev, int prev)
{
    if (prev >= 0 && prev != C(dev)->ordinal)
        (void)cudaSetDevice(prev);
}

/* ------------------------------------------------------------------------ */
/* Completion reports                                                        */
/* ------------------------------------------------------------------------ */

/* Report every pending completion whose event has fired; how many. */
static unsigned poll_once(weft__device *dev)
{
    cuda_dev *c = C(dev);
    pending *done = NULL, **tail = &done;
    int status_of[64];
    unsigned n = 0;
    pthread_mutex_lock(&c->lock);
    for (pending **pp = &c->head; *pp && n < 64;) {
        pending *p = *pp;
        cudaError_t e = cudaEventQuery(p->ev);
        if (e == cudaErrorNotReady) {
            pp = &p->next;
            continue;
        }
        *pp = p->next;
        if (c->tail == p)
            c->tail = NULL;
        p->next = NULL;
        *tail = p;
        tail = &p->next;
        int host_err = atomic_exchange(&p->q->error, 0);
        status_of[n++] = e != cudaSuccess ? WEFT_EDEVICE : host_err;
    }
    if (!c->head)
        c->tail = NULL;
    else if (!c->tail)
        for (c->tail = c->head; c->tail->next; c->tail = c->tail->next)
            ;
    pthread_mutex_unlock(&c->lock);

    unsigned i = 0;
    for (pending *p = done, *next; p; p = next, i++) {
        next = p->next;
        p->done(p->cookie, status_of[i]);
        pthread_mutex_lock(&c->lock);
        p->next = c->spare;
        c->spare = p;
        pthread_mutex_unlock(&c->lock);
    }
    return n;
}

static unsigned cu_progress(weft__device *dev) { return poll_once(dev); }

/* The poller: while reports are pending, it polls without pause for a while
 * after the last one came or went (a chain of GPU tasks hands over within
 * microseconds), then with a growing pause up to 50 us; with none pending it
 * sleeps until notify adds one. */
#define POLL_BUSY_NS 200000
static void *poller(void *arg)
{
    weft__device *dev = arg;
    cuda_dev *c = C(dev);
    (void)prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    (void)cudaSetDevice(c->ordinal);
    uint64_t active = weft__now_ns();
    long pause_ns = 1000;
    for (;;) {
        pthread_mutex_lock(&c->lock);
        if (!c->head && !c->stopping) {
            while (!c->head && !c->stopping)
                pthread_cond_wait(&c->more, &c->lock);
            active = weft__now_ns();
        }
        bool stop = c->stopping && !c->head;
        pthread_mutex_unlock(&c->lock);
        if (stop)
            return NULL;
        if (poll_once(dev)) {
            active = weft__now_ns();
            pause_ns = 1000;
            continue;
        }
        if (weft__now_ns() - active < POLL_BUSY_NS) {
            weft__cpu_relax();
            continue;
        }
        struct timespec ts = {0, pause_ns};
        nanosleep(&ts, NULL);
        if (pause_ns < 50000)
            pause_ns *= 2;
    }
}

static int cu_notify(weft__dqueue *q, weft__done_fn done, void *cookie)
{
    cuda_dev *c = C(q->dev);
    pthread_mutex_lock(&c->lock);
    pending *p = c->spare;
    if (p)
        c->spare = p->next;
    pthread_mutex_unlock(&c->lock);
    if (!p) {
        p = weft__alloc(sizeof *p);
        if (!p)
            return WEFT_ENOMEM;
        int prev;
        int rc = enter(q->dev, &prev);
        cudaError_t e = rc ? cudaSuccess : cudaEventCreateWithFlags(&p->ev, cudaEventDisableTiming);
        leave(q->dev, prev);
        if (rc || e != cudaSuccess) {
            weft__free(p);
            return rc ? rc : cu_fail(e, "cudaEventCreateWithFlags");
        }
    }
    cudaError_t e = cudaEventRecord(p->ev, q->s);
    if (e != cudaSuccess) {
        pthread_mutex_lock(&c->lock);
        p->next = c->spare;
        c->spare = p;
        pthread_mutex_unlock(&c->lock);
        return cu_fail(e, "cudaEventRecord");
    }
    p->q = q;
    p->done = done;
    p->cookie = cookie;
    p->next = NULL;
    pthread_mutex_lock(&c->lock);
    if (c->tail)
        c->tail->next = p;
    else
        c->head = p;
    c->tail = p;
    pthread_cond_signal(&c->more);
    pthread_mutex_unlock(&c->lock);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Memory                                                                    */
/* ------------------------------------------------------------------------ */

static int cu_mem_alloc(weft__device *dev, size_t n, void **out)
{
    cuda_dev *c = C(dev);
    if (weft__device_charge(dev, n) != 0)
        return WEFT_ENOMEM;
    void *p = NULL;
    cudaError_t e = cudaMallocFromPoolAsync(&p, n ? n : 1, c->pool, c->alloc_stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->alloc_stream); /* usable on every queue at return */
    if (e != cudaSuccess) {
        if (p)
            (void)cudaFreeAsync(p, c->alloc_stream);
        weft__device_uncharge(dev, n);
        if (e == cudaErrorMemoryAllocation) {
            (void)cudaGetLastError();
            return WEFT_ENOMEM;
        }
        return cu_fail(e, "cudaMallocFromPoolAsync");
    }
    *out = p;
    return 0;
}

static void cu_mem_free(weft__device *dev, void *p, size_t n)
{
    if (!p)
        return;
    (void)cudaFreeAsync(p, C(dev)->alloc_stream);
    weft__device_uncharge(dev, n);
}

/* ------------------------------------------------------------------------ */
/* Queues, events, work                                                      */
/* ------------------------------------------------------------------------ */

static int cu_queue_create(weft__device *dev, weft__dqueue **out)
{
    weft__dqueue *q = weft__alloc(sizeof *q);
    if (!q)
        return WEFT_ENOMEM;
    int prev;
    int rc = enter(dev, &prev);
    cudaError_t e = rc ? cudaSuccess : cudaStreamCreateWithFlags(&q->s, cudaStreamNonBlocking);
    leave(dev, prev);
    if (rc || e != cudaSuccess) {
        weft__free(q);
        return rc ? rc : cu_fail(e, "cudaStreamCreateWithFlags");
    }
    q->dev = dev;
    atomic_init(&q->error, 0);
    *out = q;
    return 0;
}

static bool reports_pending_on(weft__dqueue *q)
{
    cuda_dev *c = C(q->dev);
    bool any = false;
    pthread_mutex_lock(&c->lock);
    for (pending *p = c->head; p && !any; p = p->next)
        any = p->q == q;
    pthread_mutex_unlock(&c->lock);
    return any;
}

/* Finishes the queue's work and reports its completions before it goes. */
static void cu_queue_destroy(weft__dqueue *q)
{
    (void)cudaStreamSynchronize(q->s);
    while (reports_pending_on(q))
        poll_once(q->dev);
    (void)cudaStreamDestroy(q->s);
    weft__free(q);
}

static int cu_event_create(weft__device *dev, weft__devent **out)
{
    weft__devent *ev = weft__alloc(sizeof *ev);
    if (!ev)
        return WEFT_ENOMEM;
    int prev;
    int rc = enter(dev, &prev);
    cudaError_t e = rc ? cudaSuccess : cudaEventCreateWithFlags(&ev->e, cudaEventDisableTiming);
    leave(dev, prev);
    if (rc || e != cudaSuccess) {
        weft__free(ev);
        return rc ? rc : cu_fail(e, "cudaEventCreateWithFlags");
    }
    ev->dev = dev;
    *out = ev;
    return 0;
}

static void cu_event_destroy(weft__devent *e)
{
    (void)cudaEventDestroy(e->e);
    weft__free(e);
}

static int cu_event_record(weft__devent *e, weft__dqueue *q)
{
    cudaError_t r = cudaEventRecord(e->e, q->s);
    return r == cudaSuccess ? 0 : cu_fail(r, "cudaEventRecord");
}

static int cu_queue_wait(weft__dqueue *q, weft__devent *e)
{
    cudaError_t r = cudaStreamWaitEvent(q->s, e->e, 0);
    return r == cudaSuccess ? 0 : cu_fail(r, "cudaStreamWaitEvent");
}

static int cu_event_query(weft__devent *e)
{
    cudaError_t r = cudaEventQuery(e->e);
    if (r == cudaSuccess)
        return 1;
    if (r == cudaErrorNotReady)
        return 0;
    return WEFT_EDEVICE;
}

static int cu_event_wait(weft__devent *e)
{
    cudaError_t r = cudaEventSynchronize(e->e);
    return r == cudaSuccess ? 0 : cu_fail(r, "cudaEventSynchronize");
}

static int cu_copy(weft__dqueue *q, void *dst, const void *src, size_t n)
{
    if (n == 0)
        return 0;
    cudaError_t r = cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, q->s);
    return r == cudaSuccess ? 0 : cu_fail(r, "cudaMemcpyAsync");
}

static int cu_copy2d(weft__dqueue *q, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                     size_t rows)
{
    if (width == 0 || rows == 0)
        return 0;
    cudaError_t r = cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, cudaMemcpyDefault, q->s);
    return r == cudaSuccess ? 0 : cu_fail(r, "cudaMemcpy2DAsync");
}

typedef struct host_call {
    weft__dqueue *q;
    weft__kernel_fn fn;
    void *arg;
    weft__done_fn on_error;
    void *cookie;
} host_call;

/* A host function cannot fail a CUDA stream; its non-zero return is kept on
 * the queue and given to the next completion report, as the virtual GPU
 * does. */
static void CUDART_CB run_host_call(void *p)
{
    host_call *h = p;
    int r = h->fn(h->arg);
    int none = 0;
    if (r != 0 && h->on_error)
        h->on_error(h->cookie, r);
    else if (r != 0)
        atomic_compare_exchange_strong(&h->q->error, &none, r);
    weft__free(h);
}

static int cu_launch(weft__dqueue *q, const weft__launch *k)
{
    /* model_ns: real hardware takes the time it takes; rw: not checked */
    host_call *h = weft__alloc(sizeof *h);
    if (!h)
        return WEFT_ENOMEM;
    h->q = q;
    h->fn = k->fn;
    h->arg = k->arg;
    h->on_error = k->on_error;
    h->cookie = k->cookie;
    cudaError_t r = cudaLaunchHostFunc(q->s, run_host_call, h);
    if (r != cudaSuccess) {
        weft__free(h);
        return cu_fail(r, "cudaLaunchHostFunc");
    }
    return 0;
}

static void *cu_native_queue(weft__dqueue *q) { return (void *)q->s; }

static int cu_queue_busy(weft__dqueue *q) { return cudaStreamQuery(q->s) == cudaErrorNotReady; }

/* ------------------------------------------------------------------------ */
/* Start and stop                                                            */
/* ------------------------------------------------------------------------ */

static int cu_start(weft__device *dev)
{
    cuda_dev *c = C(dev);
    int prev;
    int rc = enter(dev, &prev);
    if (rc)
        return rc;
    cudaError_t e = cudaDeviceGetDefaultMemPool(&c->pool, c->ordinal);
    if (e == cudaSuccess) {
        uint64_t keep = UINT64_MAX; /* keep freed memory in the pool */
        e = cudaMemPoolSetAttribute(c->pool, cudaMemPoolAttrReleaseThreshold, &keep);
    }
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&c->alloc_stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        leave(dev, prev);
        return cu_fail(e, "starting the device");
    }
    /* Peer access both ways with every GPU that allows it, for kernels and
     * for the pool's memory; the rest copy through the driver's staging. */
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess)
        n = 0;
    for (int o = 0; o < n; o++) {
        int can = 0;
        if (o == c->ordinal || cudaDeviceCanAccessPeer(&can, c->ordinal, o) != cudaSuccess || !can)
            continue;
        cudaError_t pe = cudaDeviceEnablePeerAccess(o, 0);
        if (pe != cudaSuccess && pe != cudaErrorPeerAccessAlreadyEnabled) {
            (void)cudaGetLastError();
            continue;
        }
        (void)cudaGetLastError();
        struct cudaMemAccessDesc d = {.location = {.type = cudaMemLocationTypeDevice, .id = o},
                               .flags = cudaMemAccessFlagsProtReadWrite};
        if (cudaMemPoolSetAccess(c->pool, &d, 1) != cudaSuccess)
            (void)cudaGetLastError();
    }
    leave(dev, prev);
    rc = cu_queue_create(dev, &dev->default_queue);
    if (rc)
        return rc;
    if (pthread_create(&c->poller, NULL, poller, dev) != 0)
        return weft__error(WEFT_ESYSTEM, "could not start the completion poller thread");
    c->poller_running = true;
    return 0;
}

static void cu_stop(weft__device *dev)
{
    cuda_dev *c = C(dev);
    if (dev->default_queue)
        cu_queue_destroy(dev->default_queue);
    dev->default_queue = NULL;
    if (c->poller_running) {
        pthread_mutex_lock(&c->lock);
        c->stopping = true;
        pthread_cond_signal(&c->more);
        pthread_mutex_unlock(&c->lock);
        pthread_join(c->poller, NULL); /* reports what was pending first */
        c->poller_running = false;
    }
    while (c->spare) {
        pending *p = c->spare;
        c->spare = p->next;
        (void)cudaEventDestroy(p->ev);
        weft__free(p);
    }
    if (c->alloc_stream) {
        (void)cudaStreamSynchronize(c->alloc_stream);
        (void)cudaStreamDestroy(c->alloc_stream);
        c->alloc_stream = NULL;
    }
    pthread_cond_destroy(&c->more);
    pthread_mutex_destroy(&c->lock);
    weft__free(c);
    dev->impl = NULL;
}

static const weft__device_ops cuda_ops = {
    .kind = "cuda",
    .start = cu_start,
    .stop = cu_stop,
    .mem_alloc = cu_mem_alloc,
    .mem_free = cu_mem_free,
    .queue_create = cu_queue_create,
    .queue_destroy = cu_queue_destroy,
    .event_create = cu_event_create,
    .event_destroy = cu_event_destroy,
    .event_record = cu_event_record,
    .queue_wait = cu_queue_wait,
    .event_query = cu_event_query,
    .event_wait = cu_event_wait,
    .copy = cu_copy,
    .copy2d = cu_copy2d,
    .launch = cu_launch,
    .notify = cu_notify,
    .progress = cu_progress,
    .native_queue = cu_native_queue,
    .queue_busy = cu_queue_busy,
};

/* ------------------------------------------------------------------------ */
/* Entry points                                                              */
/* ------------------------------------------------------------------------ */

bool weft__cuda_compiled(void) { return true; }

int weft__cuda_count(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) { /* no driver, no device: none */
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

/* The device's links as the scheduler models them (weft__device.link_ns,
 * host_bw, peer_bw): a small and a 32 MiB copy from pinned host memory,
 * timed with events; peer copies are taken as twice the host's bandwidth
 * (NVLink-class peers; PCIe peers are slower, which only makes the model
 * favour moving data less).  Where any step fails, nominal PCIe figures
 * (10 us, 25 GB/s). */
static void measure_links(weft__device *dev, int ordinal)
{
    dev->link_ns = 10000;
    dev->host_bw = 25e9;
    dev->peer_bw = 50e9;
    size_t big = (size_t)32 << 20;
    void *h = NULL, *d = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    float small_ms = 0, big_ms = 0;
    int prev = -1;
    (void)cudaGetDevice(&prev);
    bool ok = cudaSetDevice(ordinal) == cudaSuccess && cudaMallocHost(&h, big) == cudaSuccess &&
              cudaMalloc(&d, big) == cudaSuccess && cudaEventCreate(&e0) == cudaSuccess &&
              cudaEventCreate(&e1) == cudaSuccess;
    for (int rep = 0; ok && rep < 2; rep++) { /* (the first of each warms up) */
        ok = cudaEventRecord(e0, 0) == cudaSuccess && cudaMemcpyAsync(d, h, 8, cudaMemcpyHostToDevice, 0) == cudaSuccess &&
             cudaEventRecord(e1, 0) == cudaSuccess && cudaEventSynchronize(e1) == cudaSuccess &&
             cudaEventElapsedTime(&small_ms, e0, e1) == cudaSuccess;
        ok = ok && cudaEventRecord(e0, 0) == cudaSuccess &&
             cudaMemcpyAsync(d, h, big, cudaMemcpyHostToDevice, 0) == cudaSuccess &&
             cudaEventRecord(e1, 0) == cudaSuccess && cudaEventSynchronize(e1) == cudaSuccess &&
             cudaEventElapsedTime(&big_ms, e0, e1) == cudaSuccess;
    }
    if (ok && big_ms > small_ms && small_ms > 0) {
        dev->link_ns = (uint64_t)(small_ms * 1e6);
        dev->host_bw = (double)big / ((big_ms - small_ms) * 1e-3);
        dev->peer_bw = 2 * dev->host_bw;
    }
    if (e0)
        (void)cudaEventDestroy(e0);
    if (e1)
        (void)cudaEventDestroy(e1);
    if (d)
        (void)cudaFree(d);
    if (h)
        (void)cudaFreeHost(h);
    if (prev >= 0)
        (void)cudaSetDevice(prev);
    (void)cudaGetLastError();
}

int weft__cuda_new(weft__waitset *ws, int ordinal, weft__device **out)
{
    *out = NULL;
    struct cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, ordinal);
    if (e != cudaSuccess)
        return cu_fail(e, "cudaGetDeviceProperties");
    weft__device *dev = weft__alloc(sizeof *dev);
    cuda_dev *c = weft__alloc(sizeof *c);
    if (!dev || !c) {
        weft__free(dev);
        weft__free(c);
        return weft__error(WEFT_ENOMEM, "out of memory");
    }
    memset(dev, 0, sizeof *dev);
    memset(c, 0, sizeof *c);
    c->ordinal = ordinal;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->more, NULL);
    dev->ops = &cuda_ops;
    dev->kind = WEFT_DEVICE_CUDA;
    dev->ordinal = ordinal;
    snprintf(dev->name, sizeof dev->name, "%.*s", (int)sizeof dev->name - 1, prop.name);
    dev->capacity = prop.totalGlobalMem;
    snprintf(dev->arch, sizeof dev->arch, "cuda:%.*s", (int)sizeof dev->arch - 6, prop.name);
    atomic_init(&dev->used, 0);
    dev->ws = ws;
    dev->impl = c;
    int rc = cu_start(dev);
    if (rc == 0)
        measure_links(dev, ordinal);
    if (rc != 0) {
        if (rc == WEFT_ENOMEM)
            weft__error(WEFT_ENOMEM, "out of memory");
        weft__device_delete(dev);
        return rc;
    }
    *out = dev;
    return 0;
}
