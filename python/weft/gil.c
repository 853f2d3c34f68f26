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

/* Workers of one runtime hand the GIL to each other without sleeping.
 * Before taking the GIL a worker claims r->py_busy (0 -> 1); while another
 * worker holds the claim it may spin rather than sleep in the GIL's
 * condition variable, whose wake-up costs more than an empty Python task.
 * After the spin it takes the GIL anyway (a body that runs long Python
 * code, or one that released the GIL in NumPy, must not serialise the
 * others).  The claim is dropped right after the GIL is released.  A
 * non-worker thread (the main thread spawning) never claims, so workers
 * never spin against it.  On a free-threaded build running without the GIL
 * (r->gil_off) there is nothing to hand off: no claim, no spin.
 *
 * The claim covers the whole body, also its parts that run with the GIL
 * released (a C kernel through ctypes, NumPy): a worker that spins against
 * such a body waits for nothing, the GIL being free.  So the spin adapts to
 * whether it works: r->gil_spin_now, at most r->spin_gil_ns (gil_spin_ns),
 * doubles when a spin got the claim in time and halves when it ran out
 * while a worker's body ran (r->py_in_body), down to 0: take the GIL at
 * once.  At 0, one contended take in
 * GIL_PROBE_EVERY (on each worker) spins a quarter of gil_spin_ns, so that
 * short bodies that hold the GIL bring the spin back.  Empty and short
 * bodies keep the full spin; bodies longer than it, whether in Python or
 * in C, end up not spinning. */
#define GIL_PROBE_EVERY 32u

static _Thread_local unsigned tl_unspun; /* contended takes without a spin, on this worker */

void
weft_py_busy_enter(RuntimeObject *r)
{
    if (r->gil_off) return;
    /* A device thread waiting to run a queued callable goes first: the
     * workers' hand-off would otherwise keep the GIL among themselves, and
     * the device thread would get it only when CPython forces a switch
     * (every 5 ms).  Yielding lets it run on this core. */
    if (atomic_load_explicit(&r->dev_gil_wait, memory_order_relaxed) > 0) {
        uint64_t t0 = weft_py_now_ns();
        while (atomic_load_explicit(&r->dev_gil_wait, memory_order_relaxed) > 0 &&
               weft_py_now_ns() - t0 < r->spin_gil_ns)
            sched_yield();
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
weft_py_busy_exit(RuntimeObject *r)
{
    if (r->gil_off) return;
    atomic_fetch_sub_explicit(&r->py_busy, 1, memory_order_release);
}

/* Take the GIL on a worker (or any thread not holding it).  Returns the
 * gilstate to hand back, or -1 when the persistent thread state was used. */
int
weft_py_gil_take(RuntimeObject *r)
{
    PyThreadState *ts = weft_py_tl_ts;
    if (ts == NULL) return (int)PyGILState_Ensure();
    if (r) weft_py_busy_enter(r);
    PyEval_RestoreThread(ts);
    if (r && !r->gil_off) atomic_store_explicit(&r->py_in_body, 1, memory_order_relaxed);
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
}

void
weft_py_on_worker_stop(unsigned worker, void *arg)
{
    (void)worker;
    (void)arg;
    PyThreadState *ts = weft_py_tl_ts;
    if (ts == NULL) return;
    PyEval_RestoreThread(ts);
    PyThreadState_Clear(ts);
    PyThreadState_DeleteCurrent();
    weft_py_tl_ts = NULL;
}
