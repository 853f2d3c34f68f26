/*
 * gil.c — the thread-local facts about the current thread, the
 * GIL hand-off between workers, and the worker hooks that give each worker
 * its persistent thread state.
 */
#include "_weft.h"

_Thread_local PyThreadState *weft_py_tl_ts;
_Thread_local TaskObject *weft_py_tl_cur;
_Thread_local weft_ctx *weft_py_tl_ctx;
_Thread_local PyObject *weft_py_tl_ctxobj;
_Thread_local int weft_py_tl_attached;

/* ------------------------------------------------------------------------ */
/* GIL hand-off                                                              */
/* ------------------------------------------------------------------------ */

/* Workers of one runtime hand the GIL to each other without sleeping in
 * the GIL's condition variable, whose wake-up costs more than an empty
 * Python task.  A worker counts itself in r->py_busy while it takes and
 * holds the GIL for a body (the spawning thread's SPAWN_YIELD reads it).
 *
 * Where the GIL's own state is known (r->gil, gil_state.c), a worker that
 * needs the GIL spins while another worker of the runtime holds it or has
 * the turn to take it (r->gil_taking), and takes the turn the moment
 * neither is true; the turn ends when its PyEval_RestoreThread returns.
 * One worker at a time so goes for a free GIL: two that both found it free
 * would race in CPython's take, and the loser sleep in its condition
 * variable.  A body that releases the GIL inside (a C call through ctypes,
 * NumPy) lets the next worker in at once: no worker spins against it.  A
 * non-worker thread holding the GIL (the main thread spawning) is not spun
 * against: the worker takes the turn and waits in the GIL.  The spin lasts
 * at most r->spin_gil_ns (gil_spin_ns), then the worker takes the GIL
 * without the turn; at most spinners_max workers spin at once.
 *
 * Where it is not known, the spin follows a claim instead: the first
 * worker claims r->py_busy (0 -> 1), the others spin until the claim is
 * dropped, right after the GIL is released.  The claim covers the whole
 * body, also its parts that run with the GIL released, against which that
 * spin waits for nothing, so it adapts: r->gil_spin_now, at most
 * r->spin_gil_ns, doubles when a spin got the claim in time and halves
 * when it ran out while a worker's body ran (r->py_in_body), down to 0:
 * take the GIL at once.  At 0, one contended take in GIL_PROBE_EVERY (on
 * each worker) spins a quarter of gil_spin_ns, so that short bodies that
 * hold the GIL bring the spin back.
 *
 * On a free-threaded build running without the GIL (r->gil_off) there is
 * nothing to hand off: no count, no spin. */
#define GIL_PROBE_EVERY 32u

static _Thread_local unsigned tl_unspun; /* contended takes without a spin, on this worker */

/* Workers spinning for the GIL now, over every runtime: they share the
 * cores.  At most spinners_max (the CPUs this process may run on, but one:
 * the GIL's holder needs one) spin at once; the others sleep in the GIL. */
static _Atomic int spinners;
static int spinners_max;
static pthread_once_t spinners_once = PTHREAD_ONCE_INIT;

static void
spinners_init(void)
{
    cpu_set_t set;
    int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
    if (n <= 0) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    spinners_max = n > 1 ? n - 1 : 0;
}

/* Whether the GIL's holder ts is one of r's workers. */
static int
gil_holder_is_worker(RuntimeObject *r, uintptr_t ts)
{
    if (ts == 0) return 0;
    unsigned n = atomic_load_explicit(&r->worker_ts_n, memory_order_relaxed);
    for (unsigned i = 0; i < n; i++)
        if ((uintptr_t)atomic_load_explicit(&r->worker_ts[i], memory_order_relaxed) == ts) return 1;
    return 0;
}

static _Thread_local int tl_taking; /* this worker has r->gil_taking (gil.c's turn to take) */

/* Whether another worker of r holds the GIL or has the turn to take it. */
static int
gil_workers_busy(RuntimeObject *r)
{
    if (atomic_load_explicit(&r->gil_taking, memory_order_relaxed)) return 1;
    return atomic_load_explicit(r->gil.locked, memory_order_relaxed) == 1 &&
           gil_holder_is_worker(r, atomic_load_explicit(r->gil.holder, memory_order_relaxed));
}

/* Try to get the turn to take the GIL (r->gil_taking 0 -> 1). */
static int
gil_turn(RuntimeObject *r)
{
    int exp = 0;
    if (!atomic_compare_exchange_strong_explicit(&r->gil_taking, &exp, 1, memory_order_relaxed,
                                                 memory_order_relaxed))
        return 0;
    tl_taking = 1;
    return 1;
}

/* Wait for the turn to take the GIL (r->gil known): spin while another
 * worker of r holds the GIL or has the turn, at most r->spin_gil_ns; the
 * holder is compared, never dereferenced (it may be gone).  Without the
 * turn (the spin ran out, or too many spin) the worker takes the GIL
 * anyway, in CPython's condition variable if it must. */
static void
gil_wait_turn(RuntimeObject *r)
{
    if (!gil_workers_busy(r) && gil_turn(r)) return;
    uint64_t most = r->spin_gil_ns;
    if (most == 0) return;
    pthread_once(&spinners_once, spinners_init);
    if (atomic_fetch_add_explicit(&spinners, 1, memory_order_relaxed) < spinners_max) {
        uint64_t t0 = weft_py_now_ns();
        for (unsigned n = 1;; n++) {
            weft_py_cpu_relax();
            if (!gil_workers_busy(r) && gil_turn(r)) break;
            if ((n & 7) == 0 && weft_py_now_ns() - t0 > most) break;
        }
    }
    atomic_fetch_sub_explicit(&spinners, 1, memory_order_relaxed);
}

_Atomic int weft_py_outside_gil_wait;

/* How long a worker about to take the GIL for a body lets a thread outside
 * the workers take it first (weft_py_outside_gil_wait): a wake-up's time,
 * with room for a loaded machine. */
#define GIL_OUTSIDE_FIRST_NS 1000000u

/* Yield this worker's core while *waiting counts threads that are to take
 * the GIL before it, for at most `most` ns. */
static void
let_first(_Atomic int *waiting, uint64_t most)
{
    if (atomic_load_explicit(waiting, memory_order_relaxed) == 0) return;
    uint64_t t0 = weft_py_now_ns();
    while (atomic_load_explicit(waiting, memory_order_relaxed) > 0 && weft_py_now_ns() - t0 < most)
        sched_yield();
}

void
weft_py_busy_enter(RuntimeObject *r)
{
    if (r->gil_off) return;
    /* A thread outside the workers taking the GIL back after a wait goes
     * first.  A worker that gives the GIL up after one body and takes it
     * again for the next would otherwise take it before that thread wakes,
     * body after body: CPython's waiter forces a switch only when the
     * GIL's switch count stood still for 5 ms, and these takes keep it
     * moving, so the thread (the program's, checking for signals every
     * WAIT_SLICE_NS) could wait until the bodies stop, and its wake-ups
     * on every release slow each hand-off between bodies meanwhile. */
    let_first(&weft_py_outside_gil_wait, GIL_OUTSIDE_FIRST_NS);
    /* A device thread waiting to run a queued callable goes first too, for
     * the same reason (it would get the GIL only when CPython forces a
     * switch, every 5 ms).  Yielding lets it run on this core. */
    let_first(&r->dev_gil_wait, r->spin_gil_ns);
    if (r->gil.locked) {
        atomic_fetch_add_explicit(&r->py_busy, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&r->gil_waiting, 1, memory_order_relaxed);
        gil_wait_turn(r);
        return;
    }
    int exp = 0;
    if (atomic_compare_exchange_strong_explicit(&r->py_busy, &exp, 1, memory_order_acquire,
                                                memory_order_relaxed))
        return;
    uint64_t most = r->spin_gil_ns;
    uint64_t spin = atomic_load_explicit(&r->gil_spin_now, memory_order_relaxed);
    if (spin == 0 && most && ++tl_unspun % GIL_PROBE_EVERY == 0) spin = most / 4;
    if (spin) {
        uint64_t t0 = weft_py_now_ns();
        for (unsigned n = 1;; n++) {
            weft_py_cpu_relax();
            if (atomic_load_explicit(&r->py_busy, memory_order_relaxed) == 0) {
                exp = 0;
                if (atomic_compare_exchange_weak_explicit(&r->py_busy, &exp, 1, memory_order_acquire,
                                                          memory_order_relaxed)) {
                    uint64_t up = spin * 2 > most ? most : spin * 2;
                    if (up != spin) atomic_store_explicit(&r->gil_spin_now, up, memory_order_relaxed);
                    return;
                }
            }
            if ((n & 7) == 0 && weft_py_now_ns() - t0 > spin) break;
        }
        /* Ran out while a worker's body ran: bodies are longer than this
         * spin.  (While the claim's holder still waits for the GIL, behind
         * the spawning thread, the time-out says nothing about bodies.) */
        if (atomic_load_explicit(&r->py_in_body, memory_order_relaxed)) {
            uint64_t down = spin / 2 < most / 64 ? 0 : spin / 2;
            atomic_store_explicit(&r->gil_spin_now, down, memory_order_relaxed);
        }
    }
    atomic_fetch_add_explicit(&r->py_busy, 1, memory_order_relaxed);
}

void
weft_py_busy_taken(RuntimeObject *r)
{
    if (r->gil.locked) atomic_fetch_sub_explicit(&r->gil_waiting, 1, memory_order_relaxed);
    if (tl_taking) {
        tl_taking = 0;
        atomic_store_explicit(&r->gil_taking, 0, memory_order_relaxed);
    }
}

void
weft_py_busy_exit(RuntimeObject *r)
{
    if (r->gil_off) return;
    atomic_fetch_sub_explicit(&r->py_busy, 1, memory_order_release);
}

static _Thread_local int tl_held;               /* this worker kept the GIL from its last body */
static _Thread_local uint64_t tl_held_since;   /* when it first kept it, of the bodies since its take */
static _Thread_local unsigned long tl_switches; /* the GIL's switch count when its body began */

/* Take the GIL on a worker (or any thread not holding it).  Returns the
 * gilstate to hand back, or -1 when the persistent thread state was used. */
int
weft_py_gil_take(RuntimeObject *r)
{
    PyThreadState *ts = weft_py_tl_ts;
    if (ts == NULL) return (int)PyGILState_Ensure();
    if (r) weft_py_busy_enter(r);
    PyEval_RestoreThread(ts);
    if (r) weft_py_busy_taken(r);
    if (r && !r->gil_off) {
        atomic_store_explicit(&r->py_in_body, 1, memory_order_relaxed);
        if (r->gil.switches) {
            tl_held_since = 0;
            tl_switches = *r->gil.switches;
        }
    }
    return -1;
}

void
weft_py_gil_give(RuntimeObject *r, int g)
{
    if (g == -1) {
        if (r && !r->gil_off) atomic_store_explicit(&r->py_in_body, 0, memory_order_relaxed);
        PyEval_SaveThread();
        if (r) weft_py_busy_exit(r);
    } else {
        PyGILState_Release((PyGILState_STATE)g);
    }
}

/* Holding the GIL over from one body to the next.  A worker that gives the
 * GIL back after each body and takes it again before the next pays, per
 * body, a release that wakes the other worker asleep in the GIL (to find
 * it taken again), and a take: bodies that hold the GIL throughout lose
 * several per cent to it (T = 200 us, f = 1: 0.89-0.91 of the bound,
 * against 0.95-0.97 with the GIL kept).  So a worker keeps the GIL for its next body
 * when another worker waits for it (r->gil_waiting) and has waited in vain
 * all through this body: no thread took the GIL meanwhile (its switch
 * count did not move: gil_state.h), so the bodies hold it throughout and a
 * hand-off would only cost.  It keeps it only if the C runtime runs that
 * next body at once (a plain task's: weft_ctx_hold_over), and lets go
 * otherwise (weft_py_on_worker_let_go, before it idles or runs anything
 * else).  Where the body let another thread in (a C part run with the GIL
 * released), or nobody waits, it gives the GIL back at once, so that a
 * take at the end of another's C part, which sleeps if the GIL is held,
 * finds it free.  It keeps it at most r->gil_hold_ns over the bodies
 * after the first it kept it for, so that threads asleep in the GIL (the
 * main thread, a worker whose body waits in CPython) get it without
 * waiting for CPython's switch interval (5 ms), and not while a device
 * thread waits for it.  Without a view of the GIL's state (r->gil), it
 * gives the GIL back after every body. */
int
weft_py_gil_held_over(RuntimeObject *r)
{
    int held = tl_held;
    if (held) {
        tl_held = 0;
        tl_switches = *r->gil.switches;
        atomic_fetch_add_explicit(&r->gil_kept, 1, memory_order_relaxed);
    }
    return held;
}

/* Whether this worker keeps the GIL for its next body (the rule above). */
static int
gil_keep(RuntimeObject *r, weft_ctx *ctx)
{
    /* (Cheapest first: this runs with the GIL held, after every body.) */
    if (r->gil_off || !r->gil.switches || *r->gil.switches != tl_switches || !r->gil_hold_ns ||
        atomic_load_explicit(&r->gil_waiting, memory_order_relaxed) == 0 ||
        atomic_load_explicit(&r->dev_gil_wait, memory_order_relaxed) > 0 ||
        atomic_load_explicit(&weft_py_outside_gil_wait, memory_order_relaxed) > 0)
        return 0;
    uint64_t now = weft_py_now_ns();
    if (tl_held_since == 0) tl_held_since = now;
    else if (now - tl_held_since >= r->gil_hold_ns) return 0;
    return weft_ctx_hold_over(ctx);
}

void
weft_py_gil_body_give(RuntimeObject *r, int g, weft_ctx *ctx)
{
    if (g == -1 && r && gil_keep(r, ctx)) {
        tl_held = 1;
        weft_py_tl_attached = 1; /* (an argument destructor run meanwhile finds it held) */
        return;
    }
    weft_py_gil_give(r, g);
}

void
weft_py_on_worker_let_go(unsigned worker, void *arg)
{
    (void)worker;
    if (!tl_held) return;
    tl_held = 0;
    weft_py_tl_attached = 0;
    weft_py_gil_give(arg, -1);
}

/* ------------------------------------------------------------------------ */
/* Device threads                                                            */
/* ------------------------------------------------------------------------ */

/* A virtual GPU's queue thread keeps one thread state, made on its first
 * queued callable (PyGILState would make and delete one each time, the
 * larger part of a queued callable's cost) and deleted on that thread when
 * it ends (a pthread key's destructor), inside the C runtime's destroy,
 * which the closing thread calls without the GIL.  It must be deleted on
 * its own thread: deleting it from another clears that thread's PyGILState
 * binding (CPython 3.13), which hung the free-threaded suite.  CUDA's
 * host-function thread is not ours (it never ends): PyGILState there. */
static pthread_key_t dev_key;
static pthread_once_t dev_key_once = PTHREAD_ONCE_INIT;
static _Thread_local PyThreadState *tl_dev_ts;

static void
dev_thread_end(void *arg)
{
    PyThreadState *ts = arg;
#if PY_VERSION_HEX >= 0x030D0000
    int finalizing = Py_IsFinalizing();
#else
    int finalizing = _Py_IsFinalizing();
#endif
    if (finalizing) return; /* the interpreter deletes it (or the process ends) */
    PyEval_RestoreThread(ts);
    PyThreadState_Clear(ts);
    PyThreadState_DeleteCurrent();
}

static void
dev_key_make(void)
{
    if (pthread_key_create(&dev_key, dev_thread_end) != 0) dev_key = (pthread_key_t)-1;
}

int
weft_py_dev_gil_take(RuntimeObject *r, int own_thread)
{
    atomic_fetch_add_explicit(&r->dev_gil_wait, 1, memory_order_relaxed);
    int g = -1;
    if (own_thread && !tl_dev_ts) {
        pthread_once(&dev_key_once, dev_key_make);
        PyThreadState *ts = dev_key != (pthread_key_t)-1 ? PyThreadState_New(r->interp) : NULL;
        if (ts && pthread_setspecific(dev_key, ts) != 0) {
            PyEval_RestoreThread(ts);
            PyThreadState_Clear(ts);
            PyThreadState_DeleteCurrent();
            ts = NULL;
        }
        tl_dev_ts = ts;
    }
    if (own_thread && tl_dev_ts) PyEval_RestoreThread(tl_dev_ts);
    else g = (int)PyGILState_Ensure();
    atomic_fetch_sub_explicit(&r->dev_gil_wait, 1, memory_order_relaxed);
    return g;
}

void
weft_py_dev_gil_give(int g)
{
    if (g == -1) PyEval_SaveThread();
    else PyGILState_Release((PyGILState_STATE)g);
}

/* ------------------------------------------------------------------------ */
/* Worker hooks                                                              */
/* ------------------------------------------------------------------------ */

void
weft_py_on_worker_start(unsigned worker, void *arg)
{
    (void)worker;
    RuntimeObject *r = arg;
    /* Created on the worker thread itself so that it is bound to it. */
    weft_py_tl_ts = PyThreadState_New(r->interp);
    if (worker < WEFT_PY_GIL_WORKERS_KNOWN) {
        atomic_store_explicit(&r->worker_ts[worker], weft_py_tl_ts, memory_order_relaxed);
        unsigned n = atomic_load_explicit(&r->worker_ts_n, memory_order_relaxed);
        while (n < worker + 1 && !atomic_compare_exchange_weak_explicit(&r->worker_ts_n, &n, worker + 1,
                                                                       memory_order_relaxed, memory_order_relaxed)) {
        }
    }
}

void
weft_py_on_worker_stop(unsigned worker, void *arg)
{
    RuntimeObject *r = arg;
    PyThreadState *ts = weft_py_tl_ts;
    if (ts == NULL) return;
    /* Before it is deleted: its memory may become another thread's state. */
    if (worker < WEFT_PY_GIL_WORKERS_KNOWN) atomic_store_explicit(&r->worker_ts[worker], NULL, memory_order_relaxed);
    PyEval_RestoreThread(ts);
    PyThreadState_Clear(ts);
    PyThreadState_DeleteCurrent();
    weft_py_tl_ts = NULL;
}
