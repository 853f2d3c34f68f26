"""Parla's blocked Jacobi iteration, ported to Weft's Python API.

Original: ut-parla/Parla.py, examples/jacobi.py (an `n x n` grid, `steps`
sweeps of the 4-point stencil a1[1:-1, 1:-1] = .25 * (down + up + right +
left), the rows cut into `divisions` blocks with one ghost row on each side;
each sweep a task space of one task per block, each task following the
block and its two neighbours of the sweep before, copying its ghost rows
from the neighbours' blocks and calling the kernel; an `async def` task
drives it and awaits the last sweep; the result is checked against the
whole-array stencil run sequentially). Its timed twin,
benchmarks/jacobi.py, gives the shape of the timing (perf_counter around
the driver).

The tasks are about GIL contention: the original's CPU kernel is a Numba
`@njit` without `nogil=True`, so it holds the GIL while it runs, and the
tasks' ghost-row copies and slicing are Python. Here each task computes the
`--py-rows` rows at each edge of its block (the rows its neighbours read
next sweep) in pure Python over lists, holding the GIL, and the rest of the
block with a compiled kernel that releases it:

  --kernel numpy       NumPy slices and ufuncs (the default)
  --kernel numba       the original's Numba loop, compiled with nogil=True
  --kernel numba-gil   the original's Numba loop as it is written (no
                       nogil=True): it holds the GIL, so no two tasks'
                       kernels overlap, on Weft or on threads

Every form computes each point as .25 * (((down + up) + right) + left), in
that order, so all of them give the same array bit for bit.

What changes on Weft:

- `@spawn(current_block_tasks[j], dependencies=[previous_block_tasks[max(0,
  j-1):min(divisions, j+2)]], placement=device)` is `@weft.spawn(task=cur[j],
  deps=[prev[max(0, j - 1):min(divisions, j + 2)]])`: the same slice of the
  previous sweep's space (a `weft.TaskList`). `placement=` is left out (the
  CPU only; the original's GPU variant and `LDeviceSequenceBlocked` mapper
  have no part in a CPU port).
- `CompletedTaskSpace()` for the first sweep has no Weft counterpart: the
  first sweep's tasks get `deps=[]` (python/README.md, *Coming from Parla*).
- `mapper.partition_tensor(a, overlap=1)` (a copy of each block with its
  ghost rows) is a list of NumPy copies of row ranges; `device.memory()(x)`
  (a copy to the task's device) is a plain row assignment. The decorator
  binds `j`, `in_block`, `out_block` and `in_blocks` at the spawn, as
  Parla's does, so the swapped block lists need no extra care.
- `await previous_block_tasks` is `await prev` (a task space awaits the
  tasks spawned into it).
- A second Weft form, `--mode data`, has no counterpart in the original:
  the blocks are row ranges of the two whole arrays (no copies, no ghost
  rows to copy), each task naming `reads=[src[s-1:e+1]]` and
  `readwrites=[dst[s:e]]`, and Weft derives the same neighbour-to-neighbour
  order from the overlapping ranges (the writes of sweep i+1 after the
  reads of sweep i, the reads of sweep i+1 after the writes of sweep i).
  `readwrites=`, not `writes=`: a block's first and last columns keep their
  values (a `writes=` range is overwritten as a whole).
- The original's check (`np.max(np.absolute(a1 - actual)) < 1E-14`) is an
  exact comparison here (`np.array_equal`) against the whole-array stencil;
  the sequential loop of the same block kernels and a
  `concurrent.futures.ThreadPoolExecutor` with `--workers` threads (a
  barrier per sweep) are checked alike. Their times (medians of `--reps`
  runs) are printed for information only.

Run:  python examples/ports/python/parla_jacobi.py [--n 4000] [--steps 6] [--divisions 40]
          [--py-rows 1] [--kernel numpy|numba|numba-gil] [--mode both|spaces|data]
          [--workers 2] [--reps 3]
Exits 1 (printing DIFFERS) on a wrong result.
"""
import argparse
import concurrent.futures
import os
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np

import weft

parser = argparse.ArgumentParser()
parser.add_argument("--n", type=int, default=4000, help="the grid is n x n")
parser.add_argument("--steps", type=int, default=6, help="Jacobi sweeps")
parser.add_argument("--divisions", type=int, default=40, help="blocks of rows (tasks per sweep)")
parser.add_argument("--py-rows", type=int, default=1,
                    help="rows at each edge of a block computed in pure Python (the GIL held)")
parser.add_argument("--kernel", choices=("numpy", "numba", "numba-gil"), default="numpy",
                    help="the compiled kernel for the rest of each block")
parser.add_argument("--mode", choices=("both", "spaces", "data"), default="both",
                    help="spaces: Parla's task spaces and ghost rows; data: reads=/readwrites= ranges")
parser.add_argument("--workers", type=int, default=2)
parser.add_argument("--reps", type=int, default=3, help="timed runs of each system (medians shown)")
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()
if args.n < 3 or not 1 <= args.divisions <= args.n - 2 or args.steps < 1 or args.py_rows < 0:
    parser.error("need n >= 3, 1 <= divisions <= n - 2, steps >= 1 and py-rows >= 0")


# ---- the kernels -------------------------------------------------------------

def python_rows(src, dst, lo, hi):
    """dst[k, 1:-1] for lo <= k < hi from src[k:k+3], in pure Python: holds the GIL."""
    for k in range(lo, hi):
        up, mid, down = src[k].tolist(), src[k + 1].tolist(), src[k + 2].tolist()
        dst[k, 1:-1] = [0.25 * (down[c] + up[c] + mid[c + 1] + mid[c - 1]) for c in range(1, len(mid) - 1)]


def numpy_rows(src, dst, lo, hi):
    """The same rows with NumPy: the ufuncs release the GIL."""
    if hi > lo:
        dst[lo:hi, 1:-1] = .25 * (src[lo + 2:hi + 2, 1:-1] + src[lo:hi, 1:-1]
                                  + src[lo + 1:hi + 1, 2:] + src[lo + 1:hi + 1, :-2])


def make_numba_rows(nogil):
    import numba

    @numba.njit(nogil=nogil, cache=False)
    def rows(src, dst, lo, hi):
        for k in range(lo, hi):
            for c in range(1, src.shape[1] - 1):
                dst[k, c] = .25 * (src[k + 2, c] + src[k, c] + src[k + 1, c + 1] + src[k + 1, c - 1])

    warm = np.zeros((4, 4))
    rows(warm, warm[1:3].copy(), 0, 2)          # compile before anything is timed
    return rows


compiled_rows = numpy_rows
if args.kernel != "numpy":
    compiled_rows = make_numba_rows(nogil=args.kernel == "numba")


def block_step(src, dst):
    """One block of one sweep: src holds the block's rows and one ghost row on
    each side, dst the block's rows. The edge rows go through Python, the
    rest through the compiled kernel."""
    rows = dst.shape[0]
    p = min(args.py_rows, (rows + 1) // 2)
    python_rows(src, dst, 0, p)
    compiled_rows(src, dst, p, rows - p)
    python_rows(src, dst, max(p, rows - p), rows)


# ---- the grid ----------------------------------------------------------------

def bounds():
    """[s, e) of each block's rows: the interior rows 1..n-2 in `divisions` parts."""
    inner = args.n - 2
    return [(1 + inner * j // args.divisions, 1 + inner * (j + 1) // args.divisions)
            for j in range(args.divisions)]


def initial():
    a0 = np.random.default_rng(args.seed).random((args.n, args.n))
    return a0, a0.copy()


def whole_array_reference():
    """The original's check: the stencil on the whole array, sequentially."""
    actual, _ = initial()
    start = time.perf_counter()
    for _ in range(args.steps):
        actual[1:-1, 1:-1] = .25 * (actual[2:, 1:-1] + actual[:-2, 1:-1] + actual[1:-1, 2:] + actual[1:-1, :-2])
    return time.perf_counter() - start, actual


# ---- the systems -------------------------------------------------------------

def run_sequential():
    src, dst = initial()
    start = time.perf_counter()
    for _ in range(args.steps):
        for s, e in bounds():
            block_step(src[s - 1:e + 1], dst[s:e])
        src, dst = dst, src
    return time.perf_counter() - start, src


def run_threads():
    src, dst = initial()
    with concurrent.futures.ThreadPoolExecutor(args.workers) as pool:
        start = time.perf_counter()
        for _ in range(args.steps):
            futures = [pool.submit(block_step, src[s - 1:e + 1], dst[s:e]) for s, e in bounds()]
            for f in futures:
                f.result()                  # a barrier per sweep; re-raises a failure
            src, dst = dst, src
        elapsed = time.perf_counter() - start
    return elapsed, src


def run_weft_spaces():
    """The original's graph: a task space per sweep, ghost rows copied by the tasks."""
    a0, a1 = initial()
    divisions = args.divisions
    parts = bounds()
    a0_row_groups = [a0[s - 1:e + 1].copy() for s, e in parts]
    a1_row_groups = [a1[s - 1:e + 1].copy() for s, e in parts]

    with weft.Runtime(workers=args.workers) as rt:
        async def run_jacobi():
            start = time.perf_counter()
            in_blocks, out_blocks = a0_row_groups, a1_row_groups
            prev = None
            for i in range(args.steps):
                in_blocks, out_blocks = out_blocks, in_blocks
                cur = weft.TaskSpace(f"block_tasks[{i}]")
                for j in range(divisions):
                    in_block, out_block = in_blocks[j], out_blocks[j]
                    deps = [] if prev is None else [prev[max(0, j - 1):min(divisions, j + 2)]]

                    @weft.spawn(task=cur[j], deps=deps)
                    def device_local_jacobi_task():
                        if j > 0:
                            in_block[0] = in_blocks[j - 1][-2]
                        if j < divisions - 1:
                            in_block[-1] = in_blocks[j + 1][1]
                        block_step(in_block, out_block[1:-1])
                prev = cur
            await prev
            elapsed = time.perf_counter() - start
            for j, (s, e) in enumerate(parts):
                a1[s:e] = out_blocks[j][1:-1]
            return elapsed

        elapsed = rt.spawn(run_jacobi, name="run_jacobi").result()
    return elapsed, a1


def run_weft_data():
    """Weft's own form: row ranges of the two arrays, ordered by overlap."""
    src, dst = initial()
    with weft.Runtime(workers=args.workers) as rt:
        start = time.perf_counter()
        for i in range(args.steps):
            for j, (s, e) in enumerate(bounds()):
                rt.spawn(block_step, src[s - 1:e + 1], dst[s:e],
                         reads=[src[s - 1:e + 1]], readwrites=[dst[s:e]], name=f"jacobi[{i}][{j}]")
            src, dst = dst, src
        rt.wait_all()
        elapsed = time.perf_counter() - start
    return elapsed, src


def gil_share():
    """The share of a block's time spent in pure Python (holding the GIL), alone."""
    src, dst = initial()
    s, e = bounds()[0]
    block_src, block_dst = src[s - 1:e + 1], dst[s:e]
    rows = e - s
    p = min(args.py_rows, (rows + 1) // 2)
    best_py = best_c = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        python_rows(block_src, block_dst, 0, p)
        python_rows(block_src, block_dst, max(p, rows - p), rows)
        t1 = time.perf_counter()
        compiled_rows(block_src, block_dst, p, rows - p)
        t2 = time.perf_counter()
        best_py, best_c = min(best_py, t1 - t0), min(best_c, t2 - t1)
    return best_py / (best_py + best_c), (best_py + best_c)


def main():
    share, block_time = gil_share()
    held = f"{share:.0%} in pure Python, holding the GIL"
    if args.kernel == "numba-gil":
        held = "all of it holding the GIL (Numba without nogil=True)"
    print(f"Jacobi: {args.n} x {args.n} grid, {args.steps} sweeps, {args.divisions} blocks of about "
          f"{(args.n - 2) // args.divisions} rows, {args.workers} workers; kernel {args.kernel}, "
          f"{args.py_rows} Python row(s) at each block edge; a block takes {block_time * 1e3:.2f} ms, {held}")

    ref_time, want = whole_array_reference()
    systems = [("sequential", run_sequential)]
    if args.mode in ("both", "spaces"):
        systems.append(("weft spaces", run_weft_spaces))
    if args.mode in ("both", "data"):
        systems.append(("weft data", run_weft_data))
    systems.append((f"threads({args.workers})", run_threads))

    times = {name: [] for name, _ in systems}
    failed = False
    for _ in range(max(1, args.reps)):
        for name, run in systems:
            elapsed, got = run()
            times[name].append(elapsed)
            if not np.array_equal(got, want):
                bad = np.argwhere(got != want)
                print(f"DIFFERS: {name}: {len(bad)} points differ from the whole-array stencil, "
                      f"the first at {tuple(bad[0])}, by up to {np.max(np.abs(got - want)):.3e}")
                failed = True
    seq = statistics.median(times["sequential"])
    print(f"  {'whole-array NumPy':18s} {ref_time * 1e3:9.2f} ms  (the original's check; one run)")
    for name, _ in systems:
        med = statistics.median(times[name])
        print(f"  {name:18s} {med * 1e3:9.2f} ms  {seq / med:5.2f}x sequential  "
              f"(runs: {', '.join(f'{t * 1e3:.1f}' for t in times[name])})")
    if failed:
        return 1
    print("equal to the whole-array stencil, bit for bit (every system, every run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
