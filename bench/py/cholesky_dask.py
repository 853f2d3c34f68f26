#!/usr/bin/env python3
"""Dask's tiled Cholesky beside Weft's (bench/cholesky.sh runs both):
dask.array.linalg.cholesky on the matrix of apps/cholesky (the C driver's
chol_matrix_fill, the same N and seed), chunked B x B (N a multiple of B: Dask's Cholesky takes equal square
chunks only), on Dask's threaded
scheduler with --workers threads and one OpenBLAS thread per task.

    cholesky_dask.py [-n N] [-b B] [--workers W] [--seed S] [--repeat R] [--check]

Prints `time <s> s` (the median of --repeat runs): from building Dask's
graph until every chunk of L is computed (persist(); the chunks are not
gathered into one array, as Weft's factor is its tiles of the matrix),
and the time to gather them into one NumPy array afterwards, apart.
--check verifies ||L L^T - A||_F / ||A||_F and the distance to
numpy.linalg.cholesky against 1e-12, as apps/cholesky/cholesky.py does
(exit status 1 when it fails; 2 when Dask is not installed).
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads its BLAS

import argparse
import importlib.util
import pathlib
import sys
import time
from typing import Any

DRIVER = pathlib.Path(__file__).resolve().parents[2] / "apps" / "cholesky" / "cholesky.py"


def load_driver() -> Any:
    """apps/cholesky/cholesky.py as a module: its matrix(), check() and
    one_blas_thread()."""
    spec = importlib.util.spec_from_file_location("weft_cholesky_driver", DRIVER)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cholesky_dask.py: cannot load {DRIVER}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def factor(a: Any, b: int, workers: int) -> tuple[float, Any]:
    """Dask's lower Cholesky factor of a, chunked b x b, persisted on the
    threaded scheduler: (seconds, the persisted dask array)."""
    import dask
    import dask.array as da

    t0 = time.perf_counter()
    x = da.from_array(a, chunks=(b, b))
    low = da.linalg.cholesky(x, lower=True)
    with dask.config.set(scheduler="threads", num_workers=workers):
        low = low.persist()
    return time.perf_counter() - t0, low


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Dask's tiled Cholesky on apps/cholesky's matrix.")
    p.add_argument("-n", type=int, default=1024)
    p.add_argument("-b", type=int, default=128)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--check", action="store_true")
    p.add_argument("--devices", help="accepted for bench/cholesky.sh's common options: only 'cpu'")
    o = p.parse_args(argv)
    if o.n <= 0 or o.b <= 0 or o.workers <= 0:
        p.error("N, B and the workers must be positive")
    if o.n % o.b:
        p.error(f"N={o.n} is not a multiple of B={o.b}: dask.array.linalg.cholesky takes equal square chunks "
                f"only (Weft's near-equal tiles have no such limit)")
    if o.devices not in (None, "cpu"):
        p.error(f"--devices {o.devices}: Dask's Cholesky runs on the CPU only (write --devices cpu)")
    try:
        import dask
        import dask.array  # noqa: F401
    except ImportError:
        print("cholesky_dask.py: Dask is not installed (pip install 'dask[array]')", file=sys.stderr)
        return 2
    chol = load_driver()
    print(f"cholesky_dask.py: N={o.n} B={o.b}, dask {dask.__version__}, threaded scheduler, "
          f"{o.workers} threads, one BLAS thread per task")
    a0 = chol.matrix(o.n, o.seed)
    times, gathers = [], []
    with chol.one_blas_thread():
        for _ in range(max(1, o.repeat)):
            s, low = factor(a0, o.b, o.workers)
            times.append(s)
            t0 = time.perf_counter()
            with dask.config.set(scheduler="threads", num_workers=o.workers):
                lnp = low.compute()
            gathers.append(time.perf_counter() - t0)
    s = sorted(times)[len(times) // 2]
    g = sorted(gathers)[len(gathers) // 2]
    print(f"time {s:.4f} s  GF/s {o.n ** 3 / 3 / s * 1e-9:.2f}  (gathering L into one array: {g:.4f} s)"
          + (f"  (median of {len(times)})" if len(times) > 1 else ""))
    if not o.check:
        return 0
    res, diff = chol.check(a0, lnp)
    ok = res < chol.TOL and diff < chol.TOL
    print(f"check: ||L L^T - A||_F / ||A||_F = {res:.3e}, ||L - L_numpy||_F / ||L_numpy||_F = {diff:.3e} "
          f"(< {chol.TOL:.0e}): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
