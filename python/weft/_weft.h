/*
 * _weft.h — the one private header of the `weft._weft` extension: what
 * crosses its C files.  Names declared here are prefixed weft_py_; every
 * other function and table of a file is static.
 *
 * Python tasks on Weft's C workers, with the GIL held only while Python code
 * runs.  The design, in short (python/README.md says more):
 *
 *   - A task's C argument is a small malloc'd cell pointing at the Python Task
 *     object (one strong reference).  The C body (weft_py_trampoline, body.c)
 *     attaches the worker's persistent thread state, calls fn(*args), stores
 *     the result or the exception (with its traceback) on the Task, drops the
 *     references to fn/args and to the Task, and detaches (or keeps the
 *     GIL for the worker's next body, where handing it over would only
 *     cost: gil.c).  The argument destructor (weft_py_arg_destroy) then
 *     only has to free the cell, without the GIL; it takes the GIL only
 *     for a task that never ran (cancelled, or a failed spawn).
 *   - Each worker creates one PyThreadState when it starts and deletes it
 *     when it stops (gil.c; deleting needs the GIL, so destroy runs with the
 *     GIL released), and every blocking call (waits, unregister, destroy, a
 *     spawn that may block under backpressure) releases the GIL.
 *   - weft_py_tl_attached says "this thread holds the GIL inside a Weft call
 *     we made"; a body or an argument destructor that the C runtime runs
 *     inline on such a thread (helping while spawning, a failed spawn) then
 *     runs without touching the GIL.
 *   - Workers hand the GIL to each other without sleeping: a worker that
 *     needs the GIL while another worker holds it spins briefly instead of
 *     sleeping in CPython's condition variable, and takes it the moment it
 *     is released.  The spin reads the GIL's own state where its layout is
 *     known (gil_state.c), else the workers' claim on the runtime's
 *     `py_busy` counter.  That turns the futex hand-off of the GIL into a
 *     cache-line transfer (gil.c; see bench/py/).
 *   - Task spaces are the C runtime's (weft_space_*): a weft.TaskSpace binds
 *     to a C space of the runtime it is first used with, and gives each
 *     Python key an integer index there.  T[i] is a Task object in the
 *     DECLARED state until a task is spawned into it; used as a dependency
 *     before that, it stands for the C space's placeholder of its key, so
 *     every task enters the C runtime when it is spawned (nothing is held
 *     back in Python), cycles are refused by the C space, and keys never
 *     spawned cancel their dependents when the runtime closes (space.c),
 *     which reports them as a weft.TaskWarning (runtime.c).  A key with a
 *     slice, range, list or negative int in it names a weft.TaskList of
 *     slots instead (weft/_space.py).
 *
 * Module state holds every type and object; the static storage is
 * thread-local facts describing the thread the code runs on (a worker
 * thread belongs to exactly one runtime, so to one interpreter), and the
 * count of workers spinning for the GIL, which share the process's cores
 * whatever their runtime (gil.c).
 *
 * The files, by concern:
 *   module.c   module state, init, module-level functions, error helpers
 *   gil.c      thread-locals, clock, GIL hand-off between workers, worker hooks
 *   gil_state.c  where CPython keeps the GIL's state (its internal headers, per
 *              version), for the hand-off
 *   body.c     the task body trampoline, its argument destructor, failure records
 *   kind.c     a task's names: its label in messages, its kind for the models
 *   coro.c     `async def` bodies: the coroutine driver (suspending a task in a C
 *              continuation, weft_ctx_continue), and what a coroutine may await
 *   runtime.c  weft.Runtime, and which runtime weft.spawn & co. mean
 *   task.c     weft.Task, and the exceptions of failed/cancelled tasks
 *   space.c    weft.TaskSpace
 *   data.c     the registry of the memory ranges buffers cover: one weft.Data
 *              per range; register, look up, unregister
 *   data_type.c  weft.Data, the Python type: methods, getters, repr, dealloc
 *   accesses.c the C accesses of a spawn, from the objects it names
 *   tiles.c    Data.partition, and the tile bookkeeping
 *   scratch.c  the C handles of spawn's scratch=
 *   reduce.c   the element type of a reduction's buffer
 *   spawn.c    spawning (into task spaces too), the decorator form
 *   wait.c     timeouts, waiting for a task or for a runtime, Ctrl-C
 *   view.c     weft.View: a task's data on its device (buffer protocol, the
 *              array interfaces, DLPack), valid until the task ends
 *   place.c    placement, weft.Context's C side, ctx.queue / queue_native
 *   native.c   weft.Native: a C function as a task's body, run without Python
 */
#ifndef WEFT_PY_WEFT_H
#define WEFT_PY_WEFT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gil_state.h"
#include "weft.h" /* the core's public API: the extension includes nothing else of it */

#if PY_VERSION_HEX < 0x030B0000
#error "weft needs CPython 3.11 or newer"
#endif

#ifndef Py_BEGIN_CRITICAL_SECTION
#define Py_BEGIN_CRITICAL_SECTION(op) {
#define Py_END_CRITICAL_SECTION() }
#endif

/* TSan runs of the extension against an uninstrumented (free-threaded)
 * interpreter: TSan cannot see CPython's own synchronisation, so the
 * extension declares the hand-offs it relies on (scripts/python-sanitized-
 * test.sh thread ft; python/tsan-ft.supp lists what stays CPython's):
 *  - a thread that touched a Task releases it before dropping its
 *    reference; Task_dealloc acquires it (the reference count orders them);
 *  - Task_dealloc releases the memory before freeing it and a new Task
 *    acquires it (the allocator orders reuse);
 *  - a Task published through a runtime dict is released before and
 *    acquired after (the dict's lock orders them);
 *  - a C call queued with ctx.queue_native is released by the stream's
 *    thread after the call and acquired before its memory is freed (the
 *    task's end, the cell's drain and biased reference counting order
 *    them; place.c).
 * No-ops in other builds. */
#if defined(__SANITIZE_THREAD__)
#define WEFT_PY_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WEFT_PY_TSAN 1
#endif
#endif
#ifdef WEFT_PY_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define WEFT_PY_HANDOFF_RELEASE(p) __tsan_release((void *)(p))
#define WEFT_PY_HANDOFF_ACQUIRE(p) __tsan_acquire((void *)(p))
#else
#define WEFT_PY_HANDOFF_RELEASE(p) ((void)0)
#define WEFT_PY_HANDOFF_ACQUIRE(p) ((void)0)
#endif

/* A critical section on o (PEP 703; nothing with the GIL) that TSan sees as
 * an acquire and release of o.  Pairs within one block, as CPython's. */
#define WEFT_PY_CS_BEGIN(o)                       \
    Py_BEGIN_CRITICAL_SECTION(o);                 \
    void *_weft_cs_obj = (void *)(o);             \
    (void)_weft_cs_obj;                           \
    WEFT_PY_HANDOFF_ACQUIRE(_weft_cs_obj);
#define WEFT_PY_CS_END()                          \
    WEFT_PY_HANDOFF_RELEASE(_weft_cs_obj);        \
    Py_END_CRITICAL_SECTION()

/* Everything declared from here on stays inside the extension (and binds
 * locally: no PLT, local-dynamic TLS). */
#pragma GCC visibility push(hidden)

/* The extension's own clock and pause instruction.  Its times never cross
 * into the core: what it hands weft.h is a duration (timeout_ns), so its
 * clock need not be the core's (both read CLOCK_MONOTONIC anyway). */
static inline uint64_t
weft_py_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One spin of a busy wait: the CPU's pause (x86) or yield (Arm) hint. */
static inline void
weft_py_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* ------------------------------------------------------------------------ */
/* Module state (module.c)                                                   */
/* ------------------------------------------------------------------------ */

typedef struct {
    PyTypeObject *Runtime_T;
    PyTypeObject *Task_T;
    PyTypeObject *Space_T;
    PyTypeObject *Data_T;
    PyTypeObject *View_T;
    PyTypeObject *Comm_T;
    PyTypeObject *Native_T;
    PyTypeObject *Acquired_T;
    PyTypeObject *Await_T;
    PyObject *CancelledError;
    /* weft.TaskWarning (a RuntimeWarning): what closing a runtime reports
     * that nobody saw — keys depended on but never spawned, task exceptions
     * never retrieved (runtime.c); a wait that only a spawn can end
     * (wait.c); functions of different code sharing a kind (kind.c). */
    PyObject *TaskWarning;
    /* Task-space helpers of weft/_space.py (registered at import by
     * weft/__init__.py through _set_space): the expansion of a key naming
     * several slots (T[0:4], T[-1]) into a weft.TaskList, that class, and
     * the flattening of a deps= value holding lists, TaskLists or whole
     * spaces into a list of Tasks. */
    PyObject *space_expand, *TaskList_cls, *deps_flatten;
    /* weft.unordered (weft/_access.py, registered at import through
     * _set_access): an access that the data does not order against the
     * other unordered ones (WEFT_UNORDERED); its `obj` is the buffer. */
    PyObject *Unordered_cls;
    /* MPI was started by weft (weft.mpi_init, or Communicator.mpi with MPI
     * not running): weft._close_all finalizes it at exit, after closing
     * every runtime (and so every communicator).  Atomic: any thread may
     * create a communicator. */
    _Atomic int mpi_started;
    PyObject *stack;      /* list of (runtime, owner): runtimes entered with `with`,
                             innermost last; owner is the task whose body entered the
                             block, or None outside tasks */
    PyObject *open;       /* list: runtimes not closed yet (keeps them alive) */
    PyObject *empty_tuple;
    PyObject *s_deps, *s_reads, *s_writes, *s_readwrites, *s_commutes, *s_name,
        *s_priority, *s_task, *s_kwargs, *s_runtime, *s_add_note, *s_placement, *s_share, *s_memory,
        *s_device_data, *s_reduces, *s_scratch, *s_cost, *s_kind;
    /* functools.partial, whose func a spawn's kind check looks through
     * (kind.c, weft_py_spawn_kind). */
    PyObject *Partial_T;
    /* Placement helpers of weft/_placement.py (registered at import by
     * weft/__init__.py through _set_placement): the normaliser a spawn with
     * placement= calls, the runner of a body on CUDA devices (their array
     * libraries' current device and stream), the Variants, DeviceSet and
     * Context classes, and the names of a DeviceSet's fields. */
    PyObject *place_normalize, *place_call, *Variants_cls, *DeviceSet_cls, *Context_cls;
    PyObject *s_cpu, *s_gpus, *s_gpu, *s_gset;
} modstate;

extern struct PyModuleDef weft_py_module;

static inline modstate *
weft_py_state_of_module(PyObject *m)
{
    return (modstate *)PyModule_GetState(m);
}

/* The state of the module that defines type tp (NULL with an exception). */
modstate *weft_py_state_of_type(PyTypeObject *tp);

/* ------------------------------------------------------------------------ */
/* Objects                                                                   */
/* ------------------------------------------------------------------------ */

/* Free-threaded builds (PEP 703): what protects the extension's state.
 *  - TaskObject.phase moves DECLARED -> SPAWNING -> SUBMITTED by atomic
 *    compare-and-swap: a spawn claims a slot before it writes any field, so
 *    of two spawns into one slot exactly one gets past the claim (a failed
 *    spawn puts it back to DECLARED).  h is stored before phase SUBMITTED.
 *  - Fields a spawn fills (fn, args, kwargs, rt, priority, name) belong to
 *    the claiming thread until submission, then to the body.  result, exc
 *    and ran are written by the body before its C task completes, and read
 *    only after a wait saw it complete (the C runtime orders them).  The
 *    CancelledError of a task that never ran is made once, in a critical
 *    section on the task (weft_py_task_cancel_exc).
 *  - A slot's cancel_requested and ph, and a space's binding (rt, s, cname,
 *    keys), change only in a critical section on the space.
 *  - Runtime dicts (failures, failed, spaces) are used through single dict
 *    operations, which lock the dict; iteration happens in a critical
 *    section on the dict.  Close runs once (close_lock).
 *  - The data registry (weft_py_registry below, and the fields of each Data
 *    that it lists) is under the registry's own lock, a plain mutex, not a
 *    critical section: CPython suspends a thread's critical sections
 *    whenever it blocks inside one (on a nested object's lock, to let the
 *    world stop), so a registry step made of several changes would not have
 *    been atomic.  The lock is held only for steps of plain C (data.c).
 * A critical section may be suspended when its thread blocks (a wait, a
 * spawn under backpressure): nothing above relies on one spanning a wait. */
enum task_phase {
    PH_DECLARED = 0,  /* a task-space slot nobody spawned into yet */
    PH_SPAWNING = 1,  /* a slot claimed by a spawn in progress (h not yet valid) */
    PH_SUBMITTED = 2  /* in the C runtime (h is valid) */
};

/* A registered object: the Data that holds it (data.c). */
typedef struct {
    PyObject *key;            /* NULL: a free slot */
    struct DataObject *data;  /* strong: the registry's reference */
} weft_py_objslot;

/* A runtime's data registry (data.c): which weft.Data stands for which
 * object and which memory, and the scratch= handles (scratch.c).  The
 * fields below `lock` are plain C (malloc'd arrays), so that every step on
 * them runs no Python code. */
typedef struct {
    /* lock protects: the fields below, and in every Data of this runtime its
     * handle d (once registered), has_view, closing, acquired, and its
     * tiles' fields (tiles, grid, partitioning).  Each step under it is
     * plain C: no Python code or API that could run any, no Python
     * allocation (memory comes from malloc, never PyMem: tracemalloc's
     * hooks take a PyMutex), no reference dropped, no GIL, critical
     * section or PyMutex taken, no wait; the only other locks taken under
     * it are the C core's, by weft_data_wont_use (brief ones: it never
     * waits, and the core calls no extension code with a lock held).  So a
     * thread takes it while attached (holding the GIL on a GIL build, where
     * it is then never contended) and never detaches while holding it: a
     * thread waiting for it delays a stop-the-world pause only until the
     * holder's step ends, and the holder needs nothing another thread
     * holds.  Lock order: GIL / thread state, then this lock, then the C
     * core's locks.  The garbage collector reads objs without it (world
     * stopped, or the GIL held: no thread is inside a step then). */
    pthread_mutex_t lock;
    weft_py_objslot *objs;      /* open addressing by object address: every registered Data
                                   under its own object (which it keeps alive) */
    size_t objcap, nobjs;       /* objcap: 0 or a power of two, at least twice nobjs */
    /* The registered non-empty memory ranges: Data sorted by (lo, hi),
     * borrowed (objs holds them); max_span is at least the longest one's
     * size, to bound overlap scans. */
    struct DataObject **spans;
    size_t nspans, capspans, max_span;
    /* The C handles of spawn's scratch= (scratch.c, weft_py_scratch_handle):
     * one registered with no memory (weft_data_register(rt, NULL, n)) per
     * size in bytes asked for, made on first use and kept while the
     * runtime is open (its destroy unregisters them). */
    struct weft_py_scratch_size {
        size_t n;
        weft_data *h;
    } *scratch;
    size_t nscratch, capscratch;
} weft_py_registry;

/* Workers whose thread state the GIL hand-off recognises as the GIL's
 * holder (gil.c); the others' are not spun against. */
#define WEFT_PY_GIL_WORKERS_KNOWN 64

typedef struct RuntimeObject {
    PyObject_HEAD
    weft_runtime *_Atomic rt; /* NULL once closed (atomic: read by any thread, cleared by close) */
    pthread_mutex_t close_lock; /* one close at a time (taken without the GIL / detached) */
    PyObject *module; /* strong: keeps the module state alive */
    modstate *st;
    PyInterpreterState *interp;
    unsigned workers;
    const char *policy;         /* its placement policy's name (weft_runtime_policy; static) */
    int models;                 /* its policy places tasks by performance models ("dmda"):
                                   tasks are given their kind (spawn.c) */
    _Atomic size_t inflight;    /* tasks of ours in the C runtime (diagnostics: weft._inflight) */
    _Atomic int py_busy;        /* workers holding or taking the GIL now (the claim,
                                   where the GIL's state is not known: gil.c) */
    _Atomic int dev_gil_wait;   /* device threads waiting for the GIL now: workers let them
                                   go first (gil.c) */
    int spawn_gil;              /* SPAWN_HOLD, SPAWN_RELEASE or SPAWN_YIELD */
    PyObject *failures;         /* dict Task -> None: failures since the last wait_all that
                                   the program has not retrieved, in order (strong) */
    PyObject *failed;           /* dict PyLong(C task id) -> PyLong(Task *): every failed
                                   Task still alive (borrowed: Task_dealloc removes its entry
                                   before it clears the task), to find the exception that a
                                   cancelled dependent names as its cause */
    weft_py_registry reg;       /* its registered data (its own lock) */
    PyObject *spaces;           /* dict C space name -> TaskSpace bound to this runtime (strong) */
    uint64_t next_space;        /* serial for the C names of bound spaces */
    uint64_t spin_gil_ns;       /* the longest spin for another worker's GIL claim */
    uint64_t gil_hold_ns;       /* the longest a worker keeps the GIL over bodies (gil.c);
                                   0: never */
    _Atomic uint64_t gil_kept;  /* bodies that found the GIL kept from their worker's last
                                   (stats()["gil_kept"]) */
    _Atomic int py_in_body;     /* a worker took the GIL for a body and has not given it back
                                   (it may have released it inside the body); written with
                                   the GIL held (gil.c) */
    _Atomic uint64_t gil_spin_now; /* the spin now, 0..spin_gil_ns: adapts to whether spins
                                   get the claim in time (gil.c; relaxed, a lost update
                                   between workers only shifts it) */
    int gil_off;                /* free-threaded build running without the GIL: no hand-off */
    weft_py_gil_state gil;      /* the GIL's own state where its layout is known (gil_state.c),
                                   else NULLs: the hand-off spins on the claim (gil.c) */
    PyThreadState *_Atomic worker_ts[WEFT_PY_GIL_WORKERS_KNOWN]; /* the workers' thread
                                   states (by worker number; NULL when not running): the GIL's
                                   holder is a worker when it is one of these (gil.c) */
    _Atomic unsigned worker_ts_n; /* worker_ts[0, worker_ts_n) may be set */
    _Atomic int gil_taking;     /* a worker is taking the GIL (its turn; gil.c) */
    _Atomic int gil_waiting;    /* workers between weft_py_busy_enter and _taken: waiting
                                   for the GIL now (gil.c) */
    struct cell *_Atomic cells; /* finished cells whose `placed` reference is to drop
                                   (weft_py_release_drain) */
    struct TaskObject *_Atomic released; /* tasks whose bodies ran, references to drop
                                   (gil_off only; weft_py_release_drain) */
    _Atomic int closing;        /* set once nothing runs any more, before destroy */
    PyObject *comms;            /* list: its open weft.Communicators (strong; comm.c), closed
                                   with it */
    PyObject *reductions;       /* dict weft.Reduction -> int, its operator in this runtime
                                   (spawn.c; strong: the C functions it names stay alive until
                                   the runtime is freed, after its destroy) */
    PyObject *unobserved;       /* dict PyLong(C task id) -> str: the failures nobody has seen
                                   yet (no result()/exception()/wait() on the task, no
                                   wait_all raised it), each as "task 'f' raised ValueError(...)";
                                   reported as a weft.TaskWarning when the runtime closes.
                                   Single dict operations (they lock the dict). */
    PyObject *kinds;            /* dict str -> (code, description), or -> None once told: for
                                   each kind its tasks took from their functions (models
                                   only), the code the first one ran, to tell once that two
                                   functions share a kind (kind.c, weft_py_spawn_kind; a
                                   critical section on the dict around each look and change) */
    PyObject *weakreflist;
} RuntimeObject;

typedef struct TaskObject {
    PyObject_HEAD
    RuntimeObject *rt;     /* strong; NULL while declared */
    /* The C handle once submitted.  h and phase are atomic (sequentially
     * consistent): the spawning thread stores h before phase, so a thread
     * that reads PH_SUBMITTED finds the handle (free-threaded builds). */
    weft_task *_Atomic h;
    PyObject *fn, *args, *kwargs;
    PyObject *bodies;      /* tuple: the body of each placement alternative (None: fn), or NULL */
    /* The Data of each access the spawn named, in C access order (reads
     * first, then writes, readwrites, commutes, reduces), then for each
     * scratch buffer (scratch=, C accesses right after those) the item that
     * asked for it (an int, a buffer or a weft.Data: its view's layout),
     * for views (view.c); NULL without accesses.  Set by the spawn, taken
     * by the body like fn. */
    PyObject *acc;
    uint32_t acc_nreads;   /* its first acc_nreads accesses are read-only */
    uint32_t acc_nreduces; /* its last acc_nreduces Data are reductions (reduces=) */
    uint32_t acc_nscratch; /* acc's last acc_nscratch items are scratch buffers (scratch=) */
    int device_data;       /* spawn(device_data=True): the accesses are on the task's device */
    PyObject *result;
    PyObject *exc;         /* its failure: what the body, or a callable it queued on a GPU
                              stream (place.c), raised first (critical section on the task) */
    PyObject *name;        /* str: user name or space label; may be NULL */
    PyObject *space;       /* the TaskSpace this slot belongs to (strong) */
    PyObject *key;         /* its key there */
    int64_t index;         /* the key's index in the C space */
    weft_task *ph;         /* the C space's handle for the key while declared (lent by the space) */
    _Atomic int phase;
    int priority;
    double cost;                /* cost= (weft_task_desc.cost; 0: none) */
    PyObject *kind;        /* str: the weft_task_desc.kind of its spawn (kind=, or where the
                              runtime keeps models, the one its function gives), for its
                              continuations' ("<kind> (resumed)", coro.c); NULL: none */
    int cancel_requested;  /* cancel() on a slot of an unbound space (critical section on the space) */
    int ran;               /* the body finished (result/exc are final) */
    _Atomic int retrieved; /* its exception was handed to the user */
    _Atomic int depended;  /* a slot some task (or await, or body waiting) followed while declared:
                              reported at close if nobody ever spawned into it */
    _Atomic uint64_t unobs_id; /* its key in rt->unobserved while its failure is unseen (0: none) */
    uint64_t fail_id;      /* its C id, under which rt->failed lists it (0: not listed) */
    /* A task without a Python body (a communication operation, comm.c):
     * its final C status (weft_task_status), recorded while the runtime is
     * open, for questions asked after it closed (its handle unusable then);
     * -1 unknown.  Atomic: recorded by whichever thread prunes it. */
    _Atomic int cstatus;
    struct TaskObject *release_next; /* in rt->released */
    /* An `async def` body (coro.c).  coro: its coroutine while the task is
     * suspended in an await (strong), handed from the segment that
     * suspended it to the continuation that resumes it (the C runtime
     * orders the two: the continuation is spawned after coro is stored);
     * NULL otherwise.  cont_pl / cont_npl: the spawn's placements (PyMem,
     * owned), for the continuations of a placed task; NULL / 0 without.
     * cid: the C id of its first segment, under which a failure in a later
     * segment is recorded (its dependents' CancelledError names it). */
    PyObject *coro;
    weft_placement *cont_pl;
    size_t cont_npl;
    uint64_t cid;
    /* seg_acc: acc, for the segment after an await (strong; set before
     * the continuation is spawned, taken by it).  pin: where the
     * continuations of a task holding data on its GPUs run (device_data=True):
     * the GPUs of its first segment, whose data they reach (has_pin set). */
    PyObject *seg_acc;
    weft_placement pin;
    int has_pin;
    PyObject *weakreflist;
} TaskObject;

typedef struct SpaceObject {
    PyObject_HEAD
    PyObject *name;
    PyObject *tasks;       /* dict key -> Task */
    PyObject *keys;        /* list index -> key */
    RuntimeObject *rt;     /* the runtime its C space belongs to (borrowed: cleared when it closes) */
    weft_space *s;         /* that C space, or NULL while unbound */
    PyObject *cname;       /* its C name, the key in rt->spaces */
} SpaceObject;

typedef struct DataObject {
    PyObject_HEAD
    /* Set when it is made, then read without a lock: rt, obj, view (but for
     * its release), readonly, dummy, lo, hi. */
    RuntimeObject *rt; /* strong */
    PyObject *obj;     /* the buffer object (strong): the first one named for this memory */
    Py_buffer view;
    int has_view;      /* view not released yet (rt->reg.lock) */
    int readonly;      /* obj's buffer is read-only */
    weft_data *d;      /* NULL once unregistered (rt->reg.lock once in the registry) */
    char dummy;        /* stands in for a zero-length buffer */
    /* Its place in the runtime's registry (data.c), under rt->reg.lock. */
    uintptr_t lo, hi;  /* the memory it covers, [lo, hi); lo == hi: none (a zero-length
                          buffer, found by its object only, never in rt->reg.spans) */
    int closing;       /* unregister in progress: no new task names it */
    int acquired;      /* acquisitions holding its handle (acquire.c): unregister refuses */
    /* Tiles (tiles.c, Data.partition).  A partitioned Data: `tiles`, a tuple
     * of its tiles (row-major, strong), set once by partition under
     * rt->reg.lock and never changed again (the collector clears it only
     * once the Data is unreachable), with grid_rows x grid_cols;
     * `partitioning` (rt->reg.lock) while a partition is in progress.  A
     * tile: `parent` (strong) and the fields after it, set when it is made
     * and then only read; a tile is never in the registry's objs or spans
     * (lo == hi == 0): it is a C-level sub-handle of its parent's range,
     * and its handle d is cleared (rt->reg.lock) when the parent is
     * unregistered or the runtime closes. */
    PyObject *tiles;
    unsigned grid_rows, grid_cols, grid_halo; /* a tile's: its parent's tiling, set when made */
    int partitioning;
    struct DataObject *parent;
    weft_tile_info ti;       /* where it lies in the parent (weft_data_tile_info) */
    int tndim;               /* 1 for a 1-D parent, else 2 */
    Py_ssize_t elem;         /* bytes per element */
    char format[4];          /* the parent's struct format of one element */
} DataObject;

typedef struct cell {
    TaskObject *t;     /* strong until the body ran or the task was dropped */
    RuntimeObject *rt; /* borrowed: an open runtime is kept alive by st->open */
    /* A task placed on GPUs whose body returned: strong until it finished,
     * since its device work may still fail it (weft_py_on_finish).  A
     * native body's task too, wherever it ran: its worker hands the cell's
     * reference here instead of dropping it without a thread state. */
    TaskObject *placed;
    uint64_t id;       /* its C id (with placed) */
    struct cell *next; /* in r->cells once finished (placed to drop) */
    /* The lifetime of the views its body made (view.c): made by the body on
     * its first view, ended by weft_py_arg_destroy when the task ends. */
    struct weft_py_scope *scope;
    /* What C functions its body queued with ctx.queue_native point into
     * (their calls, function objects, buffers): a list made by the body's
     * thread on first use, strong until the task ended (dropped with
     * placed, by a thread with a thread state), or NULL. */
    PyObject *keep;
    /* A native body's call (native.c): made by the spawn, freed when the
     * task ends (weft_py_arg_destroy, any thread); NULL for a Python body. */
    struct weft_py_native_call *native;
    /* A continuation's cell (coro.c): its body resumes t->coro instead of
     * calling t->fn. */
    int resume;
} cell;

/* ------------------------------------------------------------------------ */
/* Thread-local facts about the current thread (gil.c)                       */
/* ------------------------------------------------------------------------ */

/* Defined in this shared object: the local-dynamic model lets a function
 * find all three with one __tls_get_addr, as when they were static. */
#if defined(__GNUC__)
#define WEFT_PY_TLS __attribute__((tls_model("local-dynamic")))
#else
#define WEFT_PY_TLS
#endif

/* The persistent thread state of this worker thread (NULL elsewhere). */
extern _Thread_local PyThreadState *weft_py_tl_ts WEFT_PY_TLS;
/* The task whose Python body runs on this thread now (innermost). */
extern _Thread_local TaskObject *weft_py_tl_cur WEFT_PY_TLS;
/* Non-zero while this thread holds the GIL inside a call into Weft. */
extern _Thread_local int weft_py_tl_attached WEFT_PY_TLS;
/* The C context of the placed body running on this thread (ctx.queue). */
extern _Thread_local weft_ctx *weft_py_tl_ctx WEFT_PY_TLS;
/* Its weft.Context, made when first asked for (weft.context()), or NULL. */
extern _Thread_local PyObject *weft_py_tl_ctxobj WEFT_PY_TLS;
/* The task whose coroutine weft's driver is stepping on this thread now
 * (coro.c): awaiting a weft task anywhere else is refused. */
extern _Thread_local TaskObject *weft_py_tl_driving WEFT_PY_TLS;
/* The continuation cell being spawned by this thread's driver (coro.c): a
 * spawn that fails destroys it there, and its coroutine is not closed. */
extern _Thread_local void *weft_py_tl_suspending WEFT_PY_TLS;

/* ------------------------------------------------------------------------ */
/* Placement (place.c)                                                       */
/* ------------------------------------------------------------------------ */

/* A spawn's placement= / share= / memory= (or a weft.variants function) as
 * C alternatives: *fn becomes the default body; *out (PyMem) has *n entries;
 * *bodies is a new tuple of per-alternative bodies (None: *fn), or NULL when
 * none has its own.  0, or -1 with an exception. */
int weft_py_placement(modstate *st, PyObject **fn, PyObject *placement, PyObject *share, PyObject *memory,
                      weft_placement **out, size_t *n, PyObject **bodies);
/* List t's failure (exc, raised by fn) for wait_all and for the
 * CancelledError of its dependents (body.c). */
void weft_py_record_failure(RuntimeObject *r, TaskObject *t, PyObject *fn, PyObject *exc, uint64_t id);
/* The first failure is the task's (its body's, a callable it queued on a
 * GPU stream, or its device work's): store exc (stolen; NULL does nothing)
 * as t's exception unless it has one, and return 1; else drop exc, 0.  The
 * caller then records a stored one (weft_py_record_failure). */
int weft_py_task_set_exc(TaskObject *t, PyObject *exc);
/* Call a body placed on GPUs through weft/_placement.py's runner. */
PyObject *weft_py_call_placed(modstate *st, weft_ctx *ctx, PyObject *fn, PyObject *args, PyObject *kwargs);
extern PyMethodDef weft_py_place_methods[];

/* ------------------------------------------------------------------------ */
/* GIL hand-off (gil.c)                                                      */
/* ------------------------------------------------------------------------ */

/* Claim / drop r->py_busy around holding the GIL on a worker: enter before
 * taking the GIL, taken right after (where the GIL's state is known it ends
 * the turn to take it: gil.c), exit after releasing it. */
void weft_py_busy_enter(RuntimeObject *r);
void weft_py_busy_taken(RuntimeObject *r);
void weft_py_busy_exit(RuntimeObject *r);
/* Threads other than workers (a wait's slice ending on the program's
 * thread, to check signals) between giving the GIL up in a wait and taking
 * it back: workers let them go first (gil.c, weft_py_busy_enter). */
extern _Atomic int weft_py_outside_gil_wait;
/* Take the GIL on a worker (or any thread not holding it); returns what
 * weft_py_gil_give needs to hand it back.  r: the runtime whose claim to
 * take (NULL: none). */
int weft_py_gil_take(RuntimeObject *r);
void weft_py_gil_give(RuntimeObject *r, int g);
/* At a body's start: whether this worker kept the GIL from its last body
 * (then the GIL is the body's now, taken as weft_py_gil_take(r) takes it). */
int weft_py_gil_held_over(RuntimeObject *r);
/* At the end of a body that took the GIL (g from weft_py_gil_take(r), or
 * -1 when it was held over): keep it for the worker's next body where the
 * policy and the C runtime allow (weft_ctx_hold_over), else give it. */
void weft_py_gil_body_give(RuntimeObject *r, int g, weft_ctx *ctx);
/* Take the GIL on a device thread (a virtual GPU's queue thread, CUDA's
 * host-function thread) to run a queued callable, ahead of the workers;
 * own_thread: a virtual GPU's queue thread (gil.c).  Returns what
 * weft_py_dev_gil_give needs. */
int weft_py_dev_gil_take(RuntimeObject *r, int own_thread);
void weft_py_dev_gil_give(int g);
/* The C runtime's on_worker_start / on_worker_stop hooks (arg: the Runtime). */
void weft_py_on_worker_start(unsigned worker, void *arg);
void weft_py_on_worker_stop(unsigned worker, void *arg);
/* The C runtime's on_worker_let_go hook: give the GIL a body held over. */
void weft_py_on_worker_let_go(unsigned worker, void *arg);

/* The runtime whose GIL claim this worker holds (inside a body), or NULL. */
static inline RuntimeObject *
weft_py_owner_rt(void)
{
    return weft_py_tl_cur ? weft_py_tl_cur->rt : NULL;
}

/* Release the GIL around a C call that may block or run tasks inline, on
 * any thread.  On a worker inside a body its claim is dropped too, so the
 * other workers of its runtime do not spin, and taken again before the
 * GIL.  Any other thread (the program's, in a wait or a spawn held back)
 * counts itself in weft_py_outside_gil_wait while it takes the GIL back,
 * so that workers let it go first (gil.c): every wait of the program's
 * thread goes through here, or its signal handlers wait for the bodies. */
#define BEGIN_NOGIL                                                      \
    {                                                                        \
        int _prev_att = weft_py_tl_attached;                                 \
        RuntimeObject *_own_rt = weft_py_tl_ts ? weft_py_owner_rt() : NULL;  \
        weft_py_tl_attached = 0;                                             \
        PyThreadState *_save = PyEval_SaveThread();                          \
        if (_own_rt) weft_py_busy_exit(_own_rt);

#define END_NOGIL                                                        \
        if (_own_rt) weft_py_busy_enter(_own_rt);                            \
        else atomic_fetch_add(&weft_py_outside_gil_wait, 1);                 \
        PyEval_RestoreThread(_save);                                         \
        if (_own_rt) weft_py_busy_taken(_own_rt);                            \
        else atomic_fetch_sub(&weft_py_outside_gil_wait, 1);                 \
        weft_py_tl_attached = _prev_att;                                     \
    }

/* ------------------------------------------------------------------------ */
/* Errors (module.c)                                                         */
/* ------------------------------------------------------------------------ */

/* Take the raised exception (normalized, with its traceback); NULL if none. */
PyObject *weft_py_fetch_exc(void);
/* Raise e again (e is not stolen). */
void weft_py_raise_exc(PyObject *e);
/* Raise the Python exception for a Weft error code (MemoryError for
 * WEFT_ENOMEM, ValueError for WEFT_EINVAL and WEFT_ENODEV — an argument
 * asking for devices the runtime lacks —, RuntimeError for the others,
 * WEFT_EDEADLK included), with the core's message; returns NULL. */
PyObject *weft_py_err_weft(int rc, const char *what);

/* ------------------------------------------------------------------------ */
/* Task bodies and failures (body.c)                                         */
/* ------------------------------------------------------------------------ */

int weft_py_trampoline(weft_ctx *ctx, void *arg);
/* A body's first step: a task run before weft_spawn returned on the
 * spawning thread gets its handle published (t->h, then PH_SUBMITTED). */
void weft_py_task_publish(TaskObject *t, weft_ctx *ctx);
void weft_py_arg_destroy(void *arg);
/* on_finish of a task placed on GPUs: a failure of its device work alone
 * (the body returned) becomes the task's exception, for wait_all. */
void weft_py_on_finish(void *arg, int status);
/* gil_off: a worker hands t (the cell's reference, and fn/args/kwargs kept
 * on t) to r's release list instead of dropping them. */
void weft_py_release_defer(RuntimeObject *r, TaskObject *t);
/* Drop what the release list holds (any thread with a thread state; spawn,
 * waits and close call it).  Cheap when the list is empty. */
void weft_py_release_drain(RuntimeObject *r);
/* The program has seen t's exception: wait_all no longer raises it. */
void weft_py_task_retrieved(TaskObject *t);
/* The program has seen t's failure (a wait on it, or a wait_all that raised
 * it): closing the runtime does not report it as never retrieved. */
void weft_py_task_observed(TaskObject *t);
/* t is being freed: forget it as a failed task. */
void weft_py_task_forget_failure(TaskObject *t);
/* The exception of the live failed task with this C id (new ref), or NULL. */
PyObject *weft_py_find_failure(RuntimeObject *r, uint64_t id);

/* ------------------------------------------------------------------------ */
/* A task's names (kind.c)                                                   */
/* ------------------------------------------------------------------------ */

/* A short name for an unnamed task's messages: the body's function name
 * (fn.__name__ of a function or method, a builtin's name, a class's name),
 * as a C string borrowed from fn (valid while fn lives), or NULL. */
const char *weft_py_fn_label(PyObject *fn);
/* The kind of a spawn of fn on r (weft_task_desc.kind), a new str, into
 * *kind: kind= (given, a str or None), checked (ValueError naming kind=);
 * else, where r keeps models and the task has placements (npl), the one
 * fn gives (its qualified name: weft_py_fn_kind), after telling once per
 * kind (weft.TaskWarning) that two functions of different code gave it;
 * else NULL.  0, or -1 with an exception (*kind NULL). */
int weft_py_spawn_kind(RuntimeObject *r, PyObject *fn, PyObject *given, size_t npl, PyObject **kind);
/* The kind of a continuation of an `async def` body whose spawn's kind
 * is kind: "<kind> (resumed)", shortened as a long kind is, into buf. */
const char *weft_py_resumed_kind(PyObject *kind, char buf[WEFT_KIND_MAX + 1]);
/* The room a task's name takes in a weft_task_desc (the core copies the
 * first 31 bytes). */
#define WEFT_PY_DESC_NAME 32
/* t's name (a str) for a weft_task_desc's name, as a spawn and a
 * coroutine's continuation pass it: its UTF-8, cut to the first 31 bytes,
 * in buf.  Returns buf, or NULL when t has no name or its UTF-8 is refused
 * (no exception is left set). */
const char *weft_py_desc_name(TaskObject *t, char buf[WEFT_PY_DESC_NAME]);

/* ------------------------------------------------------------------------ */
/* Runtimes (runtime.c)                                                      */
/* ------------------------------------------------------------------------ */

extern PyType_Spec weft_py_runtime_spec;
/* The runtime weft.spawn & co. use now (borrowed), or NULL (with a
 * RuntimeError unless quiet). */
RuntimeObject *weft_py_current_runtime(modstate *st, int quiet);
/* -1 with a RuntimeError naming `what` if r is closed or closing. */
int weft_py_check_open(RuntimeObject *r, const char *what);
int weft_py_runtime_close(RuntimeObject *r);
PyObject *weft_py_runtime_data(RuntimeObject *r, PyObject *obj);

/* How spawn treats the GIL (Runtime(spawn_gil=...), env WEFT_PY_SPAWN_GIL):
 * hold it (default: a spawn tries WEFT_SPAWN_NOWAIT with the GIL held and
 * releases it only for a spawn that must wait), release it around
 * every weft_spawn, or release it only while a worker waits for it. */
enum { SPAWN_HOLD = 0, SPAWN_RELEASE = 1, SPAWN_YIELD = 2 };

/* ------------------------------------------------------------------------ */
/* Tasks (task.c) and task spaces (space.c)                                  */
/* ------------------------------------------------------------------------ */

extern PyType_Spec weft_py_task_spec;
extern PyType_Spec weft_py_space_spec;
/* The C handle standing for slot t (declared, in a space) in runtime r:
 * binds t's space to r on first use.  Borrowed (the space lends it); NULL
 * with an exception (another runtime, closed, out of memory). */
weft_task *weft_py_slot_handle(TaskObject *t, RuntimeObject *r);
/* The C task spawned for slot t's key when t is not marked submitted yet
 * (another thread's spawn has not returned): the C space knows it first.
 * Borrowed (lent by the space), or NULL if none was spawned. */
weft_task *weft_py_slot_spawned(TaskObject *t);
/* Cancel slot t's key (t not submitted yet, or being spawned): 1 if its
 * task will not run, 0 if it started already, 2 if the space's runtime is
 * closed (nothing done), -1 with an exception. */
int weft_py_slot_cancel(TaskObject *t);
/* The label of the key behind a C placeholder name ("#3[7]"), for messages
 * about keys never spawned (new ref), or NULL (no error) if unknown. */
PyObject *weft_py_space_key_label(RuntimeObject *r, const char *cname);
/* The runtime closed: forget its C spaces (the C runtime destroyed them). */
void weft_py_spaces_unbind(RuntimeObject *r);
/* A new Task in the DECLARED state, every field empty. */
TaskObject *weft_py_task_new(modstate *st);
/* Its name, or None (new ref). */
PyObject *weft_py_task_label(TaskObject *t);
/* Who it is, for messages (new ref): its name's repr, else its function's
 * name and id ("work (id 7)"), else "(unnamed)"; NULL with an error. */
PyObject *weft_py_task_who(TaskObject *t);
/* Its .status ("declared", "waiting", "ready", "running", ...), and the
 * C status to *code (-1: declared, a slot nobody spawned into). */
const char *weft_py_task_status_name(TaskObject *t, int *code);
/* The CancelledError for t (new ref); why: the reason when it never entered
 * the runtime, NULL to ask the C runtime for the cause. */
PyObject *weft_py_make_cancelled(TaskObject *t, const char *why);
/* t->exc, made once with weft_py_make_cancelled(t, why) if t has none (new
 * ref), or NULL with an exception.  Safe from several threads at once. */
PyObject *weft_py_task_cancel_exc(TaskObject *t, const char *why);

/* ------------------------------------------------------------------------ */
/* Data (data.c, data_type.c, accesses.c, tiles.c, scratch.c, reduce.c)      */
/* ------------------------------------------------------------------------ */

/* Each function below, up to the shared helpers at the end, takes the
 * registry's lock itself, for its steps only (never across a call into
 * Python or a wait); call none with it held. */
/* The registry (data.c).  Set up / tear down r's registry (Runtime_new,
 * Runtime_dealloc). */
void weft_py_registry_init(RuntimeObject *r);
void weft_py_registry_fini(RuntimeObject *r);
/* Runtime_traverse / Runtime_clear: the registry's references. */
int weft_py_registry_traverse(RuntimeObject *r, visitproc visit, void *arg);
void weft_py_registry_clear(RuntimeObject *r);
/* The Data of obj (a Data, or a buffer object: the Data of the memory its
 * buffer covers), registering it on first use; a new reference. */
DataObject *weft_py_data_lookup(RuntimeObject *r, PyObject *obj, const char *what);
/* The registered Data of obj's memory without registering it (a new
 * reference), or NULL: with a ValueError if it is not registered. */
DataObject *weft_py_data_find(RuntimeObject *r, PyObject *obj, const char *what);
int weft_py_data_unregister(DataObject *d);
/* The runtime closed (r->rt already NULL): release every buffer and empty
 * the registry; nothing enters it any more. */
void weft_py_data_forget_all(RuntimeObject *r);
/* Whether obj (a Data, or a buffer object) has anything registered to
 * acquire: a Data, an object or memory registered, or memory overlapping a
 * registered range (1); 0 for memory Weft never saw; -1 with an exception
 * (not a buffer). */
int weft_py_data_known(RuntimeObject *r, PyObject *obj, const char *what);
/* Add `by` to the `acquired` count of each Data in the tuple dats. */
void weft_py_data_count_acquired(RuntimeObject *r, PyObject *dats, int by);

/* weft.Data (data_type.c). */
extern PyType_Spec weft_py_data_spec;
/* Data.partition, for Runtime.partition too (tiles.c): the tiles as a list
 * (a 1-D grid) or a list of lists (new reference), or NULL with an
 * exception. */
PyObject *weft_py_data_partition(DataObject *d, PyObject *args, PyObject *kwds);
/* The C handle for scratch buffers of n bytes in r (scratch=; scratch.c),
 * registered on first use; NULL with an exception (the runtime closed). */
weft_data *weft_py_scratch_handle(RuntimeObject *r, size_t n, const char *what);

/* The C accesses of one spawn (accesses.c): the Data each names is held (a
 * reference) until weft_py_accs_clear.  Owned by the spawning
 * thread; its arrays come from malloc (they grow under the registry's lock). */
#define WEFT_PY_ACCS_SMALL 8
typedef struct {
    weft_access *acc;
    DataObject **dat;
    size_t n, cap;
    weft_access acc_small[WEFT_PY_ACCS_SMALL];
    DataObject *dat_small[WEFT_PY_ACCS_SMALL];
} weft_py_accs;
void weft_py_accs_init(weft_py_accs *a);
/* Append the access of a spawn naming obj (a Data or a buffer object)
 * with mode: its Data's handle, to a (views find access i at C access i).
 * The C core orders it with handles over overlapping memory.  A mode
 * without WEFT_HOST (device views), or a communication buffer, is refused
 * for a Data whose memory other registered ranges overlap.  0, or -1 with
 * an exception. */
int weft_py_data_accesses(RuntimeObject *r, PyObject *obj, const char *what, unsigned mode,
                          weft_py_accs *a);
/* Whether a Data named has since begun to be unregistered (a spawn that
 * failed on its handle then looks its accesses up again). */
int weft_py_accs_stale(const weft_py_accs *a);
/* Let go of the Data named (may run Python code: a reference dropped may be
 * the last); keeps the storage. */
void weft_py_accs_clear(weft_py_accs *a);
void weft_py_accs_free(weft_py_accs *a);

/* The WEFT_RED_* element type of a reduction over obj (a buffer object or
 * a weft.Data) from its buffer's format (reduce.c); -1 with a TypeError
 * naming the type when it is none of int32, int64, uint32, uint64,
 * float32, float64. */
int weft_py_reduce_type(modstate *st, PyObject *obj, const char *what, unsigned *type);
/* A user reduction (weft.Reduction) of `itemsize`-byte elements named
 * `name` reducing obj: 0 if obj's elements are of that size (or bytes), -1
 * with a TypeError saying what the buffer's are. */
int weft_py_reduce_user_check(modstate *st, PyObject *obj, const char *what, Py_ssize_t itemsize,
                              PyObject *name);
/* The operator of a reduction (spawn.c): weft.SUM / weft.MIN / weft.MAX
 * (their C values), or "sum" / "min" / "max"; 0 if op is none of them (no
 * error is left set). */
unsigned weft_py_reduce_op(PyObject *op);

/* Shared helpers, between the data files only.  The registry's lock:
 * taken with the thread attached; the holder runs plain C until
 * weft_py_reg_unlock (weft_py_registry says why waiting for it attached is
 * safe). */
static inline void
weft_py_reg_lock(RuntimeObject *r)
{
    pthread_mutex_lock(&r->reg.lock);
}

static inline void
weft_py_reg_unlock(RuntimeObject *r)
{
    pthread_mutex_unlock(&r->reg.lock);
}

/* What a registry step found wrong (data.c, accesses.c): its caller raises
 * it with weft_py_reg_raise once the lock is released (making an exception
 * is Python work). */
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
/* Raise e (nothing for REG_OK); given: the caller named a weft.Data. */
void weft_py_reg_raise(const reg_err *e, const char *what, int given);
/* The ValueError of a read-only buffer named for writing; NULL. */
PyObject *weft_py_err_read_only(PyObject *obj, const char *what);
/* The Data of buffer object obj: the one registered under obj itself, else
 * the one of the memory its buffer covers, else a new one (registered).  A
 * new reference, or NULL with an exception.  register_ok: register it if
 * none is; else NULL with no exception.  want_write: obj's buffer must be
 * writable.  Call without the lock. */
DataObject *weft_py_data_of_object(RuntimeObject *r, PyObject *obj, const char *what, int want_write,
                                   int register_ok);
/* Whether another registered range overlaps d's memory (the lock held). */
int weft_py_registry_overlaps(const weft_py_registry *g, const DataObject *d);
/* Spawn a no-op task with these accesses, the GIL released for a spawn
 * that may block (unregister's and partition's probes, which follow every
 * task on a handle).  A Weft code; no Python exception. */
int weft_py_spawn_noop(RuntimeObject *r, const weft_access *acc, size_t n, const char *name,
                       weft_task **out);
/* tiles.c: a new Data's tile fields (no tiles, not a tile); and, part of a
 * step (the lock held), d's tiles went with it (unregistered, or the
 * runtime closed): their handles are no longer valid. */
void weft_py_tile_fields_init(DataObject *d);
void weft_py_tiles_forget(DataObject *d);

/* ------------------------------------------------------------------------ */
/* Acquire (acquire.c)                                                       */
/* ------------------------------------------------------------------------ */

extern PyType_Spec weft_py_acquired_spec;
/* rt.acquire(obj, mode="r", timeout=None) -> weft.Acquired; rt.fetch(obj,
 * timeout=None) -> obj. */
PyObject *weft_py_runtime_acquire(RuntimeObject *r, PyObject *args, PyObject *kwds);
PyObject *weft_py_runtime_fetch(RuntimeObject *r, PyObject *args, PyObject *kwds);

/* A mode bit of the extension's own (never passed to the C core): the
 * access of a communication operation (comm.c), whose C task names only
 * the handles given to weft_comm_post, and whose buffers are used on GPUs,
 * so a Data over memory that overlaps other registered ranges is refused. */
#define WEFT_PY_COMM_ACCESS 0x80000000u

/* ------------------------------------------------------------------------ */
/* Native calls (native.c)                                                   */
/* ------------------------------------------------------------------------ */

/* One call of a C function `int fn(void *arg)` without Python: a native
 * body's (made by its spawn) or one queued with ctx.queue_native.  Raw
 * memory (PyMem_RawMalloc: a stream's thread touches it without a thread
 * state), in one block: the ranges, the argument's copy (aligned for any
 * type), then, 8-aligned after it, the addresses of a native body's
 * accesses, which its trampoline fills where the task runs. */
typedef struct weft_py_native_call {
    int (*fn)(void *arg);
    void *arg;           /* what fn gets: the argument's copy (the addresses after
                            it), or NULL with neither */
    uint64_t model_ns;   /* on a virtual GPU: the modelled time of the call */
    int rc;              /* what fn returned, once it ran (read after the task ended) */
    size_t nacc;         /* a native body's accesses (0 for queue_native) */
    void **addr;         /* nacc: where each access is where the task runs */
    weft_range *ranges;  /* nacc: each access's extent and mode, for the stream */
    max_align_t data[];
} weft_py_native_call;

/* A call of fn on a copy of arg[0, len) (arg NULL: none), with room for
 * nacc addresses; NULL when out of memory (no exception set).  Freed with
 * PyMem_RawFree, on any thread. */
weft_py_native_call *weft_py_native_call_new(int (*fn)(void *arg), uint64_t model_ns, const void *arg, size_t len,
                                             size_t nacc);
/* For weft_ctx_queue_rw: call q's function, keep its return. */
int weft_py_native_run(void *q);
extern PyType_Spec weft_py_native_spec;
/* Whether fn is a weft.Native. */
int weft_py_is_native(modstate *st, PyObject *fn);
/* The call of a spawn of the weft.Native fn with argument argobj (None or
 * a contiguous buffer) over the first na accesses of av (whole buffers:
 * a tile is refused), then nscratch scratch buffers of scratch[k] bytes
 * (the C accesses after those); NULL with an exception. */
weft_py_native_call *weft_py_native_prepare(PyObject *fn, PyObject *argobj, const weft_py_accs *av, size_t na,
                                            const size_t *scratch, size_t nscratch);
/* The C body of a native task (the cell's native call). */
int weft_py_native_trampoline(weft_ctx *ctx, void *arg);

/* ------------------------------------------------------------------------ */
/* Communication (comm.c)                                                    */
/* ------------------------------------------------------------------------ */

extern PyType_Spec weft_py_comm_spec;
extern PyMethodDef weft_py_comm_methods[];
/* Runtime close, once nothing runs any more, before the C runtime is
 * destroyed: record how each finished operation of r's communicators
 * ended (their handles become unusable with the runtime). */
void weft_py_comms_settle(RuntimeObject *r);
/* Runtime close, after the C runtime was destroyed: destroy every
 * communicator of r still open. */
void weft_py_comms_close_all(RuntimeObject *r);
/* weft._close_all at exit: finalize MPI if weft started it. */
void weft_py_mpi_atexit(modstate *st);
/* The exception of a failed task whose Python body did not run (a
 * communication operation has none; a task whose data could not be made
 * valid never runs it) (new ref). */
PyObject *weft_py_bodyless_failure(TaskObject *t);

/* ------------------------------------------------------------------------ */
/* Views (view.c)                                                            */
/* ------------------------------------------------------------------------ */

/* What a running body's views are made from: the trampoline (body.c) puts
 * one on its stack around the call and points weft_py_tl_frame at it (the
 * innermost body on this thread; nested bodies save and restore it). */
typedef struct weft_py_frame {
    weft_ctx *ctx;
    cell *c;           /* the task's cell: c->scope */
    PyObject *acc;     /* the task's acc tuple (borrowed from the body), or NULL */
    uint32_t nreads;   /* its first nreads accesses are read-only */
    uint32_t nreduces; /* its last nreduces Data (before the scratch items) are reductions:
                          private copies */
    int device_data;
    uint32_t nscratch; /* acc's last nscratch items are scratch buffers (their templates) */
} weft_py_frame;
extern _Thread_local weft_py_frame *weft_py_tl_frame WEFT_PY_TLS;

extern PyType_Spec weft_py_view_spec;
/* The running body's data access i where it runs (weft_ctx_data) and its
 * size, as a range of this mode (an int in ctx.queue's reads / writes);
 * -1 with an exception naming `what` (no such access, or a tile's). */
int weft_py_access_range(Py_ssize_t i, unsigned mode, weft_range *out, const char *what);
/* The array-interface type ("<f8") of one item of struct format fmt with
 * this itemsize; -1 for what a view does not describe. */
int weft_py_typestr_of(const char *fmt, Py_ssize_t itemsize, char out[8]);
extern PyMethodDef weft_py_view_methods[];
/* The task of cell c ended: its views refuse use from now on (any thread,
 * no GIL needed: an atomic store and a reference dropped). */
void weft_py_views_end(cell *c);

/* ------------------------------------------------------------------------ */
/* Coroutine bodies (coro.c)                                                 */
/* ------------------------------------------------------------------------ */

extern PyType_Spec weft_py_await_spec;
/* Task.__await__ / TaskSpace.__await__ (am_await): the awaitable of one
 * task (its result), or of a space's spawned tasks (None). */
PyObject *weft_py_task_await(PyObject *self);
PyObject *weft_py_space_await(PyObject *self);
/* weft.gather(*tasks) / weft.gather(iterable): awaiting it gives the list
 * of their results. */
PyObject *weft_py_gather(PyObject *module, PyObject *args);
/* Run coro (borrowed) on this worker until it returns (its value), raises
 * (NULL with the exception), or awaits unfinished tasks: then t is
 * suspended in a continuation that will resume it, t->coro holds it, and
 * *suspended is set (NULL returned, no exception).  placed: step it through
 * the placement runner (weft_py_call_placed). */
PyObject *weft_py_drive(RuntimeObject *r, TaskObject *t, weft_ctx *ctx, int placed, PyObject *coro,
                        int *suspended);

/* ------------------------------------------------------------------------ */
/* Spawning (spawn.c)                                                        */
/* ------------------------------------------------------------------------ */

/* weft.spawn (r NULL) and Runtime.spawn; self_callable is the spawn function
 * itself, for the decorator form.  A task that follows a slot nobody spawned
 * into yet enters the C runtime at once, waiting for the key's placeholder. */
PyObject *weft_py_spawn(modstate *st, RuntimeObject *r, PyObject *const *args, Py_ssize_t nargs,
                        PyObject *kwnames, PyObject *self_callable);

/* ------------------------------------------------------------------------ */
/* Waiting (wait.c)                                                          */
/* ------------------------------------------------------------------------ */

/* runtime.c: the labels (a list of str, new ref) of r's task-space slots
 * that tasks wait for and nobody spawned into; NULL (no error) if none.
 * And "a, b, c" of a list of str's first 10 items ("and N more" after). */
PyObject *weft_py_never_spawned(RuntimeObject *r);
PyObject *weft_py_join_some(PyObject *items, const char *sep);

#define WAIT_SLICE_NS 20000000ull /* 20 ms: how often a waiting thread checks signals */
#define RC_PYERR (-1000)          /* a wait ended with a Python exception set */
/* Timeouts are turned into a deadline on the monotonic clock once, when the
 * call parses them (weft_py_parse_timeout); NO_DEADLINE means "wait without
 * limit". */
#define NO_DEADLINE 0

int weft_py_parse_timeout(PyObject *o, uint64_t *deadline);
/* Wait for t until deadline: a Weft code, or RC_PYERR. */
int weft_py_task_wait(TaskObject *t, uint64_t deadline);
/* Raise for a wait outcome; 0 if the task completed (or !for_result). */
int weft_py_raise_outcome(TaskObject *t, int rc, int for_result);
int weft_py_runtime_wait_all(RuntimeObject *r, uint64_t deadline);
/* Cancel every task of r that has not started. */
int weft_py_cancel_pending(RuntimeObject *r);
/* _wait_any(tasks, timeout=None) -> list[int]: the module function
 * weft.wait and weft.as_completed wait with (weft/_wait.py). */
PyObject *weft_py_wait_any(PyObject *module, PyObject *args);

#pragma GCC visibility pop

#endif /* WEFT_PY_WEFT_H */
