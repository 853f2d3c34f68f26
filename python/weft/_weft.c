/*
 * _weft.c — the CPython extension behind the `weft` package.
 *
 * Python tasks on Weft's C workers, with the GIL held only while Python code
 * runs.  The design, in short (python/README.md says more):
 *
 *   - A task's C argument is a small malloc'd cell pointing at the Python Task
 *     object (one strong reference).  The C body (`trampoline`) attaches the
 *     worker's persistent thread state, calls fn(*args), stores the result or
 *     the exception (with its traceback) on the Task, drops the references to
 *     fn/args and to the Task, and detaches.  arg_destroy then only has to free
 *     the cell, without the GIL; it takes the GIL only for a task that never
 *     ran (cancelled, or a failed spawn).
 *   - Each worker creates one PyThreadState in on_worker_start and deletes it
 *     in on_worker_stop (which needs the GIL, so destroy runs with the GIL
 *     released), and every blocking call (waits, unregister, destroy, a spawn
 *     that may block under backpressure) releases the GIL.
 *   - `tl_attached` says "this thread holds the GIL inside a Weft call we
 *     made"; a body or an arg_destroy that the C runtime runs inline on such a
 *     thread (helping while spawning, a failed spawn) then runs without
 *     touching the GIL.
 *   - Workers hand the GIL to each other without sleeping: a worker claims
 *     the runtime's `py_busy` counter before taking the GIL and, while
 *     another worker holds the claim, spins briefly instead of sleeping in
 *     CPython's condition variable.  That turns the futex hand-off of the
 *     GIL into a cache-line transfer (see bench/py/).
 *   - Task spaces: T[i] is a Task object in the DECLARED state; spawning a
 *     task that depends on an unsubmitted task (declared, or itself deferred)
 *     defers it: it is recorded on the blocker and submitted to the C runtime
 *     when its last blocker is submitted.  Data accesses keep spawn order: a
 *     spawn that touches data that a deferred task touches is deferred behind
 *     it.
 *
 * Module state holds every type and object; the only static storage is three
 * thread-local pointers describing the thread the code runs on (a worker
 * thread belongs to exactly one runtime, so to one interpreter).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "weft.h"

#if PY_VERSION_HEX < 0x030B0000
#error "weft needs CPython 3.11 or newer"
#endif

#ifndef Py_BEGIN_CRITICAL_SECTION
#define Py_BEGIN_CRITICAL_SECTION(op) {
#define Py_END_CRITICAL_SECTION() }
#endif

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

/* ------------------------------------------------------------------------ */
/* Thread-local facts about the current thread                               */
/* ------------------------------------------------------------------------ */

struct TaskObject;
struct RuntimeObject;

/* The persistent thread state of this worker thread (NULL elsewhere). */
static _Thread_local PyThreadState *tl_ts;
/* The task whose Python body runs on this thread now (innermost). */
static _Thread_local struct TaskObject *tl_cur;
/* Non-zero while this thread holds the GIL inside a call into Weft. */
static _Thread_local int tl_attached;

static uint64_t
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------------------ */
/* Module state                                                              */
/* ------------------------------------------------------------------------ */

typedef struct {
    PyTypeObject *Runtime_T;
    PyTypeObject *Task_T;
    PyTypeObject *Space_T;
    PyTypeObject *Data_T;
    PyObject *CancelledError;
    PyObject *stack;      /* list of (runtime, owner): runtimes entered with `with`,
                             innermost last; owner is the task whose body entered the
                             block, or None outside tasks */
    PyObject *open;       /* list: runtimes not closed yet (keeps them alive) */
    PyObject *empty_tuple;
    PyObject *s_deps, *s_reads, *s_writes, *s_readwrites, *s_commutes, *s_name,
        *s_priority, *s_task, *s_kwargs, *s_runtime, *s_add_note;
} modstate;

static struct PyModuleDef weft_module;

static inline modstate *
state_of_module(PyObject *m)
{
    return (modstate *)PyModule_GetState(m);
}

static modstate *
state_of_type(PyTypeObject *tp)
{
    PyObject *m = PyType_GetModuleByDef(tp, &weft_module);
    return m ? state_of_module(m) : NULL;
}

/* ------------------------------------------------------------------------ */
/* Objects                                                                   */
/* ------------------------------------------------------------------------ */

enum task_phase {
    PH_DECLARED = 0,  /* a task-space slot nobody spawned into yet */
    PH_DEFERRED = 1,  /* spawned, waiting for unsubmitted tasks it follows */
    PH_SUBMITTED = 2, /* in the C runtime (h is valid) */
    PH_DEAD = 3       /* never entered the runtime: cancelled or failed to spawn */
};

typedef struct RuntimeObject {
    PyObject_HEAD
    weft_runtime *rt; /* NULL once closed */
    PyObject *module; /* strong: keeps the module state alive */
    modstate *st;
    PyInterpreterState *interp;
    unsigned workers;
    size_t soft_limit;          /* spawn keeps the GIL below this many in flight */
    _Atomic size_t inflight;    /* tasks of ours in the C runtime */
    _Atomic int py_busy;        /* workers holding or taking the GIL now */
    int spawn_gil;              /* SPAWN_HOLD, SPAWN_RELEASE or SPAWN_YIELD */
    PyObject *failures;         /* dict Task -> None: failures since the last wait_all that
                                   the program has not retrieved, in order (strong) */
    PyObject *failed;           /* dict PyLong(Task *) -> None: every failed Task still alive
                                   (borrowed; Task_dealloc removes its entry), to find the
                                   exception that a cancelled dependent names as its cause */
    PyObject *data_map;         /* dict id(obj) -> Data */
    PyObject *deferred;         /* set of deferred tasks */
    uint64_t spin_gil_ns;
    int closing;
    PyObject *weakreflist;
} RuntimeObject;

typedef struct TaskObject {
    PyObject_HEAD
    RuntimeObject *rt;     /* strong; NULL while declared */
    weft_task *h;          /* the C handle once submitted */
    PyObject *fn, *args, *kwargs;
    PyObject *result;
    PyObject *exc;
    PyObject *name;        /* str: user name or space label; may be NULL */
    PyObject *space;       /* the TaskSpace this slot belongs to (strong) */
    PyObject *key;         /* its key there */
    int phase;
    int priority;
    int cancel_requested;
    int ran;               /* the body finished (result/exc are final) */
    int retrieved;         /* its exception was handed to the user */
    int in_failed;         /* listed in rt->failed */
    Py_ssize_t nblockers;
    PyObject *waiters;     /* list of tasks blocked on this one's submission */
    PyObject *pend_deps;   /* deferred: tuple of Task */
    PyObject *pend_data;   /* deferred: tuple of Data */
    unsigned *pend_modes;  /* deferred: one mode per pend_data item */
    PyObject *weakreflist;
} TaskObject;

typedef struct {
    PyObject_HEAD
    PyObject *name;
    PyObject *tasks; /* dict key -> Task */
} SpaceObject;

typedef struct DataObject {
    PyObject_HEAD
    RuntimeObject *rt; /* strong */
    PyObject *obj;     /* the buffer object (strong) */
    Py_buffer view;
    int has_view;
    int readonly;
    weft_data *d;      /* NULL once unregistered */
    TaskObject *pending_tail; /* last deferred task touching it (borrowed; cleared on submit) */
    char dummy;        /* stands in for a zero-length buffer */
} DataObject;

typedef struct {
    TaskObject *t;     /* strong until the body ran or the task was dropped */
    RuntimeObject *rt; /* borrowed: an open runtime is kept alive by st->open */
} cell;

/* ------------------------------------------------------------------------ */
/* Exceptions helpers                                                        */
/* ------------------------------------------------------------------------ */

static PyObject *
fetch_exc(void)
{
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    if (tb && v) PyException_SetTraceback(v, tb);
    Py_XDECREF(t);
    Py_XDECREF(tb);
    return v;
#endif
}

static void
raise_exc(PyObject *e)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(Py_NewRef(e));
#else
    PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(e)), Py_NewRef(e), PyException_GetTraceback(e));
#endif
}

static PyObject *
err_weft(int rc, const char *what)
{
    PyObject *exc = PyExc_RuntimeError;
    if (rc == WEFT_ENOMEM) exc = PyExc_MemoryError;
    else if (rc == WEFT_EINVAL) exc = PyExc_ValueError;
    const char *msg = weft_last_error();
    if (msg && *msg)
        PyErr_Format(exc, "%s: %s (%s)", what, msg, weft_strerror(rc));
    else
        PyErr_Format(exc, "%s: %s", what, weft_strerror(rc));
    return NULL;
}

static const char *
utf8_or(PyObject *s, const char *dflt)
{
    const char *u = s ? PyUnicode_AsUTF8(s) : NULL;
    if (u == NULL) {
        PyErr_Clear();
        return dflt;
    }
    return u;
}

/* ------------------------------------------------------------------------ */
/* GIL hand-off                                                              */
/* ------------------------------------------------------------------------ */

/* Take the GIL on a worker (or any thread not holding it).  Returns the
 * gilstate to hand back, or -1 when the persistent thread state was used. */
/* Workers of one runtime hand the GIL to each other without sleeping.
 * Before taking the GIL a worker claims r->py_busy (0 -> 1); while another
 * worker holds the claim it spins (at most r->spin_gil_ns) rather than
 * sleeping in the GIL's condition variable, whose wake-up costs more than an
 * empty Python task.  After the spin it takes the GIL anyway (a body that
 * runs long Python code, or one that released the GIL in NumPy, must not
 * serialise the others).  The claim is dropped right after the GIL is
 * released.  A non-worker thread (the main thread spawning) never claims, so
 * workers never spin against it. */
static inline void
py_enter(RuntimeObject *r)
{
    int exp = 0;
    if (atomic_compare_exchange_strong_explicit(&r->py_busy, &exp, 1, memory_order_acquire,
                                                memory_order_relaxed))
        return;
    if (r->spin_gil_ns) {
        uint64_t t0 = now_ns();
        for (unsigned n = 1;; n++) {
            cpu_relax();
            if (atomic_load_explicit(&r->py_busy, memory_order_relaxed) == 0) {
                exp = 0;
                if (atomic_compare_exchange_weak_explicit(&r->py_busy, &exp, 1, memory_order_acquire,
                                                          memory_order_relaxed))
                    return;
            }
            if ((n & 63) == 0 && now_ns() - t0 > r->spin_gil_ns) break;
        }
    }
    atomic_fetch_add_explicit(&r->py_busy, 1, memory_order_relaxed);
}

static inline void
py_exit(RuntimeObject *r)
{
    atomic_fetch_sub_explicit(&r->py_busy, 1, memory_order_release);
}

static int
gil_take(RuntimeObject *r)
{
    PyThreadState *ts = tl_ts;
    if (ts == NULL) return (int)PyGILState_Ensure();
    if (r) py_enter(r);
    PyEval_RestoreThread(ts);
    return -1;
}

static void
gil_give(RuntimeObject *r, int g)
{
    if (g == -1) {
        PyEval_SaveThread();
        if (r) py_exit(r);
    } else {
        PyGILState_Release((PyGILState_STATE)g);
    }
}

/* Release the GIL around a C call that may block or run tasks inline. */
#define BEGIN_NOGIL                                  \
    {                                                \
        int _prev_att = tl_attached;                 \
        tl_attached = 0;                             \
        PyThreadState *_save = PyEval_SaveThread();

#define END_NOGIL                                    \
        PyEval_RestoreThread(_save);                 \
        tl_attached = _prev_att;                     \
    }

/* Release the GIL on a worker that advertises itself as the GIL owner. */
static inline RuntimeObject *
owner_rt(void)
{
    return tl_cur ? tl_cur->rt : NULL;
}

#define BEGIN_NOGIL_W                                                        \
    {                                                                        \
        int _prev_att = tl_attached;                                         \
        RuntimeObject *_own_rt = tl_ts ? owner_rt() : NULL;                  \
        tl_attached = 0;                                                     \
        PyThreadState *_save = PyEval_SaveThread();                          \
        if (_own_rt) py_exit(_own_rt);

#define END_NOGIL_W                                                          \
        if (_own_rt) py_enter(_own_rt);                                      \
        PyEval_RestoreThread(_save);                                         \
        tl_attached = _prev_att;                                             \
    }

/* ------------------------------------------------------------------------ */
/* Worker hooks, body trampoline, argument destructor                        */
/* ------------------------------------------------------------------------ */

static void
on_worker_start(unsigned worker, void *arg)
{
    (void)worker;
    RuntimeObject *r = arg;
    /* Created on the worker thread itself so that it is bound to it. */
    tl_ts = PyThreadState_New(r->interp);
}

static void
on_worker_stop(unsigned worker, void *arg)
{
    (void)worker;
    (void)arg;
    PyThreadState *ts = tl_ts;
    if (ts == NULL) return;
    PyEval_RestoreThread(ts);
    PyThreadState_Clear(ts);
    PyThreadState_DeleteCurrent();
    tl_ts = NULL;
}

static void record_failure(RuntimeObject *r, TaskObject *t, PyObject *fn, PyObject *exc);

static int
trampoline(weft_ctx *ctx, void *arg)
{
    (void)ctx;
    cell *c = arg;
    RuntimeObject *r = c->rt;
    int attached = tl_attached;
    int g = 0;
    if (!attached) g = gil_take(r);
    tl_attached = 1;

    TaskObject *t = c->t;
    c->t = NULL; /* we own the reference now */
    TaskObject *prev = tl_cur;
    tl_cur = t;

    PyObject *fn = t->fn, *args = t->args, *kwargs = t->kwargs;
    t->fn = t->args = t->kwargs = NULL;
    PyObject *res;
    if (args == NULL)
        res = kwargs ? PyObject_Call(fn, r->st->empty_tuple, kwargs) : PyObject_CallNoArgs(fn);
    else if (kwargs == NULL)
        res = PyObject_Vectorcall(fn, &PyTuple_GET_ITEM(args, 0), PyTuple_GET_SIZE(args), NULL);
    else
        res = PyObject_Call(fn, args, kwargs);
    int rc = 0;
    if (res != NULL) {
        t->result = res;
    } else {
        PyObject *exc = fetch_exc();
        rc = 1;
        if (exc == NULL) exc = PyObject_CallOneArg(PyExc_SystemError, NULL);
        if (exc) record_failure(r, t, fn, exc);
        t->exc = exc;
    }
    t->ran = 1;
    Py_DECREF(fn);
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    tl_cur = prev;
    Py_DECREF(t);
    tl_attached = attached;
    if (!attached) gil_give(r, g);
    return rc;
}

static void
arg_destroy(void *arg)
{
    cell *c = arg;
    RuntimeObject *r = c->rt;
    if (c->t != NULL) {
        /* The body never ran: cancelled, or the spawn failed. */
        int attached = tl_attached;
        int g = 0;
        if (!attached) g = gil_take(NULL);
        tl_attached = 1;
        TaskObject *t = c->t;
        c->t = NULL;
        PyObject *fn = t->fn, *args = t->args, *kwargs = t->kwargs;
        t->fn = t->args = t->kwargs = NULL;
        Py_XDECREF(fn);
        Py_XDECREF(args);
        Py_XDECREF(kwargs);
        Py_DECREF(t);
        tl_attached = attached;
        if (!attached) gil_give(NULL, g);
    }
    atomic_fetch_sub_explicit(&r->inflight, 1, memory_order_relaxed);
    free(c);
}

/* ------------------------------------------------------------------------ */
/* Failures                                                                  */
/* ------------------------------------------------------------------------ */

/* Has the exception a note from weft already (it went through a task that
 * waited for the one that raised it)? */
static int
has_weft_note(PyObject *exc)
{
    PyObject *notes = PyObject_GetAttrString(exc, "__notes__");
    if (notes == NULL) {
        PyErr_Clear();
        return 0;
    }
    int found = 0;
    if (PyList_Check(notes))
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(notes) && !found; i++) {
            PyObject *n = PyList_GET_ITEM(notes, i);
            if (PyUnicode_Check(n)) {
                const char *u = PyUnicode_AsUTF8(n);
                found = u && (strncmp(u, "raised by weft task", 19) == 0 ||
                              strncmp(u, "raised by a weft task", 21) == 0);
            }
        }
    Py_DECREF(notes);
    if (PyErr_Occurred()) PyErr_Clear();
    return found;
}

static void
record_failure(RuntimeObject *r, TaskObject *t, PyObject *fn, PyObject *exc)
{
    /* A note naming the task, shown under the traceback. */
    if (PyExceptionInstance_Check(exc) && !has_weft_note(exc)) {
        PyObject *note;
        if (t->name)
            note = PyUnicode_FromFormat("raised by weft task %R", t->name);
        else
            note = PyUnicode_FromFormat("raised by a weft task running %R", fn);
        if (note) {
            PyObject *rv = PyObject_CallMethodOneArg(exc, r->st->s_add_note, note);
            Py_XDECREF(rv);
            Py_DECREF(note);
        }
        if (PyErr_Occurred()) PyErr_Clear();
    }
    /* For wait_all until the program retrieves it (task_retrieved): the
     * runtime holds the Task, so its exception, only that long.  Unbounded:
     * one entry per failure nobody has looked at yet. */
    if (r->failures && PyDict_SetItem(r->failures, (PyObject *)t, Py_None) < 0) PyErr_Clear();
    /* For the CancelledError of its dependents, as long as the Task lives. */
    if (r->failed && !t->in_failed) {
        PyObject *k = PyLong_FromVoidPtr(t);
        if (k && PyDict_SetItem(r->failed, k, Py_None) == 0) t->in_failed = 1;
        else PyErr_Clear();
        Py_XDECREF(k);
    }
}

/* The program has seen t's exception (.result() raised it, .exception()
 * returned it): wait_all no longer raises it, and the runtime lets go of t. */
static void
task_retrieved(TaskObject *t)
{
    if (t->retrieved) return;
    t->retrieved = 1;
    RuntimeObject *r = t->rt;
    if (r == NULL || r->failures == NULL) return;
    int has = PyDict_Contains(r->failures, (PyObject *)t);
    if (has > 0 && PyDict_DelItem(r->failures, (PyObject *)t) < 0) has = -1;
    if (has < 0) PyErr_Clear();
}

/* A failed task is being freed: drop its entry in rt->failed. */
static void
task_forget_failure(TaskObject *t)
{
    if (!t->in_failed) return;
    t->in_failed = 0;
    RuntimeObject *r = t->rt;
    if (r == NULL || r->failed == NULL) return;
    PyObject *saved = fetch_exc();
    PyObject *k = PyLong_FromVoidPtr(t);
    if (k == NULL || PyDict_DelItem(r->failed, k) < 0) PyErr_Clear();
    Py_XDECREF(k);
    if (saved) {
        raise_exc(saved);
        Py_DECREF(saved);
    }
}

/* The exception of the failed task with this id, if that Task still lives. */
static PyObject *
find_failure(RuntimeObject *r, uint64_t id)
{
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (r->failed && PyDict_Next(r->failed, &pos, &k, &v)) {
        TaskObject *f = PyLong_AsVoidPtr(k);
        weft_task_info info;
        if (f && f->h && f->exc && weft_task_info_get(f->h, &info) == 0 && info.id == id)
            return Py_NewRef(f->exc);
    }
    if (PyErr_Occurred()) PyErr_Clear();
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Helpers on tasks                                                          */
/* ------------------------------------------------------------------------ */

static const char *
phase_status(TaskObject *t, weft_task_status *cs)
{
    static const char *names[] = {"waiting", "ready", "running", "completed", "failed", "cancelled"};
    switch (t->phase) {
    case PH_DECLARED: return "declared";
    case PH_DEFERRED: return "deferred";
    case PH_DEAD: return "cancelled";
    default: break;
    }
    weft_task_status s;
    if (weft_task_status_get(t->h, &s) != 0) {
        /* Handle unusable (runtime destroyed): the body outcome decides. */
        if (t->ran) s = t->exc ? WEFT_TASK_FAILED : WEFT_TASK_COMPLETED;
        else s = WEFT_TASK_CANCELLED;
    }
    if (cs) *cs = s;
    if ((unsigned)s < 6) return names[s];
    return "unknown";
}

static PyObject *
task_label(TaskObject *t)
{
    if (t->name) return Py_NewRef(t->name);
    return Py_NewRef(Py_None);
}

/* The exception that .result() raises for a cancelled task (cached). */
static PyObject *
make_cancelled(TaskObject *t, const char *why)
{
    modstate *st = state_of_type(Py_TYPE(t));
    if (st == NULL) return NULL;
    PyObject *label = task_label(t);
    if (label == NULL) return NULL;
    PyObject *msg = NULL, *cause = NULL, *cause_name = NULL;
    unsigned long long cause_id = 0, own_id = 0;
    weft_task_info info;
    if (why == NULL && t->h && weft_task_info_get(t->h, &info) == 0) {
        own_id = info.id;
        cause_id = info.cause_id;
        cause_name = PyUnicode_DecodeUTF8(info.cause_name, strnlen(info.cause_name, sizeof info.cause_name), "replace");
        if (cause_name == NULL) goto done;
        if (cause_id && cause_id != own_id && t->rt) cause = find_failure(t->rt, cause_id);
        PyObject *who = t->name ? PyUnicode_FromFormat("%R (id %llu)", t->name, own_id)
                                : PyUnicode_FromFormat("id %llu", own_id);
        PyObject *by = PyUnicode_GET_LENGTH(cause_name) > 0
                           ? PyUnicode_FromFormat("'%U' (id %llu)", cause_name, cause_id)
                           : PyUnicode_FromFormat("id %llu", cause_id);
        if (who && by) {
            if (cause_id == 0 || cause_id == own_id)
                msg = PyUnicode_FromFormat("task %U was cancelled", who);
            else if (cause)
                msg = PyUnicode_FromFormat("task %U was cancelled because task %U failed: %R", who, by, cause);
            else
                msg = PyUnicode_FromFormat("task %U was cancelled because task %U failed or was cancelled",
                                           who, by);
        }
        Py_XDECREF(who);
        Py_XDECREF(by);
    } else {
        if (t->name)
            msg = PyUnicode_FromFormat("task %R was cancelled: %s", t->name, why ? why : "it never ran");
        else
            msg = PyUnicode_FromFormat("a task was cancelled: %s", why ? why : "it never ran");
        cause_name = Py_NewRef(Py_None);
    }
    if (msg == NULL) goto done;
    PyObject *e = PyObject_CallOneArg(st->CancelledError, msg);
    if (e) {
        PyObject *cid = PyLong_FromUnsignedLongLong(cause_id);
        if (cid == NULL || PyObject_SetAttrString(e, "task_name", label) < 0 ||
            PyObject_SetAttrString(e, "cause_id", cid) < 0 ||
            PyObject_SetAttrString(e, "cause_name", cause_name) < 0) {
            Py_CLEAR(e);
        } else if (cause) {
            PyException_SetCause(e, Py_NewRef(cause));
        }
        Py_XDECREF(cid);
    }
    Py_DECREF(msg);
    Py_XDECREF(cause);
    Py_XDECREF(cause_name);
    Py_DECREF(label);
    return e;
done:
    Py_XDECREF(cause);
    Py_XDECREF(cause_name);
    Py_DECREF(label);
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Data                                                                      */
/* ------------------------------------------------------------------------ */

static int
data_release(DataObject *d)
{
    /* Call with the C handle already unregistered (or the runtime gone). */
    d->d = NULL;
    if (d->has_view) {
        d->has_view = 0;
        PyBuffer_Release(&d->view);
    }
    return 0;
}

/* Find or register the data handle for obj (a Data or a buffer object).
 * what: "reads[2]" etc. for messages.  Returns a borrowed reference. */
static DataObject *
data_lookup(RuntimeObject *r, PyObject *obj, const char *what, int want_write)
{
    modstate *st = r->st;
    DataObject *d;
    if (Py_IS_TYPE(obj, st->Data_T)) {
        d = (DataObject *)obj;
        if (d->rt != r) {
            PyErr_Format(PyExc_ValueError, "%s: this weft.Data belongs to another runtime", what);
            return NULL;
        }
        if (d->d == NULL) {
            PyErr_Format(PyExc_ValueError, "%s: this weft.Data was unregistered", what);
            return NULL;
        }
    } else {
        PyObject *k = PyLong_FromVoidPtr(obj);
        if (k == NULL) return NULL;
        d = (DataObject *)PyDict_GetItemWithError(r->data_map, k);
        if (d == NULL) {
            Py_DECREF(k);
            if (PyErr_Occurred()) return NULL;
            if (!PyObject_CheckBuffer(obj)) {
                PyErr_Format(PyExc_TypeError,
                             "%s: expected a weft.Data or an object supporting the buffer "
                             "protocol (bytearray, memoryview, numpy array...), got '%.100s'",
                             what, Py_TYPE(obj)->tp_name);
                return NULL;
            }
            d = PyObject_GC_New(DataObject, st->Data_T);
            if (d == NULL) return NULL;
            d->rt = (RuntimeObject *)Py_NewRef(r);
            d->obj = Py_NewRef(obj);
            d->has_view = 0;
            d->readonly = 0;
            d->d = NULL;
            d->pending_tail = NULL;
            PyObject_GC_Track(d);
            if (PyObject_GetBuffer(obj, &d->view, PyBUF_ANY_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
                PyErr_Clear();
                if (PyObject_GetBuffer(obj, &d->view, PyBUF_ANY_CONTIGUOUS) < 0) {
                    PyObject *cause = fetch_exc();
                    PyErr_Format(PyExc_ValueError, "%s: '%.100s' object does not export a contiguous "
                                 "buffer", what, Py_TYPE(obj)->tp_name);
                    if (cause) {
                        PyObject *e = fetch_exc();
                        PyException_SetCause(e, cause);
                        raise_exc(e);
                        Py_DECREF(e);
                    }
                    Py_DECREF(d);
                    return NULL;
                }
                d->readonly = 1;
            }
            d->has_view = 1;
            void *p = d->view.buf;
            size_t n = (size_t)d->view.len;
            if (p == NULL || n == 0) {
                p = &d->dummy;
                n = 1;
            }
            int rc = weft_data_register(r->rt, p, n, &d->d);
            if (rc != 0) {
                data_release(d);
                Py_DECREF(d);
                return (DataObject *)err_weft(rc, "registering data");
            }
            k = PyLong_FromVoidPtr(obj);
            if (k == NULL || PyDict_SetItem(r->data_map, k, (PyObject *)d) < 0) {
                Py_XDECREF(k);
                int rc2 = weft_data_unregister(d->d); /* nothing uses it yet: returns at once */
                (void)rc2;
                data_release(d);
                Py_DECREF(d);
                return NULL;
            }
            Py_DECREF(k);
            Py_DECREF(d); /* the map holds it */
        } else {
            Py_DECREF(k);
            if (d->obj != obj) { /* stale entry: cannot happen while d holds obj */
                PyErr_Format(PyExc_RuntimeError, "%s: data registry corrupted", what);
                return NULL;
            }
        }
    }
    if (want_write && d->readonly) {
        PyErr_Format(PyExc_ValueError, "%s: '%.100s' buffer is read-only and cannot be written",
                     what, Py_TYPE(d->obj)->tp_name);
        return NULL;
    }
    return d;
}

/* ------------------------------------------------------------------------ */
/* Runtime resolution                                                        */
/* ------------------------------------------------------------------------ */

/* The runtime of weft.spawn / weft.wait_all / weft.data: inside a task, the
 * innermost `with` block that this task's body entered, else the task's own
 * runtime; outside tasks, the innermost `with` block entered outside tasks
 * (on any thread).  A block entered in a task is thus seen by that task only. */
static RuntimeObject *
current_runtime(modstate *st, int quiet)
{
    PyObject *me = tl_cur ? (PyObject *)tl_cur : Py_None;
    for (Py_ssize_t i = PyList_GET_SIZE(st->stack) - 1; i >= 0; i--) {
        PyObject *e = PyList_GET_ITEM(st->stack, i);
        if (PyTuple_GET_ITEM(e, 1) == me) return (RuntimeObject *)PyTuple_GET_ITEM(e, 0);
    }
    if (tl_cur && tl_cur->rt) return tl_cur->rt;
    if (!quiet)
        PyErr_SetString(PyExc_RuntimeError,
                        "no active weft runtime: use `with weft.Runtime() as rt:` "
                        "(or call rt.spawn / rt.wait_all on a runtime)");
    return NULL;
}

static int
check_open(RuntimeObject *r, const char *what)
{
    if (r->rt == NULL || r->closing) {
        PyErr_Format(PyExc_RuntimeError, "%s: the weft runtime is closed", what);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Spawning                                                                  */
/* ------------------------------------------------------------------------ */

#define SMALL 8

/* How spawn treats the GIL (Runtime(spawn_gil=...), env WEFT_PY_SPAWN_GIL):
 * hold it (default: a spawn that cannot block keeps it), release it around
 * every weft_spawn, or release it only while a worker waits for it. */
enum { SPAWN_HOLD = 0, SPAWN_RELEASE = 1, SPAWN_YIELD = 2 };

/* Submit t to the C runtime with the given C dependencies and accesses. */
static int
submit_c(RuntimeObject *r, TaskObject *t, weft_task **deps, size_t ndeps, weft_access *acc,
         size_t nacc)
{
    cell *c = malloc(sizeof *c);
    if (c == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    c->t = (TaskObject *)Py_NewRef(t);
    c->rt = r;
    weft_task_desc desc;
    weft_task_desc_init(&desc);
    desc.body = trampoline;
    desc.arg = c;
    desc.arg_destroy = arg_destroy;
    desc.deps = deps;
    desc.ndeps = ndeps;
    desc.accesses = acc;
    desc.naccesses = nacc;
    desc.priority = t->priority;
    char namebuf[32];
    if (t->name) {
        Py_ssize_t len;
        const char *s = PyUnicode_AsUTF8AndSize(t->name, &len);
        if (s == NULL) {
            PyErr_Clear();
        } else {
            if (len > 31) len = 31;
            memcpy(namebuf, s, (size_t)len);
            namebuf[len] = 0;
            desc.name = namebuf;
        }
    }
    size_t n = atomic_fetch_add_explicit(&r->inflight, 1, memory_order_relaxed) + 1;
    weft_task *h = NULL;
    int rc;
    int hold = n < r->soft_limit;
    if (hold && r->spawn_gil != SPAWN_HOLD)
        hold = r->spawn_gil == SPAWN_YIELD &&
               atomic_load_explicit(&r->py_busy, memory_order_relaxed) == 0;
    if (hold) {
        /* Cannot block: keep the GIL (a worker may run tasks inline here;
         * tl_attached tells their trampolines that the GIL is ours). */
        int prev = tl_attached;
        tl_attached = 1;
        rc = weft_spawn(r->rt, &desc, &h);
        tl_attached = prev;
    } else {
        BEGIN_NOGIL_W
        rc = weft_spawn(r->rt, &desc, &h);
        END_NOGIL_W
    }
    if (rc != 0) {
        /* arg_destroy ran: the cell is gone, its reference dropped. */
        if (rc == WEFT_ECLOSED) {
            PyErr_SetString(PyExc_RuntimeError, "spawn(): the weft runtime is closed");
            return -1;
        }
        err_weft(rc, "spawn()");
        return -1;
    }
    t->h = h;
    t->phase = PH_SUBMITTED;
    return 0;
}

static int submit_deferred(RuntimeObject *r, TaskObject *t);

/* t just entered the runtime (or died): wake the tasks blocked on it.
 * Iterative, so long chains of placeholders do not recurse. */
static void
notify_submitted(RuntimeObject *r, TaskObject *t0)
{
    PyObject *work = PyList_New(0);
    if (work == NULL) {
        PyErr_Clear();
        return;
    }
    if (PyList_Append(work, (PyObject *)t0) < 0) {
        PyErr_Clear();
        Py_DECREF(work);
        return;
    }
    while (PyList_GET_SIZE(work) > 0) {
        Py_ssize_t last = PyList_GET_SIZE(work) - 1;
        TaskObject *t = (TaskObject *)Py_NewRef(PyList_GET_ITEM(work, last));
        PyList_SetSlice(work, last, last + 1, NULL);
        PyObject *ws = t->waiters;
        t->waiters = NULL;
        if (ws) {
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(ws); i++) {
                TaskObject *w = (TaskObject *)PyList_GET_ITEM(ws, i);
                if (w->phase != PH_DEFERRED) continue;
                if (--w->nblockers == 0) {
                    if (submit_deferred(w->rt ? w->rt : r, w) < 0) PyErr_Clear();
                    if (PyList_Append(work, (PyObject *)w) < 0) PyErr_Clear();
                }
            }
            Py_DECREF(ws);
        }
        Py_DECREF(t);
    }
    Py_DECREF(work);
}

static void
clear_pending(TaskObject *t)
{
    if (t->pend_data) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t->pend_data); i++) {
            DataObject *d = (DataObject *)PyTuple_GET_ITEM(t->pend_data, i);
            if (d->pending_tail == t) d->pending_tail = NULL;
        }
    }
    Py_CLEAR(t->pend_deps);
    Py_CLEAR(t->pend_data);
    if (t->pend_modes) {
        PyMem_Free(t->pend_modes);
        t->pend_modes = NULL;
    }
}

/* Mark a task that never entered the runtime as dead, with exception e
 * (stolen; may be NULL to build a CancelledError from why). */
static void
kill_task(RuntimeObject *r, TaskObject *t, PyObject *e, const char *why)
{
    if (e == NULL) {
        e = make_cancelled(t, why);
        if (e == NULL) e = fetch_exc();
    }
    Py_XSETREF(t->exc, e);
    t->phase = PH_DEAD;
    t->ran = 0;
    Py_CLEAR(t->fn);
    Py_CLEAR(t->args);
    Py_CLEAR(t->kwargs);
    clear_pending(t);
    if (r && r->deferred) {
        if (PySet_Discard(r->deferred, (PyObject *)t) < 0) PyErr_Clear();
    }
}

/* All blockers of deferred t have been submitted: submit t. */
static int
submit_deferred(RuntimeObject *r, TaskObject *t)
{
    Py_INCREF(t);
    int ret = 0;
    PyObject *deps = t->pend_deps, *data = t->pend_data;
    Py_ssize_t nd = deps ? PyTuple_GET_SIZE(deps) : 0;
    Py_ssize_t na = data ? PyTuple_GET_SIZE(data) : 0;
    weft_task *dbuf[SMALL], **dv = dbuf;
    weft_access abuf[SMALL], *av = abuf;
    if (nd > SMALL) dv = PyMem_Malloc(sizeof(*dv) * (size_t)nd);
    if (na > SMALL) av = PyMem_Malloc(sizeof(*av) * (size_t)na);
    if (dv == NULL || av == NULL) {
        kill_task(r, t, NULL, "out of memory while spawning it");
        ret = -1;
        goto out;
    }
    if (r->rt == NULL || r->closing) {
        kill_task(r, t, NULL, "the runtime closed before the tasks it follows were spawned");
        goto out;
    }
    for (Py_ssize_t i = 0; i < nd; i++) {
        TaskObject *dep = (TaskObject *)PyTuple_GET_ITEM(deps, i);
        if (dep->phase != PH_SUBMITTED) {
            char buf[160];
            PyObject *lab = task_label(dep);
            snprintf(buf, sizeof buf, "its dependency %s never ran", utf8_or(lab, "(unnamed)"));
            Py_XDECREF(lab);
            if (PyErr_Occurred()) PyErr_Clear();
            kill_task(r, t, NULL, buf);
            goto out;
        }
        if (dep->rt != r) {
            PyObject *e = PyObject_CallFunction(PyExc_ValueError, "s",
                                                "a dependency was spawned on another runtime");
            kill_task(r, t, e, NULL);
            goto out;
        }
        dv[i] = dep->h;
    }
    for (Py_ssize_t i = 0; i < na; i++) {
        DataObject *d = (DataObject *)PyTuple_GET_ITEM(data, i);
        if (d->d == NULL) {
            PyObject *e = PyObject_CallFunction(PyExc_ValueError, "s",
                                                "data it accesses was unregistered before it could be spawned");
            kill_task(r, t, e, NULL);
            goto out;
        }
        av[i].data = d->d;
        av[i].mode = t->pend_modes[i];
    }
    if (submit_c(r, t, dv, (size_t)nd, av, (size_t)na) < 0) {
        kill_task(r, t, fetch_exc(), NULL);
        goto out;
    }
    clear_pending(t);
    if (PySet_Discard(r->deferred, (PyObject *)t) < 0) PyErr_Clear();
    if (t->cancel_requested) {
        int rc = weft_task_cancel(t->h);
        (void)rc;
    }
out:
    if (dv != dbuf) PyMem_Free(dv);
    if (av != abuf) PyMem_Free(av);
    Py_DECREF(t);
    return ret;
}

/* Does `dep` already wait (transitively, through waiter lists) for
 * `slot`?  Then making `slot` wait for `dep` would be a cycle.  Returns 1,
 * 0, or -1 with an exception.  Iterative, with a visited set. */
static int
waits_for(TaskObject *dep, TaskObject *slot)
{
    if (slot->waiters == NULL) return 0;
    PyObject *stack = PyList_New(0), *seen = PySet_New(NULL);
    int found = -1;
    if (stack == NULL || seen == NULL) goto out;
    if (PyList_Append(stack, (PyObject *)slot) < 0) goto out;
    found = 0;
    while (!found && PyList_GET_SIZE(stack) > 0) {
        Py_ssize_t last = PyList_GET_SIZE(stack) - 1;
        TaskObject *x = (TaskObject *)Py_NewRef(PyList_GET_ITEM(stack, last));
        if (PyList_SetSlice(stack, last, last + 1, NULL) < 0) { Py_DECREF(x); found = -1; break; }
        PyObject *ws = x->waiters;
        for (Py_ssize_t i = 0; ws && i < PyList_GET_SIZE(ws); i++) {
            PyObject *w = PyList_GET_ITEM(ws, i);
            if (w == (PyObject *)dep) { found = 1; break; }
            int c = PySet_Contains(seen, w);
            if (c < 0 || (c == 0 && (PySet_Add(seen, w) < 0 || PyList_Append(stack, w) < 0))) {
                found = -1;
                break;
            }
        }
        Py_DECREF(x);
    }
out:
    Py_XDECREF(stack);
    Py_XDECREF(seen);
    return found;
}


typedef struct {
    PyObject *deps, *reads, *writes, *readwrites, *commutes, *name, *priority, *task, *kwargs,
        *runtime;
} spawn_kw;

static int
parse_kw(modstate *st, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, spawn_kw *kw,
         int allow_runtime)
{
    memset(kw, 0, sizeof *kw);
    if (kwnames == NULL) return 0;
    Py_ssize_t n = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, i);
        PyObject *v = args[nargs + i];
        PyObject **slot = NULL;
        if (k == st->s_deps) slot = &kw->deps;
        else if (k == st->s_reads) slot = &kw->reads;
        else if (k == st->s_writes) slot = &kw->writes;
        else if (k == st->s_readwrites) slot = &kw->readwrites;
        else if (k == st->s_commutes) slot = &kw->commutes;
        else if (k == st->s_name) slot = &kw->name;
        else if (k == st->s_priority) slot = &kw->priority;
        else if (k == st->s_task) slot = &kw->task;
        else if (k == st->s_kwargs) slot = &kw->kwargs;
        else if (allow_runtime && k == st->s_runtime) slot = &kw->runtime;
        else {
            PyObject *names[] = {st->s_deps, st->s_reads, st->s_writes, st->s_readwrites,
                                 st->s_commutes, st->s_name, st->s_priority, st->s_task,
                                 st->s_kwargs, allow_runtime ? st->s_runtime : NULL};
            for (size_t j = 0; j < sizeof names / sizeof *names; j++) {
                if (names[j] && PyUnicode_Compare(k, names[j]) == 0) {
                    PyObject **slots[] = {&kw->deps, &kw->reads, &kw->writes, &kw->readwrites,
                                          &kw->commutes, &kw->name, &kw->priority, &kw->task,
                                          &kw->kwargs, &kw->runtime};
                    slot = slots[j];
                    break;
                }
            }
            if (PyErr_Occurred()) return -1;
            if (slot == NULL) {
                PyErr_Format(PyExc_TypeError,
                             "spawn() got an unexpected keyword argument %R (the body's own keyword "
                             "arguments go in kwargs={...})", k);
                return -1;
            }
        }
        *slot = v;
    }
    return 0;
}

/* Items of a deps=/reads=... value: None, one item, or a list/tuple/iterable.
 * Returns a new reference to a list or tuple (or NULL with no error for None). */
static PyObject *
as_seq(PyObject *v, PyTypeObject *single_t, const char *what, int single_ok_any_buffer)
{
    if (v == NULL || v == Py_None) return NULL;
    if (PyList_CheckExact(v) || PyTuple_CheckExact(v)) return Py_NewRef(v);
    if (Py_IS_TYPE(v, single_t) ||
        (single_ok_any_buffer && PyObject_CheckBuffer(v)))
        return PyTuple_Pack(1, v);
    PyObject *it = PySequence_Fast(v, "");
    if (it == NULL) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "spawn(): %s= expects a list of %s, got '%.100s'", what,
                     single_ok_any_buffer ? "buffers or weft.Data" : "weft.Task",
                     Py_TYPE(v)->tp_name);
    }
    return it;
}

static PyObject *spawn_locked(modstate *st, RuntimeObject *r, PyObject *const *args,
                              Py_ssize_t nargs, PyObject *kwnames, PyObject *self_callable);

/* The decorator form binds the body's free variables at spawn time: a
 * Python function with a closure is replaced by a copy of itself whose
 * cells are new cells holding the values the originals hold now (an empty
 * cell stays empty).  So `for i in ...: @weft.spawn() def t(): use(i)` gives
 * each task its own i, as the spawn statement reads.  The objects the cells
 * refer to are shared, not copied; a `nonlocal` assignment in the body
 * changes the copy only.  Anything else (a builtin, a callable object, a
 * function without free variables) is returned as is (a new reference). */
static PyObject *
bind_closure_now(PyObject *fn)
{
    if (!PyFunction_Check(fn)) return Py_NewRef(fn);
    PyObject *closure = PyFunction_GetClosure(fn);
    if (closure == NULL || closure == Py_None || !PyTuple_Check(closure)) return Py_NewRef(fn);
    Py_ssize_t n = PyTuple_GET_SIZE(closure);
    PyObject *cells = PyTuple_New(n);
    if (cells == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *c = PyTuple_GET_ITEM(closure, i);
        PyObject *v = PyCell_Check(c) ? PyCell_Get(c) : NULL;
        if (v == NULL && PyErr_Occurred()) {
            Py_DECREF(cells);
            return NULL;
        }
        PyObject *nc = PyCell_New(v);
        Py_XDECREF(v);
        if (nc == NULL) {
            Py_DECREF(cells);
            return NULL;
        }
        PyTuple_SET_ITEM(cells, i, nc);
    }
    PyObject *qualname = PyObject_GetAttrString(fn, "__qualname__");
    if (qualname == NULL) PyErr_Clear();
    PyObject *copy = PyFunction_NewWithQualName(PyFunction_GetCode(fn), PyFunction_GetGlobals(fn),
                                                qualname);
    Py_XDECREF(qualname);
    PyObject *defaults = PyFunction_GetDefaults(fn), *kwdefaults = PyFunction_GetKwDefaults(fn);
    if (copy == NULL || PyFunction_SetClosure(copy, cells) < 0 ||
        PyFunction_SetDefaults(copy, defaults ? defaults : Py_None) < 0 ||
        PyFunction_SetKwDefaults(copy, kwdefaults ? kwdefaults : Py_None) < 0) {
        Py_XDECREF(copy);
        Py_DECREF(cells);
        return NULL;
    }
    Py_DECREF(cells);
    return copy;
}

/* The function @weft.spawn(...) / @rt.spawn(...) return: self is a tuple
 * (spawn callable, dict of the keywords); called with the body, it spawns
 * it with those keywords and returns the Task. */
static PyObject *
spawn_decorator(PyObject *self, PyObject *fn)
{
    PyObject *bound = bind_closure_now(fn);
    if (bound == NULL) return NULL;
    PyObject *a = PyTuple_Pack(1, bound);
    Py_DECREF(bound);
    if (a == NULL) return NULL;
    PyObject *res = PyObject_Call(PyTuple_GET_ITEM(self, 0), a, PyTuple_GET_ITEM(self, 1));
    Py_DECREF(a);
    return res;
}

static PyMethodDef spawn_decorator_def = {
    "spawn_decorator", spawn_decorator, METH_O,
    "Spawn the decorated function (its free variables bound to their values now) with the "
    "keywords given to spawn(); return the Task."};

/* Resolve the runtime and hold a strong reference to it for the call (a
 * borrowed one from the `with` stack could go away on a free-threaded build
 * if another thread closed it meanwhile). */
static PyObject *
spawn_impl(modstate *st, RuntimeObject *r, PyObject *const *args, Py_ssize_t nargs,
           PyObject *kwnames, PyObject *self_callable)
{
    if (r != NULL || nargs == 0) return spawn_locked(st, r, args, nargs, kwnames, self_callable);
    /* Module-level spawn: find runtime= among the keywords, else the current one. */
    PyObject *rtobj = NULL;
    Py_ssize_t nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nk; i++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, i);
        if (k == st->s_runtime || PyUnicode_Compare(k, st->s_runtime) == 0) {
            rtobj = args[nargs + i];
            break;
        }
        if (PyErr_Occurred()) return NULL;
    }
    if (rtobj == NULL || rtobj == Py_None) {
        RuntimeObject *cur = current_runtime(st, 0);
        if (cur == NULL) {
            if (!PyCallable_Check(args[0])) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError, "spawn(): the task body must be callable, got '%.100s' object",
                             Py_TYPE(args[0])->tp_name);
            }
            return NULL;
        }
        Py_INCREF(cur);
        PyObject *res = spawn_locked(st, NULL, args, nargs, kwnames, self_callable);
        Py_DECREF(cur);
        return res;
    }
    return spawn_locked(st, NULL, args, nargs, kwnames, self_callable);
}

static PyObject *
spawn_locked(modstate *st, RuntimeObject *r, PyObject *const *args, Py_ssize_t nargs,
             PyObject *kwnames, PyObject *self_callable)
{
    spawn_kw kw;
    if (parse_kw(st, args, nargs, kwnames, &kw, r == NULL) < 0) return NULL;
    if (nargs == 0) {
        /* Decorator form: @weft.spawn(deps=..., ...), or @weft.spawn() */
        if (self_callable == NULL) {
            PyErr_SetString(PyExc_TypeError, "spawn() missing the function to run");
            return NULL;
        }
        PyObject *kwd = PyDict_New();
        if (kwd == NULL) return NULL;
        Py_ssize_t nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
        for (Py_ssize_t i = 0; i < nk; i++)
            if (PyDict_SetItem(kwd, PyTuple_GET_ITEM(kwnames, i), args[i]) < 0) {
                Py_DECREF(kwd);
                return NULL;
            }
        PyObject *self = PyTuple_Pack(2, self_callable, kwd);
        Py_DECREF(kwd);
        if (self == NULL) return NULL;
        PyObject *res = PyCFunction_NewEx(&spawn_decorator_def, self, NULL);
        Py_DECREF(self);
        return res;
    }
    PyObject *fn = args[0];
    if (!PyCallable_Check(fn)) {
        PyErr_Format(PyExc_TypeError, "spawn(): the task body must be callable, got '%.100s' object",
                     Py_TYPE(fn)->tp_name);
        return NULL;
    }
    if (r == NULL) {
        if (kw.runtime && kw.runtime != Py_None) {
            if (!Py_IS_TYPE(kw.runtime, st->Runtime_T)) {
                PyErr_Format(PyExc_TypeError, "spawn(): runtime= expects a weft.Runtime, got '%.100s'",
                             Py_TYPE(kw.runtime)->tp_name);
                return NULL;
            }
            r = (RuntimeObject *)kw.runtime;
        } else {
            r = current_runtime(st, 0);
            if (r == NULL) return NULL;
        }
    }
    if (check_open(r, "spawn()") < 0) return NULL;

    int priority = 0;
    if (kw.priority && kw.priority != Py_None) {
        if (!PyLong_Check(kw.priority)) {
            PyErr_Format(PyExc_TypeError, "spawn(): priority= expects an int, got '%.100s'",
                         Py_TYPE(kw.priority)->tp_name);
            return NULL;
        }
        long p = PyLong_AsLong(kw.priority);
        if (p == -1 && PyErr_Occurred()) return NULL;
        if (p < INT32_MIN || p > INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "spawn(): priority= out of range");
            return NULL;
        }
        priority = (int)p;
    }
    if (kw.name && kw.name != Py_None && !PyUnicode_Check(kw.name)) {
        PyErr_Format(PyExc_TypeError, "spawn(): name= expects a str, got '%.100s'",
                     Py_TYPE(kw.name)->tp_name);
        return NULL;
    }
    if (kw.kwargs && kw.kwargs != Py_None && !PyDict_Check(kw.kwargs)) {
        PyErr_Format(PyExc_TypeError, "spawn(): kwargs= expects a dict, got '%.100s'",
                     Py_TYPE(kw.kwargs)->tp_name);
        return NULL;
    }
    TaskObject *slot = NULL;
    if (kw.task && kw.task != Py_None) {
        if (!Py_IS_TYPE(kw.task, st->Task_T)) {
            PyErr_Format(PyExc_TypeError, "spawn(): task= expects a task-space slot such as T[i], "
                         "got '%.100s'", Py_TYPE(kw.task)->tp_name);
            return NULL;
        }
        slot = (TaskObject *)kw.task;
        if (slot->phase != PH_DECLARED) {
            PyErr_Format(PyExc_ValueError, "spawn(): task %R was already spawned",
                         slot->name ? slot->name : Py_None);
            return NULL;
        }
    }

    PyObject *result = NULL;
    PyObject *deps = NULL, *accs[4] = {NULL, NULL, NULL, NULL};
    weft_task *dbuf[SMALL], **dv = dbuf;
    weft_access abuf[SMALL], *av = abuf;
    DataObject *datbuf[SMALL], **datv = datbuf;
    Py_ssize_t nd = 0, na = 0;
    TaskObject *t = NULL;
    static const unsigned modes[4] = {WEFT_R, WEFT_W, WEFT_RW, WEFT_RW | WEFT_COMMUTE};
    static const char *const mode_names[4] = {"reads", "writes", "readwrites", "commutes"};
    PyObject *accv[4] = {kw.reads, kw.writes, kw.readwrites, kw.commutes};

    deps = as_seq(kw.deps, st->Task_T, "deps", 0);
    if (deps == NULL && PyErr_Occurred()) return NULL;
    nd = deps ? PySequence_Fast_GET_SIZE(deps) : 0;
    for (int m = 0; m < 4; m++) {
        accs[m] = as_seq(accv[m], st->Data_T, mode_names[m], 1);
        if (accs[m] == NULL && PyErr_Occurred()) goto done;
        if (accs[m]) na += PySequence_Fast_GET_SIZE(accs[m]);
    }
    if (nd > SMALL) dv = PyMem_Malloc(sizeof(*dv) * (size_t)nd);
    if (na > SMALL) {
        av = PyMem_Malloc(sizeof(*av) * (size_t)na);
        datv = PyMem_Malloc(sizeof(*datv) * (size_t)na);
    }
    if (dv == NULL || av == NULL || datv == NULL) {
        PyErr_NoMemory();
        goto done;
    }

    Py_BEGIN_CRITICAL_SECTION(r);
    Py_ssize_t nblock = 0;
    int dead_dep = -1;
    for (Py_ssize_t i = 0; i < nd; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(deps, i);
        if (!Py_IS_TYPE(o, st->Task_T)) {
            PyErr_Format(PyExc_TypeError, "spawn(): deps[%zd] is not a weft.Task but '%.100s'", i,
                         Py_TYPE(o)->tp_name);
            goto unlock;
        }
        TaskObject *dep = (TaskObject *)o;
        if (dep->rt && dep->rt != r) {
            PyErr_Format(PyExc_ValueError, "spawn(): deps[%zd] belongs to another weft runtime", i);
            goto unlock;
        }
        if (dep == slot) {
            PyErr_Format(PyExc_ValueError, "spawn(): task %R cannot depend on itself",
                         slot->name ? slot->name : Py_None);
            goto unlock;
        }
        if (dep->phase == PH_SUBMITTED) dv[i] = dep->h;
        else if (dep->phase == PH_DEAD) { dv[i] = NULL; if (dead_dep < 0) dead_dep = (int)i; }
        else {
            dv[i] = NULL;
            nblock++;
            int cyc = slot ? waits_for(dep, slot) : 0;
            if (cyc < 0) goto unlock;
            if (cyc) {
                PyErr_Format(PyExc_ValueError, "spawn(): dependency cycle: %R already waits, through "
                             "unspawned tasks, for %R", dep->name ? dep->name : Py_None,
                             slot->name ? slot->name : Py_None);
                goto unlock;
            }
        }
    }
    {
        Py_ssize_t j = 0;
        for (int m = 0; m < 4; m++) {
            if (!accs[m]) continue;
            for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(accs[m]); i++) {
                char what[48];
                snprintf(what, sizeof what, "spawn(): %s[%zd]", mode_names[m], i);
                DataObject *d = data_lookup(r, PySequence_Fast_GET_ITEM(accs[m], i), what,
                                            modes[m] != WEFT_R);
                if (d == NULL) goto unlock;
                datv[j] = d;
                av[j].data = d->d;
                av[j].mode = modes[m];
                if (d->pending_tail) nblock++;
                j++;
            }
        }
    }

    /* The Task object. */
    if (slot) {
        t = (TaskObject *)Py_NewRef(slot);
    } else {
        t = PyObject_GC_New(TaskObject, st->Task_T);
        if (t == NULL) goto unlock;
        t->rt = NULL;
        t->h = NULL;
        t->fn = t->args = t->kwargs = t->result = t->exc = t->name = NULL;
        t->space = t->key = NULL;
        t->phase = PH_DECLARED;
        t->cancel_requested = 0;
        t->ran = 0;
        t->retrieved = 0;
        t->in_failed = 0;
        t->nblockers = 0;
        t->waiters = t->pend_deps = t->pend_data = NULL;
        t->pend_modes = NULL;
        t->weakreflist = NULL;
        PyObject_GC_Track(t);
    }
    t->rt = (RuntimeObject *)Py_NewRef(r);
    t->priority = priority;
    if (kw.name && kw.name != Py_None) Py_XSETREF(t->name, Py_NewRef(kw.name));
    t->fn = Py_NewRef(fn);
    if (nargs > 1) {
        PyObject *a = PyTuple_New(nargs - 1);
        if (a == NULL) goto unlock_fail;
        for (Py_ssize_t i = 1; i < nargs; i++) {
            PyObject *x = args[i];
            if (Py_IS_TYPE(x, st->Data_T)) x = ((DataObject *)x)->obj; /* the body gets the object */
            PyTuple_SET_ITEM(a, i - 1, Py_NewRef(x));
        }
        t->args = a;
    }
    if (kw.kwargs && kw.kwargs != Py_None && PyDict_GET_SIZE(kw.kwargs) > 0) {
        t->kwargs = PyDict_Copy(kw.kwargs);
        if (t->kwargs == NULL) goto unlock_fail;
    }

    if (dead_dep >= 0) {
        /* As in C: a task whose dependency already died is accepted and ends cancelled. */
        char buf[160];
        TaskObject *dep = (TaskObject *)PySequence_Fast_GET_ITEM(deps, dead_dep);
        PyObject *lab = task_label(dep);
        snprintf(buf, sizeof buf, "its dependency %s never ran", utf8_or(lab, "(unnamed)"));
        Py_XDECREF(lab);
        if (PyErr_Occurred()) PyErr_Clear();
        kill_task(r, t, NULL, buf);
        notify_submitted(r, t);
    } else if (nblock == 0) {
        if (submit_c(r, t, dv, (size_t)nd, av, (size_t)na) < 0) goto unlock_fail;
        if (t->cancel_requested) {
            int rc = weft_task_cancel(t->h);
            (void)rc;
        }
        if (slot && slot->waiters) notify_submitted(r, t);
    } else {
        /* Deferred until every unsubmitted task it follows is submitted. */
        t->pend_deps = PyTuple_New(nd);
        t->pend_data = PyTuple_New(na);
        t->pend_modes = PyMem_Malloc(sizeof(unsigned) * (size_t)(na ? na : 1));
        if (!t->pend_deps || !t->pend_data || !t->pend_modes) {
            PyErr_NoMemory();
            goto unlock_fail;
        }
        if (PySet_Add(r->deferred, (PyObject *)t) < 0) goto unlock_fail;
        t->phase = PH_DEFERRED;
        t->nblockers = nblock;
        for (Py_ssize_t i = 0; i < nd; i++) {
            TaskObject *dep = (TaskObject *)PySequence_Fast_GET_ITEM(deps, i);
            PyTuple_SET_ITEM(t->pend_deps, i, Py_NewRef(dep));
            if (dep->phase == PH_DECLARED || dep->phase == PH_DEFERRED) {
                if (dep->waiters == NULL && (dep->waiters = PyList_New(0)) == NULL) goto unlock_fail;
                if (PyList_Append(dep->waiters, (PyObject *)t) < 0) goto unlock_fail;
            }
        }
        for (Py_ssize_t j = 0; j < na; j++) {
            DataObject *d = datv[j];
            PyTuple_SET_ITEM(t->pend_data, j, Py_NewRef(d));
            t->pend_modes[j] = av[j].mode;
            if (d->pending_tail) {
                TaskObject *b = d->pending_tail;
                if (b->waiters == NULL && (b->waiters = PyList_New(0)) == NULL) goto unlock_fail;
                if (PyList_Append(b->waiters, (PyObject *)t) < 0) goto unlock_fail;
            }
        }
        for (Py_ssize_t j = 0; j < na; j++) datv[j]->pending_tail = t;
    }
    result = (PyObject *)t;
    t = NULL;
    goto unlock;
unlock_fail:
    if (t) {
        /* Undo: a fresh task is dropped; a slot goes back to declared. */
        Py_CLEAR(t->fn);
        Py_CLEAR(t->args);
        Py_CLEAR(t->kwargs);
        if (t->phase == PH_DEFERRED) {
            if (PySet_Discard(r->deferred, (PyObject *)t) < 0) PyErr_Clear();
            t->nblockers = 0;
        }
        if (t->phase != PH_SUBMITTED) {
            clear_pending(t);
            t->phase = PH_DECLARED;
            Py_CLEAR(t->rt);
        }
        Py_CLEAR(t);
    }
unlock:;
    Py_END_CRITICAL_SECTION();
done:
    Py_XDECREF(t);
    Py_XDECREF(deps);
    for (int m = 0; m < 4; m++) Py_XDECREF(accs[m]);
    if (dv != dbuf) PyMem_Free(dv);
    if (av != abuf) PyMem_Free(av);
    if (datv != datbuf) PyMem_Free(datv);
    return result;
}

/* ------------------------------------------------------------------------ */
/* Waiting                                                                   */
/* ------------------------------------------------------------------------ */

#define WAIT_SLICE_NS 20000000ull /* 20 ms: how often a waiting thread checks signals */
#define RC_PYERR (-1000)

static int
cancel_everything_pending(RuntimeObject *r)
{
    if (r->rt == NULL) return 0;
    int prev = tl_attached;
    tl_attached = 1;
    int rc = weft_cancel_pending(r->rt);
    tl_attached = prev;
    /* Deferred tasks have not started either. */
    if (r->deferred && PySet_GET_SIZE(r->deferred) > 0) {
        PyObject *lst = PySequence_List(r->deferred);
        if (lst == NULL) return -1;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(lst); i++) {
            TaskObject *t = (TaskObject *)PyList_GET_ITEM(lst, i);
            if (t->phase == PH_DEFERRED) t->cancel_requested = 1;
        }
        Py_DECREF(lst);
    }
    return rc;
}

/* Timeouts are turned into a deadline on the monotonic clock once, when the
 * call parses them (parse_timeout); NO_DEADLINE means "wait without limit". */
#define NO_DEADLINE 0

/* Poll until a declared/deferred task has entered the runtime (or died). */
static int
wait_submitted(TaskObject *t, uint64_t deadline)
{
    useconds_t nap = 50;
    while (t->phase == PH_DECLARED || t->phase == PH_DEFERRED) {
        if (deadline && now_ns() >= deadline) return WEFT_ETIMEDOUT;
        BEGIN_NOGIL_W
        usleep(nap);
        END_NOGIL_W
        if (nap < 2000) nap *= 2;
        if (PyErr_CheckSignals() < 0) {
            if (t->rt) cancel_everything_pending(t->rt);
            return RC_PYERR;
        }
    }
    return 0;
}

/* Wait for t until deadline (NO_DEADLINE: without limit).  Returns a weft
 * code or RC_PYERR. */
static int
task_wait(TaskObject *t, uint64_t deadline)
{
    if (t->phase == PH_DECLARED || t->phase == PH_DEFERRED) {
        int rc = wait_submitted(t, deadline);
        if (rc != 0) return rc;
    }
    if (t->phase == PH_DEAD) return WEFT_ECANCELLED;
    int rc = weft_task_timedwait(t->h, 0);
    if (rc != WEFT_ETIMEDOUT) return rc;
    if (tl_ts != NULL) {
        /* On a worker (inside a task): the C runtime runs other tasks while
         * we wait; Ctrl-C is for the main thread. */
        BEGIN_NOGIL_W
        if (deadline == 0) rc = weft_task_wait(t->h);
        else {
            uint64_t now = now_ns();
            rc = weft_task_timedwait(t->h, deadline > now ? deadline - now : 0);
        }
        END_NOGIL_W
        return rc;
    }
    for (;;) {
        uint64_t slice = WAIT_SLICE_NS;
        if (deadline) {
            uint64_t now = now_ns();
            if (now >= deadline) return WEFT_ETIMEDOUT;
            if (deadline - now < slice) slice = deadline - now;
        }
        BEGIN_NOGIL
        rc = weft_task_timedwait(t->h, slice);
        END_NOGIL
        if (rc != WEFT_ETIMEDOUT) return rc;
        if (PyErr_CheckSignals() < 0) {
            if (t->rt) cancel_everything_pending(t->rt);
            return RC_PYERR;
        }
    }
}

/* Raise for a wait outcome; returns 0 if the task completed. */
static int
raise_outcome(TaskObject *t, int rc, int for_result)
{
    switch (rc) {
    case RC_PYERR: return -1;
    case 0: return 0;
    case WEFT_ETIMEDOUT:
        PyErr_SetString(PyExc_TimeoutError, "timed out waiting for the weft task");
        return -1;
    case WEFT_ETASKFAILED:
        if (!for_result) return 0;
        task_retrieved(t);
        if (t->exc) raise_exc(t->exc);
        else PyErr_SetString(PyExc_RuntimeError, "the weft task failed");
        return -1;
    case WEFT_ECANCELLED:
        if (!for_result) return 0;
        if (t->exc == NULL) {
            t->exc = make_cancelled(t, NULL);
            if (t->exc == NULL) return -1;
        }
        raise_exc(t->exc);
        return -1;
    case WEFT_EBUSY:
        PyErr_SetString(PyExc_RuntimeError, "a weft task cannot wait for itself");
        return -1;
    default:
        if (t->rt == NULL || t->rt->rt == NULL) {
            /* The runtime is gone: its tasks finished then. */
            if (!for_result) return 0;
            if (t->ran) {
                if (t->exc) {
                    task_retrieved(t);
                    raise_exc(t->exc);
                    return -1;
                }
                return 0;
            }
            if (t->exc == NULL) t->exc = make_cancelled(t, "the runtime closed before it ran");
            if (t->exc) raise_exc(t->exc);
            return -1;
        }
        err_weft(rc, "wait");
        return -1;
    }
}

/* Longest timeout turned into a deadline (about 146 years, in ns): anything
 * longer, inf included, waits without limit instead of overflowing. */
#define MAX_TIMEOUT_NS 4.6e18

/* timeout= of the waits: None, or seconds >= 0 (an int or a float).  Sets
 * *deadline to now + timeout in ns, or to NO_DEADLINE for None, inf and
 * timeouts too long to represent.  Negative and NaN timeouts are a
 * ValueError. */
static int
parse_timeout(PyObject *o, uint64_t *deadline)
{
    *deadline = NO_DEADLINE;
    if (o == NULL || o == Py_None) return 0;
    double v = PyFloat_AsDouble(o);
    if (v == -1 && PyErr_Occurred()) {
        if (PyLong_Check(o) && PyErr_ExceptionMatches(PyExc_OverflowError)) {
            /* An int too large for a double: its sign decides. */
            PyErr_Clear();
            int overflow = 0;
            (void)PyLong_AsLongLongAndOverflow(o, &overflow);
            if (PyErr_Occurred()) return -1;
            v = overflow < 0 ? -HUGE_VAL : HUGE_VAL;
        } else {
            PyErr_Format(PyExc_TypeError, "timeout must be a number of seconds or None, got '%.100s'",
                         Py_TYPE(o)->tp_name);
            return -1;
        }
    }
    if (isnan(v) || v < 0) {
        PyErr_Format(PyExc_ValueError, "timeout must be >= 0 seconds (or None: no limit), got %R", o);
        return -1;
    }
    double ns = v * 1e9;
    if (!(ns < MAX_TIMEOUT_NS)) return 0; /* inf or huge: no limit */
    uint64_t d = now_ns() + (uint64_t)ns;
    *deadline = d != NO_DEADLINE ? d : 1;
    return 0;
}

static int
runtime_wait_all(RuntimeObject *r, uint64_t deadline)
{
    if (r->rt == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "wait_all(): the weft runtime is closed");
        return -1;
    }
    if (tl_cur != NULL && tl_cur->rt == r) {
        /* Waiting on another runtime from a task is fine (it just blocks). */
        PyErr_SetString(PyExc_RuntimeError,
                        "wait_all() cannot be called from inside a task of the same runtime (it "
                        "would wait for itself); wait for specific tasks instead");
        return -1;
    }
    int rc;
    for (;;) {
        uint64_t slice = WAIT_SLICE_NS;
        if (deadline) {
            uint64_t now = now_ns();
            if (now >= deadline) {
                PyErr_SetString(PyExc_TimeoutError, "wait_all(): timed out");
                return -1;
            }
            if (deadline - now < slice) slice = deadline - now;
        }
        weft_runtime *rt = r->rt;
        BEGIN_NOGIL_W /* from a task of another runtime: let its workers have the GIL */
        rc = weft_wait_all_timed(rt, slice);
        END_NOGIL_W
        if (rc != WEFT_ETIMEDOUT) break;
        if (PyErr_CheckSignals() < 0) {
            cancel_everything_pending(r);
            return -1;
        }
    }
    if (rc == WEFT_ETASKFAILED) {
        /* Re-raise the first failure the program has not seen yet (through
         * .result()/.exception()): r->failures lists exactly those, in the
         * order they happened.  The others are dropped, as in C. */
        PyObject *pick = NULL, *k, *v;
        Py_ssize_t pos = 0;
        while (pick == NULL && PyDict_Next(r->failures, &pos, &k, &v)) {
            TaskObject *f = (TaskObject *)k;
            if (!f->retrieved && f->exc) pick = Py_NewRef(f->exc);
        }
        PyDict_Clear(r->failures);
        if (pick == NULL) return 0;
        raise_exc(pick);
        Py_DECREF(pick);
        return -1;
    }
    if (rc == 0) PyDict_Clear(r->failures);
    if (rc != 0) {
        err_weft(rc, "wait_all()");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Runtime type                                                              */
/* ------------------------------------------------------------------------ */

static int
parse_size(PyObject *o, const char *what, unsigned long long *out)
{
    if (o == NULL || o == Py_None) return 0;
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "Runtime(): %s= expects an int, got '%.100s'", what,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (v < 0) {
        PyErr_Format(PyExc_ValueError, "Runtime(): %s= must be >= 0, got %lld", what, v);
        return -1;
    }
    *out = (unsigned long long)v;
    return 1;
}

static PyObject *
Runtime_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"workers", "trace", "spin_ns", "max_inflight", "gil_spin_ns",
                             "spawn_gil", NULL};
    PyObject *workers = NULL, *trace = NULL, *spin = NULL, *maxin = NULL, *gspin = NULL;
    const char *spawn_gil = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O$OOOOz:Runtime", kwlist, &workers, &trace, &spin,
                                     &maxin, &gspin, &spawn_gil))
        return NULL;
    if (spawn_gil == NULL) spawn_gil = getenv("WEFT_PY_SPAWN_GIL");
    int spawn_mode = SPAWN_HOLD;
    if (spawn_gil && *spawn_gil) {
        if (strcmp(spawn_gil, "hold") == 0) spawn_mode = SPAWN_HOLD;
        else if (strcmp(spawn_gil, "release") == 0) spawn_mode = SPAWN_RELEASE;
        else if (strcmp(spawn_gil, "yield") == 0) spawn_mode = SPAWN_YIELD;
        else {
            PyErr_Format(PyExc_ValueError, "Runtime(): spawn_gil= must be 'hold', 'release' or "
                         "'yield', not '%.50s'", spawn_gil);
            return NULL;
        }
    }
    modstate *st = state_of_type(type);
    if (st == NULL) return NULL;
    weft_config cfg;
    weft_config_init(&cfg);
    unsigned long long v;
    int has;
    if ((has = parse_size(workers, "workers", &v)) < 0) return NULL;
    if (has) {
        if (v > 4096) {
            PyErr_Format(PyExc_ValueError, "Runtime(): workers=%llu is too many", v);
            return NULL;
        }
        cfg.workers = (unsigned)v;
    }
    if ((has = parse_size(spin, "spin_ns", &v)) < 0) return NULL;
    if (has) cfg.spin_ns = v;
    if ((has = parse_size(maxin, "max_inflight", &v)) < 0) return NULL;
    if (has) cfg.max_inflight = (size_t)v;
    uint64_t gil_spin = 20000; /* 20 us */
    const char *env = getenv("WEFT_GIL_SPIN_NS");
    if (env && *env) gil_spin = strtoull(env, NULL, 10);
    if ((has = parse_size(gspin, "gil_spin_ns", &v)) < 0) return NULL;
    if (has) gil_spin = v;
    PyObject *trace_b = NULL;
    if (trace && trace != Py_None) {
        if (!PyUnicode_FSConverter(trace, &trace_b)) return NULL;
        cfg.trace_path = PyBytes_AS_STRING(trace_b);
    }

    RuntimeObject *r = PyObject_GC_New(RuntimeObject, type);
    if (r == NULL) {
        Py_XDECREF(trace_b);
        return NULL;
    }
    r->rt = NULL;
    r->module = Py_NewRef(PyType_GetModuleByDef(type, &weft_module));
    r->st = st;
    r->interp = PyInterpreterState_Get();
    atomic_init(&r->inflight, 0);
    atomic_init(&r->py_busy, 0);
    r->spawn_gil = spawn_mode;
    r->failures = PyDict_New();
    r->failed = PyDict_New();
    r->data_map = PyDict_New();
    r->deferred = PySet_New(NULL);
    r->spin_gil_ns = gil_spin;
    r->closing = 0;
    r->weakreflist = NULL;
    PyObject_GC_Track(r);
    if (!r->failures || !r->failed || !r->data_map || !r->deferred) goto fail;

    size_t per = cfg.max_inflight;
    cfg.on_worker_start = on_worker_start;
    cfg.on_worker_stop = on_worker_stop;
    cfg.hook_arg = r;
    int rc;
    weft_runtime *rt = NULL;
    BEGIN_NOGIL_W
    rc = weft_runtime_create(&cfg, &rt);
    END_NOGIL_W
    Py_CLEAR(trace_b);
    if (rc != 0) {
        err_weft(rc, "Runtime()");
        goto fail;
    }
    r->rt = rt;
    r->workers = weft_runtime_workers(rt);
    if (per == 0) per = (size_t)65536 * (r->workers ? r->workers : 1);
    r->soft_limit = per / 2 > 64 ? per / 2 : (per > 1 ? per - 1 : 1);
    if (PyList_Append(st->open, (PyObject *)r) < 0) {
        BEGIN_NOGIL
        rc = weft_runtime_destroy(rt);
        END_NOGIL
        r->rt = NULL;
        goto fail;
    }
    return (PyObject *)r;
fail:
    Py_XDECREF(trace_b);
    Py_DECREF(r);
    return NULL;
}

static int
list_remove_obj(PyObject *list, PyObject *o)
{
    for (Py_ssize_t i = PyList_GET_SIZE(list) - 1; i >= 0; i--)
        if (PyList_GET_ITEM(list, i) == o && PyList_SetSlice(list, i, i + 1, NULL) < 0) return -1;
    return 0;
}

/* Close: finish every task, cancel deferred ones that can never run, stop
 * the workers, release every exported buffer. */
static int
runtime_close(RuntimeObject *r)
{
    if (r->rt == NULL) return 0;
    if (tl_ts != NULL && tl_cur != NULL && tl_cur->rt == r) {
        PyErr_SetString(PyExc_RuntimeError, "close(): a weft runtime cannot be closed from one of its tasks");
        return -1;
    }
    PyObject *interrupt = NULL;
    /* Let the tasks finish (Ctrl-C here cancels what has not started).
     * Tasks may still spawn children meanwhile: `closing` is set only once
     * nothing runs. */
    for (;;) {
        int rc;
        weft_runtime *rt = r->rt;
        BEGIN_NOGIL_W
        rc = weft_wait_all_timed(rt, WAIT_SLICE_NS);
        END_NOGIL_W
        if (rc != WEFT_ETIMEDOUT) break;
        if (interrupt == NULL && PyErr_CheckSignals() < 0) {
            interrupt = fetch_exc();
            cancel_everything_pending(r);
        }
    }
    r->closing = 1;
    /* Deferred tasks whose blockers were never spawned cannot run now. */
    if (PySet_GET_SIZE(r->deferred) > 0) {
        PyObject *lst = PySequence_List(r->deferred);
        if (lst) {
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(lst); i++) {
                TaskObject *t = (TaskObject *)PyList_GET_ITEM(lst, i);
                if (t->phase == PH_DEFERRED) {
                    kill_task(r, t, NULL, "the runtime closed while it waited for a task that was never spawned");
                }
            }
            Py_DECREF(lst);
        } else {
            PyErr_Clear();
        }
        PySet_Clear(r->deferred);
    }
    weft_runtime *rt = r->rt;
    int rc;
    BEGIN_NOGIL_W
    rc = weft_runtime_destroy(rt);
    END_NOGIL_W
    (void)rc;
    r->rt = NULL;
    /* Buffers stay exported until here. */
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(r->data_map, &pos, &k, &v)) data_release((DataObject *)v);
    PyDict_Clear(r->data_map);
    PyDict_Clear(r->failures);
    modstate *st = r->st;
    Py_INCREF(r);
    for (Py_ssize_t i = PyList_GET_SIZE(st->stack) - 1; i >= 0; i--)
        if (PyTuple_GET_ITEM(PyList_GET_ITEM(st->stack, i), 0) == (PyObject *)r &&
            PyList_SetSlice(st->stack, i, i + 1, NULL) < 0)
            PyErr_Clear();
    if (list_remove_obj(st->open, (PyObject *)r) < 0) PyErr_Clear();
    Py_DECREF(r);
    if (interrupt) {
        raise_exc(interrupt);
        Py_DECREF(interrupt);
        return -1;
    }
    return 0;
}

static int
Runtime_traverse(RuntimeObject *r, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(r));
    Py_VISIT(r->module);
    Py_VISIT(r->failures);
    Py_VISIT(r->data_map);
    Py_VISIT(r->deferred);
    return 0;
}

static int
Runtime_clear(RuntimeObject *r)
{
    Py_CLEAR(r->failures);
    Py_CLEAR(r->data_map);
    Py_CLEAR(r->deferred);
    Py_CLEAR(r->failed);
    return 0;
}

static void
Runtime_dealloc(RuntimeObject *r)
{
    PyTypeObject *tp = Py_TYPE(r);
    PyObject_GC_UnTrack(r);
    if (r->weakreflist) PyObject_ClearWeakRefs((PyObject *)r);
    if (r->rt) {
        /* Only reachable if the open list lost it (module teardown). */
        weft_runtime *rt = r->rt;
        r->rt = NULL;
        int rc;
        BEGIN_NOGIL
        rc = weft_runtime_destroy(rt);
        END_NOGIL
        (void)rc;
    }
    Runtime_clear(r);
    Py_CLEAR(r->module);
    tp->tp_free(r);
    Py_DECREF(tp);
}

static PyObject *
Runtime_spawn(RuntimeObject *r, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *self_fn = NULL;
    if (nargs == 0 && (self_fn = PyObject_GetAttrString((PyObject *)r, "spawn")) == NULL) return NULL;
    PyObject *res = spawn_impl(r->st, r, args, nargs, kwnames, self_fn);
    Py_XDECREF(self_fn);
    return res;
}

static PyObject *
Runtime_wait_all(RuntimeObject *r, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *to = NULL;
    uint64_t deadline;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:wait_all", kwlist, &to)) return NULL;
    if (parse_timeout(to, &deadline) < 0) return NULL;
    if (runtime_wait_all(r, deadline) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Runtime_close(RuntimeObject *r, PyObject *Py_UNUSED(ignored))
{
    if (runtime_close(r) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Runtime_enter(RuntimeObject *r, PyObject *Py_UNUSED(ignored))
{
    if (check_open(r, "Runtime.__enter__") < 0) return NULL;
    PyObject *e = PyTuple_Pack(2, (PyObject *)r, tl_cur ? (PyObject *)tl_cur : Py_None);
    if (e == NULL) return NULL;
    int rc = PyList_Append(r->st->stack, e);
    Py_DECREF(e);
    if (rc < 0) return NULL;
    return Py_NewRef(r);
}

static PyObject *
Runtime_exit(RuntimeObject *r, PyObject *args)
{
    PyObject *et = Py_None, *ev = Py_None, *tb = Py_None;
    if (!PyArg_ParseTuple(args, "|OOO:__exit__", &et, &ev, &tb)) return NULL;
    int failed = 0;
    if (r->rt && et == Py_None) {
        /* Normal exit: wait, and let a task's exception propagate. */
        if (runtime_wait_all(r, NO_DEADLINE) < 0) failed = 1;
    } else if (r->rt && et != Py_None &&
               PyObject_IsSubclass(et, PyExc_KeyboardInterrupt) == 1) {
        cancel_everything_pending(r);
    }
    PyObject *pending = failed ? fetch_exc() : NULL;
    if (runtime_close(r) < 0) {
        Py_XDECREF(pending);
        return NULL;
    }
    if (pending) {
        raise_exc(pending);
        Py_DECREF(pending);
        return NULL;
    }
    Py_RETURN_FALSE;
}

static PyObject *
Runtime_data(RuntimeObject *r, PyObject *obj)
{
    if (check_open(r, "data()") < 0) return NULL;
    DataObject *d = data_lookup(r, obj, "data()", 0);
    return d ? Py_NewRef(d) : NULL;
}

static int data_unregister(DataObject *d);

static PyObject *
Runtime_unregister(RuntimeObject *r, PyObject *obj)
{
    if (check_open(r, "unregister()") < 0) return NULL;
    DataObject *d;
    if (Py_IS_TYPE(obj, r->st->Data_T)) d = (DataObject *)obj;
    else {
        PyObject *k = PyLong_FromVoidPtr(obj);
        if (k == NULL) return NULL;
        d = (DataObject *)PyDict_GetItemWithError(r->data_map, k);
        Py_DECREF(k);
        if (d == NULL) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "unregister(): this '%.100s' object is not registered",
                             Py_TYPE(obj)->tp_name);
            return NULL;
        }
    }
    Py_INCREF(d);
    int rc = data_unregister(d);
    Py_DECREF(d);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Runtime_cancel_pending(RuntimeObject *r, PyObject *Py_UNUSED(ignored))
{
    if (check_open(r, "cancel_pending()") < 0) return NULL;
    int rc = cancel_everything_pending(r);
    if (rc < 0 && PyErr_Occurred()) return NULL;
    if (rc != 0) return err_weft(rc, "cancel_pending()");
    Py_RETURN_NONE;
}

static PyObject *
Runtime_stats(RuntimeObject *r, PyObject *Py_UNUSED(ignored))
{
    if (r->rt == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "stats(): the weft runtime is closed");
        return NULL;
    }
    weft_stats s;
    int rc = weft_runtime_stats(r->rt, &s);
    if (rc != 0) return err_weft(rc, "stats()");
    return Py_BuildValue("{sKsKsKsKsKsKsKsKsKsKsKsI}", "tasks_spawned",
                         (unsigned long long)s.tasks_spawned, "tasks_run",
                         (unsigned long long)s.tasks_run, "tasks_failed",
                         (unsigned long long)s.tasks_failed, "tasks_cancelled",
                         (unsigned long long)s.tasks_cancelled, "steals",
                         (unsigned long long)s.steals, "parks", (unsigned long long)s.parks,
                         "idle_ns", (unsigned long long)s.idle_ns, "inflight",
                         (unsigned long long)s.inflight, "inflight_peak",
                         (unsigned long long)s.inflight_peak, "bytes_per_task",
                         (unsigned long long)s.bytes_per_task, "trace_dropped",
                         (unsigned long long)s.trace_dropped, "workers", s.workers);
}

static PyObject *
Runtime_get_workers(RuntimeObject *r, void *Py_UNUSED(c))
{
    return PyLong_FromUnsignedLong(r->workers);
}

static PyObject *
Runtime_get_closed(RuntimeObject *r, void *Py_UNUSED(c))
{
    return PyBool_FromLong(r->rt == NULL);
}

static PyObject *
Runtime_repr(RuntimeObject *r)
{
    if (r->rt == NULL) return PyUnicode_FromString("<weft.Runtime closed>");
    return PyUnicode_FromFormat("<weft.Runtime workers=%u>", r->workers);
}

static PyMethodDef Runtime_methods[] = {
    {"spawn", (PyCFunction)(void (*)(void))Runtime_spawn, METH_FASTCALL | METH_KEYWORDS,
     "spawn(fn, *args, deps=(), reads=(), writes=(), readwrites=(), commutes=(), name=None, "
     "priority=0, task=None, kwargs=None) -> Task\n\nSpawn fn(*args) on this runtime.  "
     "Called with no function, returns a decorator that binds the function's free variables "
     "at the spawn, as weft.spawn does."},
    {"wait_all", (PyCFunction)(void (*)(void))Runtime_wait_all, METH_VARARGS | METH_KEYWORDS,
     "wait_all(timeout=None)\n\nWait until no task is in flight; re-raise the first task "
     "exception since the previous wait_all."},
    {"close", (PyCFunction)Runtime_close, METH_NOARGS,
     "Finish every task, stop the workers and release registered buffers.  Idempotent."},
    {"data", (PyCFunction)Runtime_data, METH_O,
     "data(obj) -> Data\n\nRegister a buffer-protocol object (or return its handle)."},
    {"unregister", (PyCFunction)Runtime_unregister, METH_O,
     "unregister(obj)\n\nWait for the tasks using obj, then release its buffer."},
    {"cancel_pending", (PyCFunction)Runtime_cancel_pending, METH_NOARGS,
     "Cancel every task that has not started (running tasks finish)."},
    {"stats", (PyCFunction)Runtime_stats, METH_NOARGS, "Counters of the C runtime, as a dict."},
    {"__enter__", (PyCFunction)Runtime_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Runtime_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Runtime_getset[] = {
    {"workers", (getter)Runtime_get_workers, NULL, "number of worker threads", NULL},
    {"closed", (getter)Runtime_get_closed, NULL, "True once closed", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMemberDef Runtime_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(RuntimeObject, weakreflist), READONLY, NULL},
    {NULL, 0, 0, 0, NULL}};

static PyType_Slot Runtime_slots[] = {
    {Py_tp_doc, "Runtime(workers=0, *, trace=None, spin_ns=None, max_inflight=None, gil_spin_ns=None)\n\n"
                "A Weft runtime: worker threads that run Python tasks.  Use it as a context "
                "manager; leaving the block waits for every task, re-raises the first task "
                "exception and closes the runtime."},
    {Py_tp_new, Runtime_new},
    {Py_tp_dealloc, Runtime_dealloc},
    {Py_tp_traverse, Runtime_traverse},
    {Py_tp_clear, Runtime_clear},
    {Py_tp_methods, Runtime_methods},
    {Py_tp_getset, Runtime_getset},
    {Py_tp_members, Runtime_members},
    {Py_tp_repr, Runtime_repr},
    {0, NULL}};

static PyType_Spec Runtime_spec = {"weft.Runtime", sizeof(RuntimeObject), 0,
                                   Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, Runtime_slots};

/* ------------------------------------------------------------------------ */
/* Task type                                                                 */
/* ------------------------------------------------------------------------ */

static int
Task_traverse(TaskObject *t, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(t));
    Py_VISIT(t->rt);
    Py_VISIT(t->fn);
    Py_VISIT(t->args);
    Py_VISIT(t->kwargs);
    Py_VISIT(t->result);
    Py_VISIT(t->exc);
    Py_VISIT(t->space);
    Py_VISIT(t->key);
    Py_VISIT(t->waiters);
    Py_VISIT(t->pend_deps);
    Py_VISIT(t->pend_data);
    return 0;
}

static int
Task_clear(TaskObject *t)
{
    /* fn/args of a submitted task that has not run belong to the C side's
     * reference: a task in flight is never collected (its cell owns it). */
    Py_CLEAR(t->result);
    Py_CLEAR(t->exc);
    Py_CLEAR(t->space);
    Py_CLEAR(t->key);
    Py_CLEAR(t->waiters);
    if (t->phase != PH_SUBMITTED) {
        Py_CLEAR(t->fn);
        Py_CLEAR(t->args);
        Py_CLEAR(t->kwargs);
    }
    Py_CLEAR(t->pend_deps);
    Py_CLEAR(t->pend_data);
    return 0;
}

static void
Task_dealloc(TaskObject *t)
{
    PyTypeObject *tp = Py_TYPE(t);
    PyObject_GC_UnTrack(t);
    if (t->weakreflist) PyObject_ClearWeakRefs((PyObject *)t);
    if (t->h) {
        weft_task_release(t->h);
        t->h = NULL;
    }
    task_forget_failure(t);
    if (t->pend_modes) PyMem_Free(t->pend_modes);
    t->pend_modes = NULL;
    Py_CLEAR(t->result);
    Py_CLEAR(t->exc);
    Py_CLEAR(t->space);
    Py_CLEAR(t->key);
    Py_CLEAR(t->waiters);
    Py_CLEAR(t->fn);
    Py_CLEAR(t->args);
    Py_CLEAR(t->kwargs);
    Py_CLEAR(t->pend_deps);
    Py_CLEAR(t->pend_data);
    Py_CLEAR(t->name);
    Py_CLEAR(t->rt);
    tp->tp_free(t);
    Py_DECREF(tp);
}

static PyObject *
Task_new_err(PyTypeObject *tp, PyObject *a, PyObject *k)
{
    (void)tp;
    (void)a;
    (void)k;
    PyErr_SetString(PyExc_TypeError, "weft.Task objects come from weft.spawn() or a TaskSpace");
    return NULL;
}

static PyObject *
Task_wait(TaskObject *t, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *to = NULL;
    uint64_t deadline;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:wait", kwlist, &to)) return NULL;
    if (parse_timeout(to, &deadline) < 0) return NULL;
    int rc = task_wait(t, deadline);
    if (raise_outcome(t, rc, 0) < 0) return NULL;
    return Py_NewRef(t);
}

static PyObject *
Task_result(TaskObject *t, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *to = NULL;
    uint64_t deadline;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:result", kwlist, &to)) return NULL;
    if (parse_timeout(to, &deadline) < 0) return NULL;
    int rc = task_wait(t, deadline);
    if (raise_outcome(t, rc, 1) < 0) return NULL;
    return Py_NewRef(t->result ? t->result : Py_None);
}

static PyObject *
Task_exception(TaskObject *t, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *to = NULL;
    uint64_t deadline;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:exception", kwlist, &to)) return NULL;
    if (parse_timeout(to, &deadline) < 0) return NULL;
    int rc = task_wait(t, deadline);
    if (rc == 0) Py_RETURN_NONE;
    if (rc == WEFT_ETASKFAILED && t->exc) {
        task_retrieved(t);
        return Py_NewRef(t->exc);
    }
    if (rc == WEFT_ECANCELLED) {
        if (t->exc == NULL && (t->exc = make_cancelled(t, NULL)) == NULL) return NULL;
        return Py_NewRef(t->exc);
    }
    if (raise_outcome(t, rc, 1) < 0) {
        /* A closed runtime: the stored outcome is the answer. */
        if ((rc != RC_PYERR && rc != WEFT_ETIMEDOUT && rc != WEFT_EBUSY) && t->exc) {
            PyErr_Clear();
            if (t->ran) task_retrieved(t);
            return Py_NewRef(t->exc);
        }
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
Task_done(TaskObject *t, PyObject *Py_UNUSED(ignored))
{
    if (t->phase == PH_DEAD) Py_RETURN_TRUE;
    if (t->phase != PH_SUBMITTED) Py_RETURN_FALSE;
    weft_task_status s;
    phase_status(t, &s);
    return PyBool_FromLong(s >= WEFT_TASK_COMPLETED);
}

static PyObject *
Task_cancel(TaskObject *t, PyObject *Py_UNUSED(ignored))
{
    if (t->phase == PH_DEAD) Py_RETURN_FALSE;
    if (t->phase != PH_SUBMITTED) {
        t->cancel_requested = 1;
        Py_RETURN_TRUE;
    }
    weft_task_status s;
    phase_status(t, &s);
    if (s >= WEFT_TASK_RUNNING) Py_RETURN_FALSE;
    int prev = tl_attached;
    tl_attached = 1;
    int rc = weft_task_cancel(t->h);
    tl_attached = prev;
    if (rc != 0) return err_weft(rc, "cancel()");
    /* The C runtime may finish the cancellation lazily (when the task would
     * become ready); it will not run unless it had already started. */
    phase_status(t, &s);
    return PyBool_FromLong(s != WEFT_TASK_RUNNING && s != WEFT_TASK_COMPLETED && s != WEFT_TASK_FAILED);
}

static PyObject *
Task_get_status(TaskObject *t, void *Py_UNUSED(c))
{
    return PyUnicode_FromString(phase_status(t, NULL));
}

static PyObject *
Task_get_name(TaskObject *t, void *Py_UNUSED(c))
{
    return Py_NewRef(t->name ? t->name : Py_None);
}

static PyObject *
Task_get_id(TaskObject *t, void *Py_UNUSED(c))
{
    weft_task_info info;
    if (t->h == NULL || weft_task_info_get(t->h, &info) != 0) Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(info.id);
}

static PyObject *
Task_repr(TaskObject *t)
{
    const char *s = phase_status(t, NULL);
    if (t->name) return PyUnicode_FromFormat("<weft.Task %R %s>", t->name, s);
    return PyUnicode_FromFormat("<weft.Task at %p %s>", t, s);
}

static PyMethodDef Task_methods[] = {
    {"wait", (PyCFunction)(void (*)(void))Task_wait, METH_VARARGS | METH_KEYWORDS,
     "wait(timeout=None) -> self\n\nBlock until the task finished (completed, failed or cancelled)."},
    {"result", (PyCFunction)(void (*)(void))Task_result, METH_VARARGS | METH_KEYWORDS,
     "result(timeout=None)\n\nWait, then return the body's return value or re-raise its exception "
     "(weft.CancelledError if it never ran)."},
    {"exception", (PyCFunction)(void (*)(void))Task_exception, METH_VARARGS | METH_KEYWORDS,
     "exception(timeout=None)\n\nWait, then return the exception result() would raise, or None."},
    {"done", (PyCFunction)Task_done, METH_NOARGS, "True once the task finished."},
    {"cancel", (PyCFunction)Task_cancel, METH_NOARGS,
     "Ask that the task not run.  True if it will not run; False if it already started."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Task_getset[] = {
    {"status", (getter)Task_get_status, NULL,
     "'declared', 'deferred', 'waiting', 'ready', 'running', 'completed', 'failed' or 'cancelled'",
     NULL},
    {"name", (getter)Task_get_name, NULL, "the task's name (or task-space label)", NULL},
    {"id", (getter)Task_get_id, NULL, "runtime-unique id, in spawn order (None before spawn)", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMemberDef Task_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(TaskObject, weakreflist), READONLY, NULL},
    {NULL, 0, 0, 0, NULL}};

static PyType_Slot Task_slots[] = {
    {Py_tp_doc, "A spawned task (or a task-space slot).  Created by weft.spawn()."},
    {Py_tp_new, Task_new_err},
    {Py_tp_dealloc, Task_dealloc},
    {Py_tp_traverse, Task_traverse},
    {Py_tp_clear, Task_clear},
    {Py_tp_methods, Task_methods},
    {Py_tp_getset, Task_getset},
    {Py_tp_members, Task_members},
    {Py_tp_repr, Task_repr},
    {0, NULL}};

static PyType_Spec Task_spec = {"weft.Task", sizeof(TaskObject), 0,
                                Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, Task_slots};

/* ------------------------------------------------------------------------ */
/* TaskSpace type                                                            */
/* ------------------------------------------------------------------------ */

static PyObject *
Space_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"name", NULL};
    PyObject *name = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|U:TaskSpace", kwlist, &name)) return NULL;
    SpaceObject *s = PyObject_GC_New(SpaceObject, type);
    if (s == NULL) return NULL;
    s->name = name ? Py_NewRef(name) : PyUnicode_FromString("T");
    s->tasks = PyDict_New();
    PyObject_GC_Track(s);
    if (!s->name || !s->tasks) {
        Py_DECREF(s);
        return NULL;
    }
    return (PyObject *)s;
}

static int
Space_traverse(SpaceObject *s, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(s));
    Py_VISIT(s->name);
    Py_VISIT(s->tasks);
    return 0;
}

static int
Space_clear(SpaceObject *s)
{
    Py_CLEAR(s->tasks);
    return 0;
}

static void
Space_dealloc(SpaceObject *s)
{
    PyTypeObject *tp = Py_TYPE(s);
    PyObject_GC_UnTrack(s);
    Py_CLEAR(s->tasks);
    Py_CLEAR(s->name);
    tp->tp_free(s);
    Py_DECREF(tp);
}

static PyObject *
space_label(SpaceObject *s, PyObject *key)
{
    if (PyTuple_Check(key)) {
        PyObject *parts = PyList_New(0);
        if (parts == NULL) return NULL;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(key); i++) {
            PyObject *r = PyObject_Repr(PyTuple_GET_ITEM(key, i));
            if (r == NULL || PyList_Append(parts, r) < 0) {
                Py_XDECREF(r);
                Py_DECREF(parts);
                return NULL;
            }
            Py_DECREF(r);
        }
        PyObject *sep = PyUnicode_FromString(", ");
        PyObject *j = sep ? PyUnicode_Join(sep, parts) : NULL;
        Py_XDECREF(sep);
        Py_DECREF(parts);
        if (j == NULL) return NULL;
        PyObject *res = PyUnicode_FromFormat("%U[%U]", s->name, j);
        Py_DECREF(j);
        return res;
    }
    if (PyLong_CheckExact(key)) return PyUnicode_FromFormat("%U[%S]", s->name, key);
    return PyUnicode_FromFormat("%U[%R]", s->name, key);
}

static PyObject *
Space_getitem(SpaceObject *s, PyObject *key)
{
    PyObject *t = PyDict_GetItemWithError(s->tasks, key);
    if (t) return Py_NewRef(t);
    if (PyErr_Occurred()) return NULL;
    modstate *st = state_of_type(Py_TYPE(s));
    if (st == NULL) return NULL;
    TaskObject *n = PyObject_GC_New(TaskObject, st->Task_T);
    if (n == NULL) return NULL;
    n->rt = NULL;
    n->h = NULL;
    n->fn = n->args = n->kwargs = n->result = n->exc = NULL;
    n->space = NULL;
    n->key = Py_NewRef(key);
    n->name = NULL;
    n->phase = PH_DECLARED;
    n->priority = 0;
    n->cancel_requested = 0;
    n->ran = 0;
    n->retrieved = 0;
    n->in_failed = 0;
    n->nblockers = 0;
    n->waiters = n->pend_deps = n->pend_data = NULL;
    n->pend_modes = NULL;
    n->weakreflist = NULL;
    PyObject_GC_Track(n);
    n->name = space_label(s, key);
    if (n->name == NULL) {
        Py_DECREF(n);
        return NULL;
    }
    PyObject *prev = PyDict_SetDefault(s->tasks, key, (PyObject *)n);
    if (prev == NULL) {
        Py_DECREF(n);
        return NULL;
    }
    Py_INCREF(prev);
    Py_DECREF(n);
    return prev;
}

static Py_ssize_t
Space_len(SpaceObject *s)
{
    return PyDict_GET_SIZE(s->tasks);
}

static int
Space_contains(SpaceObject *s, PyObject *key)
{
    return PyDict_Contains(s->tasks, key);
}

static PyObject *
Space_iter(SpaceObject *s)
{
    return PyObject_GetIter(s->tasks);
}

static PyObject *
Space_tasks(SpaceObject *s, PyObject *Py_UNUSED(ignored))
{
    return PyDict_Values(s->tasks);
}

static PyObject *
Space_clear_m(SpaceObject *s, PyObject *Py_UNUSED(ignored))
{
    PyDict_Clear(s->tasks);
    Py_RETURN_NONE;
}

static PyObject *
Space_wait(SpaceObject *s, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *to = NULL;
    uint64_t deadline;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:wait", kwlist, &to)) return NULL;
    if (parse_timeout(to, &deadline) < 0) return NULL;
    PyObject *vals = PyDict_Values(s->tasks);
    if (vals == NULL) return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(vals); i++) {
        TaskObject *t = (TaskObject *)PyList_GET_ITEM(vals, i);
        if (t->phase == PH_DECLARED) continue;
        int rc = task_wait(t, deadline);
        if (raise_outcome(t, rc, 0) < 0) {
            Py_DECREF(vals);
            return NULL;
        }
    }
    Py_DECREF(vals);
    Py_RETURN_NONE;
}

static PyObject *
Space_repr(SpaceObject *s)
{
    return PyUnicode_FromFormat("<weft.TaskSpace %R with %zd tasks>", s->name, PyDict_GET_SIZE(s->tasks));
}

static PyObject *
Space_get_name(SpaceObject *s, void *Py_UNUSED(c))
{
    return Py_NewRef(s->name);
}

static PyMethodDef Space_methods[] = {
    {"tasks", (PyCFunction)Space_tasks, METH_NOARGS, "list of the tasks (slots) named so far"},
    {"clear", (PyCFunction)Space_clear_m, METH_NOARGS, "forget every slot (tasks keep running)"},
    {"wait", (PyCFunction)(void (*)(void))Space_wait, METH_VARARGS | METH_KEYWORDS,
     "wait(timeout=None): wait for every spawned task of the space"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Space_getset[] = {{"name", (getter)Space_get_name, NULL, "the space's name", NULL},
                                     {NULL, NULL, NULL, NULL, NULL}};

static PyType_Slot Space_slots[] = {
    {Py_tp_doc, "TaskSpace(name='T')\n\nA named, indexable collection of tasks, as in Parla: T[i] "
                "(any hashable key, e.g. T[t, i]) names a task whether it has been spawned yet or "
                "not.  Spawn into a slot with spawn(fn, ..., task=T[i]); a task that depends on "
                "a slot nobody spawned into yet is held back and enters the runtime when that "
                "slot is spawned."},
    {Py_tp_new, Space_new},
    {Py_tp_dealloc, Space_dealloc},
    {Py_tp_traverse, Space_traverse},
    {Py_tp_clear, Space_clear},
    {Py_mp_subscript, Space_getitem},
    {Py_mp_length, Space_len},
    {Py_sq_contains, Space_contains},
    {Py_tp_iter, Space_iter},
    {Py_tp_methods, Space_methods},
    {Py_tp_getset, Space_getset},
    {Py_tp_repr, Space_repr},
    {0, NULL}};

static PyType_Spec Space_spec = {"weft.TaskSpace", sizeof(SpaceObject), 0,
                                 Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, Space_slots};

/* ------------------------------------------------------------------------ */
/* Data type                                                                 */
/* ------------------------------------------------------------------------ */

static int
data_unregister(DataObject *d)
{
    RuntimeObject *r = d->rt;
    if (d->d == NULL) return 0;
    if (d->pending_tail) {
        PyErr_SetString(PyExc_RuntimeError,
                        "unregister(): a deferred task (waiting for an unspawned task-space slot) "
                        "still accesses this data");
        return -1;
    }
    weft_data *h = d->d;
    int rc;
    if (tl_ts != NULL) {
        BEGIN_NOGIL_W
        rc = weft_data_unregister(h);
        END_NOGIL_W
    } else {
        BEGIN_NOGIL
        rc = weft_data_unregister(h);
        END_NOGIL
    }
    if (rc == WEFT_EBUSY) {
        PyErr_SetString(PyExc_RuntimeError,
                        "unregister(): the calling task itself accesses this data");
        return -1;
    }
    if (rc != 0 && r->rt != NULL) {
        err_weft(rc, "unregister()");
        return -1;
    }
    Py_INCREF(d);
    Py_BEGIN_CRITICAL_SECTION(r);
    data_release(d);
    if (r->data_map) {
        PyObject *k = PyLong_FromVoidPtr(d->obj);
        if (k) {
            PyObject *cur = PyDict_GetItemWithError(r->data_map, k);
            if (cur == (PyObject *)d && PyDict_DelItem(r->data_map, k) < 0) PyErr_Clear();
            if (PyErr_Occurred()) PyErr_Clear();
            Py_DECREF(k);
        } else {
            PyErr_Clear();
        }
    }
    Py_END_CRITICAL_SECTION();
    Py_DECREF(d);
    return 0;
}

static PyObject *
Data_unregister(DataObject *d, PyObject *Py_UNUSED(ignored))
{
    if (data_unregister(d) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Data_enter(DataObject *d, PyObject *Py_UNUSED(ignored))
{
    return Py_NewRef(d);
}

static PyObject *
Data_exit(DataObject *d, PyObject *args)
{
    (void)args;
    if (data_unregister(d) < 0) return NULL;
    Py_RETURN_FALSE;
}

static int
Data_traverse(DataObject *d, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(d));
    Py_VISIT(d->rt);
    Py_VISIT(d->obj);
    return 0;
}

static void
Data_dealloc(DataObject *d)
{
    PyTypeObject *tp = Py_TYPE(d);
    PyObject_GC_UnTrack(d);
    /* Registered data is held by its runtime's map, so reaching here means
     * it was unregistered or the runtime closed. */
    if (d->has_view) PyBuffer_Release(&d->view);
    Py_CLEAR(d->obj);
    Py_CLEAR(d->rt);
    tp->tp_free(d);
    Py_DECREF(tp);
}

static PyObject *
Data_get_obj(DataObject *d, void *Py_UNUSED(c))
{
    return Py_NewRef(d->obj);
}

static PyObject *
Data_get_nbytes(DataObject *d, void *Py_UNUSED(c))
{
    return PyLong_FromSsize_t(d->has_view ? d->view.len : 0);
}

static PyObject *
Data_get_registered(DataObject *d, void *Py_UNUSED(c))
{
    return PyBool_FromLong(d->d != NULL && d->rt->rt != NULL);
}

static PyObject *
Data_get_readonly(DataObject *d, void *Py_UNUSED(c))
{
    return PyBool_FromLong(d->readonly);
}

static PyObject *
Data_repr(DataObject *d)
{
    return PyUnicode_FromFormat("<weft.Data of '%s', %zd bytes%s>", Py_TYPE(d->obj)->tp_name,
                                d->has_view ? d->view.len : (Py_ssize_t)0,
                                d->d ? "" : ", unregistered");
}

static PyObject *
Data_new_err(PyTypeObject *tp, PyObject *a, PyObject *k)
{
    (void)tp;
    (void)a;
    (void)k;
    PyErr_SetString(PyExc_TypeError, "weft.Data objects come from Runtime.data(obj) or weft.data(obj)");
    return NULL;
}

static PyMethodDef Data_methods[] = {
    {"unregister", (PyCFunction)Data_unregister, METH_NOARGS,
     "Wait for the tasks that use it, then release the buffer."},
    {"__enter__", (PyCFunction)Data_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Data_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Data_getset[] = {
    {"obj", (getter)Data_get_obj, NULL, "the registered object", NULL},
    {"nbytes", (getter)Data_get_nbytes, NULL, "size of its buffer", NULL},
    {"registered", (getter)Data_get_registered, NULL, "True while registered", NULL},
    {"readonly", (getter)Data_get_readonly, NULL, "True for a read-only buffer", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyType_Slot Data_slots[] = {
    {Py_tp_doc, "A buffer-protocol object registered with a runtime: tasks that name it in "
                "reads=/writes=/readwrites=/commutes= are ordered by their access modes.  The "
                "buffer stays exported (its memory pinned) until unregistered."},
    {Py_tp_new, Data_new_err},
    {Py_tp_dealloc, Data_dealloc},
    {Py_tp_traverse, Data_traverse},
    {Py_tp_methods, Data_methods},
    {Py_tp_getset, Data_getset},
    {Py_tp_repr, Data_repr},
    {0, NULL}};

static PyType_Spec Data_spec = {"weft.Data", sizeof(DataObject), 0,
                                Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, Data_slots};

/* ------------------------------------------------------------------------ */
/* Module functions                                                          */
/* ------------------------------------------------------------------------ */

static PyObject *
mod_spawn(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    modstate *st = state_of_module(m);
    PyObject *self_fn = NULL;
    if (nargs == 0) {
        self_fn = PyObject_GetAttrString(m, "spawn");
        if (self_fn == NULL) return NULL;
    }
    PyObject *res = spawn_impl(st, NULL, args, nargs, kwnames, self_fn);
    Py_XDECREF(self_fn);
    return res;
}

static PyObject *
mod_wait_all(PyObject *m, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *to = NULL;
    uint64_t deadline;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:wait_all", kwlist, &to)) return NULL;
    if (parse_timeout(to, &deadline) < 0) return NULL;
    /* Inside a task this is the task's own runtime: runtime_wait_all refuses. */
    RuntimeObject *r = current_runtime(state_of_module(m), 0);
    if (r == NULL) return NULL;
    Py_INCREF(r);
    int rc = runtime_wait_all(r, deadline);
    Py_DECREF(r);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *
mod_current_runtime(PyObject *m, PyObject *Py_UNUSED(ignored))
{
    RuntimeObject *r = current_runtime(state_of_module(m), 1);
    return Py_NewRef(r ? (PyObject *)r : Py_None);
}

static PyObject *
mod_current_task(PyObject *m, PyObject *Py_UNUSED(ignored))
{
    (void)m;
    return Py_NewRef(tl_cur ? (PyObject *)tl_cur : Py_None);
}

static PyObject *
mod_data(PyObject *m, PyObject *obj)
{
    RuntimeObject *r = current_runtime(state_of_module(m), 0);
    if (r == NULL) return NULL;
    return Runtime_data(r, obj);
}

static PyObject *
mod_close_all(PyObject *m, PyObject *Py_UNUSED(ignored))
{
    modstate *st = state_of_module(m);
    PyObject *lst = PySequence_List(st->open);
    if (lst == NULL) return NULL;
    int err = 0;
    for (Py_ssize_t i = PyList_GET_SIZE(lst) - 1; i >= 0; i--)
        if (runtime_close((RuntimeObject *)PyList_GET_ITEM(lst, i)) < 0) {
            PyErr_WriteUnraisable(PyList_GET_ITEM(lst, i));
            err = 1;
        }
    Py_DECREF(lst);
    (void)err;
    Py_RETURN_NONE;
}

static PyObject *
mod_busy(PyObject *m, PyObject *arg)
{
    (void)m;
    double us = PyFloat_AsDouble(arg);
    if (us == -1 && PyErr_Occurred()) {
        PyErr_Format(PyExc_TypeError, "busy(): expected microseconds as a number, got '%.100s'",
                     Py_TYPE(arg)->tp_name);
        return NULL;
    }
    if (us < 0 || us != us) {
        PyErr_SetString(PyExc_ValueError, "busy(): microseconds must be >= 0");
        return NULL;
    }
    uint64_t ns = (uint64_t)(us * 1000.0);
    BEGIN_NOGIL_W
    uint64_t t0 = now_ns();
    while (now_ns() - t0 < ns) cpu_relax();
    END_NOGIL_W
    Py_RETURN_NONE;
}

static PyObject *
mod_inflight(PyObject *m, PyObject *arg)
{
    modstate *st = state_of_module(m);
    if (!Py_IS_TYPE(arg, st->Runtime_T)) {
        PyErr_SetString(PyExc_TypeError, "expected a weft.Runtime");
        return NULL;
    }
    return PyLong_FromSize_t(atomic_load(&((RuntimeObject *)arg)->inflight));
}

static PyMethodDef module_methods[] = {
    {"spawn", (PyCFunction)(void (*)(void))mod_spawn, METH_FASTCALL | METH_KEYWORDS,
     "spawn(fn, *args, deps=(), reads=(), writes=(), readwrites=(), commutes=(), name=None,\n"
     "      priority=0, task=None, kwargs=None, runtime=None) -> Task\n\n"
     "Spawn fn(*args, **kwargs) as a task of the current runtime (inside a task: the innermost "
     "`with weft.Runtime()` block that task entered, else its own runtime; outside tasks: the "
     "innermost `with weft.Runtime()`).  deps: tasks (or task-space slots) to "
     "follow.  reads/writes/readwrites/commutes: buffer objects or weft.Data, giving "
     "dependencies from access modes in spawn order (R, W, RW, RW|COMMUTE).\n\n"
     "Called with no function, returns a decorator: @weft.spawn(deps=[...]) above a def "
     "spawns the function at once and binds its name to the Task.  The decorator binds the "
     "function's free variables (closure cells) to the values they have at the spawn, so "
     "`for i in range(n): @weft.spawn() def t(): use(i)` gives each task its own i; the "
     "objects are shared, not copied, and a nonlocal assignment in the body changes only the "
     "task's copy.  Plain spawn(fn, ...) runs fn itself: its free variables are read when "
     "it runs.  Module globals are never captured."},
    {"wait_all", (PyCFunction)(void (*)(void))mod_wait_all, METH_VARARGS | METH_KEYWORDS,
     "wait_all(timeout=None)\n\nWait for every task of the current runtime; re-raise the first "
     "task exception since the previous wait_all.  Ctrl-C cancels what has not started."},
    {"current_runtime", (PyCFunction)mod_current_runtime, METH_NOARGS,
     "The runtime weft.spawn would use now, or None."},
    {"current_task", (PyCFunction)mod_current_task, METH_NOARGS,
     "The task whose body is running on this thread, or None."},
    {"data", (PyCFunction)mod_data, METH_O,
     "data(obj) -> Data: register a buffer with the current runtime."},
    {"_close_all", (PyCFunction)mod_close_all, METH_NOARGS, "Close every open runtime (atexit)."},
    {"_busy", (PyCFunction)mod_busy, METH_O,
     "_busy(us): spin for us microseconds with the GIL released."},
    {"_inflight", (PyCFunction)mod_inflight, METH_O, "tasks of a runtime in the C runtime now"},
    {NULL, NULL, 0, NULL}};

/* ------------------------------------------------------------------------ */
/* Module init (multi-phase)                                                 */
/* ------------------------------------------------------------------------ */

static int
module_exec(PyObject *m)
{
    modstate *st = state_of_module(m);
#define ADD_TYPE(field, spec)                                                         \
    do {                                                                              \
        st->field = (PyTypeObject *)PyType_FromModuleAndSpec(m, &spec, NULL);         \
        if (st->field == NULL || PyModule_AddType(m, st->field) < 0) return -1;      \
    } while (0)
    ADD_TYPE(Runtime_T, Runtime_spec);
    ADD_TYPE(Task_T, Task_spec);
    ADD_TYPE(Space_T, Space_spec);
    ADD_TYPE(Data_T, Data_spec);
#undef ADD_TYPE
    PyObject *cf = PyImport_ImportModule("concurrent.futures");
    if (cf == NULL) return -1;
    PyObject *base = PyObject_GetAttrString(cf, "CancelledError");
    Py_DECREF(cf);
    if (base == NULL) return -1;
    st->CancelledError = PyErr_NewExceptionWithDoc(
        "weft.CancelledError",
        "A task never ran: a task it depends on failed or was cancelled, or it was cancelled "
        "(Task.cancel(), Ctrl-C, runtime closed).  Attributes: task_name, cause_id, cause_name; "
        "__cause__ is the failed task's exception when known.",
        base, NULL);
    Py_DECREF(base);
    if (st->CancelledError == NULL) return -1;
    if (PyModule_AddObjectRef(m, "CancelledError", st->CancelledError) < 0) return -1;
    st->stack = PyList_New(0);
    st->open = PyList_New(0);
    st->empty_tuple = PyTuple_New(0);
    if (!st->stack || !st->open || !st->empty_tuple) return -1;
#define INTERN(f, s) if ((st->f = PyUnicode_InternFromString(s)) == NULL) return -1
    INTERN(s_deps, "deps");
    INTERN(s_reads, "reads");
    INTERN(s_writes, "writes");
    INTERN(s_readwrites, "readwrites");
    INTERN(s_commutes, "commutes");
    INTERN(s_name, "name");
    INTERN(s_priority, "priority");
    INTERN(s_task, "task");
    INTERN(s_kwargs, "kwargs");
    INTERN(s_runtime, "runtime");
    INTERN(s_add_note, "add_note");
#undef INTERN
    if (PyModule_AddIntConstant(m, "R", WEFT_R) < 0 || PyModule_AddIntConstant(m, "W", WEFT_W) < 0 ||
        PyModule_AddIntConstant(m, "RW", WEFT_RW) < 0 ||
        PyModule_AddIntConstant(m, "COMMUTE", WEFT_COMMUTE) < 0)
        return -1;
    if (PyModule_AddObjectRef(m, "_open_runtimes", st->open) < 0) return -1;
    return 0;
}

static int
module_traverse(PyObject *m, visitproc visit, void *arg)
{
    modstate *st = state_of_module(m);
    if (st == NULL) return 0;
    Py_VISIT(st->Runtime_T);
    Py_VISIT(st->Task_T);
    Py_VISIT(st->Space_T);
    Py_VISIT(st->Data_T);
    Py_VISIT(st->CancelledError);
    Py_VISIT(st->stack);
    Py_VISIT(st->open);
    return 0;
}

static int
module_clear(PyObject *m)
{
    modstate *st = state_of_module(m);
    if (st == NULL) return 0;
    Py_CLEAR(st->Runtime_T);
    Py_CLEAR(st->Task_T);
    Py_CLEAR(st->Space_T);
    Py_CLEAR(st->Data_T);
    Py_CLEAR(st->CancelledError);
    Py_CLEAR(st->stack);
    Py_CLEAR(st->open);
    Py_CLEAR(st->empty_tuple);
    Py_CLEAR(st->s_deps);
    Py_CLEAR(st->s_reads);
    Py_CLEAR(st->s_writes);
    Py_CLEAR(st->s_readwrites);
    Py_CLEAR(st->s_commutes);
    Py_CLEAR(st->s_name);
    Py_CLEAR(st->s_priority);
    Py_CLEAR(st->s_task);
    Py_CLEAR(st->s_kwargs);
    Py_CLEAR(st->s_runtime);
    Py_CLEAR(st->s_add_note);
    return 0;
}

static void
module_free(void *m)
{
    module_clear((PyObject *)m);
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
#ifdef Py_mod_multiple_interpreters
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_SUPPORTED},
#endif
#ifdef Py_mod_gil
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL}};

static struct PyModuleDef weft_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "weft._weft",
    .m_doc = "C core of the weft package (see weft/__init__.py).",
    .m_size = sizeof(modstate),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC
PyInit__weft(void)
{
    return PyModuleDef_Init(&weft_module);
}
