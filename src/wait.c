/*
 * wait.c — the one wait engine (see wait.h).
 *
 * Each sleeper has its own condition variable (on its stack, bound to the
 * waitset's lock), so a notifier wakes exactly the sleepers waiting for what
 * happened, and the counters tell event wake-ups from timer wake-ups.
 * Here too: the pollsets (progress steps registered from above).
 */
#include "wait.h"

#include <errno.h>
#include <sched.h>
#include <time.h>

const char weft__key_idle = 'i';
const char weft__key_throttle = 't';
const char weft__key_settle = 's';
const char weft__key_any_final = 'a';

struct weft__sleeper {
    pthread_cond_t cond;
    const void *key;
    bool wants_work;
    bool woken;                /* under the waitset's lock */
    weft__sleeper *prev, *next;
};

void weft__waitset_init(weft__waitset *ws)
{
    pthread_mutex_init(&ws->lock, NULL);
    pthread_condattr_init(&ws->cattr);
    pthread_condattr_setclock(&ws->cattr, CLOCK_MONOTONIC);
    ws->head = NULL;
    atomic_init(&ws->nsleepers, 0);
    atomic_init(&ws->nwork, 0);
    atomic_init(&ws->n_waits, 0);
    atomic_init(&ws->n_sleeps, 0);
    atomic_init(&ws->n_wake_event, 0);
    atomic_init(&ws->n_wake_timer, 0);
}

static void wake_where(weft__waitset *ws, const void *key, bool work)
{
    pthread_mutex_lock(&ws->lock);
    for (weft__sleeper *s = ws->head; s; s = s->next)
        if (!s->woken && (work ? s->wants_work : s->key == key)) {
            s->woken = true;
            pthread_cond_signal(&s->cond);
        }
    pthread_mutex_unlock(&ws->lock);
}

void weft__wake(weft__waitset *ws, const void *key)
{
    if (atomic_load(&ws->nsleepers) > 0)
        wake_where(ws, key, false);
}

void weft__wake_work(weft__waitset *ws)
{
    if (atomic_load(&ws->nwork) > 0)
        wake_where(ws, NULL, true);
}

static void link_sleeper(weft__waitset *ws, weft__sleeper *s)
{
    pthread_mutex_lock(&ws->lock);
    s->prev = NULL;
    s->next = ws->head;
    if (ws->head)
        ws->head->prev = s;
    ws->head = s;
    atomic_fetch_add(&ws->nsleepers, 1);
    if (s->wants_work)
        atomic_fetch_add(&ws->nwork, 1);
    pthread_mutex_unlock(&ws->lock);
}

/* Under ws->lock. */
static void unlink_sleeper(weft__waitset *ws, weft__sleeper *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        ws->head = s->next;
    if (s->next)
        s->next->prev = s->prev;
    atomic_fetch_sub(&ws->nsleepers, 1);
    if (s->wants_work)
        atomic_fetch_sub(&ws->nwork, 1);
}

/* Check w's condition for up to w->linger_ns (or until its deadline),
 * polling device progress and yielding now and then: the thread it waits
 * for may need this core. */
static void linger(const weft__wait *w)
{
    uint64_t until = weft__now_ns() + w->linger_ns;
    if (until > w->deadline)
        until = w->deadline;
    for (unsigned i = 1; !w->done(w->arg); i++) {
        weft__cpu_relax();
        if ((i & 63) == 0) {
            if (weft__now_ns() >= until)
                break;
            if (w->progress)
                w->progress(w->progress_arg);
            sched_yield();
        }
    }
}

/* How a wait ended, for an adapting spin. */
enum { ENDED_AT_ONCE, ENDED_SPINNING, ENDED_AFTER_SLEEP };

/* weft__wait_until with `spin` checks before the first sleep; *how: how it
 * ended. */
static int wait_spinning(weft__waitset *ws, const weft__wait *w, unsigned spin, int *how)
{
    atomic_fetch_add_explicit(&ws->n_waits, 1, memory_order_relaxed);
    unsigned spins = 0;
    bool lingered = false;
    *how = ENDED_AT_ONCE;
    for (;;) {
        if (w->done(w->arg)) {
            if (spins > 0 && *how == ENDED_AT_ONCE)
                *how = ENDED_SPINNING;
            return 0;
        }
        if (w->help && w->help(w->help_arg)) {
            spins = 0;
            continue;
        }
        if (w->progress)
            w->progress(w->progress_arg);
        /* The deadline is read at the first look, every 64th spin and
         * before sleeping, not at every spin: a clock read costs three
         * times a spin's pause (34 ns against 11 on the 2-core VM), and
         * read at every spin a timed wait would spin some 100 us, not 20,
         * taking the core from the thread that has the work to do on a
         * machine with more runnable threads than cores. */
        bool look = spins >= spin || (spins & 63) == 0;
        if (look && w->deadline != UINT64_MAX && weft__now_ns() >= w->deadline)
            return WEFT_ETIMEDOUT;
        if (spins < spin) {
            spins++;
            weft__cpu_relax();
            continue;
        }

        /* Sleep: announce, re-check, then wait for a notifier (or the
         * deadline).  Anything that happens after the announcement sets
         * woken, so nothing is lost in between. */
        weft__sleeper s;
        s.key = w->key;
        s.wants_work = w->help != NULL;
        s.woken = false;
        pthread_cond_init(&s.cond, &ws->cattr);
        if (w->interest)
            atomic_fetch_add(w->interest, 1);
        link_sleeper(ws, &s);
        bool again = w->done(w->arg) || (w->help && w->help(w->help_arg));
        if (!again && w->blocked) {
            atomic_fetch_add(w->blocked, 1);
            weft__wake(ws, &weft__key_throttle); /* a throttled producer may now go ahead */
        }
        bool timed_out = false;
        if (!again) { /* counted as it starts, so that a watcher can see a wait asleep */
            atomic_fetch_add_explicit(&ws->n_sleeps, 1, memory_order_relaxed);
            *how = ENDED_AFTER_SLEEP;
        }
        pthread_mutex_lock(&ws->lock);
        while (!again && !s.woken) {
            if (w->deadline == UINT64_MAX) {
                pthread_cond_wait(&s.cond, &ws->lock);
            } else {
                struct timespec ts = {(time_t)(w->deadline / 1000000000u), (long)(w->deadline % 1000000000u)};
                if (pthread_cond_timedwait(&s.cond, &ws->lock, &ts) == ETIMEDOUT) {
                    timed_out = !s.woken;
                    break;
                }
            }
        }
        unlink_sleeper(ws, &s);
        bool woken = s.woken;
        pthread_mutex_unlock(&ws->lock);
        if (!again && w->blocked)
            atomic_fetch_sub(w->blocked, 1);
        if (w->interest)
            atomic_fetch_sub(w->interest, 1);
        pthread_cond_destroy(&s.cond);
        if (!again) {
            if (woken)
                atomic_fetch_add_explicit(&ws->n_wake_event, 1, memory_order_relaxed);
            else if (timed_out)
                atomic_fetch_add_explicit(&ws->n_wake_timer, 1, memory_order_relaxed);
        }
        if (woken && !lingered && w->linger_ns) {
            lingered = true;
            linger(w);
        }
        spins = spin; /* after a sleep, check and help, but do not spin again */
    }
}

int weft__wait_until(weft__waitset *ws, const weft__wait *w)
{
    weft__spin_adapt *a = w->adapt;
    int how;
    if (!a)
        return wait_spinning(ws, w, w->spin, &how);
    unsigned len = a->len == 0 || a->len > w->spin ? w->spin : a->len;
    bool probe = ++a->waits % WEFT__SPIN_PROBE_EVERY == 0;
    int rc = wait_spinning(ws, w, probe ? w->spin : len, &how);
    if (how == ENDED_AFTER_SLEEP)
        a->len = len / 2 < WEFT__SPIN_MIN ? WEFT__SPIN_MIN : len / 2;
    else if (how == ENDED_SPINNING)
        a->len = probe || len * 2 > w->spin ? w->spin : len * 2;
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Pollers                                                                   */
/* ------------------------------------------------------------------------ */

int weft__poller_add(weft__pollset *ps, const weft__poll_ops *ops, void *arg, int *slot)
{
    for (int i = 0; i < WEFT__MAX_POLLERS; i++) {
        weft__poller *p = &ps->slot[i];
        bool no = false;
        if (!atomic_compare_exchange_strong(&p->taken, &no, true))
            continue;
        p->name = ops->name;
        atomic_store(&p->arg, arg);
        atomic_store(&p->poll, ops->poll); /* published last: a caller that reads it reads arg too */
        atomic_fetch_add(&ps->n, 1);
        *slot = i;
        return 0;
    }
    *slot = -1;
    return WEFT_ENOMEM;
}

void weft__poller_remove(weft__pollset *ps, int slot)
{
    weft__poller *p = &ps->slot[slot];
    atomic_store(&p->poll, NULL);
    while (atomic_load(&p->users) > 0) /* a caller inside it: a progress step is short */
        sched_yield();
    atomic_store(&p->arg, NULL);
    p->name = NULL;
    atomic_fetch_sub(&ps->n, 1);
    atomic_store(&p->taken, false);
}

void weft__poll_waiting(weft__pollset *ps, bool yield)
{
    /* An idle worker that spins runs the steps between its looks for work,
     * and what they complete releases its successor onto that worker's
     * queue; a second poller would only take turns with it at a
     * communicator's lock, on the cores it needs.  Work in flight of which
     * nothing ended: this thread spins, and the threads it waits for
     * (another rank's, on an oversubscribed machine) may need its core. */
    if (atomic_load_explicit(&ps->idle_pollers, memory_order_relaxed) > 0) {
        if (yield)
            sched_yield();
    } else if (weft__poll(ps) == WEFT__POLL_BUSY && yield) {
        sched_yield();
    }
}
