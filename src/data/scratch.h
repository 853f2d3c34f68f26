/*
 * data/scratch.h — scratch buffers (WEFT_SCRATCH): memory of a handle's
 * size that a task uses as its own on the device where it runs, contents
 * unspecified.  The handle's value is neither read nor written and the
 * access orders nothing: the graph keeps it out of the handle's history;
 * only the handle's size (and, to be freed with it, its GPU buffers) is
 * used here.
 *
 * On a GPU a buffer is allocated as a replica is (weft__data_alloc_evicting:
 * the least recently used unused replicas are evicted when the device is
 * full), listed in the device's memory node, and pinned while its task
 * runs.  When the task finishes (its streams' work has run) the buffer is
 * unpinned, not freed: the handle keeps it for its next scratch task on
 * that device (StarPU allocates scratch once per worker; here a handle
 * holds at most as many buffers on a device as it had scratch tasks there
 * at once), and a device that needs the room evicts it as it does an
 * unused replica (it holds nothing to write back).  In host memory a
 * buffer is allocated when its task starts and freed when it finishes:
 * nothing evicts host memory, and malloc is cheap there.
 *
 * A buffer's pins rise under its handle's lock and drop without it, as a
 * replica's do, so a task finishing on a device's thread never takes a
 * handle's lock.
 */
#ifndef WEFT_SCRATCH_H
#define WEFT_SCRATCH_H

#include "data/data.h"

typedef struct weft__scratch {
    weft__replica r;                   /* must be first: its memory (r.ptr), pins, place in the LRU;
                                          r.scratch is set */
    unsigned dev;                      /* where r.ptr is: a GPU, or 0 (host memory) */
    struct weft__scratch *next;        /* in its handle's list of GPU buffers (under its lock) */
} weft__scratch;

/* The "reserved" stage of a scratch access of d on device dev: one of d's
 * buffers there that no task uses, or a new one (evicting when dev is
 * full), pinned, into *out.  0, WEFT__DATA_RETRY (no room now: nothing is
 * held; the caller retries as for a replica), or WEFT_ENOMEM. */
int weft__scratch_acquire(weft__data *d, unsigned dev, weft__scratch **out);
/* The task is done with s (it finished, or it gives everything back to
 * retry: notify false, its own release must not wake itself): a host
 * buffer is freed, a GPU's unpinned and kept.  Never takes the handle's
 * lock. */
void weft__scratch_release(weft__data *d, weft__scratch *s, bool notify);
/* Evict GPU buffer r of e from device dev (e's lock held; r unpinned and
 * out of the LRU): freed. */
void weft__scratch_evict(weft__data *e, weft__replica *r, unsigned dev);
/* The handle is freed (no task uses it): its GPU buffers go. */
void weft__scratch_free_all(weft__data *d);

#endif
