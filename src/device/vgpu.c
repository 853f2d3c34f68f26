/*
 * device/vgpu.c — virtual GPUs: simulated GPUs in host memory, so that every
 * GPU path runs (and is tested) on machines without one.
 *
 * Each virtual GPU has its own arena (a private range of address space, so
 * one device's pointers are never another's, and weft__vgpu_of tells whose a
 * pointer is), a capacity, in-order queues (streams) each served by a thread
 * of its own, events, and asynchronous copies whose duration follows a
 * latency + bandwidth model (host <-> device, device <-> device on one GPU,
 * and between two GPUs).  Work on one queue runs in order; work on
 * different queues runs at the same time (copies overlap kernels on other
 * queues); an event wait orders queues; a copy is visible once its event
 * fired.  A kernel is a host function run by its queue's thread, optionally
 * stretched to a modelled duration.
 *
 * The test device of Weft's own tests (src/testing.h) is a virtual GPU
 * whose every kernel and copy takes a fixed delay.
 *
 * In the seeded schedule (WEFT_VGPU_SCHEDULE, device/vsched.h) each queue
 * thread runs an item only when the schedule grants it the turn, one item
 * at a time across every virtual GPU, and durations are modelled, not
 * slept: the order of the devices' work is then the seed's choice.
 */
#include "device/device.h"
#include "device/vcheck.h"
#include "device/vsched.h"
#include "env.h"
#include "testing.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

/* ------------------------------------------------------------------------ */
/* Arenas and their registry                                                 */
/* ------------------------------------------------------------------------ */

#define ARENA_ALIGN 256 /* as cudaMalloc: every allocation 256-byte aligned */

typedef struct span_free {
    size_t off, size;
    struct span_free *next; /* by offset */
} span_free;

typedef struct arena {
    char *base;
    size_t size;
    pthread_mutex_t lock; /* protects the free list */
    span_free *free;
} arena;

/* Every live arena, to answer "whose memory is this?" (copies, checks).
 * registry_lock protects the table; nothing nests under it. */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    const char *base;
    size_t size;
    weft__device *dev;
} registry[WEFT__MAX_DEVICES * 4];
static size_t nregistry;

weft__device *weft__vgpu_of(const void *p)
{
    weft__device *dev = NULL;
    pthread_mutex_lock(&registry_lock);
    for (size_t i = 0; i < nregistry && !dev; i++)
        if ((const char *)p >= registry[i].base && (const char *)p < registry[i].base + registry[i].size)
            dev = registry[i].dev;
    pthread_mutex_unlock(&registry_lock);
    return dev;
}

static int arena_init(arena *a, size_t size, weft__device *dev)
{
    size_t page = 4096;
    size = (size + page - 1) / page * page;
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return WEFT_ENOMEM;
    span_free *f = weft__alloc(sizeof *f);
    if (!f) {
        munmap(m, size);
        return WEFT_ENOMEM;
    }
    f->off = 0;
    f->size = size;
    f->next = NULL;
    a->base = m;
    a->size = size;
    a->free = f;
    pthread_mutex_init(&a->lock, NULL);
    pthread_mutex_lock(&registry_lock);
    bool full = nregistry == sizeof registry / sizeof registry[0];
    if (!full) {
        registry[nregistry].base = a->base;
        registry[nregistry].size = a->size;
        registry[nregistry].dev = dev;
        nregistry++;
    }
    pthread_mutex_unlock(&registry_lock);
    if (full) {
        pthread_mutex_destroy(&a->lock);
        weft__free(f);
        munmap(m, size);
        return WEFT_ENOMEM;
    }
    return 0;
}

static void arena_fini(arena *a)
{
    pthread_mutex_lock(&registry_lock);
    for (size_t i = 0; i < nregistry; i++)
        if (registry[i].base == a->base) {
            registry[i] = registry[--nregistry];
            break;
        }
    pthread_mutex_unlock(&registry_lock);
    while (a->free) {
        span_free *n = a->free->next;
        weft__free(a->free);
        a->free = n;
    }
    pthread_mutex_destroy(&a->lock);
    munmap(a->base, a->size);
}

static size_t rounded(size_t n) { return n ? (n + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN : ARENA_ALIGN; }

/* First fit. */
static void *arena_alloc(arena *a, size_t n)
{
    n = rounded(n);
    void *p = NULL;
    pthread_mutex_lock(&a->lock);
    for (span_free **pp = &a->free; *pp; pp = &(*pp)->next) {
        span_free *f = *pp;
        if (f->size < n)
            continue;
        p = a->base + f->off;
        f->off += n;
        f->size -= n;
        if (f->size == 0) {
            *pp = f->next;
            weft__free(f);
        }
        break;
    }
    pthread_mutex_unlock(&a->lock);
    return p;
}

/* Give [p, p+n) back, merging with its neighbours.  Returns false only if a
 * new free span could not be allocated (the memory is then lost to the
 * arena, never handed out twice). */
static bool arena_free(arena *a, void *p, size_t n)
{
    n = rounded(n);
    size_t off = (size_t)((char *)p - a->base);
    bool ok = true;
    pthread_mutex_lock(&a->lock);
    span_free *prev = NULL, *next = a->free;
    while (next && next->off < off) {
        prev = next;
        next = next->next;
    }
    bool join_prev = prev && prev->off + prev->size == off;
    bool join_next = next && off + n == next->off;
    if (join_prev && join_next) {
        prev->size += n + next->size;
        prev->next = next->next;
        weft__free(next);
    } else if (join_prev) {
        prev->size += n;
    } else if (join_next) {
        next->off = off;
        next->size += n;
    } else {
        span_free *f = weft__alloc(sizeof *f);
        if (f) {
            f->off = off;
            f->size = n;
            f->next = next;
            if (prev)
                prev->next = f;
            else
                a->free = f;
        } else {
            ok = false;
        }
    }
    pthread_mutex_unlock(&a->lock);
    /* Give large blocks' pages back to the system (they read as zero later):
     * only the pages wholly inside the block — madvise rounds its length up
     * to a page, and the next block may begin on the block's last page. */
    if (n >= ((size_t)1 << 20)) {
        uintptr_t lo = ((uintptr_t)p + 4095) & ~(uintptr_t)4095, hi = ((uintptr_t)p + n) & ~(uintptr_t)4095;
        if (hi > lo)
            madvise((void *)lo, hi - lo, MADV_DONTNEED);
    }
    return ok;
}

/* ------------------------------------------------------------------------ */
/* Queues, events, work items                                                */
/* ------------------------------------------------------------------------ */

typedef enum item_kind { IT_KERNEL, IT_COPY, IT_RECORD, IT_WAIT, IT_NOTIFY, IT_STOP } item_kind;

typedef struct item {
    item_kind kind;
    struct item *next;
    weft__kernel_fn fn;
    void *arg;
    uint64_t ns;
    void *dst;
    const void *src;
    size_t n;                  /* IT_COPY: bytes (of each row) */
    size_t rows, dpitch, spitch; /* IT_COPY: rows (0: one), their pitches at dst and src */
    weft__devent *event;       /* IT_RECORD: the event recorded */
    struct vrec *rec;          /* IT_RECORD, IT_WAIT: the record done or waited for (a reference) */
    weft_range *rw;            /* IT_KERNEL: the memory it names (checking mode) */
    size_t nrw;
    weft__done_fn on_error;    /* IT_KERNEL: where its failure goes, with cookie (NULL: q->error) */
    bool (*skip)(void *cookie); /* IT_KERNEL: not run if it says so (weft__launch) */
    _Atomic uint64_t *ran_ns;  /* IT_KERNEL: where its run time goes (weft__launch), or NULL */
    weft__vclock *host;        /* checking mode: the host's clock when queued */
    weft__done_fn done;
    void *cookie;
} item;

typedef struct vgpu {
    weft__vgpu_params p;
    arena mem;
    /* lock protects nothing but the sleep of queues waiting for an event of
     * this device: events firing broadcast `fired` under it when a queue
     * waits (nwait > 0), and in checking mode each event's clock.  Queues of
     * other devices waiting for this one's events wait here too.  Nothing
     * nests under it. */
    pthread_mutex_t lock;
    pthread_cond_t fired;
    _Atomic int nwait;         /* queues asleep (or about to be) on `fired` */
} vgpu;

#define MAX_SPANS (1u << 20) /* per queue; later work is not recorded */

struct weft__dqueue {
    weft__device *dev;
    /* The inbox: items pushed by any thread, newest first (a lock-free
     * stack; the queue's thread takes it whole and reverses it, so that work
     * runs in the order it was queued). */
    _Atomic(item *) inbox;
    /* The thread's sleep: it sets `sleeping` (under mu) before its last look
     * at the inbox; a pusher that sees it set clears it and signals `more`
     * under mu.  Both sides are sequentially consistent, so a push is never
     * missed.  mu protects nothing else. */
    _Atomic bool sleeping;
    pthread_mutex_t mu;
    pthread_cond_t more;
    pthread_t thread;
    /* Items pushed and not yet finished: at 0 the queue is idle, and an
     * event record or a completion report is done at once by the caller
     * (fire_idle), without a trip through the thread.  Sequentially
     * consistent: bumped before an item is pushed, dropped once it ran. */
    _Atomic unsigned pending;
    /* First error since the last notify: written by the queue's thread,
     * read by fire_idle while the queue is idle. */
    _Atomic int error;
    /* The rest is the queue thread's own. */
    weft__span *spans;         /* trace: the work it ran (read by others once idle) */
    size_t nspans, capspans;
    int qid;                   /* checking mode: its identity, clock its finished work */
    weft__vclock *clock;
    bool scheduled;            /* the seeded schedule: sched is its place in it */
    weft__vsched_q sched;
};

/* One record of an event, as CUDA has it: a wait queued, or a query
 * made, after a record is about that record only, the event's newest when
 * it was made, whatever queue it went on and whatever records come after.
 * (Records of one event on two queues may be done in either order: a count
 * of records done, which this replaced, let a later record's completion
 * stand for an earlier one's.)  Shared by the event, the record item and
 * each wait item naming it; the last reference frees it. */
typedef struct vrec {
    _Atomic unsigned refs;
    /* Done on its queue.  Sequentially consistent, with the device's
     * nwait (see vgpu.lock); error and clock are written before it. */
    _Atomic bool done;
    _Atomic int error;         /* the queue's error when it was done, or 0 */
    weft__vclock *clock;       /* checking mode: the queue's clock when it was done */
} vrec;

struct weft__devent {
    weft__device *dev;
    /* mu protects `last`, the newest record (NULL: never recorded, which
     * counts as done, as in CUDA).  Nothing nests under it but weft__alloc. */
    pthread_mutex_t mu;
    vrec *last;
};

static vgpu *V(weft__device *dev) { return dev->impl; }

static void rec_unref(vrec *r)
{
    if (r && atomic_fetch_sub(&r->refs, 1) == 1) {
        weft__free(r->clock);
        weft__free(r);
    }
}

static void sleep_ns(uint64_t ns)
{
    if (!ns)
        return;
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* Sleep until at least `ns` have passed since t0 (a modelled duration). */
static void stretch_to(uint64_t t0, uint64_t ns)
{
    uint64_t spent = weft__now_ns() - t0;
    if (spent < ns)
        sleep_ns(ns - spent);
}

void weft__vgpu_link(weft__device *dev, uint64_t *latency_ns, double *peer_bw)
{
    *latency_ns = V(dev)->p.latency_ns;
    *peer_bw = V(dev)->p.peer_bw;
}

uint64_t weft__vgpu_copy_ns(const weft__vgpu_params *p, weft__device *dev, void *dst, const void *src, size_t n)
{
    weft__device *d = weft__vgpu_of(dst), *s = weft__vgpu_of(src);
    double bw;
    if (d == dev && s == dev)
        bw = p->local_bw;
    else if (d && s)
        bw = p->peer_bw;
    else
        bw = p->host_bw;
    if (bw <= 0)
        return p->latency_ns;
    return p->latency_ns + (uint64_t)((double)n / bw * 1e9);
}

/* Trace: note a kernel or copy that ran on q from t0 to now. */
static void span(weft__dqueue *q, uint64_t t0, bool copy, size_t bytes)
{
    if (!V(q->dev)->p.trace || q->nspans == MAX_SPANS)
        return;
    if (q->nspans == q->capspans) {
        size_t cap = q->capspans ? q->capspans * 2 : 256;
        weft__span *n = weft__alloc(cap * sizeof *n);
        if (!n)
            return;
        if (q->nspans)
            memcpy(n, q->spans, q->nspans * sizeof *n);
        weft__free(q->spans);
        q->spans = n;
        q->capspans = cap;
    }
    q->spans[q->nspans++] = (weft__span){t0, weft__now_ns(), bytes, copy};
}

static int vg_queue_busy(weft__dqueue *q) { return atomic_load(&q->pending) > 0; }

static size_t vg_spans(weft__dqueue *q, const weft__span **out)
{
    *out = q->spans;
    return q->nspans;
}

static void free_item(item *it)
{
    rec_unref(it->rec);
    weft__free(it->rw);
    weft__free(it->host);
    weft__free(it);
}

/* Checking mode: may work naming rw start on q now?  (Reports why not.) */
static bool checked(weft__dqueue *q, const char *what, const weft_range *rw, size_t n)
{
    if (!q->clock)
        return true;
    char why[320];
    if (weft__vcheck_start(q->qid, q->clock, what, rw, n, why, sizeof why) == 0)
        return true;
    weft__vcheck_report(why);
    return false;
}

/* Checking mode: may copy `it` (rows rows) start?  Each row's source is
 * read and its destination written. */
static bool copy_checked(weft__dqueue *q, const item *it, size_t rows)
{
    if (!q->clock)
        return true;
    weft_range two[2], *rw = rows == 1 ? two : weft__alloc(2 * rows * sizeof *rw);
    if (!rw)
        return false;
    for (size_t r = 0; r < rows; r++) {
        rw[2 * r] = (weft_range){(char *)it->src + r * it->spitch, it->n, WEFT_R};
        rw[2 * r + 1] = (weft_range){(char *)it->dst + r * it->dpitch, it->n, WEFT_W};
    }
    bool ok = checked(q, "a copy", rw, 2 * rows);
    if (rw != two)
        weft__free(rw);
    return ok;
}

/* Wait (on q's thread) until record r of an event of device dev is done. */
static void wait_event(weft__dqueue *q, weft__device *dev, vrec *r)
{
    vgpu *ev = V(dev);
    if (atomic_load(&r->done) && !q->clock)
        return;
    pthread_mutex_lock(&ev->lock);
    atomic_fetch_add(&ev->nwait, 1);
    while (!atomic_load(&r->done))
        pthread_cond_wait(&ev->fired, &ev->lock);
    atomic_fetch_sub(&ev->nwait, 1);
    pthread_mutex_unlock(&ev->lock);
    if (q->clock && r->clock) /* ordered after what the record was */
        weft__vclock_merge(q->clock, r->clock);
}

/* Record r of e done on q. */
static void fire(weft__dqueue *q, weft__devent *e, vrec *r)
{
    vgpu *v = V(q->dev);
    atomic_store(&r->error, atomic_load_explicit(&q->error, memory_order_relaxed));
    if (q->clock) {
        if (!r->clock)
            r->clock = weft__alloc(sizeof *r->clock); /* (none: the wait orders nothing it checks) */
        if (r->clock)
            *r->clock = *q->clock;
    }
    atomic_store(&r->done, true);
    if (atomic_load(&v->nwait) > 0) {
        pthread_mutex_lock(&v->lock);
        pthread_cond_broadcast(&v->fired);
        pthread_mutex_unlock(&v->lock);
    }
    weft__wake(q->dev->ws, e);
}

/* Copies still to fail (weft__test_vgpu_fail_copies). */
static _Atomic int fail_copies;

void weft__test_vgpu_fail_copies(int n) { atomic_store(&fail_copies, n); }

/* Run one item on q's thread; false once it was the stop item. */
static bool run_item(weft__dqueue *q, item *it)
{
    vgpu *v = V(q->dev);
    if (it->kind == IT_WAIT) {
        wait_event(q, it->event->dev, it->rec);
        /* an event that fired with its queue's error passes it on (as a
         * CUDA error is sticky): what follows on q relied on that work */
        int e = atomic_load(&it->rec->error);
        if (e != 0 && atomic_load_explicit(&q->error, memory_order_relaxed) == 0)
            atomic_store(&q->error, e);
    }
    if (q->clock && it->host)
        weft__vclock_merge(q->clock, it->host); /* what the host had seen when it queued this */
    switch (it->kind) {
    case IT_KERNEL: {
        uint64_t t0 = weft__now_ns();
        bool slept = !q->scheduled; /* (the schedule models time) */
        if (slept && v->p.fixed_timing)
            sleep_ns(it->ns ? it->ns : v->p.fixed_delay_ns);
        uint64_t digest[8]; /* of its read-only ranges (the first 8) */
        size_t ndigest = q->clock ? (it->nrw < 8 ? it->nrw : 8) : 0;
        weft__vcheck_digest(it->rw, ndigest, digest);
        int r = it->skip && it->skip(it->cookie) ? 0
                : checked(q, "a kernel", it->rw, it->nrw) ? it->fn(it->arg)
                                                          : WEFT_EDEVICE;
        char why[320];
        if (r == 0 && ndigest && weft__vcheck_read_only("a kernel", it->rw, ndigest, digest, why, sizeof why)) {
            weft__vcheck_report(why);
            r = WEFT_EDEVICE;
        }
        if (slept && !v->p.fixed_timing)
            stretch_to(t0, it->ns);
        if (it->ran_ns)
            atomic_fetch_add_explicit(it->ran_ns, weft__now_ns() - t0, memory_order_relaxed);
        if (r != 0 && it->on_error)
            it->on_error(it->cookie, r);
        else if (r != 0 && atomic_load_explicit(&q->error, memory_order_relaxed) == 0)
            atomic_store(&q->error, r);
        if (q->clock)
            q->clock->c[q->qid]++;
        span(q, t0, false, 0);
        break;
    }
    case IT_COPY: {
        uint64_t t0 = weft__now_ns();
        if (atomic_load_explicit(&fail_copies, memory_order_relaxed) > 0 &&
            atomic_fetch_sub(&fail_copies, 1) > 0) { /* injected (tests) */
            if (atomic_load_explicit(&q->error, memory_order_relaxed) == 0)
                atomic_store(&q->error, WEFT_EDEVICE);
            span(q, t0, true, it->n);
            break;
        }
        if (!q->scheduled && v->p.fixed_timing)
            sleep_ns(v->p.fixed_delay_ns);
        size_t rows = it->rows ? it->rows : 1;
        if (v->p.copy_timing_only) {
            /* (nothing moved: WEFT_VGPU_COPIES=timing) */
        } else if (copy_checked(q, it, rows)) {
            for (size_t r = 0; r < rows; r++)
                memmove((char *)it->dst + r * it->dpitch, (const char *)it->src + r * it->spitch, it->n);
        } else if (atomic_load_explicit(&q->error, memory_order_relaxed) == 0) {
            atomic_store(&q->error, WEFT_EDEVICE);
        }
        if (!q->scheduled && !v->p.fixed_timing)
            stretch_to(t0, weft__vgpu_copy_ns(&v->p, q->dev, it->dst, it->src, it->n * rows));
        if (q->clock)
            q->clock->c[q->qid]++;
        span(q, t0, true, it->n * rows);
        break;
    }
    case IT_RECORD:
        fire(q, it->event, it->rec);
        break;
    case IT_NOTIFY: {
        int status = atomic_exchange(&q->error, 0);
        if (q->clock)
            weft__vcheck_notified(q->clock);
        it->done(it->cookie, status);
        break;
    }
    case IT_WAIT:
        break;
    case IT_STOP:
        free_item(it);
        return false;
    }
    free_item(it);
    return true;
}

/* Take q's inbox, oldest first, sleeping while it is empty. */
static item *take(weft__dqueue *q)
{
    item *list;
    while (!(list = atomic_exchange(&q->inbox, NULL))) {
        pthread_mutex_lock(&q->mu);
        atomic_store(&q->sleeping, true);
        while (atomic_load(&q->sleeping) && !atomic_load(&q->inbox))
            pthread_cond_wait(&q->more, &q->mu);
        atomic_store(&q->sleeping, false);
        pthread_mutex_unlock(&q->mu);
    }
    item *fifo = NULL; /* reverse: the inbox is newest first */
    while (list) {
        item *n = list->next;
        list->next = fifo;
        fifo = list;
        list = n;
    }
    return fifo;
}

static bool record_done(void *rec) { return atomic_load(&((vrec *)rec)->done); }

/* Wait for q's turn to run `it` (the seeded schedule), offering it with its
 * modelled duration; a wait is ready once its record is done. */
static void scheduled_turn(weft__dqueue *q, const item *it)
{
    vgpu *v = V(q->dev);
    uint64_t ns = 0;
    if (it->kind == IT_KERNEL)
        ns = it->ns ? it->ns : v->p.fixed_timing ? v->p.fixed_delay_ns : 0;
    else if (it->kind == IT_COPY)
        ns = weft__vgpu_copy_ns(&v->p, q->dev, it->dst, it->src, it->n * (it->rows ? it->rows : 1));
    bool waits = it->kind == IT_WAIT;
    weft__vsched_turn(&q->sched, ns, waits ? record_done : NULL, waits ? it->rec : NULL);
}

static void *serve(void *arg)
{
    weft__dqueue *q = arg;
#ifdef SCHED_BATCH
    /* A device does not preempt the host: a queue's thread woken by a push
     * waits for a free core rather than preempting the pusher, which then
     * queues the rest of its burst (a task's kernels, event and report) and
     * moves on; the thread takes them in one go.  On a machine with few
     * cores this halves the thread switches per task.  (Best effort.) */
    struct sched_param sp = {0};
    (void)pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp);
#endif
    for (;;) {
        item *it = take(q);
        while (it) {
            item *n = it->next;
            /* In the seeded schedule an item runs on its turn, and gives the
             * turn back once it ran; a completion report gives it back
             * before its callback, the host's work, which runs beside the
             * devices (and may queue more). */
            bool turn = q->scheduled && it->kind != IT_STOP;
            if (turn)
                scheduled_turn(q, it);
            if (turn && it->kind == IT_NOTIFY)
                weft__vsched_report(&q->sched);
            if (!run_item(q, it))
                return NULL; /* the stop item is the last ever queued */
            atomic_fetch_sub(&q->pending, 1);
            if (turn)
                weft__vsched_done(&q->sched);
            it = n;
        }
    }
}

static int push(weft__dqueue *q, item *it)
{
    if (q->clock && it->kind != IT_STOP) {
        it->host = weft__alloc(sizeof *it->host);
        if (!it->host) {
            free_item(it);
            return WEFT_ENOMEM;
        }
        weft__vcheck_host_snapshot(it->host);
    }
    atomic_fetch_add(&q->pending, 1);
    item *head = atomic_load_explicit(&q->inbox, memory_order_relaxed);
    do
        it->next = head;
    while (!atomic_compare_exchange_weak(&q->inbox, &head, it));
    if (atomic_load(&q->sleeping) && atomic_exchange(&q->sleeping, false)) {
        /* The thread set `sleeping` under mu and holds it until it waits:
         * once mu was free, it waits (or has seen the flag cleared), and the
         * signal, outside mu, does not wake it into a held lock. */
        pthread_mutex_lock(&q->mu);
        pthread_mutex_unlock(&q->mu);
        pthread_cond_signal(&q->more);
    }
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

/* ------------------------------------------------------------------------ */
/* The operations                                                            */
/* ------------------------------------------------------------------------ */

static int vg_mem_alloc(weft__device *dev, size_t n, void **out)
{
    if (weft__device_charge(dev, rounded(n)) != 0)
        return WEFT_ENOMEM;
    void *p = arena_alloc(&V(dev)->mem, n);
    if (!p) { /* fragmented: the capacity is there, a contiguous block is not */
        weft__device_uncharge(dev, rounded(n));
        return WEFT_ENOMEM;
    }
    *out = p;
    return 0;
}

static void vg_mem_free(weft__device *dev, void *p, size_t n)
{
    if (!p)
        return;
    if (arena_free(&V(dev)->mem, p, n))
        weft__device_uncharge(dev, rounded(n));
}

static int vg_queue_create(weft__device *dev, weft__dqueue **out)
{
    weft__dqueue *q = weft__alloc(sizeof *q);
    if (!q)
        return WEFT_ENOMEM;
    memset(q, 0, sizeof *q);
    q->dev = dev;
    q->qid = -1;
    q->scheduled = V(dev)->p.scheduled;
    if (V(dev)->p.check && (q->qid = weft__vcheck_queue_id()) >= 0) {
        q->clock = weft__alloc(sizeof *q->clock);
        if (!q->clock) {
            weft__free(q);
            return WEFT_ENOMEM;
        }
        memset(q->clock, 0, sizeof *q->clock);
    }
    atomic_init(&q->inbox, NULL);
    atomic_init(&q->pending, 0);
    if (q->scheduled)
        weft__vsched_add(&q->sched, &q->pending);
    atomic_init(&q->error, 0);
    atomic_init(&q->sleeping, false);
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->more, NULL);
    if (pthread_create(&q->thread, NULL, serve, q) != 0) {
        if (q->scheduled)
            weft__vsched_remove(&q->sched);
        pthread_cond_destroy(&q->more);
        pthread_mutex_destroy(&q->mu);
        weft__free(q->clock);
        weft__free(q);
        return WEFT_ESYSTEM;
    }
    *out = q;
    return 0;
}

static void vg_queue_destroy(weft__dqueue *q)
{
    item *it = new_item(IT_STOP);
    WEFT__CHECK(it != NULL); /* cannot report: a leaked thread would be worse */
    if (q->scheduled)
        weft__vsched_remove(&q->sched); /* (its stop is not offered) */
    push(q, it);
    pthread_join(q->thread, NULL);
    pthread_cond_destroy(&q->more);
    pthread_mutex_destroy(&q->mu);
    weft__free(q->clock);
    weft__free(q->spans);
    weft__free(q);
}

static int vg_start(weft__device *dev) { return vg_queue_create(dev, &dev->default_queue); }

static void vg_stop(weft__device *dev)
{
    if (dev->default_queue)
        vg_queue_destroy(dev->default_queue);
    dev->default_queue = NULL;
    vgpu *v = V(dev);
    if (v->p.scheduled)
        weft__vsched_leave();
    arena_fini(&v->mem);
    pthread_mutex_destroy(&v->lock);
    pthread_cond_destroy(&v->fired);
    weft__free(v);
    dev->impl = NULL;
}

static int vg_event_create(weft__device *dev, weft__devent **out)
{
    weft__devent *e = weft__alloc(sizeof *e);
    if (!e)
        return WEFT_ENOMEM;
    e->dev = dev;
    pthread_mutex_init(&e->mu, NULL);
    e->last = NULL;
    *out = e;
    return 0;
}

static void vg_event_destroy(weft__devent *e)
{
    rec_unref(e->last);
    pthread_mutex_destroy(&e->mu);
    weft__free(e);
}

/* Whether q is idle with no error to report, so that a record or a
 * report may be done by the caller at once: everything queued before has
 * finished.  Not in checking mode, whose clocks belong to the queue's
 * thread, nor in the seeded schedule, which decides when records fire. */
static bool idle(weft__dqueue *q)
{
    return !q->clock && !q->scheduled && atomic_load(&q->pending) == 0 && atomic_load(&q->error) == 0;
}

/* e's newest record, with a reference for the caller (NULL: none). */
static vrec *last_record(weft__devent *e)
{
    pthread_mutex_lock(&e->mu);
    vrec *r = e->last;
    if (r)
        atomic_fetch_add(&r->refs, 1);
    pthread_mutex_unlock(&e->mu);
    return r;
}

/* A record of e to make, with a reference for the caller; not e's newest
 * until published.  The newest is taken back for reuse when nothing but
 * the event holds it and it is done (an event recorded again and again on
 * one queue, the usual case, allocates once): the event then has no
 * record, which counts as done, as the one taken was, until the new one is
 * published.  (Not in the checking mode: a query that saw no record would
 * not tell the host what the taken one was ordered after.)  NULL on
 * ENOMEM. */
static vrec *take_record(weft__devent *e)
{
    pthread_mutex_lock(&e->mu);
    vrec *r = e->last;
    if (r && atomic_load(&r->refs) == 1 && atomic_load(&r->done) && !r->clock) {
        e->last = NULL; /* the event's reference is the caller's now */
        pthread_mutex_unlock(&e->mu);
        atomic_store(&r->done, false);
        atomic_store(&r->error, 0);
        return r;
    }
    pthread_mutex_unlock(&e->mu);
    r = weft__alloc(sizeof *r);
    if (r) {
        atomic_init(&r->refs, 1);
        atomic_init(&r->done, false);
        atomic_init(&r->error, 0);
        r->clock = NULL;
    }
    return r;
}

/* Make r e's newest record; the caller's reference becomes the event's. */
static void publish(weft__devent *e, vrec *r)
{
    pthread_mutex_lock(&e->mu);
    vrec *old = e->last;
    e->last = r;
    pthread_mutex_unlock(&e->mu);
    rec_unref(old);
}

/* Records still to stretch (weft__test_vgpu_record_delay). */
static _Atomic uint64_t record_delay_ns;

void weft__test_vgpu_record_delay(uint64_t ns) { atomic_store(&record_delay_ns, ns); }

/* The record is published only once it is in q's inbox.  A wait that
 * another thread queues while this call runs is then about the record
 * before (done, or ahead of it in its own queue), never about one not yet
 * queued: a record published first could be queued behind a wait that
 * itself waits for work queued after the first wait, and both queues would
 * wait for each other for ever.  (The placer's events make that possible:
 * a successor's wait for an event its finished predecessor gave back to
 * the pool follows whichever task records it next, on another thread.) */
static int vg_event_record(weft__devent *e, weft__dqueue *q)
{
    bool now = idle(q);
    item *it = now ? NULL : new_item(IT_RECORD);
    if (!now && !it)
        return WEFT_ENOMEM;
    vrec *r = take_record(e);
    if (!r) {
        if (it)
            free_item(it);
        return WEFT_ENOMEM;
    }
    int rc = 0;
    if (now) {
        fire(q, e, r);
    } else {
        it->event = e;
        it->rec = r;
        atomic_fetch_add(&r->refs, 1); /* the item's, beside the caller's */
        rc = push(q, it);
    }
    if (atomic_load_explicit(&record_delay_ns, memory_order_relaxed)) /* (tests: a recorder held up here) */
        sleep_ns(atomic_exchange(&record_delay_ns, 0));
    if (rc == 0) {
        publish(e, r);
    } else {
        rec_unref(r); /* never queued: no record was made (the event keeps the one before, or none) */
    }
    return rc;
}

static int vg_queue_wait(weft__dqueue *q, weft__devent *e)
{
    vrec *r = last_record(e);
    if (!r)
        return 0; /* never recorded: nothing to wait for */
    item *it = new_item(IT_WAIT);
    if (!it) {
        rec_unref(r);
        return WEFT_ENOMEM;
    }
    it->event = e;
    it->rec = r;
    return push(q, it);
}

static int vg_event_query(weft__devent *e)
{
    vrec *r = last_record(e);
    if (!r)
        return 1;
    int s = atomic_load(&r->done) ? 1 : 0;
    if (s == 1 && atomic_load(&r->error) != 0)
        s = atomic_load(&r->error);
    if (s != 0 && r->clock)
        weft__vcheck_notified(r->clock); /* the host has seen it done: what it queues from now on is
                                            ordered after the record (checking mode) */
    rec_unref(r);
    return s;
}

static int vg_copy(weft__dqueue *q, void *dst, const void *src, size_t n)
{
    item *it = new_item(IT_COPY);
    if (!it)
        return WEFT_ENOMEM;
    it->dst = dst;
    it->src = src;
    it->n = n;
    return push(q, it);
}

static int vg_copy2d(weft__dqueue *q, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                     size_t rows)
{
    if (rows == 0 || width == 0)
        return 0;
    item *it = new_item(IT_COPY);
    if (!it)
        return WEFT_ENOMEM;
    it->dst = dst;
    it->src = src;
    it->n = width;
    it->rows = rows;
    it->dpitch = dpitch;
    it->spitch = spitch;
    return push(q, it);
}

static int vg_launch(weft__dqueue *q, const weft__launch *k)
{
    item *it = new_item(IT_KERNEL);
    if (!it)
        return WEFT_ENOMEM;
    it->fn = k->fn;
    it->arg = k->arg;
    it->ns = k->model_ns;
    it->on_error = k->on_error;
    it->cookie = k->cookie;
    it->skip = k->skip;
    it->ran_ns = k->ran_ns;
    if (q->clock && k->nrw) { /* only checking mode looks at the ranges */
        it->rw = weft__alloc(k->nrw * sizeof *k->rw);
        if (!it->rw) {
            free_item(it);
            return WEFT_ENOMEM;
        }
        memcpy(it->rw, k->rw, k->nrw * sizeof *k->rw);
        it->nrw = k->nrw;
    }
    return push(q, it);
}

static int vg_notify(weft__dqueue *q, weft__done_fn done, void *cookie)
{
    if (idle(q)) {
        done(cookie, 0);
        return 0;
    }
    item *it = new_item(IT_NOTIFY);
    if (!it)
        return WEFT_ENOMEM;
    it->done = done;
    it->cookie = cookie;
    return push(q, it);
}

static const weft__device_ops vgpu_ops = {
    .kind = "vgpu",
    .start = vg_start,
    .stop = vg_stop,
    .mem_alloc = vg_mem_alloc,
    .mem_free = vg_mem_free,
    .queue_create = vg_queue_create,
    .queue_destroy = vg_queue_destroy,
    .event_create = vg_event_create,
    .event_destroy = vg_event_destroy,
    .event_record = vg_event_record,
    .queue_wait = vg_queue_wait,
    .event_query = vg_event_query,
    .copy = vg_copy,
    .copy2d = vg_copy2d,
    .launch = vg_launch,
    .notify = vg_notify,
    .progress = NULL,
    .queue_busy = vg_queue_busy,
    .spans = vg_spans,
};

void weft__vgpu_params_default(weft__vgpu_params *p)
{
    memset(p, 0, sizeof *p);
    p->capacity = (size_t)1 << 30;
    p->latency_ns = 2000;   /* a few microseconds per copy, as a PCIe transfer */
    p->host_bw = 25e9;      /* host <-> device: PCIe 4.0 x16 */
    p->peer_bw = 50e9;      /* device <-> device: a peer link */
    p->local_bw = 1000e9;   /* within one device: its memory */
    p->check = weft__vcheck_wanted();
    p->scheduled = weft__vsched_wanted(&p->schedule_seed);
    /* The environment may model another machine (weft.h, vgpu_memory). */
    double v;
    if (weft__env_number("WEFT_VGPU_LATENCY_US", &v))
        p->latency_ns = (uint64_t)(v * 1000);
    if (weft__env_number("WEFT_VGPU_HOST_GBPS", &v))
        p->host_bw = v * 1e9;
    if (weft__env_number("WEFT_VGPU_PEER_GBPS", &v))
        p->peer_bw = v * 1e9;
    unsigned word;
    bool timing = weft__env_word("WEFT_VGPU_COPIES", &word); /* (its one word: timing) */
    p->copy_timing_only = timing && !p->check;
    static atomic_bool told;
    if (p->copy_timing_only && !atomic_exchange(&told, true))
        fprintf(stderr, "weft: WEFT_VGPU_COPIES=timing: copies to, from and between virtual GPUs take their "
                        "modelled time and move no bytes, so data on virtual GPUs is not the program's (for "
                        "scheduling studies whose kernels compute nothing, as weft-cholesky --model-only)\n");
    else if (timing && p->check && !atomic_exchange(&told, true))
        fprintf(stderr, "weft: WEFT_VGPU_COPIES=timing is ignored in the checking mode (WEFT_VGPU_CHECK): "
                        "copies move their bytes\n");
}

weft__device *weft__vgpu_new(weft__waitset *ws, const weft__vgpu_params *p, const char *name)
{
    weft__device *dev = weft__alloc(sizeof *dev);
    vgpu *v = weft__alloc(sizeof *v);
    if (!dev || !v) {
        weft__free(dev);
        weft__free(v);
        return NULL;
    }
    memset(dev, 0, sizeof *dev);
    memset(v, 0, sizeof *v);
    v->p = *p;
    if (v->p.capacity == 0)
        v->p.capacity = (size_t)1 << 30;
    /* The arena is address space (reserved, not committed) four times the
     * capacity, which is charged separately: allocations within the
     * capacity then find a free span even when freed ones left holes (the
     * data layer evicts by age, not by address). */
    size_t span = v->p.capacity <= SIZE_MAX / 4 ? v->p.capacity * 4 : v->p.capacity;
    if (arena_init(&v->mem, span, dev) != 0) {
        weft__free(v);
        weft__free(dev);
        return NULL;
    }
    pthread_mutex_init(&v->lock, NULL);
    pthread_cond_init(&v->fired, NULL);
    atomic_init(&v->nwait, 0);
    if (v->p.scheduled)
        weft__vsched_join(v->p.schedule_seed);
    dev->ops = &vgpu_ops;
    dev->capacity = v->p.capacity;
    dev->ws = ws;
    dev->impl = v;
    snprintf(dev->name, sizeof dev->name, "%s", name ? name : "vgpu");
    dev->kind = WEFT_DEVICE_VGPU;
    dev->ordinal = 0;
    snprintf(dev->arch, sizeof dev->arch, "vgpu");
    dev->link_ns = v->p.latency_ns; /* (its copy model: weft__vgpu_copy_ns) */
    dev->host_bw = v->p.host_bw;
    dev->peer_bw = v->p.peer_bw;
    if (vg_start(dev) != 0) {
        if (v->p.scheduled)
            weft__vsched_leave();
        arena_fini(&v->mem);
        pthread_mutex_destroy(&v->lock);
        pthread_cond_destroy(&v->fired);
        weft__free(v);
        weft__free(dev);
        return NULL;
    }
    return dev;
}

weft__device *weft__test_device_new(weft__waitset *ws, uint64_t delay_ns, size_t capacity)
{
    weft__vgpu_params p;
    weft__vgpu_params_default(&p);
    p.capacity = capacity ? capacity : (size_t)1 << 30;
    p.fixed_timing = true;
    p.fixed_delay_ns = delay_ns;
    return weft__vgpu_new(ws, &p, "test");
}
