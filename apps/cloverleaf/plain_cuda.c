/* The baseline a CUDA programmer would write by hand: CloverLeaf's time
 * step as one loop on one stream of one GPU, with the same kernels
 * (kernels.cu) on one chunk (the whole mesh), no Weft.  Its fields live in
 * cudaMalloc'd memory; each step copies dt and the PdV check back (the
 * host needs dt to go on).  scripts/gpu-check.sh runs it beside the Weft
 * driver on the same deck (weft-cloverleaf --plain-cuda). */
#include "plain_cuda.h"

#include "kernels_cuda.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define CU(call)                                                                                         \
    do {                                                                                                 \
        cudaError_t e_ = (call);                                                                         \
        if (e_ != cudaSuccess) {                                                                         \
            fprintf(stderr, "plain CUDA: %s: %s\n", #call, cudaGetErrorString(e_));                      \
            goto out;                                                                                    \
        }                                                                                                \
    } while (0)

#define K(call) CU((cudaError_t)(call))

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int clover_plain_cuda_run(const clover_deck *d, FILE *out, clover_plain_result *res)
{
    int rc = -1;
    clover_chunk c;
    int cx, cy;
    char err[256];
    double *density_out = res->density, *energy_out = res->energy;
    memset(res, 0, sizeof *res);
    res->density = density_out;
    res->energy = energy_out;
    if (clover_decompose(d, 1, &c, &cx, &cy, err, sizeof err) != 0) {
        fprintf(stderr, "plain CUDA: %s\n", err);
        return -1;
    }
    clover_view v = {.nx = c.nx, .ny = c.ny, .pitch = (size_t)c.nx + 5};
    size_t fbytes = clover_field_count(c.nx, c.ny) * sizeof(double);
    double *dt_d = NULL, *sums_d = NULL;
    int32_t *err_d = NULL;
    cudaStream_t st = NULL;
    CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    for (int f = 0; f < CF_NFIELDS; f++)
        CU(cudaMalloc((void **)&v.f[f], fbytes));
    CU(cudaMalloc((void **)&v.geom, clover_geom_count(c.nx, c.ny) * sizeof(double)));
    CU(cudaMalloc((void **)&dt_d, sizeof(double)));
    CU(cudaMalloc((void **)&err_d, sizeof(int32_t)));
    CU(cudaMalloc((void **)&sums_d, CS_N * sizeof(double)));

    static const int all[] = {CF_DENSITY0, CF_ENERGY0, CF_PRESSURE, CF_VISCOSITY, CF_DENSITY1,
                              CF_ENERGY1,  CF_XVEL0,   CF_YVEL0,    CF_XVEL1,     CF_YVEL1};
    static const int step_in[] = {CF_PRESSURE, CF_ENERGY0, CF_DENSITY0, CF_XVEL0, CF_YVEL0};
    static const int visc[] = {CF_VISCOSITY}, press[] = {CF_PRESSURE};
    static const int adv_in[] = {CF_ENERGY1, CF_DENSITY1, CF_VOL_FLUX_X, CF_VOL_FLUX_Y};
    static const int adv[] = {CF_DENSITY1, CF_ENERGY1, CF_XVEL1, CF_YVEL1, CF_MASS_FLUX_X, CF_MASS_FLUX_Y};
    const double inf = INFINITY;
    const int32_t zero = 0;
    double sums[CS_N];

    K(clover_cu_initialise(&v, d, &c, st));
    K(clover_cu_generate(&v, d, st));
    K(clover_cu_ideal_gas(&v, 0, st));
    K(clover_cu_reflect(&v, all, 10, 2, c.edges, st));

    clover_clock clk = {.dt = d->dtinit, .dtold = d->dtinit};
    int advect_x = 1;
    double t0 = now_s();
    for (;;) {
        clk.step++;
        K(clover_cu_ideal_gas(&v, 0, st));
        K(clover_cu_reflect(&v, step_in, 5, 1, c.edges, st));
        K(clover_cu_viscosity(&v, st));
        K(clover_cu_reflect(&v, visc, 1, 1, c.edges, st));
        CU(cudaMemcpyAsync(dt_d, &inf, sizeof inf, cudaMemcpyHostToDevice, st));
        CU(cudaMemcpyAsync(err_d, &zero, sizeof zero, cudaMemcpyHostToDevice, st));
        K(clover_cu_calc_dt(&v, d, dt_d, st));
        double dt_chunk;
        CU(cudaMemcpyAsync(&dt_chunk, dt_d, sizeof dt_chunk, cudaMemcpyDeviceToHost, st));
        CU(cudaStreamSynchronize(st));
        if (clover_next_dt(d, &clk, dt_chunk) != 0)
            goto out;
        K(clover_cu_pdv(&v, 1, clk.dt, err_d, st));
        K(clover_cu_ideal_gas(&v, 1, st));
        K(clover_cu_reflect(&v, press, 1, 1, c.edges, st));
        K(clover_cu_revert(&v, st));
        K(clover_cu_accelerate(&v, clk.dt, st));
        K(clover_cu_pdv(&v, 0, clk.dt, err_d, st));
        K(clover_cu_flux_calc(&v, clk.dt, st));
        int first = advect_x ? 1 : 2, second = advect_x ? 2 : 1;
        K(clover_cu_reflect(&v, adv_in, 4, 2, c.edges, st));
        K(clover_cu_advec_cell(&v, first, 1, st));
        K(clover_cu_reflect(&v, adv, 6, 2, c.edges, st));
        K(clover_cu_advec_mom(&v, CF_XVEL1, first, 1, st));
        K(clover_cu_advec_mom(&v, CF_YVEL1, first, 1, st));
        K(clover_cu_advec_cell(&v, second, 2, st));
        K(clover_cu_reflect(&v, adv, 6, 2, c.edges, st));
        K(clover_cu_advec_mom(&v, CF_XVEL1, second, 2, st));
        K(clover_cu_advec_mom(&v, CF_YVEL1, second, 2, st));
        K(clover_cu_reset_field(&v, st));
        advect_x = !advect_x;
        clk.time += clk.dt;
        int32_t bad;
        CU(cudaMemcpyAsync(&bad, err_d, sizeof bad, cudaMemcpyDeviceToHost, st));
        CU(cudaStreamSynchronize(st));
        if (bad) {
            fprintf(stderr, "plain CUDA: step %d: PdV: a cell's volume turned negative\n", clk.step);
            goto out;
        }
        if (clk.time + 1e-16 > d->end_time || clk.step >= d->end_step)
            break;
    }
    res->wall_s = now_s() - t0;
    K(clover_cu_ideal_gas(&v, 0, st));
    CU(cudaMemsetAsync(sums_d, 0, CS_N * sizeof(double), st));
    K(clover_cu_field_summary(&v, sums_d, st));
    CU(cudaMemcpyAsync(sums, sums_d, sizeof sums, cudaMemcpyDeviceToHost, st));
    CU(cudaStreamSynchronize(st));
    memcpy(res->sums, sums, sizeof sums);
    {
        /* the cells of density0 and energy0, row by row (ghosts left out) */
        const size_t P = v.pitch, off = 2 * P + 2;
        if (density_out)
            CU(cudaMemcpy2DAsync(density_out, (size_t)c.nx * sizeof(double), v.f[CF_DENSITY0] + off,
                                 P * sizeof(double), (size_t)c.nx * sizeof(double), (size_t)c.ny,
                                 cudaMemcpyDeviceToHost, st));
        if (energy_out)
            CU(cudaMemcpy2DAsync(energy_out, (size_t)c.nx * sizeof(double), v.f[CF_ENERGY0] + off,
                                 P * sizeof(double), (size_t)c.nx * sizeof(double), (size_t)c.ny,
                                 cudaMemcpyDeviceToHost, st));
        CU(cudaStreamSynchronize(st));
    }
    res->steps = clk.step;
    res->time = clk.time;
    if (out) {
        clover_print_summary_header(out);
        clover_print_summary(out, clk.step, clk.time, sums);
    }
    res->verified = clover_verify(out, d, sums[CS_KE]);
    rc = 0;
out:
    for (int f = 0; f < CF_NFIELDS; f++)
        cudaFree(v.f[f]);
    cudaFree(v.geom);
    cudaFree(dt_d);
    cudaFree(err_d);
    cudaFree(sums_d);
    if (st)
        cudaStreamDestroy(st);
    return rc;
}
