/* CloverLeaf on Weft: the memory-traffic model of traffic.h.
 *
 * Counting rules, applied to each kernel of kernels.c as written:
 *   R  an array the kernel reads values of that it did not itself write a
 *      few rows earlier: values present when the kernel starts, or values
 *      it wrote in an earlier full pass over the chunk (such an array must
 *      come back from memory).  8 bytes per cell.
 *   W  an array the kernel writes over the whole chunk.  8 bytes per cell.
 *      Write-allocate (reading a line before overwriting it, on caches
 *      without streaming stores) is NOT added: a write-only array costs 8,
 *      not 16.  Add 8 per W array for a write-allocate machine.
 *   An array both R and W counts 16.  A value written and read back
 *   within a few rows (the two-row lag of the y sweeps, a flux row read at
 *   j and j + 1) is a cache hit, not an R.  Each array is counted once per
 *   call even where the kernel passes over it twice (noted where it does),
 *   so the figures are the streaming lower bound for this code.
 *   1-D geometry arrays (celldx, celldy, vertexdx, vertexdy) count 0.
 *   Row-sized scratch counts 0: a few rows of a work array that every row
 *   of the sweep reuses (advec_cell's pre_vol and ener_flux, advec_mom's
 *   post_vol, node_flux, node_mass_post, node_mass_pre and mom_flux; the
 *   list is at the top of kernels.c) and blocks on the stack (viscosity,
 *   calc_dt) stay in cache.  Values kernels.c does not store at all (the
 *   reference's volume_change, stepbymass, pre_mass, post_mass,
 *   advec_vol, post_ener, advec_vel, and post_vol where it is the
 *   volume) count nothing.
 *   Ghost cells are ignored: bytes are per cell of the chunk's interior.
 *   Stencil neighbours (rows k - 1, k + 1, columns j +- 1, 2) of the same
 *   array are the same stream.
 *
 * Names: *0 / *1 as in clover_field_name (density0, xvel1, ...);
 * work_arrayN is CF_WORKN. */
#include "traffic.h"

#include <string.h>

/* bytes per cell from the number of R and of W arrays */
#define RW_BYTES(nread, nwrite) (8.0 * (double)((nread) + (nwrite)))

enum {
    T_IDEAL_GAS,
    T_VISCOSITY,
    T_CALC_DT,
    T_PDV_PREDICT,
    T_PDV_CORRECT,
    T_REVERT,
    T_ACCELERATE,
    T_FLUX_CALC,
    T_CELL_X1,
    T_CELL_X2,
    T_CELL_Y1,
    T_CELL_Y2,
    T_MOM_X1,
    T_MOM_X2,
    T_MOM_Y1,
    T_MOM_Y2,
    T_RESET_FIELD,
    T_FIELD_SUMMARY,
    T_N
};

static const clover_traffic_row table[T_N] = {
    /* ideal_gas (predict 0: density0, energy0; predict 1: density1,
     * energy1; the same count):
     * reads density, energy; writes pressure, soundspeed.
     * R 2, W 2 -> 32 */
    [T_IDEAL_GAS] = {"ideal_gas", "", RW_BYTES(2, 2)},

    /* viscosity:
     * reads density0 (every cell: the kernel computes the viscous value
     * everywhere and keeps it where viscosity is switched on), pressure (rows k - 1 .. k + 1), xvel0, yvel0 (node rows k, k + 1);
     * writes viscosity.
     * R 4, W 1 -> 40 */
    [T_VISCOSITY] = {"viscosity", "", RW_BYTES(4, 1)},

    /* calc_dt:
     * reads xarea, yarea (rows k, k + 1), volume, density0, viscosity,
     * soundspeed, xvel0, yvel0 (node rows k, k + 1); writes no array (the
     * second pass over a row that holds a new minimum rereads that row
     * from cache).
     * R 8, W 0 -> 64 */
    [T_CALC_DT] = {"calc_dt", "", RW_BYTES(8, 0)},

    /* pdv, predict (the start-of-step velocities stand in for the new
     * ones, so xvel1 and yvel1 are not read):
     * reads xarea, yarea, volume, density0, energy0, pressure, viscosity,
     * xvel0, yvel0; writes density1, energy1 (volume_change is not
     * stored).
     * R 9, W 2 -> 88 */
    [T_PDV_PREDICT] = {"pdv", "predict", RW_BYTES(9, 2)},

    /* pdv, correct:
     * reads xarea, yarea, volume, density0, energy0, pressure, viscosity,
     * xvel0, yvel0, xvel1, yvel1; writes density1, energy1.
     * R 11, W 2 -> 104 */
    [T_PDV_CORRECT] = {"pdv", "correct", RW_BYTES(11, 2)},

    /* revert:
     * reads density0, energy0; writes density1, energy1.
     * R 2, W 2 -> 32 */
    [T_REVERT] = {"revert", "", RW_BYTES(2, 2)},

    /* accelerate:
     * reads density0, volume, xarea, yarea, pressure, viscosity (cell
     * rows k - 1, k), xvel0, yvel0; writes xvel1, yvel1 (stepbymass is
     * not stored).
     * R 8, W 2 -> 80 */
    [T_ACCELERATE] = {"accelerate", "", RW_BYTES(8, 2)},

    /* flux_calc:
     * reads xarea, yarea, xvel0, xvel1, yvel0, yvel1; writes vol_flux_x,
     * vol_flux_y.
     * R 6, W 2 -> 64 */
    [T_FLUX_CALC] = {"flux_calc", "", RW_BYTES(6, 2)},

    /* advec_cell, x, sweep 1.  One pass, row by row: pre_vol of the row
     * (into a scratch row), the fluxes of its faces (ener_flux into a
     * scratch row), then the update of the row:
     * reads volume, vol_flux_x, vol_flux_y (pre_vol), density1, energy1;
     * writes density1, energy1, mass_flux_x.
     * R 5, W 3 -> 64 */
    [T_CELL_X1] = {"advec_cell", "x sweep 1", RW_BYTES(5, 3)},

    /* advec_cell, x, sweep 2: as sweep 1, but pre_vol does not read
     * vol_flux_y:
     * reads volume, vol_flux_x, density1, energy1;
     * writes density1, energy1, mass_flux_x.
     * R 4, W 3 -> 56 */
    [T_CELL_X2] = {"advec_cell", "x sweep 2", RW_BYTES(4, 3)},

    /* advec_cell, y, sweep 1.  One pass: pre_vol of cell row k, the fluxes
     * on face row k, the update of cell row k - 2 (pre_vol and ener_flux
     * in rings of three rows; the density1/energy1 rows k - 2 .. k + 1 and
     * the mass_flux_y rows it reads back are in cache):
     * reads volume, vol_flux_x, vol_flux_y, density1, energy1;
     * writes density1, energy1, mass_flux_y.
     * R 5, W 3 -> 64 */
    [T_CELL_Y1] = {"advec_cell", "y sweep 1", RW_BYTES(5, 3)},

    /* advec_cell, y, sweep 2: as sweep 1, but pre_vol does not read
     * vol_flux_x:
     * reads volume, vol_flux_y, density1, energy1;
     * writes density1, energy1, mass_flux_y.
     * R 4, W 3 -> 56 */
    [T_CELL_Y2] = {"advec_cell", "y sweep 2", RW_BYTES(4, 3)},

    /* advec_mom, x, sweep 1 (vel = xvel1 or yvel1; the same count).  One
     * pass, node row by node row: post_vol of cell row k (a ring of two
     * rows), then node_flux, node_mass_post, node_mass_pre, mom_flux in
     * four reused rows and the update of the row:
     * reads volume, vol_flux_y (post_vol), mass_flux_x, density1, vel;
     * writes vel.
     * R 5, W 1 -> 48 */
    [T_MOM_X1] = {"advec_mom", "x sweep 1 (xvel1 or yvel1)", RW_BYTES(5, 1)},

    /* advec_mom, x, sweep 2: post_vol is the volume (read as it is):
     * reads volume, mass_flux_x, density1, vel; writes vel.
     * R 4, W 1 -> 40 */
    [T_MOM_X2] = {"advec_mom", "x sweep 2 (xvel1 or yvel1)", RW_BYTES(4, 1)},

    /* advec_mom, y, sweep 1 (vel = xvel1 or yvel1; the same count).  One
     * pass: post_vol, node_flux, node_mass_post and node_mass_pre of row
     * i, mom_flux of node row i - 1, the update of velocity row i - 2, the
     * node quantities in rings of two or three rows (velocity rows
     * i - 2 .. i + 1 are read back from cache):
     * reads volume, vol_flux_x (post_vol), mass_flux_y, density1, vel;
     * writes vel.
     * R 5, W 1 -> 48 */
    [T_MOM_Y1] = {"advec_mom", "y sweep 1 (xvel1 or yvel1)", RW_BYTES(5, 1)},

    /* advec_mom, y, sweep 2: post_vol is the volume:
     * reads volume, mass_flux_y, density1, vel; writes vel.
     * R 4, W 1 -> 40 */
    [T_MOM_Y2] = {"advec_mom", "y sweep 2 (xvel1 or yvel1)", RW_BYTES(4, 1)},

    /* reset_field:
     * reads density1, energy1, xvel1, yvel1; writes density0, energy0,
     * xvel0, yvel0.
     * R 4, W 4 -> 64 */
    [T_RESET_FIELD] = {"reset_field", "", RW_BYTES(4, 4)},

    /* field_summary:
     * reads volume, density0, energy0, pressure, xvel0, yvel0 (node rows
     * k, k + 1); writes no array.
     * R 6, W 0 -> 48 */
    [T_FIELD_SUMMARY] = {"field_summary", "", RW_BYTES(6, 0)},
};

size_t clover_traffic_table(const clover_traffic_row **rows)
{
    if (rows)
        *rows = table;
    return (size_t)T_N;
}

/* How many calls of each row one step makes, for one sweep order: the
 * reference's order (serial.c) — timestep: ideal_gas, viscosity, calc_dt;
 * PdV predict, ideal_gas on the predicted fields, revert; accelerate, PdV
 * correct, flux_calc; advection: cell sweep 1, momentum sweep 1 of xvel1
 * and yvel1, cell sweep 2, momentum sweep 2 of xvel1 and yvel1;
 * reset_field. */
static void step_calls(int x_first, double calls[T_N])
{
    for (int t = 0; t < T_N; t++)
        calls[t] = 0.0;
    calls[T_IDEAL_GAS] = 2.0;
    calls[T_VISCOSITY] = calls[T_CALC_DT] = 1.0;
    calls[T_PDV_PREDICT] = calls[T_REVERT] = 1.0;
    calls[T_ACCELERATE] = calls[T_PDV_CORRECT] = calls[T_FLUX_CALC] = 1.0;
    if (x_first) {
        calls[T_CELL_X1] = calls[T_CELL_Y2] = 1.0;
        calls[T_MOM_X1] = calls[T_MOM_Y2] = 2.0;
    } else {
        calls[T_CELL_Y1] = calls[T_CELL_X2] = 1.0;
        calls[T_MOM_Y1] = calls[T_MOM_X2] = 2.0;
    }
    calls[T_RESET_FIELD] = 1.0;
}

double clover_traffic_step_bytes_order(int x_first)
{
    double calls[T_N], s = 0.0;
    step_calls(x_first, calls);
    for (int t = 0; t < T_N; t++)
        s += calls[t] * table[t].bytes_per_cell;
    return s;
}

double clover_traffic_kernel_step_bytes(const char *kernel)
{
    double s = 0.0;
    for (int order = 0; order < 2; order++) {
        double calls[T_N];
        step_calls(order, calls);
        for (int t = 0; t < T_N; t++)
            if (!strcmp(table[t].kernel, kernel))
                s += 0.5 * calls[t] * table[t].bytes_per_cell;
    }
    return s;
}

double clover_traffic_step_bytes(void)
{
    return 0.5 * (clover_traffic_step_bytes_order(1) + clover_traffic_step_bytes_order(0));
}

double clover_traffic_summary_bytes(void)
{
    return table[T_IDEAL_GAS].bytes_per_cell + table[T_FIELD_SUMMARY].bytes_per_cell;
}
