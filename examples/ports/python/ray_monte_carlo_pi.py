"""Ray's Monte Carlo estimation of pi, with its nested-task forms, ported to Weft's Python API.

Originals: ray-project/ray, doc/source/ray-core/doc_code/monte_carlo_pi.py
(the "Monte Carlo Estimation of pi" tutorial): `NUM_SAMPLING_TASKS` remote
`sampling_task`s each draw points in the square with `random.uniform` and
count those in the unit circle, reporting to a `ProgressActor` every
million samples; the driver polls the actor's progress once a second and
then sums `ray.get(results)`.  And doc/source/ray-core/doc_code/nested-tasks.py
(the "Nested Remote Functions" page): `g` returns the refs of the tasks it
started, `h` returns `ray.get([...])` of the tasks it started.

What the port runs, each checked exactly (the count inside the circle of
every sampling task) against a sequential run of the same functions:

  flat        the tutorial: the program's thread spawns the sampling tasks,
              polls the progress object meanwhile, and takes every result
  h           one task spawns the sampling tasks and returns their results
              (`ray.get` of a list inside a task: `.result()` on each)
  g           one task returns the Tasks it spawned; the program's thread
              takes their results (a Task outlives the body that spawned it)
  tree        a binary tree of tasks over the sampling tasks, each inner
              task spawning its two halves and waiting for them: nested
              waits deeper than the workers
  as-done     the tasks' results taken in the order they finish (Ray's
              `ray.wait(refs, num_returns=1)`): `weft.as_completed`

with `--body py` (the tutorial's pure-Python loop: the GIL held) and
`--body np` (NumPy's generator and `np.hypot` over blocks of points: the
GIL released), on 1 and `--workers` workers, and the flat and tree forms on
a `concurrent.futures.ThreadPoolExecutor` (tree: with `--workers` threads it
deadlocks on its nested waits; each wait has a deadline so that the run
ends and says so).

What changed: Ray's `.remote(...)` is `weft.spawn(f, ...)`, `ray.get(ref)`
`task.result()`, `ray.get(list)` a list of `.result()`s.  The actor becomes
an object with a lock (Weft has no actors; the bodies share the program's
memory).  Each sampling task draws from its own generator seeded with its
task id, where the tutorial draws from the `random` module's shared one: so
the counts do not depend on which thread runs what, and a sequential run
gives the same counts to the point.

Run:  python examples/ports/python/ray_monte_carlo_pi.py [--tasks 16] [--samples 100000]
          [--np-samples 2000000] [--workers 2] [--reps 3]
Exits 1 on a wrong result.
"""
import argparse
import concurrent.futures as cf
import faulthandler
import math
import random
import statistics
import sys
import threading
import time

import numpy as np

import weft

parser = argparse.ArgumentParser()
parser.add_argument("--tasks", type=int, default=16, help="NUM_SAMPLING_TASKS")
parser.add_argument("--samples", type=int, default=100_000, help="NUM_SAMPLES_PER_TASK, pure-Python bodies")
parser.add_argument("--np-samples", type=int, default=2_000_000, help="samples per task, NumPy bodies")
parser.add_argument("--report", type=int, default=10_000, help="samples between progress reports")
parser.add_argument("--workers", type=int, default=2)
parser.add_argument("--reps", type=int, default=3, help="timed repetitions (medians shown)")
parser.add_argument("--pool-deadline", type=float, default=None,
                    help="seconds a thread-pool run may take before it counts as deadlocked "
                         "(default: 10 x the sequential run + 2 s)")
parser.add_argument("--timeout", type=float, default=600, help="the whole run's deadline (faulthandler)")
parser.add_argument("--pools", type=int, default=1,
                    help="0: leave out the ThreadPoolExecutor runs (their deadlocked threads are left blocked)")
args = parser.parse_args()

faulthandler.dump_traceback_later(args.timeout, exit=True)

NP_BLOCK = 250_000


# ---- the tutorial's actor, as a shared object ----------------------------------

class Progress:
    """ProgressActor: each task's samples done so far, under a lock."""

    def __init__(self, total):
        self.total = total
        self.done = {}
        self.lock = threading.Lock()

    def report_progress(self, task_id, n):
        with self.lock:
            self.done[task_id] = n

    def get_progress(self):
        with self.lock:
            return sum(self.done.values()) / self.total


# ---- the sampling tasks -----------------------------------------------------------

def sampling_task(num_samples, task_id, progress):
    """The tutorial's loop; its generator is the task's own."""
    rng = random.Random(task_id)
    inside = 0
    for i in range(num_samples):
        x, y = rng.uniform(-1, 1), rng.uniform(-1, 1)
        if math.hypot(x, y) <= 1:
            inside += 1
        if (i + 1) % args.report == 0:
            progress.report_progress(task_id, i + 1)
    progress.report_progress(task_id, num_samples)
    return inside


def np_sampling_task(num_samples, task_id, progress):
    """The same count over blocks of points with NumPy (the GIL released in
    the generator and the ufuncs)."""
    rng = np.random.default_rng(task_id)
    inside = 0
    for start in range(0, num_samples, NP_BLOCK):
        n = min(NP_BLOCK, num_samples - start)
        xy = rng.uniform(-1.0, 1.0, size=(2, n))
        inside += int(np.count_nonzero(np.hypot(xy[0], xy[1]) <= 1.0))
        progress.report_progress(task_id, start + n)
    return inside


# ---- the forms, on Weft ----------------------------------------------------------

def flat(fn, n, progress, poll):
    results = [weft.spawn(fn, n, i, progress) for i in range(args.tasks)]
    polls = 0
    if poll:                                   # the tutorial's progress loop, every 10 ms
        while progress.get_progress() < 1:
            polls += 1
            time.sleep(0.01)
    return [t.result() for t in results], (polls, progress.get_progress())


def h(fn, n, progress):
    return [t.result() for t in [weft.spawn(fn, n, i, progress) for i in range(args.tasks)]]


def g(fn, n, progress):
    return [weft.spawn(fn, n, i, progress) for i in range(args.tasks)]


def tree(fn, n, progress, lo, hi):
    if hi - lo == 1:
        return [fn(n, lo, progress)]
    mid = (lo + hi) // 2
    a = weft.spawn(tree, fn, n, progress, lo, mid)
    b = weft.spawn(tree, fn, n, progress, mid, hi)
    return a.result() + b.result()


def as_done(fn, n, progress):
    index = {weft.spawn(fn, n, i, progress): i for i in range(args.tasks)}
    out = [0] * args.tasks
    for t in weft.as_completed(index):
        out[index[t]] = t.result()
    return out


# ---- the thread pool ---------------------------------------------------------------

class Deadlocked(Exception):
    pass


def pool_tree(pool, fn, n, progress, lo, hi, deadline):
    if hi - lo == 1:
        return [fn(n, lo, progress)]
    mid = (lo + hi) // 2
    a = pool.submit(pool_tree, pool, fn, n, progress, lo, mid, deadline)
    b = pool.submit(pool_tree, pool, fn, n, progress, mid, hi, deadline)
    try:
        return (a.result(timeout=max(0.0, deadline - time.monotonic()))
                + b.result(timeout=max(0.0, deadline - time.monotonic())))
    except cf.TimeoutError:
        raise Deadlocked() from None


# ---- the runs -------------------------------------------------------------------------

def median_time(fn, reps):
    times, out = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def run_body(label, fn, n):
    ok = True
    total = args.tasks * n
    levels = max(1, math.ceil(math.log2(args.tasks))) + 1
    print(f"\n== {label}: {args.tasks} sampling tasks x {n:,} samples; the tree has "
          f"{2 * args.tasks - 1} tasks, {levels} levels of nested waits")
    seq_t, expected = median_time(lambda: [fn(n, i, Progress(total)) for i in range(args.tasks)], args.reps)
    pi = 4 * sum(expected) / total
    print(f"  {'sequential':34} {seq_t * 1e3:9.1f} ms   pi ~ {pi:.5f}")
    if total >= 100_000 and abs(pi - math.pi) > 0.05:
        print(f"  the estimate DIFFERS from pi by {abs(pi - math.pi):.3f}")
        ok = False

    def check(name, t, got, extra=""):
        nonlocal ok
        same = got == expected
        ok &= same
        print(f"  {name:34} {t * 1e3:9.1f} ms   x{seq_t / t:5.2f} of sequential   "
              f"{'equal to the sequential run' if same else 'DIFFERS from the sequential run'}{extra}")

    for workers in sorted({1, args.workers}):
        with weft.Runtime(workers=workers) as rt:
            t, (got, (polls, last)) = median_time(lambda: flat(fn, n, Progress(total), True), args.reps)
            check(f"weft w={workers} flat", t, got, f"   ({polls} progress polls, last {last:.0%})")
            t, got = median_time(lambda: rt.spawn(h, fn, n, Progress(total)).result(), args.reps)
            check(f"weft w={workers} h: ray.get in a task", t, got)
            t, got = median_time(lambda: [x.result() for x in rt.spawn(g, fn, n, Progress(total)).result()],
                                 args.reps)
            check(f"weft w={workers} g: returns its Tasks", t, got)
            t, got = median_time(lambda: rt.spawn(tree, fn, n, Progress(total), 0, args.tasks).result(), args.reps)
            check(f"weft w={workers} tree", t, got)
            t, got = median_time(lambda: as_done(fn, n, Progress(total)), args.reps)
            check(f"weft w={workers} as-done (as_completed)", t, got)

    if not args.pools:
        return ok
    deadline_s = args.pool_deadline if args.pool_deadline is not None else 10 * seq_t + 2
    with cf.ThreadPoolExecutor(max_workers=args.workers) as pool:
        t, got = median_time(lambda: [f.result() for f in [pool.submit(fn, n, i, Progress(total))
                                                            for i in range(args.tasks)]], args.reps)
        check(f"ThreadPoolExecutor({args.workers}) flat", t, got)
    for threads in (2 * args.tasks - 1, args.workers):
        name = f"ThreadPoolExecutor({threads}) tree"
        with cf.ThreadPoolExecutor(max_workers=threads) as pool:
            try:
                t, got = median_time(lambda: pool.submit(pool_tree, pool, fn, n, Progress(total), 0, args.tasks,
                                                         time.monotonic() + deadline_s).result(), args.reps)
            except Deadlocked:
                print(f"  {name:34}  DEADLOCKED: every thread blocked in a nested .result() while the "
                      f"children wait in the queue (no progress in {deadline_s:.1f} s)")
                continue
        check(name, t, got)
    return ok


def main():
    ok = run_body("pure Python (the GIL held)", sampling_task, args.samples)
    ok &= run_body("NumPy (the GIL released)", np_sampling_task, args.np_samples)
    print("\nall results equal to the sequential run" if ok else "\nDIFFERS: see above")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
