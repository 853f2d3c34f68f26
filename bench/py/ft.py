"""Pure-Python CPU-bound task bodies on 1 and 2 workers: the speed-up the
interpreter this runs on allows (free-threaded CPython without the GIL, or a
GIL build).  Run by bench/py/ft.sh under both interpreters, interleaved.

Each body is a pure-Python loop (integer arithmetic, no calls into C that
release the GIL) calibrated on this interpreter to last about L us.  N
independent tasks are spawned into a Runtime with 1 worker, then with 2
workers; the speed-up is wall(1 worker) / wall(2 workers).  Prints, for each
body length, the median over --reps runs:

    speedup_<L>us weft <value>

    python bench/py/ft.py [--lengths 15,50] [--tasks-ms 400] [--reps 5]
"""
import argparse
import statistics
import sys
import time

import weft


def body(k):
    x = 0
    for i in range(k):
        x += i * i
    return x


def calibrate(us):
    """Iterations of body() that take about `us` microseconds here."""
    k = 1000
    while True:
        t0 = time.perf_counter()
        for _ in range(20):
            body(k)
        per = (time.perf_counter() - t0) / 20
        if per > 2e-3:
            break
        k *= 2
    return max(1, int(k * us * 1e-6 / per))


def wall(workers, n, k):
    with weft.Runtime(workers=workers) as rt:
        t0 = time.perf_counter()
        for _ in range(n):
            rt.spawn(body, k)
        rt.wait_all()
        return time.perf_counter() - t0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", default="15,50", help="body lengths in us")
    ap.add_argument("--tasks-ms", type=float, default=400, help="serial work per run, ms")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    print(f"# {sys.version.split()[0]} {'with' if gil else 'without'} the GIL", flush=True)
    for us in (float(x) for x in args.lengths.split(",")):
        k = calibrate(us)
        n = max(100, int(args.tasks_ms * 1000 / us))
        ratios = []
        for _ in range(args.reps):
            w1 = wall(1, n, k)
            w2 = wall(2, n, k)
            ratios.append(w1 / w2)
        print(f"# {us:g} us bodies ({k} iterations), {n} tasks: speed-ups "
              + " ".join(f"{r:.2f}" for r in ratios), flush=True)
        print(f"speedup_{us:g}us weft {statistics.median(ratios):.3f}", flush=True)


if __name__ == "__main__":
    main()
