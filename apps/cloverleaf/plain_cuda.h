/* A hand-written CUDA loop of CloverLeaf without Weft (plain_cuda.c): the
 * baseline the Weft driver is measured against on a GPU.  Built with the
 * CUDA kernels only (CLOVER_HAVE_CUDA). */
#ifndef CLOVER_PLAIN_CUDA_H
#define CLOVER_PLAIN_CUDA_H

#include "clover.h"

typedef struct clover_plain_result {
    double sums[CS_N];           /* the final field summary */
    int steps;
    double time, wall_s;         /* simulated; the loop's wall time */
    int verified;                /* clover_verify's */
    /* Set by the caller (kept by the run): NULL, or x_cells * y_cells
     * doubles for the final density0 (energy0), element (j, k) at
     * k * x_cells + j as clover_serial_out's. */
    double *density, *energy;
} clover_plain_result;

/* Run the deck on the current CUDA device as one chunk, one stream.
 * Prints the final summary and verification to out (unless NULL); fills
 * the buffers res->density and res->energy name.
 * Returns 0, or -1 with a message on stderr (a CUDA error, the PdV check,
 * dt below dtmin). */
int clover_plain_cuda_run(const clover_deck *d, FILE *out, clover_plain_result *res);

#endif
