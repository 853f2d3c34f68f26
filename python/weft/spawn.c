/*
 * spawn.c — spawning: arguments, dependencies and data accesses, submission
 * to the C runtime (into a C task space for task=T[i]; a dependency on a slot
 * nobody spawned into yet is its key's placeholder there), and the decorator
 * form.
 */
#include "_weft.h"

/* ------------------------------------------------------------------------ */
/* Spawning                                                                  */
/* ------------------------------------------------------------------------ */

#define SMALL 8 /* dependencies and accesses kept on the stack */

/* Where t goes: the C runtime (rt, read once by the caller), or for a
 * slot its C space (*space), the space bound to r.  0, or -1 with an
 * exception (*rcp WEFT_ECLOSED for a closed runtime). */
static int
submit_target(RuntimeObject *r, TaskObject *t, weft_runtime *rt, weft_space **space, int *rcp)
{
    if (rt == NULL && !t->space) {
        *rcp = WEFT_ECLOSED;
        PyErr_SetString(PyExc_RuntimeError, "spawn(): the weft runtime is closed");
        return -1;
    }
    if (t->space) {
        /* Binds the space to r; a slot cancelled before it was spawned
         * cancels its key's placeholder, which the C space passes on. */
        if (weft_py_slot_handle(t, r) == NULL) return -1;
        *space = ((SpaceObject *)t->space)->s;
    }
    return 0;
}

/* The cell that carries t (a new reference) and nat to the trampoline;
 * NULL with MemoryError. */
static cell *
cell_new(RuntimeObject *r, TaskObject *t, weft_py_native_call *nat)
{
    cell *c = malloc(sizeof *c);
    if (c == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    c->t = (TaskObject *)Py_NewRef(t);
    c->rt = r;
    c->placed = NULL;
    c->id = 0;
    c->next = NULL;
    c->scope = NULL;
    c->keep = NULL;
    c->native = nat;
    c->resume = 0;
    return c;
}

/* desc for t's task: its body and cell c, dependencies, accesses,
 * placements, its kind, and its name (namebuf holds a slot's). */
static void
desc_fill(weft_task_desc *desc, TaskObject *t, cell *c, weft_task **deps, size_t ndeps, weft_access *acc,
          size_t nacc, const weft_placement *pl, size_t npl, char namebuf[WEFT_PY_DESC_NAME])
{
    weft_task_desc_init(desc);
    desc->body = c->native ? weft_py_native_trampoline : weft_py_trampoline;
    desc->arg = c;
    desc->arg_destroy = weft_py_arg_destroy;
    desc->deps = deps;
    desc->ndeps = ndeps;
    desc->accesses = acc;
    desc->naccesses = nacc;
    desc->priority = t->priority;
    desc->cost = t->cost;
    desc->placements = pl;
    desc->nplacements = npl;
    if (npl) desc->on_finish = weft_py_on_finish;
    /* Its kind for the "dmda" policy's models (weft_py_spawn_kind): kind=,
     * or where the runtime keeps models its function's qualified name
     * (every Python body shares one C trampoline, which would name them
     * all). */
    if (t->kind && (desc->kind = PyUnicode_AsUTF8(t->kind)) == NULL) PyErr_Clear();
    if (t->name) {
        desc->name = weft_py_desc_name(t, namebuf);
    } else if (t->fn) {
        /* An unnamed task goes by its function's name in traces and in the
         * messages about it (a dependent's CancelledError names it). */
        desc->name = weft_py_fn_label(t->fn);
    }
}

/* What a second spawn into a key is told to write instead. */
#define SPAWNED_HINT                                                                                   \
    " (a key takes one task: to reuse the space for another round, call .clear() on it between rounds, " \
    "make a TaskSpace per round, or put the round in the key, T[it, i])"

/* Spawn desc into space (t's key) or rt: *h, or the core's error. */
static int
spawn_into_core(RuntimeObject *r, weft_runtime *rt, weft_space *space, TaskObject *t, weft_task_desc *desc,
                weft_task **h)
{
    int rc = WEFT_EAGAIN;
    int hold = r->spawn_gil == SPAWN_HOLD ||
               (r->spawn_gil == SPAWN_YIELD && atomic_load_explicit(&r->py_busy, memory_order_relaxed) == 0);
    if (hold) {
        /* Keep the GIL for a spawn that cannot block: WEFT_SPAWN_NOWAIT
         * answers WEFT_EAGAIN (keeping the cell) where backpressure would
         * block; only then is the GIL released for a blocking spawn. */
        desc->flags = WEFT_SPAWN_NOWAIT;
        int prev = weft_py_tl_attached;
        weft_py_tl_attached = 1;
        rc = space ? weft_space_spawn(space, &t->index, 1, desc, h) : weft_spawn(rt, desc, h);
        weft_py_tl_attached = prev;
        desc->flags = 0;
    }
    if (rc == WEFT_EAGAIN) {
        BEGIN_NOGIL
        rc = space ? weft_space_spawn(space, &t->index, 1, desc, h) : weft_spawn(rt, desc, h);
        END_NOGIL
    }
    return rc;
}

/* The exception for the core's refusal rc of t's spawn (why: its
 * message, kept for the caller); -1. */
static int
submit_error(TaskObject *t, weft_space *space, int rc, char *why, size_t whylen)
{
    snprintf(why, whylen, "%s", weft_last_error());
    if (rc == WEFT_ECLOSED) {
        PyErr_SetString(PyExc_RuntimeError, "spawn(): the weft runtime is closed");
        return -1;
    }
    if (rc == WEFT_EDEADLK) {
        /* (cycle_message says through which dependency or data access.) */
        PyErr_Format(PyExc_ValueError, "spawn(): dependency cycle: spawning %R would close a cycle (%s)",
                     t->name ? t->name : Py_None, why);
        return -1;
    }
    if (rc == WEFT_ENODEV) {
        /* The core's reason, with the advice in Python's terms instead of
         * its own (weft_config's fields). */
        char reason[512];
        snprintf(reason, sizeof reason, "%s", why);
        char *advice = strstr(reason, " (add an alternative");
        if (advice) *advice = 0;
        PyErr_Format(PyExc_ValueError, "spawn(): %s (add an alternative this runtime has, such as weft.cpu, or "
                     "create the runtime with the devices asked for: weft.Runtime(devices=\"cpu,vgpu:N\"), and "
                     "vgpu_memory= for a virtual GPU's memory; %s)", reason, weft_strerror(rc));
        return -1;
    }
    if (rc == WEFT_EINVAL && space && strstr(weft_last_error(), "already spawned")) {
        PyErr_Format(PyExc_ValueError, "spawn(): task %R was already spawned%s",
                     t->name ? t->name : Py_None, SPAWNED_HINT);
        return -1;
    }
    weft_py_err_weft(rc, "spawn()");
    return -1;
}

/* Submit t to the C runtime with the given C dependencies and accesses; a
 * slot (t->space set) goes into its C space under its key's index.  nat: a
 * native body's call (native.c), or NULL for a Python body; the task owns
 * it from here on, whatever happens. */
static int
submit_c(RuntimeObject *r, TaskObject *t, weft_task **deps, size_t ndeps, weft_access *acc,
         size_t nacc, const weft_placement *pl, size_t npl, weft_py_native_call *nat, int *rcp,
         char *why, size_t whylen)
{
    weft_space *space = NULL;
    /* The C runtime, read once: a close on another thread may clear r->rt
     * after the spawn's open check (a handle read before that is refused by
     * the core with WEFT_ECLOSED once destroyed). */
    weft_runtime *rt = r->rt;
    *rcp = 0;
    cell *c = NULL;
    if (submit_target(r, t, rt, &space, rcp) < 0 || (c = cell_new(r, t, nat)) == NULL) {
        PyMem_RawFree(nat);
        return -1;
    }
    if (npl && t->cont_pl == NULL) {
        /* Kept for the continuations of an `async def` body (coro.c): the
         * rest of it is placed as its spawn said. */
        t->cont_pl = PyMem_Malloc(sizeof *pl * npl);
        if (t->cont_pl == NULL) {
            Py_DECREF(t);
            free(c);
            PyMem_RawFree(nat);
            PyErr_NoMemory();
            return -1;
        }
        memcpy(t->cont_pl, pl, sizeof *pl * npl);
        t->cont_npl = npl;
    }
    weft_task_desc desc;
    char namebuf[WEFT_PY_DESC_NAME];
    desc_fill(&desc, t, c, deps, ndeps, acc, nacc, pl, npl, namebuf);
    atomic_fetch_add_explicit(&r->inflight, 1, memory_order_relaxed);
    weft_task *h = NULL;
    int rc = spawn_into_core(r, rt, space, t, &desc, &h);
    if (rc != 0) {
        /* weft_py_arg_destroy ran: the cell is gone, its reference dropped. */
        *rcp = rc;
        return submit_error(t, space, rc, why, whylen);
    }
    /* The handle first: a thread that sees PH_SUBMITTED finds it.  (A slot's
     * ph stays: its placeholder finishes as this task does.) */
    atomic_store(&t->h, h);
    atomic_store(&t->phase, PH_SUBMITTED);
    return 0;
}

typedef struct {
    PyObject *deps, *reads, *writes, *readwrites, *commutes, *name, *priority, *task, *kwargs,
        *runtime, *placement, *share, *memory, *device_data, *reduces, *scratch, *cost, *kind;
} spawn_kw;

static int
parse_kw(modstate *st, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, spawn_kw *kw,
         int allow_runtime)
{
    memset(kw, 0, sizeof *kw);
    if (kwnames == NULL) return 0;
    Py_ssize_t n = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, i);
        PyObject *v = args[nargs + i];
        PyObject **slot = NULL;
        if (k == st->s_deps) slot = &kw->deps;
        else if (k == st->s_reads) slot = &kw->reads;
        else if (k == st->s_writes) slot = &kw->writes;
        else if (k == st->s_readwrites) slot = &kw->readwrites;
        else if (k == st->s_commutes) slot = &kw->commutes;
        else if (k == st->s_name) slot = &kw->name;
        else if (k == st->s_priority) slot = &kw->priority;
        else if (k == st->s_task) slot = &kw->task;
        else if (k == st->s_kwargs) slot = &kw->kwargs;
        else if (allow_runtime && k == st->s_runtime) slot = &kw->runtime;
        else if (k == st->s_placement) slot = &kw->placement;
        else if (k == st->s_share) slot = &kw->share;
        else if (k == st->s_memory) slot = &kw->memory;
        else if (k == st->s_device_data) slot = &kw->device_data;
        else if (k == st->s_reduces) slot = &kw->reduces;
        else if (k == st->s_scratch) slot = &kw->scratch;
        else if (k == st->s_cost) slot = &kw->cost;
        else if (k == st->s_kind) slot = &kw->kind;
        else {
            PyObject *names[] = {st->s_deps, st->s_reads, st->s_writes, st->s_readwrites,
                                 st->s_commutes, st->s_name, st->s_priority, st->s_task,
                                 st->s_kwargs, allow_runtime ? st->s_runtime : NULL,
                                 st->s_placement, st->s_share, st->s_memory, st->s_device_data,
                                 st->s_reduces, st->s_scratch, st->s_cost, st->s_kind};
            for (size_t j = 0; j < sizeof names / sizeof *names; j++) {
                if (names[j] && PyUnicode_Compare(k, names[j]) == 0) {
                    PyObject **slots[] = {&kw->deps, &kw->reads, &kw->writes, &kw->readwrites,
                                          &kw->commutes, &kw->name, &kw->priority, &kw->task,
                                          &kw->kwargs, &kw->runtime, &kw->placement, &kw->share,
                                          &kw->memory, &kw->device_data, &kw->reduces, &kw->scratch,
                                          &kw->cost, &kw->kind};
                    slot = slots[j];
                    break;
                }
            }
            if (PyErr_Occurred()) return -1;
            /* Parla's keywords: say weft's. */
            static const char *const parla[][2] = {
                {"dependencies", "deps=[...] (tasks, slots T[i], slices T[0:i], or a whole TaskSpace)"},
                {"taskid", "task=T[i]"},
                {"vcus", "share= (a fraction of each device of placement=: a GPU, or the CPU as one whole "
                         "with placement=weft.cpu)"},
                {"input", "reads=[...] (buffers)"},
                {"output", "writes=[...] (buffers)"},
                {"inout", "readwrites=[...] (buffers)"},
                {"ndevices", "placement=weft.gpu * n"},
            };
            for (size_t j = 0; slot == NULL && j < sizeof parla / sizeof *parla; j++)
                if (PyUnicode_CompareWithASCIIString(k, parla[j][0]) == 0) {
                    PyErr_Format(PyExc_TypeError, "spawn() got an unexpected keyword argument %R: "
                                 "weft's is %s", k, parla[j][1]);
                    return -1;
                }
            if (slot == NULL) {
                PyErr_Format(PyExc_TypeError,
                             "spawn() got an unexpected keyword argument %R (the body's own keyword "
                             "arguments go in kwargs={...})", k);
                return -1;
            }
        }
        *slot = v;
    }
    return 0;
}

/* Items of a deps=/reads=... value: None, one item, or a list/tuple/iterable.
 * Returns a new reference to a list or tuple (or NULL with no error for None). */
static PyObject *
as_seq(PyObject *v, PyTypeObject *single_t, const char *what, int single_ok_any_buffer)
{
    if (v == NULL || v == Py_None) return NULL;
    if (PyList_CheckExact(v) || PyTuple_CheckExact(v)) return Py_NewRef(v);
    if (Py_IS_TYPE(v, single_t) ||
        (single_ok_any_buffer && PyObject_CheckBuffer(v)))
        return PyTuple_Pack(1, v);
    PyObject *it = PySequence_Fast(v, "");
    if (it == NULL) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "spawn(): %s= expects a list of %s, got '%.100s'", what,
                     single_ok_any_buffer ? "buffers or weft.Data" : "weft.Task",
                     Py_TYPE(v)->tp_name);
    }
    return it;
}

/* Whether v is a weft.unordered(...) access. */
static int
is_unordered(const modstate *st, PyObject *v)
{
    return v && st->Unordered_cls && PyObject_TypeCheck(v, (PyTypeObject *)st->Unordered_cls);
}

/* The buffer of weft.unordered(buf) (a new reference), WEFT_UNORDERED
 * added to *mode; NULL with an exception. */
static PyObject *
unordered_obj(const modstate *st, PyObject *u, const char *what, unsigned *mode)
{
    PyObject *obj = PyObject_GetAttrString(u, "obj");
    if (obj == NULL) return NULL;
    if (is_unordered(st, obj)) {
        Py_DECREF(obj);
        PyErr_Format(PyExc_TypeError, "%s: weft.unordered(weft.unordered(...)): wrap the buffer once", what);
        return NULL;
    }
    *mode |= WEFT_UNORDERED;
    return obj;
}

unsigned
weft_py_reduce_op(PyObject *op)
{
    if (PyLong_Check(op)) {
        long v = PyLong_AsLong(op);
        if (v == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        return v == WEFT_RED_SUM || v == WEFT_RED_MIN || v == WEFT_RED_MAX ? (unsigned)v : 0;
    }
    if (PyUnicode_Check(op)) {
        const char *s = PyUnicode_AsUTF8(op);
        if (s == NULL) {
            PyErr_Clear();
            return 0;
        }
        if (strcmp(s, "sum") == 0) return WEFT_RED_SUM;
        if (strcmp(s, "min") == 0) return WEFT_RED_MIN;
        if (strcmp(s, "max") == 0) return WEFT_RED_MAX;
    }
    return 0;
}

/* Whether op is a user reduction (a weft.Reduction: what it describes is
 * its _weft_reduction tuple, _native.py). */
static int
is_user_reduction(PyObject *op)
{
    if (PyLong_Check(op) || PyUnicode_Check(op)) return 0;
    return PyObject_HasAttrString(op, "_weft_reduction");
}

/* PyDict_GetItemRef and PyDict_SetDefaultRef before Python 3.13. */
#if PY_VERSION_HEX < 0x030D0000
static int
PyDict_GetItemRef(PyObject *d, PyObject *k, PyObject **out)
{
    PyObject *v = PyDict_GetItemWithError(d, k);
    *out = Py_XNewRef(v);
    return v ? 1 : PyErr_Occurred() ? -1 : 0;
}

static int
PyDict_SetDefaultRef(PyObject *d, PyObject *k, PyObject *v, PyObject **out)
{
    PyObject *x = PyDict_SetDefault(d, k, v);
    *out = Py_XNewRef(x);
    return x ? (x == v ? 0 : 1) : -1;
}
#endif

/* The operator of user reduction red in runtime r (registered with it on
 * first use, then kept in r->reductions), with its element's size and its
 * name (borrowed from red's description, which red keeps); 0, or -1 with
 * an exception. */
static int
user_reduction_op(RuntimeObject *r, PyObject *red, const char *what, unsigned *op, Py_ssize_t *itemsize,
                  PyObject **name)
{
    PyObject *desc = PyObject_GetAttrString(red, "_weft_reduction");
    if (desc == NULL) return -1;
    unsigned long long combine, init, arg;
    Py_ssize_t size;
    PyObject *identity, *nm;
    int ok = PyTuple_Check(desc) &&
             PyArg_ParseTuple(desc, "KKOnKU", &combine, &init, &identity, &size, &arg, &nm) && size > 0 &&
             (identity == Py_None || (PyBytes_Check(identity) && PyBytes_GET_SIZE(identity) == size));
    if (!ok) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError, "%s: %R is not a well-formed weft.Reduction", what, red);
        Py_DECREF(desc);
        return -1;
    }
    *itemsize = size;
    *name = nm; /* (alive while red is: red holds desc) */
    PyObject *have;
    int found = PyDict_GetItemRef(r->reductions, red, &have);
    if (found < 0) {
        Py_DECREF(desc);
        return -1;
    }
    if (found == 0) {
        weft_reduction_desc d = {0};
        d.elem_size = (size_t)size;
        d.identity = identity == Py_None ? NULL : PyBytes_AS_STRING(identity);
        d.init = (weft_reduction_init_fn)(uintptr_t)init;
        d.combine = (weft_reduction_combine_fn)(uintptr_t)combine;
        d.arg = (void *)(uintptr_t)arg;
        d.name = PyUnicode_AsUTF8(nm);
        unsigned fresh = 0;
        weft_runtime *rt = atomic_load(&r->rt);
        int rc = d.name && rt ? weft_reduction_register(rt, &d, &fresh) : WEFT_ECLOSED;
        if (rc != 0) {
            if (!PyErr_Occurred()) weft_py_err_weft(rc, what);
            Py_DECREF(desc);
            return -1;
        }
        /* Two threads registering it at once: the first stored is used (the
         * other's number stays unused until the runtime is destroyed). */
        PyObject *v = PyLong_FromUnsignedLong(fresh);
        if (v == NULL || PyDict_SetDefaultRef(r->reductions, red, v, &have) < 0) {
            Py_XDECREF(v);
            Py_DECREF(desc);
            return -1;
        }
        Py_DECREF(v);
    }
    *op = (unsigned)PyLong_AsUnsignedLong(have);
    Py_DECREF(have);
    Py_DECREF(desc);
    return 0;
}

/* reduces=: None, one (buffer, op) pair, or a list/tuple of pairs; a new
 * reference to a list or tuple of pairs (NULL with no error for None). */
static PyObject *
reduces_seq(PyObject *v)
{
    if (v == NULL || v == Py_None) return NULL;
    if (PyTuple_Check(v) && PyTuple_GET_SIZE(v) == 2 &&
        (weft_py_reduce_op(PyTuple_GET_ITEM(v, 1)) != 0 || is_user_reduction(PyTuple_GET_ITEM(v, 1))))
        return PyTuple_Pack(1, v);
    if (PyList_CheckExact(v) || PyTuple_CheckExact(v)) return Py_NewRef(v);
    PyObject *it = PySequence_Fast(v, "");
    if (it == NULL) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "spawn(): reduces= expects a list of (buffer, op) pairs such as "
                     "[(a, weft.SUM)], got '%.100s'", Py_TYPE(v)->tp_name);
    }
    return it;
}

/* scratch=: None, one item, or a list/tuple of items (an item: a size in
 * bytes, or a buffer or weft.Data whose size it takes); a new reference to
 * a list or tuple (NULL with no error for None). */
static PyObject *
scratch_seq(modstate *st, PyObject *v)
{
    if (v == NULL || v == Py_None) return NULL;
    if (PyList_CheckExact(v) || PyTuple_CheckExact(v)) return Py_NewRef(v);
    if (PyIndex_Check(v) || PyObject_CheckBuffer(v) || Py_IS_TYPE(v, st->Data_T)) return PyTuple_Pack(1, v);
    PyObject *it = PySequence_Fast(v, "");
    if (it == NULL) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "spawn(): scratch= expects sizes in bytes (ints), buffers or weft.Data "
                     "(a buffer of the same size each), got '%.100s'", Py_TYPE(v)->tp_name);
    }
    return it;
}

/* The bytes of scratch= item x of a spawn on r: an int; a weft.Data's (a
 * tile's span, halo included); a buffer's.  0 with an exception. */
static size_t
scratch_bytes(modstate *st, RuntimeObject *r, PyObject *x, const char *what)
{
    Py_ssize_t n = 0;
    if (Py_IS_TYPE(x, st->Data_T)) {
        const DataObject *d = (const DataObject *)x; /* (its extent is set when it is made: no lock) */
        if (d->rt != r) {
            PyErr_Format(PyExc_ValueError, "%s: this weft.Data belongs to another runtime", what);
            return 0;
        }
        n = d->parent ? (Py_ssize_t)(d->ti.rows * d->ti.cols) * d->elem : (Py_ssize_t)(d->hi - d->lo);
    } else if (PyBool_Check(x)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a size in bytes, a buffer or a weft.Data, got a bool", what);
        return 0;
    } else if (PyIndex_Check(x) && !PyObject_CheckBuffer(x)) {
        if ((n = PyNumber_AsSsize_t(x, PyExc_OverflowError)) == -1 && PyErr_Occurred()) return 0;
    } else if (PyObject_CheckBuffer(x)) {
        Py_buffer b;
        if (PyObject_GetBuffer(x, &b, PyBUF_RECORDS_RO) < 0) return 0;
        n = b.len;
        PyBuffer_Release(&b);
    } else {
        PyErr_Format(PyExc_TypeError, "%s: expected a size in bytes (an int), a buffer or a weft.Data (a buffer "
                     "of its size), got '%.100s'", what, Py_TYPE(x)->tp_name);
        return 0;
    }
    if (n <= 0) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes: a scratch buffer has at least one byte", what, n);
        return 0;
    }
    return (size_t)n;
}

/* The C accesses of scratch= items scr on r (the handle of each one's size:
 * weft_py_scratch_handle), mode WEFT_SCRATCH, on the host unless
 * device_data, into acc[k], their sizes into bytes[k]; 0, or -1 with an
 * exception. */
static int
scratch_accesses(modstate *st, RuntimeObject *r, PyObject *scr, int device_data, weft_access *acc, size_t *bytes)
{
    for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(scr); k++) {
        char what[48];
        snprintf(what, sizeof what, "spawn(): scratch[%zd]", k);
        if ((bytes[k] = scratch_bytes(st, r, PySequence_Fast_GET_ITEM(scr, k), what)) == 0) return -1;
        if ((acc[k].data = weft_py_scratch_handle(r, bytes[k], what)) == NULL) return -1;
        acc[k].mode = WEFT_SCRATCH | (device_data ? 0u : (unsigned)WEFT_HOST);
    }
    return 0;
}

/* The C accesses of a spawn: av's (the named ones) with the ns scratch ones inserted after the na named ones
 * (views find access i at C access i); av's own array when ns is 0, else
 * a new one (PyMem) in *owned.  NULL with MemoryError. */
static weft_access *
with_scratch(const weft_py_accs *av, size_t na, const weft_access *sacc, size_t ns, weft_access **owned)
{
    *owned = NULL;
    if (ns == 0) return av->acc;
    weft_access *all = PyMem_Malloc((av->n + ns) * sizeof *all);
    if (all == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    memcpy(all, av->acc, na * sizeof *all);
    memcpy(all + na, sacc, ns * sizeof *all);
    memcpy(all + na + ns, av->acc + na, (av->n - na) * sizeof *all);
    *owned = all;
    return all;
}

/* One item of reduces=: *obj (borrowed) and its operator (a built-in one
 * in *op, or a weft.Reduction in *user, borrowed); 0, or -1 with a
 * TypeError / ValueError naming what is wrong. */
static int
reduce_pair(modstate *st, PyObject *pair, const char *what, PyObject **obj, unsigned *op, PyObject **user)
{
    (void)st;
    if (!(PyTuple_Check(pair) || PyList_Check(pair)) || PySequence_Fast_GET_SIZE(pair) != 2) {
        PyErr_Format(PyExc_TypeError, "%s: expected a (buffer, op) pair such as (a, weft.SUM), got '%.100s'",
                     what, Py_TYPE(pair)->tp_name);
        return -1;
    }
    *obj = PySequence_Fast_GET_ITEM(pair, 0);
    PyObject *o = PySequence_Fast_GET_ITEM(pair, 1);
    *user = NULL;
    if ((*op = weft_py_reduce_op(o)) == 0 && is_user_reduction(o)) {
        *user = o;
        return 0;
    }
    if (*op == 0) {
        PyErr_Format(PyExc_ValueError, "%s: unknown reduction operator %R: use weft.SUM, weft.MIN or "
                     "weft.MAX (or 'sum', 'min', 'max'), or a weft.Reduction", what, o);
        return -1;
    }
    return 0;
}

/* The spawn's own name of its named access k (reads, writes, readwrites,
 * commutes, then reduces, each in the order given): "reads[1]". */
static void
access_label(char *buf, size_t size, PyObject *const accs[4], size_t k)
{
    static const char *const names[4] = {"reads", "writes", "readwrites", "commutes"};
    for (int m = 0; m < 4; m++) {
        size_t n = accs[m] ? (size_t)PySequence_Fast_GET_SIZE(accs[m]) : 0;
        if (k < n) {
            snprintf(buf, size, "%s[%zu]", names[m], k);
            return;
        }
        k -= n;
    }
    snprintf(buf, size, "reduces[%zu]", k);
}

/* The C core refuses a task that reduces a tile and also names the tile's
 * parent, or reads (R, RW, COMMUTE) a tile of the same family whose halo
 * covers part of the reduced one's interior: the order-only accesses those
 * add on the reduced tile would merge with its reduction (a task does not
 * read what it reduces).  Said here first, naming the spawn's own
 * arguments rather than C access numbers.  The named accesses are
 * av->dat[0 .. av->n), the last nred of them the reductions.  0, or -1 with
 * a ValueError.  (Tiles' geometry and parent are set when they are made and
 * only read afterwards: no lock.) */
static int
tile_reduce_check(const weft_py_accs *av, PyObject *const accs[4], Py_ssize_t nred)
{
    size_t n = av->n, first = n - (size_t)nred;
    for (size_t i = first; i < n; i++) {
        const DataObject *x = av->dat[i];
        if (x->parent == NULL) continue;
        const weft_tile_info *xi = &x->ti;
        unsigned gc = x->grid_cols ? x->grid_cols : 1;
        for (size_t j = 0; j < n; j++) {
            const DataObject *e = av->dat[j];
            int parent = e == x->parent, halo = 0;
            if (j == i) continue;
            if (!parent && e->parent == x->parent && e != x && (av->acc[j].mode & WEFT_R)) {
                const weft_tile_info *ei = &e->ti; /* its span, halo included, meets x's interior */
                halo = ei->row0 < xi->in_row0 + xi->in_rows && xi->in_row0 < ei->row0 + ei->rows &&
                       ei->col0 < xi->in_col0 + xi->in_cols && xi->in_col0 < ei->col0 + ei->cols;
            }
            if (!parent && !halo) continue;
            char a[40], b[40];
            access_label(a, sizeof a, accs, i);
            access_label(b, sizeof b, accs, j);
            if (parent)
                PyErr_Format(PyExc_ValueError, "spawn(): %s reduces tile (%u, %u), and %s names the array it was "
                             "partitioned from: a task that reduces a tile must not also access its parent "
                             "(use the whole array in a later task)", a, xi->index / gc, xi->index % gc, b);
            else
                PyErr_Format(PyExc_ValueError, "spawn(): %s reduces tile (%u, %u), and %s reads tile (%u, %u), "
                             "whose halo covers part of it: a task must not read what it reduces (read the "
                             "neighbour in a later task)", a, xi->index / gc, xi->index % gc, b,
                             e->ti.index / gc, e->ti.index % gc);
            return -1;
        }
    }
    return 0;
}

/* A cycle refused by the C space (why: its message, "... spawning #1[0]
 * would close a cycle: its dependency 2 (task 'T[1]' (id 5)) already
 * waits ..." or "...: its data access 0 follows task 'T[1]' (id 5), a
 * writer of that data, which already waits ..."): the ValueError again,
 * naming the slot, the spawn's own argument (deps[2], reads[0]) and the
 * task it would follow. */
/* From "its data access 0 follows task 'T[1, 2]' (id 5), a writer of
 * ...": the task named ("task 'T[1, 2]' (id 5)": a key's label may hold
 * commas) in who; 0 if the text is not of that shape. */
static int
data_cycle_who(const char *a, char *who, size_t len)
{
    const char *from = strstr(a, " follows ");
    if (from == NULL) return 0;
    from += strlen(" follows ");
    const char *end = strstr(from, ", a writer of");
    if (end == NULL) end = strstr(from, ", a reader of");
    if (end == NULL) return 0;
    size_t n = (size_t)(end - from) < len - 1 ? (size_t)(end - from) : len - 1;
    memcpy(who, from, n);
    who[n] = 0;
    return 1;
}

static void
cycle_message(RuntimeObject *r, TaskObject *t, PyObject *deps, PyObject *const accs[4], size_t na,
              const char *why)
{
    if (t->name == NULL) return; /* (a cycle goes through a slot: it has a name) */
    PyObject *me = t->name;
    const char *d = strstr(why, "its dependency "), *a = strstr(why, "its data access ");
    unsigned long k = 0;
    char who[96] = "";
    PyObject *msg = NULL;
    if (d && sscanf(d, "its dependency %lu (%95[^)])", &k, who) >= 1) {
        if (strchr(who, '(')) strncat(who, ")", sizeof who - strlen(who) - 1); /* "task 'x' (id 5" */
        PyObject *dep = deps && (Py_ssize_t)k < PySequence_Fast_GET_SIZE(deps) ? PySequence_Fast_GET_ITEM(deps, k) : NULL;
        PyObject *dn = dep && Py_IS_TYPE(dep, Py_TYPE(t)) ? ((TaskObject *)dep)->name : NULL;
        PyObject *that = dn ? Py_NewRef(dn) : PyUnicode_FromString("that task");
        msg = that ? PyUnicode_FromFormat("spawn(): dependency cycle: %U cannot follow deps[%lu] (%s): %U already "
                                          "waits, directly or not, for %U. Drop that dependency, or make the tasks "
                                          "follow only tasks before them", me, k, who, that, me)
                   : NULL;
        Py_XDECREF(that);
    } else if (a && sscanf(a, "its data access %lu follows ", &k) == 1 && data_cycle_who(a, who, sizeof who)) {
        char arg[40];
        const char *role = strstr(a, "a writer of") ? "writes" : "reads";
        if (k < na) access_label(arg, sizeof arg, accs, k);
        else snprintf(arg, sizeof arg, "an overlapping range of its data");
        msg = PyUnicode_FromFormat("spawn(): dependency cycle through data: %U's %s would follow %s, which %s the "
                                   "same data and was spawned before it, and that task already waits, directly "
                                   "or not, for %U (its deps=). Data accesses are ordered in spawn order: spawn "
                                   "%U before the task that waits for it, or leave the data out of one of the two",
                                   me, arg, who, role, me, me);
    }
    (void)r;
    if (msg == NULL) return; /* keep the ValueError submit_error made */
    PyErr_SetObject(PyExc_ValueError, msg);
    Py_DECREF(msg);
}

static PyObject *spawn_impl(modstate *st, RuntimeObject *r, PyObject *const *args,
                            Py_ssize_t nargs, PyObject *kwnames, PyObject *self_callable);

/* The decorator form binds the body's free variables at spawn time: a
 * Python function with a closure is replaced by a copy of itself whose
 * cells are new cells holding the values the originals hold now (an empty
 * cell stays empty).  So `for i in ...: @weft.spawn() def t(): use(i)` gives
 * each task its own i, as the spawn statement reads.  The objects the cells
 * refer to are shared, not copied; a `nonlocal` assignment in the body
 * changes the copy only.  Anything else (a builtin, a callable object, a
 * function without free variables) is returned as is (a new reference). */
static PyObject *
bind_closure_now(PyObject *fn)
{
    if (!PyFunction_Check(fn)) return Py_NewRef(fn);
    PyObject *closure = PyFunction_GetClosure(fn);
    if (closure == NULL || closure == Py_None || !PyTuple_Check(closure)) return Py_NewRef(fn);
    Py_ssize_t n = PyTuple_GET_SIZE(closure);
    PyObject *cells = PyTuple_New(n);
    if (cells == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *c = PyTuple_GET_ITEM(closure, i);
        PyObject *v = PyCell_Check(c) ? PyCell_Get(c) : NULL;
        if (v == NULL && PyErr_Occurred()) {
            Py_DECREF(cells);
            return NULL;
        }
        PyObject *nc = PyCell_New(v);
        Py_XDECREF(v);
        if (nc == NULL) {
            Py_DECREF(cells);
            return NULL;
        }
        PyTuple_SET_ITEM(cells, i, nc);
    }
    PyObject *qualname = PyObject_GetAttrString(fn, "__qualname__");
    if (qualname == NULL) PyErr_Clear();
    PyObject *copy = PyFunction_NewWithQualName(PyFunction_GetCode(fn), PyFunction_GetGlobals(fn),
                                                qualname);
    Py_XDECREF(qualname);
    PyObject *defaults = PyFunction_GetDefaults(fn), *kwdefaults = PyFunction_GetKwDefaults(fn);
    if (copy == NULL || PyFunction_SetClosure(copy, cells) < 0 ||
        PyFunction_SetDefaults(copy, defaults ? defaults : Py_None) < 0 ||
        PyFunction_SetKwDefaults(copy, kwdefaults ? kwdefaults : Py_None) < 0) {
        Py_XDECREF(copy);
        Py_DECREF(cells);
        return NULL;
    }
    Py_DECREF(cells);
    return copy;
}

/* The function @weft.spawn(...) / @rt.spawn(...) return: self is a tuple
 * (spawn callable, dict of the keywords); called with the body, it spawns
 * it with those keywords and returns the Task. */
static PyObject *
spawn_decorator(PyObject *self, PyObject *fn)
{
    PyObject *bound = bind_closure_now(fn);
    if (bound == NULL) return NULL;
    PyObject *a = PyTuple_Pack(1, bound);
    Py_DECREF(bound);
    if (a == NULL) return NULL;
    PyObject *res = PyObject_Call(PyTuple_GET_ITEM(self, 0), a, PyTuple_GET_ITEM(self, 1));
    Py_DECREF(a);
    return res;
}

static PyMethodDef spawn_decorator_def = {
    "spawn_decorator", spawn_decorator, METH_O,
    "Spawn the decorated function (its free variables bound to their values now) with the "
    "keywords given to spawn(); return the Task."};

/* Resolve the runtime and hold a strong reference to it for the call (a
 * borrowed one from the `with` stack could go away on a free-threaded build
 * if another thread closed it meanwhile). */
PyObject *
weft_py_spawn(modstate *st, RuntimeObject *r, PyObject *const *args, Py_ssize_t nargs,
           PyObject *kwnames, PyObject *self_callable)
{
    if (r != NULL || nargs == 0) return spawn_impl(st, r, args, nargs, kwnames, self_callable);
    /* Module-level spawn: find runtime= among the keywords, else the current one. */
    PyObject *rtobj = NULL;
    Py_ssize_t nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nk; i++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, i);
        if (k == st->s_runtime || PyUnicode_Compare(k, st->s_runtime) == 0) {
            rtobj = args[nargs + i];
            break;
        }
        if (PyErr_Occurred()) return NULL;
    }
    if (rtobj == NULL || rtobj == Py_None) {
        RuntimeObject *cur = weft_py_current_runtime(st, 0);
        if (cur == NULL) {
            if (!PyCallable_Check(args[0])) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError, "spawn(): the task body must be callable, got '%.100s' object",
                             Py_TYPE(args[0])->tp_name);
            }
            return NULL;
        }
        Py_INCREF(cur);
        PyObject *res = spawn_impl(st, NULL, args, nargs, kwnames, self_callable);
        Py_DECREF(cur);
        return res;
    }
    return spawn_impl(st, NULL, args, nargs, kwnames, self_callable);
}

/* One spawn call on its way: what it was given, what it resolved, and
 * what it holds until spawn_release lets all of it go. */
typedef struct {
    modstate *st;
    RuntimeObject *r;
    PyObject *const *args;
    Py_ssize_t nargs;
    spawn_kw kw;
    PyObject *fn;       /* the body (place_fn once placed) */
    int native;         /* a weft.Native body (native.c) */
    int priority, device_data;
    double cost;        /* cost= */
    PyObject *kind;     /* the task's kind (weft_py_spawn_kind), or NULL */
    TaskObject *slot;   /* task=, claimed (PH_SPAWNING) until submitted or given back */
    PyObject *deps;     /* deps=, flattened into Tasks */
    Py_ssize_t nd;
    PyObject *accs[4];  /* reads=, writes=, readwrites=, commutes= */
    PyObject *red, *scr; /* reduces=, scratch= */
    weft_task *dbuf[SMALL], **dv; /* the C dependencies */
    /* The C accesses (the Data they come from held until submitted): the
     * named ones. */
    weft_py_accs av;
    size_t na, ns;
    /* scratch=: their C accesses (inserted after the named ones) and sizes */
    weft_access *sacc, *call, *call_owned;
    size_t *sbytes;
    weft_placement *pl;
    size_t npl;
    PyObject *place_fn, *bodies;
    TaskObject *t;      /* the Task being made */
    PyObject *result;
    int tries;          /* lookups of the accesses again */
} spawn_call;

static const unsigned spawn_modes[4] = {WEFT_R, WEFT_W, WEFT_RW, WEFT_RW | WEFT_COMMUTE};
static const char *const spawn_mode_names[4] = {"reads", "writes", "readwrites", "commutes"};

static void
spawn_call_init(spawn_call *s, modstate *st, RuntimeObject *r, PyObject *const *args, Py_ssize_t nargs)
{
    s->st = st;
    s->r = r;
    s->args = args;
    s->nargs = nargs;
    s->fn = nargs ? args[0] : NULL;
    s->native = s->priority = s->device_data = 0;
    s->cost = 0;
    s->kind = NULL;
    s->slot = NULL;
    s->deps = NULL;
    s->nd = 0;
    for (int m = 0; m < 4; m++) s->accs[m] = NULL;
    s->red = s->scr = NULL;
    s->dv = s->dbuf;
    weft_py_accs_init(&s->av);
    s->na = s->ns = 0;
    s->sacc = s->call = s->call_owned = NULL;
    s->sbytes = NULL;
    s->pl = NULL;
    s->npl = 0;
    s->place_fn = s->bodies = NULL;
    s->t = NULL;
    s->result = NULL;
    s->tries = 0;
}

/* Decorator form: @weft.spawn(deps=..., ...), or @weft.spawn(): the
 * function that spawns the body it is given with these keywords. */
static PyObject *
decorator_form(PyObject *const *args, PyObject *kwnames, PyObject *self_callable)
{
    if (self_callable == NULL) {
        PyErr_SetString(PyExc_TypeError, "spawn() missing the function to run");
        return NULL;
    }
    PyObject *kwd = PyDict_New();
    if (kwd == NULL) return NULL;
    Py_ssize_t nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nk; i++)
        if (PyDict_SetItem(kwd, PyTuple_GET_ITEM(kwnames, i), args[i]) < 0) {
            Py_DECREF(kwd);
            return NULL;
        }
    PyObject *self = PyTuple_Pack(2, self_callable, kwd);
    Py_DECREF(kwd);
    if (self == NULL) return NULL;
    PyObject *res = PyCFunction_NewEx(&spawn_decorator_def, self, NULL);
    Py_DECREF(self);
    return res;
}

/* The body: callable, or a weft.Native with at most one argument; a slot
 * named first (Parla's order) is refused with the weft form.  0, or -1
 * with TypeError. */
static int
check_body(spawn_call *s)
{
    modstate *st = s->st;
    PyObject *fn = s->fn;
    if (Py_IS_TYPE(fn, st->Task_T) || (st->TaskList_cls && PyObject_TypeCheck(fn, (PyTypeObject *)st->TaskList_cls))) {
        /* Parla's @spawn(T[0], [deps]) names the task first. */
        PyObject *what = Py_IS_TYPE(fn, st->Task_T) ? Py_XNewRef(((TaskObject *)fn)->name)
                                                    : PyObject_GetAttrString(fn, "label");
        if (what == NULL) PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "spawn(%U, ...): weft takes the function first and the task-space slot as "
                     "task=: write weft.spawn(fn, *args, task=%U, deps=[...]), or @weft.spawn(task=%U, deps=[...]) "
                     "above the def (Parla's @spawn(T[i], [deps]) puts the slot first)",
                     what ? what : Py_None, what ? what : Py_None, what ? what : Py_None);
        Py_XDECREF(what);
        return -1;
    }
    /* A weft.Native body (native.c) takes one argument, copied now. */
    s->native = weft_py_is_native(st, fn);
    if (!s->native && !PyCallable_Check(fn)) {
        PyErr_Format(PyExc_TypeError, "spawn(): the task body must be callable or a weft.Native, got "
                     "'%.100s' object", Py_TYPE(fn)->tp_name);
        return -1;
    }
    if (s->native && (s->nargs > 2 || (s->kw.kwargs && s->kw.kwargs != Py_None))) {
        PyErr_Format(PyExc_TypeError, "spawn(): a native body takes one argument (a buffer, or None), "
                     "not %s", s->nargs > 2 ? "several" : "kwargs=");
        return -1;
    }
    return 0;
}

/* The runtime of a module-level spawn: runtime=, else the current one
 * (borrowed: the caller holds it, weft_py_spawn the current one).  0, or -1 with an exception. */
static int
resolve_runtime(spawn_call *s)
{
    if (s->r != NULL) return 0;
    if (s->kw.runtime && s->kw.runtime != Py_None) {
        if (!Py_IS_TYPE(s->kw.runtime, s->st->Runtime_T)) {
            PyErr_Format(PyExc_TypeError, "spawn(): runtime= expects a weft.Runtime, got '%.100s'",
                         Py_TYPE(s->kw.runtime)->tp_name);
            return -1;
        }
        s->r = (RuntimeObject *)s->kw.runtime;
    } else {
        s->r = weft_py_current_runtime(s->st, 0);
        if (s->r == NULL) return -1;
    }
    return 0;
}

/* priority=, name=, kwargs=, device_data= and cost=, checked.  0, or -1
 * with an exception. */
static int
parse_options(spawn_call *s)
{
    const spawn_kw *kw = &s->kw;
    if (kw->priority && kw->priority != Py_None) {
        if (!PyLong_Check(kw->priority)) {
            PyErr_Format(PyExc_TypeError, "spawn(): priority= expects an int, got '%.100s'",
                         Py_TYPE(kw->priority)->tp_name);
            return -1;
        }
        long p = PyLong_AsLong(kw->priority);
        if (p == -1 && PyErr_Occurred()) return -1;
        if (p < INT32_MIN || p > INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "spawn(): priority= out of range");
            return -1;
        }
        s->priority = (int)p;
    }
    if (kw->name && kw->name != Py_None && !PyUnicode_Check(kw->name)) {
        PyErr_Format(PyExc_TypeError, "spawn(): name= expects a str, got '%.100s'",
                     Py_TYPE(kw->name)->tp_name);
        return -1;
    }
    if (kw->kwargs && kw->kwargs != Py_None && !PyDict_Check(kw->kwargs)) {
        PyErr_Format(PyExc_TypeError, "spawn(): kwargs= expects a dict, got '%.100s'",
                     Py_TYPE(kw->kwargs)->tp_name);
        return -1;
    }
    if (kw->device_data && (s->device_data = PyObject_IsTrue(kw->device_data)) < 0) return -1;
    if (kw->cost && kw->cost != Py_None) {
        if (!PyFloat_Check(kw->cost) && !PyLong_Check(kw->cost)) {
            PyErr_Format(PyExc_TypeError, "spawn(): cost= expects a number (the task's flops, or any work its "
                         "time is proportional to), got '%.100s'", Py_TYPE(kw->cost)->tp_name);
            return -1;
        }
        s->cost = PyFloat_AsDouble(kw->cost);
        if (s->cost == -1.0 && PyErr_Occurred()) return -1;
        if (!(s->cost >= 0) || s->cost > 1e300) {
            PyErr_Format(PyExc_ValueError, "spawn(): cost= takes a finite number of at least 0, not %R", kw->cost);
            return -1;
        }
    }
    return 0;
}

/* task=: one slot of a task space, claimed before it is touched: of two
 * spawns into one slot (from two threads), exactly one gets past here;
 * spawn_release gives the claim back if it is not submitted.  0, or -1
 * with an exception (nothing claimed). */
static int
claim_slot(spawn_call *s)
{
    modstate *st = s->st;
    PyObject *task = s->kw.task;
    if (!task || task == Py_None) return 0;
    if (st->TaskList_cls && PyObject_TypeCheck(task, (PyTypeObject *)st->TaskList_cls)) {
        /* T[0:4], or T[-1]: not one slot. */
        PyObject *label = PyObject_GetAttrString(task, "label");
        if (label == NULL) return -1;
        Py_ssize_t n = PyTuple_GET_SIZE(task);
        if (n == 0)
            PyErr_Format(PyExc_ValueError, "spawn(): task=%U names no slot: a negative index names no task in "
                         "a task space (indices start at 0; as in Parla, deps=[T[i-1]] at i=0 is no "
                         "dependency); spawn into T[i] with i >= 0", label);
        else
            PyErr_Format(PyExc_ValueError, "spawn(): task=%U names %zd slots: a task goes into one slot, "
                         "task=T[i] (a slice names several, for deps= and waits)", label, n);
        Py_DECREF(label);
        return -1;
    }
    if (!Py_IS_TYPE(task, st->Task_T)) {
        PyErr_Format(PyExc_TypeError, "spawn(): task= expects a task-space slot such as T[i], "
                     "got '%.100s'", Py_TYPE(task)->tp_name);
        return -1;
    }
    TaskObject *slot = (TaskObject *)task;
    int declared = PH_DECLARED;
    WEFT_PY_HANDOFF_ACQUIRE(slot); /* what the last thread to touch it did */
    if (!atomic_compare_exchange_strong(&slot->phase, &declared, PH_SPAWNING)) {
        PyErr_Format(PyExc_ValueError, "spawn(): task %R was already spawned%s",
                     slot->name ? slot->name : Py_None,
                     declared == PH_SPAWNING ? " (another thread is spawning it now)" : SPAWNED_HINT);
        return -1;
    }
    s->slot = slot;
    return 0;
}

/* Placement: only a spawn that names one (or spawns weft.variants); the
 * body becomes the placed one.  0, or -1 with an exception. */
static int
resolve_placement(spawn_call *s)
{
    modstate *st = s->st;
    const spawn_kw *kw = &s->kw;
    if (!((kw->placement && kw->placement != Py_None) || (kw->share && kw->share != Py_None) ||
          (kw->memory && kw->memory != Py_None) ||
          (st->Variants_cls && (PyObject *)Py_TYPE(s->fn) == st->Variants_cls)))
        return 0;
    s->place_fn = Py_NewRef(s->fn);
    if (weft_py_placement(st, &s->place_fn, kw->placement, kw->share, kw->memory, &s->pl, &s->npl, &s->bodies) < 0)
        return -1;
    s->fn = s->place_fn;
    if (s->native && s->bodies) {
        PyErr_SetString(PyExc_TypeError, "spawn(): a native body has no variants (spawn weft.variants of "
                        "Python bodies)");
        return -1;
    }
    return 0;
}

/* deps= as a sequence of Tasks: deps=T is the tasks spawned into T so far;
 * slices (T[0:4]), whole spaces and nested lists are flattened into Tasks,
 * or refused naming the item.  0, or -1 with an exception. */
static int
collect_deps(spawn_call *s)
{
    modstate *st = s->st;
    if (s->kw.deps && st->deps_flatten && Py_IS_TYPE(s->kw.deps, st->Space_T)) {
        s->deps = PyObject_CallOneArg(st->deps_flatten, s->kw.deps);
        if (s->deps == NULL) return -1;
    } else {
        s->deps = as_seq(s->kw.deps, st->Task_T, "deps", 0);
        if (s->deps == NULL && PyErr_Occurred()) return -1;
    }
    s->nd = s->deps ? PySequence_Fast_GET_SIZE(s->deps) : 0;
    for (Py_ssize_t i = 0; i < s->nd && st->deps_flatten; i++)
        if (!Py_IS_TYPE(PySequence_Fast_GET_ITEM(s->deps, i), st->Task_T)) {
            PyObject *flat = PyObject_CallOneArg(st->deps_flatten, s->deps);
            if (flat == NULL) return -1;
            Py_SETREF(s->deps, flat);
            s->nd = PySequence_Fast_GET_SIZE(s->deps);
            break;
        }
    return 0;
}

/* The data keywords as sequences (reads= ... commutes=, reduces=,
 * scratch=), scratch='s C accesses and sizes, and room for the C
 * dependencies.  0, or -1 with an exception. */
static int
collect_accesses(spawn_call *s)
{
    modstate *st = s->st;
    PyObject *accv[4] = {s->kw.reads, s->kw.writes, s->kw.readwrites, s->kw.commutes};
    for (int m = 0; m < 4; m++) {
        s->accs[m] = is_unordered(st, accv[m]) ? PyTuple_Pack(1, accv[m])
                                               : as_seq(accv[m], st->Data_T, spawn_mode_names[m], 1);
        if (s->accs[m] == NULL && PyErr_Occurred()) return -1;
    }
    if ((s->red = reduces_seq(s->kw.reduces)) == NULL && PyErr_Occurred()) return -1;
    if ((s->scr = scratch_seq(st, s->kw.scratch)) == NULL && PyErr_Occurred()) return -1;
    size_t ns = s->ns = s->scr ? (size_t)PySequence_Fast_GET_SIZE(s->scr) : 0;
    if (ns && ((s->sacc = PyMem_Malloc(ns * sizeof *s->sacc)) == NULL ||
               (s->sbytes = PyMem_Malloc(ns * sizeof *s->sbytes)) == NULL)) {
        PyErr_NoMemory();
        return -1;
    }
    if (ns && scratch_accesses(st, s->r, s->scr, s->device_data, s->sacc, s->sbytes) < 0) return -1;
    if (s->nd > SMALL) s->dv = PyMem_Malloc(sizeof(*s->dv) * (size_t)s->nd);
    if (s->dv == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* The C dependencies (dv) of deps: a slot nobody spawned into yet stands
 * for its key's placeholder in the C space (binding the space to r).  0,
 * or -1 with an exception. */
static int
link_deps(spawn_call *s)
{
    for (Py_ssize_t i = 0; i < s->nd; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(s->deps, i);
        if (!Py_IS_TYPE(o, s->st->Task_T)) {
            PyErr_Format(PyExc_TypeError, "spawn(): deps[%zd] is not a weft.Task but '%.100s'", i,
                         Py_TYPE(o)->tp_name);
            return -1;
        }
        TaskObject *dep = (TaskObject *)o;
        if (dep->rt && dep->rt != s->r) {
            PyErr_Format(PyExc_ValueError, "spawn(): deps[%zd] belongs to another weft runtime", i);
            return -1;
        }
        if (dep == s->slot) {
            PyErr_Format(PyExc_ValueError, "spawn(): task %R cannot depend on itself",
                         s->slot->name ? s->slot->name : Py_None);
            return -1;
        }
        if (atomic_load(&dep->phase) == PH_SUBMITTED) {
            s->dv[i] = atomic_load(&dep->h);
        } else {
            s->dv[i] = weft_py_slot_handle(dep, s->r);
            atomic_store_explicit(&dep->depended, 1, memory_order_relaxed); /* reported at close if never spawned */
        }
        if (s->dv[i] == NULL) return -1;
    }
    return 0;
}

/* The accesses of reads= ... commutes=.  Each buffer names the Data of the
 * memory it covers (data.c): those first, in order (views find access i
 * at C access i), then the overlapping ranges they must be ordered with,
 * on the host.  By default Python bodies use the buffer itself: the
 * host's copy, wherever the task runs.  device_data=True: the copy on the
 * task's device, which the body reaches through views (view.c; the host's
 * for a task on the CPU).  0, or -1 with an exception. */
static int
named_accesses(spawn_call *s)
{
    for (int m = 0; m < 4; m++) {
        if (!s->accs[m]) continue;
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(s->accs[m]); i++) {
            char what[48];
            snprintf(what, sizeof what, "spawn(): %s[%zd]", spawn_mode_names[m], i);
            PyObject *obj = PySequence_Fast_GET_ITEM(s->accs[m], i);
            unsigned mode = spawn_modes[m] | (s->device_data ? 0u : (unsigned)WEFT_HOST);
            if (is_unordered(s->st, obj) ? (obj = unordered_obj(s->st, obj, what, &mode)) == NULL
                                         : (Py_INCREF(obj), 0))
                return -1;
            int rc = weft_py_data_accesses(s->r, obj, what, mode, &s->av);
            Py_DECREF(obj);
            if (rc < 0) return -1;
        }
    }
    return 0;
}

/* The accesses of reduces=, after the named ones: (buffer, op) pairs, the
 * element type the buffer's.  0, or -1 with an exception. */
static int
reduction_accesses(spawn_call *s)
{
    for (Py_ssize_t i = 0; s->red && i < PySequence_Fast_GET_SIZE(s->red); i++) {
        char what[48];
        snprintf(what, sizeof what, "spawn(): reduces[%zd]", i);
        PyObject *pair = PySequence_Fast_GET_ITEM(s->red, i), *obj, *user, *uname;
        unsigned op, type = 0;
        Py_ssize_t usize;
        if (reduce_pair(s->st, pair, what, &obj, &op, &user) < 0)
            return -1;
        /* The element: the buffer's type for a built-in operator; a user
         * reduction's size (its operator carries it). */
        if (user ? user_reduction_op(s->r, user, what, &op, &usize, &uname) < 0 ||
                       weft_py_reduce_user_check(s->st, obj, what, usize, uname) < 0
                 : weft_py_reduce_type(s->st, obj, what, &type) < 0)
            return -1;
        /* (A tile's private copy is its interior, rows packed: view.c.) */
        if (weft_py_data_accesses(s->r, obj, what,
                                  WEFT_REDUCE | op | type | (s->device_data ? 0u : (unsigned)WEFT_HOST), &s->av) < 0)
            return -1;
    }
    return 0;
}

/* The C accesses in the order the task names them (call): the named ones
 * and reductions (na), then scratch.  0, or -1 with an
 * exception. */
static int
build_accesses(spawn_call *s)
{
    if (named_accesses(s) < 0 || reduction_accesses(s) < 0) return -1;
    s->na = s->av.n;
    if (s->red && tile_reduce_check(&s->av, s->accs, PySequence_Fast_GET_SIZE(s->red)) < 0) return -1;
    if ((s->call = with_scratch(&s->av, s->na, s->sacc, s->ns, &s->call_owned)) == NULL) return -1;
    return 0;
}

/* For views (view.c): the Data of access i is acc[i], and the item scratch
 * buffer k came from is acc[na + k].  0, or -1 with an exception. */
static int
task_views(spawn_call *s, TaskObject *t)
{
    size_t na = s->na, ns = s->ns;
    PyObject *acc = PyTuple_New((Py_ssize_t)(na + ns));
    if (acc == NULL) return -1;
    for (size_t i = 0; i < na; i++) PyTuple_SET_ITEM(acc, (Py_ssize_t)i, Py_NewRef((PyObject *)s->av.dat[i]));
    for (size_t k = 0; k < ns; k++)
        PyTuple_SET_ITEM(acc, (Py_ssize_t)(na + k), Py_NewRef(PySequence_Fast_GET_ITEM(s->scr, (Py_ssize_t)k)));
    Py_XSETREF(t->acc, acc);
    t->acc_nreads = s->accs[0] ? (uint32_t)PySequence_Fast_GET_SIZE(s->accs[0]) : 0;
    t->acc_nreduces = s->red ? (uint32_t)PySequence_Fast_GET_SIZE(s->red) : 0; /* the last Data */
    t->acc_nscratch = (uint32_t)ns;
    return 0;
}

/* The arguments a Python body is called with: args after the body (a tile
 * as itself: its geometry is the body's to use; a whole array's Data as
 * its object), and kwargs= copied.  0, or -1 with an exception. */
static int
task_args(spawn_call *s, TaskObject *t)
{
    if (s->nargs > 1 && !s->native) {
        PyObject *a = PyTuple_New(s->nargs - 1);
        if (a == NULL) return -1;
        for (Py_ssize_t i = 1; i < s->nargs; i++) {
            PyObject *x = s->args[i];
            if (Py_IS_TYPE(x, s->st->Data_T) && ((DataObject *)x)->parent == NULL) x = ((DataObject *)x)->obj;
            PyTuple_SET_ITEM(a, i - 1, Py_NewRef(x));
        }
        t->args = a;
    }
    if (s->kw.kwargs && s->kw.kwargs != Py_None && PyDict_GET_SIZE(s->kw.kwargs) > 0) {
        t->kwargs = PyDict_Copy(s->kw.kwargs);
        if (t->kwargs == NULL) return -1;
    }
    return 0;
}

/* The Task object (s->t): the slot, or a new Task, with its runtime,
 * priority, name, body, views' Data and arguments.  0, or -1 with an
 * exception (undo_task drops what was set). */
static int
make_task(spawn_call *s)
{
    if (s->slot) {
        s->t = (TaskObject *)Py_NewRef(s->slot);
    } else {
        s->t = weft_py_task_new(s->st);
        if (s->t == NULL) return -1;
    }
    TaskObject *t = s->t;
    t->rt = (RuntimeObject *)Py_NewRef(s->r);
    t->priority = s->priority;
    t->cost = s->cost;
    Py_XSETREF(t->kind, Py_XNewRef(s->kind));
    if (s->kw.name && s->kw.name != Py_None) Py_XSETREF(t->name, Py_NewRef(s->kw.name));
    t->fn = Py_NewRef(s->fn);
    Py_XSETREF(t->bodies, Py_XNewRef(s->bodies));
    if (s->na + s->ns > 0 && !s->native && task_views(s, t) < 0) return -1;
    t->device_data = s->device_data;
    return task_args(s, t);
}

/* Undo make_task: a fresh task is dropped; a slot goes back to declared. */
static void
undo_task(spawn_call *s)
{
    TaskObject *t = s->t;
    if (t == NULL) return;
    Py_CLEAR(t->fn);
    Py_CLEAR(t->bodies);
    Py_CLEAR(t->acc);
    Py_CLEAR(t->args);
    Py_CLEAR(t->kwargs);
    Py_CLEAR(t->kind);
    if (atomic_load(&t->phase) != PH_SUBMITTED) Py_CLEAR(t->rt);
    Py_CLEAR(s->t);
}

/* Submit s->t with a native body's call (its argument's copy, room for the
 * addresses).  0, -1 with an exception, or 1: look the accesses up again
 * (a range named only through an overlapping one began to be unregistered
 * while this spawn was on its way: it may block, and let other threads
 * run). */
static int
submit_task(spawn_call *s)
{
    weft_py_native_call *nat = NULL;
    if (s->native &&
        (nat = weft_py_native_prepare(s->fn, s->nargs > 1 ? s->args[1] : NULL, &s->av, s->na, s->sbytes, s->ns)) ==
            NULL)
        return -1;
    int src;
    char why[512];
    if (submit_c(s->r, s->t, s->dv, (size_t)s->nd, s->call, s->av.n + s->ns, s->pl, s->npl, nat, &src, why,
                 sizeof why) == 0)
        return 0;
    if (src == WEFT_EDEADLK) cycle_message(s->r, s->t, s->deps, s->accs, s->na, why);
    if (src == WEFT_EINVAL && weft_py_accs_stale(&s->av) && ++s->tries < 64) {
        PyErr_Clear();
        return 1;
    }
    return -1;
}

/* One try at the task: its C dependencies and accesses, the Task, and its
 * submission (s->result).  0, -1 with an exception, or 1 to try again. */
static int
spawn_attempt(spawn_call *s)
{
    if (link_deps(s) < 0 || build_accesses(s) < 0) return -1;
    int rc = make_task(s);
    if (rc == 0) rc = submit_task(s);
    if (rc != 0) {
        undo_task(s);
        return rc;
    }
    s->result = (PyObject *)s->t;
    s->t = NULL;
    return 0;
}

/* Try until submitted, refused, or out of tries; then let go of the Data
 * named.  No lock around it: the data registry takes its own for each
 * step (data.c), and the rest is the spawning thread's. */
static void
spawn_with_retries(spawn_call *s)
{
    while (spawn_attempt(s) > 0) {
        weft_py_accs_clear(&s->av);
        PyMem_Free(s->call_owned);
        s->call_owned = NULL;
    }
    weft_py_accs_clear(&s->av);
}

/* Let go of what s holds: the handoffs, a slot's claim unless submitted,
 * the sequences and buffers.  The Task, or NULL. */
static PyObject *
spawn_release(spawn_call *s)
{
    for (Py_ssize_t i = 0; s->deps && i < s->nd; i++) WEFT_PY_HANDOFF_RELEASE(PySequence_Fast_GET_ITEM(s->deps, i));
    if (s->result) WEFT_PY_HANDOFF_RELEASE(s->result);
    if (s->slot) WEFT_PY_HANDOFF_RELEASE(s->slot);
    if (s->slot && s->result == NULL) {
        /* Not submitted: give the claim back. */
        int claimed = PH_SPAWNING;
        (void)atomic_compare_exchange_strong(&s->slot->phase, &claimed, PH_DECLARED);
    }
    Py_XDECREF(s->t);
    Py_XDECREF(s->deps);
    for (int m = 0; m < 4; m++) Py_XDECREF(s->accs[m]);
    Py_XDECREF(s->red);
    Py_XDECREF(s->scr);
    PyMem_Free(s->sacc);
    PyMem_Free(s->sbytes);
    PyMem_Free(s->call_owned);
    if (s->dv != s->dbuf) PyMem_Free(s->dv);
    weft_py_accs_free(&s->av);
    PyMem_Free(s->pl);
    Py_XDECREF(s->place_fn);
    Py_XDECREF(s->bodies);
    Py_XDECREF(s->kind);
    return s->result;
}

static PyObject *
spawn_impl(modstate *st, RuntimeObject *r, PyObject *const *args, Py_ssize_t nargs,
           PyObject *kwnames, PyObject *self_callable)
{
    spawn_call s;
    spawn_call_init(&s, st, r, args, nargs);
    if (parse_kw(st, args, nargs, kwnames, &s.kw, r == NULL) < 0) return NULL;
    if (nargs == 0) return decorator_form(args, kwnames, self_callable);
    if (check_body(&s) < 0 || resolve_runtime(&s) < 0) return NULL;
    if (weft_py_check_open(s.r, "spawn()") < 0) return NULL;
    weft_py_release_drain(s.r);
    if (parse_options(&s) < 0 || claim_slot(&s) < 0) return NULL;
    /* From here every way out goes through spawn_release. */
    if (resolve_placement(&s) == 0 && weft_py_spawn_kind(s.r, s.fn, s.kw.kind, s.npl, &s.kind) == 0 &&
        collect_deps(&s) == 0 && collect_accesses(&s) == 0)
        spawn_with_retries(&s);
    return spawn_release(&s);
}
