/*
 * worker.c — worker threads: find work (own queue, then steal), run it,
 * spin briefly when idle, then park until woken.
 *
 * The finishing thread releases dependents itself and runs the first one
 * released right away (no queue round trip); the rest go on its queue for
 * others to steal.  Workers spin for cfg.spin_ns before parking because, on
 * these machines, waking a parked thread costs as much as a small task.
 */
#include "internal.h"

#include <signal.h>
#include <string.h>

static void run_chain(weft__worker *w, weft__task *t)
{
    while (t) {
        weft__task *next = NULL;
        weft__task_execute(w, t, &next);
        t = next;
    }
}

/* Run t now if it is queued: a waiter runs what it waits for first, so it
 * does not bury the awaited task's continuation under unrelated work. */
static bool help_with(weft__worker *w, weft__task *t)
{
    if (!weft__queue_take(t))
        return false;
    run_chain(w, t);
    return true;
}

static bool help_once(weft__worker *w)
{
    weft__task *t = weft__find_work(w);
    if (!t)
        return false;
    run_chain(w, t);
    return true;
}

static bool another_worker_idle(const weft__worker *w)
{
    const weft__rt *rt = w->rt;
    for (unsigned i = 0; i < rt->nworkers; i++)
        if (&rt->workers[i] != w && atomic_load_explicit(&rt->workers[i].idle_since, memory_order_relaxed))
            return true;
    return false;
}

/* Take a reference on an edge's predecessor if it is still the same task
 * (its slot may have been freed and reused since the edge was made). */
static bool pin_pred(const weft__edge *e)
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

#define SUBGRAPH_STACK 32
#define SUBGRAPH_VISITS 256

/* Run a queued task from the unfinished predecessors of `awaited`
 * (transitively, bounded).  Only such tasks are safe for a waiting body to
 * run: anything else might itself wait for the body suspended underneath. */
static bool help_with_predecessors(weft__worker *w, weft__task *awaited)
{
    weft__task *stack[SUBGRAPH_STACK];
    int sp = 0, visits = 0;
    weft__task *x = awaited; /* pinned by the caller (it holds a handle or is its waiter) */
    bool found = false;
    for (;;) {
        for (uint32_t i = 0; i < x->nedges && !found && visits < SUBGRAPH_VISITS; i++, visits++) {
            const weft__edge *e = &x->edges[i];
            if (!pin_pred(e))
                continue;
            weft__task *p = e->pred;
            int s = atomic_load(&p->state);
            if (s == WEFT_TASK_READY && weft__queue_take(p)) {
                run_chain(w, p);
                found = true;
            } else if (s == WEFT_TASK_WAITING && sp < SUBGRAPH_STACK) {
                stack[sp++] = p; /* keeps the reference until visited */
                continue;
            }
            weft__task_unref(p);
        }
        if (x != awaited)
            weft__task_unref(x);
        if (found || sp == 0 || visits >= SUBGRAPH_VISITS)
            break;
        x = stack[--sp];
    }
    while (sp > 0)
        weft__task_unref(stack[--sp]);
    return found;
}

/* One step of useful work for a worker whose current body waits.
 *
 * Waiting for a task: run that task if it is queued, else one of its
 * queued predecessors; otherwise do not help (other workers are running
 * what it needs).  Running unrelated work here could bury the waiting body
 * under a task that waits for it, which no scheduler could then resolve.
 *
 * Waiting for something else (backpressure, an unregister): help with any
 * ready task, but past cfg.max_nesting nested bodies leave the queues to
 * idle workers, if there are any, to bound stack (and Python) depth. */
bool weft__help_waiting(weft__worker *w, weft__task *awaited)
{
    if (awaited)
        return help_with(w, awaited) || help_with_predecessors(w, awaited);
    if (atomic_load_explicit(&w->depth, memory_order_relaxed) >= (int64_t)w->rt->cfg.max_nesting &&
        another_worker_idle(w))
        return false;
    return help_once(w);
}

/* Sleep until woken, unless work or a stop request shows up while the
 * worker announces that it parks (then it returns at once). */
static void park(weft__worker *w)
{
    weft__rt *rt = w->rt;
    pthread_mutex_lock(&w->park_lock);
    atomic_store(&w->parked, true);
    atomic_fetch_add(&rt->nparked, 1);
    if (!weft__any_work(rt) && !atomic_load(&rt->stop)) {
        weft__count(&w->n_parks, 1);
        while (!w->wake)
            pthread_cond_wait(&w->park_cond, &w->park_lock);
    }
    w->wake = false;
    atomic_store(&w->parked, false);
    atomic_fetch_sub(&rt->nparked, 1);
    pthread_mutex_unlock(&w->park_lock);
}

static void *worker_main(void *arg)
{
    weft__worker *w = arg;
    weft__rt *rt = w->rt;
    weft__tls_worker = w;
    if (rt->cfg.on_worker_start)
        rt->cfg.on_worker_start(w->index, rt->cfg.hook_arg);
    for (;;) {
        weft__task *t = weft__find_work(w);
        if (t) {
            run_chain(w, t);
            continue;
        }
        if (atomic_load(&rt->stop))
            break;
        /* Idle: spin, looking for work, then park. */
        uint64_t idle_start = weft__now_ns();
        atomic_store_explicit(&w->idle_since, idle_start, memory_order_relaxed);
        uint64_t spin_until = idle_start + rt->cfg.spin_ns;
        for (unsigned i = 1;; i++) {
            if (atomic_load_explicit(&rt->stop, memory_order_relaxed))
                break;
            if ((t = weft__find_work(w)) != NULL)
                break;
            weft__cpu_relax();
            if ((i & 63) == 0 && weft__now_ns() >= spin_until) {
                park(w);
                spin_until = weft__now_ns() + rt->cfg.spin_ns;
            }
        }
        atomic_store_explicit(&w->idle_since, 0, memory_order_relaxed);
        weft__count(&w->idle_ns, weft__now_ns() - idle_start);
        if (t)
            run_chain(w, t);
    }
    if (rt->cfg.on_worker_stop)
        rt->cfg.on_worker_stop(w->index, rt->cfg.hook_arg);
    weft__tls_worker = NULL;
    return NULL;
}

int weft__workers_start(weft__rt *rt)
{
    /* Workers never take asynchronous signals: they belong to the program's
     * own threads (e.g. Python's main thread handles SIGINT). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = 0;
    for (unsigned i = 0; i < rt->nworkers; i++) {
        weft__worker *w = &rt->workers[i];
        int e = pthread_create(&w->thread, NULL, worker_main, w);
        if (e != 0) {
            rc = weft__error(WEFT_ESYSTEM, "weft_runtime_create: could not start worker %u: %s", i, strerror(e));
            break;
        }
        w->started = true;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        weft__workers_stop(rt);
    return rc;
}

void weft__workers_stop(weft__rt *rt)
{
    atomic_store(&rt->stop, true);
    weft__wake_all(rt);
    for (unsigned i = 0; i < rt->nworkers; i++) {
        weft__worker *w = &rt->workers[i];
        if (w->started) {
            pthread_join(w->thread, NULL);
            w->started = false;
        }
    }
}
