/*
 * device/vcheck.c — the virtual GPUs' checking mode (see vcheck.h).
 */
#include "device/vcheck.h"
#include "env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool weft__vcheck_wanted(void)
{
    bool on;
    return weft__env_flag("WEFT_VGPU_CHECK", &on) && on;
}

/* check_lock protects the queue counter, the host clock and the writers.
 * Nothing nests under it. */
static pthread_mutex_t check_lock = PTHREAD_MUTEX_INITIALIZER;
static int next_qid;
static weft__vclock host;

/* The last writer of each range written so far (ranges split as writes
 * overlap them). */
typedef struct writer {
    uintptr_t lo, hi;
    int qid;
    uint64_t seq;          /* the writer's queue clock once it finished */
    char what[40];
} writer;
static writer *writers;
static size_t nwriters, capwriters;
static char last[1024];

void weft__vcheck_report(const char *why)
{
    fprintf(stderr, "weft: %s\n", why);
    pthread_mutex_lock(&check_lock);
    snprintf(last, sizeof last, "%s", why);
    pthread_mutex_unlock(&check_lock);
}

void weft__vcheck_last(char *buf, size_t len)
{
    pthread_mutex_lock(&check_lock);
    snprintf(buf, len, "%s", last);
    pthread_mutex_unlock(&check_lock);
}

void weft__vcheck_clear(void)
{
    pthread_mutex_lock(&check_lock);
    last[0] = '\0';
    pthread_mutex_unlock(&check_lock);
}

int weft__vcheck_queue_id(void)
{
    pthread_mutex_lock(&check_lock);
    int id = next_qid < WEFT__VCHECK_QUEUES ? next_qid++ : -1;
    pthread_mutex_unlock(&check_lock);
    return id;
}

void weft__vcheck_host_snapshot(weft__vclock *out)
{
    pthread_mutex_lock(&check_lock);
    *out = host;
    pthread_mutex_unlock(&check_lock);
}

void weft__vcheck_notified(const weft__vclock *q)
{
    pthread_mutex_lock(&check_lock);
    weft__vclock_merge(&host, q);
    pthread_mutex_unlock(&check_lock);
}

/* Drop what of the writers lies in [lo, hi) (the part before and after an
 * overlapping record stays); then add the new one.  Under check_lock. */
static int note_writer(uintptr_t lo, uintptr_t hi, int qid, uint64_t seq, const char *what)
{
    size_t kept = 0;
    writer split = {0};
    bool has_split = false;
    for (size_t i = 0; i < nwriters; i++) {
        writer w = writers[i];
        if (w.hi <= lo || w.lo >= hi) {
            writers[kept++] = w;
            continue;
        }
        if (w.lo < lo && w.hi > hi) { /* the new range is inside: two pieces */
            split = w;
            split.lo = hi;
            has_split = true;
            w.hi = lo;
            writers[kept++] = w;
        } else if (w.lo < lo) {
            w.hi = lo;
            writers[kept++] = w;
        } else if (w.hi > hi) {
            w.lo = hi;
            writers[kept++] = w;
        }
    }
    nwriters = kept;
    size_t need = nwriters + 2;
    if (need > capwriters) {
        size_t cap = capwriters ? capwriters * 2 : 64;
        while (cap < need)
            cap *= 2;
        writer *n = realloc(writers, cap * sizeof *n);
        if (!n)
            return WEFT_ENOMEM;
        writers = n;
        capwriters = cap;
    }
    if (has_split)
        writers[nwriters++] = split;
    writer *w = &writers[nwriters++];
    w->lo = lo;
    w->hi = hi;
    w->qid = qid;
    w->seq = seq;
    snprintf(w->what, sizeof w->what, "%s", what);
    return 0;
}

int weft__vcheck_start(int qid, const weft__vclock *q, const char *what, const weft_range *rw, size_t n,
                       char *why, size_t len)
{
    int rc = 0;
    pthread_mutex_lock(&check_lock);
    for (size_t k = 0; k < n && rc == 0; k++) {
        if (!(rw[k].mode & WEFT_R) || !rw[k].bytes)
            continue;
        uintptr_t lo = (uintptr_t)rw[k].ptr, hi = lo + rw[k].bytes;
        for (size_t i = 0; i < nwriters; i++) {
            const writer *w = &writers[i];
            if (w->hi <= lo || w->lo >= hi || w->qid == qid || q->c[w->qid] >= w->seq)
                continue;
            snprintf(why, len,
                     "vgpu check: %s on queue %d reads [%p, +%zu) written by %s on queue %d, "
                     "which it is not ordered after (a missing event wait or dependency)",
                     what, qid, (void *)w->lo, (size_t)(w->hi - w->lo), w->what, w->qid);
            rc = WEFT_EDEVICE;
            break;
        }
    }
    for (size_t k = 0; k < n && rc == 0; k++) {
        if (!(rw[k].mode & WEFT_W) || !rw[k].bytes)
            continue;
        if (!(rw[k].mode & WEFT_R))
            memset(rw[k].ptr, WEFT__VCHECK_POISON, rw[k].bytes);
        uintptr_t lo = (uintptr_t)rw[k].ptr;
        rc = note_writer(lo, lo + rw[k].bytes, qid, q->c[qid] + 1, what);
    }
    pthread_mutex_unlock(&check_lock);
    return rc;
}

/* FNV-1a over the bytes. */
uint64_t weft__vcheck_digest_of(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

void weft__vcheck_digest(const weft_range *rw, size_t n, uint64_t *digest)
{
    for (size_t k = 0; k < n; k++)
        digest[k] = (rw[k].mode & WEFT__VCHECK_SEALED) && rw[k].ptr ? weft__vcheck_digest_of(rw[k].ptr, rw[k].bytes) : 0;
}

int weft__vcheck_read_only(const char *what, const weft_range *rw, size_t n, const uint64_t *digest, char *why,
                           size_t len)
{
    for (size_t k = 0; k < n; k++)
        if ((rw[k].mode & WEFT__VCHECK_SEALED) && rw[k].ptr && weft__vcheck_digest_of(rw[k].ptr, rw[k].bytes) != digest[k]) {
            snprintf(why, len,
                     "vgpu check: %s changed [%p, +%zu), declared WEFT_R in data its task accesses WEFT_R "
                     "only: the data's replicas now disagree (declare the range and the access WEFT_RW)",
                     what, rw[k].ptr, rw[k].bytes);
            return WEFT_EDEVICE;
        }
    return 0;
}

