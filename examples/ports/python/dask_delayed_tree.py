"""Dask's delayed control-flow and tree-reduction examples, ported to Weft.

Original: dask/dask-tutorial, 01_dask.delayed.ipynb (solutions/01-delayed-control-flow.py):
`inc`, `double`, `add` made lazy with `dask.delayed`, `double(x)` for even
`x` and `inc(x)` for odd ones, then their total; and the tree reduction of
dask-examples' delayed.ipynb (neighbours added pairwise, level by level).
The bodies here are pure Python (they hold the GIL throughout: a short
integer loop stands in for the tutorial's `time.sleep`), and the total is
also taken as a running sum, a chain of `--count` dependent `add`s, while
the main thread waits in `.result()` with a SIGALRM timer armed: the port
checks that the handler ran while the chain was still going.

Dask's lazy edge `add(a, b)` is spelled `deps=[a, b]` plus `.result()` in
the body (python/README.md, *Coming from Dask*).  Checked against a plain
sequential run; timed against it and Dask's threaded scheduler when Dask is
installed.

Run:  python examples/ports/python/dask_delayed_tree.py [--count 4096] [--work 1000] [--strict]
Exits 1 on a wrong result (and, with --strict, when the SIGALRM handler ran
more than 0.1 s late or only after the chain had finished).
"""
import argparse
import signal
import sys
import time

import weft

parser = argparse.ArgumentParser()
parser.add_argument("--count", type=int, default=4096, help="elements (and chain length)")
parser.add_argument("--work", type=int, default=1000, help="Python loop iterations per body")
parser.add_argument("--strict", action="store_true", help="exit 1 when SIGALRM's handler is late")
args = parser.parse_args()
progress = [0]  # bodies of the chain finished, for the signal handler


def spin(x):
    for _ in range(args.work):  # pure Python: holds the GIL
        x = (x * 31 + 7) % 1000003
    return x


def inc(x):
    spin(x)
    return x + 1


def double(x):
    spin(x)
    return 2 * x


def add(x, y):
    spin(x)
    return x + y


def accumulate(x, y):  # add, as the running sum's step; counts the chain's progress
    progress[0] += 1
    return add(x, y)


def on(fn, *a):  # dask.delayed(fn)(*a): follow the Tasks among a, pass their results
    return weft.spawn(lambda: fn(*(v.result() if isinstance(v, weft.Task) else v for v in a)),
                      deps=[v for v in a if isinstance(v, weft.Task)], kind=fn.__name__)


def program(call, total):
    ys = [call(double, x) if x % 2 == 0 else call(inc, x) for x in range(args.count)]
    run = 0
    for y in ys:  # running sum: one chain of count adds
        run = call(accumulate, run, y)
    level = ys
    while len(level) > 1:  # tree reduction
        level = [call(add, level[i], level[i + 1]) if i + 1 < len(level) else level[i]
                 for i in range(0, len(level), 2)]
    return total(run), total(level[0])


def main():
    t0 = time.perf_counter()
    expect = program(lambda f, *a: f(*a), lambda v: v)
    t_seq = time.perf_counter() - t0
    fired = []
    signal.signal(signal.SIGALRM, lambda *_: fired.append((time.perf_counter() - t0, progress[0])))
    with weft.Runtime() as rt:
        progress[0] = 0
        t0 = time.perf_counter()
        tasks = program(on, lambda t: t)
        t_spawn = time.perf_counter() - t0
        at_spawn = progress[0]
        signal.setitimer(signal.ITIMER_REAL, 0.05)  # the main thread is in .result() meanwhile
        got = (tasks[0].result(), tasks[1].result())
        t_weft = time.perf_counter() - t0
        signal.setitimer(signal.ITIMER_REAL, 0)
        rt.wait_all()
        stats = rt.stats()
    adds = args.count
    print(f"sequential {t_seq:.3f} s, weft {t_weft:.3f} s on {rt.workers} workers "
          f"(spawning {t_spawn:.3f} s, {at_spawn} of {adds} chain adds done by then)")
    print(f"SIGALRM (armed for 0.050 s after the spawns) ran at "
          f"{fired[0][0] - t_spawn if fired else float('nan'):.3f} s after them, "
          f"{fired[0][1] if fired else -1} of {adds} chain adds done")
    print({k: stats[k] for k in ("tasks_spawned", "tasks_run", "steals", "parks", "autopins", "gil_kept")})
    ok = got == expect
    if not fired or fired[0][1] >= adds or fired[0][0] - t_spawn > 0.05 + 0.1:
        print("SIGALRM late: its handler did not run within 0.1 s of the timer while the chain ran"
              + (" (--strict: an error)" if args.strict else ""))
        ok = ok and not args.strict
    try:
        import dask
    except ImportError:
        dask = None
    if dask is not None:
        t0 = time.perf_counter()
        lazy = program(lambda f, *a: dask.delayed(f)(*a), lambda v: v)
        t_build = time.perf_counter() - t0
        dgot = dask.compute(*lazy, scheduler="threads")
        print(f"dask threads {time.perf_counter() - t0:.3f} s (building the graph {t_build:.3f} s)")
        ok = ok and tuple(dgot) == expect
        print("dask's sums " + ("equal to" if tuple(dgot) == expect else "DIFFERS from") + " the sequential run's")
    print(f"weft's sums {got} " + ("equal to" if got == expect else "DIFFERS from")
          + f" the sequential run's {expect}")
    print("ok" if ok else f"WRONG (SIGALRM: {fired})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
