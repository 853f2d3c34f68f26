/*
 * data/data.h — the data layer: data handles, their per-device replicas, and
 * the count of spawned tasks that use each handle (which unregister waits
 * for).  It calls only the device layer and the wait engine's wake-up side.
 *
 * The graph layer keeps its per-handle access history in `hist`, which this
 * layer stores but never reads.  Each handle has a replica per device with
 * an MSI state; weft__data_acquire, when a task starts, makes the replica on
 * the task's device valid (copies queued on the task's stream, or waited
 * for when the host needs them) and a writer's the only valid one.  The
 * graph orders the tasks of a handle, so the states change in that order.
 * (Prefetch at mapping time, eviction, tiles and reductions: later steps of
 * the data issue.)
 */
#ifndef WEFT_DATA_H
#define WEFT_DATA_H

#include "internal.h"
#include "device/device.h"
#include "wait.h"

typedef enum weft__replica_state { WEFT__REP_INVALID, WEFT__REP_SHARED, WEFT__REP_MODIFIED } weft__replica_state;

/* A copy of the handle's bytes on one device (MSI: invalid; shared, valid
 * and maybe valid elsewhere too; modified, the only valid copy). */
typedef struct weft__replica {
    void *ptr;                         /* NULL until allocated there (the host's: the user's memory) */
    uint8_t state;                     /* weft__replica_state */
    /* Unfinished tasks using it (as theirs, or as the source of their
     * copy): it is not evicted meanwhile.  Raised under the handle's lock,
     * dropped without it (a task finishing on a device's thread never
     * takes a handle's lock, so that a thread waiting under one for a copy
     * cannot wait for it). */
    _Atomic uint32_t pins;
    weft__devent *ready;               /* recorded after the last copy queued into it, on ready_q
                                          (NULL: none yet); other queues wait for it before use */
    weft__dqueue *ready_q;
    /* In its device's memory node (weft__mnode), least recently used first,
     * while allocated (under the node's lock). */
    struct weft__replica *lru_prev, *lru_next;
    struct weft__data *owner;
    bool in_lru;
} weft__replica;

/* A device's memory as the data layer sees it: the replicas allocated there,
 * least recently used first, to evict from when an allocation fails.
 * lock protects the list; taken after a handle's lock, never before one
 * (victims are only tried: pthread_mutex_trylock). */
typedef struct weft__mnode {
    pthread_mutex_t lock;
    weft__replica *head, *tail;
    /* The device's queues for copies to the host, made on first use (under
     * lock): [0] for a host task's copy in, which waits for copies queued
     * on task streams (never under a handle's lock), [1] for write-backs
     * of evicted replicas, which wait for nothing pending (no task pins
     * them) and so may be waited for under a handle's lock. */
    weft__dqueue *copyq[2];
    weft__device *dev;
    /* Bumped when a replica there is no longer pinned: a task waiting for
     * room (WEFT__DATA_RETRY) waits for it to change (key: the node). */
    _Atomic uint64_t unpinned;
} weft__mnode;
void weft__mnode_init(weft__mnode *m);
/* Before the device is stopped: its copy queue goes. */
void weft__mnode_fini(weft__mnode *m);

#define WEFT__DATA_CLOSING ((int64_t)1 << 62)

typedef struct weft__data {
    weft__slot slot;                   /* must be first */
    /* Spawned (or spawning), unfinished tasks naming the handle, plus
     * WEFT__DATA_CLOSING once unregistering began: one atomic, so a finishing
     * task learns both in the same step and never touches the handle
     * afterwards.  Never zeroed by plain stores (a spawn racing an unregister
     * may still read it after the slot was freed and reused). */
    _Atomic int64_t users;
    /* The runtime's handle (identifies it).  Atomic and never zeroed by
     * plain stores either: weft__desc_check reads it for a handle that may
     * be stale (a spawn racing an unregister, while a new registration
     * reuses the slot); a stale reader then sees the new owner's runtime or
     * the old one, and its pin fails either way. */
    const void *_Atomic rt_handle;
    weft__waitset *ws;                 /* first field (re)initialised by new: unregister sleeps here */
    void *ptr;                         /* the user's host memory */
    size_t size;
    void *hist;                        /* the graph layer's access history */
    /* lock protects rep[] (states, allocations, ready events).  Taken by
     * the tasks that access the handle when they start, and by free; only
     * device operations (which never block on it) run under it, and a host
     * wait for a copy to the host.  Nothing else nests under it. */
    pthread_mutex_t lock;
    _Atomic bool on_devices;           /* a device replica was ever valid (else the host's is the
                                          only one, and host accesses need no lock) */
    weft__device *const *devs;         /* the runtime's device table: rep[i] lives on devs[i] */
    weft__mnode *mnodes;               /* and the memory node of each */
    unsigned nrep;                     /* one replica per device of the runtime at registration */
    weft__replica *rep;
    _Atomic uint64_t *copied;          /* the runtime's count of bytes copied between replicas */
    /* The replicas' states as of which acquire (under lock): each acquire
     * that changes them takes a new number, so that a task that fails can
     * put back the states it found, if nobody changed them since
     * (weft__data_undo). */
    uint64_t version, next_version;
    /* Where the data is (weft__data_home), kept up to date under lock and
     * read without it: mapping may happen on a device's thread, which
     * never takes a handle's lock. */
    _Atomic unsigned home;
    /* A copy to the host in flight for host readers (under lock): its
     * event on host_fetch_dev's queue, and the readers waiting for it (the
     * last one destroys it). */
    weft__devent *host_fetch;
    unsigned host_fetch_dev, host_fetch_users;
    struct weft__data *list_prev, *list_next; /* the runtime's list (front end, under its data_lock) */
} weft__data;

/* A handle over n bytes at ptr with one replica per device of devs[0 ..
 * ndev-1] (the host's, devs[0], is ptr itself, valid).  copied: where to
 * count the bytes copied.  NULL on ENOMEM. */
weft__data *weft__data_new(weft__waitset *ws, const void *rt_handle, void *ptr, size_t n,
                           weft__device *const *devs, weft__mnode *mnodes, unsigned ndev,
                           _Atomic uint64_t *copied);
/* Free a handle (no user left): the newest value goes back to the user's
 * memory first if it is only on devices, then the device replicas are
 * freed.  Blocks for that copy. */
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

/* Address of d's replica on device dev (the host's: the user's memory;
 * a device added after d was registered: the host's too). */
static inline void *weft__data_replica(const weft__data *d, unsigned dev)
{
    return dev < d->nrep && dev ? d->rep[dev].ptr : d->ptr;
}

/* Where d's data is: the device of a modified replica, else of a shared
 * device replica, else 0 (the host's only).  A hint for mapping (it may
 * change right after). */
unsigned weft__data_home(weft__data *d);

/* The "reserved" stage for one access of a task that is about to start:
 * make d valid on device dev for mode (WEFT_R / WEFT_W bits), as the
 * coherence protocol says.  A copy into a device replica is queued on q
 * (the task's queue on dev, after what it waits for), and later users on
 * other queues wait for it by an event; a copy to the host (dev 0, q NULL)
 * is waited for here.  A writer invalidates every other replica.  Room for
 * a new replica is made, when the device is full, by evicting the least
 * recently used replicas no task uses (a modified one is copied to the
 * host first).  On success the replica on dev (a device's) and the device
 * replica copied from are pinned until weft__data_release: *on and *from
 * say which (-1: none).  0, or WEFT_ENOMEM (no room on dev even after
 * eviction), or a device's error.  Safe from any thread (the handle's
 * lock). */
/* What an acquire changed, to put it back if its task fails. */
typedef struct weft__data_undo {
    uint64_t before, after;            /* d->version before and after (after 0: nothing to undo) */
    uint64_t valid;                    /* replicas valid before (bit i: device i; devices < 64) */
    int8_t modified;                   /* the one modified before, or -1 */
} weft__data_undo;
int weft__data_acquire(weft__data *d, unsigned dev, unsigned mode, weft__dqueue *q, int *on, int *from,
                       weft__data_undo *undo);
/* The task whose acquire recorded undo failed or was cancelled after it:
 * the replicas valid before are valid again (those still allocated), so
 * that the last good value is kept and unregister returns it; nothing if
 * a later acquire changed the states since (it is undone first, when its
 * own task fails: successors of a failed task finish before it). */
void weft__data_undo_acquire(weft__data *d, const weft__data_undo *undo);
/* weft__data_acquire found no room on dev while other tasks' replicas
 * there are pinned: room will come when they finish.  The caller drops its
 * own pins, waits for the node's `unpinned` to change from what it was
 * before the call, and tries again. */
#define WEFT__DATA_RETRY 1
/* The node's `unpinned` count now, and a wait until it is no longer seen. */
uint64_t weft__data_room_epoch(const weft__data *d, unsigned dev);
/* (At most 20 ms: a task whose own replicas fragment the device tries
 * again even when no other task finished.)  false if nothing changed. */
bool weft__data_wait_room(weft__data *d, unsigned dev, uint64_t seen);
/* The task that acquired (on, from) finished (or gives up and retries,
 * notify false: its own release must not wake itself): unpin them.  Never
 * takes the handle's lock. */
void weft__data_release(weft__data *d, int on, int from, bool notify);

#endif
