/*
 * data/data.h — the data layer: data handles, their per-device replicas, and
 * the count of spawned tasks that use each handle (which unregister waits
 * for).  It calls only the device layer and the wait engine's wake-up side.
 *
 * The graph layer keeps its per-handle access history in `hist`, which this
 * layer stores but never reads.  Coherence states (MSI per replica),
 * asynchronous copies, prefetch and eviction come with the data issue and
 * live here: weft__data_acquire/release are the "resources reserved" stage.
 */
#ifndef WEFT_DATA_H
#define WEFT_DATA_H

#include "internal.h"
#include "device/device.h"
#include "wait.h"

typedef enum weft__replica_state { WEFT__REP_INVALID, WEFT__REP_SHARED, WEFT__REP_MODIFIED } weft__replica_state;

typedef struct weft__replica {
    void *ptr;
    weft__replica_state state;
} weft__replica;

#define WEFT__DATA_CLOSING ((int64_t)1 << 62)

typedef struct weft__data {
    weft__slot slot;                   /* must be first */
    /* Spawned (or spawning), unfinished tasks naming the handle, plus
     * WEFT__DATA_CLOSING once unregistering began: one atomic, so a finishing
     * task learns both in the same step and never touches the handle
     * afterwards.  Never zeroed by plain stores (a spawn racing an unregister
     * may still read it after the slot was freed and reused). */
    _Atomic int64_t users;
    weft__waitset *ws;                 /* first field (re)initialised by new: unregister sleeps here */
    const void *rt_handle;             /* the runtime's handle (identifies it) */
    void *ptr;                         /* the user's host memory */
    size_t size;
    void *hist;                        /* the graph layer's access history */
    unsigned nrep;                     /* one replica per device of the runtime */
    weft__replica *rep;
    struct weft__data *list_prev, *list_next; /* the runtime's list (front end, under its data_lock) */
} weft__data;

/* A handle over n bytes at ptr with one replica per device (the host's is
 * ptr itself, valid).  NULL on ENOMEM. */
weft__data *weft__data_new(weft__waitset *ws, const void *rt_handle, void *ptr, size_t n, unsigned ndev);
/* Free a handle (no user left). */
void weft__data_free(weft__data *d);

weft__data *weft__data_get(const weft_data *h);   /* NULL if stale */
weft__data *weft__data_pin(const weft_data *h);   /* count a user; NULL if stale or closing */
void weft__data_unpin(weft__data *d);             /* the last user of a closing handle wakes its unregister */
/* Begin unregistering: false if it had begun already. */
bool weft__data_close(weft__data *d);
static inline bool weft__data_unused(const weft__data *d)
{
    return atomic_load(&((weft__data *)d)->users) == WEFT__DATA_CLOSING;
}

/* Address of d's replica on device dev (the host's: the user's memory). */
static inline void *weft__data_replica(const weft__data *d, unsigned dev)
{
    return dev < d->nrep ? d->rep[dev].ptr : NULL;
}

/* The "resources reserved" stage for one access: make d valid on dev for the
 * access mode.  Nothing to do on the host (device 0) so far. */
static inline int weft__data_acquire(weft__data *d, unsigned dev, unsigned mode)
{
    (void)d;
    (void)mode;
    return dev == 0 ? 0 : WEFT_EINVAL;
}

#endif
