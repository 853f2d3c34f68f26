"""CloverLeaf's kernels for CUDA GPUs in Python, compiled by numba.cuda: the
kernels of kernels.cu, one @cuda.jit kernel per functor or __global__
function there (IdealGas is k_ideal_gas, k_calc_dt is k_calc_dt), and
k_copy for the unpack's copies (call_cuda.c's cudaMemcpy2DAsync), with the
same launch shapes and index ranges and the operands of every expression
in the same order, so that the fields are kernels.cu's, and so the C
kernels', bit for bit.  The field summary is kernels.cu's too: a fixed
tree of sums, whose last bits differ from the host kernels' compensated
sum (to about 1e-16 relative), but equal kernels.cu's.  Read it beside
kernels.cu.  The driver imports this module only when it runs these
kernels (cloverleaf.py: --kernels numba on CUDA GPUs, --kernels
numba-cuda); they compile on first launch (cache=True: the code is kept
in __pycache__ for the next run).

The launchers.  One per kernels.cu entry point (clover_cu_*), named as
kernels_numba.py's functions and taking their arguments, but for the
reductions, which fold into the task's copy on the device as kernels.cu's
do: calc_dt(v, d, dt_min), pdv(v, predict, dt, err) and
field_summary(v, sums).  A View here is kernels_numba.py's with the
stream: nx, ny, f (CF_NFIELDS device arrays of shape (ny + 5, nx + 5),
None for a field the task does not access: a launcher that needs it
raises ValueError naming it, where kernels.cu returns
cudaErrorInvalidValue), geom (the geometry array, 1-D) and stream (a
Numba stream: ctx.numba_stream()).  Every launch goes on v.stream; none
waits for the device.

Indices.  A launcher's ranges are kernels.cu's, in C's indices (cell j of
the chunk is 0); a kernel gets them, and indexes the arrays, as the
arrays' own (C's j is array j + G, as in kernels_numba.py), so AT(p, j, k)
of kernels.cu is p[k, j] here and only the bounds a kernel compares with
(C's nx is nx + G) carry the G = 2 ghost layers.  launch2d's kernels are
kernels.cu's k2d: a grid of 64 x 4 thread blocks, j along threadIdx.x, k
strided over the grid's rows, the functor's body inside the loop over k.

Arithmetic.  kernels.cu is built with -fmad=false; NVVM, which compiles
numba.cuda's kernels, fuses a product into a following addition (fma) by
default and numba.cuda has no switch to stop it.  So every floating-point
product here is mul(a, b): libdevice's __nv_dmul_rn on CUDA (PTX
mul.rn.f64, which is never fused), a plain product under the simulator.
Division and square root are IEEE's (numba.cuda's defaults, as nvcc's);
no fastmath.  python/tests/test_cloverleaf.py compiles every kernel to
PTX and checks that no fma, and no product but mul.rn, is left.

Under Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1 set before numba is
imported) the same kernels run as Python on virtual GPUs' replicas, each
CUDA thread a Python thread: the tests run the driver so.  The simulator
runs one kernel at a time in a process (the driver holds a lock around
each task's launches there).
"""
import math
import warnings
from collections import namedtuple

import numba
import numpy as np
from numba import cuda
from numba.core import config

__all__ = ["View", "SIMULATING", "initialise", "generate", "ideal_gas", "viscosity", "viscosity_range", "calc_dt",
           "pdv", "revert", "accelerate", "accelerate_range", "flux_calc", "advec_cell", "advec_cell_range",
           "advec_mom", "advec_mom_range", "reset_field", "field_summary", "reflect", "halo_unpack"]

SIMULATING = bool(config.ENABLE_CUDASIM)

G = 2                 # ghost layers: C's index j is array index j + G
BX, BY = 64, 4        # kernels.cu's thread block of a 2-D kernel
RED_T = BX * BY       # threads of calc_dt's reduction block
SUM_T = 512           # threads of a field summary block
SUM_NB_MAX = 256      # runs of cells the field summary adds separately
REFLECT_T = 128       # threads of a reflection block

# clover.h's fields, geometry arrays, states' geometries, edges, sums
(CF_DENSITY0, CF_DENSITY1, CF_ENERGY0, CF_ENERGY1, CF_PRESSURE, CF_VISCOSITY, CF_SOUNDSPEED,
 CF_XVEL0, CF_XVEL1, CF_YVEL0, CF_YVEL1, CF_VOL_FLUX_X, CF_VOL_FLUX_Y, CF_MASS_FLUX_X, CF_MASS_FLUX_Y,
 CF_VOLUME, CF_XAREA, CF_YAREA, CF_WORK1, CF_WORK2, CF_WORK3, CF_WORK4, CF_WORK5, CF_WORK6,
 CF_WORK7) = range(25)
CF_NFIELDS = 25
FIELD_NAMES = ("density0", "density1", "energy0", "energy1", "pressure", "viscosity", "soundspeed",
               "xvel0", "xvel1", "yvel0", "yvel1", "vol_flux_x", "vol_flux_y", "mass_flux_x", "mass_flux_y",
               "volume", "xarea", "yarea", "work1", "work2", "work3", "work4", "work5", "work6", "work7")
CG_CELLX, CG_CELLDX, CG_VERTEXX, CG_VERTEXDX, CG_CELLY, CG_CELLDY, CG_VERTEXY, CG_VERTEXDY = range(8)
CLOVER_GEOM_RECTANGLE, CLOVER_GEOM_CIRCLE, CLOVER_GEOM_POINT = 1, 2, 3
CLOVER_LEFT, CLOVER_RIGHT, CLOVER_BOTTOM, CLOVER_TOP = 1, 2, 4, 8
CS_VOL, CS_MASS, CS_IE, CS_KE, CS_PRESS, CS_N = range(6)
(ST_DENSITY, ST_ENERGY, ST_XVEL, ST_YVEL, ST_GEOMETRY, ST_XMIN, ST_XMAX, ST_YMIN, ST_YMAX, ST_RADIUS) = range(10)
PH_BOTTOM, PH_TOP, PH_LEFT, PH_RIGHT = range(4)

# The reference's single-precision literals in double variables (kernels.cu).
G_SMALL = float(np.float32(1.0e-16))
G_BIG = float(np.float32(1.0e+21))

View = namedtuple("View", ["nx", "ny", "f", "geom", "stream"])
View.__doc__ = "A chunk on a GPU: nx, ny, f (CF_NFIELDS device arrays or None), geom (1-D), stream."

# kernels.cu's strips and reductions are small grids by design (one block
# for a fold, a strip of the border): Numba's warning that a grid of fewer
# than 128 blocks under-uses the GPU says nothing here.
warnings.filterwarnings("ignore", message=r"Grid size \d+ will likely result in GPU under-utilization",
                        category=numba.core.errors.NumbaPerformanceWarning)

if SIMULATING:
    def mul(a, b):
        """a * b: the simulator runs Python, which fuses nothing."""
        return a * b
else:
    from numba.cuda import libdevice
    mul = libdevice.dmul_rn   # a * b rounded on its own (PTX mul.rn.f64: never fused into an fma)

device = cuda.jit(device=True)
kernel = cuda.jit(cache=True)


@device
def dmin2(a, b):
    return a if a < b else b


@device
def dmax2(a, b):
    return a if a > b else b


# ---- host-side helpers -----------------------------------------------------

def fld(v, f, what):
    """Field f of the view; ValueError naming it when the task has none."""
    a = v.f[f]
    if a is None:
        raise ValueError(f"kernels_numba_cuda.{what}: the view has no {FIELD_NAMES[f]} (the task does not access it)")
    return a


def geom_off(nx, ny, which):
    """clover_geom_offset's layout."""
    if which < CG_CELLY:
        return which * (nx + 5)
    return 4 * (nx + 5) + (which - CG_CELLY) * (ny + 5)


def geo(v, which, what):
    """Geometry array `which`, indexed as the fields' j (or k)."""
    if v.geom is None:
        raise ValueError(f"kernels_numba_cuda.{what}: the view has no geometry array (the task does not access it)")
    o = geom_off(v.nx, v.ny, which)
    return v.geom[o:o + (v.nx + 5 if which < CG_CELLY else v.ny + 5)]


def clip_range(r, dx, dy):
    """r intersected with [0, dx) x [0, dy) (kernels.cu's clip_range)."""
    return (max(r[0], 0), min(r[1], dx), max(r[2], 0), min(r[3], dy))


def grid_y(k0, k1):
    n = (k1 - k0 + 1 + BY - 1) // BY
    return min(n, 65535)


def _launch(kern, grid, block, stream, args):
    """kern<<<grid, block, 0, stream>>>(args).  TypeError for a host
    (NumPy) array among them, which numba.cuda would copy to the device and
    back around the launch, synchronously, leaving the task's data as it
    was: the launchers take device arrays (ctx.numba_array)."""
    for a in args:
        if isinstance(a, np.ndarray) or (isinstance(a, tuple) and any(isinstance(x, np.ndarray) for x in a)):
            raise TypeError(f"kernels_numba_cuda: {kern.__name__} was given a host array: pass device arrays "
                            "(weft.context().numba_array(i), numba.cuda.to_device)")
    kern[grid, block, stream](*args)


def launch2d(kern, stream, j0, j1, k0, k1, *args):
    """kern over j in [j0, j1], k in [k0, k1] (inclusive, C's indices),
    as kernels.cu's launch2d; the kernel gets the range as array indices."""
    if j1 < j0 or k1 < k0:
        return
    grid = ((j1 - j0 + 1 + BX - 1) // BX, grid_y(k0, k1))
    _launch(kern, grid, (BX, BY), stream, (j0 + G, j1 + G, k0 + G, k1 + G) + args)


# ---- initialise and generate -----------------------------------------------

@kernel
def k_init_geom(cellx, celldx, vertexx, vertexdx, celly, celldy, vertexy, vertexdy, xmin, ymin, dx, dy, x0, y0,
                nx, ny):
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x    # kernels.cu's i + G
    if i <= nx + 2 + G:
        j = i
        x = xmin + mul(dx, float(x0 + j - G))
        xr = xmin + mul(dx, float(x0 + j - G + 1))
        vertexx[j] = x
        vertexdx[j] = dx
        cellx[j] = mul(0.5, x + xr)
        celldx[j] = dx
    if i <= ny + 2 + G:
        k = i
        y = ymin + mul(dy, float(y0 + k - G))
        yt = ymin + mul(dy, float(y0 + k - G + 1))
        vertexy[k] = y
        vertexdy[k] = dy
        celly[k] = mul(0.5, y + yt)
        celldy[k] = dy


@kernel
def k_init_areas(j0, j1, k0, k1, volume, xarea, yarea, vol, dx, dy):
    """volume, xarea = celldy[k], yarea = celldx[j]: every celldy is dy
    and every celldx dx (k_init_geom's values), used directly."""
    j = j0 + cuda.blockIdx.x * BX + cuda.threadIdx.x
    if j > j1:
        return
    k = k0 + cuda.blockIdx.y * BY + cuda.threadIdx.y
    while k <= k1:
        volume[k, j] = vol
        xarea[k, j] = dy
        yarea[k, j] = dx
        k += cuda.gridDim.y * BY


@kernel
def k_gen_fill(j0, j1, k0, k1, density0, energy0, xvel0, yvel0, density, energy, xvel, yvel):
    j = j0 + cuda.blockIdx.x * BX + cuda.threadIdx.x
    if j > j1:
        return
    k = k0 + cuda.blockIdx.y * BY + cuda.threadIdx.y
    while k <= k1:
        density0[k, j] = density
        energy0[k, j] = energy
        xvel0[k, j] = xvel
        yvel0[k, j] = yvel
        k += cuda.gridDim.y * BY


@device
def gen_hit(j, k, geometry, xmin, xmax, ymin, ymax, radius, cellx, celly, vertexx, vertexy):
    """Whether cell (j, k) is in the state's shape (GenState::hit)."""
    xc, yc = xmin, ymin
    if geometry == CLOVER_GEOM_RECTANGLE:
        return vertexx[j + 1] >= xmin and vertexx[j] < xmax and vertexy[k + 1] >= ymin and vertexy[k] < ymax
    elif geometry == CLOVER_GEOM_CIRCLE:
        r = math.sqrt(mul(cellx[j] - xc, cellx[j] - xc) + mul(celly[k] - yc, celly[k] - yc))
        return r <= radius
    elif geometry == CLOVER_GEOM_POINT:
        return vertexx[j] == xc and vertexy[k] == yc
    return False


@kernel
def k_gen_state(j0, j1, k0, k1, density0, energy0, xvel0, yvel0, cellx, celly, vertexx, vertexy, density, energy,
                xvel, yvel, xmin, xmax, ymin, ymax, radius, geometry, nx, ny):
    """One state over the cells C's [-2, nx + 1] x [-2, ny + 1] and the
    nodes of each hit cell, run per node: a node takes the state's velocity
    when any of the cells (j - 1 .. j, k - 1 .. k) in range is hit
    (kernels.cu's GenState)."""
    j = j0 + cuda.blockIdx.x * BX + cuda.threadIdx.x
    if j > j1:
        return
    k = k0 + cuda.blockIdx.y * BY + cuda.threadIdx.y
    while k <= k1:
        jin, jmin = j <= nx + 1 + G, j - 1 >= 0
        kin, kmin = k <= ny + 1 + G, k - 1 >= 0
        h00 = jin and kin and gen_hit(j, k, geometry, xmin, xmax, ymin, ymax, radius, cellx, celly, vertexx,
                                      vertexy)
        node = h00
        if not node and jmin and kin:
            node = gen_hit(j - 1, k, geometry, xmin, xmax, ymin, ymax, radius, cellx, celly, vertexx, vertexy)
        if not node and jin and kmin:
            node = gen_hit(j, k - 1, geometry, xmin, xmax, ymin, ymax, radius, cellx, celly, vertexx, vertexy)
        if not node and jmin and kmin:
            node = gen_hit(j - 1, k - 1, geometry, xmin, xmax, ymin, ymax, radius, cellx, celly, vertexx, vertexy)
        if h00:
            energy0[k, j] = energy
            density0[k, j] = density
        if node:
            xvel0[k, j] = xvel
            yvel0[k, j] = yvel
        k += cuda.gridDim.y * BY


# ---- equation of state, viscosity, time step -------------------------------

@kernel
def k_ideal_gas(j0, j1, k0, k1, density, energy, pressure, soundspeed):
    j = j0 + cuda.blockIdx.x * BX + cuda.threadIdx.x
    if j > j1:
        return
    k = k0 + cuda.blockIdx.y * BY + cuda.threadIdx.y
    while k <= k1:
        gm1 = 1.4 - 1.0
        dn = density[k, j]
        vv = 1.0 / dn
        p = mul(mul(gm1, dn), energy[k, j])
        pbe = mul(gm1, dn)
        pbv = mul(-dn, p)
        ss2 = mul(mul(vv, vv), mul(p, pbe) - pbv)
        pressure[k, j] = p
        soundspeed[k, j] = math.sqrt(ss2)
        k += cuda.gridDim.y * BY


@kernel
def k_viscosity(j0, j1, k0, k1, celldx, celldy, density0, pressure, xvel0, yvel0, visc):
    j = j0 + cuda.blockIdx.x * BX + cuda.threadIdx.x
    if j > j1:
        return
    k = k0 + cuda.blockIdx.y * BY + cuda.threadIdx.y
    while k <= k1:
        cdy = celldy[k]
        cdy2 = celldy[k] + celldy[k + 1]
        cdx = celldx[j]
        # xv0/xv1: xvel0 rows k and k + 1; yv0/yv1 likewise
        xv0j, xv0j1 = xvel0[k, j], xvel0[k, j + 1]
        xv1j, xv1j1 = xvel0[k + 1, j], xvel0[k + 1, j + 1]
        yv0j, yv0j1 = yvel0[k, j], yvel0[k, j + 1]
        yv1j, yv1j1 = yvel0[k + 1, j], yvel0[k + 1, j + 1]
        ugrad = (xv0j1 + xv1j1) - (xv0j + xv1j)
        vgrad = (yv1j + yv1j1) - (yv0j + yv0j1)
        div = mul(cdx, ugrad) + mul(cdy, vgrad)
        strain2 = mul(0.5, xv1j + xv1j1 - xv0j - xv0j1) / cdy + mul(0.5, yv0j1 + yv1j1 - yv0j - yv1j) / cdx
        pgradx = (pressure[k, j + 1] - pressure[k, j - 1]) / (cdx + celldx[j + 1])
        pgrady = (pressure[k + 1, j] - pressure[k - 1, j]) / cdy2
        pgradx2 = mul(pgradx, pgradx)
        pgrady2 = mul(pgrady, pgrady)
        limiter = ((mul(mul(0.5, ugrad) / cdx, pgradx2) + mul(mul(0.5, vgrad) / cdy, pgrady2)
                    + mul(mul(strain2, pgradx), pgrady))
                   / dmax2(pgradx2 + pgrady2, 1.0e-16))
        if limiter > 0.0 or div >= 0.0:
            visc[k, j] = 0.0
        else:
            ax = dmax2(1.0e-16, abs(pgradx))
            ay = dmax2(1.0e-16, abs(pgrady))
            pgrad = math.sqrt(mul(ax, ax) + mul(ay, ay))
            xgrad = abs(mul(cdx, pgrad) / ax)
            ygrad = abs(mul(cdy, pgrad) / ay)
            grad = dmin2(xgrad, ygrad)
            grad2 = mul(grad, grad)
            visc[k, j] = mul(mul(mul(mul(2.0, density0[k, j]), grad2), limiter), limiter)
        k += cuda.gridDim.y * BY


@device
def cell_dt(j, k, celldx, celldy, xarea, yarea, volume, density0, visc, ss, xvel0, yvel0, dtc_safe, dtu_safe,
            dtv_safe, dtdiv_safe):
    """The smallest of the four limits of cell (j, k) (CalcDt::cell)."""
    dsx = celldx[j]
    dsy = celldy[k]
    s = ss[k, j]
    vol = volume[k, j]
    cc = mul(s, s)
    cc = cc + mul(2.0, visc[k, j]) / density0[k, j]
    cc = dmax2(math.sqrt(cc), G_SMALL)
    dtct = mul(dtc_safe, dmin2(dsx, dsy)) / cc
    dv1 = mul(xvel0[k, j] + xvel0[k + 1, j], xarea[k, j])
    dv2 = mul(xvel0[k, j + 1] + xvel0[k + 1, j + 1], xarea[k, j + 1])
    div = dv2 - dv1
    dtut = mul(mul(dtu_safe, 2.0), vol) / dmax2(dmax2(abs(dv1), abs(dv2)), mul(G_SMALL, vol))
    dv1 = mul(yvel0[k, j] + yvel0[k, j + 1], yarea[k, j])
    dv2 = mul(yvel0[k + 1, j] + yvel0[k + 1, j + 1], yarea[k + 1, j])
    div = div + dv2 - dv1
    dtvt = mul(mul(dtv_safe, 2.0), vol) / dmax2(dmax2(abs(dv1), abs(dv2)), mul(G_SMALL, vol))
    div = div / mul(2.0, vol)
    dtdivt = mul(dtdiv_safe, -1.0 / div) if div < -G_SMALL else G_BIG
    return dmin2(dmin2(dtct, dtut), dmin2(dtvt, dtdivt))


@device
def block_min(v, sh):
    """The minimum over the block's RED_T threads (v from each), in every
    thread: a fixed tree through shared memory sh."""
    t = cuda.threadIdx.y * cuda.blockDim.x + cuda.threadIdx.x
    sh[t] = v
    cuda.syncthreads()
    s = RED_T // 2
    while s > 0:
        if t < s:
            sh[t] = dmin2(sh[t], sh[t + s])
        cuda.syncthreads()
        s >>= 1
    return sh[0]


@kernel
def k_calc_dt(celldx, celldy, xarea, yarea, volume, density0, visc, ss, xvel0, yvel0, dtc_safe, dtu_safe, dtv_safe,
              dtdiv_safe, nx, ny, part, has_part, dt_min):
    """Pass 1: each 64 x 4 block's minimum over its cells (k strided over
    the grid's rows) into part[block]; without part (has_part 0: one block
    covering the whole chunk) folded into dt_min[0] at once."""
    sh = cuda.shared.array(RED_T, numba.float64)
    m = G_BIG   # kernels.c starts from G_BIG
    k = cuda.blockIdx.y * BY + cuda.threadIdx.y + G
    while k < ny + G:
        j = cuda.blockIdx.x * BX + cuda.threadIdx.x + G
        while j < nx + G:
            m = dmin2(m, cell_dt(j, k, celldx, celldy, xarea, yarea, volume, density0, visc, ss, xvel0, yvel0,
                                 dtc_safe, dtu_safe, dtv_safe, dtdiv_safe))
            j += cuda.gridDim.x * BX
        k += cuda.gridDim.y * BY
    m = block_min(m, sh)
    if cuda.threadIdx.x == 0 and cuda.threadIdx.y == 0:
        if has_part:
            part[cuda.blockIdx.y * cuda.gridDim.x + cuda.blockIdx.x] = m
        elif m < dt_min[0]:
            dt_min[0] = m


@kernel
def k_min_fold(part, n, dt_min):
    """Pass 2 (one block): the minimum of the n partial minima into dt_min[0]."""
    sh = cuda.shared.array(RED_T, numba.float64)
    t = cuda.threadIdx.y * cuda.blockDim.x + cuda.threadIdx.x
    m = G_BIG
    i = t
    while i < n:
        m = dmin2(m, part[i])
        i += RED_T
    m = block_min(m, sh)
    if t == 0 and m < dt_min[0]:
        dt_min[0] = m


# ---- Lagrangian step -------------------------------------------------------

@kernel
def k_pdv(j0, j1, k0, k1, xarea, yarea, volume, density0, energy0, pressure, visc, xvel0, xb, yvel0, yb, density1,
          energy1, volchg, err, dt, predict):
    """xb, yb: xvel1, yvel1 (the predictor: xvel0, yvel0 again)."""
    j = j0 + cuda.blockIdx.x * BX + cuda.threadIdx.x
    if j > j1:
        return
    k = k0 + cuda.blockIdx.y * BY + cuda.threadIdx.y
    while k <= k1:
        # xa0/xa1: xvel0 rows k, k + 1; xb0/xb1: xb rows k, k + 1; ya_0/ya_1, yb0/yb1 likewise
        xa0j, xa0j1 = xvel0[k, j], xvel0[k, j + 1]
        xa1j, xa1j1 = xvel0[k + 1, j], xvel0[k + 1, j + 1]
        xb0j, xb0j1 = xb[k, j], xb[k, j + 1]
        xb1j, xb1j1 = xb[k + 1, j], xb[k + 1, j + 1]
        ya_0j, ya_0j1 = yvel0[k, j], yvel0[k, j + 1]
        ya_1j, ya_1j1 = yvel0[k + 1, j], yvel0[k + 1, j + 1]
        yb0j, yb0j1 = yb[k, j], yb[k, j + 1]
        yb1j, yb1j1 = yb[k + 1, j], yb[k + 1, j + 1]
        left = mul(mul(mul(xarea[k, j], xa0j + xa1j + xb0j + xb1j), 0.25), dt)
        right = mul(mul(mul(xarea[k, j + 1], xa0j1 + xa1j1 + xb0j1 + xb1j1), 0.25), dt)
        bottom = mul(mul(mul(yarea[k, j], ya_0j + ya_0j1 + yb0j + yb0j1), 0.25), dt)
        top = mul(mul(mul(yarea[k + 1, j], ya_1j + ya_1j1 + yb1j + yb1j1), 0.25), dt)
        if predict:
            left = mul(left, 0.5)
            right = mul(right, 0.5)
            bottom = mul(bottom, 0.5)
            top = mul(top, 0.5)
        total = right - left + top - bottom
        vol = volume[k, j]
        vc = vol / (vol + total)
        minvol = dmin2(dmin2(vol + right - left + top - bottom, vol + right - left), vol + top - bottom)
        if minvol <= 0.0:
            cuda.atomic.max(err, 0, 1)
        recip = 1.0 / vol
        d0 = density0[k, j]
        echg = mul(mul(pressure[k, j] / d0 + visc[k, j] / d0, total), recip)
        volchg[k, j] = vc
        energy1[k, j] = energy0[k, j] - echg
        density1[k, j] = mul(d0, vc)
        k += cuda.gridDim.y * BY


@kernel
def k_copy2(j0, j1, k0, k1, a0, b0, a1, b1):
    """a1 = a0, b1 = b0 (revert; kernels.cu's Copy2)."""
    j = j0 + cuda.blockIdx.x * BX + cuda.threadIdx.x
    if j > j1:
        return
    k = k0 + cuda.blockIdx.y * BY + cuda.threadIdx.y
    while k <= k1:
        a1[k, j] = a0[k, j]
        b1[k, j] = b0[k, j]
        k += cuda.gridDim.y * BY


@kernel
def k_accelerate(j0, j1, k0, k1, density0, volume, xarea, yarea, pressure, visc, xvel0, yvel0, xvel1, yvel1, sbm,
                 halfdt):
    j = j0 + cuda.blockIdx.x * BX + cuda.threadIdx.x
    if j > j1:
        return
    k = k0 + cuda.blockIdx.y * BY + cuda.threadIdx.y
    while k <= k1:
        nodal_mass = mul(mul(density0[k - 1, j - 1], volume[k - 1, j - 1]) + mul(density0[k - 1, j], volume[k - 1, j])
                         + mul(density0[k, j], volume[k, j]) + mul(density0[k, j - 1], volume[k, j - 1]), 0.25)
        s = halfdt / nodal_mass
        xa0, xam = xarea[k, j], xarea[k - 1, j]
        ya0j, ya0jm = yarea[k, j], yarea[k, j - 1]
        p0j, p0jm = pressure[k, j], pressure[k, j - 1]
        pmj, pmjm = pressure[k - 1, j], pressure[k - 1, j - 1]
        q0j, q0jm = visc[k, j], visc[k, j - 1]
        qmj, qmjm = visc[k - 1, j], visc[k - 1, j - 1]
        xv = xvel0[k, j] - mul(s, mul(xa0, p0j - p0jm) + mul(xam, pmj - pmjm))
        yv = yvel0[k, j] - mul(s, mul(ya0j, p0j - pmj) + mul(ya0jm, p0jm - pmjm))
        xv = xv - mul(s, mul(xa0, q0j - q0jm) + mul(xam, qmj - qmjm))
        yv = yv - mul(s, mul(ya0j, q0j - qmj) + mul(ya0jm, q0jm - qmjm))
        sbm[k, j] = s
        xvel1[k, j] = xv
        yvel1[k, j] = yv
        k += cuda.gridDim.y * BY


@kernel
def k_flux_calc(j0, j1, k0, k1, xarea, yarea, xvel0, xvel1, yvel0, yvel1, vfx, vfy, qdt, nx, ny):
    """Nodes C's j in [0, nx], k in [0, ny]: vol_flux_x for k < ny,
    vol_flux_y for j < nx."""
    j = j0 + cuda.blockIdx.x * BX + cuda.threadIdx.x
    if j > j1:
        return
    k = k0 + cuda.blockIdx.y * BY + cuda.threadIdx.y
    while k <= k1:
        if k < ny + G:
            vfx[k, j] = mul(mul(qdt, xarea[k, j]), xvel0[k, j] + xvel0[k + 1, j] + xvel1[k, j] + xvel1[k + 1, j])
        if j < nx + G:
            vfy[k, j] = mul(mul(qdt, yarea[k, j]), yvel0[k, j] + yvel0[k, j + 1] + yvel1[k, j] + yvel1[k, j + 1])
        k += cuda.gridDim.y * BY


# ---- advection of cell quantities ------------------------------------------

@kernel
def k_cell_vols(j0, j1, k0, k1, volume, vfx, vfy, pre_vol, post_vol, dr, sweep1):
    """Pass 1: pre_vol (WORK1) and post_vol (WORK2); dr 1 along x, 2 along y."""
    j = j0 + cuda.blockIdx.x * BX + cuda.threadIdx.x
    if j > j1:
        return
    k = k0 + cuda.blockIdx.y * BY + cuda.threadIdx.y
    while k <= k1:
        vol = volume[k, j]
        fx0, fx1 = vfx[k, j], vfx[k, j + 1]
        fy0, fy1 = vfy[k, j], vfy[k + 1, j]
        if dr == 1:
            if sweep1:
                pv = vol + (fx1 - fx0 + fy1 - fy0)
                pre_vol[k, j] = pv
                post_vol[k, j] = pv - (fx1 - fx0)
            else:
                pre_vol[k, j] = vol + fx1 - fx0
                post_vol[k, j] = vol
        else:
            if sweep1:
                pv = vol + (fy1 - fy0 + fx1 - fx0)
                pre_vol[k, j] = pv
                post_vol[k, j] = pv - (fy1 - fy0)
            else:
                pre_vol[k, j] = vol + fy1 - fy0
                post_vol[k, j] = vol
        k += cuda.gridDim.y * BY


@device
def cell_limiter(sig, sigma3, sigma4, diffuw, diffdw):
    """The van Leer limited flux of one quantity (kernels.cu's cell_limiter)."""
    one_by_six = 1.0 / 6.0
    limiter = 0.0
    if mul(diffuw, diffdw) > 0.0:
        wind = -1.0 if diffdw <= 0.0 else 1.0
        limiter = mul(mul(1.0 - sig, wind),
                      dmin2(dmin2(abs(diffuw), abs(diffdw)),
                            mul(one_by_six, mul(sigma3, abs(diffuw)) + mul(sigma4, abs(diffdw)))))
    return limiter


@kernel
def k_cell_flux_x(j0, j1, k0, k1, vertexdx, vfx, pre_vol, density1, energy1, mfx, ener_flux, nx):
    """Pass 2 along x: faces, mass_flux_x and ener_flux (WORK7) from the
    old density1 and energy1."""
    j = j0 + cuda.blockIdx.x * BX + cuda.threadIdx.x
    if j > j1:
        return
    k = k0 + cuda.blockIdx.y * BY + cuda.threadIdx.y
    while k <= k1:
        vf = vfx[k, j]
        if vf > 0.0:
            upwind, donor, downwind = j - 2, j - 1, j
            dif = donor
        else:
            upwind = j + 1 if j + 1 < nx + 1 + G else nx + 1 + G
            donor, downwind = j, j - 1
            dif = upwind
        pvd = pre_vol[k, donor]
        sigmat = abs(vf) / pvd
        sigma3 = mul(1.0 + sigmat, vertexdx[j] / vertexdx[dif])
        sigma4 = 2.0 - sigmat
        ddo = density1[k, donor]
        limiter = cell_limiter(sigmat, sigma3, sigma4, ddo - density1[k, upwind], density1[k, downwind] - ddo)
        mf = mul(vf, ddo + limiter)
        mfx[k, j] = mf
        sigmam = abs(mf) / mul(ddo, pvd)
        edo = energy1[k, donor]
        limiter = cell_limiter(sigmam, sigma3, sigma4, edo - energy1[k, upwind], energy1[k, downwind] - edo)
        ener_flux[k, j] = mul(mf, edo + limiter)
        k += cuda.gridDim.y * BY


@kernel
def k_cell_flux_y(j0, j1, k0, k1, vertexdy, vfy, pre_vol, density1, energy1, mfy, ener_flux, ny):
    """Pass 2 along y: faces, mass_flux_y and ener_flux (WORK7)."""
    j = j0 + cuda.blockIdx.x * BX + cuda.threadIdx.x
    if j > j1:
        return
    k = k0 + cuda.blockIdx.y * BY + cuda.threadIdx.y
    while k <= k1:
        vf = vfy[k, j]
        if vf > 0.0:
            up_pos, dn_pos = k - 2, k - 1
            dup = density1[up_pos, j]
            ddo = density1[dn_pos, j]
            ddn = density1[k, j]
            eup = energy1[up_pos, j]
            edo = energy1[dn_pos, j]
            edn = energy1[k, j]
            pvd = pre_vol[dn_pos, j]
            ratio = vertexdy[k] / vertexdy[dn_pos]
        else:
            up_neg = k + 1 if k + 1 < ny + 1 + G else ny + 1 + G
            dup = density1[up_neg, j]
            ddo = density1[k, j]
            ddn = density1[k - 1, j]
            eup = energy1[up_neg, j]
            edo = energy1[k, j]
            edn = energy1[k - 1, j]
            pvd = pre_vol[k, j]
            ratio = vertexdy[k] / vertexdy[up_neg]
        sigmat = abs(vf) / pvd
        sigma3 = mul(1.0 + sigmat, ratio)
        sigma4 = 2.0 - sigmat
        limiter = cell_limiter(sigmat, sigma3, sigma4, ddo - dup, ddn - ddo)
        mf = mul(vf, ddo + limiter)
        mfy[k, j] = mf
        sigmam = abs(mf) / mul(ddo, pvd)
        limiter = cell_limiter(sigmam, sigma3, sigma4, edo - eup, edn - edo)
        ener_flux[k, j] = mul(mf, edo + limiter)
        k += cuda.gridDim.y * BY


@kernel
def k_cell_update(j0, j1, k0, k1, vf, mf, ef, pre_vol, density1, energy1, dout, eout, pre_mass, post_mass,
                  advec_vol, post_ener, dj, dk):
    """Pass 3: the cells, from density1 and energy1 into dout and eout (the
    same arrays in place, the whole kernel; others for a part).  (dj, dk):
    the step to the face past the cell, (1, 0) along x, (0, 1) along y."""
    j = j0 + cuda.blockIdx.x * BX + cuda.threadIdx.x
    if j > j1:
        return
    k = k0 + cuda.blockIdx.y * BY + cuda.threadIdx.y
    while k <= k1:
        pvol = pre_vol[k, j]
        pm = mul(density1[k, j], pvol)
        qm = pm + mf[k, j] - mf[k + dk, j + dj]
        pe = (mul(energy1[k, j], pm) + ef[k, j] - ef[k + dk, j + dj]) / qm
        av = pvol + vf[k, j] - vf[k + dk, j + dj]
        pre_mass[k, j] = pm
        post_mass[k, j] = qm
        post_ener[k, j] = pe
        advec_vol[k, j] = av
        dout[k, j] = qm / av
        eout[k, j] = pe
        k += cuda.gridDim.y * BY


# ---- advection of momentum -------------------------------------------------

@kernel
def k_mom_post_vol(j0, j1, k0, k1, volume, vfx, vfy, post_vol, mom_sweep):
    """post_vol (WORK7)."""
    j = j0 + cuda.blockIdx.x * BX + cuda.threadIdx.x
    if j > j1:
        return
    k = k0 + cuda.blockIdx.y * BY + cuda.threadIdx.y
    while k <= k1:
        if mom_sweep == 1:
            post_vol[k, j] = volume[k, j] + vfy[k + 1, j] - vfy[k, j]
        elif mom_sweep == 2:
            post_vol[k, j] = volume[k, j] + vfx[k, j + 1] - vfx[k, j]
        else:
            post_vol[k, j] = volume[k, j]
        k += cuda.gridDim.y * BY


@device
def node_mass_post(density1, post_vol, j, k):
    """The node's mass after the sweep at node (j, k), both directions."""
    return mul(0.25, mul(density1[k - 1, j], post_vol[k - 1, j]) + mul(density1[k, j], post_vol[k, j])
               + mul(density1[k - 1, j - 1], post_vol[k - 1, j - 1]) + mul(density1[k, j - 1], post_vol[k, j - 1]))


@device
def node_flux_x(mfx, j, k):
    return mul(0.25, mfx[k - 1, j] + mfx[k, j] + mfx[k - 1, j + 1] + mfx[k, j + 1])


@device
def node_flux_y(mfy, j, k):
    return mul(0.25, mfy[k, j - 1] + mfy[k, j] + mfy[k + 1, j - 1] + mfy[k + 1, j])


@kernel
def k_mom_node_x(j0, j1, k0, k1, mfx, density1, post_vol, node_flux, nm_post, nm_pre):
    """Node pass along x: node_flux (WORK1), and for C's j >= -1
    node_mass_post (WORK2) and node_mass_pre (WORK3); node_flux at j - 1
    recomputed (the same expression, so the same value), not read."""
    j = j0 + cuda.blockIdx.x * BX + cuda.threadIdx.x
    if j > j1:
        return
    k = k0 + cuda.blockIdx.y * BY + cuda.threadIdx.y
    while k <= k1:
        nf = node_flux_x(mfx, j, k)
        node_flux[k, j] = nf
        if j >= -1 + G:
            post = node_mass_post(density1, post_vol, j, k)
            nm_post[k, j] = post
            nm_pre[k, j] = post - node_flux_x(mfx, j - 1, k) + nf
        k += cuda.gridDim.y * BY


@kernel
def k_mom_node_y(j0, j1, k0, k1, mfy, density1, post_vol, node_flux, nm_post, nm_pre):
    """Node pass along y: node_flux (WORK1), and for C's k >= -1
    node_mass_post (WORK2) and node_mass_pre (WORK3)."""
    j = j0 + cuda.blockIdx.x * BX + cuda.threadIdx.x
    if j > j1:
        return
    k = k0 + cuda.blockIdx.y * BY + cuda.threadIdx.y
    while k <= k1:
        nf = node_flux_y(mfy, j, k)
        node_flux[k, j] = nf
        if k >= -1 + G:
            post = node_mass_post(density1, post_vol, j, k)
            nm_post[k, j] = post
            nm_pre[k, j] = post - node_flux_y(mfy, j, k - 1) + nf
        k += cuda.gridDim.y * BY


@device
def mom_limiter(sigma, width, cdif, vdiffuw, vdiffdw):
    limiter = 0.0
    if mul(vdiffuw, vdiffdw) > 0.0:
        auw, adw = abs(vdiffuw), abs(vdiffdw)
        wind = -1.0 if vdiffdw <= 0.0 else 1.0
        limiter = mul(wind, dmin2(dmin2(mul(width, mul(2.0 - sigma, adw) / width + mul(1.0 + sigma, auw) / cdif)
                                        / 6.0, auw), adw))
    return limiter


@kernel
def k_mom_flux_x(j0, j1, k0, k1, celldx, node_flux, nm_pre, vel, mom_flux):
    """Momentum flux along x (WORK5)."""
    j = j0 + cuda.blockIdx.x * BX + cuda.threadIdx.x
    if j > j1:
        return
    k = k0 + cuda.blockIdx.y * BY + cuda.threadIdx.y
    while k <= k1:
        nf = node_flux[k, j]
        if nf < 0.0:
            upwind, donor, downwind = j + 2, j + 1, j
            dif = donor
        else:
            upwind, donor, downwind = j - 1, j, j + 1
            dif = upwind
        sigma = abs(nf) / nm_pre[k, donor]
        width = celldx[j]
        vdo = vel[k, donor]
        vdiffuw = vdo - vel[k, upwind]
        vdiffdw = vel[k, downwind] - vdo
        limiter = mom_limiter(sigma, width, celldx[dif], vdiffuw, vdiffdw)
        advec_vel = vdo + mul(1.0 - sigma, limiter)
        mom_flux[k, j] = mul(advec_vel, nf)
        k += cuda.gridDim.y * BY


@kernel
def k_mom_flux_y(j0, j1, k0, k1, celldy, node_flux, nm_pre, vel, mom_flux):
    """Momentum flux along y (WORK5)."""
    j = j0 + cuda.blockIdx.x * BX + cuda.threadIdx.x
    if j > j1:
        return
    k = k0 + cuda.blockIdx.y * BY + cuda.threadIdx.y
    while k <= k1:
        nf = node_flux[k, j]
        if nf < 0.0:
            vup = vel[k + 2, j]
            vdo = vel[k + 1, j]
            vdn = vel[k, j]
            pre = nm_pre[k + 1, j]
            cdif = celldy[k + 1]
        else:
            vup = vel[k - 1, j]
            vdo = vel[k, j]
            vdn = vel[k + 1, j]
            pre = nm_pre[k, j]
            cdif = celldy[k - 1]
        sigma = abs(nf) / pre
        width = celldy[k]
        vdiffuw = vdo - vup
        vdiffdw = vdn - vdo
        limiter = mom_limiter(sigma, width, cdif, vdiffuw, vdiffdw)
        advec_vel = vdo + mul(1.0 - sigma, limiter)
        mom_flux[k, j] = mul(advec_vel, nf)
        k += cuda.gridDim.y * BY


@kernel
def k_mom_update(j0, j1, k0, k1, mom_flux, nm_pre, nm_post, vel, vout, dj, dk):
    """The velocity update, from vel into vout (vel itself in place, the
    whole kernel); (dj, dk) the step to the previous node's flux."""
    j = j0 + cuda.blockIdx.x * BX + cuda.threadIdx.x
    if j > j1:
        return
    k = k0 + cuda.blockIdx.y * BY + cuda.threadIdx.y
    while k <= k1:
        vout[k, j] = (mul(vel[k, j], nm_pre[k, j]) + mom_flux[k - dk, j - dj] - mom_flux[k, j]) / nm_post[k, j]
        k += cuda.gridDim.y * BY


# ---- reset -----------------------------------------------------------------

@kernel
def k_reset_field(j0, j1, k0, k1, d1, e1, x1, y1, d0, e0, x0, y0, nx, ny):
    j = j0 + cuda.blockIdx.x * BX + cuda.threadIdx.x
    if j > j1:
        return
    k = k0 + cuda.blockIdx.y * BY + cuda.threadIdx.y
    while k <= k1:
        if j < nx + G and k < ny + G:
            d0[k, j] = d1[k, j]
            e0[k, j] = e1[k, j]
        x0[k, j] = x1[k, j]
        y0[k, j] = y1[k, j]
        k += cuda.gridDim.y * BY


@kernel
def k_copy(j0, j1, k0, k1, dst, src):
    """dst = src over the range (a staged ghost block's unpack, where
    call_cuda.c copies it with cudaMemcpy2DAsync)."""
    j = j0 + cuda.blockIdx.x * BX + cuda.threadIdx.x
    if j > j1:
        return
    k = k0 + cuda.blockIdx.y * BY + cuda.threadIdx.y
    while k <= k1:
        dst[k, j] = src[k, j]
        k += cuda.gridDim.y * BY


# ---- field summary ---------------------------------------------------------
#
# kernels.cu's: the n = nx * ny cells in row-major order (c = k * nx + j)
# are split into nb <= SUM_NB_MAX consecutive runs of ln cells; run b's
# partial sums are taken by a block of SUM_T threads, thread t adding cells
# b * ln + t, + SUM_T, ... in that order, then a fixed tree over the
# threads.  The chunk's sums are a fixed tree over the nb partials (zeros
# past nb).  Whether the partials come from nb blocks (through WORK1) or
# from one block in turn, the operations are the same, so are the bits.

@device
def block_sum(red, v0, v1, v2, v3, v4):
    """red[i, t] = v_i; a tree over the threads; the sums in red[i, 0]."""
    t = cuda.threadIdx.x
    red[0, t] = v0
    red[1, t] = v1
    red[2, t] = v2
    red[3, t] = v3
    red[4, t] = v4
    cuda.syncthreads()
    s = SUM_T // 2
    while s > 0:
        if t < s:
            for i in range(CS_N):
                red[i, t] = red[i, t] + red[i, t + s]
        cuda.syncthreads()
        s >>= 1


@device
def summary_run(volume, density0, energy0, pressure, xvel0, yvel0, n, ln, nx, b, red):
    """Run b's sums, left in red[i, 0] (all threads take part)."""
    acc_vol = acc_mass = acc_ie = acc_ke = acc_press = 0.0
    c0 = b * ln
    c1 = c0 + ln if c0 + ln < n else n
    c = c0 + cuda.threadIdx.x
    while c < c1:
        k = c // nx + G
        j = c - (k - G) * nx + G
        xa, xa1 = xvel0[k, j], xvel0[k, j + 1]
        xb, xb1 = xvel0[k + 1, j], xvel0[k + 1, j + 1]
        ya, ya1 = yvel0[k, j], yvel0[k, j + 1]
        yb, yb1 = yvel0[k + 1, j], yvel0[k + 1, j + 1]
        vsqrd = 0.0
        vsqrd = vsqrd + mul(0.25, mul(xa, xa) + mul(ya, ya))
        vsqrd = vsqrd + mul(0.25, mul(xa1, xa1) + mul(ya1, ya1))
        vsqrd = vsqrd + mul(0.25, mul(xb, xb) + mul(yb, yb))
        vsqrd = vsqrd + mul(0.25, mul(xb1, xb1) + mul(yb1, yb1))
        cell_vol = volume[k, j]
        cell_mass = mul(cell_vol, density0[k, j])
        acc_vol = acc_vol + cell_vol
        acc_mass = acc_mass + cell_mass
        acc_ie = acc_ie + mul(cell_mass, energy0[k, j])
        acc_ke = acc_ke + mul(mul(cell_mass, 0.5), vsqrd)
        acc_press = acc_press + mul(cell_vol, pressure[k, j])
        c += SUM_T
    block_sum(red, acc_vol, acc_mass, acc_ie, acc_ke, acc_press)


@device
def summary_final(v0, v1, v2, v3, v4, red, sums):
    """The tree over the partials (v_i: thread t's partial t, 0.0 past nb)
    added into sums (every thread of the block calls it)."""
    cuda.syncthreads()   # red may still be read by the caller's last run
    block_sum(red, v0, v1, v2, v3, v4)
    if cuda.threadIdx.x == 0:
        for i in range(CS_N):
            sums[i] = sums[i] + red[i, 0]


@kernel
def k_summary_runs(volume, density0, energy0, pressure, xvel0, yvel0, n, ln, nx, part):
    """nb blocks: run blockIdx.x's partials into part[b * CS_N + i]."""
    red = cuda.shared.array((CS_N, SUM_T), numba.float64)
    b = cuda.blockIdx.x
    summary_run(volume, density0, energy0, pressure, xvel0, yvel0, n, ln, nx, b, red)
    if cuda.threadIdx.x == 0:
        for i in range(CS_N):
            part[b * CS_N + i] = red[i, 0]


@kernel
def k_summary_fold(nb, part, sums):
    """One block: the tree over part[] into sums."""
    red = cuda.shared.array((CS_N, SUM_T), numba.float64)
    t = cuda.threadIdx.x
    o = t * CS_N if t < nb else 0
    summary_final(part[o] if t < nb else 0.0, part[o + 1] if t < nb else 0.0, part[o + 2] if t < nb else 0.0,
                  part[o + 3] if t < nb else 0.0, part[o + 4] if t < nb else 0.0, red, sums)


@kernel
def k_summary_one(volume, density0, energy0, pressure, xvel0, yvel0, n, ln, nx, nb, sums):
    """One block doing everything (no scratch array)."""
    red = cuda.shared.array((CS_N, SUM_T), numba.float64)
    part = cuda.shared.array((SUM_NB_MAX, CS_N), numba.float64)
    t = cuda.threadIdx.x
    for b in range(nb):
        summary_run(volume, density0, energy0, pressure, xvel0, yvel0, n, ln, nx, b, red)
        if t == 0:
            for i in range(CS_N):
                part[b, i] = red[i, 0]
        cuda.syncthreads()   # red[:, 0] read before the next run writes red
    b = t if t < nb else 0
    summary_final(part[b, 0] if t < nb else 0.0, part[b, 1] if t < nb else 0.0, part[b, 2] if t < nb else 0.0,
                  part[b, 3] if t < nb else 0.0, part[b, 4] if t < nb else 0.0, red, sums)


# ---- the mesh's boundary (halo.c's clover_k_reflect) -----------------------

@device
def mirror_of(f, nx, ny):
    """halo.c's mirror_of: (sy, sx, lo_y, hi_y, top_y, lo_x, hi_x, top_x,
    jext, kext) of field f."""
    if f == CF_XVEL0 or f == CF_XVEL1 or f == CF_YVEL0 or f == CF_YVEL1:
        # nodes: about the boundary node line
        sx = -1.0 if f == CF_XVEL0 or f == CF_XVEL1 else 1.0
        return (-sx, sx, 1, ny, ny + 1, 1, nx, nx + 1, 1, 1)
    if f == CF_VOL_FLUX_X or f == CF_MASS_FLUX_X or f == CF_XAREA:
        return (1.0, -1.0, 1, ny - 1, ny, 1, nx, nx + 1, 1, 0)
    if f == CF_VOL_FLUX_Y or f == CF_MASS_FLUX_Y or f == CF_YAREA:
        return (-1.0, 1.0, 1, ny, ny + 1, 1, nx - 1, nx, 0, 1)
    # cells: about the face between the last cell and the first ghost
    return (1.0, 1.0, 0, ny, ny, 0, nx, nx, 0, 0)


@kernel
def k_reflect(phase, arrays, fields, depth, nx, ny):
    """One phase (PH_*) of the reflection of distinct fields: blockIdx.y
    the field; i along the face: C's column j = i - depth (bottom, top) or
    row k = i - depth (left, right); every ghost layer 1 .. depth.  Within
    a phase the rows (columns) written are never read."""
    a = arrays[cuda.blockIdx.y]
    sy, sx, lo_y, hi_y, top_y, lo_x, hi_x, top_x, jext, kext = mirror_of(fields[cuda.blockIdx.y], nx, ny)
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    if phase == PH_BOTTOM or phase == PH_TOP:
        j = i - depth
        if j > nx - 1 + jext + depth:
            return
        for k in range(1, depth + 1):
            if phase == PH_BOTTOM:
                a[G - k, G + j] = mul(sy, a[G + lo_y - 1 + k, G + j])
            else:
                a[G + top_y - 1 + k, G + j] = mul(sy, a[G + hi_y - k, G + j])
    else:
        k = i - depth
        if k > ny - 1 + kext + depth:
            return
        for j in range(1, depth + 1):
            if phase == PH_LEFT:
                a[G + k, G - j] = mul(sx, a[G + k, G + lo_x - 1 + j])
            else:
                a[G + k, G + top_x - 1 + j] = mul(sx, a[G + k, G + hi_x - j])


# ---- the launchers (kernels.cu's clover_cu_* functions) ---------------------

def initialise(v, d, c_x0, c_y0):
    """clover_cu_initialise (the chunk given by its first cell; d: a
    kernels_numba.Deck)."""
    nx, ny, s = v.nx, v.ny, v.stream
    dx = (d.xmax - d.xmin) / float(d.x_cells)
    dy = (d.ymax - d.ymin) / float(d.y_cells)
    g = [geo(v, w, "initialise") for w in (CG_CELLX, CG_CELLDX, CG_VERTEXX, CG_VERTEXDX, CG_CELLY, CG_CELLDY,
                                          CG_VERTEXY, CG_VERTEXDY)]
    n = max(nx, ny) + 5
    _launch(k_init_geom, ((n + 127) // 128,), (128,), s, tuple(g) + (d.xmin, d.ymin, dx, dy, c_x0, c_y0, nx, ny))
    launch2d(k_init_areas, s, -2, nx + 2, -2, ny + 2, fld(v, CF_VOLUME, "initialise"), fld(v, CF_XAREA, "initialise"),
             fld(v, CF_YAREA, "initialise"), dx * dy, dx, dy)


def generate(v, d):
    """clover_cu_generate: state 1 everywhere, then each later state over
    it, one kernel each, in order."""
    nx, ny, s = v.nx, v.ny, v.stream
    if d.nstates < 1:
        raise ValueError("kernels_numba_cuda.generate: the deck has no state")
    f = [fld(v, x, "generate") for x in (CF_DENSITY0, CF_ENERGY0, CF_XVEL0, CF_YVEL0)]
    s1 = d.states[0]
    launch2d(k_gen_fill, s, -2, nx + 2, -2, ny + 2, *f, float(s1[ST_DENSITY]), float(s1[ST_ENERGY]),
             float(s1[ST_XVEL]), float(s1[ST_YVEL]))
    g = [geo(v, w, "generate") for w in (CG_CELLX, CG_CELLY, CG_VERTEXX, CG_VERTEXY)]
    for i in range(1, d.nstates):
        st = [float(x) for x in d.states[i]]
        launch2d(k_gen_state, s, -2, nx + 2, -2, ny + 2, *f, *g, st[ST_DENSITY], st[ST_ENERGY], st[ST_XVEL],
                 st[ST_YVEL], st[ST_XMIN], st[ST_XMAX], st[ST_YMIN], st[ST_YMAX], st[ST_RADIUS],
                 int(st[ST_GEOMETRY]), nx, ny)


def ideal_gas(v, predict):
    fd = CF_DENSITY1 if predict else CF_DENSITY0
    fe = CF_ENERGY1 if predict else CF_ENERGY0
    launch2d(k_ideal_gas, v.stream, 0, v.nx - 1, 0, v.ny - 1, fld(v, fd, "ideal_gas"), fld(v, fe, "ideal_gas"),
             fld(v, CF_PRESSURE, "ideal_gas"), fld(v, CF_SOUNDSPEED, "ideal_gas"))


def viscosity(v):
    viscosity_range(v, (0, v.nx, 0, v.ny))


def viscosity_range(v, r):
    """Over the cells of r (C's (j0, j1, k0, k1), clipped to the chunk)."""
    w = "viscosity"
    c = clip_range(r, v.nx, v.ny)
    launch2d(k_viscosity, v.stream, c[0], c[1] - 1, c[2], c[3] - 1, geo(v, CG_CELLDX, w), geo(v, CG_CELLDY, w),
             fld(v, CF_DENSITY0, w), fld(v, CF_PRESSURE, w), fld(v, CF_XVEL0, w), fld(v, CF_YVEL0, w),
             fld(v, CF_VISCOSITY, w))


def calc_dt(v, d, dt_min):
    """clover_cu_calc_dt: the chunk's smallest dt folded into dt_min[0] (a
    device array: the task's copy of the MIN reduction).  With WORK1 the
    blocks' minima go through it (from its start), then one block folds
    them; without it one block does all."""
    w = "calc_dt"
    args = (geo(v, CG_CELLDX, w), geo(v, CG_CELLDY, w), fld(v, CF_XAREA, w), fld(v, CF_YAREA, w),
            fld(v, CF_VOLUME, w), fld(v, CF_DENSITY0, w), fld(v, CF_VISCOSITY, w), fld(v, CF_SOUNDSPEED, w),
            fld(v, CF_XVEL0, w), fld(v, CF_YVEL0, w), float(d.dtc_safe), float(d.dtu_safe), float(d.dtv_safe),
            float(d.dtdiv_safe), v.nx, v.ny)
    work = v.f[CF_WORK1]
    if work is None:
        _launch(k_calc_dt, (1, 1), (BX, BY), v.stream, args + (dt_min, 0, dt_min))
        return
    # gx * gy <= (nx / 64 + 1) * (ny / 4 + 1) partials: fit in WORK1
    part = work.reshape(work.size)
    grid = ((v.nx + BX - 1) // BX, grid_y(0, v.ny - 1))
    _launch(k_calc_dt, grid, (BX, BY), v.stream, args + (part, 1, dt_min))
    _launch(k_min_fold, (1, 1), (BX, BY), v.stream, (part, grid[0] * grid[1], dt_min))


def pdv(v, predict, dt, err):
    """clover_cu_pdv: err[0] (the task's copy of the MAX reduction, int32,
    on the device) set to 1 if a cell's volume would turn non-positive."""
    w = "pdv"
    xb = fld(v, CF_XVEL0 if predict else CF_XVEL1, w)   # the predictor reads xvel0 twice
    yb = fld(v, CF_YVEL0 if predict else CF_YVEL1, w)
    launch2d(k_pdv, v.stream, 0, v.nx - 1, 0, v.ny - 1, fld(v, CF_XAREA, w), fld(v, CF_YAREA, w),
             fld(v, CF_VOLUME, w), fld(v, CF_DENSITY0, w), fld(v, CF_ENERGY0, w), fld(v, CF_PRESSURE, w),
             fld(v, CF_VISCOSITY, w), fld(v, CF_XVEL0, w), xb, fld(v, CF_YVEL0, w), yb, fld(v, CF_DENSITY1, w),
             fld(v, CF_ENERGY1, w), fld(v, CF_WORK1, w), err, float(dt), 1 if predict else 0)


def revert(v):
    w = "revert"
    launch2d(k_copy2, v.stream, 0, v.nx - 1, 0, v.ny - 1, fld(v, CF_DENSITY0, w), fld(v, CF_ENERGY0, w),
             fld(v, CF_DENSITY1, w), fld(v, CF_ENERGY1, w))


def accelerate(v, dt):
    accelerate_range(v, dt, (0, v.nx + 1, 0, v.ny + 1))


def accelerate_range(v, dt, r):
    """Over the nodes of r (C's, clipped to [0, nx] x [0, ny])."""
    w = "accelerate"
    c = clip_range(r, v.nx + 1, v.ny + 1)
    launch2d(k_accelerate, v.stream, c[0], c[1] - 1, c[2], c[3] - 1, fld(v, CF_DENSITY0, w), fld(v, CF_VOLUME, w),
             fld(v, CF_XAREA, w), fld(v, CF_YAREA, w), fld(v, CF_PRESSURE, w), fld(v, CF_VISCOSITY, w),
             fld(v, CF_XVEL0, w), fld(v, CF_YVEL0, w), fld(v, CF_XVEL1, w), fld(v, CF_YVEL1, w),
             fld(v, CF_WORK1, w), 0.5 * dt)


def flux_calc(v, dt):
    w = "flux_calc"
    launch2d(k_flux_calc, v.stream, 0, v.nx, 0, v.ny, fld(v, CF_XAREA, w), fld(v, CF_YAREA, w), fld(v, CF_XVEL0, w),
             fld(v, CF_XVEL1, w), fld(v, CF_YVEL0, w), fld(v, CF_YVEL1, w), fld(v, CF_VOL_FLUX_X, w),
             fld(v, CF_VOL_FLUX_Y, w), 0.25 * dt, v.nx, v.ny)


def _advec_cell(v, dr, sweep, c, dout, eout):
    """advec_cell along dr over the cells of c (clipped, not empty), from
    v's density1 and energy1 into dout and eout (kernels.cu's advec_cell:
    each pass over what the next one reads: pre_vol of the donor cells,
    up to nx + 1 when c reaches the last cell, the fluxes of the faces,
    and the last face's when c reaches it, then the cells)."""
    w = "advec_cell"
    nx, ny, s = v.nx, v.ny, v.stream
    volume, vfx, vfy = fld(v, CF_VOLUME, w), fld(v, CF_VOL_FLUX_X, w), fld(v, CF_VOL_FLUX_Y, w)
    density1, energy1 = fld(v, CF_DENSITY1, w), fld(v, CF_ENERGY1, w)
    pre_vol, post_vol, ener_flux = fld(v, CF_WORK1, w), fld(v, CF_WORK2, w), fld(v, CF_WORK7, w)
    scratch = (fld(v, CF_WORK3, w), fld(v, CF_WORK4, w), fld(v, CF_WORK5, w), fld(v, CF_WORK6, w))
    sweep1 = 1 if sweep == 1 else 0
    if dr == 1:
        last = nx + 1 if c[1] == nx else c[1]   # the last face (and donor)
        mfx = fld(v, CF_MASS_FLUX_X, w)
        launch2d(k_cell_vols, s, c[0] - 1, last, c[2], c[3] - 1, volume, vfx, vfy, pre_vol, post_vol, 1, sweep1)
        launch2d(k_cell_flux_x, s, c[0], last, c[2], c[3] - 1, geo(v, CG_VERTEXDX, w), vfx, pre_vol, density1,
                 energy1, mfx, ener_flux, nx)
        launch2d(k_cell_update, s, c[0], c[1] - 1, c[2], c[3] - 1, vfx, mfx, ener_flux, pre_vol, density1, energy1,
                 dout, eout, *scratch, 1, 0)
        return
    last = ny + 1 if c[3] == ny else c[3]
    mfy = fld(v, CF_MASS_FLUX_Y, w)
    launch2d(k_cell_vols, s, c[0], c[1] - 1, c[2] - 1, last, volume, vfx, vfy, pre_vol, post_vol, 2, sweep1)
    launch2d(k_cell_flux_y, s, c[0], c[1] - 1, c[2], last, geo(v, CG_VERTEXDY, w), vfy, pre_vol, density1, energy1,
             mfy, ener_flux, ny)
    launch2d(k_cell_update, s, c[0], c[1] - 1, c[2], c[3] - 1, vfy, mfy, ener_flux, pre_vol, density1, energy1,
             dout, eout, *scratch, 0, 1)


def _check_dir(dr, what):
    if dr not in (1, 2):
        raise ValueError(f"kernels_numba_cuda.{what}: direction {dr!r}: 1 (x) or 2 (y)")


def advec_cell(v, dr, sweep):
    _check_dir(dr, "advec_cell")
    _advec_cell(v, dr, sweep, (0, v.nx, 0, v.ny), fld(v, CF_DENSITY1, "advec_cell"), fld(v, CF_ENERGY1, "advec_cell"))


def advec_cell_range(v, dr, sweep, r, out):
    """Over the cells of r, into out's density1 and energy1."""
    _check_dir(dr, "advec_cell_range")
    c = clip_range(r, v.nx, v.ny)
    if c[1] <= c[0] or c[3] <= c[2]:
        return
    _advec_cell(v, dr, sweep, c, fld(out, CF_DENSITY1, "advec_cell_range"), fld(out, CF_ENERGY1, "advec_cell_range"))


def _advec_mom(v, vel, dr, sweep, c, vout):
    """advec_mom of field vel along dr over the nodes of c (clipped, not
    empty), from v's vel into vout (kernels.cu's advec_mom: each pass over
    what the next reads)."""
    w = "advec_mom"
    s = v.stream
    volume, vfx, vfy = fld(v, CF_VOLUME, w), fld(v, CF_VOL_FLUX_X, w), fld(v, CF_VOL_FLUX_Y, w)
    post_vol = fld(v, CF_WORK7, w)
    mom_sweep = dr + 2 * (sweep - 1)
    if dr == 1:
        launch2d(k_mom_post_vol, s, c[0] - 2, c[1], c[2] - 1, c[3] - 1, volume, vfx, vfy, post_vol, mom_sweep)
    else:
        launch2d(k_mom_post_vol, s, c[0] - 1, c[1] - 1, c[2] - 2, c[3], volume, vfx, vfy, post_vol, mom_sweep)
    node_flux, nm_post, nm_pre = fld(v, CF_WORK1, w), fld(v, CF_WORK2, w), fld(v, CF_WORK3, w)
    mom_flux, vel1, density1 = fld(v, CF_WORK5, w), fld(v, vel, w), fld(v, CF_DENSITY1, w)
    if dr == 1:
        launch2d(k_mom_node_x, s, c[0] - 1, c[1], c[2], c[3] - 1, fld(v, CF_MASS_FLUX_X, w), density1, post_vol,
                 node_flux, nm_post, nm_pre)
        launch2d(k_mom_flux_x, s, c[0] - 1, c[1] - 1, c[2], c[3] - 1, geo(v, CG_CELLDX, w), node_flux, nm_pre, vel1,
                 mom_flux)
        launch2d(k_mom_update, s, c[0], c[1] - 1, c[2], c[3] - 1, mom_flux, nm_pre, nm_post, vel1, vout, 1, 0)
        return
    launch2d(k_mom_node_y, s, c[0], c[1] - 1, c[2] - 1, c[3], fld(v, CF_MASS_FLUX_Y, w), density1, post_vol,
             node_flux, nm_post, nm_pre)
    launch2d(k_mom_flux_y, s, c[0], c[1] - 1, c[2] - 1, c[3] - 1, geo(v, CG_CELLDY, w), node_flux, nm_pre, vel1,
             mom_flux)
    launch2d(k_mom_update, s, c[0], c[1] - 1, c[2], c[3] - 1, mom_flux, nm_pre, nm_post, vel1, vout, 0, 1)


def advec_mom(v, vel, dr, sweep):
    _check_dir(dr, "advec_mom")
    _advec_mom(v, vel, dr, sweep, (0, v.nx + 1, 0, v.ny + 1), fld(v, vel, "advec_mom"))


def advec_mom_range(v, vel, dr, sweep, r, out):
    """Over the nodes of r, into out's vel."""
    _check_dir(dr, "advec_mom_range")
    c = clip_range(r, v.nx + 1, v.ny + 1)
    if c[1] <= c[0] or c[3] <= c[2]:
        return
    _advec_mom(v, vel, dr, sweep, c, fld(out, vel, "advec_mom_range"))


def reset_field(v):
    w = "reset_field"
    launch2d(k_reset_field, v.stream, 0, v.nx, 0, v.ny, fld(v, CF_DENSITY1, w), fld(v, CF_ENERGY1, w),
             fld(v, CF_XVEL1, w), fld(v, CF_YVEL1, w), fld(v, CF_DENSITY0, w), fld(v, CF_ENERGY0, w),
             fld(v, CF_XVEL0, w), fld(v, CF_YVEL0, w), v.nx, v.ny)


def field_summary(v, sums):
    """clover_cu_field_summary: the chunk's volume, mass, internal and
    kinetic energy and pressure sums added into sums[CS_N] (a device array:
    the task's copy of the SUM reduction).  With WORK1 the runs' partials
    go through it, else one block does all (the same bits)."""
    w = "field_summary"
    n = v.nx * v.ny
    nb = min((n + SUM_T - 1) // SUM_T, SUM_NB_MAX)
    ln = (n + nb - 1) // nb
    args = (fld(v, CF_VOLUME, w), fld(v, CF_DENSITY0, w), fld(v, CF_ENERGY0, w), fld(v, CF_PRESSURE, w),
            fld(v, CF_XVEL0, w), fld(v, CF_YVEL0, w), n, ln, v.nx)
    work = v.f[CF_WORK1]   # nb * CS_N <= (nx + 5) * (ny + 5) doubles
    if work is None:
        _launch(k_summary_one, (1,), (SUM_T,), v.stream, args + (nb, sums))
        return
    part = work.reshape(work.size)
    _launch(k_summary_runs, (nb,), (SUM_T,), v.stream, args + (part,))
    _launch(k_summary_fold, (1,), (SUM_T,), v.stream, (nb, part, sums))


def _reflect_batch(v, batch, depth, edges):
    """One launch per phase for the distinct fields of batch: bottom and
    top over the full width, then left and right over the full height, in
    halo.c's order."""
    if not batch:
        return
    arrays = tuple(v.f[f] for f in batch)
    fields = tuple(batch)
    gx = (v.nx + 1 + 2 * depth + REFLECT_T - 1) // REFLECT_T
    gy = (v.ny + 1 + 2 * depth + REFLECT_T - 1) // REFLECT_T
    for edge, phase, g in ((CLOVER_BOTTOM, PH_BOTTOM, gx), (CLOVER_TOP, PH_TOP, gx), (CLOVER_LEFT, PH_LEFT, gy),
                           (CLOVER_RIGHT, PH_RIGHT, gy)):
        if edges & edge:
            _launch(k_reflect, (g, len(batch)), (REFLECT_T,), v.stream, (phase, arrays, fields, depth, v.nx, v.ny))


def reflect(v, fields, nfields, depth, edges):
    """clover_cu_reflect: the ghost layers (depth 1 or 2) of the fields at
    the mesh's faces in `edges`; fields the view lacks are skipped, as
    kernels.cu skips a NULL field.  The fields go in batches of distinct
    fields (a field named again: what is batched so far runs first, as
    halo.c reflects each field in turn)."""
    if depth < 1:
        return
    depth = min(depth, 2)
    batch = []
    for i in range(nfields):
        f = int(fields[i])
        if f < 0 or f >= CF_NFIELDS or v.f[f] is None:
            continue
        if f in batch:
            _reflect_batch(v, batch, depth, edges)
            batch = []
        batch.append(f)
    _reflect_batch(v, batch, depth, edges)


def halo_unpack(v, stage, fields, nfields, blocks):
    """A border job's staged update (call_cuda.c's unpack): the blocks of
    each field's staging array copied into the field.  blocks[i] lists
    field fields[i]'s blocks (clover_halo_recv_blocks) as rows of
    (recv_off, rows, cols), recv_off an element offset; a row of rows 0
    ends the list (kernels_numba.halo_unpack's argument)."""
    pitch = v.nx + 5
    for i in range(nfields):
        f = int(fields[i])
        dst, src = fld(v, f, "halo_unpack"), fld(stage, f, "halo_unpack")
        for b in range(blocks.shape[1]):
            off, rows, cols = (int(x) for x in blocks[i, b])
            if rows == 0:
                break
            r, c = divmod(off, pitch)
            # launch2d takes C's indices: array row r is C's r - G
            launch2d(k_copy, v.stream, c - G, c + cols - 1 - G, r - G, r + rows - 1 - G, dst, src)
