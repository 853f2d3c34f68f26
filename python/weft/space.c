/*
 * space.c — the weft.TaskSpace type: T[i] names a task whether it has been
 * spawned or not.
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
    modstate *st = weft_py_state_of_type(Py_TYPE(s));
    if (st == NULL) return NULL;
    TaskObject *n = weft_py_task_new(st);
    if (n == NULL) return NULL;
    n->key = Py_NewRef(key);
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
    if (weft_py_parse_timeout(to, &deadline) < 0) return NULL;
    PyObject *vals = PyDict_Values(s->tasks);
    if (vals == NULL) return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(vals); i++) {
        TaskObject *t = (TaskObject *)PyList_GET_ITEM(vals, i);
        if (t->phase == PH_DECLARED) continue;
        int rc = weft_py_task_wait(t, deadline);
        if (weft_py_raise_outcome(t, rc, 0) < 0) {
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

PyType_Spec weft_py_space_spec = {"weft.TaskSpace", sizeof(SpaceObject), 0,
                                 Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, Space_slots};
