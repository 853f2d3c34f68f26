/*
 * body.c — what runs on a worker for a Python task: the body trampoline, the
 * argument destructor, and the record of failures that wait_all and the
 * CancelledError of dependents read.
 */
#include "_weft.h"


void
weft_py_task_publish(TaskObject *t, weft_ctx *ctx)
{
    if (atomic_load(&t->phase) == PH_SUBMITTED) return;
    /* The body runs before weft_spawn returned on the spawning thread:
     * publish the handle here (the same one; the spawner stores it again),
     * so that the body, and what it spawns, can wait for it. */
    weft_task *h = weft_ctx_task(ctx), *none = NULL;
    if (h) {
        atomic_compare_exchange_strong(&t->h, &none, h);
        atomic_store(&t->phase, PH_SUBMITTED);
    }
}

/* Is o a weft.Task, or a list or tuple holding one (where Dask's delayed
 * calls find them too: delayed(sum)([x, y]))?  1 for a Task, 2 for a
 * sequence holding one, 0 otherwise. */
static int
task_in(modstate *st, PyObject *o)
{
    if (Py_TYPE(o) == st->Task_T) return 1;
    if (!PyList_CheckExact(o) && !PyTuple_CheckExact(o)) return 0;
    int found = 0;
    Py_BEGIN_CRITICAL_SECTION(o); /* a list the program may change on another thread */
    Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
    PyObject **items = PySequence_Fast_ITEMS(o);
    for (Py_ssize_t i = 0; i < n && !found; i++)
        found = Py_TYPE(items[i]) == st->Task_T;
    Py_END_CRITICAL_SECTION();
    return found ? 2 : 0;
}

/* A body that failed with a TypeError or AttributeError while one of its
 * arguments (positional or keyword) is a weft.Task, or a list or tuple of
 * them, probably took the task for its value (as Dask's delayed calls do):
 * say so under the traceback. */
static void
note_task_args(modstate *st, PyObject *args, PyObject *kwargs, PyObject *exc)
{
    if (!PyErr_GivenExceptionMatches(exc, PyExc_TypeError) && !PyErr_GivenExceptionMatches(exc, PyExc_AttributeError))
        return;
    PyObject *what = NULL;
    int kind = 0;
    for (Py_ssize_t i = 0; args && i < PyTuple_GET_SIZE(args) && !kind; i++)
        if ((kind = task_in(st, PyTuple_GET_ITEM(args, i))) != 0) what = PyUnicode_FromFormat("argument %zd", i);
    if (!kind && kwargs && PyDict_Check(kwargs)) {
        PyObject *items = PyDict_Items(kwargs); /* (a copy: no other thread changes it under us) */
        for (Py_ssize_t i = 0; items && i < PyList_GET_SIZE(items) && !kind; i++) {
            PyObject *kv = PyList_GET_ITEM(items, i);
            if ((kind = task_in(st, PyTuple_GET_ITEM(kv, 1))) != 0)
                what = PyUnicode_FromFormat("keyword argument %R", PyTuple_GET_ITEM(kv, 0));
        }
        Py_XDECREF(items);
    }
    if (kind && what) {
        PyObject *note = PyUnicode_FromFormat(
            kind == 1 ? "%U of this task is a weft.Task, which weft passes to the body as it is (not its result, "
                        "and not as a dependency): spawn with deps=[t] and call t.result() in the body"
                      : "%U of this task holds weft.Tasks, which weft passes to the body as they are (not their "
                        "results, and not as dependencies): spawn with deps=[...] naming them and call .result() "
                        "on each in the body",
            what);
        PyObject *rv = note ? PyObject_CallMethodOneArg(exc, st->s_add_note, note) : NULL;
        Py_XDECREF(rv);
        Py_XDECREF(note);
    }
    Py_XDECREF(what);
    if (PyErr_Occurred()) PyErr_Clear();
}

int
weft_py_trampoline(weft_ctx *ctx, void *arg)
{
    cell *c = arg;
    RuntimeObject *r = c->rt;
    int attached = weft_py_tl_attached;
    int g = 0;
    if (!attached) g = weft_py_gil_take(r);
    weft_py_tl_attached = 1;

    TaskObject *t = c->t;
    c->t = NULL; /* we own the reference now */
    weft_py_task_publish(t, ctx);
    TaskObject *prev = weft_py_tl_cur;
    weft_py_tl_cur = t;

    /* A continuation (c->resume) takes only the accesses the segment
     * before it left (seg_acc): the first segment took the rest (and,
     * without the GIL, may still be handing them over). */
    PyObject *fn = NULL, *args = NULL, *kwargs = NULL, *bodies = NULL, *acc = NULL, *coro = NULL;
    if (!c->resume) {
        fn = t->fn, args = t->args, kwargs = t->kwargs, bodies = t->bodies, acc = t->acc;
        t->fn = t->args = t->kwargs = t->bodies = t->acc = NULL;
    } else {
        acc = t->seg_acc;
        t->seg_acc = NULL;
    }
    /* What the body's views are made of (view.c). */
    weft_py_frame frame = {ctx, c, acc, t->acc_nreads, t->acc_nreduces, t->device_data, t->acc_nscratch};
    weft_py_frame *prev_frame = weft_py_tl_frame;
    weft_py_tl_frame = &frame;
    PyObject *res;
    /* Placed: variants, GPUs, a Context to shadow, or a later alternative
     * (the CPU after GPUs), whose index the body's Context must tell. */
    int placed = bodies || weft_ctx_gpu_count(ctx) || weft_ctx_variant(ctx) || weft_py_tl_ctx, suspended = 0;
    if (c->resume) {
        /* A continuation: the coroutine goes on where its await left it. */
        coro = t->coro;
        t->coro = NULL;
        res = weft_py_drive(r, t, ctx, placed, coro, &suspended);
    } else if (placed) {
        /* Placed: the chosen alternative's body, with its Context.  (So is
         * a plain task run nested inside a placed body, which must not see
         * that body's Context as its own.) */
        PyObject *body = fn;
        unsigned v = weft_ctx_variant(ctx);
        if (bodies && v < (unsigned)PyTuple_GET_SIZE(bodies) && PyTuple_GET_ITEM(bodies, v) != Py_None)
            body = PyTuple_GET_ITEM(bodies, v);
        res = weft_py_call_placed(r->st, ctx, body, args, kwargs);
    } else if (args == NULL)
        res = kwargs ? PyObject_Call(fn, r->st->empty_tuple, kwargs) : PyObject_CallNoArgs(fn);
    else if (kwargs == NULL)
        res = PyObject_Vectorcall(fn, &PyTuple_GET_ITEM(args, 0), PyTuple_GET_SIZE(args), NULL);
    else
        res = PyObject_Call(fn, args, kwargs);
    if (!c->resume) t->cid = weft_ctx_task_id(ctx);
    if (res != NULL && PyCoro_CheckExact(res) && !c->resume) { /* an `async def` body: run it here */
        coro = res;
        res = weft_py_drive(r, t, ctx, placed, coro, &suspended);
    }
    int rc = 0;
    if (suspended) {
        /* Awaiting: its continuation holds the coroutine; the task's
         * result, exception and `ran` wait for the segment that ends it. */
    } else if (res != NULL) {
        t->result = res;
        t->ran = 1;
        if (weft_ctx_gpu_count(ctx)) { /* its device work may fail it yet */
            c->placed = (TaskObject *)Py_NewRef(t);
            c->id = t->cid ? t->cid : weft_ctx_task_id(ctx);
        }
    } else {
        PyObject *exc = weft_py_fetch_exc();
        rc = 1;
        if (exc == NULL) exc = PyObject_CallOneArg(PyExc_SystemError, NULL);
        /* Stored before the task is listed as failed: a wait_all on another
         * thread may read the list at once (found by TSan). */
        int first = weft_py_task_set_exc(t, exc);
        t->ran = 1;
        if (first && (args || kwargs)) note_task_args(r->st, args, kwargs, exc);
        /* (Under the id of its first segment, which its dependents name.) */
        if (first) weft_py_record_failure(r, t, fn ? fn : coro, exc, t->cid ? t->cid : weft_ctx_task_id(ctx));
    }
    Py_XDECREF(coro); /* (a suspended one is held by t->coro too) */
    weft_py_tl_cur = prev;
    weft_py_tl_frame = prev_frame;
    Py_XDECREF(bodies);
    if (c->resume) {
        /* A continuation took no references but the cell's and its
         * accesses' (the list of r->released may hold t for its first
         * segment still). */
        Py_XDECREF(acc);
        WEFT_PY_HANDOFF_RELEASE(t);
        Py_DECREF(t);
    } else if (r->gil_off) {
        /* Without the GIL, the references this worker drops here belong to
         * objects the spawning thread made: each drop would queue the object
         * to that thread's biased-refcount list, under a lock all workers
         * contend for.  The spawning side drops them instead, in batches
         * (weft_py_release_drain). */
        t->fn = fn;
        t->args = args;
        t->kwargs = kwargs;
        t->acc = acc;
        weft_py_release_defer(r, t);
    } else {
        Py_XDECREF(fn); /* (NULL in a continuation) */
        Py_XDECREF(args);
        Py_XDECREF(kwargs);
        Py_XDECREF(acc);
        WEFT_PY_HANDOFF_RELEASE(t);
        Py_DECREF(t);
    }
    weft_py_tl_attached = attached;
    if (!attached) weft_py_gil_give(r, g);
    return rc;
}

void
weft_py_arg_destroy(void *arg)
{
    cell *c = arg;
    RuntimeObject *r = c->rt;
    if (c->scope) weft_py_views_end(c); /* the task ended: so do its views */
    if (c->t != NULL) {
        /* The body never ran: cancelled, or the spawn failed. */
        int attached = weft_py_tl_attached;
        int g = 0;
        if (!attached) g = weft_py_gil_take(NULL);
        weft_py_tl_attached = 1;
        TaskObject *t = c->t;
        c->t = NULL;
        PyObject *fn = t->fn, *args = t->args, *kwargs = t->kwargs;
        t->fn = t->args = t->kwargs = NULL;
        /* A continuation that will not run because it was cancelled: its
         * coroutine is closed now (GeneratorExit at its await, which runs
         * its `finally` blocks), not whenever the last reference goes (a
         * cycle, or a free-threaded build's deferred counts, could keep it
         * for long), then dropped.  One whose spawn failed only drops it. */
        PyObject *coro = c->resume ? t->coro : NULL;
        if (coro) {
            t->coro = NULL;
            /* (A spawn that failed: the driver throws its error in instead.) */
            PyObject *res = weft_py_tl_suspending == c ? Py_NewRef(Py_None) : PyObject_CallMethod(coro, "close", NULL);
            if (res == NULL) PyErr_WriteUnraisable(coro);
            Py_XDECREF(res);
        }
        Py_XDECREF(coro);
        Py_CLEAR(t->bodies);
        Py_CLEAR(t->acc);
        Py_XDECREF(fn);
        Py_XDECREF(args);
        Py_XDECREF(kwargs);
        WEFT_PY_HANDOFF_RELEASE(t);
        Py_DECREF(t);
        weft_py_tl_attached = attached;
        if (!attached) weft_py_gil_give(NULL, g);
    }
    if (c->native) {
        /* Its function ran (or never will): on the worker, or on the
         * stream's thread before the task ended. */
        WEFT_PY_HANDOFF_ACQUIRE(c->native);
        PyMem_RawFree(c->native);
        c->native = NULL;
    }
    atomic_fetch_sub_explicit(&r->inflight, 1, memory_order_relaxed);
    if (c->placed || c->keep) {
        /* Dropped later by a thread with a thread state: this may be a
         * device's thread. */
        cell *head = atomic_load_explicit(&r->cells, memory_order_relaxed);
        do {
            c->next = head;
        } while (!atomic_compare_exchange_weak_explicit(&r->cells, &head, c, memory_order_release,
                                                        memory_order_relaxed));
        return;
    }
    free(c);
}

int
weft_py_task_set_exc(TaskObject *t, PyObject *exc)
{
    if (exc == NULL) return 0;
    int first = 0;
    WEFT_PY_CS_BEGIN(t)
    if (t->exc == NULL) {
        t->exc = exc;
        first = 1;
    }
    WEFT_PY_CS_END();
    if (!first) Py_DECREF(exc);
    return first;
}

void
weft_py_on_finish(void *arg, int status)
{
    cell *c = arg;
    /* The task failed, and its body returned on GPUs (c->placed): its
     * device work failed (a kernel, a copy), the checking mode found an
     * error in it, or a callable it queued raised (that exception is the
     * task's already).  Or it failed before its body ran (c->t: its data
     * could not be made ready, or the checking mode found them wrong).
     * The core's message says which (weft_task_desc.on_finish), "task 3
     * 'f' failed: why": the exception says why. */
    if (status != WEFT_ETASKFAILED || (c->placed == NULL && c->t == NULL)) return;
    char why[1024];
    const char *m = weft_last_error(), *after = m[0] ? strstr(m, " failed: ") : NULL;
    snprintf(why, sizeof why, "%s", after ? after + 9 : m);
    RuntimeObject *r = c->rt;
    int attached = weft_py_tl_attached;
    int g = 0;
    if (!attached) g = weft_py_gil_take(NULL);
    weft_py_tl_attached = 1;
    TaskObject *t = c->placed, *unrun = NULL;
    c->placed = NULL;
    if (t == NULL) t = unrun = (TaskObject *)Py_NewRef(c->t); /* (the cell keeps its own reference) */
    PyObject *exc;
    if (unrun == NULL && c->native && c->native->rc != 0) { /* a native body, queued (native.c) */
        PyObject *msg = PyUnicode_FromFormat("the native body %S returned %d on the GPU's stream", t->fn,
                                             c->native->rc);
        exc = msg ? PyObject_CallOneArg(PyExc_RuntimeError, msg) : NULL;
        Py_XDECREF(msg);
    } else if (why[0]) {
        /* ("replace": a task name the core cut inside a character) */
        PyObject *w = PyUnicode_DecodeUTF8(why, (Py_ssize_t)strlen(why), "replace");
        PyObject *msg = w ? PyUnicode_FromFormat("the weft task failed: %U", w) : NULL;
        exc = msg ? PyObject_CallOneArg(PyExc_RuntimeError, msg) : NULL;
        Py_XDECREF(w);
        Py_XDECREF(msg);
    } else {
        exc = PyObject_CallFunction(PyExc_RuntimeError, "s",
                                    "the weft task failed: its device work failed (WEFT_EDEVICE or a "
                                    "kernel's error; see the message printed by the device)");
    }
    if (exc == NULL) PyErr_Clear();
    if (weft_py_task_set_exc(t, exc)) weft_py_record_failure(r, t, unrun ? t->fn : NULL, exc, c->id);
    Py_DECREF(t);
    weft_py_tl_attached = attached;
    if (!attached) weft_py_gil_give(NULL, g);
}

void
weft_py_release_defer(RuntimeObject *r, TaskObject *t)
{
    WEFT_PY_HANDOFF_RELEASE(t);
    TaskObject *head = atomic_load_explicit(&r->released, memory_order_relaxed);
    do {
        t->release_next = head;
    } while (!atomic_compare_exchange_weak_explicit(&r->released, &head, t, memory_order_release,
                                                    memory_order_relaxed));
}

void
weft_py_release_drain(RuntimeObject *r)
{
    if (atomic_load_explicit(&r->cells, memory_order_relaxed) != NULL) {
        cell *c = atomic_exchange_explicit(&r->cells, NULL, memory_order_acquire);
        while (c) {
            cell *next = c->next;
            Py_XDECREF(c->placed);
            Py_XDECREF(c->keep);
            free(c);
            c = next;
        }
    }
    if (atomic_load_explicit(&r->released, memory_order_relaxed) == NULL) return;
    /* Taking the whole list at once: pushes never read a node's successor,
     * so a node freed and reused meanwhile cannot confuse them. */
    TaskObject *t = atomic_exchange_explicit(&r->released, NULL, memory_order_acquire);
    while (t) {
        TaskObject *next = t->release_next;
        t->release_next = NULL;
        WEFT_PY_HANDOFF_ACQUIRE(t);
        Py_CLEAR(t->fn);
        Py_CLEAR(t->args);
        Py_CLEAR(t->kwargs);
        Py_CLEAR(t->acc);
        WEFT_PY_HANDOFF_RELEASE(t);
        Py_DECREF(t);
        t = next;
    }
}

/* ------------------------------------------------------------------------ */
/* Failures                                                                  */
/* ------------------------------------------------------------------------ */

/* Has the exception a note from weft already (it went through a task that
 * waited for the one that raised it)? */
static int
has_weft_note(PyObject *exc)
{
    PyObject *notes = PyObject_GetAttrString(exc, "__notes__");
    if (notes == NULL) {
        PyErr_Clear();
        return 0;
    }
    int found = 0;
    if (PyList_Check(notes))
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(notes) && !found; i++) {
            PyObject *n = PyList_GET_ITEM(notes, i);
            if (PyUnicode_Check(n)) {
                const char *u = PyUnicode_AsUTF8(n);
                found = u && (strncmp(u, "raised by weft task", 19) == 0 ||
                              strncmp(u, "raised by a weft task", 21) == 0);
            }
        }
    Py_DECREF(notes);
    if (PyErr_Occurred()) PyErr_Clear();
    return found;
}

void
weft_py_record_failure(RuntimeObject *r, TaskObject *t, PyObject *fn, PyObject *exc, uint64_t id)
{
    /* A note naming the task, shown under the traceback. */
    if (PyExceptionInstance_Check(exc) && !has_weft_note(exc)) {
        PyObject *note;
        const char *fl = fn ? weft_py_fn_label(fn) : NULL;
        if (t->name)
            note = PyUnicode_FromFormat("raised by weft task %R", t->name);
        else if (fl)
            note = PyUnicode_FromFormat("raised by a weft task running %s()", fl);
        else if (fn)
            note = PyUnicode_FromFormat("raised by a weft task running %R", fn);
        else
            note = PyUnicode_FromString("raised by a weft task's device work");
        if (note) {
            PyObject *rv = PyObject_CallMethodOneArg(exc, r->st->s_add_note, note);
            Py_XDECREF(rv);
            Py_DECREF(note);
        }
        if (PyErr_Occurred()) PyErr_Clear();
    }
    /* For wait_all until the program retrieves it (weft_py_task_retrieved): the
     * runtime holds the Task, so its exception, only that long.  Unbounded:
     * one entry per failure nobody has looked at yet. */
    WEFT_PY_HANDOFF_RELEASE(t);
    if (r->failures && PyDict_SetItem(r->failures, (PyObject *)t, Py_None) < 0) PyErr_Clear();
    /* For the report at close of failures nobody looked at (weft_py_task_observed
     * removes it): a line naming the task and the exception, not the exception
     * itself (the runtime does not keep it alive for this). */
    if (r->unobserved && id != 0 && atomic_load(&t->unobs_id) == 0) {
        PyObject *er = PyObject_Repr(exc);
        if (er == NULL) PyErr_Clear();
        else if (PyUnicode_GET_LENGTH(er) > 200) {
            PyObject *cut = PyUnicode_Substring(er, 0, 197);
            Py_SETREF(er, cut ? PyUnicode_FromFormat("%U...", cut) : NULL);
            Py_XDECREF(cut);
            if (er == NULL) PyErr_Clear();
        }
        const char *fl = fn ? weft_py_fn_label(fn) : NULL;
        PyObject *line = NULL;
        if (er && t->name) line = PyUnicode_FromFormat("task %R raised %U", t->name, er);
        else if (er && fl) line = PyUnicode_FromFormat("task '%s' (id %llu) raised %U", fl, (unsigned long long)id, er);
        else if (er) line = PyUnicode_FromFormat("task id %llu raised %U", (unsigned long long)id, er);
        PyObject *k = line ? PyLong_FromUnsignedLongLong(id) : NULL;
        if (k && PyDict_SetItem(r->unobserved, k, line) == 0) atomic_store(&t->unobs_id, id);
        else PyErr_Clear();
        Py_XDECREF(k);
        Py_XDECREF(line);
        Py_XDECREF(er);
    }
    /* For the CancelledError of its dependents, as long as the Task lives. */
    if (r->failed && t->fail_id == 0 && id != 0) {
        PyObject *k = PyLong_FromUnsignedLongLong(id);
        PyObject *v = PyLong_FromVoidPtr(t);
        if (k && v && PyDict_SetItem(r->failed, k, v) == 0) t->fail_id = id;
        else PyErr_Clear();
        Py_XDECREF(k);
        Py_XDECREF(v);
    }
}

/* The program has seen t's exception (.result() raised it, .exception()
 * returned it): wait_all no longer raises it, and the runtime lets go of t. */
void
weft_py_task_retrieved(TaskObject *t)
{
    weft_py_task_observed(t);
    if (atomic_exchange(&t->retrieved, 1)) return;
    RuntimeObject *r = t->rt;
    if (r == NULL || r->failures == NULL) return;
    /* One dict operation (it locks the dict): racing wait_all's clear is fine. */
    if (PyDict_DelItem(r->failures, (PyObject *)t) < 0) PyErr_Clear();
}

void
weft_py_task_observed(TaskObject *t)
{
    uint64_t id = atomic_exchange(&t->unobs_id, 0);
    RuntimeObject *r = t->rt;
    if (id == 0 || r == NULL || r->unobserved == NULL) return;
    PyObject *saved = weft_py_fetch_exc();
    PyObject *k = PyLong_FromUnsignedLongLong(id);
    if (k == NULL || PyDict_DelItem(r->unobserved, k) < 0) PyErr_Clear();
    Py_XDECREF(k);
    if (saved) {
        weft_py_raise_exc(saved);
        Py_DECREF(saved);
    }
}

/* n's UTF-8 (cached in the str: valid while n lives), or NULL if n is not
 * a str (no exception left). */
static const char *
str_utf8(PyObject *n)
{
    const char *s = n && PyUnicode_Check(n) ? PyUnicode_AsUTF8(n) : NULL;
    if (s == NULL) PyErr_Clear();
    return s;
}

const char *
weft_py_fn_label(PyObject *fn)
{
    if (PyMethod_Check(fn)) fn = PyMethod_GET_FUNCTION(fn);
    if (PyFunction_Check(fn)) return str_utf8(((PyFunctionObject *)fn)->func_name);
    if (PyCFunction_Check(fn)) return ((PyCFunctionObject *)fn)->m_ml->ml_name;
    if (PyType_Check(fn)) {
        const char *s = ((PyTypeObject *)fn)->tp_name, *dot = strrchr(s, '.');
        return dot ? dot + 1 : s;
    }
    if (PyCoro_CheckExact(fn)) {
        /* An async body failing after an await (its function is gone by
         * then): its function's name, a string the coroutine holds. */
        PyObject *n = PyObject_GetAttrString(fn, "__name__");
        const char *s = str_utf8(n);
        if (n == NULL) PyErr_Clear();
        Py_XDECREF(n);
        return s;
    }
    return NULL;
}

/* s as a kind Weft accepts (weft_task_desc.kind), into buf when it must
 * change: a name longer than WEFT_KIND_MAX bytes keeps its start (whole
 * UTF-8 characters), '~' and a hash of the whole, so that long qualified
 * names stay apart. */
static const char *
kind_fit(const char *s, char buf[WEFT_KIND_MAX + 1])
{
    size_t n = s ? strlen(s) : 0;
    if (n <= WEFT_KIND_MAX) return s;
    uint64_t h = 0xcbf29ce484222325u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3u;
    int keep = WEFT_KIND_MAX - 17;
    while (keep > 0 && ((unsigned char)s[keep] & 0xC0) == 0x80) keep--; /* (not inside a character) */
    snprintf(buf, WEFT_KIND_MAX + 1, "%.*s~%016llx", keep, s, (unsigned long long)h);
    return buf;
}

/* The name under which the core's models keep their rate per unit of cost
 * (its WEFT__PM_PER_COST, src/sched/perfmodel.h): no kind of work may take
 * it. */
#define KIND_PER_COST "(time per unit of cost)"

/* fn with what only passes its calls on taken off (a new reference): a
 * bound method's function, a functools.partial's func, in turn. */
static PyObject *
fn_unwrap(modstate *st, PyObject *fn)
{
    Py_INCREF(fn);
    for (int i = 0; i < 16; i++) {
        PyObject *next;
        if (PyMethod_Check(fn)) {
            next = Py_NewRef(PyMethod_GET_FUNCTION(fn));
        } else if (PyObject_TypeCheck(fn, (PyTypeObject *)st->Partial_T)) {
            if ((next = PyObject_GetAttrString(fn, "func")) == NULL) {
                PyErr_Clear();
                break;
            }
        } else {
            break;
        }
        Py_SETREF(fn, next);
    }
    return fn;
}

/* kind as a str the core accepts: itself when it fits, else kind_fit's
 * (a new reference); NULL (no exception) for none or "". */
static PyObject *
kind_str(PyObject *kind)
{
    Py_ssize_t n;
    const char *s = kind && PyUnicode_Check(kind) ? PyUnicode_AsUTF8AndSize(kind, &n) : NULL;
    if (s == NULL || n == 0) {
        PyErr_Clear();
        return NULL;
    }
    if (n <= WEFT_KIND_MAX) return Py_NewRef(kind);
    char buf[WEFT_KIND_MAX + 1];
    PyObject *k = PyUnicode_FromString(kind_fit(s, buf));
    if (k == NULL) PyErr_Clear();
    return k;
}

/* The kind fn gives (weft_task_desc.kind where kind= is not), a new str, or
 * NULL (no exception) where it gives none (the core then names the C
 * function that runs it, which every Python body shares): a function's
 * qualified name (a bound method's, a functools.partial's func's); a
 * callable's own __qualname__ (functools.wraps, weft.variants); a
 * builtin's or a class's name; a callable object's class's qualified
 * name.  A weft.Native gives none.  Shortened as kind_fit says. */
static PyObject *
fn_kind(modstate *st, PyObject *fn)
{
    if (weft_py_is_native(st, fn)) return NULL;
    PyObject *u = fn_unwrap(st, fn), *k = NULL;
    if (PyFunction_Check(u)) {
        k = kind_str(((PyFunctionObject *)u)->func_qualname);
    } else {
        PyObject *d = PyType_Check(u) ? NULL : PyObject_GenericGetDict(u, NULL);
        if (d == NULL) PyErr_Clear();
        PyObject *q = d ? PyDict_GetItemString(d, "__qualname__") : NULL; /* borrowed, from u's dict */
        k = kind_str(q);
        Py_XDECREF(d);
        const char *label = k ? NULL : weft_py_fn_label(u);
        if (label && (k = PyUnicode_FromString(label)) == NULL) PyErr_Clear();
        if (k == NULL && !PyType_Check(u) && Py_TYPE(u)->tp_call != NULL) {
            PyObject *tq = PyType_GetQualName(Py_TYPE(u));
            k = kind_str(tq);
            Py_XDECREF(tq);
        }
        if (k) {
            PyObject *fit = kind_str(k);
            Py_SETREF(k, fit);
        }
    }
    Py_DECREF(u);
    if (PyErr_Occurred()) PyErr_Clear();
    return k;
}

/* What a wrapper made by functools.wraps (or weft.variants) wraps: its
 * __wrapped__ (a new reference), or NULL (no exception). */
static PyObject *
wrapped_of(PyObject *u)
{
    if (PyFunction_Check(u) && ((PyFunctionObject *)u)->func_dict == NULL) return NULL;
    if (PyCFunction_Check(u) || PyType_Check(u)) return NULL;
    PyObject *w = PyObject_GetAttrString(u, "__wrapped__");
    if (w == NULL) PyErr_Clear();
    return w;
}

/* The code a task of fn runs, for telling apart what shares a kind (a new
 * reference into *code), through bound methods, functools.partial and
 * functools.wraps: a function's code object (closures made from one def
 * share it); a builtin's C function (as an int); a class itself; a
 * callable object's class's __call__, or that class.  *at: what it was
 * found in (a new reference), for code_where.  0, or -1 (no exception) if
 * not found. */
static int
fn_code(modstate *st, PyObject *fn, PyObject **code, PyObject **at)
{
    PyObject *u = fn_unwrap(st, fn);
    for (int i = 0; i < 16; i++) {
        PyObject *w = wrapped_of(u);
        if (w == NULL) break;
        Py_SETREF(u, fn_unwrap(st, w));
        Py_DECREF(w);
    }
    if (!PyFunction_Check(u) && !PyCFunction_Check(u) && !PyType_Check(u)) {
        /* A callable object: its class's __call__. */
        PyObject *call = PyObject_GetAttrString((PyObject *)Py_TYPE(u), "__call__");
        if (call == NULL) PyErr_Clear();
        if (call && PyFunction_Check(call)) {
            Py_SETREF(u, call);
        } else {
            Py_XDECREF(call);
            Py_SETREF(u, Py_NewRef((PyObject *)Py_TYPE(u)));
        }
    }
    if (PyFunction_Check(u)) *code = Py_NewRef(PyFunction_GET_CODE(u));
    else if (PyCFunction_Check(u)) *code = PyLong_FromVoidPtr(((PyCFunctionObject *)u)->m_ml);
    else *code = Py_NewRef(u);
    if (*code == NULL) {
        PyErr_Clear();
        Py_DECREF(u);
        return -1;
    }
    *at = u;
    return 0;
}

/* Where fn_code's code is, for messages: "qualname (file:line)" of a
 * function, "the built-in name()", "the class name" (a new str), or NULL
 * (no exception). */
static PyObject *
code_where(PyObject *at)
{
    PyObject *w;
    if (PyFunction_Check(at)) {
        PyCodeObject *c = (PyCodeObject *)PyFunction_GET_CODE(at);
        w = PyUnicode_FromFormat("%U (%U:%d)", c->co_qualname, c->co_filename, c->co_firstlineno);
    } else if (PyCFunction_Check(at)) {
        w = PyUnicode_FromFormat("the built-in %s()", ((PyCFunctionObject *)at)->m_ml->ml_name);
    } else {
        w = PyUnicode_FromFormat("the class %s", ((PyTypeObject *)at)->tp_name);
    }
    if (w == NULL) PyErr_Clear();
    return w;
}

/* Whether two codes of fn_code are one. */
static int
same_code(PyObject *a, PyObject *b)
{
    if (a == b) return 1;
    if (!PyLong_CheckExact(a) || !PyLong_CheckExact(b)) return 0;
    int eq = PyObject_RichCompareBool(a, b, Py_EQ);
    if (eq < 0) PyErr_Clear();
    return eq > 0;
}

/* A task of fn takes the kind fn gives (kind, in r->models' runtime):
 * record the code of the first function to give it, and tell once per
 * kind (weft.TaskWarning) when another's code differs.  0, or -1 with the
 * warning's exception (warnings as errors). */
static int
kind_code_check(RuntimeObject *r, PyObject *kind, PyObject *fn)
{
    PyObject *code, *at;
    if (r->kinds == NULL || fn_code(r->st, fn, &code, &at) < 0) return 0;
    PyObject *kinds = r->kinds, *first = NULL, *where = NULL;
    WEFT_PY_CS_BEGIN(kinds)
    PyObject *v = PyDict_GetItemWithError(kinds, kind); /* (borrowed: the dict's lock is held) */
    if (v == NULL && !PyErr_Occurred()) {
        PyObject *w = code_where(at);
        PyObject *e = w ? PyTuple_Pack(2, code, w) : NULL;
        if (e == NULL || PyDict_SetItem(kinds, kind, e) < 0) PyErr_Clear();
        Py_XDECREF(e);
        Py_XDECREF(w);
    } else if (v && v != Py_None && !same_code(PyTuple_GET_ITEM(v, 0), code)) {
        /* (One place compiled twice — a module imported again, source run
         * twice — is one function.) */
        where = code_where(at);
        if (where && PyUnicode_Compare(PyTuple_GET_ITEM(v, 1), where) != 0) {
            first = Py_NewRef(PyTuple_GET_ITEM(v, 1));
            if (PyDict_SetItem(kinds, kind, Py_None) < 0) PyErr_Clear();
        }
    }
    if (PyErr_Occurred()) PyErr_Clear();
    WEFT_PY_CS_END();
    int rc = 0;
    if (first) {
        rc = PyErr_WarnFormat(r->st->TaskWarning, 1,
                              "weft: tasks of kind %R run different code: %U and %U; the \"dmda\" policy keeps "
                              "one performance model per kind, which predicts them alike: pass kind=\"...\" to "
                              "spawn() to keep them apart (a name for each kind of work)",
                              kind, first, where);
        Py_DECREF(first);
    }
    Py_XDECREF(where);
    Py_DECREF(code);
    Py_DECREF(at);
    return rc;
}

/* kind= as given to a spawn: a str the core takes as a kind, checked as
 * the core checks a weft_task_desc.kind.  0, or -1 with TypeError or
 * ValueError. */
static int
kind_given_check(PyObject *k)
{
    if (!PyUnicode_Check(k)) {
        PyErr_Format(PyExc_TypeError, "spawn(): kind= expects a str (the kind of work, such as \"gemm\", whose "
                     "performance model the task's time goes into), got '%.100s'", Py_TYPE(k)->tp_name);
        return -1;
    }
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(k, &n);
    if (s == NULL) return -1;
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError, "spawn(): kind=\"\": name the kind of work (kind=\"gemm\"), or leave "
                        "kind= out to have the function's qualified name used");
        return -1;
    }
    if (n > WEFT_KIND_MAX) {
        PyErr_Format(PyExc_ValueError, "spawn(): kind=%R is %zd bytes in UTF-8, more than the %d a model's name "
                     "keeps (kinds that differ only after that would share one model): shorten it", k, n,
                     WEFT_KIND_MAX);
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyUnicode_GET_LENGTH(k); i++) {
        Py_UCS4 ch = PyUnicode_READ_CHAR(k, i);
        if (ch < 0x20 || ch == 0x7f) {
            char code[8];
            snprintf(code, sizeof code, "U+%04X", (unsigned)ch);
            PyErr_Format(PyExc_ValueError, "spawn(): kind=%R has a control character (%s) at index %zd: a kind is "
                         "a name of printable characters", k, code, i);
            return -1;
        }
    }
    if (strcmp(s, KIND_PER_COST) == 0) {
        PyErr_Format(PyExc_ValueError, "spawn(): kind=%R is the name the models keep their own rate per unit "
                     "of cost under: name the kind of work", k);
        return -1;
    }
    return 0;
}

int
weft_py_spawn_kind(RuntimeObject *r, PyObject *fn, PyObject *given, size_t npl, PyObject **kind)
{
    *kind = NULL;
    if (given && given != Py_None) {
        if (kind_given_check(given) < 0) return -1;
        *kind = Py_NewRef(given);
        return 0;
    }
    if (!npl || !r->models || fn == NULL || (*kind = fn_kind(r->st, fn)) == NULL) return 0;
    if (kind_code_check(r, *kind, fn) < 0) {
        Py_CLEAR(*kind);
        return -1;
    }
    return 0;
}

const char *
weft_py_resumed_kind(PyObject *kind, char buf[WEFT_KIND_MAX + 1])
{
    const char *s = PyUnicode_AsUTF8(kind);
    if (s == NULL) {
        PyErr_Clear();
        return NULL;
    }
    char whole[WEFT_KIND_MAX + 16];
    snprintf(whole, sizeof whole, "%s (resumed)", s);
    const char *k = kind_fit(whole, buf);
    if (k == whole) snprintf(buf, WEFT_KIND_MAX + 1, "%s", whole);
    return buf;
}

const char *
weft_py_desc_name(TaskObject *t, char buf[WEFT_PY_DESC_NAME])
{
    if (t->name == NULL) return NULL;
    Py_ssize_t len;
    const char *s = PyUnicode_AsUTF8AndSize(t->name, &len);
    if (s == NULL) {
        PyErr_Clear();
        return NULL;
    }
    if (len > WEFT_PY_DESC_NAME - 1) len = WEFT_PY_DESC_NAME - 1;
    memcpy(buf, s, (size_t)len);
    buf[len] = 0;
    return buf;
}

/* A failed task is being freed: drop its entry in rt->failed (first thing
 * in Task_dealloc: weft_py_find_failure may be reading the task under the
 * dict's lock until then). */
void
weft_py_task_forget_failure(TaskObject *t)
{
    uint64_t id = t->fail_id;
    if (id == 0) return;
    t->fail_id = 0;
    RuntimeObject *r = t->rt;
    if (r == NULL || r->failed == NULL) return;
    PyObject *saved = weft_py_fetch_exc();
    PyObject *k = PyLong_FromUnsignedLongLong(id);
    PyObject *failed = r->failed;
    WEFT_PY_CS_BEGIN(failed) /* after any weft_py_find_failure reading t */
    if (k == NULL || PyDict_DelItem(failed, k) < 0) PyErr_Clear();
    WEFT_PY_CS_END();
    Py_XDECREF(k);
    if (saved) {
        weft_py_raise_exc(saved);
        Py_DECREF(saved);
    }
}

/* The exception of the failed task with this id, if that Task still lives
 * (new ref), or NULL.  The lookup and the reference are taken in a critical
 * section on the dict: a Task being freed on another thread removes its
 * entry (under the same lock) before it lets go of its exception. */
PyObject *
weft_py_find_failure(RuntimeObject *r, uint64_t id)
{
    PyObject *failed = r->failed;
    if (failed == NULL) return NULL;
    PyObject *k = PyLong_FromUnsignedLongLong(id);
    if (k == NULL) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *res = NULL;
    WEFT_PY_CS_BEGIN(failed)
    PyObject *v = PyDict_GetItemWithError(failed, k);
    if (v) {
        TaskObject *f = PyLong_AsVoidPtr(v);
        if (f) WEFT_PY_HANDOFF_ACQUIRE(f);
        if (f && f->exc) res = Py_NewRef(f->exc);
    }
    WEFT_PY_CS_END();
    Py_DECREF(k);
    if (PyErr_Occurred()) PyErr_Clear();
    return res;
}
