/*
 * device/vsched.h — the virtual GPUs' seeded schedule
 * (WEFT_VGPU_SCHEDULE=<seed>): one work item at a time across every
 * virtual GPU of the process, in an order that the seed decides.
 *
 * Each queue thread, before it runs an item, offers it (`turn`) and waits
 * for its turn.  The scheduler grants a turn only once every queue that
 * has work has offered its next item, so that the choice is among the same
 * items whatever the threads' timing.  Time is modelled: a virtual clock,
 * each queue's virtual "free at", and each item's modelled duration (a
 * kernel's model_ns, a copy's latency + bandwidth model) stretched or
 * shrunk by a seeded factor, now and then by a lot (a straggler).  The
 * item granted is the ready one (a wait: once its record is done) that
 * would finish first in modelled time; now and then its queue holds the
 * turn for a seeded real pause before it runs the item, so that the host
 * runs ahead of the devices by a seeded amount.  Nothing sleeps for a
 * modelled duration.
 *
 * Each choice is a function of the seed, the queue (numbered in the order
 * queues were made) and the item's place in its queue: the order in which
 * queues progress, copies land and events fire repeats for the same seed
 * and the same work queued.  (The host's threads run freely: what they
 * queue, and when, follows their timing.)  A kernel must not wait for
 * other device work — while it runs, no other item on any virtual GPU
 * does; a completion report's callback runs beside the schedule.
 *
 * Used by device/vgpu.c only.  Off (and costing nothing) unless the
 * environment asked for it when the virtual GPU was created.
 */
#ifndef WEFT_DEVICE_VSCHED_H
#define WEFT_DEVICE_VSCHED_H

#include "internal.h"

/* The seed of WEFT_VGPU_SCHEDULE, if it is set to a number (read each call). */
bool weft__vsched_wanted(uint64_t *seed);

/* A queue's place in the schedule.  The scheduler's lock protects every
 * field; the queue's `pending` (items pushed and not yet finished) is an
 * atomic the queue owns. */
typedef struct weft__vsched_q {
    struct weft__vsched_q *next_member, *next_offer;
    const _Atomic unsigned *pending;
    uint64_t id;              /* in the order queues were added */
    uint64_t seq;             /* items offered so far */
    uint64_t free_at;         /* modelled time at which its last item finished */
    uint64_t finish;          /* the offered item's modelled finish */
    uint64_t pause_ns;        /* real pause before it runs, once granted */
    bool offered, reporting;  /* waits for a turn; runs a report's callback */
    bool (*ready)(void *arg); /* the offered item: NULL, ready now */
    void *ready_arg;
} weft__vsched_q;

/* A virtual GPU in the mode joins before its first queue is added and
 * leaves after its last was removed; the first to join (none in) starts
 * the schedule from its seed, so that each runtime in turn replays it. */
void weft__vsched_join(uint64_t seed);
void weft__vsched_leave(void);

/* A queue enters the schedule before its thread starts and leaves it
 * before its thread is told to stop. */
void weft__vsched_add(weft__vsched_q *q, const _Atomic unsigned *pending);
void weft__vsched_remove(weft__vsched_q *q);

/* Offer an item of modelled duration ns (ready once ready(ready_arg), or
 * at once if ready is NULL) and wait until it is q's turn; then the caller
 * runs it and calls `done`, after dropping q's pending count.  Blocks. */
void weft__vsched_turn(weft__vsched_q *q, uint64_t ns, bool (*ready)(void *), void *ready_arg);
/* A report granted its turn gives it back before its callback runs; the
 * queue is out of the choice until `done`. */
void weft__vsched_report(weft__vsched_q *q);
void weft__vsched_done(weft__vsched_q *q);

#endif
