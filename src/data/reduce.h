/*
 * data/reduce.h — reductions (WEFT_REDUCE): each reducing task gets a
 * private copy of the data (a "partial") on its device, filled with the
 * operator's identity; when the data is next used otherwise, the partials of
 * the tasks that completed are combined into the value on the host, in spawn
 * order (so the result does not depend on placement or timing), and freed.
 *
 * Each reducing task has a record from its spawn on (so that the spawn
 * order is known before the tasks run); its memory is allocated when it
 * starts, and pinned while it runs; once the task has finished it may be
 * evicted from a full GPU (copied to host memory) like a cached replica.
 * Finished partials in host memory whose turn has come (every earlier one
 * combined; for integers, every earlier one of the same operator and type
 * is enough) are combined early, when a later reducer starts, so that CPU
 * reductions run in bounded memory.
 *
 * The graph makes every task after a group follow all its members, and
 * wait for their completion (no early release), so that when a partial is
 * combined its task has finished and its state (done or failed) is known.
 *
 * The operator is a built-in one (sum, min, max of one of six types), or
 * a user reduction (weft_reduction_register): its identity fills the image
 * the partials start from, and its combine replaces the built-in loops,
 * called once per partial (per row of a tile's interior) with the count of
 * elements.  User partials are never combined out of spawn order.
 *
 * A partial has the shape of the handle's interior, rows packed: a tile's
 * interior (its halo is not reduced), or all the bytes of other data.  A
 * tile's partials are combined by data/tile.c, under its family's lock,
 * never early.
 */
#ifndef WEFT_REDUCE_H
#define WEFT_REDUCE_H

#include "data/data.h"

/* A partial's life: WAITING (its task spawned: the record keeps its place
 * in spawn order), RUNNING (its task started: memory allocated and pinned),
 * then DONE or FAILED (its task finished: never touched by it again). */
enum { WEFT__PART_WAITING = 0, WEFT__PART_RUNNING = 1, WEFT__PART_DONE = 2, WEFT__PART_FAILED = 3 };

/* A user reduction (weft_reduction_register): immutable once registered,
 * owned by its runtime (api/api_data.c lists them, under data_lock) and freed
 * with it, after its data.  Its number (1 .. WEFT__RED_MAX_USER, in the
 * operator's bits WEFT_RED_USER_ID_MASK) is unique in the process while
 * it lives. */
#define WEFT__RED_MAX_USER 2047u
typedef struct weft__reduction {
    unsigned id;                       /* its number */
    const void *rt_handle;             /* the public handle of its runtime */
    size_t elem;                       /* bytes of an element */
    void *identity;                    /* elem bytes, or NULL: init fills */
    weft_reduction_init_fn init;
    weft_reduction_combine_fn combine;
    void *arg;
    char name[32];
    struct weft__reduction *next;      /* in its runtime's list */
} weft__reduction;
_Static_assert((WEFT_RED_USER_ID_MASK >> 20) == WEFT__RED_MAX_USER, "a user reduction's number fits its bits");

typedef struct weft__partial {
    weft__replica r;                   /* must be first: its memory (r.ptr), pins, place in the LRU;
                                          r.partial is set */
    unsigned dev;                      /* where r.ptr is: a device, or 0 (host memory) */
    unsigned key;                      /* operator | type */
    const weft__reduction *user;       /* key WEFT_RED_USER: the user reduction; else NULL */
    uint64_t seq;                      /* its task's id: the spawn order */
    _Atomic uint8_t state;             /* WEFT__PART_* */
    struct weft__partial *next;        /* in d->partials, by seq */
} weft__partial;

/* The key of a reduction mode (operator and type). */
static inline unsigned weft__red_key(unsigned mode) { return mode & (WEFT_RED_OP_MASK | WEFT_RED_TYPE_MASK); }
/* Bytes of an element of a reduction mode's type, 0 if unknown. */
size_t weft__red_elem(unsigned mode);
/* Whether the operator of mode is a built-in one (sum, min, max). */
bool weft__red_op_known(unsigned mode);
/* Whether mode reduces with a user reduction. */
static inline bool weft__red_is_user(unsigned mode)
{
    return (mode & WEFT_REDUCE) && (mode & WEFT_RED_OP_MASK) == WEFT_RED_USER;
}
/* The number of mode's user reduction (0: none given). */
static inline unsigned weft__red_user_id(unsigned mode) { return (mode & WEFT_RED_USER_ID_MASK) >> 20; }
/* What a task keeps of an access's mode: a user reduction's number taken
 * out (its record holds the reduction), so that no layer reads it as
 * WEFT_ON_GPU bits. */
static inline unsigned weft__red_task_mode(unsigned mode)
{
    return weft__red_is_user(mode) ? mode & ~(unsigned)WEFT_RED_USER_ID_MASK : mode;
}
/* Number u (filled but for its id) for runtime handle h: 0, or
 * WEFT_ENOMEM when every number is taken. */
int weft__reduction_number(weft__reduction *u);
/* The user reduction with number id if runtime handle h registered it,
 * else NULL (a number of another runtime, or none).  Lock-free; the
 * result lives as long as h's runtime. */
const weft__reduction *weft__reduction_find(const void *h, unsigned id);
/* Give back the numbers of a runtime's user reductions and free them
 * (its list; nothing uses them any more). */
void weft__reduction_free_all(weft__reduction *list);
/* dst = dst OP src elementwise over n bytes of key's type (key: an
 * operator | a type; the communicators' reductions use it too). */
void weft__red_combine(unsigned key, void *dst, const void *src, size_t n);

/* Spawn: a record for a reducing access (mode; user: its user reduction,
 * or NULL) (NULL on ENOMEM), put in its handle's list, in spawn order,
 * when the task is linked (its history's lock held: enlist takes the
 * handle's lock under it), or discarded if the spawn fails before. */
weft__partial *weft__reduce_new(unsigned mode, const weft__reduction *user);
void weft__reduce_discard(weft__partial *p);
void weft__reduce_enlist(weft__data *d, weft__partial *p, uint64_t seq);

/* The "reserved" stage of a reducing access (its record p) on
 * device dev: finished partials in host memory whose turn has come are
 * combined (and the value brought to the host for it if dev is the host),
 * then the task's memory is allocated on dev (evicting when full) and
 * pinned.  Nothing is queued yet (weft__reduce_begin).  0,
 * WEFT__DATA_RETRY (no room now: the caller gives it back with
 * weft__reduce_drop and retries), WEFT_ENOMEM. */
int weft__reduce_acquire(weft__data *d, unsigned dev, weft__partial *p);
/* Every access of the task acquired: fill its partial with the identity
 * (on q, ahead of the body's work, for a device's; at once on the host).
 * 0 or a device's error. */
int weft__reduce_begin(weft__data *d, weft__partial *p, weft__dqueue *q);
/* The task retries its acquire (nothing was queued into the partial): its
 * memory is freed, the record waits again. */
void weft__reduce_drop(weft__data *d, weft__partial *p);
/* The task finished (ok: completed): its partial is final (done, or failed
 * — never combined — when the task did not complete or never started) and
 * unpinned; the task does not touch it again.  Called before its
 * successors are released.  Never takes the handle's lock. */
void weft__reduce_finish(weft__data *d, weft__partial *p, bool ok);
/* Combine the partials of tasks spawned before task `upto` (UINT64_MAX:
 * all) into the value, on the host, in spawn order, and free them (the
 * lock held; the graph has made their tasks finish before).  On a device's
 * error the partials combined so far stay combined, the rest pending. */
int weft__reduce_fold(weft__data *d, uint64_t upto);
/* The handle is freed: fold (best effort, as the copy back of unregister)
 * and free every partial and the identity image (the lock held). */
void weft__reduce_free(weft__data *d);
/* Evict partial r from device dev (the lock of its handle e held, r
 * unpinned and out of the LRU): a done one is copied to host memory.
 * false if that failed (it stays). */
bool weft__reduce_evict(weft__data *e, weft__replica *r, unsigned dev);

#endif
