#!/usr/bin/env python3
"""Tiled Cholesky on Weft from Python: the task graph of the C driver
(apps/cholesky/run_weft.c) with the C kernels' BLAS/LAPACK routines, from SciPy.

    cholesky.py [-n N] [-b B] [--devices STR] [--policy NAME] [--workers W]
                [--cpu-first] [--check] [--trace FILE] [--seed S]
                [--gpu-gflops F] [--gpu-eff P,T,S,G] [--repeat R]

The matrix is chol_matrix_fill's (the same as the C driver's for the same
N and seed), partitioned into ceil(N/B) x ceil(N/B) near-equal tiles.  Each
kernel call (POTRF, TRSM, SYRK, GEMM) is a task with two variants:
  - the CPU's: on the host's tiles, in place, the C kernels' routines
    (DPOTRF, DTRSM, DSYRK, DGEMM) from SciPy's OpenBLAS when SciPy is
    installed; else NumPy alone (numpy.linalg.cholesky, numpy.linalg.solve
    on the triangle, full products: more flops), which the output says;
    one OpenBLAS thread per task (OPENBLAS_NUM_THREADS=1 unless set, and
    threadpoolctl's limit, when it is installed, for a BLAS loaded before);
  - a virtual GPU's: the same kernel queued on the task's stream
    (device_data=True: the tiles' replicas there), stretched to the modelled
    GPU time (the C driver's model and defaults).
Prints the kernels used, the wall time (spawning the graph until the matrix holds the factor,
the median of --repeat runs), GF/s (N^3/3 flops) and the tasks of each
kernel on each device; --check verifies ||L L^T - A||_F / ||A||_F and
||L - numpy.linalg.cholesky(A)||_F / ||.||_F against 1e-12 (exit status 1
when a check fails).
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads its BLAS

import argparse
import contextlib
import sys
import threading
import time
from typing import Any, Callable

import numpy as np

import weft

KERNELS = ("potrf", "trsm", "syrk", "gemm")
TOL = 1e-12


def matrix(n: int, seed: int = 1) -> np.ndarray:
    """chol_matrix_fill's matrix: (i, j)'s splitmix64 hash in [0, 1) for
    i != j (symmetric), plus n on the diagonal.  Built a block of rows at a
    time (NumPy's uint64 arithmetic wraps as C's does)."""
    a = np.empty((n, n))
    cols = np.arange(n, dtype=np.uint64)
    step = max(1, (1 << 22) // max(n, 1))
    with np.errstate(over="ignore"):
        for r0 in range(0, n, step):
            rows = np.arange(r0, min(n, r0 + step), dtype=np.uint64)[:, None]
            idx = np.maximum(rows, cols) * np.uint64(n) + np.minimum(rows, cols)
            z = (np.uint64(seed) ^ idx) + np.uint64(0x9E3779B97F4A7C15)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            z = z ^ (z >> np.uint64(31))
            a[r0:r0 + len(rows)] = (z >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
    a[np.diag_indices(n)] += n
    return a


# --- the kernels, on tiles as NumPy arrays (row-major, any row stride) ------
#
# With SciPy: the routines the C kernels call (apps/cholesky/kernels.c),
# DPOTRF, DTRSM, DSYRK and DGEMM, from the OpenBLAS SciPy links, called
# in place on the tiles.  SciPy's f2py wrappers (scipy.linalg.blas.dgemm,
# ...) take no leading dimension, so on a tile of the host's matrix (rows
# the matrix's pitch apart) they would copy it in and the result out; the
# Fortran routines themselves, whose addresses scipy.linalg.cython_blas
# and cython_lapack export, take the pitch, and ctypes calls them without
# the GIL.  A row-major m x n tile with pitch ld is, read column-major,
# its n x m transpose with leading dimension ld: each call below is the
# C kernel's CBLAS row-major call spelled column-major (what CBLAS does
# for it), and DPOTRF('U') on the transpose writes the row-major lower
# factor, as the C kernel's LAPACKE call does.

def _fortran_routines() -> dict[str, Any] | None:
    """SciPy's dpotrf, dtrsm, dsyrk and dgemm as ctypes functions (every
    argument a pointer), or None without SciPy."""
    try:
        import ctypes

        from scipy.linalg import cython_blas, cython_lapack
    except ImportError:
        return None
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    get_ptr = ctypes.pythonapi.PyCapsule_GetPointer
    get_ptr.restype, get_ptr.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    nargs = {"dpotrf": 5, "dtrsm": 11, "dsyrk": 10, "dgemm": 13}
    fns = {}
    for name, n in nargs.items():
        capsule = (cython_lapack if name == "dpotrf" else cython_blas).__pyx_capi__[name]
        addr = get_ptr(capsule, get_name(capsule))
        fns[name] = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * n)(addr)  # releases the GIL
    return fns


_F = _fortran_routines()
KERNEL_IMPL = ("SciPy's BLAS/LAPACK (dpotrf, dtrsm, dsyrk, dgemm, in place)" if _F is not None else
               "NumPy alone (SciPy is not installed: numpy.linalg.cholesky, a general solve for TRSM "
               "and full products for SYRK: more flops than the C kernels)")


def _ld(x: np.ndarray) -> int:
    """The row pitch of a row-major tile, in elements (a Fortran leading
    dimension: at least its width, and 1)."""
    if x.dtype != np.float64 or (x.shape[1] > 1 and x.strides[1] != 8) or x.strides[0] % 8:
        raise ValueError(f"cholesky.py: a tile must be float64 rows of unit stride, not {x.dtype} "
                         f"with strides {x.strides}")
    return int(max(x.strides[0] // 8, x.shape[1], 1))


def _ptr(x: np.ndarray) -> int:
    return int(x.__array_interface__["data"][0])


if _F is not None:
    import ctypes as _ct

    _R: dict[str, Any] = _F
    _U, _L, _N, _T = (_ct.c_char(c) for c in b"ULNT")
    _ONE, _MINUS_ONE = _ct.c_double(1.0), _ct.c_double(-1.0)

    def _ints(*v: int) -> list[Any]:
        return [_ct.byref(_ct.c_int(x)) for x in v]

    def k_potrf(c: np.ndarray) -> None:
        """The lower triangle of c becomes its Cholesky factor (the upper
        one is left as it was): DPOTRF('U') on the column-major view."""
        info = _ct.c_int(0)
        n, ldc = _ints(c.shape[0], _ld(c))
        _R["dpotrf"](_ct.byref(_U), n, _ptr(c), ldc, _ct.byref(info))
        if info.value != 0:
            raise np.linalg.LinAlgError(f"dpotrf: info {info.value} (not positive definite)")

    def k_trsm(l: np.ndarray, c: np.ndarray) -> None:
        """c = c L^-T, L the lower triangle of l (m x n c: column-major,
        c^T := L^-1 c^T, L^T being the upper triangle of l's view)."""
        m, n, lda, ldb = _ints(c.shape[1], c.shape[0], _ld(l), _ld(c))
        _R["dtrsm"](_ct.byref(_L), _ct.byref(_U), _ct.byref(_T), _ct.byref(_N), m, n, _ct.byref(_ONE),
                    _ptr(l), lda, _ptr(c), ldb)

    def k_syrk(a: np.ndarray, c: np.ndarray) -> None:
        """The lower triangle of c -= a a^T (column-major: the upper
        triangle of c -= (a^T)^T a^T); the upper one is left as it was."""
        n, k, lda, ldc = _ints(c.shape[0], a.shape[1], _ld(a), _ld(c))
        _R["dsyrk"](_ct.byref(_U), _ct.byref(_T), n, k, _ct.byref(_MINUS_ONE), _ptr(a), lda,
                    _ct.byref(_ONE), _ptr(c), ldc)

    def k_gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
        """c -= a b^T (column-major: c^T -= (b^T)^T a^T)."""
        m, n, k, lda, ldb, ldc = _ints(c.shape[1], c.shape[0], a.shape[1], _ld(b), _ld(a), _ld(c))
        _R["dgemm"](_ct.byref(_T), _ct.byref(_N), m, n, k, _ct.byref(_MINUS_ONE), _ptr(b), lda, _ptr(a), ldb,
                    _ct.byref(_ONE), _ptr(c), ldc)
else:
    def k_potrf(c: np.ndarray) -> None:
        """The lower triangle of c becomes its Cholesky factor (the upper
        one is left as it was)."""
        low = np.linalg.cholesky(c)
        c[:] = low + np.triu(c, 1)

    def k_trsm(l: np.ndarray, c: np.ndarray) -> None:
        """c = c L^-T, L the lower triangle of l: L X^T = c^T."""
        c[:] = np.linalg.solve(np.tril(l), c.T).T

    def k_syrk(a: np.ndarray, c: np.ndarray) -> None:
        """c -= a a^T (the whole tile: its lower triangle is what counts)."""
        c -= a @ a.T

    def k_gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
        """c -= a b^T."""
        c -= a @ b.T


KERNEL_FN: tuple[Callable[..., None], ...] = (k_potrf, k_trsm, k_syrk, k_gemm)


def flops(kernel: int, m: int, n: int, k: int) -> float:
    """chol_call_flops: POTRF m^3/3, TRSM m n^2, SYRK m^2 k, GEMM 2 m n k."""
    return (m ** 3 / 3.0, float(m * n * n), float(m * m * k), 2.0 * m * n * k)[kernel]


class Run:
    """One factorisation's shared state: the GPU model and the tasks each
    variant ran, per kernel and runtime device (0: the CPU)."""

    def __init__(self, gflops: float, eff: tuple[float, ...], ndev: int) -> None:
        self.gflops = gflops
        self.eff = eff
        self.tasks = [[0] * ndev for _ in KERNELS]
        self.lock = threading.Lock()

    def count(self, kernel: int, dev: int) -> None:
        with self.lock:
            self.tasks[kernel][dev] += 1

    def model_ns(self, kernel: int, m: int, n: int, k: int) -> int:
        rate = self.gflops * self.eff[kernel]
        return int(flops(kernel, m, n, k) / rate) if rate > 0 else 0


@weft.variants
def chol_task(run: Run, kernel: int, mnk: tuple[int, int, int], *tiles: Any) -> None:
    """The CPU variant: the kernel on the host's tiles (the last one written)."""
    ctx = weft.context()
    run.count(kernel, 0)
    KERNEL_FN[kernel](*(ctx.array(t) for t in tiles))


@chol_task.variant(weft.gpu)
def chol_task_gpu(run: Run, kernel: int, mnk: tuple[int, int, int], *tiles: Any) -> None:
    """The GPU variant: the same kernel queued on the task's stream, on the
    tiles' replicas there, stretched to the modelled time."""
    ctx = weft.context()
    run.count(kernel, ctx.devices[0])
    views = [ctx.view(t) for t in tiles]

    def kernel_on_stream() -> None:
        KERNEL_FN[kernel](*(np.asarray(v) for v in views))

    ctx.queue(kernel_on_stream, model_ns=run.model_ns(kernel, *mnk), reads=views, writes=views[-1:])


def spawn_graph(rt: weft.Runtime, run: Run, tiles: list[list[Any]], span: list[int],
                placement: Any) -> None:
    """Spawn the right-looking algorithm's tasks, step by step, with the C
    driver's priorities (the panel first)."""
    nt = len(tiles)

    def spawn(kernel: int, k: int, i: int, j: int, reads: list[Any], write: Any) -> None:
        bonus = 3 if kernel == 0 else 2 if kernel == 1 else 1 if j == k + 1 else 0
        rt.spawn(chol_task, run, kernel, (span[i], span[j], span[k]), *reads, write,
                 reads=reads, readwrites=[write], name=f"{KERNELS[kernel]}.{k}.{i}.{j}",
                 priority=4 * (nt - k) + bonus, placement=placement, device_data=True)

    for k in range(nt):
        spawn(0, k, k, k, [], tiles[k][k])
        for i in range(k + 1, nt):
            spawn(1, k, i, k, [tiles[k][k]], tiles[i][k])
        for i in range(k + 1, nt):
            spawn(2, k, i, i, [tiles[i][k]], tiles[i][i])
            for j in range(k + 1, i):
                spawn(3, k, i, j, [tiles[i][k], tiles[j][k]], tiles[i][j])


def one_blas_thread() -> Any:
    """threadpoolctl's limit of every BLAS loaded to one thread, as a
    context manager (for a BLAS loaded before OPENBLAS_NUM_THREADS was
    set: NumPy and SciPy each bundle their own OpenBLAS), or nothing
    without threadpoolctl."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")


def factor(a: np.ndarray, b: int, *, devices: str | None = None, policy: str | None = None,
           workers: int = 0, trace: str | None = None, gpu_first: bool = True, gflops: float = 400.0,
           eff: tuple[float, ...] = (0.25, 0.6, 0.8, 1.0)) -> tuple[float, Run, list[str]]:
    """Factor a (n x n, C-contiguous doubles) in place with Weft: its lower
    triangle becomes L.  Returns the seconds from the first spawn until a
    holds the factor, the run (tasks per kernel per device) and the
    devices' names."""
    n = a.shape[0]
    nt = -(-n // b)
    with one_blas_thread(), weft.Runtime(workers=workers, devices=devices, policy=policy, trace=trace) as rt:
        names = [d["name"] for d in rt.devices]
        cpu_tasks = bool(rt.devices[0].get("cpu_tasks", True))
        has_gpu = len(names) > 1
        alts: list[Any] = []
        if has_gpu and gpu_first:
            alts.append(weft.gpu)
        if cpu_tasks or not has_gpu:
            alts.append(weft.cpu)
        if has_gpu and not gpu_first:
            alts.append(weft.gpu)
        run = Run(gflops, eff, len(names))
        with rt.data(a) as d:
            tiles = d.partition((nt, nt))
            span = [t.interior[2] for t in (tiles[i][i] for i in range(nt))]
            t0 = time.perf_counter()
            spawn_graph(rt, run, tiles, span, alts if len(alts) > 1 else alts[0])
        seconds = time.perf_counter() - t0  # the data unregistered: a holds L
    return seconds, run, names


def check(a0: np.ndarray, low_of: np.ndarray) -> tuple[float, float]:
    """||L L^T - A||_F / ||A||_F and ||L - numpy's L||_F / ||numpy's L||_F,
    L the lower triangle of low_of."""
    low = np.tril(low_of)
    res = np.linalg.norm(low @ low.T - a0) / np.linalg.norm(a0)
    ref = np.linalg.cholesky(a0)
    diff = np.linalg.norm(low - ref) / np.linalg.norm(ref)
    return float(res), float(diff)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Tiled Cholesky on Weft from Python (SciPy's BLAS/LAPACK kernels).")
    p.add_argument("-n", type=int, default=1024)
    p.add_argument("-b", type=int, default=128)
    p.add_argument("--devices")
    p.add_argument("--policy")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--cpu-first", action="store_true")
    p.add_argument("--check", action="store_true")
    p.add_argument("--trace")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--gpu-gflops", type=float, default=400.0)
    p.add_argument("--gpu-eff", default="0.25,0.6,0.8,1")
    p.add_argument("--repeat", type=int, default=1)
    o = p.parse_args(argv)
    eff = tuple(float(x) for x in o.gpu_eff.split(","))
    if o.n <= 0 or o.b <= 0 or len(eff) != 4:
        p.error("N and B must be positive; --gpu-eff wants P,T,S,G")
    nt = -(-o.n // o.b)
    print(f"cholesky.py: N={o.n} B={o.b} ({nt} x {nt} tiles), devices {o.devices or '(default)'}, "
          f"policy {o.policy or '(default)'}")
    print(f"kernels: {KERNEL_IMPL}")
    a0 = matrix(o.n, o.seed)
    times = []
    for _ in range(max(1, o.repeat)):
        a = a0.copy()
        s, run, names = factor(a, o.b, devices=o.devices, policy=o.policy, workers=o.workers, trace=o.trace,
                               gpu_first=not o.cpu_first, gflops=o.gpu_gflops, eff=eff)
        times.append(s)
    s = sorted(times)[len(times) // 2]
    print(f"time {s:.4f} s  GF/s {o.n ** 3 / 3 / s * 1e-9:.2f}" + (f"  (median of {len(times)})" if len(times) > 1
                                                                     else ""))
    print("tasks per kernel per device:")
    print(f"  {'device':<8} " + " ".join(f"{k:>8}" for k in KERNELS) + f" {'all':>8}")
    for d, name in enumerate(names):
        row = [run.tasks[k][d] for k in range(len(KERNELS))]
        print(f"  {name:<8} " + " ".join(f"{v:>8}" for v in row) + f" {sum(row):>8}")
    if not o.check:
        return 0
    res, diff = check(a0, a)
    ok = res < TOL and diff < TOL
    print(f"check: ||L L^T - A||_F / ||A||_F = {res:.3e}, ||L - L_numpy||_F / ||L_numpy||_F = {diff:.3e} "
          f"(< {TOL:.0e}): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
