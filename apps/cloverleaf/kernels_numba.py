"""CloverLeaf's kernels in Python, compiled by Numba: one function per C
kernel of kernels.c, advec.c and halo.c (the mesh boundary's reflection
and a staged update's unpack), with the C names less their clover_k_
prefix, the C arguments in the C order, the C loops and each expression's
operations in the C order (no fastmath), so that they give the C kernels'
values bit for bit.  Read it beside kernels.c and advec.c.

Every function is @numba.njit(nogil=True, cache=True): the GIL is released
while a kernel runs, so tasks calling them on Weft's workers run in
parallel, and the compiled code is kept in __pycache__ for the next run.

The arrays.  A kernel gets a View (the C clover_view): nx, ny, f (a tuple
of the CF_NFIELDS fields, each a 2-D C-contiguous float64 array of shape
(ny + 5, nx + 5); a field the kernel does not touch may be any such
array, as C's NULL) and geom (the geometry array, 1-D).  Indices here are
the arrays' own: a C loop over j in [0, nx) is a loop over j in
[G, nx + G) here, C's row(v, f, k)[j] is row(f_x, k)[j] with f_x = v.f[f]
and k the array's row, and C's j + 1 is j + 1 here too; so every
expression reads as the C one, and only loop bounds and explicit
positions (C's nx + 1 is nx + 1 + G) carry the G = 2 ghost offset.  A
sub-range (C's clover_range) is the tuple (j0, j1, k0, k1) in C's
(unshifted) indices, as clover_split makes it.

Where the C kernels stage values in rows of a block (viscosity, calc_dt:
to take the square roots in a vector loop), the same value is computed in
one loop here: the operations on each element are the same, only the
order across elements differs, which no result depends on.

Rows are raw pointers.  A function takes each field it uses out of the
View once, at its start (f_density1 = v.f[CF_DENSITY1]), and a row as
row(f_density1, k), a CPointer(float64) (geometry arrays: geo(), also a
pointer).  A row as an array (v.f[f][k]) is a view holding a reference:
NRT_incref and NRT_decref, atomic and never inlined, per row taken, and
v.f[f] with a run-time f (advec_mom's vel) increfs and decrefs all 25
fields of the tuple; in the loops over rows that was a quarter of
advec_mom's time, and the two workers' atomics meet on the same
counters.  A pointer holds no reference: it is valid while the View's
arrays are, for the whole call.  Indexing a pointer has no negative-index
wraparound either (p[j - 1] is one load).

In place is out=None.  advec_cell and advec_mom update in place by
passing out=None (not out=v): the update then writes the row it read,
through the same pointer, which LLVM vectorises with no check; with a
second View it cannot prove the rows apart, checks their overlap when
the loop starts, finds it, and runs the scalar loop.

Written so that LLVM vectorises the loops over a row's columns:
- the column loops are while loops (j = start; while j < stop: ...;
  j += 1), and a loop start that comes from a parameter (a range's c[0],
  a helper's j0) is checked at the function's entry (if j0 < 1: raise
  IndexError).  Over arrays both are needed: Numba's range iterator adds
  the step without a no-overflow flag, so LLVM cannot prove the index
  non-negative and every a[j] keeps Numba's negative-index wraparound,
  which leaves the loop scalar or makes it gather and scatter (4-5x
  slower).  Over pointer rows a range() loop vectorises as well; calc_dt's
  mrow is an array, and needs them;
- an input chosen by the flow's sign from two rows or columns (the
  advections' upwind cells) is chosen with pick(c, a, b), one LLVM select
  of two plain loads: Python's `a if c else b` compiles to branches,
  which LLVM turns into one load through a selected address (a gather);
- a minimum over a row (calc_dt) is a scalar loop after the vector loop
  that stores each cell's value, as in C (a floating-point minimum
  vectorises only under fastmath, which would change results);
- advec.c's fused row loop of advec_mom_y (six rows written, about
  twenty read in one loop) stays scalar under LLVM ("too many memory
  checks needed": it cannot prove the rows apart, and the run-time
  overlap checks it would need are over its limit; raising the limit,
  -runtime-memory-check-threshold, still left it scalar), so here each
  quantity has a loop of its own, as in advec_mom_y's first rows.
To check a kernel: NUMBA_CACHE_DIR=<an empty folder> (cached code cannot
be inspected), call it, then look for vgatherqpd / vscatterqpd in
f.inspect_asm(f.signatures[0]), for vector.body in f.inspect_llvm(...),
and count the calls (NRT_incref, NRT_decref) inside its loops; LLVM says
why a loop stays scalar when llvmlite.binding.set_option("",
"-pass-remarks-missed=loop-vectorize") is called before the compile.
"""
import math
from collections import namedtuple

import numba
import numpy as np
from numba.core import types
from numba.core.extending import intrinsic

__all__ = ["View", "Deck", "G", "initialise", "generate", "ideal_gas", "viscosity", "viscosity_range", "calc_dt",
           "pdv", "revert", "accelerate", "accelerate_range", "flux_calc", "advec_cell", "advec_cell_range",
           "advec_mom", "advec_mom_range", "reset_field", "field_summary", "reflect", "halo_unpack", "split",
           "split_xy", "advec_split", "call_ranges", "deck_of"]

# error_model="numpy": a division by zero gives IEEE's inf or NaN, as in C
# (Numba's default raises ZeroDivisionError, and its check per division
# keeps loops from vectorising)
jit = numba.njit(nogil=True, cache=True, error_model="numpy")
jit_inline = numba.njit(nogil=True, cache=True, error_model="numpy", inline="always")   # helpers inlined in Numba's IR

G = 2   # ghost layers: C's index j is array index j + G

# clover.h's fields, geometry arrays, states' geometries, edges, sums
(CF_DENSITY0, CF_DENSITY1, CF_ENERGY0, CF_ENERGY1, CF_PRESSURE, CF_VISCOSITY, CF_SOUNDSPEED,
 CF_XVEL0, CF_XVEL1, CF_YVEL0, CF_YVEL1, CF_VOL_FLUX_X, CF_VOL_FLUX_Y, CF_MASS_FLUX_X, CF_MASS_FLUX_Y,
 CF_VOLUME, CF_XAREA, CF_YAREA, CF_WORK1, CF_WORK2, CF_WORK3, CF_WORK4, CF_WORK5, CF_WORK6,
 CF_WORK7) = range(25)
CF_NFIELDS = 25
CG_CELLX, CG_CELLDX, CG_VERTEXX, CG_VERTEXDX, CG_CELLY, CG_CELLDY, CG_VERTEXY, CG_VERTEXDY = range(8)
CLOVER_GEOM_RECTANGLE, CLOVER_GEOM_CIRCLE, CLOVER_GEOM_POINT = 1, 2, 3
CLOVER_LEFT, CLOVER_RIGHT, CLOVER_BOTTOM, CLOVER_TOP = 1, 2, 4, 8
CS_VOL, CS_MASS, CS_IE, CS_KE, CS_PRESS, CS_N = range(6)

# kernels_int.h: the reference declares these REAL(KIND=8) but gives them
# single precision literals, so their values are the float's.
G_SMALL = float(np.float32(1.0e-16))
G_BIG = float(np.float32(1.0e+21))

View = namedtuple("View", ["nx", "ny", "f", "geom"])
View.__doc__ = "clover_view: nx, ny, f (CF_NFIELDS 2-D float64 arrays), geom (1-D float64)."

# The deck's values the kernels read (clover_deck): the mesh, the time-step
# safety factors, and the states as rows of `states` (STATE_* columns).
Deck = namedtuple("Deck", ["xmin", "ymin", "xmax", "ymax", "x_cells", "y_cells", "dtc_safe", "dtu_safe", "dtv_safe",
                           "dtdiv_safe", "nstates", "states"])
(ST_DENSITY, ST_ENERGY, ST_XVEL, ST_YVEL, ST_GEOMETRY, ST_XMIN, ST_XMAX, ST_YMIN, ST_YMAX, ST_RADIUS) = range(10)


def deck_of(d):
    """A Deck of a ctypes clover_deck (cloverleaf.py's CloverDeck)."""
    st = np.zeros((max(d.nstates, 1), 10))
    for s in range(d.nstates):
        x = d.state[s]
        st[s] = (x.density, x.energy, x.xvel, x.yvel, x.geometry, x.xmin, x.xmax, x.ymin, x.ymax, x.radius)
    return Deck(d.xmin, d.ymin, d.xmax, d.ymax, d.x_cells, d.y_cells, d.dtc_safe, d.dtu_safe, d.dtv_safe,
                d.dtdiv_safe, d.nstates, st)


# ---- small helpers (kernels_int.h) -----------------------------------------

@intrinsic
def pick(typingctx, c, a, b):
    """a if c else b, as one LLVM select of the two values (both evaluated).
    Python's conditional expression compiles to two branches, and LLVM then
    sinks the two loads that feed it into one load through a selected
    address, which vectorises only as a gather."""
    if not isinstance(c, types.Boolean) or a != b:
        raise numba.errors.TypingError(f"pick(c, a, b) takes a bool and two values of one type, got {c}, {a}, {b}")

    def codegen(context, builder, signature, args):
        return builder.select(args[0], args[1], args[2])
    return a(c, a, b), codegen


@intrinsic
def row(typingctx, a, k):
    """Row k of a 2-D C-contiguous float64 array, as a raw pointer to its
    first element (types.CPointer: p[j] is one load or store at p + j, as
    C's row(v, f, k)[j]).  A row as an array (a[k]) is a view that holds a
    reference: taking it costs two atomic operations (NRT_incref and
    NRT_decref, calls LLVM cannot remove), a few hundred per row of
    advec_mom.  The pointer holds none: it is valid while a is, which the
    caller's View guarantees for the whole call."""
    if not (isinstance(a, types.Array) and a.ndim == 2 and a.layout == "C" and a.dtype == types.float64
            and isinstance(k, types.Integer)):
        raise numba.errors.TypingError(f"row(a, k) takes a 2-D C-contiguous float64 array and an int, got {a}, {k}")

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        k = context.cast(builder, args[1], signature.args[1], types.intp)
        ncols = builder.extract_value(ary.shape, 1)
        return builder.gep(ary.data, [builder.mul(k, ncols)], inbounds=True)
    return types.CPointer(types.float64)(a, k), codegen


@intrinsic
def at(typingctx, a, o):
    """A raw pointer to element o of a 1-D C-contiguous float64 array (see row)."""
    if not (isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C" and a.dtype == types.float64
            and isinstance(o, types.Integer)):
        raise numba.errors.TypingError(f"at(a, o) takes a 1-D C-contiguous float64 array and an int, got {a}, {o}")

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        o = context.cast(builder, args[1], signature.args[1], types.intp)
        return builder.gep(ary.data, [o], inbounds=True)
    return types.CPointer(types.float64)(a, o), codegen


@jit
def dmin2(a, b):
    return a if a < b else b


@jit
def dmax2(a, b):
    return a if a > b else b


@jit
def geo(v, which):
    """Geometry array `which` (clover_geom_offset), indexed as the fields' j
    (or k): a raw pointer into v.geom (see row)."""
    nx, ny = v.nx, v.ny
    if which < CG_CELLY:
        return at(v.geom, which * (nx + 5))
    return at(v.geom, 4 * (nx + 5) + (which - CG_CELLY) * (ny + 5))


@jit
def ring2(r):
    """The array row of C's RING2(f, r) for array row r (C's r - G)."""
    return (r - G + 6) % 2


@jit
def ring3(r):
    """The array row of C's RING3(f, r) for array row r (C's r - G)."""
    return (r - G + 6) % 3


@jit
def clip(r, dx, dy):
    """r intersected with the domain [0, dx) x [0, dy) (C's indices)."""
    return (max(r[0], 0), min(r[1], dx), max(r[2], 0), min(r[3], dy))


# ---- sub-ranges (clover_split) ---------------------------------------------

@jit
def split_xy(dx, dy, mx, my):
    """The interior, then the bottom, top, left and right strips (C's indices)."""
    j0 = min(mx, dx)
    j1 = max(dx - mx, j0)
    k0 = min(my, dy)
    k1 = max(dy - my, k0)
    return ((j0, j1, k0, k1), (0, dx, 0, k0), (0, dx, k1, dy), (0, j0, k0, k1), (j1, dx, k0, k1))


@jit
def split(dx, dy, margin):
    return split_xy(dx, dy, margin, margin)


@jit
def advec_split(nx, ny, mom, dr):
    along, across = 2, (1 if mom else 0)
    if mom:
        return split_xy(nx + 1, ny + 1, along if dr == 1 else across, across if dr == 1 else along)
    return split_xy(nx, ny, along if dr == 1 else across, across if dr == 1 else along)


def call_ranges(kern_is_accelerate, kern_is_advec, kern_is_mom, nx, ny, b, part_interior):
    """call.c's clover_call_ranges: the ranges a split call computes."""
    dx, dy = (nx + 1, ny + 1) if kern_is_accelerate else (nx, ny)
    p = advec_split(nx, ny, kern_is_mom, b) if kern_is_advec else split(dx, dy, 1)
    return p[:1] if part_interior else p[1:]


# ---- initialise and generate -----------------------------------------------

@jit
def initialise(v, d, c_x0, c_y0):
    """clover_k_initialise (the chunk given by its first cell, c_x0, c_y0)."""
    f_volume = v.f[CF_VOLUME]
    f_xarea = v.f[CF_XAREA]
    f_yarea = v.f[CF_YAREA]
    nx, ny = v.nx, v.ny
    dx = (d.xmax - d.xmin) / float(d.x_cells)
    dy = (d.ymax - d.ymin) / float(d.y_cells)
    cellx, celldx = geo(v, CG_CELLX), geo(v, CG_CELLDX)
    vertexx, vertexdx = geo(v, CG_VERTEXX), geo(v, CG_VERTEXDX)
    celly, celldy = geo(v, CG_CELLY), geo(v, CG_CELLDY)
    vertexy, vertexdy = geo(v, CG_VERTEXY), geo(v, CG_VERTEXDY)
    j = 0
    while j < nx + 5:
        x = d.xmin + dx * float(c_x0 + j - G)
        xr = d.xmin + dx * float(c_x0 + j - G + 1)
        vertexx[j] = x
        vertexdx[j] = dx
        cellx[j] = 0.5 * (x + xr)
        celldx[j] = dx
        j += 1
    for k in range(0, ny + 5):
        y = d.ymin + dy * float(c_y0 + k - G)
        yt = d.ymin + dy * float(c_y0 + k - G + 1)
        vertexy[k] = y
        vertexdy[k] = dy
        celly[k] = 0.5 * (y + yt)
        celldy[k] = dy
    vol = dx * dy
    for k in range(0, ny + 5):
        volume = row(f_volume, k)
        xarea = row(f_xarea, k)
        yarea = row(f_yarea, k)
        cdy = celldy[k]
        j = 0
        while j < nx + 5:
            volume[j] = vol
            xarea[j] = cdy
            yarea[j] = celldx[j]
            j += 1


@jit
def set_node_block(v, j, k, xv, yv):
    f_xvel0 = v.f[CF_XVEL0]
    f_yvel0 = v.f[CF_YVEL0]
    for kt in range(k, k + 2):
        xvel0 = row(f_xvel0, kt)
        yvel0 = row(f_yvel0, kt)
        xvel0[j] = xv
        xvel0[j + 1] = xv
        yvel0[j] = yv
        yvel0[j + 1] = yv


@jit
def generate(v, d):
    f_density0 = v.f[CF_DENSITY0]
    f_energy0 = v.f[CF_ENERGY0]
    f_xvel0 = v.f[CF_XVEL0]
    f_yvel0 = v.f[CF_YVEL0]
    nx, ny = v.nx, v.ny
    s1 = d.states[0]
    cellx, celly = geo(v, CG_CELLX), geo(v, CG_CELLY)
    vertexx, vertexy = geo(v, CG_VERTEXX), geo(v, CG_VERTEXY)
    for k in range(0, ny + 5):
        density0 = row(f_density0, k)
        energy0 = row(f_energy0, k)
        xvel0 = row(f_xvel0, k)
        yvel0 = row(f_yvel0, k)
        j = 0
        while j < nx + 5:
            density0[j] = s1[ST_DENSITY]
            energy0[j] = s1[ST_ENERGY]
            xvel0[j] = s1[ST_XVEL]
            yvel0[j] = s1[ST_YVEL]
            j += 1
    for s in range(1, d.nstates):
        st = d.states[s]
        geometry = int(st[ST_GEOMETRY])
        xc, yc = st[ST_XMIN], st[ST_YMIN]
        for k in range(0, ny + 1 + G + 1):
            density0 = row(f_density0, k)
            energy0 = row(f_energy0, k)
            j = 0
            while j < nx + 1 + G + 1:
                hit = False
                if geometry == CLOVER_GEOM_RECTANGLE:
                    hit = (vertexx[j + 1] >= st[ST_XMIN] and vertexx[j] < st[ST_XMAX]
                           and vertexy[k + 1] >= st[ST_YMIN] and vertexy[k] < st[ST_YMAX])
                elif geometry == CLOVER_GEOM_CIRCLE:
                    r = math.sqrt((cellx[j] - xc) * (cellx[j] - xc) + (celly[k] - yc) * (celly[k] - yc))
                    hit = r <= st[ST_RADIUS]
                elif geometry == CLOVER_GEOM_POINT:
                    hit = vertexx[j] == xc and vertexy[k] == yc
                if hit:
                    energy0[j] = st[ST_ENERGY]
                    density0[j] = st[ST_DENSITY]
                    set_node_block(v, j, k, st[ST_XVEL], st[ST_YVEL])
                j += 1


# ---- equation of state, viscosity, time step -------------------------------

@jit
def ideal_gas(v, predict):
    f_pressure = v.f[CF_PRESSURE]
    f_soundspeed = v.f[CF_SOUNDSPEED]
    nx, ny = v.nx, v.ny
    fd = CF_DENSITY1 if predict else CF_DENSITY0
    fe = CF_ENERGY1 if predict else CF_ENERGY0
    f_fd = v.f[fd]
    f_fe = v.f[fe]
    gm1 = 1.4 - 1.0
    for k in range(G, ny + G):
        density = row(f_fd, k)
        energy = row(f_fe, k)
        pressure = row(f_pressure, k)
        soundspeed = row(f_soundspeed, k)
        j = G
        while j < nx + G:
            dn = density[j]
            vv = 1.0 / dn
            p = gm1 * dn * energy[j]
            pbe = gm1 * dn
            pbv = -dn * p
            ss2 = vv * vv * (p * pbe - pbv)
            pressure[j] = p
            soundspeed[j] = math.sqrt(ss2)
            j += 1


@jit
def viscosity(v):
    viscosity_range(v, (0, v.nx, 0, v.ny))


@jit
def viscosity_range(v, r):
    f_density0 = v.f[CF_DENSITY0]
    f_pressure = v.f[CF_PRESSURE]
    f_xvel0 = v.f[CF_XVEL0]
    f_yvel0 = v.f[CF_YVEL0]
    f_viscosity = v.f[CF_VISCOSITY]
    c = clip(r, v.nx, v.ny)
    if c[1] <= c[0]:
        return
    celldx = geo(v, CG_CELLDX)
    celldy = geo(v, CG_CELLDY)
    for k in range(c[2] + G, c[3] + G):
        density0 = row(f_density0, k)
        pm = row(f_pressure, k - 1)
        p0 = row(f_pressure, k)
        pp = row(f_pressure, k + 1)
        xv0 = row(f_xvel0, k)
        xv1 = row(f_xvel0, k + 1)
        yv0 = row(f_yvel0, k)
        yv1 = row(f_yvel0, k + 1)
        visc = row(f_viscosity, k)
        cdy = celldy[k]
        cdy2 = celldy[k] + celldy[k + 1]
        j = c[0] + G
        while j < c[1] + G:
            cdx = celldx[j]
            ugrad = (xv0[j + 1] + xv1[j + 1]) - (xv0[j] + xv1[j])
            vgrad = (yv1[j] + yv1[j + 1]) - (yv0[j] + yv0[j + 1])
            div = cdx * ugrad + cdy * vgrad
            strain2 = (0.5 * (xv1[j] + xv1[j + 1] - xv0[j] - xv0[j + 1]) / cdy
                       + 0.5 * (yv0[j + 1] + yv1[j + 1] - yv0[j] - yv1[j]) / cdx)
            pgradx = (p0[j + 1] - p0[j - 1]) / (cdx + celldx[j + 1])
            pgrady = (pp[j] - pm[j]) / cdy2
            pgradx2 = pgradx * pgradx
            pgrady2 = pgrady * pgrady
            limiter = (((0.5 * ugrad / cdx) * pgradx2 + (0.5 * vgrad / cdy) * pgrady2 + strain2 * pgradx * pgrady)
                       / dmax2(pgradx2 + pgrady2, 1.0e-16))
            ax = dmax2(1.0e-16, abs(pgradx))
            ay = dmax2(1.0e-16, abs(pgrady))
            pgrad = math.sqrt(ax * ax + ay * ay)
            xgrad = abs(cdx * pgrad / ax)
            ygrad = abs(cdy * pgrad / ay)
            grad = dmin2(xgrad, ygrad)
            grad2 = grad * grad
            q = 2.0 * density0[j] * grad2 * limiter * limiter
            visc[j] = 0.0 if (limiter > 0.0) or (div >= 0.0) else q
            j += 1


@jit
def calc_dt(v, d, c_x0, c_y0):
    """clover_k_calc_dt: (dt, control, j, k) of the chunk whose first cell is c_x0, c_y0."""
    f_xarea = v.f[CF_XAREA]
    f_yarea = v.f[CF_YAREA]
    f_volume = v.f[CF_VOLUME]
    f_density0 = v.f[CF_DENSITY0]
    f_viscosity = v.f[CF_VISCOSITY]
    f_soundspeed = v.f[CF_SOUNDSPEED]
    f_xvel0 = v.f[CF_XVEL0]
    f_yvel0 = v.f[CF_YVEL0]
    nx, ny = v.nx, v.ny
    celldx = geo(v, CG_CELLDX)
    celldy = geo(v, CG_CELLDY)
    dtc_safe, dtu_safe = d.dtc_safe, d.dtu_safe
    dtv_safe, dtdiv_safe = d.dtv_safe, d.dtdiv_safe
    out_dt, out_control, out_j, out_k = G_BIG, 1, c_x0 + 1, c_y0 + 1
    mrow = np.empty(nx + G)   # each cell's dt, a row at a time
    for k in range(G, ny + G):
        xarea = row(f_xarea, k)
        ya0 = row(f_yarea, k)
        ya1 = row(f_yarea, k + 1)
        volume = row(f_volume, k)
        density0 = row(f_density0, k)
        visc = row(f_viscosity, k)
        ss = row(f_soundspeed, k)
        xv0 = row(f_xvel0, k)
        xv1 = row(f_xvel0, k + 1)
        yv0 = row(f_yvel0, k)
        yv1 = row(f_yvel0, k + 1)
        dsy = celldy[k]
        # each cell's dt into a row (a vector loop), the row's minimum in
        # the reference's order (a scalar loop, as C's: a minimum
        # vectorises only under fastmath), then locate it only when it
        # beats the best so far (the row's loop as _cell_dt, written out:
        # a helper taking the rows as arguments costs their reference
        # counts on every cell)
        j = G
        while j < nx + G:
            dsx = celldx[j]
            cc = ss[j] * ss[j]
            cc = cc + 2.0 * visc[j] / density0[j]
            cc = dmax2(math.sqrt(cc), G_SMALL)
            dtct = dtc_safe * dmin2(dsx, dsy) / cc
            dv1 = (xv0[j] + xv1[j]) * xarea[j]
            dv2 = (xv0[j + 1] + xv1[j + 1]) * xarea[j + 1]
            div = dv2 - dv1
            dtut = dtu_safe * 2.0 * volume[j] / dmax2(dmax2(abs(dv1), abs(dv2)), G_SMALL * volume[j])
            dv1 = (yv0[j] + yv0[j + 1]) * ya0[j]
            dv2 = (yv1[j] + yv1[j + 1]) * ya1[j]
            div = div + dv2 - dv1
            dtvt = dtv_safe * 2.0 * volume[j] / dmax2(dmax2(abs(dv1), abs(dv2)), G_SMALL * volume[j])
            div = div / (2.0 * volume[j])
            dtdivt = dtdiv_safe * (-1.0 / div) if div < -G_SMALL else G_BIG
            mrow[j] = dmin2(dmin2(dtct, dtut), dmin2(dtvt, dtdivt))
            j += 1
        rmin = G_BIG
        j = G
        while j < nx + G:
            rmin = dmin2(rmin, mrow[j])
            j += 1
        if not (rmin < out_dt):
            continue
        # recompute this row to find the first cell holding the minimum
        # and which limit set it (sound, xvel, yvel, div, in that order)
        j = G
        while j < nx + G:
            m, dtct, dtut, dtvt = _cell_dt(j, celldx, dsy, xarea, ya0, ya1, volume, density0, visc, ss, xv0, xv1,
                                           yv0, yv1, dtc_safe, dtu_safe, dtv_safe, dtdiv_safe)
            if m == rmin:
                out_dt = m
                out_control = 1 if m == dtct else 2 if m == dtut else 3 if m == dtvt else 4
                out_j = c_x0 + j - G + 1
                out_k = c_y0 + k - G + 1
                break
            j += 1
    return out_dt, out_control, out_j, out_k


@jit_inline
def _cell_dt(j, celldx, dsy, xarea, ya0, ya1, volume, density0, visc, ss, xv0, xv1, yv0, yv1, dtc_safe, dtu_safe,
             dtv_safe, dtdiv_safe):
    """One cell's dt and its sound, xvel and yvel limits (calc_dt's loop body)."""
    dsx = celldx[j]
    cc = ss[j] * ss[j]
    cc = cc + 2.0 * visc[j] / density0[j]
    cc = dmax2(math.sqrt(cc), G_SMALL)
    dtct = dtc_safe * dmin2(dsx, dsy) / cc
    dv1 = (xv0[j] + xv1[j]) * xarea[j]
    dv2 = (xv0[j + 1] + xv1[j + 1]) * xarea[j + 1]
    div = dv2 - dv1
    dtut = dtu_safe * 2.0 * volume[j] / dmax2(dmax2(abs(dv1), abs(dv2)), G_SMALL * volume[j])
    dv1 = (yv0[j] + yv0[j + 1]) * ya0[j]
    dv2 = (yv1[j] + yv1[j + 1]) * ya1[j]
    div = div + dv2 - dv1
    dtvt = dtv_safe * 2.0 * volume[j] / dmax2(dmax2(abs(dv1), abs(dv2)), G_SMALL * volume[j])
    div = div / (2.0 * volume[j])
    dtdivt = dtdiv_safe * (-1.0 / div) if div < -G_SMALL else G_BIG
    return dmin2(dmin2(dtct, dtut), dmin2(dtvt, dtdivt)), dtct, dtut, dtvt


# ---- Lagrangian step -------------------------------------------------------

@jit
def pdv(v, predict, dt):
    """clover_k_pdv: 1 if a cell's volume would turn non-positive, else 0."""
    f_xarea = v.f[CF_XAREA]
    f_yarea = v.f[CF_YAREA]
    f_volume = v.f[CF_VOLUME]
    f_density0 = v.f[CF_DENSITY0]
    f_energy0 = v.f[CF_ENERGY0]
    f_pressure = v.f[CF_PRESSURE]
    f_viscosity = v.f[CF_VISCOSITY]
    f_xvel0 = v.f[CF_XVEL0]
    f_yvel0 = v.f[CF_YVEL0]
    f_density1 = v.f[CF_DENSITY1]
    f_energy1 = v.f[CF_ENERGY1]
    f_xvel1 = v.f[CF_XVEL1]
    f_yvel1 = v.f[CF_YVEL1]
    nx, ny = v.nx, v.ny
    bad = False
    for k in range(G, ny + G):
        xarea = row(f_xarea, k)
        ya0 = row(f_yarea, k)
        ya1 = row(f_yarea, k + 1)
        volume = row(f_volume, k)
        density0 = row(f_density0, k)
        energy0 = row(f_energy0, k)
        pressure = row(f_pressure, k)
        visc = row(f_viscosity, k)
        xa0 = row(f_xvel0, k)
        xa1 = row(f_xvel0, k + 1)
        ya_0 = row(f_yvel0, k)
        ya_1 = row(f_yvel0, k + 1)
        density1 = row(f_density1, k)
        energy1 = row(f_energy1, k)
        rowbad = False
        if predict:
            # the predictor uses the start-of-step velocities twice
            xb0, xb1, yb0, yb1 = xa0, xa1, ya_0, ya_1
            j = G
            while j < nx + G:
                left = (xarea[j] * (xa0[j] + xa1[j] + xb0[j] + xb1[j])) * 0.25 * dt * 0.5
                right = (xarea[j + 1] * (xa0[j + 1] + xa1[j + 1] + xb0[j + 1] + xb1[j + 1])) * 0.25 * dt * 0.5
                bottom = (ya0[j] * (ya_0[j] + ya_0[j + 1] + yb0[j] + yb0[j + 1])) * 0.25 * dt * 0.5
                top = (ya1[j] * (ya_1[j] + ya_1[j + 1] + yb1[j] + yb1[j + 1])) * 0.25 * dt * 0.5
                total = right - left + top - bottom
                vol = volume[j]
                vc = vol / (vol + total)
                minvol = dmin2(dmin2(vol + right - left + top - bottom, vol + right - left), vol + top - bottom)
                rowbad |= minvol <= 0.0
                recip = 1.0 / vol
                echg = (pressure[j] / density0[j] + visc[j] / density0[j]) * total * recip
                energy1[j] = energy0[j] - echg
                density1[j] = density0[j] * vc
                j += 1
        else:
            xb0 = row(f_xvel1, k)
            xb1 = row(f_xvel1, k + 1)
            yb0 = row(f_yvel1, k)
            yb1 = row(f_yvel1, k + 1)
            j = G
            while j < nx + G:
                left = (xarea[j] * (xa0[j] + xa1[j] + xb0[j] + xb1[j])) * 0.25 * dt
                right = (xarea[j + 1] * (xa0[j + 1] + xa1[j + 1] + xb0[j + 1] + xb1[j + 1])) * 0.25 * dt
                bottom = (ya0[j] * (ya_0[j] + ya_0[j + 1] + yb0[j] + yb0[j + 1])) * 0.25 * dt
                top = (ya1[j] * (ya_1[j] + ya_1[j + 1] + yb1[j] + yb1[j + 1])) * 0.25 * dt
                total = right - left + top - bottom
                vol = volume[j]
                vc = vol / (vol + total)
                minvol = dmin2(dmin2(vol + right - left + top - bottom, vol + right - left), vol + top - bottom)
                rowbad |= minvol <= 0.0
                recip = 1.0 / vol
                echg = (pressure[j] / density0[j] + visc[j] / density0[j]) * total * recip
                energy1[j] = energy0[j] - echg
                density1[j] = density0[j] * vc
                j += 1
        bad |= rowbad
    return 1 if bad else 0


@jit
def revert(v):
    f_density0 = v.f[CF_DENSITY0]
    f_energy0 = v.f[CF_ENERGY0]
    f_density1 = v.f[CF_DENSITY1]
    f_energy1 = v.f[CF_ENERGY1]
    nx, ny = v.nx, v.ny
    for k in range(G, ny + G):
        d0 = row(f_density0, k)
        e0 = row(f_energy0, k)
        d1 = row(f_density1, k)
        e1 = row(f_energy1, k)
        j = G
        while j < nx + G:
            d1[j] = d0[j]
            e1[j] = e0[j]
            j += 1


@jit
def accelerate(v, dt):
    accelerate_range(v, dt, (0, v.nx + 1, 0, v.ny + 1))


@jit
def accelerate_range(v, dt, r):
    """Over the nodes: C's j in [0, nx], k in [0, ny]."""
    f_density0 = v.f[CF_DENSITY0]
    f_volume = v.f[CF_VOLUME]
    f_xarea = v.f[CF_XAREA]
    f_yarea = v.f[CF_YAREA]
    f_pressure = v.f[CF_PRESSURE]
    f_viscosity = v.f[CF_VISCOSITY]
    f_xvel0 = v.f[CF_XVEL0]
    f_yvel0 = v.f[CF_YVEL0]
    f_xvel1 = v.f[CF_XVEL1]
    f_yvel1 = v.f[CF_YVEL1]
    c = clip(r, v.nx + 1, v.ny + 1)
    halfdt = 0.5 * dt
    for k in range(c[2] + G, c[3] + G):
        dm = row(f_density0, k - 1)
        d0 = row(f_density0, k)
        vm = row(f_volume, k - 1)
        v0 = row(f_volume, k)
        xam = row(f_xarea, k - 1)
        xa0 = row(f_xarea, k)
        ya0 = row(f_yarea, k)
        pm = row(f_pressure, k - 1)
        p0 = row(f_pressure, k)
        qm = row(f_viscosity, k - 1)
        q0 = row(f_viscosity, k)
        xvel0 = row(f_xvel0, k)
        yvel0 = row(f_yvel0, k)
        xvel1 = row(f_xvel1, k)
        yvel1 = row(f_yvel1, k)
        j = c[0] + G
        while j < c[1] + G:
            nodal_mass = (dm[j - 1] * vm[j - 1] + dm[j] * vm[j] + d0[j] * v0[j] + d0[j - 1] * v0[j - 1]) * 0.25
            s = halfdt / nodal_mass
            xv = xvel0[j] - s * (xa0[j] * (p0[j] - p0[j - 1]) + xam[j] * (pm[j] - pm[j - 1]))
            yv = yvel0[j] - s * (ya0[j] * (p0[j] - pm[j]) + ya0[j - 1] * (p0[j - 1] - pm[j - 1]))
            xv = xv - s * (xa0[j] * (q0[j] - q0[j - 1]) + xam[j] * (qm[j] - qm[j - 1]))
            yv = yv - s * (ya0[j] * (q0[j] - qm[j]) + ya0[j - 1] * (q0[j - 1] - qm[j - 1]))
            xvel1[j] = xv
            yvel1[j] = yv
            j += 1


@jit
def flux_calc(v, dt):
    f_xarea = v.f[CF_XAREA]
    f_yarea = v.f[CF_YAREA]
    f_xvel0 = v.f[CF_XVEL0]
    f_xvel1 = v.f[CF_XVEL1]
    f_yvel0 = v.f[CF_YVEL0]
    f_yvel1 = v.f[CF_YVEL1]
    f_vol_flux_x = v.f[CF_VOL_FLUX_X]
    f_vol_flux_y = v.f[CF_VOL_FLUX_Y]
    nx, ny = v.nx, v.ny
    qdt = 0.25 * dt
    for k in range(G, ny + 1 + G):
        xarea = row(f_xarea, k)
        yarea = row(f_yarea, k)
        xa0 = row(f_xvel0, k)
        xa1 = row(f_xvel0, k + 1)
        xb0 = row(f_xvel1, k)
        xb1 = row(f_xvel1, k + 1)
        yv0 = row(f_yvel0, k)
        yv1 = row(f_yvel1, k)
        vfx = row(f_vol_flux_x, k)
        vfy = row(f_vol_flux_y, k)
        if k < ny + G:
            j = G
            while j < nx + 1 + G:
                vfx[j] = qdt * xarea[j] * (xa0[j] + xa1[j] + xb0[j] + xb1[j])
                j += 1
        j = G
        while j < nx + G:
            vfy[j] = qdt * yarea[j] * (yv0[j] + yv0[j + 1] + yv1[j] + yv1[j + 1])
            j += 1


@jit
def reset_field(v):
    f_density1 = v.f[CF_DENSITY1]
    f_energy1 = v.f[CF_ENERGY1]
    f_density0 = v.f[CF_DENSITY0]
    f_energy0 = v.f[CF_ENERGY0]
    f_xvel1 = v.f[CF_XVEL1]
    f_yvel1 = v.f[CF_YVEL1]
    f_xvel0 = v.f[CF_XVEL0]
    f_yvel0 = v.f[CF_YVEL0]
    nx, ny = v.nx, v.ny
    for k in range(G, ny + 1 + G):
        if k < ny + G:
            d1 = row(f_density1, k)
            e1 = row(f_energy1, k)
            d0 = row(f_density0, k)
            e0 = row(f_energy0, k)
            j = G
            while j < nx + G:
                d0[j] = d1[j]
                e0[j] = e1[j]
                j += 1
        x1 = row(f_xvel1, k)
        y1 = row(f_yvel1, k)
        x0 = row(f_xvel0, k)
        y0 = row(f_yvel0, k)
        j = G
        while j < nx + 1 + G:
            x0[j] = x1[j]
            y0[j] = y1[j]
            j += 1


# ---- summary ---------------------------------------------------------------

@jit_inline
def csum_add(acc, x):
    """Neumaier's compensated sum: acc = (running sum, error dropped so far)."""
    s, e = acc
    t = s + x
    if abs(s) >= abs(x):
        e += (s - t) + x
    else:
        e += (x - t) + s
    return (t, e)


@jit
def field_summary(v, sums):
    """clover_k_field_summary: the chunk's volume, mass, internal and
    kinetic energy and pressure sums, into sums[CS_N]."""
    f_volume = v.f[CF_VOLUME]
    f_density0 = v.f[CF_DENSITY0]
    f_energy0 = v.f[CF_ENERGY0]
    f_pressure = v.f[CF_PRESSURE]
    f_xvel0 = v.f[CF_XVEL0]
    f_yvel0 = v.f[CF_YVEL0]
    nx, ny = v.nx, v.ny
    vol = (0.0, 0.0)
    mass = (0.0, 0.0)
    ie = (0.0, 0.0)
    ke = (0.0, 0.0)
    press = (0.0, 0.0)
    for k in range(G, ny + G):
        volume = row(f_volume, k)
        density0 = row(f_density0, k)
        energy0 = row(f_energy0, k)
        pressure = row(f_pressure, k)
        xa = row(f_xvel0, k)
        xb = row(f_xvel0, k + 1)
        ya = row(f_yvel0, k)
        yb = row(f_yvel0, k + 1)
        j = G
        while j < nx + G:
            vsqrd = 0.0
            vsqrd = vsqrd + 0.25 * (xa[j] * xa[j] + ya[j] * ya[j])
            vsqrd = vsqrd + 0.25 * (xa[j + 1] * xa[j + 1] + ya[j + 1] * ya[j + 1])
            vsqrd = vsqrd + 0.25 * (xb[j] * xb[j] + yb[j] * yb[j])
            vsqrd = vsqrd + 0.25 * (xb[j + 1] * xb[j + 1] + yb[j + 1] * yb[j + 1])
            cell_vol = volume[j]
            cell_mass = cell_vol * density0[j]
            vol = csum_add(vol, cell_vol)
            mass = csum_add(mass, cell_mass)
            ie = csum_add(ie, cell_mass * energy0[j])
            ke = csum_add(ke, cell_mass * 0.5 * vsqrd)
            press = csum_add(press, cell_vol * pressure[j])
            j += 1
    sums[CS_VOL] = vol[0] + vol[1]
    sums[CS_MASS] = mass[0] + mass[1]
    sums[CS_IE] = ie[0] + ie[1]
    sums[CS_KE] = ke[0] + ke[1]
    sums[CS_PRESS] = press[0] + press[1]


# ---- advection (advec.c) ---------------------------------------------------
#
# The scratch rows are advec.c's (its header says which): rows of the work
# arrays' ghost layers (and rings of them) hold a row's intermediate values.

@jit_inline
def cell_limiter(sigma, sigma3, sigma4, diffuw, diffdw, one_by_six):
    """The reference's van Leer limiter of advec_cell for one quantity."""
    wind = -1.0 if diffdw <= 0.0 else 1.0
    limiter = (1.0 - sigma) * wind * dmin2(dmin2(abs(diffuw), abs(diffdw)),
                                           one_by_six * (sigma3 * abs(diffuw) + sigma4 * abs(diffdw)))
    return limiter if diffuw * diffdw > 0.0 else 0.0


@jit_inline
def cell_flux(vf, dup, ddo, ddn, eup, edo, edn, pvd, ratio, one_by_six):
    """The mass flux through one face and its energy flux (C's *ef)."""
    sigmat = abs(vf) / pvd
    sigma3 = (1.0 + sigmat) * ratio
    sigma4 = 2.0 - sigmat
    mf = vf * (ddo + cell_limiter(sigmat, sigma3, sigma4, ddo - dup, ddn - ddo, one_by_six))
    sigmam = abs(mf) / (ddo * pvd)
    ef = mf * (edo + cell_limiter(sigmam, sigma3, sigma4, edo - eup, edn - edo, one_by_six))
    return mf, ef


@jit_inline
def cell_update(j0, j1, din, ein, dout, eout, pre_vol, m0, m1, e0, e1, f0, f1, o0, o1):
    """advec.c's CELL_UPDATE over array columns [j0, j1): the fluxes on the
    cells' lower/left faces are m0, e0, f0 at [j + o0], the upper/right
    ones m1, e1, f1 at [j + o1]."""
    j = j0
    while j < j1:
        pm = din[j] * pre_vol[j]
        qm = pm + m0[j + o0] - m1[j + o1]
        pe = (ein[j] * pm + e0[j + o0] - e1[j + o1]) / qm
        av = pre_vol[j] + f0[j + o0] - f1[j + o1]
        dout[j] = qm / av
        eout[j] = pe
        j += 1


@jit
def advec_cell_x(v, sweep, c, out):
    """advec_cell along x over the cells of c (C's indices, clipped), into
    out's density1 and energy1 (out None: in place)."""
    f_work2 = v.f[CF_WORK2]
    f_work1 = v.f[CF_WORK1]
    f_work7 = v.f[CF_WORK7]
    f_volume = v.f[CF_VOLUME]
    f_vol_flux_x = v.f[CF_VOL_FLUX_X]
    f_vol_flux_y = v.f[CF_VOL_FLUX_Y]
    f_density1 = v.f[CF_DENSITY1]
    f_energy1 = v.f[CF_ENERGY1]
    f_mass_flux_x = v.f[CF_MASS_FLUX_X]
    if out is None:   # in place: the same rows, so LLVM sees each element read before it is written
        o_density1, o_energy1 = f_density1, f_energy1
    else:
        o_density1, o_energy1 = out.f[CF_DENSITY1], out.f[CF_ENERGY1]
    nx = v.nx
    one_by_six = 1.0 / 6.0
    last = c[1] == nx
    pv1 = nx + 1 + G if last else c[1] + G       # pre_vol of the donors j0 - 1 .. pv1
    J0, J1 = c[0] + G, c[1] + G
    vertexdx = geo(v, CG_VERTEXDX)
    ratio_pos = row(f_work2, 0)
    ratio_neg = row(f_work2, 1)
    j = J0
    while j < J1 + 1:
        ratio_pos[j] = vertexdx[j] / vertexdx[j - 1]
        ratio_neg[j] = vertexdx[j] / vertexdx[j + 1]
        j += 1
    pre_vol = row(f_work1, 0)
    ener_flux = row(f_work7, 0)
    for k in range(c[2] + G, c[3] + G):
        volume = row(f_volume, k)
        vfx = row(f_vol_flux_x, k)
        vfy0 = row(f_vol_flux_y, k)
        vfy1 = row(f_vol_flux_y, k + 1)
        density1 = row(f_density1, k)
        energy1 = row(f_energy1, k)
        mfx = row(f_mass_flux_x, k)
        if sweep == 1:
            j = J0 - 1
            while j < pv1 + 1:
                pre_vol[j] = volume[j] + (vfx[j + 1] - vfx[j] + vfy1[j] - vfy0[j])
                j += 1
        else:
            j = J0 - 1
            while j < pv1 + 1:
                pre_vol[j] = volume[j] + vfx[j + 1] - vfx[j]
                j += 1
        j = J0
        while j < J1 + 1:
            vf = vfx[j]
            pos = vf > 0.0
            mf, ef = cell_flux(vf, pick(pos, density1[j - 2], density1[j + 1]), pick(pos, density1[j - 1], density1[j]),
                               pick(pos, density1[j], density1[j - 1]), pick(pos, energy1[j - 2], energy1[j + 1]),
                               pick(pos, energy1[j - 1], energy1[j]), pick(pos, energy1[j], energy1[j - 1]),
                               pick(pos, pre_vol[j - 1], pre_vol[j]), pick(pos, ratio_pos[j], ratio_neg[j]), one_by_six)
            mfx[j] = mf
            ener_flux[j] = ef
            j += 1
        if last:
            j = nx + 1 + G
            vf = vfx[j]
            if vf > 0.0:
                mf, ef = cell_flux(vf, density1[j - 2], density1[j - 1], density1[j], energy1[j - 2], energy1[j - 1],
                                   energy1[j], pre_vol[j - 1], vertexdx[j] / vertexdx[j - 1], one_by_six)
            else:
                mf, ef = cell_flux(vf, density1[nx + 1 + G], density1[j], density1[j - 1], energy1[nx + 1 + G],
                                   energy1[j], energy1[j - 1], pre_vol[j], vertexdx[j] / vertexdx[nx + 1 + G],
                                   one_by_six)
            mfx[j] = mf
            ener_flux[j] = ef
        # the fluxes of this row read only this row's old values
        cell_update(J0, J1, density1, energy1, row(o_density1, k), row(o_energy1, k), pre_vol, mfx, mfx,
                    ener_flux, ener_flux, vfx, vfx, 0, 1)


@jit
def advec_cell_y(v, sweep, c, out):
    """advec_cell along y over the cells of c, as advec.c's advec_cell_y:
    one pass down the cell rows k = k0 - 1 .. k1 + 1 (pre_vol of row k, the
    fluxes on face k, the update of row k - 2), pre_vol and ener_flux in
    rings of three rows of WORK1 and WORK7."""
    f_volume = v.f[CF_VOLUME]
    f_vol_flux_x = v.f[CF_VOL_FLUX_X]
    f_vol_flux_y = v.f[CF_VOL_FLUX_Y]
    f_work1 = v.f[CF_WORK1]
    f_mass_flux_y = v.f[CF_MASS_FLUX_Y]
    f_work7 = v.f[CF_WORK7]
    f_density1 = v.f[CF_DENSITY1]
    f_energy1 = v.f[CF_ENERGY1]
    if out is None:   # in place: the same rows, so LLVM sees each element read before it is written
        o_density1, o_energy1 = f_density1, f_energy1
    else:
        o_density1, o_energy1 = out.f[CF_DENSITY1], out.f[CF_ENERGY1]
    ny = v.ny
    one_by_six = 1.0 / 6.0
    J0, J1 = c[0] + G, c[1] + G
    K0, K1 = c[2] + G, c[3] + G
    kl = ny + 1 + G if c[3] == ny else K1   # the last face, and the last row of pre_vol
    vertexdy = geo(v, CG_VERTEXDY)
    for k in range(K0 - 1, K1 + 2):
        if k <= kl:
            volume = row(f_volume, k)
            vfx = row(f_vol_flux_x, k)
            vfy0 = row(f_vol_flux_y, k)
            vfy1 = row(f_vol_flux_y, k + 1)
            pv = row(f_work1, ring3(k))
            if sweep == 1:
                j = J0
                while j < J1:
                    pv[j] = volume[j] + (vfy1[j] - vfy0[j] + vfx[j + 1] - vfx[j])
                    j += 1
            else:
                j = J0
                while j < J1:
                    pv[j] = volume[j] + vfy1[j] - vfy0[j]
                    j += 1
        if k >= K0 and k <= kl:
            vfy = row(f_vol_flux_y, k)
            mfy = row(f_mass_flux_y, k)
            ener_flux = row(f_work7, ring3(k))
            up_pos, dn_pos = k - 2, k - 1
            up_neg = k + 1 if k + 1 < ny + 1 + G else ny + 1 + G
            d_upp = row(f_density1, up_pos)
            d_dop = row(f_density1, dn_pos)
            d_k = row(f_density1, k)
            d_upn = row(f_density1, up_neg)
            e_upp = row(f_energy1, up_pos)
            e_dop = row(f_energy1, dn_pos)
            e_k = row(f_energy1, k)
            e_upn = row(f_energy1, up_neg)
            pv_dop = row(f_work1, ring3(dn_pos))
            pv_k = row(f_work1, ring3(k))
            ratio_pos = vertexdy[k] / vertexdy[dn_pos]
            ratio_neg = vertexdy[k] / vertexdy[up_neg]
            j = J0
            while j < J1:
                vf = vfy[j]
                pos = vf > 0.0
                mf, ef = cell_flux(vf, pick(pos, d_upp[j], d_upn[j]), pick(pos, d_dop[j], d_k[j]),
                                   pick(pos, d_k[j], d_dop[j]), pick(pos, e_upp[j], e_upn[j]),
                                   pick(pos, e_dop[j], e_k[j]), pick(pos, e_k[j], e_dop[j]),
                                   pick(pos, pv_dop[j], pv_k[j]), pick(pos, ratio_pos, ratio_neg), one_by_six)
                mfy[j] = mf
                ener_flux[j] = ef
                j += 1
        ku = k - 2   # the row that no later flux reads
        if ku < K0:
            continue
        cell_update(J0, J1, row(f_density1, ku), row(f_energy1, ku), row(o_density1, ku),
                    row(o_energy1, ku), row(f_work1, ring3(ku)), row(f_mass_flux_y, ku),
                    row(f_mass_flux_y, ku + 1), row(f_work7, ring3(ku)), row(f_work7, ring3(ku + 1)),
                    row(f_vol_flux_y, ku), row(f_vol_flux_y, ku + 1), 0, 0)


@jit
def advec_cell(v, dr, sweep):
    c = (0, v.nx, 0, v.ny)
    if dr == 1:
        advec_cell_x(v, sweep, c, None)
    else:
        advec_cell_y(v, sweep, c, None)


@jit
def advec_cell_range(v, dr, sweep, r, out):
    c = clip(r, v.nx, v.ny)
    if c[1] <= c[0] or c[3] <= c[2]:
        return
    if dr == 1:
        advec_cell_x(v, sweep, c, out)
    else:
        advec_cell_y(v, sweep, c, out)


@jit_inline
def mom_limiter(vdiffuw, vdiffdw, sigma, width, cdif):
    """The reference's momentum limiter."""
    auw, adw = abs(vdiffuw), abs(vdiffdw)
    wind = -1.0 if vdiffdw <= 0.0 else 1.0
    limiter = wind * dmin2(dmin2(width * ((2.0 - sigma) * adw / width + (1.0 + sigma) * auw / cdif) / 6.0, auw), adw)
    return limiter if vdiffuw * vdiffdw > 0.0 else 0.0


@jit_inline
def mom_advec_vel(nf, vup, vdo, vdn, pre, width, cdif):
    """The advected velocity at a node of node flux nf, from the upwind,
    donor and downwind velocities, the donor's node_mass_pre and the
    widths."""
    sigma = abs(nf) / pre
    vdiffuw = vdo - vup
    vdiffdw = vdn - vdo
    limiter = mom_limiter(vdiffuw, vdiffdw, sigma, width, cdif)
    return vdo + (1.0 - sigma) * limiter


@jit
def mom_post_vol(f_volume, f_vol_flux_x, f_vol_flux_y, mom_sweep, k, j0, j1, pv):
    """post_vol of cell row k (array rows and columns), j in [j0, j1], into
    pv, for mom_sweep 1 (the y fluxes) or 2 (the x fluxes).  Called per
    row: it takes the fields, not the View (whose 25 arrays a call would
    pass, and whose fields' references it would take)."""
    if j0 < 0:
        raise IndexError("mom_post_vol: j0 < 0")   # (see the module's docstring)
    volume = row(f_volume, k)
    if mom_sweep == 1:
        vfy0 = row(f_vol_flux_y, k)
        vfy1 = row(f_vol_flux_y, k + 1)
        j = j0
        while j < j1 + 1:
            pv[j] = volume[j] + vfy1[j] - vfy0[j]
            j += 1
    else:
        vfx = row(f_vol_flux_x, k)
        j = j0
        while j < j1 + 1:
            pv[j] = volume[j] + vfx[j + 1] - vfx[j]
            j += 1


@jit
def mom_x_nodes(f_mass_flux_x, f_density1, f_volume, f_vol_flux_y, f_work7, k, pvflux, ja, jb, node_flux, nm_post,
                nm_pre):
    """advec_mom along x, nodes ja .. jb (array columns) of node row k:
    post_vol, node_flux, node_mass_post and node_mass_pre (advec.c's); the
    fields as mom_post_vol's."""
    if ja < 1:
        raise IndexError("mom_x_nodes: ja < 1")    # (see the module's docstring)
    mfm = row(f_mass_flux_x, k - 1)
    mf0 = row(f_mass_flux_x, k)
    dm = row(f_density1, k - 1)
    d0 = row(f_density1, k)
    vol0 = row(f_volume, k)
    vfy0 = row(f_vol_flux_y, k)
    vfy1 = row(f_vol_flux_y, k + 1)
    pvm = row(f_work7, ring2(k - 1)) if pvflux else row(f_volume, k - 1)
    pv0 = row(f_work7, ring2(k))
    if pvflux:
        pv0[ja - 1] = vol0[ja - 1] + vfy1[ja - 1] - vfy0[ja - 1]
    j = ja
    while j < jb + 1:
        pvj = vol0[j] + vfy1[j] - vfy0[j] if pvflux else vol0[j]
        pvjm = vol0[j - 1] + vfy1[j - 1] - vfy0[j - 1] if pvflux else vol0[j - 1]
        if pvflux:
            pv0[j] = pvj
        nfj = 0.25 * (mfm[j] + mf0[j] + mfm[j + 1] + mf0[j + 1])
        nfjm = 0.25 * (mfm[j - 1] + mf0[j - 1] + mfm[j] + mf0[j])
        node_flux[j] = nfj
        post = 0.25 * (dm[j] * pvm[j] + d0[j] * pvj + dm[j - 1] * pvm[j - 1] + d0[j - 1] * pvjm)
        nm_post[j] = post
        nm_pre[j] = post - nfjm + nfj
        j += 1


@jit
def advec_mom_x(v, vel, mom_sweep, c, out):
    """advec_mom along x over the nodes of c (C's indices, clipped), into
    out's velocity vel (out None: in place), each node row finished before
    the next, its node quantities in four rows of WORK4."""
    f_work4 = v.f[CF_WORK4]
    f_mass_flux_x = v.f[CF_MASS_FLUX_X]
    f_density1 = v.f[CF_DENSITY1]
    f_volume = v.f[CF_VOLUME]
    f_vol_flux_x = v.f[CF_VOL_FLUX_X]
    f_vol_flux_y = v.f[CF_VOL_FLUX_Y]
    f_work7 = v.f[CF_WORK7]
    f_vel = v.f[vel]
    o_vel = f_vel if out is None else out.f[vel]   # None: in place (see advec_cell_x)
    if c[0] < 0 or c[2] < 0:
        raise IndexError("advec_mom_x: the range starts below 0 (clip it)")   # (see the module's docstring)
    pv_is_volume = mom_sweep > 2
    J0, J1 = c[0] + G, c[1] + G
    K0, K1 = c[2] + G, c[3] + G
    celldx = geo(v, CG_CELLDX)
    node_flux = row(f_work4, 0)
    nm_post = row(f_work4, 1)
    nm_pre = row(f_work4, 2)
    mom_flux = row(f_work4, 3)
    if not pv_is_volume:
        mom_post_vol(f_volume, f_vol_flux_x, f_vol_flux_y, mom_sweep, K0 - 1, J0 - 2, J1, row(f_work7, ring2(K0 - 1)))
    for k in range(K0, K1):
        mom_x_nodes(f_mass_flux_x, f_density1, f_volume, f_vol_flux_y, f_work7, k, not pv_is_volume, J0 - 1, J1,
                    node_flux, nm_post, nm_pre)
        vel1 = row(f_vel, k)
        j = J0 - 1
        while j < J1:
            nf = node_flux[j]
            width = celldx[j]
            neg = nf < 0.0
            av = mom_advec_vel(nf, pick(neg, vel1[j + 2], vel1[j - 1]), pick(neg, vel1[j + 1], vel1[j]),
                               pick(neg, vel1[j], vel1[j + 1]), pick(neg, nm_pre[j + 1], nm_pre[j]), width,
                               pick(neg, celldx[j + 1], celldx[j - 1]))
            mom_flux[j] = av * nf
            j += 1
        vout = row(o_vel, k)
        j = J0
        while j < J1:
            vout[j] = (vel1[j] * nm_pre[j] + mom_flux[j - 1] - mom_flux[j]) / nm_post[j]
            j += 1


@jit
def advec_mom_y(v, vel, mom_sweep, c, out):
    """advec_mom along y over the nodes of c, as advec.c's advec_mom_y: one
    pass down the node rows i = k0 - 1 .. k1 + 1, rows in rings; each
    quantity of a row in a loop of its own (advec.c fuses them for the rows
    k0 + 2 .. k1, but LLVM leaves that loop scalar here: too many run-time
    overlap checks, see the module's docstring; the separate loops
    vectorise)."""
    f_work7 = v.f[CF_WORK7]
    f_mass_flux_y = v.f[CF_MASS_FLUX_Y]
    f_work1 = v.f[CF_WORK1]
    f_density1 = v.f[CF_DENSITY1]
    f_volume = v.f[CF_VOLUME]
    f_work2 = v.f[CF_WORK2]
    f_work3 = v.f[CF_WORK3]
    f_vel = v.f[vel]
    f_work5 = v.f[CF_WORK5]
    f_vol_flux_x = v.f[CF_VOL_FLUX_X]
    f_vol_flux_y = v.f[CF_VOL_FLUX_Y]
    o_vel = f_vel if out is None else out.f[vel]   # None: in place (see advec_cell_x)
    if c[0] < 0 or c[2] < 0:
        raise IndexError("advec_mom_y: the range starts below 0 (clip it)")   # (see the module's docstring)
    pv_is_volume = mom_sweep > 2
    J0, J1 = c[0] + G, c[1] + G
    K0, K1 = c[2] + G, c[3] + G
    celldy = geo(v, CG_CELLDY)
    if not pv_is_volume:
        mom_post_vol(f_volume, f_vol_flux_x, f_vol_flux_y, mom_sweep, K0 - 2, J0 - 1, J1 - 1,
                     row(f_work7, ring2(K0 - 2)))
    mf0 = row(f_mass_flux_y, K0 - 2)
    mf1 = row(f_mass_flux_y, K0 - 1)
    nf = row(f_work1, ring2(K0 - 2))
    j = J0
    while j < J1:
        nf[j] = 0.25 * (mf0[j - 1] + mf0[j] + mf1[j - 1] + mf1[j])
        j += 1
    for i in range(K0 - 1, K1 + 2):
        if i <= K1:
            if not pv_is_volume:
                mom_post_vol(f_volume, f_vol_flux_x, f_vol_flux_y, mom_sweep, i, J0 - 1, J1 - 1,
                             row(f_work7, ring2(i)))
            mf0 = row(f_mass_flux_y, i)
            mf1 = row(f_mass_flux_y, i + 1)
            node_flux = row(f_work1, ring2(i))
            j = J0
            while j < J1:
                node_flux[j] = 0.25 * (mf0[j - 1] + mf0[j] + mf1[j - 1] + mf1[j])
                j += 1
            dm = row(f_density1, i - 1)
            d0 = row(f_density1, i)
            pvm = row(f_volume, i - 1) if pv_is_volume else row(f_work7, ring2(i - 1))
            pv0 = row(f_volume, i) if pv_is_volume else row(f_work7, ring2(i))
            nfm = row(f_work1, ring2(i - 1))
            nf0 = row(f_work1, ring2(i))
            nm_post = row(f_work2, ring3(i))
            nm_pre = row(f_work3, ring3(i))
            j = J0
            while j < J1:
                post = 0.25 * (dm[j] * pvm[j] + d0[j] * pv0[j] + dm[j - 1] * pvm[j - 1] + d0[j - 1] * pv0[j - 1])
                nm_post[j] = post
                nm_pre[j] = post - nfm[j] + nf0[j]
                j += 1
        k = i - 1
        if k >= K0 - 1 and k <= K1 - 1:
            nfk = row(f_work1, ring2(k))
            pre_k = row(f_work3, ring3(k))
            pre_k1 = row(f_work3, ring3(k + 1))
            vm = row(f_vel, k - 1)
            v0 = row(f_vel, k)
            vp = row(f_vel, k + 1)
            vpp = row(f_vel, k + 2)
            mom_flux = row(f_work5, ring3(k))
            width = celldy[k]
            cd_neg = celldy[k + 1]
            cd_pos = celldy[k - 1]
            j = J0
            while j < J1:
                nf = nfk[j]
                neg = nf < 0.0
                av = mom_advec_vel(nf, pick(neg, vpp[j], vm[j]), pick(neg, vp[j], v0[j]), pick(neg, v0[j], vp[j]),
                                   pick(neg, pre_k1[j], pre_k[j]), width, pick(neg, cd_neg, cd_pos))
                mom_flux[j] = av * nf
                j += 1
        ku = i - 2
        if ku < K0:
            continue
        mfm = row(f_work5, ring3(ku - 1))
        mfk = row(f_work5, ring3(ku))
        pre = row(f_work3, ring3(ku))
        post = row(f_work2, ring3(ku))
        vel1 = row(f_vel, ku)
        vout = row(o_vel, ku)
        j = J0
        while j < J1:
            vout[j] = (vel1[j] * pre[j] + mfm[j] - mfk[j]) / post[j]
            j += 1


@jit
def advec_mom(v, vel, dr, sweep):
    c = (0, v.nx + 1, 0, v.ny + 1)
    mom_sweep = dr + 2 * (sweep - 1)
    if dr == 1:
        advec_mom_x(v, vel, mom_sweep, c, None)
    else:
        advec_mom_y(v, vel, mom_sweep, c, None)


@jit
def advec_mom_range(v, vel, dr, sweep, r, out):
    c = clip(r, v.nx + 1, v.ny + 1)
    if c[1] <= c[0] or c[3] <= c[2]:
        return
    mom_sweep = dr + 2 * (sweep - 1)
    if dr == 1:
        advec_mom_x(v, vel, mom_sweep, c, out)
    else:
        advec_mom_y(v, vel, mom_sweep, c, out)


# ---- ghost layers (halo.c) -------------------------------------------------

@jit
def mirror_of(f, nx, ny):
    """halo.c's mirror_of: (sy, sx, lo_y, hi_y, top_y, lo_x, hi_x, top_x, jext, kext)."""
    if f == CF_XVEL0 or f == CF_XVEL1 or f == CF_YVEL0 or f == CF_YVEL1:
        # nodes: about the boundary node line
        sx = -1 if f == CF_XVEL0 or f == CF_XVEL1 else 1
        return (-sx, sx, 1, ny, ny + 1, 1, nx, nx + 1, 1, 1)
    if f == CF_VOL_FLUX_X or f == CF_MASS_FLUX_X or f == CF_XAREA:
        return (1, -1, 1, ny - 1, ny, 1, nx, nx + 1, 1, 0)
    if f == CF_VOL_FLUX_Y or f == CF_MASS_FLUX_Y or f == CF_YAREA:
        return (-1, 1, 1, ny, ny + 1, 1, nx - 1, nx, 0, 1)
    # cells: about the face between the last cell and the first ghost
    return (1, 1, 0, ny, ny, 0, nx, nx, 0, 0)


@jit
def reflect(v, fields, nfields, depth, edges):
    """clover_k_reflect: the ghost layers (depth 1 or 2) of the fields at
    the mesh's faces in `edges`: bottom and top over the full width, then
    left and right over the full height (the reference's order)."""
    nx, ny = v.nx, v.ny
    if depth < 1:
        return
    if depth > 2:
        depth = 2
    for i in range(nfields):
        f = fields[i]
        if f < 0 or f >= CF_NFIELDS:
            continue
        a = v.f[f]
        sy_i, sx_i, lo_y, hi_y, top_y, lo_x, hi_x, top_x, jext, kext = mirror_of(f, nx, ny)
        sy, sx = float(sy_i), float(sx_i)
        if edges & CLOVER_BOTTOM:
            for k in range(1, depth + 1):
                dst = row(a, G - k)
                src = row(a, G + lo_y - 1 + k)
                j = G - depth
                while j < G + nx + jext + depth:
                    dst[j] = sy * src[j]
                    j += 1
        if edges & CLOVER_TOP:
            for k in range(1, depth + 1):
                dst = row(a, G + top_y - 1 + k)
                src = row(a, G + hi_y - k)
                j = G - depth
                while j < G + nx + jext + depth:
                    dst[j] = sy * src[j]
                    j += 1
        if edges & CLOVER_LEFT:
            for k in range(G - depth, G + ny + kext + depth):
                r = row(a, k)
                j = 1
                while j < depth + 1:
                    r[G - j] = sx * r[G + lo_x - 1 + j]
                    j += 1
        if edges & CLOVER_RIGHT:
            for k in range(G - depth, G + ny + kext + depth):
                r = row(a, k)
                j = 1
                while j < depth + 1:
                    r[G + top_x - 1 + j] = sx * r[G + hi_x - j]
                    j += 1


@jit
def halo_unpack(v, stage, fields, nfields, blocks):
    """clover_halo_unpack: the staged ghosts of the fields copied in.
    blocks[i] lists field fields[i]'s blocks (clover_halo_recv_blocks) as
    rows of (recv_off, rows, cols), recv_off an element offset; a row of
    rows 0 ends the list."""
    for i in range(nfields):
        f = fields[i]
        dst = v.f[f].ravel()
        src = stage.f[f].ravel()
        pitch = v.nx + 5
        for b in range(blocks.shape[1]):
            off, rows, cols = blocks[i, b, 0], blocks[i, b, 1], blocks[i, b, 2]
            if rows == 0:
                break
            for r in range(rows):
                o = off + r * pitch
                dst[o:o + cols] = src[o:o + cols]
