/*
 * native.c — C functions run without Python: weft.Native, a C function that
 * a spawn names as the task's body (its call made at the spawn, run by its
 * own trampoline on a worker, or queued on the task's GPU stream), and the
 * call record that ctx.queue_native (place.c) queues too.
 *
 * A native task takes the GIL only to report a failure: its worker calls
 * (or queues) the C function and moves the Task's reference to the cell,
 * which a thread with a thread state drops later (weft_py_release_drain).
 */
#include "_weft.h"

/* ------------------------------------------------------------------------ */
/* The call                                                                  */
/* ------------------------------------------------------------------------ */

/* Rounded up to a multiple of a (a power of two). */
static size_t
round_up(size_t n, size_t a)
{
    return (n + a - 1) & ~(a - 1);
}

weft_py_native_call *
weft_py_native_call_new(int (*fn)(void *arg), uint64_t model_ns, const void *arg, size_t len, size_t nacc)
{
    /* data: nacc ranges, then (aligned for any type) the argument's copy,
     * then (8-aligned) the nacc addresses. */
    size_t rbytes = round_up(nacc * sizeof(weft_range), sizeof(max_align_t));
    size_t abytes = round_up(len, sizeof(void *));
    if (len > SIZE_MAX / 2 || nacc > SIZE_MAX / 64) return NULL;
    weft_py_native_call *q = PyMem_RawMalloc(sizeof *q + rbytes + abytes + nacc * sizeof(void *));
    if (q == NULL) return NULL;
    char *d = (char *)q->data;
    q->fn = fn;
    q->model_ns = model_ns;
    q->rc = 0;
    q->nacc = nacc;
    q->ranges = nacc ? (weft_range *)d : NULL;
    q->arg = (arg || nacc) ? d + rbytes : NULL;
    q->addr = (void **)(d + rbytes + abytes);
    if (len) memcpy(d + rbytes, arg, len);
    if (abytes > len) memset(d + rbytes + len, 0, abytes - len);
    return q;
}

int
weft_py_native_run(void *arg)
{
    weft_py_native_call *q = arg;
    int rc = q->fn(q->arg);
    q->rc = rc;
    WEFT_PY_HANDOFF_RELEASE(q); /* to whoever frees it after the task ended */
    return rc;
}

/* ------------------------------------------------------------------------ */
/* weft.Native                                                               */
/* ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    int (*fn)(void *arg);
    PyObject *obj;     /* what fn was made from (a ctypes function, an int): kept alive */
    PyObject *name;    /* str, for messages */
    uint64_t model_ns; /* a virtual GPU's modelled time for one call (0: as it runs) */
} NativeObject;

static PyObject *
Native_new(PyTypeObject *tp, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"address", "obj", "model_ns", "name", NULL};
    PyObject *addrobj, *obj = Py_None, *name = NULL, *nsobj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!|OO!U:Native", kwlist, &PyLong_Type, &addrobj, &obj,
                                     &PyLong_Type, &nsobj, &name))
        return NULL;
    /* (not "K": it would take -1 for an address) */
    unsigned long long addr = PyLong_AsUnsignedLongLong(addrobj), model_ns = 0;
    if (addr == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        addr = 0;
    }
    if (addr == 0 || addr > UINTPTR_MAX) {
        PyErr_SetString(PyExc_ValueError, "Native(): the address is not a function's (NULL, negative or out of "
                        "range)");
        return NULL;
    }
    if (nsobj && (model_ns = PyLong_AsUnsignedLongLong(nsobj)) == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_SetString(PyExc_ValueError, "Native(): model_ns must be a non-negative int");
        return NULL;
    }
    NativeObject *n = (NativeObject *)tp->tp_alloc(tp, 0);
    if (n == NULL) return NULL;
    n->fn = (int (*)(void *))(uintptr_t)addr;
    n->obj = Py_NewRef(obj);
    n->name = name ? Py_NewRef(name) : PyUnicode_FromFormat("%p", (void *)(uintptr_t)addr);
    n->model_ns = model_ns;
    if (n->name == NULL) {
        Py_DECREF(n);
        return NULL;
    }
    return (PyObject *)n;
}

static int
Native_traverse(NativeObject *n, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(n));
    Py_VISIT(n->obj);
    Py_VISIT(n->name);
    return 0;
}

static int
Native_clear(NativeObject *n)
{
    Py_CLEAR(n->obj);
    Py_CLEAR(n->name);
    return 0;
}

static void
Native_dealloc(NativeObject *n)
{
    PyTypeObject *tp = Py_TYPE(n);
    PyObject_GC_UnTrack(n);
    Py_CLEAR(n->obj);
    Py_CLEAR(n->name);
    tp->tp_free(n);
    Py_DECREF(tp);
}

static PyObject *
Native_repr(NativeObject *n)
{
    return PyUnicode_FromFormat("<weft.Native %S at %p>", n->name ? n->name : Py_None, (void *)(uintptr_t)n->fn);
}

static PyObject *
Native_get_address(NativeObject *n, void *closure)
{
    (void)closure;
    return PyLong_FromVoidPtr((void *)(uintptr_t)n->fn);
}

static PyObject *
Native_get_model_ns(NativeObject *n, void *closure)
{
    (void)closure;
    return PyLong_FromUnsignedLongLong(n->model_ns);
}

static PyObject *
Native_get_obj(NativeObject *n, void *closure)
{
    (void)closure;
    return Py_NewRef(n->obj ? n->obj : Py_None);
}

static PyObject *
Native_get_name(NativeObject *n, void *closure)
{
    (void)closure;
    return Py_NewRef(n->name ? n->name : Py_None);
}

static PyGetSetDef Native_getset[] = {
    {"address", (getter)Native_get_address, NULL, "The C function's address.", NULL},
    {"fn", (getter)Native_get_obj, NULL, "What the function was given as (kept alive).", NULL},
    {"model_ns", (getter)Native_get_model_ns, NULL, "Modelled nanoseconds of one call on a virtual GPU.",
     NULL},
    {"name", (getter)Native_get_name, NULL, "Its name, for messages.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyType_Slot Native_slots[] = {
    {Py_tp_doc, "Native(address, obj=None, model_ns=0, name=None)\n\nA C function `int fn(void *arg)` as a "
                "task's body (made by weft.native): spawn(native, arg, ...) runs it without Python."},
    {Py_tp_new, Native_new},
    {Py_tp_dealloc, Native_dealloc},
    {Py_tp_traverse, Native_traverse},
    {Py_tp_clear, Native_clear},
    {Py_tp_repr, Native_repr},
    {Py_tp_getset, Native_getset},
    {0, NULL}};

PyType_Spec weft_py_native_spec = {"weft.Native", sizeof(NativeObject), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
                                   Native_slots};

/* ------------------------------------------------------------------------ */
/* A spawn of a native body                                                  */
/* ------------------------------------------------------------------------ */

weft_py_native_call *
weft_py_native_prepare(PyObject *fn, PyObject *argobj, const weft_py_accs *av, size_t na, const size_t *scratch,
                       size_t nscratch)
{
    NativeObject *n = (NativeObject *)fn;
    for (size_t i = 0; i < na; i++)
        if (av->dat[i]->parent) {
            PyErr_Format(PyExc_TypeError, "spawn(): a native body's access %zu is a tile: a native body is "
                         "given whole buffers only (spawn a Python body for tiles)", i);
            return NULL;
        }
    Py_buffer a = {0};
    int has_arg = argobj && argobj != Py_None;
    if (has_arg && PyObject_GetBuffer(argobj, &a, PyBUF_ANY_CONTIGUOUS) < 0) {
        PyErr_Format(PyExc_TypeError, "spawn(): a native body's argument is None or a contiguous buffer "
                     "(bytes, a ctypes structure), not '%.100s'", Py_TYPE(argobj)->tp_name);
        return NULL;
    }
    weft_py_native_call *q = weft_py_native_call_new(n->fn, n->model_ns, has_arg ? a.buf : NULL,
                                                     has_arg ? (size_t)a.len : 0, na + nscratch);
    if (has_arg) PyBuffer_Release(&a);
    if (q == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    /* What each access is on a GPU's stream (its pointer set when it runs):
     * the whole buffer, read, written or both; a reduction's private copy
     * and a scratch buffer are read and written. */
    for (size_t i = 0; i < na; i++) {
        unsigned m = av->acc[i].mode;
        const DataObject *d = av->dat[i];
        q->ranges[i].ptr = NULL;
        q->ranges[i].bytes = d->has_view ? (size_t)d->view.len : 0;
        q->ranges[i].mode = (m & WEFT_REDUCE) ? WEFT_RW : (m & WEFT_RW);
    }
    for (size_t k = 0; k < nscratch; k++)
        q->ranges[na + k] = (weft_range){NULL, scratch[k], WEFT_RW};
    return q;
}

int
weft_py_is_native(modstate *st, PyObject *fn)
{
    return st->Native_T && Py_IS_TYPE(fn, st->Native_T);
}

/* A native body failed on the worker: its function returned rc (queued 0),
 * or queueing it on the GPU failed with Weft's rc (queued 1).  The task's
 * exception, recorded for wait_all and its dependents' CancelledError. */
static void
native_failed(cell *c, TaskObject *t, int rc, int queued, uint64_t id)
{
    RuntimeObject *r = c->rt;
    int attached = weft_py_tl_attached;
    int g = 0;
    if (!attached) g = weft_py_gil_take(NULL);
    weft_py_tl_attached = 1;
    PyObject *exc;
    if (queued) {
        weft_py_err_weft(rc, "native body: queueing it on the task's GPU");
        exc = weft_py_fetch_exc();
    } else {
        PyObject *msg = PyUnicode_FromFormat("the native body %S returned %d", t->fn, rc);
        exc = msg ? PyObject_CallOneArg(PyExc_RuntimeError, msg) : NULL;
        Py_XDECREF(msg);
    }
    if (exc == NULL) exc = weft_py_fetch_exc();
    if (weft_py_task_set_exc(t, exc)) weft_py_record_failure(r, t, t->fn, exc, id);
    weft_py_tl_attached = attached;
    if (!attached) weft_py_gil_give(NULL, g);
}

int
weft_py_native_trampoline(weft_ctx *ctx, void *arg)
{
    cell *c = arg;
    TaskObject *t = c->t;
    c->t = NULL; /* the reference moves to c->placed below */
    weft_py_task_publish(t, ctx);
    weft_py_native_call *q = c->native;
    for (size_t i = 0; i < q->nacc; i++) q->ranges[i].ptr = q->addr[i] = weft_ctx_data(ctx, i);
    uint64_t id = weft_ctx_task_id(ctx);
    int queued = weft_ctx_gpu_count(ctx) > 0, rc;
    if (queued)
        /* In the stream's order, on its thread (a virtual GPU's queue
         * thread; CUDA's host-function thread): the task's first GPU. */
        rc = weft_ctx_queue_rw(ctx, 0, weft_py_native_run, q, q->model_ns, q->ranges, q->nacc);
    else
        rc = q->rc = q->fn(q->arg);
    t->ran = 1;
    if (rc != 0) native_failed(c, t, rc, queued, id);
    /* Dropped by a thread with a thread state once the task ended (its
     * device work may fail it yet: weft_py_on_finish). */
    c->placed = t;
    c->id = id;
    WEFT_PY_HANDOFF_RELEASE(t);
    return rc != 0;
}
