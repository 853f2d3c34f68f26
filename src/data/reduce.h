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

typedef struct weft__partial {
    weft__replica r;                   /* must be first: its memory (r.ptr), pins, place in the LRU;
                                          r.partial is set */
    unsigned dev;                      /* where r.ptr is: a device, or 0 (host memory) */
    unsigned key;                      /* operator | type */
    uint64_t seq;                      /* its task's id: the spawn order */
    _Atomic uint8_t state;             /* WEFT__PART_* */
    struct weft__partial *next;        /* in d->partials, by seq */
} weft__partial;

/* The key of a reduction mode (operator and type). */
static inline unsigned weft__red_key(unsigned mode) { return mode & (WEFT_RED_OP_MASK | WEFT_RED_TYPE_MASK); }
/* Bytes of an element of a reduction mode's type, 0 if unknown. */
size_t weft__red_elem(unsigned mode);
/* Whether the operator of mode is known (sum, min, max). */
bool weft__red_op_known(unsigned mode);
/* dst = dst OP src elementwise over n bytes of key's type (key: an
 * operator | a type; the communicators' reductions use it too). */
void weft__red_combine(unsigned key, void *dst, const void *src, size_t n);

/* Spawn: a record for a reducing access (NULL on ENOMEM), put in its
 * handle's list, in spawn order, when the task is linked (its history's
 * lock held: enlist takes the handle's lock under it), or discarded if the
 * spawn fails before. */
weft__partial *weft__reduce_new(unsigned mode);
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
