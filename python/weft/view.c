/*
 * view.c — weft.View: a task's data where the task runs, handed to array
 * libraries without a copy and without a host synchronisation.
 *
 * A body makes views of its accesses (weft.context().view(i) or
 * .view(buf), _placement.py): each points at weft_ctx_data(ctx, i), the
 * replica on the task's device, with the shape, strides and element type of
 * the registered buffer.
 *
 *   - On the host (a CPU task, or a task spawned without device_data=True,
 *     whose accesses are WEFT_HOST): the buffer protocol (numpy.asarray is
 *     zero-copy), __array_interface__, and DLPack as kDLCPU.
 *   - On a virtual GPU: __cuda_array_interface__ (v3, "stream" the task's
 *     stream) and DLPack; the replica is ordinary process memory in the
 *     virtual GPU's arena, so DLPack calls it kDLCPU (device 0) and the
 *     buffer protocol and __array_interface__ are offered too.  It is valid
 *     in the order of the task's stream: the copy into it is queued there,
 *     so the host touches it from callables queued with ctx.queue.
 *   - On a CUDA GPU: __cuda_array_interface__ and DLPack as kDLCUDA with
 *     the device's ordinal; no buffer protocol (device memory).
 *
 * A reduction's view (reduces=, the last named accesses) is the task's
 * private copy wherever it is, with the data's shape; a tile's is its
 * interior alone, rows packed (make_tile_view).  A scratch buffer's
 * (scratch=, after every named access) is the task's own buffer, writable,
 * C-contiguous, with the layout of the item that asked for it (a buffer's
 * shape and element type, a tile's span) or bytes (make_scratch_view).
 *
 * Lifetime.  Views live as long as their task: the views made by a body
 * share a scope (one per task, made by its first view) that the task's end
 * closes (weft_py_arg_destroy, from the C runtime's completion, before its
 * successors are released or its data unpinned).  After that every
 * attribute and method of a view raises RuntimeError; an array already made
 * from it (a NumPy array, a DLPack tensor) cannot be policed.
 *
 * Ownership.  A scope is malloc'd, counted (the cell's reference and one
 * per view) and freed by whoever drops the last count, with or without the
 * GIL.  A view owns a count on its scope and, for a host view, a reference
 * to the registered object whose memory it shows; device replicas belong to
 * the C data layer.  Its shape, strides and format are copied into the view
 * when it is made and never change, so a view is read-only state that any
 * thread may use (free-threaded builds need no lock).  A DLPack capsule owns
 * one malloc'd block (the managed tensor and its shape and strides) and no
 * Python object: its deleter frees the block, on any thread, without the
 * GIL.
 */
#include "_weft.h"

_Thread_local weft_py_frame *weft_py_tl_frame;

/* ------------------------------------------------------------------------ */
/* Scopes                                                                    */
/* ------------------------------------------------------------------------ */

struct weft_py_scope {
    _Atomic int alive; /* 1 until the task ends */
    _Atomic int refs;  /* the cell's (until the task ends) and one per view */
};

static void
scope_drop(struct weft_py_scope *s)
{
    if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) == 1) free(s);
}

void
weft_py_views_end(cell *c)
{
    struct weft_py_scope *s = c->scope;
    c->scope = NULL;
    atomic_store_explicit(&s->alive, 0, memory_order_release);
    scope_drop(s);
}

/* The running body's scope, made on its first view; NULL with an exception. */
static struct weft_py_scope *
frame_scope(weft_py_frame *f)
{
    if (f->c->scope == NULL) {
        struct weft_py_scope *s = malloc(sizeof *s);
        if (s == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        atomic_init(&s->alive, 1);
        atomic_init(&s->refs, 1);
        f->c->scope = s; /* only this body's thread writes it; the task's end reads it */
    }
    return f->c->scope;
}

/* ------------------------------------------------------------------------ */
/* DLPack (the structures of dlpack.h, v1.0, as its specification lays them) */
/* ------------------------------------------------------------------------ */

enum { DL_CPU = 1, DL_CUDA = 2 };                                           /* DLDeviceType */
enum { DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_COMPLEX = 5, DL_BOOL = 6 }; /* DLDataTypeCode */
#define DL_FLAG_READ_ONLY ((uint64_t)1)

typedef struct {
    int32_t device_type; /* a C enum in dlpack.h: int-sized */
    int32_t device_id;
} dl_device;

typedef struct {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
} dl_dtype;

typedef struct {
    void *data;
    dl_device device;
    int32_t ndim;
    dl_dtype dtype;
    int64_t *shape;
    int64_t *strides; /* in elements */
    uint64_t byte_offset;
} dl_tensor;

typedef struct dl_managed {
    dl_tensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct dl_managed *self);
} dl_managed; /* DLManagedTensor: capsule "dltensor" */

typedef struct dl_managed_v {
    struct {
        uint32_t major, minor;
    } version;
    void *manager_ctx;
    void (*deleter)(struct dl_managed_v *self);
    uint64_t flags;
    dl_tensor dl_tensor;
} dl_managed_v; /* DLManagedTensorVersioned: capsule "dltensor_versioned" */

/* The shape and strides follow the structure in the same block. */
static void dl_free(dl_managed *self) { free(self); }
static void dl_free_v(dl_managed_v *self) { free(self); }

/* A capsule nobody consumed owns its tensor; a consumer renames it
 * ("used_dltensor") and calls the deleter itself when done. */
static void
capsule_free(PyObject *cap)
{
    if (PyCapsule_IsValid(cap, "dltensor")) {
        dl_managed *m = PyCapsule_GetPointer(cap, "dltensor");
        if (m && m->deleter) m->deleter(m);
    } else if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        dl_managed_v *m = PyCapsule_GetPointer(cap, "dltensor_versioned");
        if (m && m->deleter) m->deleter(m);
    }
}

/* ------------------------------------------------------------------------ */
/* The view type                                                             */
/* ------------------------------------------------------------------------ */

enum { AT_HOST = 0, AT_VGPU = 1, AT_CUDA = 2 };

typedef struct {
    PyObject_VAR_HEAD              /* ob_size: 2 * ndim */
    struct weft_py_scope *scope;   /* a count on it */
    PyObject *obj;                 /* host views: the registered object (strong); else NULL */
    char *ptr;                     /* weft_ctx_data */
    Py_ssize_t nbytes, itemsize, index;
    int ndim, readonly, at, c_contig;
    int ordinal;                   /* of its GPU among its kind; 0 for the host */
    uintptr_t stream;              /* device views: the task's stream on that GPU (never 0) */
    uint64_t task;                 /* the C id of its task */
    char format[4];                /* struct format of one item ("<d", "B", "Zf") */
    char typestr[8];               /* array-interface type ("<f8", "|u1") */
    char device[32];               /* "cpu", "vgpu:0", "cuda:1" */
    Py_ssize_t dims[];             /* shape[ndim], then strides[ndim] in bytes */
} ViewObject;

#define SHAPE(v) ((v)->dims)
#define STRIDES(v) ((v)->dims + (v)->ndim)

/* Free-threaded TSan runs: CPython's reference counts are not instrumented,
 * so a thread that read a view releases it before it drops its reference,
 * and the dealloc acquires it (as Task does; _weft.h). */
#define VIEW_DONE(v, res) (WEFT_PY_HANDOFF_RELEASE(v), (res))

static int
view_check(ViewObject *v)
{
    if (atomic_load_explicit(&v->scope->alive, memory_order_acquire)) return 0;
    PyErr_Format(PyExc_RuntimeError,
                 "weft.View of access %zd (task id %llu) used after its task ended: a view is valid "
                 "only while its task runs; make views inside the body, and keep none beyond it",
                 v->index, (unsigned long long)v->task);
    return -1;
}

/* The array-interface type of one item of struct format fmt (NULL: "B")
 * with this itemsize, or -1 for what a view does not describe (several
 * fields, repeat counts, long double...): the view then shows bytes. */
int
weft_py_typestr_of(const char *fmt, Py_ssize_t itemsize, char out[8])
{
    const char *f = fmt ? fmt : "B";
    char order = '@';
    if (*f && strchr("@=<>!", *f)) order = *f++;
    int cplx = *f == 'Z';
    if (cplx) f++;
    if (*f == 0 || f[1] != 0) return -1;
    char kind;
    switch (*f) {
    case 'b': case 'h': case 'i': case 'l': case 'q': case 'n': kind = 'i'; break;
    case 'B': case 'H': case 'I': case 'L': case 'Q': case 'N': kind = 'u'; break;
    case 'e': case 'f': case 'd': kind = cplx ? 'c' : 'f'; break;
    case '?': kind = 'b'; break;
    case 'c': kind = 'S'; break;
    default: return -1;
    }
    if (cplx && kind != 'c') return -1;
    if (itemsize != 1 && itemsize != 2 && itemsize != 4 && itemsize != 8 && itemsize != 16) return -1;
    if ((kind == 'f' && itemsize > 8) || (kind == 'c' && itemsize < 8)) return -1;
    const union { uint16_t u; uint8_t b[2]; } probe = {1};
    char native = probe.b[0] ? '<' : '>';
    char e = itemsize == 1 ? '|' : order == '<' ? '<' : (order == '>' || order == '!') ? '>' : native;
    snprintf(out, 8, "%c%c%d", e, kind, (int)itemsize);
    return 0;
}

/* How many of the running body's accesses the spawn named (reads= ..
 * reduces=): the scratch buffers come after them. */
static Py_ssize_t
nnamed(const weft_py_frame *f)
{
    return f->acc ? PyTuple_GET_SIZE(f->acc) - (Py_ssize_t)f->nscratch : 0;
}

/* The fields every view sets the same way: where it is (the task's first
 * GPU for device data, else the host, holding `keep`, the object whose
 * memory it is, if any), whether it is read-only, its scope.  Consumes v
 * on error. */
static PyObject *
view_finish(weft_py_frame *f, ViewObject *v, PyObject *keep, int readonly, char *ptr, Py_ssize_t i)
{
    v->ptr = ptr;
    v->index = i;
    v->readonly = readonly;
    v->task = weft_ctx_task_id(f->ctx);
    v->at = AT_HOST;
    v->ordinal = 0;
    v->stream = 0;
    v->obj = NULL;
    strcpy(v->device, "cpu");
    if (f->device_data && weft_ctx_gpu_count(f->ctx) > 0) {
        /* The replica on the task's first GPU (weft_ctx_data's). */
        weft_device_info info;
        if (weft_device_info_get(weft_ctx_runtime(f->ctx), (unsigned)weft_ctx_gpu(f->ctx, 0), &info) != 0) {
            v->scope = NULL;
            Py_DECREF(v);
            return weft_py_err_weft(WEFT_EINVAL, "view()");
        }
        v->at = info.kind == WEFT_DEVICE_CUDA ? AT_CUDA : AT_VGPU;
        if (v->at == AT_VGPU) {
            /* A virtual GPU's replica is host memory the body may compute
             * on itself (NumPy standing in for CuPy): it gets the view once
             * the copies in (and what it queued) have run, and what it
             * writes there is the task's output (weft_ctx_sync). */
            int rc;
            BEGIN_NOGIL
            rc = weft_ctx_sync(f->ctx);
            END_NOGIL
            if (rc != 0) {
                v->scope = NULL;
                Py_DECREF(v);
                return weft_py_err_weft(rc, "view()");
            }
        }
        v->ordinal = info.ordinal;
        memcpy(v->device, info.name, sizeof v->device);
        v->device[sizeof v->device - 1] = 0;
        /* The CUDA array interface gives 1 for the legacy default stream
         * and forbids 0: a task's stream is never the default one. */
        v->stream = (uintptr_t)weft_ctx_stream(f->ctx, 0);
        if (v->stream == 0) v->stream = 1;
    } else {
        v->obj = Py_XNewRef(keep); /* its memory is the object's (a scratch buffer's: the task's) */
    }
    struct weft_py_scope *s = frame_scope(f);
    if (s == NULL) {
        v->scope = NULL;
        Py_DECREF(v);
        return NULL;
    }
    atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
    v->scope = s;
    return VIEW_DONE(v, (PyObject *)v);
}

/* A view of a tile (access i, at ptr): its span, halo included, rows
 * weft_ctx_pitch apart — the parent's pitch on the host (a window into the
 * array), its packed width on a device.  A reduction's (the frame's last
 * nreduces accesses): the task's private copy, which is the tile's
 * interior alone, rows packed (weft_ctx_pitch: the interior's width),
 * wherever it is. */
static PyObject *
make_tile_view(modstate *st, weft_py_frame *f, Py_ssize_t i, DataObject *d, char *ptr)
{
    const weft_tile_info *t = &d->ti;
    int ndim = d->tndim;
    int reduced = (uint32_t)(nnamed(f) - i) <= f->nreduces;
    size_t rows = reduced ? t->in_rows : t->rows, cols = reduced ? t->in_cols : t->cols;
    size_t pitch = weft_ctx_pitch(f->ctx, (size_t)i), row = cols * (size_t)d->elem;
    if (pitch < row && rows > 1) {
        PyErr_Format(PyExc_RuntimeError, "view(): access %zd: its rows are %zu bytes apart, fewer than the "
                     "%zu bytes of a row of the tile%s", i, pitch, row, reduced ? "'s interior" : "");
        return NULL;
    }
    ViewObject *v = (ViewObject *)st->View_T->tp_alloc(st->View_T, 2 * (Py_ssize_t)ndim);
    if (v == NULL) return NULL;
    WEFT_PY_HANDOFF_ACQUIRE(v); /* the memory's last user (its dealloc) */
    v->ndim = ndim;
    v->itemsize = d->elem;
    if (ndim == 1) {
        SHAPE(v)[0] = (Py_ssize_t)cols;
        STRIDES(v)[0] = d->elem;
    } else {
        SHAPE(v)[0] = (Py_ssize_t)rows;
        SHAPE(v)[1] = (Py_ssize_t)cols;
        STRIDES(v)[0] = (Py_ssize_t)pitch;
        STRIDES(v)[1] = d->elem;
    }
    v->c_contig = ndim == 1 || rows <= 1 || pitch == row;
    v->nbytes = (Py_ssize_t)(rows * row);
    memcpy(v->format, d->format, sizeof v->format);
    if (weft_py_typestr_of(d->format, d->elem, v->typestr) < 0) strcpy(v->typestr, "|u1"); /* partition checked */
    return view_finish(f, v, d->obj, (uint32_t)i < f->nreads || d->readonly, ptr, i);
}

/* A view of scratch buffer access i (at ptr, nbytes): C-contiguous, with
 * the layout of tmpl, the scratch= item that asked for it — a tile's span
 * (rows x cols of its elements), a weft.Data's object's or a buffer's
 * shape and element type when they describe nbytes in one simple type —
 * else bytes.  Writable. */
static PyObject *
make_scratch_view(modstate *st, weft_py_frame *f, Py_ssize_t i, PyObject *tmpl, char *ptr, size_t nbytes)
{
    Py_ssize_t shape[64], itemsize = 1;
    int ndim = 1;
    char format[4] = "B", typestr[8] = "|u1";
    shape[0] = (Py_ssize_t)nbytes;
    if (Py_IS_TYPE(tmpl, st->Data_T) && ((DataObject *)tmpl)->parent) {
        const DataObject *d = (const DataObject *)tmpl;
        if (weft_py_typestr_of(d->format, d->elem, typestr) == 0) {
            ndim = d->tndim;
            shape[0] = (Py_ssize_t)(ndim == 1 ? d->ti.cols : d->ti.rows);
            shape[1] = (Py_ssize_t)d->ti.cols;
            itemsize = d->elem;
            memcpy(format, d->format, sizeof format);
        }
    } else if (!PyIndex_Check(tmpl) || PyObject_CheckBuffer(tmpl)) {
        PyObject *obj = Py_IS_TYPE(tmpl, st->Data_T) ? ((DataObject *)tmpl)->obj : tmpl;
        Py_buffer b;
        if (PyObject_GetBuffer(obj, &b, PyBUF_RECORDS_RO) == 0) {
            const char *bf = b.format ? b.format : "B";
            if ((size_t)b.len == nbytes && b.ndim >= 1 && b.ndim <= 64 && strlen(bf) < sizeof format &&
                weft_py_typestr_of(bf, b.itemsize, typestr) == 0) {
                ndim = b.ndim;
                for (int k = 0; k < ndim; k++) shape[k] = b.shape ? b.shape[k] : b.len / b.itemsize;
                itemsize = b.itemsize;
                strcpy(format, bf);
            } else {
                strcpy(typestr, "|u1");
            }
            PyBuffer_Release(&b);
        } else {
            PyErr_Clear();
        }
    }
    ViewObject *v = (ViewObject *)st->View_T->tp_alloc(st->View_T, 2 * (Py_ssize_t)ndim);
    if (v == NULL) return NULL;
    WEFT_PY_HANDOFF_ACQUIRE(v); /* the memory's last user (its dealloc) */
    v->ndim = ndim;
    v->itemsize = itemsize;
    Py_ssize_t stride = itemsize;
    for (int k = ndim; k-- > 0;) { /* packed, C order */
        SHAPE(v)[k] = shape[k];
        STRIDES(v)[k] = stride;
        stride *= shape[k];
    }
    v->c_contig = 1;
    v->nbytes = (Py_ssize_t)nbytes;
    memcpy(v->format, format, sizeof format);
    memcpy(v->typestr, typestr, sizeof typestr);
    return view_finish(f, v, NULL, 0, ptr, i);
}

/* A view of access i of the running body (frame f); NULL with an exception. */
static PyObject *
make_view(modstate *st, weft_py_frame *f, Py_ssize_t i)
{
    char *ptr = weft_ctx_data(f->ctx, (size_t)i);
    if (ptr == NULL) {
        PyErr_Format(PyExc_RuntimeError, "view(): the task has no data access %zd", i);
        return NULL;
    }
    if (i >= nnamed(f))
        return make_scratch_view(st, f, i, PyTuple_GET_ITEM(f->acc, i), ptr, weft_ctx_bytes(f->ctx, (size_t)i));
    DataObject *d = (DataObject *)PyTuple_GET_ITEM(f->acc, i);
    if (d->parent) return make_tile_view(st, f, i, d, ptr);
    Py_ssize_t nbytes = d->has_view ? d->view.len : 0;
    /* The layout: the object's own, asked for again with its format (the
     * registration did not ask for one), if it still covers the registered
     * memory and is one simple item type; else bytes. */
    Py_buffer b;
    int have = PyObject_GetBuffer(d->obj, &b, PyBUF_RECORDS_RO) == 0;
    if (!have) PyErr_Clear();
    char typestr[8], format[4];
    int ndim = 1;
    const char *bf = have && b.format ? b.format : "B";
    if (have && b.len == nbytes && b.buf == d->view.buf && b.ndim <= 64 && strlen(bf) < sizeof format &&
        weft_py_typestr_of(bf, b.itemsize, typestr) == 0 &&
        (PyBuffer_IsContiguous(&b, 'C') || PyBuffer_IsContiguous(&b, 'F'))) {
        ndim = b.ndim;
        strcpy(format, bf);
    } else {
        if (have) PyBuffer_Release(&b);
        have = 0;
        strcpy(format, "B");
        strcpy(typestr, "|u1");
    }
    ViewObject *v = (ViewObject *)st->View_T->tp_alloc(st->View_T, 2 * (Py_ssize_t)ndim);
    if (v == NULL) {
        if (have) PyBuffer_Release(&b);
        return NULL;
    }
    WEFT_PY_HANDOFF_ACQUIRE(v); /* the memory's last user (its dealloc) */
    v->ndim = ndim;
    if (have) {
        v->itemsize = b.itemsize;
        for (int k = 0; k < ndim; k++) SHAPE(v)[k] = b.shape[k];
        if (b.strides) {
            for (int k = 0; k < ndim; k++) STRIDES(v)[k] = b.strides[k];
        } else {
            Py_ssize_t s = b.itemsize;
            for (int k = ndim; k-- > 0;) {
                STRIDES(v)[k] = s;
                s *= b.shape[k];
            }
        }
        v->c_contig = PyBuffer_IsContiguous(&b, 'C');
        PyBuffer_Release(&b);
    } else {
        v->itemsize = 1;
        SHAPE(v)[0] = nbytes;
        STRIDES(v)[0] = 1;
        v->c_contig = 1;
    }
    memcpy(v->format, format, sizeof format);
    memcpy(v->typestr, typestr, sizeof typestr);
    v->nbytes = nbytes;
    return view_finish(f, v, d->obj, (uint32_t)i < f->nreads || d->readonly, ptr, i);
}

static void
View_dealloc(ViewObject *v)
{
    WEFT_PY_HANDOFF_ACQUIRE(v);
    PyTypeObject *tp = Py_TYPE(v);
    if (v->scope) scope_drop(v->scope);
    Py_CLEAR(v->obj);
    WEFT_PY_HANDOFF_RELEASE(v);
    tp->tp_free(v);
    Py_DECREF(tp);
}

static PyObject *
shape_tuple(ViewObject *v, const Py_ssize_t *a)
{
    PyObject *t = PyTuple_New(v->ndim);
    if (t == NULL) return NULL;
    for (int k = 0; k < v->ndim; k++) {
        PyObject *x = PyLong_FromSsize_t(a[k]);
        if (x == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, k, x);
    }
    return t;
}

/* The array interfaces' dict: shape, typestr, data, strides, version (and
 * the CUDA one's stream).  data's pointer is 0 for no bytes (CAI). */
static PyObject *
interface_dict(ViewObject *v, int cuda)
{
    PyObject *shape = shape_tuple(v, SHAPE(v));
    PyObject *strides = v->c_contig ? Py_NewRef(Py_None) : shape_tuple(v, STRIDES(v));
    PyObject *ptr = PyLong_FromVoidPtr(cuda && v->nbytes == 0 ? NULL : v->ptr);
    PyObject *stream = cuda ? PyLong_FromVoidPtr((void *)v->stream) : NULL;
    PyObject *dict = NULL;
    if (shape && strides && ptr && (stream || !cuda)) {
        dict = Py_BuildValue("{s:O,s:s,s:(OO),s:O,s:i}", "shape", shape, "typestr", v->typestr, "data", ptr,
                             v->readonly ? Py_True : Py_False, "strides", strides, "version", 3);
        if (dict && cuda && PyDict_SetItemString(dict, "stream", stream) < 0) Py_CLEAR(dict);
    }
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    Py_XDECREF(ptr);
    Py_XDECREF(stream);
    return dict;
}

static PyObject *
View_get_cai(ViewObject *v, void *Py_UNUSED(c))
{
    if (view_check(v) < 0) return VIEW_DONE(v, NULL);
    if (v->at == AT_HOST) {
        PyErr_SetString(PyExc_AttributeError,
                        "a host view has no __cuda_array_interface__ (its memory is the host's; spawn with "
                        "device_data=True for the copy on the task's GPU)");
        return VIEW_DONE(v, NULL);
    }
    return VIEW_DONE(v, interface_dict(v, 1));
}

static PyObject *
View_get_ai(ViewObject *v, void *Py_UNUSED(c))
{
    if (view_check(v) < 0) return VIEW_DONE(v, NULL);
    if (v->at == AT_CUDA) {
        PyErr_Format(PyExc_AttributeError,
                     "a view of %s memory has no __array_interface__: the host cannot address it "
                     "(use __cuda_array_interface__ or __dlpack__)", v->device);
        return VIEW_DONE(v, NULL);
    }
    return VIEW_DONE(v, interface_dict(v, 0));
}

static PyObject *
View_dlpack_device(ViewObject *v, PyObject *Py_UNUSED(ignored))
{
    if (view_check(v) < 0) return VIEW_DONE(v, NULL);
    return VIEW_DONE(v, v->at == AT_CUDA ? Py_BuildValue("(ii)", DL_CUDA, v->ordinal) : Py_BuildValue("(ii)", DL_CPU, 0));
}

static PyObject *
buffer_error(const char *fmt, ViewObject *v)
{
    PyErr_Format(PyExc_BufferError, fmt, v->index, v->device);
    return NULL;
}

/* __dlpack__(stream=None, *, max_version=None, dl_device=None, copy=None):
 * a capsule "dltensor" (DLManagedTensor) or, when the consumer takes DLPack
 * 1.0 or newer (max_version), "dltensor_versioned" (marked read-only for a
 * read-only view, which the older structure cannot say: it is refused). */
static PyObject *
dlpack(ViewObject *v, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
    PyObject *stream = Py_None, *maxv = Py_None, *dldev = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O$OOO:__dlpack__", kwlist, &stream, &maxv, &dldev, &copy))
        return NULL;
    if (view_check(v) < 0) return NULL;
    int dev_type = v->at == AT_CUDA ? DL_CUDA : DL_CPU, dev_id = v->at == AT_CUDA ? v->ordinal : 0;
    /* The stream the consumer will use it on.  Nothing is synchronised
     * here: a stream is accepted only where nothing is needed. */
    if (stream != Py_None) {
        if (!PyLong_Check(stream)) {
            PyErr_Format(PyExc_TypeError, "__dlpack__(): stream= expects an int or None, got '%.100s'",
                         Py_TYPE(stream)->tp_name);
            return NULL;
        }
        long long s = PyLong_AsLongLong(stream);
        if (s == -1 && PyErr_Occurred()) return NULL;
        if (s != -1 && !(v->at != AT_HOST && (uintptr_t)s == v->stream))
            return buffer_error(v->at == AT_CUDA
                                    ? "__dlpack__(): view of access %zd on %s: stream= must be the task's "
                                      "own stream (weft.context().streams[0]) or -1; weft does not order "
                                      "other streams after it"
                                    : "__dlpack__(): view of access %zd on %s: memory without a stream "
                                      "takes stream=None (or -1)",
                                v);
    } else if (v->at == AT_CUDA) {
        return buffer_error("__dlpack__(): view of access %zd on %s: stream=None means CUDA's legacy "
                            "default stream, which the task's (non-blocking) stream is not ordered with: "
                            "pass stream=weft.context().streams[0], or -1",
                            v);
    }
    if (copy != Py_None) {
        int c = PyObject_IsTrue(copy);
        if (c < 0) return NULL;
        if (c) return buffer_error("__dlpack__(): view of access %zd on %s: views are never copied (copy=True)", v);
    }
    if (dldev != Py_None) {
        int t, id;
        if (!PyArg_ParseTuple(dldev, "ii:__dlpack__ dl_device", &t, &id)) return NULL;
        if (t != dev_type || id != dev_id)
            return buffer_error("__dlpack__(): view of access %zd on %s: dl_device= names another device "
                                "and views are never copied", v);
    }
    int versioned = 0;
    if (maxv != Py_None) {
        int major, minor;
        if (!PyArg_ParseTuple(maxv, "ii:__dlpack__ max_version", &major, &minor)) return NULL;
        versioned = major >= 1;
    }
    dl_dtype dt = {0, (uint8_t)(v->itemsize * 8), 1};
    switch (v->typestr[1]) {
    case 'i': dt.code = DL_INT; break;
    case 'u': dt.code = DL_UINT; break;
    case 'f': dt.code = DL_FLOAT; break;
    case 'c': dt.code = DL_COMPLEX; break;
    case 'b': dt.code = DL_BOOL; break;
    default:
        return buffer_error("__dlpack__(): view of access %zd on %s: its items (bytes strings) have no "
                            "DLPack type", v);
    }
    const union { uint16_t u; uint8_t b[2]; } probe = {1};
    if (v->typestr[0] == (probe.b[0] ? '>' : '<'))
        return buffer_error("__dlpack__(): view of access %zd on %s: DLPack has no byte-swapped types", v);
    if (v->readonly && !versioned)
        return buffer_error("__dlpack__(): view of access %zd on %s is read-only, which DLPack before 1.0 "
                            "cannot mark: ask with max_version=(1, 0)", v);
    size_t head = versioned ? sizeof(dl_managed_v) : sizeof(dl_managed);
    head = (head + 7) & ~(size_t)7;
    char *block = malloc(head + 2 * (size_t)v->ndim * sizeof(int64_t) + 1);
    if (block == NULL) return PyErr_NoMemory();
    int64_t *shape = (int64_t *)(block + head), *strides = shape + v->ndim;
    for (int k = 0; k < v->ndim; k++) {
        shape[k] = SHAPE(v)[k];
        strides[k] = STRIDES(v)[k] / v->itemsize;
    }
    dl_tensor *t;
    if (versioned) {
        dl_managed_v *m = (dl_managed_v *)block;
        m->version.major = 1;
        m->version.minor = 0;
        m->manager_ctx = NULL;
        m->deleter = dl_free_v;
        m->flags = v->readonly ? DL_FLAG_READ_ONLY : 0;
        t = &m->dl_tensor;
    } else {
        dl_managed *m = (dl_managed *)block;
        m->manager_ctx = NULL;
        m->deleter = dl_free;
        t = &m->dl_tensor;
    }
    t->data = v->ptr;
    t->device.device_type = dev_type;
    t->device.device_id = dev_id;
    t->ndim = v->ndim;
    t->dtype = dt;
    t->shape = shape;
    t->strides = strides;
    t->byte_offset = 0;
    PyObject *cap = PyCapsule_New(block, versioned ? "dltensor_versioned" : "dltensor", capsule_free);
    if (cap == NULL) free(block);
    return cap;
}

static PyObject *
View_dlpack(ViewObject *v, PyObject *args, PyObject *kwds)
{
    PyObject *res = dlpack(v, args, kwds);
    return VIEW_DONE(v, res);
}

static int
View_getbuffer(ViewObject *v, Py_buffer *b, int flags)
{
    b->obj = NULL;
    int rc = -1;
    if (view_check(v) < 0) goto out;
    if (v->at == AT_CUDA) {
        buffer_error("view of access %zd on %s: the host cannot address device memory (use "
                     "__cuda_array_interface__ or __dlpack__)", v);
        goto out;
    }
    if ((flags & PyBUF_WRITABLE) == PyBUF_WRITABLE && v->readonly) {
        buffer_error("view of access %zd on %s is read-only (the task reads it)", v);
        goto out;
    }
    if (!v->c_contig && ((flags & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS ||
                         (flags & PyBUF_STRIDES) != PyBUF_STRIDES)) {
        buffer_error("view of access %zd on %s is not C-contiguous (ask for strides)", v);
        goto out;
    }
    if ((flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS && v->ndim > 1) {
        int f = 1;
        Py_ssize_t s = v->itemsize;
        for (int k = 0; k < v->ndim; k++) {
            if (SHAPE(v)[k] > 1 && STRIDES(v)[k] != s) f = 0;
            s *= SHAPE(v)[k];
        }
        if (!f) {
            buffer_error("view of access %zd on %s is not Fortran-contiguous", v);
            goto out;
        }
    }
    b->buf = v->ptr;
    b->len = v->nbytes;
    b->readonly = v->readonly;
    b->suboffsets = NULL;
    b->internal = NULL;
    if ((flags & PyBUF_ND) == PyBUF_ND) {
        b->ndim = v->ndim;
        b->itemsize = v->itemsize;
        b->format = (flags & PyBUF_FORMAT) ? v->format : NULL;
        b->shape = SHAPE(v);
        b->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? STRIDES(v) : NULL;
    } else { /* plain bytes */
        b->ndim = 1;
        b->itemsize = 1;
        b->format = (flags & PyBUF_FORMAT) ? "B" : NULL;
        b->shape = NULL;
        b->strides = NULL;
    }
    b->obj = Py_NewRef(v);
    rc = 0;
out:
    WEFT_PY_HANDOFF_RELEASE(v);
    return rc;
}

#define GETTER(name, expr)                                      \
    static PyObject *View_get_##name(ViewObject *v, void *c)     \
    {                                                           \
        (void)c;                                                \
        if (view_check(v) < 0) return VIEW_DONE(v, NULL);       \
        return VIEW_DONE(v, (expr));                            \
    }
GETTER(ptr, PyLong_FromVoidPtr(v->ptr))
GETTER(nbytes, PyLong_FromSsize_t(v->nbytes))
GETTER(itemsize, PyLong_FromSsize_t(v->itemsize))
GETTER(ndim, PyLong_FromLong(v->ndim))
GETTER(shape, shape_tuple(v, SHAPE(v)))
GETTER(strides, shape_tuple(v, STRIDES(v)))
GETTER(format, PyUnicode_FromString(v->format))
GETTER(typestr, PyUnicode_FromString(v->typestr))
GETTER(readonly, PyBool_FromLong(v->readonly))
GETTER(device, PyUnicode_FromString(v->device))
GETTER(on_host, PyBool_FromLong(v->at == AT_HOST))
GETTER(stream, v->at == AT_HOST ? Py_NewRef(Py_None) : PyLong_FromVoidPtr((void *)v->stream))
GETTER(index, PyLong_FromSsize_t(v->index))
#undef GETTER

static PyObject *
View_get_valid(ViewObject *v, void *Py_UNUSED(c))
{
    return VIEW_DONE(v, PyBool_FromLong(atomic_load_explicit(&v->scope->alive, memory_order_acquire)));
}

static PyObject *
View_repr(ViewObject *v)
{
    int alive = atomic_load_explicit(&v->scope->alive, memory_order_acquire);
    PyObject *shape = shape_tuple(v, SHAPE(v));
    PyObject *r = shape ? PyUnicode_FromFormat("<weft.View of access %zd on %s: %s %R%s%s>", v->index, v->device,
                                               v->typestr, shape, v->readonly ? ", read-only" : "",
                                               alive ? "" : ", its task ended")
                        : NULL;
    Py_XDECREF(shape);
    return VIEW_DONE(v, r);
}

static PyObject *
View_new_err(PyTypeObject *tp, PyObject *a, PyObject *k)
{
    (void)tp;
    (void)a;
    (void)k;
    PyErr_SetString(PyExc_TypeError, "weft.View objects come from weft.context().view(...) inside a task body");
    return NULL;
}

static PyMethodDef View_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))View_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(stream=None, *, max_version=None, dl_device=None, copy=None) -> PyCapsule\n\n"
     "The data as a DLPack tensor, without a copy: a capsule 'dltensor', or 'dltensor_versioned' when "
     "max_version is (1, 0) or newer (then a read-only view is marked read-only; before 1.0 a "
     "read-only view is refused).  stream: None or -1 for host memory (a virtual GPU's included); "
     "on CUDA the task's own stream or -1 (nothing is synchronised)."},
    {"__dlpack_device__", (PyCFunction)View_dlpack_device, METH_NOARGS,
     "(device_type, device_id): (1, 0), kDLCPU, for the host and for virtual GPUs (their memory is "
     "host memory); (2, ordinal), kDLCUDA, on a CUDA GPU."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef View_getset[] = {
    {"__cuda_array_interface__", (getter)View_get_cai, NULL,
     "CUDA array interface v3 (device views only): data, shape, typestr, strides (None when "
     "C-contiguous), version 3, stream (the task's stream on its GPU)", NULL},
    {"__array_interface__", (getter)View_get_ai, NULL,
     "NumPy array interface v3 (memory the host can address: host views, virtual GPUs)", NULL},
    {"ptr", (getter)View_get_ptr, NULL, "address of the data on its device (weft_ctx_data)", NULL},
    {"nbytes", (getter)View_get_nbytes, NULL, "size in bytes", NULL},
    {"itemsize", (getter)View_get_itemsize, NULL, "bytes per item", NULL},
    {"ndim", (getter)View_get_ndim, NULL, "number of dimensions", NULL},
    {"shape", (getter)View_get_shape, NULL, "shape (the registered buffer's)", NULL},
    {"strides", (getter)View_get_strides, NULL, "strides in bytes", NULL},
    {"format", (getter)View_get_format, NULL, "struct format of one item", NULL},
    {"typestr", (getter)View_get_typestr, NULL, "array-interface type string ('<f8')", NULL},
    {"readonly", (getter)View_get_readonly, NULL, "True when the task only reads it", NULL},
    {"device", (getter)View_get_device, NULL, "where the data is: 'cpu', 'vgpu:0', 'cuda:1'", NULL},
    {"on_host", (getter)View_get_on_host, NULL, "True for the host's copy", NULL},
    {"stream", (getter)View_get_stream, NULL, "the task's stream on that GPU as an int (None on the host)", NULL},
    {"index", (getter)View_get_index, NULL, "the access it views (descriptor order)", NULL},
    {"valid", (getter)View_get_valid, NULL, "True while its task runs (never raises)", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyType_Slot View_slots[] = {
    {Py_tp_doc, "A task's data access on the task's device, without a copy (weft.context().view(i)): "
                "the buffer protocol, __array_interface__, __cuda_array_interface__ and DLPack, as "
                "the memory allows.  Valid while its task runs; afterwards every use raises "
                "RuntimeError."},
    {Py_tp_new, View_new_err},
    {Py_tp_dealloc, View_dealloc},
    {Py_tp_methods, View_methods},
    {Py_tp_getset, View_getset},
    {Py_tp_repr, View_repr},
    {Py_bf_getbuffer, View_getbuffer},
    {0, NULL}};

PyType_Spec weft_py_view_spec = {"weft.View", offsetof(ViewObject, dims), sizeof(Py_ssize_t),
                                 Py_TPFLAGS_DEFAULT, View_slots};

/* ------------------------------------------------------------------------ */
/* Module functions (weft.Context's view, views and array call these)        */
/* ------------------------------------------------------------------------ */

/* The running body's frame, if it belongs to task id `task` (0: any). */
static weft_py_frame *
current_frame(PyObject *task, const char *what)
{
    weft_py_frame *f = weft_py_tl_frame;
    if (f == NULL) {
        PyErr_Format(PyExc_RuntimeError, "%s: only inside a weft task body (not in a callable queued on a "
                     "GPU stream, nor on another thread)", what);
        return NULL;
    }
    if (task && task != Py_None) {
        unsigned long long id = PyLong_AsUnsignedLongLong(task);
        if (id == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
        if (id != 0 && id != weft_ctx_task_id(f->ctx)) {
            PyErr_Format(PyExc_RuntimeError, "%s: this Context belongs to another task (id %llu): call "
                         "weft.context() in the body that uses it", what, id);
            return NULL;
        }
    }
    return f;
}

static PyObject *
mod_view(PyObject *m, PyObject *args)
{
    PyObject *which, *task = Py_None;
    if (!PyArg_ParseTuple(args, "O|O:_view", &which, &task)) return NULL;
    weft_py_frame *f = current_frame(task, "view()");
    if (f == NULL) return NULL;
    Py_ssize_t n = f->acc ? PyTuple_GET_SIZE(f->acc) : 0, i = -1;
    /* A weft.Data or an object the task named (named twice, in reads= and
     * writes=: the last access, a writing one); else an index.  (A scratch
     * buffer is reached by its index, or ctx.scratch(k): the item that
     * asked for it only gave its size.) */
    for (Py_ssize_t k = 0; k < nnamed(f); k++) {
        DataObject *d = (DataObject *)PyTuple_GET_ITEM(f->acc, k);
        /* (a tile's obj is its parent's: a tile is named by itself only) */
        if ((PyObject *)d == which || (d->parent == NULL && d->obj == which)) i = k;
    }
    /* An index (an int; not an array, which NumPy lets act as one) */
    if (i < 0 && PyIndex_Check(which) && !PyObject_CheckBuffer(which)) {
        i = PyNumber_AsSsize_t(which, PyExc_IndexError);
        if (i == -1 && PyErr_Occurred()) return NULL;
        if (i < 0 || i >= n) {
            PyErr_Format(PyExc_IndexError, "view(%zd): the task has %zd data access%s", i, n, n == 1 ? "" : "es");
            return NULL;
        }
    } else if (i < 0) {
        PyErr_Format(PyExc_ValueError, "view(): the task does not access this '%.100s' (name it in "
                     "reads=/writes=/readwrites=/commutes=, or pass the access's index)",
                     Py_TYPE(which)->tp_name);
        return NULL;
    }
    return make_view(weft_py_state_of_module(m), f, i);
}

/* A tuple of item(m, f, i) for each access i of the running body (task:
 * the C id its Context was made for, or None); NULL with an exception. */
static PyObject *
per_access(PyObject *m, PyObject *args, const char *fmt, const char *what,
           PyObject *(*item)(PyObject *m, weft_py_frame *f, Py_ssize_t i))
{
    PyObject *task = Py_None;
    if (!PyArg_ParseTuple(args, fmt, &task)) return NULL;
    weft_py_frame *f = current_frame(task, what);
    if (f == NULL) return NULL;
    Py_ssize_t n = f->acc ? PyTuple_GET_SIZE(f->acc) : 0;
    PyObject *t = PyTuple_New(n);
    for (Py_ssize_t i = 0; t && i < n; i++) {
        PyObject *v = item(m, f, i);
        if (v == NULL) Py_CLEAR(t);
        else PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

static PyObject *
view_item(PyObject *m, weft_py_frame *f, Py_ssize_t i)
{
    return make_view(weft_py_state_of_module(m), f, i);
}

static PyObject *
address_item(PyObject *m, weft_py_frame *f, Py_ssize_t i)
{
    (void)m;
    return PyLong_FromVoidPtr(weft_ctx_data(f->ctx, (size_t)i));
}

static PyObject *
mod_views(PyObject *m, PyObject *args)
{
    return per_access(m, args, "|O:_views", "views", view_item);
}

static PyObject *
mod_addresses(PyObject *m, PyObject *args)
{
    return per_access(m, args, "|O:_addresses", "addresses", address_item);
}

int
weft_py_access_range(Py_ssize_t i, unsigned mode, weft_range *out, const char *what)
{
    weft_py_frame *f = weft_py_tl_frame;
    Py_ssize_t n = f && f->acc ? PyTuple_GET_SIZE(f->acc) : 0;
    if (i < 0 || i >= n) {
        PyErr_Format(PyExc_IndexError, "%s: the task has no data access %zd (it has %zd)", what, i, n);
        return -1;
    }
    if (i >= nnamed(f)) { /* a scratch buffer: all of it */
        void *p = weft_ctx_data(f->ctx, (size_t)i);
        if (p == NULL) {
            PyErr_Format(PyExc_RuntimeError, "%s: the task has no data access %zd", what, i);
            return -1;
        }
        *out = (weft_range){p, weft_ctx_bytes(f->ctx, (size_t)i), mode};
        return 0;
    }
    DataObject *d = (DataObject *)PyTuple_GET_ITEM(f->acc, i);
    if (d->parent) {
        PyErr_Format(PyExc_TypeError, "%s: access %zd is a tile's: name its view (ctx.view(%zd)) instead", what, i,
                     i);
        return -1;
    }
    void *p = weft_ctx_data(f->ctx, (size_t)i);
    if (p == NULL) {
        PyErr_Format(PyExc_RuntimeError, "%s: the task has no data access %zd", what, i);
        return -1;
    }
    *out = (weft_range){p, d->has_view ? (size_t)d->view.len : 0, mode};
    return 0;
}

static PyObject *
mod_scratch(PyObject *m, PyObject *args)
{
    Py_ssize_t k = 0;
    PyObject *task = Py_None;
    if (!PyArg_ParseTuple(args, "|nO:_scratch", &k, &task)) return NULL;
    weft_py_frame *f = current_frame(task, "scratch()");
    if (f == NULL) return NULL;
    if (k < 0 || (uint32_t)k >= f->nscratch) {
        PyErr_Format(PyExc_IndexError, "scratch(%zd): the task has %u scratch buffer%s (spawn(..., scratch=[...]))",
                     k, f->nscratch, f->nscratch == 1 ? "" : "s");
        return NULL;
    }
    return make_view(weft_py_state_of_module(m), f, nnamed(f) + k);
}

static PyObject *
mod_ctx_data(PyObject *m, PyObject *arg)
{
    (void)m;
    weft_py_frame *f = current_frame(NULL, "_ctx_data()");
    if (f == NULL) return NULL;
    Py_ssize_t i = PyLong_AsSsize_t(arg);
    if (i == -1 && PyErr_Occurred()) return NULL;
    void *p = i >= 0 ? weft_ctx_data(f->ctx, (size_t)i) : NULL;
    return p ? PyLong_FromVoidPtr(p) : Py_NewRef(Py_None);
}

static PyObject *
mod_frame_task(PyObject *m, PyObject *Py_UNUSED(ignored))
{
    (void)m;
    weft_py_frame *f = weft_py_tl_frame;
    return f ? PyLong_FromUnsignedLongLong(weft_ctx_task_id(f->ctx)) : PyLong_FromLong(0);
}

PyMethodDef weft_py_view_methods[] = {
    {"_view", (PyCFunction)mod_view, METH_VARARGS,
     "_view(which, task=None): a weft.View of the running body's access `which` (index, weft.Data or "
     "registered object); task: the C id the Context was made for (weft.Context.view)."},
    {"_views", (PyCFunction)mod_views, METH_VARARGS,
     "_views(task=None): a weft.View of each access of the running body (weft.Context.views)."},
    {"_scratch", (PyCFunction)mod_scratch, METH_VARARGS,
     "_scratch(k=0, task=None): a weft.View of the running body's scratch buffer k (weft.Context.scratch)."},
    {"_addresses", (PyCFunction)mod_addresses, METH_VARARGS,
     "_addresses(task=None): where each access of the running body is, as ints (weft.Context.addresses)."},
    {"_ctx_data", (PyCFunction)mod_ctx_data, METH_O,
     "_ctx_data(i): weft_ctx_data(ctx, i) of the running body as an int, or None (for tests)."},
    {"_frame_task", (PyCFunction)mod_frame_task, METH_NOARGS,
     "_frame_task(): the C id of the task whose body runs on this thread, or 0."},
    {NULL, NULL, 0, NULL}};
