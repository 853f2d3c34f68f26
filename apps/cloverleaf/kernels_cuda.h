/* CloverLeaf on Weft: one chunk's arithmetic on a CUDA device (kernels.cu).
 *
 * The same kernels as kernels.c (clover.h), over the same index ranges and
 * with the same operations in the same order in every expression (built
 * with -fmad=false, so no fused multiply-add), so that a chunk computed on
 * a GPU equals the same chunk computed on the host bit for bit.  The
 * reductions are the exception only in summation order: the field
 * summary's sums are added in a fixed tree (deterministic for a given
 * chunk shape, but not the host's order); calc_dt's minimum and PdV's
 * error flag do not depend on the order.
 *
 * Every pointer in the view (fields and geometry) and the reduction
 * targets are device pointers; the deck, the chunk and the field list of
 * clover_cu_reflect are host memory, read before the function returns.
 * Each function only queues kernels on `stream` (a cudaStream_t; NULL is
 * the default stream): it does not synchronise and does not allocate.  It
 * returns 0, or a cudaError_t value (cudaErrorInvalidValue when a field
 * the kernel needs is NULL in the view, else what cudaGetLastError gives
 * after a launch).
 *
 * Work arrays: as kernels.c, except that advec_mom along x keeps its node
 * quantities in whole arrays (WORK1 node_flux, WORK2 node_mass_post, WORK3
 * node_mass_pre, WORK5 mom_flux, as along y and as the reference) instead
 * of rows -2 .. 1 of WORK4; calc_dt keeps one minimum per thread block at
 * the start of WORK1 when the view has it (it runs in one block when it
 * does not), and field_summary does the same with its partial sums when
 * the view has WORK1 (one block when it does not; both ways give the same
 * bits).  Work arrays hold nothing between kernels, so none of this
 * changes a result.
 *
 * Includable from C without the CUDA headers. */
#ifndef CLOVER_KERNELS_CUDA_H
#define CLOVER_KERNELS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "clover.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fill the geometry array, volume, xarea and yarea of chunk c. */
int clover_cu_initialise(const clover_view *v, const clover_deck *d, const clover_chunk *c, void *stream);
/* density0, energy0, xvel0, yvel0 from the deck's states (ghosts included). */
int clover_cu_generate(const clover_view *v, const clover_deck *d, void *stream);
int clover_cu_ideal_gas(const clover_view *v, int predict, void *stream);
int clover_cu_viscosity(const clover_view *v, void *stream);
/* The kernel over part of its domain (clover_k_viscosity_range). */
int clover_cu_viscosity_range(const clover_view *v, const clover_range *r, void *stream);
/* dt_min: device pointer to one double holding +inf or an earlier value;
 * the chunk's smallest stable step (G_BIG when no cell gives less, as
 * clover_k_calc_dt) replaces it when strictly smaller. */
int clover_cu_calc_dt(const clover_view *v, const clover_deck *d, double *dt_min, void *stream);
/* err: device pointer to one int32, raised to 1 (atomic max) when a
 * cell's volume would turn non-positive (clover_k_pdv's test). */
int clover_cu_pdv(const clover_view *v, int predict, double dt, int32_t *err, void *stream);
int clover_cu_revert(const clover_view *v, void *stream);
int clover_cu_accelerate(const clover_view *v, double dt, void *stream);
/* The kernel over part of its domain, the nodes (clover_k_accelerate_range). */
int clover_cu_accelerate_range(const clover_view *v, double dt, const clover_range *r, void *stream);
/* Copy `rows` rows of `cols` doubles, rows dpitch (spitch) doubles apart,
 * from src to dst, both device memory (the halo's staged ghosts into a
 * field's ghost cells). */
int clover_cu_copy2d(double *dst, size_t dpitch, const double *src, size_t spitch, size_t cols, size_t rows,
                     void *stream);
int clover_cu_flux_calc(const clover_view *v, double dt, void *stream);
/* dir 1: x, 2: y; sweep 1 or 2. */
int clover_cu_advec_cell(const clover_view *v, int dir, int sweep, void *stream);
/* vel: CF_XVEL1 or CF_YVEL1. */
int clover_cu_advec_mom(const clover_view *v, int vel, int dir, int sweep, void *stream);
/* The advection kernels over a sub-range, out of place into out's
 * density1 and energy1 (vel) (clover_k_advec_cell_range,
 * clover_k_advec_mom_range; out's arrays device memory of v's shape):
 * over clover_advec_split's five parts they give the whole kernel's
 * values bit for bit, and the interior reads no ghost.  They use v's work
 * arrays, so two parts of one chunk must not run at once. */
int clover_cu_advec_cell_range(const clover_view *v, int dir, int sweep, const clover_range *r,
                               const clover_view *out, void *stream);
int clover_cu_advec_mom_range(const clover_view *v, int vel, int dir, int sweep, const clover_range *r,
                              const clover_view *out, void *stream);
int clover_cu_reset_field(const clover_view *v, void *stream);
/* sums: device pointer to CS_N doubles; sums[i] = sums[i] + chunk_sum[i],
 * the chunk's sums reduced in a fixed tree (no floating-point atomics). */
int clover_cu_field_summary(const clover_view *v, double *sums, void *stream);
/* clover_k_reflect: the ghost layers of the listed fields (a host array)
 * on the faces in `edges`. */
int clover_cu_reflect(const clover_view *v, const int *fields, int nfields, int depth, unsigned edges,
                      void *stream);

/* Make CUDA device `ordinal` the calling thread's current device in this
 * library's CUDA runtime, before queuing on a stream of that device.  For
 * a caller whose runtime is another copy (the Python driver loads this
 * library beside weft's extension, each with the runtime linked in
 * statically: the current device is per copy and per thread).  Returns 0
 * or a cudaError_t value. */
int clover_cu_use_device(int ordinal);

#ifdef __cplusplus
}
#endif

#endif /* CLOVER_KERNELS_CUDA_H */
