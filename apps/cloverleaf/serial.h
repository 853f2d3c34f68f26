/* The sequential oracle: CloverLeaf's time-step loop in plain C over any
 * number of chunks, one after another, without Weft.  Halo updates copy
 * clover_halo_strip blocks between the chunks and then reflect at the
 * mesh's boundary, as the reference code's update_halo does. */
#ifndef CLOVER_SERIAL_H
#define CLOVER_SERIAL_H

#include "clover.h"

#include <stdio.h>

/* Optional extras of a run: buffers to fill in, and what the run did. */
typedef struct clover_serial_out {
    double *density;             /* NULL, or x_cells * y_cells doubles: the final density0 */
    double *energy;              /* NULL, or the same for energy0 */
    int steps;                   /* set by the run: steps taken */
    double time;                 /* simulated time reached */
    int chunks_x, chunks_y;      /* the grid of chunks */
} clover_serial_out;

/* Run the deck on nchunks chunks (split by clover_decompose).  Prints the
 * summary table and the verification line (a deck with a test_problem) to
 * out unless it is NULL; the last summary's sums go to final_sums (unless
 * NULL).  With so, the final density0 and energy0 of the whole mesh go to
 * the buffers it names (element (j, k) at k * x_cells + j, row 0 at the
 * bottom), and the steps, time and grid of chunks to its other members.
 * Returns 0, or -1 with a message on stderr (no decomposition, no memory,
 * the PdV check, dt below dtmin). */
int clover_serial_run(const clover_deck *d, int nchunks, FILE *out, double final_sums[CS_N], clover_serial_out *so);

#endif
