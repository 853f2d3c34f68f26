/*
 * graph/task.c — task objects: spawn, edges, the pipeline stages the graph
 * owns, completion, failure and cancellation propagation.
 *
 * Dependencies are edges owned by the successor and pushed onto the
 * predecessor's lock-free successor list; completing a task swaps that list
 * for WEFT__CLOSED and releases each successor whose pending count reaches
 * zero.  No lock is taken on the spawn -> run -> complete path except the
 * locks of the access histories a task names (spawn only) and the ready
 * queues' locks.
 */
#include "graph/graph.h"
#include "data/reduce.h"
#include "data/scratch.h"
#include "data/overlap.h"
#include "data/tile.h"
#include "device/vcheck.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

_Thread_local weft__task_stats *weft__tls_stats;

static void copy_name(char dst[32], const char *src)
{
    if (!src) {
        dst[0] = '\0';
        return;
    }
    size_t n = strnlen(src, 31);
    /* Cut on a UTF-8 character boundary: back off continuation bytes. */
    if (n == 31 && ((unsigned char)src[31] & 0xC0) == 0x80)
        while (n > 0 && ((unsigned char)src[n] & 0xC0) == 0x80)
            n--;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

weft_task_status weft__state_public(int s)
{
    switch (s) {
    case WEFT__T_SPAWNING:
    case WEFT__T_WAITING:
        return WEFT_TASK_WAITING;
    case WEFT__T_MAPPED:
    case WEFT__T_RESERVED:
    case WEFT__T_READY:
        return WEFT_TASK_READY;
    case WEFT__T_RUNNING:
        return WEFT_TASK_RUNNING;
    case WEFT__T_ENQUEUED:
        return WEFT_TASK_ENQUEUED;
    case WEFT__T_COMPLETED:
        return WEFT_TASK_COMPLETED;
    case WEFT__T_FAILED:
        return WEFT_TASK_FAILED;
    case WEFT__T_CANCELLED:
        return WEFT_TASK_CANCELLED;
    default:
        WEFT__PANIC("unknown task state");
    }
}

void weft__graph_init(weft__graph *g, weft__sched *s, weft__waitset *ws, int64_t throttle_low)
{
    /* The sleeper counts are stored, not memset: a thread that has just
     * left the previous runtime of this (type-stable) slot may still read
     * them (weft__graph_leave). */
    size_t from = offsetof(weft__graph, sleepers_all), to = offsetof(weft__graph, throttle_low);
    memset(g, 0, from);
    memset((char *)g + to, 0, sizeof *g - to);
    atomic_store(&g->sleepers_all, 0);
    atomic_store(&g->sleepers_throttle, 0);
    atomic_store(&g->sleepers_throttle_in, 0);
    atomic_store(&g->sleepers_settle, 0);
    atomic_store(&g->sleepers_any, 0);
    g->sched = s;
    g->ws = ws;
    g->throttle_low = throttle_low;
    atomic_store(&g->next_id, 1);
}

void weft__graph_leave(weft__graph *g, int64_t counts)
{
    /* Read while the counts still hold the runtime open.  Once they are
     * dropped, destroy may free it and a new runtime take its slot: only the
     * atomic sleeper counts (stored, never memset, by weft__graph_init) and
     * the waitset (initialised once per slot, never destroyed) are touched
     * after; a stale count costs a spurious wake-up at most. */
    weft__waitset *ws = g->ws;
    int64_t low = g->throttle_low;
    int64_t left = atomic_fetch_sub(&g->inflight, counts) - counts;
    if (left == 0 && atomic_load(&g->sleepers_all) > 0)
        weft__wake(ws, &weft__key_idle);
    /* One task left: wake the threads waiting for all (or for the runtime
     * to settle) now, early, so that they wake up (tens of microseconds)
     * while it runs and find it done the moment it ends (their waits
     * linger: weft__wait.linger_ns) rather than wake up only then.  (A
     * settle sleeper is otherwise woken by the worker's next idle moment.) */
    if (left == 1) {
        if (atomic_load(&g->sleepers_all) > 0)
            weft__wake(ws, &weft__key_idle);
        if (atomic_load(&g->sleepers_settle) > 0)
            weft__wake(ws, &weft__key_settle);
    }
    /* Outside producers wait for the in-flight count to reach the low mark;
     * producers inside tasks wait for the backlog (in flight minus bodies
     * executing), which this layer cannot see: they re-check at every
     * finish while they sleep. */
    if ((left <= low && atomic_load(&g->sleepers_throttle) > 0) || atomic_load(&g->sleepers_throttle_in) > 0)
        weft__wake(ws, &weft__key_throttle);
}

weft__task *weft__task_get(const weft_task *h)
{
    weft__task *t = weft__handle_decode(h);
    if (!t || t->slot.pool_id != WEFT__POOL_TASK)
        return NULL;
    if (!atomic_load_explicit(&t->handle_live, memory_order_acquire) &&
        !atomic_load_explicit(&t->space_owned, memory_order_acquire))
        return NULL;
    return t;
}

static void task_free(weft__task *t)
{
    if (atomic_load_explicit(&t->state, memory_order_relaxed) == WEFT__T_SPAWNING)
        for (uint32_t i = 0; i < t->naccess; i++) {
            weft__data_unpin(t->access[i].data); /* a spawn that failed: unpin */
            if (weft__access_part(&t->access[i]))
                weft__reduce_discard(t->access[i].part);
        }
    if (t->edges != t->edge_inline)
        weft__free(t->edges);
    if (t->access != t->access_inline)
        weft__free(t->access);
    if (t->place)
        weft__place_free(t->place);
    t->place = NULL;
    weft__free(t->fail_msg);
    t->fail_msg = NULL;
    weft__slot_free(t);
}

void weft__task_ref(weft__task *t) { atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed); }

void weft__task_unref(weft__task *t)
{
    int32_t before = atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel);
    WEFT__CHECK(before > 0);
    if (before == 1)
        task_free(t);
}

bool weft__task_doom(weft__task *t, uint64_t cause_id, const char *cause_name, uint8_t kind)
{
    int expected = WEFT__GATE_OPEN;
    if (!atomic_compare_exchange_strong(&t->run_gate, &expected, WEFT__GATE_DOOMING))
        return false;
    t->cause_id = cause_id;
    t->cause_kind = kind;
    copy_name(t->cause_name, cause_name);
    atomic_store_explicit(&t->run_gate, WEFT__GATE_DOOMED, memory_order_release);
    return true;
}

/* The cause a finished, unsuccessful task passes on to its dependents. */
/* Whether p, ended in state final, cancels the successors whose edges
 * carry failure: unless it completed, or it is an acquisition cancelled by
 * a request of its own (weft_cancel_pending while it waited), which the
 * program sees as never made. */
static bool fails_successors(const weft__task *p, int final)
{
    if (final == WEFT__T_COMPLETED)
        return false;
    return !(p->transparent && final == WEFT__T_CANCELLED && p->cause_kind == WEFT__CAUSE_REQUEST &&
             p->cause_id == p->id);
}

static void cause_of(const weft__task *p, int final, uint64_t *id, const char **name, uint8_t *kind)
{
    if (final == WEFT__T_FAILED) {
        *id = p->id;
        *name = p->name;
        *kind = WEFT__CAUSE_FAILED;
    } else {
        *id = p->cause_id;
        *name = p->cause_name;
        *kind = p->cause_kind;
    }
}

/* ------------------------------------------------------------------------ */
/* Stages between WAITING and READY                                          */
/* ------------------------------------------------------------------------ */

static void proxy_finish(weft__task *p, weft__qnode **next);

/* Count one event in the calling thread's block (single writer), or in the
 * shared block. */
static void count_here(weft__graph *g, size_t off)
{
    weft__task_stats *s = weft__tls_stats;
    if (s && s->owner == g)
        weft__count((_Atomic uint64_t *)((char *)s + off), 1);
    else
        atomic_fetch_add((_Atomic uint64_t *)((char *)&g->ext + off), 1);
}

/* The earliest-finish policy's estimate of the time (ns) to bring t's data
 * to each device: xfer[0] the host, xfer[1 + g] GPU g.  Each access that
 * reads (not a write-only one, a reduction's or a scratch buffer) costs,
 * where no valid replica of its data is, a copy from the host (or to the
 * host from a GPU that has it), else from another GPU: the link's latency
 * plus the bytes over its bandwidth (weft__device.link_ns, host_bw,
 * peer_bw). */
static void transfer_times(const weft__task *t, double *xfer)
{
    const weft__placer *p = t->g->placer;
    for (unsigned d = 0; d <= p->ngpu; d++)
        xfer[d] = 0;
    for (uint32_t i = 0; i < t->naccess; i++) {
        const weft__task_access *a = &t->access[i];
        if (!(a->mode & WEFT_R) || (a->mode & (WEFT_REDUCE | WEFT_SCRATCH | WEFT__ORDER_ONLY)))
            continue;
        uint64_t valid = weft__data_valid_mask(a->data);
        double n = (double)a->data->size;
        int some_gpu = -1; /* a GPU that has it */
        for (unsigned g = 0; g < p->ngpu && some_gpu < 0; g++)
            if (p->dev_index[g] < 64 && (valid >> p->dev_index[g] & 1))
                some_gpu = (int)g;
        if (!(valid & 1) && some_gpu >= 0) {
            const weft__device *src = p->gpu[some_gpu];
            xfer[0] += (double)src->link_ns + (src->host_bw > 0 ? n / src->host_bw * 1e9 : 0);
        }
        for (unsigned g = 0; g < p->ngpu; g++) {
            const weft__device *dev = p->gpu[g];
            if (p->dev_index[g] < 64 && (valid >> p->dev_index[g] & 1))
                continue;
            double bw = (valid & 1) || some_gpu < 0 ? dev->host_bw : dev->peer_bw;
            xfer[1 + g] += (double)dev->link_ns + (bw > 0 ? n / bw * 1e9 : 0);
        }
    }
}

/* Map a task with placements: reserve its device set now, or park it until
 * a finishing task gives resources back (false).  A task that will not run
 * (doomed) reserves nothing. */
static bool place_task(weft__task *t)
{
    if (!t->place || atomic_load_explicit(&t->run_gate, memory_order_acquire) == WEFT__GATE_DOOMED)
        return true;
    /* Near the first predecessor whose events order it: its GPU and stream
     * (and its reservation there, which the task may ride on: the
     * predecessor stays pinned until the map). */
    uint32_t n = t->early_ok ? weft__task_nedges(t) : 0;
    weft__task *near = NULL;
    for (uint32_t i = 0; i < n && !near; i++) {
        const weft__edge *e = &t->edges[i];
        if (atomic_load_explicit(&((weft__edge *)e)->claim, memory_order_acquire) != WEFT__EDGE_EARLY ||
            !weft__edge_pin_pred(e))
            continue;
        weft__place *pp = e->pred->place;
        if (pp && pp->ngpu) {
            t->place->near_gpu = pp->gpu[0];
            t->place->near_queue = pp->queue[0];
            t->place->ride_on = pp;
            near = e->pred;
        } else {
            weft__task_unref(e->pred);
        }
    }
    if (!near && t->naccess) {
        /* Near its data: the GPU holding the most of it (a hint; when that
         * GPU is full now, the policy chooses, at the price of copies). */
        size_t most = 0;
        for (uint32_t i = 0; i < t->naccess; i++) {
            if (t->access[i].mode & (WEFT_HOST | WEFT__ORDER_ONLY | WEFT_SCRATCH)) /* (scratch: no data there) */
                continue;
            int g = weft__placer_gpu_of(t->g->placer, weft__data_home(t->access[i].data));
            if (g >= 0 && t->access[i].data->size > most) {
                most = t->access[i].data->size;
                t->place->near_gpu = (int16_t)g;
                t->place->near_queue = NULL;
            }
        }
    }
    double xfer[WEFT__MAX_DEVICES];
    if (t->g->placer->policy->eft)
        transfer_times(t, xfer);
    int r = weft__place_map(t->g->placer, t->place, xfer);
    if (near)
        weft__task_unref(near);
    if (r < 0) /* nothing to wait for: the memory is held outside any task */
        weft__task_doom(t, t->id, t->name, WEFT__CAUSE_REQUEST);
    return r != 0;
}

static void task_queue(weft__task *t, weft__qnode **next);
static void claim_early(weft__edge *e, weft__qnode **next);

/* Queue the parked tasks a release mapped, or gave up on (doomed, as
 * place_task's). */
static void place_retry(weft__place *pl, weft__qnode **next)
{
    while (pl) {
        weft__place *following = pl->parked_next;
        pl->parked_next = NULL;
        weft__task *t = pl->owner;
        if (pl->chosen < 0)
            weft__task_doom(t, t->id, t->name, WEFT__CAUSE_REQUEST);
        task_queue(t, next);
        pl = following;
    }
}

/* Dependencies satisfied: map (sched), reserve (data), queue (sched).  A
 * host task with no data goes straight to the queue. */
static void task_ready(weft__task *t, weft__qnode **next)
{
    if (t->proxy) {
        proxy_finish(t, next);
        return;
    }
    count_here(t->g, offsetof(weft__task_stats, n_ready));
    if (!place_task(t))
        return; /* parked: a release maps it */
    task_queue(t, next);
}

static void task_queue(weft__task *t, weft__qnode **next)
{
    weft__graph *g = t->g;
    if (t->naccess) {
        /* Its device: the first GPU of its placement, or the host.  The data
         * are made valid there when it starts (weft__task_acquire), after
         * the waits for its predecessors' events. */
        atomic_store_explicit(&t->state, WEFT__T_MAPPED, memory_order_relaxed);
        t->device = t->place && t->place->ngpu ? weft__place_gpu(g->placer, t->place, 0)->index
                                               : weft__sched_map(g->sched);
        atomic_store_explicit(&t->state, WEFT__T_RESERVED, memory_order_relaxed);
    }
    atomic_store_explicit(&t->state, WEFT__T_READY, memory_order_relaxed);
    weft__sched_push(g->sched, &t->qn, next);
}

void weft__task_requeue(weft__task *t, weft__qnode **next)
{
    atomic_store_explicit(&t->state, WEFT__T_READY, memory_order_relaxed);
    weft__sched_push(t->g->sched, &t->qn, next);
}

/* Link edge e (successor e->succ) into p's successor list.  Returns false if
 * p has already finished, after applying its outcome to the successor. */
static bool link_edge(weft__task *p, weft__edge *e)
{
    weft__edge *head = atomic_load_explicit(&p->successors, memory_order_acquire);
    for (;;) {
        if (head == WEFT__CLOSED) {
            int final = atomic_load_explicit(&p->state, memory_order_acquire);
            if (fails_successors(p, final) && e->propagate) {
                uint64_t id;
                const char *name;
                uint8_t kind;
                cause_of(p, final, &id, &name, &kind);
                weft__task_doom(e->succ, id, name, kind);
            }
            return false;
        }
        e->next = head;
        if (atomic_compare_exchange_weak_explicit(&p->successors, &head, e, memory_order_acq_rel,
                                                  memory_order_acquire))
            return true;
    }
}

void weft__edge_add(weft__task *t, weft__edge *e, weft__task *p, bool propagate, bool late)
{
    if (t->brec && p->brec) /* (the graph as recorded: finished or not, p comes first) */
        weft__bound_pred(t->brec, p->brec);
    e->succ = t;
    e->pred = p;
    e->pred_gen = atomic_load_explicit(&p->slot.gen, memory_order_relaxed);
    e->propagate = propagate;
    e->late = late;
    atomic_store_explicit(&e->claim, WEFT__EDGE_OPEN, memory_order_relaxed);
    if (!link_edge(p, e)) {
        atomic_fetch_sub_explicit(&t->pending, 1, memory_order_relaxed);
        return;
    }
    /* A GPU-only task linked after p's body returned: its events order it
     * (p's release_early may have seen the edge as well: one claim wins). */
    if (!late && t->early_ok && p->place && atomic_load(&p->place->events_ready))
        claim_early(e, NULL);
}

bool weft__edge_pin_pred(const weft__edge *e)
{
    weft__task *p = e->pred;
    int32_t r = atomic_load(&p->refs);
    do {
        if (r <= 0)
            return false;
    } while (!atomic_compare_exchange_weak(&p->refs, &r, r + 1));
    if (atomic_load(&p->slot.gen) != e->pred_gen) {
        weft__task_unref(p); /* we pinned a newer task in the same slot */
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* Spawn                                                                     */
/* ------------------------------------------------------------------------ */

static int cmp_access(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const weft__task_access *)a)->data;
    uintptr_t y = (uintptr_t)((const weft__task_access *)b)->data;
    return x < y ? -1 : x > y;
}

#define STACK_ACCESSES 16

/* The place in its task's GPU set of an access with mode (WEFT_ON_GPU;
 * 0 without), capped at 63. */
static unsigned access_gpu(unsigned mode)
{
    unsigned k = (weft__red_task_mode(mode) & WEFT_ON_GPU_MASK) >> 20;
    return k ? (k - 1 < 63 ? k - 1 : 63) : 0;
}

/* The bytes of d's data a GPU holds while the task runs there: each handle
 * it names (not WEFT_HOST) once, and each scratch buffer (WEFT_SCRATCH, not
 * WEFT_HOST) apart, rounded up as device allocations are; for a task whose
 * accesses are on several of its GPUs (WEFT_ON_GPU), the largest of their
 * sums, reserved on each. */
static size_t data_bytes(const weft_task_desc *d)
{
    size_t most = 0;
    uint64_t gpus = 1; /* the places its accesses are on */
    for (size_t i = 0; i < d->naccesses; i++)
        gpus |= 1ull << access_gpu(d->accesses[i].mode);
    for (unsigned k = 0; k < 64; k++) {
        if (!(gpus >> k & 1))
            continue;
        size_t sum = 0;
        for (size_t i = 0; i < d->naccesses; i++) {
            const weft_access *a = &d->accesses[i];
            if ((a->mode & WEFT_HOST) || access_gpu(a->mode) != k)
                continue;
            bool seen = false, own = (a->mode & WEFT_SCRATCH) != 0; /* (a buffer of its own) */
            for (size_t j = 0; j < i && j < 64 && !seen && !own; j++) /* (beyond 64, counted again: more, never less) */
                seen = d->accesses[j].data == a->data && !(d->accesses[j].mode & (WEFT_HOST | WEFT_SCRATCH)) &&
                       access_gpu(d->accesses[j].mode) == k;
            const weft__data *dd = weft__data_get(a->data);
            if (!seen && dd)
                sum += weft__device_bytes(dd->size);
        }
        if (sum > most)
            most = sum;
    }
    return most;
}

/* Whether a task touches data on the host (WEFT_HOST; a reduction's
 * private copy or a scratch buffer there is its own): then it is never
 * released early, since nothing orders the host after its predecessors'
 * GPU work but their completion (a copy to the host would read a replica
 * a kernel in flight is still writing). */
static bool touches_host(const weft_task_desc *d)
{
    for (size_t i = 0; i < d->naccesses; i++)
        if ((d->accesses[i].mode & (WEFT_HOST | WEFT_REDUCE | WEFT_SCRATCH)) == WEFT_HOST)
            return true;
    return false;
}

/* Whether access a orders nothing: a scratch buffer (WEFT_SCRATCH) is in
 * no history, implies no family orders, and is acquired as a buffer of its
 * own, not as the data. */
static bool is_scratch(const weft__task_access *a) { return (a->mode & WEFT_SCRATCH) != 0; }

/* Scratch users: room in the histories of the data t names for scratch
 * (the first nuser accesses) before it links, so that an unregister can
 * find it; *n counts the rooms taken (given back on failure).  0, or
 * WEFT_ENOMEM (reported). */
static int reserve_scratch_users(weft__task *t, uint32_t nuser, uint32_t *n)
{
    for (uint32_t i = 0; i < nuser; i++) {
        if (!is_scratch(&t->access[i]))
            continue;
        if (!weft__history_scratch_reserve(t->access[i].data))
            return weft__error(WEFT_ENOMEM, "weft_spawn: out of memory");
        (*n)++;
    }
    return 0;
}

static void unreserve_scratch_users(weft__task *t, uint32_t n)
{
    for (uint32_t i = 0; n > 0; i++)
        if (is_scratch(&t->access[i])) {
            weft__history_scratch_unreserve(t->access[i].data);
            n--;
        }
}

static void add_scratch_users(weft__task *t, uint32_t n)
{
    for (uint32_t i = 0; n > 0; i++)
        if (is_scratch(&t->access[i])) {
            weft__history_scratch_add(t->access[i].data, t);
            n--;
        }
}

/* Append to t's accesses the order-only ones its tiles and partitioned
 * data imply (data/tile.h), counted as users like the others.  0, or an
 * error (reported). */
static int add_family_orders(weft__task *t, size_t *extra)
{
    uint32_t na = t->naccess;
    size_t n = 0;
    bool closing = false;
    for (uint32_t i = 0; i < na; i++)
        if (!is_scratch(&t->access[i]))
            n += weft__family_orders(t->access[i].data, t->access[i].mode, NULL, NULL, 0, &closing);
    if (n == 0)
        return 0;
    if (na + n > UINT16_MAX)
        return weft__error(WEFT_EINVAL, "weft_spawn: its data's tiles make %zu accesses, more than %u", na + n,
                           UINT16_MAX);
    weft__task_access *all = weft__alloc(sizeof *all * (na + n));
    weft__data **data = weft__alloc(sizeof *data * n);
    unsigned *modes = weft__alloc(sizeof *modes * n);
    if (!all || !data || !modes) {
        weft__free(all);
        weft__free(data);
        weft__free(modes);
        return weft__error(WEFT_ENOMEM, "weft_spawn: out of memory");
    }
    memcpy(all, t->access, sizeof *all * na);
    if (t->access != t->access_inline)
        weft__free(t->access);
    else
        *extra += sizeof *all * na;
    t->access = all;
    *extra += sizeof *all * n;
    int rc = 0;
    size_t k = 0;
    for (uint32_t i = 0; i < na && rc == 0; i++) {
        if (is_scratch(&t->access[i]))
            continue;
        size_t m = weft__family_orders(t->access[i].data, t->access[i].mode, data, modes, n - k, &closing);
        if (closing)
            rc = weft__error(WEFT_EINVAL, "weft_spawn: data of access %u is being unregistered", i);
        else if (m > n - k) /* partitioned since the count */
            rc = weft__error(WEFT_EBUSY, "weft_spawn: data it names was partitioned into tiles meanwhile");
        for (size_t j = 0; j < m && rc == 0; j++, k++) {
            weft__task_access *a = &t->access[t->naccess];
            a->data = data[j];
            a->mode = modes[j] | WEFT__ORDER_ONLY | (t->access[i].data->tile ? 0 : WEFT__VIA_PARENT);
            weft__data_hold_clear(&a->hold);
            a->part = NULL; /* (and scratch: one field) */
            weft__wrec_clear(&a->rec);
            t->naccess++;
        }
    }
    weft__free(data);
    weft__free(modes);
    return rc;
}

/* What overlapping ranges refuse (data/overlap.h): access i of t names d,
 * whose memory other registered ranges overlap; the index lock held (the
 * first neighbour named).  0, or WEFT_EINVAL (reported). */
static int overlap_refused(const weft__task *t, uint32_t i, bool gpu)
{
    const weft__data *dd = t->access[i].data;
    unsigned mode = t->access[i].mode;
    bool reduce = (mode & WEFT_REDUCE) != 0;
    if (!reduce && (!gpu || (mode & WEFT_HOST)))
        return 0;
    uint32_t id = 0;
    uintptr_t lo = 0, hi = 0;
    (void)weft__ranges_first(dd, &id, &lo, &hi);
    if (reduce)
        return weft__error(WEFT_EINVAL, "weft_spawn: access %u reduces into data d%u over [%p, %p) (%zu bytes), "
                           "which overlaps d%u over [%#jx, %#jx) (%ju bytes): a reduction needs memory "
                           "registered as one range; reduce into one handle whose memory no other "
                           "registered range overlaps (unregister the overlapping one first)", i, dd->id,
                           dd->ptr, (void *)((char *)dd->ptr + dd->size), dd->size, id, (uintmax_t)lo,
                           (uintmax_t)hi, (uintmax_t)(hi - lo));
    return weft__error(WEFT_EINVAL, "weft_spawn: access %u names data d%u over [%p, %p) (%zu bytes) on a device, "
                       "but it overlaps d%u over [%#jx, %#jx) (%ju bytes): data whose memory other registered "
                       "ranges overlap is host-only; add WEFT_HOST to the access, or register the memory as "
                       "one range and name only that handle", i, dd->id, dd->ptr,
                       (void *)((char *)dd->ptr + dd->size), dd->size, id, (uintmax_t)lo, (uintmax_t)hi,
                       (uintmax_t)(hi - lo));
}

/* The handles over memory that overlaps t's own data (its first nuser
 * accesses), pinned, into *nb (allocated), with the access of t each is
 * for in *of; refuses what such data cannot do (overlap_refused).
 * Returns how many (*n), 0 or an error (reported). */
static int overlap_neighbours(weft__task *t, const weft_task_desc *d, uint32_t nuser, weft__data ***nb,
                              uint32_t **of, size_t *n)
{
    bool gpu = false; /* an alternative with GPUs: accesses without WEFT_HOST are on a device */
    for (size_t k = 0; k < d->nplacements; k++)
        gpu |= d->placements[k].gpus > 0;
    weft__ranges *x = NULL;
    for (uint32_t i = 0; i < nuser && !x; i++)
        if (!is_scratch(&t->access[i]))
            x = weft__data_ranges(t->access[i].data);
    size_t cap = 0, got = 0;
    for (int rc = 0;; cap = got) {
        if (cap && (!(*nb = weft__alloc(sizeof **nb * cap)) || !(*of = weft__alloc(sizeof **of * cap))))
            return weft__error(WEFT_ENOMEM, "weft_spawn: out of memory");
        weft__ranges_lock(x);
        got = 0;
        for (uint32_t i = 0; i < nuser && rc == 0; i++)
            if (!is_scratch(&t->access[i]) && weft__ranges_count(t->access[i].data)) {
                rc = overlap_refused(t, i, gpu);
                got += weft__ranges_count(t->access[i].data);
            }
        bool fits = rc == 0 && got <= cap;
        for (uint32_t i = 0, k = 0; i < nuser && fits; i++) {
            if (is_scratch(&t->access[i]))
                continue;
            size_t m = weft__ranges_pin_neighbours(t->access[i].data, *nb + k, cap - k);
            for (size_t j = 0; j < m; j++)
                (*of)[k++] = i;
        }
        weft__ranges_unlock(x);
        if (rc != 0 || fits) {
            *n = rc == 0 ? got : 0;
            return rc;
        }
        weft__free(*nb);
        weft__free(*of);
        *nb = NULL;
        *of = NULL;
    }
}

/* Append to t's accesses an order-only, partial access (WEFT__OVERLAP) of
 * every handle over memory that overlaps the memory of a handle among its
 * first nuser (data/overlap.h), with the R and W bits of that access,
 * counted as users like the others.  0, or an error (reported). */
static int add_overlap_orders(weft__task *t, const weft_task_desc *d, uint32_t nuser, size_t *extra)
{
    weft__data **nb = NULL;
    uint32_t *of = NULL;
    size_t n = 0;
    int rc = overlap_neighbours(t, d, nuser, &nb, &of, &n);
    uint32_t na = t->naccess;
    weft__task_access *all = NULL;
    if (rc == 0 && na + n > UINT16_MAX)
        rc = weft__error(WEFT_EINVAL, "weft_spawn: its data and the registered ranges that overlap it make %zu "
                         "accesses, more than %u", na + n, UINT16_MAX);
    else if (rc == 0 && n && !(all = weft__alloc(sizeof *all * (na + n))))
        rc = weft__error(WEFT_ENOMEM, "weft_spawn: out of memory");
    if (rc != 0 || !n) {
        for (size_t j = 0; j < n; j++)
            weft__data_unpin(nb[j]);
        weft__free(nb);
        weft__free(of);
        return rc;
    }
    memcpy(all, t->access, sizeof *all * na);
    if (t->access != t->access_inline)
        weft__free(t->access);
    else
        *extra += sizeof *all * na;
    t->access = all;
    *extra += sizeof *all * n;
    for (size_t j = 0; j < n; j++) {
        weft__task_access *a = &t->access[t->naccess++];
        unsigned rw = t->access[of[j]].mode & WEFT_RW;
        a->data = nb[j];
        a->mode = (rw ? rw : WEFT_RW) | WEFT__ORDER_ONLY | WEFT__OVERLAP;
        weft__data_hold_clear(&a->hold);
        a->part = NULL; /* (and scratch: one field) */
        weft__wrec_clear(&a->rec);
    }
    weft__free(nb);
    weft__free(of);
    return 0;
}

void weft__task_label(const weft__task *p, char *buf, size_t len)
{
    if (p->name[0])
        snprintf(buf, len, "task '%.31s' (id %llu)", p->name, (unsigned long long)p->id);
    else
        snprintf(buf, len, "task id %llu", (unsigned long long)p->id);
}

/* Of t's first nuser accesses, how many name a handle of a family (its
 * histories locked, a partition cannot change it: weft_data_partition
 * publishes under the parent's). */
static uint32_t count_families(const weft__task *t, uint32_t nuser)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < nuser; i++)
        n += !is_scratch(&t->access[i]) && atomic_load_explicit(&t->access[i].data->fam, memory_order_acquire) != NULL;
    return n;
}

/* The user reduction of a reducing access's mode in runtime rt_handle
 * (the spawn checked it is there), or NULL for a built-in operator. */
static const weft__reduction *reduce_user(const void *rt_handle, unsigned mode)
{
    return weft__red_is_user(mode) ? weft__reduction_find(rt_handle, weft__red_user_id(mode)) : NULL;
}

/* An access's mode as the layers below see it: an unordered access is a
 * member of a commute group (graph/access.c: it joins, and excludes, as
 * WEFT_COMMUTE does; its R/W bits say what it does with the value), and a
 * user reduction's number is in its record, not in the mode. */
static unsigned task_mode(unsigned mode)
{
    if (mode & WEFT_UNORDERED)
        mode = (mode & ~(unsigned)WEFT_UNORDERED) | WEFT_COMMUTE;
    return weft__red_task_mode(mode);
}

/* Spawn, step 1: a task object for d with its placement and room for its
 * accesses (*extra: the bytes allocated out of line).  0 or an error
 * (reported). */
/* The bytes of the data d's accesses name (the size its models go by). */
static uint64_t access_bytes(const weft_task_desc *d)
{
    uint64_t n = 0;
    for (size_t i = 0; i < d->naccesses; i++) {
        const weft__data *dd = weft__data_get(d->accesses[i].data);
        if (dd)
            n += dd->size;
    }
    return n;
}

/* The kind of task d spawns, as its performance models name it: d->kind,
 * else its body's name (the first placement alternative's own body, else
 * d->body): the symbol's name when the function is exported, else its
 * object file's name and offset there (the same in every run of the same
 * build). */
static const char *task_kind(const weft_task_desc *d, char *buf, size_t len)
{
    if (d->kind) /* (checked: a name the models keep whole) */
        return d->kind;
    weft_body_fn body = d->nplacements && d->placements[0].body ? d->placements[0].body : d->body;
    Dl_info info;
    void *fn;
    memcpy(&fn, &body, sizeof fn < sizeof body ? sizeof fn : sizeof body);
    if (fn && dladdr(fn, &info) && info.dli_fname) {
        const char *base = strrchr(info.dli_fname, '/');
        base = base ? base + 1 : info.dli_fname;
        if (info.dli_sname && info.dli_saddr == fn)
            weft__kind_fold(buf, len, info.dli_sname);
        else
            snprintf(buf, len, "%s+0x%llx", base,
                     (unsigned long long)((uintptr_t)fn - (uintptr_t)info.dli_fbase));
        return buf;
    }
    snprintf(buf, len, "body@%p", fn);
    return buf;
}

static int spawn_new(weft__graph *g, const weft_task_desc *d, bool continuation, size_t *extra, weft__task **out)
{
    weft__task *t = weft__slot_alloc(WEFT__POOL_TASK, sizeof(weft__task));
    if (!t)
        return weft__error(WEFT_ENOMEM, "weft_spawn: out of memory");
    atomic_init(&t->state, WEFT__T_SPAWNING);
    t->g = g;
    t->access = t->access_inline;
    t->edges = t->edge_inline;
    if (d->nplacements) {
        int prc = weft__place_new(g->placer, d->placements, d->nplacements, data_bytes(d), t, "weft_spawn",
                                  &t->place);
        if (prc) {
            task_free(t);
            return prc;
        }
        if (g->placer->policy->eft) {
            char kind[WEFT__PM_NAME];
            weft__place_kind(g->placer, t->place, task_kind(d, kind, sizeof kind), d->priority, access_bytes(d),
                             d->cost);
        } else if (d->kind || d->cost > 0) {
            weft__place_hints_unused(g->placer);
        }
        /* (Never a continuation: it runs once its dependencies have
         * finished, for its body to ask how they ended: weft_ctx_continue.) */
        t->early_ok = t->place->gpu_only && !touches_host(d) && !continuation;
        if (t->early_ok) {
            /* It may be released before its GPU predecessors finish (their
             * events order its streams), holding one op for each: its
             * completion waits for theirs.  ops starts as the body's guard. */
            t->has_ops = true;
            atomic_store_explicit(&t->ops, 1, memory_order_relaxed);
        }
    }
    if (d->naccesses > WEFT__INLINE_ACCESSES) {
        t->access = weft__alloc(sizeof(weft__task_access) * d->naccesses);
        if (!t->access) {
            t->access = t->access_inline;
            task_free(t);
            return weft__error(WEFT_ENOMEM, "weft_spawn: out of memory");
        }
        *extra += sizeof(weft__task_access) * d->naccesses;
    }
    *out = t;
    return 0;
}

/* Spawn, step 2: t's own accesses, each handle pinned (counted as a user)
 * so that an unregister racing with this spawn waits for the task instead
 * of freeing the handle under it.  *nfam: how many name a handle of a
 * family (tiles), *nov: how many a handle over memory other registered
 * ranges overlap.  0 or an error (reported; t is the caller's to free). */
static int spawn_pin(weft__task *t, const void *rt_handle, const weft_task_desc *d, uint32_t *nfam,
                     uint32_t *nov)
{
    for (uint32_t i = 0; i < (uint32_t)d->naccesses; i++) {
        weft__data *dd = weft__data_pin(d->accesses[i].data);
        if (!dd)
            return weft__error(WEFT_EINVAL, "weft_spawn: data of access %u is being unregistered", i);
        t->access[i].data = dd;
        t->access[i].mode = task_mode(d->accesses[i].mode);
        weft__data_hold_clear(&t->access[i].hold);
        t->access[i].part = NULL; /* (and scratch: one field) */
        weft__wrec_clear(&t->access[i].rec);
        t->naccess = (uint16_t)(i + 1);
        /* A reduction's record, enlisted at the link: the order of the
         * private copies is the spawn order (data/reduce.h). */
        if ((d->accesses[i].mode & WEFT_REDUCE) && !(t->access[i].part = weft__reduce_new(d->accesses[i].mode,
                                                                     reduce_user(rt_handle, d->accesses[i].mode))))
            return weft__error(WEFT_ENOMEM, "weft_spawn: out of memory");
        if (t->access[i].mode & WEFT_COMMUTE)
            t->has_commute = true;
        if (is_scratch(&t->access[i]))
            continue;
        *nfam += atomic_load_explicit(&dd->fam, memory_order_acquire) != NULL;
        *nov += atomic_load_explicit(&dd->noverlap, memory_order_acquire) != 0;
    }
    return 0;
}

/* Spawn, step 3: no explicit dependency of a task space's spawn may
 * already wait for the key being spawned.  0 or WEFT_EDEADLK (reported). */
static int spawn_check_deps(const weft_task_desc *d, const weft__spawn_extra *x)
{
    if (!x || !x->forbidden)
        return 0;
    for (size_t i = 0; i < d->ndeps; i++) {
        const weft__task *p = weft__task_get(d->deps[i]);
        if (x->forbidden(x->arg, p)) {
            char who[80];
            weft__task_label(p, who, sizeof who);
            return weft__error(WEFT_EDEADLK, "%s: its dependency %zu (%s) already waits, directly or "
                               "not, for the key being spawned", x->forbidden_what, i, who);
        }
    }
    return 0;
}

/* Spawn, step 4: t's data in address order, unique (modes merged), into
 * sorted (room for t->naccess): the order in which the histories are
 * locked, so concurrent spawns cannot deadlock.  Scratch accesses are left
 * out: they order nothing.  Returns how many. */
static uint32_t spawn_sort(const weft__task *t, weft__task_access *sorted)
{
    uint32_t nordered = 0;
    for (uint32_t i = 0; i < t->naccess; i++)
        if (!is_scratch(&t->access[i]))
            sorted[nordered++] = t->access[i];
    /* Where and whether it is used changes nothing in the order; through
     * which view of a tile (its own, its parent's) it is accessed does
     * (weft__access_link), and whether it is partial (WEFT__OVERLAP). */
    for (uint32_t i = 0; i < nordered; i++)
        sorted[i].mode &= ~(unsigned)(WEFT_HOST | WEFT__ORDER_ONLY | WEFT_ON_GPU_MASK);
    if (nordered > 1)
        qsort(sorted, nordered, sizeof *sorted, cmp_access);
    uint32_t nu = 0;
    for (uint32_t i = 0; i < nordered; i++) {
        if (nu && sorted[nu - 1].data == sorted[i].data) {
            unsigned a = sorted[nu - 1].mode, b = sorted[i].mode;
            unsigned commute = a & b & WEFT_COMMUTE; /* in the group only if every access is */
            sorted[nu - 1].mode = ((a | b) & WEFT_RW) | commute | (a & b & (WEFT__VIA_PARENT | WEFT__OVERLAP));
        } else {
            sorted[nu++] = sorted[i];
        }
    }
    return nu;
}

/* Spawn, step 5 (the histories of sorted[0 .. nu-1] locked): plan the
 * inferred edges, check a task space's cycle, and allocate the edges —
 * the last step that can fail.  0, or an error (reported). */
static int spawn_plan(weft__task *t, const weft_task_desc *d, const weft__spawn_extra *x,
                      weft__task_access *sorted, uint32_t nu, uint32_t nuser, uint32_t nfam, size_t *extra)
{
    uint32_t ninferred = 0;
    int rc = count_families(t, nuser) != nfam ? WEFT_EBUSY : weft__access_plan(sorted, nu, &ninferred);
    if (rc == WEFT_EBUSY)
        return weft__error(rc, "weft_spawn: data it names was partitioned into tiles meanwhile");
    if (rc == 0 && x && x->forbidden) {
        const weft__task *p = NULL;
        uint32_t hi = 0;
        bool writer = false;
        if (!weft__access_check(sorted, nu, x->forbidden, x->arg, &p, &hi, &writer)) {
            /* Named while the histories are locked (p is alive): which of
             * the spawn's own accesses, and which task it would follow. */
            uint32_t j = 0;
            while (j + 1 < nuser && (t->access[j].data != sorted[hi].data || is_scratch(&t->access[j])))
                j++;
            char who[80];
            weft__task_label(p, who, sizeof who);
            return weft__error(WEFT_EDEADLK, "%s: its data access %u follows %s, a %s of that data, which "
                               "already waits, directly or not, for the key being spawned", x->forbidden_what, j,
                               who, writer ? "writer" : "reader");
        }
    }
    uint32_t nedges = (uint32_t)d->ndeps + ninferred;
    if (rc == 0 && nedges > WEFT__INLINE_EDGES) {
        t->edges = weft__alloc(sizeof(weft__edge) * nedges);
        if (!t->edges) {
            t->edges = t->edge_inline;
            rc = WEFT_ENOMEM;
        }
        *extra += sizeof(weft__edge) * nedges;
    }
    if (rc != 0)
        return weft__error(rc, "weft_spawn: out of memory");
    atomic_store_explicit(&t->nedges, nedges, memory_order_relaxed);
    return 0;
}

/* Spawn, step 6 (nothing can fail any more): t's fields from d and x. */
static void spawn_fill(weft__graph *g, weft__task *t, const void *rt_handle, const weft_task_desc *d,
                       const weft__spawn_extra *x, bool want_handle, uint32_t nu, size_t extra)
{
    bool space_owned = x && x->space_owned;
    t->g = g;
    t->rt_handle = rt_handle;
    t->body = d->body;
    t->arg = d->arg;
    t->arg_destroy = d->arg_destroy;
    t->on_finish = d->on_finish;
    t->finish_arg = d->finish_arg ? d->finish_arg : d->arg;
    copy_name(t->name, d->name);
    t->epoch = atomic_load_explicit(&g->cancel_epoch, memory_order_acquire);
    atomic_init(&t->successors, NULL);
    atomic_init(&t->state, WEFT__T_WAITING);
    atomic_init(&t->run_gate, WEFT__GATE_OPEN);
    atomic_init(&t->pending, (int32_t)weft__task_nedges(t) + 1);
    /* A store, not an init: a late pinner of the slot's previous task may read it. */
    atomic_store_explicit(&t->refs, 1 + (want_handle ? 1 : 0) + (space_owned ? 1 : 0) + (int32_t)nu,
                          memory_order_relaxed);
    atomic_init(&t->handle_live, want_handle);
    atomic_init(&t->space_owned, space_owned);
    t->transparent = x && x->transparent;
    t->continued = false;
    t->place_returned = false;
    t->cont_of = NULL;
    atomic_store_explicit(&t->cont, NULL, memory_order_relaxed);
    atomic_store_explicit(&t->cont_final, 0, memory_order_relaxed);
    t->cont_result = 0;
    t->fail_why = WEFT__FAIL_BODY;
    t->id = atomic_fetch_add_explicit(&g->next_id, 1, memory_order_relaxed);
    t->qn.priority = d->priority;
    t->qn.seq = t->id;
    if (extra)
        atomic_fetch_add_explicit(&g->extra_bytes, extra, memory_order_relaxed);
    if (t->brec)
        weft__bound_id(t->brec, t->id);
}

/* Spawn, step 7 (the histories locked): t's edges, its continuation and
 * reduction records in place. */
static void spawn_link(weft__task *t, const weft_task_desc *d, const weft__spawn_extra *x,
                       const weft__task_access *sorted, uint32_t nu, uint32_t nuser)
{
    /* A continuation's explicit dependencies are what its task awaits:
     * their failure is for its body to see, not a cancellation. */
    bool carry = !(x && x->cont_of);
    if (x && x->cont_of)
        t->cont_of = x->cont_of;
    for (size_t i = 0; i < d->ndeps; i++)
        weft__edge_add(t, &t->edges[i], weft__task_get(d->deps[i]), carry, false);
    weft__access_link(t, sorted, nu, t->edges + d->ndeps);
    if (x && x->cont_of) {
        /* Its root's newest continuation, once its edges are written: a
         * walk of the root's predecessors (weft__task_cont_pin) reads them. */
        atomic_store(&x->cont_of->cont_gen, atomic_load_explicit(&t->slot.gen, memory_order_relaxed));
        atomic_store(&x->cont_of->cont, t);
    }
    for (uint32_t i = 0; i < nuser; i++)
        if (weft__access_part(&t->access[i]))
            weft__reduce_enlist(t->access[i].data, t->access[i].part, t->id);
}

/* Spawn, step 8: a placeholder the new task fulfils follows it (and so do
 * its dependents).  A placeholder cancelled by request before its key was
 * spawned passes the request on: the new task never runs. */
static void spawn_fulfil(weft__task *t, weft__task *p)
{
    if (atomic_load_explicit(&p->run_gate, memory_order_acquire) == WEFT__GATE_DOOMED &&
        p->cause_kind == WEFT__CAUSE_REQUEST)
        weft__task_doom(t, t->id, t->name, WEFT__CAUSE_REQUEST);
    atomic_fetch_add(&p->pending, 1);
    weft__edge_add(p, &p->edge_inline[0], t, true, false);
    atomic_store_explicit(&p->nedges, 1, memory_order_release); /* walkers may read it now */
    if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1)
        task_ready(p, NULL);
}

int weft__task_spawn(weft__graph *g, const void *rt_handle, const weft_task_desc *d,
                     const weft__spawn_extra *x, bool want_handle, weft__task **out)
{
    size_t extra = 0;
    weft__task *t = NULL;
    int rc = spawn_new(g, d, x && x->cont_of, &extra, &t);
    if (rc)
        return rc;
    uint32_t nuser = (uint32_t)d->naccesses, nfam = 0, nov = 0;
    rc = spawn_pin(t, rt_handle, d, &nfam, &nov);
    /* Tiles and partitioned data, overlapping ranges: the handles it is
     * also ordered with. */
    if (rc == 0 && nfam)
        rc = add_family_orders(t, &extra);
    if (rc == 0 && nov)
        rc = add_overlap_orders(t, d, nuser, &extra);
    if (rc == 0)
        rc = spawn_check_deps(d, x);
    uint32_t nscratch = 0; /* scratch users' room reserved so far */
    if (rc == 0)
        rc = reserve_scratch_users(t, nuser, &nscratch);
    weft__task_access stack_sorted[STACK_ACCESSES];
    weft__task_access *sorted = stack_sorted;
    if (rc == 0 && t->naccess > STACK_ACCESSES &&
        !(sorted = weft__alloc(sizeof(weft__task_access) * t->naccess))) {
        sorted = stack_sorted;
        rc = weft__error(WEFT_ENOMEM, "weft_spawn: out of memory");
    }
    if (rc != 0) {
        unreserve_scratch_users(t, nscratch);
        task_free(t);
        return rc;
    }
    /* Recording the graph (weft_config.bound): its kind and size now, its
     * record once nothing can fail (before it links: its edges go in). */
    char kind[WEFT__PM_NAME];
    const char *rkind = g->blog ? task_kind(d, kind, sizeof kind) : NULL;
    uint64_t rsize = g->blog ? access_bytes(d) : 0;
    uint32_t nu = spawn_sort(t, sorted);
    weft__access_lock_all(sorted, nu);
    rc = spawn_plan(t, d, x, sorted, nu, nuser, nfam, &extra);
    if (rc == 0 && g->blog)
        t->brec = weft__bound_task(g->blog, rkind, rsize, t->place, weft__task_nedges(t));
    if (rc == 0) {
        spawn_fill(g, t, rt_handle, d, x, want_handle, nu, extra);
        spawn_link(t, d, x, sorted, nu, nuser);
    }
    weft__access_unlock_all(sorted, nu);
    if (sorted != stack_sorted)
        weft__free(sorted);
    if (rc != 0) {
        unreserve_scratch_users(t, nscratch);
        task_free(t);
        return rc;
    }
    add_scratch_users(t, nscratch); /* (before the guard drops: t cannot have finished) */
    if (x && x->fulfil)
        spawn_fulfil(t, x->fulfil);
    *out = t;
    /* Drop the spawn guard; if every dependency is already done, it is ready. */
    if (atomic_fetch_sub_explicit(&t->pending, 1, memory_order_acq_rel) == 1)
        task_ready(t, NULL);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Task-space placeholders                                                   */
/* ------------------------------------------------------------------------ */

weft__task *weft__task_proxy_new(weft__graph *g, const void *rt_handle, const char *name)
{
    weft__task *p = weft__slot_alloc(WEFT__POOL_TASK, sizeof(weft__task));
    if (!p)
        return NULL;
    p->proxy = true;
    p->g = g;
    p->rt_handle = rt_handle;
    p->edges = p->edge_inline;
    p->access = p->access_inline;
    copy_name(p->name, name);
    if (g->blog) /* (NULL when out of memory: counted lost) */
        p->brec = weft__bound_proxy(g->blog);
    atomic_init(&p->successors, NULL);
    atomic_init(&p->state, WEFT__T_WAITING);
    atomic_init(&p->run_gate, WEFT__GATE_OPEN);
    atomic_init(&p->pending, 1);    /* the guard: dropped by fulfil or abandon */
    atomic_store_explicit(&p->refs, 2, memory_order_relaxed); /* execution + the space's handle */
    atomic_init(&p->space_owned, true);
    return p;
}

void weft__task_proxy_abandon(weft__task *p, const char *cause)
{
    weft__task_doom(p, 0, cause, WEFT__CAUSE_UNSPAWNED);
    if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1)
        task_ready(p, NULL);
}

static void proxy_finish(weft__task *p, weft__qnode **next)
{
    int gate = WEFT__GATE_OPEN;
    bool ok = atomic_compare_exchange_strong(&p->run_gate, &gate, WEFT__GATE_STARTED);
    if (!ok)
        while (atomic_load_explicit(&p->run_gate, memory_order_acquire) == WEFT__GATE_DOOMING)
            weft__cpu_relax();
    weft__task_complete(p, ok ? WEFT__T_COMPLETED : WEFT__T_CANCELLED, next);
}

/* ------------------------------------------------------------------------ */
/* Running and completion                                                    */
/* ------------------------------------------------------------------------ */

/* A copy weft__task_start waited for has landed: the task may start.
 * (From a device's thread.)  The count the call holds keeps the runtime
 * open until it has returned: the task may run and finish, and a destroy
 * begin, before the push below has woken a worker. */
static void prefetch_landed(void *cookie, int status)
{
    (void)status; /* (its acquire meets a failure) */
    weft__task *t = cookie;
    weft__graph *g = t->g;
    weft__task_requeue(t, NULL);
    weft__graph_leave(g, 1);
}

/* Does t (mapped) read a on the host, where a's data may be on a device? */
static bool host_read(const weft__task *t, const weft__task_access *a)
{
    return !(a->mode & (WEFT__ORDER_ONLY | WEFT_REDUCE)) && (a->mode & WEFT_R) &&
           weft__data_maybe_on_devices(a->data) && weft__task_access_dev(t, a, NULL) == 0;
}

/* Before a task runs: the copies to the host of what it reads there, all
 * started at once.  true if one has not landed yet: the task is queued
 * again when it has (and then looks again), instead of a worker waiting
 * for it in the acquire. */
static bool prefetch_host(weft__task *t)
{
    bool pending = false;
    for (uint32_t i = 0; i < t->naccess; i++)
        if (host_read(t, &t->access[i])) {
            t->prefetched = true; /* (a cancelled task settles them: weft__task_cancelled) */
            pending |= weft__data_prefetch_host(t->access[i].data, NULL, NULL) == 1;
        }
    for (uint32_t i = 0; pending && i < t->naccess; i++) {
        if (!host_read(t, &t->access[i]))
            continue;
        atomic_fetch_add(&t->g->inflight, 1); /* (prefetch_landed) */
        if (weft__data_prefetch_host(t->access[i].data, prefetch_landed, t) == 1)
            return true;
        weft__graph_leave(t->g, 1);
    }
    return false;
}

int weft__task_start(weft__task *t)
{
    /* A task that will not run takes no exclusion and moves no data.  (One
     * doomed after this look may have started copies: each is ordered
     * after the last write of its source and the task holds its
     * exclusions, so they hold the current value: weft__task_cancelled.) */
    if (atomic_load_explicit(&t->run_gate, memory_order_acquire) == WEFT__GATE_OPEN) {
        /* Exclusion before movement: commuting tasks first take their
         * data's exclusion (if another member holds it, the task waits on
         * that data and is requeued later), so that no copy for it reads
         * what a member running now still changes. */
        if (t->has_commute && !weft__commute_acquire(t))
            return WEFT__START_DEFER;
        /* Then what it reads on the host, from devices. */
        if (t->naccess && prefetch_host(t))
            return WEFT__START_DEFER;
    }
    int gate = WEFT__GATE_OPEN;
    if (!atomic_compare_exchange_strong(&t->run_gate, &gate, WEFT__GATE_STARTED)) {
        while (atomic_load_explicit(&t->run_gate, memory_order_acquire) == WEFT__GATE_DOOMING)
            weft__cpu_relax();
        return WEFT__START_CANCEL;
    }
    if (t->epoch != atomic_load_explicit(&t->g->cancel_epoch, memory_order_acquire)) {
        /* weft_cancel_pending came after its spawn */
        t->cause_id = t->id;
        t->cause_kind = WEFT__CAUSE_REQUEST;
        copy_name(t->cause_name, t->name);
        return WEFT__START_CANCEL;
    }
    atomic_store_explicit(&t->state, WEFT__T_RUNNING, memory_order_relaxed);
    if (t->place)
        weft__place_started(t->g->placer, t->place);
    if (t->brec)
        weft__bound_started(t->brec);
    if (t->cont_of) /* the task it continues runs again, as its users see it */
        atomic_store_explicit(&t->cont_of->state, WEFT__T_RUNNING, memory_order_relaxed);
    return WEFT__START_RUN;
}

static int final_of(const weft__task *t)
{
    if (t->start_cancelled || atomic_load_explicit(&((weft__task *)t)->pred_failed, memory_order_relaxed))
        return WEFT__T_CANCELLED;
    return t->result != 0 ? WEFT__T_FAILED : WEFT__T_COMPLETED;
}

/* Completions a completion sets off (the early-released successors whose
 * last op it was) run one after another on this thread, not nested: a long
 * chain of GPU tasks finishing at once must not grow the stack. */
static _Thread_local weft__task *tl_done_head;
static _Thread_local bool tl_completing;

/* Every op of t is done: complete it. */
static void ops_finished(weft__task *t, weft__qnode **next)
{
    int err = atomic_load(&t->op_error);
    if (err && t->result == 0) {
        t->result = err;
        t->fail_why = WEFT__FAIL_DEVICE;
    }
    /* A continued task ends as its continuations did: failed with the
     * result of the one that failed, or cancelled (by request, naming
     * itself: its continuation was cancelled) — unless its own body
     * failed first. */
    int cf = atomic_load(&t->cont_final);
    if (cf == WEFT__T_FAILED && t->result == 0) {
        t->result = t->cont_result ? t->cont_result : WEFT_ETASKFAILED;
    } else if (cf == WEFT__T_CANCELLED && t->result == 0 && !t->start_cancelled &&
               !atomic_load(&t->pred_failed)) {
        t->cause_id = t->id;
        t->cause_kind = WEFT__CAUSE_REQUEST;
        copy_name(t->cause_name, t->name);
        t->start_cancelled = true;
    }
    if (tl_completing) {
        t->done_next = tl_done_head;
        tl_done_head = t;
        return;
    }
    tl_completing = true;
    weft__task_complete(t, final_of(t), next);
    while (tl_done_head) {
        weft__task *u = tl_done_head;
        tl_done_head = u->done_next;
        weft__task_complete(u, final_of(u), next);
    }
    tl_completing = false;
}

/* Claim edge e for the events of its predecessor (whose events_ready is
 * set): the successor holds one op until the predecessor completes, and is
 * released from the edge now.  The op is taken before the claim, so that a
 * completion seeing the claim never drops an op not yet taken; the
 * successor cannot have run (the edge is still pending), so undoing it
 * never ends the task. */
static void claim_early(weft__edge *e, weft__qnode **next)
{
    weft__task *s = e->succ;
    weft__task_op_begin(s); /* s's has_ops was set at its spawn */
    uint8_t open = WEFT__EDGE_OPEN;
    if (!atomic_compare_exchange_strong(&e->claim, &open, WEFT__EDGE_EARLY)) {
        atomic_fetch_sub_explicit(&s->ops, 1, memory_order_relaxed);
        return;
    }
    if (atomic_fetch_sub_explicit(&s->pending, 1, memory_order_acq_rel) == 1)
        task_ready(s, next);
}

/* A GPU task's body returned with success: record its completion events on
 * its streams and release its GPU-only successors now (each holds one op
 * until this task completes, and its streams wait for the events before its
 * body runs), so that a chain of GPU tasks never waits for the host.  Runs
 * before t's completion reports are queued: t cannot complete meanwhile,
 * and no successor released here can complete before t does. */
static void release_early(weft__task *t, weft__qnode **next)
{
    /* Events first, then the list: a successor linking meanwhile either is
     * in the list read here or sees events_ready after its link (both are
     * sequentially consistent), and claims the edge itself. */
    if (!weft__place_record(t->g->placer, t->place))
        return;
    weft__edge *e = atomic_load(&t->successors);
    if (e == WEFT__CLOSED)
        return;
    for (; e; e = e->next) {
        weft__task *s = e->succ;
        if (s->early_ok && !e->late)
            claim_early(e, next);
    }
}

bool weft__task_prepare(weft__task *t)
{
    weft__place *pl = t->place;
    if (!t->early_ok || !pl->ngpu)
        return false;
    bool waited = false;
    uint32_t n = weft__task_nedges(t);
    for (uint32_t i = 0; i < n; i++) {
        const weft__edge *e = &t->edges[i];
        if (atomic_load_explicit(&((weft__edge *)e)->claim, memory_order_acquire) != WEFT__EDGE_EARLY ||
            !weft__edge_pin_pred(e))
            continue; /* a predecessor gone has finished: its events fired */
        weft__task *p = e->pred;
        bool finished = weft__state_final(atomic_load_explicit(&p->state, memory_order_acquire));
        int rc = 0;
        if (p->place && !finished) {
            rc = weft__place_wait_for(t->g->placer, pl, p->place);
            waited = true;
        }
        weft__task_unref(p);
        if (rc != 0) {
            int none = 0;
            atomic_compare_exchange_strong(&t->op_error, &none, rc);
        }
    }
    return waited;
}

static bool early_pred_failed(weft__task *t, unsigned depth);

/* The checking mode found what msg says about t: reported (device/vcheck.h:
 * on stderr), and unless t failed already (*result not 0), t fails with
 * WEFT_EDEVICE, msg its reason (weft__task_outcome). */
static void check_failed(weft__task *t, const char *msg, int *result)
{
    weft__vcheck_report(msg);
    if (*result != 0)
        return;
    *result = WEFT_EDEVICE;
    t->fail_why = WEFT__FAIL_CHECK;
    if (!t->fail_msg)
        t->fail_msg = weft__strdup(msg); /* (NULL out of memory: the outcome says where it was printed) */
}

/* The checking mode's host watch (data/data.h): whether the memory of data
 * t names (its own, order-only and overlapping accesses alike) was found
 * changed by the program while the data's newest value was on devices
 * only — by the copy back its own acquire made, or by one made since the
 * last task naming it (an eviction's).  Each trip is taken: it fails one
 * task.  The report was printed when it was found. */
static bool host_watch_tripped(weft__task *t)
{
    bool any = false;
    for (uint32_t i = 0; i < t->naccess; i++)
        any |= weft__data_watch_take(t->access[i].data);
    return any;
}

/* The checking mode: t's data as t needs it, now that it is acquired?  A
 * violation is reported like the virtual GPUs' (device/vcheck.h) and fails
 * the task — unless a predecessor it was released early behind failed
 * meanwhile: its abort took back the replica t found, and t, whose work
 * will be skipped, ends cancelled. */
static int check_data(weft__task *t)
{
    for (uint32_t i = 0; i < t->naccess; i++) {
        weft__task_access *a = &t->access[i];
        if (a->mode & (WEFT__ORDER_ONLY | WEFT_REDUCE | WEFT_SCRATCH)) /* a reducer's copy, a scratch buffer: its own */
            continue;
        char why[200], msg[320];
        unsigned dev = weft__task_access_dev(t, a, NULL);
        if (weft__data_check(a->data, dev, a->mode & ~(unsigned)WEFT_ON_GPU_MASK, why, sizeof why) != 0) {
            if (t->early_ok && early_pred_failed(t, 0))
                return 0;
            snprintf(msg, sizeof msg, "data check: task '%s' (%llu), access %u (data d%u): %s", t->name,
                     (unsigned long long)t->id, i, a->data->id, why);
            int rc = 0;
            check_failed(t, msg, &rc);
            return rc;
        }
    }
    return 0;
}

static int poison_body(void *arg)
{
    (void)arg;
    return 0;
}

/* Fill n bytes at p on virtual GPU dev with the poison, on q ahead of t's
 * work there: the virtual GPU's check of a write-only range does it (and
 * notes the fill as the range's writer). */
static int poison_on_stream(weft__task *t, weft__device *dev, weft__dqueue *q, void *p, size_t n)
{
    weft_range r = {p, n, WEFT_W};
    weft__launch k = {poison_body, NULL, 0, &r, 1, weft__task_op_failed, t, NULL, NULL};
    return dev->ops->launch(q, &k);
}

/* The checking mode: what t only writes on a virtual GPU holds no value
 * for it: poisoned (0xDB) on its stream ahead of its body's work, so that
 * a kernel reading it before writing it reads the poison, not a value that
 * looks right.  So is each scratch buffer (WEFT_SCRATCH), whose contents
 * are unspecified: on its virtual GPU's stream, or at once in host memory
 * (not on CUDA). */
static int poison_write_only(weft__task *t)
{
    int rc = 0;
    for (uint32_t i = 0; i < t->naccess && rc == 0; i++) {
        weft__task_access *a = &t->access[i];
        weft__dqueue *q;
        unsigned dev = weft__task_access_dev(t, a, &q);
        weft__scratch *s = weft__access_scratch(a);
        if (s && s->dev == 0) {
            memset(s->r.ptr, WEFT__DATA_POISON, a->data->size);
            continue;
        }
        if (!dev || !q || dev >= a->data->nrep || a->data->devs[dev]->kind != WEFT_DEVICE_VGPU)
            continue;
        if (s)
            rc = poison_on_stream(t, a->data->devs[dev], q, s->r.ptr, a->data->size);
        else if (!(a->mode & (WEFT_R | WEFT_REDUCE | WEFT__ORDER_ONLY)) && !a->data->tile)
            rc = poison_on_stream(t, a->data->devs[dev], q, weft__data_replica(a->data, dev), a->data->size);
    }
    return rc;
}

unsigned weft__task_access_dev(const weft__task *t, const weft__task_access *a, weft__dqueue **q)
{
    weft__dqueue *none = NULL, **out = q ? q : &none;
    *out = NULL;
    if (a->mode & WEFT_HOST)
        return 0;
    const weft__place *pl = t->place;
    if (!pl || !pl->ngpu)
        return t->device;
    unsigned k = access_gpu(a->mode);
    if (k >= pl->ngpu) /* refused at spawn for every alternative that can run */
        k = 0;
    *out = pl->queue[k];
    return k ? weft__place_gpu(t->g->placer, pl, k)->index : t->device;
}

/* Before a retry gives back what task t holds: the copies its
 * acquisitions queued on its streams (into its replicas, from replicas and
 * neighbours' halos they pinned; on each of its GPUs, as WEFT_ON_GPU puts
 * them) have run.  Otherwise a source given back could be evicted and its
 * memory reused while a copy still reads it (a neighbour's halo band, a
 * peer replica), and a replica's state be undone while a copy still
 * writes it (a later fetch there, on another stream, unordered with it).
 * 0, or the error that fails the task with its holds kept (its completion,
 * after its streams, gives them back). */
static int retry_drain(weft__task *t)
{
    for (unsigned k = 0; k < t->place->ngpu; k++) {
        weft__device *dev = weft__place_gpu(t->g->placer, t->place, k);
        weft__devent *e = NULL;
        int rc = dev->ops->event_create(dev, &e);
        if (rc != 0)
            return rc;
        if ((rc = dev->ops->event_record(e, t->place->queue[k])) == 0)
            (void)weft__device_event_wait(dev, e); /* (a failure there is reported to the stream's task: it ran) */
        dev->ops->event_destroy(e);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* What weft__task_guard_begin saw: each access's replica digest, and the
 * gate its streams wait at (open once the body returned).  Freed by the
 * last of the body and the gates. */
typedef struct weft__guard {
    _Atomic bool open;
    _Atomic bool expired;              /* a gate gave up waiting: the check is off */
    bool synced;                       /* the body synchronised (weft_ctx_sync): checked then (body's) */
    _Atomic unsigned users;
    /* Each access's seal on the user's memory (weft__data_host_seal): its
     * digest, and whether it was sealed (bit i of sealed, the first 64). */
    uint64_t sealed;
    uint64_t *host;                    /* naccess digests, after digest[] */
    uint64_t digest[];
} weft__guard;

static void guard_unref(weft__guard *g)
{
    if (atomic_fetch_sub(&g->users, 1) == 1)
        weft__free(g);
}

/* A stream waits here while the body runs, 200 ms at most: a body that
 * waits for work queued behind it on its own stream (a child task there)
 * must not wait for ever because of the check, which it turns off. */
static int gate_kernel(void *arg)
{
    weft__guard *g = arg;
    struct timespec tick = {0, 20000};
    for (unsigned i = 0; i < 10000 && !atomic_load(&g->open); i++)
        nanosleep(&tick, NULL);
    if (!atomic_load(&g->open))
        atomic_store(&g->expired, true);
    guard_unref(g);
    return 0;
}

/* Whether what is queued on t's streams (on virtual GPUs) so far, its
 * copies in among it, runs within 100 ms: a stream held longer by other
 * work is not waited for (the check is skipped: it must not change what
 * the program does, beyond its timing). */
static bool guard_drain(weft__task *t)
{
    weft__devent *e[8] = {NULL};
    weft__device *dev[8] = {NULL};
    unsigned n = t->place->ngpu < 8 ? t->place->ngpu : 0; /* (more GPUs: unchecked) */
    bool ok = n > 0;
    for (unsigned k = 0; k < n && ok; k++) {
        dev[k] = weft__place_gpu(t->g->placer, t->place, k);
        ok = dev[k]->ops->event_create(dev[k], &e[k]) == 0;
        if (!ok)
            e[k] = NULL;
        ok = ok && dev[k]->ops->event_record(e[k], t->place->queue[k]) == 0;
    }
    struct timespec tick = {0, 50000};
    for (unsigned k = 0, waited = 0; k < n && ok;) {
        int q = dev[k]->ops->event_query(e[k]);
        if (q < 0)
            ok = false;
        else if (q > 0)
            k++;
        else if (++waited > 2000)
            ok = false;
        else
            nanosleep(&tick, NULL);
    }
    for (unsigned k = 0; k < n; k++) /* (a virtual GPU's record outlives its event) */
        if (e[k])
            dev[k]->ops->event_destroy(e[k]);
    return ok;
}

/* The replica access a of t uses, or its scratch buffer, on a virtual GPU
 * (NULL otherwise). */
static void *guarded_replica(const weft__task *t, const weft__task_access *a)
{
    unsigned dev = weft__task_access_dev(t, a, NULL);
    if ((a->mode & (WEFT_REDUCE | WEFT__ORDER_ONLY)) || !dev || dev >= a->data->nrep ||
        a->data->devs[dev]->kind != WEFT_DEVICE_VGPU)
        return NULL;
    if (is_scratch(a))
        return a->scratch && a->scratch->dev ? a->scratch->r.ptr : NULL;
    return weft__data_replica(a->data, dev);
}

/* Whether access i of t reads and writes (RW) a tile with a halo on the
 * host: ordered with its neighbours' writers both ways, so that nothing
 * but its own body changes the halo cells while it runs.  (A tile's W
 * alone is not: a neighbour's writer may run beside it, and a digest of
 * cells it writes would race with it.) */
static bool halo_guarded(const weft__task *t, uint32_t i)
{
    const weft__task_access *a = &t->access[i];
    return !(a->mode & (WEFT__ORDER_ONLY | WEFT_REDUCE)) && (a->mode & WEFT_RW) == WEFT_RW && a->data->tile &&
           a->data->tile->nnb && weft__task_access_dev(t, a, NULL) == 0;
}

void weft__task_halo_begin(const weft__task *t, weft__halo_guard *g)
{
    for (uint32_t i = 0; i < WEFT__HALO_GUARDS; i++)
        g->digest[i] = i < t->naccess && halo_guarded(t, i) ? weft__tile_halo_digest(t->access[i].data) : 0;
}

void weft__task_halo_end(weft__task *t, const weft__halo_guard *g, int *result)
{
    for (uint32_t i = 0; i < WEFT__HALO_GUARDS && i < t->naccess; i++) {
        if (!halo_guarded(t, i))
            continue;
        weft__data *d = t->access[i].data;
        if (weft__tile_halo_digest(d) == g->digest[i])
            continue;
        char msg[360];
        snprintf(msg, sizeof msg,
                 "data check: the body of task '%s' (%llu) wrote the halo of access %u (tile %u of data d%u) on "
                 "the host: those cells are its neighbours' interiors; write the tile's interior only "
                 "(weft_tile_info)",
                 t->name, (unsigned long long)t->id, i, d->tile->index, d->tile->fam->parent_id);
        /* (the host watch of a neighbour stale on the host takes the cells
         * as they are now: reported once, here) */
        for (uint32_t k = 0; k < t->naccess; k++)
            weft__data_watch_rebase(t->access[k].data);
        check_failed(t, msg, result);
        return;
    }
}

/* Whether access a's user memory is sealed while a GPU task's body runs:
 * its data's, if the task writes it, unless the task uses it on the host
 * (WEFT_HOST), or it is a reduction's private copy or a scratch buffer
 * (not the data). */
static bool host_sealable(const weft__task_access *a)
{
    /* (writing accesses only: while the task holds its data for writing,
     * nothing but the checking mode's poison fill writes that memory; a
     * reader's may take a copy of the value meanwhile, for a host reader) */
    return (a->mode & WEFT_W) && !(a->mode & (WEFT_HOST | WEFT_REDUCE | WEFT_SCRATCH | WEFT__ORDER_ONLY));
}

weft__guard *weft__task_guard_begin(weft__task *t)
{
    if (!t->g->check_data || !t->place || !t->place->ngpu || !t->naccess)
        return NULL;
    bool any = false;
    for (uint32_t i = 0; i < t->naccess && !any; i++)
        any = guarded_replica(t, &t->access[i]) != NULL;
    for (unsigned k = 0; k < t->place->ngpu && any; k++)
        any = weft__place_gpu(t->g->placer, t->place, k)->kind == WEFT_DEVICE_VGPU;
    weft__guard *g = any ? weft__alloc(sizeof *g + 2 * t->naccess * sizeof g->digest[0]) : NULL;
    if (!g || !guard_drain(t)) { /* (no guard: unchecked, as outside the checking mode) */
        weft__free(g);
        return NULL;
    }
    atomic_init(&g->open, false);
    atomic_init(&g->expired, false);
    g->synced = false;
    atomic_init(&g->users, 1);
    g->host = g->digest + t->naccess;
    g->sealed = 0;
    for (uint32_t i = 0; i < t->naccess; i++) {
        void *p = guarded_replica(t, &t->access[i]);
        g->digest[i] = p ? weft__vcheck_digest_of(p, t->access[i].data->size) : 0;
        bool poisoned;
        if (i < 64 && p && host_sealable(&t->access[i]) &&
            weft__data_host_seal(t->access[i].data, &g->host[i], &poisoned))
            g->sealed |= 1ull << i;
    }
    for (unsigned k = 0; k < t->place->ngpu; k++) {
        weft__device *dev = weft__place_gpu(t->g->placer, t->place, k);
        weft__launch gate = {gate_kernel, g, 0, NULL, 0, weft__task_op_failed, t, NULL, NULL};
        atomic_fetch_add(&g->users, 1);
        if (dev->ops->launch(t->place->queue[k], &gate) != 0)
            atomic_fetch_sub(&g->users, 1);
    }
    return g;
}

/* Report the user's memory of an access of t that its body wrote while the
 * task's data was its replicas on GPUs (the first one found): that write
 * is lost.  The checking mode's own poison fill, which a predecessor's
 * commit may write meanwhile, is not the body's. */
static bool guard_compare_host(weft__task *t, weft__guard *g, int *result)
{
    if (atomic_load(&t->pred_failed)) /* (an undo of its predecessor's write may restore that memory) */
        return false;
    for (uint32_t i = 0; i < t->naccess && i < 64; i++) {
        if (!(g->sealed >> i & 1))
            continue;
        const weft__task_access *a = &t->access[i];
        uint64_t now;
        bool poisoned;
        if (!weft__data_host_seal(a->data, &now, &poisoned) || now == g->host[i] || poisoned)
            continue;
        char msg[600];
        snprintf(msg, sizeof msg,
                 "data check: the body of task '%s' (%llu) wrote the memory registered as access %u (data d%u) "
                 "itself, on the host, while the task's data is its copy on %s: that write is lost (the data's "
                 "value is the copy's); write the copy instead (weft_ctx_data; from Python "
                 "weft.context().array(x) or .view(x)), or run the task on the CPU",
                 t->name, (unsigned long long)t->id, i, a->data->id,
                 a->data->devs[weft__task_access_dev(t, a, NULL)]->name);
        weft__data_watch_rebase(a->data); /* (reported once, here: not again by the host watch) */
        check_failed(t, msg, result);
        return true;
    }
    return false;
}

/* Report a replica of t that its body changed on the host since the guard
 * began (the first one found). */
static void guard_compare(weft__task *t, weft__guard *g, int *result)
{
    for (uint32_t i = 0; i < t->naccess && !atomic_load(&g->expired); i++) {
        const weft__task_access *a = &t->access[i];
        void *p = guarded_replica(t, a);
        if (!p || weft__vcheck_digest_of(p, a->data->size) == g->digest[i])
            continue;
        char msg[600];
        snprintf(msg, sizeof msg,
                 "data check: the body of task '%s' (%llu) changed access %u (data d%u) on the host, in its %s "
                 "on %s: that is GPU memory (a real GPU's is not the host's), which the task's own work and "
                 "copies change on its stream: queue the work there (weft_ctx_queue), or call weft_ctx_sync "
                 "first (a virtual GPU's replica is then the body's to use on the host)",
                 t->name, (unsigned long long)t->id, i, a->data->id, is_scratch(a) ? "scratch buffer" : "replica",
                 a->data->devs[weft__task_access_dev(t, a, NULL)]->name);
        check_failed(t, msg, result);
        break;
    }
}

void weft__task_guard_sync(weft__task *t, weft__guard *g, int *result)
{
    if (!g || g->synced)
        return;
    guard_compare(t, g, result);
    g->synced = true;
    atomic_store(&g->open, true); /* (its gates let the streams run on) */
}

void weft__task_guard_end(weft__task *t, weft__guard *g, int *result)
{
    if (!g)
        return;
    if (!g->synced)
        guard_compare(t, g, result);
    (void)guard_compare_host(t, g, result);
    atomic_store(&g->open, true);
    guard_unref(g);
}

/* Waits of 20 ms with no room made while other tasks hold memory on the
 * device, before a task gives up (a deadlock's end: 60 s). */
#define ROOM_HELD_WAITS 3000

int weft__task_acquire(weft__task *t, bool waited_events)
{
    weft__dqueue *q = t->place && t->place->ngpu ? t->place->queue[0] : NULL;
    /* Copies in may run beside the kernels already on its streams when
     * nothing it follows is still in flight there (its streams wait for
     * no predecessor's events): on its devices' prefetch queues. */
    unsigned prefetch = waited_events || t->g->no_prefetch ? 0 : WEFT__DATA_PREFETCH;
    /* Handles over memory its own data overlaps: their value on the host,
     * before its own accesses are acquired there. */
    for (uint32_t i = 0; i < t->naccess; i++) {
        const weft__task_access *a = &t->access[i];
        int src;
        if ((a->mode & WEFT__OVERLAP) && (src = weft__data_host_sync(a->data, (a->mode & WEFT_W) != 0, t->id)) != 0)
            return src;
    }
    for (unsigned idle = 0, held = 0;;) {
        int rc = 0;
        uint32_t i = 0;
        uint64_t seen = 0;
        unsigned full_dev = t->device;
        for (; i < t->naccess && rc == 0; i++) {
            weft__task_access *a = &t->access[i];
            if (a->mode & WEFT__ORDER_ONLY)
                continue;
            weft__dqueue *aq;
            unsigned dev = weft__task_access_dev(t, a, &aq);
            full_dev = dev;
            seen = weft__data_room_epoch(a->data, dev);
            if (a->mode & WEFT_REDUCE) /* a private copy, not the value */
                rc = weft__reduce_acquire(a->data, dev, a->part);
            else if (is_scratch(a)) /* a buffer of its own, not the value */
                rc = weft__scratch_acquire(a->data, dev, &a->scratch);
            else
                rc = weft__data_acquire(a->data, dev, (a->mode & ~(unsigned)WEFT_ON_GPU_MASK) | prefetch, t->id, aq,
                                        &a->hold, &a->rec);
        }
        /* Everything held: the private copies get their identity, ahead
         * of the body's work (a retry would have had to take it back). */
        for (uint32_t j = 0; j < t->naccess && rc == 0; j++)
            if (t->access[j].mode & WEFT_REDUCE) {
                /* on the stream of the GPU the access is on (WEFT_ON_GPU), ahead of the body's work there */
                weft__dqueue *aq;
                (void)weft__task_access_dev(t, &t->access[j], &aq);
                rc = weft__reduce_begin(t->access[j].data, t->access[j].part, aq);
            }
        /* (taken whatever else failed: a trip fails one task, this one) */
        if (t->g->check_data && rc != WEFT__DATA_RETRY && host_watch_tripped(t) && rc == 0) {
            rc = WEFT_EDEVICE;
            t->fail_why = WEFT__FAIL_WATCH;
        }
        if (rc == 0 && t->g->check_data)
            rc = check_data(t);
        if (rc == 0 && t->g->check_data)
            rc = poison_write_only(t);
        if (rc != WEFT__DATA_RETRY)
            return rc;
        /* No room now for access i-1, while running tasks' data fill the
         * device: give back what this task holds (no task waits holding
         * room), wait until one of them finishes, and start again. */
        if (q && (rc = retry_drain(t)) != 0)
            return rc;
        weft__task_access *full = &t->access[i - 1];
        for (uint32_t j = i; j-- > 0;) { /* the states back as they were, newest change first */
            if (t->access[j].mode & WEFT_REDUCE) { /* its private copy's memory (nothing queued into it) */
                weft__reduce_drop(t->access[j].data, t->access[j].part);
                continue;
            }
            if (is_scratch(&t->access[j])) { /* its buffer (nothing queued into it) */
                if (t->access[j].scratch)
                    weft__scratch_release(t->access[j].data, t->access[j].scratch, false);
                t->access[j].scratch = NULL;
                continue;
            }
            /* (its streams drained: its copies are good) */
            weft__data_end(t->access[j].data, &t->access[j].rec, false, true, false, false); /* (nothing ran) */
            weft__wrec_clear(&t->access[j].rec);
            weft__data_release(t->access[j].data, &t->access[j].hold, false);
            weft__data_hold_clear(&t->access[j].hold);
        }
        /* No task made room within 20 ms.  While replicas there are in
         * use (running tasks', copies in flight), their end makes room:
         * wait on, however long their kernels take (a loaded machine's
         * streams may take seconds), up to a bound that ends a deadlock
         * with an error (a body waiting for this task while its own task
         * holds the memory this one needs).  With none in use, this task's
         * own data leave no room (fragmented): after a second, nothing
         * will change. */
        if (weft__data_wait_room(full->data, full_dev, seen)) {
            idle = held = 0;
        } else if (weft__data_room_held(full->data, full_dev)) {
            if (++held == ROOM_HELD_WAITS)
                return weft__error(WEFT_ENOMEM, "no room on device %u for %zu bytes: the memory held there by "
                                                "running tasks was not given back in %d s",
                                   full_dev, full->data->size, ROOM_HELD_WAITS / 50);
        } else if (++idle == 50) {
            return weft__error(WEFT_ENOMEM, "no room on device %u for %zu bytes: its other data fragment it",
                               full_dev, full->data->size);
        }
    }
}

void weft__task_cancelled(weft__task *t, weft__qnode **next)
{
    /* Copies to the host started for it are the data's current value:
     * the host's replica, not a copy in flight that nobody waits for. */
    for (uint32_t i = 0; t->prefetched && i < t->naccess; i++)
        if (host_read(t, &t->access[i]))
            weft__data_prefetch_settle(t->access[i].data);
    t->prefetched = false;
    if (!t->has_ops) {
        weft__task_complete(t, WEFT__T_CANCELLED, next);
        return;
    }
    /* A GPU-only task: predecessors released it early and hold ops. */
    t->start_cancelled = true;
    if (atomic_fetch_sub_explicit(&t->ops, 1, memory_order_acq_rel) == 1)
        ops_finished(t, next);
}

/* Whether task p, an early-released predecessor whose queued work has
 * ended, failed or was cancelled on its devices, itself or through such
 * predecessors of its own (depth bounded: a chain of tasks that queued no
 * kernel, whose fates nobody asked). */
static bool failed_on_device(weft__task *p, unsigned depth)
{
    if (atomic_load(&p->op_error) != 0 || atomic_load(&p->pred_failed))
        return true;
    int s = atomic_load(&p->state);
    if (weft__state_final(s))
        return s != WEFT__T_COMPLETED;
    uint8_t f = atomic_load(&p->dev_fate);
    if (f != WEFT__FATE_UNKNOWN)
        return f == WEFT__FATE_SKIPPED;
    return depth < 64 && early_pred_failed(p, depth + 1);
}

static bool early_pred_failed(weft__task *t, unsigned depth)
{
    bool failed = false;
    uint32_t n = weft__task_nedges(t);
    for (uint32_t i = 0; i < n && !failed; i++) {
        const weft__edge *e = &t->edges[i];
        if (!e->propagate ||
            atomic_load_explicit(&((weft__edge *)e)->claim, memory_order_acquire) != WEFT__EDGE_EARLY ||
            !weft__edge_pin_pred(e))
            continue;
        failed = failed_on_device(e->pred, depth);
        weft__task_unref(e->pred);
    }
    return failed;
}

bool weft__task_skip_work(void *cookie)
{
    weft__task *t = cookie;
    if (!t->early_ok)
        return false; /* released only once its predecessors completed */
    uint8_t f = atomic_load(&t->dev_fate);
    if (f == WEFT__FATE_UNKNOWN) {
        uint8_t none = WEFT__FATE_UNKNOWN;
        f = early_pred_failed(t, 0) ? WEFT__FATE_SKIPPED : WEFT__FATE_RUNS;
        if (!atomic_compare_exchange_strong(&t->dev_fate, &none, f))
            f = none;
    }
    return f == WEFT__FATE_SKIPPED;
}

void weft__task_body_returned(weft__task *t, int result, weft__qnode **next)
{
    t->result = result;
    if (t->place && t->place->ngpu)
        weft__place_body_returned(t->place);
    /* Its events are recorded before its completion reports are queued, so
     * that no queue touches an event after the task completed (and gave its
     * events back).  A continued task records none: its successors follow
     * its last continuation, not this body. */
    if (t->place && t->place->ngpu && result == 0 && !t->continued)
        release_early(t, next);
    /* A task on GPUs completes once the work queued on its streams has. */
    for (unsigned k = 0; t->place && k < t->place->ngpu; k++) {
        weft__dqueue *q = t->place->queue[k];
        weft__device *dev = weft__place_gpu(t->g->placer, t->place, k);
        weft__task_op_begin(t);
        int rc = dev->ops->notify(q, weft__task_op_done, t);
        if (rc != 0)
            weft__task_op_done(t, rc);
    }
    if (!t->has_ops) {
        weft__task_complete(t, final_of(t), next);
        return;
    }
    if (t->continued) {
        if (t->brec) /* (its own work ends here; its continuation is a task of its own) */
            weft__bound_body_end(t->brec);
        /* Suspended until its continuation ends (which holds an op): the
         * worker is free now, and so is its reservation, for other tasks
         * (its data stay its own until it finishes).  It waits, as it did
         * for its dependencies. */
        if (t->place) {
            place_retry(weft__place_release(t->g->placer, t->place), next);
            t->place_returned = true;
        }
        /* (Its state is WAITING already: weft_ctx_continue; and RUNNING
         * while a continuation runs, which may have started by now.)  Not
         * ready nor running any more: what settles the graph
         * (weft_wait_settled_timed) is its continuation's, from here. */
        count_here(t->g, offsetof(weft__task_stats, n_done));
    } else {
        /* Device work is in flight: the last report completes the task
         * (maybe this very call, if everything finished already). */
        atomic_store_explicit(&t->state, WEFT__T_ENQUEUED, memory_order_relaxed);
    }
    if (atomic_fetch_sub_explicit(&t->ops, 1, memory_order_acq_rel) == 1)
        ops_finished(t, next);
}

void weft__task_op_begin(weft__task *t)
{
    if (!t->has_ops) {
        t->has_ops = true;
        atomic_fetch_add_explicit(&t->ops, 2, memory_order_relaxed); /* the body's guard + this op */
    } else {
        atomic_fetch_add_explicit(&t->ops, 1, memory_order_relaxed);
    }
}

void weft__task_op_failed(void *cookie, int status)
{
    weft__task *t = cookie;
    int none = 0;
    atomic_compare_exchange_strong(&t->op_error, &none, status);
}

weft__task *weft__task_cont_pin(weft__task *t)
{
    weft__task *c = atomic_load(&t->cont);
    if (!c)
        return NULL;
    uint32_t gen = atomic_load(&t->cont_gen);
    int32_t r = atomic_load(&c->refs);
    do {
        if (r <= 0)
            return NULL;
    } while (!atomic_compare_exchange_weak(&c->refs, &r, r + 1));
    if (atomic_load(&c->slot.gen) != gen || c->cont_of != t) {
        weft__task_unref(c); /* a newer task in the same slot */
        return NULL;
    }
    return c;
}

void weft__task_lend(weft__task *t)
{
    if (!t->place || t->place->chosen < 0)
        return;
    place_retry(weft__place_lend(t->g->placer, t->place), NULL); /* queued for any worker */
}

void weft__task_unlend(weft__task *t)
{
    if (t->place)
        weft__place_unlend(t->g->placer, t->place);
}

void weft__task_op_done(void *cookie, int status)
{
    weft__task *t = cookie;
    if (status != 0) {
        int none = 0;
        atomic_compare_exchange_strong(&t->op_error, &none, status);
        atomic_store(&t->queue_error, true); /* (a kernel's failure comes by weft__task_op_failed) */
    }
    if (atomic_fetch_sub_explicit(&t->ops, 1, memory_order_acq_rel) == 1)
        ops_finished(t, NULL);
}

/* done: count it in n_done too (a continued root was counted there when
 * its body returned). */
static void count_final(weft__graph *g, int final, bool done)
{
    if (final == WEFT__T_FAILED)
        count_here(g, offsetof(weft__task_stats, n_failed));
    else if (final == WEFT__T_CANCELLED)
        count_here(g, offsetof(weft__task_stats, n_cancelled));
    if (done)
        count_here(g, offsetof(weft__task_stats, n_done));
}

_Thread_local const weft__task *weft__tls_finishing;

int weft__task_outcome(const weft__task *t, int final)
{
    switch (final) {
    case WEFT__T_COMPLETED:
        return 0;
    case WEFT__T_FAILED:
        if (t->fail_why == WEFT__FAIL_CHECK && t->fail_msg)
            return weft__error(WEFT_ETASKFAILED, "task %llu '%s' failed: the checking mode found an error (also "
                                                 "printed on stderr): %s",
                               (unsigned long long)t->id, t->name, t->fail_msg);
        if (t->fail_why == WEFT__FAIL_CHECK)
            return weft__error(WEFT_ETASKFAILED, "task %llu '%s' failed: the checking mode found an error in "
                                                 "its body (printed on stderr, \"weft: data check: ...\")",
                               (unsigned long long)t->id, t->name);
        if (t->fail_why == WEFT__FAIL_WATCH)
            return weft__error(WEFT_ETASKFAILED, "task %llu '%s' failed: data it names: " WEFT__WATCH_TRIPPED,
                               (unsigned long long)t->id, t->name);
        if (t->fail_why == WEFT__FAIL_DEVICE)
            return weft__error(WEFT_ETASKFAILED, "task %llu '%s' failed: its device work failed (%s)%s",
                               (unsigned long long)t->id, t->name, weft_strerror(t->result),
                               t->g->check_data ? "; in the checking mode, what a device found is printed on "
                                                  "stderr"
                                                : "");
        return weft__error(WEFT_ETASKFAILED, "task %llu '%s' failed: its body returned %d",
                           (unsigned long long)t->id, t->name, t->result);
    default:
        if (t->cause_kind == WEFT__CAUSE_UNSPAWNED)
            return weft__error(WEFT_ECANCELLED, "task %llu '%s' was cancelled because key %s was never "
                                                "spawned (its task space was destroyed)",
                               (unsigned long long)t->id, t->name, t->cause_name);
        return weft__error(WEFT_ECANCELLED, "task %llu '%s' was cancelled because task %llu '%s' %s",
                           (unsigned long long)t->id, t->name, (unsigned long long)t->cause_id, t->cause_name,
                           t->cause_kind == WEFT__CAUSE_REQUEST ? "was cancelled by request"
                                                                : "failed or was cancelled");
    }
}

/* Call t's on_finish (if any) with its own outcome, marking the thread as
 * inside t's callback meanwhile (weft__tls_finishing).  The mark nests: a
 * callback's spawn may complete another task (a placeholder) on this
 * thread.  For a failed task, the thread's message says why meanwhile
 * (weft__task_outcome); the one it had is back afterwards. */
static void run_on_finish(weft__task *t, int final)
{
    if (!t->on_finish)
        return;
    const weft__task *outer = weft__tls_finishing;
    weft__tls_finishing = t;
    if (final == WEFT__T_FAILED) {
        char before[1024];
        snprintf(before, sizeof before, "%s", weft_last_error());
        (void)weft__task_outcome(t, final);
        t->on_finish(t->finish_arg, WEFT_ETASKFAILED);
        (void)weft__error(0, "%s", before);
    } else {
        t->on_finish(t->finish_arg, final == WEFT__T_COMPLETED ? 0 : WEFT_ECANCELLED);
    }
    weft__tls_finishing = outer;
    t->on_finish = NULL;
}

void weft__task_complete(weft__task *t, int final, weft__qnode **next)
{
    weft__graph *g = t->g;
    WEFT__CHECK(!weft__state_final(atomic_load_explicit(&t->state, memory_order_relaxed)));
    /* Its data first: what it wrote committed, or aborted exactly (the last
     * good value is the data's again), and its replicas unpinned, before
     * anything that follows it may acquire: the members of its commute
     * groups and its successors. */
    /* Its time goes into its model, and its device's backlog drops, before
     * its successors are decided on (the earliest-finish policy). */
    if (t->place)
        weft__place_finished(g->placer, t->place, final == WEFT__T_COMPLETED && !t->continued);
    if (t->brec) {
        bool gpu = t->place && t->place->ngpu;
        weft__bound_finished(g->blog, t->brec, !t->proxy, gpu, gpu ? weft__place_gpu(g->placer, t->place, 0)->index : 0);
    }
    bool copies_failed = atomic_load(&t->queue_error);
    bool untouched = atomic_load(&t->dev_fate) == WEFT__FATE_SKIPPED && !t->body_copied;
    for (uint32_t i = t->naccess; i-- > 0;)
        weft__data_end(t->access[i].data, &t->access[i].rec, final == WEFT__T_COMPLETED, untouched, copies_failed,
                       g->check_data);
    for (uint32_t i = 0; i < t->naccess; i++) {
        weft__data_release(t->access[i].data, &t->access[i].hold, true);
        if (weft__access_scratch(&t->access[i])) { /* (its streams' work has run: nothing uses it any more) */
            weft__scratch_release(t->access[i].data, t->access[i].scratch, true);
            t->access[i].scratch = NULL;
        }
    }
    if (t->has_commute)
        weft__commute_release(t, next);
    if (final == WEFT__T_FAILED)
        atomic_fetch_add(&g->failures, 1); /* before inflight drops: wait_all must see it */
    /* Before the state is final: a wait that returns has seen the callback
     * return and arg destroyed. */
    run_on_finish(t, final);
    if (t->arg_destroy) {
        t->arg_destroy(t->arg);
        t->arg_destroy = NULL;
    }
    /* A reducer's private copies are final (and combined only if it
     * completed) before a successor may combine them. */
    for (uint32_t i = 0; i < t->naccess; i++)
        if (weft__access_part(&t->access[i])) {
            weft__reduce_finish(t->access[i].data, t->access[i].part, final == WEFT__T_COMPLETED);
            t->access[i].part = NULL;
        }
    /* Its data pins go before the state is final: a wait that returns has
     * seen the task stop naming its data (weft_data_partition, which
     * refuses data that tasks name, may follow it at once).  Nothing below
     * touches the data. */
    for (uint32_t i = 0; i < t->naccess; i++)
        weft__data_unpin(t->access[i].data);
    atomic_store(&t->state, final);
    weft__edge *e = atomic_exchange_explicit(&t->successors, WEFT__CLOSED, memory_order_acq_rel);
    /* Only a task that recorded completion events can have had its edges
     * claimed early (claim_early needs them): the others, every CPU task
     * among them, release their successors without a compare-and-swap. */
    bool events = t->place && atomic_load_explicit(&t->place->events_ready, memory_order_acquire);
    uint64_t cid = 0;
    const char *cname = NULL;
    uint8_t ckind = 0;
    bool fails = fails_successors(t, final);
    if (fails)
        cause_of(t, final, &cid, &cname, &ckind);
    while (e) {
        /* Read the edge before releasing its owner: once pending reaches
         * zero the successor may run, finish and free its edges. */
        weft__edge *following = e->next;
        weft__task *s = e->succ;
        uint8_t open = WEFT__EDGE_OPEN;
        if (events && !atomic_compare_exchange_strong(&e->claim, &open, WEFT__EDGE_DONE)) {
            /* Released when this task's body returned: it may have started. */
            if (fails && e->propagate && !weft__task_doom(s, cid, cname, ckind)) {
                bool no = false;
                if (atomic_load_explicit(&s->run_gate, memory_order_acquire) == WEFT__GATE_STARTED &&
                    atomic_compare_exchange_strong(&s->pred_failed, &no, true)) {
                    s->cause_id = cid;
                    s->cause_kind = ckind;
                    copy_name(s->cause_name, cname);
                }
            }
            weft__task_op_done(s, 0); /* the last touch: s may complete now */
        } else {
            if (fails && e->propagate)
                weft__task_doom(s, cid, cname, ckind);
            if (atomic_fetch_sub_explicit(&s->pending, 1, memory_order_acq_rel) == 1)
                task_ready(s, next);
        }
        e = following;
    }
    if (t->place && !t->place_returned)
        place_retry(weft__place_release(g->placer, t->place), next);
    /* A continuation: the first one to fail or be cancelled decides how
     * its root ends (weft_ctx_continue); the root's op it held goes last,
     * below, after everything else here touched this task. */
    weft__task *root = t->cont_of;
    if (root && final != WEFT__T_COMPLETED) {
        int none = 0;
        if (atomic_compare_exchange_strong(&root->cont_final, &none, final))
            root->cont_result = t->result;
    }
    if (!t->proxy)
        count_final(g, final, !(t->continued && !t->cont_of));
    else
        atomic_fetch_add(&g->proxies_final, 1);
    if (atomic_load(&t->waiters) > 0)
        weft__wake(g->ws, t);
    if (atomic_load(&g->sleepers_any) > 0)
        weft__wake(g->ws, &weft__key_any_final);
    const weft__task_stats *here = weft__tls_stats;
    if (!(here && here->owner == g && here->settle_later) && atomic_load(&g->sleepers_settle) > 0)
        weft__wake(g->ws, &weft__key_settle);
    if (!t->proxy)
        weft__graph_leave(g, 1); /* (the root still counts: the runtime stays open) */
    weft__task_unref(t);
    if (root && atomic_fetch_sub_explicit(&root->ops, 1, memory_order_acq_rel) == 1)
        ops_finished(root, next);
}
