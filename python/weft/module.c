/*
 * module.c — the module: its state, multi-phase init, the module-level
 * functions (weft.spawn, weft.wait_all, ...), and the error helpers every
 * file uses.
 */
#include "_weft.h"

/* ------------------------------------------------------------------------ */
/* Module state                                                              */
/* ------------------------------------------------------------------------ */

modstate *
weft_py_state_of_type(PyTypeObject *tp)
{
    PyObject *m = PyType_GetModuleByDef(tp, &weft_py_module);
    return m ? weft_py_state_of_module(m) : NULL;
}

/* ------------------------------------------------------------------------ */
/* Exceptions helpers                                                        */
/* ------------------------------------------------------------------------ */

PyObject *
weft_py_fetch_exc(void)
{
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    if (tb && v) PyException_SetTraceback(v, tb);
    Py_XDECREF(t);
    Py_XDECREF(tb);
    return v;
#endif
}

void
weft_py_raise_exc(PyObject *e)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(Py_NewRef(e));
#else
    PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(e)), Py_NewRef(e), PyException_GetTraceback(e));
#endif
}

PyObject *
weft_py_err_weft(int rc, const char *what)
{
    PyObject *exc = PyExc_RuntimeError;
    if (rc == WEFT_ENOMEM) exc = PyExc_MemoryError;
    else if (rc == WEFT_EINVAL || rc == WEFT_ENODEV) exc = PyExc_ValueError;
    const char *msg = weft_last_error();
    if (msg && *msg)
        PyErr_Format(exc, "%s: %s (%s)", what, msg, weft_strerror(rc));
    else
        PyErr_Format(exc, "%s: %s", what, weft_strerror(rc));
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Module functions                                                          */
/* ------------------------------------------------------------------------ */

static PyObject *
mod_spawn(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    modstate *st = weft_py_state_of_module(m);
    PyObject *self_fn = NULL;
    if (nargs == 0) {
        self_fn = PyObject_GetAttrString(m, "spawn");
        if (self_fn == NULL) return NULL;
    }
    PyObject *res = weft_py_spawn(st, NULL, args, nargs, kwnames, self_fn);
    Py_XDECREF(self_fn);
    return res;
}

static PyObject *
mod_wait_all(PyObject *m, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *to = NULL;
    uint64_t deadline;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:wait_all", kwlist, &to)) return NULL;
    if (weft_py_parse_timeout(to, &deadline) < 0) return NULL;
    /* Inside a task this is the task's own runtime: weft_py_runtime_wait_all refuses. */
    RuntimeObject *r = weft_py_current_runtime(weft_py_state_of_module(m), 0);
    if (r == NULL) return NULL;
    Py_INCREF(r);
    int rc = weft_py_runtime_wait_all(r, deadline);
    Py_DECREF(r);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *
mod_current_runtime(PyObject *m, PyObject *Py_UNUSED(ignored))
{
    RuntimeObject *r = weft_py_current_runtime(weft_py_state_of_module(m), 1);
    return Py_NewRef(r ? (PyObject *)r : Py_None);
}

static PyObject *
mod_current_task(PyObject *m, PyObject *Py_UNUSED(ignored))
{
    (void)m;
    return Py_NewRef(weft_py_tl_cur ? (PyObject *)weft_py_tl_cur : Py_None);
}

static PyObject *
mod_data(PyObject *m, PyObject *obj)
{
    RuntimeObject *r = weft_py_current_runtime(weft_py_state_of_module(m), 0);
    if (r == NULL) return NULL;
    return weft_py_runtime_data(r, obj);
}

static PyObject *
mod_set_space(PyObject *m, PyObject *args)
{
    modstate *st = weft_py_state_of_module(m);
    PyObject *expand, *cls, *flatten;
    if (!PyArg_ParseTuple(args, "OOO:_set_space", &expand, &cls, &flatten)) return NULL;
    Py_XSETREF(st->space_expand, Py_NewRef(expand));
    Py_XSETREF(st->TaskList_cls, Py_NewRef(cls));
    Py_XSETREF(st->deps_flatten, Py_NewRef(flatten));
    Py_RETURN_NONE;
}

static PyObject *
mod_set_access(PyObject *m, PyObject *cls)
{
    Py_XSETREF(weft_py_state_of_module(m)->Unordered_cls, Py_NewRef(cls));
    Py_RETURN_NONE;
}

/* The device-set grammar is the C core's (weft_placement_parse): one
 * parser, one message. */
static PyObject *
mod_parse_placement(PyObject *m, PyObject *arg)
{
    (void)m;
    if (!PyUnicode_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "a device set string expected, not %.100s", Py_TYPE(arg)->tp_name);
        return NULL;
    }
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(arg, &n);
    if (s == NULL) return NULL;
    if (strlen(s) != (size_t)n) { /* an embedded NUL: the C string would end there */
        PyErr_Format(PyExc_ValueError, "%R is not a device set (cpu, gpu, gpu:I, K*gpu, cpu+gpu)", arg);
        return NULL;
    }
    weft_placement p;
    if (weft_placement_parse(s, &p) != 0) {
        const char *why = weft_last_error();
        const char *body = strstr(why, ": ");
        PyErr_SetString(PyExc_ValueError, body ? body + 2 : why);
        return NULL;
    }
    return Py_BuildValue("(OIi)", p.cpu ? Py_True : Py_False, p.gpus, p.gpu);
}

static PyObject *
mod_close_all(PyObject *m, PyObject *Py_UNUSED(ignored))
{
    modstate *st = weft_py_state_of_module(m);
    PyObject *lst = PySequence_List(st->open);
    if (lst == NULL) return NULL;
    int err = 0;
    for (Py_ssize_t i = PyList_GET_SIZE(lst) - 1; i >= 0; i--)
        if (weft_py_runtime_close((RuntimeObject *)PyList_GET_ITEM(lst, i)) < 0) {
            PyErr_WriteUnraisable(PyList_GET_ITEM(lst, i));
            err = 1;
        }
    Py_DECREF(lst);
    (void)err;
    /* Every communicator closed with its runtime: MPI may end now. */
    weft_py_mpi_atexit(st);
    Py_RETURN_NONE;
}

static PyObject *
mod_busy(PyObject *m, PyObject *arg)
{
    (void)m;
    double us = PyFloat_AsDouble(arg);
    if (us == -1 && PyErr_Occurred()) {
        PyErr_Format(PyExc_TypeError, "busy(): expected microseconds as a number, got '%.100s'",
                     Py_TYPE(arg)->tp_name);
        return NULL;
    }
    if (us < 0 || us != us) {
        PyErr_SetString(PyExc_ValueError, "busy(): microseconds must be >= 0");
        return NULL;
    }
    uint64_t ns = (uint64_t)(us * 1000.0);
    BEGIN_NOGIL
    uint64_t t0 = weft_py_now_ns();
    while (weft_py_now_ns() - t0 < ns) weft_py_cpu_relax();
    END_NOGIL
    Py_RETURN_NONE;
}

static PyObject *
mod_inflight(PyObject *m, PyObject *arg)
{
    modstate *st = weft_py_state_of_module(m);
    if (!Py_IS_TYPE(arg, st->Runtime_T)) {
        PyErr_SetString(PyExc_TypeError, "expected a weft.Runtime");
        return NULL;
    }
    return PyLong_FromSize_t(atomic_load(&((RuntimeObject *)arg)->inflight));
}

/* What a runtime's workers spin on while another worker needs the GIL
 * (gil.c): "gil" (the GIL's own state), "claim" (where its layout is not
 * known) or "none" (no GIL: nothing to hand off). */
static PyObject *
mod_gil_spin_signal(PyObject *m, PyObject *arg)
{
    modstate *st = weft_py_state_of_module(m);
    if (!Py_IS_TYPE(arg, st->Runtime_T)) {
        PyErr_SetString(PyExc_TypeError, "expected a weft.Runtime");
        return NULL;
    }
    RuntimeObject *r = (RuntimeObject *)arg;
    return PyUnicode_FromString(r->gil_off ? "none" : r->gil.locked ? "gil" : "claim");
}

static PyMethodDef module_methods[] = {
    {"spawn", (PyCFunction)(void (*)(void))mod_spawn, METH_FASTCALL | METH_KEYWORDS,
     "spawn(fn, *args, deps=(), reads=(), writes=(), readwrites=(), commutes=(), name=None,\n"
     "      priority=0, task=None, kwargs=None, runtime=None, placement=None, share=None,\n"
     "      memory=None, device_data=False, reduces=(), scratch=(), cost=None, kind=None) -> Task\n\n"
     "Spawn fn(*args, **kwargs) as a task of the current runtime (inside a task: the innermost "
     "`with weft.Runtime()` block that task entered, else its own runtime; outside tasks: the "
     "innermost `with weft.Runtime()`).  deps: tasks (or task-space slots) to "
     "follow.  reads/writes/readwrites/commutes: buffer objects or weft.Data, giving "
     "dependencies from access modes in spawn order (R, W, RW, RW|COMMUTE).  reduces: (buffer, op) "
     "pairs, op weft.SUM, weft.MIN or weft.MAX over the buffer's int32/int64/uint32/uint64/float32/"
     "float64 elements: the body folds its contributions into a private copy, ctx.array(i), and the "
     "copies are combined into the buffer in spawn order.  scratch: sizes in bytes (or buffers / "
     "weft.Data whose size and layout to take): a buffer of the task's own each, contents "
     "unspecified, no dependencies, its views after all the others (ctx.scratch(k)).  "
     "device_data=True: "
     "a task placed on GPUs gets its data on its first GPU, through weft.context().view(...) "
     "(without it, every access is the host's copy: the buffers the body is given).  cost: the "
     "task's work; kind: the name of its kind of work (a str), whose performance model the \"dmda\" "
     "policy keeps (without it: fn's qualified name).\n\n"
     "Called with no function, returns a decorator: @weft.spawn(deps=[...]) above a def "
     "spawns the function at once and binds its name to the Task.  The decorator binds the "
     "function's free variables (closure cells) to the values they have at the spawn, so "
     "`for i in range(n): @weft.spawn() def t(): use(i)` gives each task its own i; the "
     "objects are shared, not copied, and a nonlocal assignment in the body changes only the "
     "task's copy.  Plain spawn(fn, ...) runs fn itself: its free variables are read when "
     "it runs.  Module globals are never captured."},
    {"wait_all", (PyCFunction)(void (*)(void))mod_wait_all, METH_VARARGS | METH_KEYWORDS,
     "wait_all(timeout=None)\n\nWait for every task of the current runtime; re-raise the first "
     "task exception since the previous wait_all.  Ctrl-C cancels what has not started."},
    {"current_runtime", (PyCFunction)mod_current_runtime, METH_NOARGS,
     "The runtime weft.spawn would use now, or None."},
    {"gather", (PyCFunction)weft_py_gather, METH_VARARGS,
     "gather(*tasks) or gather(iterable of tasks): in an `async def` body, `await weft.gather(a, b)` "
     "suspends the task until every one has finished and gives the list of their results (the first "
     "failure is raised)."},
    {"current_task", (PyCFunction)mod_current_task, METH_NOARGS,
     "The task whose body is running on this thread, or None."},
    {"data", (PyCFunction)mod_data, METH_O,
     "data(obj) -> Data: the current runtime's weft.Data of the memory obj's buffer covers "
     "(registered on first use)."},
    {"_wait_any", (PyCFunction)weft_py_wait_any, METH_VARARGS,
     "_wait_any(tasks, timeout=None) -> list[int]: wait until one of tasks (a list of distinct "
     "weft.Tasks of one runtime) has finished, or the timeout passed; the indices of those finished "
     "then (empty: timed out).  For weft.wait and weft.as_completed."},
    {"_close_all", (PyCFunction)mod_close_all, METH_NOARGS, "Close every open runtime (atexit)."},
    {"_set_space", (PyCFunction)mod_set_space, METH_VARARGS,
     "_set_space(expand, TaskList, flatten_deps): the task-space helpers of weft/_space.py."},
    {"_set_access", (PyCFunction)mod_set_access, METH_O,
     "_set_access(unordered): the class of weft.unordered (weft/_access.py)."},
    {"_parse_placement", (PyCFunction)mod_parse_placement, METH_O,
     "_parse_placement(s) -> (cpu, gpus, gpu): a device-set string, parsed by the C core."},
    {"_busy", (PyCFunction)mod_busy, METH_O,
     "_busy(us): spin for us microseconds with the GIL released."},
    {"_inflight", (PyCFunction)mod_inflight, METH_O, "tasks of a runtime in the C runtime now"},
    {"_gil_spin_signal", (PyCFunction)mod_gil_spin_signal, METH_O,
     "what a runtime's workers spin on for the GIL: 'gil' (its own state), 'claim' (CPython "
     "versions whose GIL layout Weft does not know), 'none' (no GIL)"},
    {NULL, NULL, 0, NULL}};

/* ------------------------------------------------------------------------ */
/* Module init (multi-phase)                                                 */
/* ------------------------------------------------------------------------ */

static int
module_exec(PyObject *m)
{
    modstate *st = weft_py_state_of_module(m);
#define ADD_TYPE(field, spec)                                                         \
    do {                                                                              \
        st->field = (PyTypeObject *)PyType_FromModuleAndSpec(m, &spec, NULL);         \
        if (st->field == NULL || PyModule_AddType(m, st->field) < 0) return -1;      \
    } while (0)
    ADD_TYPE(Runtime_T, weft_py_runtime_spec);
    ADD_TYPE(Task_T, weft_py_task_spec);
    ADD_TYPE(Space_T, weft_py_space_spec);
    ADD_TYPE(Data_T, weft_py_data_spec);
    ADD_TYPE(View_T, weft_py_view_spec);
    ADD_TYPE(Comm_T, weft_py_comm_spec);
    ADD_TYPE(Native_T, weft_py_native_spec);
    ADD_TYPE(Acquired_T, weft_py_acquired_spec);
    ADD_TYPE(Await_T, weft_py_await_spec);
#undef ADD_TYPE
    atomic_init(&st->mpi_started, 0);
    PyObject *cf = PyImport_ImportModule("concurrent.futures");
    if (cf == NULL) return -1;
    PyObject *base = PyObject_GetAttrString(cf, "CancelledError");
    Py_DECREF(cf);
    if (base == NULL) return -1;
    st->CancelledError = PyErr_NewExceptionWithDoc(
        "weft.CancelledError",
        "A task never ran: a task it depends on failed or was cancelled, or it was cancelled "
        "(Task.cancel(), Ctrl-C, runtime closed).  Attributes: task_name, cause_id, cause_name; "
        "__cause__ is the failed task's exception when known.",
        base, NULL);
    Py_DECREF(base);
    if (st->CancelledError == NULL) return -1;
    if (PyModule_AddObjectRef(m, "CancelledError", st->CancelledError) < 0) return -1;
    st->TaskWarning = PyErr_NewExceptionWithDoc(
        "weft.TaskWarning",
        "What a closing runtime reports that the program never saw: task-space keys that tasks "
        "depended on but nobody spawned (their dependents were cancelled), and task exceptions "
        "never retrieved (no result(), exception() or wait() on the task, and no wait_all() "
        "raised them).  Also, at a spawn: a wait on tasks nobody can finish yet, and functions of "
        "different code that share the kind their qualified name gives (the \"dmda\" policy's "
        "models; spawn(kind=...) keeps them apart).",
        PyExc_RuntimeWarning, NULL);
    if (st->TaskWarning == NULL) return -1;
    if (PyModule_AddObjectRef(m, "TaskWarning", st->TaskWarning) < 0) return -1;
    st->stack = PyList_New(0);
    st->open = PyList_New(0);
    st->empty_tuple = PyTuple_New(0);
    if (!st->stack || !st->open || !st->empty_tuple) return -1;
#define INTERN(f, s) if ((st->f = PyUnicode_InternFromString(s)) == NULL) return -1
    INTERN(s_deps, "deps");
    INTERN(s_reads, "reads");
    INTERN(s_writes, "writes");
    INTERN(s_readwrites, "readwrites");
    INTERN(s_commutes, "commutes");
    INTERN(s_name, "name");
    INTERN(s_priority, "priority");
    INTERN(s_task, "task");
    INTERN(s_kwargs, "kwargs");
    INTERN(s_runtime, "runtime");
    INTERN(s_add_note, "add_note");
    INTERN(s_placement, "placement");
    INTERN(s_share, "share");
    INTERN(s_memory, "memory");
    INTERN(s_device_data, "device_data");
    INTERN(s_reduces, "reduces");
    INTERN(s_scratch, "scratch");
    INTERN(s_cost, "cost");
    INTERN(s_kind, "kind");
#undef INTERN
    PyObject *functools = PyImport_ImportModule("functools");
    st->Partial_T = functools ? PyObject_GetAttrString(functools, "partial") : NULL;
    Py_XDECREF(functools);
    if (st->Partial_T == NULL) return -1;
    if (PyModule_AddIntConstant(m, "R", WEFT_R) < 0 || PyModule_AddIntConstant(m, "W", WEFT_W) < 0 ||
        PyModule_AddIntConstant(m, "RW", WEFT_RW) < 0 ||
        PyModule_AddIntConstant(m, "COMMUTE", WEFT_COMMUTE) < 0 ||
        PyModule_AddIntConstant(m, "SUM", WEFT_RED_SUM) < 0 || PyModule_AddIntConstant(m, "MIN", WEFT_RED_MIN) < 0 ||
        PyModule_AddIntConstant(m, "MAX", WEFT_RED_MAX) < 0)
        return -1;
    if (PyModule_AddObjectRef(m, "_open_runtimes", st->open) < 0) return -1;
    if (PyModule_AddFunctions(m, weft_py_place_methods) < 0) return -1;
    if (PyModule_AddFunctions(m, weft_py_view_methods) < 0) return -1;
    if (PyModule_AddFunctions(m, weft_py_comm_methods) < 0) return -1;
    return 0;
}

static int
module_traverse(PyObject *m, visitproc visit, void *arg)
{
    modstate *st = weft_py_state_of_module(m);
    if (st == NULL) return 0;
    Py_VISIT(st->Runtime_T);
    Py_VISIT(st->Task_T);
    Py_VISIT(st->Space_T);
    Py_VISIT(st->Data_T);
    Py_VISIT(st->View_T);
    Py_VISIT(st->Comm_T);
    Py_VISIT(st->Native_T);
    Py_VISIT(st->Await_T);
    Py_VISIT(st->Acquired_T);
    Py_VISIT(st->CancelledError);
    Py_VISIT(st->TaskWarning);
    Py_VISIT(st->space_expand);
    Py_VISIT(st->TaskList_cls);
    Py_VISIT(st->deps_flatten);
    Py_VISIT(st->Unordered_cls);
    Py_VISIT(st->stack);
    Py_VISIT(st->open);
    Py_VISIT(st->place_normalize);
    Py_VISIT(st->place_call);
    Py_VISIT(st->Variants_cls);
    Py_VISIT(st->DeviceSet_cls);
    Py_VISIT(st->Context_cls);
    Py_VISIT(st->Partial_T);
    return 0;
}

static int
module_clear(PyObject *m)
{
    modstate *st = weft_py_state_of_module(m);
    if (st == NULL) return 0;
    Py_CLEAR(st->Runtime_T);
    Py_CLEAR(st->Task_T);
    Py_CLEAR(st->Space_T);
    Py_CLEAR(st->Data_T);
    Py_CLEAR(st->View_T);
    Py_CLEAR(st->Comm_T);
    Py_CLEAR(st->Native_T);
    Py_CLEAR(st->Await_T);
    Py_CLEAR(st->Acquired_T);
    Py_CLEAR(st->CancelledError);
    Py_CLEAR(st->TaskWarning);
    Py_CLEAR(st->space_expand);
    Py_CLEAR(st->TaskList_cls);
    Py_CLEAR(st->deps_flatten);
    Py_CLEAR(st->Unordered_cls);
    Py_CLEAR(st->stack);
    Py_CLEAR(st->open);
    Py_CLEAR(st->empty_tuple);
    Py_CLEAR(st->s_deps);
    Py_CLEAR(st->s_reads);
    Py_CLEAR(st->s_writes);
    Py_CLEAR(st->s_readwrites);
    Py_CLEAR(st->s_commutes);
    Py_CLEAR(st->s_name);
    Py_CLEAR(st->s_priority);
    Py_CLEAR(st->s_task);
    Py_CLEAR(st->s_kwargs);
    Py_CLEAR(st->s_runtime);
    Py_CLEAR(st->s_add_note);
    Py_CLEAR(st->s_placement);
    Py_CLEAR(st->s_share);
    Py_CLEAR(st->s_memory);
    Py_CLEAR(st->s_device_data);
    Py_CLEAR(st->s_reduces);
    Py_CLEAR(st->s_scratch);
    Py_CLEAR(st->s_cost);
    Py_CLEAR(st->s_kind);
    Py_CLEAR(st->Partial_T);
    Py_CLEAR(st->place_normalize);
    Py_CLEAR(st->place_call);
    Py_CLEAR(st->Variants_cls);
    Py_CLEAR(st->DeviceSet_cls);
    Py_CLEAR(st->Context_cls);
    Py_CLEAR(st->s_cpu);
    Py_CLEAR(st->s_gpus);
    Py_CLEAR(st->s_gpu);
    Py_CLEAR(st->s_gset);
    return 0;
}

static void
module_free(void *m)
{
    module_clear((PyObject *)m);
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
#ifdef Py_mod_multiple_interpreters
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_SUPPORTED},
#endif
#ifdef Py_mod_gil
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL}};

struct PyModuleDef weft_py_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "weft._weft",
    .m_doc = "C core of the weft package (see weft/__init__.py).",
    .m_size = sizeof(modstate),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC
PyInit__weft(void)
{
    return PyModuleDef_Init(&weft_py_module);
}
