"""Numba kernels as task bodies: the speed-up of independent tasks whose
body is one @numba.njit(nogil=True) kernel of about 200 us, on 2 workers,
over calling the same kernels one after another in one thread (the peer: a
plain loop, no runtime).  The same with the kernel compiled without
nogil=True shows what the GIL costs (about 1: the calls run one at a time).

    numba_nogil_speedup weft <v>   sequential time / weft time, nogil kernels
    numba_gil_speedup weft <v>     the same, kernels that hold the GIL
    ... threads <v>                the ceiling on this machine: plain threads,
                                   one per worker, each calling the kernel on
                                   its share of the buffers (no runtime)

Each figure is the median of --reps rounds; in a round the sequential loop,
the weft run and the threads alternate (each parallel run after a short
untimed one of its kind), and a run during which other processes used
more than 10% of the machine is run again (up to 4 times).

    .venv/bin/python bench/py/numba_gil.py [--tasks 400] [--us 200] [--reps 7] [--workers 2]
"""
import argparse
import os
import statistics
import sys
import threading
import time

import numpy as np

import weft

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import _cpu_snapshot, _others_busy  # noqa: E402

try:
    import numba
except ImportError:
    print("# numba is not installed (python/requirements-test.txt has it): no numba figures")
    sys.exit(0)


def _kernel(nogil):
    @numba.njit(nogil=nogil)
    def work(x, rounds):
        # a dependent chain of floating-point operations: no vectorisation,
        # the same time per round on every call
        s = x[0]
        for _ in range(rounds):
            s = s * 0.999999 + 1e-9
        x[0] = s
        return s

    return work


def _calibrate(work, us):
    """The rounds that make one call take about `us` microseconds."""
    x = np.ones(1)
    work(x, 10)  # compile
    rounds = 1000
    while True:
        t0 = time.perf_counter()
        work(x, rounds)
        dt = time.perf_counter() - t0
        if dt > 0.02:
            return max(1, int(rounds * us * 1e-6 / dt))
        rounds *= 4


def _sequential(work, bufs, rounds):
    t0 = time.perf_counter()
    for b in bufs:
        work(b, rounds)
    return time.perf_counter() - t0


def _weft(rt, work, bufs, rounds):
    t0 = time.perf_counter()
    for b in bufs:
        rt.spawn(work, b, rounds)
    rt.wait_all()
    return time.perf_counter() - t0


def _threads(work, bufs, rounds, workers):
    """The ceiling: `workers` plain threads, each calling the kernel on its
    share of the buffers (no tasks, no runtime)."""
    parts = [bufs[k::workers] for k in range(workers)]
    ts = [threading.Thread(target=_sequential, args=(work, p, rounds)) for p in parts]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return time.perf_counter() - t0


def _quiet(fn, *args):
    """fn(*args)'s time, run again while other processes are busy."""
    for _ in range(5):
        a = _cpu_snapshot()
        t = fn(*args)
        if _others_busy(a, _cpu_snapshot()) <= 0.10:
            break
        time.sleep(0.2)
    return t


def speedup(nogil, tasks, us, reps, workers):
    work = _kernel(nogil)
    rounds = _calibrate(work, us)
    bufs = [np.ones(1) for _ in range(tasks)]
    ratios, ceiling = [], []
    with weft.Runtime(workers=workers) as rt:
        _weft(rt, work, bufs[:workers * 4], rounds)  # warm up
        for _ in range(reps):
            # Each parallel run follows a short untimed one of its own kind:
            # the first two-thread run after the one-thread loop was slower
            # by up to 10%, whichever system ran it (waking the idle core).
            seq = _quiet(_sequential, work, bufs, rounds)
            _weft(rt, work, bufs[:4 * workers], rounds)
            par = _quiet(_weft, rt, work, bufs, rounds)
            _threads(work, bufs[:4 * workers], rounds, workers)
            thr = _quiet(_threads, work, bufs, rounds, workers)
            ratios.append(seq / par)
            ceiling.append(seq / thr)
    per_call = _sequential(work, bufs[:50], rounds) / 50 * 1e6
    return statistics.median(ratios), min(ratios), max(ratios), statistics.median(ceiling), per_call


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=400)
    ap.add_argument("--us", type=float, default=200.0, help="kernel length, microseconds")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    print(f"# numba {numba.__version__}, {args.tasks} independent tasks of one ~{args.us:g} us njit kernel, "
          f"{args.workers} workers, median of {args.reps} rounds (min-max)")
    for nogil, name in ((True, "numba_nogil_speedup"), (False, "numba_gil_speedup")):
        med, lo, hi, thr, per_call = speedup(nogil, args.tasks, args.us, args.reps, args.workers)
        print(f"# nogil={nogil}: kernel {per_call:.0f} us a call; weft's speed-up {lo:.2f}-{hi:.2f}")
        print(f"{name} weft {med:.3f}")
        print(f"{name} threads {thr:.3f}")


if __name__ == "__main__":
    main()
