/* CloverLeaf on Weft: a memory-traffic model of one time step, counted
 * from the host kernels as kernels.c writes them, so that a benchmark can
 * turn cell-steps per second into achieved bytes per second and compare
 * that with STREAM triad (clover_triad_bw).
 *
 * The model (details and the per-kernel array lists are in traffic.c):
 *   - per cell of the chunk, ghost layers ignored (large chunks);
 *   - 8 bytes for each distinct 2-D array a kernel reads from memory and
 *     8 bytes for each distinct 2-D array it writes: an array both read
 *     and written counts 16, a write-only array 8 (no write-allocate
 *     traffic is added);
 *   - each array counted once per kernel call, as if it streamed through
 *     once, even where the kernel makes more than one pass over it;
 *   - 1-D geometry arrays (celldx, vertexdy, ...) count 0;
 *   - scratch that kernels.c keeps in a few reused rows counts 0; work
 *     arrays (CF_WORK*) written over the whole chunk count as arrays.
 *
 * Achieved bandwidth = cell-steps per second * clover_traffic_step_bytes()
 * (plus cell-summaries per second * clover_traffic_summary_bytes()). */
#ifndef CLOVER_TRAFFIC_H
#define CLOVER_TRAFFIC_H

#include <stddef.h>

/* Bytes per cell of one kernel call (names as in run_weft.c's kern_name
 * where possible; variant says which call, "" when every call is the
 * same). */
typedef struct clover_traffic_row {
    const char *kernel;
    const char *variant;
    double bytes_per_cell;
} clover_traffic_row;

/* The whole table: *rows points at a static array; returns its length. */
size_t clover_traffic_table(const clover_traffic_row **rows);

/* Bytes per cell of one time step (ideal_gas .. reset_field), the two
 * sweep orders (x first on odd steps, y first on even ones) averaged,
 * field summaries not included. */
double clover_traffic_step_bytes(void);

/* The same for one sweep order only: x_first nonzero for the steps whose
 * first advection sweep runs along x. */
double clover_traffic_step_bytes_order(int x_first);

/* The part of clover_traffic_step_bytes() that the calls of one kernel
 * make (kernel as in the table: "pdv" counts predict and correct,
 * "advec_mom" its four calls); 0 for a name the step does not call. */
double clover_traffic_kernel_step_bytes(const char *kernel);

/* Bytes per cell of one field summary (ideal_gas, then field_summary),
 * run every summary_frequency steps. */
double clover_traffic_summary_bytes(void);

#endif /* CLOVER_TRAFFIC_H */
