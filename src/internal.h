/*
 * internal.h — definitions shared by Weft's layers (not installed).
 *
 * Layers (see DESIGN.md): runtime.c (front: config, lifecycle, errors),
 * graph/ (tasks, dependencies, access-mode inference), sched/ (ready queues,
 * stealing, parking), worker.c (execution), data/ (data handles), device/
 * (device table), trace.c (observability), alloc.c (the one allocator).
 *
 * Naming: public weft_*, internal non-static weft__*, everything else static.
 */
#ifndef WEFT_INTERNAL_H
#define WEFT_INTERNAL_H

#include "weft.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define WEFT__CACHELINE 64

/* An impossible state: abort with file and line (convention 4). */
#define WEFT__PANIC(msg)                                                                \
    do {                                                                                \
        fprintf(stderr, "weft: internal error at %s:%d: %s\n", __FILE__, __LINE__, msg); \
        abort();                                                                        \
    } while (0)
#define WEFT__CHECK(cond) \
    do {                  \
        if (!(cond))      \
            WEFT__PANIC("check failed: " #cond); \
    } while (0)

/* ------------------------------------------------------------------------ */
/* alloc.c: the one allocator, with failure injection for tests              */
/* ------------------------------------------------------------------------ */

void *weft__alloc(size_t n);             /* NULL on (real or injected) failure */
void *weft__alloc_aligned(size_t align, size_t n); /* free with weft__free */
void *weft__realloc(void *p, size_t n);  /* NULL on failure; p is untouched then */
void weft__free(void *p);
char *weft__strdup(const char *s);

/*
 * Type-stable slots for handles.  Every object a user can hold a pointer to
 * (runtime, task, data) lives in a slot that is never returned to the system
 * while the process runs: it goes back to a pool and is reused.  A handle is
 * the slot address with the slot's generation in its low bits, so a stale
 * handle is recognised (generation mismatch) instead of touching freed memory.
 */
#define WEFT__SLOT_ALIGN 128u
#define WEFT__GEN_MASK (WEFT__SLOT_ALIGN - 1u)

typedef struct weft__slot {
    _Atomic uint32_t gen;     /* bumped each time the slot is freed */
    uint16_t pool_id;
    uint16_t batch_len;       /* free slots: length of the batch this one heads */
    struct weft__slot *free_next;
    struct weft__slot *batch_next; /* free slots: next batch in the pool */
} weft__slot;

typedef enum weft__pool_id { WEFT__POOL_TASK, WEFT__POOL_DATA, WEFT__POOL_RUNTIME, WEFT__NPOOLS } weft__pool_id;

void *weft__slot_alloc(weft__pool_id pool); /* zeroed except the header; NULL on failure */
void weft__slot_free(void *slot);            /* bumps the generation */
size_t weft__slot_size(weft__pool_id pool);

static inline void *weft__handle_encode(void *slot)
{
    weft__slot *s = slot;
    return (void *)((uintptr_t)slot | (atomic_load_explicit(&s->gen, memory_order_relaxed) & WEFT__GEN_MASK));
}
/* The slot behind a handle, or NULL if the handle is stale or NULL. */
static inline void *weft__handle_decode(const void *h)
{
    if (!h)
        return NULL;
    weft__slot *s = (weft__slot *)((uintptr_t)h & ~(uintptr_t)WEFT__GEN_MASK);
    uint32_t g = atomic_load_explicit(&s->gen, memory_order_acquire);
    return ((uintptr_t)h & WEFT__GEN_MASK) == (g & WEFT__GEN_MASK) ? s : NULL;
}

/* ------------------------------------------------------------------------ */
/* runtime.c: errors                                                         */
/* ------------------------------------------------------------------------ */

/* Record a message for weft_last_error() and return code. */
int weft__error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void weft__clear_error(void);
uint64_t weft__now_ns(void);

/* ------------------------------------------------------------------------ */
/* Objects                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct weft__rt weft__rt;
typedef struct weft__task weft__task;
typedef struct weft__data weft__data;
typedef struct weft__worker weft__worker;

/* One edge of the graph, owned by its successor, linked into the
 * predecessor's successor list. */
typedef struct weft__edge {
    weft__task *succ;
    struct weft__edge *next;
    weft__task *pred;   /* valid only while pred's slot generation is pred_gen */
    uint32_t pred_gen;
    bool propagate;     /* does failure of the predecessor cancel succ? */
} weft__edge;

typedef struct weft__task_access {
    weft__data *data;
    unsigned mode;
} weft__task_access;

/* Internal state before weft_spawn has linked the task (never seen by users). */
#define WEFT_TASK_SPAWNING (-1)

/* run_gate values: who decides whether the body runs. */
enum { WEFT__GATE_OPEN = 0, WEFT__GATE_DOOMING = 1, WEFT__GATE_STARTED = 2, WEFT__GATE_DOOMED = 3 };

#define WEFT__INLINE_EDGES 3
#define WEFT__INLINE_ACCESSES 2

struct weft__task {
    weft__slot slot;                   /* must be first */
    _Atomic int32_t refs;              /* execution + user handle + data handles holding it */
    _Atomic int state;                 /* weft_task_status */
    _Atomic int32_t pending;           /* unfinished dependencies (+1 while spawning) */
    _Atomic int run_gate;
    _Atomic int32_t waiters;           /* threads sleeping until this task finishes */
    uint32_t epoch;                    /* rt->cancel_epoch at spawn */
    int priority;
    int result;
    _Atomic(weft__edge *) successors;  /* WEFT__CLOSED once finished */
    weft__rt *rt;
    const void *rt_handle;             /* identifies the runtime even after its slot is reused */
    uint64_t id;
    weft_body_fn body;
    void *arg;
    void (*arg_destroy)(void *);
    uint64_t cause_id;
    char cause_name[32];
    char name[32];
    /* ready-queue links (pairing heap, under the queue's lock) */
    weft__task *hp_child, *hp_next, *hp_prev;
    _Atomic(weft__worker *) queued_on; /* whose queue holds it, or NULL */
    weft__task *wait_next;             /* commute waiters, under the data's lock */
    weft__task *outer;                 /* task this one interrupted on its worker (nested help) */
    uint32_t nedges;
    uint16_t naccess;
    bool has_commute;
    _Atomic bool handle_live;          /* the user still holds the handle */
    weft__edge *edges;
    weft__task_access *access;
    weft__edge edge_inline[WEFT__INLINE_EDGES];
    weft__task_access access_inline[WEFT__INLINE_ACCESSES];
};

#define WEFT__CLOSED ((weft__edge *)(uintptr_t)1)

struct weft__data {
    weft__slot slot;                   /* must be first */
    /* Accesses of spawned (or spawning), unfinished tasks naming d, plus
     * WEFT__DATA_CLOSING once unregistering began: one atomic, so a finishing
     * task learns both in the same step and never touches d afterwards.  It
     * is never zeroed by plain stores (a spawn racing an unregister may still
     * read it after the slot was freed and reused). */
    _Atomic int64_t users;
    weft__rt *rt;                      /* first field (re)initialised by register */
    const void *rt_handle;
    void *ptr;
    size_t size;
    /* lock protects everything below it; taken by spawn (several at once, in
     * address order) and by commute release.  Nothing nests under it except
     * the allocator and the slot pool. */
    pthread_mutex_t lock;
    /* The last writer(s): one task, or a commute group. */
    weft__task **writers;
    uint32_t nwriters, cap_writers;
    bool writers_commute;              /* writers form an open commute group */
    /* Readers since the last writer(s). */
    weft__task **readers;
    uint32_t nreaders, cap_readers;
    /* What came before the open commute group (followed by every member). */
    weft__task **base;
    bool *base_propagate;
    uint32_t nbase, cap_base;
    /* Commute exclusion at run time. */
    _Atomic(weft__task *) commute_owner;
    weft__task *commute_waiters;       /* under lock, linked by wait_next */
    weft__data *rt_prev, *rt_next;     /* rt->data_list, under rt->data_lock */
    void *replica[1];                  /* per-device copies; [0] is the host (device/) */
};

/* ------------------------------------------------------------------------ */
/* sched/ + worker.c                                                         */
/* ------------------------------------------------------------------------ */

typedef struct weft__trace_chunk weft__trace_chunk;

struct weft__worker {
    weft__rt *rt;
    unsigned index;
    pthread_t thread;
    bool started;
    /* qlock protects heap; qsize mirrors its size for lock-free peeking. */
    pthread_mutex_t qlock;
    weft__task *heap;
    _Atomic size_t qsize;
    /* park_lock protects wake; parked is read without it by wakers. */
    pthread_mutex_t park_lock;
    pthread_cond_t park_cond;
    bool wake;
    _Atomic bool parked;
    uint64_t rng;
    weft__task *current;               /* task whose body runs now (innermost) */
    _Atomic int64_t depth;             /* bodies executing on this worker (nested waits) */
    /* counters: written by this worker only, read by stats */
    _Atomic uint64_t n_run, n_failed, n_cancelled, n_steals, n_parks, idle_ns;
    _Atomic uint64_t idle_since;       /* start of the current idle period, 0 while busy */
    /* trace buffer: this worker only, read after join */
    weft__trace_chunk *trace_head, *trace_tail;
    size_t trace_count;
    _Atomic uint64_t trace_dropped;
} __attribute__((aligned(WEFT__CACHELINE)));

struct weft__rt {
    weft__slot slot;                   /* must be first */
    /* wait_lock/wait_cond: threads sleeping for a task, for inflight == 0,
     * for backpressure or for an unregister.  Nothing nests under it.
     * Initialised once per slot and never destroyed: a thread that has just
     * dropped the last in-flight count may still signal it while destroy
     * completes (the slot itself is type-stable). */
    pthread_mutex_t wait_lock;
    pthread_cond_t wait_cond;
    bool sync_ready;
    _Atomic bool open;                 /* accepting spawns; first field create resets */
    _Atomic bool closing;              /* destroy began: only its own tasks may spawn */
    _Atomic bool stop;                 /* workers should exit */
    weft_config cfg;
    char *trace_path;
    unsigned nworkers;
    weft__worker *workers;
    size_t max_inflight;
    int64_t throttle_low;              /* backpressure resumes at or below this */
    _Atomic uint64_t next_id;
    _Atomic int64_t inflight;
    _Atomic int64_t inflight_peak;
    _Atomic uint64_t extra_bytes;      /* out-of-line allocations of all tasks */
    _Atomic uint64_t failures;         /* bodies failed since the last wait_all */
    _Atomic uint32_t cancel_epoch;
    _Atomic uint32_t rr;               /* round-robin target for outside spawns */
    _Atomic int nparked;
    _Atomic int32_t sleepers_all;      /* sleeping in wait_all */
    _Atomic int32_t sleepers_throttle; /* sleeping for backpressure */
    /* data_lock protects data_list.  Taken alone. */
    pthread_mutex_t data_lock;
    weft__data *data_list;
    uint64_t t0_ns;                    /* trace time origin */
};

/* The worker (and task) the calling thread is running, if any. */
extern _Thread_local weft__worker *weft__tls_worker;

/* Is the calling thread one of rt's workers (i.e. inside one of its tasks)? */
static inline bool weft__on_own_worker(const weft__rt *rt)
{
    return weft__tls_worker && weft__tls_worker->rt == rt;
}

/* runtime.c */
/* Add `counts` to the in-flight count (so destroy waits for the caller) and
 * check the runtime is open; weft__rt_leave takes counts back.  A spawned
 * task keeps one count until it finishes. */
weft__rt *weft__rt_enter(const weft_runtime *h, const char *fn, int *err, int64_t counts);
void weft__rt_leave(weft__rt *rt, int64_t counts);
void weft__wake_sleepers(weft__rt *rt);

/* graph/task.c */
void weft__task_unref(weft__task *t);
void weft__task_ready(weft__rt *rt, weft__task *t, weft__task **next);
void weft__task_execute(weft__worker *w, weft__task *t, weft__task **next);
void weft__edge_add(weft__task *t, weft__edge *e, weft__task *p, bool propagate);

/* graph/access.c */
int weft__access_plan(weft__task_access *sorted, uint32_t n, uint32_t *ninferred);
void weft__access_link(weft__task *t, const weft__task_access *sorted, uint32_t n, weft__edge *edges);
bool weft__commute_acquire(weft__task *t);
void weft__commute_release(weft__task *t, weft__task **next);
void weft__data_lock_all(weft__task_access *sorted, uint32_t n);
void weft__data_unlock_all(weft__task_access *sorted, uint32_t n);

/* data/data.c */
#define WEFT__DATA_CLOSING ((int64_t)1 << 62)
weft__data *weft__data_get(const weft_data *h);
weft__data *weft__data_pin(const weft_data *h); /* count a user; NULL if stale or closing */
void weft__data_finish_use(weft__data *d);
void weft__data_destroy_all(weft__rt *rt);

/* sched/queue.c */
bool weft__queue_take(weft__task *t); /* remove t from whatever queue holds it */
weft__task *weft__find_work(weft__worker *w);
bool weft__any_work(weft__rt *rt);
void weft__wake_all(weft__rt *rt);
void weft__submit(weft__rt *rt, weft__task *t);

/* worker.c */
int weft__workers_start(weft__rt *rt);
void weft__workers_stop(weft__rt *rt);
bool weft__help_waiting(weft__worker *w, weft__task *awaited);

/* device/host.c: the device table (only the host kind so far) */
typedef struct weft__device_ops {
    const char *name;
    /* Address of d's replica on this device (allocating it if needed). */
    void *(*replica)(weft__data *d);
} weft__device_ops;
extern const weft__device_ops weft__host_device;

/* trace.c */
void weft__trace_record(weft__worker *w, const weft__task *t, uint64_t start_ns, uint64_t end_ns);
int weft__trace_write(weft__rt *rt);
void weft__trace_free(weft__worker *w);

/* relaxed single-writer counter increment (no lock prefix) */
static inline void weft__count(_Atomic uint64_t *c, uint64_t n)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n, memory_order_relaxed);
}

static inline void weft__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

#endif
