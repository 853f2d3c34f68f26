"""Dask's array example, ported to Weft's Python API.

Original: dask/dask-examples, array.ipynb:

    x = da.random.random((10000, 10000), chunks=(1000, 1000))
    y = x + x.T
    z = y[::2, 5000:].mean(axis=1)
    z.compute()
    y = y.persist()
    y[0, 0].compute()
    y.sum().compute()

On Weft the chunks are tiles of NumPy arrays (`rt.partition`), one task per
chunk of each step:

- `y = x + x.T`: the task of tile (i, j) reads tiles (i, j) and (j, i) of
  x and writes tile (i, j) of y;
- `z = y[::2, n/2:].mean(axis=1)`: each tile of y's right half sums its even
  rows into the tile of z they belong to, as a reduction (`reduces=` with
  `weft.SUM`: per-task private copies, combined in spawn order), then one
  task per tile of z divides by the count;
- `y.sum()`: every tile of y reduces into one float (`weft.SUM` again);
- `y.persist()` is what Weft does anyway (y stays in memory), and
  `y[0, 0]` is read by a task that follows y's writers.

Checked against Dask itself when it is installed (`pip install "dask[array]"`),
else against the same expressions in NumPy; and against a second Weft run,
bit for bit (reductions combine in spawn order).

Run:  python examples/ports/python/dask_array_reductions.py [--n 1200] [--chunk 200]
Exits 1 on a wrong result.
"""
import argparse
import sys

import numpy as np

import weft

parser = argparse.ArgumentParser()
parser.add_argument("--n", type=int, default=1200)
parser.add_argument("--chunk", type=int, default=200)
args = parser.parse_args()


def add_transpose(yt, xt, xs):
    """y[i, j] = x[i, j] + x[j, i].T on the host's tiles."""
    ctx = weft.context()
    ctx.array(yt)[...] = ctx.array(xt) + ctx.array(xs).T


def even_row_sums(yt, zt):
    """This tile's share of y[::2, n/2:].sum(axis=1), into z's tile (its private copy)."""
    ctx = weft.context()
    acc = ctx.array(zt)                          # identity-filled, z's tile interior
    acc += ctx.array(yt)[::2].sum(axis=1)


def divide(zt, count):
    weft.context().array(zt)[...] /= count


def tile_sum(yt, total):
    ctx = weft.context()
    ctx.array(total)[0] += ctx.array(yt).sum()


def weft_run(x, chunk):
    n = x.shape[0]
    nb = n // chunk
    y = np.empty_like(x)
    z = np.zeros(n // 2)
    total = np.zeros(1)
    with weft.Runtime() as rt:
        xt = rt.partition(x, (nb, nb))
        yt = rt.partition(y, (nb, nb))
        zt = rt.partition(z, nb)                 # z's tile i: the even rows of y's block row i
        for i in range(nb):
            for j in range(nb):
                rt.spawn(add_transpose, yt[i][j], xt[i][j], xt[j][i],
                         reads=[xt[i][j], xt[j][i]], writes=[yt[i][j]])
        for i in range(nb):
            for j in range(nb // 2, nb):         # y[:, n/2:]
                rt.spawn(even_row_sums, yt[i][j], zt[i], reads=[yt[i][j]], reduces=[(zt[i], weft.SUM)])
        for i in range(nb):
            rt.spawn(divide, zt[i], n // 2, readwrites=[zt[i]])
        y00 = rt.spawn(lambda: float(y[0, 0]), reads=[yt[0][0]])
        for i in range(nb):
            for j in range(nb):
                rt.spawn(tile_sum, yt[i][j], total, reads=[yt[i][j]], reduces=[(total, weft.SUM)])
        rt.wait_all()
        y00 = y00.result()
        rt.fetch(z)
        rt.fetch(total)
    return y, z, y00, float(total[0])


def reference(x, chunk):
    n = x.shape[0]
    try:
        import dask
        import dask.array as da
    except ImportError:
        y = x + x.T
        return "NumPy", y, y[::2, n // 2:].mean(axis=1), float(y[0, 0]), float(y.sum())
    dx = da.from_array(x, chunks=(chunk, chunk))
    dy = dx + dx.T
    dz = dy[::2, n // 2:].mean(axis=1)
    y, z, y00, s = dask.compute(dy, dz, dy[0, 0], dy.sum(), scheduler="threads")
    return f"Dask {dask.__version__}", y, z, float(y00), float(s)


def main():
    n, chunk = args.n, args.chunk
    if n % chunk or (n // chunk) % 2 or chunk % 2:
        sys.exit("--n must be an even number of chunks, each of an even size")
    x = np.random.default_rng(0).random((n, n))
    y, z, y00, s = weft_run(x, chunk)
    y2, z2, y002, s2 = weft_run(x, chunk)
    who, ry, rz, ry00, rs = reference(x, chunk)
    print(f"weft: z[:3] = {z[:3]}, y[0, 0] = {y00:.6f}, y.sum() = {s:.6f}")
    print(f"{who}: z[:3] = {rz[:3]}, y[0, 0] = {ry00:.6f}, y.sum() = {rs:.6f}")
    ok = (np.array_equal(y, ry) and np.allclose(z, rz, rtol=1e-12, atol=0) and y00 == ry00
          and abs(s - rs) <= 1e-12 * abs(rs))
    same = np.array_equal(z, z2) and s == s2 and np.array_equal(y, y2) and y00 == y002
    if not ok:
        print(f"DIFFERS from {who}")
        return 1
    if not same:
        print("DIFFERS between two Weft runs (reductions should combine in spawn order)")
        return 1
    print(f"equal to {who} (and two Weft runs agree bit for bit)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
