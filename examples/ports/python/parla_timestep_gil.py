"""Parla's "timestep" GIL-contention benchmark, ported to Weft's Python API.

Original: ut-parla/Parla.py, benchmarks/overhead/timestep/timestep_cpu.py
(its threads baseline: timestep_threads.py in the same folder). A grid of
`--steps` x `--width` tasks `T[1, t, ng]`: chain `ng` goes step by step
(`T[1, t, ng]` follows `T[1, t-1, ng]`), or, with `--restrict 1`, every task
of step t follows every task of step t-1; `--isync 1` makes the driver wait
for each step before spawning the next. Each task runs one of two kernels:

- `--sleep 1`: Parla's `waste_time`: `--accesses` rounds of a wait with the
  GIL released (Parla's Cython `bsleep`; here `weft.bench.busy`, a C spin
  that releases the GIL) followed by a stretch of work holding the GIL
  (Parla's `sleep_with_gil`; here a pure-Python loop, calibrated at start to
  take that long alone). `--frac` is the share of the task's `-t`
  microseconds spent holding the GIL: the GIL contention the Parla paper
  measures.
- `--sleep 0`: Parla's `increment`, a Numba `nogil` kernel adding random
  numbers to the chain's `n x d` array; here NumPy (a seeded generator's
  `random` and an in-place add, both release the GIL), seeded per task so
  that the result is reproducible.

What changes on Weft:

- Parla's `@spawn(T[1, t, ng], dependencies=deps, vcus=v)` is
  `@weft.spawn(task=T[1, t, ng], deps=deps)`; `vcus=` is `share=` (passed
  with `--vcus 1`), which needs `placement=weft.cpu` to reserve anything
  (without a placement the share is not applied); the driver
  (`@spawn(vcus=0) async def main_task`) is an `async def` body spawned with
  no share (Weft has no `vcus=0`).
- `await tasks([...])` is `await T[1, t, 0:width]` (a slice of the space),
  `await T` is the same.
- With `--deps 0` the `increment` tasks of a chain all update one array
  without an order: in Parla they race; here they name the array in
  `commutes=` (one at a time, in any order), and the check allows for the
  order of the additions.
- The `sleep_with_gil` stand-in returns a checksum of its Python loop, so
  every task has a result to compare with a sequential run of the same
  kernels; each task also returns when it started and ended, and the check
  verifies that no task started before the tasks it follows had ended.

Compared with a sequential run of the same kernels (the result, exactly, and
the time), with Parla's threads baseline (one thread per chain, a barrier per
step where the graph needs one) and, when installed, with Dask's threaded
scheduler on the same graph through `dask.delayed`.

Run:  python examples/ports/python/parla_timestep_gil.py [--workers 2] [--steps 20]
          [-t 2000] [--accesses 10] [--frac 0.5] [--sleep 1] [--restrict 0] [--isync 0]
Exits 1 on a wrong result.
"""
import argparse
import os
import statistics
import sys
import threading
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np

import weft
import weft.bench

parser = argparse.ArgumentParser()
parser.add_argument("--workers", type=int, default=2)
parser.add_argument("--width", type=int, default=0, help="chains (0: --workers)")
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("-d", type=int, default=7, help="columns of each chain's array (--sleep 0)")
parser.add_argument("-n", type=int, default=2**15, help="rows of each chain's array (--sleep 0)")
parser.add_argument("--isync", type=int, default=0, help="wait for each step before the next")
parser.add_argument("--vcus", type=int, default=0, help="give each task share=1/workers")
parser.add_argument("--deps", type=int, default=1, help="0: no dependencies between steps")
parser.add_argument("--verbose", type=int, default=0)
parser.add_argument("-t", type=int, default=2000, help="microseconds of work per task (--sleep 1)")
parser.add_argument("--accesses", type=int, default=10, help="GIL-free/GIL-held rounds per task")
parser.add_argument("--frac", type=float, default=0.5, help="share of a task's time holding the GIL")
parser.add_argument("--strong", type=int, default=0, help="divide the work by --workers")
parser.add_argument("--sleep", type=int, default=1, help="1: waste_time kernel, 0: increment kernel")
parser.add_argument("--restrict", type=int, default=0, help="each task follows the whole previous step")
parser.add_argument("--reps", type=int, default=1, help="timed runs of each system (the median is shown)")
args = parser.parse_args()
if args.width == 0:
    args.width = args.workers


# ---- kernels ----------------------------------------------------------------

def _calibrate():
    """Iterations of the GIL-held loop per microsecond, on this machine, alone."""
    n = 20000
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        _gil_loop(n, 1)
        best = min(best, time.perf_counter() - t0)
    return n / (best * 1e6)


def _gil_loop(iters, x):
    for _ in range(iters):               # pure Python: holds the GIL throughout
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
    return x


ITERS_PER_US = _calibrate() if args.sleep else 0.0


def free_sleep(us):
    weft.bench.busy(us)                  # C spin with the GIL released (Parla: bsleep)


def lock_sleep(us, seed):
    return _gil_loop(int(us * ITERS_PER_US), seed)   # Parla: sleep_with_gil


def waste_time(free_time, gil_time, accesses, seed):
    x = seed
    for _ in range(accesses):
        free_sleep(free_time)
        x = lock_sleep(gil_time, x)
    return x


def increment(array, t, ng):
    rng = np.random.default_rng([t + 1, ng])
    np.add(array, rng.random(array.shape), out=array)


def kernel_times():
    kernel_time = args.t / args.accesses
    if args.strong:
        kernel_time /= args.workers
    return kernel_time * (1.0 - args.frac), kernel_time * args.frac


def task_body(t, ng, arrays):
    """One task of the grid: its checksum (sleep) and its start and end."""
    start = time.perf_counter()
    if args.sleep:
        free_time, lock_time = kernel_times()
        out = waste_time(free_time, lock_time, args.accesses, 1 + 7919 * t + ng)
    else:
        increment(arrays[ng], t, ng)
        out = None
    end = time.perf_counter()
    if args.verbose:
        print("Task", [1, t, ng], "took", end - start, flush=True)
    return out, start, end


def new_arrays():
    n = args.n // args.workers if args.strong else args.n
    arrays = []
    for ng in range(args.width):
        a = np.zeros((n, args.d))
        increment(a, -1, ng)
        arrays.append(a)
    return arrays


def follows(t, ng):
    """The (t, ng) keys the task (t, ng) follows."""
    if not args.deps or t == 0:
        return []
    if args.restrict:
        return [(t - 1, lng) for lng in range(args.width)]
    return [(t - 1, ng)]


# ---- the systems ------------------------------------------------------------

def run_weft():
    arrays = new_arrays()
    share = 1.0 / args.workers if args.vcus else None
    placement = weft.cpu if args.vcus else None        # share= reserves only on a placement
    with weft.Runtime(workers=args.workers) as rt:
        T = weft.TaskSpace("Outer")

        async def main_task():
            start_t = time.perf_counter()
            for t in range(args.steps):
                for ng in range(args.width):
                    deps = [T[1, k[0], k[1]] for k in follows(t, ng)]
                    commutes = [arrays[ng]] if not args.deps and not args.sleep else []

                    @weft.spawn(task=T[1, t, ng], deps=deps, commutes=commutes, share=share,
                                placement=placement)
                    def task():
                        return task_body(t, ng, arrays)

                if args.isync:
                    if args.restrict:
                        await T[1, t, 0:args.width]
                    else:
                        await T
            if args.restrict:
                await T[1, args.steps - 1, 0:args.width]
            else:
                await T
            return time.perf_counter() - start_t

        elapsed = rt.spawn(main_task, name="main_task").result()
        results = {(t, ng): T[1, t, ng].result() for t in range(args.steps) for ng in range(args.width)}
        autopins = rt.stats()["autopins"]
    return elapsed, results, arrays, autopins


def run_sequential():
    arrays = new_arrays()
    start_t = time.perf_counter()
    results = {(t, ng): task_body(t, ng, arrays) for t in range(args.steps) for ng in range(args.width)}
    return time.perf_counter() - start_t, results, arrays


def run_threads():
    """timestep_threads.py: a thread per chain; a barrier after each step when
    the graph orders steps as a whole (--restrict) or the driver does (--isync)."""
    arrays = new_arrays()
    results = {}
    barrier = threading.Barrier(args.width)

    def chain(ng):
        for t in range(args.steps):
            results[t, ng] = task_body(t, ng, arrays)
            if args.restrict or args.isync:
                barrier.wait()

    threads = [threading.Thread(target=chain, args=(ng,)) for ng in range(args.width)]
    start_t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return time.perf_counter() - start_t, results, arrays


def run_dask(dask):
    arrays = new_arrays()

    def node(t, ng, *after):
        return task_body(t, ng, arrays)

    nodes = {}
    for t in range(args.steps):
        for ng in range(args.width):
            nodes[t, ng] = dask.delayed(node, pure=False)(t, ng, *[nodes[k] for k in follows(t, ng)])
    keys = list(nodes)
    start_t = time.perf_counter()
    values = dask.compute(*nodes.values(), scheduler="threads", num_workers=args.workers)
    return time.perf_counter() - start_t, dict(zip(keys, values)), arrays


# ---- checks -----------------------------------------------------------------

def check(who, results, arrays, want_results, want_arrays):
    """None if equal, else what differs."""
    if sorted(results) != sorted(want_results):
        return f"{who} ran {len(results)} tasks, the sequential run {len(want_results)}"
    for key, (out, start, end) in results.items():
        if out != want_results[key][0]:
            return f"{who}: task {key} returned {out}, the sequential run {want_results[key][0]}"
        for k in follows(*key):
            if start < results[k][2]:
                return f"{who}: task {key} started {(results[k][2] - start) * 1e6:.0f} us before {k} ended"
        if args.isync and who == "weft" and key[0] > 0:
            last = max(results[key[0] - 1, ng][2] for ng in range(args.width))
            if start < last:
                return f"{who}: task {key} started before step {key[0] - 1} ended (--isync)"
    if not args.sleep:
        exact = args.deps or who == "threads"
        for ng, (a, b) in enumerate(zip(arrays, want_arrays)):
            same = np.array_equal(a, b) if exact else np.allclose(a, b, rtol=1e-12, atol=0)
            if not same:
                return f"{who}: chain {ng}'s array differs by up to {np.max(np.abs(a - b)):.3e}"
    return None


def main():
    free_time, lock_time = kernel_times()
    print(f"{args.steps} steps x {args.width} chains on {args.workers} workers; kernel: "
          + (f"waste_time, {args.accesses} x ({free_time:.0f} us GIL released + {lock_time:.0f} us "
             f"holding it)" if args.sleep else f"increment of {args.n} x {args.d} arrays"))
    try:
        import dask
    except ImportError:
        dask = None

    systems = [("sequential", run_sequential), ("weft", run_weft), ("threads", run_threads)]
    if dask is not None and not args.isync:
        systems.append((f"dask {dask.__version__}", lambda: run_dask(dask)))
    times = {name: [] for name, _ in systems}
    got = {}
    for _ in range(max(1, args.reps)):
        for name, run in systems:
            r = run()
            times[name].append(r[0])
            got[name] = r
    want = got["sequential"]
    print(", ".join(str(v) for v in (args.workers, args.steps, args.t, args.accesses, args.frac,
                                     statistics.median(times["weft"]))))     # Parla's line
    seq = statistics.median(times["sequential"])
    for name, _ in systems:
        med = statistics.median(times[name])
        extra = f" (autopins {got['weft'][3]})" if name == "weft" else ""
        print(f"  {name:12s} {med * 1e3:9.2f} ms  {seq / med:5.2f}x sequential{extra}")

    failed = False
    for name, _ in systems[1:]:
        r = got[name]
        why = check(name.split()[0], r[1], r[2], want[1], want[2])
        if why:
            print(f"DIFFERS: {why}")
            failed = True
    if failed:
        return 1
    print("equal to a sequential run of the same kernels"
          + (" (and dependencies respected)" if args.deps else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
