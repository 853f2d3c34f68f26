/*
 * sched/bound.h — a run's task graph as recorded for the lower bound of
 * its makespan (weft_config.bound, weft_runtime_bound), and the bound
 * itself (sched/bound.c).
 *
 * While recording, each task spawned has a record: its id, its kind (as
 * the performance models name it), its size (the bytes of its accesses),
 * the device classes it may run on (the CPU; GPUs, and how much of them a
 * GPU alternative takes), its predecessors, and when it ran, on which
 * device and how it ended.  A task-space placeholder has one too (no
 * time, no class): the edges through it are kept.
 *
 * Who writes what: a record is made by the spawn, before its task is
 * linked (weft__bound_task; the spawn's last step that can fail comes
 * before it, so a record never outlives a failed spawn), and its
 * predecessors are written as the spawn links its edges (a placeholder's
 * one edge by the spawn that fulfils it) — each before the task can
 * finish, by one thread.  The worker that starts the body writes t_start,
 * a body that continued writes t_body_end.  The rest (finished, t_end,
 * dev, on_gpu) is written at completion under the log's lock.  The bound
 * reads, under the lock, only records whose task has finished: what was
 * written before their completion.
 *
 * Memory: records in chunks of WEFT__BOUND_CHUNK, predecessor lists of
 * more than WEFT__BOUND_INLINE entries in an arena of chunks; both grow
 * with the tasks spawned while recording and are freed with the log (at
 * weft_runtime_destroy).
 */
#ifndef WEFT_SCHED_BOUND_H
#define WEFT_SCHED_BOUND_H

#include "internal.h"
#include "sched/perfmodel.h"
#include "sched/place.h"

#define WEFT__BOUND_CHUNK 1024u /* records per chunk */
#define WEFT__BOUND_INLINE 3u   /* predecessors kept in the record itself */

/* How a recorded task ended (weft__brec.finished). */
enum { WEFT__BREC_PENDING = 0, WEFT__BREC_RAN = 1, WEFT__BREC_CANCELLED = 2 };

typedef struct weft__brec {
    uint64_t id;                /* the task's id (0: a placeholder) */
    uint64_t size;              /* bytes of its accesses */
    double cost;                /* weft_task_desc.cost (0: none) */
    uint64_t t_spawn;           /* weft__now_ns() when recorded */
    uint64_t t_start;           /* its body began (0: never) */
    uint64_t t_body_end;        /* a continued task: its body returned (0: not continued) */
    uint64_t t_end;             /* it finished (under the lock) */
    uint32_t index;             /* its place in the log */
    uint32_t kind;              /* into the log's kinds */
    uint32_t npred, cap;        /* predecessors written, room for them */
    uint32_t *pred;             /* their indices: pred_inline, or the arena's */
    uint32_t pred_inline[WEFT__BOUND_INLINE];
    float gpu_w;                /* the least GPU a GPU alternative takes (GPUs x share), 0: none */
    bool cpu;                   /* it may run on the CPU */
    bool proxy;                 /* a task-space placeholder */
    bool on_gpu;                /* it ran on a GPU (under the lock) */
    uint8_t finished;           /* WEFT__BREC_* (under the lock) */
    uint16_t dev;               /* the runtime device it ran on: 0 the host (under the lock) */
} weft__brec;

typedef struct weft__bound_log weft__bound_log;

/* A log, empty (NULL: out of memory); freed with everything it holds. */
weft__bound_log *weft__bound_log_new(void);
void weft__bound_log_free(weft__bound_log *log);

/* The record of a task being spawned: its kind, size, placements (NULL:
 * a plain CPU task) and the most predecessors it will link (its edges).
 * NULL when out of memory: the log counts the task as lost (the bound then
 * refuses to answer). */
weft__brec *weft__bound_task(weft__bound_log *log, const char *kind, uint64_t size, const weft__place *pl,
                             uint32_t nedges);
/* The record of a task-space placeholder (one edge: its fulfilling task). */
weft__brec *weft__bound_proxy(weft__bound_log *log);
/* Its id, once the spawn has one (before it links). */
static inline void weft__bound_id(weft__brec *r, uint64_t id) { r->id = id; }
/* r follows p (the spawn that links the edge). */
static inline void weft__bound_pred(weft__brec *r, const weft__brec *p)
{
    if (r->npred < r->cap)
        r->pred[r->npred++] = p->index;
}
/* Its body starts now (the worker that runs it). */
void weft__bound_started(weft__brec *r);
/* Its body returned and continued (weft_ctx_continue): its own time ends
 * now, though it finishes with its last continuation. */
void weft__bound_body_end(weft__brec *r);
/* It finished (ran: its body ran, else it was cancelled), on runtime
 * device dev (on_gpu: a GPU). */
void weft__bound_finished(weft__bound_log *log, weft__brec *r, bool ran, bool on_gpu, unsigned dev);

/* What the bound spreads the work over, and predicts it with. */
typedef struct weft__bound_machine {
    weft__perfmodel *pm;                 /* the models (NULL: none; observed times only) */
    unsigned narch;                      /* archs below: [0] the CPU's, then the GPUs' */
    const char (*arch)[WEFT__PM_NAME];
    unsigned cpu_slots;                  /* the CPU's worker slots */
    unsigned gpus;
} weft__bound_machine;

/* The bound over the finished tasks of log (weft.h, weft_runtime_bound):
 * 0, or WEFT_ENOMEM (reported, naming fn) when out of memory or when
 * records were lost. */
int weft__bound_compute(weft__bound_log *log, const weft__bound_machine *m, weft_bound *out, const char *fn);

#endif
