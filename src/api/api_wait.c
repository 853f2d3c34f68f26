/*
 * api/api_wait.c — the runtime's waits, each a spec for the wait engine
 * (src/wait.c): a task, all tasks, backpressure, an unregister.  Each says
 * what ends it (the key a notifier names), what the waiting thread may help
 * with, and whether a waiting worker counts as blocked; and the runtime's
 * progress step for the engine (devices that find completions by polling,
 * the pollset: wait.h).
 */
#include "api/runtime.h"

static bool task_final(const void *arg)
{
    const weft__task *t = arg;
    return weft__state_final(atomic_load(&((weft__task *)t)->state));
}

typedef struct help_arg {
    weft__rt *rt;
    weft__worker *w;
    weft__task *t;
    weft__data *d;
    bool frame;                        /* the wait published its frame (frame_put) */
} help_arg;

static bool another_worker_idle(const weft__worker *w)
{
    const weft__rt *rt = w->rt;
    for (unsigned i = 0; i < rt->nworkers; i++)
        if (&rt->workers[i] != w && atomic_load_explicit(&rt->workers[i].idle_since, memory_order_relaxed))
            return true;
    return false;
}

/* Past max_nesting nested bodies, run only the awaited task itself and leave
 * its predecessors to idle workers, if there are any (bounds stack use). */
static bool deep(const weft__worker *w)
{
    return atomic_load_explicit(&w->depth, memory_order_relaxed) >= (int64_t)w->rt->cfg.max_nesting &&
           another_worker_idle(w);
}

/* A wait with a published frame found nothing it could run among the
 * tasks queued before `pushes`: say so (wait_seen).  A new look may settle
 * the runtime: a thread waiting for that looks again.  (Sequentially
 * consistent, as that thread's count of itself and its look at wait_seen:
 * one of the two sees the other.) */
static void looked(help_arg *a, uint64_t pushes)
{
    if (atomic_exchange(&a->w->wait_seen, pushes) != pushes && atomic_load(&a->rt->graph.sleepers_settle) > 0)
        weft__wake(&a->rt->waits, &weft__key_settle);
}

/* Run the awaited task, or one it waits for, if one is queued.  When none
 * is, a wait that published its frame says which queued tasks it has
 * looked at: those pushed before the look (settled).  (A timed wait nested
 * above such a frame leaves it alone: its looks are for another task.) */
static bool help_task(void *arg)
{
    help_arg *a = arg;
    uint64_t pushes = a->frame ? weft__sched_pushes(&a->rt->sched) : 0;
    if (weft__help_task(a->w, a->t, !deep(a->w)))
        return true;
    if (a->frame)
        looked(a, pushes);
    return false;
}

void weft__rt_progress(void *arg)
{
    weft__rt *rt = arg;
    for (unsigned i = 1; i < rt->ndev; i++)
        if (rt->dev[i]->ops->progress)
            rt->dev[i]->ops->progress(rt->dev[i]);
    weft__poll_waiting(&rt->polls, atomic_load_explicit(&rt->yield_idle, memory_order_relaxed));
}

static bool any_polled_device(const weft__rt *rt)
{
    for (unsigned i = 1; i < rt->ndev; i++)
        if (rt->dev[i]->ops->progress)
            return true;
    return false;
}

int weft__rt_poller_add(weft__rt *rt, weft__poll_fn fn, void *arg, int *slot)
{
    const weft__poll_ops ops = {"weft__rt_poller_add", fn};
    return weft__poller_add(&rt->polls, &ops, arg, slot);
}

void weft__rt_poller_remove(weft__rt *rt, int slot) { weft__poller_remove(&rt->polls, slot); }

/* The spin of this thread's waits when it is not a worker (wait.h). */
static _Thread_local weft__spin_adapt tl_outside_spin;

/* What every runtime wait shares: its key and condition, the progress step
 * (when a device finds completions by polling, or a progress step is
 * registered: a communicator across ranks), the interest
 * counter its notifier reads, the deadline, a brief spin (adapting, on a
 * thread outside the workers: tl_outside_spin). */
static weft__wait spec_of(weft__rt *rt, const void *key, bool (*done)(const void *), const void *arg,
                          _Atomic int32_t *interest, uint64_t deadline)
{
    weft__wait w = {
        .key = key,
        .done = done,
        .arg = arg,
        .progress = any_polled_device(rt) || weft__pollers_any(&rt->polls)
                        ? weft__rt_progress
                        : NULL,
        .progress_arg = rt,
        .interest = interest,
        .deadline = deadline,
        .spin = 2000,
        .adapt = weft__tls_worker ? NULL : &tl_outside_spin,
    };
    return w;
}

static bool settled(const void *arg);
static size_t stuck_targets(weft__rt *rt, char *buf, size_t len);

size_t weft__stalled_keys(weft__rt *rt, char *key)
{
    return settled(rt) ? weft__spaces_unspawned(rt, key) : 0;
}

size_t weft__deadlocked(weft__rt *rt, char *what, size_t len)
{
    char key[32];
    if (!settled(rt) || weft__spaces_unspawned(rt, key) > 0)
        return 0;
    return stuck_targets(rt, what, len);
}

/* Wait as spec says (a thread outside the runtime's workers: inside a body
 * the body itself is running, so nothing is settled), saying once on stderr
 * when the wait has gone on for cfg.stall_warn_ms while only a spawn of a
 * key nobody has spawned can move what is left: a program that never
 * spawns it would hang without a word.  what: the caller, for the message. */
static int wait_telling_stalls(weft__rt *rt, weft__wait *spec, const char *what)
{
    uint64_t deadline = spec->deadline, grace = rt->cfg.stall_warn_ms;
    if (grace == UINT64_MAX || weft__tls_worker)
        return weft__wait_until(&rt->waits, spec);
    uint64_t start = weft__now_ns();
    uint64_t step = grace > (UINT64_MAX - start) / 1000000 ? UINT64_MAX : start + grace * 1000000;
    for (;;) {
        spec->deadline = step < deadline ? step : deadline;
        if (weft__wait_until(&rt->waits, spec) == 0)
            return 0;
        if (spec->deadline == deadline)
            return WEFT_ETIMEDOUT;
        char key[32], targets[160];
        if (settled(rt) && weft__spaces_unspawned(rt, key) > 0) {
            fprintf(stderr, "weft: %s has waited %.1f s while every task left waits for task-space keys "
                            "nobody has spawned, such as %s: only a spawn of them ends this wait (spawn the "
                            "key, or destroy its space to cancel what waits for it)\n",
                    what, (double)(weft__now_ns() - start) / 1e9, key);
            spec->deadline = deadline;
            return weft__wait_until(&rt->waits, spec);
        }
        if (weft__deadlocked(rt, targets, sizeof targets) > 0) {
            fprintf(stderr, "weft: %s has waited %.1f s while no task can move: bodies wait, without a "
                            "timeout, for tasks that cannot end (%s): the waits are a deadlock (bodies waiting "
                            "for each other, or for tasks queued behind waiting bodies on every worker); wait "
                            "with dependencies (deps) instead, or give the waits a timeout\n",
                    what, (double)(weft__now_ns() - start) / 1e9, targets);
            spec->deadline = deadline;
            return weft__wait_until(&rt->waits, spec);
        }
        step = spec->deadline + 1000000 * (grace < 1000 ? grace : 1000); /* look again */
    }
}

void weft__wait_cond(weft__rt *rt, const void *key, bool (*done)(const void *), const void *arg,
                     _Atomic int32_t *interest)
{
    weft__wait spec = spec_of(rt, key, done, arg, interest, UINT64_MAX);
    weft__worker *w = weft__tls_worker;
    if (w && w->rt == rt)
        spec.blocked = &w->blocked;
    (void)weft__wait_until(&rt->waits, &spec);
}

/* A worker's copy of the tasks of an untimed wait for any (worker.h):
 * `older`, the buffer it outgrew; `cap` set before it is published. */
struct weft__wait_set {
    struct weft__wait_set *older;
    size_t cap;
    weft__task *_Atomic t[];
};

/* A body's untimed wait as the settle check sees it: the task (on), or
 * the n tasks of a wait for any (the caller's array `any`, copied into the
 * worker's buffer when published), and the depth of bodies when it began;
 * all empty: none. */
typedef struct wait_frame {
    weft__task *on;
    weft__task *const *any;
    size_t n;
    int64_t depth;
} wait_frame;

/* w's innermost published frame (w's own thread). */
static wait_frame frame_get(weft__worker *w)
{
    return (wait_frame){atomic_load_explicit(&w->wait_on, memory_order_relaxed), w->wait_any_src,
                        atomic_load_explicit(&w->wait_any_n, memory_order_relaxed),
                        atomic_load_explicit(&w->wait_depth, memory_order_relaxed)};
}

/* A buffer of w's with room for n tasks (w's own thread): its own, or a
 * larger one that keeps its own as `older` (frame_put publishes it);
 * NULL when out of memory. */
static struct weft__wait_set *frame_room(weft__worker *w, size_t n)
{
    struct weft__wait_set *s = atomic_load_explicit(&w->wait_any, memory_order_relaxed);
    if (s && s->cap >= n)
        return s;
    size_t cap = s ? s->cap : 8;
    while (cap < n)
        cap *= 2;
    struct weft__wait_set *b = weft__alloc(sizeof *b + cap * sizeof b->t[0]);
    if (!b)
        return NULL;
    b->older = s;
    b->cap = cap;
    for (size_t i = 0; i < cap; i++)
        atomic_init(&b->t[i], NULL);
    return b;
}

/* Publish f as w's innermost untimed body wait (w's own thread; a wait
 * for any copied into `set`, a buffer of frame_room's with room for it),
 * which has not looked for work yet.  Every store sequentially consistent,
 * as the reader's loads (stuck_on): a reader that sees any of the new
 * fields sees the odd count before them, or the count after them.  (No
 * fences: ThreadSanitizer does not support them.) */
static void frame_put(weft__worker *w, wait_frame f, struct weft__wait_set *set)
{
    uint32_t seq = atomic_load_explicit(&w->wait_seq, memory_order_relaxed);
    atomic_store(&w->wait_seq, seq + 1);
    atomic_store(&w->wait_on, f.on);
    if (f.n) {
        for (size_t i = 0; i < f.n; i++)
            atomic_store(&set->t[i], f.any[i]);
        atomic_store(&w->wait_any, set);
    }
    atomic_store(&w->wait_any_n, f.n);
    w->wait_any_src = f.any;
    atomic_store(&w->wait_depth, f.depth);
    atomic_store(&w->wait_seen, UINT64_MAX);
    atomic_store(&w->wait_seq, seq + 2);
}

void weft__wait_frames_fini(weft__rt *rt)
{
    for (unsigned i = 0; i < rt->nworkers; i++) {
        struct weft__wait_set *s = atomic_load(&rt->workers[i].wait_any);
        while (s) {
            struct weft__wait_set *older = s->older;
            weft__free(s);
            s = older;
        }
        atomic_store(&rt->workers[i].wait_any, NULL);
    }
}

int weft__wait_task(weft__rt *rt, weft__task *t, uint64_t deadline)
{
    weft__worker *w = weft__tls_worker;
    bool helping = w && w->rt == rt;
    help_arg a = {rt, w, t, NULL, deadline == UINT64_MAX};
    weft__wait spec = spec_of(rt, t, task_final, t, &t->waiters, deadline);
    if (!helping)
        return wait_telling_stalls(rt, &spec, "weft_task_wait");
    spec.help = help_task;
    spec.help_arg = &a;
    spec.blocked = &w->blocked;
    /* Published while it waits, without a deadline: while t is not final
     * and nothing runs on this worker above the waiting body, every body
     * here is stuck, and the settle check counts them (settled).  A thread
     * waiting for the runtime to settle looks again.  (Sequentially
     * consistent, as that thread's count of itself and its look at these
     * counts: one of the two sees the other.)  body_waiters tells the
     * spaces' close that a body waits for the key (waited_for). */
    wait_frame outer = frame_get(w);
    atomic_fetch_add(&rt->body_waits, 1);
    atomic_fetch_add(&t->body_waiters, 1);
    if (a.frame)
        frame_put(w, (wait_frame){t, NULL, 0, atomic_load_explicit(&w->depth, memory_order_relaxed)}, NULL);
    if (atomic_load(&rt->graph.sleepers_settle) > 0)
        weft__wake(&rt->waits, &weft__key_settle);
    int rc = weft__wait_until(&rt->waits, &spec);
    if (a.frame)
        frame_put(w, outer, atomic_load_explicit(&w->wait_any, memory_order_relaxed));
    atomic_fetch_sub(&t->body_waiters, 1);
    atomic_fetch_sub(&rt->body_waits, 1);
    return rc;
}

/* One of several tasks finished: the first such index goes to *which. */
typedef struct any_arg {
    weft__task *const *ts;
    size_t n;
    size_t *which;
    help_arg help;
} any_arg;

/* The first index of ts[i] in ts (a duplicate is reported by its first
 * entry, also when the task finished while the entries before i were
 * looked at). */
size_t weft__first_index(weft__task *const *ts, size_t i)
{
    for (size_t j = 0; j < i; j++)
        if (ts[j] == ts[i])
            return j;
    return i;
}

static bool any_final(const void *arg)
{
    const any_arg *a = arg;
    for (size_t i = 0; i < a->n; i++)
        if (task_final(a->ts[i])) {
            *a->which = weft__first_index(a->ts, i);
            return true;
        }
    return false;
}

/* Run one of the awaited tasks, or one they wait for, if one is queued;
 * when none is, as help_task. */
static bool help_any(void *arg)
{
    any_arg *a = arg;
    uint64_t pushes = a->help.frame ? weft__sched_pushes(&a->help.rt->sched) : 0;
    for (size_t i = 0; i < a->n; i++)
        if (weft__help_task(a->help.w, a->ts[i], !deep(a->help.w)))
            return true;
    if (a->help.frame)
        looked(&a->help, pushes);
    return false;
}

int weft__wait_any(weft__rt *rt, weft__task *const *ts, size_t n, uint64_t deadline, size_t *which)
{
    weft__worker *w = weft__tls_worker;
    bool helping = w && w->rt == rt;
    any_arg a = {ts, n, which, {rt, w, NULL, NULL, false}};
    weft__wait spec = spec_of(rt, &weft__key_any_final, any_final, &a, &rt->graph.sleepers_any, deadline);
    /* The spin checks all n each time: the same number of task checks as
     * a wait for one. */
    spec.spin = n < spec.spin ? spec.spin / (unsigned)n : 1;
    if (!helping)
        return wait_telling_stalls(rt, &spec, "weft_task_wait_any");
    spec.help = help_any;
    spec.help_arg = &a;
    spec.blocked = &w->blocked;
    /* Published while it waits without a deadline, as weft__wait_task's
     * frame: while none of ts is final and nothing runs on this worker
     * above the waiting body, every body here is stuck.  (Out of memory
     * for the copy: not published, and the body counts as running.)
     * body_waiters: the spaces' close reports a key a body waits for. */
    wait_frame outer = frame_get(w);
    struct weft__wait_set *set = deadline == UINT64_MAX ? frame_room(w, n) : NULL;
    a.help.frame = set != NULL;
    atomic_fetch_add(&rt->body_waits, 1);
    for (size_t i = 0; i < n; i++)
        atomic_fetch_add(&ts[i]->body_waiters, 1);
    if (a.help.frame)
        frame_put(w, (wait_frame){NULL, ts, n, atomic_load_explicit(&w->depth, memory_order_relaxed)}, set);
    if (atomic_load(&rt->graph.sleepers_settle) > 0)
        weft__wake(&rt->waits, &weft__key_settle);
    int rc = weft__wait_until(&rt->waits, &spec);
    if (a.help.frame)
        frame_put(w, outer, atomic_load_explicit(&w->wait_any, memory_order_relaxed));
    for (size_t i = 0; i < n; i++)
        atomic_fetch_sub(&ts[i]->body_waiters, 1);
    atomic_fetch_sub(&rt->body_waits, 1);
    return rc;
}

typedef struct task_or_arg {
    weft__task *t;
    bool (*done)(const void *);
    const void *arg;
} task_or_arg;

static bool task_final_or(const void *arg)
{
    const task_or_arg *a = arg;
    return a->done(a->arg) || task_final(a->t);
}

int weft__wait_task_or(weft__rt *rt, weft__task *t, bool (*done)(const void *), const void *arg,
                       uint64_t deadline)
{
    task_or_arg a = {t, done, arg};
    weft__wait spec = spec_of(rt, t, task_final_or, &a, &t->waiters, deadline);
    return weft__wait_until(&rt->waits, &spec);
}

/* How long a wait for all lingers after the early wake-up with one task
 * left (weft__graph_leave): the wake-up of a sleeping thread, and most
 * short tasks, take less. */
#define WEFT__WAIT_LINGER_NS 250000u

static bool idle(const void *arg)
{
    const weft__rt *rt = arg;
    return atomic_load(&((weft__rt *)rt)->graph.inflight) == 0;
}

int weft__wait_idle(weft__rt *rt, uint64_t deadline)
{
    weft__wait spec = spec_of(rt, &weft__key_idle, idle, rt, &rt->graph.sleepers_all, deadline);
    spec.linger_ns = WEFT__WAIT_LINGER_NS;
    return wait_telling_stalls(rt, &spec, "weft_wait_all");
}

/* Settled: nothing is ready, running or in flight on a device, but bodies
 * stuck in waits and tasks queued that only they could run, so only a
 * spawn (of a task-space key, say) can move what is left.  Two scans in a
 * row of the counts of tasks made ready, done, failed and cancelled (and
 * placeholders ended), and of tasks ever queued, read the same sums, so
 * nothing moved in between (the counts only grow); and the sums balance
 * but for the stuck bodies, which are ready and not done (stuck_on, read
 * between the scans), and, when every worker is stuck, the tasks queued. */
typedef struct settle_scan {
    uint64_t ready, done, ended, pushes;
} settle_scan;

static settle_scan scan(weft__rt *rt)
{
    const weft__task_stats *ext = &rt->graph.ext;
    settle_scan r = {atomic_load(&ext->n_ready), atomic_load(&ext->n_done),
                     atomic_load(&ext->n_failed) + atomic_load(&ext->n_cancelled) +
                         atomic_load(&rt->graph.proxies_final),
                     weft__sched_pushes(&rt->sched)};
    for (unsigned i = 0; i < rt->nworkers; i++) {
        const weft__task_stats *st = &rt->workers[i].stats;
        r.ready += atomic_load(&st->n_ready);
        r.done += atomic_load(&st->n_done);
        r.ended += atomic_load(&st->n_failed) + atomic_load(&st->n_cancelled);
    }
    return r;
}

/* Whether the tasks of w's published frame are all unfinished: its task,
 * or every task of its wait for any (a frame read while it changes may
 * mix two frames: the caller's sequence check throws such a read away;
 * the buffer and the task slots it reads stay readable meanwhile). */
static bool frame_pending(weft__worker *w)
{
    size_t n = atomic_load(&w->wait_any_n);
    if (n == 0) {
        weft__task *on = atomic_load(&w->wait_on);
        return on && !weft__state_final(atomic_load(&on->state));
    }
    struct weft__wait_set *set = atomic_load(&w->wait_any);
    if (!set || n > set->cap)
        return false;
    for (size_t i = 0; i < n; i++) {
        weft__task *t = atomic_load(&set->t[i]);
        if (!t || weft__state_final(atomic_load(&t->state)))
            return false;
    }
    return true;
}

/* The bodies executing on w, if every one of them is stuck: the innermost
 * is in an untimed wait (frame_put) for a task not final (or for any of
 * tasks none of which is final), and each
 * body under it waits under that one; else 0.  Only the end of that task
 * can move them, and it is counted when it comes (a completion, a
 * failure, a cancellation, a placeholder ending: scan).  A frame read
 * while it changes (the worker entering or leaving a wait) counts 0, as
 * does a body running above the wait (the worker helping).  *seen: the
 * wait has looked at every task queued before `pushes` and can run none
 * (help_task). */
static uint64_t stuck_on(weft__worker *w, uint64_t pushes, bool *seen)
{
    *seen = false;
    uint32_t seq = atomic_load(&w->wait_seq);
    if (seq & 1)
        return 0;
    int64_t depth = atomic_load(&w->wait_depth);
    /* (A task's slot is type-stable: reading a stale one's state is safe,
     * and the sequence check below throws such a read away.) */
    bool stuck = depth > 0 && atomic_load_explicit(&w->depth, memory_order_relaxed) == depth && frame_pending(w);
    bool looked = atomic_load(&w->wait_seen) == pushes;
    if (atomic_load(&w->wait_seq) != seq || !stuck)
        return 0;
    *seen = looked;
    return (uint64_t)depth;
}

/* The task w's frame waits for, labelled ("task 'b' (id 3)"; a wait for
 * any: "any of task 'b' (id 3) and 2 others"), into out. */
static void frame_label(weft__worker *w, char *out, size_t len)
{
    size_t n = atomic_load(&w->wait_any_n);
    struct weft__wait_set *set = n ? atomic_load(&w->wait_any) : NULL;
    weft__task *first = !n ? atomic_load(&w->wait_on) : set && n <= set->cap ? atomic_load(&set->t[0]) : NULL;
    char label[64] = "a task"; /* (the frame changed meanwhile: the caller throws this away) */
    if (first)
        weft__task_label(first, label, sizeof label);
    if (n <= 1)
        snprintf(out, len, "%s", label);
    else
        snprintf(out, len, "any of %s and %zu other%s", label, n - 1, n > 2 ? "s" : "");
}

/* How many workers hold stuck bodies (stuck_on), and when some do, the
 * tasks they wait for, labelled ("task 'b' (id 3)", the first three, then
 * "and others"), into out (len bytes, cut to fit).  A label is kept only
 * if the worker's frame did not change while it was read. */
static size_t stuck_targets(weft__rt *rt, char *out, size_t len)
{
    char buf[256];
    size_t n = 0, used = 0;
    buf[0] = '\0';
    for (unsigned i = 0; i < rt->nworkers; i++) {
        weft__worker *w = &rt->workers[i];
        bool seen;
        uint32_t seq = atomic_load(&w->wait_seq);
        if (stuck_on(w, 0, &seen) == 0)
            continue;
        char label[96];
        frame_label(w, label, sizeof label);
        if (atomic_load(&w->wait_seq) != seq)
            continue;
        if (n < 3 && used < sizeof buf)
            used += (size_t)snprintf(buf + used, sizeof buf - used, "%s%s", n ? ", " : "", label);
        else if (n == 3 && used < sizeof buf)
            used += (size_t)snprintf(buf + used, sizeof buf - used, " and others");
        n++;
    }
    if (n > 0)
        snprintf(out, len, "%s", buf);
    return n;
}

/* Whether scan a balances but for stuck bodies (and, when every worker is
 * stuck and has looked at every task queued, those tasks). */
static bool balanced_but_stuck(weft__rt *rt, const settle_scan *a)
{
    uint64_t stuck = 0;
    bool all = true;
    for (unsigned i = 0; i < rt->nworkers; i++) {
        bool seen;
        uint64_t n = stuck_on(&rt->workers[i], a->pushes, &seen);
        stuck += n;
        all = all && n > 0 && seen;
    }
    if (a->ready == a->done + stuck)
        return true;
    return all && a->ready == a->done + stuck + weft__sched_queued(&rt->sched);
}

static bool settled(const void *arg)
{
    weft__rt *rt = (weft__rt *)arg;
    if (atomic_load(&rt->graph.inflight) == 0)
        return true;
    settle_scan a = scan(rt);
    if (a.ready != a.done && (atomic_load(&rt->body_waits) == 0 || !balanced_but_stuck(rt, &a)))
        return false;
    settle_scan b = scan(rt);
    return a.ready == b.ready && a.done == b.done && a.ended == b.ended && a.pushes == b.pushes;
}

int weft__wait_settled(weft__rt *rt, uint64_t deadline)
{
    weft__wait spec = spec_of(rt, &weft__key_settle, settled, rt, &rt->graph.sleepers_settle, deadline);
    spec.linger_ns = WEFT__WAIT_LINGER_NS;
    return weft__wait_until(&rt->waits, &spec);
}

/* Backpressure.  From outside: until the in-flight count is at the low mark
 * (the caller holds no count while it sleeps).  From a task: until the
 * backlog (tasks in flight whose bodies are not executing) is at the low
 * mark, or until no other worker could drain it — then only this producer
 * can move things, and it goes ahead rather than wait forever.  A throttled
 * task runs nothing nested: what it would run might wait for it. */
typedef struct throttle_arg {
    weft__rt *rt;
    weft__worker *w;
    int64_t self;
} throttle_arg;

static int64_t backlog(weft__rt *rt)
{
    int64_t executing = 0;
    for (unsigned i = 0; i < rt->nworkers; i++)
        executing += atomic_load_explicit(&rt->workers[i].depth, memory_order_relaxed);
    return atomic_load(&rt->graph.inflight) - executing;
}

static bool eased_outside(const void *arg)
{
    const throttle_arg *a = arg;
    return atomic_load(&a->rt->graph.inflight) <= a->rt->graph.throttle_low;
}

static bool eased_inside(const void *arg)
{
    const throttle_arg *a = arg;
    return backlog(a->rt) - a->self <= a->rt->graph.throttle_low || !weft__others_can_progress(a->rt, a->w);
}

void weft__wait_throttle(weft__rt *rt, int64_t self)
{
    weft__worker *w = weft__tls_worker;
    bool inside = w && w->rt == rt;
    throttle_arg a = {rt, inside ? w : NULL, self};
    weft__wait spec = spec_of(rt, &weft__key_throttle, inside ? eased_inside : eased_outside, &a,
                              inside ? &rt->graph.sleepers_throttle_in : &rt->graph.sleepers_throttle,
                              UINT64_MAX);
    spec.spin = 0;
    if (inside)
        spec.blocked = &w->blocked;
    weft__wait_until(&rt->waits, &spec);
}

static bool unused(const void *arg) { return weft__data_unused(arg); }

/* Help an unregister from a task: run a queued task that uses the data, or
 * one of its queued predecessors (the same safe set as a task wait). */
static bool help_data(void *arg)
{
    help_arg *a = arg;
    weft__task *m[16];
    size_t n = weft__history_members(a->d, m, 16);
    bool found = false;
    for (size_t i = 0; i < n; i++) {
        if (!found && weft__help_task(a->w, m[i], !deep(a->w)))
            found = true;
        weft__task_unref(m[i]);
    }
    return found;
}

void weft__wait_data_unused(weft__rt *rt, weft__data *d)
{
    weft__worker *w = weft__tls_worker;
    bool helping = w && w->rt == rt;
    help_arg a = {rt, w, NULL, d, false};
    weft__wait spec = spec_of(rt, d, unused, d, NULL, UINT64_MAX);
    if (helping) {
        spec.help = help_data;
        spec.help_arg = &a;
        spec.blocked = &w->blocked;
    }
    (void)wait_telling_stalls(rt, &spec, "weft_data_unregister");
}
