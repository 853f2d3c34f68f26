/*
 * spawn.c — spawning: arguments, dependencies and data accesses, submission
 * to the C runtime, deferral behind tasks that have not been spawned yet
 * (task spaces), and the decorator form.
 */
#include "_weft.h"

/* ------------------------------------------------------------------------ */
/* Spawning                                                                  */
/* ------------------------------------------------------------------------ */

#define SMALL 8 /* dependencies and accesses kept on the stack */

static const char *
utf8_or(PyObject *s, const char *dflt)
{
    const char *u = s ? PyUnicode_AsUTF8(s) : NULL;
    if (u == NULL) {
        PyErr_Clear();
        return dflt;
    }
    return u;
}

/* Submit t to the C runtime with the given C dependencies and accesses. */
static int
submit_c(RuntimeObject *r, TaskObject *t, weft_task **deps, size_t ndeps, weft_access *acc,
         size_t nacc)
{
    cell *c = malloc(sizeof *c);
    if (c == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    c->t = (TaskObject *)Py_NewRef(t);
    c->rt = r;
    weft_task_desc desc;
    weft_task_desc_init(&desc);
    desc.body = weft_py_trampoline;
    desc.arg = c;
    desc.arg_destroy = weft_py_arg_destroy;
    desc.deps = deps;
    desc.ndeps = ndeps;
    desc.accesses = acc;
    desc.naccesses = nacc;
    desc.priority = t->priority;
    char namebuf[32];
    if (t->name) {
        Py_ssize_t len;
        const char *s = PyUnicode_AsUTF8AndSize(t->name, &len);
        if (s == NULL) {
            PyErr_Clear();
        } else {
            if (len > 31) len = 31;
            memcpy(namebuf, s, (size_t)len);
            namebuf[len] = 0;
            desc.name = namebuf;
        }
    }
    size_t n = atomic_fetch_add_explicit(&r->inflight, 1, memory_order_relaxed) + 1;
    weft_task *h = NULL;
    int rc;
    int hold = n < r->soft_limit;
    if (hold && r->spawn_gil != SPAWN_HOLD)
        hold = r->spawn_gil == SPAWN_YIELD &&
               atomic_load_explicit(&r->py_busy, memory_order_relaxed) == 0;
    if (hold) {
        /* Cannot block: keep the GIL (a worker may run tasks inline here;
         * weft_py_tl_attached tells their trampolines that the GIL is ours). */
        int prev = weft_py_tl_attached;
        weft_py_tl_attached = 1;
        rc = weft_spawn(r->rt, &desc, &h);
        weft_py_tl_attached = prev;
    } else {
        BEGIN_NOGIL_W
        rc = weft_spawn(r->rt, &desc, &h);
        END_NOGIL_W
    }
    if (rc != 0) {
        /* weft_py_arg_destroy ran: the cell is gone, its reference dropped. */
        if (rc == WEFT_ECLOSED) {
            PyErr_SetString(PyExc_RuntimeError, "spawn(): the weft runtime is closed");
            return -1;
        }
        weft_py_err_weft(rc, "spawn()");
        return -1;
    }
    t->h = h;
    t->phase = PH_SUBMITTED;
    return 0;
}

static int submit_deferred(RuntimeObject *r, TaskObject *t);

/* t just entered the runtime (or died): wake the tasks blocked on it.
 * Iterative, so long chains of placeholders do not recurse. */
static void
notify_submitted(RuntimeObject *r, TaskObject *t0)
{
    PyObject *work = PyList_New(0);
    if (work == NULL) {
        PyErr_Clear();
        return;
    }
    if (PyList_Append(work, (PyObject *)t0) < 0) {
        PyErr_Clear();
        Py_DECREF(work);
        return;
    }
    while (PyList_GET_SIZE(work) > 0) {
        Py_ssize_t last = PyList_GET_SIZE(work) - 1;
        TaskObject *t = (TaskObject *)Py_NewRef(PyList_GET_ITEM(work, last));
        PyList_SetSlice(work, last, last + 1, NULL);
        PyObject *ws = t->waiters;
        t->waiters = NULL;
        if (ws) {
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(ws); i++) {
                TaskObject *w = (TaskObject *)PyList_GET_ITEM(ws, i);
                if (w->phase != PH_DEFERRED) continue;
                if (--w->nblockers == 0) {
                    if (submit_deferred(w->rt ? w->rt : r, w) < 0) PyErr_Clear();
                    if (PyList_Append(work, (PyObject *)w) < 0) PyErr_Clear();
                }
            }
            Py_DECREF(ws);
        }
        Py_DECREF(t);
    }
    Py_DECREF(work);
}

static void
clear_pending(TaskObject *t)
{
    if (t->pend_data) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t->pend_data); i++) {
            DataObject *d = (DataObject *)PyTuple_GET_ITEM(t->pend_data, i);
            if (d->pending_tail == t) d->pending_tail = NULL;
        }
    }
    Py_CLEAR(t->pend_deps);
    Py_CLEAR(t->pend_data);
    if (t->pend_modes) {
        PyMem_Free(t->pend_modes);
        t->pend_modes = NULL;
    }
}

/* Mark a task that never entered the runtime as dead, with exception e
 * (stolen; may be NULL to build a CancelledError from why). */
void
weft_py_kill_task(RuntimeObject *r, TaskObject *t, PyObject *e, const char *why)
{
    if (e == NULL) {
        e = weft_py_make_cancelled(t, why);
        if (e == NULL) e = weft_py_fetch_exc();
    }
    Py_XSETREF(t->exc, e);
    t->phase = PH_DEAD;
    t->ran = 0;
    Py_CLEAR(t->fn);
    Py_CLEAR(t->args);
    Py_CLEAR(t->kwargs);
    clear_pending(t);
    if (r && r->deferred) {
        if (PySet_Discard(r->deferred, (PyObject *)t) < 0) PyErr_Clear();
    }
}

/* All blockers of deferred t have been submitted: submit t. */
static int
submit_deferred(RuntimeObject *r, TaskObject *t)
{
    Py_INCREF(t);
    int ret = 0;
    PyObject *deps = t->pend_deps, *data = t->pend_data;
    Py_ssize_t nd = deps ? PyTuple_GET_SIZE(deps) : 0;
    Py_ssize_t na = data ? PyTuple_GET_SIZE(data) : 0;
    weft_task *dbuf[SMALL], **dv = dbuf;
    weft_access abuf[SMALL], *av = abuf;
    if (nd > SMALL) dv = PyMem_Malloc(sizeof(*dv) * (size_t)nd);
    if (na > SMALL) av = PyMem_Malloc(sizeof(*av) * (size_t)na);
    if (dv == NULL || av == NULL) {
        weft_py_kill_task(r, t, NULL, "out of memory while spawning it");
        ret = -1;
        goto out;
    }
    if (r->rt == NULL || r->closing) {
        weft_py_kill_task(r, t, NULL, "the runtime closed before the tasks it follows were spawned");
        goto out;
    }
    for (Py_ssize_t i = 0; i < nd; i++) {
        TaskObject *dep = (TaskObject *)PyTuple_GET_ITEM(deps, i);
        if (dep->phase != PH_SUBMITTED) {
            char buf[160];
            PyObject *lab = weft_py_task_label(dep);
            snprintf(buf, sizeof buf, "its dependency %s never ran", utf8_or(lab, "(unnamed)"));
            Py_XDECREF(lab);
            if (PyErr_Occurred()) PyErr_Clear();
            weft_py_kill_task(r, t, NULL, buf);
            goto out;
        }
        if (dep->rt != r) {
            PyObject *e = PyObject_CallFunction(PyExc_ValueError, "s",
                                                "a dependency was spawned on another runtime");
            weft_py_kill_task(r, t, e, NULL);
            goto out;
        }
        dv[i] = dep->h;
    }
    for (Py_ssize_t i = 0; i < na; i++) {
        DataObject *d = (DataObject *)PyTuple_GET_ITEM(data, i);
        if (d->d == NULL) {
            PyObject *e = PyObject_CallFunction(PyExc_ValueError, "s",
                                                "data it accesses was unregistered before it could be spawned");
            weft_py_kill_task(r, t, e, NULL);
            goto out;
        }
        av[i].data = d->d;
        av[i].mode = t->pend_modes[i];
    }
    if (submit_c(r, t, dv, (size_t)nd, av, (size_t)na) < 0) {
        weft_py_kill_task(r, t, weft_py_fetch_exc(), NULL);
        goto out;
    }
    clear_pending(t);
    if (PySet_Discard(r->deferred, (PyObject *)t) < 0) PyErr_Clear();
    if (t->cancel_requested) {
        int rc = weft_task_cancel(t->h);
        (void)rc;
    }
out:
    if (dv != dbuf) PyMem_Free(dv);
    if (av != abuf) PyMem_Free(av);
    Py_DECREF(t);
    return ret;
}

/* Does `dep` already wait (transitively, through waiter lists) for
 * `slot`?  Then making `slot` wait for `dep` would be a cycle.  Returns 1,
 * 0, or -1 with an exception.  Iterative, with a visited set. */
static int
waits_for(TaskObject *dep, TaskObject *slot)
{
    if (slot->waiters == NULL) return 0;
    PyObject *stack = PyList_New(0), *seen = PySet_New(NULL);
    int found = -1;
    if (stack == NULL || seen == NULL) goto out;
    if (PyList_Append(stack, (PyObject *)slot) < 0) goto out;
    found = 0;
    while (!found && PyList_GET_SIZE(stack) > 0) {
        Py_ssize_t last = PyList_GET_SIZE(stack) - 1;
        TaskObject *x = (TaskObject *)Py_NewRef(PyList_GET_ITEM(stack, last));
        if (PyList_SetSlice(stack, last, last + 1, NULL) < 0) { Py_DECREF(x); found = -1; break; }
        PyObject *ws = x->waiters;
        for (Py_ssize_t i = 0; ws && i < PyList_GET_SIZE(ws); i++) {
            PyObject *w = PyList_GET_ITEM(ws, i);
            if (w == (PyObject *)dep) { found = 1; break; }
            int c = PySet_Contains(seen, w);
            if (c < 0 || (c == 0 && (PySet_Add(seen, w) < 0 || PyList_Append(stack, w) < 0))) {
                found = -1;
                break;
            }
        }
        Py_DECREF(x);
    }
out:
    Py_XDECREF(stack);
    Py_XDECREF(seen);
    return found;
}


typedef struct {
    PyObject *deps, *reads, *writes, *readwrites, *commutes, *name, *priority, *task, *kwargs,
        *runtime;
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
        else {
            PyObject *names[] = {st->s_deps, st->s_reads, st->s_writes, st->s_readwrites,
                                 st->s_commutes, st->s_name, st->s_priority, st->s_task,
                                 st->s_kwargs, allow_runtime ? st->s_runtime : NULL};
            for (size_t j = 0; j < sizeof names / sizeof *names; j++) {
                if (names[j] && PyUnicode_Compare(k, names[j]) == 0) {
                    PyObject **slots[] = {&kw->deps, &kw->reads, &kw->writes, &kw->readwrites,
                                          &kw->commutes, &kw->name, &kw->priority, &kw->task,
                                          &kw->kwargs, &kw->runtime};
                    slot = slots[j];
                    break;
                }
            }
            if (PyErr_Occurred()) return -1;
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

static PyObject *spawn_locked(modstate *st, RuntimeObject *r, PyObject *const *args,
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
    if (r != NULL || nargs == 0) return spawn_locked(st, r, args, nargs, kwnames, self_callable);
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
        PyObject *res = spawn_locked(st, NULL, args, nargs, kwnames, self_callable);
        Py_DECREF(cur);
        return res;
    }
    return spawn_locked(st, NULL, args, nargs, kwnames, self_callable);
}

static PyObject *
spawn_locked(modstate *st, RuntimeObject *r, PyObject *const *args, Py_ssize_t nargs,
             PyObject *kwnames, PyObject *self_callable)
{
    spawn_kw kw;
    if (parse_kw(st, args, nargs, kwnames, &kw, r == NULL) < 0) return NULL;
    if (nargs == 0) {
        /* Decorator form: @weft.spawn(deps=..., ...), or @weft.spawn() */
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
    PyObject *fn = args[0];
    if (!PyCallable_Check(fn)) {
        PyErr_Format(PyExc_TypeError, "spawn(): the task body must be callable, got '%.100s' object",
                     Py_TYPE(fn)->tp_name);
        return NULL;
    }
    if (r == NULL) {
        if (kw.runtime && kw.runtime != Py_None) {
            if (!Py_IS_TYPE(kw.runtime, st->Runtime_T)) {
                PyErr_Format(PyExc_TypeError, "spawn(): runtime= expects a weft.Runtime, got '%.100s'",
                             Py_TYPE(kw.runtime)->tp_name);
                return NULL;
            }
            r = (RuntimeObject *)kw.runtime;
        } else {
            r = weft_py_current_runtime(st, 0);
            if (r == NULL) return NULL;
        }
    }
    if (weft_py_check_open(r, "spawn()") < 0) return NULL;

    int priority = 0;
    if (kw.priority && kw.priority != Py_None) {
        if (!PyLong_Check(kw.priority)) {
            PyErr_Format(PyExc_TypeError, "spawn(): priority= expects an int, got '%.100s'",
                         Py_TYPE(kw.priority)->tp_name);
            return NULL;
        }
        long p = PyLong_AsLong(kw.priority);
        if (p == -1 && PyErr_Occurred()) return NULL;
        if (p < INT32_MIN || p > INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "spawn(): priority= out of range");
            return NULL;
        }
        priority = (int)p;
    }
    if (kw.name && kw.name != Py_None && !PyUnicode_Check(kw.name)) {
        PyErr_Format(PyExc_TypeError, "spawn(): name= expects a str, got '%.100s'",
                     Py_TYPE(kw.name)->tp_name);
        return NULL;
    }
    if (kw.kwargs && kw.kwargs != Py_None && !PyDict_Check(kw.kwargs)) {
        PyErr_Format(PyExc_TypeError, "spawn(): kwargs= expects a dict, got '%.100s'",
                     Py_TYPE(kw.kwargs)->tp_name);
        return NULL;
    }
    TaskObject *slot = NULL;
    if (kw.task && kw.task != Py_None) {
        if (!Py_IS_TYPE(kw.task, st->Task_T)) {
            PyErr_Format(PyExc_TypeError, "spawn(): task= expects a task-space slot such as T[i], "
                         "got '%.100s'", Py_TYPE(kw.task)->tp_name);
            return NULL;
        }
        slot = (TaskObject *)kw.task;
        if (slot->phase != PH_DECLARED) {
            PyErr_Format(PyExc_ValueError, "spawn(): task %R was already spawned",
                         slot->name ? slot->name : Py_None);
            return NULL;
        }
    }

    PyObject *result = NULL;
    PyObject *deps = NULL, *accs[4] = {NULL, NULL, NULL, NULL};
    weft_task *dbuf[SMALL], **dv = dbuf;
    weft_access abuf[SMALL], *av = abuf;
    DataObject *datbuf[SMALL], **datv = datbuf;
    Py_ssize_t nd = 0, na = 0;
    TaskObject *t = NULL;
    static const unsigned modes[4] = {WEFT_R, WEFT_W, WEFT_RW, WEFT_RW | WEFT_COMMUTE};
    static const char *const mode_names[4] = {"reads", "writes", "readwrites", "commutes"};
    PyObject *accv[4] = {kw.reads, kw.writes, kw.readwrites, kw.commutes};

    deps = as_seq(kw.deps, st->Task_T, "deps", 0);
    if (deps == NULL && PyErr_Occurred()) return NULL;
    nd = deps ? PySequence_Fast_GET_SIZE(deps) : 0;
    for (int m = 0; m < 4; m++) {
        accs[m] = as_seq(accv[m], st->Data_T, mode_names[m], 1);
        if (accs[m] == NULL && PyErr_Occurred()) goto done;
        if (accs[m]) na += PySequence_Fast_GET_SIZE(accs[m]);
    }
    if (nd > SMALL) dv = PyMem_Malloc(sizeof(*dv) * (size_t)nd);
    if (na > SMALL) {
        av = PyMem_Malloc(sizeof(*av) * (size_t)na);
        datv = PyMem_Malloc(sizeof(*datv) * (size_t)na);
    }
    if (dv == NULL || av == NULL || datv == NULL) {
        PyErr_NoMemory();
        goto done;
    }

    Py_BEGIN_CRITICAL_SECTION(r);
    Py_ssize_t nblock = 0;
    int dead_dep = -1;
    for (Py_ssize_t i = 0; i < nd; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(deps, i);
        if (!Py_IS_TYPE(o, st->Task_T)) {
            PyErr_Format(PyExc_TypeError, "spawn(): deps[%zd] is not a weft.Task but '%.100s'", i,
                         Py_TYPE(o)->tp_name);
            goto unlock;
        }
        TaskObject *dep = (TaskObject *)o;
        if (dep->rt && dep->rt != r) {
            PyErr_Format(PyExc_ValueError, "spawn(): deps[%zd] belongs to another weft runtime", i);
            goto unlock;
        }
        if (dep == slot) {
            PyErr_Format(PyExc_ValueError, "spawn(): task %R cannot depend on itself",
                         slot->name ? slot->name : Py_None);
            goto unlock;
        }
        if (dep->phase == PH_SUBMITTED) dv[i] = dep->h;
        else if (dep->phase == PH_DEAD) { dv[i] = NULL; if (dead_dep < 0) dead_dep = (int)i; }
        else {
            dv[i] = NULL;
            nblock++;
            int cyc = slot ? waits_for(dep, slot) : 0;
            if (cyc < 0) goto unlock;
            if (cyc) {
                PyErr_Format(PyExc_ValueError, "spawn(): dependency cycle: %R already waits, through "
                             "unspawned tasks, for %R", dep->name ? dep->name : Py_None,
                             slot->name ? slot->name : Py_None);
                goto unlock;
            }
        }
    }
    {
        Py_ssize_t j = 0;
        for (int m = 0; m < 4; m++) {
            if (!accs[m]) continue;
            for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(accs[m]); i++) {
                char what[48];
                snprintf(what, sizeof what, "spawn(): %s[%zd]", mode_names[m], i);
                DataObject *d = weft_py_data_lookup(r, PySequence_Fast_GET_ITEM(accs[m], i), what,
                                            modes[m] != WEFT_R);
                if (d == NULL) goto unlock;
                datv[j] = d;
                av[j].data = d->d;
                av[j].mode = modes[m];
                if (d->pending_tail) nblock++;
                j++;
            }
        }
    }

    /* The Task object. */
    if (slot) {
        t = (TaskObject *)Py_NewRef(slot);
    } else {
        t = weft_py_task_new(st);
        if (t == NULL) goto unlock;
    }
    t->rt = (RuntimeObject *)Py_NewRef(r);
    t->priority = priority;
    if (kw.name && kw.name != Py_None) Py_XSETREF(t->name, Py_NewRef(kw.name));
    t->fn = Py_NewRef(fn);
    if (nargs > 1) {
        PyObject *a = PyTuple_New(nargs - 1);
        if (a == NULL) goto unlock_fail;
        for (Py_ssize_t i = 1; i < nargs; i++) {
            PyObject *x = args[i];
            if (Py_IS_TYPE(x, st->Data_T)) x = ((DataObject *)x)->obj; /* the body gets the object */
            PyTuple_SET_ITEM(a, i - 1, Py_NewRef(x));
        }
        t->args = a;
    }
    if (kw.kwargs && kw.kwargs != Py_None && PyDict_GET_SIZE(kw.kwargs) > 0) {
        t->kwargs = PyDict_Copy(kw.kwargs);
        if (t->kwargs == NULL) goto unlock_fail;
    }

    if (dead_dep >= 0) {
        /* As in C: a task whose dependency already died is accepted and ends cancelled. */
        char buf[160];
        TaskObject *dep = (TaskObject *)PySequence_Fast_GET_ITEM(deps, dead_dep);
        PyObject *lab = weft_py_task_label(dep);
        snprintf(buf, sizeof buf, "its dependency %s never ran", utf8_or(lab, "(unnamed)"));
        Py_XDECREF(lab);
        if (PyErr_Occurred()) PyErr_Clear();
        weft_py_kill_task(r, t, NULL, buf);
        notify_submitted(r, t);
    } else if (nblock == 0) {
        if (submit_c(r, t, dv, (size_t)nd, av, (size_t)na) < 0) goto unlock_fail;
        if (t->cancel_requested) {
            int rc = weft_task_cancel(t->h);
            (void)rc;
        }
        if (slot && slot->waiters) notify_submitted(r, t);
    } else {
        /* Deferred until every unsubmitted task it follows is submitted. */
        t->pend_deps = PyTuple_New(nd);
        t->pend_data = PyTuple_New(na);
        t->pend_modes = PyMem_Malloc(sizeof(unsigned) * (size_t)(na ? na : 1));
        if (!t->pend_deps || !t->pend_data || !t->pend_modes) {
            PyErr_NoMemory();
            goto unlock_fail;
        }
        if (PySet_Add(r->deferred, (PyObject *)t) < 0) goto unlock_fail;
        t->phase = PH_DEFERRED;
        t->nblockers = nblock;
        for (Py_ssize_t i = 0; i < nd; i++) {
            TaskObject *dep = (TaskObject *)PySequence_Fast_GET_ITEM(deps, i);
            PyTuple_SET_ITEM(t->pend_deps, i, Py_NewRef(dep));
            if (dep->phase == PH_DECLARED || dep->phase == PH_DEFERRED) {
                if (dep->waiters == NULL && (dep->waiters = PyList_New(0)) == NULL) goto unlock_fail;
                if (PyList_Append(dep->waiters, (PyObject *)t) < 0) goto unlock_fail;
            }
        }
        for (Py_ssize_t j = 0; j < na; j++) {
            DataObject *d = datv[j];
            PyTuple_SET_ITEM(t->pend_data, j, Py_NewRef(d));
            t->pend_modes[j] = av[j].mode;
            if (d->pending_tail) {
                TaskObject *b = d->pending_tail;
                if (b->waiters == NULL && (b->waiters = PyList_New(0)) == NULL) goto unlock_fail;
                if (PyList_Append(b->waiters, (PyObject *)t) < 0) goto unlock_fail;
            }
        }
        for (Py_ssize_t j = 0; j < na; j++) datv[j]->pending_tail = t;
    }
    result = (PyObject *)t;
    t = NULL;
    goto unlock;
unlock_fail:
    if (t) {
        /* Undo: a fresh task is dropped; a slot goes back to declared. */
        Py_CLEAR(t->fn);
        Py_CLEAR(t->args);
        Py_CLEAR(t->kwargs);
        if (t->phase == PH_DEFERRED) {
            if (PySet_Discard(r->deferred, (PyObject *)t) < 0) PyErr_Clear();
            t->nblockers = 0;
        }
        if (t->phase != PH_SUBMITTED) {
            clear_pending(t);
            t->phase = PH_DECLARED;
            Py_CLEAR(t->rt);
        }
        Py_CLEAR(t);
    }
unlock:;
    Py_END_CRITICAL_SECTION();
done:
    Py_XDECREF(t);
    Py_XDECREF(deps);
    for (int m = 0; m < 4; m++) Py_XDECREF(accs[m]);
    if (dv != dbuf) PyMem_Free(dv);
    if (av != abuf) PyMem_Free(av);
    if (datv != datbuf) PyMem_Free(datv);
    return result;
}
