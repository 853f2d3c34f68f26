/*
 * data.c — buffer registration (one weft.Data handle per object and
 * runtime) and the weft.Data type.
 */
#include "_weft.h"

int
weft_py_data_release(DataObject *d)
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
DataObject *
weft_py_data_lookup(RuntimeObject *r, PyObject *obj, const char *what, int want_write)
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
            PyObject_GC_Track(d);
            if (PyObject_GetBuffer(obj, &d->view, PyBUF_ANY_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
                PyErr_Clear();
                if (PyObject_GetBuffer(obj, &d->view, PyBUF_ANY_CONTIGUOUS) < 0) {
                    PyObject *cause = weft_py_fetch_exc();
                    PyErr_Format(PyExc_ValueError, "%s: '%.100s' object does not export a contiguous "
                                 "buffer", what, Py_TYPE(obj)->tp_name);
                    if (cause) {
                        PyObject *e = weft_py_fetch_exc();
                        PyException_SetCause(e, cause);
                        weft_py_raise_exc(e);
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
                weft_py_data_release(d);
                Py_DECREF(d);
                return (DataObject *)weft_py_err_weft(rc, "registering data");
            }
            k = PyLong_FromVoidPtr(obj);
            if (k == NULL || PyDict_SetItem(r->data_map, k, (PyObject *)d) < 0) {
                Py_XDECREF(k);
                int rc2 = weft_data_unregister(d->d); /* nothing uses it yet: returns at once */
                (void)rc2;
                weft_py_data_release(d);
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
/* Data type                                                                 */
/* ------------------------------------------------------------------------ */

int
weft_py_data_unregister(DataObject *d)
{
    RuntimeObject *r = d->rt;
    if (d->d == NULL) return 0;
    weft_data *h = d->d;
    int rc;
    if (weft_py_tl_ts != NULL) {
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
        weft_py_err_weft(rc, "unregister()");
        return -1;
    }
    Py_INCREF(d);
    WEFT_PY_CS_BEGIN(r)
    weft_py_data_release(d);
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
    WEFT_PY_CS_END();
    Py_DECREF(d);
    return 0;
}

static PyObject *
Data_unregister(DataObject *d, PyObject *Py_UNUSED(ignored))
{
    if (weft_py_data_unregister(d) < 0) return NULL;
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
    if (weft_py_data_unregister(d) < 0) return NULL;
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

PyType_Spec weft_py_data_spec = {"weft.Data", sizeof(DataObject), 0,
                                Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, Data_slots};
