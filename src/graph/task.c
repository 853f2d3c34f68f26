/*
 * graph/task.c — task objects: spawn, dependencies, execution, completion,
 * failure and cancellation propagation, waits.
 *
 * Dependencies are edges owned by the successor and pushed onto the
 * predecessor's lock-free successor list; finishing a task swaps that list
 * for WEFT__CLOSED and releases each successor whose pending count reaches
 * zero.  No lock is taken on the spawn -> run -> complete path except the
 * locks of the data handles a task names (spawn only) and the per-worker
 * queue locks.
 */
#include "internal.h"

#include <string.h>
#include <time.h>

struct weft_ctx {
    weft__rt *rt;
    weft__worker *worker;
    weft__task *task;
};

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

void weft_task_desc_init(weft_task_desc *d)
{
    if (d)
        memset(d, 0, sizeof *d);
}

static weft__task *task_get(const weft_task *h)
{
    weft__task *t = weft__handle_decode(h);
    if (!t || t->slot.pool_id != WEFT__POOL_TASK || !atomic_load_explicit(&t->handle_live, memory_order_acquire))
        return NULL;
    return t;
}

static void task_free(weft__task *t)
{
    if (atomic_load_explicit(&t->state, memory_order_relaxed) == WEFT_TASK_SPAWNING)
        for (uint32_t i = 0; i < t->naccess; i++)
            weft__data_finish_use(t->access[i].data); /* a spawn that failed: unpin */
    if (t->edges != t->edge_inline)
        weft__free(t->edges);
    if (t->access != t->access_inline)
        weft__free(t->access);
    weft__slot_free(t);
}

void weft__task_unref(weft__task *t)
{
    int32_t before = atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel);
    WEFT__CHECK(before > 0);
    if (before == 1)
        task_free(t);
}

/* Mark t as not to run, naming the root cause.  The first caller wins; the
 * cause fields are published by the DOOMED store. */
static bool doom(weft__task *t, uint64_t cause_id, const char *cause_name)
{
    int expected = WEFT__GATE_OPEN;
    if (!atomic_compare_exchange_strong(&t->run_gate, &expected, WEFT__GATE_DOOMING))
        return false;
    t->cause_id = cause_id;
    copy_name(t->cause_name, cause_name);
    atomic_store_explicit(&t->run_gate, WEFT__GATE_DOOMED, memory_order_release);
    return true;
}

/* The cause a finished, unsuccessful task passes on to its dependents. */
static void cause_of(const weft__task *p, int final, uint64_t *id, const char **name)
{
    if (final == WEFT_TASK_FAILED) {
        *id = p->id;
        *name = p->name;
    } else {
        *id = p->cause_id;
        *name = p->cause_name;
    }
}

void weft__task_ready(weft__rt *rt, weft__task *t, weft__task **next)
{
    atomic_store_explicit(&t->state, WEFT_TASK_READY, memory_order_relaxed);
    /* The finishing worker runs the first task it releases right away (no
     * queue round trip) unless its queue holds ready work, which may have
     * higher priority: then the queue decides. */
    if (next && !*next && atomic_load_explicit(&weft__tls_worker->qsize, memory_order_relaxed) == 0) {
        *next = t;
        return;
    }
    weft__submit(rt, t);
}

/* Link edge e (successor t) into p's successor list.  Returns false if p has
 * already finished, after applying its outcome to t. */
static bool link_edge(weft__task *p, weft__edge *e)
{
    weft__edge *head = atomic_load_explicit(&p->successors, memory_order_acquire);
    for (;;) {
        if (head == WEFT__CLOSED) {
            int final = atomic_load_explicit(&p->state, memory_order_acquire);
            if (final != WEFT_TASK_COMPLETED && e->propagate) {
                uint64_t id;
                const char *name;
                cause_of(p, final, &id, &name);
                doom(e->succ, id, name);
            }
            return false;
        }
        e->next = head;
        if (atomic_compare_exchange_weak_explicit(&p->successors, &head, e, memory_order_acq_rel,
                                                  memory_order_acquire))
            return true;
    }
}

/* Called with the data handles locked (access.c): add edge p -> t. */
void weft__edge_add(weft__task *t, weft__edge *e, weft__task *p, bool propagate)
{
    e->succ = t;
    e->pred = p;
    e->pred_gen = atomic_load_explicit(&p->slot.gen, memory_order_relaxed);
    e->propagate = propagate;
    if (!link_edge(p, e))
        atomic_fetch_sub_explicit(&t->pending, 1, memory_order_relaxed);
}

/* ------------------------------------------------------------------------ */
/* Spawn                                                                     */
/* ------------------------------------------------------------------------ */

static int spawn_fail(const weft_task_desc *d, int code)
{
    if (d && d->arg_destroy)
        d->arg_destroy(d->arg);
    return code;
}

static int cmp_access(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const weft__task_access *)a)->data;
    uintptr_t y = (uintptr_t)((const weft__task_access *)b)->data;
    return x < y ? -1 : x > y;
}

/* Backpressure: keep the number of tasks waiting to run bounded so that an
 * unbounded producer runs in bounded memory.  The backlog counts tasks in
 * flight whose bodies are not executing (bodies suspended in a wait or in
 * this very throttle are producers, not backlog: counting them could make
 * producers wait for each other forever). */
static int64_t backlog(weft__rt *rt)
{
    int64_t executing = 0;
    for (unsigned i = 0; i < rt->nworkers; i++)
        executing += atomic_load_explicit(&rt->workers[i].depth, memory_order_relaxed);
    return atomic_load(&rt->inflight) - executing;
}

/* Tasks that count against max_inflight, not counting the `self` counts the
 * calling spawn holds itself (see weft_spawn). */
static int64_t pressure(weft__rt *rt, int64_t self)
{
    return (weft__on_own_worker(rt) ? backlog(rt) : atomic_load(&rt->inflight)) - self;
}

/* Block (outside) or help (inside a task) until the pressure drops to the
 * low mark.  Called when it reached max_inflight. */
static void throttle(weft__rt *rt, int64_t self)
{
    int64_t low = rt->throttle_low;
    weft__worker *w = weft__tls_worker;
    if (weft__on_own_worker(rt)) {
        /* From a task: help.  With nothing to help with, wait while other
         * workers make progress; if nothing finishes for a millisecond, the
         * backlog may be waiting for this very producer (a child that
         * depends on its parent): let the spawn through rather than hang. */
        int64_t last = pressure(rt, self);
        uint64_t stalled_since = weft__now_ns();
        while (last > low) {
            if (weft__help_waiting(w, NULL)) {
                stalled_since = weft__now_ns();
            } else {
                struct timespec ts = {0, 20000};
                nanosleep(&ts, NULL);
                if (weft__now_ns() - stalled_since > 1000000)
                    break;
            }
            int64_t now = pressure(rt, self);
            if (now < last)
                stalled_since = weft__now_ns();
            last = now;
        }
        return;
    }
    /* From outside: sleep until enough tasks have finished (weft__rt_leave
     * signals at the low mark; the timed wait is a safety net for counts
     * that several sleepers hold at once). */
    pthread_mutex_lock(&rt->wait_lock);
    atomic_fetch_add(&rt->sleepers_throttle, 1);
    while (pressure(rt, self) > low) {
        uint64_t until = weft__now_ns() + 1000000;
        struct timespec ts = {(time_t)(until / 1000000000u), (long)(until % 1000000000u)};
        pthread_cond_timedwait(&rt->wait_cond, &rt->wait_lock, &ts);
    }
    atomic_fetch_sub(&rt->sleepers_throttle, 1);
    pthread_mutex_unlock(&rt->wait_lock);
}

#define STACK_ACCESSES 16

static int spawn_entered(weft__rt *rt, weft_runtime *h, const weft_task_desc *d, weft_task **out);

int weft_spawn(weft_runtime *h, const weft_task_desc *d, weft_task **out)
{
    weft__clear_error();
    int err;
    /* Entering counts the spawn as in flight, so a destroy racing with it
     * waits for it; a spawned task keeps that count until it finishes.  An
     * outside thread holds a second count until it returns: once the task
     * is queued it may finish at once, and destroy must not free the
     * workers while this call still wakes one of them.  (A decoded handle
     * that is stale just fails in weft__rt_enter.) */
    const weft__rt *guess = weft__handle_decode(h);
    bool outside = !(guess && weft__on_own_worker(guess));
    int64_t held = outside ? 2 : 1;
    weft__rt *rt = weft__rt_enter(h, "weft_spawn", &err, held);
    if (!rt)
        return spawn_fail(d, err);
    int rc = spawn_entered(rt, h, d, out);
    if (rc == 0) {
        int64_t now = atomic_load_explicit(&rt->inflight, memory_order_relaxed) - (held - 1);
        int64_t peak = atomic_load_explicit(&rt->inflight_peak, memory_order_relaxed);
        while (now > peak && !atomic_compare_exchange_weak(&rt->inflight_peak, &peak, now))
            ;
        held--; /* the task keeps one */
    }
    if (held)
        weft__rt_leave(rt, held);
    return rc;
}

static int spawn_entered(weft__rt *rt, weft_runtime *h, const weft_task_desc *d, weft_task **out)
{
    if (!d)
        return weft__error(WEFT_EINVAL, "weft_spawn: descriptor is NULL");
    if (!d->body)
        return spawn_fail(d, weft__error(WEFT_EINVAL, "weft_spawn: descriptor has no body"));
    if (d->ndeps && !d->deps)
        return spawn_fail(d, weft__error(WEFT_EINVAL, "weft_spawn: ndeps is %zu but deps is NULL", d->ndeps));
    if (d->naccesses && !d->accesses)
        return spawn_fail(d, weft__error(WEFT_EINVAL, "weft_spawn: naccesses is %zu but accesses is NULL",
                                         d->naccesses));
    if (d->flags & ~(unsigned)WEFT_SPAWN_NOWAIT)
        return spawn_fail(d, weft__error(WEFT_EINVAL, "weft_spawn: unknown flags 0x%x", d->flags));
    if (d->naccesses > UINT16_MAX || d->ndeps > UINT32_MAX / 2)
        return spawn_fail(d, weft__error(WEFT_EINVAL, "weft_spawn: too many dependencies or accesses"));
    for (size_t i = 0; i < d->ndeps; i++) {
        weft__task *p = task_get(d->deps[i]);
        if (!p)
            return spawn_fail(d, weft__error(WEFT_EINVAL, "weft_spawn: dependency %zu is NULL or was released", i));
        if (p->rt_handle != (const void *)h)
            return spawn_fail(d, weft__error(WEFT_EINVAL, "weft_spawn: dependency %zu belongs to another runtime", i));
    }
    for (size_t i = 0; i < d->naccesses; i++) {
        const weft_access *a = &d->accesses[i];
        weft__data *dd = weft__data_get(a->data);
        if (!dd)
            return spawn_fail(d, weft__error(WEFT_EINVAL, "weft_spawn: data of access %zu is NULL or unregistered", i));
        if (dd->rt_handle != (const void *)h)
            return spawn_fail(d, weft__error(WEFT_EINVAL, "weft_spawn: data of access %zu belongs to another runtime", i));
        unsigned m = a->mode;
        if ((m & ~(unsigned)(WEFT_RW | WEFT_COMMUTE)) || !(m & WEFT_RW) ||
            ((m & WEFT_COMMUTE) && (m & WEFT_RW) != WEFT_RW))
            return spawn_fail(d, weft__error(WEFT_EINVAL, "weft_spawn: access %zu has invalid mode 0x%x "
                                                          "(WEFT_R, WEFT_W, WEFT_RW, or WEFT_RW|WEFT_COMMUTE)", i, m));
    }

    /* This call holds one count in inflight (two from an outside thread). */
    int64_t self = weft__on_own_worker(rt) ? 1 : 2;
    if (atomic_load_explicit(&rt->inflight, memory_order_relaxed) - self >= (int64_t)rt->max_inflight &&
        pressure(rt, self) >= (int64_t)rt->max_inflight) {
        if (d->flags & WEFT_SPAWN_NOWAIT)
            return weft__error(WEFT_EAGAIN, "weft_spawn: %zu tasks in flight (max_inflight)", rt->max_inflight);
        throttle(rt, self);
    }

    weft__task *t = weft__slot_alloc(WEFT__POOL_TASK);
    if (!t)
        return spawn_fail(d, weft__error(WEFT_ENOMEM, "weft_spawn: out of memory"));
    atomic_init(&t->state, WEFT_TASK_SPAWNING);
    size_t extra = 0;
    uint32_t na = (uint32_t)d->naccesses;
    t->access = t->access_inline;
    if (na > WEFT__INLINE_ACCESSES) {
        t->access = weft__alloc(sizeof(weft__task_access) * na);
        if (!t->access) {
            t->access = t->access_inline;
            task_free(t);
            return spawn_fail(d, weft__error(WEFT_ENOMEM, "weft_spawn: out of memory"));
        }
        extra += sizeof(weft__task_access) * na;
    }
    /* Pin each data handle (count this task as a user) so that an unregister
     * racing with this spawn waits for the task instead of freeing the
     * handle under it. */
    for (uint32_t i = 0; i < na; i++) {
        weft__data *dd = weft__data_pin(d->accesses[i].data);
        if (!dd) {
            task_free(t);
            return spawn_fail(d, weft__error(WEFT_EINVAL, "weft_spawn: data of access %u is being unregistered", i));
        }
        t->access[i].data = dd;
        t->access[i].mode = d->accesses[i].mode;
        t->naccess = (uint16_t)(i + 1);
        if (d->accesses[i].mode & WEFT_COMMUTE)
            t->has_commute = true;
    }

    /* Unique data in address order (modes merged): the order in which the
     * handles are locked, so concurrent spawns cannot deadlock. */
    weft__task_access stack_sorted[STACK_ACCESSES];
    weft__task_access *sorted = stack_sorted;
    if (na > STACK_ACCESSES) {
        sorted = weft__alloc(sizeof(weft__task_access) * na);
        if (!sorted) {
            task_free(t);
            return spawn_fail(d, weft__error(WEFT_ENOMEM, "weft_spawn: out of memory"));
        }
    }
    memcpy(sorted, t->access, sizeof(weft__task_access) * na);
    if (na > 1)
        qsort(sorted, na, sizeof *sorted, cmp_access);
    uint32_t nu = 0;
    for (uint32_t i = 0; i < na; i++) {
        if (nu && sorted[nu - 1].data == sorted[i].data) {
            unsigned a = sorted[nu - 1].mode, b = sorted[i].mode;
            unsigned commute = a & b & WEFT_COMMUTE; /* commutes only if every access does */
            sorted[nu - 1].mode = ((a | b) & WEFT_RW) | commute;
        } else {
            sorted[nu++] = sorted[i];
        }
    }

    weft__data_lock_all(sorted, nu);
    uint32_t ninferred = 0;
    int rc = weft__access_plan(sorted, nu, &ninferred);
    uint32_t nedges = (uint32_t)d->ndeps + ninferred;
    t->edges = t->edge_inline;
    if (rc == 0 && nedges > WEFT__INLINE_EDGES) {
        t->edges = weft__alloc(sizeof(weft__edge) * nedges);
        if (!t->edges) {
            t->edges = t->edge_inline;
            rc = WEFT_ENOMEM;
        }
        extra += sizeof(weft__edge) * nedges;
    }
    if (rc != 0) {
        weft__data_unlock_all(sorted, nu);
        if (sorted != stack_sorted)
            weft__free(sorted);
        task_free(t);
        return spawn_fail(d, weft__error(rc, "weft_spawn: out of memory"));
    }

    /* From here on nothing can fail. */
    t->rt = rt;
    t->rt_handle = h;
    t->nedges = nedges;
    t->body = d->body;
    t->arg = d->arg;
    t->arg_destroy = d->arg_destroy;
    t->priority = d->priority;
    copy_name(t->name, d->name);
    t->epoch = atomic_load_explicit(&rt->cancel_epoch, memory_order_acquire);
    atomic_init(&t->successors, NULL);
    atomic_init(&t->state, WEFT_TASK_WAITING);
    atomic_init(&t->run_gate, WEFT__GATE_OPEN);
    atomic_init(&t->pending, (int32_t)nedges + 1);
    atomic_init(&t->refs, 1 + (out ? 1 : 0) + (int32_t)nu);
    atomic_init(&t->handle_live, out != NULL);
    t->id = atomic_fetch_add_explicit(&rt->next_id, 1, memory_order_relaxed);
    if (extra)
        atomic_fetch_add_explicit(&rt->extra_bytes, extra, memory_order_relaxed);

    for (size_t i = 0; i < d->ndeps; i++)
        weft__edge_add(t, &t->edges[i], task_get(d->deps[i]), true);
    weft__access_link(t, sorted, nu, t->edges + d->ndeps);
    weft__data_unlock_all(sorted, nu);
    if (sorted != stack_sorted)
        weft__free(sorted);

    if (out)
        *out = weft__handle_encode(t);
    /* Drop the spawn guard; if every dependency is already done, it is ready. */
    if (atomic_fetch_sub_explicit(&t->pending, 1, memory_order_acq_rel) == 1)
        weft__task_ready(rt, t, NULL);
    return 0;
}

int weft_spawn_simple(weft_runtime *rt, weft_body_fn body, void *arg, weft_task **out)
{
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = body;
    d.arg = arg;
    return weft_spawn(rt, &d, out);
}

/* ------------------------------------------------------------------------ */
/* Execution and completion                                                  */
/* ------------------------------------------------------------------------ */

static void finish(weft__worker *w, weft__task *t, int final, weft__task **next)
{
    weft__rt *rt = t->rt;
    WEFT__CHECK(atomic_load_explicit(&t->state, memory_order_relaxed) < WEFT_TASK_COMPLETED);
    if (final == WEFT_TASK_FAILED)
        atomic_fetch_add(&rt->failures, 1); /* before inflight drops: wait_all must see it */
    atomic_store(&t->state, final);
    weft__edge *e = atomic_exchange_explicit(&t->successors, WEFT__CLOSED, memory_order_acq_rel);
    uint64_t cid = 0;
    const char *cname = NULL;
    if (final != WEFT_TASK_COMPLETED)
        cause_of(t, final, &cid, &cname);
    while (e) {
        /* Read the edge before releasing its owner: once pending reaches
         * zero the successor may run, finish and free its edges. */
        weft__edge *following = e->next;
        weft__task *s = e->succ;
        if (final != WEFT_TASK_COMPLETED && e->propagate)
            doom(s, cid, cname);
        if (atomic_fetch_sub_explicit(&s->pending, 1, memory_order_acq_rel) == 1)
            weft__task_ready(rt, s, next);
        e = following;
    }
    for (uint32_t i = 0; i < t->naccess; i++)
        weft__data_finish_use(t->access[i].data);
    if (t->arg_destroy) {
        t->arg_destroy(t->arg);
        t->arg_destroy = NULL;
    }
    if (final == WEFT_TASK_FAILED)
        weft__count(&w->n_failed, 1);
    else if (final == WEFT_TASK_CANCELLED)
        weft__count(&w->n_cancelled, 1);

    if (atomic_load(&t->waiters) > 0)
        weft__wake_sleepers(rt);
    weft__rt_leave(rt, 1);
    weft__task_unref(t);
}

void weft__task_execute(weft__worker *w, weft__task *t, weft__task **next)
{
    weft__rt *rt = t->rt;
    /* Commuting tasks first take their data's exclusion; if another member
     * holds it, the task waits on that data and is resubmitted later. */
    if (t->has_commute && !weft__commute_acquire(t))
        return;
    int gate = WEFT__GATE_OPEN;
    bool run = atomic_compare_exchange_strong(&t->run_gate, &gate, WEFT__GATE_STARTED);
    if (!run) {
        while (atomic_load_explicit(&t->run_gate, memory_order_acquire) == WEFT__GATE_DOOMING)
            weft__cpu_relax();
    } else if (t->epoch != atomic_load_explicit(&rt->cancel_epoch, memory_order_acquire)) {
        run = false; /* weft_cancel_pending came after its spawn */
        t->cause_id = t->id;
        copy_name(t->cause_name, t->name);
    }
    int final;
    if (run) {
        atomic_store_explicit(&t->state, WEFT_TASK_RUNNING, memory_order_relaxed);
        struct weft_ctx ctx = {rt, w, t};
        t->outer = w->current;
        w->current = t;
        atomic_store_explicit(&w->depth, atomic_load_explicit(&w->depth, memory_order_relaxed) + 1,
                              memory_order_relaxed);
        uint64_t t0 = rt->trace_path ? weft__now_ns() : 0;
        int r = t->body(&ctx, t->arg);
        if (rt->trace_path)
            weft__trace_record(w, t, t0, weft__now_ns());
        atomic_store_explicit(&w->depth, atomic_load_explicit(&w->depth, memory_order_relaxed) - 1,
                              memory_order_relaxed);
        w->current = t->outer;
        t->outer = NULL;
        t->result = r;
        final = r == 0 ? WEFT_TASK_COMPLETED : WEFT_TASK_FAILED;
        weft__count(&w->n_run, 1);
    } else {
        final = WEFT_TASK_CANCELLED;
    }
    if (t->has_commute)
        weft__commute_release(t, next);
    finish(w, t, final, next);
}

/* ------------------------------------------------------------------------ */
/* Waiting and inspection                                                    */
/* ------------------------------------------------------------------------ */

static bool is_final(int s) { return s >= WEFT_TASK_COMPLETED; }

static int outcome(const weft__task *t)
{
    switch (atomic_load(&t->state)) {
    case WEFT_TASK_COMPLETED:
        return 0;
    case WEFT_TASK_FAILED:
        return weft__error(WEFT_ETASKFAILED, "task %llu '%s' failed: its body returned %d",
                           (unsigned long long)t->id, t->name, t->result);
    default:
        return weft__error(WEFT_ECANCELLED, "task %llu '%s' was cancelled because task %llu '%s' %s",
                           (unsigned long long)t->id, t->name, (unsigned long long)t->cause_id, t->cause_name,
                           t->cause_id == t->id ? "was cancelled by request" : "failed or was cancelled");
    }
}

int weft_task_timedwait(weft_task *h, uint64_t timeout_ns)
{
    weft__clear_error();
    weft__task *t = task_get(h);
    if (!t)
        return weft__error(WEFT_EINVAL, "weft_task_wait: task is NULL or was released");
    if (is_final(atomic_load(&t->state)))
        return outcome(t);
    weft__rt *rt = t->rt;
    weft__worker *w = weft__tls_worker;
    bool helping = w && w->rt == rt;
    if (helping) {
        if (w->current == t)
            return weft__error(WEFT_EBUSY, "weft_task_wait: task %llu '%s' waits for itself",
                               (unsigned long long)t->id, t->name);
        for (weft__task *x = w->current; x; x = x->outer)
            if (x == t)
                return weft__error(WEFT_EDEADLK, "weft_task_wait: task %llu '%s' is suspended below the "
                                                 "caller on this worker and cannot finish first",
                                   (unsigned long long)t->id, t->name);
    }
    uint64_t start = weft__now_ns();
    uint64_t deadline = timeout_ns > UINT64_MAX - start ? UINT64_MAX : start + timeout_ns;
    unsigned idle = 0;
    while (!is_final(atomic_load(&t->state))) {
        /* From a task: run the awaited task, or one of its queued
         * predecessors, here (see weft__help_waiting).  Anywhere: spin a
         * little before sleeping. */
        if (helping && weft__help_waiting(w, t)) {
            idle = 0;
            continue;
        }
        if (weft__now_ns() >= deadline)
            return weft__error(WEFT_ETIMEDOUT, "weft_task_wait: task %llu '%s' not finished in time",
                               (unsigned long long)t->id, t->name);
        if (++idle < 2000) {
            weft__cpu_relax();
            continue;
        }
        /* Sleep until the task finishes (or, from a worker, briefly: new
         * work does not signal this condition). */
        uint64_t until = deadline;
        if (helping && until - weft__now_ns() > 100000)
            until = weft__now_ns() + 100000;
        struct timespec ts = {(time_t)(until / 1000000000u), (long)(until % 1000000000u)};
        pthread_mutex_lock(&rt->wait_lock);
        atomic_fetch_add(&t->waiters, 1);
        if (!is_final(atomic_load(&t->state))) {
            if (until == UINT64_MAX)
                pthread_cond_wait(&rt->wait_cond, &rt->wait_lock);
            else
                pthread_cond_timedwait(&rt->wait_cond, &rt->wait_lock, &ts);
        }
        atomic_fetch_sub(&t->waiters, 1);
        pthread_mutex_unlock(&rt->wait_lock);
    }
    return outcome(t);
}

int weft_task_wait(weft_task *t) { return weft_task_timedwait(t, UINT64_MAX); }

int weft_task_status_get(const weft_task *h, weft_task_status *out)
{
    weft__task *t = task_get(h);
    if (!t)
        return weft__error(WEFT_EINVAL, "weft_task_status_get: task is NULL or was released");
    if (!out)
        return weft__error(WEFT_EINVAL, "weft_task_status_get: out is NULL");
    *out = (weft_task_status)atomic_load(&t->state);
    return 0;
}

int weft_task_info_get(const weft_task *h, weft_task_info *out)
{
    weft__task *t = task_get(h);
    if (!t)
        return weft__error(WEFT_EINVAL, "weft_task_info_get: task is NULL or was released");
    if (!out)
        return weft__error(WEFT_EINVAL, "weft_task_info_get: out is NULL");
    memset(out, 0, sizeof *out);
    out->id = t->id;
    out->status = (weft_task_status)atomic_load(&t->state);
    memcpy(out->name, t->name, sizeof out->name);
    if (out->status == WEFT_TASK_FAILED || out->status == WEFT_TASK_COMPLETED)
        out->result = t->result;
    if (out->status == WEFT_TASK_CANCELLED) {
        out->cause_id = t->cause_id;
        memcpy(out->cause_name, t->cause_name, sizeof out->cause_name);
    }
    return 0;
}

int weft_task_cancel(weft_task *h)
{
    weft__task *t = task_get(h);
    if (!t)
        return weft__error(WEFT_EINVAL, "weft_task_cancel: task is NULL or was released");
    doom(t, t->id, t->name);
    return 0;
}

void weft_task_release(weft_task *h)
{
    weft__task *t = task_get(h);
    if (!t)
        return;
    bool live = true;
    if (atomic_compare_exchange_strong(&t->handle_live, &live, false))
        weft__task_unref(t);
}

/* ------------------------------------------------------------------------ */
/* Inside a body                                                             */
/* ------------------------------------------------------------------------ */

weft_runtime *weft_ctx_runtime(const weft_ctx *ctx) { return ctx ? weft__handle_encode(ctx->rt) : NULL; }

unsigned weft_ctx_worker(const weft_ctx *ctx) { return ctx ? ctx->worker->index : 0; }

void *weft_ctx_data(const weft_ctx *ctx, size_t i)
{
    if (!ctx || i >= ctx->task->naccess)
        return NULL;
    return weft__host_device.replica(ctx->task->access[i].data);
}
