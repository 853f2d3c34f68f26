/*
 * space.c — the weft.TaskSpace type: T[i] names a task whether it has been
 * spawned or not.  A thin layer over the C runtime's task spaces: the first
 * time a slot is used with a runtime (spawned into, or depended on), the
 * space binds to a C space of that runtime ("#<serial>"), and each Python
 * key gets an integer index there.  Placeholders, cycle checks, and the
 * cancellation of keys never spawned are the C space's.
 */
#include "_weft.h"

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
    s->keys = PyList_New(0);
    s->rt = NULL;
    s->s = NULL;
    s->cname = NULL;
    PyObject_GC_Track(s);
    if (!s->name || !s->tasks || !s->keys) {
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
    Py_VISIT(s->keys);
    return 0;
}

static int
Space_clear(SpaceObject *s)
{
    Py_CLEAR(s->tasks);
    Py_CLEAR(s->keys);
    return 0;
}

static void
Space_dealloc(SpaceObject *s)
{
    PyTypeObject *tp = Py_TYPE(s);
    PyObject_GC_UnTrack(s);
    Py_CLEAR(s->tasks);
    Py_CLEAR(s->keys);
    Py_CLEAR(s->name);
    Py_CLEAR(s->cname);
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

/* Does key name several slots, or none, rather than one: a slice, a range
 * or a list (T[0:4], T[range(4)], T[[1, 3]]), a negative int (T[-1]: no
 * slot, as in Parla), or a tuple with one of those (T[0:4, 1])? */
static int
one_part_expands(PyObject *k)
{
    if (PyLong_CheckExact(k)) {
        int ovf = 0;
        long v = PyLong_AsLongAndOverflow(k, &ovf); /* (an exact int: cannot fail) */
        return v < 0 || ovf < 0;
    }
    return PySlice_Check(k) || PyRange_Check(k) || PyList_Check(k);
}

static int
key_expands(PyObject *key)
{
    if (!PyTuple_CheckExact(key)) return one_part_expands(key);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(key); i++)
        if (one_part_expands(PyTuple_GET_ITEM(key, i))) return 1;
    return 0;
}

static PyObject *
Space_getitem(SpaceObject *s, PyObject *key)
{
    if (key_expands(key)) {
        /* A weft.TaskList of the slots named (weft/_space.py). */
        modstate *st = weft_py_state_of_type(Py_TYPE(s));
        if (st == NULL) return NULL;
        if (st->space_expand == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "TaskSpace: slices need the weft package (import weft)");
            return NULL;
        }
        return PyObject_CallFunctionObjArgs(st->space_expand, (PyObject *)s, key, NULL);
    }
    PyObject *t = PyDict_GetItemWithError(s->tasks, key);
    if (t) {
        WEFT_PY_HANDOFF_ACQUIRE(t); /* published by the thread that made it (below) */
        return Py_NewRef(t);
    }
    if (PyErr_Occurred()) return NULL;
    modstate *st = weft_py_state_of_type(Py_TYPE(s));
    if (st == NULL) return NULL;
    TaskObject *n = weft_py_task_new(st);
    if (n == NULL) return NULL;
    n->key = Py_NewRef(key);
    n->space = Py_NewRef(s);
    n->name = space_label(s, key);
    if (n->name == NULL) {
        Py_DECREF(n);
        return NULL;
    }
    PyObject *prev = NULL;
    WEFT_PY_CS_BEGIN(s)
    prev = PyDict_GetItemWithError(s->tasks, key);
    if (prev == NULL && !PyErr_Occurred()) {
        n->index = PyList_GET_SIZE(s->keys);
        WEFT_PY_HANDOFF_RELEASE(n);
        if (PyList_Append(s->keys, key) == 0 && PyDict_SetItem(s->tasks, key, (PyObject *)n) == 0)
            prev = (PyObject *)n;
    }
    Py_XINCREF(prev);
    WEFT_PY_CS_END();
    Py_DECREF(n);
    return prev;
}

/* Bind s to runtime r (a C space of r), or check it is bound to r. */
static int
space_bind(SpaceObject *s, RuntimeObject *r)
{
    if (s->rt == r && s->s) return 0;
    if (s->rt != NULL) {
        PyErr_Format(PyExc_ValueError, "task space %R is used with another weft runtime", s->name);
        return -1;
    }
    if (weft_py_check_open(r, "task space") < 0) return -1;
    PyObject *cname = PyUnicode_FromFormat("#%llu", (unsigned long long)++r->next_space);
    if (cname == NULL) return -1;
    weft_space *cs = NULL;
    int rc = weft_space_create(r->rt, PyUnicode_AsUTF8(cname), &cs);
    if (rc != 0) {
        Py_DECREF(cname);
        weft_py_err_weft(rc, "task space");
        return -1;
    }
    if (PyDict_SetItem(r->spaces, cname, (PyObject *)s) < 0) {
        rc = weft_space_destroy(cs);
        (void)rc;
        Py_DECREF(cname);
        return -1;
    }
    s->rt = r;
    s->s = cs;
    Py_XSETREF(s->cname, cname);
    return 0;
}

weft_task *
weft_py_slot_handle(TaskObject *t, RuntimeObject *r)
{
    SpaceObject *s = (SpaceObject *)t->space;
    if (s == NULL) {
        PyErr_SetString(PyExc_ValueError, "a declared task outside a task space");
        return NULL;
    }
    weft_task *h = NULL;
    WEFT_PY_CS_BEGIN(s)
    if (space_bind(s, r) == 0) {
        if (t->ph == NULL) {
            int rc = weft_space_task(s->s, &t->index, 1, &t->ph);
            if (rc != 0) weft_py_err_weft(rc, "task space");
            else if (t->cancel_requested) {
                /* cancel() came while the space was unbound. */
                rc = weft_space_cancel(s->s, &t->index, 1);
                (void)rc;
            }
        }
        h = t->ph;
    }
    WEFT_PY_CS_END();
    return h;
}

weft_task *
weft_py_slot_spawned(TaskObject *t)
{
    SpaceObject *s = (SpaceObject *)t->space;
    if (s == NULL) return NULL;
    weft_task *h = NULL;
    WEFT_PY_CS_BEGIN(s)
    /* ph is set before any spawn into the slot: without it, nothing to ask. */
    if (s->s && t->ph && weft_space_task(s->s, &t->index, 1, &h) != 0) h = NULL;
    WEFT_PY_CS_END();
    weft_task_info info;
    if (h && (weft_task_info_get(h, &info) != 0 || info.id == 0)) h = NULL; /* a placeholder */
    return h;
}

int
weft_py_slot_cancel(TaskObject *t)
{
    SpaceObject *s = (SpaceObject *)t->space;
    if (s == NULL) {
        PyErr_SetString(PyExc_ValueError, "cancel(): a declared task outside a task space");
        return -1;
    }
    int res;
    WEFT_PY_CS_BEGIN(s)
    if (s->s == NULL) {
        /* Unbound: the binding (weft_py_slot_handle, under the same
         * critical section) passes the request on to the C space. */
        t->cancel_requested = 1;
        res = 1;
    } else {
        int rc = weft_space_cancel(s->s, &t->index, 1);
        res = rc >= 0 ? rc : 2; /* an error: the C space is gone with its runtime */
        if (rc >= 0) t->cancel_requested = 1; /* (not "never spawned" at close: cancelled) */
    }
    WEFT_PY_CS_END();
    return res;
}

PyObject *
weft_py_space_key_label(RuntimeObject *r, const char *cname)
{
    const char *br = strchr(cname, '[');
    if (r == NULL || r->spaces == NULL || br == NULL) return NULL;
    PyObject *name = PyUnicode_FromStringAndSize(cname, br - cname);
    if (name == NULL) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *sp = PyDict_GetItemWithError(r->spaces, name);
    Py_DECREF(name);
    if (sp == NULL) {
        PyErr_Clear();
        return NULL;
    }
    long long idx = strtoll(br + 1, NULL, 10);
    SpaceObject *s = (SpaceObject *)sp;
    PyObject *key = NULL;
    WEFT_PY_CS_BEGIN(s)
    if (idx >= 0 && idx < PyList_GET_SIZE(s->keys)) key = Py_NewRef(PyList_GET_ITEM(s->keys, idx));
    WEFT_PY_CS_END();
    if (key == NULL) return NULL;
    PyObject *label = space_label(s, key);
    Py_DECREF(key);
    if (label == NULL) PyErr_Clear();
    return label;
}

void
weft_py_spaces_unbind(RuntimeObject *r)
{
    if (r->spaces == NULL) return;
    /* A snapshot: iterating the dict itself would need its lock throughout. */
    PyObject *spaces = PyDict_Values(r->spaces);
    if (spaces == NULL) {
        PyErr_Clear();
        return;
    }
    for (Py_ssize_t j = 0; j < PyList_GET_SIZE(spaces); j++) {
        SpaceObject *s = (SpaceObject *)PyList_GET_ITEM(spaces, j);
        WEFT_PY_CS_BEGIN(s)
        if (s->rt == r) { /* (not bound again since, to another runtime) */
            s->s = NULL; /* destroyed with the C runtime; the space may bind to another one */
            s->rt = NULL;
            PyObject *vals = s->tasks ? PyDict_Values(s->tasks) : NULL;
            for (Py_ssize_t i = 0; vals && i < PyList_GET_SIZE(vals); i++) {
                TaskObject *t = (TaskObject *)PyList_GET_ITEM(vals, i);
                t->ph = NULL;
                /* What depended on it was this runtime's, cancelled and
                 * reported by its close: a later runtime reports the slot
                 * only if one of its own tasks depends on it. */
                atomic_store_explicit(&t->depended, 0, memory_order_relaxed);
            }
            Py_XDECREF(vals);
            if (PyErr_Occurred()) PyErr_Clear();
        }
        WEFT_PY_CS_END();
    }
    Py_DECREF(spaces);
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
    if (weft_py_parse_timeout(to, &deadline) < 0) return NULL;
    PyObject *vals = PyDict_Values(s->tasks);
    if (vals == NULL) return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(vals); i++) {
        TaskObject *t = (TaskObject *)PyList_GET_ITEM(vals, i);
        if (atomic_load(&t->phase) == PH_DECLARED) continue;
        int rc = weft_py_task_wait(t, deadline);
        int failed = weft_py_raise_outcome(t, rc, 0) < 0;
        WEFT_PY_HANDOFF_RELEASE(t);
        if (failed) {
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
                "a slot nobody spawned into yet waits in the runtime until that slot's task "
                "finishes.  T[0:4], T[0:4, 1], T[range(4)] name several slots (a weft.TaskList), "
                "T[-1] none (indices start at 0); deps=T follows the tasks spawned into T so far.  "
                "A space is bound to the runtime it is first used with."},
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
    {Py_am_await, weft_py_space_await},
    {0, NULL}};

PyType_Spec weft_py_space_spec = {"weft.TaskSpace", sizeof(SpaceObject), 0,
                                 Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, Space_slots};
