/*
 * comm.c — weft.Communicator: collectives and point-to-point exchanges as
 * tasks (weft_comm_* in weft.h), over a runtime's GPUs or across MPI ranks;
 * weft.mpi_init / weft.mpi_finalize; the C side of weft.Grid (_comm.py).
 *
 * An operation is a C task spawned by weft_comm_post / weft_comm_exchange,
 * without a Python body.  Its buffers are looked up in the data registry
 * like a spawn's accesses (data.c), but only their own handles go to the C
 * core: a buffer whose memory other registered ranges overlap is refused
 * (WEFT_PY_COMM_ACCESS): weft_comm_post orders only the handles it names.  The Task it
 * returns holds the Data it names (t->acc) and the communicator holds its
 * unfinished Tasks (inflight), so buffers stay alive until the operation
 * has finished even if the program drops the Task.  Finished ones are
 * pruned at later posts, and how each ended is recorded on the Task
 * (t->cstatus) while its handle can still tell.
 *
 * Free-threaded builds: c, posting and closed are under the communicator's
 * mutex (held for short plain-C steps only; close waits on its condition
 * variable with the thread detached); inflight under a critical section on
 * the communicator; the runtime's list of communicators is changed through
 * single list operations and a critical section on the list.
 */
#include "_weft.h"

#ifdef WEFT_PY_HAVE_MPI
#include <mpi.h>
#endif

typedef struct CommObject {
    PyObject_HEAD
    RuntimeObject *rt;      /* strong */
    pthread_mutex_t lock;   /* c, posting, closed */
    pthread_cond_t idle;    /* posting dropped to 0 */
    weft_comm *c;           /* NULL once destroyed */
    int posting;            /* posts between their check and their return */
    int closed;
    unsigned size, rank;    /* set once, read-only afterwards; rank: this process's first member */
    unsigned nlocal;        /* this process's members: rank .. rank + nlocal - 1 (across ranks: 1,
                               or its GPUs across ranks x GPUs; over GPUs: all) */
    int ranks;              /* across MPI ranks */
    PyObject *inflight;     /* list of its Tasks not known to be finished (critical section
                               on the communicator) */
    Py_ssize_t prune_at;    /* prune when inflight grows to this */
    PyObject *weakreflist;
} CommObject;

/* ------------------------------------------------------------------------ */
/* Outcomes of operations                                                    */
/* ------------------------------------------------------------------------ */

PyObject *
weft_py_bodyless_failure(TaskObject *t)
{
    PyObject *label = weft_py_task_label(t);
    if (label == NULL) return NULL;
    PyObject *msg = PyUnicode_FromFormat("the weft task %R failed with no Python body run (Weft printed "
                                         "the reason on stderr: for a communication task, a member that "
                                         "did not take part in time, a broken communicator, a device "
                                         "error; for any task, its data not made valid where it runs, or "
                                         "the checking mode's \"data check\")", label);
    Py_DECREF(label);
    if (msg == NULL) return NULL;
    PyObject *e = PyObject_CallOneArg(PyExc_RuntimeError, msg);
    Py_DECREF(msg);
    return e;
}

/* Record how t ended if it has (its handle still usable); 1 if finished. */
static int
record_outcome(TaskObject *t)
{
    weft_task *h = atomic_load(&t->h);
    weft_task_status s;
    if (h == NULL || weft_task_status_get(h, &s) != 0) return 1;
    if (s != WEFT_TASK_COMPLETED && s != WEFT_TASK_FAILED && s != WEFT_TASK_CANCELLED) return 0;
    if (s == WEFT_TASK_CANCELLED) {
        /* Made now, while the handle can name the cause. */
        PyObject *e = weft_py_task_cancel_exc(t, NULL);
        if (e == NULL) PyErr_Clear();
        Py_XDECREF(e);
    }
    atomic_store(&t->cstatus, (int)s);
    return 1;
}

/* Drop the finished Tasks of co->inflight (all of them with all != 0),
 * recording how they ended. */
static void
prune(CommObject *co, int all)
{
    PyObject *old = NULL;
    WEFT_PY_CS_BEGIN(co)
    old = co->inflight;
    co->inflight = PyList_New(0);
    if (co->inflight == NULL) {
        PyErr_Clear();
        co->inflight = old;
        old = NULL;
    }
    WEFT_PY_CS_END();
    if (old == NULL) return;
    PyObject *keep = PyList_New(0);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(old); i++) {
        TaskObject *t = (TaskObject *)PyList_GET_ITEM(old, i);
        if (!record_outcome(t) && !all && keep && PyList_Append(keep, (PyObject *)t) < 0) PyErr_Clear();
    }
    Py_DECREF(old);
    if (keep == NULL) {
        PyErr_Clear();
        return;
    }
    if (PyList_GET_SIZE(keep) > 0) {
        WEFT_PY_CS_BEGIN(co)
        if (co->inflight && PyList_SetSlice(co->inflight, 0, 0, keep) < 0) PyErr_Clear();
        WEFT_PY_CS_END();
    }
    WEFT_PY_CS_BEGIN(co)
    Py_ssize_t n = co->inflight ? PyList_GET_SIZE(co->inflight) : 0;
    co->prune_at = n * 2 > 64 ? n * 2 : 64;
    WEFT_PY_CS_END();
    Py_DECREF(keep);
}

/* ------------------------------------------------------------------------ */
/* Open, post, close                                                         */
/* ------------------------------------------------------------------------ */

/* Before a post: the communicator open and counted as posting; 0, or -1
 * with RuntimeError. */
static int
post_enter(CommObject *co, const char *what)
{
    pthread_mutex_lock(&co->lock);
    int ok = !co->closed && co->c != NULL;
    if (ok) co->posting++;
    pthread_mutex_unlock(&co->lock);
    if (!ok) {
        PyErr_Format(PyExc_RuntimeError, "%s: the weft.Communicator is closed", what);
        return -1;
    }
    if (weft_py_check_open(co->rt, what) < 0) {
        pthread_mutex_lock(&co->lock);
        if (--co->posting == 0) pthread_cond_broadcast(&co->idle);
        pthread_mutex_unlock(&co->lock);
        return -1;
    }
    return 0;
}

static void
post_exit(CommObject *co)
{
    pthread_mutex_lock(&co->lock);
    if (--co->posting == 0) pthread_cond_broadcast(&co->idle);
    pthread_mutex_unlock(&co->lock);
}

/* Close co: no new post, wait for the posts in progress, destroy the C
 * communicator (which waits for its operations), drop the finished Tasks.
 * Idempotent; with the thread attached. */
static void
comm_shutdown(CommObject *co)
{
    weft_comm *c = NULL;
    BEGIN_NOGIL
    pthread_mutex_lock(&co->lock);
    co->closed = 1;
    while (co->posting > 0) pthread_cond_wait(&co->idle, &co->lock);
    c = co->c;
    co->c = NULL;
    pthread_mutex_unlock(&co->lock);
    if (c) (void)weft_comm_destroy(c);
    END_NOGIL
    prune(co, 1);
}

static void
runtime_forget(CommObject *co)
{
    PyObject *lst = co->rt ? co->rt->comms : NULL;
    if (lst == NULL) return;
    WEFT_PY_CS_BEGIN(lst)
    for (Py_ssize_t i = PyList_GET_SIZE(lst) - 1; i >= 0; i--)
        if (PyList_GET_ITEM(lst, i) == (PyObject *)co) {
            if (PyList_SetSlice(lst, i, i + 1, NULL) < 0) PyErr_Clear();
            break;
        }
    WEFT_PY_CS_END();
}

void
weft_py_comms_settle(RuntimeObject *r)
{
    PyObject *lst = r->comms ? PySequence_List(r->comms) : NULL;
    if (lst == NULL) {
        PyErr_Clear();
        return;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(lst); i++) prune((CommObject *)PyList_GET_ITEM(lst, i), 0);
    Py_DECREF(lst);
}

void
weft_py_comms_close_all(RuntimeObject *r)
{
    PyObject *lst = r->comms ? PySequence_List(r->comms) : NULL;
    if (lst == NULL) {
        PyErr_Clear();
        return;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(lst); i++) {
        CommObject *co = (CommObject *)PyList_GET_ITEM(lst, i);
        comm_shutdown(co);
        runtime_forget(co);
    }
    Py_DECREF(lst);
}

/* The runtime= of a constructor (None: the current one); borrowed. */
static RuntimeObject *
runtime_arg(modstate *st, PyObject *rtobj, const char *what)
{
    if (rtobj && rtobj != Py_None) {
        if (!Py_IS_TYPE(rtobj, st->Runtime_T)) {
            PyErr_Format(PyExc_TypeError, "%s: runtime= expects a weft.Runtime, got '%.100s'", what,
                         Py_TYPE(rtobj)->tp_name);
            return NULL;
        }
        return (RuntimeObject *)rtobj;
    }
    return weft_py_current_runtime(st, 0);
}

static int
timeout_arg(PyObject *o, uint64_t *ns, const char *what)
{
    *ns = 0;
    if (o == NULL || o == Py_None) return 0;
    double v = PyFloat_AsDouble(o);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Format(PyExc_TypeError, "%s: timeout must be a number of seconds or None, got '%.100s'", what,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    if (!(v > 0) || v > 1e9) {
        PyErr_Format(PyExc_ValueError, "%s: timeout must be > 0 seconds (None: 60 s), got %R", what, o);
        return -1;
    }
    *ns = (uint64_t)(v * 1e9);
    if (*ns == 0) *ns = 1;
    return 0;
}

static PyObject *
comm_wrap(modstate *st, RuntimeObject *r, weft_comm *c, int ranks)
{
    CommObject *co = PyObject_GC_New(CommObject, st->Comm_T);
    if (co == NULL) {
        (void)weft_comm_destroy(c);
        return NULL;
    }
    co->rt = (RuntimeObject *)Py_NewRef(r);
    pthread_mutex_init(&co->lock, NULL);
    pthread_cond_init(&co->idle, NULL);
    co->c = c;
    co->posting = 0;
    co->closed = 0;
    co->size = weft_comm_size(c);
    co->rank = weft_comm_rank(c);
    co->nlocal = ranks ? 1 : co->size;
    co->ranks = ranks;
    co->inflight = PyList_New(0);
    co->prune_at = 64;
    co->weakreflist = NULL;
    PyObject_GC_Track(co);
    if (co->inflight == NULL || PyList_Append(r->comms, (PyObject *)co) < 0) {
        Py_DECREF(co);
        return NULL;
    }
    if (r->rt == NULL) {
        /* Closed meanwhile (another thread): it may have missed this one. */
        comm_shutdown(co);
        runtime_forget(co);
        Py_DECREF(co);
        PyErr_SetString(PyExc_RuntimeError, "Communicator(): the weft runtime is closed");
        return NULL;
    }
    return (PyObject *)co;
}

/* gpus= of a communicator: a list of GPU numbers into list (room for 64)
 * and cfg; None leaves cfg as it is.  -1 with an exception set. */
static int
gpus_arg(PyObject *gpus, unsigned *list, weft_comm_config *cfg, const char *fn)
{
    if (gpus == Py_None) return 0;
    PyObject *seq = PySequence_Fast(gpus, "");
    if (seq == NULL) {
        PyErr_Format(PyExc_TypeError, "%s: gpus= expects a list of GPU numbers (0 .. G-1) or "
                     "None, got '%.100s'", fn, Py_TYPE(gpus)->tp_name);
        return -1;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n < 1 || n > 64) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "%s: gpus= names %zd GPUs (1 .. 64)", fn, n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            PyErr_Format(PyExc_TypeError, "%s: gpus[%zd] is not a GPU number", fn, i);
            return -1;
        }
        if (v < 0 || v > (long)UINT_MAX) {
            Py_DECREF(seq);
            PyErr_Format(PyExc_ValueError, "%s: gpus[%zd] = %ld is not a GPU number", fn, i, v);
            return -1;
        }
        list[i] = (unsigned)v;
    }
    Py_DECREF(seq);
    cfg->gpus = list;
    cfg->ngpus = (unsigned)n;
    return 0;
}

/* The exception for the core's refusal rc of a communicator: a runtime
 * without GPUs said in Python's terms (the core's advice names
 * weft_config's field), the rest as the core says it.  NULL. */
static PyObject *
create_error(int rc, const char *what)
{
    if (rc == WEFT_ENODEV && strstr(weft_last_error(), "has no GPUs")) {
        PyErr_Format(PyExc_ValueError, "%s: this runtime has no GPUs: create it with some "
                     "(weft.Runtime(devices=\"cpu,vgpu:4\"), or devices=\"cpu,cuda\")", what);
        return NULL;
    }
    return weft_py_err_weft(rc, what);
}

static PyObject *
Comm_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"gpus", "runtime", "timeout", NULL};
    PyObject *gpus = Py_None, *rtobj = Py_None, *to = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O$OO:Communicator", kwlist, &gpus, &rtobj, &to)) return NULL;
    modstate *st = weft_py_state_of_type(type);
    if (st == NULL) return NULL;
    RuntimeObject *r = runtime_arg(st, rtobj, "Communicator()");
    if (r == NULL) return NULL;
    if (weft_py_check_open(r, "Communicator()") < 0) return NULL;
    weft_comm_config cfg;
    weft_comm_config_init(&cfg);
    if (timeout_arg(to, &cfg.timeout_ns, "Communicator()") < 0) return NULL;
    unsigned list[64];
    if (gpus_arg(gpus, list, &cfg, "Communicator()") < 0) return NULL;
    weft_comm *c = NULL;
    int rc = weft_comm_create(r->rt, &cfg, &c);
    if (rc != 0) return create_error(rc, "Communicator()");
    return comm_wrap(st, r, c, 0);
}

/* ------------------------------------------------------------------------ */
/* MPI                                                                       */
/* ------------------------------------------------------------------------ */

/* Whether MPI runs now: 1, 0, or -1 when weft was built without it. */
static int
mpi_running(void)
{
#ifdef WEFT_PY_HAVE_MPI
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    return inited && !finalized;
#else
    return -1;
#endif
}

static int
mpi_start(modstate *st, const char *what)
{
    int was = mpi_running();
    int rc;
    BEGIN_NOGIL
    rc = weft_mpi_init();
    END_NOGIL
    if (rc != 0) {
        char buf[64];
        snprintf(buf, sizeof buf, "%s", what);
        weft_py_err_weft(rc, buf);
        return -1;
    }
    if (was == 0) atomic_store(&st->mpi_started, 1);
    return 0;
}

static PyObject *
mod_mpi_init(PyObject *m, PyObject *Py_UNUSED(ignored))
{
    if (mpi_start(weft_py_state_of_module(m), "mpi_init()") < 0) return NULL;
    Py_RETURN_NONE;
}

/* Communicators across ranks still open in any runtime of this module. */
static Py_ssize_t
open_rank_comms(modstate *st)
{
    Py_ssize_t n = 0;
    PyObject *rts = PySequence_List(st->open);
    if (rts == NULL) {
        PyErr_Clear();
        return 0;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(rts); i++) {
        RuntimeObject *r = (RuntimeObject *)PyList_GET_ITEM(rts, i);
        PyObject *lst = r->comms ? PySequence_List(r->comms) : NULL;
        if (lst == NULL) {
            PyErr_Clear();
            continue;
        }
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(lst); j++) {
            CommObject *co = (CommObject *)PyList_GET_ITEM(lst, j);
            pthread_mutex_lock(&co->lock);
            n += co->ranks && co->c != NULL;
            pthread_mutex_unlock(&co->lock);
        }
        Py_DECREF(lst);
    }
    Py_DECREF(rts);
    return n;
}

static int
mpi_end(modstate *st)
{
    int rc;
    BEGIN_NOGIL
    rc = weft_mpi_finalize();
    END_NOGIL
    atomic_store(&st->mpi_started, 0);
    if (rc != 0) {
        weft_py_err_weft(rc, "mpi_finalize()");
        return -1;
    }
    return 0;
}

static PyObject *
mod_mpi_finalize(PyObject *m, PyObject *Py_UNUSED(ignored))
{
    modstate *st = weft_py_state_of_module(m);
    Py_ssize_t n = open_rank_comms(st);
    if (n > 0) {
        PyErr_Format(PyExc_RuntimeError, "mpi_finalize(): %zd weft.Communicator(s) across MPI ranks still "
                     "open: close them (or their runtimes) first", n);
        return NULL;
    }
    if (mpi_end(st) < 0) return NULL;
    Py_RETURN_NONE;
}

void
weft_py_mpi_atexit(modstate *st)
{
    if (atomic_load(&st->mpi_started) && mpi_running() == 1 && mpi_end(st) < 0) PyErr_WriteUnraisable(NULL);
}

/* The address of an mpi4py communicator's MPI_Comm (MPI._addressof), or an
 * int address as is. */
static int
mpi_comm_address(PyObject *comm, const void **out)
{
    *out = NULL;
    if (comm == NULL || comm == Py_None) return 0;
    PyObject *addr = NULL;
    if (PyLong_Check(comm)) {
        addr = Py_NewRef(comm);
    } else {
        PyObject *mod = PyImport_ImportModule("mpi4py.MPI");
        if (mod == NULL) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "Communicator.mpi(): comm= expects an mpi4py communicator (mpi4py "
                         "is not installed) or None, got '%.100s'", Py_TYPE(comm)->tp_name);
            return -1;
        }
        PyObject *commcls = PyObject_GetAttrString(mod, "Comm");
        int isc = commcls ? PyObject_IsInstance(comm, commcls) : -1;
        Py_XDECREF(commcls);
        if (isc != 1) {
            Py_DECREF(mod);
            if (isc < 0) return -1;
            PyErr_Format(PyExc_TypeError, "Communicator.mpi(): comm= expects an mpi4py communicator "
                         "(mpi4py.MPI.Comm) or None, got '%.100s'", Py_TYPE(comm)->tp_name);
            return -1;
        }
        addr = PyObject_CallMethod(mod, "_addressof", "O", comm);
        Py_DECREF(mod);
        if (addr == NULL) return -1;
    }
    void *p = PyLong_AsVoidPtr(addr);
    Py_DECREF(addr);
    if (p == NULL && PyErr_Occurred()) return -1;
    if (p == NULL) {
        PyErr_SetString(PyExc_ValueError, "Communicator.mpi(): comm= is a null address");
        return -1;
    }
    *out = p;
    return 0;
}

static PyObject *
Comm_mpi(PyObject *cls, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"comm", "gpus", "runtime", "timeout", NULL};
    PyObject *comm = Py_None, *gpus = Py_None, *rtobj = Py_None, *to = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O$OOO:mpi", kwlist, &comm, &gpus, &rtobj, &to)) return NULL;
    modstate *st = weft_py_state_of_type((PyTypeObject *)cls);
    if (st == NULL) return NULL;
    RuntimeObject *r = runtime_arg(st, rtobj, "Communicator.mpi()");
    if (r == NULL) return NULL;
    if (weft_py_check_open(r, "Communicator.mpi()") < 0) return NULL;
    weft_comm_config cfg;
    weft_comm_config_init(&cfg);
    if (timeout_arg(to, &cfg.timeout_ns, "Communicator.mpi()") < 0) return NULL;
    unsigned list[64];
    if (gpus_arg(gpus, list, &cfg, "Communicator.mpi()") < 0) return NULL;
    const void *addr = NULL;
    if (mpi_comm_address(comm, &addr) < 0) return NULL;
    if (mpi_running() == 0) {
        if (addr) {
            PyErr_SetString(PyExc_ValueError, "Communicator.mpi(): MPI is not running, yet comm= names a "
                            "communicator");
            return NULL;
        }
        if (mpi_start(st, "Communicator.mpi()") < 0) return NULL;
    }
    weft_comm *c = NULL;
    int rc;
    Py_INCREF(r);
    BEGIN_NOGIL /* collective over the ranks: it waits for the others */
    rc = weft_comm_create_mpi(r->rt, addr, &cfg, &c);
    END_NOGIL
    if (rc != 0) {
        Py_DECREF(r);
        return create_error(rc, "Communicator.mpi()");
    }
    PyObject *res = comm_wrap(st, r, c, 1);
    if (res != NULL && cfg.gpus)
        ((CommObject *)res)->nlocal = cfg.ngpus;
    Py_DECREF(r);
    return res;
}

/* ------------------------------------------------------------------------ */
/* Buffers                                                                   */
/* ------------------------------------------------------------------------ */

/* One post's buffers: the Data looked up (held until the post returns). */
typedef struct {
    CommObject *co;
    const char *fn;   /* "allreduce()" */
    weft_py_accs av;
    unsigned type;    /* element type of the first buffer (0: none yet) */
    PyObject *type_of;/* the buffer it came from (borrowed) */
} post_ctx;

static size_t
elem_size(unsigned type)
{
    switch (type) {
    case WEFT_RED_I32: case WEFT_RED_U32: case WEFT_RED_F32: return 4;
    default: return 8;
    }
}

/* The Data of obj for this post, named with mode (WEFT_R or WEFT_RW):
 * its handle in *h and its size in *bytes; checks its element type against
 * the post's.  0, or -1 with an exception. */
static int
buffer_use(post_ctx *p, PyObject *obj, const char *what, unsigned mode, int typed, weft_data **h,
           size_t *bytes)
{
    RuntimeObject *r = p->co->rt;
    modstate *st = r->st;
    if (Py_IS_TYPE(obj, st->Data_T) && ((DataObject *)obj)->parent) {
        PyErr_Format(PyExc_ValueError, "%s: a tile cannot be a communication buffer (its memory is part "
                     "of its parent's): communicate whole arrays", what);
        return -1;
    }
    if (!Py_IS_TYPE(obj, st->Data_T) && !PyObject_CheckBuffer(obj)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a buffer (a NumPy array, bytearray, ...) or a weft.Data, "
                     "got '%.100s'", what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    unsigned type = 0;
    if (typed && weft_py_reduce_type(st, obj, what, &type) < 0) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyObject *e = weft_py_fetch_exc();
            PyObject *s = e ? PyObject_Str(e) : NULL;
            Py_XDECREF(e);
            if (s == NULL) return -1;
            /* The reduction's message names the six types; say it is the
             * communication that needs them. */
            PyErr_Format(PyExc_TypeError, "%U (communication needs one of these element types)", s);
            Py_DECREF(s);
        }
        return -1;
    }
    if (typed && p->type && type != p->type) {
        PyErr_Format(PyExc_TypeError, "%s: its element type differs from the operation's other buffers' "
                     "(every buffer of one operation has one element type)", what);
        return -1;
    }
    if (weft_py_data_accesses(r, obj, what, mode | WEFT_PY_COMM_ACCESS, &p->av) < 0) return -1;
    DataObject *d = p->av.dat[p->av.n - 1];
    if (typed && !p->type) {
        p->type = type;
        p->type_of = obj;
    }
    *h = p->av.acc[p->av.n - 1].data;
    *bytes = (size_t)(d->hi - d->lo); /* lo == hi: a zero-length buffer */
    return 0;
}

/* Whether member k is this process's. */
static int
is_local(const CommObject *co, unsigned k)
{
    return !co->ranks || (k >= co->rank && k - co->rank < co->nlocal);
}

/* The member buffer objects of one argument (borrowed, or NULL for None):
 * across ranks one object (or a sequence, of which [rank] is used) fills
 * out[rank] only; over GPUs a sequence with one per member. */
static int
member_objs(CommObject *co, PyObject *arg, const char *fn, const char *name, int none_ok, PyObject **out,
            PyObject **keep)
{
    unsigned n = co->size;
    modstate *st = co->rt->st;
    *keep = NULL;
    for (unsigned k = 0; k < n; k++) out[k] = NULL;
    if (arg == NULL || arg == Py_None) return 0;
    int single = Py_IS_TYPE(arg, st->Data_T) || PyObject_CheckBuffer(arg);
    if (co->ranks && co->nlocal == 1 && single) {
        out[co->rank] = arg;
        return 0;
    }
    if (single) {
        PyErr_Format(PyExc_TypeError, "%s: %s= expects a sequence with one buffer per member (%u members), "
                     "got one buffer", fn, name, n);
        return -1;
    }
    PyObject *seq = PySequence_Fast(arg, "");
    if (seq == NULL) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: %s= expects %s, got '%.100s'", fn, name,
                     co->ranks ? "this rank's buffer (or a sequence with one per rank)"
                               : "a sequence with one buffer per member",
                     Py_TYPE(arg)->tp_name);
        return -1;
    }
    if (PySequence_Fast_GET_SIZE(seq) != (Py_ssize_t)n) {
        PyErr_Format(PyExc_ValueError, "%s: %s= has %zd buffers, the communicator has %u members", fn, name,
                     PySequence_Fast_GET_SIZE(seq), n);
        Py_DECREF(seq);
        return -1;
    }
    for (unsigned k = 0; k < n; k++) {
        if (!is_local(co, k)) continue;
        PyObject *o = PySequence_Fast_GET_ITEM(seq, k);
        if (o == Py_None) {
            if (!none_ok) {
                PyErr_Format(PyExc_ValueError, "%s: %s[%u] is None: member %u needs a buffer", fn, name, k, k);
                Py_DECREF(seq);
                return -1;
            }
            continue;
        }
        out[k] = o;
    }
    *keep = seq;
    return 0;
}

/* deps=: Tasks (or one) to C handles in *dv (PyMem, n in *nd). */
static int
deps_arg(CommObject *co, PyObject *deps, const char *fn, weft_task ***dv, size_t *nd)
{
    *dv = NULL;
    *nd = 0;
    if (deps == NULL || deps == Py_None) return 0;
    modstate *st = co->rt->st;
    PyObject *seq;
    if (Py_IS_TYPE(deps, st->Task_T)) seq = PyTuple_Pack(1, deps);
    else seq = PySequence_Fast(deps, "");
    if (seq == NULL) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: deps= expects a list of weft.Task, got '%.100s'", fn,
                     Py_TYPE(deps)->tp_name);
        return -1;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    weft_task **v = PyMem_Malloc(sizeof *v * (size_t)(n ? n : 1));
    if (v == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
        if (!Py_IS_TYPE(o, st->Task_T)) {
            PyErr_Format(PyExc_TypeError, "%s: deps[%zd] is not a weft.Task but '%.100s'", fn, i,
                         Py_TYPE(o)->tp_name);
            goto fail;
        }
        TaskObject *dep = (TaskObject *)o;
        if (dep->rt && dep->rt != co->rt) {
            PyErr_Format(PyExc_ValueError, "%s: deps[%zd] belongs to another weft runtime", fn, i);
            goto fail;
        }
        if (atomic_load(&dep->phase) != PH_SUBMITTED) atomic_store_explicit(&dep->depended, 1, memory_order_relaxed);
        v[i] = atomic_load(&dep->phase) == PH_SUBMITTED ? atomic_load(&dep->h) : weft_py_slot_handle(dep, co->rt);
        if (v[i] == NULL) goto fail;
    }
    Py_DECREF(seq);
    *dv = v;
    *nd = (size_t)n;
    return 0;
fail:
    Py_DECREF(seq);
    PyMem_Free(v);
    return -1;
}

/* The Task of a post: made before the post (nothing to undo after it). */
static TaskObject *
op_task(CommObject *co, PyObject *name, const char *opname)
{
    modstate *st = co->rt->st;
    TaskObject *t = weft_py_task_new(st);
    if (t == NULL) return NULL;
    t->rt = (RuntimeObject *)Py_NewRef(co->rt);
    if (name && name != Py_None) t->name = Py_NewRef(name);
    else if ((t->name = PyUnicode_FromString(opname)) == NULL) {
        Py_DECREF(t);
        return NULL;
    }
    return t;
}

/* After a successful post: t gets h and the Data it names, and joins the
 * communicator's unfinished operations. */
static PyObject *
op_posted(CommObject *co, TaskObject *t, weft_task *h, post_ctx *p)
{
    PyObject *acc = PyTuple_New((Py_ssize_t)p->av.n);
    if (acc)
        for (size_t i = 0; i < p->av.n; i++) PyTuple_SET_ITEM(acc, (Py_ssize_t)i, Py_NewRef((PyObject *)p->av.dat[i]));
    t->acc = acc; /* NULL only out of memory: the communicator's list still holds t */
    atomic_store(&t->h, h);
    atomic_store(&t->phase, PH_SUBMITTED);
    int need_prune = 0, err = 0;
    WEFT_PY_CS_BEGIN(co)
    if (co->inflight == NULL || PyList_Append(co->inflight, (PyObject *)t) < 0) err = 1;
    else need_prune = PyList_GET_SIZE(co->inflight) >= co->prune_at;
    WEFT_PY_CS_END();
    if (err) {
        /* Out of memory: keep the buffers alive by waiting for the operation. */
        PyErr_Clear();
        BEGIN_NOGIL
        (void)weft_task_wait(h);
        END_NOGIL
        record_outcome(t);
    }
    if (need_prune) prune(co, 0);
    WEFT_PY_HANDOFF_RELEASE(t);
    return (PyObject *)t;
}

/* ------------------------------------------------------------------------ */
/* Collectives                                                               */
/* ------------------------------------------------------------------------ */

/* A collective's arguments, parsed and checked (coll_parse). */
typedef struct {
    unsigned which, op, root;
    int in_place, have_count;
    size_t count;
    PyObject *recv, *send, *name, *deps; /* borrowed from the call */
    const char *opname;                  /* "allreduce": an unnamed task's name */
    char fn[32];                         /* "allreduce()", for messages */
} coll_args;

/* The members' buffers of a collective and the handles they name. */
typedef struct {
    PyObject *robj[64], *sobj[64], *rkeep, *skeep;
    weft_data *rh[64], *sh[64];
    size_t rbytes[64], sbytes[64];
} coll_bufs;

/* The signatures: (recv, send=None, op=SUM, count=None, *, name, deps)
 * with root after send for the rooted ones; no op for the others.  0, or
 * -1 with an exception. */
static int
coll_parse(CommObject *co, unsigned which, PyObject *args, PyObject *kwds, coll_args *a)
{
    static const char *names[] = {"", "allreduce", "broadcast", "reduce", "allgather", "reduce_scatter"};
    a->opname = names[which];
    snprintf(a->fn, sizeof a->fn, "%s()", names[which]);
    const char *fn = a->fn;
    int reduces = which == WEFT_COLL_ALLREDUCE || which == WEFT_COLL_REDUCE || which == WEFT_COLL_REDUCE_SCATTER;
    int rooted = which == WEFT_COLL_BROADCAST || which == WEFT_COLL_REDUCE;
    PyObject *opo = NULL, *counto = Py_None, *rooto = NULL;
    a->which = which;
    a->recv = NULL;
    a->send = a->name = a->deps = Py_None;
    int ok;
    if (which == WEFT_COLL_ALLREDUCE || which == WEFT_COLL_REDUCE_SCATTER) {
        static char *kw[] = {"recv", "send", "op", "count", "name", "deps", NULL};
        ok = PyArg_ParseTupleAndKeywords(args, kwds, "O|OOO$OO", kw, &a->recv, &a->send, &opo, &counto, &a->name,
                                         &a->deps);
    } else if (which == WEFT_COLL_REDUCE) {
        static char *kw[] = {"recv", "send", "op", "root", "count", "name", "deps", NULL};
        ok = PyArg_ParseTupleAndKeywords(args, kwds, "O|OOOO$OO", kw, &a->recv, &a->send, &opo, &rooto, &counto,
                                         &a->name, &a->deps);
    } else if (which == WEFT_COLL_BROADCAST) {
        static char *kw[] = {"recv", "send", "root", "count", "name", "deps", NULL};
        ok = PyArg_ParseTupleAndKeywords(args, kwds, "O|OOO$OO", kw, &a->recv, &a->send, &rooto, &counto, &a->name,
                                         &a->deps);
    } else {
        static char *kw[] = {"recv", "send", "count", "name", "deps", NULL};
        ok = PyArg_ParseTupleAndKeywords(args, kwds, "OO|O$OO", kw, &a->recv, &a->send, &counto, &a->name,
                                         &a->deps);
    }
    if (!ok) return -1;
    if (a->name != Py_None && !PyUnicode_Check(a->name)) {
        PyErr_Format(PyExc_TypeError, "%s: name= expects a str, got '%.100s'", fn, Py_TYPE(a->name)->tp_name);
        return -1;
    }
    a->op = 0;
    if (reduces) {
        if (opo == NULL) a->op = WEFT_RED_SUM;
        else if ((a->op = weft_py_reduce_op(opo)) == 0) {
            PyErr_Format(PyExc_ValueError, "%s: unknown reduction operator %R: use weft.SUM, weft.MIN or weft.MAX "
                         "(or 'sum', 'min', 'max')", fn, opo);
            return -1;
        }
    }
    a->root = 0;
    if (rooted && rooto && rooto != Py_None) {
        long v = PyLong_AsLong(rooto);
        if (v == -1 && PyErr_Occurred()) return -1;
        if (v < 0 || v >= (long)co->size) {
            PyErr_Format(PyExc_ValueError, "%s: root %ld is not a member (the communicator has %u)", fn, v,
                         co->size);
            return -1;
        }
        a->root = (unsigned)v;
    }
    a->have_count = counto != Py_None;
    a->count = 0;
    if (a->have_count) {
        a->count = PyLong_AsSize_t(counto);
        if (a->count == (size_t)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%s: count= expects a number of elements >= 0 or None, got %R", fn,
                         counto);
            return -1;
        }
    }
    a->in_place = a->send == Py_None;
    if (a->in_place && (which == WEFT_COLL_ALLGATHER || which == WEFT_COLL_REDUCE_SCATTER)) {
        PyErr_Format(PyExc_ValueError, "%s needs send buffers (no in-place form)", fn);
        return -1;
    }
    return 0;
}

/* Each local member's buffers named as accesses of the post p: recv read
 * and/or written, send read, as the collective uses them.  0, or -1 with
 * an exception. */
static int
coll_buffers(CommObject *co, const coll_args *a, post_ctx *p, coll_bufs *b)
{
    const char *fn = a->fn;
    unsigned which = a->which, root = a->root;
    for (unsigned k = 0; k < co->size; k++) {
        b->rh[k] = b->sh[k] = NULL;
        b->rbytes[k] = b->sbytes[k] = 0;
    }
    /* recv may be None at members other than the root of a reduce. */
    if (member_objs(co, a->recv, fn, "recv", which == WEFT_COLL_REDUCE, b->robj, &b->rkeep) < 0 ||
        member_objs(co, a->send, fn, "send", which == WEFT_COLL_BROADCAST, b->sobj, &b->skeep) < 0)
        return -1;
    for (unsigned k = 0; k < co->size; k++) {
        if (!is_local(co, k)) continue;
        char what[64];
        int reads = which != WEFT_COLL_BROADCAST || k == root;
        int writes = which == WEFT_COLL_BROADCAST ? !(a->in_place && k == root)
                                                  : which != WEFT_COLL_REDUCE || k == root;
        if (b->robj[k] == NULL && (writes || a->in_place)) {
            if (co->ranks)
                PyErr_Format(PyExc_ValueError, "%s: recv is None, but this rank (%u) needs a buffer", fn, k);
            else
                PyErr_Format(PyExc_ValueError, "%s: recv[%u] is None, but member %u needs a buffer", fn, k, k);
            return -1;
        }
        if (b->robj[k]) {
            snprintf(what, sizeof what, co->ranks && b->rkeep == NULL ? "%s: recv" : "%s: recv[%u]", fn, k);
            if (buffer_use(p, b->robj[k], what, (a->in_place && reads) || writes ? WEFT_RW : WEFT_R, 1, &b->rh[k],
                           &b->rbytes[k]) < 0)
                return -1;
        }
        if (!a->in_place && reads) {
            if (b->sobj[k] == NULL) {
                if (co->ranks)
                    PyErr_Format(PyExc_ValueError, "%s: send is None, but this rank (%u) is read", fn, k);
                else
                    PyErr_Format(PyExc_ValueError, "%s: send[%u] is None, but member %u's input is read", fn, k, k);
                return -1;
            }
            snprintf(what, sizeof what, co->ranks && b->skeep == NULL ? "%s: send" : "%s: send[%u]", fn, k);
            if (buffer_use(p, b->sobj[k], what, WEFT_R, 1, &b->sh[k], &b->sbytes[k]) < 0) return -1;
        }
    }
    return 0;
}

/* Without count=: the elements of the first buffer that says — send's
 * (recv's in place) for allreduce, reduce and allgather; recv's for
 * broadcast and reduce_scatter.  0, or -1 with an exception. */
static int
coll_count(CommObject *co, const coll_args *a, const post_ctx *p, const coll_bufs *b, size_t *count)
{
    unsigned which = a->which;
    size_t el = p->type ? elem_size(p->type) : 1, by = 0;
    int found = 0;
    for (unsigned k = 0; k < co->size && !found; k++) {
        if (which == WEFT_COLL_ALLREDUCE || which == WEFT_COLL_REDUCE || which == WEFT_COLL_ALLGATHER) {
            if (!a->in_place && b->sh[k]) by = b->sbytes[k], found = 1;
            else if (a->in_place && b->rh[k]) by = b->rbytes[k], found = 1;
        } else if (b->rh[k]) {
            by = b->rbytes[k], found = 1;
        } else if (b->sh[k]) {
            by = b->sbytes[k], found = 1;
        }
    }
    if (!found) {
        PyErr_Format(PyExc_ValueError, "%s: no buffer to take count from", a->fn);
        return -1;
    }
    if (by % el) {
        PyErr_Format(PyExc_ValueError, "%s: a buffer of %zu bytes is not a whole number of %zu-byte elements",
                     a->fn, by, el);
        return -1;
    }
    *count = by / el;
    return 0;
}

/* t's name as the C runtime takes it (its first 31 bytes) in buf; NULL
 * with an exception. */
static const char *
op_c_name(const TaskObject *t, char buf[32])
{
    Py_ssize_t len;
    const char *s = PyUnicode_AsUTF8AndSize(t->name, &len);
    if (s == NULL) return NULL;
    if (len > 31) len = 31;
    memcpy(buf, s, (size_t)len);
    buf[len] = 0;
    return buf;
}

/* comm.allreduce(...), broadcast, reduce, allgather, reduce_scatter: the
 * arguments checked, each member's buffers named, the count found, then
 * one weft_comm_post. */
static PyObject *
collective(CommObject *co, unsigned which, PyObject *args, PyObject *kwds)
{
    coll_args a;
    if (coll_parse(co, which, args, kwds, &a) < 0) return NULL;
    if (post_enter(co, a.fn) < 0) return NULL;
    coll_bufs b;
    b.rkeep = b.skeep = NULL;
    post_ctx p = {co, a.fn, {0}, {0}, 0, NULL};
    weft_py_accs_init(&p.av);
    weft_task **dv = NULL;
    size_t nd = 0;
    TaskObject *t = NULL;
    PyObject *res = NULL;
    char namebuf[32];
    if (coll_buffers(co, &a, &p, &b) < 0 || (!a.have_count && coll_count(co, &a, &p, &b, &a.count) < 0) ||
        deps_arg(co, a.deps, a.fn, &dv, &nd) < 0 || (t = op_task(co, a.name, a.opname)) == NULL)
        goto done;
    weft_coll c;
    weft_coll_init(&c);
    c.op = which;
    /* (p.type is set: recv is always named somewhere) */
    c.type = (p.type ? p.type : WEFT_RED_U32) | a.op;
    c.count = a.count;
    c.root = a.root;
    c.recv = b.rh;
    c.send = a.in_place ? NULL : b.sh;
    c.deps = dv;
    c.ndeps = nd;
    if ((c.name = op_c_name(t, namebuf)) == NULL) goto done;
    weft_task *h = NULL;
    int rc;
    weft_comm *cc = co->c; /* stays while we are counted as posting */
    BEGIN_NOGIL
    rc = weft_comm_post(cc, &c, &h);
    END_NOGIL
    if (rc != 0) {
        weft_py_err_weft(rc, a.fn);
        goto done;
    }
    res = op_posted(co, t, h, &p);
    t = NULL;
done:
    Py_XDECREF(t);
    weft_py_accs_clear(&p.av);
    weft_py_accs_free(&p.av);
    Py_XDECREF(b.rkeep);
    Py_XDECREF(b.skeep);
    PyMem_Free(dv);
    post_exit(co);
    return res;
}

static PyObject *Comm_allreduce(CommObject *co, PyObject *a, PyObject *k) { return collective(co, WEFT_COLL_ALLREDUCE, a, k); }
static PyObject *Comm_broadcast(CommObject *co, PyObject *a, PyObject *k) { return collective(co, WEFT_COLL_BROADCAST, a, k); }
static PyObject *Comm_reduce(CommObject *co, PyObject *a, PyObject *k) { return collective(co, WEFT_COLL_REDUCE, a, k); }
static PyObject *Comm_allgather(CommObject *co, PyObject *a, PyObject *k) { return collective(co, WEFT_COLL_ALLGATHER, a, k); }
static PyObject *Comm_reduce_scatter(CommObject *co, PyObject *a, PyObject *k) { return collective(co, WEFT_COLL_REDUCE_SCATTER, a, k); }

/* ------------------------------------------------------------------------ */
/* Exchanges                                                                 */
/* ------------------------------------------------------------------------ */

static const char *const xfer_keys[] = {"from_", "to", "src", "dst", "nbytes", "src_offset", "dst_offset",
                                        "rows", "src_pitch", "dst_pitch", NULL};

/* Field `key` of transfer item x (a dict, or an object with attributes;
 * a dict may say "from" for "from_"): a new reference, or NULL without an
 * error when absent. */
static PyObject *
xfer_field(PyObject *x, const char *key)
{
    if (PyDict_Check(x)) {
        PyObject *v = PyDict_GetItemString(x, key); /* borrowed */
        if (v == NULL && strcmp(key, "from_") == 0) v = PyDict_GetItemString(x, "from");
        return Py_XNewRef(v);
    }
    PyObject *v = PyObject_GetAttrString(x, key);
    if (v == NULL && PyErr_ExceptionMatches(PyExc_AttributeError)) PyErr_Clear();
    return v;
}

static int
xfer_size(PyObject *x, const char *key, size_t dflt, int required, size_t *out, const char *fn, Py_ssize_t i)
{
    PyObject *v = xfer_field(x, key);
    if (v == NULL) {
        if (PyErr_Occurred()) return -1;
        if (required) {
            PyErr_Format(PyExc_ValueError, "%s: transfers[%zd] has no '%s'", fn, i, key);
            return -1;
        }
        *out = dflt;
        return 0;
    }
    if (v == Py_None && !required) {
        Py_DECREF(v);
        *out = dflt;
        return 0;
    }
    size_t s = PyLong_Check(v) ? PyLong_AsSize_t(v) : (size_t)-1;
    Py_DECREF(v);
    if (s == (size_t)-1) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s: transfers[%zd]['%s'] must be an int >= 0", fn, i, key);
        return -1;
    }
    *out = s;
    return 0;
}

/* Transfer i of an exchange (a weft.Transfer or a dict; a misspelt key
 * refused) into *u, its local buffers named as accesses of p: the source
 * read, the destination written.  0, or -1 with an exception. */
static int
exchange_transfer(CommObject *co, post_ctx *p, PyObject *it, Py_ssize_t i, weft_xfer *u)
{
    const char *fn = p->fn;
    if (PyDict_Check(it)) {
        /* A misspelt key would be silently ignored: refuse it. */
        PyObject *k;
        Py_ssize_t pos = 0;
        while (PyDict_Next(it, &pos, &k, NULL)) {
            int known = 0;
            const char *ks = PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : NULL;
            if (ks == NULL) PyErr_Clear();
            for (int j = 0; ks && xfer_keys[j]; j++) known |= strcmp(ks, xfer_keys[j]) == 0;
            if (ks && strcmp(ks, "from") == 0) known = 1;
            if (!known) {
                PyErr_Format(PyExc_ValueError, "%s: transfers[%zd] has an unknown key %R (known: from_ (or "
                             "from), to, src, dst, nbytes, src_offset, dst_offset, rows, src_pitch, dst_pitch)",
                             fn, i, k);
                return -1;
            }
        }
    }
    size_t from, to, rows;
    if (xfer_size(it, "from_", 0, 1, &from, fn, i) < 0 || xfer_size(it, "to", 0, 1, &to, fn, i) < 0 ||
        xfer_size(it, "nbytes", 0, 1, &u->bytes, fn, i) < 0 ||
        xfer_size(it, "src_offset", 0, 0, &u->src_off, fn, i) < 0 ||
        xfer_size(it, "dst_offset", 0, 0, &u->dst_off, fn, i) < 0 ||
        xfer_size(it, "rows", 1, 0, &rows, fn, i) < 0 ||
        xfer_size(it, "src_pitch", 0, 0, &u->src_pitch, fn, i) < 0 ||
        xfer_size(it, "dst_pitch", 0, 0, &u->dst_pitch, fn, i) < 0)
        return -1;
    if (from >= co->size || to >= co->size) {
        PyErr_Format(PyExc_ValueError, "%s: transfers[%zd] is from member %zu to %zu, the communicator has %u",
                     fn, i, from, to, co->size);
        return -1;
    }
    u->from = (unsigned)from;
    u->to = (unsigned)to;
    u->rows = rows;
    for (int side = 0; side < 2; side++) {
        const char *key = side ? "dst" : "src";
        int local = is_local(co, side ? u->to : u->from);
        PyObject *b = xfer_field(it, key);
        if (b == NULL && PyErr_Occurred()) return -1;
        if (b == NULL || b == Py_None) {
            Py_XDECREF(b);
            if (local) {
                PyErr_Format(PyExc_ValueError, "%s: transfers[%zd] has no '%s' (member %u's %s)", fn, i, key,
                             side ? u->to : u->from, side ? "destination" : "source");
                return -1;
            }
            continue; /* another rank's side: not read */
        }
        if (!local) {
            Py_DECREF(b);
            continue;
        }
        char what[64];
        snprintf(what, sizeof what, "%s: transfers[%zd].%s", fn, i, key);
        size_t bytes;
        weft_data *h;
        /* Any buffer: an exchange moves bytes. */
        int rc = buffer_use(p, b, what, side ? WEFT_RW : WEFT_R, 0, &h, &bytes);
        Py_DECREF(b);
        if (rc < 0) return -1;
        if (side) u->dst = h;
        else u->src = h;
    }
    return 0;
}

static PyObject *
Comm_exchange(CommObject *co, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"transfers", "name", "deps", NULL};
    const char *fn = "exchange()";
    PyObject *xs, *name = Py_None, *deps = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|$OO:exchange", kwlist, &xs, &name, &deps)) return NULL;
    if (name != Py_None && !PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "%s: name= expects a str, got '%.100s'", fn, Py_TYPE(name)->tp_name);
        return NULL;
    }
    if (deps != Py_None) {
        /* weft_comm_exchange takes no dependencies: its data order it. */
        PyErr_Format(PyExc_TypeError, "%s: deps= is not supported (an exchange is ordered by its buffers)", fn);
        return NULL;
    }
    PyObject *seq = PySequence_Fast(xs, "");
    if (seq == NULL) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: transfers expects a sequence of weft.Transfer or dicts, got '%.100s'",
                     fn, Py_TYPE(xs)->tp_name);
        return NULL;
    }
    if (post_enter(co, fn) < 0) {
        Py_DECREF(seq);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    weft_xfer *x = PyMem_Calloc((size_t)(n ? n : 1), sizeof *x);
    post_ctx p = {co, fn, {0}, {0}, 0, NULL};
    weft_py_accs_init(&p.av);
    TaskObject *t = NULL;
    PyObject *res = NULL;
    if (x == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (exchange_transfer(co, &p, PySequence_Fast_GET_ITEM(seq, i), i, &x[i]) < 0) goto done;
    t = op_task(co, name, "exchange");
    if (t == NULL) goto done;
    char namebuf[32];
    if (op_c_name(t, namebuf) == NULL) goto done;
    weft_task *h = NULL;
    int rc;
    weft_comm *cc = co->c;
    BEGIN_NOGIL
    rc = weft_comm_exchange(cc, x, (size_t)n, namebuf, &h);
    END_NOGIL
    if (rc != 0) {
        weft_py_err_weft(rc, fn);
        goto done;
    }
    res = op_posted(co, t, h, &p);
    t = NULL;
done:
    Py_XDECREF(t);
    weft_py_accs_clear(&p.av);
    weft_py_accs_free(&p.av);
    PyMem_Free(x);
    Py_DECREF(seq);
    post_exit(co);
    return res;
}

/* ------------------------------------------------------------------------ */
/* The type                                                                  */
/* ------------------------------------------------------------------------ */

static PyObject *
Comm_close(CommObject *co, PyObject *Py_UNUSED(ignored))
{
    if (weft_py_tl_cur != NULL && weft_py_tl_cur->rt == co->rt) {
        /* Its operations may follow the calling task: destroy waits for them. */
        PyErr_SetString(PyExc_RuntimeError, "close(): a weft.Communicator cannot be closed from a task of its "
                        "runtime (its operations may wait for that task)");
        return NULL;
    }
    comm_shutdown(co);
    runtime_forget(co);
    Py_RETURN_NONE;
}

static PyObject *
Comm_enter(CommObject *co, PyObject *Py_UNUSED(ignored))
{
    return Py_NewRef(co);
}

static PyObject *
Comm_exit(CommObject *co, PyObject *args)
{
    (void)args;
    PyObject *r = Comm_close(co, NULL);
    if (r == NULL) return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

static PyObject *
Comm_get_size(CommObject *co, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLong(co->size);
}

static PyObject *
Comm_get_rank(CommObject *co, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLong(co->rank);
}

static PyObject *
Comm_get_closed(CommObject *co, void *c)
{
    (void)c;
    pthread_mutex_lock(&co->lock);
    int closed = co->closed || co->c == NULL;
    pthread_mutex_unlock(&co->lock);
    return PyBool_FromLong(closed);
}

static PyObject *
Comm_get_runtime(CommObject *co, void *c)
{
    (void)c;
    return Py_NewRef((PyObject *)co->rt);
}

static PyObject *
Comm_get_ranks(CommObject *co, void *c)
{
    (void)c;
    return PyBool_FromLong(co->ranks);
}

static PyObject *
Comm_repr(CommObject *co)
{
    pthread_mutex_lock(&co->lock);
    int closed = co->closed || co->c == NULL;
    pthread_mutex_unlock(&co->lock);
    return PyUnicode_FromFormat("<weft.Communicator %s of %u members, rank %u%s>",
                                co->ranks ? "across MPI ranks" : "over GPUs", co->size, co->rank,
                                closed ? ", closed" : "");
}

static int
Comm_traverse(CommObject *co, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(co));
    Py_VISIT(co->rt);
    Py_VISIT(co->inflight);
    return 0;
}

static int
Comm_clear(CommObject *co)
{
    /* Collected only once its runtime dropped it (closed): the C
     * communicator is gone by then, or destroyed in dealloc. */
    Py_CLEAR(co->inflight);
    return 0;
}

static void
Comm_dealloc(CommObject *co)
{
    PyTypeObject *tp = Py_TYPE(co);
    PyObject_GC_UnTrack(co);
    if (co->weakreflist) PyObject_ClearWeakRefs((PyObject *)co);
    if (co->c) {
        weft_comm *c = co->c;
        co->c = NULL;
        BEGIN_NOGIL
        (void)weft_comm_destroy(c);
        END_NOGIL
    }
    Py_CLEAR(co->inflight);
    Py_CLEAR(co->rt);
    pthread_mutex_destroy(&co->lock);
    pthread_cond_destroy(&co->idle);
    tp->tp_free(co);
    Py_DECREF(tp);
}

static PyMethodDef Comm_methods[] = {
    {"mpi", (PyCFunction)(void (*)(void))Comm_mpi, METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "Communicator.mpi(comm=None, *, gpus=None, runtime=None, timeout=None): one member per MPI rank of "
     "comm (an mpi4py communicator; None: MPI_COMM_WORLD), or with gpus= each rank's GPUs, numbered rank "
     "by rank.  Starts MPI (weft.mpi_init) if it is not running.  Collective: every rank calls it."},
    {"allreduce", (PyCFunction)(void (*)(void))Comm_allreduce, METH_VARARGS | METH_KEYWORDS,
     "allreduce(recv, send=None, op=weft.SUM, count=None, *, name=None, deps=()) -> Task"},
    {"broadcast", (PyCFunction)(void (*)(void))Comm_broadcast, METH_VARARGS | METH_KEYWORDS,
     "broadcast(recv, send=None, root=0, count=None, *, name=None, deps=()) -> Task"},
    {"reduce", (PyCFunction)(void (*)(void))Comm_reduce, METH_VARARGS | METH_KEYWORDS,
     "reduce(recv, send=None, op=weft.SUM, root=0, count=None, *, name=None, deps=()) -> Task"},
    {"allgather", (PyCFunction)(void (*)(void))Comm_allgather, METH_VARARGS | METH_KEYWORDS,
     "allgather(recv, send, count=None, *, name=None, deps=()) -> Task"},
    {"reduce_scatter", (PyCFunction)(void (*)(void))Comm_reduce_scatter, METH_VARARGS | METH_KEYWORDS,
     "reduce_scatter(recv, send, op=weft.SUM, count=None, *, name=None, deps=()) -> Task"},
    {"exchange", (PyCFunction)(void (*)(void))Comm_exchange, METH_VARARGS | METH_KEYWORDS,
     "exchange(transfers, *, name=None) -> Task: a group of point-to-point transfers (weft.Transfer or "
     "dicts with from_, to, src, dst, nbytes[, src_offset, dst_offset, rows, src_pitch, dst_pitch])"},
    {"close", (PyCFunction)Comm_close, METH_NOARGS,
     "Wait for its operations, then destroy it (idempotent; also when its runtime closes)."},
    {"__enter__", (PyCFunction)Comm_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Comm_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Comm_getset[] = {
    {"size", (getter)Comm_get_size, NULL, "members", NULL},
    {"rank", (getter)Comm_get_rank, NULL, "this process's member (its MPI rank; 0 over GPUs)", NULL},
    {"closed", (getter)Comm_get_closed, NULL, "closed (by close() or its runtime)", NULL},
    {"runtime", (getter)Comm_get_runtime, NULL, "its weft.Runtime", NULL},
    {"across_ranks", (getter)Comm_get_ranks, NULL, "members are MPI ranks", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMemberDef Comm_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(CommObject, weakreflist), READONLY, NULL},
    {NULL, 0, 0, 0, NULL}};

static PyType_Slot Comm_slots[] = {
    {Py_tp_new, Comm_new},
    {Py_tp_dealloc, Comm_dealloc},
    {Py_tp_traverse, Comm_traverse},
    {Py_tp_clear, Comm_clear},
    {Py_tp_repr, Comm_repr},
    {Py_tp_methods, Comm_methods},
    {Py_tp_getset, Comm_getset},
    {Py_tp_members, Comm_members},
    {Py_tp_doc, (void *)"Communicator(gpus=None, *, runtime=None, timeout=None): collectives and exchanges "
                        "among GPUs of a runtime, as tasks (see python/README.md, Communication)."},
    {0, NULL}};

PyType_Spec weft_py_comm_spec = {
    .name = "weft.Communicator",
    .basicsize = sizeof(CommObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Comm_slots,
};

/* ------------------------------------------------------------------------ */
/* weft_grid for weft.Grid (_comm.py)                                        */
/* ------------------------------------------------------------------------ */

static int
grid_args(PyObject *args, weft_grid *g, PyObject **members)
{
    unsigned long long rows, cols, elem, halo;
    unsigned int brows, bcols;
    *members = NULL;
    if (!PyArg_ParseTuple(args, members ? "KKKKII|O" : "KKKKII", &rows, &cols, &elem, &halo, &brows, &bcols,
                          members))
        return -1;
    g->rows = rows;
    g->cols = cols;
    g->elem = elem;
    g->halo = halo;
    g->brows = brows;
    g->bcols = bcols;
    return 0;
}

static PyObject *
mod_grid_block(PyObject *m, PyObject *args)
{
    (void)m;
    weft_grid g;
    unsigned long long rows, cols, elem, halo;
    unsigned int brows, bcols, b;
    if (!PyArg_ParseTuple(args, "KKKKIII", &rows, &cols, &elem, &halo, &brows, &bcols, &b)) return NULL;
    g.rows = rows, g.cols = cols, g.elem = elem, g.halo = halo, g.brows = brows, g.bcols = bcols;
    weft_grid_block o;
    int rc = weft_grid_block_get(&g, b, &o);
    if (rc != 0) return weft_py_err_weft(rc, "Grid");
    return Py_BuildValue("(nnnnnn)", (Py_ssize_t)o.row0, (Py_ssize_t)o.col0, (Py_ssize_t)o.rows,
                         (Py_ssize_t)o.cols, (Py_ssize_t)o.pitch, (Py_ssize_t)o.bytes);
}

/* _grid_exchange(rows, cols, elem, halo, brows, bcols, members): the
 * transfers as tuples (src_block, dst_block, from, to, src_offset,
 * src_pitch, dst_offset, dst_pitch, nbytes, rows). */
static PyObject *
mod_grid_exchange(PyObject *m, PyObject *args)
{
    (void)m;
    weft_grid g;
    PyObject *mem = NULL;
    if (grid_args(args, &g, &mem) < 0) return NULL;
    if (mem == NULL) {
        PyErr_SetString(PyExc_TypeError, "_grid_exchange: members missing");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(mem, "Grid.exchange(): members must be a sequence (one member per block)");
    if (seq == NULL) return NULL;
    Py_ssize_t nb = PySequence_Fast_GET_SIZE(seq);
    if ((unsigned long long)nb != (unsigned long long)g.brows * g.bcols) {
        PyErr_Format(PyExc_ValueError, "Grid.exchange(): members has %zd entries, the grid has %u blocks", nb,
                     g.brows * g.bcols);
        Py_DECREF(seq);
        return NULL;
    }
    int *member = PyMem_Malloc(sizeof *member * (size_t)(nb ? nb : 1));
    weft_data **data = PyMem_Malloc(sizeof *data * (size_t)(nb ? nb : 1));
    weft_xfer *x = NULL;
    PyObject *res = NULL;
    if (member == NULL || data == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t b = 0; b < nb; b++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, b);
        long v = o == Py_None ? -1 : PyLong_AsLong(o);
        if (v == -1 && PyErr_Occurred()) {
            PyErr_Format(PyExc_TypeError, "Grid.exchange(): members[%zd] is not a member number or None", b);
            goto done;
        }
        if (v < -1 || v > INT_MAX) {
            PyErr_Format(PyExc_ValueError, "Grid.exchange(): members[%zd] = %ld is not a member", b, v);
            goto done;
        }
        member[b] = (int)v;
        /* Stand-ins, never dereferenced: they say which block a side is. */
        data[b] = (weft_data *)(uintptr_t)(b + 1);
    }
    size_t n = 0;
    int rc = weft_grid_exchange(&g, member, data, NULL, 0, &n);
    if (rc == 0 && n) {
        x = PyMem_Malloc(sizeof *x * n);
        if (x == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        rc = weft_grid_exchange(&g, member, data, x, n, &n);
    }
    if (rc != 0) {
        weft_py_err_weft(rc, "Grid.exchange()");
        goto done;
    }
    res = PyList_New((Py_ssize_t)n);
    if (res == NULL) goto done;
    for (size_t i = 0; i < n; i++) {
        PyObject *tu = Py_BuildValue("(nnIInnnnnn)", (Py_ssize_t)((uintptr_t)x[i].src - 1),
                                     (Py_ssize_t)((uintptr_t)x[i].dst - 1), x[i].from, x[i].to,
                                     (Py_ssize_t)x[i].src_off, (Py_ssize_t)x[i].src_pitch, (Py_ssize_t)x[i].dst_off,
                                     (Py_ssize_t)x[i].dst_pitch, (Py_ssize_t)x[i].bytes,
                                     (Py_ssize_t)(x[i].rows ? x[i].rows : 1));
        if (tu == NULL) {
            Py_CLEAR(res);
            goto done;
        }
        PyList_SET_ITEM(res, (Py_ssize_t)i, tu);
    }
done:
    PyMem_Free(member);
    PyMem_Free(data);
    PyMem_Free(x);
    Py_DECREF(seq);
    return res;
}

PyMethodDef weft_py_comm_methods[] = {
    {"mpi_init", (PyCFunction)mod_mpi_init, METH_NOARGS,
     "mpi_init(): start MPI with MPI_THREAD_MULTIPLE (nothing if it runs already at that level); weft "
     "finalizes it at exit if weft started it."},
    {"mpi_finalize", (PyCFunction)mod_mpi_finalize, METH_NOARGS,
     "mpi_finalize(): end MPI (after every communicator across ranks is closed; nothing if it is not running)."},
    {"_grid_block", (PyCFunction)mod_grid_block, METH_VARARGS, "weft_grid_block_get (for weft.Grid)"},
    {"_grid_exchange", (PyCFunction)mod_grid_exchange, METH_VARARGS, "weft_grid_exchange (for weft.Grid)"},
    {NULL, NULL, 0, NULL}};
