/*
 * data/overlap.h — the runtime's index of registered host ranges, so that
 * tasks on handles over overlapping memory are ordered (graph/access.c)
 * and kept on the host.
 *
 * Each handle registered over host memory (weft_data_register with a
 * pointer; not a tile, not scratch-only, not data living on a device) has
 * an entry [lo, hi).  An entry lists the open entries that overlap it (its
 * neighbours); a handle's `noverlap` is the length of that list, read
 * without a lock at spawn: zero, and the spawn pays nothing more.  A spawn
 * naming a handle with neighbours pins them under the index lock and adds
 * to the task an order-only access of each (graph: WEFT__OVERLAP).
 *
 * Rules kept here, under the index lock:
 *   - a range overlapping a partitioned one (or one being partitioned) is
 *     refused, and partitioning a handle with neighbours is refused;
 *   - a range entered over one being unregistered takes that one's
 *     history over (as unregister hands it to its neighbours), so that its
 *     tasks follow the closing handle's;
 *   - unregistering a handle detaches it from its neighbours' lists in the
 *     same step as the graph hands its history over to them (api), and its
 *     entry leaves the index once no task uses it.
 *
 * Lock order: the index lock, then histories (graph), never the reverse;
 * nothing under it blocks.
 */
#ifndef WEFT_OVERLAP_H
#define WEFT_OVERLAP_H

#include "data/data.h"

typedef struct weft__ranges weft__ranges;

/* A neighbour in an entry's list.  Not live: detached (the neighbour is
 * being unregistered and its history was handed over to this entry's):
 * no spawn names it for the order any more, but it stays listed until it
 * leaves the index, so that the lists are symmetric. */
typedef struct weft__range_nb {
    weft__data *d;
    bool live;
} weft__range_nb;

typedef struct weft__range {
    uintptr_t lo, hi;                  /* the handle's host memory */
    weft__data *d;
    struct weft__ranges *idx;          /* the index it is in */
    bool partitioned;                  /* partitioned into tiles, or being partitioned */
    bool closing;                      /* being unregistered: its history was handed over */
    /* The entries overlapping it (each lists this one too), nlive of them
     * live.  An entry's own list stays live while it closes: a spawn that
     * pinned it before the close still orders its task with every
     * neighbour. */
    weft__range_nb *nb;
    uint32_t nnb, nlive, cap;
} weft__range;

struct weft__ranges {
    pthread_mutex_t lock;
    weft__range **v;                   /* sorted by lo */
    size_t n, cap;
    size_t longest;                    /* the longest range ever entered (bounds a lookup's scan) */
};

void weft__ranges_init(weft__ranges *x);
void weft__ranges_fini(weft__ranges *x); /* (every entry removed already) */
void weft__ranges_lock(weft__ranges *x);
void weft__ranges_unlock(weft__ranges *x);

/* Enter d (host memory, not published yet) into x.  Each entry it
 * overlaps that is being unregistered hands its history over to d
 * (take_over(closing, d), under the index lock: graph's
 * weft__history_hand_over; false, no memory: d's spawns name the closing
 * handle instead).  0; WEFT_EINVAL when it overlaps a partitioned range
 * (the other handle's number and range in *other_id, *olo, *ohi);
 * WEFT_ENOMEM.  Nothing changes on error. */
int weft__ranges_add(weft__ranges *x, weft__data *d, bool (*take_over)(weft__data *closing, weft__data *d),
                     uint32_t *other_id, uintptr_t *olo, uintptr_t *ohi);

/* Partitioning d: refused (false, the first neighbour's number and range
 * in *id, *lo, *hi) while it overlaps another registered range; else
 * marked partitioned (new overlapping ranges are refused) until
 * weft__ranges_unpartition (a partition that failed).  Data with no
 * entry: true. */
bool weft__ranges_partition(weft__data *d, uint32_t *id, uintptr_t *lo, uintptr_t *hi);
void weft__ranges_unpartition(weft__data *d);

/* The live neighbours of d (the index lock held): how many; when at most
 * max, they are in out, each counted as a user of its handle
 * (weft__data_unpin; a listed handle is never freed, closing or not). */
size_t weft__ranges_pin_neighbours(weft__data *d, weft__data **out, size_t max);
/* Unregistering d (the index lock held): marked closing (a range entered
 * over it later takes its history over), then, once n took d's history
 * over, d is no longer live in n's list. */
void weft__ranges_mark_closing(weft__data *d);
void weft__ranges_detach(weft__data *d, weft__data *n);
/* Take d's entry out of the index (the index lock held) if no task uses d
 * (users == CLOSING; none can start using it while the lock is held):
 * true.  False: a task pinned it meanwhile; wait again. */
bool weft__ranges_remove_if_unused(weft__data *d);
/* Take d's entry out (destroy: nothing runs any more). */
void weft__ranges_remove(weft__data *d);

/* The index d is in (NULL: none).  For a handle the caller pinned. */
static inline weft__ranges *weft__data_ranges(const weft__data *d) { return d->range ? d->range->idx : NULL; }
/* How many live neighbours d has (the index lock held), and the first
 * one's number and range (for messages; false: none). */
size_t weft__ranges_count(const weft__data *d);
/* Every entry in d's list, live or not (the index lock held): how many,
 * and entry k. */
size_t weft__ranges_listed(const weft__data *d);
weft__data *weft__ranges_neighbour(const weft__data *d, size_t k);
bool weft__ranges_first(const weft__data *d, uint32_t *id, uintptr_t *lo, uintptr_t *hi);

/* An order-only access of d for overlapping memory, as its task starts on
 * the host (task `seq`): reductions of d spawned before it combined, the
 * host's replica made valid, and for a write (the task changes part of d's
 * host memory) every device replica invalidated.  Nothing when d's value
 * was never on a device and no reduction is pending.  0 or a device's
 * error.  Blocks for a copy to the host. */
int weft__data_host_sync(weft__data *d, bool write, uint64_t seq);

#endif
