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

#endif
