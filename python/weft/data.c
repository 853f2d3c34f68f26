/*
 * data.c — the registry of memory ranges: one weft.Data (one C handle) per
 * registered range [lo, hi); register, look up, unregister; its lock.
 *
 * Dependencies follow memory, not objects, and the C core keeps them: it
 * orders tasks on handles over overlapping memory (weft_data_register in
 * weft.h, src/data/overlap.h) and refuses what such handles cannot do.
 * The registry keeps what is Python's own: two objects whose buffers cover
 * the same bytes (an array and memoryview(a), two a[:4] views) share one
 * Data, a buffer over other memory (a[2:6]) gets a Data of its own, the
 * buffers stay pinned while registered, and errors are raised in Python's
 * terms.  Unregistering a range (weft_py_data_unregister) marks it closing
 * (new tasks naming it are refused; a range overlapping it may be
 * registered: the core orders its tasks after the closing one's), waits
 * for a no-op task writing its handle, then unregisters the C handle.  A
 * spawn that looked it up before and has not reached the C runtime is
 * failed by the core on the closed handle, and spawn.c looks its accesses
 * up again (weft_py_accs_stale).  Beside it: the type (data_type.c), the
 * accesses of a spawn (accesses.c), tiles (tiles.c), scratch= handles
 * (scratch.c).
 *
 * Atomic steps.  The registry (r->reg, and the fields of each Data that
 * _weft.h puts under it) changes only under r->reg.lock, a plain mutex
 * (weft_py_reg_lock), and each step under it (entering a range, naming a
 * Data for a spawn, leaving) is plain C: no Python API that could run
 * Python code, block, or let the thread detach (no Python allocation, no
 * reference dropped, no exception raised: a step returns what went wrong
 * and its caller raises after unlocking).  The Python work around the
 * steps (getting a buffer, making a Data, registering its memory with the
 * C core, releasing a buffer, dropping references) happens with the lock
 * released; between steps anything may happen, and every step checks what
 * it relies on again.  Not a critical section: CPython suspends one
 * whenever the thread blocks inside it, and a step would then not be
 * atomic on the free-threaded build.
 */
#include "_weft.h"

/* ------------------------------------------------------------------------ */
/* What a step found wrong, raised                                           */
/* ------------------------------------------------------------------------ */

/* "[0x7f.., 0x7f..) (16 bytes)", for messages. */
static void
range_str(char *buf, size_t n, uintptr_t lo, uintptr_t hi)
{
    snprintf(buf, n, "[%#jx, %#jx) (%ju bytes)", (uintmax_t)lo, (uintmax_t)hi, (uintmax_t)(hi - lo));
}

void
weft_py_reg_raise(const reg_err *e, const char *what, int given)
{
    char a[96], b[96];
    const char *which = given ? "weft.Data" : "object's data";
    switch (e->kind) {
    case REG_NOMEM:
        PyErr_NoMemory();
        break;
    case REG_CLOSED:
        PyErr_Format(PyExc_RuntimeError, "%s: the weft runtime is closed", what);
        break;
    case REG_UNREGISTERED:
        PyErr_Format(PyExc_ValueError, "%s: this %s was unregistered", what, which);
        break;
    case REG_CLOSING:
        range_str(b, sizeof b, e->lo, e->hi);
        PyErr_Format(PyExc_ValueError, "%s: this %s is being unregistered (memory %s)", what, which, b);
        break;
    case REG_DEVICE_OVERLAP:
        range_str(b, sizeof b, e->lo, e->hi);
        PyErr_Format(PyExc_ValueError,
                     "%s: device_data=True needs memory registered as one range, but this %s "
                     "(memory %s) overlaps other registered ranges; name the whole array "
                     "only, or run the task with device_data=False", what, which, b);
        break;
    case REG_PARTITIONED:
        range_str(a, sizeof a, e->lo, e->hi);
        range_str(b, sizeof b, e->olo, e->ohi);
        PyErr_Format(PyExc_ValueError,
                     "%s: memory %s overlaps %s, which is partitioned into tiles: name the whole "
                     "array or its tiles, not another view of part of it", what, a, b);
        break;
    case REG_COMM_OVERLAP:
        range_str(b, sizeof b, e->lo, e->hi);
        PyErr_Format(PyExc_ValueError,
                     "%s: a communication buffer needs memory registered as one range, but this %s "
                     "(memory %s) overlaps other registered ranges (the operation's task would not be "
                     "ordered with their tasks); communicate the whole array only, or unregister the "
                     "overlapping views first", what, which, b);
        break;
    default:
        break;
    }
}

/* Release d's buffer (its C handle already unregistered, or the runtime
 * gone); once, whoever asks.  May run Python code. */
static int
data_release(DataObject *d)
{
    /* Call with the C handle already unregistered and d->d cleared (or the
     * runtime gone).  Should two threads get here, one releases, with the
     * lock released (a release may run Python code). */
    RuntimeObject *r = d->rt;
    weft_py_reg_lock(r);
    int mine = d->has_view;
    d->has_view = 0;
    weft_py_reg_unlock(r);
    if (mine) PyBuffer_Release(&d->view);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The registry: objects and ranges (plain C, under the lock)                */
/* ------------------------------------------------------------------------ */

void
weft_py_registry_init(RuntimeObject *r)
{
    weft_py_registry *g = &r->reg;
    pthread_mutex_init(&g->lock, NULL);
    g->objs = NULL;
    g->objcap = g->nobjs = 0;
    g->spans = NULL;
    g->nspans = g->capspans = g->max_span = 0;
    g->scratch = NULL;
    g->nscratch = g->capscratch = 0;
}

/* After weft_py_registry_clear (nothing is listed any more). */
void
weft_py_registry_fini(RuntimeObject *r)
{
    free(r->reg.objs);
    free(r->reg.spans);
    free(r->reg.scratch);
    r->reg.objs = NULL;
    r->reg.spans = NULL;
    r->reg.scratch = NULL;
    pthread_mutex_destroy(&r->reg.lock);
}

/* The home slot of key in a table of cap (a power of two) slots. */
static size_t
obj_home(const PyObject *key, size_t cap)
{
    uint64_t h = (uint64_t)((uintptr_t)key >> 4) * UINT64_C(0x9E3779B97F4A7C15);
    return (size_t)(h ^ (h >> 32)) & (cap - 1);
}

/* The Data registered under object key, or NULL. */
static DataObject *
objs_find(const weft_py_registry *g, const PyObject *key)
{
    if (g->objcap == 0) return NULL;
    for (size_t i = obj_home(key, g->objcap);; i = (i + 1) & (g->objcap - 1)) {
        if (g->objs[i].key == key) return g->objs[i].data;
        if (g->objs[i].key == NULL) return NULL;
    }
}

/* Put (key, d) into v (cap slots, key absent, a free slot left). */
static void
objs_put(weft_py_objslot *v, size_t cap, PyObject *key, DataObject *d)
{
    size_t i = obj_home(key, cap);
    while (v[i].key != NULL) i = (i + 1) & (cap - 1);
    v[i].key = key;
    v[i].data = d;
}

/* Room for one more object (at most half the slots used); 0, or -1
 * (nothing changed). */
static int
objs_reserve(weft_py_registry *g)
{
    if (2 * (g->nobjs + 1) <= g->objcap) return 0;
    size_t cap = g->objcap ? 2 * g->objcap : 16;
    weft_py_objslot *v = calloc(cap, sizeof *v);
    if (v == NULL) return -1;
    for (size_t i = 0; i < g->objcap; i++)
        if (g->objs[i].key != NULL) objs_put(v, cap, g->objs[i].key, g->objs[i].data);
    free(g->objs);
    g->objs = v;
    g->objcap = cap;
    return 0;
}

/* Take key out if d is listed under it; 1 if it was.  Linear probing
 * deletes by shifting the rest of the run back, so no slot is ever a
 * tombstone. */
static int
objs_remove(weft_py_registry *g, const PyObject *key, const DataObject *d)
{
    if (g->objcap == 0) return 0;
    size_t mask = g->objcap - 1, i = obj_home(key, g->objcap);
    while (g->objs[i].key != key) {
        if (g->objs[i].key == NULL) return 0;
        i = (i + 1) & mask;
    }
    if (g->objs[i].data != d) return 0;
    /* i is the hole: an entry further on moves into it when its home is
     * not after the hole (its probe from home passes the hole). */
    for (size_t j = (i + 1) & mask; g->objs[j].key != NULL; j = (j + 1) & mask) {
        size_t home = obj_home(g->objs[j].key, g->objcap);
        if (((j - home) & mask) >= ((j - i) & mask)) {
            g->objs[i] = g->objs[j];
            i = j;
        }
    }
    g->objs[i].key = NULL;
    g->objs[i].data = NULL;
    g->nobjs--;
    return 1;
}

static int
overlap(const DataObject *a, uintptr_t lo, uintptr_t hi)
{
    return a->lo < hi && lo < a->hi;
}

/* First index of g->spans whose (lo, hi) is not less than (lo, hi). */
static size_t
spans_bisect(const weft_py_registry *g, uintptr_t lo, uintptr_t hi)
{
    size_t a = 0, b = g->nspans;
    while (a < b) {
        size_t m = a + (b - a) / 2;
        DataObject *x = g->spans[m];
        if (x->lo < lo || (x->lo == lo && x->hi < hi)) a = m + 1;
        else b = m;
    }
    return a;
}

/* The Data registered for exactly [lo, hi), or NULL. */
static DataObject *
spans_find(const weft_py_registry *g, uintptr_t lo, uintptr_t hi)
{
    size_t i = spans_bisect(g, lo, hi);
    if (i < g->nspans && g->spans[i]->lo == lo && g->spans[i]->hi == hi) return g->spans[i];
    return NULL;
}

/* The first index of g->spans that can overlap a range starting at lo:
 * every range before it ends at or before lo (none is longer than
 * max_span).  Scan from there while spans[i]->lo < hi. */
static size_t
spans_scan_start(const weft_py_registry *g, uintptr_t lo)
{
    uintptr_t from = lo >= g->max_span ? lo - g->max_span + 1 : 0;
    return spans_bisect(g, from, 0);
}

/* Room for one more span; 0, or -1 (nothing changed). */
static int
spans_reserve(weft_py_registry *g)
{
    if (g->nspans < g->capspans) return 0;
    size_t c = g->capspans ? g->capspans * 2 : 16;
    DataObject **v = realloc(g->spans, c * sizeof *v);
    if (v == NULL) return -1;
    g->spans = v;
    g->capspans = c;
    return 0;
}

int
weft_py_registry_overlaps(const weft_py_registry *g, const DataObject *d)
{
    if (d->lo == d->hi) return 0;
    for (size_t i = spans_scan_start(g, d->lo); i < g->nspans && g->spans[i]->lo < d->hi; i++)
        if (g->spans[i] != d && overlap(g->spans[i], d->lo, d->hi)) return 1;
    return 0;
}

/* Step: enter d (made and registered in C, not yet in the registry) under
 * its object and, if it covers memory, into spans, linked with every
 * registered range it overlaps.  Returns d (the registry now holds a
 * reference to it), or the Data another thread entered for the same object
 * or range meanwhile (a new reference; d stays out, for the caller to
 * drop), or NULL with *err (nothing changed). */
static DataObject *
enter_range(RuntimeObject *r, DataObject *d, reg_err *err)
{
    weft_py_registry *g = &r->reg;
    if (r->rt == NULL) { /* closed: weft_py_data_forget_all emptied it for good */
        err->kind = REG_CLOSED;
        return NULL;
    }
    DataObject *e = objs_find(g, d->obj);
    if (e == NULL && d->lo != d->hi) e = spans_find(g, d->lo, d->hi);
    if (e != NULL) {
        Py_INCREF(e);
        return e;
    }
    /* Room first, so that linking cannot fail half-way. */
    if (objs_reserve(g) < 0) goto nomem;
    if (d->lo == d->hi) {
        objs_put(g->objs, g->objcap, d->obj, d);
        g->nobjs++;
        Py_INCREF(d);
        return d;
    }
    /* A range over a partitioned one is refused here, naming both (the
     * core refuses it too); one over a range being unregistered is fine:
     * the core orders its tasks after the closing handle's. */
    for (size_t i = spans_scan_start(g, d->lo); i < g->nspans && g->spans[i]->lo < d->hi; i++) {
        DataObject *y = g->spans[i];
        if (overlap(y, d->lo, d->hi) && (y->tiles != NULL || y->partitioning)) {
            err->kind = REG_PARTITIONED;
            err->lo = d->lo;
            err->hi = d->hi;
            err->olo = y->lo;
            err->ohi = y->hi;
            return NULL;
        }
    }
    if (spans_reserve(g) < 0) goto nomem;
    objs_put(g->objs, g->objcap, d->obj, d);
    g->nobjs++;
    size_t at = spans_bisect(g, d->lo, d->hi);
    memmove(g->spans + at + 1, g->spans + at, (g->nspans - at) * sizeof *g->spans);
    g->spans[at] = d;
    g->nspans++;
    if (d->hi - d->lo > g->max_span) g->max_span = d->hi - d->lo;
    Py_INCREF(d);
    return d;
nomem:
    err->kind = REG_NOMEM;
    return NULL;
}

/* Step: take d (unlinked) out of spans and objs.  1 if the registry held
 * it: the caller drops that reference once the lock is released. */
static int
leave_registry(RuntimeObject *r, DataObject *d)
{
    weft_py_registry *g = &r->reg;
    if (d->lo != d->hi) {
        size_t i = spans_bisect(g, d->lo, d->hi);
        if (i < g->nspans && g->spans[i] == d) {
            memmove(g->spans + i, g->spans + i + 1, (g->nspans - i - 1) * sizeof *g->spans);
            g->nspans--;
            if (d->hi - d->lo == g->max_span) {
                g->max_span = 0;
                for (size_t j = 0; j < g->nspans; j++)
                    if (g->spans[j]->hi - g->spans[j]->lo > g->max_span)
                        g->max_span = g->spans[j]->hi - g->spans[j]->lo;
            }
        }
    }
    return objs_remove(g, d->obj, d);
}

/* Step: empty the registry; returns its table of objects (cap slots) for
 * the caller to drop, with the lock released. */
static weft_py_objslot *
take_all(RuntimeObject *r, size_t *cap, int unregistered)
{
    weft_py_registry *g = &r->reg;
    weft_py_objslot *objs = g->objs;
    *cap = g->objcap;
    g->objs = NULL;
    g->objcap = g->nobjs = 0;
    g->nspans = 0;
    g->max_span = 0;
    for (size_t i = 0; i < *cap; i++) {
        DataObject *d = objs[i].data;
        if (objs[i].key == NULL) continue;
        if (unregistered) {
            d->closing = 0;
            d->d = NULL;
            weft_py_tiles_forget(d);
        }
    }
    return objs;
}

void
weft_py_data_forget_all(RuntimeObject *r)
{
    size_t cap;
    weft_py_reg_lock(r);
    weft_py_objslot *objs = take_all(r, &cap, 1);
    r->reg.nscratch = 0; /* (the scratch handles went with the C runtime) */
    weft_py_reg_unlock(r);
    /* Buffers are released, and the registry's references dropped, with the
     * lock released (either may run Python code). */
    for (size_t i = 0; i < cap; i++)
        if (objs[i].key != NULL) {
            data_release(objs[i].data);
            Py_DECREF(objs[i].data);
        }
    free(objs);
}

int
weft_py_registry_traverse(RuntimeObject *r, visitproc visit, void *arg)
{
    /* Without the lock: the collector traverses with the world stopped (or
     * the GIL held), and no thread stops inside a step. */
    weft_py_registry *g = &r->reg;
    for (size_t i = 0; i < g->objcap; i++)
        if (g->objs[i].key != NULL) Py_VISIT(g->objs[i].data);
    return 0;
}

void
weft_py_registry_clear(RuntimeObject *r)
{
    size_t cap;
    weft_py_reg_lock(r);
    weft_py_objslot *objs = take_all(r, &cap, 0);
    weft_py_reg_unlock(r);
    for (size_t i = 0; i < cap; i++)
        if (objs[i].key != NULL) Py_DECREF(objs[i].data);
    free(objs);
}

/* ------------------------------------------------------------------------ */
/* No-op tasks: the probes of unregister and partition                       */
/* ------------------------------------------------------------------------ */

static int
noop_body(weft_ctx *ctx, void *arg)
{
    (void)ctx;
    (void)arg;
    return 0;
}

int
weft_py_spawn_noop(RuntimeObject *r, const weft_access *acc, size_t n, const char *name, weft_task **out)
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
    BEGIN_NOGIL
    rc = weft_spawn(rt, &desc, out);
    END_NOGIL
    return rc;
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
    WEFT_PY_HANDOFF_ACQUIRE(d); /* the memory's last owner (Data_dealloc) */
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
    d->acquired = 0;
    weft_py_tile_fields_init(d);
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
    /* Its fixed fields, for a thread that gets it through Python (TSan
     * cannot see CPython's own orderings). */
    WEFT_PY_HANDOFF_RELEASE(d);
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
    data_release(d);
    Py_DECREF(d);
}

/* Get obj's buffer, writable if it can be; -1 with an exception. */
static int
get_buffer(PyObject *obj, Py_buffer *view, int *readonly, const char *what)
{
    if (!PyObject_CheckBuffer(obj)) {
        /* A list or tuple inside the list of accesses: the program meant
         * its items (reads=[blocks] for reads=blocks). */
        int nested = PyList_Check(obj) || PyTuple_Check(obj);
        PyErr_Format(PyExc_TypeError,
                     "%s: expected a weft.Data or an object supporting the buffer "
                     "protocol (bytearray, memoryview, numpy array...), got '%.100s'%s",
                     what, Py_TYPE(obj)->tp_name,
                     nested ? " (a list of accesses names each buffer once: for the buffers of a list xs, "
                              "give xs itself or [*xs, y], not [xs])"
                            : "");
        return -1;
    }
    *readonly = 0;
    if (PyObject_GetBuffer(obj, view, PyBUF_ANY_CONTIGUOUS | PyBUF_WRITABLE) == 0) return 0;
    PyErr_Clear();
    if (PyObject_GetBuffer(obj, view, PyBUF_ANY_CONTIGUOUS) < 0) {
        PyObject *cause = weft_py_fetch_exc();
        PyErr_Format(PyExc_ValueError, "%s: '%.100s' object does not export a contiguous buffer (a range "
                     "is one contiguous piece of memory: name contiguous rows, or partition the array into "
                     "tiles for 2-D blocks)", what, Py_TYPE(obj)->tp_name);
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

PyObject *
weft_py_err_read_only(PyObject *obj, const char *what)
{
    PyErr_Format(PyExc_ValueError, "%s: '%.100s' buffer is read-only and cannot be written", what,
                 Py_TYPE(obj)->tp_name);
    return NULL;
}

/* Takes the lock for its steps only: getting the buffer, making and
 * registering a Data run without it. */
DataObject *
weft_py_data_of_object(RuntimeObject *r, PyObject *obj, const char *what, int want_write, int register_ok)
{
    /* The object a Data holds covers the memory the Data was made for (its
     * buffer stays exported): the common case is one look-up. */
    weft_py_reg_lock(r);
    DataObject *d = objs_find(&r->reg, obj);
    if (d != NULL) Py_INCREF(d);
    weft_py_reg_unlock(r);
    if (d != NULL) {
        if (d->obj != obj) { /* stale entry: cannot happen while d holds obj */
            Py_DECREF(d);
            PyErr_Format(PyExc_RuntimeError, "%s: data registry corrupted", what);
            return NULL;
        }
        if (want_write && d->readonly) {
            Py_DECREF(d);
            return (DataObject *)weft_py_err_read_only(obj, what);
        }
        return d;
    }
    Py_buffer view;
    int readonly;
    if (get_buffer(obj, &view, &readonly, what) < 0) return NULL;
    if (want_write && readonly) {
        PyBuffer_Release(&view);
        return (DataObject *)weft_py_err_read_only(obj, what);
    }
    if (view.buf != NULL && view.len > 0) {
        /* Memory registered through another object. */
        weft_py_reg_lock(r);
        d = spans_find(&r->reg, (uintptr_t)view.buf, (uintptr_t)view.buf + (uintptr_t)view.len);
        if (d != NULL) Py_INCREF(d);
        weft_py_reg_unlock(r);
        if (d != NULL || !register_ok) {
            PyBuffer_Release(&view);
            return d;
        }
    } else if (!register_ok) {
        PyBuffer_Release(&view);
        return NULL;
    }
    d = data_new(r, obj, &view, readonly);
    if (d == NULL) return NULL;
    reg_err err = {REG_OK, 0, 0, 0, 0};
    weft_py_reg_lock(r);
    DataObject *e = enter_range(r, d, &err);
    weft_py_reg_unlock(r);
    if (e == d) return d; /* the registry holds one reference, the caller this one */
    /* Another thread entered it first (use that one), or an error. */
    data_discard(d);
    if (e == NULL) weft_py_reg_raise(&err, what, 0);
    return e;
}

DataObject *
weft_py_data_lookup(RuntimeObject *r, PyObject *obj, const char *what)
{
    if (Py_IS_TYPE(obj, r->st->Data_T)) {
        DataObject *d = (DataObject *)obj;
        WEFT_PY_HANDOFF_ACQUIRE(d);
        if (d->rt != r) {
            PyErr_Format(PyExc_ValueError, "%s: this weft.Data belongs to another runtime", what);
            return NULL;
        }
        return (DataObject *)Py_NewRef(d);
    }
    return weft_py_data_of_object(r, obj, what, 0, 1);
}

DataObject *
weft_py_data_find(RuntimeObject *r, PyObject *obj, const char *what)
{
    if (Py_IS_TYPE(obj, r->st->Data_T)) return (DataObject *)Py_NewRef(obj);
    DataObject *d = weft_py_data_of_object(r, obj, what, 0, 0);
    if (d == NULL && !PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "%s: this '%.100s' object is not registered", what,
                     Py_TYPE(obj)->tp_name);
    return d;
}

/* ------------------------------------------------------------------------ */
/* Unregistering                                                             */
/* ------------------------------------------------------------------------ */

/* Part of a step: d, or one of its tiles, is held by an acquisition. */
static int
data_acquired(const DataObject *d)
{
    if (d->acquired) return 1;
    if (d->tiles != NULL && PyTuple_Check(d->tiles))
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(d->tiles); i++)
            if (((DataObject *)PyTuple_GET_ITEM(d->tiles, i))->acquired) return 1;
    return 0;
}

int
weft_py_data_known(RuntimeObject *r, PyObject *obj, const char *what)
{
    if (Py_IS_TYPE(obj, r->st->Data_T)) return 1;
    weft_py_reg_lock(r);
    int known = objs_find(&r->reg, obj) != NULL;
    weft_py_reg_unlock(r);
    if (known) return 1;
    Py_buffer view;
    int readonly;
    if (get_buffer(obj, &view, &readonly, what) < 0) return -1;
    uintptr_t lo = (uintptr_t)view.buf, hi = lo + (uintptr_t)view.len;
    if (view.buf != NULL && view.len > 0) {
        weft_py_registry *g = &r->reg;
        weft_py_reg_lock(r);
        for (size_t i = spans_scan_start(g, lo); i < g->nspans && g->spans[i]->lo < hi && !known; i++)
            known = overlap(g->spans[i], lo, hi);
        weft_py_reg_unlock(r);
    }
    PyBuffer_Release(&view);
    return known;
}

void
weft_py_data_count_acquired(RuntimeObject *r, PyObject *dats, int by)
{
    weft_py_reg_lock(r);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(dats); i++)
        ((DataObject *)PyTuple_GET_ITEM(dats, i))->acquired += by;
    weft_py_reg_unlock(r);
}

int
weft_py_data_unregister(DataObject *d)
{
    WEFT_PY_HANDOFF_ACQUIRE(d);
    RuntimeObject *r = d->rt;
    weft_data *h = NULL;
    int busy = 0, rc, held;
    if (d->parent) {
        PyErr_SetString(PyExc_ValueError, "unregister(): this weft.Data is a tile: tiles are unregistered "
                        "with the data they were partitioned from (unregister the whole array)");
        return -1;
    }
    Py_INCREF(d);
    weft_py_reg_lock(r);
    if (d->d != NULL && r->rt != NULL) {
        if (d->partitioning) {
            busy = 2;
        } else if (data_acquired(d)) {
            busy = 3;
        } else if (d->closing) {
            busy = 1;
        } else {
            d->closing = 1; /* no new task names it, no new range overlaps it */
            h = d->d;
        }
    }
    weft_py_reg_unlock(r);
    if (busy == 3) {
        PyErr_SetString(PyExc_RuntimeError, "unregister(): this data is acquired (rt.acquire): release it "
                        "first (leave the `with` block, or call release())");
        goto fail;
    }
    if (busy) {
        PyErr_SetString(PyExc_ValueError, busy == 2 ? "unregister(): this data is being partitioned (on "
                        "another thread); unregister it once partition() returned"
                        : "unregister(): this data is already being unregistered");
        goto fail;
    }
    if (h == NULL) goto out; /* unregistered already, or the runtime closed (which releases it) */

    /* Wait for every task that names it (a task that writes it comes
     * after them), so that a caller that waits for one of them is told
     * (WEFT_EDEADLK) instead of blocking in weft_data_unregister. */
    weft_access acc = {h, WEFT_RW | WEFT_HOST};
    weft_task *probe = NULL;
    char probe_failed[512] = ""; /* why the probe itself failed (its data not brought back) */
    rc = weft_py_spawn_noop(r, &acc, 1, "weft.py unregister", &probe);
    if (rc == 0) {
        BEGIN_NOGIL
        rc = weft_task_wait(probe);
        END_NOGIL
        weft_task_release(probe);
        if (rc == WEFT_ETASKFAILED) /* (the checking mode's report, a device's error: raised below) */
            snprintf(probe_failed, sizeof probe_failed, "%s", weft_last_error());
        if (rc == WEFT_ETASKFAILED || rc == WEFT_ECANCELLED) rc = 0; /* it finished */
    }
    if (rc != 0) {
        weft_py_reg_lock(r);
        d->closing = 0;
        weft_py_reg_unlock(r);
        if (r->rt == NULL) goto out; /* closed meanwhile: close releases it */
        if (rc == WEFT_EDEADLK || rc == WEFT_EBUSY)
            PyErr_SetString(PyExc_RuntimeError, "unregister(): the calling task itself accesses this "
                            "data (or waits for a task that does), so the unregister would wait for it: "
                            "unregister it after that task, from outside it (or from a task that follows it)");
        else
            weft_py_err_weft(rc, "unregister()");
        goto fail;
    }

    /* Nobody names it from now on but spawns that looked it up before
     * (spawn.c looks their accesses up again if the C core refuses them). */
    BEGIN_NOGIL
    rc = weft_data_unregister(h);
    END_NOGIL
    if (rc != 0 && r->rt == NULL) goto out;
    if (rc != 0) {
        /* Not expected (the wait above would have failed first); it stays
         * closing. */
        if (rc == WEFT_EBUSY)
            PyErr_SetString(PyExc_RuntimeError,
                            "unregister(): the calling task itself accesses this data: unregister it after "
                            "that task, from outside it (or from a task that follows it)");
        else
            weft_py_err_weft(rc, "unregister()");
        goto fail;
    }
    weft_py_reg_lock(r);
    held = leave_registry(r, d);
    d->closing = 0;
    d->d = NULL;
    weft_py_tiles_forget(d); /* the C core unregistered them first */
    weft_py_reg_unlock(r);
    if (held) Py_DECREF(d); /* the registry's reference: the caller's keeps it alive */
    data_release(d);
    if (probe_failed[0]) {
        /* Unregistered all the same; what bringing its value back found is
         * not silent (the checking mode's host watch: a write of the buffer
         * lost under the GPU's value). */
        PyErr_Format(PyExc_RuntimeError, "unregister(): %s; the data is unregistered", probe_failed);
        goto fail;
    }
out:
    Py_DECREF(d);
    return 0;
fail:
    Py_DECREF(d);
    return -1;
}
