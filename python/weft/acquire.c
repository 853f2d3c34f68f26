/*
 * acquire.c — rt.acquire(obj, mode) and rt.fetch(obj): the calling thread
 * uses a buffer's host memory between tasks (C's weft_data_acquire_many /
 * weft_data_release), and weft.Acquired, the context manager it returns.
 *
 * A buffer names the C handles a spawn naming it would (data.c: its range's
 * own, and the overlapping ranges it must be ordered with), all acquired at
 * once, so that the acquisition is ordered as one task naming the buffer
 * would be.  Memory never registered (not a weft.Data, and no registered
 * range overlaps it) has nothing to wait for: the acquisition holds nothing.
 */
#include "_weft.h"

typedef struct {
    PyObject_HEAD
    RuntimeObject *rt;  /* strong */
    PyObject *obj;      /* what was named: __enter__ returns it */
    PyObject *dats;     /* tuple of the Data acquired (strong), each counted in its `acquired` */
    weft_data **h;      /* their handles (malloc), dats' order */
    int held;           /* not released yet (the object's own state: one thread releases) */
    unsigned mode;
} AcquiredObject;

/* "r" / "w" / "rw" -> WEFT_R / WEFT_W / WEFT_RW; 0 with a ValueError. */
static unsigned
parse_mode(PyObject *m, const char *what)
{
    if (m == NULL) return WEFT_R;
    if (PyUnicode_Check(m)) {
        if (PyUnicode_CompareWithASCIIString(m, "r") == 0) return WEFT_R;
        if (PyUnicode_CompareWithASCIIString(m, "w") == 0) return WEFT_W;
        if (PyUnicode_CompareWithASCIIString(m, "rw") == 0) return WEFT_RW;
    }
    PyErr_Format(PyExc_ValueError, "%s: mode must be \"r\", \"w\" or \"rw\", got %R", what, m);
    return 0;
}

/* A timeout in seconds (None: none) as C's timeout_ns (0: none). */
static int
timeout_ns_of(PyObject *to, uint64_t *ns)
{
    uint64_t deadline;
    if (weft_py_parse_timeout(to, &deadline) < 0) return -1;
    *ns = 0;
    if (deadline != NO_DEADLINE) {
        uint64_t now = weft_py_now_ns();
        *ns = deadline > now ? deadline - now : 1;
    }
    return 0;
}

/* Raise the Python exception for a failed acquire: TimeoutError,
 * weft.CancelledError (a failed writer before it), ValueError (misuse),
 * RuntimeError (closed, from a task), as other calls map them. */
static void
raise_acquire(RuntimeObject *r, int rc, const char *what)
{
    const char *msg = weft_last_error();
    if (rc == WEFT_ETIMEDOUT)
        PyErr_Format(PyExc_TimeoutError, "%s: %s", what, msg);
    else if (rc == WEFT_ECANCELLED)
        PyErr_Format(r->st->CancelledError, "%s: %s", what, msg);
    else if (rc == WEFT_ECLOSED)
        PyErr_Format(PyExc_RuntimeError, "%s: the weft runtime is closed", what);
    else
        weft_py_err_weft(rc, what);
}

/* Release what a holds; 0, or -1 with an exception (it is released anyway:
 * a handle refused was not held any more, e.g. the runtime closed). */
static int
acquired_release(AcquiredObject *a, const char *what)
{
    if (!a->held) return 0;
    a->held = 0;
    int bad = 0;
    Py_ssize_t n = a->dats ? PyTuple_GET_SIZE(a->dats) : 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int rc = a->rt->rt ? weft_data_release(a->h[i]) : 0; /* (never blocks) */
        if (rc != 0 && a->rt->rt != NULL && !bad) {
            bad = 1;
            weft_py_err_weft(rc, what);
        }
    }
    if (n) weft_py_data_count_acquired(a->rt, a->dats, -1);
    return bad ? -1 : 0;
}

/* Acquire obj with mode on r: a new weft.Acquired, or NULL with an
 * exception. */
static AcquiredObject *
acquire(RuntimeObject *r, PyObject *obj, unsigned mode, uint64_t timeout_ns, const char *what)
{
    modstate *st = r->st;
    if (weft_py_check_open(r, what) < 0) return NULL;
    if (weft_py_tl_cur != NULL) {
        PyErr_Format(PyExc_RuntimeError, "%s: called from a task: name the buffer in the task's reads=, "
                     "writes= or readwrites= instead (acquire is for threads outside tasks)", what);
        return NULL;
    }
    AcquiredObject *a = PyObject_GC_New(AcquiredObject, st->Acquired_T);
    if (a == NULL) return NULL;
    a->rt = (RuntimeObject *)Py_NewRef(r);
    a->obj = Py_NewRef(obj);
    a->dats = NULL;
    a->h = NULL;
    a->held = 0;
    a->mode = mode;
    PyObject_GC_Track(a);
    int known = weft_py_data_known(r, obj, what);
    if (known < 0) goto fail;
    if (known == 0 && (mode & WEFT_W)) { /* (as registering it for writing would) */
        Py_buffer view;
        if (PyObject_GetBuffer(obj, &view, PyBUF_ANY_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%s: this '%.100s' object is read-only: acquire it with "
                         "mode \"r\"", what, Py_TYPE(obj)->tp_name);
            goto fail;
        }
        PyBuffer_Release(&view);
    }
    if (known == 0) { /* never registered: its host memory is all there is */
        a->dats = PyTuple_New(0);
        if (a->dats == NULL) goto fail;
        a->held = 1;
        return a;
    }
    weft_py_accs av;
    weft_py_accs_init(&av);
    for (int tries = 0;; tries++) {
        int rc = weft_py_data_accesses(r, obj, what, mode | WEFT_HOST, &av);
        if (rc < 0) break;
        size_t n = av.n;
        weft_access *acc = PyMem_Malloc(n * sizeof *acc);
        a->h = PyMem_Malloc(n * sizeof *a->h);
        PyObject *dats = PyTuple_New((Py_ssize_t)n);
        if (acc == NULL || a->h == NULL || dats == NULL) {
            PyMem_Free(acc);
            Py_XDECREF(dats);
            if (!PyErr_Occurred()) PyErr_NoMemory();
            break;
        }
        for (size_t i = 0; i < n; i++) {
            acc[i].data = av.acc[i].data;
            acc[i].mode = av.acc[i].mode & (unsigned)WEFT_RW;
            a->h[i] = av.acc[i].data;
            PyTuple_SET_ITEM(dats, (Py_ssize_t)i, Py_NewRef((PyObject *)av.dat[i]));
        }
        /* Counted before the C call: an unregister of one of them from now
         * on is refused rather than left waiting for a release. */
        weft_py_data_count_acquired(r, dats, +1);
        BEGIN_NOGIL
        rc = weft_data_acquire_many(acc, n, timeout_ns);
        END_NOGIL
        PyMem_Free(acc);
        if (rc == 0) {
            a->dats = dats;
            a->held = 1;
            weft_py_accs_clear(&av);
            weft_py_accs_free(&av);
            return a;
        }
        weft_py_data_count_acquired(r, dats, -1);
        Py_DECREF(dats);
        PyMem_Free(a->h);
        a->h = NULL;
        /* A range named only through an overlapping one began to be
         * unregistered meanwhile (as for a spawn: spawn.c): look again. */
        if (rc == WEFT_EINVAL && weft_py_accs_stale(&av) && tries < 64) {
            weft_py_accs_clear(&av);
            continue;
        }
        raise_acquire(r, rc, what);
        break;
    }
    weft_py_accs_clear(&av);
    weft_py_accs_free(&av);
fail:
    Py_DECREF(a);
    return NULL;
}

PyObject *
weft_py_runtime_acquire(RuntimeObject *r, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"obj", "mode", "timeout", NULL};
    PyObject *obj, *m = NULL, *to = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|OO:acquire", kwlist, &obj, &m, &to)) return NULL;
    unsigned mode = parse_mode(m, "acquire()");
    uint64_t ns;
    if (mode == 0 || timeout_ns_of(to, &ns) < 0) return NULL;
    return (PyObject *)acquire(r, obj, mode, ns, "acquire()");
}

PyObject *
weft_py_runtime_fetch(RuntimeObject *r, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"obj", "timeout", NULL};
    PyObject *obj, *to = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:fetch", kwlist, &obj, &to)) return NULL;
    uint64_t ns;
    if (timeout_ns_of(to, &ns) < 0) return NULL;
    AcquiredObject *a = acquire(r, obj, WEFT_R, ns, "fetch()");
    if (a == NULL) return NULL;
    int rc = acquired_release(a, "fetch()");
    Py_DECREF(a);
    return rc < 0 ? NULL : Py_NewRef(obj);
}

/* ------------------------------------------------------------------------ */
/* weft.Acquired                                                             */
/* ------------------------------------------------------------------------ */

static PyObject *
Acquired_release(AcquiredObject *a, PyObject *Py_UNUSED(ignored))
{
    if (!a->held) {
        PyErr_SetString(PyExc_ValueError, "release(): not held (released already)");
        return NULL;
    }
    if (acquired_release(a, "release()") < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Acquired_enter(AcquiredObject *a, PyObject *Py_UNUSED(ignored))
{
    if (!a->held) {
        PyErr_SetString(PyExc_ValueError, "__enter__: released already (acquire again)");
        return NULL;
    }
    return Py_NewRef(a->obj);
}

static PyObject *
Acquired_exit(AcquiredObject *a, PyObject *args)
{
    (void)args;
    if (acquired_release(a, "release()") < 0) return NULL;
    Py_RETURN_FALSE;
}

static PyObject *
Acquired_get_held(AcquiredObject *a, void *Py_UNUSED(c))
{
    return PyBool_FromLong(a->held);
}

static PyObject *
Acquired_get_obj(AcquiredObject *a, void *Py_UNUSED(c))
{
    return Py_NewRef(a->obj);
}

static PyObject *
Acquired_repr(AcquiredObject *a)
{
    const char *m = a->mode == WEFT_R ? "r" : a->mode == WEFT_W ? "w" : "rw";
    return PyUnicode_FromFormat("<weft.Acquired %s of %.100s, %s>", m, Py_TYPE(a->obj)->tp_name,
                                a->held ? "held" : "released");
}

static int
Acquired_traverse(AcquiredObject *a, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(a));
    Py_VISIT(a->rt);
    Py_VISIT(a->obj);
    Py_VISIT(a->dats);
    return 0;
}

static void
Acquired_dealloc(AcquiredObject *a)
{
    PyTypeObject *tp = Py_TYPE(a);
    PyObject_GC_UnTrack(a);
    if (a->held) { /* dropped while held: released, so that the tasks behind it run */
        PyObject *exc = weft_py_fetch_exc();
        if (acquired_release(a, "weft.Acquired") < 0) PyErr_WriteUnraisable((PyObject *)a);
        if (exc) {
            weft_py_raise_exc(exc);
            Py_DECREF(exc);
        }
    }
    PyMem_Free(a->h);
    Py_CLEAR(a->dats);
    Py_CLEAR(a->obj);
    Py_CLEAR(a->rt);
    PyObject_GC_Del(a);
    Py_DECREF(tp);
}

static PyMethodDef Acquired_methods[] = {
    {"release", (PyCFunction)Acquired_release, METH_NOARGS,
     "End the acquisition: tasks spawned after it on the buffer may start."},
    {"__enter__", (PyCFunction)Acquired_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Acquired_exit, METH_VARARGS, NULL},
    /* weft.Acquired[bytearray] in annotations evaluated at run time (generic
     * in the object it holds in _weft.pyi). */
    {"__class_getitem__", Py_GenericAlias, METH_O | METH_CLASS, "See PEP 585."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Acquired_getset[] = {
    {"held", (getter)Acquired_get_held, NULL, "True until released", NULL},
    {"obj", (getter)Acquired_get_obj, NULL, "the object acquired", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyType_Slot Acquired_slots[] = {
    {Py_tp_doc, "A buffer acquired by rt.acquire(): its host memory is the newest value (read) and "
                "the caller's to use (write) until release(); a context manager that releases on exit."},
    {Py_tp_dealloc, Acquired_dealloc},
    {Py_tp_traverse, Acquired_traverse},
    {Py_tp_methods, Acquired_methods},
    {Py_tp_getset, Acquired_getset},
    {Py_tp_repr, Acquired_repr},
    {0, NULL}};

PyType_Spec weft_py_acquired_spec = {"weft.Acquired", sizeof(AcquiredObject), 0,
                                    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION,
                                    Acquired_slots};
