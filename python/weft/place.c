/*
 * place.c — placement from Python: a spawn's placement= (device sets, share,
 * memory, variants) turned into weft_placement alternatives, a placed body
 * run through weft/_placement.py's runner (its Context, CuPy's / PyTorch's
 * current device and stream), ctx.queue(): a Python callable queued on a
 * GPU stream, and ctx.queue_native(): a C function queued there, called
 * without Python.  Plain CPU tasks never come here.
 */
#include "_weft.h"

/* ------------------------------------------------------------------------ */
/* At spawn                                                                  */
/* ------------------------------------------------------------------------ */

/* The common case without a call into Python: one device set object
 * (weft.gpu, weft.gpu * 2, ...), a number or None for share, an int or None
 * for memory, a plain body.  0 with *out set, or -1 (no error set) for the
 * general path, which also reports every error. */
static int
fast_placement(modstate *st, PyObject *fn, PyObject *placement, PyObject *share, PyObject *memory,
               weft_placement **out)
{
    if (placement == NULL || st->DeviceSet_cls == NULL || (PyObject *)Py_TYPE(placement) != st->DeviceSet_cls ||
        (PyObject *)Py_TYPE(fn) == st->Variants_cls)
        return -1;
    double sh = 0;
    unsigned long long mem = 0;
    if (share && share != Py_None) {
        if (!PyFloat_CheckExact(share) && !PyLong_CheckExact(share)) return -1;
        sh = PyFloat_AsDouble(share);
        if (!(sh > 0 && sh <= 1)) return -1; /* refused by the slow path, with its message */
    }
    if (memory && memory != Py_None) {
        if (!PyLong_CheckExact(memory)) return -1;
        mem = PyLong_AsUnsignedLongLong(memory);
    }
    PyObject *cpu = PyObject_GetAttr(placement, st->s_cpu), *gpus = PyObject_GetAttr(placement, st->s_gpus),
             *gpu = PyObject_GetAttr(placement, st->s_gpu), *gset = PyObject_GetAttr(placement, st->s_gset);
    long g = -1, k = 0;
    unsigned long long set = 0;
    int c = -1;
    if (cpu && gpus && gpu && gset) {
        c = PyObject_IsTrue(cpu);
        k = PyLong_AsLong(gpus);
        g = PyLong_AsLong(gpu);
        set = PyLong_AsUnsignedLongLong(gset);
    }
    Py_XDECREF(cpu);
    Py_XDECREF(gpus);
    Py_XDECREF(gpu);
    Py_XDECREF(gset);
    weft_placement *pl = NULL;
    if (PyErr_Occurred() || c < 0 || k < 0 || k > 65535 || g < INT_MIN || g > INT_MAX ||
        (pl = PyMem_Calloc(1, sizeof *pl)) == NULL) {
        PyErr_Clear();
        return -1;
    }
    weft_placement_init(pl);
    pl->cpu = (unsigned)c;
    pl->gpus = (unsigned)k;
    pl->gpu = (int)g;
    pl->gpu_set = set;
    pl->share = sh;
    pl->memory = (size_t)mem;
    *out = pl;
    return 0;
}

int
weft_py_placement(modstate *st, PyObject **fn, PyObject *placement, PyObject *share, PyObject *memory,
                  weft_placement **out, size_t *n, PyObject **bodies)
{
    *out = NULL;
    *n = 0;
    *bodies = NULL;
    if (st->place_normalize == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "spawn(): placement= needs the weft package (import weft)");
        return -1;
    }
    if (fast_placement(st, *fn, placement, share, memory, out) == 0) {
        *n = 1;
        return 0;
    }
    PyObject *res = PyObject_CallFunctionObjArgs(st->place_normalize, *fn, placement ? placement : Py_None,
                                                 share ? share : Py_None, memory ? memory : Py_None, NULL);
    if (res == NULL) return -1;
    PyObject *alts = NULL;
    if (!PyTuple_Check(res) || PyTuple_GET_SIZE(res) != 2 || !PyList_Check(alts = PyTuple_GET_ITEM(res, 1))) {
        Py_DECREF(res);
        PyErr_SetString(PyExc_SystemError, "weft._placement._normalize returned a bad value");
        return -1;
    }
    Py_ssize_t na = PyList_GET_SIZE(alts);
    weft_placement *pl = na ? PyMem_Calloc((size_t)na, sizeof *pl) : NULL;
    PyObject *bt = na ? PyTuple_New(na) : NULL;
    if (na && (pl == NULL || bt == NULL)) {
        PyMem_Free(pl);
        Py_XDECREF(bt);
        Py_DECREF(res);
        PyErr_NoMemory();
        return -1;
    }
    int any_body = 0;
    for (Py_ssize_t i = 0; i < na; i++) {
        PyObject *a = PyList_GET_ITEM(alts, i);
        int cpu, gpus, gpu;
        double sh;
        unsigned long long mem, set;
        PyObject *body;
        if (!PyArg_ParseTuple(a, "iiidKOK", &cpu, &gpus, &gpu, &sh, &mem, &body, &set)) goto fail;
        if (gpus < 0) {
            PyErr_Format(PyExc_ValueError, "spawn(): placement %zd asks for %d GPUs", i, gpus);
            goto fail;
        }
        weft_placement_init(&pl[i]);
        pl[i].cpu = (unsigned)cpu;
        pl[i].gpus = (unsigned)gpus;
        pl[i].gpu = gpu;
        pl[i].gpu_set = set;
        pl[i].share = sh;
        pl[i].memory = (size_t)mem;
        if (body != Py_None) any_body = 1;
        PyTuple_SET_ITEM(bt, i, Py_NewRef(body));
    }
    Py_SETREF(*fn, Py_NewRef(PyTuple_GET_ITEM(res, 0)));
    Py_DECREF(res);
    if (any_body) *bodies = bt;
    else Py_XDECREF(bt);
    *out = pl;
    *n = (size_t)na;
    return 0;
fail:
    PyMem_Free(pl);
    Py_XDECREF(bt);
    Py_DECREF(res);
    return -1;
}

/* ------------------------------------------------------------------------ */
/* Running a placed body                                                     */
/* ------------------------------------------------------------------------ */

static const char *
kind_name(weft_device_kind k)
{
    return k == WEFT_DEVICE_CUDA ? "cuda" : k == WEFT_DEVICE_VGPU ? "vgpu" : "cpu";
}

/* The running placed body's weft.Context (borrowed), made on first use. */
static PyObject *
context_obj(modstate *st)
{
    if (weft_py_tl_ctxobj) return weft_py_tl_ctxobj;
    weft_ctx *ctx = weft_py_tl_ctx;
    unsigned ng = weft_ctx_gpu_count(ctx);
    PyObject *gpus = PyTuple_New(ng);
    if (gpus == NULL) return NULL;
    weft_runtime *rt = weft_ctx_runtime(ctx);
    for (unsigned i = 0; i < ng; i++) {
        int idx = weft_ctx_gpu(ctx, i);
        weft_device_info info;
        if (weft_device_info_get(rt, (unsigned)idx, &info) != 0) memset(&info, 0, sizeof info);
        PyObject *g = Py_BuildValue("(isiN)", idx, kind_name(info.kind), info.ordinal,
                                    PyLong_FromVoidPtr(weft_ctx_stream(ctx, i)));
        if (g == NULL) {
            Py_DECREF(gpus);
            return NULL;
        }
        PyTuple_SET_ITEM(gpus, i, g);
    }
    PyObject *variant = PyLong_FromUnsignedLong(weft_ctx_variant(ctx));
    PyObject *id = PyLong_FromUnsignedLongLong(weft_ctx_task_id(ctx)); /* whose views it makes */
    weft_py_tl_ctxobj = variant && id ? PyObject_CallFunctionObjArgs(st->Context_cls, variant, gpus, id, NULL) : NULL;
    Py_XDECREF(variant);
    Py_XDECREF(id);
    Py_DECREF(gpus);
    return weft_py_tl_ctxobj;
}

PyObject *
weft_py_call_placed(modstate *st, weft_ctx *ctx, PyObject *fn, PyObject *args, PyObject *kwargs)
{
    weft_ctx *prev = weft_py_tl_ctx;
    PyObject *prev_obj = weft_py_tl_ctxobj;
    weft_py_tl_ctx = ctx;
    weft_py_tl_ctxobj = NULL;
    /* On a CUDA device the runner sets the array libraries' current device
     * and stream; elsewhere the body is called as it is. */
    int cuda = 0;
    weft_runtime *rt = weft_ctx_runtime(ctx);
    for (unsigned i = 0; i < weft_ctx_gpu_count(ctx) && !cuda; i++) {
        weft_device_info info;
        cuda = weft_device_info_get(rt, (unsigned)weft_ctx_gpu(ctx, i), &info) == 0 && info.kind == WEFT_DEVICE_CUDA;
    }
    PyObject *res;
    if (cuda) {
        PyObject *c = context_obj(st);
        res = c ? PyObject_CallFunctionObjArgs(st->place_call, c, fn, args ? args : st->empty_tuple,
                                               kwargs ? kwargs : Py_None, NULL)
                : NULL;
    } else if (kwargs) {
        res = PyObject_Call(fn, args ? args : st->empty_tuple, kwargs);
    } else if (args) {
        res = PyObject_Vectorcall(fn, &PyTuple_GET_ITEM(args, 0), PyTuple_GET_SIZE(args), NULL);
    } else {
        res = PyObject_CallNoArgs(fn);
    }
    Py_CLEAR(weft_py_tl_ctxobj);
    weft_py_tl_ctxobj = prev_obj;
    weft_py_tl_ctx = prev;
    return res;
}

static PyObject *
mod_context(PyObject *m, PyObject *noargs)
{
    (void)noargs;
    if (weft_py_tl_ctx == NULL) Py_RETURN_NONE;
    PyObject *c = context_obj(weft_py_state_of_module(m));
    return Py_XNewRef(c);
}

/* ------------------------------------------------------------------------ */
/* ctx.queue(): a Python callable as GPU work                                */
/* ------------------------------------------------------------------------ */

typedef struct queued {
    PyObject *fn;     /* strong */
    TaskObject *t;    /* strong: where an exception goes */
    RuntimeObject *r; /* strong */
    PyObject *keep;   /* strong: the buffers its ranges point into (a tuple) */
    uint64_t id;      /* the task's C id */
    int own_thread;   /* runs on a virtual GPU's queue thread (weft_py_dev_gil_take) */
} queued;

/* Runs on the stream's thread (a virtual GPU's queue thread, CUDA's host
 * function thread): not a worker (see weft_py_dev_gil_take). */
static int
run_queued(void *arg)
{
    queued *q = arg;
    int g = weft_py_dev_gil_take(q->r, q->own_thread);
    PyObject *res = PyObject_CallNoArgs(q->fn);
    int rc = 0;
    if (res == NULL) {
        rc = 1;
        PyObject *exc = weft_py_fetch_exc();
        if (weft_py_task_set_exc(q->t, exc)) weft_py_record_failure(q->r, q->t, q->fn, exc, q->id);
    }
    Py_XDECREF(res);
    Py_DECREF(q->fn);
    Py_DECREF(q->t);
    Py_DECREF(q->r);
    Py_DECREF(q->keep);
    weft_py_dev_gil_give(g);
    PyMem_RawFree(q);
    return rc;
}

/* The running placed body's C context, for work queued on its GPU number
 * gpu; NULL with an exception naming `what`. */
static weft_ctx *
queue_ctx(const char *what, unsigned gpu)
{
    weft_ctx *ctx = weft_py_tl_ctx;
    if (ctx == NULL || weft_py_tl_cur == NULL) {
        PyErr_Format(PyExc_RuntimeError, "%s: only from the body of a task placed on GPUs", what);
        return NULL;
    }
    if (gpu >= weft_ctx_gpu_count(ctx)) {
        PyErr_Format(PyExc_ValueError, "%s: gpu=%u of a task on %u GPU%s", what, gpu, weft_ctx_gpu_count(ctx),
                     weft_ctx_gpu_count(ctx) == 1 ? "" : "s");
        return NULL;
    }
    return ctx;
}

/* The memory a queued piece of work reads and writes (for the virtual GPUs'
 * checking mode): the extents of the buffers in the tuples reads and writes
 * (an int there: the task's data access of that index, where it runs),
 * *rw (PyMem_Calloc'd, NULL when none; the caller frees it), *n of them.
 * -1 with an exception naming `what` and the buffer at fault. */
static int
queue_ranges(const char *what, PyObject *reads, PyObject *writes, weft_range **out, Py_ssize_t *nout)
{
    Py_ssize_t nr = PyTuple_GET_SIZE(reads), nw = PyTuple_GET_SIZE(writes), n = nr + nw;
    weft_range *rw = n ? PyMem_Calloc((size_t)n, sizeof *rw) : NULL;
    if (n && rw == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = i < nr ? PyTuple_GET_ITEM(reads, i) : PyTuple_GET_ITEM(writes, i - nr);
        if (PyLong_Check(o) && !PyBool_Check(o)) { /* the task's access o, where it runs */
            Py_ssize_t k = PyLong_AsSsize_t(o);
            if ((k == -1 && PyErr_Occurred()) ||
                weft_py_access_range(k, i < nr ? WEFT_R : WEFT_W, &rw[i], what) < 0) {
                PyMem_Free(rw);
                return -1;
            }
        } else {
            Py_buffer view;
            if (PyObject_GetBuffer(o, &view, PyBUF_ANY_CONTIGUOUS | (i < nr ? 0 : PyBUF_WRITABLE)) < 0) {
                PyErr_Format(PyExc_TypeError, "%s: %s[%zd] is not an access index or a contiguous%s buffer "
                             "('%.100s')", what, i < nr ? "reads" : "writes", i < nr ? i : i - nr,
                             i < nr ? "" : " writable", Py_TYPE(o)->tp_name);
                PyMem_Free(rw);
                return -1;
            }
            rw[i] = (weft_range){view.buf, (size_t)view.len, i < nr ? WEFT_R : WEFT_W};
            PyBuffer_Release(&view);
        }
        /* Named in both (an update in place): read and written, so the
         * checking mode does not poison it as only written. */
        for (Py_ssize_t j = 0; i >= nr && j < nr; j++)
            if (rw[j].ptr == rw[i].ptr && rw[j].bytes == rw[i].bytes) rw[i].mode = WEFT_RW;
    }
    *out = rw;
    *nout = n;
    return 0;
}

static PyObject *
mod_queue(PyObject *m, PyObject *args)
{
    (void)m;
    unsigned int gpu;
    PyObject *fn, *reads, *writes;
    unsigned long long model_ns;
    if (!PyArg_ParseTuple(args, "IOKO!O!:_queue", &gpu, &fn, &model_ns, &PyTuple_Type, &reads, &PyTuple_Type,
                          &writes))
        return NULL;
    weft_ctx *ctx = queue_ctx("queue()", gpu);
    if (ctx == NULL) return NULL;
    if (!PyCallable_Check(fn)) {
        PyErr_Format(PyExc_TypeError, "queue(): '%.100s' is not callable", Py_TYPE(fn)->tp_name);
        return NULL;
    }
    weft_range *rw;
    Py_ssize_t n;
    if (queue_ranges("queue()", reads, writes, &rw, &n) < 0) return NULL;
    queued *q = PyMem_RawMalloc(sizeof *q);
    PyObject *keep = PySequence_Concat(reads, writes);
    if (q == NULL || keep == NULL) {
        PyMem_RawFree(q);
        Py_XDECREF(keep);
        PyMem_Free(rw);
        return keep ? PyErr_NoMemory() : NULL;
    }
    q->fn = Py_NewRef(fn);
    q->t = (TaskObject *)Py_NewRef(weft_py_tl_cur);
    q->r = (RuntimeObject *)Py_NewRef(weft_py_tl_cur->rt);
    q->keep = keep;
    q->id = weft_ctx_task_id(ctx);
    weft_device_info info;
    q->own_thread = weft_device_info_get(weft_ctx_runtime(ctx), (unsigned)weft_ctx_gpu(ctx, gpu), &info) == 0 &&
                    info.kind == WEFT_DEVICE_VGPU;
    int rc = weft_ctx_queue_rw(ctx, gpu, run_queued, q, (uint64_t)model_ns, rw, (size_t)n);
    PyMem_Free(rw);
    if (rc != 0) {
        Py_DECREF(q->fn);
        Py_DECREF(q->t);
        Py_DECREF(q->r);
        Py_DECREF(q->keep);
        PyMem_RawFree(q);
        return weft_py_err_weft(rc, "queue()");
    }
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------------ */
/* ctx.queue_native(): a C function as GPU work, called without Python       */
/* ------------------------------------------------------------------------ */

/* The call (native.c's record) is owned by a capsule in the task's cell
 * (cell.keep), so nothing is freed when it runs, and nothing leaks if the
 * device skips it (a checking-mode violation fails the task without
 * calling it). */
#define NATIVE_CALL "weft.native_call"

/* The capsule's last reference may be dropped on any thread, and its free
 * may follow through CPython's biased reference counting (a hand-off TSan
 * cannot see): the stream's thread's use happened before the task ended,
 * which came before the cell was drained; declared as such. */
static void
native_call_free(PyObject *cap)
{
    weft_py_native_call *q = PyCapsule_GetPointer(cap, NATIVE_CALL);
    WEFT_PY_HANDOFF_ACQUIRE(q);
    PyMem_RawFree(q);
}

/* Append o to the list keep unless it is an int; 0, or -1 with an exception. */
static int
keep_unless_int(PyObject *keep, PyObject *o)
{
    return PyLong_Check(o) ? 0 : PyList_Append(keep, o);
}

static PyObject *
mod_queue_native(PyObject *m, PyObject *args)
{
    (void)m;
    unsigned int gpu;
    unsigned long long addr, model_ns;
    PyObject *fnobj, *argobj, *reads, *writes;
    if (!PyArg_ParseTuple(args, "IKOOKO!O!:_queue_native", &gpu, &addr, &fnobj, &argobj, &model_ns,
                          &PyTuple_Type, &reads, &PyTuple_Type, &writes))
        return NULL;
    weft_ctx *ctx = queue_ctx("queue_native()", gpu);
    if (ctx == NULL) return NULL;
    weft_py_frame *f = weft_py_tl_frame;
    if (f == NULL || f->ctx != ctx) {
        PyErr_SetString(PyExc_RuntimeError, "queue_native(): only from the body of a task placed on GPUs");
        return NULL;
    }
    if (addr == 0) {
        PyErr_SetString(PyExc_ValueError, "queue_native(): fn is a NULL function pointer");
        return NULL;
    }
    Py_buffer a = {0};
    if (argobj != Py_None && PyObject_GetBuffer(argobj, &a, PyBUF_ANY_CONTIGUOUS) < 0) {
        PyErr_Format(PyExc_TypeError, "queue_native(): arg is not None or a contiguous buffer ('%.100s')",
                     Py_TYPE(argobj)->tp_name);
        return NULL;
    }
    weft_py_native_call *q = weft_py_native_call_new((int (*)(void *))(uintptr_t)addr, (uint64_t)model_ns,
                                                     argobj == Py_None ? NULL : a.buf, (size_t)a.len, 0);
    if (argobj != Py_None) PyBuffer_Release(&a);
    PyObject *cap = q ? PyCapsule_New(q, NATIVE_CALL, native_call_free) : NULL;
    if (cap == NULL) {
        PyMem_RawFree(q);
        return q ? NULL : PyErr_NoMemory();
    }
    weft_range *rw;
    Py_ssize_t n;
    if (queue_ranges("queue_native()", reads, writes, &rw, &n) < 0) {
        Py_DECREF(cap);
        return NULL;
    }
    /* Kept until the task ends (weft_py_arg_destroy, drained with a thread
     * state): the call, the function's object, the buffers its ranges name
     * (not ints: an address, an access index). */
    cell *c = f->c;
    int rc = -1;
    if (c->keep == NULL) c->keep = PyList_New(0);
    if (c->keep != NULL && PyList_Append(c->keep, cap) == 0) {
        rc = keep_unless_int(c->keep, fnobj);
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(reads) && rc == 0; i++)
            rc = keep_unless_int(c->keep, PyTuple_GET_ITEM(reads, i));
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(writes) && rc == 0; i++)
            rc = keep_unless_int(c->keep, PyTuple_GET_ITEM(writes, i));
    }
    Py_DECREF(cap); /* the list's reference keeps it */
    if (rc != 0) {
        PyMem_Free(rw);
        return NULL;
    }
    rc = weft_ctx_queue_rw(ctx, gpu, weft_py_native_run, q, q->model_ns, rw, (size_t)n);
    PyMem_Free(rw);
    if (rc != 0) return weft_py_err_weft(rc, "queue_native()");
    Py_RETURN_NONE;
}

static PyObject *
mod_set_placement(PyObject *m, PyObject *args)
{
    modstate *st = weft_py_state_of_module(m);
    PyObject *normalize, *call, *variants, *devset, *context;
    if (!PyArg_ParseTuple(args, "OOOOO:_set_placement", &normalize, &call, &variants, &devset, &context))
        return NULL;
    PyObject *cpu = PyUnicode_InternFromString("cpu"), *gpus = PyUnicode_InternFromString("gpus"),
             *gpu = PyUnicode_InternFromString("gpu"), *gset = PyUnicode_InternFromString("gset");
    if (!cpu || !gpus || !gpu || !gset) {
        Py_XDECREF(cpu);
        Py_XDECREF(gpus);
        Py_XDECREF(gpu);
        Py_XDECREF(gset);
        return NULL;
    }
    Py_XSETREF(st->s_cpu, cpu);
    Py_XSETREF(st->s_gpus, gpus);
    Py_XSETREF(st->s_gpu, gpu);
    Py_XSETREF(st->s_gset, gset);
    Py_XSETREF(st->place_normalize, Py_NewRef(normalize));
    Py_XSETREF(st->place_call, Py_NewRef(call));
    Py_XSETREF(st->Variants_cls, Py_NewRef(variants));
    Py_XSETREF(st->DeviceSet_cls, Py_NewRef(devset));
    Py_XSETREF(st->Context_cls, Py_NewRef(context));
    Py_RETURN_NONE;
}

PyMethodDef weft_py_place_methods[] = {
    {"_queue", (PyCFunction)mod_queue, METH_VARARGS,
     "_queue(gpu, fn, model_ns, reads, writes): queue fn() on the running placed task's stream of "
     "GPU gpu, naming the buffers it reads and writes (tuples) (weft.Context.queue)."},
    {"_queue_native", (PyCFunction)mod_queue_native, METH_VARARGS,
     "_queue_native(gpu, address, fn, arg, model_ns, reads, writes): queue the C function at address "
     "(int fn(void *)) on the running placed task's stream of GPU gpu, called with a copy of the buffer arg "
     "(or NULL for None) without Python (weft.Context.queue_native)."},
    {"_set_placement", (PyCFunction)mod_set_placement, METH_VARARGS,
     "_set_placement(normalize, call, Variants, DeviceSet, Context): the helpers of weft/_placement.py."},
    {"_context", (PyCFunction)mod_context, METH_NOARGS,
     "_context(): the running placed body's weft.Context (made on first use), or None outside one."},
    {NULL, NULL, 0, NULL}};
