"""CloverLeaf kernels, C against Numba (kernels_numba.py), one call each on
a random 960x480 chunk, fields restored before every call, medians and
minima of 7 alternated calls: bench/py/clover_kernels.py [case ...]."""
import importlib.util, os, sys, time
import numpy as np
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
APP = os.path.join(REPO, "apps", "cloverleaf")
spec = importlib.util.spec_from_file_location("cloverleaf", os.path.join(APP, "cloverleaf.py"))
cl = importlib.util.module_from_spec(spec); spec.loader.exec_module(cl)
from ctypes import byref
lib = cl.kernels(); kn = cl.numba_kernels()
nx, ny = 960, 480
rng = np.random.default_rng(1)
f = [rng.uniform(0.5, 1.5, (ny + 5, nx + 5)) for _ in range(cl.CF_NFIELDS)]
for i in (cl.CF_XVEL0, cl.CF_XVEL1, cl.CF_YVEL0, cl.CF_YVEL1, cl.CF_VOL_FLUX_X, cl.CF_VOL_FLUX_Y,
          cl.CF_MASS_FLUX_X, cl.CF_MASS_FLUX_Y, cl.CF_PRESSURE):
    f[i] = rng.uniform(-0.05, 0.05, (ny + 5, nx + 5))
g = rng.uniform(0.5, 1.5, lib.clover_geom_count(nx, ny))
cv = cl.CloverView(nx, ny, nx + 5)
for i, a in enumerate(f): cv.f[i] = a.ctypes.data
cv.geom = g.ctypes.data
nv = kn.View(nx, ny, tuple(f), g)
X, Y = cl.CF_XVEL1, cl.CF_YVEL1
cases = {
 "pdv0": (lambda: lib.clover_k_pdv(byref(cv), 0, 0.013), lambda: kn.pdv(nv, 0, 0.013)),
 "pdv1": (lambda: lib.clover_k_pdv(byref(cv), 1, 0.013), lambda: kn.pdv(nv, 1, 0.013)),
 "mom_x1": (lambda: lib.clover_k_advec_mom(byref(cv), X, 1, 1), lambda: kn.advec_mom(nv, X, 1, 1)),
 "mom_y1": (lambda: lib.clover_k_advec_mom(byref(cv), X, 2, 1), lambda: kn.advec_mom(nv, X, 2, 1)),
 "mom_x2": (lambda: lib.clover_k_advec_mom(byref(cv), X, 1, 2), lambda: kn.advec_mom(nv, X, 1, 2)),
 "mom_y2": (lambda: lib.clover_k_advec_mom(byref(cv), X, 2, 2), lambda: kn.advec_mom(nv, X, 2, 2)),
 "cell_x1": (lambda: lib.clover_k_advec_cell(byref(cv), 1, 1), lambda: kn.advec_cell(nv, 1, 1)),
 "cell_y1": (lambda: lib.clover_k_advec_cell(byref(cv), 2, 1), lambda: kn.advec_cell(nv, 2, 1)),
 "accel": (lambda: lib.clover_k_accelerate(byref(cv), 0.013), lambda: kn.accelerate(nv, 0.013)),
}
sel = sys.argv[1:] or list(cases)
snap = [a.copy() for a in f]
def reset():
    for a, s in zip(f, snap): a[...] = s
for name in sel:
    c, n = cases[name]
    reset(); n()
    tc, tn = [], []
    for _ in range(7):
        for fn, ts in ((c, tc), (n, tn)):
            reset(); t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    mc, mn = np.median(tc) * 1e3, np.median(tn) * 1e3
    lc, ln = min(tc) * 1e3, min(tn) * 1e3
    print(f"{name:8s} C {mc:7.2f} ms  Numba {mn:7.2f} ms  Numba/C {mn/mc:5.2f}  (min {lc:.2f} {ln:.2f} {ln/lc:.2f})", flush=True)
