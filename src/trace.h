/*
 * trace.h — observability: Chrome-trace JSON (opens in Perfetto), one track
 * per worker, one span per task body.
 */
#ifndef WEFT_TRACE_H
#define WEFT_TRACE_H

#include "worker.h"

void weft__trace_record(weft__worker *w, const weft__task *t, uint64_t start_ns, uint64_t end_ns);
int weft__trace_write(weft__rt *rt);
void weft__trace_free(weft__worker *w);

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
