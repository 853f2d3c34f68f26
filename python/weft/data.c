/*
 * data.c — buffer registration and the weft.Data type.
 *
 * Dependencies follow memory, not objects (issue 10): a runtime has one
 * weft.Data — one C handle — per registered range of memory [lo, hi), so two
 * objects whose buffers cover the same bytes (an array and memoryview(a),
 * two a[:4] views) share one Data, and a buffer over new memory gets a Data
 * of its own.  Ranges that overlap without being equal (a[:4], a[2:6] and a)
 * are ordered through the smaller one's handle:
 *
 *   - For two overlapping registered ranges S < L ("below": smaller, or as
 *     large and lower in memory), every task naming L names S's handle too
 *     (S is in L's `lower`), with its own mode.
 *   - Tasks on S cannot name L (or two disjoint tiles of L would be ordered
 *     through it), so S must start after L's earlier tasks instead.  Until
 *     then L is in S's `pending`, and S's tasks name L too.  The first task
 *     that writes S (W, RW or COMMUTE) is preceded by a hand-over task: a
 *     no-op C task with WEFT_RW on S and on each pending range, which
 *     follows every task spawned on them so far; S's later tasks follow it
 *     (through S), and `pending` is emptied.  Readers of S need no hand-over
 *     (naming L to read costs nothing), and no hand-over is spawned while a
 *     spawn that looked L up has not reached the C runtime yet (L->spawning):
 *     that spawn saw L's relations before S existed and names L, not S, so
 *     S's tasks keep naming L until it is in.  Hand-overs never block
 *     (WEFT_SPAWN_NOWAIT); under backpressure the next writer tries again.
 *   - Ranges that do not overlap share no handle: disjoint tiles of an array
 *     are independent, whatever else of the array is registered (unless a
 *     third registered range straddles them both: then it orders them).
 *
 * So any two tasks on overlapping memory, one of them writing, are ordered:
 * both name the smaller range's handle, or one follows a hand-over that
 * follows the other.  Unregistering a range (weft_py_data_unregister) first
 * marks it closing (new tasks naming it, and new ranges overlapping it, are
 * refused), then waits for a no-op task writing its handle (so every task
 * that named it has finished), then drops its relations, and only then
 * unregisters the C handle: nobody names it any more, except a spawn that
 * looked it up before and has not reached the C runtime; the C core fails
 * that spawn on the closed handle, and spawn.c looks its accesses up again
 * (weft_py_accs_stale).
 *
 * Atomic steps.  The registry (r->data_map, r->spans, the fields of each
 * Data below `dummy`) changes in a critical section on the runtime, and
 * each step that reads or changes it — entering a range (enter_range),
 * naming a Data for a spawn (data_use), unlinking one (unlink_range) — calls
 * nothing that could run Python code: no allocation of a GC-tracked object
 * (a collection could run finalizers), no buffer release, no reference
 * dropped that could free an object other than an int.  Relations are plain
 * arrays (PyMem) of borrowed pointers; dict keys are ints.  Between steps
 * anything may happen, and every step checks what it relies on again.
 */
#include "_weft.h"

int
weft_py_data_release(DataObject *d)
{
    /* Call with the C handle already unregistered and d->d cleared (or the
     * runtime gone), outside the registry's steps (a release may run Python
     * code).  Should two threads get here, one releases. */
    int mine = 0;
    WEFT_PY_CS_BEGIN(d)
    if (d->has_view) {
        d->has_view = 0;
        mine = 1;
    }
    WEFT_PY_CS_END();
    if (mine) PyBuffer_Release(&d->view);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The registry of ranges                                                    */
/* ------------------------------------------------------------------------ */

/* a is below b: smaller, or as large and lower in memory (a total order on
 * distinct ranges). */
static int
below(const DataObject *a, const DataObject *b)
{
    uintptr_t na = a->hi - a->lo, nb = b->hi - b->lo;
    return na < nb || (na == nb && a->lo < b->lo);
}

static int
overlap(const DataObject *a, uintptr_t lo, uintptr_t hi)
{
    return a->lo < hi && lo < a->hi;
}

/* First index of r->spans whose (lo, hi) is not less than (lo, hi). */
static size_t
spans_bisect(RuntimeObject *r, uintptr_t lo, uintptr_t hi)
{
    size_t a = 0, b = r->nspans;
    while (a < b) {
        size_t m = a + (b - a) / 2;
        DataObject *x = r->spans[m];
        if (x->lo < lo || (x->lo == lo && x->hi < hi)) a = m + 1;
        else b = m;
    }
    return a;
}

/* The Data registered for exactly [lo, hi), or NULL. */
static DataObject *
spans_find(RuntimeObject *r, uintptr_t lo, uintptr_t hi)
{
    size_t i = spans_bisect(r, lo, hi);
    if (i < r->nspans && r->spans[i]->lo == lo && r->spans[i]->hi == hi) return r->spans[i];
    return NULL;
}

/* The first index of r->spans that can overlap a range starting at lo:
 * every range before it ends at or before lo (none is longer than
 * max_span).  Scan from there while spans[i]->lo < hi. */
static size_t
spans_scan_start(RuntimeObject *r, uintptr_t lo)
{
    uintptr_t from = lo >= r->max_span ? lo - r->max_span + 1 : 0;
    return spans_bisect(r, from, 0);
}

/* Room for need pointers in *v (PyMem); 0, or -1 (nothing changed). */
static int
ptrs_reserve(DataObject ***v, size_t *cap, size_t need)
{
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 4;
    while (c < need) c *= 2;
    DataObject **nv = PyMem_Realloc(*v, c * sizeof *nv);
    if (nv == NULL) return -1;
    *v = nv;
    *cap = c;
    return 0;
}

static void
ptrs_remove(DataObject **v, size_t *n, DataObject *x)
{
    for (size_t i = 0; i < *n;)
        if (v[i] == x) {
            memmove(v + i, v + i + 1, (*n - i - 1) * sizeof *v);
            (*n)--;
        } else {
            i++;
        }
}

/* "[0x7f.., 0x7f..) (16 bytes)", for messages. */
static void
range_str(char *buf, size_t n, uintptr_t lo, uintptr_t hi)
{
    snprintf(buf, n, "[%#jx, %#jx) (%ju bytes)", (uintmax_t)lo, (uintmax_t)hi, (uintmax_t)(hi - lo));
}

/* Atomic step: enter d (registered in C, not yet in the registry) under
 * key k (id of d->obj): into data_map and, if it covers memory, into spans,
 * linked with every registered range it overlaps.  Returns d, or the Data
 * another thread entered for the same object or range meanwhile (then d is
 * left out, for the caller to drop), or NULL: an exception (a new range
 * overlapping one being unregistered, or out of memory; nothing changed). */
static DataObject *
enter_range(RuntimeObject *r, DataObject *d, PyObject *k, const char *what)
{
    DataObject *e = (DataObject *)PyDict_GetItemWithError(r->data_map, k);
    if (e != NULL || PyErr_Occurred()) return e;
    if (d->lo == d->hi) return PyDict_SetItem(r->data_map, k, (PyObject *)d) < 0 ? NULL : d;
    e = spans_find(r, d->lo, d->hi);
    if (e != NULL) return e;
    /* What it overlaps: room first, so that linking cannot fail half-way. */
    size_t start = spans_scan_start(r, d->lo), nabove = 0, nbelow = 0;
    for (size_t i = start; i < r->nspans && r->spans[i]->lo < d->hi; i++) {
        DataObject *y = r->spans[i];
        if (!overlap(y, d->lo, d->hi)) continue;
        if (y->closing) {
            char a[96], b[96];
            range_str(a, sizeof a, d->lo, d->hi);
            range_str(b, sizeof b, y->lo, y->hi);
            PyErr_Format(PyExc_ValueError, "%s: memory %s overlaps %s, which is being unregistered",
                         what, a, b);
            return NULL;
        }
        if (below(d, y)) {
            if (ptrs_reserve(&y->lower, &y->caplower, y->nlower + 1) < 0) goto nomem;
            nabove++;
        } else {
            nbelow++;
        }
    }
    if (ptrs_reserve(&d->lower, &d->caplower, nbelow) < 0 ||
        ptrs_reserve(&d->pending, &d->cappending, nabove) < 0 ||
        ptrs_reserve(&r->spans, &r->capspans, r->nspans + 1) < 0)
        goto nomem;
    if (PyDict_SetItem(r->data_map, k, (PyObject *)d) < 0) return NULL;
    for (size_t i = start; i < r->nspans && r->spans[i]->lo < d->hi; i++) {
        DataObject *y = r->spans[i];
        if (!overlap(y, d->lo, d->hi)) continue;
        if (below(d, y)) {
            y->lower[y->nlower++] = d;
            d->pending[d->npending++] = y;
        } else {
            d->lower[d->nlower++] = y;
        }
    }
    size_t at = spans_bisect(r, d->lo, d->hi);
    memmove(r->spans + at + 1, r->spans + at, (r->nspans - at) * sizeof *r->spans);
    r->spans[at] = d;
    r->nspans++;
    if (d->hi - d->lo > r->max_span) r->max_span = d->hi - d->lo;
    return d;
nomem:
    PyErr_NoMemory();
    return NULL;
}

/* Atomic step: no Data lists d any more, nor d any other. */
static void
unlink_range(RuntimeObject *r, DataObject *d)
{
    if (d->lo != d->hi)
        for (size_t i = spans_scan_start(r, d->lo); i < r->nspans && r->spans[i]->lo < d->hi; i++) {
            DataObject *y = r->spans[i];
            ptrs_remove(y->lower, &y->nlower, d);
            ptrs_remove(y->pending, &y->npending, d);
        }
    d->nlower = d->npending = 0;
}

/* Atomic step: take d (unlinked) out of spans and data_map.  The dict drops
 * its reference: the caller holds one. */
static void
leave_registry(RuntimeObject *r, DataObject *d)
{
    if (d->lo != d->hi) {
        size_t i = spans_bisect(r, d->lo, d->hi);
        if (i < r->nspans && r->spans[i] == d) {
            memmove(r->spans + i, r->spans + i + 1, (r->nspans - i - 1) * sizeof *r->spans);
            r->nspans--;
            if (d->hi - d->lo == r->max_span) {
                r->max_span = 0;
                for (size_t j = 0; j < r->nspans; j++)
                    if (r->spans[j]->hi - r->spans[j]->lo > r->max_span)
                        r->max_span = r->spans[j]->hi - r->spans[j]->lo;
            }
        }
    }
    if (r->data_map && d->obj) {
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
}

void
weft_py_data_forget_all(RuntimeObject *r)
{
    PyObject *handles = NULL;
    WEFT_PY_CS_BEGIN(r)
    handles = PyDict_Values(r->data_map);
    if (handles) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(handles); i++) {
            DataObject *d = (DataObject *)PyList_GET_ITEM(handles, i);
            d->nlower = d->npending = 0;
            d->closing = 0;
            d->d = NULL;
        }
    } else {
        PyErr_Clear();
    }
    r->nspans = 0;
    r->max_span = 0;
    PyDict_Clear(r->data_map);
    WEFT_PY_CS_END();
    /* Buffers are released outside the registry's steps (a release may run
     * Python code). */
    if (handles) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(handles); i++)
            weft_py_data_release((DataObject *)PyList_GET_ITEM(handles, i));
        Py_DECREF(handles);
    }
}

/* ------------------------------------------------------------------------ */
/* No-op tasks: hand-overs and unregister's probe                            */
/* ------------------------------------------------------------------------ */

static int
noop_body(weft_ctx *ctx, void *arg)
{
    (void)ctx;
    (void)arg;
    return 0;
}

/* Spawn a no-op task with these accesses; nowait: only if that cannot
 * block (WEFT_EAGAIN otherwise), with the GIL kept; else the GIL is
 * released for a spawn that may block.  A Weft code; no Python exception. */
static int
spawn_noop(RuntimeObject *r, const weft_access *acc, size_t n, const char *name, int nowait,
           weft_task **out)
{
    weft_runtime *rt = r->rt;
    if (rt == NULL) return WEFT_ECLOSED;
    weft_task_desc desc;
    weft_task_desc_init(&desc);
    desc.body = noop_body;
    desc.accesses = acc;
    desc.naccesses = n;
    desc.name = name;
    int rc;
    if (nowait) {
        desc.flags = WEFT_SPAWN_NOWAIT;
        int prev = weft_py_tl_attached;
        weft_py_tl_attached = 1;
        rc = weft_spawn(rt, &desc, out);
        weft_py_tl_attached = prev;
    } else {
        BEGIN_NOGIL_W
        rc = weft_spawn(rt, &desc, out);
        END_NOGIL_W
    }
    return rc;
}

/* Part of data_use's step: the hand-over that lets d's tasks stop naming
 * the ranges in d->pending (see the top of the file).  Not while a spawn
 * that looked one of them up is in progress; never blocks; if it cannot be
 * spawned now, d's tasks go on naming them and the next writer tries again. */
static void
try_hand_over(RuntimeObject *r, DataObject *d)
{
    for (size_t i = 0; i < d->npending; i++)
        if (d->pending[i]->spawning > 0) return;
    weft_access small[8], *acc = small;
    size_t n = d->npending + 1;
    if (n > 8) {
        acc = PyMem_Malloc(n * sizeof *acc);
        if (acc == NULL) return;
    }
    acc[0].data = d->d;
    acc[0].mode = WEFT_RW | WEFT_HOST;
    for (size_t i = 0; i < d->npending; i++) {
        acc[i + 1].data = d->pending[i]->d;
        acc[i + 1].mode = WEFT_RW | WEFT_HOST;
    }
    if (spawn_noop(r, acc, n, "weft.py hand-over", 1, NULL) == 0) d->npending = 0;
    if (acc != small) PyMem_Free(acc);
}

/* ------------------------------------------------------------------------ */
/* Lookup                                                                    */
/* ------------------------------------------------------------------------ */

/* A new Data for obj, holding its buffer (view, moved in) and a C handle for
 * the memory; not in the registry.  NULL with an exception (the view is
 * released). */
static DataObject *
data_new(RuntimeObject *r, PyObject *obj, Py_buffer *view, int readonly)
{
    DataObject *d = PyObject_GC_New(DataObject, r->st->Data_T);
    if (d == NULL) {
        PyBuffer_Release(view);
        return NULL;
    }
    d->rt = (RuntimeObject *)Py_NewRef(r);
    d->obj = Py_NewRef(obj);
    d->view = *view;
    d->has_view = 1;
    d->readonly = readonly;
    d->d = NULL;
    d->lo = (uintptr_t)view->buf;
    d->hi = d->lo + (uintptr_t)view->len;
    if (view->buf == NULL || view->len == 0) d->lo = d->hi = 0;
    d->closing = 0;
    d->spawning = 0;
    d->lower = d->pending = NULL;
    d->nlower = d->caplower = d->npending = d->cappending = 0;
    PyObject_GC_Track(d);
    void *p = d->view.buf;
    size_t n = (size_t)d->view.len;
    if (p == NULL || n == 0) {
        p = &d->dummy;
        n = 1;
    }
    weft_runtime *rt = r->rt;
    int rc = rt ? weft_data_register(rt, p, n, &d->d) : WEFT_ECLOSED;
    if (rc != 0) {
        Py_DECREF(d);
        return (DataObject *)weft_py_err_weft(rc, "registering data");
    }
    return d;
}

/* Drop a Data that never entered the registry. */
static void
data_discard(DataObject *d)
{
    if (d->d) {
        int rc = weft_data_unregister(d->d); /* nothing uses it: returns at once */
        (void)rc;
        d->d = NULL;
    }
    weft_py_data_release(d);
    Py_DECREF(d);
}

/* Get obj's buffer, writable if it can be; -1 with an exception. */
static int
get_buffer(PyObject *obj, Py_buffer *view, int *readonly, const char *what)
{
    if (!PyObject_CheckBuffer(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "%s: expected a weft.Data or an object supporting the buffer "
                     "protocol (bytearray, memoryview, numpy array...), got '%.100s'",
                     what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    *readonly = 0;
    if (PyObject_GetBuffer(obj, view, PyBUF_ANY_CONTIGUOUS | PyBUF_WRITABLE) == 0) return 0;
    PyErr_Clear();
    if (PyObject_GetBuffer(obj, view, PyBUF_ANY_CONTIGUOUS) < 0) {
        PyObject *cause = weft_py_fetch_exc();
        PyErr_Format(PyExc_ValueError, "%s: '%.100s' object does not export a contiguous buffer",
                     what, Py_TYPE(obj)->tp_name);
        if (cause) {
            PyObject *e = weft_py_fetch_exc();
            PyException_SetCause(e, cause);
            weft_py_raise_exc(e);
            Py_DECREF(e);
        }
        return -1;
    }
    *readonly = 1;
    return 0;
}

static PyObject *
err_read_only(PyObject *obj, const char *what)
{
    PyErr_Format(PyExc_ValueError, "%s: '%.100s' buffer is read-only and cannot be written", what,
                 Py_TYPE(obj)->tp_name);
    return NULL;
}

/* The Data of buffer object obj: the one registered under obj itself, else
 * the one of the memory its buffer covers, else a new one (registered).  A
 * new reference, or NULL with an exception.  register_ok: register it if
 * none is; else NULL with no exception.  want_write: obj's buffer must be
 * writable.  In a critical section on r. */
static DataObject *
data_of_object(RuntimeObject *r, PyObject *obj, const char *what, int want_write, int register_ok)
{
    PyObject *k = PyLong_FromVoidPtr(obj);
    if (k == NULL) return NULL;
    /* The object a Data holds covers the memory the Data was made for (its
     * buffer stays exported): the common case is one dict look-up. */
    DataObject *d = (DataObject *)PyDict_GetItemWithError(r->data_map, k);
    if (d != NULL) {
        Py_DECREF(k);
        if (d->obj != obj) { /* stale entry: cannot happen while d holds obj */
            PyErr_Format(PyExc_RuntimeError, "%s: data registry corrupted", what);
            return NULL;
        }
        if (want_write && d->readonly) return (DataObject *)err_read_only(obj, what);
        return (DataObject *)Py_NewRef(d);
    }
    if (PyErr_Occurred()) {
        Py_DECREF(k);
        return NULL;
    }
    Py_buffer view;
    int readonly;
    if (get_buffer(obj, &view, &readonly, what) < 0) {
        Py_DECREF(k);
        return NULL;
    }
    if (want_write && readonly) {
        PyBuffer_Release(&view);
        Py_DECREF(k);
        return (DataObject *)err_read_only(obj, what);
    }
    if (view.buf != NULL && view.len > 0) {
        /* Memory registered through another object. */
        d = spans_find(r, (uintptr_t)view.buf, (uintptr_t)view.buf + (uintptr_t)view.len);
        if (d != NULL || !register_ok) {
            Py_XINCREF(d);
            Py_DECREF(k);
            PyBuffer_Release(&view);
            return d;
        }
    } else if (!register_ok) {
        Py_DECREF(k);
        PyBuffer_Release(&view);
        return NULL;
    }
    d = data_new(r, obj, &view, readonly);
    if (d == NULL) {
        Py_DECREF(k);
        return NULL;
    }
    DataObject *e = enter_range(r, d, k, what);
    Py_DECREF(k);
    if (e != d) {
        /* Another thread entered it first (or an error): use that one. */
        PyObject *exc = e ? NULL : weft_py_fetch_exc();
        Py_XINCREF(e);
        data_discard(d);
        if (exc) {
            weft_py_raise_exc(exc);
            Py_DECREF(exc);
        }
        return e;
    }
    return d; /* the registry holds one reference, the caller this one */
}

DataObject *
weft_py_data_lookup(RuntimeObject *r, PyObject *obj, const char *what)
{
    DataObject *d = NULL;
    if (Py_IS_TYPE(obj, r->st->Data_T)) {
        d = (DataObject *)obj;
        if (d->rt != r) {
            PyErr_Format(PyExc_ValueError, "%s: this weft.Data belongs to another runtime", what);
            return NULL;
        }
        return (DataObject *)Py_NewRef(d);
    }
    WEFT_PY_CS_BEGIN(r)
    d = data_of_object(r, obj, what, 0, 1);
    WEFT_PY_CS_END();
    return d;
}

DataObject *
weft_py_data_find(RuntimeObject *r, PyObject *obj, const char *what)
{
    DataObject *d = NULL;
    if (Py_IS_TYPE(obj, r->st->Data_T)) return (DataObject *)Py_NewRef(obj);
    WEFT_PY_CS_BEGIN(r)
    d = data_of_object(r, obj, what, 0, 0);
    WEFT_PY_CS_END();
    if (d == NULL && !PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "%s: this '%.100s' object is not registered", what,
                     Py_TYPE(obj)->tp_name);
    return d;
}

/* ------------------------------------------------------------------------ */
/* The accesses of a spawn                                                   */
/* ------------------------------------------------------------------------ */

void
weft_py_accs_init(weft_py_accs *a)
{
    a->acc = a->acc_small;
    a->dat = a->dat_small;
    a->n = 0;
    a->cap = WEFT_PY_ACCS_SMALL;
}

static int
accs_reserve(weft_py_accs *a, size_t need)
{
    if (need <= a->cap) return 0;
    size_t c = a->cap * 2;
    while (c < need) c *= 2;
    weft_access *acc = PyMem_Malloc(c * sizeof *acc);
    DataObject **dat = PyMem_Malloc(c * sizeof *dat);
    if (acc == NULL || dat == NULL) {
        PyMem_Free(acc);
        PyMem_Free(dat);
        PyErr_NoMemory();
        return -1;
    }
    memcpy(acc, a->acc, a->n * sizeof *acc);
    memcpy(dat, a->dat, a->n * sizeof *dat);
    if (a->acc != a->acc_small) PyMem_Free(a->acc);
    if (a->dat != a->dat_small) PyMem_Free(a->dat);
    a->acc = acc;
    a->dat = dat;
    a->cap = c;
    return 0;
}

static void
accs_push(weft_py_accs *a, DataObject *d, unsigned mode)
{
    a->acc[a->n].data = d->d;
    a->acc[a->n].mode = mode;
    a->dat[a->n] = (DataObject *)Py_NewRef(d);
    d->spawning++;
    a->n++;
}

/* Atomic step: name d for a spawn with mode — d's own handle, then its
 * relations (a hand-over first, for a writer of a range with pending
 * ones). */
static int
data_use(RuntimeObject *r, DataObject *d, unsigned mode, weft_py_accs *a, const char *what, int given)
{
    if (d->d == NULL || r->rt == NULL) {
        PyErr_Format(PyExc_ValueError, "%s: this %s was unregistered", what,
                     given ? "weft.Data" : "object's data");
        return -1;
    }
    if (d->closing) {
        char b[96];
        range_str(b, sizeof b, d->lo, d->hi);
        PyErr_Format(PyExc_ValueError, "%s: this %s is being unregistered (memory %s)", what,
                     given ? "weft.Data" : "object's data", b);
        return -1;
    }
    if (d->npending && (mode & WEFT_W)) try_hand_over(r, d);
    if (accs_reserve(a, a->n + 1 + d->nlower + d->npending) < 0) return -1;
    accs_push(a, d, mode);
    for (size_t i = 0; i < d->nlower; i++) accs_push(a, d->lower[i], mode);
    for (size_t i = 0; i < d->npending; i++) accs_push(a, d->pending[i], mode);
    return 0;
}

int
weft_py_data_accesses(RuntimeObject *r, PyObject *obj, const char *what, unsigned mode, weft_py_accs *a)
{
    DataObject *d;
    int given = Py_IS_TYPE(obj, r->st->Data_T);
    if (given) {
        d = (DataObject *)obj;
        if (d->rt != r) {
            PyErr_Format(PyExc_ValueError, "%s: this weft.Data belongs to another runtime", what);
            return -1;
        }
        if ((mode & WEFT_W) && d->readonly) {
            err_read_only(d->obj, what);
            return -1;
        }
        Py_INCREF(d);
    } else {
        d = data_of_object(r, obj, what, (mode & WEFT_W) != 0, 1);
        if (d == NULL) return -1;
    }
    int rc = data_use(r, d, mode, a, what, given);
    Py_DECREF(d);
    return rc;
}

int
weft_py_accs_stale(const weft_py_accs *a)
{
    for (size_t i = 0; i < a->n; i++)
        if (a->dat[i]->closing || a->dat[i]->d == NULL) return 1;
    return 0;
}

void
weft_py_accs_clear(weft_py_accs *a)
{
    for (size_t i = 0; i < a->n; i++) a->dat[i]->spawning--;
    size_t n = a->n;
    a->n = 0;
    for (size_t i = 0; i < n; i++) Py_DECREF(a->dat[i]);
}

void
weft_py_accs_free(weft_py_accs *a)
{
    if (a->acc != a->acc_small) PyMem_Free(a->acc);
    if (a->dat != a->dat_small) PyMem_Free(a->dat);
    weft_py_accs_init(a);
}

/* ------------------------------------------------------------------------ */
/* Unregistering                                                             */
/* ------------------------------------------------------------------------ */

int
weft_py_data_unregister(DataObject *d)
{
    RuntimeObject *r = d->rt;
    weft_data *h = NULL;
    int busy = 0, rc;
    Py_INCREF(d);
    WEFT_PY_CS_BEGIN(r)
    if (d->d != NULL && r->rt != NULL) {
        if (d->closing) {
            busy = 1;
        } else {
            d->closing = 1; /* no new task names it, no new range overlaps it */
            h = d->d;
        }
    }
    WEFT_PY_CS_END();
    if (busy) {
        PyErr_SetString(PyExc_ValueError, "unregister(): this data is already being unregistered");
        goto fail;
    }
    if (h == NULL) goto out; /* unregistered already, or the runtime closed (which releases it) */

    /* Wait for every task that names it, explicitly or through an
     * overlapping range: they all come before a task that writes it. */
    weft_access acc = {h, WEFT_RW | WEFT_HOST};
    weft_task *probe = NULL;
    rc = spawn_noop(r, &acc, 1, "weft.py unregister", 0, &probe);
    if (rc == 0) {
        BEGIN_NOGIL_W
        rc = weft_task_wait(probe);
        END_NOGIL_W
        weft_task_release(probe);
        if (rc == WEFT_ETASKFAILED || rc == WEFT_ECANCELLED) rc = 0; /* it finished */
    }
    if (rc != 0) {
        WEFT_PY_CS_BEGIN(r)
        d->closing = 0;
        WEFT_PY_CS_END();
        if (r->rt == NULL) goto out; /* closed meanwhile: close releases it */
        if (rc == WEFT_EDEADLK || rc == WEFT_EBUSY)
            PyErr_SetString(PyExc_RuntimeError, "unregister(): the calling task itself accesses this "
                            "data (or waits for a task that does)");
        else
            weft_py_err_weft(rc, "unregister()");
        goto fail;
    }

    /* Nobody names it from now on but spawns that looked it up before
     * (spawn.c looks their accesses up again if the C core refuses them). */
    WEFT_PY_CS_BEGIN(r)
    unlink_range(r, d);
    WEFT_PY_CS_END();
    if (weft_py_tl_ts != NULL) {
        BEGIN_NOGIL_W
        rc = weft_data_unregister(h);
        END_NOGIL_W
    } else {
        BEGIN_NOGIL
        rc = weft_data_unregister(h);
        END_NOGIL
    }
    if (rc != 0 && r->rt == NULL) goto out;
    if (rc != 0) {
        /* Not expected (the wait above would have failed first); it stays
         * closing: unlinked, it could not be ordered any more. */
        if (rc == WEFT_EBUSY)
            PyErr_SetString(PyExc_RuntimeError,
                            "unregister(): the calling task itself accesses this data");
        else
            weft_py_err_weft(rc, "unregister()");
        goto fail;
    }
    WEFT_PY_CS_BEGIN(r)
    leave_registry(r, d);
    d->closing = 0;
    d->d = NULL;
    WEFT_PY_CS_END();
    weft_py_data_release(d);
out:
    Py_DECREF(d);
    return 0;
fail:
    Py_DECREF(d);
    return -1;
}

/* ------------------------------------------------------------------------ */
/* Data type                                                                 */
/* ------------------------------------------------------------------------ */

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
    PyMem_Free(d->lower);
    PyMem_Free(d->pending);
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
    const char *state;
    Py_ssize_t len;
    WEFT_PY_CS_BEGIN(d->rt) /* closing and d belong to the registry */
    state = d->d == NULL ? ", unregistered" : d->closing ? ", being unregistered" : "";
    len = d->has_view ? d->view.len : (Py_ssize_t)0;
    WEFT_PY_CS_END();
    return PyUnicode_FromFormat("<weft.Data of '%s', %zd bytes%s>", Py_TYPE(d->obj)->tp_name, len, state);
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
