"""Dask's delayed example, ported to Weft's Python API.

Original: dask/dask-examples, delayed.ipynb: `inc`, `dec` and `add` made lazy
with `dask.delayed`, a loop of 256 `add(inc(i), dec(inc(i)))`, then a tree
summation of the 256 results (neighbours added pairwise, level by level).

Dask passes a lazy value to the next call and resolves it there; Weft runs a
task as soon as it is spawned and hands the body exactly the arguments given.
A `weft.Task` given as an argument reaches the body as the Task (no
dependency, no value), so the port spells Dask's edge out: `deps=` lists the
Tasks among the arguments, and the body takes their `.result()`
(`call()` below does both). The tasks' random sleeps are kept, shorter.

Checked against `dask.compute` of the original graph (threaded scheduler)
when Dask is installed, else against the same loop run sequentially.

Run:  python examples/ports/python/dask_delayed_tree_sum.py [--count 256]
Exits 1 on a wrong result.
"""
import argparse
import random
import sys
import time

import weft

parser = argparse.ArgumentParser()
parser.add_argument("--count", type=int, default=256, help="a power of two")
parser.add_argument("--sleep", type=float, default=0.001, help="longest sleep of a task, seconds")
args = parser.parse_args()


def inc(x):
    time.sleep(random.random() * args.sleep)
    return x + 1


def dec(x):
    time.sleep(random.random() * args.sleep)
    return x - 1


def add(x, y):
    time.sleep(random.random() * args.sleep)
    return x + y


def _resolved(fn, *args):
    return fn(*(a.result() if isinstance(a, weft.Task) else a for a in args))


def call(fn, *args):
    """dask.delayed(fn)(*args) on Weft: the Tasks among args are followed, and
    the body gets their results."""
    return weft.spawn(_resolved, fn, *args, deps=[a for a in args if isinstance(a, weft.Task)],
                      name=fn.__name__)


def graph(delayed_inc, delayed_dec, delayed_add, count):
    zs = []
    for i in range(count):
        x = delayed_inc(i)
        y = delayed_dec(x)
        z = delayed_add(x, y)
        zs.append(z)
    L = zs
    while len(L) > 1:                            # the notebook's tree summation
        L = [delayed_add(L[i], L[i + 1]) for i in range(0, len(L), 2)]
    return zs, L[0]


def main():
    count = args.count
    if count & (count - 1):
        sys.exit("--count must be a power of two")
    with weft.Runtime():
        zs, total = graph(lambda x: call(inc, x), lambda x: call(dec, x),
                          lambda x, y: call(add, x, y), count)
        got_zs = [z.result() for z in zs]
        got = total.result()

    try:
        import dask
    except ImportError:
        who = "a sequential run"
        want_zs, want = graph(inc, dec, add, count)
    else:
        who = f"Dask {dask.__version__}"
        zs_d, total_d = graph(dask.delayed(inc), dask.delayed(dec), dask.delayed(add), count)
        want_zs, want = dask.compute(zs_d, total_d, scheduler="threads")
    print(f"weft: tree sum of {count} = {got}; {who}: {want}")
    if got != want or got_zs != list(want_zs):
        print(f"DIFFERS from {who}")
        return 1
    print(f"equal to {who}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
