/*
 * wait.c — timeouts, waiting for a task and for a runtime, with the GIL
 * released and Ctrl-C checked between slices outside tasks.
 */
#include "_weft.h"

/* ------------------------------------------------------------------------ */
/* Waiting                                                                   */
/* ------------------------------------------------------------------------ */

int
weft_py_cancel_pending(RuntimeObject *r)
{
    if (r->rt == NULL) return 0;
    int prev = weft_py_tl_attached;
    weft_py_tl_attached = 1;
    int rc = weft_cancel_pending(r->rt);
    weft_py_tl_attached = prev;
    return rc;
}

static int wait_handle(TaskObject *t, weft_task *h, RuntimeObject *r, uint64_t deadline);

/* The runtime a slot nobody spawned into yet waits in (new reference): its
 * space's, or the current one (which the slot's handle then binds the
 * space to); NULL with an error set when there is none. */
static RuntimeObject *
slot_runtime(TaskObject *t)
{
    SpaceObject *s = (SpaceObject *)t->space;
    RuntimeObject *r = NULL;
    if (s) {
        WEFT_PY_CS_BEGIN(s)
        r = (RuntimeObject *)Py_XNewRef(s->rt);
        WEFT_PY_CS_END();
    }
    if (r == NULL) {
        modstate *st = weft_py_state_of_type(Py_TYPE(t));
        r = st ? weft_py_current_runtime(st, 0) : NULL;
        Py_XINCREF(r);
    }
    return r;
}

/* A slot nobody spawned into yet: wait for its key's placeholder in the C
 * space (binding the space to the current runtime if it is not bound), which
 * finishes when the task spawned for the key does, or is cancelled when the
 * space closes.  The slot's own fields then say how its task ended. */
static int
wait_declared(TaskObject *t, uint64_t deadline)
{
    RuntimeObject *r = slot_runtime(t);
    if (r == NULL) return RC_PYERR;
    weft_task *ph = weft_py_slot_handle(t, r);
    /* A body of r waiting for it: closing r cancels the key if nobody
     * spawned it (the C runtime's settled point), and says so. */
    int in_body = weft_py_tl_cur != NULL && weft_py_tl_cur->rt == r;
    if (ph && in_body) atomic_store_explicit(&t->depended, 1, memory_order_relaxed);
    int rc = ph ? wait_handle(t, ph, r, deadline) : RC_PYERR;
    Py_DECREF(r);
    if (rc == RC_PYERR || rc == WEFT_ETIMEDOUT || rc == WEFT_EBUSY || rc == WEFT_EDEADLK) return rc;
    if (t->ran) return t->exc ? WEFT_ETASKFAILED : 0;
    if (atomic_load(&t->phase) == PH_DECLARED && !t->cancel_requested) {
        /* (Cached on the slot: .result() raises it.) */
        PyObject *e = weft_py_task_cancel_exc(t, "it was never spawned, and its task space closed with the "
                                                 "runtime (spawn a task into it, or do not wait for it)");
        if (e == NULL) return RC_PYERR;
        Py_DECREF(e);
    }
    return WEFT_ECANCELLED;
}

/* Wait for t until deadline (NO_DEADLINE: without limit).  Returns a weft
 * code or RC_PYERR. */
int
weft_py_task_wait(TaskObject *t, uint64_t deadline)
{
    if (atomic_load(&t->phase) != PH_SUBMITTED) return wait_declared(t, deadline);
    int rc = wait_handle(t, t->h, t->rt, deadline);
    if (t->rt) weft_py_release_drain(t->rt);
    return rc;
}

/* How long a wait from outside tasks goes on before it looks whether only
 * a spawn can end it (the C runtime's weft_config.stall_warn_ms, from the
 * same variable). */
static uint64_t
stall_warn_ns(void)
{
    const char *s = getenv("WEFT_STALL_WARN_MS");
    char *end;
    unsigned long long ms = s && *s ? strtoull(s, &end, 10) : 0;
    if (!s || !*s || *end || ms == 0) ms = 5000;
    return ms > UINT64_MAX / 1000000 ? UINT64_MAX : ms * 1000000;
}

/* The slots nobody spawned into that r's tasks wait for, joined for a
 * message (new reference); key, the first one's label, when they cannot
 * be listed; NULL with an error set on failure. */
static PyObject *
unspawned_slots(RuntimeObject *r, const char *key)
{
    PyObject *never = weft_py_never_spawned(r);
    PyObject *slots = never ? weft_py_join_some(never, ", ") : NULL;
    Py_XDECREF(never);
    if (slots == NULL) {
        PyErr_Clear();
        slots = PyUnicode_FromString(key);
    }
    return slots;
}

/* Warn (weft.TaskWarning) that bodies' untimed waits in crt (r's) are a
 * deadlock, if they are: 1 if it warned, 0 if not, -1 if the warning
 * raised. */
static int
tell_deadlock(RuntimeObject *r, weft_runtime *crt)
{
    char what[160];
    if (weft_runtime_deadlocked(crt, what, sizeof what) == 0) return 0;
    return PyErr_WarnFormat(r->st->TaskWarning, 1,
                            "weft: waiting for a task while no task can move: bodies wait, without a "
                            "timeout, for tasks that cannot end (%s): the waits are a deadlock (bodies "
                            "waiting for each other, or for tasks queued behind waiting bodies on every "
                            "worker); wait through deps= instead, or give the waits a timeout",
                            what) < 0 ? -1 : 1;
}

/* Warn (weft.TaskWarning) that the wait for t (a task of r, borrowed) can
 * end only when a slot nobody has spawned into is spawned (t's own, or one
 * it waits for), or that bodies' waits are a deadlock, if that is so:
 * 1 if it warned, 0 if not (nothing stalls), -1 if the warning raised. */
static int
tell_stall(TaskObject *t, RuntimeObject *r)
{
    char key[32];
    weft_runtime *crt = r ? r->rt : NULL; /* (a stale handle is refused by the C calls) */
    if (crt == NULL) return 0;
    if (atomic_load(&t->phase) == PH_DECLARED) {
        /* The slot itself: once the runtime has settled, only a spawn into
         * it can end the wait. */
        if (weft_wait_settled_timed(crt, 0) != 0 || atomic_load(&t->phase) != PH_DECLARED) return 0;
        return PyErr_WarnFormat(r->st->TaskWarning, 1,
                                "weft: waiting for task-space slot %R, which nobody has spawned into, while "
                                "nothing else runs: only a spawn into it ends this wait (spawn it from another "
                                "thread)", t->name ? t->name : Py_None) < 0 ? -1 : 1;
    }
    if (weft_runtime_stalled(crt, key) == 0) return tell_deadlock(r, crt);
    PyObject *slots = unspawned_slots(r, key);
    if (slots == NULL) return -1;
    PyObject *who = weft_py_task_who(t);
    if (who == NULL) {
        Py_DECREF(slots);
        return -1;
    }
    int rc = PyErr_WarnFormat(r->st->TaskWarning, 1,
                              "weft: waiting for task %U, which waits (directly or not) for task-space slots "
                              "nobody has spawned into (%U): only a spawn into them ends this wait (spawn them "
                              "from another thread, or leave them out of deps=; a negative index such as T[-1] "
                              "names no slot, as in Parla)", who, slots);
    Py_DECREF(who);
    Py_DECREF(slots);
    return rc < 0 ? -1 : 1;
}

static int
wait_handle(TaskObject *t, weft_task *h, RuntimeObject *r, uint64_t deadline)
{
    int rc = weft_task_timedwait(h, 0);
    if (rc != WEFT_ETIMEDOUT) return rc;
    if (weft_py_tl_ts != NULL) {
        /* On a worker (inside a task): the C runtime runs other tasks while
         * we wait; Ctrl-C is for the main thread. */
        BEGIN_NOGIL
        if (deadline == 0) rc = weft_task_wait(h);
        else {
            uint64_t now = weft_py_now_ns();
            rc = weft_task_timedwait(h, deadline > now ? deadline - now : 0);
        }
        END_NOGIL
        return rc;
    }
    uint64_t now0 = weft_py_now_ns(), grace = stall_warn_ns();
    uint64_t tell_at = grace > UINT64_MAX - now0 ? 0 : now0 + grace; /* 0: told (or never) */
    for (;;) {
        uint64_t slice = WAIT_SLICE_NS;
        if (deadline) {
            uint64_t now = weft_py_now_ns();
            if (now >= deadline) return WEFT_ETIMEDOUT;
            if (deadline - now < slice) slice = deadline - now;
        }
        BEGIN_NOGIL
        rc = weft_task_timedwait(h, slice);
        END_NOGIL
        if (rc != WEFT_ETIMEDOUT) return rc;
        if (tell_at && weft_py_now_ns() >= tell_at) {
            int told = tell_stall(t, r);
            if (told < 0) return RC_PYERR;
            tell_at = told ? 0 : tell_at + 1000000000ull; /* look again in a second */
        }
        if (PyErr_CheckSignals() < 0) {
            if (t->rt) weft_py_cancel_pending(t->rt);
            return RC_PYERR;
        }
    }
}

/* The TimeoutError of a wait for t that ran out: which task, its status,
 * and what it is waiting for (the slots nobody spawned into that it waits
 * for, when the runtime has settled). */
static void
raise_timeout(TaskObject *t)
{
    int code;
    const char *status = weft_py_task_status_name(t, &code);
    const char *why = code == -1                  ? ": nobody has spawned into its slot"
                    : code == WEFT_TASK_WAITING  ? ": it waits for tasks it depends on"
                    : code == WEFT_TASK_READY    ? ": it is queued for a worker"
                    : code == WEFT_TASK_RUNNING  ? ": its body is running"
                    : code == WEFT_TASK_ENQUEUED ? ": its device work is in flight"
                                                 : ": it finished as the wait ran out";
    PyObject *who = weft_py_task_who(t);
    if (who == NULL) return;
    PyObject *slots = NULL;
    char key[32];
    RuntimeObject *r = t->rt;
    if (code == WEFT_TASK_WAITING && r && r->rt && weft_runtime_stalled(r->rt, key) != 0 &&
        (slots = unspawned_slots(r, key)) == NULL) {
        Py_DECREF(who);
        return;
    }
    if (slots)
        PyErr_Format(PyExc_TimeoutError,
                     "timed out waiting for the weft task %U (%s%s, and nothing else runs: the runtime waits "
                     "for task-space slots nobody has spawned into: %U)", who, status, why, slots);
    else
        PyErr_Format(PyExc_TimeoutError, "timed out waiting for the weft task %U (%s%s)", who, status, why);
    Py_DECREF(who);
    Py_XDECREF(slots);
}

/* Raise for a wait outcome; returns 0 if the task completed. */
int
weft_py_raise_outcome(TaskObject *t, int rc, int for_result)
{
    switch (rc) {
    case RC_PYERR: return -1;
    case 0: return 0;
    case WEFT_ETIMEDOUT: raise_timeout(t); return -1;
    case WEFT_ETASKFAILED:
        if (!for_result) {
            weft_py_task_observed(t); /* wait() saw it fail: not "never retrieved" */
            return 0;
        }
        weft_py_task_retrieved(t);
        if (t->exc) weft_py_raise_exc(t->exc);
        else if (t->fn == NULL && !t->ran) {
            /* No Python body: a communication operation (comm.c). */
            PyObject *e = weft_py_bodyless_failure(t);
            if (e) {
                weft_py_raise_exc(e);
                Py_DECREF(e);
            }
        } else PyErr_SetString(PyExc_RuntimeError, "the weft task failed (its device work failed, or the "
                                                   "checking mode failed it: see the message on stderr)");
        return -1;
    case WEFT_ECANCELLED:
        if (!for_result) return 0;
        {
            PyObject *e = weft_py_task_cancel_exc(t, NULL);
            if (e == NULL) return -1;
            weft_py_raise_exc(e);
            Py_DECREF(e);
        }
        return -1;
    case WEFT_EBUSY:
        PyErr_SetString(PyExc_RuntimeError, "a weft task cannot wait for itself");
        return -1;
    default:
        if (t->rt == NULL || t->rt->rt == NULL) {
            /* The runtime is gone: its tasks finished then. */
            if (!for_result) return 0;
            int cst = atomic_load(&t->cstatus);
            if (cst == WEFT_TASK_COMPLETED) return 0;
            if (cst == WEFT_TASK_FAILED) return weft_py_raise_outcome(t, WEFT_ETASKFAILED, 1);
            if (cst == WEFT_TASK_CANCELLED) return weft_py_raise_outcome(t, WEFT_ECANCELLED, 1);
            if (t->ran) {
                if (t->exc) {
                    weft_py_task_retrieved(t);
                    weft_py_raise_exc(t->exc);
                    return -1;
                }
                return 0;
            }
            PyObject *e = weft_py_task_cancel_exc(t, "the runtime closed before it ran");
            if (e) {
                weft_py_raise_exc(e);
                Py_DECREF(e);
            }
            return -1;
        }
        weft_py_err_weft(rc, "wait");
        return -1;
    }
}

/* Longest timeout turned into a deadline (about 146 years, in ns): anything
 * longer, inf included, waits without limit instead of overflowing. */
#define MAX_TIMEOUT_NS 4.6e18

/* timeout= of the waits: None, or seconds >= 0 (an int or a float).  Sets
 * *deadline to now + timeout in ns, or to NO_DEADLINE for None, inf and
 * timeouts too long to represent.  Negative and NaN timeouts are a
 * ValueError. */
int
weft_py_parse_timeout(PyObject *o, uint64_t *deadline)
{
    *deadline = NO_DEADLINE;
    if (o == NULL || o == Py_None) return 0;
    double v = PyFloat_AsDouble(o);
    if (v == -1 && PyErr_Occurred()) {
        if (PyLong_Check(o) && PyErr_ExceptionMatches(PyExc_OverflowError)) {
            /* An int too large for a double: its sign decides. */
            PyErr_Clear();
            int overflow = 0;
            (void)PyLong_AsLongLongAndOverflow(o, &overflow);
            if (PyErr_Occurred()) return -1;
            v = overflow < 0 ? -HUGE_VAL : HUGE_VAL;
        } else {
            PyErr_Format(PyExc_TypeError, "timeout must be a number of seconds or None, got '%.100s'",
                         Py_TYPE(o)->tp_name);
            return -1;
        }
    }
    if (isnan(v) || v < 0) {
        PyErr_Format(PyExc_ValueError, "timeout must be >= 0 seconds (or None: no limit), got %R", o);
        return -1;
    }
    double ns = v * 1e9;
    if (!(ns < MAX_TIMEOUT_NS)) return 0; /* inf or huge: no limit */
    uint64_t d = weft_py_now_ns() + (uint64_t)ns;
    *deadline = d != NO_DEADLINE ? d : 1;
    return 0;
}

int
weft_py_runtime_wait_all(RuntimeObject *r, uint64_t deadline)
{
    if (r->rt == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "wait_all(): the weft runtime is closed");
        return -1;
    }
    if (weft_py_tl_cur != NULL && weft_py_tl_cur->rt == r) {
        /* Waiting on another runtime from a task is fine (it just blocks). */
        PyErr_SetString(PyExc_RuntimeError,
                        "wait_all() cannot be called from inside a task of the same runtime (it "
                        "would wait for itself); wait for specific tasks instead");
        return -1;
    }
    int rc;
    for (;;) {
        uint64_t slice = WAIT_SLICE_NS;
        if (deadline) {
            uint64_t now = weft_py_now_ns();
            if (now >= deadline) {
                PyErr_SetString(PyExc_TimeoutError, "wait_all(): timed out");
                return -1;
            }
            if (deadline - now < slice) slice = deadline - now;
        }
        weft_runtime *rt = r->rt;
        /* Tasks waiting (directly or not) for task-space slots nobody has
         * spawned into are not waited for: only a spawn can move them. */
        BEGIN_NOGIL /* from a task of another runtime: let its workers have the GIL */
        rc = weft_wait_settled_timed(rt, slice);
        END_NOGIL
        if (rc != WEFT_ETIMEDOUT) break;
        if (PyErr_CheckSignals() < 0) {
            weft_py_cancel_pending(r);
            return -1;
        }
    }
    weft_py_release_drain(r);
    if (rc == 0 && PyDict_GET_SIZE(r->failures) > 0) {
        /* Re-raise the first failure the program has not seen yet (through
         * .result()/.exception()): r->failures lists exactly those, in the
         * order they happened.  The others are dropped, as in C.  The list
         * is taken and emptied in one critical section on the dict. */
        PyObject *failed = NULL;
        WEFT_PY_CS_BEGIN(r->failures)
        failed = PyDict_Keys(r->failures);
        if (failed) PyDict_Clear(r->failures);
        WEFT_PY_CS_END();
        if (failed == NULL) return -1;
        PyObject *pick = NULL;
        for (Py_ssize_t i = 0; pick == NULL && i < PyList_GET_SIZE(failed); i++) {
            TaskObject *f = (TaskObject *)PyList_GET_ITEM(failed, i);
            WEFT_PY_HANDOFF_ACQUIRE(f);
            if (!atomic_load(&f->retrieved) && f->exc) {
                pick = Py_NewRef(f->exc);
                weft_py_task_observed(f); /* raised here: seen (the others are not) */
            }
        }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(failed); i++)
            WEFT_PY_HANDOFF_RELEASE(PyList_GET_ITEM(failed, i)); /* before the list lets go */
        Py_DECREF(failed);
        if (pick == NULL) return 0;
        weft_py_raise_exc(pick);
        Py_DECREF(pick);
        return -1;
    }
    if (rc != 0) {
        weft_py_err_weft(rc, "wait_all()");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Waiting for the first of several tasks (weft.wait, weft.as_completed)     */
/* ------------------------------------------------------------------------ */

/* t's runtime (new reference; NULL with an error set) and, in *h, the C
 * task whose end ends the wait for t: its own once submitted; for a slot
 * nobody spawned into, its key's placeholder in the C space (binding the
 * space to the current runtime if it is not bound, as wait_declared does),
 * which finishes when the task spawned for the key does, or is cancelled
 * when the space closes; NULL when the runtime is closed (its tasks have
 * finished). */
static RuntimeObject *
any_handle(TaskObject *t, weft_task **h)
{
    *h = NULL;
    if (atomic_load(&t->phase) == PH_SUBMITTED) {
        *h = atomic_load(&t->h);
        return (RuntimeObject *)Py_NewRef(t->rt);
    }
    RuntimeObject *r = slot_runtime(t);
    if (r == NULL) return NULL;
    if (r->rt == NULL) return r;
    *h = weft_py_slot_handle(t, r);
    if (*h == NULL) {
        Py_DECREF(r);
        return NULL;
    }
    /* A body of r waiting for it: closing r reports the slot if nobody
     * spawned into it. */
    if (weft_py_tl_cur != NULL && weft_py_tl_cur->rt == r)
        atomic_store_explicit(&t->depended, 1, memory_order_relaxed);
    return r;
}

/* Whether the wait for a task whose C task is h is over (h NULL: its
 * runtime closed). */
static int
any_finished(weft_task *h)
{
    weft_task_status s;
    if (h == NULL || weft_task_status_get(h, &s) != 0) return 1;
    return s == WEFT_TASK_COMPLETED || s == WEFT_TASK_FAILED || s == WEFT_TASK_CANCELLED;
}

/* The indices of the finished ones among hs[0..n): a list of int (new
 * reference), or NULL with an error set. */
static PyObject *
any_sweep(weft_task *const *hs, Py_ssize_t n)
{
    PyObject *done = PyList_New(0);
    for (Py_ssize_t i = 0; done && i < n; i++) {
        if (!any_finished(hs[i])) continue;
        PyObject *k = PyLong_FromSsize_t(i);
        if (k == NULL || PyList_Append(done, k) < 0) Py_CLEAR(done);
        Py_XDECREF(k);
    }
    return done;
}

/* Warn (weft.TaskWarning) when only a spawn into a task-space slot nobody
 * spawned into can end the wait for the n tasks hs of r (ts: their
 * Tasks), or when bodies' waits are a deadlock, as tell_stall does for
 * one: 1 if it warned, 0 if not, -1 if the warning raised. */
static int
tell_stall_any(PyObject *ts, weft_task *const *hs, Py_ssize_t n, RuntimeObject *r)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        TaskObject *t = (TaskObject *)PyTuple_GET_ITEM(ts, i);
        if (atomic_load(&t->phase) == PH_DECLARED && !any_finished(hs[i])) {
            int told = tell_stall(t, r);
            if (told != 0) return told;
        }
    }
    char key[32];
    if (r->rt == NULL) return 0;
    if (weft_runtime_stalled(r->rt, key) == 0) return tell_deadlock(r, r->rt);
    PyObject *slots = unspawned_slots(r, key);
    if (slots == NULL) return -1;
    int rc = PyErr_WarnFormat(r->st->TaskWarning, 1,
                              "weft: waiting for the first of %zd tasks, which all wait (directly or not) for "
                              "task-space slots nobody has spawned into (%U): only a spawn into them ends this "
                              "wait (spawn them from another thread, or leave them out of deps=)", n, slots);
    Py_DECREF(slots);
    return rc < 0 ? -1 : 1;
}

/* _wait_any(tasks, timeout=None) -> list[int], for weft.wait and
 * weft.as_completed (weft/_wait.py): wait until at least one of tasks (a
 * list of distinct weft.Tasks of one runtime) has finished, or the
 * timeout passed; the indices of those finished then (empty: timed out).
 * In a body the worker runs the awaited tasks (and what they wait for)
 * meanwhile, as for Task.result(); outside tasks the wait checks Ctrl-C
 * every WAIT_SLICE_NS and warns when only a spawn can end it. */
PyObject *
weft_py_wait_any(PyObject *module, PyObject *args)
{
    PyObject *list, *to = NULL;
    if (!PyArg_ParseTuple(args, "O!|O:_wait_any", &PyList_Type, &list, &to)) return NULL;
    uint64_t deadline;
    if (weft_py_parse_timeout(to, &deadline) < 0) return NULL;
    modstate *st = weft_py_state_of_module(module);
    PyObject *ts = PyList_AsTuple(list); /* (the caller's list may change while we wait) */
    if (ts == NULL) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(ts);
    PyObject *res = NULL;
    RuntimeObject *r = NULL;
    weft_task **hs = PyMem_Calloc(n ? (size_t)n : 1, sizeof *hs);
    if (hs == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyTuple_GET_ITEM(ts, i);
        if (!PyObject_TypeCheck(x, st->Task_T)) {
            PyErr_Format(PyExc_TypeError, "weft.wait(): item %zd is %.100s, not a weft.Task (pass the tasks "
                                          "weft.spawn() returns, or task-space slots)", i, Py_TYPE(x)->tp_name);
            goto out;
        }
        RuntimeObject *ri = any_handle((TaskObject *)x, &hs[i]);
        if (ri == NULL) goto out;
        if (r == NULL) r = ri;
        else {
            Py_DECREF(ri);
            if (ri != r) {
                PyErr_Format(PyExc_ValueError, "weft.wait(): item 0 (%R) and item %zd (%R) are tasks of "
                                               "different runtimes: wait for each runtime's tasks in a call of "
                                               "its own", PyTuple_GET_ITEM(ts, 0), i, x);
                goto out;
            }
        }
    }
    res = any_sweep(hs, n);
    if (res == NULL || PyList_GET_SIZE(res) > 0 || n == 0) goto out;
    Py_CLEAR(res);
    size_t which;
    int rc;
    if (weft_py_tl_ts != NULL) {
        /* On a worker (inside a task): the C runtime runs the awaited tasks
         * (or what they wait for) while we wait; Ctrl-C is for the main
         * thread. */
        BEGIN_NOGIL
        uint64_t now = weft_py_now_ns();
        rc = weft_task_wait_any(hs, (size_t)n, deadline == NO_DEADLINE ? UINT64_MAX
                                               : deadline > now        ? deadline - now
                                                                       : 0,
                                &which);
        END_NOGIL
    } else {
        uint64_t now0 = weft_py_now_ns(), grace = stall_warn_ns();
        uint64_t tell_at = grace > UINT64_MAX - now0 ? 0 : now0 + grace; /* 0: told (or never) */
        for (;;) {
            uint64_t slice = WAIT_SLICE_NS;
            if (deadline) {
                uint64_t now = weft_py_now_ns();
                if (now >= deadline) {
                    rc = WEFT_ETIMEDOUT;
                    break;
                }
                if (deadline - now < slice) slice = deadline - now;
            }
            BEGIN_NOGIL
            rc = weft_task_wait_any(hs, (size_t)n, slice, &which);
            END_NOGIL
            if (rc != WEFT_ETIMEDOUT) break;
            if (tell_at && weft_py_now_ns() >= tell_at) {
                int told = tell_stall_any(ts, hs, n, r);
                if (told < 0) goto out;
                tell_at = told ? 0 : tell_at + 1000000000ull; /* look again in a second */
            }
            if (PyErr_CheckSignals() < 0) {
                weft_py_cancel_pending(r);
                goto out;
            }
        }
    }
    if (rc == WEFT_EBUSY || rc == WEFT_EDEADLK) {
        weft_py_err_weft(rc, "weft.wait()");
        goto out;
    }
    /* Finished (or timed out, or the runtime closed meanwhile: its tasks
     * have finished then): the sweep says which. */
    res = any_sweep(hs, n);
    if (res && PyList_GET_SIZE(res) == 0 && rc != 0 && rc != WEFT_ETIMEDOUT) {
        Py_CLEAR(res);
        weft_py_err_weft(rc, "weft.wait()");
    }
out:
    if (r) {
        weft_py_release_drain(r);
        Py_DECREF(r);
    }
    PyMem_Free(hs);
    /* The tasks' last accesses here: released for TSan before the tuple
     * drops its references (WEFT_PY_HANDOFF_RELEASE in _weft.h). */
    for (Py_ssize_t i = 0; i < n; i++) WEFT_PY_HANDOFF_RELEASE(PyTuple_GET_ITEM(ts, i));
    Py_DECREF(ts);
    return res;
}
