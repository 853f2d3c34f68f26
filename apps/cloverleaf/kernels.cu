/* CloverLeaf on Weft: one chunk's arithmetic on a CUDA device.
 *
 * kernels_cuda.h says what these functions do; kernels.c is the
 * specification: every kernel here computes what its host loop computes,
 * over the same index ranges, with the operands of every expression in
 * the same order (build with -fmad=false: no contraction into fused
 * multiply-adds; IEEE division and square root, no flush to zero, as
 * nvcc does by default).  Where the host code updates an array in place
 * with a lag (the advection sweeps) it only ever reads values that are
 * still the old ones, so here the fluxes are one kernel and the update a
 * later one on the same stream.
 *
 * Storage as clover.h: element (j, k) of a field at base[k * P + j], base
 * being the array's start plus 2 * P + 2, P the pitch nx + 5.  Each 2-D
 * kernel is a functor called once per (j, k) of an inclusive range by a
 * grid of 64 x 4 thread blocks, j along threadIdx.x (coalesced rows). */
#include "kernels_cuda.h"

#include <cuda_runtime.h>

/* A launch: kernel<<<grid, block, 0, stream>>>(args) under nvcc.  The
 * _SYNC form is for kernels that call __syncthreads (the reductions).  The
 * host emulation that runs this file in the tests (cuda_emu/) defines both
 * its own way. */
#ifndef CLOVER_CUDA_EMU
#define CLOVER_LAUNCH(kernel, grid, block, stream) kernel<<<grid, block, 0, stream>>>
#define CLOVER_LAUNCH_SYNC(kernel, grid, block, stream) kernel<<<grid, block, 0, stream>>>
#endif

#include <initializer_list>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

namespace {

/* The reference's single-precision literals in double variables, as
 * kernels.c. */
constexpr double G_SMALL = (double)1.0e-16f;
constexpr double G_BIG = (double)1.0e+21f;

__device__ __forceinline__ double dmin2(double a, double b) { return a < b ? a : b; }
__device__ __forceinline__ double dmax2(double a, double b) { return a > b ? a : b; }

/* Element (j, k) of an offset field pointer, with P (ptrdiff_t) in scope. */
#define AT(p, j, k) ((p)[(ptrdiff_t)(k) * P + (ptrdiff_t)(j)])

/* ---- host-side helpers ---------------------------------------------------- */

constexpr int BX = 64, BY = 4;

/* Field f of the view offset so that AT(p, j, k) is (j, k); NULL if absent. */
double *fld(const clover_view *v, int f)
{
    double *b = v->f[f];
    return b ? b + 2 * (ptrdiff_t)v->pitch + 2 : nullptr;
}

/* clover_geom_offset's layout. */
size_t geom_off(int nx, int ny, int which)
{
    if (which < CG_CELLY)
        return (size_t)which * (size_t)(nx + 5);
    return 4 * (size_t)(nx + 5) + (size_t)(which - CG_CELLY) * (size_t)(ny + 5);
}

/* Geometry array `which` offset so that [j] (or [k]) is index j (k). */
double *geo(const clover_view *v, int which)
{
    return v->geom + geom_off(v->nx, v->ny, which) + 2;
}

bool have(const clover_view *v, std::initializer_list<int> fields, bool geom = false)
{
    if (!v || v->nx < 1 || v->ny < 1 || v->pitch < (size_t)v->nx + 5)
        return false;
    if (geom && !v->geom)
        return false;
    for (int f : fields)
        if (!v->f[f])
            return false;
    return true;
}

constexpr int BAD_ARG = (int)cudaErrorInvalidValue;

int last_error() { return (int)cudaGetLastError(); }

template <class F>
__global__ void __launch_bounds__(BX *BY) k2d(F f, int j0, int j1, int k0, int k1)
{
    const int j = j0 + (int)(blockIdx.x * BX + threadIdx.x);
    if (j > j1)
        return;
    for (int k = k0 + (int)(blockIdx.y * BY + threadIdx.y); k <= k1; k += (int)(gridDim.y * BY))
        f(j, k);
}

unsigned grid_y(int k0, int k1)
{
    const long n = ((long)k1 - k0 + 1 + BY - 1) / BY;
    return (unsigned)(n > 65535 ? 65535 : n);
}

/* Call f(j, k) for j in [j0, j1], k in [k0, k1] (inclusive). */
template <class F>
int launch2d(const F &f, int j0, int j1, int k0, int k1, cudaStream_t s)
{
    if (j1 < j0 || k1 < k0)
        return 0;
    const dim3 grid((unsigned)((j1 - j0 + 1 + BX - 1) / BX), grid_y(k0, k1));
    CLOVER_LAUNCH(k2d<F>, grid, dim3(BX, BY), s)(f, j0, j1, k0, k1);
    return last_error();
}

/* ---- initialise and generate ------------------------------------------ */

struct InitGeom {
    double *cellx, *celldx, *vertexx, *vertexdx, *celly, *celldy, *vertexy, *vertexdy;
    double xmin, ymin, dx, dy;
    int x0, y0, nx, ny;
};

__global__ void k_init_geom(InitGeom g)
{
    const int i = (int)(blockIdx.x * blockDim.x + threadIdx.x) - 2;
    if (i <= g.nx + 2) {
        const int j = i;
        double x = g.xmin + g.dx * (double)(g.x0 + j);
        double xr = g.xmin + g.dx * (double)(g.x0 + j + 1);
        g.vertexx[j] = x;
        g.vertexdx[j] = g.dx;
        g.cellx[j] = 0.5 * (x + xr);
        g.celldx[j] = g.dx;
    }
    if (i <= g.ny + 2) {
        const int k = i;
        double y = g.ymin + g.dy * (double)(g.y0 + k);
        double yt = g.ymin + g.dy * (double)(g.y0 + k + 1);
        g.vertexy[k] = y;
        g.vertexdy[k] = g.dy;
        g.celly[k] = 0.5 * (y + yt);
        g.celldy[k] = g.dy;
    }
}

/* volume, xarea = celldy[k], yarea = celldx[j]: every celldy is dy and
 * every celldx is dx (the values k_init_geom stores), so they are used
 * directly instead of read back. */
struct InitAreas {
    double *volume, *xarea, *yarea;
    double vol, dx, dy;
    ptrdiff_t P;
    __device__ void operator()(int j, int k) const
    {
        AT(volume, j, k) = vol;
        AT(xarea, j, k) = dy;
        AT(yarea, j, k) = dx;
    }
};

struct GenFill {
    double *density0, *energy0, *xvel0, *yvel0;
    double density, energy, xvel, yvel;
    ptrdiff_t P;
    __device__ void operator()(int j, int k) const
    {
        AT(density0, j, k) = density;
        AT(energy0, j, k) = energy;
        AT(xvel0, j, k) = xvel;
        AT(yvel0, j, k) = yvel;
    }
};

/* One state s > 1 over the cells j in [-2, nx + 1], k in [-2, ny + 1]
 * (density0, energy0) and the four nodes of each hit cell (xvel0,
 * yvel0).  Run per node (j, k) in [-2, nx + 2] x [-2, ny + 2]: the node
 * takes the state's velocity when any of the cells (j - 1 .. j, k - 1 .. k)
 * in range is hit, which is what set_node_block's writes leave, without
 * two threads writing one element. */
struct GenState {
    double *density0, *energy0, *xvel0, *yvel0;
    const double *cellx, *celly, *vertexx, *vertexy;
    double density, energy, xvel, yvel;
    double xmin, xmax, ymin, ymax, radius;
    int geometry, nx, ny;
    ptrdiff_t P;
    __device__ bool hit(int j, int k) const
    {
        const double xc = xmin, yc = ymin;
        if (geometry == CLOVER_GEOM_RECTANGLE) {
            return vertexx[j + 1] >= xmin && vertexx[j] < xmax && vertexy[k + 1] >= ymin && vertexy[k] < ymax;
        } else if (geometry == CLOVER_GEOM_CIRCLE) {
            double r = sqrt((cellx[j] - xc) * (cellx[j] - xc) + (celly[k] - yc) * (celly[k] - yc));
            return r <= radius;
        } else if (geometry == CLOVER_GEOM_POINT) {
            return vertexx[j] == xc && vertexy[k] == yc;
        }
        return false;
    }
    __device__ void operator()(int j, int k) const
    {
        const bool jin = j <= nx + 1, jmin = j - 1 >= -2;
        const bool kin = k <= ny + 1, kmin = k - 1 >= -2;
        const bool h00 = jin && kin && hit(j, k);
        bool node = h00;
        if (!node && jmin && kin)
            node = hit(j - 1, k);
        if (!node && jin && kmin)
            node = hit(j, k - 1);
        if (!node && jmin && kmin)
            node = hit(j - 1, k - 1);
        if (h00) {
            AT(energy0, j, k) = energy;
            AT(density0, j, k) = density;
        }
        if (node) {
            AT(xvel0, j, k) = xvel;
            AT(yvel0, j, k) = yvel;
        }
    }
};

/* ---- equation of state, viscosity, time step -------------------------- */

struct IdealGas {
    const double *density, *energy;
    double *pressure, *soundspeed;
    ptrdiff_t P;
    __device__ void operator()(int j, int k) const
    {
        const double gm1 = 1.4 - 1.0;
        const double dn = AT(density, j, k);
        const double vv = 1.0 / dn;
        const double p = gm1 * dn * AT(energy, j, k);
        const double pbe = gm1 * dn;
        const double pbv = -dn * p;
        const double ss2 = vv * vv * (p * pbe - pbv);
        AT(pressure, j, k) = p;
        AT(soundspeed, j, k) = sqrt(ss2);
    }
};

struct Viscosity {
    const double *celldx, *celldy, *density0, *pressure, *xvel0, *yvel0;
    double *visc;
    ptrdiff_t P;
    __device__ void operator()(int j, int k) const
    {
        const double cdy = celldy[k];
        const double cdy2 = celldy[k] + celldy[k + 1];
        const double cdx = celldx[j];
        /* xv0/xv1: xvel0 rows k and k + 1; yv0/yv1 likewise. */
        const double xv0j = AT(xvel0, j, k), xv0j1 = AT(xvel0, j + 1, k);
        const double xv1j = AT(xvel0, j, k + 1), xv1j1 = AT(xvel0, j + 1, k + 1);
        const double yv0j = AT(yvel0, j, k), yv0j1 = AT(yvel0, j + 1, k);
        const double yv1j = AT(yvel0, j, k + 1), yv1j1 = AT(yvel0, j + 1, k + 1);
        const double ugrad = (xv0j1 + xv1j1) - (xv0j + xv1j);
        const double vgrad = (yv1j + yv1j1) - (yv0j + yv0j1);
        const double div = cdx * ugrad + cdy * vgrad;
        const double strain2 = 0.5 * (xv1j + xv1j1 - xv0j - xv0j1) / cdy
                             + 0.5 * (yv0j1 + yv1j1 - yv0j - yv1j) / cdx;
        double pgradx = (AT(pressure, j + 1, k) - AT(pressure, j - 1, k)) / (cdx + celldx[j + 1]);
        double pgrady = (AT(pressure, j, k + 1) - AT(pressure, j, k - 1)) / cdy2;
        const double pgradx2 = pgradx * pgradx;
        const double pgrady2 = pgrady * pgrady;
        const double limiter = ((0.5 * ugrad / cdx) * pgradx2 + (0.5 * vgrad / cdy) * pgrady2
                                + strain2 * pgradx * pgrady)
                             / dmax2(pgradx2 + pgrady2, 1.0e-16);
        if (limiter > 0.0 || div >= 0.0) {
            AT(visc, j, k) = 0.0;
        } else {
            const double ax = dmax2(1.0e-16, fabs(pgradx));
            const double ay = dmax2(1.0e-16, fabs(pgrady));
            const double pgrad = sqrt(ax * ax + ay * ay);
            const double xgrad = fabs(cdx * pgrad / ax);
            const double ygrad = fabs(cdy * pgrad / ay);
            const double grad = dmin2(xgrad, ygrad);
            const double grad2 = grad * grad;
            AT(visc, j, k) = 2.0 * AT(density0, j, k) * grad2 * limiter * limiter;
        }
    }
};

struct CalcDt {
    const double *celldx, *celldy, *xarea, *yarea, *volume, *density0, *visc, *ss, *xvel0, *yvel0;
    double dtc_safe, dtu_safe, dtv_safe, dtdiv_safe;
    int nx, ny;
    ptrdiff_t P;
    /* The smallest of the four limits of cell (j, k), as kernels.c. */
    __device__ double cell(int j, int k) const
    {
        const double dsx = celldx[j];
        const double dsy = celldy[k];
        const double s = AT(ss, j, k);
        const double vol = AT(volume, j, k);
        double cc = s * s;
        cc = cc + 2.0 * AT(visc, j, k) / AT(density0, j, k);
        cc = dmax2(sqrt(cc), G_SMALL);
        const double dtct = dtc_safe * dmin2(dsx, dsy) / cc;
        double dv1 = (AT(xvel0, j, k) + AT(xvel0, j, k + 1)) * AT(xarea, j, k);
        double dv2 = (AT(xvel0, j + 1, k) + AT(xvel0, j + 1, k + 1)) * AT(xarea, j + 1, k);
        double div = dv2 - dv1;
        const double dtut = dtu_safe * 2.0 * vol / dmax2(dmax2(fabs(dv1), fabs(dv2)), G_SMALL * vol);
        dv1 = (AT(yvel0, j, k) + AT(yvel0, j + 1, k)) * AT(yarea, j, k);
        dv2 = (AT(yvel0, j, k + 1) + AT(yvel0, j + 1, k + 1)) * AT(yarea, j, k + 1);
        div = div + dv2 - dv1;
        const double dtvt = dtv_safe * 2.0 * vol / dmax2(dmax2(fabs(dv1), fabs(dv2)), G_SMALL * vol);
        div = div / (2.0 * vol);
        const double dtdivt = div < -G_SMALL ? dtdiv_safe * (-1.0 / div) : G_BIG;
        return dmin2(dmin2(dtct, dtut), dmin2(dtvt, dtdivt));
    }
};

constexpr int RED_T = BX * BY; /* threads of a reduction block (256) */

/* Minimum over the block's threads (v from each); the result in thread 0. */
__device__ double block_min(double v, double *sh)
{
    const int t = (int)(threadIdx.y * blockDim.x + threadIdx.x);
    sh[t] = v;
    __syncthreads();
    for (int s = RED_T / 2; s > 0; s >>= 1) {
        if (t < s)
            sh[t] = dmin2(sh[t], sh[t + s]);
        __syncthreads();
    }
    return sh[0];
}

/* Pass 1: each 64 x 4 block's minimum over its cells (k strided over the
 * grid's rows) into part[block]; with part NULL (one block covering the
 * whole chunk) the minimum is folded into *dt_min at once. */
__global__ void __launch_bounds__(RED_T) k_calc_dt(CalcDt c, double *part, double *dt_min)
{
    __shared__ double sh[RED_T];
    double m = G_BIG; /* kernels.c starts from G_BIG */
    for (int k = (int)(blockIdx.y * BY + threadIdx.y); k < c.ny; k += (int)(gridDim.y * BY))
        for (int j = (int)(blockIdx.x * BX + threadIdx.x); j < c.nx; j += (int)(gridDim.x * BX))
            m = dmin2(m, c.cell(j, k));
    m = block_min(m, sh);
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        if (part) {
            part[blockIdx.y * gridDim.x + blockIdx.x] = m;
        } else if (m < *dt_min) {
            *dt_min = m;
        }
    }
}

/* Pass 2 (one block): the minimum of the n partial minima into *dt_min. */
__global__ void __launch_bounds__(RED_T) k_min_fold(const double *part, int n, double *dt_min)
{
    __shared__ double sh[RED_T];
    const int t = (int)(threadIdx.y * blockDim.x + threadIdx.x);
    double m = G_BIG;
    for (int i = t; i < n; i += RED_T)
        m = dmin2(m, part[i]);
    m = block_min(m, sh);
    if (t == 0 && m < *dt_min)
        *dt_min = m;
}

/* ---- Lagrangian step -------------------------------------------------- */

template <bool PREDICT>
struct Pdv {
    const double *xarea, *yarea, *volume, *density0, *energy0, *pressure, *visc;
    const double *xvel0, *xvel1, *yvel0, *yvel1;
    double *density1, *energy1, *volchg;
    int32_t *err;
    double dt;
    ptrdiff_t P;
    __device__ void operator()(int j, int k) const
    {
        /* xa0/xa1: xvel0 rows k, k + 1; xb0/xb1: xvel1 rows k, k + 1
         * (xvel0 in the predictor); ya_0/ya_1, yb0/yb1 likewise. */
        const double *xb = PREDICT ? xvel0 : xvel1;
        const double *yb = PREDICT ? yvel0 : yvel1;
        const double xa0j = AT(xvel0, j, k), xa0j1 = AT(xvel0, j + 1, k);
        const double xa1j = AT(xvel0, j, k + 1), xa1j1 = AT(xvel0, j + 1, k + 1);
        const double xb0j = AT(xb, j, k), xb0j1 = AT(xb, j + 1, k);
        const double xb1j = AT(xb, j, k + 1), xb1j1 = AT(xb, j + 1, k + 1);
        const double ya_0j = AT(yvel0, j, k), ya_0j1 = AT(yvel0, j + 1, k);
        const double ya_1j = AT(yvel0, j, k + 1), ya_1j1 = AT(yvel0, j + 1, k + 1);
        const double yb0j = AT(yb, j, k), yb0j1 = AT(yb, j + 1, k);
        const double yb1j = AT(yb, j, k + 1), yb1j1 = AT(yb, j + 1, k + 1);
        double left, right, bottom, top;
        if (PREDICT) {
            left = (AT(xarea, j, k) * (xa0j + xa1j + xb0j + xb1j)) * 0.25 * dt * 0.5;
            right = (AT(xarea, j + 1, k) * (xa0j1 + xa1j1 + xb0j1 + xb1j1)) * 0.25 * dt * 0.5;
            bottom = (AT(yarea, j, k) * (ya_0j + ya_0j1 + yb0j + yb0j1)) * 0.25 * dt * 0.5;
            top = (AT(yarea, j, k + 1) * (ya_1j + ya_1j1 + yb1j + yb1j1)) * 0.25 * dt * 0.5;
        } else {
            left = (AT(xarea, j, k) * (xa0j + xa1j + xb0j + xb1j)) * 0.25 * dt;
            right = (AT(xarea, j + 1, k) * (xa0j1 + xa1j1 + xb0j1 + xb1j1)) * 0.25 * dt;
            bottom = (AT(yarea, j, k) * (ya_0j + ya_0j1 + yb0j + yb0j1)) * 0.25 * dt;
            top = (AT(yarea, j, k + 1) * (ya_1j + ya_1j1 + yb1j + yb1j1)) * 0.25 * dt;
        }
        const double total = right - left + top - bottom;
        const double vol = AT(volume, j, k);
        const double vc = vol / (vol + total);
        const double minvol = dmin2(dmin2(vol + right - left + top - bottom, vol + right - left),
                                    vol + top - bottom);
        if (minvol <= 0.0)
            atomicMax(err, 1);
        const double recip = 1.0 / vol;
        const double d0 = AT(density0, j, k);
        const double echg = (AT(pressure, j, k) / d0 + AT(visc, j, k) / d0) * total * recip;
        AT(volchg, j, k) = vc;
        AT(energy1, j, k) = AT(energy0, j, k) - echg;
        AT(density1, j, k) = d0 * vc;
    }
};

struct Copy2 {
    const double *a0, *b0;
    double *a1, *b1;
    ptrdiff_t P;
    __device__ void operator()(int j, int k) const
    {
        AT(a1, j, k) = AT(a0, j, k);
        AT(b1, j, k) = AT(b0, j, k);
    }
};

struct Accelerate {
    const double *density0, *volume, *xarea, *yarea, *pressure, *visc, *xvel0, *yvel0;
    double *xvel1, *yvel1, *sbm;
    double halfdt;
    ptrdiff_t P;
    __device__ void operator()(int j, int k) const
    {
        /* dm, vm, xam, pm, qm: row k - 1; d0, v0, xa0, ya0, p0, q0: row k. */
        const double nodal_mass = (AT(density0, j - 1, k - 1) * AT(volume, j - 1, k - 1)
                                   + AT(density0, j, k - 1) * AT(volume, j, k - 1)
                                   + AT(density0, j, k) * AT(volume, j, k)
                                   + AT(density0, j - 1, k) * AT(volume, j - 1, k)) * 0.25;
        const double s = halfdt / nodal_mass;
        const double xa0 = AT(xarea, j, k), xam = AT(xarea, j, k - 1);
        const double ya0j = AT(yarea, j, k), ya0jm = AT(yarea, j - 1, k);
        const double p0j = AT(pressure, j, k), p0jm = AT(pressure, j - 1, k);
        const double pmj = AT(pressure, j, k - 1), pmjm = AT(pressure, j - 1, k - 1);
        const double q0j = AT(visc, j, k), q0jm = AT(visc, j - 1, k);
        const double qmj = AT(visc, j, k - 1), qmjm = AT(visc, j - 1, k - 1);
        double xv = AT(xvel0, j, k) - s * (xa0 * (p0j - p0jm) + xam * (pmj - pmjm));
        double yv = AT(yvel0, j, k) - s * (ya0j * (p0j - pmj) + ya0jm * (p0jm - pmjm));
        xv = xv - s * (xa0 * (q0j - q0jm) + xam * (qmj - qmjm));
        yv = yv - s * (ya0j * (q0j - qmj) + ya0jm * (q0jm - qmjm));
        AT(sbm, j, k) = s;
        AT(xvel1, j, k) = xv;
        AT(yvel1, j, k) = yv;
    }
};

/* Nodes j in [0, nx], k in [0, ny]: vol_flux_x for k < ny, vol_flux_y for j < nx. */
struct FluxCalc {
    const double *xarea, *yarea, *xvel0, *xvel1, *yvel0, *yvel1;
    double *vfx, *vfy;
    double qdt;
    int nx, ny;
    ptrdiff_t P;
    __device__ void operator()(int j, int k) const
    {
        if (k < ny)
            AT(vfx, j, k) = qdt * AT(xarea, j, k)
                          * (AT(xvel0, j, k) + AT(xvel0, j, k + 1) + AT(xvel1, j, k) + AT(xvel1, j, k + 1));
        if (j < nx)
            AT(vfy, j, k) = qdt * AT(yarea, j, k)
                          * (AT(yvel0, j, k) + AT(yvel0, j + 1, k) + AT(yvel1, j, k) + AT(yvel1, j + 1, k));
    }
};

/* ---- advection of cell quantities ----------------------------------- */

/* Pass 1: pre_vol (WORK1) and post_vol (WORK2) over j in [-2, nx + 1],
 * k in [-2, ny + 1]. */
template <int DIR>
struct CellVols {
    const double *volume, *vfx, *vfy;
    double *pre_vol, *post_vol;
    int sweep1;
    ptrdiff_t P;
    __device__ void operator()(int j, int k) const
    {
        const double vol = AT(volume, j, k);
        const double fx0 = AT(vfx, j, k), fx1 = AT(vfx, j + 1, k);
        const double fy0 = AT(vfy, j, k), fy1 = AT(vfy, j, k + 1);
        if (DIR == 1) {
            if (sweep1) {
                const double pv = vol + (fx1 - fx0 + fy1 - fy0);
                AT(pre_vol, j, k) = pv;
                AT(post_vol, j, k) = pv - (fx1 - fx0);
            } else {
                AT(pre_vol, j, k) = vol + fx1 - fx0;
                AT(post_vol, j, k) = vol;
            }
        } else {
            if (sweep1) {
                const double pv = vol + (fy1 - fy0 + fx1 - fx0);
                AT(pre_vol, j, k) = pv;
                AT(post_vol, j, k) = pv - (fy1 - fy0);
            } else {
                AT(pre_vol, j, k) = vol + fy1 - fy0;
                AT(post_vol, j, k) = vol;
            }
        }
    }
};

/* The van Leer limited flux of one quantity, kernels.c's expression. */
__device__ __forceinline__ double cell_limiter(double sig, double sigma3, double sigma4, double diffuw,
                                               double diffdw)
{
    const double one_by_six = 1.0 / 6.0;
    double limiter = 0.0;
    if (diffuw * diffdw > 0.0) {
        const double wind = diffdw <= 0.0 ? -1.0 : 1.0;
        limiter = (1.0 - sig) * wind
                * dmin2(dmin2(fabs(diffuw), fabs(diffdw)),
                        one_by_six * (sigma3 * fabs(diffuw) + sigma4 * fabs(diffdw)));
    }
    return limiter;
}

/* Pass 2 along x: faces j in [0, nx + 1], k in [0, ny): mass_flux_x and
 * ener_flux (WORK7) from the old density1 and energy1. */
struct CellFluxX {
    const double *vertexdx, *vfx, *pre_vol, *density1, *energy1;
    double *mfx, *ener_flux;
    int nx;
    ptrdiff_t P;
    __device__ void operator()(int j, int k) const
    {
        const double vf = AT(vfx, j, k);
        int upwind, donor, downwind, dif;
        if (vf > 0.0) {
            upwind = j - 2;
            donor = j - 1;
            downwind = j;
            dif = donor;
        } else {
            upwind = j + 1 < nx + 1 ? j + 1 : nx + 1;
            donor = j;
            downwind = j - 1;
            dif = upwind;
        }
        const double pvd = AT(pre_vol, donor, k);
        const double sigmat = fabs(vf) / pvd;
        const double sigma3 = (1.0 + sigmat) * (vertexdx[j] / vertexdx[dif]);
        const double sigma4 = 2.0 - sigmat;
        const double ddo = AT(density1, donor, k);
        double limiter = cell_limiter(sigmat, sigma3, sigma4, ddo - AT(density1, upwind, k),
                                      AT(density1, downwind, k) - ddo);
        const double mf = vf * (ddo + limiter);
        AT(mfx, j, k) = mf;
        const double sigmam = fabs(mf) / (ddo * pvd);
        const double edo = AT(energy1, donor, k);
        limiter = cell_limiter(sigmam, sigma3, sigma4, edo - AT(energy1, upwind, k),
                               AT(energy1, downwind, k) - edo);
        AT(ener_flux, j, k) = mf * (edo + limiter);
    }
};

/* Pass 2 along y: faces k in [0, ny + 1], j in [0, nx): mass_flux_y and
 * ener_flux (WORK7). */
struct CellFluxY {
    const double *vertexdy, *vfy, *pre_vol, *density1, *energy1;
    double *mfy, *ener_flux;
    int ny;
    ptrdiff_t P;
    __device__ void operator()(int j, int k) const
    {
        const double vf = AT(vfy, j, k);
        double dup, ddo, ddn, eup, edo, edn, pvd, ratio;
        if (vf > 0.0) {
            const int up_pos = k - 2, dn_pos = k - 1;
            dup = AT(density1, j, up_pos);
            ddo = AT(density1, j, dn_pos);
            ddn = AT(density1, j, k);
            eup = AT(energy1, j, up_pos);
            edo = AT(energy1, j, dn_pos);
            edn = AT(energy1, j, k);
            pvd = AT(pre_vol, j, dn_pos);
            ratio = vertexdy[k] / vertexdy[dn_pos];
        } else {
            const int up_neg = k + 1 < ny + 1 ? k + 1 : ny + 1;
            dup = AT(density1, j, up_neg);
            ddo = AT(density1, j, k);
            ddn = AT(density1, j, k - 1);
            eup = AT(energy1, j, up_neg);
            edo = AT(energy1, j, k);
            edn = AT(energy1, j, k - 1);
            pvd = AT(pre_vol, j, k);
            ratio = vertexdy[k] / vertexdy[up_neg];
        }
        const double sigmat = fabs(vf) / pvd;
        const double sigma3 = (1.0 + sigmat) * ratio;
        const double sigma4 = 2.0 - sigmat;
        double limiter = cell_limiter(sigmat, sigma3, sigma4, ddo - dup, ddn - ddo);
        const double mf = vf * (ddo + limiter);
        AT(mfy, j, k) = mf;
        const double sigmam = fabs(mf) / (ddo * pvd);
        limiter = cell_limiter(sigmam, sigma3, sigma4, edo - eup, edn - edo);
        AT(ener_flux, j, k) = mf * (edo + limiter);
    }
};

/* Pass 3: cells j in [0, nx), k in [0, ny), from density1 and energy1
 * into dout and eout (the same arrays in place, the whole kernel; others
 * for a part).  (DJ, DK) is the step to the face past the cell: (1, 0)
 * along x, (0, 1) along y. */
template <int DJ, int DK>
struct CellUpdate {
    const double *vf, *mf, *ef, *pre_vol, *density1, *energy1;
    double *dout, *eout, *pre_mass, *post_mass, *advec_vol, *post_ener;
    ptrdiff_t P;
    __device__ void operator()(int j, int k) const
    {
        const double pvol = AT(pre_vol, j, k);
        const double pm = AT(density1, j, k) * pvol;
        const double qm = pm + AT(mf, j, k) - AT(mf, j + DJ, k + DK);
        const double pe = (AT(energy1, j, k) * pm + AT(ef, j, k) - AT(ef, j + DJ, k + DK)) / qm;
        const double av = pvol + AT(vf, j, k) - AT(vf, j + DJ, k + DK);
        AT(pre_mass, j, k) = pm;
        AT(post_mass, j, k) = qm;
        AT(post_ener, j, k) = pe;
        AT(advec_vol, j, k) = av;
        AT(dout, j, k) = qm / av;
        AT(eout, j, k) = pe;
    }
};

/* ---- advection of momentum ------------------------------------------ */

/* post_vol (WORK7) over j in [-2, nx + 1], k in [-2, ny + 1]. */
struct MomPostVol {
    const double *volume, *vfx, *vfy;
    double *post_vol;
    int mom_sweep;
    ptrdiff_t P;
    __device__ void operator()(int j, int k) const
    {
        if (mom_sweep == 1)
            AT(post_vol, j, k) = AT(volume, j, k) + AT(vfy, j, k + 1) - AT(vfy, j, k);
        else if (mom_sweep == 2)
            AT(post_vol, j, k) = AT(volume, j, k) + AT(vfx, j + 1, k) - AT(vfx, j, k);
        else
            AT(post_vol, j, k) = AT(volume, j, k);
    }
};

/* Node mass after the sweep at node (j, k): the same expression in both
 * directions. */
__device__ __forceinline__ double node_mass_post(const double *density1, const double *post_vol, ptrdiff_t P,
                                                 int j, int k)
{
    return 0.25 * (AT(density1, j, k - 1) * AT(post_vol, j, k - 1) + AT(density1, j, k) * AT(post_vol, j, k)
                   + AT(density1, j - 1, k - 1) * AT(post_vol, j - 1, k - 1)
                   + AT(density1, j - 1, k) * AT(post_vol, j - 1, k));
}

/* Node pass along x, k in [0, ny], j in [-2, nx + 1]: node_flux (WORK1)
 * there, and for j >= -1 node_mass_post (WORK2) and node_mass_pre
 * (WORK3); node_flux at j - 1 is recomputed (the same expression, so the
 * same value) rather than read. */
struct MomNodeX {
    const double *mfx, *density1, *post_vol;
    double *node_flux, *nm_post, *nm_pre;
    ptrdiff_t P;
    __device__ double flux(int j, int k) const
    {
        return 0.25 * (AT(mfx, j, k - 1) + AT(mfx, j, k) + AT(mfx, j + 1, k - 1) + AT(mfx, j + 1, k));
    }
    __device__ void operator()(int j, int k) const
    {
        const double nf = flux(j, k);
        AT(node_flux, j, k) = nf;
        if (j >= -1) {
            const double post = node_mass_post(density1, post_vol, P, j, k);
            AT(nm_post, j, k) = post;
            AT(nm_pre, j, k) = post - flux(j - 1, k) + nf;
        }
    }
};

/* Node pass along y, k in [-2, ny + 1], j in [0, nx]: node_flux (WORK1),
 * and for k >= -1 node_mass_post (WORK2) and node_mass_pre (WORK3). */
struct MomNodeY {
    const double *mfy, *density1, *post_vol;
    double *node_flux, *nm_post, *nm_pre;
    ptrdiff_t P;
    __device__ double flux(int j, int k) const
    {
        return 0.25 * (AT(mfy, j - 1, k) + AT(mfy, j, k) + AT(mfy, j - 1, k + 1) + AT(mfy, j, k + 1));
    }
    __device__ void operator()(int j, int k) const
    {
        const double nf = flux(j, k);
        AT(node_flux, j, k) = nf;
        if (k >= -1) {
            const double post = node_mass_post(density1, post_vol, P, j, k);
            AT(nm_post, j, k) = post;
            AT(nm_pre, j, k) = post - flux(j, k - 1) + nf;
        }
    }
};

__device__ __forceinline__ double mom_limiter(double sigma, double width, double cdif, double vdiffuw,
                                              double vdiffdw)
{
    double limiter = 0.0;
    if (vdiffuw * vdiffdw > 0.0) {
        const double auw = fabs(vdiffuw), adw = fabs(vdiffdw);
        const double wind = vdiffdw <= 0.0 ? -1.0 : 1.0;
        limiter = wind * dmin2(dmin2(width * ((2.0 - sigma) * adw / width + (1.0 + sigma) * auw / cdif) / 6.0,
                                     auw),
                               adw);
    }
    return limiter;
}

/* Momentum flux along x, k in [0, ny], j in [-1, nx] (WORK5). */
struct MomFluxX {
    const double *celldx, *node_flux, *nm_pre, *vel;
    double *mom_flux;
    ptrdiff_t P;
    __device__ void operator()(int j, int k) const
    {
        const double nf = AT(node_flux, j, k);
        int upwind, donor, downwind, dif;
        if (nf < 0.0) {
            upwind = j + 2;
            donor = j + 1;
            downwind = j;
            dif = donor;
        } else {
            upwind = j - 1;
            donor = j;
            downwind = j + 1;
            dif = upwind;
        }
        const double sigma = fabs(nf) / AT(nm_pre, donor, k);
        const double width = celldx[j];
        const double vdo = AT(vel, donor, k);
        const double vdiffuw = vdo - AT(vel, upwind, k);
        const double vdiffdw = AT(vel, downwind, k) - vdo;
        const double limiter = mom_limiter(sigma, width, celldx[dif], vdiffuw, vdiffdw);
        const double advec_vel = vdo + (1.0 - sigma) * limiter;
        AT(mom_flux, j, k) = advec_vel * nf;
    }
};

/* Momentum flux along y, k in [-1, ny], j in [0, nx] (WORK5). */
struct MomFluxY {
    const double *celldy, *node_flux, *nm_pre, *vel;
    double *mom_flux;
    ptrdiff_t P;
    __device__ void operator()(int j, int k) const
    {
        const double nf = AT(node_flux, j, k);
        double vup, vdo, vdn, pre, cdif;
        if (nf < 0.0) {
            vup = AT(vel, j, k + 2);
            vdo = AT(vel, j, k + 1);
            vdn = AT(vel, j, k);
            pre = AT(nm_pre, j, k + 1);
            cdif = celldy[k + 1];
        } else {
            vup = AT(vel, j, k - 1);
            vdo = AT(vel, j, k);
            vdn = AT(vel, j, k + 1);
            pre = AT(nm_pre, j, k);
            cdif = celldy[k - 1];
        }
        const double sigma = fabs(nf) / pre;
        const double width = celldy[k];
        const double vdiffuw = vdo - vup;
        const double vdiffdw = vdn - vdo;
        const double limiter = mom_limiter(sigma, width, cdif, vdiffuw, vdiffdw);
        const double advec_vel = vdo + (1.0 - sigma) * limiter;
        AT(mom_flux, j, k) = advec_vel * nf;
    }
};

/* Velocity update, nodes j in [0, nx], k in [0, ny], from vel into vout
 * (vel itself in place, the whole kernel); (DJ, DK) the step to the
 * previous node's flux. */
template <int DJ, int DK>
struct MomUpdate {
    const double *mom_flux, *nm_pre, *nm_post, *vel;
    double *vout;
    ptrdiff_t P;
    __device__ void operator()(int j, int k) const
    {
        AT(vout, j, k) = (AT(vel, j, k) * AT(nm_pre, j, k) + AT(mom_flux, j - DJ, k - DK) - AT(mom_flux, j, k))
                       / AT(nm_post, j, k);
    }
};

/* ---- reset ---------------------------------------------------------------- */

struct ResetField {
    const double *d1, *e1, *x1, *y1;
    double *d0, *e0, *x0, *y0;
    int nx, ny;
    ptrdiff_t P;
    __device__ void operator()(int j, int k) const
    {
        if (j < nx && k < ny) {
            AT(d0, j, k) = AT(d1, j, k);
            AT(e0, j, k) = AT(e1, j, k);
        }
        AT(x0, j, k) = AT(x1, j, k);
        AT(y0, j, k) = AT(y1, j, k);
    }
};

/* ---- field summary -------------------------------------------------------- */

/* The N = nx * ny cells in row-major order (c = k * nx + j) are split into
 * nb <= SUM_NB_MAX consecutive runs of L cells; run b's partial sums are
 * taken by a block of SUM_T threads, thread t adding cells b * L + t,
 * + SUM_T, ... in that order, then a fixed tree over the threads.  The
 * chunk's sums are a fixed tree over the nb partials (zeros past nb).
 * Whether the partials come from nb blocks (through WORK1) or from one
 * block in turn, the operations are the same, so are the bits. */
constexpr int SUM_T = 512;
constexpr int SUM_NB_MAX = 256;

struct Summary {
    const double *volume, *density0, *energy0, *pressure, *xvel0, *yvel0;
    long long n, len;
    int nx, nb;
    ptrdiff_t P;
};

/* red[i][t] = v[i]; a tree over the threads; the sums in red[i][0]. */
__device__ void block_sum(double (*red)[SUM_T], const double v[CS_N])
{
    const int t = (int)threadIdx.x;
    for (int i = 0; i < CS_N; i++)
        red[i][t] = v[i];
    __syncthreads();
    for (int s = SUM_T / 2; s > 0; s >>= 1) {
        if (t < s)
            for (int i = 0; i < CS_N; i++)
                red[i][t] = red[i][t] + red[i][t + s];
        __syncthreads();
    }
}

/* Run b's sums, left in red[i][0] (all threads take part). */
__device__ void summary_run(const Summary &s, int b, double (*red)[SUM_T])
{
    const ptrdiff_t P = s.P;
    double acc[CS_N] = {0.0, 0.0, 0.0, 0.0, 0.0};
    const long long c0 = (long long)b * s.len;
    const long long c1 = c0 + s.len < s.n ? c0 + s.len : s.n;
    for (long long c = c0 + threadIdx.x; c < c1; c += SUM_T) {
        const int k = (int)(c / s.nx);
        const int j = (int)(c - (long long)k * s.nx);
        const double xa = AT(s.xvel0, j, k), xa1 = AT(s.xvel0, j + 1, k);
        const double xb = AT(s.xvel0, j, k + 1), xb1 = AT(s.xvel0, j + 1, k + 1);
        const double ya = AT(s.yvel0, j, k), ya1 = AT(s.yvel0, j + 1, k);
        const double yb = AT(s.yvel0, j, k + 1), yb1 = AT(s.yvel0, j + 1, k + 1);
        double vsqrd = 0.0;
        vsqrd = vsqrd + 0.25 * (xa * xa + ya * ya);
        vsqrd = vsqrd + 0.25 * (xa1 * xa1 + ya1 * ya1);
        vsqrd = vsqrd + 0.25 * (xb * xb + yb * yb);
        vsqrd = vsqrd + 0.25 * (xb1 * xb1 + yb1 * yb1);
        const double cell_vol = AT(s.volume, j, k);
        const double cell_mass = cell_vol * AT(s.density0, j, k);
        acc[CS_VOL] = acc[CS_VOL] + cell_vol;
        acc[CS_MASS] = acc[CS_MASS] + cell_mass;
        acc[CS_IE] = acc[CS_IE] + cell_mass * AT(s.energy0, j, k);
        acc[CS_KE] = acc[CS_KE] + cell_mass * 0.5 * vsqrd;
        acc[CS_PRESS] = acc[CS_PRESS] + cell_vol * AT(s.pressure, j, k);
    }
    block_sum(red, acc);
}

/* The tree over the partials (part(b, i) for b < nb) added into sums. */
__device__ void summary_final(int nb, const double *part_g, const double (*part_s)[CS_N], double (*red)[SUM_T],
                              double *sums)
{
    const int t = (int)threadIdx.x;
    double v[CS_N];
    for (int i = 0; i < CS_N; i++)
        v[i] = t < nb ? (part_g ? part_g[(size_t)t * CS_N + i] : part_s[t][i]) : 0.0;
    __syncthreads(); /* red may still be read by the caller's last run */
    block_sum(red, v);
    if (t == 0)
        for (int i = 0; i < CS_N; i++)
            sums[i] = sums[i] + red[i][0];
}

/* nb blocks: run blockIdx.x's partials into part[b * CS_N + i]. */
__global__ void __launch_bounds__(SUM_T) k_summary_runs(Summary s, double *part)
{
    __shared__ double red[CS_N][SUM_T];
    summary_run(s, (int)blockIdx.x, red);
    if (threadIdx.x == 0)
        for (int i = 0; i < CS_N; i++)
            part[(size_t)blockIdx.x * CS_N + i] = red[i][0];
}

/* One block: the tree over part[] into sums. */
__global__ void __launch_bounds__(SUM_T) k_summary_fold(int nb, const double *part, double *sums)
{
    __shared__ double red[CS_N][SUM_T];
    summary_final(nb, part, nullptr, red, sums);
}

/* One block doing everything (no scratch array). */
__global__ void __launch_bounds__(SUM_T) k_summary_one(Summary s, double *sums)
{
    __shared__ double red[CS_N][SUM_T];
    __shared__ double part[SUM_NB_MAX][CS_N];
    for (int b = 0; b < s.nb; b++) {
        summary_run(s, b, red);
        if (threadIdx.x == 0)
            for (int i = 0; i < CS_N; i++)
                part[b][i] = red[i][0];
        __syncthreads(); /* red[][0] read before the next run writes red */
    }
    summary_final(s.nb, nullptr, part, red, sums);
}

/* ---- the mesh's boundary (halo.c's clover_k_reflect) -------------------- */

enum { KIND_CELL, KIND_NODE, KIND_XFACE, KIND_YFACE };

int field_kind(int f)
{
    switch (f) {
    case CF_XVEL0:
    case CF_XVEL1:
    case CF_YVEL0:
    case CF_YVEL1:
        return KIND_NODE;
    case CF_VOL_FLUX_X:
    case CF_MASS_FLUX_X:
    case CF_XAREA:
        return KIND_XFACE;
    case CF_VOL_FLUX_Y:
    case CF_MASS_FLUX_Y:
    case CF_YAREA:
        return KIND_YFACE;
    default:
        return KIND_CELL;
    }
}

/* One field's mirror, halo.c's mirror_of; a: the array offset to (0, 0). */
struct Mirror {
    double *a;
    double sy, sx;
    int lo_y, hi_y, top_y;
    int lo_x, hi_x, top_x;
    int jext, kext;
};

Mirror mirror_of(double *a, int f, int nx, int ny)
{
    Mirror m;
    m.a = a;
    int sx = 1, sy = 1;
    switch (field_kind(f)) {
    case KIND_NODE:
        m.lo_y = 1;
        m.top_y = ny + 1;
        m.hi_y = ny;
        m.lo_x = 1;
        m.top_x = nx + 1;
        m.hi_x = nx;
        m.jext = 1;
        m.kext = 1;
        if (f == CF_XVEL0 || f == CF_XVEL1)
            sx = -1;
        else
            sy = -1;
        break;
    case KIND_XFACE:
        m.lo_y = 1;
        m.top_y = ny;
        m.hi_y = ny - 1;
        m.lo_x = 1;
        m.top_x = nx + 1;
        m.hi_x = nx;
        m.jext = 1;
        m.kext = 0;
        sx = -1;
        break;
    case KIND_YFACE:
        m.lo_y = 1;
        m.top_y = ny + 1;
        m.hi_y = ny;
        m.lo_x = 1;
        m.top_x = nx;
        m.hi_x = nx - 1;
        m.jext = 0;
        m.kext = 1;
        sy = -1;
        break;
    default:
        m.lo_y = 0;
        m.top_y = ny;
        m.hi_y = ny;
        m.lo_x = 0;
        m.top_x = nx;
        m.hi_x = nx;
        m.jext = 0;
        m.kext = 0;
        break;
    }
    m.sy = (double)sy;
    m.sx = (double)sx;
    return m;
}

/* Fields whose reflection runs together: distinct fields, each a
 * different array, so that one phase (bottom, top, left or right) of all
 * of them at once equals halo.c's field after field. */
struct ReflectBatch {
    int n, depth, nx, ny;
    ptrdiff_t P;
    Mirror m[CF_NFIELDS];
};

enum { PH_BOTTOM, PH_TOP, PH_LEFT, PH_RIGHT };

/* blockIdx.y: the field; i along the face: column j = i - depth (bottom,
 * top) or row k = i - depth (left, right); every ghost layer 1 .. depth.
 * Within a phase the rows (columns) written are never read. */
template <int PHASE>
__global__ void k_reflect(ReflectBatch b)
{
    const Mirror &m = b.m[blockIdx.y];
    const ptrdiff_t P = b.P;
    const int depth = b.depth;
    const int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    double *a = m.a;
    if (PHASE == PH_BOTTOM || PHASE == PH_TOP) {
        const int j = i - depth;
        if (j > b.nx - 1 + m.jext + depth)
            return;
        for (int k = 1; k <= depth; k++) {
            if (PHASE == PH_BOTTOM)
                AT(a, j, -k) = m.sy * AT(a, j, m.lo_y - 1 + k);
            else
                AT(a, j, m.top_y - 1 + k) = m.sy * AT(a, j, m.hi_y - k);
        }
    } else {
        const int k = i - depth;
        if (k > b.ny - 1 + m.kext + depth)
            return;
        for (int j = 1; j <= depth; j++) {
            if (PHASE == PH_LEFT)
                AT(a, -j, k) = m.sx * AT(a, m.lo_x - 1 + j, k);
            else
                AT(a, m.top_x - 1 + j, k) = m.sx * AT(a, m.hi_x - j, k);
        }
    }
}

int reflect_batch(const ReflectBatch &b, unsigned edges, cudaStream_t s)
{
    if (b.n == 0)
        return 0;
    const unsigned T = 128;
    const unsigned gx = (unsigned)(b.nx + 1 + 2 * b.depth + (int)T - 1) / T;
    const unsigned gy = (unsigned)(b.ny + 1 + 2 * b.depth + (int)T - 1) / T;
    int rc;
    /* bottom and top over the full width, then left and right over the
     * full height, in halo.c's order */
    if (edges & CLOVER_BOTTOM) {
        CLOVER_LAUNCH(k_reflect<PH_BOTTOM>, dim3(gx, (unsigned)b.n), T, s)(b);
        if ((rc = last_error()) != 0)
            return rc;
    }
    if (edges & CLOVER_TOP) {
        CLOVER_LAUNCH(k_reflect<PH_TOP>, dim3(gx, (unsigned)b.n), T, s)(b);
        if ((rc = last_error()) != 0)
            return rc;
    }
    if (edges & CLOVER_LEFT) {
        CLOVER_LAUNCH(k_reflect<PH_LEFT>, dim3(gy, (unsigned)b.n), T, s)(b);
        if ((rc = last_error()) != 0)
            return rc;
    }
    if (edges & CLOVER_RIGHT) {
        CLOVER_LAUNCH(k_reflect<PH_RIGHT>, dim3(gy, (unsigned)b.n), T, s)(b);
        if ((rc = last_error()) != 0)
            return rc;
    }
    return 0;
}

} /* namespace */

/* ---- the C interface ------------------------------------------------------ */

extern "C" int clover_cu_initialise(const clover_view *v, const clover_deck *d, const clover_chunk *c, void *stream)
{
    if (!d || !c || !have(v, {CF_VOLUME, CF_XAREA, CF_YAREA}, true))
        return BAD_ARG;
    cudaStream_t s = (cudaStream_t)stream;
    const int nx = v->nx, ny = v->ny;
    const double dx = (d->xmax - d->xmin) / (double)d->x_cells;
    const double dy = (d->ymax - d->ymin) / (double)d->y_cells;
    InitGeom g;
    g.cellx = geo(v, CG_CELLX);
    g.celldx = geo(v, CG_CELLDX);
    g.vertexx = geo(v, CG_VERTEXX);
    g.vertexdx = geo(v, CG_VERTEXDX);
    g.celly = geo(v, CG_CELLY);
    g.celldy = geo(v, CG_CELLDY);
    g.vertexy = geo(v, CG_VERTEXY);
    g.vertexdy = geo(v, CG_VERTEXDY);
    g.xmin = d->xmin;
    g.ymin = d->ymin;
    g.dx = dx;
    g.dy = dy;
    g.x0 = c->x0;
    g.y0 = c->y0;
    g.nx = nx;
    g.ny = ny;
    const int n = (nx > ny ? nx : ny) + 5;
    CLOVER_LAUNCH(k_init_geom, (unsigned)(n + 127) / 128, 128, s)(g);
    int rc = last_error();
    if (rc)
        return rc;
    InitAreas f;
    f.volume = fld(v, CF_VOLUME);
    f.xarea = fld(v, CF_XAREA);
    f.yarea = fld(v, CF_YAREA);
    f.vol = dx * dy;
    f.dx = dx;
    f.dy = dy;
    f.P = (ptrdiff_t)v->pitch;
    return launch2d(f, -2, nx + 2, -2, ny + 2, s);
}

extern "C" int clover_cu_generate(const clover_view *v, const clover_deck *d, void *stream)
{
    if (!d || d->nstates < 1 || !have(v, {CF_DENSITY0, CF_ENERGY0, CF_XVEL0, CF_YVEL0}, true))
        return BAD_ARG;
    cudaStream_t s = (cudaStream_t)stream;
    const int nx = v->nx, ny = v->ny;
    const ptrdiff_t P = (ptrdiff_t)v->pitch;
    const clover_state *s1 = &d->state[0];
    GenFill fill;
    fill.density0 = fld(v, CF_DENSITY0);
    fill.energy0 = fld(v, CF_ENERGY0);
    fill.xvel0 = fld(v, CF_XVEL0);
    fill.yvel0 = fld(v, CF_YVEL0);
    fill.density = s1->density;
    fill.energy = s1->energy;
    fill.xvel = s1->xvel;
    fill.yvel = s1->yvel;
    fill.P = P;
    int rc = launch2d(fill, -2, nx + 2, -2, ny + 2, s);
    if (rc)
        return rc;
    /* later states overwrite earlier ones: one kernel each, in order */
    for (int i = 1; i < d->nstates && i < CLOVER_MAX_STATES; i++) {
        const clover_state *st = &d->state[i];
        GenState g;
        g.density0 = fill.density0;
        g.energy0 = fill.energy0;
        g.xvel0 = fill.xvel0;
        g.yvel0 = fill.yvel0;
        g.cellx = geo(v, CG_CELLX);
        g.celly = geo(v, CG_CELLY);
        g.vertexx = geo(v, CG_VERTEXX);
        g.vertexy = geo(v, CG_VERTEXY);
        g.density = st->density;
        g.energy = st->energy;
        g.xvel = st->xvel;
        g.yvel = st->yvel;
        g.xmin = st->xmin;
        g.xmax = st->xmax;
        g.ymin = st->ymin;
        g.ymax = st->ymax;
        g.radius = st->radius;
        g.geometry = st->geometry;
        g.nx = nx;
        g.ny = ny;
        g.P = P;
        if ((rc = launch2d(g, -2, nx + 2, -2, ny + 2, s)) != 0)
            return rc;
    }
    return 0;
}

extern "C" int clover_cu_ideal_gas(const clover_view *v, int predict, void *stream)
{
    const int fd = predict ? CF_DENSITY1 : CF_DENSITY0;
    const int fe = predict ? CF_ENERGY1 : CF_ENERGY0;
    if (!have(v, {fd, fe, CF_PRESSURE, CF_SOUNDSPEED}))
        return BAD_ARG;
    IdealGas f;
    f.density = fld(v, fd);
    f.energy = fld(v, fe);
    f.pressure = fld(v, CF_PRESSURE);
    f.soundspeed = fld(v, CF_SOUNDSPEED);
    f.P = (ptrdiff_t)v->pitch;
    return launch2d(f, 0, v->nx - 1, 0, v->ny - 1, (cudaStream_t)stream);
}

extern "C" int clover_cu_viscosity(const clover_view *v, void *stream)
{
    const clover_range all = {0, v->nx, 0, v->ny};
    return clover_cu_viscosity_range(v, &all, stream);
}

/* r clipped to the domain [0, dx) x [0, dy), as kernels.c's clip. */
static clover_range clip_range(const clover_range *r, int dx, int dy)
{
    clover_range c = {r->j0 > 0 ? r->j0 : 0, r->j1 < dx ? r->j1 : dx, r->k0 > 0 ? r->k0 : 0,
                      r->k1 < dy ? r->k1 : dy};
    return c;
}

extern "C" int clover_cu_viscosity_range(const clover_view *v, const clover_range *r, void *stream)
{
    if (!have(v, {CF_DENSITY0, CF_PRESSURE, CF_XVEL0, CF_YVEL0, CF_VISCOSITY}, true))
        return BAD_ARG;
    Viscosity f;
    f.celldx = geo(v, CG_CELLDX);
    f.celldy = geo(v, CG_CELLDY);
    f.density0 = fld(v, CF_DENSITY0);
    f.pressure = fld(v, CF_PRESSURE);
    f.xvel0 = fld(v, CF_XVEL0);
    f.yvel0 = fld(v, CF_YVEL0);
    f.visc = fld(v, CF_VISCOSITY);
    f.P = (ptrdiff_t)v->pitch;
    const clover_range c = clip_range(r, v->nx, v->ny);
    return launch2d(f, c.j0, c.j1 - 1, c.k0, c.k1 - 1, (cudaStream_t)stream);
}

extern "C" int clover_cu_calc_dt(const clover_view *v, const clover_deck *d, double *dt_min, void *stream)
{
    if (!d || !dt_min
        || !have(v, {CF_XAREA, CF_YAREA, CF_VOLUME, CF_DENSITY0, CF_VISCOSITY, CF_SOUNDSPEED, CF_XVEL0, CF_YVEL0},
                 true))
        return BAD_ARG;
    cudaStream_t s = (cudaStream_t)stream;
    CalcDt c;
    c.celldx = geo(v, CG_CELLDX);
    c.celldy = geo(v, CG_CELLDY);
    c.xarea = fld(v, CF_XAREA);
    c.yarea = fld(v, CF_YAREA);
    c.volume = fld(v, CF_VOLUME);
    c.density0 = fld(v, CF_DENSITY0);
    c.visc = fld(v, CF_VISCOSITY);
    c.ss = fld(v, CF_SOUNDSPEED);
    c.xvel0 = fld(v, CF_XVEL0);
    c.yvel0 = fld(v, CF_YVEL0);
    c.dtc_safe = d->dtc_safe;
    c.dtu_safe = d->dtu_safe;
    c.dtv_safe = d->dtv_safe;
    c.dtdiv_safe = d->dtdiv_safe;
    c.nx = v->nx;
    c.ny = v->ny;
    c.P = (ptrdiff_t)v->pitch;
    double *work = v->f[CF_WORK1]; /* from its start: scratch, (nx + 5) * (ny + 5) doubles */
    if (!work) {
        CLOVER_LAUNCH_SYNC(k_calc_dt, 1, dim3(BX, BY), s)(c, nullptr, dt_min);
        return last_error();
    }
    /* gx * gy <= (nx / 64 + 1) * (ny / 4 + 1) partials: fits in WORK1 */
    const dim3 grid((unsigned)(v->nx + BX - 1) / BX, grid_y(0, v->ny - 1));
    CLOVER_LAUNCH_SYNC(k_calc_dt, grid, dim3(BX, BY), s)(c, work, dt_min);
    int rc = last_error();
    if (rc)
        return rc;
    CLOVER_LAUNCH_SYNC(k_min_fold, 1, dim3(BX, BY), s)(work, (int)(grid.x * grid.y), dt_min);
    return last_error();
}

extern "C" int clover_cu_pdv(const clover_view *v, int predict, double dt, int32_t *err, void *stream)
{
    if (!err
        || !have(v, {CF_XAREA, CF_YAREA, CF_VOLUME, CF_DENSITY0, CF_ENERGY0, CF_PRESSURE, CF_VISCOSITY, CF_XVEL0,
                     CF_YVEL0, CF_DENSITY1, CF_ENERGY1, CF_WORK1}))
        return BAD_ARG;
    if (!predict && (!v->f[CF_XVEL1] || !v->f[CF_YVEL1]))
        return BAD_ARG;
    cudaStream_t s = (cudaStream_t)stream;
    const int nx = v->nx, ny = v->ny;
    if (predict) {
        Pdv<true> f;
        f.xarea = fld(v, CF_XAREA);
        f.yarea = fld(v, CF_YAREA);
        f.volume = fld(v, CF_VOLUME);
        f.density0 = fld(v, CF_DENSITY0);
        f.energy0 = fld(v, CF_ENERGY0);
        f.pressure = fld(v, CF_PRESSURE);
        f.visc = fld(v, CF_VISCOSITY);
        f.xvel0 = fld(v, CF_XVEL0);
        f.xvel1 = fld(v, CF_XVEL0); /* not read: the predictor uses xvel0 twice */
        f.yvel0 = fld(v, CF_YVEL0);
        f.yvel1 = fld(v, CF_YVEL0);
        f.density1 = fld(v, CF_DENSITY1);
        f.energy1 = fld(v, CF_ENERGY1);
        f.volchg = fld(v, CF_WORK1);
        f.err = err;
        f.dt = dt;
        f.P = (ptrdiff_t)v->pitch;
        return launch2d(f, 0, nx - 1, 0, ny - 1, s);
    }
    Pdv<false> f;
    f.xarea = fld(v, CF_XAREA);
    f.yarea = fld(v, CF_YAREA);
    f.volume = fld(v, CF_VOLUME);
    f.density0 = fld(v, CF_DENSITY0);
    f.energy0 = fld(v, CF_ENERGY0);
    f.pressure = fld(v, CF_PRESSURE);
    f.visc = fld(v, CF_VISCOSITY);
    f.xvel0 = fld(v, CF_XVEL0);
    f.xvel1 = fld(v, CF_XVEL1);
    f.yvel0 = fld(v, CF_YVEL0);
    f.yvel1 = fld(v, CF_YVEL1);
    f.density1 = fld(v, CF_DENSITY1);
    f.energy1 = fld(v, CF_ENERGY1);
    f.volchg = fld(v, CF_WORK1);
    f.err = err;
    f.dt = dt;
    f.P = (ptrdiff_t)v->pitch;
    return launch2d(f, 0, nx - 1, 0, ny - 1, s);
}

extern "C" int clover_cu_revert(const clover_view *v, void *stream)
{
    if (!have(v, {CF_DENSITY0, CF_ENERGY0, CF_DENSITY1, CF_ENERGY1}))
        return BAD_ARG;
    Copy2 f;
    f.a0 = fld(v, CF_DENSITY0);
    f.b0 = fld(v, CF_ENERGY0);
    f.a1 = fld(v, CF_DENSITY1);
    f.b1 = fld(v, CF_ENERGY1);
    f.P = (ptrdiff_t)v->pitch;
    return launch2d(f, 0, v->nx - 1, 0, v->ny - 1, (cudaStream_t)stream);
}

extern "C" int clover_cu_accelerate(const clover_view *v, double dt, void *stream)
{
    const clover_range all = {0, v->nx + 1, 0, v->ny + 1};
    return clover_cu_accelerate_range(v, dt, &all, stream);
}

extern "C" int clover_cu_accelerate_range(const clover_view *v, double dt, const clover_range *r, void *stream)
{
    if (!have(v, {CF_DENSITY0, CF_VOLUME, CF_XAREA, CF_YAREA, CF_PRESSURE, CF_VISCOSITY, CF_XVEL0, CF_YVEL0,
                  CF_XVEL1, CF_YVEL1, CF_WORK1}))
        return BAD_ARG;
    Accelerate f;
    f.density0 = fld(v, CF_DENSITY0);
    f.volume = fld(v, CF_VOLUME);
    f.xarea = fld(v, CF_XAREA);
    f.yarea = fld(v, CF_YAREA);
    f.pressure = fld(v, CF_PRESSURE);
    f.visc = fld(v, CF_VISCOSITY);
    f.xvel0 = fld(v, CF_XVEL0);
    f.yvel0 = fld(v, CF_YVEL0);
    f.xvel1 = fld(v, CF_XVEL1);
    f.yvel1 = fld(v, CF_YVEL1);
    f.sbm = fld(v, CF_WORK1);
    f.halfdt = 0.5 * dt;
    f.P = (ptrdiff_t)v->pitch;
    const clover_range c = clip_range(r, v->nx + 1, v->ny + 1);
    return launch2d(f, c.j0, c.j1 - 1, c.k0, c.k1 - 1, (cudaStream_t)stream);
}

extern "C" int clover_cu_copy2d(double *dst, size_t dpitch, const double *src, size_t spitch, size_t cols,
                                size_t rows, void *stream)
{
    if (rows == 0 || cols == 0)
        return 0;
    return (int)cudaMemcpy2DAsync(dst, dpitch * sizeof(double), src, spitch * sizeof(double), cols * sizeof(double),
                                  rows, cudaMemcpyDeviceToDevice, (cudaStream_t)stream);
}

extern "C" int clover_cu_flux_calc(const clover_view *v, double dt, void *stream)
{
    if (!have(v, {CF_XAREA, CF_YAREA, CF_XVEL0, CF_XVEL1, CF_YVEL0, CF_YVEL1, CF_VOL_FLUX_X, CF_VOL_FLUX_Y}))
        return BAD_ARG;
    FluxCalc f;
    f.xarea = fld(v, CF_XAREA);
    f.yarea = fld(v, CF_YAREA);
    f.xvel0 = fld(v, CF_XVEL0);
    f.xvel1 = fld(v, CF_XVEL1);
    f.yvel0 = fld(v, CF_YVEL0);
    f.yvel1 = fld(v, CF_YVEL1);
    f.vfx = fld(v, CF_VOL_FLUX_X);
    f.vfy = fld(v, CF_VOL_FLUX_Y);
    f.qdt = 0.25 * dt;
    f.nx = v->nx;
    f.ny = v->ny;
    f.P = (ptrdiff_t)v->pitch;
    return launch2d(f, 0, v->nx, 0, v->ny, (cudaStream_t)stream);
}

/* advec_cell along dir over the cells of c (already clipped to the chunk,
 * not empty), from v's density1 and energy1 into dout's and eout's (v's
 * own for the whole kernel).  Each pass runs over what the next one
 * reads, as kernels.c's advec_cell_x / _y do: pre_vol of the donor cells
 * (from c.j0 - 1, and up to nx + 1 when c reaches the last cell), the
 * fluxes of faces c.j0 .. c.j1 (and the last face, nx + 1, whose flux
 * the whole kernel stores), then the cells.  Along y the same with j and
 * k exchanged.  A part's fluxes on a face it shares with a neighbour part
 * are computed by both, from the same values (cells, not ghosts). */
static int advec_cell(const clover_view *v, int dir, int sweep, const clover_range &c, double *dout,
                      double *eout, cudaStream_t s)
{
    const int nx = v->nx, ny = v->ny;
    const ptrdiff_t P = (ptrdiff_t)v->pitch;
    const double *volume = fld(v, CF_VOLUME), *vfx = fld(v, CF_VOL_FLUX_X), *vfy = fld(v, CF_VOL_FLUX_Y);
    const double *density1 = fld(v, CF_DENSITY1), *energy1 = fld(v, CF_ENERGY1);
    double *pre_vol = fld(v, CF_WORK1), *post_vol = fld(v, CF_WORK2), *ener_flux = fld(v, CF_WORK7);
    double *pre_mass = fld(v, CF_WORK3), *post_mass = fld(v, CF_WORK4), *advec_vol = fld(v, CF_WORK5);
    double *post_ener = fld(v, CF_WORK6);
    const int sweep1 = sweep == 1;
    int rc;
    if (dir == 1) {
        const int last = c.j1 == nx ? nx + 1 : c.j1; /* the last face (and donor) */
        double *mfx = fld(v, CF_MASS_FLUX_X);
        const CellVols<1> a{volume, vfx, vfy, pre_vol, post_vol, sweep1, P};
        if ((rc = launch2d(a, c.j0 - 1, last, c.k0, c.k1 - 1, s)) != 0)
            return rc;
        const CellFluxX b{geo(v, CG_VERTEXDX), vfx, pre_vol, density1, energy1, mfx, ener_flux, nx, P};
        if ((rc = launch2d(b, c.j0, last, c.k0, c.k1 - 1, s)) != 0)
            return rc;
        const CellUpdate<1, 0> u{vfx,  mfx,  ener_flux, pre_vol,   density1,  energy1,
                                 dout, eout, pre_mass,  post_mass, advec_vol, post_ener, P};
        return launch2d(u, c.j0, c.j1 - 1, c.k0, c.k1 - 1, s);
    }
    const int last = c.k1 == ny ? ny + 1 : c.k1;
    double *mfy = fld(v, CF_MASS_FLUX_Y);
    const CellVols<2> a{volume, vfx, vfy, pre_vol, post_vol, sweep1, P};
    if ((rc = launch2d(a, c.j0, c.j1 - 1, c.k0 - 1, last, s)) != 0)
        return rc;
    const CellFluxY b{geo(v, CG_VERTEXDY), vfy, pre_vol, density1, energy1, mfy, ener_flux, ny, P};
    if ((rc = launch2d(b, c.j0, c.j1 - 1, c.k0, last, s)) != 0)
        return rc;
    const CellUpdate<0, 1> u{vfy,  mfy,  ener_flux, pre_vol,   density1,  energy1,
                             dout, eout, pre_mass,  post_mass, advec_vol, post_ener, P};
    return launch2d(u, c.j0, c.j1 - 1, c.k0, c.k1 - 1, s);
}

static bool advec_cell_ok(const clover_view *v, int dir)
{
    const int fmf = dir == 1 ? CF_MASS_FLUX_X : CF_MASS_FLUX_Y;
    return (dir == 1 || dir == 2)
        && have(v, {CF_VOLUME, CF_VOL_FLUX_X, CF_VOL_FLUX_Y, CF_DENSITY1, CF_ENERGY1, fmf, CF_WORK1, CF_WORK2,
                    CF_WORK3, CF_WORK4, CF_WORK5, CF_WORK6, CF_WORK7},
                true);
}

extern "C" int clover_cu_advec_cell(const clover_view *v, int dir, int sweep, void *stream)
{
    if (!advec_cell_ok(v, dir))
        return BAD_ARG;
    const clover_range all = {0, v->nx, 0, v->ny};
    return advec_cell(v, dir, sweep, all, fld(v, CF_DENSITY1), fld(v, CF_ENERGY1), (cudaStream_t)stream);
}

extern "C" int clover_cu_advec_cell_range(const clover_view *v, int dir, int sweep, const clover_range *r,
                                          const clover_view *out, void *stream)
{
    if (!r || !advec_cell_ok(v, dir) || !out || !out->f[CF_DENSITY1] || !out->f[CF_ENERGY1]
        || out->pitch != v->pitch)
        return BAD_ARG;
    const clover_range c = clip_range(r, v->nx, v->ny);
    if (c.j1 <= c.j0 || c.k1 <= c.k0)
        return 0;
    return advec_cell(v, dir, sweep, c, fld(out, CF_DENSITY1), fld(out, CF_ENERGY1), (cudaStream_t)stream);
}

/* advec_mom of vel along dir over the nodes of c (clipped, not empty),
 * from v's vel into vout (v's own for the whole kernel).  Each pass over
 * what the next reads: the update of nodes c.j0 .. c.j1 - 1 reads the
 * momentum fluxes from c.j0 - 1; those read node_flux there and
 * node_mass_pre at their donors (up to c.j1), which read node_flux one
 * node further back (recomputed, not read) and the post-sweep volumes of
 * the cells around each node, c.j0 - 2 .. c.j1.  Across the sweep only
 * the nodes' own rows (node k reads cells k - 1 and k).  Along y the same
 * with j and k exchanged. */
static int advec_mom(const clover_view *v, int vel, int dir, int sweep, const clover_range &c, double *vout,
                     cudaStream_t s)
{
    const ptrdiff_t P = (ptrdiff_t)v->pitch;
    int rc;
    MomPostVol pv;
    pv.volume = fld(v, CF_VOLUME);
    pv.vfx = fld(v, CF_VOL_FLUX_X);
    pv.vfy = fld(v, CF_VOL_FLUX_Y);
    pv.post_vol = fld(v, CF_WORK7);
    pv.mom_sweep = dir + 2 * (sweep - 1);
    pv.P = P;
    if (dir == 1)
        rc = launch2d(pv, c.j0 - 2, c.j1, c.k0 - 1, c.k1 - 1, s);
    else
        rc = launch2d(pv, c.j0 - 1, c.j1 - 1, c.k0 - 2, c.k1, s);
    if (rc != 0)
        return rc;
    double *node_flux = fld(v, CF_WORK1), *nm_post = fld(v, CF_WORK2), *nm_pre = fld(v, CF_WORK3);
    double *mom_flux = fld(v, CF_WORK5), *vel1 = fld(v, vel), *post_vol = fld(v, CF_WORK7);
    const double *density1 = fld(v, CF_DENSITY1);
    if (dir == 1) {
        const MomNodeX a{fld(v, CF_MASS_FLUX_X), density1, post_vol, node_flux, nm_post, nm_pre, P};
        if ((rc = launch2d(a, c.j0 - 1, c.j1, c.k0, c.k1 - 1, s)) != 0)
            return rc;
        const MomFluxX b{geo(v, CG_CELLDX), node_flux, nm_pre, vel1, mom_flux, P};
        if ((rc = launch2d(b, c.j0 - 1, c.j1 - 1, c.k0, c.k1 - 1, s)) != 0)
            return rc;
        const MomUpdate<1, 0> u{mom_flux, nm_pre, nm_post, vel1, vout, P};
        return launch2d(u, c.j0, c.j1 - 1, c.k0, c.k1 - 1, s);
    }
    const MomNodeY a{fld(v, CF_MASS_FLUX_Y), density1, post_vol, node_flux, nm_post, nm_pre, P};
    if ((rc = launch2d(a, c.j0, c.j1 - 1, c.k0 - 1, c.k1, s)) != 0)
        return rc;
    const MomFluxY b{geo(v, CG_CELLDY), node_flux, nm_pre, vel1, mom_flux, P};
    if ((rc = launch2d(b, c.j0, c.j1 - 1, c.k0 - 1, c.k1 - 1, s)) != 0)
        return rc;
    const MomUpdate<0, 1> u{mom_flux, nm_pre, nm_post, vel1, vout, P};
    return launch2d(u, c.j0, c.j1 - 1, c.k0, c.k1 - 1, s);
}

static bool advec_mom_ok(const clover_view *v, int vel, int dir)
{
    return vel >= 0 && vel < CF_NFIELDS && (dir == 1 || dir == 2)
        && have(v, {vel, CF_VOLUME, CF_VOL_FLUX_X, CF_VOL_FLUX_Y, dir == 1 ? CF_MASS_FLUX_X : CF_MASS_FLUX_Y,
                    CF_DENSITY1, CF_WORK1, CF_WORK2, CF_WORK3, CF_WORK5, CF_WORK7},
                true);
}

extern "C" int clover_cu_advec_mom(const clover_view *v, int vel, int dir, int sweep, void *stream)
{
    if (!advec_mom_ok(v, vel, dir))
        return BAD_ARG;
    const clover_range all = {0, v->nx + 1, 0, v->ny + 1};
    return advec_mom(v, vel, dir, sweep, all, fld(v, vel), (cudaStream_t)stream);
}

extern "C" int clover_cu_advec_mom_range(const clover_view *v, int vel, int dir, int sweep, const clover_range *r,
                                         const clover_view *out, void *stream)
{
    if (!r || !advec_mom_ok(v, vel, dir) || !out || !out->f[vel] || out->pitch != v->pitch)
        return BAD_ARG;
    const clover_range c = clip_range(r, v->nx + 1, v->ny + 1);
    if (c.j1 <= c.j0 || c.k1 <= c.k0)
        return 0;
    return advec_mom(v, vel, dir, sweep, c, fld(out, vel), (cudaStream_t)stream);
}

extern "C" int clover_cu_reset_field(const clover_view *v, void *stream)
{
    if (!have(v, {CF_DENSITY0, CF_DENSITY1, CF_ENERGY0, CF_ENERGY1, CF_XVEL0, CF_XVEL1, CF_YVEL0, CF_YVEL1}))
        return BAD_ARG;
    ResetField f;
    f.d1 = fld(v, CF_DENSITY1);
    f.e1 = fld(v, CF_ENERGY1);
    f.x1 = fld(v, CF_XVEL1);
    f.y1 = fld(v, CF_YVEL1);
    f.d0 = fld(v, CF_DENSITY0);
    f.e0 = fld(v, CF_ENERGY0);
    f.x0 = fld(v, CF_XVEL0);
    f.y0 = fld(v, CF_YVEL0);
    f.nx = v->nx;
    f.ny = v->ny;
    f.P = (ptrdiff_t)v->pitch;
    return launch2d(f, 0, v->nx, 0, v->ny, (cudaStream_t)stream);
}

extern "C" int clover_cu_field_summary(const clover_view *v, double *sums, void *stream)
{
    if (!sums || !have(v, {CF_VOLUME, CF_DENSITY0, CF_ENERGY0, CF_PRESSURE, CF_XVEL0, CF_YVEL0}))
        return BAD_ARG;
    cudaStream_t s = (cudaStream_t)stream;
    Summary sm;
    sm.volume = fld(v, CF_VOLUME);
    sm.density0 = fld(v, CF_DENSITY0);
    sm.energy0 = fld(v, CF_ENERGY0);
    sm.pressure = fld(v, CF_PRESSURE);
    sm.xvel0 = fld(v, CF_XVEL0);
    sm.yvel0 = fld(v, CF_YVEL0);
    sm.nx = v->nx;
    sm.n = (long long)v->nx * v->ny;
    long long nb = (sm.n + SUM_T - 1) / SUM_T;
    if (nb > SUM_NB_MAX)
        nb = SUM_NB_MAX;
    sm.nb = (int)nb;
    sm.len = (sm.n + nb - 1) / nb;
    sm.P = (ptrdiff_t)v->pitch;
    double *work = v->f[CF_WORK1]; /* nb * CS_N <= (nx + 5) * (ny + 5) doubles */
    if (!work) {
        CLOVER_LAUNCH_SYNC(k_summary_one, 1, SUM_T, s)(sm, sums);
        return last_error();
    }
    CLOVER_LAUNCH_SYNC(k_summary_runs, (unsigned)sm.nb, SUM_T, s)(sm, work);
    int rc = last_error();
    if (rc)
        return rc;
    CLOVER_LAUNCH_SYNC(k_summary_fold, 1, SUM_T, s)(sm.nb, work, sums);
    return last_error();
}

extern "C" int clover_cu_reflect(const clover_view *v, const int *fields, int nfields, int depth, unsigned edges,
                                 void *stream)
{
    if (!v || (nfields > 0 && !fields))
        return BAD_ARG;
    if (depth < 1)
        return 0;
    if (depth > 2)
        depth = 2;
    cudaStream_t s = (cudaStream_t)stream;
    ReflectBatch b;
    b.n = 0;
    b.depth = depth;
    b.nx = v->nx;
    b.ny = v->ny;
    b.P = (ptrdiff_t)v->pitch;
    bool in[CF_NFIELDS] = {};
    int rc;
    for (int i = 0; i < nfields; i++) {
        const int f = fields[i];
        if (f < 0 || f >= CF_NFIELDS || !v->f[f])
            continue;
        if (in[f]) {
            /* a field named again: what is queued so far runs first, as
             * halo.c reflects each field in turn */
            if ((rc = reflect_batch(b, edges, s)) != 0)
                return rc;
            b.n = 0;
            for (int g = 0; g < CF_NFIELDS; g++)
                in[g] = false;
        }
        in[f] = true;
        b.m[b.n++] = mirror_of(fld(v, f), f, v->nx, v->ny);
    }
    return reflect_batch(b, edges, s);
}

extern "C" int clover_cu_use_device(int ordinal)
{
    return (int)cudaSetDevice(ordinal);
}
