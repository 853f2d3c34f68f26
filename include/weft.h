/*
 * weft.h — the one public header of Weft, a task runtime for multi-GPU nodes.
 *
 * A program describes work as tasks: a body function plus the tasks it must
 * follow (explicit dependencies) and the data it touches (data handles with an
 * access mode, from which Weft infers further dependencies in spawn order).
 * Worker threads run ready tasks; the thread that finishes a task releases its
 * dependents; idle workers steal.
 *
 * Conventions that hold for every function below unless its comment says
 * otherwise:
 *   - Functions that can fail return int: 0 (WEFT_OK) on success, a negative
 *     WEFT_E... code otherwise; weft_strerror() names the code and
 *     weft_last_error() gives a message describing the last failure on the
 *     calling thread.  Results come back through out-parameters, which are
 *     left untouched on failure.
 *   - Handles (weft_runtime, weft_task, weft_data) are opaque.  Using a handle
 *     after it was released/destroyed returns WEFT_EINVAL (or WEFT_ECLOSED for
 *     a destroyed runtime): handle memory is type-stable and every handle
 *     carries a generation tag, so such misuse is detected, not undefined.
 *     (The tag has 7 bits: a slot reused exactly 128 times in between would
 *     alias; treat detection as a safety net, not as an API.)
 *   - All functions are thread-safe unless noted.
 *   - "May be called from a task" means from inside a task body.
 *
 * Coming from StarPU — its idiom, then Weft's, and what differs:
 *   starpu_init / starpu_shutdown      weft_runtime_create / weft_runtime_destroy
 *                                      (devices by string: "cpu,cuda", "cpu,vgpu:4")
 *   a codelet's cpu_funcs, cuda_funcs  weft_task_desc.placements: alternatives
 *                                      ("cpu", "gpu", "2*gpu", "gpu:1"), each with
 *                                      its own body if it needs one; the policy
 *                                      picks one ("dmda", the default with GPUs:
 *                                      StarPU's, with models per
 *                                      weft_task_desc.kind; "load", "balance")
 *   a codelet's model (STARPU_HISTORY_BASED), ->flops
 *                                      weft_task_desc.kind, weft_task_desc.cost;
 *                                      starpu_perfmodel_display: weft-models
 *   STARPU_CUDA_ASYNC, the worker's    weft_ctx_queue / weft_ctx_copy on
 *   stream                             weft_ctx_stream(ctx, i): the body queues, the
 *                                      task ends when its stream work has
 *   starpu_vector_data_register ...    weft_data_register(ptr, bytes): one range;
 *                                      shapes are the program's
 *   STARPU_R / W / RW, STARPU_COMMUTE  WEFT_R / W / RW, WEFT_RW | WEFT_COMMUTE
 *   STARPU_SCRATCH (home node -1)      WEFT_SCRATCH on any handle, or one from
 *                                      weft_data_register(rt, NULL, n): a buffer
 *                                      of the task's own where it runs, no
 *                                      dependencies (per task, not per worker: a
 *                                      GPU's is kept for the handle's next one)
 *   STARPU_REDUX + reduction methods   WEFT_REDUCE | a built-in operator and type,
 *                                      or weft_reduction_register (identity or
 *                                      init, combine): combined in spawn order
 *   starpu_task_submit                 weft_spawn (dependencies inferred from the
 *                                      accesses in spawn order, plus desc.deps)
 *   callback_func / callback_arg       on_finish / finish_arg: may spawn the next
 *                                      task (never blocks), may not wait
 *   tags, starpu_tag_declare_deps      task spaces (weft_space_*): a task depends
 *                                      on a key before it is spawned
 *   starpu_task_wait(_for_all)         weft_task_wait, weft_wait_all
 *   starpu_data_acquire / release      weft_data_acquire / weft_data_release
 *   starpu_data_partition (filters)    weft_data_partition: tiles, with halos;
 *                                      the whole stays usable
 *   starpu_data_unregister             weft_data_unregister: the newest value is
 *                                      back in the program's memory
 *   a failed task                      its dependents, and readers of what it
 *                                      wrote, are cancelled; its writes undone
 *   starpu_data_wont_use               weft_data_wont_use: evicted from GPUs first
 *   STARPU_VECTOR_GET_PTR / _NX        weft_ctx_data / weft_ctx_bytes (bytes, not
 *                                      elements: a data handle has no type)
 *   starpu_data_set_sequential_       WEFT_UNORDERED on each access (R, W or RW):
 *   consistency_flag(h, 0)             no order among such accesses; the tasks
 *                                      still never overlap on the data at run time
 *   task->sequential_consistency = 0   WEFT_UNORDERED on this task's accesses AND
 *                                      on the accesses it must not wait for: an
 *                                      unordered access still follows the ordered
 *                                      accesses spawned before it (a task that
 *                                      would wait behind one that waits for it
 *                                      hangs; weft_wait_all then names the key)
 *   STARPU_SCRATCH                     WEFT_SCRATCH: a buffer of the data's size
 *                                      where the task runs, its own, unordered
 */
#ifndef WEFT_H
#define WEFT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(WEFT_STATIC_DEFINE) || !defined(__GNUC__)
#define WEFT_API
#else
#define WEFT_API __attribute__((visibility("default")))
#endif

#if defined(__GNUC__)
#define WEFT_NODISCARD __attribute__((warn_unused_result))
#else
#define WEFT_NODISCARD
#endif

#define WEFT_VERSION_MAJOR 0
#define WEFT_VERSION_MINOR 1
#define WEFT_VERSION_PATCH 0

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

typedef enum weft_error {
    WEFT_OK = 0,
    WEFT_EINVAL = -1,      /* misuse: bad argument, released or foreign handle */
    WEFT_ENOMEM = -2,      /* an internal allocation failed; nothing was changed */
    WEFT_ECLOSED = -3,     /* the runtime was destroyed (or is being destroyed) */
    WEFT_EBUSY = -4,       /* busy: the call would wait for what the caller itself holds (its own
                              task, an acquisition), or the data is in use (the message says which) */
    WEFT_ETASKFAILED = -5, /* the task's body returned non-zero */
    WEFT_ECANCELLED = -6,  /* the task never ran: an ancestor failed, or it was cancelled */
    WEFT_ETIMEDOUT = -7,   /* a timed wait ran out of time; the task is still pending */
    WEFT_EDEADLK = -8,     /* waiting here could never finish (e.g. wait_all inside a task) */
    WEFT_ESYSTEM = -9,     /* the operating system refused (e.g. a thread could not start) */
    WEFT_EAGAIN = -10,     /* not now: the spawn would block (WEFT_SPAWN_NOWAIT) */
    WEFT_EDEVICE = -11,    /* a device failed (the message names the device API's error) */
    WEFT_ENODEV = -12      /* no device of this runtime can do it: a task's placements ask for GPUs
                              (or GPU memory) the runtime does not have, a communicator on a runtime
                              without GPUs (the message names each alternative and what it lacks) */
} weft_error;

/* A static, human-readable name for an error code ("WEFT_EINVAL: invalid
 * argument").  Never NULL, never blocks; unknown codes give a generic text. */
WEFT_API const char *weft_strerror(int code);

/* The message describing the most recent failed Weft call on this thread
 * (e.g. "weft_spawn: dependency 2 belongs to another runtime").  Empty string
 * if none.  The pointer is owned by Weft and valid until the next Weft call on
 * this thread.  Never blocks; may be called from a task. */
WEFT_API const char *weft_last_error(void);

/* ------------------------------------------------------------------------ */
/* Runtime                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct weft_runtime weft_runtime;
typedef struct weft_task weft_task;
typedef struct weft_data weft_data;

typedef struct weft_config {
    /* Worker threads, at most 4096.  0 means one per online CPU core.
     * Env: WEFT_WORKERS (0 to 4096). */
    unsigned workers;
    /* Path of a Chrome-trace JSON file written when the runtime is destroyed,
     * or NULL for no trace.  A track per worker with each task body (a
     * placed task's args name its variant and devices) and the runtime's
     * notes about its workers (instant events: "workers pinned", see
     * pin_workers), and a track per stream of each virtual GPU with its
     * kernels and copies (CUDA streams are not traced yet).  The string is
     * copied.  Env: WEFT_TRACE. */
    const char *trace_path;
    /* Most trace events kept per worker; later ones are counted as dropped. */
    size_t trace_max_events;
    /* How long an idle worker spins looking for work before it parks, in
     * nanoseconds (yielding its core now and then once the runtime has
     * virtual GPUs or a communicator across ranks, whose threads need it).
     * Env: WEFT_SPIN_NS. */
    uint64_t spin_ns;
    /* Backpressure, so that an unbounded producer runs in bounded memory.
     * A spawn from an outside thread blocks while more than this many tasks
     * are in flight, until a quarter of them have finished (it holds nothing
     * while it sleeps, so any number of producer threads make progress).  A
     * spawn from inside a task counts only the backlog (tasks in flight whose
     * bodies are not executing) and sleeps, running nothing nested, until the
     * backlog drops or until no other worker could drain it (every other
     * worker idle with nothing queued, or itself blocked in a wait): then the
     * spawn goes ahead rather than wait for itself.  A spawn from an
     * on_finish callback never waits (weft_task_desc.on_finish: the
     * thread finishing tasks must not stop).  0 means the default
     * (65536 per worker).  Env: WEFT_MAX_INFLIGHT. */
    size_t max_inflight;
    /* A body that waits for a task (or an unregister) runs, meanwhile, the
     * awaited task (or a task using the data) and their queued predecessors,
     * nested on its stack.  Past this many nested bodies on one worker it
     * runs only the awaited task itself and leaves predecessors to idle
     * workers (if no worker is idle, it keeps helping: that is then the only
     * way forward).  Bounds stack use, and Python recursion depth.  0 means
     * 64.  Env: WEFT_MAX_NESTING. */
    unsigned max_nesting;
    /* A wait from a thread outside the runtime (weft_wait_all, weft_task_wait
     * and their timed forms, weft_data_unregister) that has gone on this
     * long, in milliseconds, while every task left waits (directly or not)
     * for task-space keys nobody has spawned, says so once on stderr, naming
     * a key: only a spawn of it can end the wait (from another thread, or
     * from a callback), and a program that never spawns it hangs.  Likewise
     * when every task left is a body in a weft_task_wait or
     * weft_task_wait_any without a timeout, or waits for one, and none can
     * end (bodies waiting for each other, or
     * for tasks queued behind waiting bodies on every worker): it says so,
     * naming the tasks waited for.  The wait goes on.  0 means 5000;
     * UINT64_MAX never.  Env: WEFT_STALL_WARN_MS. */
    uint64_t stall_warn_ms;
    /* Called on each worker thread when it starts, before it runs any task,
     * and when it stops, after its last task (e.g. to create and delete a
     * per-thread interpreter state).  May be NULL.  They must not call
     * weft_runtime_destroy; they may block (destroy waits for them). */
    void (*on_worker_start)(unsigned worker, void *hook_arg);
    void (*on_worker_stop)(unsigned worker, void *hook_arg);
    /* Called on a worker thread when it lets go of what a body left held
     * for its next body (weft_ctx_hold_over: the Python GIL), before it does
     * anything else: before it idles, before a task with another body
     * function, with data accesses or placements, or a continuation, and
     * before it stops.  May be NULL: weft_ctx_hold_over
     * then answers 0.  It must not block for long, and must not call the
     * runtime. */
    void (*on_worker_let_go)(unsigned worker, void *hook_arg);
    void *hook_arg;
    /* The devices, as a comma-separated list (blanks around items ignored):
     *   cpu             the CPU cores (the workers) and host memory
     *   vgpu[:N]        N virtual GPUs (default 1, at most 64): simulated
     *                   GPUs in host memory, for machines without a GPU
     *   cuda            every CUDA device found
     *   cuda:I[,J...]   these CUDA devices (ordinals)
     * e.g. "cpu,vgpu:4", "cpu,cuda", "cpu,cuda:0,1".  NULL (or blank) is the
     * default: every CPU core and every CUDA device found (none is fine).  A
     * bad string, or CUDA devices asked for that this machine does not have,
     * makes weft_runtime_create fail with WEFT_EINVAL and a message naming
     * the bad part.  The string is read during weft_runtime_create only.
     * Host memory is always device 0.  Env: WEFT_DEVICES. */
    const char *devices;
    /* Memory of each virtual GPU, in bytes (its arena).  0 means 1 GiB.
     * Env: WEFT_VGPU_MEMORY.  The virtual GPUs' copy model (a copy takes at
     * least latency + bytes / bandwidth) is read from the environment at
     * weft_runtime_create: WEFT_VGPU_LATENCY_US (default 2),
     * WEFT_VGPU_HOST_GBPS (host <-> GPU, default 25), WEFT_VGPU_PEER_GBPS
     * (GPU <-> GPU, and the virtual communicator's links, default 50);
     * each must be a positive number.
     * WEFT_VGPU_COPIES=timing makes copies take their modelled time and
     * move no bytes — data on virtual GPUs is then NOT the program's (a
     * warning says so once on stderr) — for scheduling studies whose
     * kernels compute nothing (weft-cholesky --model-only); ignored in the
     * checking mode.  A copy into a GPU goes on the GPU's copy queue, beside the kernels queued there before,
     * when the task's stream is busy (weft_stats.bytes_prefetched; not
     * for a tile with a halo, whose copies stay on the stream);
     * WEFT_PREFETCH=0 (read at weft_runtime_create) puts every copy on the
     * stream of the task that needs it instead.  WEFT_VGPU_SCHEDULE=<seed>
     * (a number, read when a virtual GPU is made) runs the virtual GPUs in
     * a seeded schedule, to chase a race: one kernel, copy, record or wait
     * at a time across all of them, in an order the seed chooses with
     * modelled (not slept) durations, seeded stragglers and seeded pauses
     * that let the host run ahead; the same seed and the same work queued
     * give the same order.  Kernels must then not wait for other device
     * work (the virtual communicator's collectives do: not in this mode). */
    size_t vgpu_memory;
    /* The mapping policy of tasks with placements (weft_placement), by name:
     *   "load"         (the default without GPUs) the first alternative, in the order
     *                  given, whose compute share and memory can be reserved
     *                  now; within it the least loaded GPUs (tasks mapped and
     *                  not finished), then the ones with most free memory
     *   "round-robin"  the first alternative that fits now; within it the
     *                  GPUs in turn
     *   "balance"      of the alternatives that fit now, the least loaded
     *                  (Parla's mapper: a list such as cpu, gpu:0 .. gpu:3
     *                  spreads its tasks): a GPU set by the tasks mapped on
     *                  its most loaded GPU, the CPU alone by the tasks
     *                  mapped on CPU alternatives per worker; the earlier
     *                  of equals; within it as "load"
     *   "dmda"         earliest finish (StarPU's dmda, HEFT): when a task
     *                  is ready, each alternative on each device set it
     *                  allows is given a predicted finish — the device's
     *                  backlog of work decided on it, plus the copies its
     *                  data would need there (each device's link model:
     *                  latency and bandwidth, measured on CUDA, modelled on
     *                  virtual GPUs), plus its execution there as its
     *                  kind's performance model predicts (kinds:
     *                  weft_task_desc.kind) — and the task waits for the
     *                  earliest, even if another fits now.  While a kind's
     *                  model on a device kind has fewer than 3 observations,
     *                  its tasks go to such devices by backlog, to calibrate
     *                  it.  A task decided on a GPU held whole by another
     *                  may queue its work after that one's (one such task
     *                  per GPU).  With GPUs and two workers or more, one
     *                  worker stays free of the CPU alternatives, to run
     *                  the bodies that feed the GPUs.  Models persist between runs in a file per
     *                  machine: $WEFT_PERFMODEL_DIR/<hostname>.models (by
     *                  default under $XDG_CACHE_HOME/weft/perfmodels, else
     *                  ~/.cache/weft/perfmodels), read at
     *                  weft_runtime_create and written back at
     *                  weft_runtime_destroy; delete it to forget them;
     *                  WEFT_PERFMODEL=off keeps them in memory only.  A
     *                  file that does not parse is ignored with a warning
     *                  on stderr.  weft_models_print shows them.
     * NULL means "dmda" on a runtime with GPUs, else "load".  An unknown
     * name makes weft_runtime_create fail with WEFT_EINVAL.  Read during
     * weft_runtime_create only.
     * Env: WEFT_POLICY. */
    const char *policy;
    /* Record the task graph for a lower bound of the run's makespan
     * (weft_runtime_bound): WEFT_BOUND_OFF (0, the default),
     * WEFT_BOUND_RECORD, or WEFT_BOUND_PRINT (record, and have
     * weft_runtime_destroy print the run's makespan against its bound, one
     * line on stderr).  While recording, each task spawned keeps a record
     * (about 100 bytes, and 4 per dependency beyond three) until the
     * runtime is destroyed, and its spawn, start and finish take the
     * record's lock.  Another value makes weft_runtime_create fail with
     * WEFT_EINVAL.  Read during weft_runtime_create only.  Env: WEFT_BOUND
     * (1: WEFT_BOUND_PRINT, 0: off). */
    unsigned bound;
    /* Where the workers run:
     *   WEFT_PIN_AUTO (2, what weft_config_init sets)  unpinned at first:
     *       worker i starts on the (i+1)-th of those CPUs after the one
     *       the creating thread runs on (wrapping around), and is then
     *       free to move (its affinity is the creating thread's again at
     *       once); the runtime pins them, once, when it sees the operating
     *       system keep busy workers packed on one CPU while CPU time goes
     *       unused (below);
     *   WEFT_PIN_ON (1)   worker i pinned from the start to the (i mod n)-th
     *       of the n CPUs the creating thread may run on (its affinity at
     *       weft_runtime_create);
     *   WEFT_PIN_OFF (0)  left to the operating system, which may move them
     *       (what a zero-filled weft_config gives).
     * Why: a scheduler that places a woken thread on the CPU that woke it (as
     * a 2-vCPU VM's did, for Python bodies that sleep in the GIL) can leave
     * two workers sharing one CPU, the other idle, for many milliseconds.
     * WEFT_PIN_ON prevents it, but where several processes each run a
     * runtime on the same CPUs (ranks without CPU sets of their own) every
     * process pins its worker 0 to the same CPU.  WEFT_PIN_AUTO pins only
     * where it sees the problem and CPU time to spare:
     *   - each worker notes the CPU it runs on (sched_getcpu) as it starts a
     *     task, about once per millisecond of its running (a countdown of
     *     tasks, recalibrated with the clock at each note: no system call
     *     per task); a worker is busy while its latest note is less than
     *     10 ms old;
     *   - about once a millisecond, the runtime looks at the latest notes:
     *     "packed" when two or more busy workers share a CPU.  Such a
     *     look, and only such a look, opens a window, which counts only
     *     the time both workers are busy: from one look to the next, when
     *     they are less than 10 ms apart and both found two busy workers,
     *     the interval and each CPU's idle time in it (read at each look of
     *     a window: from cpuidle's per-state times in microseconds,
     *     /sys/devices/system/cpu/cpuN/cpuidle/stateK/time, where every CPU
     *     has them, else from /proc/stat's ticks of USER_HZ).  Longer gaps
     *     are pauses (the workers idled: the program did something else),
     *     left out, so that bursts of tasks a few milliseconds long add up;
     *     a pause over 1 s closes the window.  It ends without deciding
     *     when more than a quarter of its counted looks were not packed;
     *     else once it has counted 5 looks and 4 ms of busy time (30 ms,
     *     3 ticks at 100 Hz, with /proc/stat) it decides;
     *   - it pins when the workers are no more than the CPUs of the
     *     creating thread's affinity at weft_runtime_create, three
     *     quarters of the counted looks were packed, and those CPUs were
     *     idle, together, at least half the busy time counted (half a CPU
     *     to spare; each CPU's idle counted short by what its source may
     *     overstate: a tick of /proc/stat, or a microsecond, per run of
     *     looks without a pause): every worker to a CPU of its own
     *     (pthread_setaffinity_np), busy workers keeping the CPU they were
     *     last seen on where no other worker has it yet (one of the packed
     *     workers keeps their CPU), then the others theirs, the rest the
     *     idlest free CPUs.  It never pins when the CPUs had no time to
     *     spare (they are oversubscribed, by other processes or ranks:
     *     pinning would not help); the next window then waits 10 ms,
     *     doubling up to 1 s.  Once pinned the workers stay pinned;
     *   - weft_stats.autopins counts it, and the trace (trace_path) shows
     *     a "workers pinned" event naming each worker's CPU.
     * With fewer than two workers or CPUs, more workers than CPUs, bodies
     * longer than 10 ms (too few notes), where the idle figures cannot be read
     * or the operating system refuses a CPU (the workers are then left, or
     * put back, unpinned; the trace says so), WEFT_PIN_AUTO never pins.
     * Another value makes weft_runtime_create fail with WEFT_EINVAL;
     * under WEFT_PIN_ON a CPU the operating system refuses makes it fail
     * with WEFT_ESYSTEM.  Read during weft_runtime_create only.  Env:
     * WEFT_PIN_WORKERS (auto, or a flag's words: 1, on, yes, true for
     * WEFT_PIN_ON; 0, off, no, false for WEFT_PIN_OFF; any case). */
    unsigned pin_workers;
} weft_config;

/* The longest weft_task_desc.kind, in bytes (without its NUL). */
#define WEFT_KIND_MAX 63
#define WEFT_BOUND_OFF 0u
#define WEFT_BOUND_RECORD 1u
#define WEFT_BOUND_PRINT 2u
#define WEFT_PIN_OFF 0u
#define WEFT_PIN_ON 1u
#define WEFT_PIN_AUTO 2u

/* Fill *cfg with defaults, then apply the environment overrides named above.
 * A malformed value is skipped here (this never fails), and
 * weft_runtime_create then refuses it.  Never blocks. */
WEFT_API void weft_config_init(weft_config *cfg);

/* Create a runtime and start its workers and devices.  cfg may be NULL
 * (defaults plus environment).  On success *out owns the runtime until
 * weft_runtime_destroy.  Errors: WEFT_EINVAL (out is NULL, a bad device
 * string, or, whatever cfg is given, a variable of this header set in the
 * environment to what it does not accept: a whole number out of the
 * field's range, a flag other than 1, 0, on, off, yes, no, true or false
 * (WEFT_BOUND, WEFT_PREFETCH, WEFT_VGPU_CHECK, WEFT_PERFMODEL), a
 * bandwidth or latency that is not a positive number, WEFT_PIN_WORKERS
 * other than auto or a flag's words, WEFT_VGPU_COPIES other than timing;
 * weft_last_error names the variable; an empty one counts as unset),
 * WEFT_ENOMEM, WEFT_ESYSTEM (a worker or device thread could not
 * start; none is left running).  Blocks only to start threads.
 * Must not be called from a task. */
WEFT_API WEFT_NODISCARD int weft_runtime_create(const weft_config *cfg, weft_runtime **out);

/* Release the data still acquired (weft_data_acquire: the host's copy is
 * then their value), finish every outstanding task (they run to completion;
 * once the runtime has settled (weft_wait_settled_timed: what is left can
 * move only by a spawn), the runtime's task spaces are destroyed, which
 * cancels the keys nobody spawned and so whatever waits for them, directly
 * or through other tasks: a body's weft_task_wait for such a key returns
 * WEFT_ECANCELLED, and a body waiting for a task that waits for one gets
 * that task's outcome; tasks left that wait for nothing such a key ends
 * (bodies waiting for each other) are waited for, for ever), stop and
 * join all workers,
 * write the trace if configured, unregister the data handles still
 * registered (their handles become invalid: WEFT_EINVAL), and free the
 * runtime.  Task handles the caller still holds stay valid for wait, status,
 * info and release (every such task has finished); each must still be
 * released.  Later calls with rt return WEFT_ECLOSED.  NULL is accepted and
 * returns 0.  Returns 0, or WEFT_ETASKFAILED when some task failed since the
 * last weft_wait_all (the runtime is destroyed either way), else
 * WEFT_ECANCELLED when tasks (or bodies' waits) waiting for keys nobody
 * spawned were cancelled (weft_last_error names a key; destroyed either
 * way), WEFT_ECLOSED for
 * an already destroyed runtime, WEFT_EDEADLK if called from one of this
 * runtime's tasks or from an on_finish callback (nothing is destroyed
 * then).  Blocks. */
WEFT_API int weft_runtime_destroy(weft_runtime *rt);

/* Number of worker threads, or 0 for an invalid runtime.  Never blocks. */
WEFT_API unsigned weft_runtime_workers(const weft_runtime *rt);

typedef struct weft_stats {
    uint64_t tasks_spawned;   /* tasks accepted by weft_spawn (and the other spawns:
                                 weft_space_spawn, weft_ctx_continue's continuations) */
    uint64_t tasks_run;       /* bodies executed (a weft_data_acquire counts one: its internal task) */
    uint64_t tasks_failed;    /* bodies that returned non-zero */
    uint64_t tasks_cancelled; /* tasks that never ran */
    uint64_t steals;          /* tasks a worker took from another worker's queue */
    uint64_t parks;           /* times a worker went to sleep for lack of work */
    uint64_t idle_ns;         /* total time workers spent spinning or parked */
    uint64_t inflight;        /* tasks spawned and not yet finished, now */
    uint64_t inflight_peak;   /* most tasks in flight at once */
    uint64_t bytes_per_task;  /* memory one in-flight task holds: its slot plus
                                 the average of its out-of-line allocations */
    uint64_t trace_dropped;   /* trace events not recorded (buffer full) */
    unsigned workers;
    /* The wait engine (every blocking wait: tasks, wait_all, backpressure,
     * unregister): waits begun, times a waiting thread went to sleep, and
     * how those sleeps ended — woken by the event they waited for, or by
     * their own deadline.  No wait sleeps on a timer otherwise. */
    uint64_t waits;
    uint64_t wait_sleeps;
    uint64_t wait_wakeups_event;
    uint64_t wait_wakeups_timer;
    /* Bytes copied between the replicas of data handles (host <-> device,
     * device <-> device), to make them valid where tasks used them, and
     * reducers' private copies brought from devices to be combined. */
    uint64_t bytes_copied;
    /* Of bytes_copied: the copies into a GPU that ran on its copy queues
     * beside the kernels already queued on the stream of the task that
     * needed them (prefetch: a task that waits for no predecessor's events
     * and whose stream has work in flight). */
    uint64_t bytes_prefetched;
    /* The "dmda" policy's decisions (weft_config.policy), by what the
     * chosen device's prediction rested on: a history of the task's kind
     * at its size, a fit over other sizes, or none yet (calibrating); and
     * the tasks whose time came out more than twice, or less than half,
     * what the history or fit predicted. */
    uint64_t model_hits, model_fits, model_calibrating, model_mispredicted;
    /* Times the runtime pinned its workers by itself (0 or 1: once at
     * most): weft_config.pin_workers = WEFT_PIN_AUTO saw them packed on
     * one CPU while another idled. */
    uint64_t autopins;
} weft_stats;

/* Snapshot of the counters (approximate while tasks run).  Errors:
 * WEFT_EINVAL, WEFT_ECLOSED.  Never blocks; may be called from a task. */
WEFT_API WEFT_NODISCARD int weft_runtime_stats(weft_runtime *rt, weft_stats *out);

/* The name of rt's placement policy (weft_config.policy as created:
 * "dmda", "load", ...; the default resolved) into *name, a string that
 * lives as long as the program.  Only "dmda" keeps performance models and
 * uses a task's kind and cost.  Errors: WEFT_EINVAL (bad runtime, name
 * NULL), WEFT_ECLOSED.  Never blocks; thread-safe; may be called from a
 * task. */
WEFT_API WEFT_NODISCARD int weft_runtime_policy(weft_runtime *rt, const char **name);

/* The "dmda" policy's prediction of how long a task of kind `kind`
 * (weft_task_desc.kind) whose accesses name `bytes` bytes takes on device
 * `device` (0 .. weft_device_count - 1; its kind of device), in ns, into
 * *ns: 1 (from the times observed at that size), 2 (from a fit over other
 * sizes), or 0 (nothing observed: *ns is untouched).  Errors: WEFT_EINVAL
 * (bad runtime, kind NULL, device out of range, ns NULL; the runtime's
 * policy is not "dmda"), WEFT_ECLOSED.  Never blocks; thread-safe; may be
 * called from a task.  (A lower bound of a run's makespan from these
 * predictions: weft_runtime_bound.) */
WEFT_API WEFT_NODISCARD int weft_runtime_predict(weft_runtime *rt, const char *kind, unsigned device,
                                                 size_t bytes, double *ns);

/* A lower bound of a run's makespan (weft_runtime_bound), in seconds. */
typedef struct weft_bound {
    uint64_t tasks;      /* finished tasks counted (task-space placeholders are not tasks) */
    uint64_t pending;    /* tasks recorded and not finished at the call: left out */
    uint64_t no_model;   /* tasks that ran, some class of device they may run on without a
                            model's prediction for them (see weft_runtime_bound) */
    double makespan;     /* the first recorded spawn to the last recorded finish */
    double path;         /* the critical path: the longest chain of dependencies, each task
                            at its time on its fastest class of device */
    double area;         /* the area bound: the least time in which the CPU's slots and the
                            GPUs could do all the work, each task split between the two
                            classes at will */
    double bound;        /* max(path, area) */
    unsigned cpu_slots;  /* the CPU's slots the area spreads over: the workers, less one under
                            "dmda" with GPUs (one stays free for the GPUs' bodies); 0 when no
                            task may run on the CPU */
    unsigned gpus;       /* the GPUs it spreads over; 0 when no task may run on one */
} weft_bound;

/* Compute, into *out, a lower bound of the makespan of the tasks rt has
 * run, from the task graph recorded while weft_config.bound was on (each
 * task's kind, size, the devices its placements allow — a task without
 * placements runs on the CPU — and its dependencies, from its explicit
 * ones and its data accesses) and from the performance models at the
 * time of the call: a task's time on the CPU is its kind's model's
 * prediction at its size on the CPU; on the GPUs, the fastest GPU kind's
 * (as weft_runtime_predict's).  Where no model predicts a task (its
 * policy keeps no models, it has no placements, or its kind never ran
 * there), its observed time stands in on the class of device it ran on
 * (from its start, or its dependencies' finish, or on a GPU the previous
 * task's finish there, whichever is latest, to its finish), and the
 * other class counts as closed to it: out->no_model counts such tasks.
 * A task's time on a GPU is that of the GPUs and share its placement
 * takes; a task that never ran counts no time.  The bound is a lower
 * bound of a schedule of these tasks on these devices as far as the
 * predictions are right and ignores copies (see docs/design.md).
 * Tasks still in flight are left out (out->pending counts them), with
 * their dependencies: call it after weft_wait_all for the whole run.
 * Returns 0; WEFT_EINVAL when rt, out is NULL, or rt records no graph
 * (create it with weft_config.bound = WEFT_BOUND_RECORD, or WEFT_BOUND=1
 * in the environment); WEFT_ENOMEM when out of memory, or when tasks
 * could not be recorded for want of memory (the graph is incomplete);
 * WEFT_ECLOSED.  Never blocks (it takes the record's and the models'
 * locks; O(tasks log tasks + dependencies)); thread-safe; may be called
 * from a task.  *out is the caller's. */
WEFT_API WEFT_NODISCARD int weft_runtime_bound(weft_runtime *rt, weft_bound *out);

/* Print the performance models stored for this machine (the file
 * weft_config.policy's "dmda" describes) as a table on standard output:
 * per kind, device kind and size, the count and mean time and spread, and
 * each model's fit.  Returns 0, or WEFT_EINVAL when no model file is known
 * (WEFT_PERFMODEL=off, no home directory) with a message.  The
 * `weft-models` program calls it. */
WEFT_API WEFT_NODISCARD int weft_models_print(void);

/* ------------------------------------------------------------------------ */
/* Devices                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum weft_device_kind {
    WEFT_DEVICE_CPU = 0,   /* the CPU cores and host memory (always device 0) */
    WEFT_DEVICE_VGPU = 1,  /* a virtual GPU */
    WEFT_DEVICE_CUDA = 2   /* a CUDA device */
} weft_device_kind;

typedef struct weft_device_info {
    weft_device_kind kind;
    unsigned index;        /* in this runtime: 0 .. weft_device_count - 1 */
    int ordinal;           /* among the devices of its kind: vgpu 0..N-1, the CUDA ordinal;
                              -1 for the CPU */
    char name[32];         /* "cpu", "vgpu:0", "cuda:1" */
    size_t memory;         /* bytes it can hold (SIZE_MAX: unlimited host memory) */
    size_t memory_used;    /* bytes allocated on it now */
    int cpu_tasks;         /* the CPU only: 1 if "cpu" was among the devices asked for */
} weft_device_info;

/* Number of devices of rt (at least 1: the CPU), or 0 if rt is not a live
 * runtime.  Never blocks; thread-safe; may be called from a task. */
WEFT_API unsigned weft_device_count(weft_runtime *rt);

/* Describe device i of rt.  Errors: WEFT_EINVAL (bad runtime, out NULL, i
 * out of range), WEFT_ECLOSED.  Never blocks; thread-safe. */
WEFT_API WEFT_NODISCARD int weft_device_info_get(weft_runtime *rt, unsigned i, weft_device_info *out);

/* n bytes of memory on device i of rt (a GPU: 1 .. weft_device_count - 1),
 * for data that lives there (weft_data_register_device), counted in its
 * memory_used.  On a virtual GPU the memory is ordinary process memory
 * (the caller may fill it directly); on CUDA it is device memory.  Errors:
 * WEFT_EINVAL (bad runtime, out NULL, n 0, i not a GPU), WEFT_ENOMEM (the
 * device is full), WEFT_ECLOSED.  Never blocks; thread-safe. */
WEFT_API WEFT_NODISCARD int weft_device_alloc(weft_runtime *rt, unsigned i, size_t n, void **out);
/* Give back p (n bytes) from weft_device_alloc on device i; NULL p does
 * nothing.  Not while a registered handle uses it.  Errors: WEFT_EINVAL,
 * WEFT_ECLOSED.  Never blocks; thread-safe. */
WEFT_API WEFT_NODISCARD int weft_device_free(weft_runtime *rt, unsigned i, void *p, size_t n);

/* ------------------------------------------------------------------------ */
/* Data handles                                                              */
/* ------------------------------------------------------------------------ */

/* Dependencies inferred from data accesses, in spawn order, per data handle
 * (and across handles whose memory overlaps: weft_data_register):
 *   - a reader (WEFT_R) follows the last writer(s); readers run concurrently;
 *   - a writer (WEFT_W, WEFT_RW) follows the last writer(s) and every reader
 *     since them;
 *   - WEFT_RW|WEFT_COMMUTE tasks spawned in a row form a group: each follows
 *     what came before the group, they exclude each other at run time, and
 *     the next non-commuting access follows the whole group;
 *   - WEFT_UNORDERED accesses (R, W or RW) spawned in a row form such a group
 *     too (WEFT_RW|WEFT_UNORDERED is WEFT_RW|WEFT_COMMUTE, and they join
 *     one group): the data orders nothing among them — order them with
 *     desc.deps as needed — while each still sees a whole value (at run
 *     time one member at a time, readers included: several readers that
 *     should overlap read with plain WEFT_R);
 *   - WEFT_REDUCE tasks spawned in a row with the same operator and type form
 *     a reduction group: each follows what came before the group, they run
 *     concurrently (on any devices), and the next access of any other kind
 *     (or a reduction with another operator or type) follows the whole group
 *     and starts only once every member has completed (no GPU-to-GPU early
 *     release through a group: its partial results are combined on the host).
 * Failure flows with the data: a task is cancelled when an explicit
 * dependency failed or was cancelled, or when it reads (R, RW, COMMUTE,
 * REDUCE) data whose last writer failed or was cancelled — after a
 * reduction group, when any member failed or was cancelled.  Pure ordering
 * edges — a writer after readers, a WEFT_W writer after a writer or a
 * group — do not cancel: a task that overwrites data makes it valid again.
 * A writer that fails or is cancelled leaves the data as it was before it
 * (the value its readers would have seen without it: unregister returns
 * that, a WEFT_W writer after it starts from scratch), with one exception:
 * a writer that ran over the only copy of the value before it, in place (a
 * host task writing the registered memory while no GPU holds a copy; a GPU
 * task writing the one replica of it), and then failed leaves what it wrote
 * there — Weft keeps no spare copy of every value; the readers behind it
 * are cancelled as above, and the value is unspecified until a writer makes
 * it valid again.  A writer cancelled before it ran never leaves a trace.
 * Through overlapping registered ranges (weft_data_register) failure flows
 * by memory: a task reading (R, RW, COMMUTE) a handle over memory that a
 * failed or cancelled writer of an overlapping handle wrote, ordered after
 * it, is cancelled as a reader of that writer's own handle would be —
 * unless a task writing the reader's own handle was spawned after that
 * writer (its range was written again since: valid).  A WEFT_W access
 * never inherits failure, on one handle or through overlap.
 *
 * Access modes: bit flags.  WEFT_COMMUTE may be added to WEFT_RW: tasks that
 * access the same data with WEFT_RW|WEFT_COMMUTE, spawned one after another,
 * run in any order but never two at once (an accumulation, say).
 * WEFT_UNORDERED may be added to WEFT_R, WEFT_W or WEFT_RW (StarPU's
 * sequential consistency turned off for a handle): see the rules above.  An
 * unordered access follows the ordered accesses spawned before it: it opts
 * out of order only among unordered accesses, and a task whose unordered
 * access comes after an ordered one that waits (by deps) for the task
 * itself waits for ever — make both accesses unordered. */
enum weft_access_mode {
    WEFT_R = 1u,
    WEFT_W = 2u,
    WEFT_RW = 3u,
    WEFT_COMMUTE = 4u,
    /* May be added to any mode: the task uses the host's copy (the user's
     * memory) wherever it runs, e.g. a body placed on a GPU that reads or
     * writes the data on the host.  Ordering is as without it.  With
     * WEFT_REDUCE: the task's private copy is in host memory. */
    WEFT_HOST = 8u,
    /* A reduction: WEFT_REDUCE | one operator | one element type (below),
     * optionally | WEFT_HOST, e.g. WEFT_REDUCE | WEFT_RED_SUM | WEFT_RED_F64;
     * or WEFT_REDUCE | op, op a user reduction's operator, of elements of
     * any size (weft_reduction_register, below: its identity and combine
     * stand for the operator's, its element for the type).
     * The data is an array of elements of that type.  The task does not see
     * the data's value: weft_ctx_data gives it a private copy of its own,
     * on its device, every element set to the operator's identity (0 for
     * sums — -0.0 for floating point, so that x + identity is x bit for bit
     * —, the type's largest value or +inf for min, its smallest or -inf for
     * max) before its body runs (on a GPU: the fill is queued on its stream
     * ahead of the body's work); the body folds its contributions into it
     * with the operator.  When the data is next used otherwise (read,
     * written, reduced with another operator or type, partitioned,
     * unregistered), the private copies of the tasks that completed are
     * combined into the value in host memory (the task about to use it
     * waits on the host, before its body, for copies of private copies on
     * devices), in spawn order:
     *     value = value OP copy_1 OP copy_2 ... OP copy_k
     * whatever devices the tasks ran on and whenever they finished.  So
     * every result is deterministic, and equal bit for bit to a sequential
     * run in which each task, in spawn order, folds its contributions into
     * an identity-initialised temporary and then folds that into the value
     * — the same as folding them into the value directly when a task
     * contributes at most one term per element, or always for integers and
     * min/max, where order does not matter (NaN payloads aside; integer
     * sums wrap around, as unsigned arithmetic does).  Floating-point
     * min/max order -0.0 below +0.0 and give NaN when either side is NaN
     * (the first one in the order above).  The members of a group run at
     * once, on any devices, each on its own copy: a body needs no lock.
     * A task that fails or is cancelled contributes nothing: the tasks that
     * read the data after its group are cancelled (above), a writer makes
     * it valid again, and unregister returns the value with the other
     * members' copies combined.
     * Memory: each task's copy is data-sized and lives until combined
     * (placement reserves it on a GPU like the data's bytes); copies of
     * finished tasks are evicted from a full GPU to host memory, and those
     * in host memory are combined early, in the order above, as later
     * reducers start (so CPU reducers of integers hold about one copy per
     * running task; not for tiles, below).
     * Tiles (weft_data_partition) may be reduced: the private copy is of
     * the tile's interior only (weft_tile_info's in_rows x in_cols
     * elements, rows packed: weft_ctx_pitch gives in_cols times the
     * element size), and the copies are combined, as above, into the
     * interior; the halo is neither seen nor changed.  The combination
     * comes before anything reads the tile's value: a task on the tile, a
     * read of a neighbour whose halo covers part of it (it follows the
     * group, as it follows the tile's writers), a task on the parent
     * (which sees the tiles reassembled), unregister.  A tile's copies in
     * host memory are not combined early (below): they wait for one of
     * those, each the size of the tile with its halo.
     * Not allowed (WEFT_EINVAL at spawn, the message naming the access):
     * WEFT_REDUCE with WEFT_R, WEFT_W or WEFT_COMMUTE; a missing or unknown
     * operator or type; data whose size (a tile: the bytes of a row of its
     * interior) is not a multiple of the element size; data partitioned
     * into tiles (reduce its tiles); a task naming the same data twice when
     * one of the accesses is a reduction; a task reducing a tile that also
     * names the tile's parent, or reads (WEFT_R, WEFT_RW) a tile whose halo
     * covers part of the reduced one (a task does not read what it
     * reduces). */
    WEFT_REDUCE = 16u,
    /* Scratch memory (StarPU's STARPU_SCRATCH): {d, WEFT_SCRATCH}, optionally
     * | WEFT_HOST or, for a task on several GPUs, | WEFT_ON_GPU(k), gives the
     * task a buffer of d's size (weft_ctx_bytes; a tile's: its span, rows
     * packed, weft_ctx_pitch its width) of its own, where it runs: host
     * memory for a task on the CPU or with WEFT_HOST; else the memory of
     * its (k-th) GPU — on a virtual GPU, the virtual GPU's memory, counted
     * in its memory_used as replicas are.  weft_ctx_data gives its address.
     *   - Contents: unspecified (whatever the last user left, or fresh
     *     memory); the body must write before it reads.  In the checking
     *     mode (WEFT_VGPU_CHECK=1) the buffer is filled with 0xDB before
     *     the body runs — at once in host memory, on the task's stream
     *     ahead of its work on a virtual GPU (not on CUDA) — so that a body
     *     relying on its contents goes wrong at once, on every run.
     *   - Its own: no other task running meanwhile uses it; two tasks with
     *     scratch of the same d at once get two buffers.
     *   - Lifetime: from the body's start until the task finishes (on a
     *     GPU, once the work it queued on its streams has run); then Weft
     *     takes it back.  A GPU's buffer is kept for d's next scratch task
     *     on that GPU (evicted, as an unused replica is, when the GPU needs
     *     the room); a host buffer is freed.
     *   - Memory: a task placed on GPUs reserves the buffer's bytes on its
     *     GPU as it does its data's (weft_placement.memory, WEFT_ENODEV),
     *     and the buffer is allocated as replicas are, evicting the least
     *     recently used unused ones when the GPU is full.
     *   - Ordering: none.  d's value is neither read nor changed, and the
     *     access adds no dependency (the task does not follow d's writers or
     *     readers, nor do later tasks on d follow it; a task may hold d
     *     with WEFT_RW meanwhile).  A failed writer of d does not cancel it.
     * d may be registered for scratch use only: weft_data_register(rt,
     * NULL, n, &d) (StarPU's home node -1), a handle with no memory of its
     * own, which any access but WEFT_SCRATCH, weft_data_acquire and
     * weft_data_partition refuse (WEFT_EINVAL, saying so).  Any other
     * handle serves too: a tile, data partitioned into tiles (all of it),
     * data registered on a device.  A task may name d several times as
     * scratch (a buffer each), and beside another access to d (then it has
     * d's value and, separately, a scratch buffer).  weft_data_unregister(d)
     * waits for d's scratch tasks too (called from a task, it helps run
     * them, as it helps run d's other tasks).
     * Not allowed (WEFT_EINVAL at spawn, the message naming the access):
     * WEFT_SCRATCH with WEFT_R, WEFT_W, WEFT_RW, WEFT_COMMUTE or
     * WEFT_REDUCE; WEFT_ON_GPU with WEFT_HOST. */
    WEFT_SCRATCH = 32u,
    /* The access orders nothing against the other WEFT_UNORDERED (and
     * WEFT_RW|WEFT_COMMUTE) accesses of the same data spawned in a row (the
     * rules above): tasks that the program orders itself, by desc.deps or
     * task-space keys, or not at all.  Failure flows as for any access:
     * after the group, a reader is cancelled when a member that wrote
     * failed.  Not with WEFT_REDUCE or WEFT_ON_GPU (WEFT_EINVAL at spawn);
     * not for weft_data_acquire. */
    WEFT_UNORDERED = 64u
};

/* The operator of a WEFT_REDUCE access (bits 12-15 of the mode).
 * WEFT_RED_USER: a user reduction; weft_reduction_register (below) gives
 * the whole operator, WEFT_RED_USER with the reduction's number. */
enum weft_reduce_op {
    WEFT_RED_SUM = 1u << 12,
    WEFT_RED_MIN = 2u << 12,
    WEFT_RED_MAX = 3u << 12,
    WEFT_RED_USER = 4u << 12
};
#define WEFT_RED_OP_MASK 0xF000u

/* The element type of a WEFT_REDUCE access (bits 16-19 of the mode). */
enum weft_reduce_type {
    WEFT_RED_I32 = 1u << 16,  /* int32_t */
    WEFT_RED_I64 = 2u << 16,  /* int64_t */
    WEFT_RED_U32 = 3u << 16,  /* uint32_t */
    WEFT_RED_U64 = 4u << 16,  /* uint64_t */
    WEFT_RED_F32 = 5u << 16,  /* float */
    WEFT_RED_F64 = 6u << 16   /* double */
};
#define WEFT_RED_TYPE_MASK 0xF0000u

/* User-defined reductions (StarPU's init and redux codelets, MPI_Op_create):
 * an identity and an associative combine over elements of any fixed size —
 * argmin over (value, index) pairs, complex sums, a struct's fields.
 * weft_reduction_register gives an operator `op`; a task reduces with it
 * through the access {d, WEFT_REDUCE | op} (optionally | WEFT_HOST), as
 * with a built-in operator and type.  Everything said of WEFT_REDUCE above
 * holds for it (groups, private copies, spawn order, failure and
 * cancellation, tiles, memory), with these for the operator:
 *   - a group is a run of reducers with the same op (two registrations
 *     of equal descriptions are two operators);
 *   - a private copy starts as the identity: a host image of it (the
 *     identity bytes in every element, or init over all of them) made
 *     when a group starts reducing the data, copied into each reducer's
 *     copy — on a GPU, on its stream ahead of the body, as a built-in
 *     identity is;
 *   - the copies are combined on the host, in spawn order, by combine
 *     (value = value OP copy_1, then OP copy_2 ...), a GPU reducer's copy
 *     brought to host memory first (one copy per reducer, as for the
 *     built-in operators): combine is host code on every kind of device,
 *     CUDA included, never queued on a GPU.  So the result is the
 *     sequential fold in spawn order for any associative combine, even
 *     one that does not commute, bit for bit the same on every run and
 *     any placement.  Copies are never combined out of spawn order (the
 *     built-in integer operators may be: they commute).
 * Misuse is refused at spawn (WEFT_EINVAL, the message naming the
 * access): WEFT_RED_USER without a registered reduction's number (write
 * WEFT_REDUCE | op, op as registered), a number registered with another
 * runtime, WEFT_RED_USER with WEFT_RED_SUM, WEFT_RED_MIN or WEFT_RED_MAX,
 * or with type bits (the reduction gives the element size); data whose
 * size (a tile: a row of its interior) is not a whole number of the
 * reduction's elements.  (An op carries its number in bits 20-30: the
 * bits of WEFT_ON_GPU, which does not apply to reductions; a number
 * unregistered or of another runtime is detected, as a stale handle is:
 * a safety net — numbers of destroyed runtimes are reused.) */
#define WEFT_RED_USER_ID_MASK 0x7FF00000u

/* combine: inout[i] = inout[i] OP in[i] for i in 0 .. count-1, on
 * elements of elem_size bytes: one call per private copy (a tile's: per
 * row of its interior), count elements at once.  inout points into the
 * data's host memory (the registered memory; a tile's row in its
 * parent's), in to a private copy in host memory (as aligned as
 * malloc's); the two never overlap.  Called on the host by whichever
 * thread combines (a worker starting a task, the thread of an acquire,
 * an unregister or destroy), with the data's lock held: calls for
 * different data may run at once on several threads, never two for the
 * same data.  It must not call Weft.  arg: the description's. */
typedef void (*weft_reduction_combine_fn)(void *inout, const void *in, size_t count, void *arg);
/* init: each of the count elements at out (host memory) set to the
 * identity.  Called on the host as combine is, when a group starts
 * reducing a data handle. */
typedef void (*weft_reduction_init_fn)(void *out, size_t count, void *arg);

typedef struct weft_reduction_desc {
    size_t elem_size;                  /* bytes of one element: > 0 */
    const void *identity;              /* elem_size bytes, the identity element (copied
                                          during the call); or NULL, and init */
    weft_reduction_init_fn init;       /* or: fills elements with the identity (identity NULL) */
    weft_reduction_combine_fn combine; /* required: associative (it need not commute) */
    void *arg;                         /* passed to combine and init; the caller's, used
                                          until the runtime is destroyed */
    const char *name;                  /* for messages; copied (first 31 bytes); may be NULL */
} weft_reduction_desc;

/* Register a user reduction with rt: *op is its operator, for the
 * accesses {d, WEFT_REDUCE | *op} of rt's tasks (WEFT_RED_USER and the
 * reduction's number: see above), on data of elements of
 * desc->elem_size bytes.  Register once, at set-up, and use it as often
 * as needed: it is rt's until weft_runtime_destroy (there is no
 * unregister); at most 2047 are registered at once in a process.
 * Errors: WEFT_EINVAL (NULL rt, desc or op; elem_size 0; combine NULL;
 * neither identity nor init, or both: the message says which),
 * WEFT_ECLOSED, WEFT_ENOMEM (also: 2047 registered already).  Never
 * blocks; thread-safe; may be called from a task. */
WEFT_API WEFT_NODISCARD int weft_reduction_register(weft_runtime *rt, const weft_reduction_desc *desc,
                                                    unsigned *op);

/* Where an access of a task on several GPUs is (bits 20-25 of the mode):
 * WEFT_ON_GPU(k) puts it on the k-th GPU of the task's device set (as
 * weft_ctx_gpu(ctx, k) numbers them; k in 0 .. 62) instead of the first:
 * the data is made valid there, weft_ctx_data gives that GPU's copy, and
 * work reading it belongs on that GPU's stream (weft_ctx_stream(ctx, k)).
 * WEFT_ON_GPU(0) is the default.  Ordering is as without it.  With
 * WEFT_R, WEFT_W, WEFT_RW or WEFT_SCRATCH (its buffer then on that GPU;
 * not WEFT_HOST, WEFT_COMMUTE or WEFT_REDUCE);
 * every alternative of the task that can run must have more than k GPUs;
 * one task may name the same data on several GPUs only to read it (scratch
 * buffers aside: they are not the data).
 * (WEFT_EINVAL at spawn, naming the access, otherwise.)  A task with
 * several GPUs reserves on each of them the largest of its GPUs' data. */
#define WEFT_ON_GPU(k) ((((unsigned)(k)) + 1u) << 20)
#define WEFT_ON_GPU_MASK 0x3F00000u

/* Register n bytes at ptr (host memory) as a data handle: *out.  The
 * caller keeps ownership of the memory; it must stay valid until
 * weft_data_unregister returns.  ptr NULL registers a handle with no
 * memory, for scratch only (WEFT_SCRATCH: its tasks' buffers are n bytes;
 * weft_data_host gives a NULL pointer); it overlaps nothing.
 *
 * Overlapping ranges.  Two handles overlap when their ranges [ptr, ptr+n)
 * share a byte (the same memory registered twice included; a tile is part
 * of the handle it was partitioned from; data registered on a device and
 * scratch-only handles overlap nothing).  Tasks are ordered by memory, not
 * by handle: two tasks whose accesses name overlapping handles, one of
 * them writing (W, RW, COMMUTE, UNORDERED with a write), run in spawn
 * order, exactly as if they named one handle; reads never order reads
 * (failure flows through overlapping memory as through one handle, see
 * "Failure flows with the data"), and commute or
 * unordered groups form on one handle only (across overlapping handles
 * their members are ordered).  Parts that do not overlap each other stay
 * independent even when a larger registered range covers both: writers of
 * a[0:4) and of a[4:8) run at once although a[0:8) is registered too (a
 * task on a[0:8) is ordered with both; only tasks on a third range
 * overlapping both parts order them, through themselves).  A handle that overlaps another one is
 * host-only while it does: a task that may run on a GPU must name it with
 * WEFT_HOST, it cannot be reduced into (WEFT_REDUCE) nor partitioned, and
 * a range overlapping a partitioned one is refused — each refused with
 * WEFT_EINVAL and a message naming both ranges and what to write instead.
 * A runtime with no overlapping ranges pays nothing for this at spawn;
 * with them, a spawn naming an overlapping handle also names each handle
 * it overlaps for the order (no data moves for it, except that a value
 * last written on a GPU is brought to the host first).
 *
 * A range may be registered over one whose weft_data_unregister has
 * begun: the new handle's tasks follow the tasks of the handle being
 * unregistered, as those of any overlapping handle.
 *
 * Errors: WEFT_EINVAL (n == 0, NULL out; the range overlaps a partitioned
 * one), WEFT_ECLOSED, WEFT_ENOMEM; nothing is registered then.  Never blocks; thread-safe (a task spawned
 * on another thread while the range is registered is ordered with the new
 * handle's tasks either way); may be called from a task. */
WEFT_API WEFT_NODISCARD int weft_data_register(weft_runtime *rt, void *ptr, size_t n,
                                               weft_data **out);

/* Register n bytes that live on device i (a GPU: a CUDA pointer, memory
 * from weft_device_alloc) as a data handle: its first valid replica is that
 * memory, used in place by tasks on that GPU (never evicted nor freed by
 * Weft).  The host's copy is Weft's own, allocated when a task on the host
 * first needs it (weft_data_host gives NULL until then); unregister and
 * destroy leave the newest value in ptr.  The caller keeps ownership of
 * the memory; it must stay valid until unregister returns.  Such data
 * cannot be partitioned.  Errors: WEFT_EINVAL (NULL ptr or out, n 0, i not
 * a GPU), WEFT_ECLOSED, WEFT_ENOMEM.  Never blocks; may be called from a
 * task. */
WEFT_API WEFT_NODISCARD int weft_data_register_device(weft_runtime *rt, unsigned i, void *ptr, size_t n,
                                                      weft_data **out);

/* Unregister: new spawns that name d fail with WEFT_EINVAL; the call blocks
 * until every task already spawned with d has finished (and every task
 * spawned before the call on a handle whose memory overlaps d's: they name
 * d for the order), combines the
 * reductions (WEFT_REDUCE) not combined yet, copies the newest value back
 * into the registered memory if only a device held it, then
 * frees the handle and its copies on devices (destroy does the same for
 * handles still registered).  A partitioned d's tiles are unregistered
 * with it, first.  Tasks spawned afterwards on handles that overlap d stay
 * ordered after d's tasks (d's place in their order is handed over to
 * them as the call begins).  Errors: WEFT_EINVAL (NULL, already
 * unregistered), WEFT_EBUSY (the calling task itself accesses d, or a
 * handle overlapping it: waiting would never end; d is a tile: unregister
 * its parent; nothing changes), WEFT_EDEADLK (from an on_finish
 * callback); WEFT_EDEVICE in the checking mode when its host watch
 * (weft_data_acquire, below) found d's memory (or a tile's) written while
 * the newest value was on a GPU — d is unregistered all the same, its
 * memory holding the newest value.
 * May be called from a task (it then helps run other tasks while it waits). */
WEFT_API WEFT_NODISCARD int weft_data_unregister(weft_data *d);

/* Tiles: a registered array split into a grid of blocks, each a data handle
 * of its own, so that tasks on different devices work on different parts of
 * it (a stencil, a blocked factorization).  The data is seen as rows x cols
 * elements of elem bytes, rows pitch bytes apart (a 1-D array: rows 1); the
 * grid_rows x grid_cols blocks have near-equal sizes, as weft_grid's: the
 * first rows % grid_rows block rows get one row more than the others, and
 * the first cols % grid_cols block columns one column more (10 rows in 4:
 * 3, 3, 2, 2).  With halo > 0 each
 * tile also spans `halo` elements of its neighbours on each side (clipped
 * at the edges of the array, corners included): a task reading a tile sees
 * its neighbours' newest values there, copied by Weft from wherever they
 * are (halo exchange), and is ordered after their writers; the halo is
 * read-only: a task writing a tile must write its interior only.  On a
 * GPU, what it writes into its halo is lost; on the host (a CPU task, a
 * WEFT_HOST access, weft_data_acquire) the tile's memory is its span in
 * the parent's memory, whose halo cells are its neighbours' interiors, so
 * a write there changes a neighbour's value unordered with that
 * neighbour's tasks: never write the halo.  The checking mode
 * (WEFT_VGPU_CHECK=1) reports such a write by the body of a task on the
 * host that accesses the tile with WEFT_RW (the task fails with
 * WEFT_EDEVICE); not one by a WEFT_W task (its neighbours' writers may run
 * beside it) nor one made under weft_data_acquire.
 * A tile's address (weft_ctx_data, weft_data_host) is its span's first
 * element, halo included; weft_tile_info says where the interior lies in
 * it.  A tile's replica on a device is packed: rows of
 * its own width (weft_ctx_pitch says the pitch where the body runs).  A
 * tile may be reduced (WEFT_REDUCE: its interior, through a private copy);
 * the data partitioned may not. */
typedef struct weft_tiling {
    size_t elem;                       /* bytes per element (> 0) */
    size_t rows, cols;                 /* the data as rows x cols elements */
    size_t pitch;                      /* bytes from one row to the next (0: cols * elem) */
    unsigned grid_rows, grid_cols;     /* blocks: at least 1 each, at most rows and cols, 4096 in all */
    unsigned halo;                     /* elements on each side (at most the smallest block's size) */
} weft_tiling;

/* Partition d into tiles: writes grid_rows * grid_cols handles, row-major,
 * to tiles.  d stays usable: a task naming d is ordered after (and before)
 * the tasks on every tile, and sees (makes) the whole array — Weft puts it
 * back together from the tiles, or the tiles from it, through the host, when
 * the task alternates between the two (a phase change, not a step of a
 * loop).  A task reading d (R, RW) after a tile's writer failed or was
 * cancelled is cancelled, as for any read after a failed writer (and not
 * after a failed writer of d whose value tiles' writers have all replaced
 * since).  A commute group on d (WEFT_RW|WEFT_COMMUTE tasks in a row) is
 * closed by a task naming any tile, and a tile's group by a task naming d,
 * as by any other access of the group's data.  One task
 * may name d and one of its tiles only to read both: a spawn naming them
 * with a write to either (W, RW, COMMUTE) fails with WEFT_EINVAL (the two
 * views are brought up to date one from the other between tasks, never
 * within one).  The tiles live as long as d: unregistering d unregisters them
 * first (waiting for their tasks); a tile cannot be unregistered alone.
 * Errors: WEFT_EINVAL (NULL argument, a bad tiling, with the reason; d is a
 * tile; d was registered for scratch only; another registered range
 * overlaps d's memory: unregister it first), WEFT_EBUSY (d is partitioned
 * already, or tasks that name d are
 * pending: partition before spawning on it, or after they finished),
 * WEFT_ENOMEM, WEFT_EDEADLK (from an on_finish callback), or a device's
 * error combining d's reductions.  Nothing changes on error.  Reductions of d not combined yet are combined first
 * (the tiles are made from the result): then the call blocks while private
 * copies are brought from devices; otherwise it never blocks.  Thread safe
 * (a spawn naming d from another thread meanwhile fails with WEFT_EBUSY or
 * is ordered before the partition). */
WEFT_API WEFT_NODISCARD int weft_data_partition(weft_data *d, const weft_tiling *t, weft_data **tiles);

/* Where a tile lies in its parent, in elements: its span (halo included)
 * and its interior. */
typedef struct weft_tile_info {
    size_t row0, col0, rows, cols;     /* the span */
    size_t in_row0, in_col0, in_rows, in_cols; /* the interior (what a writer writes) */
    unsigned index;                    /* row-major in the grid */
} weft_tile_info;
/* Errors: WEFT_EINVAL (NULL, unregistered, or not a tile).  Never blocks. */
WEFT_API WEFT_NODISCARD int weft_data_tile_info(const weft_data *tile, weft_tile_info *out);

/* Host address and size of d (while tasks on GPUs write d, the newest value
 * may be on a device, and after reductions in private copies: a task
 * reading it on the CPU, or unregister, brings it back; so does
 * weft_data_acquire, below).  The address is NULL for d registered for
 * scratch only.  Errors: WEFT_EINVAL.  Never blocks. */
WEFT_API WEFT_NODISCARD int weft_data_host(const weft_data *d, void **ptr, size_t *n);

/* Acquire d for the calling thread: its host memory (weft_data_host's
 * pointer: the registered memory; for data registered on a device, Weft's
 * host copy; for a tile, its span in its parent's memory) may be used
 * directly until weft_data_release(d), with mode WEFT_R (read it), WEFT_W
 * (overwrite it: the value before is not brought back) or WEFT_RW.
 * The acquisition is ordered as a task with the access (d, mode) spawned
 * at that moment would be: after the writers spawned before it, and for
 * WEFT_W / WEFT_RW after the readers too (as an access of the host, by an
 * internal task named "weft_data_acquire" that holds no worker).  The
 * call blocks until they have finished, then makes the host's copy the
 * newest value (WEFT_R / WEFT_RW: copied from the device that has it and
 * waited for; reductions not combined yet are combined into it), and for
 * WEFT_W / WEFT_RW makes it the only valid copy (what the caller writes is
 * the data's value; tasks on GPUs get it copied from there).  Tasks
 * spawned after it that name d are ordered after it as after such a task:
 * they wait until the release (a tile: also its neighbours' readers,
 * and tasks on its parent — data/tile ordering applies as for any task).
 * A held acquisition is not counted as a task in flight: weft_wait_all
 * does not wait for it (only for the tasks behind it — so a thread that
 * waits for those before its own release waits forever).
 * timeout_ns: 0 waits without limit (unlike weft_task_timedwait, whose 0
 * polls: an acquisition that could not wait would be of little use);
 * otherwise WEFT_ETIMEDOUT when the
 * tasks before it have not finished in time (the timeout does not bound
 * a wait for backpressure, max_inflight).  On every error nothing is
 * held, and the data is as if the acquire had never been made.
 * Errors:
 *   WEFT_EINVAL     NULL or unregistered d; a mode other than WEFT_R,
 *                   WEFT_W, WEFT_RW (WEFT_REDUCE, WEFT_COMMUTE, WEFT_HOST,
 *                   WEFT_ON_GPU, WEFT_SCRATCH are for tasks); d registered
 *                   for scratch only (no memory); d acquired already (by any
 *                   thread, or being acquired: release it first); called
 *                   from a task (a task names the data in its accesses
 *                   instead: acquire is for threads outside the
 *                   runtime's tasks); d being unregistered;
 *   WEFT_ECANCELLED R or RW, and the last writer before it (or a task it
 *                   follows) failed or was cancelled: the data has no
 *                   valid value, as a reader task would be cancelled (the
 *                   message names the root cause; a WEFT_W acquire, or a
 *                   writer task, makes it valid again); also when
 *                   weft_cancel_pending came while it waited;
 *   WEFT_ETIMEDOUT  timeout_ns ran out;
 *   WEFT_EDEADLK    called from an on_finish callback;
 *   WEFT_ECLOSED    the runtime is destroyed or being destroyed;
 *   WEFT_ENOMEM, WEFT_EBUSY (d was partitioned meanwhile), or a device's
 *                   error making the host's copy valid;
 *   WEFT_EDEVICE    also, in the checking mode, the host watch (below)
 *                   found the memory written while the newest value was on
 *                   a GPU: the value is brought back over that write all
 *                   the same, and nothing is held (acquire again).
 * Blocks.  Thread safe: any thread may release what another acquired.
 * Not from a task (WEFT_EINVAL).  Ownership: the caller keeps the memory
 * as for weft_data_register; Weft does not touch the host copy while it
 * is held.  In the checking mode (WEFT_VGPU_CHECK=1), the registered memory
 * is filled with 0xDB whenever a GPU task's write makes it stale, so a read
 * of it outside an acquisition (or a host task) shows at once; acquire
 * brings the newest value back first.
 *
 * The checking mode's host watch: a write of that stale memory by the
 * program itself (code that neither runs in a task naming the data nor
 * holds it acquired) is lost when the newest value comes back over it.
 * When the value comes back (a task on the host reading d, an acquire
 * with WEFT_R or WEFT_RW, unregister, a GPU's copy evicted to the host,
 * a task on a tile or on its parent bringing the other view's value
 * home, a tile's border band brought to the host for a neighbour's halo,
 * a task on a range overlapping d) or a
 * newer GPU write fills the memory again, the memory is compared with
 * what the checking mode left there; a change is printed on stderr
 * ("weft: data check: ...", naming the data — "data d<id>", "tile <i> of
 * data d<id>" — and the GPU holding the value, and what to write
 * instead), and fails what brought the value back: the task (before its
 * body runs; weft_task_wait's WEFT_ETASKFAILED says "the checking mode
 * found the memory ... written"), the acquire (WEFT_EDEVICE), or
 * unregister (WEFT_EDEVICE, the data unregistered all the same); where
 * an eviction or a newer write found it, the next task naming d (or
 * acquire, unregister).  Write the memory after weft_data_acquire(d,
 * WEFT_RW) (or WEFT_W), or in a task on the host that names d with
 * WEFT_RW or WEFT_W.  A write-only access (a WEFT_W task on the host, a
 * WEFT_W acquire without a timeout) brings nothing back and compares
 * nothing: the data's value is what it writes, whatever the memory held
 * (a timed WEFT_W acquire brings the value back, so that giving up
 * changes nothing, and compares as WEFT_RW does).  A partitioned
 * array's memory and its tiles' (which the fill spares: the parent's
 * memory is every tile's, and a tile's border band is its neighbours'
 * halo) are watched through a digest of what the runtime left there.
 * Not watched: data registered on a device (the host's copy is Weft's),
 * data with no memory, reductions' private copies and scratch buffers
 * (not the data's memory). */
WEFT_API WEFT_NODISCARD int weft_data_acquire(weft_data *d, unsigned mode, uint64_t timeout_ns);

/* Acquire n data at once, access i with acc[i].mode (WEFT_R, WEFT_W or
 * WEFT_RW), as one task naming them all would be ordered (so the thread
 * waits for all of them together, holding none meanwhile, where two
 * weft_data_acquire calls in a row hold the first while waiting for the
 * second).  Acquisitions do not queue behind one another: a datum that
 * any thread holds or is acquiring is refused at once (WEFT_EINVAL, as
 * for weft_data_acquire), so threads sharing data serialise their
 * acquisitions themselves.  Each is then released with
 * weft_data_release; the acquisition ends, and the tasks behind any of
 * them may start, once every one of them has been released.  Errors: as
 * weft_data_acquire, and WEFT_EINVAL for NULL acc, n 0, the same data
 * named twice, or data of two runtimes.  Blocks; not from a task. */
struct weft_access; /* (Tasks, below: a data handle and a mode) */
WEFT_API WEFT_NODISCARD int weft_data_acquire_many(const struct weft_access *acc, size_t n, uint64_t timeout_ns);

/* A hint (StarPU's starpu_data_wont_use): d will not be used again soon,
 * so its copies on GPUs are the first evicted when a GPU needs room for
 * other data (a GPU copy holding the newest value is written back first,
 * as any evicted one).  Nothing moves now; the next task that uses d on a
 * GPU makes its copy there recent again.  A partitioned d's tiles each
 * have their own copies: give the hint for each.  Returns 0, or
 * WEFT_EINVAL (NULL or unregistered d).  Never blocks (brief locks);
 * thread-safe, from a task too. */
WEFT_API WEFT_NODISCARD int weft_data_wont_use(weft_data *d);

/* End the calling program's acquisition of d (weft_data_acquire): the
 * tasks spawned after it that name d may start (with what the host's copy
 * holds now as the data's value, for WEFT_W / WEFT_RW).  From any thread,
 * not only the one that acquired it.  Errors: WEFT_EINVAL (NULL or
 * unregistered d; d not acquired, or still being acquired by another
 * thread), WEFT_ECLOSED (the runtime was destroyed: destroy released it).
 * Never blocks (the tasks released are queued, not run here).  May be
 * called from a task (releasing what an outside thread acquired). */
WEFT_API WEFT_NODISCARD int weft_data_release(weft_data *d);

/* ------------------------------------------------------------------------ */
/* Tasks                                                                     */
/* ------------------------------------------------------------------------ */

/* What a body sees of its own execution (opaque; valid during the body). */
typedef struct weft_ctx weft_ctx;

/* A task body.  Returns 0 on success; any other value fails the task with
 * that value (kept as the task's result) and cancels its dependents. */
typedef int (*weft_body_fn)(weft_ctx *ctx, void *arg);

typedef struct weft_access {
    weft_data *data;
    unsigned mode; /* WEFT_R, WEFT_W, WEFT_RW, optionally | WEFT_UNORDERED;
                      WEFT_RW | WEFT_COMMUTE; or
                      WEFT_REDUCE | an operator | a type, or
                      WEFT_REDUCE | a user reduction's op; or WEFT_SCRATCH;
                      any | WEFT_HOST; or WEFT_R/W/RW/SCRATCH | WEFT_ON_GPU(k) */
} weft_access;

/* Where a task may run: one device set, with what it reserves on each GPU
 * of the set and, optionally, a body of its own (a variant).  A task gives
 * a list of alternatives (weft_task_desc.placements); the runtime's policy
 * (weft_config.policy) picks one once the task's dependencies are done,
 * reserves its compute share and memory on each GPU of the set (the task
 * stays WAITING while they are taken by others), runs that alternative's
 * body, and gives them back when the task finishes.  GPUs are numbered
 * 0 .. G-1 in the order of weft_device_info (every device but the CPU). */
typedef struct weft_placement {
    unsigned cpu;      /* 1: the CPU is in the set (always true of a body's thread;
                          "cpu" alone means no GPU) */
    unsigned gpus;     /* GPUs in the set: 0, or k >= 1 distinct ones */
    int gpu;           /* with gpus == 1: this GPU, or -1 for any (weft_placement_init) */
    double share;      /* compute share of each GPU of the set, in (0, 1]; 0 means 1,
                          the whole GPU.  Tasks whose shares add up to at most 1 run
                          on one GPU at once (as Parla's vcus).  On "cpu" alone (gpus
                          0): a share of the CPU as one whole, which tasks on "cpu"
                          with a share split in the same way (two of 0.75 never run
                          at once); 0 there reserves nothing (a plain CPU task's) */
    size_t memory;     /* bytes reserved on each GPU of the set (counted in
                          weft_device_info.memory_used while the task holds them); on
                          "cpu" alone, bytes of the host's physical memory, which the
                          tasks on "cpu" holding some never exceed together (more
                          than the host has: WEFT_ENODEV).  A task on a set with GPUs
                          reserves nothing on the CPU */
    weft_body_fn body; /* this alternative's body; NULL: the task's body */
    uint64_t gpu_set;  /* 0: any GPUs (or `gpu`); else exactly these: bit g for GPU g,
                          as many bits as `gpus`, `gpu` -1.  The set's k-th GPU
                          (weft_ctx_gpu) is then the k-th lowest of them */
} weft_placement;

/* *p = any one GPU, whole, no memory, the task's body.  Never fails. */
WEFT_API void weft_placement_init(weft_placement *p);

/* Parse a device set: "cpu", "gpu" (any one), "gpu:I", "K*gpu" or "Kxgpu"
 * (any K distinct), "cpu+gpu" (and "cpu+gpu:I", "cpu+K*gpu"), into *p,
 * which is first reset by weft_placement_init (set share, memory and body
 * after).  Errors: WEFT_EINVAL (NULL, or a bad string: the message names
 * the bad part; *p is then reset).  Never blocks. */
WEFT_API WEFT_NODISCARD int weft_placement_parse(const char *s, weft_placement *p);

typedef struct weft_task_desc {
    weft_body_fn body;                /* the task's body: required, but for a task whose every
                                         placement alternative has a body of its own (then
                                         NULL is fine); with placements, the body of the
                                         alternatives that have none */
    void *arg;                        /* passed to body; owned by the task if arg_destroy is set */
    void (*arg_destroy)(void *arg);   /* called exactly once, after the body ran or the
                                         task was cancelled (on some worker or in
                                         weft_spawn if the spawn fails), and before the
                                         task is seen finished: when a wait on it
                                         returns, arg_destroy has returned */
    weft_task *const *deps;           /* tasks this one must follow; may be NULL if ndeps == 0 */
    size_t ndeps;
    const weft_access *accesses;      /* data this task touches; may be NULL if naccesses == 0 */
    size_t naccesses;
    const char *name;                 /* for traces and error reports; copied (first 31 bytes) */
    int priority;                     /* higher runs first among ready tasks; default 0 */
    unsigned flags;                   /* WEFT_SPAWN_* */
    /* Where the task may run (weft_placement), in order of preference; NULL
     * with nplacements 0: the CPU, as a plain task.  A spawn whose every
     * alternative no device set of this runtime could ever satisfy fails,
     * with a message saying why for each alternative: WEFT_ENODEV when the
     * runtime lacks what they ask for (more GPUs than there are — any GPU
     * on a runtime without GPUs —, a GPU that does not exist, more memory
     * than the GPU has: its `memory` plus the bytes of the data it
     * accesses without WEFT_HOST, and of its scratch buffers there, which
     * are reserved on its GPUs too);
     * WEFT_EINVAL when one of them is malformed (a share outside (0, 1],
     * an empty set, a GPU number or set that contradicts `gpus`).
     * Alternatives that could never run are otherwise skipped.  Copied
     * during the call. */
    const weft_placement *placements;
    size_t nplacements;
    /* If set, called once when the task finishes, with finish_arg (or, when
     * finish_arg is NULL, with arg: code that sets only on_finish gets the
     * body's arg) and the task's own outcome: 0, WEFT_ETASKFAILED (its
     * body returned non-zero or its device work failed) or WEFT_ECANCELLED;
     * for WEFT_ETASKFAILED, weft_last_error() on its thread says why while
     * it runs, as a wait on the task would (the checking mode's report
     * when that failed the task); the thread's own message is back when it
     * returns.
     * It runs before arg_destroy and before any wait on the task returns
     * (and before weft_wait_all can see the task finished), on the thread
     * that finishes the task: a worker, or for a task on GPUs perhaps a
     * device's thread (a virtual GPU's queue thread, a CUDA callback
     * thread).  Not called when the spawn fails (the caller then keeps
     * finish_arg).
     * What it may call: weft_spawn, weft_space_spawn, weft_comm_post and
     * weft_comm_exchange (the completion callback that submits the next
     * task, StarPU's idiom): from a callback they never wait for
     * backpressure (max_inflight; nor return WEFT_EAGAIN for
     * WEFT_SPAWN_NOWAIT) — the task finishing makes room for what its
     * callback spawns; a callback that spawns several tasks per finish
     * grows the tasks in flight past max_inflight, and bounds them itself.
     * Also the calls that never block (task status, info, cancel, release;
     * data register; weft_last_error ...).  Not the calls that wait:
     * weft_task_wait, weft_task_timedwait, weft_wait_all(_timed),
     * weft_wait_settled_timed, weft_data_acquire(_many),
     * weft_data_unregister, weft_data_partition, weft_comm_destroy,
     * weft_runtime_destroy return WEFT_EDEADLK at once from a callback
     * (the thread it runs on may be the one the wait needs); look with
     * weft_task_status_get instead, or wait from the program's own thread.
     * It must not block otherwise (on its own locks with threads that wait
     * for tasks, say): the thread finishing tasks waits for it. */
    void (*on_finish)(void *arg, int status);
    /* The argument on_finish receives (StarPU's callback_arg); NULL: arg.
     * Not owned by the task: arg_destroy does not see it (on_finish may
     * free it; it is called exactly once when the spawn succeeded). */
    void *finish_arg;
    /* What kind of work the task does, for the "dmda" policy's
     * performance models (weft_config.policy): tasks of one kind take
     * times that depend on their devices and the bytes of their accesses
     * only ("gemm", "potrf").  NULL: its body's name (the first placement
     * alternative's own body, else `body`): the symbol's name when the
     * function is exported, else its object file and offset, the same in
     * every run of one build (a derived name longer than WEFT_KIND_MAX
     * bytes keeps its start and a hash of the rest).  Copied.  The spawn
     * fails with WEFT_EINVAL when kind is "" (NULL asks for the derived
     * name), longer than WEFT_KIND_MAX bytes (two kinds would then share a
     * model), holds a control character, or is "(time per unit of cost)"
     * (the models' own rate per unit of cost).  Kinds and costs are used by
     * "dmda" only: on another policy the runtime says so once, on stderr,
     * at the first task that carries either. */
    const char *kind;
    /* The task's work (its flops, or any measure its time on every device
     * is proportional to; 0: none): while its kind has no model on a kind
     * of device, "dmda" predicts its time there from the time per unit
     * of cost the tasks with a cost took there, instead of sending tasks
     * of the kind there to calibrate.  Must be finite and not negative
     * (else WEFT_EINVAL). */
    double cost;
} weft_task_desc;

/* Flags of weft_task_desc. */
enum weft_spawn_flags {
    /* Where backpressure would block (or help), return WEFT_EAGAIN instead;
     * arg_destroy is then NOT called: the caller keeps arg and may retry. */
    WEFT_SPAWN_NOWAIT = 1u
};

/* Zero *d (no deps, no data, priority 0, no name, no on_finish).  Never
 * fails. */
WEFT_API void weft_task_desc_init(weft_task_desc *d);

/* Spawn a task.  If out is non-NULL it receives a handle the caller must
 * release with weft_task_release; if NULL, the task runs unobserved (its
 * failure still counts for weft_wait_all).  The descriptor and the arrays it
 * points to are only read during the call.  A task whose dependency already
 * failed is accepted and finishes as cancelled.
 * Errors (nothing is spawned; arg_destroy, if set, has been called, except
 * for WEFT_EAGAIN):
 *   WEFT_EINVAL  NULL rt/desc, no body (desc->body NULL and some
 *                placement alternative without a body of its own), a
 *                NULL/released dependency or one of another runtime, an
 *                invalid mode or flag (a reduction's: see WEFT_REDUCE), an
 *                unregistered data handle or one of another runtime, a
 *                malformed placement (weft_task_desc.placements);
 *   WEFT_ENODEV  no device set of this runtime can ever run the task (its
 *                placements ask for GPUs or memory it does not have);
 *   WEFT_ECLOSED the runtime was destroyed (or is being destroyed and the
 *                caller is not one of its tasks, nor an on_finish of one);
 *   WEFT_ENOMEM;
 *   WEFT_EAGAIN  only with WEFT_SPAWN_NOWAIT: backpressure would apply.
 * Blocks only when max_inflight tasks are in flight (from a task it then helps
 * run other tasks instead; from an on_finish callback it never blocks: see
 * weft_task_desc.on_finish).  May be called from a task and from
 * on_finish. */
WEFT_API WEFT_NODISCARD int weft_spawn(weft_runtime *rt, const weft_task_desc *desc,
                                       weft_task **out);

/* Sugar: spawn body(arg) with no dependencies. */
WEFT_API WEFT_NODISCARD int weft_spawn_simple(weft_runtime *rt, weft_body_fn body, void *arg,
                                              weft_task **out);

/* Where a task is in its pipeline.  The runtime's internal stages map onto
 * these: dependencies pending -> WAITING; device chosen, data made valid
 * there, queued -> READY; body executing -> RUNNING; body returned but work
 * it queued on a device still in flight -> ENQUEUED; then one of the three
 * final statuses (COMPLETED, FAILED, CANCELLED).  Values are not ordered:
 * test for the final ones by name, never with < or >=. */
typedef enum weft_task_status {
    WEFT_TASK_WAITING = 0,   /* spawned; some dependency has not finished */
    WEFT_TASK_READY = 1,     /* dependencies done: being placed, or queued on a worker */
    WEFT_TASK_RUNNING = 2,   /* its body is executing */
    WEFT_TASK_COMPLETED = 3, /* body returned 0 (and its device work succeeded) */
    WEFT_TASK_FAILED = 4,    /* body returned non-zero, or its device work failed */
    WEFT_TASK_CANCELLED = 5, /* never ran */
    WEFT_TASK_ENQUEUED = 6   /* body returned; device work it queued is in flight (not final) */
} weft_task_status;

/* Wait until the task has finished.  Returns 0 (completed), WEFT_ETASKFAILED
 * or WEFT_ECANCELLED (weft_last_error() says why: the body's result, its
 * device work's error, the checking mode's report, the task whose failure
 * or cancellation cancelled it), WEFT_EINVAL (NULL/released handle),
 * WEFT_EBUSY (a task waiting on itself), WEFT_EDEADLK (from a task: the
 * awaited task is itself suspended, lower on the same worker's stack, under
 * the caller, or it depends — through unfinished predecessors, as far as a bounded walk of the
 * graph shows — on the caller or on a task suspended under it: it could only
 * finish after this wait returns; and from an on_finish callback, always:
 * see weft_task_desc.on_finish).  A wait ends when the task finishes (the
 * finishing thread wakes it), never by polling.  Blocks.  From a task, the waiting
 * worker runs the awaited task itself if it is queued, or one of its queued
 * predecessors, so a parent waiting for its children never starves the pool;
 * it does not run unrelated tasks (one of those could wait for the caller,
 * which no scheduler could then untangle).  The handle stays valid. */
WEFT_API WEFT_NODISCARD int weft_task_wait(weft_task *t);
/* (From a body placed on GPUs, a wait that may block lends the task's
 * compute share and memory reservation to tasks waiting for them — its own
 * child placed on the same GPU among them — and takes them back when it
 * returns, even if the GPU is then over-committed until a task finishes.
 * Without that the child could never start.) */

/* As weft_task_wait, but gives up after timeout_ns nanoseconds with
 * WEFT_ETIMEDOUT.  timeout_ns == 0 polls (unlike weft_data_acquire's,
 * whose 0 waits without limit). */
WEFT_API WEFT_NODISCARD int weft_task_timedwait(weft_task *t, uint64_t timeout_ns);

/* Wait until at least one of the n tasks tasks[0..n) has finished
 * (completed, failed or cancelled), or timeout_ns nanoseconds passed
 * (0 polls; UINT64_MAX waits without limit).  Returns 0 with *which the
 * index of a finished task (the lowest one found finished: a duplicate
 * entry is reported by its first index), whatever its outcome (ask
 * weft_task_status_get or weft_task_wait for that); WEFT_ETIMEDOUT;
 * WEFT_EINVAL (tasks or which NULL, n 0, an entry NULL or released, tasks
 * of different runtimes, or their runtime destroyed); WEFT_EBUSY (the
 * calling task is among them) and WEFT_EDEADLK (from a task: one of them
 * is suspended below the caller on its worker or depends on the caller, as
 * weft_task_wait says; and from an on_finish callback, always), checked
 * whether or not another of them could end the wait.  Ends when one of
 * them finishes (the finishing thread wakes it), never by polling; a
 * sleeping waiter re-checks the n tasks at every task its runtime finishes.
 * Blocks.  From a task, the waiting worker runs any of them that is queued,
 * or one of their queued predecessors, as weft_task_wait does for one (and
 * lends a GPU-placed body's reservation the same way); a body in it
 * without a timeout is stuck for weft_wait_settled_timed while none of the
 * n has finished, as one in weft_task_wait is for its task (so the
 * runtime settles, and a task space's close cancels keys it waits for),
 * and with one counts as running.  Thread-safe; the handles stay valid and the caller keeps them. */
WEFT_API WEFT_NODISCARD int weft_task_wait_any(weft_task *const *tasks, size_t n, uint64_t timeout_ns,
                                               size_t *which);

/* Current status.  Errors: WEFT_EINVAL.  Never blocks. */
WEFT_API WEFT_NODISCARD int weft_task_status_get(const weft_task *t, weft_task_status *out);

typedef struct weft_task_info {
    uint64_t id;              /* unique within the runtime, in spawn order from 1 */
    weft_task_status status;
    int result;               /* the body's return value (when it ran) */
    uint64_t cause_id;        /* for a cancelled task: the id of the root of the
                                 cancellation: the ancestor whose body failed, or
                                 the task cancelled by request (maybe itself) */
    char name[32];            /* the task's own name */
    char cause_name[32];      /* the name of that failed task */
} weft_task_info;

/* Everything known about the task.  Errors: WEFT_EINVAL.  Never blocks. */
WEFT_API WEFT_NODISCARD int weft_task_info_get(const weft_task *t, weft_task_info *out);

/* Ask that the task not run: if it has not started, it finishes as
 * cancelled (naming itself as the cause) and so do its dependents.  A task
 * suspended in a continuation (weft_ctx_continue) that has not started is
 * cancelled the same way: its continuation never runs and the task ends
 * cancelled.  A running or finished
 * task is unaffected.  Errors: WEFT_EINVAL.  Never blocks. */
WEFT_API WEFT_NODISCARD int weft_task_cancel(weft_task *t);

/* Drop the caller's handle.  The task still runs; its memory is reclaimed
 * once it has finished and nothing refers to it.  NULL is accepted.  Releasing
 * a handle twice is detected and ignored.  Never blocks. */
WEFT_API void weft_task_release(weft_task *t);

/* Wait until no task of the runtime is in flight (including tasks spawned
 * while waiting).  Returns 0, or WEFT_ETASKFAILED if any task failed since the
 * previous weft_wait_all (cancelled dependents of a failure do not count
 * twice), WEFT_EINVAL/WEFT_ECLOSED for a bad runtime, WEFT_EDEADLK from inside
 * one of its tasks or from an on_finish callback.  Blocks: it sleeps, but
 * wakes when one task is left and checks for up to 250 us, once, so that it
 * returns as that task ends (as does weft_wait_settled_timed). */
WEFT_API WEFT_NODISCARD int weft_wait_all(weft_runtime *rt);

/* As weft_wait_all with a timeout (WEFT_ETIMEDOUT). */
WEFT_API WEFT_NODISCARD int weft_wait_all_timed(weft_runtime *rt, uint64_t timeout_ns);

/* Wait until no task of the runtime is in flight, or until the runtime has
 * settled: only a spawn (of a task-space key nobody has spawned, say) can
 * move what is left.  Settled: no device work is in flight, and every task
 * still in flight waits for its dependencies, or is a body blocked in a
 * weft_task_wait without a timeout for a task not finished, or in a
 * weft_task_wait_any without a timeout for tasks none of which has finished
 * (with the bodies nested under that wait on its worker), or, while every worker
 * holds such a body, is queued where none of those waits can run it.  A
 * body in a timed wait, or blocked anywhere else (a lock, a sleep), counts
 * as running.  Unlike weft_wait_all it does not
 * report or reset failures.  Returns 0, WEFT_ETIMEDOUT, WEFT_EINVAL /
 * WEFT_ECLOSED for a bad runtime, WEFT_EDEADLK from inside one of its tasks
 * or from an on_finish callback.  Blocks. */
WEFT_API WEFT_NODISCARD int weft_wait_settled_timed(weft_runtime *rt, uint64_t timeout_ns);

/* When only a spawn can move what is left of the runtime (it has settled:
 * weft_wait_settled_timed) and tasks or bodies wait for task-space keys
 * nobody has spawned — how many such keys; the first one's label ("T[3]") goes to key, NUL-terminated.  0
 * otherwise, and for a bad runtime or key NULL (key untouched).  For a
 * waiter that wants to say why it still waits (the Python front end warns
 * with it).  Never blocks; thread-safe. */
WEFT_API size_t weft_runtime_stalled(weft_runtime *rt, char key[32]);

/* When the runtime has settled (weft_wait_settled_timed) with no task-space
 * key to wait for, and bodies blocked in weft_task_wait or
 * weft_task_wait_any without a timeout for tasks that cannot end (bodies
 * waiting for each other, or for tasks queued behind waiting bodies on
 * every worker): a deadlock that only another thread can end.  Returns
 * how many workers hold such bodies, and writes the tasks they wait for
 * ("task 'b' (id 3), any of task 'c' (id 5) and 2 others", the first
 * three) to what, NUL-terminated within len bytes.  0 otherwise, and for a
 * bad runtime, what NULL or len 0 (what untouched).  For a waiter that
 * wants to say why it still waits.  Never blocks; thread-safe. */
WEFT_API size_t weft_runtime_deadlocked(weft_runtime *rt, char *what, size_t len);

/* Cancel every task of the runtime that has not started yet (running tasks
 * finish).  Tasks spawned afterwards are not affected.  The cancellation is
 * applied lazily: a task still waiting for dependencies reports
 * WEFT_TASK_WAITING until it would have become ready, then finishes as
 * cancelled (naming itself as the cause), and so do its dependents.  Errors: WEFT_EINVAL,
 * WEFT_ECLOSED.  Never blocks; may be called from a task. */
WEFT_API WEFT_NODISCARD int weft_cancel_pending(weft_runtime *rt);

/* ------------------------------------------------------------------------ */
/* Task spaces                                                               */
/* ------------------------------------------------------------------------ */

/* A task space names tasks by keys of 1 to 16 integers (T[i, j]), and a key
 * can be depended on before its task is spawned: weft_space_task gives a
 * handle for any key, usable in weft_task_desc.deps and in waits at once.
 * A spawn that would close a cycle through such keys is refused.  Keys
 * depended on but never spawned when the space is destroyed (or its runtime
 * is) cancel their dependents, whose cause names the key.  weft_wait_all
 * waits for tasks that depend on unspawned keys: spawn the keys, or destroy
 * the space first.  When such a wait has nothing else left to wait for, it
 * says so on stderr, naming a key (weft_config.stall_warn_ms). */
typedef struct weft_space weft_space;

/* Create an empty space; name (copied, first 15 bytes shown) labels its keys
 * in messages ("T[1,2]").  Errors: WEFT_EINVAL, WEFT_ECLOSED, WEFT_ENOMEM.
 * Never blocks; may be called from a task. */
WEFT_API WEFT_NODISCARD int weft_space_create(weft_runtime *rt, const char *name, weft_space **out);

/* The task of key (nkey integers at key): the key's task if it was spawned,
 * otherwise a placeholder that finishes as the key's task does (completed,
 * failed — its dependents are then cancelled naming that task — or
 * cancelled).  Cancelling a placeholder (weft_task_cancel) cancels the task
 * later spawned for its key: it never runs.  A placeholder's id is 0, its
 * name the key's label; a task cancelled because a key was never spawned
 * reports cause_id 0 and the key's label as cause_name.  The handle is lent by the space: it stays valid for deps,
 * waits, status and info until weft_space_destroy; releasing it is not
 * needed (weft_task_release ignores it unless it is also the handle the
 * spawner asked for).  Errors: WEFT_EINVAL (bad space or key), WEFT_ENOMEM.
 * Never blocks; may be called from a task. */
WEFT_API WEFT_NODISCARD int weft_space_task(weft_space *s, const int64_t *key, size_t nkey,
                                            weft_task **out);

/* Spawn desc as the task of key, exactly as weft_spawn does (same handle and
 * arg_destroy rules, same backpressure), and link it before the key's
 * placeholder, if the key was depended on already.  Errors (nothing is
 * spawned): those of weft_spawn; WEFT_EINVAL also when the key was spawned
 * already or the space was destroyed; WEFT_EDEADLK when the new task would
 * follow (explicitly or through its data) a task that already waits for
 * this key — a cycle, named in the message.  Thread-safe: of two spawns of
 * one key, exactly one succeeds.  May be called from a task. */
WEFT_API WEFT_NODISCARD int weft_space_spawn(weft_space *s, const int64_t *key, size_t nkey,
                                             const weft_task_desc *desc, weft_task **out);

/* Cancel the task of key, whether or not it was spawned yet: a task not
 * started does not run (its dependents are cancelled, naming it); a key not
 * spawned yet gets a cancelled placeholder, so the task later spawned for it
 * never runs.  Atomic with weft_space_spawn of the same key: a spawn racing
 * with this call is either wholly before it or wholly after it.  Returns 1 if
 * the key's task will not run, 0 if it had started already (it is running or
 * finished: nothing changes), or an error: WEFT_EINVAL (bad space or key, or
 * the space was destroyed), WEFT_ENOMEM.  Never blocks; thread-safe; may be
 * called from a task. */
WEFT_API WEFT_NODISCARD int weft_space_cancel(weft_space *s, const int64_t *key, size_t nkey);

/* Destroy the space: keys depended on but never spawned are cancelled (and
 * their dependents, naming the key); spawned tasks run on.  Handles the
 * space lent become invalid (WEFT_EINVAL), except those the spawners asked
 * for (which they still release).  Destroying the runtime destroys its
 * spaces.  NULL is accepted.  Errors: WEFT_EINVAL (already destroyed, or its
 * runtime was).  Never blocks; may be called from a task. */
WEFT_API int weft_space_destroy(weft_space *s);

/* ------------------------------------------------------------------------ */
/* Communication                                                             */
/* ------------------------------------------------------------------------ */

/* A communicator: a group of GPUs of one runtime (its members, numbered
 * 0 .. n-1) that exchange data by collective and point-to-point operations.
 * Each operation is a task like any other: it names one data handle per
 * member buffer, is ordered by the same dependencies (after the writers of
 * what it reads, before the readers of what it writes; no user
 * synchronisation), runs on its members' GPUs, on their streams, after the
 * work it follows (GPU to GPU, without the host), and fails and cancels its
 * dependents like any task.  The data are made valid on each member's GPU
 * before the operation reads them, as for a task's WEFT_ON_GPU accesses.
 *
 * Backends: the members are all virtual GPUs (a virtual communicator: the
 * data move in host memory, with the time a ring over the virtual GPUs'
 * peer links would take: per step the copy model's latency plus the bytes
 * over its peer bandwidth) or all CUDA devices (NCCL, when Weft was built
 * with it; otherwise WEFT_EINVAL at creation, saying so).
 *
 * Operations on one communicator — and on any communicators sharing a GPU
 * — are queued on every GPU in the same order (the order their tasks
 * start), so that collectives never wait on each other crosswise.  A
 * member that does not take part within the communicator's timeout (its
 * stream stuck behind other work) fails the operation with a message on
 * stderr naming the operation and the member. */
typedef struct weft_comm weft_comm;

typedef struct weft_comm_config {
    const unsigned *gpus; /* the members' GPUs (numbered as placements number them),
                             member k on gpus[k]; distinct; NULL: every GPU of the
                             runtime, in order */
    unsigned ngpus;       /* with gpus: how many (1 .. 64) */
    uint64_t timeout_ns;  /* how long a member waits for the others in one operation;
                             0: 60 s */
} weft_comm_config;

/* Zero *c (every GPU, the default timeout).  Never fails. */
WEFT_API void weft_comm_config_init(weft_comm_config *c);

/* Create a communicator over GPUs of rt (cfg NULL: every GPU).  Errors:
 * WEFT_ENODEV (rt has no GPUs, or not the GPU a member names), WEFT_EINVAL
 * (NULL rt or out, a GPU named twice, members of different kinds, CUDA
 * members without NCCL: the message says which), WEFT_ECLOSED,
 * WEFT_ENOMEM, WEFT_EDEVICE (NCCL refused).  Never
 * blocks on tasks; thread-safe. */
WEFT_API WEFT_NODISCARD int weft_comm_create(weft_runtime *rt, const weft_comm_config *cfg, weft_comm **out);

/* Create a communicator across the ranks of an MPI communicator.  With no
 * GPUs in cfg: one member per rank (member k is rank k of it), whose
 * buffers are in host memory (data made on a GPU is brought to the host
 * first, by the data layer, and back after).  With cfg->gpus: each rank's
 * members are those GPUs of its own runtime (ranks may have different
 * numbers), numbered rank by rank (rank 0's first, ...); such a
 * communicator is one over this rank's GPUs (as weft_comm_create makes)
 * and one over the ranks, and its operations are composed of operations on
 * them.  Every collective has the contract of weft_comm_post over all
 * the members (counts, buffer sizes, root, in place), and each rank names
 * its own members' buffers (send[k], recv[k] for k from weft_comm_rank(c);
 * the other entries are not read):
 *   all-reduce      a reduce to the rank's first GPU, an all-reduce of it
 *                   across ranks, a broadcast from that GPU;
 *   broadcast       to the root's rank's first GPU, across the ranks, out;
 *   reduce          a reduce within each rank (on the root's rank to the
 *                   root, elsewhere to a staging buffer), then across the
 *                   ranks to the root;
 *   all-gather      each rank's blocks to its first GPU's recv at their
 *                   places (member k's at k * count elements), exchanged
 *                   between the ranks, then broadcast to its other GPUs;
 *   reduce-scatter  a reduce within each rank of the whole input (to a
 *                   staging buffer), a reduce-scatter of the ranks' blocks
 *                   across ranks (an all-reduce of it all when the ranks
 *                   have different numbers of GPUs), then each member's
 *                   block to it;
 *   exchanges       transfers within a rank GPU to GPU, between ranks
 *                   through host memory.
 * Reductions: integers, min and max equal a sequential fold in member
 * order bit for bit; a floating-point sum is each rank's sum in member
 * order, then those sums in rank order (the same on every rank and run,
 * not the flat order's rounding; NCCL's own order within a rank on CUDA).
 * The task returned ends when the whole operation has (a failed part
 * fails or cancels it).  Staging buffers (host memory registered as
 * data: for reduce off the root's rank count elements, for reduce-scatter
 * the input's size and this rank's blocks) are allocated before any part
 * is posted and freed by a task once every part naming them has finished;
 * if the program cancels that task (weft_cancel_pending), they stay
 * allocated until exit and a line on stderr says so.  Misuse (an unknown
 * operation, type or operator, root out of range, recv NULL, a missing,
 * unregistered or too small buffer of this rank's, send missing where
 * needed, one handle written on two members) is refused with WEFT_EINVAL
 * and a message naming the argument and member, before anything is posted
 * (so the ranks' operation numbers stay in step if every rank refuses;
 * a rank that refuses alone leaves the others to time out).
 * mpi_comm points to an MPI_Comm (C: &comm;
 * mpi4py: MPI._addressof(comm)), or is NULL for MPI_COMM_WORLD; Weft
 * duplicates it.  MPI must be
 * initialised with MPI_THREAD_MULTIPLE: a progress thread of the
 * communicator's starts and completes its operations with MPI's
 * non-blocking calls (no worker ever blocks in MPI).  cfg may be NULL
 * (one member per rank); its timeout bounds how
 * long an operation waits for the other ranks (then its task fails with a
 * message on stderr, and the communicator fails every later operation:
 * MPI cannot take the request back).
 *
 * Operations across ranks: every rank posts the communicator's operations
 * in the same order (they are started in that order, whatever order their
 * tasks become ready in); each rank names only its own member's buffers
 * (send[rank], recv[rank]; the other entries are not read) — for an
 * exchange, every rank passes the whole group, and the handles of the
 * sides of other ranks are not read.  An operation cancelled on one rank
 * (its input's writer failed) never starts there: the others time out.
 * Reductions gather every rank's contribution and fold them on each rank
 * in rank order (results identical on every rank, and equal to a
 * sequential fold).  Each collective first checks that every rank posted
 * the same one (operation, type and operator, count, root): if not, it
 * fails on every rank (its task WEFT_ETASKFAILED) with a message on stderr
 * naming what differs, and the communicator goes on.  MPI's own errors
 * fail the operation that met them (the message says which).
 * Destroy such a communicator (weft_comm_destroy) before MPI_Finalize.
 * Collective over mpi_comm (every rank calls it).  Errors: WEFT_EINVAL
 * (NULL rt or out, a bad GPU list, MPI not initialised or without
 * MPI_THREAD_MULTIPLE, Weft built without MPI), WEFT_ENODEV (this rank
 * lacks a GPU its list names), WEFT_ECLOSED, WEFT_ENOMEM,
 * WEFT_EDEVICE (MPI refused), WEFT_ESYSTEM. */
WEFT_API WEFT_NODISCARD int weft_comm_create_mpi(weft_runtime *rt, const void *mpi_comm,
                                                 const weft_comm_config *cfg, weft_comm **out);

/* For programs that do not initialise MPI themselves: start MPI with
 * MPI_THREAD_MULTIPLE (nothing if it runs already with that level), and
 * end it (after every communicator across ranks is destroyed; nothing if
 * it is not running).  Errors: WEFT_EINVAL (built without MPI, MPI already
 * running with a lower thread level, or finalized), WEFT_EDEVICE (MPI
 * refused).  Call them from one thread, as MPI_Init and MPI_Finalize. */
WEFT_API WEFT_NODISCARD int weft_mpi_init(void);
WEFT_API WEFT_NODISCARD int weft_mpi_finalize(void);

/* This process's member in c: its rank for a communicator across ranks
 * (its first member for one across ranks with GPUs), 0 otherwise (and for
 * NULL or stale c). */
WEFT_API unsigned weft_comm_rank(const weft_comm *c);

/* Wait until every operation posted on c has finished, then free it.  The
 * handle is invalid afterwards.  Errors: WEFT_EINVAL (NULL, stale), WEFT_EBUSY
 * (called from one of c's own operations), WEFT_EDEADLK (from an on_finish
 * callback).  Call it before destroying the
 * runtime (afterwards it only frees c).  Thread-safe; not concurrently
 * with posts on c. */
WEFT_API int weft_comm_destroy(weft_comm *c);

/* Members of c (0 if c is NULL or stale). */
WEFT_API unsigned weft_comm_size(const weft_comm *c);

/* Collective operations (weft_coll.op).  Member k's buffers are send[k] and
 * recv[k]; `count` elements of `type` (bytes from the start of each buffer;
 * a larger buffer keeps the rest):
 *   WEFT_COLL_ALLREDUCE       recv[k] = send[0] OP send[1] ... OP send[n-1],
 *                             for every k (count elements each);
 *   WEFT_COLL_BROADCAST       recv[k] = send[root] for every k;
 *   WEFT_COLL_REDUCE          recv[root] = send[0] OP ... OP send[n-1]
 *                             (recv may be NULL but for root's entry);
 *   WEFT_COLL_ALLGATHER       recv[k] (n*count elements) = send[0], ...,
 *                             send[n-1] one after another;
 *   WEFT_COLL_REDUCE_SCATTER  recv[k] (count elements) = element block k
 *                             of send[0] OP ... OP send[n-1] (each send
 *                             n*count elements).
 * Reductions combine in member order, left to right, so results are the
 * same bit for bit on every member and every run (equal to a sequential
 * loop over the members; NCCL's own order applies on CUDA).
 * In place: send NULL for ALLREDUCE, BROADCAST and REDUCE (recv[k] holds
 * member k's input); ALLGATHER and REDUCE_SCATTER need both. */
enum weft_coll_op {
    WEFT_COLL_ALLREDUCE = 1,
    WEFT_COLL_BROADCAST = 2,
    WEFT_COLL_REDUCE = 3,
    WEFT_COLL_ALLGATHER = 4,
    WEFT_COLL_REDUCE_SCATTER = 5
};

typedef struct weft_coll {
    unsigned op;              /* WEFT_COLL_* */
    unsigned type;            /* one element type, WEFT_RED_I32 .. WEFT_RED_F64, and for
                                 ALLREDUCE, REDUCE and REDUCE_SCATTER | an operator
                                 (WEFT_RED_SUM, WEFT_RED_MIN, WEFT_RED_MAX) */
    size_t count;             /* elements (see above); 0: an operation that only orders */
    unsigned root;            /* BROADCAST and REDUCE: the member at the root */
    weft_data *const *send;   /* n handles (member k's at k), or NULL (in place) */
    weft_data *const *recv;   /* n handles */
    weft_task *const *deps;   /* tasks it must follow besides its data's; may be NULL */
    size_t ndeps;
    const char *name;         /* for traces and errors; NULL: the operation's */
    int priority;
} weft_coll;

/* Zero *c.  Never fails. */
WEFT_API void weft_coll_init(weft_coll *c);

/* Post a collective on c: spawn the task that runs it (out as weft_spawn's:
 * NULL, or a handle to release).  Its accesses: each member's send as
 * WEFT_R and recv as WEFT_W (WEFT_RW in place, or when count elements do
 * not cover the whole buffer), on that member's GPU.  Errors (nothing
 * spawned): WEFT_EINVAL (NULL or stale c or op, an unknown op, type or
 * operator, an operator on an operation that takes none, root out of
 * range, a missing or unregistered handle, a buffer too small for count —
 * each named with its member), WEFT_ECLOSED, WEFT_ENOMEM.  Blocks only
 * as weft_spawn does (backpressure).  Thread-safe; may be called from a
 * task. */
WEFT_API WEFT_NODISCARD int weft_comm_post(weft_comm *c, const weft_coll *op, weft_task **out);

/* One point-to-point transfer: rows rows of `bytes` bytes from member
 * `from`'s src (at src_off, rows src_pitch apart) to member `to`'s dst (at
 * dst_off, rows dst_pitch apart).  rows 0 means 1 (pitches then unused). */
typedef struct weft_xfer {
    unsigned from, to;
    weft_data *src;
    size_t src_off, src_pitch;
    weft_data *dst;
    size_t dst_off, dst_pitch;
    size_t bytes, rows;
} weft_xfer;

/* Post a group of transfers on c as one task (a halo exchange, a ring
 * shift): every transfer of the group happens, as if at once, after the
 * writers of its src and dst and before their later readers.  Its
 * accesses: each src WEFT_R on its sender's GPU, each dst WEFT_RW on its
 * receiver's (what the group does not write is kept).  One handle may be
 * the src of some transfers and the dst of others on one member (a tile's
 * border out, its halo in) when no destination range overlaps a source or
 * another destination range.  Errors (nothing spawned): WEFT_EINVAL (NULL
 * c, NULL x with n > 0, a member out of range, a transfer to its own
 * member, a range outside its buffer, overlapping ranges as above, a handle
 * written on one member and used on another), WEFT_ECLOSED, WEFT_ENOMEM.
 * name may be NULL.  Blocks and threads as weft_comm_post. */
WEFT_API WEFT_NODISCARD int weft_comm_exchange(weft_comm *c, const weft_xfer *x, size_t n, const char *name,
                                               weft_task **out);

/* A 2-D decomposition for halo exchanges: a grid of rows x cols elements
 * of elem bytes split into brows x bcols near-equal blocks (numbered
 * row-major; the first rows % brows block rows get one row more, and so for
 * columns), each stored by its owner as an array of its own with a halo of
 * `halo` cells on each side, row-major: (rows_b + 2 halo) rows of
 * (cols_b + 2 halo) elements. */
typedef struct weft_grid {
    size_t rows, cols, elem, halo;
    unsigned brows, bcols;
} weft_grid;

typedef struct weft_grid_block {
    size_t row0, col0, rows, cols; /* its interior: where it lies in the grid */
    size_t pitch;                  /* bytes from one stored row to the next */
    size_t bytes;                  /* of its stored array (halo included) */
} weft_grid_block;

/* Where block b lies and how it is stored.  Errors: WEFT_EINVAL (NULL, a
 * zero size, more blocks than rows or columns, a block narrower than the
 * halo, sizes that overflow, b out of range; the message says which).
 * Never blocks; thread-safe. */
WEFT_API WEFT_NODISCARD int weft_grid_block_get(const weft_grid *g, unsigned b, weft_grid_block *out);

/* The transfers of one halo exchange among the blocks of one
 * communicator: member[b] is block b's member in it (-1: not part of this
 * exchange) and data[b] its stored array (read only for blocks this
 * process holds; NULL elsewhere).  For every two neighbouring blocks (side
 * or corner) of different members, the cells of one that lie in the
 * other's halo go there (halo wide, clipped at the grid's edges), in one
 * order that is the same on every rank — what weft_comm_exchange expects.
 * Neighbours of the same member are left out (they share memory or a
 * communicator of their own).  Up to max go to out; *n gets how many there
 * are (call again with room when *n > max).  Errors: as
 * weft_grid_block_get, and WEFT_EINVAL for NULL member or n.  Never
 * blocks; thread-safe. */
WEFT_API WEFT_NODISCARD int weft_grid_exchange(const weft_grid *g, const int *member, weft_data *const *data,
                                               weft_xfer *out, size_t max, size_t *n);

/* ------------------------------------------------------------------------ */
/* Inside a task body                                                        */
/* ------------------------------------------------------------------------ */

/* The runtime running this body (for nested spawns). */
WEFT_API weft_runtime *weft_ctx_runtime(const weft_ctx *ctx);

/* Index of the worker thread running this body, 0 .. workers-1. */
WEFT_API unsigned weft_ctx_worker(const weft_ctx *ctx);

/* The id of the task running this body (weft_task_info's id; available
 * before the spawner has its handle).  0 if ctx is NULL. */
WEFT_API uint64_t weft_ctx_task_id(const weft_ctx *ctx);

/* The handle of the task running this body: the one its spawner received
 * (perhaps not yet, on the spawner's side), lent, not to be released.  NULL
 * if ctx is NULL or the spawner asked for no handle. */
WEFT_API weft_task *weft_ctx_task(const weft_ctx *ctx);

/* Suspend the calling task without holding a worker: continue it in a new
 * task, `next`, that runs once the tasks in next->deps have finished.  For
 * bodies that wait for other tasks in steps (a coroutine: the Python front
 * end's `async def` bodies) instead of blocking in weft_task_wait.
 *
 * Called from a task's body (ctx its own), at most once per body.  Spawns
 * `next` as weft_spawn would — its body, arg and arg_destroy, deps, name,
 * priority, placements, on_finish, flags; *out a handle to release, as
 * weft_spawn's — with two differences: its deps carry no failure (it runs
 * once each has finished, completed, failed or cancelled: its body asks
 * how they ended), and it names no data (naccesses must be 0): its body
 * reaches the calling task's data instead.  weft_ctx_data, weft_ctx_bytes,
 * weft_ctx_pitch (and the checking mode's weft_ctx_queue_rw) of next's
 * body give the calling task's accesses, where they are: on the host (a
 * CPU task's, WEFT_HOST accesses), or on one of the calling task's GPUs if
 * next runs on it (place next there: a placement whose gpu_set names those
 * GPUs) — NULL (0) on a GPU next does not run on.  When the calling task
 * holds data on GPUs, weft_ctx_continue first waits for the work its body
 * queued on its streams (as weft_ctx_sync does), so that next finds the
 * data as the body left it.  The calling task is then tied to it:
 *   - when the calling body returns, its task does not finish: it gives its
 *     worker back, and its GPUs' compute share and memory reservation (its
 *     streams' work still in flight is waited for before it finishes), and
 *     its status is WEFT_TASK_WAITING.  Its data stay its own: tasks that
 *     follow it, explicitly or through its data, wait for its end;
 *   - it finishes when `next` does (and its own device work): COMPLETED if
 *     next completed; FAILED if next failed (its result: next's); CANCELLED
 *     if next was cancelled (weft_task_cancel of either, weft_cancel_pending;
 *     the cause is the task itself, by request).  If its own body returned
 *     non-zero, it fails with that result all the same, once next ends;
 *   - next's body may continue in turn (weft_ctx_continue from next): the
 *     original task then finishes with the newest continuation, and next
 *     finishes as soon as its body returns.  A wait for the original task,
 *     from a task, helps with its continuation and what that waits for.
 * Errors (nothing is spawned; arg_destroy, if set, has been called, except
 * for WEFT_EAGAIN): those of weft_spawn; WEFT_EINVAL also when called
 * outside the body of ctx's task, a second time in one body, with data
 * accesses, or after weft_ctx_hold_over returned 1 in this body; WEFT_EDEADLK when one of next->deps is the continued task, or
 * depends on it (as far as a bounded walk of the graph shows): the
 * continued task would wait for itself.  May block (help) under
 * backpressure, as weft_spawn does from a task.  Thread-safety: as
 * weft_spawn; only the body's own thread may call it. */
WEFT_API WEFT_NODISCARD int weft_ctx_continue(weft_ctx *ctx, const weft_task_desc *next, weft_task **out);

/* Ask the worker to keep what the body holds (a lock of the caller's, such
 * as the Python GIL) for its next body, so that consecutive bodies take and
 * give it once.  Returns 1 when it will: the body returns with it held, and
 * the worker then either starts at once another task whose body function is
 * this one's, with no data accesses or placements and not a continuation
 * (that body finds it held: the caller keeps the record, per thread), or
 * first calls weft_config.on_worker_let_go on this thread, whose job is to
 * let it go.  Returns 0 when it will not: ctx is NULL, the body is nested
 * in another's wait, the task has data accesses or placements, is or makes
 * a continuation, no task is queued (the worker would most likely idle
 * next), or the runtime has no on_worker_let_go; the body then lets go
 * itself.  Call it as the body's last step, from the body's own thread.
 * Never blocks. */
WEFT_API int weft_ctx_hold_over(weft_ctx *ctx);

/* The alternative of weft_task_desc.placements the task runs (0 for a task
 * without placements).  Never fails. */
WEFT_API unsigned weft_ctx_variant(const weft_ctx *ctx);

/* GPUs of the task's device set (0 for a CPU task).  Never fails. */
WEFT_API unsigned weft_ctx_gpu_count(const weft_ctx *ctx);

/* The runtime device index (weft_device_info.index) of the set's i-th GPU,
 * or -1 if i is out of range. */
WEFT_API int weft_ctx_gpu(const weft_ctx *ctx, unsigned i);

/* The stream the body queues the i-th GPU's work on, as that GPU's own API
 * knows it: a cudaStream_t on a CUDA device; on a virtual GPU an opaque
 * handle for weft_ctx_queue.  NULL if i is out of range.  The runtime has
 * ordered the stream after the task's dependencies; the task completes once
 * all the work queued on its streams by the time the body returns has
 * finished (the body itself returns as soon as it has queued it).
 *
 * GPU to GPU without the host: a task whose every alternative is GPUs only
 * (no "cpu" in any set that can run), and that accesses no data on the host
 * (no WEFT_HOST but a reduction's), is released as soon as the bodies of
 * its GPU dependencies have returned, not when their GPU work has finished:
 * its streams wait for their completion events (on the device, as
 * cudaStreamWaitEvent does), so its body must only queue work on its
 * streams and must not read, on the host, what those dependencies produce.
 * It completes after them; if one of them fails after it started, it ends
 * WEFT_TASK_CANCELLED (and so do its dependents).  A task with a CPU
 * alternative or a WEFT_HOST access, and every CPU task, starts only once
 * its dependencies have completed. */
WEFT_API void *weft_ctx_stream(const weft_ctx *ctx, unsigned i);

/* Queue fn(arg) on the i-th GPU's stream, after what is queued there: on a
 * virtual GPU, its kernel (run by the stream's thread, stretched to model_ns
 * nanoseconds of modelled time if it ran shorter); on CUDA, a host function
 * (cudaLaunchHostFunc; model_ns is ignored).  fn must not call Weft; a
 * non-zero return fails the task.  Errors: WEFT_EINVAL (bad context, i or
 * fn), WEFT_ENOMEM, WEFT_EDEVICE.  Never blocks; from the body only. */
WEFT_API WEFT_NODISCARD int weft_ctx_queue(const weft_ctx *ctx, unsigned i, int (*fn)(void *arg), void *arg,
                                           uint64_t model_ns);

/* Memory a piece of GPU work reads and writes (weft_ctx_queue_rw). */
typedef struct weft_range {
    void *ptr;
    size_t bytes;
    unsigned mode; /* WEFT_R, WEFT_W or WEFT_RW */
} weft_range;

/* As weft_ctx_queue, naming the memory fn reads and writes.  Virtual GPUs in
 * checking mode (environment WEFT_VGPU_CHECK=1 when the runtime is created)
 * check, when fn starts, that every range it reads was last written by work
 * it is ordered after (earlier on its stream, through an event wait, or
 * finished before the host queued it), and fill what it only writes with
 * 0xDB first; a violation fails the task with WEFT_EDEVICE and prints what
 * was unordered.  The checking mode also refuses (WEFT_EINVAL, printed) a
 * range inside another data handle's replica on that GPU than the task's
 * own (a pointer kept from an earlier task), and checks each task's data
 * as it starts (any device): its replica valid where it runs, no other
 * device's modified, none other valid for a writer, a tile's halo current;
 * a violation fails the task with WEFT_EDEVICE and prints it.  Elsewhere
 * the ranges only document.  ranges may be NULL if n is 0; they are
 * copied.  Errors: as weft_ctx_queue, and WEFT_EINVAL for a bad range. */
WEFT_API WEFT_NODISCARD int weft_ctx_queue_rw(const weft_ctx *ctx, unsigned i, int (*fn)(void *arg), void *arg,
                                              uint64_t model_ns, const weft_range *ranges, size_t n);

/* Queue an asynchronous copy of n bytes on the i-th GPU's stream (host to
 * device, device to host, within or between GPUs; on a virtual GPU it takes
 * the copy model's time, and in checking mode is checked as a read of src
 * and a write of dst).  Errors: WEFT_EINVAL (bad context, i, NULL pointer),
 * WEFT_ENOMEM, WEFT_EDEVICE.  Never blocks; from the body only. */
WEFT_API WEFT_NODISCARD int weft_ctx_copy(const weft_ctx *ctx, unsigned i, void *dst, const void *src, size_t n);

/* Wait, from the body, until the work queued so far on each of the task's
 * GPU streams has run: the copies of its data in, and what the body
 * queued.  Then the body may compute on its data where it is, itself:
 *   - on a virtual GPU, whose memory is host memory, the replicas
 *     (weft_ctx_data) hold the task's inputs, and what the body writes
 *     there is its output (work it queues later, and its successors, are
 *     ordered after the body) — the stand-in, in tests, for a body that
 *     computes with a GPU library on a real GPU;
 *   - on CUDA the replicas are device memory, which the host cannot touch:
 *     a body computes there with a GPU library on the task's stream
 *     (weft_ctx_stream), which needs no weft_ctx_sync (the stream orders
 *     it after the copies in); weft_ctx_sync then only waits.
 * In the checking mode (WEFT_VGPU_CHECK=1) a GPU body that changes a
 * replica on the host without calling weft_ctx_sync first is reported and
 * fails the task (WEFT_EDEVICE); after it, it is the body's to change.
 * Returns 0; WEFT_EINVAL (NULL ctx, or called outside the body of ctx's
 * task); WEFT_EDEVICE or another device error when work of the task on
 * its GPUs failed (the task then fails, whatever the body returns).  A
 * CPU task returns 0 at once.  Blocks (the worker waits; it runs no other
 * task meanwhile).  Only the body's own thread may call it. */
WEFT_API int weft_ctx_sync(const weft_ctx *ctx);

/* Address, on the device this body runs on, of the task's i-th data access
 * (in descriptor order): for a task on GPUs, Weft's copy of the data on its
 * first GPU (valid for the access's mode once the work queued on that GPU's
 * stream runs: the copy into it, if any, is queued there before the body
 * runs); for a CPU task, or an access with WEFT_HOST, the registered host
 * pointer (valid when the body starts).  For a WEFT_REDUCE access: the
 * task's own private copy, on its first GPU (filled with the identity by
 * work queued on that GPU's stream before the body runs) or in host memory
 * (a CPU task, or WEFT_HOST: filled when the body starts); no other task
 * touches it.  A tile's private copy is its interior alone, from its first
 * element (weft_tile_info's in_row0, in_col0), rows packed.  For a
 * WEFT_SCRATCH access: the task's scratch buffer, on its GPU (the
 * WEFT_ON_GPU-th) or in host memory (see WEFT_SCRATCH), its contents
 * unspecified.  The address
 * stays valid until the task finishes.  NULL if i is out of range.  In a
 * continuation's body (weft_ctx_continue): the continued task's i-th
 * access, where it is (see there). */
WEFT_API void *weft_ctx_data(const weft_ctx *ctx, size_t i);

/* Bytes from one row to the next of the task's i-th data access where
 * weft_ctx_data points: a tile's on a device is its packed width, on the
 * host the parent's pitch; a reduction's private copy of a tile, the
 * width of the tile's interior (wherever it is); a scratch buffer of a
 * tile, the tile's width (rows packed); any other data (and a reduction's
 * private copy or a scratch buffer of it) is one row (its size).  0 if i
 * is out of range.  Never blocks. */
WEFT_API size_t weft_ctx_pitch(const weft_ctx *ctx, size_t i);

/* Bytes of the task's i-th data access (StarPU's STARPU_VECTOR_GET_NX times
 * the element size): the registered size of the data; of a tile, its span
 * (halo included: rows times its width, whatever the pitch); of a
 * reduction's private copy of a tile, its interior; of a scratch buffer,
 * the data's (a tile's span).  0 if i is out of range.  Never blocks. */
WEFT_API size_t weft_ctx_bytes(const weft_ctx *ctx, size_t i);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_H */
