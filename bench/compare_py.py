"""py_task_us of whichever `weft` this interpreter imports, for bench/compare.sh.

The figure is bench/py/bench.py's own (its graph, its runner and its
`measure`: empty bodies on stencil_1d, wall x workers / tasks, median of
--reps runs after one warm-up run), without the METG sweep that follows it
there.  compare.sh runs this one file with the old and the new build's venv,
so both sides are measured by the same harness.

    <venv>/bin/python bench/compare_py.py [--steps 1000] [--width 2] [--workers 2] [--reps 5]

Prints one line: `py_task_us weft <value>`.
"""
import argparse
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "py"))
import bench  # noqa: E402  (bench/py/bench.py)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--width", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)
    ctx = {}
    try:
        bench.run_weft(args.steps, args.width, args.workers, None, ctx)  # warm-up
        cost = bench.measure(bench.run_weft, ctx, args.steps, args.width, args.workers, None, args.reps)
    finally:
        bench.close_weft(ctx)
    print(f"py_task_us weft {cost:.2f}")


if __name__ == "__main__":
    main()
