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
    int g = -1;
    if (weft_py_gil_held_over(r)) attached = 0; /* kept from this worker's last body: ours now */
    else if (!attached) g = weft_py_gil_take(r);
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
    if (!attached) weft_py_gil_body_give(r, g, ctx);
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
