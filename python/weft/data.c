/*
 * data.c — buffer registration and the weft.Data type.
 *
 * Dependencies follow memory, not objects, and the C core keeps them: it
 * orders tasks on handles over overlapping memory (weft_data_register in
 * weft.h) and refuses what such handles cannot do.  This file keeps what
 * is Python's own: one weft.Data — one C handle — per registered range of
 * memory [lo, hi), so two objects whose buffers cover the same bytes (an
 * array and memoryview(a), two a[:4] views) share one Data and a buffer
 * over other memory (a[2:6]) gets a Data of its own; the buffers pinned
 * while registered; unregister; tiles; and errors in Python's terms.
 * Unregistering a range (weft_py_data_unregister) marks it closing (new
 * tasks naming it are refused; a range overlapping it may be registered:
 * the core orders its tasks after the closing one's), waits for a no-op
 * task writing its handle, then unregisters the C handle.  A spawn that
 * looked it up before and has not reached the C runtime is failed by the
 * core on the closed handle, and spawn.c looks its accesses up again
 * (weft_py_accs_stale).
 *
 * Atomic steps.  The registry (r->reg: the objects registered, the ranges,
 * and the fields of each Data that python/weft/_weft.h puts under it)
 * changes only under r->reg.lock, a plain mutex, and each step under it —
 * entering a range (enter_range), naming a Data for a spawn (data_use),
 * leaving (leave_registry) — is plain C: no
 * Python API that could run Python code, block, or let the thread detach
 * (no Python allocation: the registry's arrays come from malloc; no
 * reference dropped; no exception raised: a step returns what went wrong
 * and its caller raises after unlocking).  The Python work around the
 * steps (getting a buffer, making a Data, registering its memory with the C
 * core, releasing a buffer, dropping references) happens with the lock
 * released; between steps anything may happen, and every step checks what
 * it relies on again.  The lock is a plain mutex, not a critical section
 * on the runtime: CPython suspends a critical section whenever the thread
 * blocks inside it (a contended dict, a stop-the-world pause), and a step
 * would then not be atomic on the free-threaded build.
 */
#include "_weft.h"

/* ------------------------------------------------------------------------ */
/* The lock, and what a step found wrong                                     */
/* ------------------------------------------------------------------------ */

/* Taken with the thread attached; the holder runs plain C until reg_unlock
 * (weft_py_registry in _weft.h says why waiting for it attached is safe). */
static inline void
reg_lock(RuntimeObject *r)
{
    pthread_mutex_lock(&r->reg.lock);
}

static inline void
reg_unlock(RuntimeObject *r)
{
    pthread_mutex_unlock(&r->reg.lock);
}

/* What a step found wrong: its caller raises it once the lock is released
 * (making an exception is Python work). */
enum {
    REG_OK = 0,
    REG_NOMEM,        /* out of memory */
    REG_CLOSED,       /* the runtime is closed */
    REG_UNREGISTERED, /* the Data was unregistered (or its runtime closed) */
    REG_CLOSING,      /* the Data, over [lo, hi), is being unregistered */
    REG_DEVICE_OVERLAP, /* device views of the Data over [lo, hi), which overlaps other ranges */
    REG_PARTITIONED,  /* the new range [lo, hi) overlaps [olo, ohi), which is partitioned into tiles */
    REG_COMM_OVERLAP  /* a communication buffer over [lo, hi), which overlaps other ranges */
};
typedef struct {
    int kind;
    uintptr_t lo, hi, olo, ohi;
} reg_err;

/* "[0x7f.., 0x7f..) (16 bytes)", for messages. */
static void
range_str(char *buf, size_t n, uintptr_t lo, uintptr_t hi)
{
    snprintf(buf, n, "[%#jx, %#jx) (%ju bytes)", (uintmax_t)lo, (uintmax_t)hi, (uintmax_t)(hi - lo));
}

/* Raise e (nothing for REG_OK); given: the caller named a weft.Data. */
static void
reg_raise(const reg_err *e, const char *what, int given)
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

int
weft_py_data_release(DataObject *d)
{
    /* Call with the C handle already unregistered and d->d cleared (or the
     * runtime gone).  Should two threads get here, one releases, with the
     * lock released (a release may run Python code). */
    RuntimeObject *r = d->rt;
    reg_lock(r);
    int mine = d->has_view;
    d->has_view = 0;
    reg_unlock(r);
    if (mine) PyBuffer_Release(&d->view);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The registry: objects, ranges, relations (plain C, under the lock)        */
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

/* Whether another registered range overlaps d's memory (the lock held). */
static int
overlaps_other(const weft_py_registry *g, const DataObject *d)
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

/* Part of a step: d's tiles went with it (unregistered, or the runtime
 * closed): their handles are no longer valid. */
static void
tiles_forget(DataObject *d)
{
    if (d->tiles == NULL || !PyTuple_Check(d->tiles)) return;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(d->tiles); i++)
        ((DataObject *)PyTuple_GET_ITEM(d->tiles, i))->d = NULL;
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
            tiles_forget(d);
        }
    }
    return objs;
}

void
weft_py_data_forget_all(RuntimeObject *r)
{
    size_t cap;
    reg_lock(r);
    weft_py_objslot *objs = take_all(r, &cap, 1);
    r->reg.nscratch = 0; /* (the scratch handles went with the C runtime) */
    reg_unlock(r);
    /* Buffers are released, and the registry's references dropped, with the
     * lock released (either may run Python code). */
    for (size_t i = 0; i < cap; i++)
        if (objs[i].key != NULL) {
            weft_py_data_release(objs[i].data);
            Py_DECREF(objs[i].data);
        }
    free(objs);
}

/* ------------------------------------------------------------------------ */
/* Scratch handles (spawn's scratch=)                                        */
/* ------------------------------------------------------------------------ */

/* Step: r's scratch handle of n bytes, or NULL if it has none yet. */
static weft_data *
scratch_find(RuntimeObject *r, size_t n)
{
    for (size_t i = 0; i < r->reg.nscratch; i++)
        if (r->reg.scratch[i].n == n) return r->reg.scratch[i].h;
    return NULL;
}

/* Step: list h as r's scratch handle of n bytes (malloc); 0, or -1 out of
 * memory (nothing changed). */
static int
scratch_add(RuntimeObject *r, size_t n, weft_data *h)
{
    weft_py_registry *g = &r->reg;
    if (g->nscratch == g->capscratch) {
        size_t cap = g->capscratch ? 2 * g->capscratch : 8;
        struct weft_py_scratch_size *a = realloc(g->scratch, cap * sizeof *a);
        if (a == NULL) return -1;
        g->scratch = a;
        g->capscratch = cap;
    }
    g->scratch[g->nscratch].n = n;
    g->scratch[g->nscratch].h = h;
    g->nscratch++;
    return 0;
}

weft_data *
weft_py_scratch_handle(RuntimeObject *r, size_t n, const char *what)
{
    /* Looked up; else registered (never blocks) with the lock released,
     * then listed, unless another thread listed one meanwhile: that one is
     * used, and this one unregistered (no task names it: never blocks). */
    reg_lock(r);
    weft_data *h = r->rt ? scratch_find(r, n) : NULL;
    int closed = r->rt == NULL;
    reg_unlock(r);
    if (h || closed) {
        if (closed) PyErr_Format(PyExc_RuntimeError, "%s: the weft runtime is closed", what);
        return h;
    }
    weft_runtime *rt = r->rt;
    weft_data *mine = NULL;
    int rc = rt ? weft_data_register(rt, NULL, n, &mine) : WEFT_ECLOSED;
    if (rc != 0) {
        weft_py_err_weft(rc, what);
        return NULL;
    }
    int nomem = 0;
    reg_lock(r);
    closed = r->rt == NULL;
    h = closed ? NULL : scratch_find(r, n);
    if (!closed && h == NULL) {
        nomem = scratch_add(r, n, mine) < 0;
        h = nomem ? NULL : mine;
    }
    reg_unlock(r);
    if (h != mine && !closed) (void)weft_data_unregister(mine);
    if (closed) PyErr_Format(PyExc_RuntimeError, "%s: the weft runtime is closed", what);
    if (nomem) PyErr_NoMemory();
    return h;
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
    reg_lock(r);
    weft_py_objslot *objs = take_all(r, &cap, 0);
    reg_unlock(r);
    for (size_t i = 0; i < cap; i++)
        if (objs[i].key != NULL) Py_DECREF(objs[i].data);
    free(objs);
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
 * block (WEFT_EAGAIN otherwise), with the GIL kept (plain C then: a
 * registry step may do it); else the GIL is released for a spawn that may
 * block.  A Weft code; no Python exception. */
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

/* ------------------------------------------------------------------------ */
/* Lookup                                                                    */
/* ------------------------------------------------------------------------ */

/* No tiles, not a tile. */
static void
tile_fields_init(DataObject *d)
{
    d->tiles = NULL;
    d->grid_rows = d->grid_cols = d->grid_halo = 0;
    d->partitioning = 0;
    d->parent = NULL;
    memset(&d->ti, 0, sizeof d->ti);
    d->tndim = 0;
    d->elem = 0;
    d->format[0] = 0;
}

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
    tile_fields_init(d);
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
 * writable.  Takes the lock for its steps only: getting the buffer, making
 * and registering a Data run without it. */
static DataObject *
data_of_object(RuntimeObject *r, PyObject *obj, const char *what, int want_write, int register_ok)
{
    /* The object a Data holds covers the memory the Data was made for (its
     * buffer stays exported): the common case is one look-up. */
    reg_lock(r);
    DataObject *d = objs_find(&r->reg, obj);
    if (d != NULL) Py_INCREF(d);
    reg_unlock(r);
    if (d != NULL) {
        if (d->obj != obj) { /* stale entry: cannot happen while d holds obj */
            Py_DECREF(d);
            PyErr_Format(PyExc_RuntimeError, "%s: data registry corrupted", what);
            return NULL;
        }
        if (want_write && d->readonly) {
            Py_DECREF(d);
            return (DataObject *)err_read_only(obj, what);
        }
        return d;
    }
    Py_buffer view;
    int readonly;
    if (get_buffer(obj, &view, &readonly, what) < 0) return NULL;
    if (want_write && readonly) {
        PyBuffer_Release(&view);
        return (DataObject *)err_read_only(obj, what);
    }
    if (view.buf != NULL && view.len > 0) {
        /* Memory registered through another object. */
        reg_lock(r);
        d = spans_find(&r->reg, (uintptr_t)view.buf, (uintptr_t)view.buf + (uintptr_t)view.len);
        if (d != NULL) Py_INCREF(d);
        reg_unlock(r);
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
    reg_lock(r);
    DataObject *e = enter_range(r, d, &err);
    reg_unlock(r);
    if (e == d) return d; /* the registry holds one reference, the caller this one */
    /* Another thread entered it first (use that one), or an error. */
    data_discard(d);
    if (e == NULL) reg_raise(&err, what, 0);
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
    return data_of_object(r, obj, what, 0, 1);
}

DataObject *
weft_py_data_find(RuntimeObject *r, PyObject *obj, const char *what)
{
    if (Py_IS_TYPE(obj, r->st->Data_T)) return (DataObject *)Py_NewRef(obj);
    DataObject *d = data_of_object(r, obj, what, 0, 0);
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

/* Room for need accesses (malloc: called in data_use's step); 0, or -1
 * (nothing changed). */
static int
accs_reserve(weft_py_accs *a, size_t need)
{
    if (need <= a->cap) return 0;
    size_t c = a->cap * 2;
    while (c < need) c *= 2;
    weft_access *acc = malloc(c * sizeof *acc);
    DataObject **dat = malloc(c * sizeof *dat);
    if (acc == NULL || dat == NULL) {
        free(acc);
        free(dat);
        return -1;
    }
    memcpy(acc, a->acc, a->n * sizeof *acc);
    memcpy(dat, a->dat, a->n * sizeof *dat);
    if (a->acc != a->acc_small) free(a->acc);
    if (a->dat != a->dat_small) free(a->dat);
    a->acc = acc;
    a->dat = dat;
    a->cap = c;
    return 0;
}

static void
accs_push(weft_py_accs *a, DataObject *d, unsigned mode)
{
    a->acc[a->n].data = d->d;
    a->acc[a->n].mode = mode; /* (a user reduction's operator included: its number in bits 20-30) */
    a->dat[a->n] = (DataObject *)Py_NewRef(d);
    a->n++;
}

/* Step: name d for a spawn with mode (its own handle, in a).  The core
 * orders it with every handle over overlapping memory and refuses what
 * such a handle cannot do (a reduction: weft_spawn's message); two
 * refusals are made here, where the message names Python's terms: device
 * views (device_data=True) and communication buffers, of memory other
 * registered ranges overlap.  0, or -1 with *err. */
static int
data_use(RuntimeObject *r, DataObject *d, unsigned mode, weft_py_accs *a, reg_err *err)
{
    if (d->d == NULL || r->rt == NULL || (d->parent && d->parent->d == NULL)) {
        err->kind = REG_UNREGISTERED;
        return -1;
    }
    /* A tile goes as its parent goes (which overlaps nothing: partition
     * refuses overlapping ranges, and so does registering one later). */
    const DataObject *range = d->parent ? d->parent : d;
    err->lo = range->lo;
    err->hi = range->hi;
    if (range->closing) {
        err->kind = REG_CLOSING;
        return -1;
    }
    int shared = (mode & WEFT_PY_COMM_ACCESS || !(mode & WEFT_HOST)) && !d->parent && overlaps_other(&r->reg, d);
    if (shared) {
        err->kind = mode & WEFT_PY_COMM_ACCESS ? REG_COMM_OVERLAP : REG_DEVICE_OVERLAP;
        return -1;
    }
    if (accs_reserve(a, a->n + 1) < 0) {
        err->kind = REG_NOMEM;
        return -1;
    }
    accs_push(a, d, mode & ~WEFT_PY_COMM_ACCESS);
    return 0;
}

int
weft_py_data_accesses(RuntimeObject *r, PyObject *obj, const char *what, unsigned mode, weft_py_accs *a)
{
    DataObject *d;
    int given = Py_IS_TYPE(obj, r->st->Data_T);
    if (given) {
        d = (DataObject *)obj;
        WEFT_PY_HANDOFF_ACQUIRE(d);
        if (d->rt != r) {
            PyErr_Format(PyExc_ValueError, "%s: this weft.Data belongs to another runtime", what);
            return -1;
        }
        if ((mode & (WEFT_W | WEFT_REDUCE)) && d->readonly) {
            err_read_only(d->obj, what);
            return -1;
        }
        Py_INCREF(d);
    }
    for (int tries = 0;; tries++) {
        if (!given && (d = data_of_object(r, obj, what, (mode & (WEFT_W | WEFT_REDUCE)) != 0, 1)) == NULL)
            return -1;
        reg_err err = {REG_OK, 0, 0, 0, 0};
        reg_lock(r);
        int rc = data_use(r, d, mode, a, &err);
        int again = rc < 0 && !given && err.kind == REG_UNREGISTERED && r->rt != NULL && tries < 1000;
        reg_unlock(r);
        Py_DECREF(d);
        /* An object's data found as another thread's unregister of it
         * ended (between the lookup and the use): not the caller's doing,
         * and no longer there: look it up again (it registers anew). */
        if (again) continue;
        if (rc < 0) reg_raise(&err, what, given);
        return rc;
    }
}

int
weft_py_accs_stale(const weft_py_accs *a)
{
    if (a->n == 0) return 0;
    RuntimeObject *r = a->dat[0]->rt; /* a spawn names one runtime's data only */
    int stale = 0;
    reg_lock(r);
    for (size_t i = 0; i < a->n && !stale; i++) {
        const DataObject *x = a->dat[i], *range = x->parent ? x->parent : x;
        stale = range->closing || range->d == NULL || x->d == NULL;
    }
    reg_unlock(r);
    return stale;
}

void
weft_py_accs_clear(weft_py_accs *a)
{
    size_t n = a->n;
    a->n = 0;
    for (size_t i = 0; i < n; i++) Py_DECREF(a->dat[i]);
}

void
weft_py_accs_free(weft_py_accs *a)
{
    if (a->acc != a->acc_small) free(a->acc);
    if (a->dat != a->dat_small) free(a->dat);
    weft_py_accs_init(a);
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
    reg_lock(r);
    int known = objs_find(&r->reg, obj) != NULL;
    reg_unlock(r);
    if (known) return 1;
    Py_buffer view;
    int readonly;
    if (get_buffer(obj, &view, &readonly, what) < 0) return -1;
    uintptr_t lo = (uintptr_t)view.buf, hi = lo + (uintptr_t)view.len;
    if (view.buf != NULL && view.len > 0) {
        weft_py_registry *g = &r->reg;
        reg_lock(r);
        for (size_t i = spans_scan_start(g, lo); i < g->nspans && g->spans[i]->lo < hi && !known; i++)
            known = overlap(g->spans[i], lo, hi);
        reg_unlock(r);
    }
    PyBuffer_Release(&view);
    return known;
}

void
weft_py_data_count_acquired(RuntimeObject *r, PyObject *dats, int by)
{
    reg_lock(r);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(dats); i++)
        ((DataObject *)PyTuple_GET_ITEM(dats, i))->acquired += by;
    reg_unlock(r);
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
    reg_lock(r);
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
    reg_unlock(r);
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
    rc = spawn_noop(r, &acc, 1, "weft.py unregister", 0, &probe);
    if (rc == 0) {
        BEGIN_NOGIL_W
        rc = weft_task_wait(probe);
        END_NOGIL_W
        weft_task_release(probe);
        if (rc == WEFT_ETASKFAILED || rc == WEFT_ECANCELLED) rc = 0; /* it finished */
    }
    if (rc != 0) {
        reg_lock(r);
        d->closing = 0;
        reg_unlock(r);
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
         * closing. */
        if (rc == WEFT_EBUSY)
            PyErr_SetString(PyExc_RuntimeError,
                            "unregister(): the calling task itself accesses this data");
        else
            weft_py_err_weft(rc, "unregister()");
        goto fail;
    }
    reg_lock(r);
    held = leave_registry(r, d);
    d->closing = 0;
    d->d = NULL;
    tiles_forget(d); /* the C core unregistered them first */
    reg_unlock(r);
    if (held) Py_DECREF(d); /* the registry's reference: the caller's keeps it alive */
    weft_py_data_release(d);
out:
    Py_DECREF(d);
    return 0;
fail:
    Py_DECREF(d);
    return -1;
}

/* ------------------------------------------------------------------------ */
/* Tiles                                                                     */
/* ------------------------------------------------------------------------ */

/* A C-contiguous 1-D or 2-D layout of d's memory, from its object's buffer:
 * the tiling's elem, rows, cols (all of a row unless `cols` >= 0) and
 * pitch, with the element's format.  0, or -1 with an exception. */
static int
tiling_of(DataObject *d, Py_ssize_t cols, weft_tiling *t, int *ndim, char format[4])
{
    Py_buffer b;
    if (PyObject_GetBuffer(d->obj, &b, PyBUF_RECORDS_RO) < 0) {
        PyObject *cause = weft_py_fetch_exc();
        PyErr_Format(PyExc_ValueError, "partition(): the '%.100s' object does not describe its items and "
                     "shape (the buffer protocol with strides and format)", Py_TYPE(d->obj)->tp_name);
        if (cause) {
            PyObject *e = weft_py_fetch_exc();
            PyException_SetCause(e, cause);
            weft_py_raise_exc(e);
            Py_DECREF(e);
        }
        return -1;
    }
    int rc = -1;
    char typestr[8];
    const char *fmt = b.format ? b.format : "B";
    if (b.buf != d->view.buf || b.len != d->view.len) {
        PyErr_Format(PyExc_ValueError, "partition(): the '%.100s' object no longer covers the memory it "
                     "was registered with", Py_TYPE(d->obj)->tp_name);
    } else if (strlen(fmt) >= 4 || weft_py_typestr_of(fmt, b.itemsize, typestr) < 0) {
        PyErr_Format(PyExc_TypeError, "partition(): items of struct format '%s' (%zd bytes) cannot be viewed "
                     "as a tile's elements: partition an array of one simple type (a NumPy dtype such as "
                     "float64 or int32)", fmt, b.itemsize);
    } else if (b.ndim != 1 && b.ndim != 2) {
        PyErr_Format(PyExc_ValueError, "partition(): the array has %d dimensions; tiles split a 1-D or 2-D "
                     "array (reshape it first, e.g. a.reshape(rows, -1))", b.ndim);
    } else if (b.ndim == 2 && !PyBuffer_IsContiguous(&b, 'C')) {
        PyErr_SetString(PyExc_ValueError, "partition(): a 2-D array must be C-contiguous (row-major): a "
                        "Fortran-ordered array's rows are not contiguous (use numpy.ascontiguousarray)");
    } else if (b.len == 0) {
        PyErr_SetString(PyExc_ValueError, "partition(): the array is empty");
    } else {
        Py_ssize_t width = b.shape[b.ndim - 1];
        if (cols >= 0 && (cols < 1 || cols > width)) {
            PyErr_Format(PyExc_ValueError, "partition(): cols=%zd: each row has %zd elements (cols= tiles "
                         "the first 1 to %zd of them, the rest being padding)", cols, width, width);
        } else {
            t->elem = (size_t)b.itemsize;
            t->rows = b.ndim == 2 ? (size_t)b.shape[0] : 1;
            t->cols = (size_t)(cols >= 0 ? cols : width);
            t->pitch = (size_t)width * (size_t)b.itemsize;
            *ndim = b.ndim;
            strcpy(format, fmt);
            rc = 0;
        }
    }
    PyBuffer_Release(&b);
    return rc;
}

/* grid= as grid_rows x grid_cols: an int (a 1-D array only) or a pair. */
static int
parse_grid(PyObject *grid, int ndim, unsigned *gr, unsigned *gc)
{
    long a = 1, c;
    if (PyLong_Check(grid)) {
        if (ndim != 1) {
            PyErr_SetString(PyExc_ValueError, "partition(): grid= of a 2-D array is a pair (grid_rows, "
                            "grid_cols)");
            return -1;
        }
        c = PyLong_AsLong(grid);
    } else if (PyTuple_Check(grid) && PyTuple_GET_SIZE(grid) == 2) {
        a = PyLong_AsLong(PyTuple_GET_ITEM(grid, 0));
        if (a == -1 && PyErr_Occurred()) return -1;
        c = PyLong_AsLong(PyTuple_GET_ITEM(grid, 1));
    } else {
        PyErr_Format(PyExc_TypeError, "partition(): grid= expects (grid_rows, grid_cols) or, for a 1-D "
                     "array, an int; got '%.100s'", Py_TYPE(grid)->tp_name);
        return -1;
    }
    if (c == -1 && PyErr_Occurred()) return -1;
    if (a < 0 || c < 0 || a > UINT_MAX || c > UINT_MAX) {
        PyErr_Format(PyExc_ValueError, "partition(): grid of %ld x %ld tiles", a, c);
        return -1;
    }
    *gr = (unsigned)a;
    *gc = (unsigned)c;
    return 0;
}

/* The tile Data for C tile handle h of parent p (not in the registry). */
static DataObject *
tile_new(DataObject *p, weft_data *h, int ndim, Py_ssize_t elem, const char *format, const weft_tiling *tl)
{
    weft_tile_info ti;
    if (weft_data_tile_info(h, &ti) != 0) return (DataObject *)weft_py_err_weft(WEFT_EINVAL, "partition()");
    DataObject *d = PyObject_GC_New(DataObject, Py_TYPE(p));
    if (d == NULL) return NULL;
    WEFT_PY_HANDOFF_ACQUIRE(d);
    d->rt = (RuntimeObject *)Py_NewRef(p->rt);
    d->obj = Py_NewRef(p->obj);
    memset(&d->view, 0, sizeof d->view);
    d->has_view = 0;
    d->readonly = p->readonly;
    d->d = h;
    d->dummy = 0;
    d->lo = d->hi = 0;
    d->closing = 0;
    d->acquired = 0;
    tile_fields_init(d);
    d->parent = (DataObject *)Py_NewRef(p);
    d->grid_rows = tl->grid_rows;
    d->grid_cols = tl->grid_cols;
    d->grid_halo = tl->halo;
    d->ti = ti;
    d->tndim = ndim;
    d->elem = elem;
    strcpy(d->format, format);
    PyObject_GC_Track(d);
    WEFT_PY_HANDOFF_RELEASE(d);
    return d;
}

/* Partition with the GIL released; a spawn on another thread may make the
 * core refuse with "pending" again: wait for the tasks on d and retry. */
static int
partition_c(RuntimeObject *r, weft_data *h, const weft_tiling *t, weft_data **tiles)
{
    int rc = 0;
    for (int tries = 0; tries < 64; tries++) {
        /* Wait for the tasks already spawned on it (the core partitions
         * only data no task names): a no-op writer follows them all. */
        weft_access acc = {h, WEFT_RW | WEFT_HOST};
        weft_task *probe = NULL;
        {
            rc = spawn_noop(r, &acc, 1, "weft.py partition", 0, &probe);
            if (rc != 0) return rc;
            if (weft_py_tl_ts != NULL) {
                BEGIN_NOGIL_W
                rc = weft_task_wait(probe);
                END_NOGIL_W
            } else {
                BEGIN_NOGIL
                rc = weft_task_wait(probe);
                END_NOGIL
            }
            weft_task_release(probe);
            if (rc == WEFT_ETASKFAILED || rc == WEFT_ECANCELLED) rc = 0; /* it finished */
            if (rc != 0) return rc;
        }
        if (weft_py_tl_ts != NULL) {
            BEGIN_NOGIL_W
            rc = weft_data_partition(h, t, tiles);
            END_NOGIL_W
        } else {
            BEGIN_NOGIL
            rc = weft_data_partition(h, t, tiles);
            END_NOGIL
        }
        if (rc != WEFT_EBUSY || strstr(weft_last_error(), "pending") == NULL) return rc;
    }
    return rc;
}

/* The tiling partition() asks of d (not a tile): grid=, halo= and cols=
 * read against its buffer.  0, or -1 with an exception. */
static int
partition_tiling(DataObject *d, PyObject *grid, Py_ssize_t halo, PyObject *colsobj, weft_tiling *t, int *ndim,
                 char format[4])
{
    Py_ssize_t cols = -1;
    if (d->parent) {
        PyErr_SetString(PyExc_ValueError, "partition(): this weft.Data is a tile (tiles are not partitioned "
                        "again)");
        return -1;
    }
    if (halo < 0 || halo > UINT_MAX) {
        PyErr_Format(PyExc_ValueError, "partition(): halo=%zd: a number of elements, 0 or more", halo);
        return -1;
    }
    if (colsobj != Py_None) {
        cols = PyNumber_AsSsize_t(colsobj, PyExc_OverflowError);
        if (cols == -1 && PyErr_Occurred()) return -1;
        if (cols < 0) cols = 0; /* refused below, with the row's width */
    }
    if (tiling_of(d, cols, t, ndim, format) < 0) return -1;
    if (parse_grid(grid, *ndim, &t->grid_rows, &t->grid_cols) < 0) return -1;
    t->halo = (unsigned)halo;
    return 0;
}

/* Claim d for partitioning: no other partition, no unregister, no
 * overlapping range registered meanwhile (enter_range refuses them from
 * now on).  Its handle (the claim keeps it: unregister waits for the
 * claim's end), or NULL with an exception. */
static weft_data *
partition_claim(RuntimeObject *r, DataObject *d)
{
    const char *why = NULL;
    weft_data *h = NULL;
    reg_lock(r);
    if (d->d == NULL || r->rt == NULL) why = "this weft.Data was unregistered";
    else if (d->closing) why = "this weft.Data is being unregistered";
    else if (d->tiles != NULL) why = "this weft.Data is partitioned already (its tiles: Data.tiles)";
    else if (d->partitioning) why = "this weft.Data is being partitioned (on another thread)";
    else {
        d->partitioning = 1;
        h = d->d;
    }
    reg_unlock(r);
    if (why) {
        PyErr_Format(PyExc_ValueError, "partition(): %s", why);
        return NULL;
    }
    return h;
}

/* Partition h (claimed) in the core: *hsp the tiles' handles (PyMem).  A
 * grid out of bounds gets no array: the core refuses it, saying why.  0,
 * or -1 with an exception. */
static int
partition_handles(RuntimeObject *r, weft_data *h, const weft_tiling *t, weft_data ***hsp)
{
    size_t ntiles = (size_t)t->grid_rows * t->grid_cols;
    weft_data **hs = NULL;
    if (t->grid_rows == 0 || t->grid_cols == 0 || ntiles > 4096) {
        hs = NULL; /* the core says what is wrong with the grid */
    } else if ((hs = PyMem_Malloc(ntiles * sizeof *hs)) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    weft_data *none[1];
    int rc = partition_c(r, h, t, hs ? hs : none);
    if (rc != 0) {
        if (rc == WEFT_EDEADLK || rc == WEFT_EBUSY)
            PyErr_Format(rc == WEFT_EBUSY && strstr(weft_last_error(), "pending") == NULL ? PyExc_ValueError
                                                                                          : PyExc_RuntimeError,
                         "partition(): %s", rc == WEFT_EDEADLK ? "the calling task itself accesses this data "
                         "(or waits for a task that does)" : weft_last_error());
        else
            weft_py_err_weft(rc, "partition()"); /* a bad tiling: ValueError with the core's reason */
        PyMem_Free(hs);
        return -1;
    }
    *hsp = hs;
    return 0;
}

/* The tile Data of d for the core's tiles hs, in a tuple; NULL with an
 * exception. */
static PyObject *
tiles_tuple(DataObject *d, weft_data **hs, int ndim, const char *format, const weft_tiling *t)
{
    size_t ntiles = (size_t)t->grid_rows * t->grid_cols;
    PyObject *tuple = PyTuple_New((Py_ssize_t)ntiles);
    for (size_t i = 0; tuple && i < ntiles; i++) {
        DataObject *x = tile_new(d, hs[i], ndim, (Py_ssize_t)t->elem, format, t);
        if (x == NULL) Py_CLEAR(tuple);
        else PyTuple_SET_ITEM(tuple, (Py_ssize_t)i, (PyObject *)x);
    }
    return tuple;
}

/* End the claim: d's tiles (tuple) and grid are set.  Without a tuple the
 * core's tiles stay (they go with d); the Data stays whole in Python, and
 * partition() reports it partitioned already. */
static void
partition_publish(RuntimeObject *r, DataObject *d, PyObject *tuple, const weft_tiling *t)
{
    reg_lock(r);
    if (tuple == NULL) {
        d->partitioning = 0;
        d->tiles = Py_NewRef(Py_None);
        reg_unlock(r);
        return;
    }
    d->tiles = Py_NewRef(tuple);
    d->grid_rows = t->grid_rows;
    d->grid_cols = t->grid_cols;
    d->grid_halo = t->halo;
    d->partitioning = 0;
    reg_unlock(r);
}

/* What partition() returns: the tiles as a list (a 1-D array with an int
 * grid=), else a list of rows of them.  NULL with an exception. */
static PyObject *
tiles_result(PyObject *tuple, int ndim, PyObject *grid, const weft_tiling *t)
{
    if (ndim == 1 && PyLong_Check(grid)) return PySequence_List(tuple);
    PyObject *res = PyList_New(t->grid_rows);
    for (unsigned i = 0; res && i < t->grid_rows; i++) {
        PyObject *row = PyTuple_GetSlice(tuple, (Py_ssize_t)i * t->grid_cols, (Py_ssize_t)(i + 1) * t->grid_cols);
        PyObject *lrow = row ? PySequence_List(row) : NULL;
        Py_XDECREF(row);
        if (lrow == NULL) Py_CLEAR(res);
        else PyList_SET_ITEM(res, i, lrow);
    }
    return res;
}

PyObject *
weft_py_data_partition(DataObject *d, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"grid", "halo", "cols", NULL};
    PyObject *grid, *colsobj = Py_None;
    Py_ssize_t halo = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|n$O:partition", kwlist, &grid, &halo, &colsobj)) return NULL;
    WEFT_PY_HANDOFF_ACQUIRE(d);
    RuntimeObject *r = d->rt;
    weft_tiling t;
    int ndim;
    char format[4];
    if (partition_tiling(d, grid, halo, colsobj, &t, &ndim, format) < 0) return NULL;
    weft_data *h = partition_claim(r, d);
    if (h == NULL) return NULL;
    weft_data **hs = NULL;
    if (partition_handles(r, h, &t, &hs) < 0) {
        reg_lock(r);
        d->partitioning = 0; /* the claim given back */
        reg_unlock(r);
        return NULL;
    }
    PyObject *tuple = tiles_tuple(d, hs, ndim, format, &t);
    partition_publish(r, d, tuple, &t);
    PyObject *res = tuple ? tiles_result(tuple, ndim, grid, &t) : NULL;
    Py_XDECREF(tuple);
    PyMem_Free(hs);
    return res;
}

/* ------------------------------------------------------------------------ */
/* Reductions                                                                */
/* ------------------------------------------------------------------------ */

/* The element a reduction over obj combines (obj a buffer object or a
 * weft.Data; a tile's is its parent's): its struct format and size.  The
 * format points into e (a tile's) or into the buffer e holds; elem_release
 * lets the buffer go.  0, or -1 with an exception. */
typedef struct {
    const char *fmt;
    Py_ssize_t itemsize;
    char fmtbuf[4];
    Py_buffer b;
    int held;
} elem_info;

static int
elem_of(modstate *st, PyObject *obj, const char *what, elem_info *e)
{
    e->held = 0;
    if (Py_IS_TYPE(obj, st->Data_T) && ((DataObject *)obj)->parent) {
        DataObject *x = (DataObject *)obj;
        strcpy(e->fmtbuf, x->format);
        e->fmt = e->fmtbuf;
        e->itemsize = x->elem;
        return 0;
    }
    PyObject *o = Py_IS_TYPE(obj, st->Data_T) ? ((DataObject *)obj)->obj : obj;
    if (!PyObject_CheckBuffer(o)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a weft.Data or an object supporting the buffer "
                     "protocol (a NumPy array, array.array...), got '%.100s'", what, Py_TYPE(o)->tp_name);
        return -1;
    }
    if (PyObject_GetBuffer(o, &e->b, PyBUF_RECORDS_RO) < 0) {
        PyErr_Clear();
        if (PyObject_GetBuffer(o, &e->b, PyBUF_FORMAT | PyBUF_ANY_CONTIGUOUS) < 0) return -1;
    }
    e->held = 1;
    e->fmt = e->b.format ? e->b.format : "B";
    e->itemsize = e->b.itemsize;
    return 0;
}

static void
elem_release(elem_info *e)
{
    if (e->held) PyBuffer_Release(&e->b);
    e->held = 0;
}

int
weft_py_reduce_type(modstate *st, PyObject *obj, const char *what, unsigned *type)
{
    elem_info e;
    if (elem_of(st, obj, what, &e) < 0) return -1;
    const char *fmt = e.fmt;
    Py_ssize_t itemsize = e.itemsize;
    /* The byte order: native only. */
    const union { uint16_t u; uint8_t c[2]; } probe = {1};
    int little = probe.c[0] == 1;
    const char *f = fmt;
    int ok = 1;
    if (*f == '<') ok = little, f++;
    else if (*f == '>' || *f == '!') ok = !little, f++;
    else if (*f == '@' || *f == '=') f++;
    unsigned ty = 0;
    if (ok && f[0] && !f[1]) {
        switch (f[0]) {
        case 'i': case 'l': case 'q': case 'n':
            ty = itemsize == 4 ? WEFT_RED_I32 : itemsize == 8 ? WEFT_RED_I64 : 0;
            break;
        case 'I': case 'L': case 'Q': case 'N':
            ty = itemsize == 4 ? WEFT_RED_U32 : itemsize == 8 ? WEFT_RED_U64 : 0;
            break;
        case 'f':
            ty = itemsize == 4 ? WEFT_RED_F32 : 0;
            break;
        case 'd':
            ty = itemsize == 8 ? WEFT_RED_F64 : 0;
            break;
        default:
            break;
        }
    }
    if (ty == 0) {
        char ts[8];
        if (weft_py_typestr_of(fmt, itemsize, ts) < 0) strcpy(ts, "?");
        PyErr_Format(PyExc_TypeError, "%s: a reduction needs elements of type int32, int64, uint32, uint64, "
                     "float32 or float64 (native byte order); this buffer's are '%s' (struct format '%s', "
                     "%zd bytes)", what, ts, fmt, itemsize);
    }
    elem_release(&e);
    if (ty == 0) return -1;
    *type = ty;
    return 0;
}

int
weft_py_reduce_user_check(modstate *st, PyObject *obj, const char *what, Py_ssize_t itemsize, PyObject *name)
{
    elem_info e;
    if (elem_of(st, obj, what, &e) < 0) return -1;
    /* Bytes are any elements (the core checks that the size is a whole
     * number of them). */
    if (e.itemsize == itemsize || e.itemsize == 1) {
        elem_release(&e);
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "%s: reduction %R combines %zd-byte elements, but this buffer's are %zd bytes "
                 "(struct format '%.40s'): reduce a buffer of the reduction's dtype (or of bytes)",
                 what, name, itemsize, e.itemsize, e.fmt);
    elem_release(&e);
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
Data_wont_use(DataObject *d, PyObject *Py_UNUSED(ignored))
{
    RuntimeObject *r = d->rt;
    reg_lock(r);
    int rc = d->d ? weft_data_wont_use(d->d) : WEFT_EINVAL; /* (brief locks of its own: none of Python's) */
    reg_unlock(r);
    if (rc != 0) {
        PyErr_SetString(PyExc_ValueError, "wont_use(): the data was unregistered");
        return NULL;
    }
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
    Py_VISIT(d->tiles);
    Py_VISIT((PyObject *)d->parent);
    return 0;
}

/* Only an unreachable Data is cleared: a partitioned one and its tiles
 * (each holds the parent) form a cycle, broken here. */
static int
Data_clear(DataObject *d)
{
    Py_CLEAR(d->tiles);
    return 0;
}

static void
Data_dealloc(DataObject *d)
{
    WEFT_PY_HANDOFF_ACQUIRE(d);
    PyTypeObject *tp = Py_TYPE(d);
    PyObject_GC_UnTrack(d);
    /* Registered data is held by its runtime's registry, so reaching here
     * means it was unregistered, the runtime closed, or it never entered.
     * Taking the lock orders this thread after every change other threads
     * made to d under it (the reference count orders them too, but TSan
     * cannot see that). */
    RuntimeObject *r = d->rt;
    reg_lock(r);
    reg_unlock(r);
    if (d->has_view) PyBuffer_Release(&d->view);
    Py_CLEAR(d->tiles);
    Py_CLEAR(d->parent);
    Py_CLEAR(d->obj);
    Py_CLEAR(d->rt);
    WEFT_PY_HANDOFF_RELEASE(d); /* to the next object made in this memory */
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
    WEFT_PY_HANDOFF_ACQUIRE(d);
    if (d->parent) /* its span, halo included */
        return PyLong_FromSize_t(d->ti.rows * d->ti.cols * (size_t)d->elem);
    reg_lock(d->rt);
    Py_ssize_t len = d->has_view ? d->view.len : 0;
    reg_unlock(d->rt);
    return PyLong_FromSsize_t(len);
}

static PyObject *
Data_get_registered(DataObject *d, void *Py_UNUSED(c))
{
    WEFT_PY_HANDOFF_ACQUIRE(d);
    reg_lock(d->rt);
    int on = d->d != NULL && d->rt->rt != NULL && (d->parent == NULL || d->parent->d != NULL);
    reg_unlock(d->rt);
    return PyBool_FromLong(on);
}

static PyObject *
Data_get_readonly(DataObject *d, void *Py_UNUSED(c))
{
    return PyBool_FromLong(d->readonly);
}

static PyObject *
Data_repr(DataObject *d)
{
    WEFT_PY_HANDOFF_ACQUIRE(d);
    if (d->parent) {
        reg_lock(d->rt);
        const char *state = d->d == NULL ? ", unregistered" : "";
        reg_unlock(d->rt);
        const weft_tile_info *t = &d->ti;
        if (d->tndim == 1)
            return PyUnicode_FromFormat("<weft.Data tile %u of '%s': elements %zu-%zu, interior %zu-%zu%s>",
                                        t->index, Py_TYPE(d->obj)->tp_name, t->col0, t->col0 + t->cols - 1,
                                        t->in_col0, t->in_col0 + t->in_cols - 1, state);
        return PyUnicode_FromFormat("<weft.Data tile %u of '%s': rows %zu-%zu, cols %zu-%zu, interior rows "
                                    "%zu-%zu, cols %zu-%zu%s>", t->index, Py_TYPE(d->obj)->tp_name, t->row0,
                                    t->row0 + t->rows - 1, t->col0, t->col0 + t->cols - 1, t->in_row0,
                                    t->in_row0 + t->in_rows - 1, t->in_col0, t->in_col0 + t->in_cols - 1, state);
    }
    reg_lock(d->rt); /* d, closing and has_view are the registry's */
    const char *state = d->d == NULL ? ", unregistered" : d->closing ? ", being unregistered" : "";
    Py_ssize_t len = d->has_view ? d->view.len : (Py_ssize_t)0;
    reg_unlock(d->rt);
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

/* Tiles' geometry: None for a Data that is not a tile. */
static PyObject *
Data_get_parent(DataObject *d, void *Py_UNUSED(c))
{
    return Py_NewRef(d->parent ? (PyObject *)d->parent : Py_None);
}

static PyObject *
Data_get_index(DataObject *d, void *Py_UNUSED(c))
{
    if (!d->parent) Py_RETURN_NONE;
    unsigned gc = d->grid_cols ? d->grid_cols : 1;
    return Py_BuildValue("(II)", d->ti.index / gc, d->ti.index % gc);
}

/* (row0, col0, rows, cols) of the span (which = 0) or of the interior. */
static PyObject *
tile_rect(DataObject *d, int interior)
{
    if (!d->parent) Py_RETURN_NONE;
    const weft_tile_info *t = &d->ti;
    if (interior) return Py_BuildValue("(nnnn)", t->in_row0, t->in_col0, t->in_rows, t->in_cols);
    return Py_BuildValue("(nnnn)", t->row0, t->col0, t->rows, t->cols);
}

static PyObject *Data_get_span(DataObject *d, void *c) { (void)c; return tile_rect(d, 0); }
static PyObject *Data_get_interior(DataObject *d, void *c) { (void)c; return tile_rect(d, 1); }

/* Slices: of the parent array covering the span (window), or of the span
 * covering the interior (inner); one per dimension of the array. */
static PyObject *
slice_of(size_t a, size_t n)
{
    PyObject *x = PyLong_FromSize_t(a), *y = PyLong_FromSize_t(a + n);
    PyObject *sl = x && y ? PySlice_New(x, y, NULL) : NULL;
    Py_XDECREF(x);
    Py_XDECREF(y);
    return sl;
}

static PyObject *
tile_slices(DataObject *d, int inner)
{
    if (!d->parent) Py_RETURN_NONE;
    const weft_tile_info *t = &d->ti;
    size_t r0 = inner ? t->in_row0 - t->row0 : t->row0, c0 = inner ? t->in_col0 - t->col0 : t->col0;
    size_t nr = inner ? t->in_rows : t->rows, nc = inner ? t->in_cols : t->cols;
    PyObject *s1 = slice_of(c0, nc);
    if (d->tndim == 1 || s1 == NULL) {
        PyObject *res = s1 ? PyTuple_Pack(1, s1) : NULL;
        Py_XDECREF(s1);
        return res;
    }
    PyObject *s0 = slice_of(r0, nr);
    PyObject *res = s0 ? PyTuple_Pack(2, s0, s1) : NULL;
    Py_XDECREF(s0);
    Py_DECREF(s1);
    return res;
}

static PyObject *Data_get_window(DataObject *d, void *c) { (void)c; return tile_slices(d, 0); }
static PyObject *Data_get_inner(DataObject *d, void *c) { (void)c; return tile_slices(d, 1); }

static PyObject *
Data_get_halo(DataObject *d, void *Py_UNUSED(c))
{
    if (!d->parent) Py_RETURN_NONE;
    return PyLong_FromUnsignedLong(d->grid_halo);
}

static PyObject *
Data_get_tiles(DataObject *d, void *Py_UNUSED(c))
{
    WEFT_PY_HANDOFF_ACQUIRE(d);
    reg_lock(d->rt);
    PyObject *t = d->tiles && PyTuple_Check(d->tiles) ? d->tiles : Py_None;
    Py_INCREF(t); /* plain C: the registry holds d's tiles, set once */
    reg_unlock(d->rt);
    return t;
}

static PyObject *
Data_get_grid(DataObject *d, void *Py_UNUSED(c))
{
    WEFT_PY_HANDOFF_ACQUIRE(d);
    reg_lock(d->rt);
    unsigned gr = d->grid_rows, gc = d->grid_cols;
    reg_unlock(d->rt);
    if (gc == 0) Py_RETURN_NONE;
    return Py_BuildValue("(II)", gr, gc);
}

static PyObject *
Data_partition(DataObject *d, PyObject *args, PyObject *kwds)
{
    return weft_py_data_partition(d, args, kwds);
}

static PyMethodDef Data_methods[] = {
    {"partition", (PyCFunction)(void (*)(void))Data_partition, METH_VARARGS | METH_KEYWORDS,
     "partition(grid, halo=0, *, cols=None) -> tiles\n\n"
     "Split this registered 1-D or C-contiguous 2-D array into grid = (grid_rows, grid_cols) tiles (an "
     "int for a 1-D array), each a weft.Data of its own for reads=/writes=/readwrites=, spanning `halo` "
     "elements of its neighbours on each side (read-only: a reader sees their newest values).  The "
     "element type and shape come from the buffer; cols= tiles only the first cols elements of each "
     "row (the rest is padding, never touched).  Returns a list of lists of tiles (a list for an int "
     "grid).  Waits for the tasks already spawned on the data.  Once only; the tiles live as long as "
     "the data (unregister the whole array)."},
    {"unregister", (PyCFunction)Data_unregister, METH_NOARGS,
     "Wait for the tasks that use it, then release the buffer."},
    {"wont_use", (PyCFunction)Data_wont_use, METH_NOARGS,
     "A hint (StarPU's starpu_data_wont_use): it will not be used again soon, so its copies on GPUs "
     "are the first evicted when a GPU needs room.  Never blocks."},
    {"__enter__", (PyCFunction)Data_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Data_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Data_getset[] = {
    {"obj", (getter)Data_get_obj, NULL, "the registered object", NULL},
    {"nbytes", (getter)Data_get_nbytes, NULL, "size of its buffer", NULL},
    {"registered", (getter)Data_get_registered, NULL, "True while registered", NULL},
    {"readonly", (getter)Data_get_readonly, NULL, "True for a read-only buffer", NULL},
    {"tiles", (getter)Data_get_tiles, NULL, "its tiles (a tuple, row-major) once partitioned, else None", NULL},
    {"grid", (getter)Data_get_grid, NULL, "(grid_rows, grid_cols) once partitioned (a tile: its parent's "
     "grid), else None", NULL},
    {"parent", (getter)Data_get_parent, NULL, "a tile: the weft.Data it was partitioned from (else None)", NULL},
    {"index", (getter)Data_get_index, NULL, "a tile: its (row, col) in the grid (else None)", NULL},
    {"span", (getter)Data_get_span, NULL,
     "a tile: (row0, col0, rows, cols) of what it spans in the parent, halo included, in elements "
     "(a 1-D array: row0 0, rows 1)", NULL},
    {"interior", (getter)Data_get_interior, NULL,
     "a tile: (row0, col0, rows, cols) of its interior in the parent (what a writer writes)", NULL},
    {"window", (getter)Data_get_window, NULL,
     "a tile: the slices of the parent array it spans (a[t.window] is the tile, halo included)", NULL},
    {"inner", (getter)Data_get_inner, NULL,
     "a tile: the slices of its span that are its interior (ctx.array(t)[t.inner])", NULL},
    {"halo", (getter)Data_get_halo, NULL, "a tile: the halo width of its tiling", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyType_Slot Data_slots[] = {
    {Py_tp_doc, "The memory a buffer-protocol object covers, registered with a runtime (one "
                "weft.Data per range: every object over the same bytes names it).  Tasks that "
                "name it, or any object over memory overlapping it, in reads=/writes=/"
                "readwrites=/commutes= are ordered by their access modes; disjoint ranges are "
                "independent.  The buffer of obj, the first object named for this memory, "
                "stays exported (its memory pinned) until unregistered.  Safe to use from "
                "several threads (the runtime's registry has a lock of its own)."},
    {Py_tp_new, Data_new_err},
    {Py_tp_dealloc, Data_dealloc},
    {Py_tp_traverse, Data_traverse},
    {Py_tp_clear, Data_clear},
    {Py_tp_methods, Data_methods},
    {Py_tp_getset, Data_getset},
    {Py_tp_repr, Data_repr},
    {0, NULL}};

PyType_Spec weft_py_data_spec = {"weft.Data", sizeof(DataObject), 0,
                                Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, Data_slots};
