/*
 * trace.h — observability: Chrome-trace JSON (opens in Perfetto), one track
 * per worker with one span per task body (and the runtime's notes about its
 * workers: the automatic pinning), a track per GPU stream and copy queue,
 * and the communication track.
 *
 * The trace is an observer of the workers (worker.h): it sees bodies only
 * through the observer table the front end adds it to, and keeps its own
 * buffers.  It names devices and writes their tracks from the runtime's
 * device table (api/runtime.h).
 */
#ifndef WEFT_TRACE_H
#define WEFT_TRACE_H

#include "worker.h"

typedef struct weft__tracer weft__tracer;

/* A trace of rt's tasks (rt->trace_path, rt->nworkers workers,
 * rt->cfg.trace_max_events per worker) whose time origin is t0_ns, added
 * to rt's observers; NULL when out of memory or the observers are full.
 * Before the workers start. */
weft__tracer *weft__trace_new(weft__rt *rt, uint64_t t0_ns);
/* Write the file (after the workers have been joined): 0, or -1. */
int weft__trace_write(weft__tracer *tr);
/* Spans dropped so far: the per-worker limit reached, or memory ran out. */
uint64_t weft__trace_dropped(weft__tracer *tr);
void weft__trace_free(weft__tracer *tr);

/* The communication track: one operation (name copied, at most 31 bytes)
 * from t0 to t1, moving `bytes` bytes; dropped if the trace is off or
 * memory runs out.  Thread-safe. */
typedef struct weft__comm_span {
    char name[32];
    uint64_t t0, t1;
    size_t bytes;
} weft__comm_span;
void weft__trace_comm(weft__rt *rt, const char *name, uint64_t t0, uint64_t t1, size_t bytes);

#endif
