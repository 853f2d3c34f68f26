"""Parla's tiled Cholesky, ported to Weft's Python API.

Original: ut-parla/Parla.py, examples/cholesky/blocked_cholesky_automatic.py
(Parla's "automatic" placement variant: one task per tile kernel, a CPU body
and a GPU variant per kernel, task spaces for the explicit dependencies and
PArrays for the data each task reads and updates).

What changes on Weft:

- PArrays `a[i][j]` are plain NumPy tiles; `input=`/`inout=` are
  `reads=`/`readwrites=` (Weft infers the order from them, so the explicit
  `deps=` that Parla needs are kept only to mirror the original graph).
- Parla's `@specialized` + `@f.variant(gpu)` are `@weft.variants` +
  `@f.variant(weft.gpu)`; calling the kernel inside a body dispatches on the
  device the body runs on, as in Parla.
- Parla's `placement=gpu` is `placement=[weft.cpu, weft.gpu]` under the
  "dmda" policy: each task goes where the performance models say it finishes
  first; `cost=` gives each kernel's flops so that a kind of device with no
  model yet is predicted from the others.
- The GPUs are virtual (devices "cpu,vgpu:2"): with `device_data=True` a GPU
  body gets its tiles' replicas on its GPU as NumPy arrays through
  `weft.context().array(...)` (NumPy stands in for CuPy); on the CPU
  alternative the same call gives the host's tiles.
- Parla's `a[j][j].update(out)` has no counterpart: the kernels work in place
  on the array the context gives.

Run:  python examples/ports/python/parla_blocked_cholesky.py [-b 96] [-nblocks 6]
Exits 1 if L @ L.T differs from the input or L from numpy.linalg.cholesky.
"""
import argparse
import os
import sys
import threading
import time
from collections import Counter

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")   # one BLAS thread per task (docs/python-guide.md)
import numpy as np

import weft

parser = argparse.ArgumentParser()
parser.add_argument("-b", type=int, default=96, help="block size")
parser.add_argument("-nblocks", type=int, default=6, help="blocks per side")
parser.add_argument("-trials", type=int, default=2, help="factorisations (the models learn from the first)")
parser.add_argument("--devices", default="cpu,vgpu:2")
args = parser.parse_args()


# ---- kernels: a CPU body and a GPU variant each (NumPy on both) ------------

@weft.variants
def cholesky(a):
    """potrf on the CPU: the lower factor, in place."""
    a[:] = np.linalg.cholesky(a)
    return a


@cholesky.variant(weft.gpu)
def cholesky_gpu(a):
    """potrf on a (virtual) GPU: `a` is the tile's replica there."""
    a[:] = np.tril(np.linalg.cholesky(a))
    return a


@weft.variants
def ltriang_solve(a, b):
    """trsm: b <- b @ inv(a).T, with a lower triangular."""
    b[:] = np.linalg.solve(a, b.T).T
    return b


@ltriang_solve.variant(weft.gpu)
def ltriang_solve_gpu(a, b):
    b[:] = np.linalg.solve(a, b.T).T
    return b


def update_kernel(a, b, c):
    c -= a @ b.T
    return c


@weft.variants
def update(a, b, c):
    return update_kernel(a, b, c)


@update.variant(weft.gpu)
def update_gpu(a, b, c):
    return update_kernel(a, b, c)


placed = Counter()                              # (kernel, device) -> tasks, as Parla's get_current_devices()
placed_lock = threading.Lock()


def note(kernel):
    ctx = weft.context()
    where = f"vgpu:{ctx.devices[0] - 1}" if ctx.devices else "cpu"   # GPU i is device i + 1
    with placed_lock:
        placed[kernel, where] += 1
    return ctx


def flatten(t):
    return [item for sublist in t for item in sublist]


# ---- the graph: Parla's loops, spawn for spawn ------------------------------

def cholesky_blocked_inplace(a, block_size):
    gemm1 = weft.TaskSpace("gemm1")             # the diagonal block's update (syrk)
    subcholesky = weft.TaskSpace("subcholesky")  # potrf of the diagonal block
    gemm2 = weft.TaskSpace("gemm2")             # an off-diagonal block's update
    solve = weft.TaskSpace("solve")             # trsm of an off-diagonal block
    where = [weft.cpu, weft.gpu]
    b3 = float(block_size) ** 3
    mem = 8 * block_size ** 2

    for j in range(len(a)):
        for k in range(j):
            @weft.spawn(task=gemm1[j, k], deps=[solve[j, k], gemm1[j, 0:k]], reads=[a[j][k]],
                        readwrites=[a[j][j]], placement=where, memory=mem, device_data=True,
                        cost=b3)
            def t1():
                ctx = note("syrk")
                rhs = ctx.array(a[j][k])
                update(rhs, rhs, ctx.array(a[j][j]))

        @weft.spawn(task=subcholesky[j], deps=[gemm1[j, 0:j]], readwrites=[a[j][j]],
                    placement=where, memory=mem, device_data=True, cost=b3 / 3)
        def t2():
            cholesky(note("potrf").array(a[j][j]))

        for i in range(j + 1, len(a)):
            for k in range(j):
                @weft.spawn(task=gemm2[i, j, k], deps=[solve[j, k], solve[i, k], gemm2[i, j, 0:k]],
                            readwrites=[a[i][j]], reads=[a[i][k], a[j][k]], placement=where,
                            memory=mem, device_data=True, cost=2 * b3)
                def t3():
                    ctx = note("gemm")
                    update(ctx.array(a[i][k]), ctx.array(a[j][k]), ctx.array(a[i][j]))

            @weft.spawn(task=solve[i, j], deps=[gemm2[i, j, 0:j], subcholesky[j]],
                        readwrites=[a[i][j]], reads=[a[j][j]], placement=where,
                        memory=2 * mem, device_data=True, cost=b3)
            def t4():
                ctx = note("trsm")
                ltriang_solve(ctx.array(a[j][j]), ctx.array(a[i][j]))

    return subcholesky[len(a) - 1]


def main():
    block_size, nb = args.b, args.nblocks
    n = block_size * nb
    rng = np.random.default_rng(10)
    a = rng.random((n, n))
    a = a @ a.T + n * np.eye(n)                 # symmetric positive definite
    expected = np.linalg.cholesky(a)
    worst = 0.0

    with weft.Runtime(devices=args.devices, policy="dmda", bound=True) as rt:
        for trial in range(args.trials):
            # the tiles, each an array of its own (Parla's list of PArrays)
            tiles = [[np.ascontiguousarray(a[i * block_size:(i + 1) * block_size,
                                             j * block_size:(j + 1) * block_size])
                      for j in range(nb)] for i in range(nb)]
            ap = np.zeros_like(a)

            async def test_blocked_cholesky():
                start = time.perf_counter()
                await cholesky_blocked_inplace(tiles, block_size)
                end = time.perf_counter()

                ts = weft.TaskSpace("CopyBack")

                @weft.spawn(task=ts[0], placement=weft.cpu, reads=flatten(tiles))
                def copy_back():
                    for i in range(nb):
                        for j in range(nb):
                            ap[i * block_size:(i + 1) * block_size,
                               j * block_size:(j + 1) * block_size] = tiles[i][j]
                await ts
                return end - start

            before = Counter(placed)
            seconds = rt.spawn(test_blocked_cholesky, placement=weft.cpu).result()
            rt.wait_all()
            computed = np.tril(ap)
            err = float(np.max(np.abs(a - computed @ computed.T)))
            diff = float(np.max(np.abs(computed - expected)))
            worst = max(worst, err, diff)
            on_gpu = sum(v for (k, d), v in (placed - before).items() if d != "cpu")
            print(f"trial {trial}: {seconds:.3f} s, {on_gpu} of {sum((placed - before).values())} "
                  f"tasks on GPUs, max |A - L L^T| = {err:.2e}, max |L - numpy| = {diff:.2e}")
        b = rt.bound()
        print(f"bound: makespan {b['makespan']:.3f} s over {b['tasks']} tasks, lower bound "
              f"{b['bound']:.3f} s (path {b['path']:.3f}, area {b['area']:.3f}), "
              f"{b['no_model']} tasks without a model")
        for kernel in ("potrf", "trsm", "syrk", "gemm"):
            print(f"  {kernel}:", ", ".join(f"{d} {placed[kernel, d]}" for d in
                                           [x["name"] for x in rt.devices] if placed[kernel, d]))

    tol = 1e-12 * n * float(np.max(np.abs(a)))
    if not np.isfinite(worst) or worst > tol:
        print(f"DIFFERS: error {worst:.3e} above {tol:.3e}")
        return 1
    print("equal to numpy.linalg.cholesky")
    return 0


if __name__ == "__main__":
    sys.exit(main())
