/*
 * coro.c — `async def` bodies: the driver that runs a task's coroutine on
 * its worker, and what a coroutine may await (weft.Task, a task-space slot,
 * a weft.TaskSpace, weft.gather(...)).
 *
 * No event loop: the body's trampoline (body.c) drives the coroutine itself
 * with send(None).  Awaiting weft tasks yields an _Await object (the
 * "wait-for" marker) to the driver.  If every task it names has finished,
 * the driver sends again at once; otherwise it suspends the task with
 * weft_ctx_continue: a continuation task, depending on the awaited tasks,
 * whose body (the same trampoline, with a cell marked `resume`) sends into
 * the coroutine again.  The worker and the task's GPU reservation are free
 * meanwhile; the user's Task, its data and its dependents follow the C task
 * of its first segment, which ends only with its last continuation.  Each
 * segment reaches the task's data as the first did (views: the C
 * continuation reaches its task's accesses); a task holding its data on
 * its GPUs (device_data=True) continues on those GPUs, where the data is.  On
 * the next send the _Await returns what `task.result()` would (or raises
 * what it would raise), inside the coroutine.
 */
#include "_weft.h"

_Thread_local TaskObject *weft_py_tl_driving WEFT_PY_TLS;
_Thread_local void *weft_py_tl_suspending WEFT_PY_TLS;

/* ------------------------------------------------------------------------ */
/* The awaitable: weft._Await                                                */
/* ------------------------------------------------------------------------ */

enum { AW_ONE = 0, AW_MANY = 1, AW_SPACE = 2 };

typedef struct AwaitObject {
    PyObject_HEAD
    PyObject *tasks; /* tuple of Task: what it waits for */
    int mode;        /* AW_ONE: the result of tasks[0]; AW_MANY: a list of results;
                        AW_SPACE: None, as TaskSpace.wait() (failures not raised) */
    int yielded;     /* the marker was handed to the driver: the next step answers */
} AwaitObject;

static PyObject *
await_new(modstate *st, PyObject *tasks, int mode)
{
    AwaitObject *a = PyObject_GC_New(AwaitObject, st->Await_T);
    if (a == NULL) return NULL;
    a->tasks = Py_NewRef(tasks);
    a->mode = mode;
    a->yielded = 0;
    PyObject_GC_Track(a);
    return (PyObject *)a;
}

PyObject *
weft_py_task_await(PyObject *self)
{
    modstate *st = weft_py_state_of_type(Py_TYPE(self));
    if (st == NULL) return NULL;
    PyObject *one = PyTuple_Pack(1, self);
    if (one == NULL) return NULL;
    PyObject *a = await_new(st, one, AW_ONE);
    Py_DECREF(one);
    return a;
}

PyObject *
weft_py_space_await(PyObject *self)
{
    modstate *st = weft_py_state_of_type(Py_TYPE(self));
    if (st == NULL) return NULL;
    SpaceObject *s = (SpaceObject *)self;
    PyObject *vals = PyDict_Values(s->tasks); /* (one dict operation: it locks the dict) */
    if (vals == NULL) return NULL;
    /* The tasks spawned so far, as TaskSpace.wait() waits for. */
    PyObject *spawned = PyList_New(0);
    for (Py_ssize_t i = 0; spawned && i < PyList_GET_SIZE(vals); i++) {
        TaskObject *t = (TaskObject *)PyList_GET_ITEM(vals, i);
        if (atomic_load(&t->phase) != PH_DECLARED && PyList_Append(spawned, (PyObject *)t) < 0) Py_CLEAR(spawned);
    }
    Py_DECREF(vals);
    if (spawned == NULL) return NULL;
    PyObject *tup = PyList_AsTuple(spawned);
    Py_DECREF(spawned);
    if (tup == NULL) return NULL;
    PyObject *a = await_new(st, tup, AW_SPACE);
    Py_DECREF(tup);
    return a;
}

/* weft.gather(*tasks) or weft.gather(iterable of tasks). */
PyObject *
weft_py_gather(PyObject *module, PyObject *args)
{
    modstate *st = weft_py_state_of_module(module);
    PyObject *seq = args;
    if (PyTuple_GET_SIZE(args) == 1 && !PyObject_TypeCheck(PyTuple_GET_ITEM(args, 0), st->Task_T)) {
        PyObject *only = PyTuple_GET_ITEM(args, 0);
        if (PyObject_TypeCheck(only, st->Space_T)) return weft_py_space_await(only);
        seq = PySequence_Tuple(only);
        if (seq == NULL) {
            PyErr_Format(PyExc_TypeError, "weft.gather(): pass weft.Tasks (gather(a, b) or gather([a, b])), "
                                          "not %.100s", Py_TYPE(only)->tp_name);
            return NULL;
        }
    } else {
        Py_INCREF(seq);
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(seq); i++) {
        PyObject *x = PyTuple_GET_ITEM(seq, i);
        if (!PyObject_TypeCheck(x, st->Task_T)) {
            PyErr_Format(PyExc_TypeError, "weft.gather(): item %zd is not a weft.Task but %.100s (await "
                                          "tasks, task-space slots, or a whole TaskSpace with `await T`)",
                         i, Py_TYPE(x)->tp_name);
            Py_DECREF(seq);
            return NULL;
        }
    }
    PyObject *a = await_new(st, seq, AW_MANY);
    Py_DECREF(seq);
    return a;
}

/* What awaiting t gives: its result, or NULL with the exception result()
 * raises.  t has finished when the driver resumes the coroutine; if not (a
 * task of another runtime, a wait cut short), this waits as result() does. */
static PyObject *
await_one(TaskObject *t, int for_result)
{
    int rc = weft_py_task_wait(t, NO_DEADLINE);
    PyObject *res = NULL;
    if (weft_py_raise_outcome(t, rc, for_result) == 0)
        res = Py_NewRef(for_result && t->result ? t->result : Py_None);
    /* This thread's last access to t: another thread may free it once the
     * await drops its reference (WEFT_PY_HANDOFF_RELEASE in _weft.h). */
    WEFT_PY_HANDOFF_RELEASE(t);
    return res;
}

/* The value of the await (the tasks have finished: the driver resumed
 * the coroutine), or NULL with the exception it raises. */
static PyObject *
await_value(AwaitObject *a)
{
    Py_ssize_t n = PyTuple_GET_SIZE(a->tasks);
    if (a->mode == AW_ONE) return await_one((TaskObject *)PyTuple_GET_ITEM(a->tasks, 0), 1);
    PyObject *res = a->mode == AW_MANY ? PyList_New(n) : Py_NewRef(Py_None);
    for (Py_ssize_t i = 0; res && i < n; i++) {
        PyObject *r = await_one((TaskObject *)PyTuple_GET_ITEM(a->tasks, i), a->mode == AW_MANY);
        if (r == NULL) Py_CLEAR(res);
        else if (a->mode == AW_MANY) PyList_SET_ITEM(res, i, r);
        else Py_DECREF(r);
    }
    return res;
}

/* The first step hands the marker to the driver (only weft's driver takes
 * it); the second answers. */
static int
await_first(AwaitObject *a)
{
    if (weft_py_tl_driving == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "a weft.Task (or weft.gather(), or a TaskSpace) can be awaited only in an `async def` "
                        "body that weft runs: spawn the coroutine function itself (weft.spawn(fn, ...), "
                        "not asyncio); in a plain body or another thread, call task.result() instead");
        return -1;
    }
    a->yielded = 1;
    return 0;
}

/* The await's protocol without an exception for its value (am_send: what
 * `await` calls when the awaitable has it). */
static PySendResult
Await_send(AwaitObject *a, PyObject *arg, PyObject **result)
{
    (void)arg;
    *result = NULL;
    if (!a->yielded) {
        if (await_first(a) < 0) return PYGEN_ERROR;
        *result = Py_NewRef(a); /* the marker: the driver reads a->tasks */
        return PYGEN_NEXT;
    }
    *result = await_value(a);
    return *result ? PYGEN_RETURN : PYGEN_ERROR;
}

/* The same as an iterator (a caller that does not use am_send). */
static PyObject *
Await_iternext(AwaitObject *a)
{
    if (!a->yielded)
        return await_first(a) < 0 ? NULL : Py_NewRef(a);
    PyObject *res = await_value(a);
    if (res == NULL) return NULL;
    /* The value of the await: StopIteration(value), wrapped so that a tuple
     * or an exception as the value is not taken apart. */
    PyObject *stop = PyObject_CallOneArg(PyExc_StopIteration, res);
    Py_DECREF(res);
    if (stop == NULL) return NULL;
    PyErr_SetObject(PyExc_StopIteration, stop);
    Py_DECREF(stop);
    return NULL;
}

static PyObject *
Await_await(PyObject *self)
{
    return Py_NewRef(self);
}

static int
Await_traverse(AwaitObject *a, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(a));
    Py_VISIT(a->tasks);
    return 0;
}

static int
Await_clear(AwaitObject *a)
{
    Py_CLEAR(a->tasks);
    return 0;
}

static void
Await_dealloc(AwaitObject *a)
{
    PyTypeObject *tp = Py_TYPE(a);
    PyObject_GC_UnTrack(a);
    Py_CLEAR(a->tasks);
    tp->tp_free(a);
    Py_DECREF(tp);
}

static PyObject *
Await_repr(AwaitObject *a)
{
    static const char *what[] = {"a task", "tasks (gather)", "a task space"};
    return PyUnicode_FromFormat("<weft awaiting %s: %R>", what[a->mode], a->tasks);
}

static PyType_Slot Await_slots[] = {
    {Py_tp_doc, "What awaiting weft tasks yields to weft's coroutine driver (weft.gather() returns one)."},
    {Py_tp_dealloc, Await_dealloc},
    {Py_tp_traverse, Await_traverse},
    {Py_tp_clear, Await_clear},
    {Py_tp_iter, PyObject_SelfIter},
    {Py_tp_iternext, Await_iternext},
    {Py_am_await, Await_await},
    {Py_am_send, Await_send},
    {Py_tp_repr, Await_repr},
    {0, NULL}};

PyType_Spec weft_py_await_spec = {"weft._Await", sizeof(AwaitObject), 0,
                                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION,
                                  Await_slots};

/* ------------------------------------------------------------------------ */
/* The driver                                                                */
/* ------------------------------------------------------------------------ */

/* One step of coro: send None (exc NULL) or throw exc into it; placed, the
 * call goes through the placement runner (a CUDA body's current device and
 * stream, weft.context()).  PYGEN_NEXT: *out the value it yielded;
 * PYGEN_RETURN: *out its return value; PYGEN_ERROR: an exception is set. */
static PySendResult
step(modstate *st, weft_ctx *ctx, int placed, PyObject *coro, PyObject *exc, PyObject **out)
{
    *out = NULL;
    if (!placed && exc == NULL) return PyIter_Send(coro, Py_None, out);
    PyObject *m = PyObject_GetAttrString(coro, exc ? "throw" : "send");
    PyObject *args = m ? PyTuple_Pack(1, exc ? exc : Py_None) : NULL;
    PyObject *res = NULL;
    if (args) res = placed ? weft_py_call_placed(st, ctx, m, args, NULL) : PyObject_Call(m, args, NULL);
    Py_XDECREF(m);
    Py_XDECREF(args);
    if (res) {
        *out = res;
        return PYGEN_NEXT;
    }
    if (!PyErr_ExceptionMatches(PyExc_StopIteration)) return PYGEN_ERROR;
    PyObject *e = weft_py_fetch_exc();
    PyObject *v = e ? PyObject_GetAttrString(e, "value") : NULL;
    Py_XDECREF(e);
    if (v == NULL) return PYGEN_ERROR;
    *out = v;
    return PYGEN_RETURN;
}

/* The C handles an _Await that task `self` awaits waits for, into deps
 * (PyMem, *n of them; NULL when none), leaving out finished tasks.  0, or
 * -1 with an exception. */
static int
await_deps_of(RuntimeObject *r, TaskObject *self, AwaitObject *a, weft_task ***deps, size_t *n)
{
    Py_ssize_t m = PyTuple_GET_SIZE(a->tasks);
    *deps = NULL;
    *n = 0;
    if (m == 0) return 0;
    weft_task **d = PyMem_Malloc(sizeof *d * (size_t)m);
    if (d == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < m; i++) {
        TaskObject *t = (TaskObject *)PyTuple_GET_ITEM(a->tasks, i);
        weft_task *h;
        if (t == self) {
            PyMem_Free(d);
            PyErr_Format(PyExc_RuntimeError, "await: task %R awaits itself: it could never finish "
                                             "(await the tasks it spawned instead)", t->name ? t->name : Py_None);
            return -1;
        }
        if (atomic_load(&t->phase) == PH_SUBMITTED) {
            h = atomic_load(&t->h);
            if (t->rt != r) {
                PyMem_Free(d);
                PyErr_Format(PyExc_ValueError, "await: task %R belongs to another weft runtime: a coroutine "
                                               "awaits tasks of the runtime that runs it (call .result() "
                                               "for the others)", t->name ? t->name : Py_None);
                return -1;
            }
        } else if (atomic_store_explicit(&t->depended, 1, memory_order_relaxed),
                   (h = weft_py_slot_handle(t, r)) == NULL) { /* a slot: its key's placeholder */
            PyMem_Free(d);
            return -1;
        }
        weft_task_status s;
        if (weft_task_status_get(h, &s) == 0 &&
            (s == WEFT_TASK_COMPLETED || s == WEFT_TASK_FAILED || s == WEFT_TASK_CANCELLED))
            continue;
        d[(*n)++] = h;
    }
    if (*n == 0) PyMem_Free(d);
    else *deps = d;
    return 0;
}

/* await_deps_of, and then this thread's last access to each awaited task:
 * another thread may free one once the await drops its reference
 * (WEFT_PY_HANDOFF_RELEASE in _weft.h). */
static int
await_deps(RuntimeObject *r, TaskObject *self, AwaitObject *a, weft_task ***deps, size_t *n)
{
    int rc = await_deps_of(r, self, a, deps, n);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(a->tasks); i++) WEFT_PY_HANDOFF_RELEASE(PyTuple_GET_ITEM(a->tasks, i));
    return rc;
}

/* Whether the running segment's task holds data on its GPU (spawned with
 * device_data=True, accesses, placed on GPUs): its continuations run on
 * the same GPUs, where they reach that data (weft_ctx_continue). */
static int
holds_device_data(weft_ctx *ctx)
{
    const weft_py_frame *f = weft_py_tl_frame;
    return f && f->device_data && f->acc && PyTuple_GET_SIZE(f->acc) > 0 && weft_ctx_gpu_count(ctx) > 0;
}

/* t's placement pinned to the GPUs its running segment holds (the first
 * time: its share, memory and body those of the alternative it runs). */
static void
pin_here(TaskObject *t, weft_ctx *ctx)
{
    if (t->has_pin) return;
    unsigned v = weft_ctx_variant(ctx);
    if (v < t->cont_npl) t->pin = t->cont_pl[v];
    else weft_placement_init(&t->pin);
    t->pin.gpu = -1;
    t->pin.gpus = weft_ctx_gpu_count(ctx);
    t->pin.gpu_set = 0;
    for (unsigned k = 0; k < t->pin.gpus; k++)
        t->pin.gpu_set |= 1ull << (weft_ctx_gpu(ctx, k) - 1); /* (GPU g is runtime device g + 1) */
    t->has_pin = 1;
}

/* What a body's coroutine may await: the tail of the message for anything else. */
#define AWAIT_ONLY                                                                                          \
    ": weft runs `async def` bodies without an event loop, so they may await only weft.Tasks, task-space "  \
    "slots, weft.gather(...) and TaskSpaces (for asyncio, call asyncio.run(...) inside a plain body)"

/* Suspend t until the tasks in deps have finished: a continuation whose
 * body resumes coro.  1 when suspended (t keeps coro), or -1 with an
 * exception (the continuation could not be spawned: thrown into coro). */
static int
suspend(RuntimeObject *r, TaskObject *t, weft_ctx *ctx, weft_task **deps, size_t ndeps)
{
    cell *c = calloc(1, sizeof *c);
    if (c == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    c->t = (TaskObject *)Py_NewRef(t);
    c->rt = r;
    c->resume = 1;
    weft_task_desc desc;
    weft_task_desc_init(&desc);
    desc.body = weft_py_trampoline;
    desc.arg = c;
    desc.arg_destroy = weft_py_arg_destroy;
    desc.deps = deps;
    desc.ndeps = ndeps;
    desc.priority = t->priority;
    /* The rest of a placed coroutine runs where its spawn's placement lets
     * it, reserved again (its own reservation went back with its worker). */
    desc.placements = t->cont_pl;
    desc.nplacements = t->cont_npl;
    if (holds_device_data(ctx)) { /* where its data is */
        pin_here(t, ctx);
        desc.placements = &t->pin;
        desc.nplacements = 1;
    }
    if (desc.nplacements) desc.on_finish = weft_py_on_finish;
    /* Its kind, for the "dmda" models: the part after an await is not the
     * whole body (the part before it goes unobserved: the core observes a
     * task that continued only in its last part), so it is a kind of its
     * own, "<kind> (resumed)", which predicts the rest of a resumed body. */
    char kindbuf[WEFT_KIND_MAX + 1];
    if (desc.nplacements && t->kind) desc.kind = weft_py_resumed_kind(t->kind, kindbuf);
    char namebuf[WEFT_PY_DESC_NAME];
    desc.name = weft_py_desc_name(t, namebuf);
    atomic_fetch_add_explicit(&r->inflight, 1, memory_order_relaxed);
    /* As a spawn (spawn.c): with the GIL held where it cannot block; only
     * under backpressure (WEFT_EAGAIN, the cell kept) without it, since it
     * then waits and helps run other tasks. */
    desc.flags = WEFT_SPAWN_NOWAIT;
    int prev = weft_py_tl_attached;
    weft_py_tl_attached = 1;
    weft_py_tl_suspending = c; /* (a failed spawn destroys c here: the coroutine stays ours) */
    int rc = weft_ctx_continue(ctx, &desc, NULL);
    weft_py_tl_attached = prev;
    desc.flags = 0;
    if (rc == WEFT_EAGAIN) {
        BEGIN_NOGIL
        rc = weft_ctx_continue(ctx, &desc, NULL);
        END_NOGIL
    }
    weft_py_tl_suspending = NULL;
    if (rc != 0) { /* weft_py_arg_destroy ran: the cell and its reference are gone */
        weft_py_err_weft(rc, "await");
        return -1;
    }
    return 1;
}

PyObject *
weft_py_drive(RuntimeObject *r, TaskObject *t, weft_ctx *ctx, int placed, PyObject *coro, int *suspended)
{
    modstate *st = r->st;
    PyObject *exc = NULL; /* to throw in at the next step */
    *suspended = 0;
    for (;;) {
        PyObject *out;
        TaskObject *prev = weft_py_tl_driving;
        weft_py_tl_driving = t;
        PySendResult sr = step(st, ctx, placed, coro, exc, &out);
        weft_py_tl_driving = prev;
        Py_CLEAR(exc);
        if (sr == PYGEN_RETURN) return out;
        if (sr == PYGEN_ERROR) return NULL;
        if (Py_TYPE(out) != st->Await_T) {
            /* Something an event loop would understand (asyncio.sleep, a
             * future): no loop runs here.  Raised at that await. */
            if (out == Py_None) /* (a bare yield to the loop: asyncio.sleep(0) makes one) */
                PyErr_SetString(PyExc_TypeError, "a weft task's coroutine awaited something that yields to an "
                                                 "event loop (asyncio.sleep(0) does)" AWAIT_ONLY);
            else
                PyErr_Format(PyExc_TypeError, "a weft task's coroutine awaited %.200R" AWAIT_ONLY, out);
            Py_DECREF(out);
            exc = weft_py_fetch_exc();
            continue;
        }
        weft_task **deps;
        size_t ndeps;
        int rc = await_deps(r, t, (AwaitObject *)out, &deps, &ndeps);
        Py_DECREF(out);
        if (rc == 0 && ndeps == 1 && !placed) {
            /* One task, perhaps still queued (a child just spawned): run it
             * here if it is — what a wait from a task helps with (it, or a
             * queued predecessor of it), never unrelated work — which costs
             * less than a continuation.  Without the GIL, as any wait. */
            int hrc;
            BEGIN_NOGIL
            hrc = weft_task_timedwait(deps[0], 1);
            END_NOGIL
            /* Finished (how: the await answers).  Anything else (still
             * running, or the wait refused: it depends on a body suspended
             * under this one, which a continuation frees) suspends. */
            if (hrc == 0 || hrc == WEFT_ETASKFAILED || hrc == WEFT_ECANCELLED) ndeps = 0;
        }
        if (rc == 0 && ndeps == 0) { /* all finished: the await answers at once */
            PyMem_Free(deps);
            continue;
        }
        if (rc == 0) {
            /* Stored first: the continuation may run (on another worker)
             * as soon as it is spawned, before suspend returns. */
            t->coro = Py_NewRef(coro);
            t->seg_acc = Py_XNewRef(weft_py_tl_frame ? weft_py_tl_frame->acc : NULL);
            rc = suspend(r, t, ctx, deps, ndeps);
            PyMem_Free(deps);
            if (rc == 1) { /* t->coro's and seg_acc's references are the continuation's now */
                *suspended = 1;
                return NULL;
            }
            Py_CLEAR(t->coro);
            Py_CLEAR(t->seg_acc);
        }
        exc = weft_py_fetch_exc(); /* raised at the await */
    }
}
