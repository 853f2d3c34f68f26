/* CloverLeaf on Weft: what the kernels allow on this machine, without
 * Weft (`weft-cloverleaf --roofline`).
 *
 * The goal of 85% of STREAM triad's bandwidth (clover_triad_ratio in
 * bench/clover.sh) assumes the kernels are bound by memory bandwidth.
 * This measures it: each of `threads` threads runs the time
 * step's kernels (reference order, serial.c's) on a chunk of its own whose
 * every face is a reflecting boundary (no exchange, no runtime), timing
 * each kernel, twice:
 *   - in cache: a small chunk (128 x 32 cells, about 1 MiB of fields) cut
 *     from the deck's mesh where its states meet, so the flow moves; the
 *     kernels' arithmetic alone;
 *   - streaming: the chunks of the deck's own decomposition over `threads`
 *     (as the C driver on `cpu` splits it), from memory.
 * A kernel whose in-cache time is close to its streaming time is bound by
 * its arithmetic, not by memory.  The roofline bound of a kernel is the
 * larger of its in-cache time and its bytes (traffic.c) at the triad
 * bandwidth; their sum over a step is the fastest the kernels can run the
 * step, and bytes over that time the highest bandwidth they can show. */
#ifndef CLOVER_ROOFLINE_H
#define CLOVER_ROOFLINE_H

#include "clover.h"

#include <stdio.h>

#define CLOVER_ROOF_MAX 12

/* One kernel's figures, per cell-step of one thread (its calls in a step
 * summed: pdv counts predict and correct, advec_mom its four calls). */
typedef struct clover_roof_row {
    const char *kernel;          /* traffic.c's name */
    double bytes;                /* traffic.c's bytes per cell-step */
    double cache_ns;             /* in cache */
    double stream_ns;            /* from memory */
} clover_roof_row;

typedef struct clover_roofline {
    int threads;
    int cache_nx, cache_ny, cache_steps;
    int stream_nx, stream_ny, stream_steps;  /* chunk 0's size */
    int nrows;
    clover_roof_row row[CLOVER_ROOF_MAX];
    double bytes, cache_ns, stream_ns;       /* the step: sums of the rows */
} clover_roofline;

/* Measure (a few seconds at the bm decks' size).  Returns 0, or -1 with a
 * message on stderr (out of memory, a thread that cannot start, a mesh the
 * decomposition cannot split).  Not thread safe (it runs its own threads). */
int clover_roofline_measure(const clover_deck *d, int threads, clover_roofline *out);

/* The table, and the step's figures against triad_bw (bytes/s, 0: none
 * measured): what the kernels alone achieve and the roofline bound. */
void clover_roofline_print(FILE *out, const clover_roofline *r, double triad_bw);

/* The roofline bound of the step in bytes per second (every kernel at the
 * larger of its in-cache time and its bytes at triad_bw). */
double clover_roofline_bound_bw(const clover_roofline *r, double triad_bw);

#endif
