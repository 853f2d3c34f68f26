/*
 * worker.c — worker threads: find work (own queue, then steal), run it,
 * spin briefly when idle, then park until woken; and the help a body gives
 * while it waits.
 *
 * The finishing thread releases dependents itself and runs the first one
 * released right away (no queue round trip); the rest go on its queue for
 * others to steal.  Workers spin for cfg.spin_ns before parking because, on
 * these machines, waking a parked thread costs as much as a small task;
 * while they spin they run the runtime's registered progress steps (its
 * pollset, wait.h: a communicator's MPI tests), so work that completes by
 * polling completes on a thread that was idle anyway, and one of them
 * keeps polling instead of parking while such work is in flight.  Tools
 * that watch bodies run (the trace) are observers (worker.h), told of each
 * body by the worker that ran it.
 */
#include "worker.h"
#include "api/runtime.h"
#include "autopin.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

_Thread_local weft__worker *weft__tls_worker;

/* Let go of what the last body left held for the next (weft_ctx_hold_over). */
static inline void let_go(weft__worker *w)
{
    if (w->held) {
        w->held = NULL;
        w->rt->cfg.on_worker_let_go(w->index, w->rt->cfg.hook_arg);
    }
}

/* Run t, then whatever its completion handed back, until nothing is. */
static void run_chain(weft__worker *w, weft__qnode *n)
{
    while (n) {
        weft__task *t = weft__task_of(n);
        weft__qnode *next = NULL;
        /* What the last body left held goes on only to a body of the same
         * function with nothing to wait for (its data's transfers, its
         * devices): such waits may need what is held. */
        if (w->held && (t->body != w->held || !weft__task_holdable(t)))
            let_go(w);
        switch (weft__task_start(t)) {
        case WEFT__START_DEFER:
            break; /* a commute member holds its data: requeued on release */
        case WEFT__START_CANCEL:
            weft__task_cancelled(t, &next);
            break;
        default: {
            struct weft_ctx ctx = {w->rt, w, t, NULL};
            bool waited = t->place && weft__task_prepare(t);
            if (t->naccess) {
                int rc = weft__task_acquire(t, waited);
                if (rc != 0) { /* its data could not be made valid: it fails without running */
                    weft__task_body_returned(t, rc, &next);
                    break;
                }
            }
            /* WEFT_PIN_AUTO's countdown to the worker's next sample of its
             * CPU (autopin.h): no clock, no system call per task. */
            if (__builtin_expect(--w->pin_left == 0, 0))
                weft__autopin_sample(w);
            t->outer = w->current;
            w->current = t;
            atomic_store_explicit(&w->depth, atomic_load_explicit(&w->depth, memory_order_relaxed) + 1,
                                  memory_order_relaxed);
            const weft__observers *obs = &w->rt->observers;
            uint64_t t0 = obs->n ? weft__now_ns() : 0;
            struct weft__guard *guard = w->rt->graph.check_data ? weft__task_guard_begin(t) : NULL;
            ctx.guard = guard;
            w->held = NULL; /* (what was held is the body's now) */
            weft__halo_guard halo;
            if (w->rt->graph.check_data)
                weft__task_halo_begin(t, &halo);
            int r = weft__place_body(t->place, t->body)(&ctx, t->arg);
            weft__task_guard_end(t, guard, &r);
            if (w->rt->graph.check_data)
                weft__task_halo_end(t, &halo, &r);
            if (obs->n) {
                uint64_t t1 = weft__now_ns();
                for (unsigned k = 0; k < obs->n; k++)
                    obs->at[k].ops->on_exit(obs->at[k].self, w->index, t, t0, t1);
            }
            atomic_store_explicit(&w->depth, atomic_load_explicit(&w->depth, memory_order_relaxed) - 1,
                                  memory_order_relaxed);
            w->current = t->outer;
            t->outer = NULL;
            weft__count(&w->stats.n_run, 1);
            weft__task_body_returned(t, r, &next);
        }
        }
        n = next;
    }
}

/* run_chain from the worker's loop: the completions in it leave waking the
 * settle sleepers to the worker's next idle moment (w->ran). */
static void run_loop_chain(weft__worker *w, weft__qnode *n)
{
    w->stats.settle_later = true;
    run_chain(w, n);
    w->stats.settle_later = false;
    w->ran = true;
}

int weft__observer_add(weft__observers *o, const weft__observer_ops *ops, void *self)
{
    if (o->n == WEFT__MAX_OBSERVERS)
        return WEFT_ENOMEM;
    o->at[o->n].ops = ops;
    o->at[o->n].self = self;
    o->n++;
    return 0;
}

static bool help_with(weft__worker *w, weft__task *t)
{
    if (!weft__sched_take(&t->qn))
        return false;
    run_chain(w, &t->qn);
    return true;
}

/* A bounded depth-first walk over the unfinished predecessors (and
 * continuations) of `from`
 * (which the caller keeps alive): visit decides, for each predecessor
 * (pinned during the call), whether the walk stops there (found), goes on
 * through it, or passes it by.  Returns whether a visit said stop. */
enum { WALK_SKIP, WALK_EXPAND, WALK_STOP };
#define WALK_STACK 64

static bool walk_preds(weft__task *from, int (*visit)(weft__task *p, void *arg), void *arg, int max_visits)
{
    weft__task *stack[WALK_STACK];
    int sp = 0, visits = 0;
    weft__task *x = from;
    bool found = false;
    for (;;) {
        /* Its predecessors, then its continuation (weft_ctx_continue): a
         * continued task finishes after it as after a predecessor. */
        uint32_t n = weft__task_nedges(x);
        for (uint32_t i = 0; i <= n && !found && visits < max_visits; i++, visits++) {
            weft__task *p = NULL;
            if (i < n) {
                const weft__edge *e = &x->edges[i];
                if (!weft__edge_pin_pred(e))
                    continue;
                p = e->pred;
            } else if ((p = weft__task_cont_pin(x)) == NULL) {
                continue;
            }
            int v = visit(p, arg);
            if (v == WALK_STOP)
                found = true;
            else if (v == WALK_EXPAND && sp < WALK_STACK) {
                stack[sp++] = p; /* keeps the pin until visited */
                continue;
            }
            weft__task_unref(p);
        }
        if (x != from)
            weft__task_unref(x);
        if (found || sp == 0 || visits >= max_visits)
            break;
        x = stack[--sp];
    }
    while (sp > 0)
        weft__task_unref(stack[--sp]);
    return found;
}

/* Run a queued task from the unfinished predecessors of the awaited task
 * (transitively, bounded). */
static int help_visit(weft__task *p, void *arg)
{
    int s = atomic_load(&p->state);
    if (s == WEFT__T_READY && help_with(arg, p))
        return WALK_STOP;
    return s == WEFT__T_WAITING ? WALK_EXPAND : WALK_SKIP;
}

bool weft__help_task(weft__worker *w, weft__task *awaited, bool with_predecessors)
{
    return help_with(w, awaited) || (with_predecessors && walk_preds(awaited, help_visit, w, 256));
}

static bool suspended_here(const weft__worker *w, const weft__task *t)
{
    for (const weft__task *x = w->current; x; x = x->outer)
        if (x == t)
            return true;
    return false;
}

static int cycle_visit(weft__task *p, void *arg)
{
    if (weft__state_final(atomic_load(&p->state)))
        return WALK_SKIP;
    return suspended_here(arg, p) ? WALK_STOP : WALK_EXPAND;
}

bool weft__depends_on_suspended(weft__worker *w, weft__task *t) { return walk_preds(t, cycle_visit, w, 4096); }

static int is_visit(weft__task *p, void *arg)
{
    if (p == arg)
        return WALK_STOP;
    return weft__state_final(atomic_load(&p->state)) ? WALK_SKIP : WALK_EXPAND;
}

bool weft__depends_on(weft__task *t, weft__task *on) { return t == on || walk_preds(t, is_visit, on, 4096); }

bool weft__others_can_progress(weft__rt *rt, const weft__worker *me)
{
    bool queued = weft__sched_any(&rt->sched);
    for (unsigned i = 0; i < rt->nworkers; i++) {
        weft__worker *v = &rt->workers[i];
        if (v == me || atomic_load(&v->blocked) > 0)
            continue;
        if (atomic_load_explicit(&v->depth, memory_order_relaxed) > 0 || queued)
            return true;
    }
    return false;
}

/* w is no longer the worker that polls past its spin (if it was). */
static void stop_polling(weft__rt *rt, const weft__worker *w)
{
    uint32_t me = w->index + 1;
    if (atomic_load_explicit(&rt->polls.polling_worker, memory_order_relaxed) == me)
        atomic_compare_exchange_strong(&rt->polls.polling_worker, &me, 0);
}

/* The CPUs this thread may run on: *set, and their count (at least 1; set
 * empty when the affinity cannot be read). */
static unsigned cores_here(cpu_set_t *set)
{
    if (sched_getaffinity(0, sizeof *set, set) == 0 && CPU_COUNT(set) > 0)
        return (unsigned)CPU_COUNT(set);
    CPU_ZERO(set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (unsigned)n : 1;
}

/* The (i mod n)-th of the n CPUs in set, or -1 if set is empty. */
static int nth_cpu(const cpu_set_t *set, unsigned i)
{
    int n = CPU_COUNT(set);
    if (n <= 0)
        return -1;
    int k = (int)(i % (unsigned)n);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, set) && k-- == 0)
            return c;
    return -1;
}

/* Move the calling worker to w->start_cpu, then give it back every CPU it
 * had: placed, not pinned (weft__workers_start says why). */
static void place(weft__worker *w)
{
    cpu_set_t all, one;
    if (w->start_cpu < 0 || sched_getaffinity(0, sizeof all, &all) != 0 || !CPU_ISSET(w->start_cpu, &all))
        return;
    CPU_ZERO(&one);
    CPU_SET(w->start_cpu, &one);
    if (pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0)
        (void)pthread_setaffinity_np(pthread_self(), sizeof all, &all);
}

static void *worker_main(void *arg)
{
    weft__worker *w = arg;
    weft__rt *rt = w->rt;
    place(w);
    weft__tls_worker = w;
    weft__tls_q = w->q;
    weft__tls_stats = &w->stats;
    if (rt->cfg.on_worker_start)
        rt->cfg.on_worker_start(w->index, rt->cfg.hook_arg);
    const bool crowded = rt->nworkers >= rt->cores;
    for (;;) {
        weft__qnode *n = weft__sched_find(&rt->sched, w->q);
        if (n) {
            run_loop_chain(w, n);
            continue;
        }
        let_go(w);
        /* Out of work: the runtime may have settled with what this worker
         * just finished (its completions did not wake the settle sleepers:
         * run_loop_chain).  The fence orders its counts before the read of
         * the sleepers' count, as a sleeper's count comes before its own
         * look at the counts (weft__wait_until), so that one of the two
         * sees the other. */
        if (w->ran) {
            w->ran = false;
            atomic_thread_fence(memory_order_seq_cst);
            if (atomic_load(&rt->graph.sleepers_settle) > 0)
                weft__wake(&rt->waits, &weft__key_settle);
        }
        if (atomic_load(&rt->sched.stop))
            break;
        /* Idle: a producer throttled inside a task may be waiting for the
         * moment nobody else can drain its backlog. */
        if (atomic_load(&rt->graph.sleepers_throttle_in) > 0)
            weft__wake(&rt->waits, &weft__key_throttle);
        /* Spin, looking for work, then park. */
        uint64_t idle_start = weft__now_ns();
        atomic_store_explicit(&w->idle_since, idle_start, memory_order_relaxed);
        uint64_t spin_until = idle_start + rt->cfg.spin_ns;
        bool in_flight = false; /* a poll in this stretch of 64 found work in flight */
        /* Counted among the idle pollers while it spins (waits then leave
         * the pollers to it). */
        bool counted = weft__pollers_any(&rt->polls);
        if (counted)
            atomic_fetch_add(&rt->polls.idle_pollers, 1);
        for (unsigned i = 1;; i++) {
            if (atomic_load_explicit(&rt->sched.stop, memory_order_relaxed))
                break;
            if ((n = weft__sched_find(&rt->sched, w->q)) != NULL)
                break;
            /* Drive the registered progress steps (MPI's tests): what one
             * completes releases its successor onto this worker's queue,
             * found at the next look. */
            int polled = weft__poll(&rt->polls);
            if (polled == WEFT__POLL_ENDED)
                continue;
            in_flight |= polled == WEFT__POLL_BUSY;
            weft__cpu_relax();
            /* Spinning holds a core that device threads (virtual GPUs'
             * queues, MPI progress threads) may be waiting for: let them
             * run now and then.  So may the thread that waits for the
             * runtime (wait_all) once nothing is in flight, when the
             * workers fill the machine's cores: without the yield it ran
             * only when the spin ended (some 180 us after the last task,
             * 2 workers on 2 cores). */
            if ((i & 15) == 0 &&
                (atomic_load_explicit(&rt->yield_idle, memory_order_relaxed) ||
                 (crowded && atomic_load_explicit(&rt->graph.inflight, memory_order_relaxed) == 0)))
                sched_yield();
            if ((i & 63) == 0 && weft__now_ns() >= spin_until) {
                /* While work that completes by polling is in flight, one
                 * idle worker goes on polling it (yielding, as above)
                 * instead of parking, so that its end is found at once and
                 * its successor runs here; the others park. */
                uint32_t none = 0, me = w->index + 1;
                if (in_flight && (atomic_load_explicit(&rt->polls.polling_worker, memory_order_relaxed) == me ||
                                  atomic_compare_exchange_strong(&rt->polls.polling_worker, &none, me))) {
                    spin_until = weft__now_ns() + rt->cfg.spin_ns;
                } else {
                    stop_polling(rt, w);
                    if (counted)
                        atomic_fetch_sub(&rt->polls.idle_pollers, 1);
                    weft__sched_park(&rt->sched, w->q);
                    if ((counted = weft__pollers_any(&rt->polls)))
                        atomic_fetch_add(&rt->polls.idle_pollers, 1);
                    spin_until = weft__now_ns() + rt->cfg.spin_ns;
                }
                in_flight = false;
            }
        }
        if (counted)
            atomic_fetch_sub(&rt->polls.idle_pollers, 1);
        stop_polling(rt, w);
        atomic_store_explicit(&w->idle_since, 0, memory_order_relaxed);
        weft__count(&w->idle_ns, weft__now_ns() - idle_start);
        if (n)
            run_loop_chain(w, n);
    }
    let_go(w);
    if (rt->cfg.on_worker_stop)
        rt->cfg.on_worker_stop(w->index, rt->cfg.hook_arg);
    weft__tls_worker = NULL;
    weft__tls_q = NULL;
    weft__tls_stats = NULL;
    return NULL;
}


/* Start worker i, pinned to the (i mod n)-th CPU of set under
 * WEFT_PIN_ON (cfg.pin_workers); 0 or an error number. */
static int start_worker(weft__rt *rt, unsigned i, const cpu_set_t *set, int *cpu)
{
    weft__worker *w = &rt->workers[i];
    *cpu = -1;
    if (rt->cfg.pin_workers != WEFT_PIN_ON)
        return pthread_create(&w->thread, NULL, worker_main, w);
    *cpu = nth_cpu(set, i);
    if (*cpu < 0)
        return EINVAL; /* the creating thread's CPUs are unknown */
    pthread_attr_t attr;
    int e = pthread_attr_init(&attr);
    if (e != 0)
        return e;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(*cpu, &one);
    e = pthread_attr_setaffinity_np(&attr, sizeof one, &one);
    if (e == 0)
        e = pthread_create(&w->thread, &attr, worker_main, w);
    pthread_attr_destroy(&attr);
    return e;
}

int weft__workers_start(weft__rt *rt)
{
    cpu_set_t set;
    rt->cores = cores_here(&set);
    if (weft__autopin_init(rt, &set) != 0)
        return weft__error(WEFT_ENOMEM, "weft_runtime_create: out of memory");
    /* Workers never take asynchronous signals: they belong to the program's
     * own threads (e.g. Python's main thread handles SIGINT). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    /* WEFT_PIN_AUTO: each worker starts on a CPU of its own where there
     * are enough, worker i on the (i+1)-th CPU of the set after the
     * creating thread's, and is then free to move.  A new thread otherwise
     * goes where the system puts it, which can be one CPU for two workers
     * (the one the busy creating thread is not on), and they stay packed
     * until its balancing moves one, milliseconds later (4-5 ms a run on a
     * 2-vCPU VM, for a runtime made per run: docs/performance.md).
     * Starting after the creator's CPU spreads the workers of runtimes
     * that several processes create on the same CPUs. */
    int first = 0, here = sched_getcpu();
    if (here >= 0 && here < CPU_SETSIZE && CPU_ISSET(here, &set))
        for (int c = 0; c <= here; c++)
            first += CPU_ISSET(c, &set) ? 1 : 0;
    for (unsigned i = 0; i < rt->nworkers; i++)
        rt->workers[i].start_cpu =
            rt->cfg.pin_workers == WEFT_PIN_AUTO && CPU_COUNT(&set) > 1 ? nth_cpu(&set, (unsigned)first + i) : -1;
    int rc = 0;
    for (unsigned i = 0; i < rt->nworkers; i++) {
        int cpu;
        int e = start_worker(rt, i, &set, &cpu);
        if (e != 0) {
            if (rt->cfg.pin_workers == WEFT_PIN_ON)
                rc = weft__error(WEFT_ESYSTEM, "weft_runtime_create: could not start worker %u pinned to CPU %d "
                                               "(weft_config.pin_workers): %s",
                                 i, cpu, strerror(e));
            else
                rc = weft__error(WEFT_ESYSTEM, "weft_runtime_create: could not start worker %u: %s", i, strerror(e));
            break;
        }
        rt->workers[i].started = true;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        weft__workers_stop(rt);
    return rc;
}

void weft__workers_stop(weft__rt *rt)
{
    atomic_store(&rt->sched.stop, true);
    weft__sched_wake_all(&rt->sched);
    for (unsigned i = 0; i < rt->nworkers; i++) {
        weft__worker *w = &rt->workers[i];
        if (w->started) {
            pthread_join(w->thread, NULL);
            w->started = false;
        }
    }
}
