/*
 * task.c — the weft.Task type (a spawned task, or a task-space slot), its
 * status, and the CancelledError of a task that never ran.
 */
#include "_weft.h"

TaskObject *
weft_py_task_new(modstate *st)
{
    TaskObject *t = PyObject_GC_New(TaskObject, st->Task_T);
    if (t == NULL) return NULL;
    WEFT_PY_HANDOFF_ACQUIRE(t);
    t->rt = NULL;
    t->h = NULL;
    t->fn = t->args = t->kwargs = t->result = t->exc = t->name = t->bodies = t->acc = NULL;
    t->acc_nreads = 0;
    t->acc_nreduces = 0;
    t->device_data = 0;
    t->space = t->key = NULL;
    t->phase = PH_DECLARED;
    t->priority = 0;
    t->cost = 0;
    t->kind = NULL;
    t->cancel_requested = 0;
    t->ran = 0;
    atomic_init(&t->retrieved, 0);
    atomic_init(&t->depended, 0);
    atomic_init(&t->unobs_id, 0);
    t->fail_id = 0;
    atomic_init(&t->cstatus, -1);
    t->index = -1;
    t->ph = NULL;
    t->release_next = NULL;
    t->coro = NULL;
    t->cont_pl = NULL;
    t->seg_acc = NULL;
    t->has_pin = 0;
    t->cont_npl = 0;
    t->cid = 0;
    t->weakreflist = NULL;
    PyObject_GC_Track(t);
    return t;
}

/* ------------------------------------------------------------------------ */
/* Helpers on tasks                                                          */
/* ------------------------------------------------------------------------ */

/* t's C task: its handle once submitted; for a slot being spawned by
 * another thread, the task the C space has for its key already; or NULL. */
static weft_task *
task_handle(TaskObject *t)
{
    if (atomic_load(&t->phase) == PH_SUBMITTED) return atomic_load(&t->h);
    return t->space ? weft_py_slot_spawned(t) : NULL;
}

static const char *
phase_status(TaskObject *t, weft_task_status *cs)
{
    static const char *names[] = {"waiting", "ready", "running", "completed", "failed", "cancelled", "enqueued"};
    weft_task *h = task_handle(t);
    if (h == NULL) return "declared";
    weft_task_status s;
    if (weft_task_status_get(h, &s) != 0) {
        /* Handle unusable (runtime destroyed): the body outcome decides,
         * or for a task without a body its recorded status. */
        int cst = atomic_load(&t->cstatus);
        if (cst >= 0) s = (weft_task_status)cst;
        else if (t->ran) s = t->exc ? WEFT_TASK_FAILED : WEFT_TASK_COMPLETED;
        else s = WEFT_TASK_CANCELLED;
    }
    if (cs) *cs = s;
    if ((unsigned)s < 7) return names[s];
    return "unknown";
}

const char *
weft_py_task_status_name(TaskObject *t, int *code)
{
    weft_task_status s = (weft_task_status)-1; /* stays so for a slot nobody spawned into */
    const char *name = phase_status(t, &s);
    *code = (int)s;
    return name;
}

PyObject *
weft_py_task_who(TaskObject *t)
{
    if (t->name) return PyUnicode_FromFormat("%R", t->name);
    weft_task_info info;
    weft_task *h = task_handle(t);
    if (h && weft_task_info_get(h, &info) == 0 && info.name[0])
        return PyUnicode_FromFormat("%s (id %llu)", info.name, (unsigned long long)info.id);
    return PyUnicode_FromString("(unnamed)");
}

PyObject *
weft_py_task_label(TaskObject *t)
{
    if (t->name) return Py_NewRef(t->name);
    return Py_NewRef(Py_None);
}

/* The exception that .result() raises for a cancelled task (cached). */
PyObject *
weft_py_make_cancelled(TaskObject *t, const char *why)
{
    modstate *st = weft_py_state_of_type(Py_TYPE(t));
    if (st == NULL) return NULL;
    PyObject *label = weft_py_task_label(t);
    if (label == NULL) return NULL;
    PyObject *msg = NULL, *cause = NULL, *cause_name = NULL;
    unsigned long long cause_id = 0, own_id = 0;
    weft_task_info info;
    if (why == NULL && t->h && weft_task_info_get(t->h, &info) == 0) {
        own_id = info.id;
        cause_id = info.cause_id;
        cause_name = PyUnicode_DecodeUTF8(info.cause_name, strnlen(info.cause_name, sizeof info.cause_name), "replace");
        if (cause_name == NULL) goto done;
        if (cause_id && cause_id != own_id && t->rt) cause = weft_py_find_failure(t->rt, cause_id);
        /* An unnamed task by its function's name (its C name, spawn.c). */
        PyObject *who = t->name    ? PyUnicode_FromFormat("%R (id %llu)", t->name, own_id)
                        : info.name[0] ? PyUnicode_FromFormat("'%.31s' (id %llu)", info.name, own_id)
                                       : PyUnicode_FromFormat("id %llu", own_id);
        PyObject *by = PyUnicode_GET_LENGTH(cause_name) > 0
                           ? PyUnicode_FromFormat("'%U' (id %llu)", cause_name, cause_id)
                           : PyUnicode_FromFormat("id %llu", cause_id);
        PyObject *key = cause_id == 0 && t->rt ? weft_py_space_key_label(t->rt, info.cause_name) : NULL;
        if (key && who)
            msg = PyUnicode_FromFormat("task %U was cancelled because %U was never spawned (its task space "
                                       "was closed with the runtime)", who, key);
        Py_XDECREF(key);
        if (msg) {
        } else if (who && by) {
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

PyObject *
weft_py_task_cancel_exc(TaskObject *t, const char *why)
{
    PyObject *res = NULL;
    WEFT_PY_CS_BEGIN(t)
    res = t->exc ? Py_NewRef(t->exc) : NULL;
    WEFT_PY_CS_END();
    if (res) return res;
    /* Made outside the critical section (it calls Python code); the first
     * thread to install its exception wins. */
    PyObject *e = weft_py_make_cancelled(t, why);
    if (e == NULL) return NULL;
    WEFT_PY_CS_BEGIN(t)
    if (t->exc == NULL) t->exc = Py_NewRef(e);
    res = Py_NewRef(t->exc);
    WEFT_PY_CS_END();
    Py_DECREF(e);
    return res;
}

/* ------------------------------------------------------------------------ */
/* Task type                                                                 */
/* ------------------------------------------------------------------------ */

static int
Task_traverse(TaskObject *t, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(t));
    Py_VISIT(t->rt);
    Py_VISIT(t->fn);
    Py_VISIT(t->bodies);
    Py_VISIT(t->acc);
    Py_VISIT(t->seg_acc);
    Py_VISIT(t->args);
    Py_VISIT(t->kwargs);
    Py_VISIT(t->result);
    Py_VISIT(t->exc);
    Py_VISIT(t->space);
    Py_VISIT(t->key);
    Py_VISIT(t->coro);
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
    if (t->phase != PH_SUBMITTED) {
        Py_CLEAR(t->fn);
        Py_CLEAR(t->bodies);
        Py_CLEAR(t->acc);
        Py_CLEAR(t->args);
        Py_CLEAR(t->kwargs);
    }
    /* (A suspended task's coroutine is its continuation's to resume: a task
     * in flight is never collected, its cells own it.) */
    return 0;
}

static void
Task_dealloc(TaskObject *t)
{
    WEFT_PY_HANDOFF_ACQUIRE(t);
    PyTypeObject *tp = Py_TYPE(t);
    PyObject_GC_UnTrack(t);
    if (t->weakreflist) PyObject_ClearWeakRefs((PyObject *)t);
    weft_py_task_forget_failure(t); /* first: a finder may read t until then */
    if (t->h) {
        weft_task_release(t->h);
        t->h = NULL;
    }
    Py_CLEAR(t->result);
    Py_CLEAR(t->exc);
    Py_CLEAR(t->space);
    Py_CLEAR(t->key);
    Py_CLEAR(t->fn);
    Py_CLEAR(t->bodies);
    Py_CLEAR(t->acc);
    Py_CLEAR(t->args);
    Py_CLEAR(t->kwargs);
    Py_CLEAR(t->name);
    Py_CLEAR(t->kind);
    Py_CLEAR(t->rt);
    Py_CLEAR(t->coro);
    Py_CLEAR(t->seg_acc);
    PyMem_Free(t->cont_pl);
    t->cont_pl = NULL;
    WEFT_PY_HANDOFF_RELEASE(t);
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
Task_wait_impl(TaskObject *t, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *to = NULL;
    uint64_t deadline;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:wait", kwlist, &to)) return NULL;
    if (weft_py_parse_timeout(to, &deadline) < 0) return NULL;
    int rc = weft_py_task_wait(t, deadline);
    if (weft_py_raise_outcome(t, rc, 0) < 0) return NULL;
    return Py_NewRef(t);
}

static PyObject *
Task_result_impl(TaskObject *t, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *to = NULL;
    uint64_t deadline;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:result", kwlist, &to)) return NULL;
    if (weft_py_parse_timeout(to, &deadline) < 0) return NULL;
    int rc = weft_py_task_wait(t, deadline);
    if (weft_py_raise_outcome(t, rc, 1) < 0) return NULL;
    return Py_NewRef(t->result ? t->result : Py_None);
}

static PyObject *
Task_exception_impl(TaskObject *t, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *to = NULL;
    uint64_t deadline;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:exception", kwlist, &to)) return NULL;
    if (weft_py_parse_timeout(to, &deadline) < 0) return NULL;
    int rc = weft_py_task_wait(t, deadline);
    if (rc == 0) Py_RETURN_NONE;
    if (rc == WEFT_ETASKFAILED && t->exc) {
        weft_py_task_retrieved(t);
        return Py_NewRef(t->exc);
    }
    if (rc == WEFT_ECANCELLED) return weft_py_task_cancel_exc(t, NULL);
    if (rc == WEFT_ETASKFAILED && t->exc == NULL && t->fn == NULL && !t->ran)
        return weft_py_bodyless_failure(t); /* a communication operation (comm.c) */
    if (rc != RC_PYERR && rc != WEFT_ETIMEDOUT && rc != WEFT_EBUSY && (t->rt == NULL || t->rt->rt == NULL)) {
        /* The runtime is gone: a task without a body has its recorded status. */
        int cst = atomic_load(&t->cstatus);
        if (cst == WEFT_TASK_COMPLETED) Py_RETURN_NONE;
        if (cst == WEFT_TASK_FAILED) return weft_py_bodyless_failure(t);
        if (cst == WEFT_TASK_CANCELLED) return weft_py_task_cancel_exc(t, NULL);
    }
    if (weft_py_raise_outcome(t, rc, 1) < 0) {
        /* A closed runtime: the stored outcome is the answer. */
        if ((rc != RC_PYERR && rc != WEFT_ETIMEDOUT && rc != WEFT_EBUSY) && t->exc) {
            PyErr_Clear();
            if (t->ran) weft_py_task_retrieved(t);
            return Py_NewRef(t->exc);
        }
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
Task_done_impl(TaskObject *t, PyObject *Py_UNUSED(ignored))
{
    weft_task_status s = WEFT_TASK_WAITING; /* stays so for a slot nobody spawned into */
    phase_status(t, &s);
    return PyBool_FromLong(s == WEFT_TASK_COMPLETED || s == WEFT_TASK_FAILED || s == WEFT_TASK_CANCELLED);
}

static PyObject *
Task_cancel_impl(TaskObject *t, PyObject *Py_UNUSED(ignored))
{
    if (atomic_load(&t->phase) != PH_SUBMITTED) {
        /* A slot, perhaps being spawned into by another thread right now:
         * cancel its key in the C space, which is atomic with the C spawn
         * (the task spawned for the key never runs unless it had started). */
        int rc = weft_py_slot_cancel(t);
        if (rc < 0) return NULL;
        if (rc <= 1) return PyBool_FromLong(rc);
        /* rc 2: the space's runtime closed: the status below answers. */
        if (atomic_load(&t->phase) != PH_SUBMITTED) Py_RETURN_FALSE;
    }
    weft_task_status s = WEFT_TASK_COMPLETED;
    phase_status(t, &s);
    if (s != WEFT_TASK_WAITING && s != WEFT_TASK_READY) Py_RETURN_FALSE;
    int prev = weft_py_tl_attached;
    weft_py_tl_attached = 1;
    int rc = weft_task_cancel(t->h);
    weft_py_tl_attached = prev;
    if (rc != 0) return weft_py_err_weft(rc, "cancel()");
    /* The C runtime may finish the cancellation lazily (when the task would
     * become ready); it will not run unless it had already started. */
    phase_status(t, &s);
    return PyBool_FromLong(s == WEFT_TASK_WAITING || s == WEFT_TASK_READY || s == WEFT_TASK_CANCELLED);
}

static PyObject *
Task_get_status_impl(TaskObject *t, void *Py_UNUSED(c))
{
    return PyUnicode_FromString(phase_status(t, NULL));
}

static PyObject *
Task_get_name_impl(TaskObject *t, void *Py_UNUSED(c))
{
    return Py_NewRef(t->name ? t->name : Py_None);
}

static PyObject *
Task_get_id_impl(TaskObject *t, void *Py_UNUSED(c))
{
    weft_task_info info;
    weft_task *h = task_handle(t);
    if (h == NULL || weft_task_info_get(h, &info) != 0) Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(info.id);
}

static PyObject *
Task_repr_impl(TaskObject *t)
{
    const char *s = phase_status(t, NULL);
    if (t->name) return PyUnicode_FromFormat("<weft.Task %R %s>", t->name, s);
    return PyUnicode_FromFormat("<weft.Task at %p %s>", t, s);
}

/* The methods, as Python calls them.  Each releases the task for TSan
 * after its last access (a no-op otherwise): the thread may drop its
 * reference next, and the Task may then be freed on another thread (see
 * WEFT_PY_HANDOFF_RELEASE in _weft.h). */
#define RELEASING_KW(name)                                                  \
    static PyObject *name(TaskObject *t, PyObject *a, PyObject *k)          \
    {                                                                       \
        PyObject *res = name##_impl(t, a, k);                               \
        WEFT_PY_HANDOFF_RELEASE(t);                                         \
        return res;                                                         \
    }
#define RELEASING_1(name, T2)                                               \
    static PyObject *name(TaskObject *t, T2 x)                              \
    {                                                                       \
        PyObject *res = name##_impl(t, x);                                  \
        WEFT_PY_HANDOFF_RELEASE(t);                                         \
        return res;                                                         \
    }
RELEASING_KW(Task_wait)
RELEASING_KW(Task_result)
RELEASING_KW(Task_exception)
RELEASING_1(Task_done, PyObject *)
RELEASING_1(Task_cancel, PyObject *)
RELEASING_1(Task_get_status, void *)
RELEASING_1(Task_get_name, void *)
RELEASING_1(Task_get_id, void *)

static PyObject *
Task_repr(TaskObject *t)
{
    PyObject *res = Task_repr_impl(t);
    WEFT_PY_HANDOFF_RELEASE(t);
    return res;
}

/* NumPy asks an object it is given for an array through __array__: a task
 * given where its result was meant (np.linalg.qr(t), t @ x) would
 * otherwise become a 0-d array of objects, and some calls would then
 * return wrong values without a word (np.vstack([t, t])). */
static PyObject *
Task_array_impl(TaskObject *t, PyObject *args, PyObject *kwargs)
{
    (void)args;
    (void)kwargs;
    PyObject *label = weft_py_task_label(t);
    if (label == NULL) return NULL;
    if (label == Py_None)
        PyErr_SetString(PyExc_TypeError,
                        "a weft.Task is not an array: NumPy was given the task, not its result; call .result() "
                        "on it (in a body: spawn with deps=[t] and call t.result() there)");
    else
        PyErr_Format(PyExc_TypeError,
                     "weft.Task %R is not an array: NumPy was given the task, not its result; call .result() "
                     "on it (in a body: spawn with deps=[t] and call t.result() there)",
                     label);
    Py_DECREF(label);
    return NULL;
}
RELEASING_KW(Task_array)

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
    /* weft.Task[int] in annotations evaluated at run time (the stub,
     * _weft.pyi, makes Task generic in its result's type). */
    {"__class_getitem__", Py_GenericAlias, METH_O | METH_CLASS, "See PEP 585."},
    {"__array__", (PyCFunction)(void (*)(void))Task_array, METH_VARARGS | METH_KEYWORDS,
     "Raises TypeError: a task is not its result (call .result())."},
    {NULL, NULL, 0, NULL}};

/* (weft/_wait.py gives the type _condition and _state too, so that
 * concurrent.futures.wait / as_completed given a Task raise a TypeError
 * naming weft.wait / weft.as_completed.) */
static PyGetSetDef Task_getset[] = {
    {"status", (getter)Task_get_status, NULL,
     "'declared' (a task-space slot nobody spawned into yet), 'waiting', 'ready', 'running', "
     "'enqueued' (device work in flight), 'completed', 'failed' or 'cancelled'",
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
    {Py_am_await, weft_py_task_await},
    {0, NULL}};

PyType_Spec weft_py_task_spec = {"weft.Task", sizeof(TaskObject), 0,
                                Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, Task_slots};
