"""How long rt.wait_all() takes to return after the last body of a run: a
chain of --links bodies of --us microseconds (a C busy-wait that releases
the GIL) on 2 workers, each body recording when it ended; the figure is the
time from the last body's end to wait_all's return, the median over --runs
runs after 5 untimed ones.

    python bench/py/wait_tail.py [--links 200] [--us 50] [--runs 20]

Prints `wait_tail_us weft <median>` and the range.
"""
import argparse
import statistics
import time

import weft
from weft.bench import busy


def body(us, rec):
    busy(us)
    rec.append(time.perf_counter_ns())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--links", type=int, default=200)
    ap.add_argument("--us", type=float, default=50.0)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args(argv)
    tails = []
    with weft.Runtime(workers=2) as rt:
        for r in range(args.runs + 5):
            rec = []
            prev = rt.spawn(body, args.us, rec)
            for _ in range(args.links - 1):
                prev = rt.spawn(body, args.us, rec, deps=[prev])
            rt.wait_all()
            end = time.perf_counter_ns()
            if r >= 5:
                tails.append((end - rec[-1]) / 1000)
    print(f"# a chain of {args.links} bodies of {args.us:g} us, {args.runs} runs: from the last body's end "
          f"to wait_all's return, {min(tails):.1f}-{max(tails):.1f} us")
    print(f"wait_tail_us weft {statistics.median(tails):.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
