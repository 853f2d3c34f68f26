/*
 * runtime.c — the weft.Runtime type (create, close, the `with` block), and
 * which runtime weft.spawn, weft.wait_all and weft.data mean.
 */
#include "_weft.h"

#include <errno.h>

/* ------------------------------------------------------------------------ */
/* Runtime resolution                                                        */
/* ------------------------------------------------------------------------ */

/* The runtime of weft.spawn / weft.wait_all / weft.data: inside a task, the
 * innermost `with` block that this task's body entered, else the task's own
 * runtime; outside tasks, the innermost `with` block entered outside tasks
 * (on any thread).  A block entered in a task is thus seen by that task only. */
RuntimeObject *
weft_py_current_runtime(modstate *st, int quiet)
{
    PyObject *me = weft_py_tl_cur ? (PyObject *)weft_py_tl_cur : Py_None;
    for (Py_ssize_t i = PyList_GET_SIZE(st->stack) - 1; i >= 0; i--) {
        PyObject *e = PyList_GET_ITEM(st->stack, i);
        if (PyTuple_GET_ITEM(e, 1) == me) return (RuntimeObject *)PyTuple_GET_ITEM(e, 0);
    }
    if (weft_py_tl_cur && weft_py_tl_cur->rt) return weft_py_tl_cur->rt;
    if (!quiet)
        PyErr_SetString(PyExc_RuntimeError,
                        "no active weft runtime: use `with weft.Runtime() as rt:` "
                        "(or call rt.spawn / rt.wait_all on a runtime)");
    return NULL;
}

int
weft_py_check_open(RuntimeObject *r, const char *what)
{
    if (r->rt == NULL || r->closing) {
        PyErr_Format(PyExc_RuntimeError, "%s: the weft runtime is closed", what);
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
    if (!PyLong_Check(o) || PyBool_Check(o)) {
        PyErr_Format(PyExc_TypeError, "Runtime(): %s= expects an int, got '%.100s'", what,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (overflow > 0) {
        PyErr_Format(PyExc_ValueError, "Runtime(): %s=%R is too large (at most %lld)", what, o, LLONG_MAX);
        return -1;
    }
    if (overflow < 0 || v < 0) {
        PyErr_Format(PyExc_ValueError, "Runtime(): %s= must be >= 0, got %R", what, o);
        return -1;
    }
    *out = (unsigned long long)v;
    return 1;
}

/* A count of nanoseconds from the environment variable name, if set and
 * not blank: 1 with *out, 0 when unset, -1 (ValueError naming it and the
 * keyword that does the same) when it is not a plain decimal count. */
static int
env_ns(const char *name, const char *keyword, unsigned long long *out)
{
    const char *env = getenv(name);
    if (env == NULL || *env == '\0') return 0;
    const char *p = env;
    while (*p == ' ' || *p == '\t') p++;
    char *end = NULL;
    errno = 0;
    unsigned long long v = (*p >= '0' && *p <= '9') ? strtoull(p, &end, 10) : 0;
    if (end != NULL)
        while (*end == ' ' || *end == '\t') end++;
    if (end == NULL || *end != '\0' || errno == ERANGE || v > (unsigned long long)LLONG_MAX) {
        PyErr_Format(PyExc_ValueError,
                     "Runtime(): %s='%.50s' is not a count of nanoseconds: write a whole number "
                     "(e.g. %s=1000000 for 1 ms), or unset it, or pass %s= instead",
                     name, env, name, keyword);
        return -1;
    }
    *out = v;
    return 1;
}

/* Runtime()'s keywords, checked: the C configuration, and what the
 * extension keeps of its own.  trace_b owns the bytes cfg.trace_path
 * points into. */
typedef struct {
    weft_config cfg;
    int spawn_mode;
    uint64_t gil_spin;
    uint64_t gil_hold;
    PyObject *trace_b;
} runtime_args;

/* 0, or -1 with an exception (a->trace_b then NULL). */
static int
runtime_parse(PyObject *args, PyObject *kwds, runtime_args *a)
{
    static char *kwlist[] = {"workers", "trace", "spin_ns", "max_inflight", "gil_spin_ns", "spawn_gil",
                             "devices", "vgpu_memory", "policy", "bound", "pin_workers", "gil_hold_ns", NULL};
    PyObject *workers = NULL, *trace = NULL, *spin = NULL, *maxin = NULL, *gspin = NULL, *ghold = NULL;
    PyObject *vgpu_mem = NULL, *bound = NULL, *pin = NULL;
    const char *spawn_gil = NULL, *devices = NULL, *policy = NULL;
    a->trace_b = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O$OOOOzzOzOOO:Runtime", kwlist, &workers, &trace, &spin,
                                     &maxin, &gspin, &spawn_gil, &devices, &vgpu_mem, &policy, &bound, &pin,
                                     &ghold))
        return -1;
    if (bound != NULL && bound != Py_None && !PyBool_Check(bound)) {
        PyErr_Format(PyExc_TypeError, "Runtime(): bound= expects True, False or None, got '%.100s'",
                     Py_TYPE(bound)->tp_name);
        return -1;
    }
    if (pin != NULL && pin != Py_None && !PyBool_Check(pin) && !PyUnicode_Check(pin)) {
        PyErr_Format(PyExc_TypeError, "Runtime(): pin_workers= expects True, False, 'auto' or None, got '%.100s'",
                     Py_TYPE(pin)->tp_name);
        return -1;
    }
    if (pin != NULL && PyUnicode_Check(pin) && PyUnicode_CompareWithASCIIString(pin, "auto") != 0) {
        PyErr_Format(PyExc_ValueError, "Runtime(): pin_workers= must be True, False, 'auto' or None, not %R", pin);
        return -1;
    }
    if (spawn_gil == NULL) spawn_gil = getenv("WEFT_PY_SPAWN_GIL");
    a->spawn_mode = SPAWN_HOLD;
    if (spawn_gil && *spawn_gil) {
        if (strcmp(spawn_gil, "hold") == 0) a->spawn_mode = SPAWN_HOLD;
        else if (strcmp(spawn_gil, "release") == 0) a->spawn_mode = SPAWN_RELEASE;
        else if (strcmp(spawn_gil, "yield") == 0) a->spawn_mode = SPAWN_YIELD;
        else {
            PyErr_Format(PyExc_ValueError, "Runtime(): spawn_gil= must be 'hold', 'release' or "
                         "'yield', not '%.50s'", spawn_gil);
            return -1;
        }
    }
    weft_config *cfg = &a->cfg;
    weft_config_init(cfg);
    unsigned long long v;
    int has;
    if ((has = parse_size(workers, "workers", &v)) < 0) return -1;
    if (has) {
        if (v > 4096) {
            PyErr_Format(PyExc_ValueError, "Runtime(): workers=%llu is too many", v);
            return -1;
        }
        cfg->workers = (unsigned)v;
    }
    if ((has = parse_size(spin, "spin_ns", &v)) < 0) return -1;
    if (has) cfg->spin_ns = v;
    if ((has = parse_size(maxin, "max_inflight", &v)) < 0) return -1;
    if (has) cfg->max_inflight = (size_t)v;
    if (devices) cfg->devices = devices; /* read by weft_runtime_create only */
    if (policy) cfg->policy = policy;    /* likewise */
    /* bound=True records the graph (Runtime.bound()); WEFT_BOUND=1 also
     * prints the line at close, and is kept; bound=False turns both off. */
    if (bound == Py_True && cfg->bound == WEFT_BOUND_OFF) cfg->bound = WEFT_BOUND_RECORD;
    if (bound == Py_False) cfg->bound = WEFT_BOUND_OFF;
    /* pin_workers=None keeps WEFT_PIN_WORKERS, else 'auto' (weft_config_init). */
    if (pin == Py_True) cfg->pin_workers = WEFT_PIN_ON;
    if (pin == Py_False) cfg->pin_workers = WEFT_PIN_OFF;
    if (pin != NULL && PyUnicode_Check(pin)) cfg->pin_workers = WEFT_PIN_AUTO;
    if ((has = parse_size(vgpu_mem, "vgpu_memory", &v)) < 0) return -1;
    if (has) cfg->vgpu_memory = (size_t)v;
    /* The keyword, else the environment, else the default. */
    a->gil_spin = 20000; /* 20 us */
    if ((has = parse_size(gspin, "gil_spin_ns", &v)) == 0) has = env_ns("WEFT_GIL_SPIN_NS", "gil_spin_ns", &v);
    if (has < 0) return -1;
    if (has) a->gil_spin = v;
    a->gil_hold = 1000000; /* 1 ms */
    if ((has = parse_size(ghold, "gil_hold_ns", &v)) == 0) has = env_ns("WEFT_GIL_HOLD_NS", "gil_hold_ns", &v);
    if (has < 0) return -1;
    if (has) a->gil_hold = v;
    if (trace && trace != Py_None) {
        if (!PyUnicode_FSConverter(trace, &a->trace_b)) return -1;
        cfg->trace_path = PyBytes_AS_STRING(a->trace_b);
    }
    return 0;
}

/* A Runtime object with no C runtime yet (r->rt NULL), tracked by the GC;
 * NULL with an exception. */
static RuntimeObject *
runtime_object(PyTypeObject *type, modstate *st, const runtime_args *a)
{
    RuntimeObject *r = PyObject_GC_New(RuntimeObject, type);
    if (r == NULL) return NULL;
    r->rt = NULL;
    pthread_mutex_init(&r->close_lock, NULL);
    weft_py_registry_init(r);
    r->module = Py_NewRef(PyType_GetModuleByDef(type, &weft_py_module));
    r->st = st;
    r->interp = PyInterpreterState_Get();
    atomic_init(&r->inflight, 0);
    atomic_init(&r->py_busy, 0);
    atomic_init(&r->dev_gil_wait, 0);
    atomic_init(&r->released, NULL);
    atomic_init(&r->cells, NULL);
    r->spawn_gil = a->spawn_mode;
    r->failures = PyDict_New();
    r->failed = PyDict_New();
    r->spaces = PyDict_New();
    r->comms = PyList_New(0);
    r->reductions = PyDict_New();
    r->unobserved = PyDict_New();
    r->kinds = PyDict_New();
    r->next_space = 0;
    r->spin_gil_ns = a->gil_spin;
    r->gil_hold_ns = a->gil_hold;
    atomic_init(&r->gil_kept, 0);
    atomic_init(&r->gil_spin_now, a->gil_spin);
    atomic_init(&r->py_in_body, 0);
    r->gil_off = 0;
#ifdef Py_GIL_DISABLED
    {
        /* Without a GIL there is nothing to hand off: workers skip the claim
         * and the spin (the GIL can be enabled again later, by importing an
         * extension that needs it; the hand-off is then merely missing). */
        PyObject *sys_gil = PySys_GetObject("_is_gil_enabled"); /* borrowed */
        PyObject *on = sys_gil ? PyObject_CallNoArgs(sys_gil) : NULL;
        if (on == NULL) PyErr_Clear();
        else r->gil_off = !PyObject_IsTrue(on);
        Py_XDECREF(on);
    }
#endif
    for (unsigned i = 0; i < WEFT_PY_GIL_WORKERS_KNOWN; i++) atomic_init(&r->worker_ts[i], NULL);
    atomic_init(&r->worker_ts_n, 0);
    atomic_init(&r->gil_taking, 0);
    atomic_init(&r->gil_waiting, 0);
    r->gil.locked = NULL;
    r->gil.holder = NULL;
    r->gil.switches = NULL;
    /* Where the GIL's layout is known, the workers' spin follows its state
     * (gil.c); this thread holds the GIL, which the view checks. */
    if (!r->gil_off) weft_py_gil_view(&r->gil);
    atomic_init(&r->closing, 0);
    r->weakreflist = NULL;
    PyObject_GC_Track(r);
    if (!r->failures || !r->failed || !r->spaces || !r->comms || !r->reductions || !r->unobserved || !r->kinds) {
        Py_DECREF(r);
        return NULL;
    }
    return r;
}

/* weft.Runtime(...): the keywords, the object, then the C runtime (its
 * workers attach to the interpreter through the worker hooks). */
static PyObject *
Runtime_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    runtime_args a;
    if (runtime_parse(args, kwds, &a) < 0) {
        Py_XDECREF(a.trace_b);
        return NULL;
    }
    modstate *st = weft_py_state_of_type(type);
    RuntimeObject *r = st ? runtime_object(type, st, &a) : NULL;
    if (r == NULL) {
        Py_XDECREF(a.trace_b);
        return NULL;
    }
    a.cfg.on_worker_start = weft_py_on_worker_start;
    a.cfg.on_worker_stop = weft_py_on_worker_stop;
    a.cfg.on_worker_let_go = weft_py_on_worker_let_go;
    a.cfg.hook_arg = r;
    int rc;
    weft_runtime *rt = NULL;
    BEGIN_NOGIL
    rc = weft_runtime_create(&a.cfg, &rt);
    END_NOGIL
    Py_CLEAR(a.trace_b);
    if (rc != 0) {
        weft_py_err_weft(rc, "Runtime()");
        goto fail;
    }
    r->rt = rt;
    r->workers = weft_runtime_workers(rt);
    r->policy = "";
    (void)weft_runtime_policy(rt, &r->policy); /* (cannot fail on a live runtime) */
    r->models = strcmp(r->policy, "dmda") == 0; /* (kinds only where models use them) */
    if (PyList_Append(st->open, (PyObject *)r) < 0) {
        BEGIN_NOGIL
        rc = weft_runtime_destroy(rt);
        END_NOGIL
        r->rt = NULL;
        goto fail;
    }
    return (PyObject *)r;
fail:
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

/* Close: finish every task, stop the workers (the C runtime destroys its task
 * spaces first: tasks waiting for keys never spawned are cancelled), release
 * every exported buffer. */
static int close_locked(RuntimeObject *r);

int
weft_py_runtime_close(RuntimeObject *r)
{
    if (r->rt == NULL) return 0;
    if (weft_py_tl_ts != NULL && weft_py_tl_cur != NULL && weft_py_tl_cur->rt == r) {
        PyErr_SetString(PyExc_RuntimeError, "close(): a weft runtime cannot be closed from one of its tasks");
        return -1;
    }
    /* Two threads closing at once: the second waits for the first, then
     * finds the runtime closed. */
    BEGIN_NOGIL
    pthread_mutex_lock(&r->close_lock);
    END_NOGIL
    int rc = r->rt ? close_locked(r) : 0;
    pthread_mutex_unlock(&r->close_lock);
    return rc;
}

/* The labels (a list of str, new ref) of the task-space slots of r that a
 * task followed while they were declared and that nobody spawned into (nor
 * cancelled): once nothing runs any more, their dependents are left waiting
 * for them, and destroying the runtime cancels those.  NULL (no error) if
 * there are none or on an error. */
PyObject *
weft_py_never_spawned(RuntimeObject *r)
{
    PyObject *out = NULL, *spaces = r->spaces ? PyDict_Values(r->spaces) : NULL;
    for (Py_ssize_t j = 0; spaces && j < PyList_GET_SIZE(spaces); j++) {
        SpaceObject *sp = (SpaceObject *)PyList_GET_ITEM(spaces, j);
        PyObject *vals = NULL;
        /* (cancel_requested changes in a critical section on the space.) */
        WEFT_PY_CS_BEGIN(sp)
        vals = sp->rt == r && sp->tasks ? PyDict_Values(sp->tasks) : NULL;
        for (Py_ssize_t i = 0; vals && i < PyList_GET_SIZE(vals); i++) {
            TaskObject *t = (TaskObject *)PyList_GET_ITEM(vals, i);
            if (atomic_load(&t->phase) != PH_DECLARED || !atomic_load(&t->depended) || t->cancel_requested ||
                t->name == NULL)
                continue;
            if (out == NULL && (out = PyList_New(0)) == NULL) break;
            if (PyList_Append(out, t->name) < 0) break;
        }
        WEFT_PY_CS_END();
        Py_XDECREF(vals);
    }
    Py_XDECREF(spaces);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        Py_CLEAR(out);
    }
    return out;
}

/* "a, b, c" of the first 10 items of a list of str, "and N more" after. */
PyObject *
weft_py_join_some(PyObject *items, const char *sep)
{
    Py_ssize_t n = PyList_GET_SIZE(items), show = n > 10 ? 10 : n;
    PyObject *head = PyList_GetSlice(items, 0, show), *s = PyUnicode_FromString(sep);
    PyObject *res = head && s ? PyUnicode_Join(s, head) : NULL;
    Py_XDECREF(head);
    Py_XDECREF(s);
    if (res && n > show) Py_SETREF(res, PyUnicode_FromFormat("%U%sand %zd more", res, sep, n - show));
    return res;
}

/* What closing r found that nobody saw, as weft.TaskWarnings: the keys
 * never spawned (`never`, a list of labels, or NULL) and the failures never
 * retrieved (r->unobserved, emptied).  0, or -1 with the exception a
 * warning filter turned a warning into. */
static int
close_report(RuntimeObject *r, PyObject *never)
{
    int rc = 0;
    PyObject *msg = NULL;
    if (never && PyList_GET_SIZE(never) > 0) {
        PyObject *keys = weft_py_join_some(never, ", ");
        Py_ssize_t n = PyList_GET_SIZE(never);
        msg = keys ? PyUnicode_FromFormat(
                         "weft: the runtime closed with tasks waiting for %s that nobody spawned: %U; "
                         "those tasks were cancelled (weft.CancelledError: ... was never spawned). Spawn a task "
                         "into %s, or leave %s out of deps= (a negative index such as T[-1] names no key and is no "
                         "dependency, as in Parla)",
                         n == 1 ? "a task-space key" : "task-space keys", keys, n == 1 ? "it" : "each", n == 1 ? "it" : "them")
                   : NULL;
        Py_XDECREF(keys);
        if (msg && PyErr_WarnEx(r->st->TaskWarning, PyUnicode_AsUTF8(msg), 1) < 0) rc = -1;
        Py_CLEAR(msg);
        if (PyErr_Occurred() && rc == 0) PyErr_Clear();
    }
    PyObject *lines = NULL;
    if (r->unobserved && PyDict_GET_SIZE(r->unobserved) > 0) {
        WEFT_PY_CS_BEGIN(r->unobserved)
        lines = PyDict_Values(r->unobserved);
        PyDict_Clear(r->unobserved);
        WEFT_PY_CS_END();
    }
    if (rc == 0 && lines && PyList_GET_SIZE(lines) > 0) {
        PyObject *all = weft_py_join_some(lines, "; ");
        Py_ssize_t n = PyList_GET_SIZE(lines);
        msg = all ? PyUnicode_FromFormat(
                        "weft: %zd task exception%s never retrieved: %U (call result(), exception() or wait() on "
                        "a task, or wait_all(), to see its failure)",
                        n, n == 1 ? " was" : "s were", all)
                  : NULL;
        Py_XDECREF(all);
        if (msg && PyErr_WarnEx(r->st->TaskWarning, PyUnicode_AsUTF8(msg), 1) < 0) rc = -1;
        Py_XDECREF(msg);
        if (PyErr_Occurred() && rc == 0) PyErr_Clear();
    }
    Py_XDECREF(lines);
    return rc;
}

static int
close_locked(RuntimeObject *r)
{
    PyObject *interrupt = NULL;
    /* Let the tasks run until only tasks waiting for task-space slots nobody
     * spawned into are left (Ctrl-C here cancels what has not started).
     * Tasks may still spawn children (and fill slots) meanwhile: `closing`
     * is set only once nothing runs; destroy then cancels the rest. */
    for (;;) {
        int rc;
        weft_runtime *rt = r->rt;
        BEGIN_NOGIL
        rc = weft_wait_settled_timed(rt, WAIT_SLICE_NS);
        END_NOGIL
        if (rc != WEFT_ETIMEDOUT) break;
        if (interrupt == NULL && PyErr_CheckSignals() < 0) {
            interrupt = weft_py_fetch_exc();
            weft_py_cancel_pending(r);
        }
    }
    /* Communication operations have no Python body: how they ended is
     * recorded now, while their handles can still tell. */
    weft_py_comms_settle(r);
    /* What destroy is about to cancel for want of a spawn, said afterwards. */
    PyObject *never = weft_py_never_spawned(r);
    r->closing = 1;
    weft_runtime *rt = r->rt;
    int rc;
    BEGIN_NOGIL
    rc = weft_runtime_destroy(rt);
    END_NOGIL
    (void)rc;
    r->rt = NULL;
    /* Then its communicators (weft_comm_destroy after the runtime only
     * frees them, and ends an MPI communicator's progress thread). */
    weft_py_comms_close_all(r);
    weft_py_release_drain(r); /* every body has run */
    weft_py_spaces_unbind(r);
    /* Buffers stay exported until here. */
    weft_py_data_forget_all(r);
    PyDict_Clear(r->failures);
    modstate *st = r->st;
    Py_INCREF(r);
    for (Py_ssize_t i = PyList_GET_SIZE(st->stack) - 1; i >= 0; i--)
        if (PyTuple_GET_ITEM(PyList_GET_ITEM(st->stack, i), 0) == (PyObject *)r &&
            PyList_SetSlice(st->stack, i, i + 1, NULL) < 0)
            PyErr_Clear();
    if (list_remove_obj(st->open, (PyObject *)r) < 0) PyErr_Clear();
    int reported = interrupt ? 0 : close_report(r, never);
    Py_XDECREF(never);
    Py_DECREF(r);
    if (reported < 0) return -1;
    if (interrupt) {
        weft_py_raise_exc(interrupt);
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
    Py_VISIT(r->spaces);
    Py_VISIT(r->comms);
    Py_VISIT(r->reductions);
    Py_VISIT(r->unobserved);
    Py_VISIT(r->kinds);
    return weft_py_registry_traverse(r, visit, arg);
}

static int
Runtime_clear(RuntimeObject *r)
{
    Py_CLEAR(r->failures);
    weft_py_registry_clear(r);
    Py_CLEAR(r->spaces);
    Py_CLEAR(r->comms);
    Py_CLEAR(r->failed);
    if (r->rt == NULL) Py_CLEAR(r->reductions); /* (their C functions serve its runtime until destroyed) */
    Py_CLEAR(r->unobserved);
    Py_CLEAR(r->kinds);
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
    weft_py_release_drain(r);
    Runtime_clear(r);
    weft_py_registry_fini(r);
    Py_CLEAR(r->module);
    pthread_mutex_destroy(&r->close_lock);
    tp->tp_free(r);
    Py_DECREF(tp);
}

static PyObject *
Runtime_spawn(RuntimeObject *r, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *self_fn = NULL;
    if (nargs == 0 && (self_fn = PyObject_GetAttrString((PyObject *)r, "spawn")) == NULL) return NULL;
    PyObject *res = weft_py_spawn(r->st, r, args, nargs, kwnames, self_fn);
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
    if (weft_py_parse_timeout(to, &deadline) < 0) return NULL;
    if (weft_py_runtime_wait_all(r, deadline) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Runtime_close(RuntimeObject *r, PyObject *Py_UNUSED(ignored))
{
    if (weft_py_runtime_close(r) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Runtime_enter(RuntimeObject *r, PyObject *Py_UNUSED(ignored))
{
    if (weft_py_check_open(r, "Runtime.__enter__") < 0) return NULL;
    PyObject *e = PyTuple_Pack(2, (PyObject *)r, weft_py_tl_cur ? (PyObject *)weft_py_tl_cur : Py_None);
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
        if (weft_py_runtime_wait_all(r, NO_DEADLINE) < 0) failed = 1;
    } else if (r->rt && et != Py_None &&
               PyObject_IsSubclass(et, PyExc_KeyboardInterrupt) == 1) {
        weft_py_cancel_pending(r);
    }
    PyObject *pending = failed ? weft_py_fetch_exc() : NULL;
    if (weft_py_runtime_close(r) < 0) {
        Py_XDECREF(pending);
        return NULL;
    }
    if (pending) {
        weft_py_raise_exc(pending);
        Py_DECREF(pending);
        return NULL;
    }
    Py_RETURN_FALSE;
}

PyObject *
weft_py_runtime_data(RuntimeObject *r, PyObject *obj)
{
    if (weft_py_check_open(r, "data()") < 0) return NULL;
    return (PyObject *)weft_py_data_lookup(r, obj, "data()");
}

static PyObject *
Runtime_partition(RuntimeObject *r, PyObject *args, PyObject *kwds)
{
    if (weft_py_check_open(r, "partition()") < 0) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (n < 1) {
        PyErr_SetString(PyExc_TypeError, "partition() missing the array to partition");
        return NULL;
    }
    DataObject *d = weft_py_data_lookup(r, PyTuple_GET_ITEM(args, 0), "partition()");
    if (d == NULL) return NULL;
    PyObject *rest = PyTuple_GetSlice(args, 1, n);
    PyObject *res = rest ? weft_py_data_partition(d, rest, kwds) : NULL;
    Py_XDECREF(rest);
    Py_DECREF(d);
    return res;
}

static PyObject *
Runtime_unregister(RuntimeObject *r, PyObject *obj)
{
    if (weft_py_check_open(r, "unregister()") < 0) return NULL;
    /* obj itself, or the memory its buffer covers. */
    DataObject *d = weft_py_data_find(r, obj, "unregister()");
    if (d == NULL) return NULL;
    int rc = weft_py_data_unregister(d);
    Py_DECREF(d);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Runtime_cancel_pending(RuntimeObject *r, PyObject *Py_UNUSED(ignored))
{
    if (weft_py_check_open(r, "cancel_pending()") < 0) return NULL;
    int rc = weft_py_cancel_pending(r);
    if (rc < 0 && PyErr_Occurred()) return NULL;
    if (rc != 0) return weft_py_err_weft(rc, "cancel_pending()");
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
    if (rc != 0) return weft_py_err_weft(rc, "stats()");
    return Py_BuildValue("{sKsKsKsKsKsKsKsKsKsKsKsIsKsK}", "tasks_spawned",
                         (unsigned long long)s.tasks_spawned, "tasks_run",
                         (unsigned long long)s.tasks_run, "tasks_failed",
                         (unsigned long long)s.tasks_failed, "tasks_cancelled",
                         (unsigned long long)s.tasks_cancelled, "steals",
                         (unsigned long long)s.steals, "parks", (unsigned long long)s.parks,
                         "idle_ns", (unsigned long long)s.idle_ns, "inflight",
                         (unsigned long long)s.inflight, "inflight_peak",
                         (unsigned long long)s.inflight_peak, "bytes_per_task",
                         (unsigned long long)s.bytes_per_task, "trace_dropped",
                         (unsigned long long)s.trace_dropped, "workers", s.workers, "autopins",
                         (unsigned long long)s.autopins, "gil_kept",
                         (unsigned long long)atomic_load_explicit(&r->gil_kept, memory_order_relaxed));
}

static PyObject *
Runtime_bound(RuntimeObject *r, PyObject *Py_UNUSED(ignored))
{
    weft_runtime *rt = r->rt;
    if (rt == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "bound(): the weft runtime is closed");
        return NULL;
    }
    weft_bound b;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = weft_runtime_bound(rt, &b);
    Py_END_ALLOW_THREADS
    if (rc == WEFT_EINVAL) { /* the one reason: no graph recorded; said in Python's terms */
        PyErr_SetString(PyExc_ValueError, "bound(): this runtime records no task graph: create it with "
                                          "weft.Runtime(..., bound=True), or with WEFT_BOUND=1 in the environment");
        return NULL;
    }
    if (rc != 0) return weft_py_err_weft(rc, "bound()");
    return Py_BuildValue("{sKsKsKsdsdsdsdsIsI}", "tasks", (unsigned long long)b.tasks, "pending",
                         (unsigned long long)b.pending, "no_model", (unsigned long long)b.no_model,
                         "makespan", b.makespan, "path", b.path, "area", b.area, "bound", b.bound,
                         "cpu_slots", b.cpu_slots, "gpus", b.gpus);
}

static PyObject *
Runtime_get_gil_handoff(RuntimeObject *r, void *Py_UNUSED(c))
{
    return PyBool_FromLong(!r->gil_off);
}

static PyObject *
Runtime_get_devices(RuntimeObject *r, void *Py_UNUSED(c))
{
    static const char *kinds[] = {"cpu", "vgpu", "cuda"};
    weft_runtime *rt = r->rt;
    if (rt == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "devices: the weft runtime is closed");
        return NULL;
    }
    unsigned n = weft_device_count(rt);
    PyObject *list = PyList_New(0);
    for (unsigned i = 0; list && i < n; i++) {
        weft_device_info d;
        if (weft_device_info_get(rt, i, &d) != 0) {
            Py_DECREF(list);
            return weft_py_err_weft(WEFT_ECLOSED, "devices");
        }
        PyObject *item = Py_BuildValue("{sssIsisssnsn}", "kind", kinds[d.kind % 3], "index", d.index,
                                       "ordinal", d.ordinal, "name", d.name, "memory",
                                       (Py_ssize_t)(d.memory > PY_SSIZE_T_MAX ? PY_SSIZE_T_MAX : d.memory),
                                       "memory_used", (Py_ssize_t)d.memory_used);
        if (item == NULL || PyList_Append(list, item) < 0) Py_CLEAR(list);
        Py_XDECREF(item);
    }
    return list;
}

static PyObject *
Runtime_get_workers(RuntimeObject *r, void *Py_UNUSED(c))
{
    return PyLong_FromUnsignedLong(r->workers);
}

static PyObject *
Runtime_get_policy(RuntimeObject *r, void *Py_UNUSED(c))
{
    return PyUnicode_FromString(r->policy ? r->policy : "");
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
     "priority=0, task=None, kwargs=None, placement=None, share=None, memory=None, "
     "device_data=False, reduces=(), scratch=(), cost=None, kind=None) -> Task\n\nSpawn fn(*args) on this "
     "runtime (see weft.spawn).  "
     "Called with no function, returns a decorator that binds the function's free variables "
     "at the spawn, as weft.spawn does."},
    {"wait_all", (PyCFunction)(void (*)(void))Runtime_wait_all, METH_VARARGS | METH_KEYWORDS,
     "wait_all(timeout=None)\n\nWait until no task is in flight; re-raise the first task "
     "exception since the previous wait_all."},
    {"close", (PyCFunction)Runtime_close, METH_NOARGS,
     "Finish every task, stop the workers and release registered buffers.  Idempotent."},
    {"data", (PyCFunction)weft_py_runtime_data, METH_O,
     "data(obj) -> Data\n\nThe weft.Data of the memory obj's buffer covers, registering it on "
     "first use: every object over the same bytes gets the same Data.  Safe from any thread."},
    {"partition", (PyCFunction)(void (*)(void))Runtime_partition, METH_VARARGS | METH_KEYWORDS,
     "partition(obj, grid, halo=0, *, cols=None) -> tiles\n\nrt.data(obj).partition(grid, halo, cols=cols): "
     "split the registered array obj into tiles (see weft.Data.partition)."},
    {"acquire", (PyCFunction)(void (*)(void))weft_py_runtime_acquire, METH_VARARGS | METH_KEYWORDS,
     "acquire(obj, mode=\"r\", timeout=None) -> weft.Acquired: after the tasks spawned before it that "
     "write obj (\"w\"/\"rw\": that use it), its host memory is the newest value and the caller's "
     "until release(); use as `with rt.acquire(buf, \"rw\"):`."},
    {"fetch", (PyCFunction)(void (*)(void))weft_py_runtime_fetch, METH_VARARGS | METH_KEYWORDS,
     "fetch(obj, timeout=None) -> obj: make obj's host memory the newest value (acquire \"r\" and "
     "release)."},
    {"unregister", (PyCFunction)Runtime_unregister, METH_O,
     "unregister(obj)\n\nWait for the tasks using the memory obj covers (directly or through an "
     "overlapping range), then release its buffer.  obj: a weft.Data, or any object over "
     "registered memory."},
    {"cancel_pending", (PyCFunction)Runtime_cancel_pending, METH_NOARGS,
     "Cancel every task that has not started (running tasks finish)."},
    {"stats", (PyCFunction)Runtime_stats, METH_NOARGS, "Counters of the C runtime, as a dict."},
    {"bound", (PyCFunction)Runtime_bound, METH_NOARGS,
     "bound() -> dict\n\nA lower bound of the makespan of the tasks run so far (the runtime "
     "records its task graph with Runtime(bound=True) or WEFT_BOUND=1; weft_runtime_bound): "
     "tasks, pending (not finished: left out), no_model, makespan, path, area and bound "
     "(seconds), cpu_slots and gpus.  ValueError when the runtime records no graph."},
    {"__enter__", (PyCFunction)Runtime_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Runtime_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Runtime_getset[] = {
    {"workers", (getter)Runtime_get_workers, NULL, "number of worker threads", NULL},
    {"policy", (getter)Runtime_get_policy, NULL,
     "the placement policy in use (\"dmda\", \"load\", ...; the default resolved); only \"dmda\" "
     "keeps performance models and uses kinds and cost=", NULL},
    {"devices", (getter)Runtime_get_devices, NULL,
     "the runtime's devices: a list of dicts (kind 'cpu', 'vgpu' or 'cuda', index, ordinal, name, "
     "memory, memory_used), the CPU first", NULL},
    {"gil_handoff", (getter)Runtime_get_gil_handoff, NULL,
     "whether workers hand the GIL to each other (False on a free-threaded build running "
     "without the GIL: there is nothing to hand off)", NULL},
    {"closed", (getter)Runtime_get_closed, NULL, "True once closed", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMemberDef Runtime_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(RuntimeObject, weakreflist), READONLY, NULL},
    {NULL, 0, 0, 0, NULL}};

static PyType_Slot Runtime_slots[] = {
    {Py_tp_doc, "Runtime(workers=None, *, trace=None, spin_ns=None, max_inflight=None, gil_spin_ns=None, "
                "spawn_gil=None, devices=None, vgpu_memory=None, policy=None, bound=None, "
                "pin_workers=None, gil_hold_ns=None)\n\n"
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

PyType_Spec weft_py_runtime_spec = {"weft.Runtime", sizeof(RuntimeObject), 0,
                                   Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, Runtime_slots};
