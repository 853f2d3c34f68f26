/*
 * data/data.h — the data layer: data handles, their per-device replicas, and
 * the count of spawned tasks that use each handle (which unregister waits
 * for).  It calls only the device layer and the wait engine's wake-up side.
 *
 * The graph layer keeps its per-handle access history in `hist`, which this
 * layer stores but never reads.  Each handle has a replica per device with
 * an MSI state; weft__data_acquire, when a task starts, makes the replica on
 * the task's device valid (copies queued on the device's prefetch queue
 * or the task's stream, or waited for when the host needs them) and a writer's the only valid one.  The
 * graph orders the tasks of a handle, so the states change in that order.
 * When a device is full, replicas no task uses are evicted, least recently
 * used first.  A handle has a shape (rows, pitch) so that a tile
 * (data/tile.h) is a handle like any other; its family's coherence is
 * tile.c's.  Reductions (WEFT_REDUCE) give each reducing task a private
 * copy, combined into the value later (data/reduce.h); scratch accesses
 * (WEFT_SCRATCH) a buffer of the handle's size, its own (data/scratch.h).
 */
#ifndef WEFT_DATA_H
#define WEFT_DATA_H

#include "internal.h"
#include "device/device.h"
#include "wait.h"

/* The runtime's counts of the bytes copied between replicas (weft_stats):
 * all of them, and of those the copies into a GPU on its prefetch queue. */
typedef struct weft__copy_counts {
    _Atomic uint64_t bytes, prefetched;
} weft__copy_counts;

/* Prefetch queues per device (weft__mnode.copyq): as many as its streams
 * (sched/place.h), so that copies in run as many at once as they did on
 * the streams. */
#define WEFT__PREFETCH_QUEUES 4u

/* The MSI view of a replica (derived from the tags: weft__rep_state). */
typedef enum weft__replica_state { WEFT__REP_INVALID, WEFT__REP_SHARED, WEFT__REP_MODIFIED } weft__replica_state;

/* A value's identity (docs/design.md, "Coherence: the replica protocol"):
 * each write acquire makes a fresh one; a replica holds the value of its
 * tag, or will once the work already queued into it has run.  GARBAGE is
 * no value (never allocated, or what an aborted writer left). */
#define WEFT__TAG_GARBAGE 0u

/* A copy of the handle's bytes on one device.  It is valid when its tag is
 * the handle's `cur`. */
typedef struct weft__replica {
    void *ptr;                         /* NULL until allocated there (the host's: the user's memory) */
    uint64_t tag;                      /* the value it holds (under the handle's lock) */
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
    bool partial;                      /* a reducer's private copy (data/reduce.h), not a replica */
    bool scratch;                      /* a task's scratch buffer (data/scratch.h), not a replica */
} weft__replica;

/* A device's memory as the data layer sees it: the replicas allocated there,
 * least recently used first, to evict from when an allocation fails.
 * lock protects the list; taken after a handle's lock, never before one
 * (victims are only tried: pthread_mutex_trylock). */
typedef struct weft__mnode {
    pthread_mutex_t lock;
    weft__replica *head, *tail;
    /* The device's copy queues, made on first use (under lock): [0] for a
     * host task's copy to the host, which waits for copies queued on task
     * streams (never under a handle's lock), [1] for write-backs of
     * evicted replicas, which wait for nothing pending (no task pins them)
     * and so may be waited for under a handle's lock, [2 ..] for copies
     * into the device for tasks that wait for no predecessor's events (the
     * prefetch queues, handed out in turn by `prefetch_next`, as many as
     * a GPU has streams: WEFT__DATA_PREFETCH), which the tasks' streams
     * wait for by the replica's `ready` event, so that copies in overlap
     * the kernels already queued on those streams. */
    weft__dqueue *copyq[2 + WEFT__PREFETCH_QUEUES];
    _Atomic unsigned prefetch_next;
    weft__device *dev;
    /* Bumped when a replica there is no longer pinned: a task waiting for
     * room (WEFT__DATA_RETRY) waits for it to change (key: the node). */
    _Atomic uint64_t unpinned;
    /* Tasks holding a replica here as the source of a copy to their
     * device (weft__data_hold.from), until they finish, and copies to the
     * host in flight from here (weft__data.host_fetch): the load of the
     * links out of this device, by which a copy chooses among equally
     * good sources (weft__data_source_for). */
    _Atomic uint32_t sourcing;
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
    uint32_t id;                       /* its number in the runtime (the trace names it d<id>) */
    void *ptr;                         /* the user's host memory */
    size_t size;                       /* bytes of a device replica */
    /* Shape: `rows` rows of row_bytes, hpitch bytes apart in the user's
     * memory and packed (row_bytes apart) in a device replica; an ordinary
     * handle is one row of size bytes.  The part a task may write, its
     * interior, is rows in_r0 .. + in_rows, bytes in_c0 .. + in_bytes of
     * each: all of it but a tile's halo.  Fixed at creation. */
    size_t rows, row_bytes, hpitch;
    size_t in_r0, in_c0, in_rows, in_bytes;
    /* Registered where it lives on a device (weft_data_register_device):
     * that device (its replica the user's memory: never evicted nor freed
     * here), and the host's replica Weft's own, allocated on first use
     * (ptr NULL until then); 0 for data registered in host memory. */
    unsigned user_dev;
    /* Registered with no memory (weft_data_register with NULL): for
     * scratch accesses only (ptr NULL, never used).  Set at creation;
     * atomic because weft__desc_check and acquire read it from a handle
     * that may be stale (a spawn racing an unregister, while a new
     * registration reuses the slot), as rt_handle. */
    _Atomic bool no_memory;
    /* A partitioned handle's family (data/tile.h; set once, read without
     * a lock) and, for a tile, its place in it (NULL otherwise). */
    _Atomic(struct weft__family *) fam;
    struct weft__tile *tile;
    /* Its entry in the runtime's index of host ranges (data/overlap.h;
     * NULL: none), and how many registered ranges overlap its own now
     * (changed under the index's lock, read without it by a spawn that
     * pinned the handle: zero, and nothing more is looked up). */
    struct weft__range *range;
    _Atomic uint32_t noverlap;
    void *hist;                        /* the graph layer's access history */
    /* Reductions (data/reduce.h), under lock: a record per reducing task
     * spawned whose private copy is not combined yet, in spawn order, and
     * a host image of an operator's identity to fill new ones from. */
    struct weft__partial *partials, *partials_tail;
    unsigned image_key;
    const struct weft__reduction *image_user; /* image_key WEFT_RED_USER: whose identity */
    void *image;
    _Atomic bool has_partials;         /* partials != NULL (read without the lock) */
    /* Its scratch buffers on GPUs (data/scratch.h), under lock: those in
     * use (pinned) and those kept for the next scratch task there. */
    struct weft__scratch *scratch;
    /* lock protects rep[] (states, allocations, ready events), and the
     * lists of reductions' records and scratch buffers above.  Taken by
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
    weft__copy_counts *copied;         /* the runtime's counts of bytes copied between replicas */
    /* The coherence protocol's state (under lock): the tag of the newest
     * value as of the acquires made so far, the last tag given out, and
     * the writer records of writes acquired and not yet committed or
     * aborted (weft__wrec, newest first). */
    uint64_t cur, last_tag;
    struct weft__wrec *open;
    /* Bumped (and waiters on it woken) by each write record's end: an
     * acquire waiting to overwrite a value an open write keeps live looks
     * again (data.c, wait_overwritable). */
    _Atomic uint64_t ends;
    /* Where the data is (weft__data_home), kept up to date under lock and
     * read without it: mapping may happen on a device's thread, which
     * never takes a handle's lock. */
    _Atomic unsigned home;
    /* And every device holding the newest value (bit i: device i, the
     * first 64), kept with home (weft__data_valid_mask). */
    _Atomic uint64_t valid;
    /* A copy to the host in flight for host readers (under lock): its
     * event on host_fetch_dev's queue (that replica pinned while it
     * exists), and the readers waiting for it (the last one destroys it;
     * one started by weft__data_prefetch_host waits for its reader's
     * acquire or settle). */
    weft__devent *host_fetch;
    unsigned host_fetch_dev, host_fetch_users;
    uint64_t host_fetch_tag;           /* the value it brings */
    /* The checking mode's host watch (data.c, "The host watch"), under
     * lock: what a device's committed write left in the user's memory
     * when it made the host's replica stale (WEFT__WATCH_POISON: the
     * poison fill; WEFT__WATCH_DIGEST: bytes of digest watch_digest, for
     * a family's memory, which the fill spares), in force while the
     * host's replica still holds watch_tag (WEFT__WATCH_OFF: nothing
     * watched).  watch_tripped: a change found there was reported; the
     * next task naming the data, acquire or unregister fails for it
     * (weft__data_watch_take; atomic: taken without the lock). */
    uint8_t watch;
    uint64_t watch_tag, watch_digest;
    _Atomic bool watch_tripped;
    struct weft__data *list_prev, *list_next; /* the runtime's list (front end, under its data_lock) */
} weft__data;

/* A handle over n bytes at ptr with one replica per device of devs[0 ..
 * ndev-1] (the host's, devs[0], is ptr itself, valid).  copied: where to
 * count the bytes copied.  NULL on ENOMEM. */
weft__data *weft__data_new(weft__waitset *ws, const void *rt_handle, void *ptr, size_t n,
                           weft__device *const *devs, weft__mnode *mnodes, unsigned ndev,
                           weft__copy_counts *copied);
/* Make d a handle of data living on device dev at p (just made by
 * weft__data_new with no host memory): that replica its only valid one. */
void weft__data_live_on(weft__data *d, unsigned dev, void *p);
/* Free a handle (no user left): the newest value goes back to the user's
 * memory first if it is only on devices, then the device replicas are
 * freed.  Blocks for that copy.  Returns whether the checking mode's host
 * watch tripped on d (its memory found changed, by that copy back or
 * earlier, and not taken yet: weft__data_watch_take). */
bool weft__data_free(weft__data *d);

weft__data *weft__data_get(const weft_data *h);   /* NULL if stale */
weft__data *weft__data_pin(const weft_data *h);   /* count a user; NULL if stale or closing */
void weft__data_unpin(weft__data *d);             /* the last user of a closing handle wakes its unregister */
/* Begin unregistering: false if it had begun already. */
bool weft__data_close(weft__data *d);
static inline bool weft__data_unused(const weft__data *d)
{
    return atomic_load(&((weft__data *)d)->users) == WEFT__DATA_CLOSING;
}

/* Whether replica i holds the newest value (the lock held). */
static inline bool weft__rep_valid(const weft__data *d, unsigned i) { return d->rep[i].tag == d->cur; }
/* Its MSI view: modified if it is the only valid one. */
weft__replica_state weft__rep_state(const weft__data *d, unsigned i);

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
/* The devices holding the newest value of d now (bit i: device i, for the
 * first 64), as of the last change of where d is: a hint for the
 * scheduler, stale at once.  Never blocks (read without the lock: a
 * device's thread may ask). */
uint64_t weft__data_valid_mask(weft__data *d);
/* The checking mode's seal on the user's memory of d while a task uses d
 * on a GPU: a digest of d's bytes there, read under d's lock (the checking
 * mode's own poison fill is written under it), and whether they are all
 * the poison fill.  false (nothing to seal) for a handle whose user's
 * memory is not its own alone or not there: a tile (its family's memory),
 * data registered where it lives on a device, data with no memory. */
bool weft__data_host_seal(weft__data *d, uint64_t *digest, bool *poisoned);

/* The checking mode's host watch (data.c, "The host watch"): the user's
 * memory of data whose newest value is on devices only must keep what
 * the runtime left there until that value comes back; a change found
 * then (the program wrote the memory outside a task naming the data, or
 * without weft_data_acquire) is lost under the value brought back, and is
 * reported on stderr (weft__vcheck_report) and tripped on the handle. */
enum { WEFT__WATCH_OFF = 0, WEFT__WATCH_POISON, WEFT__WATCH_DIGEST };
/* What a trip means, in the message of each operation it fails (task.c,
 * api_data.c), which prefixes what failed and adds what became of it. */
#define WEFT__WATCH_TRIPPED                                                                                   \
    "the checking mode found the data's memory written on the host while its newest value was on a GPU "   \
    "only, outside a task naming the data and without an acquisition: that write is lost, the memory "      \
    "holds the newest value (printed on stderr, \"weft: data check: ...\")"
/* Take d's trip (false if none): the caller (a task naming d, an acquire,
 * an unregister) fails for it.  Never blocks. */
bool weft__data_watch_take(weft__data *d);
/* Move from's trip onto d (a family's member whose copy back another's
 * acquire made: data/tile.c, under the family's lock). */
void weft__data_watch_pass(weft__data *from, weft__data *d);
/* The checking mode reported a change of d's user memory by a task's body
 * itself (task.c's guards): what is there now is watched from here, so
 * that the same change is not reported twice.  Takes d's lock. */
void weft__data_watch_rebase(weft__data *d);
/* Before a copy from device replica src into the user's memory of d (the
 * lock held) that data/tile.c queues itself: the watch compares, and is
 * off from here (the memory takes the copy); and, if that copy failed,
 * off too (part of it may have landed). */
void weft__data_watch_before_copy(weft__data *d, unsigned src);
void weft__data_watch_off(weft__data *d);

struct weft__partial; /* a reducer's private copy (data/reduce.h) */

/* The replicas an acquire pinned for its task (-1: none): the one used,
 * the one copied from, and for a tile each neighbour's replica its halo
 * was copied from (data/tile.h). */
#define WEFT__HALO_MAX 8
typedef struct weft__data_hold {
    int16_t on, from;
    int8_t halo[WEFT__HALO_MAX];
    /* For the trace: the replica copied from (-1: none), the state after,
     * the halo parts copied. */
    int8_t src;
    uint8_t state, nhalo;
} weft__data_hold;

/* The "reserved" stage for one access of a task that is about to start
 * (task `seq`, its id: reductions spawned before it are combined first,
 * data/reduce.h): make d valid on device dev for mode (WEFT_R / WEFT_W
 * bits), as the coherence protocol says.  A copy into a device replica is queued on q
 * (the task's queue on dev, after what it waits for), and later users on
 * other queues wait for it by an event; a copy to the host (dev 0, q NULL)
 * is waited for here.  A writer invalidates every other replica.  Room for
 * a new replica is made, when the device is full, by evicting the least
 * recently used replicas no task uses (a modified one is copied to the
 * host first).  On success the replica on dev (a device's) and the device
 * replicas copied from are pinned until weft__data_release (*hold says
 * which).  A handle of a family (tiles) is first brought up to date with
 * the rest of it, and a tile read gets its halo (data/tile.h).  0, or WEFT_ENOMEM (no room on dev even after
 * eviction), or a device's error.  Safe from any thread (the handle's
 * lock). */
/* What an acquire did (one per access of a task), so that its task's end
 * commits or aborts exactly that: a write's record (tag, the value it
 * replaces, the replica written; OPEN in the handle's list until the task
 * ends), and the replica a read fetched into. */
enum { WEFT__WREC_NONE = 0, WEFT__WREC_OPEN, WEFT__WREC_COMMITTED, WEFT__WREC_ABORTED };
typedef struct weft__wrec {
    uint64_t tag, prev;                /* the value written and the one it replaces */
    uint64_t was;                      /* what the replica written held before (its content,
                                          while the task's work has not run) */
    uint64_t fetched_tag;              /* the value a read copied into replica `fetched` */
    struct weft__wrec *next;           /* in the handle's open list */
    int16_t dev, fetched;              /* replica written, replica fetched into (-1: none) */
    uint8_t status;                    /* WEFT__WREC_* */
} weft__wrec;
static inline void weft__wrec_clear(weft__wrec *w)
{
    w->tag = w->prev = w->was = w->fetched_tag = 0;
    w->next = NULL;
    w->dev = w->fetched = -1;
    w->status = WEFT__WREC_NONE;
}
int weft__data_acquire(weft__data *d, unsigned dev, unsigned mode, uint64_t seq, weft__dqueue *q,
                       weft__data_hold *hold, weft__wrec *rec);
/* A mode bit for weft__data_acquire: the task's queue q waits for no
 * predecessor's events (its predecessors have finished), so a copy into
 * the device replica may go on one of the device's prefetch queues
 * (weft__mnode copyq[2 ..]) instead of on q, which then waits for it by the replica's
 * `ready` event: the copy runs beside the kernels q has queued already.
 * (Not for a tile with a halo: the halo's copies are on q.) */
#define WEFT__DATA_PREFETCH 0x200u
_Static_assert((WEFT__DATA_PREFETCH & (0x3fu | WEFT_RED_OP_MASK | WEFT_RED_TYPE_MASK | WEFT_ON_GPU_MASK)) == 0,
               "WEFT__DATA_PREFETCH collides with a public mode bit");
/* A task about to start reads d on the host: if the host's replica is
 * invalid, start the copy to the host now (or join the one in flight) and,
 * while it has not landed, return 1 and, if done is not NULL, call
 * done(cookie, status) once it has (from the device's thread, or at once
 * from this call: done must not take d's lock), so that the task waits for
 * it without holding a worker.
 * 0: nothing to wait for (valid, or a copy that already landed, or one
 * this cannot start or be told about: the task's acquire does it and
 * waits).  Its acquire then takes the landed copy (weft__data_acquire);
 * a task that will not acquire (cancelled) calls weft__data_prefetch_settle
 * instead, which makes the host's replica valid from it (it is the
 * current value: no writer runs before the reader has finished).  Not
 * for tiles, data with reductions pending, or data registered on a
 * device (0). */
int weft__data_prefetch_host(weft__data *d, weft__done_fn done, void *cookie);
/* Whether a device replica of d was ever valid (else the host's is the
 * only copy there is, and weft__data_prefetch_host has nothing to do). */
static inline bool weft__data_maybe_on_devices(const weft__data *d)
{
    return atomic_load_explicit(&((weft__data *)d)->on_devices, memory_order_relaxed);
}
void weft__data_prefetch_settle(weft__data *d);
/* The task whose acquire made rec ended, before its successors are
 * released.  Completed (ok): its write is committed.  Failed or cancelled:
 * aborted, exactly: the replica it wrote holds no value (untouched: none of
 * its work ran, so it holds what it held before); if its value is
 * the newest, the one it replaced is again (and records that replaced the
 * aborted value now replace that one), whatever other tasks acquired
 * meanwhile; a fetch whose copy may have failed (copies_failed) leaves no
 * value in the replica it filled, unless another task uses it.  Nothing a
 * task that did not write relies on changes. */
void weft__data_end(weft__data *d, weft__wrec *rec, bool ok, bool untouched, bool copies_failed, bool poison);
/* (poison: the checking mode; a committed write on a device fills the
 * user's memory, stale from now on, with this byte) */
#define WEFT__DATA_POISON 0xDB
/* The checking mode: after its acquire, is d as a task using it on dev
 * with mode needs it?  Its replica there valid, no other modified (none
 * other valid for a writer), a tile's halo up to date.  0, or WEFT_EDEVICE
 * with what is wrong in why. */
int weft__data_check(weft__data *d, unsigned dev, unsigned mode, char *why, size_t len);
/* The handle whose replica in memory node m overlaps [p, p + n), or NULL
 * (the checking mode: a kernel's range outside its task's data). */
const weft__data *weft__data_at_address(weft__mnode *m, const void *p, size_t n);
/* The same for one handle alone (data/tile.c calls it for a family's). */
int weft__data_acquire_one(weft__data *d, unsigned dev, unsigned mode, weft__dqueue *q, weft__data_hold *hold,
                           weft__wrec *rec);
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
/* Whether a replica or private copy on dev is pinned now (a running task's,
 * a copy's in flight): their end will make room there.  Takes the node's
 * lock; the caller holds no handle's lock. */
bool weft__data_room_held(const weft__data *d, unsigned dev);
/* The task that acquired *hold finished (or gives up and retries, notify
 * false: its own release must not wake itself): unpin them.  Never takes
 * the handle's lock. */
void weft__data_release(weft__data *d, const weft__data_hold *hold, bool notify);
static inline void weft__data_hold_clear(weft__data_hold *h)
{
    h->on = h->from = h->src = -1;
    for (int i = 0; i < WEFT__HALO_MAX; i++)
        h->halo[i] = -1;
    h->state = 0;
    h->nhalo = 0;
}

/* ---- for data/tile.c: the replicas' mechanics, under the handle's lock ---- */

/* Pitch of replica i's rows, and the address of row r, byte c there. */
static inline size_t weft__data_pitch(const weft__data *d, unsigned i) { return i ? d->row_bytes : d->hpitch; }
static inline char *weft__data_at(const weft__data *d, unsigned i, size_t r, size_t c)
{
    return (char *)(i ? d->rep[i].ptr : d->ptr) + r * weft__data_pitch(d, i) + c;
}
/* The replica to copy d from for device dst: a modified one, else the
 * shared one on a device of dst's kind whose links are least loaded (fewest
 * copies from it: weft__mnode.sourcing; the lowest device among
 * equals), else the host's; -1 none, below -1 only on a device of another
 * kind. */
int weft__data_source_for(const weft__data *d, unsigned dst);
/* Make q wait for the last copy into replica i; note one queued on q. */
int weft__data_wait_ready(weft__data *d, unsigned i, weft__dqueue *q);
int weft__data_note_ready(weft__data *d, unsigned i, weft__dqueue *q);
/* Make the host's replica valid (a copy waited for with the lock let go). */
int weft__data_to_host(weft__data *d);
/* Start the copy weft__data_to_host would wait for, if d's newest value
 * is on a device only (d's lock taken here; not for data registered on a
 * device, nor with reductions not combined).  Nothing is reported: a copy
 * that could not start is made by the wait, and one that fails is the
 * wait's to report.  For an unregister, before it frees many handles, so
 * that their copies back run at once on every device that holds them. */
void weft__data_host_fetch_start(weft__data *d);
/* Before a copy into replica dev outside acquire (the lock held): while it
 * is the last copy of a value an open write may fall back to, wait (the
 * lock let go) until that write ends. */
void weft__data_wait_overwritable(weft__data *d, unsigned dev);
/* A part of a replica: rows from r, bytes from c in each. */
typedef struct weft__rect {
    size_t r, c, rows, bytes;
} weft__rect;
/* Bring the newest value of parts[0 .. n-1] of d into the host's memory,
 * leaving the host's replica invalid (a tile's border band, which its
 * neighbours' halos on the host read: data/tile.c): copies on the copy
 * queue of the device holding it, waited for with the lock let go, the
 * source pinned meanwhile. */
int weft__data_parts_to_host(weft__data *d, const weft__rect *parts, unsigned n);
/* Queue on q, with ops, a copy of rows x bytes at (r, c) of src's replica
 * si into dst's replica di at (dr, dc) (copies counted). */
int weft__data_copy_rect(const weft__device_ops *ops, weft__dqueue *q, weft__data *dst, unsigned di, size_t dr,
                         size_t dc, weft__data *src, unsigned si, size_t r, size_t c, size_t rows, size_t bytes);
/* Unpin replica i (taken for a task) without the handle's lock. */
void weft__data_unpin_replica(weft__data *d, int i, bool notify);
/* The host's replica was copied from device replica src: valid there. */
void weft__data_host_copied(weft__data *d, unsigned src);
/* The host's replica the only valid one: its bytes a new value (a new
 * tag: aborts of older writes pending change nothing). */
void weft__data_reset_to_host(weft__data *d);

/* ---- for data/reduce.c and data/scratch.c, under the handle's lock ---- */

/* Allocate d->size bytes on device dev (> 0) into *out, evicting unpinned
 * replicas, private copies and scratch buffers there (d's own too) when it
 * is full: 0, WEFT__DATA_RETRY or WEFT_ENOMEM, as for an acquire. */
int weft__data_alloc_evicting(weft__data *d, unsigned dev, void **out);
/* r (a replica or private copy on device dev, dev > 0) was used / is
 * given back: its place in dev's list of allocations by age. */
void weft__data_lru_touch(weft__data *d, unsigned dev, weft__replica *r);
/* d will not be used again soon (weft_data_wont_use): its device replicas
 * become the least recently used of their nodes, the first evicted. */
void weft__data_wont_use(weft__data *d);
void weft__data_lru_unlink(weft__data *d, unsigned dev, weft__replica *r);
/* Copy n bytes at src on device dev (> 0) into host memory dst, on dev's
 * queue for write-backs (which waits for nothing pending), and wait for
 * it: 0 or the device's error.  Counted as bytes copied. */
int weft__data_copy_out(weft__data *d, unsigned dev, void *dst, const void *src, size_t n);
/* The same in two steps: queue copies (several, on several devices), then
 * wait for those of each device. */
int weft__data_copy_out_queue(weft__data *d, unsigned dev, void *dst, const void *src, size_t n);
int weft__data_copy_out_wait(weft__data *d, unsigned dev);
/* Make the host's replica valid by a copy waited for with the lock held
 * (only when no task's copy into a replica of d can be pending: every task
 * that used d has completed). */
int weft__data_to_host_now(weft__data *d);

#endif
