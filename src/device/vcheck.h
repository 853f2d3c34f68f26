/*
 * device/vcheck.h — the virtual GPUs' checking mode (WEFT_VGPU_CHECK=1):
 * vector clocks over the virtual GPUs' queues, so that work which reads
 * memory is checked, when it starts, to be ordered after the work that last
 * wrote it (in queue order, through an event wait, or through the host
 * having seen the writer's completion), and memory that work is about to
 * write is poisoned first.  A missing event wait then fails the reader with
 * WEFT_EDEVICE and a message naming both, whatever the timing.
 *
 * Used by device/vgpu.c only.  All of it is off (and costs nothing) unless
 * the environment asks for it when a virtual GPU is created.
 */
#ifndef WEFT_DEVICE_VCHECK_H
#define WEFT_DEVICE_VCHECK_H

#include "internal.h"

#define WEFT__VCHECK_QUEUES 512 /* queues a checking process may have in all */
#define WEFT__VCHECK_POISON 0xDB

/* One clock: a count of finished work items per queue. */
typedef struct weft__vclock {
    uint64_t c[WEFT__VCHECK_QUEUES];
} weft__vclock;

/* WEFT_VGPU_CHECK is set to a non-zero number (read each call). */
bool weft__vcheck_wanted(void);

/* A queue's identity and clock; -1 when every identity is taken. */
int weft__vcheck_queue_id(void);

/* The host's clock: what every completion report so far had been ordered
 * after (merged by `notified`); work queued from now on is ordered after it. */
void weft__vcheck_host_snapshot(weft__vclock *out);
void weft__vcheck_notified(const weft__vclock *q);

static inline void weft__vclock_merge(weft__vclock *into, const weft__vclock *from)
{
    for (unsigned i = 0; i < WEFT__VCHECK_QUEUES; i++)
        if (from->c[i] > into->c[i])
            into->c[i] = from->c[i];
}

/* A violation found: printed on stderr and kept as the last one (for
 * tests: weft__vcheck_last copies it, "" if none; weft__vcheck_clear
 * forgets it). */
void weft__vcheck_report(const char *why);
void weft__vcheck_last(char *buf, size_t len);
void weft__vcheck_clear(void);

/* Work starts on queue qid with clock q: check its reads, poison what it
 * only writes, and note it as the writer of what it writes (as of the clock
 * value it will have when done).  0, or WEFT_EDEVICE with the reason in why. */
int weft__vcheck_start(int qid, const weft__vclock *q, const char *what, const weft_range *rw, size_t n,
                       char *why, size_t len);

/* A range's mode bit of the checking mode's own: the range is in data
 * its task only reads (so nothing may change it while the work runs). */
#define WEFT__VCHECK_SEALED 0x100u

/* Work about to start: a digest of each sealed range (0 for the others)
 * into digest[0 .. n-1]; then, once it ran, whether it left them as they
 * were: 0, or WEFT_EDEVICE with the reason in why (work that writes what
 * its task only reads makes the data's replicas disagree). */
void weft__vcheck_digest(const weft_range *rw, size_t n, uint64_t *digest);
uint64_t weft__vcheck_digest_of(const void *p, size_t n);
int weft__vcheck_read_only(const char *what, const weft_range *rw, size_t n, const uint64_t *digest, char *why,
                           size_t len);

#endif
