"""Ray's nested-tasks pattern (a recursive quicksort), ported to Weft's Python API.

Original: ray-project/ray, doc/source/ray-core/doc_code/pattern_nested_tasks.py
(docs page "Pattern: Using nested tasks to achieve nested parallelism"): a
remote function partitions a list around its last element, calls itself
remotely on both halves, and returns `ray.get(lesser) + [pivot] +
ray.get(greater)`; below a size threshold (200,000 there) it calls
`sorted()`.  The driver times it against the same recursion run
sequentially, for lists of random ints.

What the port does:

  pure Python   the original's functions as they are: the partition is a
                Python loop and the leaves `sorted()` of a list, so every
                body holds the GIL for all its time.  `quick_sort_distributed`
                spawns both halves with `weft.spawn` and calls `.result()` on
                them (Ray's `ray.get` inside the remote function): nested waits
                as deep as the recursion, which is deeper than the workers.
  NumPy         the same recursion on an int64 array: the partition is two
                boolean masks and the leaves `np.sort`, which release the GIL.
  async         the pure-Python body as an `async def` that awaits
                `weft.gather(lesser, greater)` (Ray's `ray.get([a, b])`).

What changed: Ray's `.remote(x)` is `weft.spawn(f, x)` (Weft has no remote
function object: `@weft.spawn` above a `def` spawns it at once, with no
arguments); `ray.get(ref)` is `task.result()`; `ray.get([a, b])` has no
counterpart outside `async def` bodies (`weft.gather` is awaitable only), so
the bodies call `.result()` on each.  A Ray task gets a copy of its list
(the arguments are serialized), a Weft body the list itself: the original's
partition pops the pivot off its argument, so the driver here hands each run
its own copy (the original's sequential `quick_sort(unsorted)` pops the pivot
off `unsorted` before the distributed run sorts it).

Checked exactly against the sequential run (and `sorted()` / `np.sort`);
timed (medians) against it and against a `concurrent.futures.ThreadPoolExecutor`
running the same recursion (`pool.submit` and `.result()` in the bodies),
with as many threads as the recursion has tasks and with `--workers` threads
(where the nested waits deadlock the pool: each of its waits has a deadline
so that the run ends and says so).  `--probes 1` also tries the Ray idioms
(`ray.get` on a list, `ray.wait`, a task passed as an argument, `@ray.remote`)
and a body waiting for a task that waits for a task-space key nobody spawns,
each in a child process with a deadline.

Run:  python examples/ports/python/ray_nested_quicksort.py [--size 300000] [--threshold 5000]
          [--np-size 4000000] [--np-threshold 100000] [--workers 2] [--reps 3] [--probes 1]
Exits 1 on a wrong result (with --strict, also when a probe hangs).
"""
import argparse
import concurrent.futures as cf
import faulthandler
import os
import statistics
import subprocess
import sys
import time

import numpy as np

import weft

parser = argparse.ArgumentParser()
parser.add_argument("--size", type=int, default=300_000, help="length of the pure-Python list")
parser.add_argument("--threshold", type=int, default=5_000, help="the original's magic number (200000 there)")
parser.add_argument("--np-size", type=int, default=4_000_000, help="length of the NumPy array")
parser.add_argument("--np-threshold", type=int, default=100_000)
parser.add_argument("--workers", type=int, default=2)
parser.add_argument("--reps", type=int, default=3, help="timed repetitions (medians shown)")
parser.add_argument("--pool-deadline", type=float, default=None,
                    help="seconds a thread-pool run may take before it counts as deadlocked "
                         "(default: 10 x the sequential run + 2 s)")
parser.add_argument("--probes", type=int, default=1, help="1: try the Ray idioms and the unspawned-key waits")
parser.add_argument("--strict", action="store_true", help="a probe that hangs makes the run exit 1 too")
parser.add_argument("--timeout", type=float, default=600, help="the whole run's deadline (faulthandler)")
parser.add_argument("--pools", type=int, default=1,
                    help="0: leave out the ThreadPoolExecutor runs (their deadlocked threads are left blocked)")
args = parser.parse_args()

# Never hang silently: dump every thread's stack and exit 1 at the deadline.
faulthandler.dump_traceback_later(args.timeout, exit=True)


# ---- the original's functions (sequential) -----------------------------------

def partition(collection):
    """The last element is the pivot (popped off the list, as the original
    does); the others go to `lesser` (<= pivot) or `greater`."""
    pivot = collection.pop()
    lesser, greater = [], []
    for x in collection:
        (greater if x > pivot else lesser).append(x)
    return lesser, pivot, greater


def quick_sort(collection, threshold):
    if len(collection) <= threshold:
        return sorted(collection)
    lesser, pivot, greater = partition(collection)
    return quick_sort(lesser, threshold) + [pivot] + quick_sort(greater, threshold)


def tree_shape(collection, threshold, depth=1):
    """(tasks, levels) of the recursion: the same partitions as the sorts."""
    if len(collection) <= threshold:
        return 1, depth
    lesser, _, greater = partition(list(collection))
    a, da = tree_shape(lesser, threshold, depth + 1)
    b, db = tree_shape(greater, threshold, depth + 1)
    return 1 + a + b, max(da, db)


def np_partition(a):
    pivot = a[-1]
    rest = a[:-1]
    return rest[rest <= pivot], a[-1:], rest[rest > pivot]


def np_quick_sort(a, threshold):
    if a.size <= threshold:
        return np.sort(a)
    lesser, pivot, greater = np_partition(a)
    return np.concatenate((np_quick_sort(lesser, threshold), pivot, np_quick_sort(greater, threshold)))


# ---- Weft: Ray's remote function, `.remote` as spawn, `ray.get` as .result() --

def quick_sort_distributed(collection, threshold):
    if len(collection) <= threshold:
        return sorted(collection)
    lesser, pivot, greater = partition(collection)
    lesser_t = weft.spawn(quick_sort_distributed, lesser, threshold)
    greater_t = weft.spawn(quick_sort_distributed, greater, threshold)
    return lesser_t.result() + [pivot] + greater_t.result()


async def quick_sort_async(collection, threshold):
    if len(collection) <= threshold:
        return sorted(collection)
    lesser, pivot, greater = partition(collection)
    a, b = await weft.gather(weft.spawn(quick_sort_async, lesser, threshold),
                             weft.spawn(quick_sort_async, greater, threshold))
    return a + [pivot] + b


def np_quick_sort_distributed(a, threshold):
    if a.size <= threshold:
        return np.sort(a)
    lesser, pivot, greater = np_partition(a)
    lesser_t = weft.spawn(np_quick_sort_distributed, lesser, threshold)
    greater_t = weft.spawn(np_quick_sort_distributed, greater, threshold)
    return np.concatenate((lesser_t.result(), pivot, greater_t.result()))


# ---- a thread pool: the same recursion with pool.submit and .result() --------

class Deadlocked(Exception):
    pass


def pool_sort(pool, collection, threshold, deadline, np_mode):
    if (collection.size if np_mode else len(collection)) <= threshold:
        return np.sort(collection) if np_mode else sorted(collection)
    lesser, pivot, greater = (np_partition if np_mode else partition)(collection)
    a = pool.submit(pool_sort, pool, lesser, threshold, deadline, np_mode)
    b = pool.submit(pool_sort, pool, greater, threshold, deadline, np_mode)
    try:
        ra = a.result(timeout=max(0.0, deadline - time.monotonic()))
        rb = b.result(timeout=max(0.0, deadline - time.monotonic()))
    except cf.TimeoutError:
        raise Deadlocked() from None
    return np.concatenate((ra, pivot, rb)) if np_mode else ra + [pivot] + rb


# ---- the runs -------------------------------------------------------------------

def timed(fn, reps):
    times, out = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times, out


def equal(a, b, np_mode):
    return bool(np.array_equal(a, b)) if np_mode else a == b


def run_case(label, data, threshold, np_mode, reps):
    """Times the sequential run, Weft on 1 and --workers workers (and the async
    form), and the thread pools; returns False on a wrong result."""
    ok = True
    tasks, levels = (np_tree_shape if np_mode else tree_shape)(data, threshold)
    print(f"\n== {label}: {len(data):,} elements, threshold {threshold:,}: "
          f"{tasks} tasks, {levels} levels of nested waits")
    seq_fn = np_quick_sort if np_mode else quick_sort
    copy = (lambda: data.copy()) if np_mode else (lambda: list(data))
    seq_t, seq_all, expected = timed(lambda: seq_fn(copy(), threshold), reps)
    reference = np.sort(data) if np_mode else sorted(data)
    if not equal(expected, reference, np_mode):
        print(f"  sequential run DIFFERS from {'np.sort' if np_mode else 'sorted()'}")
        ok = False
    print(f"  {'sequential':34} {seq_t * 1e3:9.1f} ms   (reps {', '.join(f'{t * 1e3:.0f}' for t in seq_all)})")

    body = np_quick_sort_distributed if np_mode else quick_sort_distributed
    variants = [(f"weft workers=1", 1, body), (f"weft workers={args.workers}", args.workers, body)]
    if not np_mode:
        variants.append((f"weft workers={args.workers} async gather", args.workers, quick_sort_async))
    for name, workers, fn in variants:
        with weft.Runtime(workers=workers) as rt:
            t, all_t, got = timed(lambda: rt.spawn(fn, copy(), threshold).result(), reps)
            st = rt.stats()
        same = equal(got, expected, np_mode)
        ok &= same
        print(f"  {name:34} {t * 1e3:9.1f} ms   x{seq_t / t:5.2f} of sequential   "
              f"{'equal to the sequential run' if same else 'DIFFERS from the sequential run'}"
              f"   (tasks_run {st['tasks_run']}, steals {st['steals']})")

    if not args.pools:
        return ok
    deadline_s = args.pool_deadline if args.pool_deadline is not None else 10 * seq_t + 2
    for threads in (tasks, args.workers):
        name = f"ThreadPoolExecutor({threads})"
        with cf.ThreadPoolExecutor(max_workers=threads) as pool:
            try:
                t, all_t, got = timed(lambda: pool.submit(pool_sort, pool, copy(), threshold,
                                                          time.monotonic() + deadline_s, np_mode)
                                      .result(), reps)
            except Deadlocked:
                print(f"  {name:34}  DEADLOCKED: every thread blocked in a nested .result() while "
                      f"the children wait in the queue (no progress in {deadline_s:.1f} s)")
                continue
        same = equal(got, expected, np_mode)
        ok &= same
        print(f"  {name:34} {t * 1e3:9.1f} ms   x{seq_t / t:5.2f} of sequential   "
              f"{'equal to the sequential run' if same else 'DIFFERS from the sequential run'}")
    return ok


def np_tree_shape(a, threshold, depth=1):
    if a.size <= threshold:
        return 1, depth
    lesser, _, greater = np_partition(a)
    x, dx = np_tree_shape(lesser, threshold, depth + 1)
    y, dy = np_tree_shape(greater, threshold, depth + 1)
    return 1 + x + y, max(dx, dy)


# ---- probes: the Ray idioms, and waits for a key nobody spawns ---------------

def idioms():
    """What a Ray user reaches for first; prints what Weft does with each."""
    def f():
        return 1

    with weft.Runtime(workers=2) as rt:
        refs = [rt.spawn(f) for _ in range(4)]
        # ray.get([refs]): weft.gather outside an async body
        g = weft.gather(refs)
        print(f"  ray.get(list) as weft.gather(list) outside async: returns {type(g).__name__} "
              f"without a word; using it:", end=" ")
        try:
            sum(g)
            print("summed")
        except Exception as e:
            print(f"{type(e).__name__}: {str(e)[:90]}...")
        print(f"  ray.get(list) as [t.result() for t in refs]: {[t.result() for t in refs]}")
        # ray.wait(refs, num_returns=1): concurrent.futures.wait / as_completed, and weft's own
        for what, call in (("concurrent.futures.wait(refs, return_when=FIRST_COMPLETED)",
                            lambda: cf.wait(refs, timeout=1, return_when=cf.FIRST_COMPLETED)),
                           ("concurrent.futures.as_completed(refs)", lambda: list(cf.as_completed(refs, timeout=1))),
                           ("weft.wait(refs, return_when=weft.FIRST_COMPLETED)",
                            lambda: weft.wait(refs, timeout=1, return_when=weft.FIRST_COMPLETED)),
                           ("weft.as_completed(refs)", lambda: list(weft.as_completed(refs, timeout=1)))):
            try:
                call()
                print(f"  ray.wait as {what}: works")
            except Exception as e:
                print(f"  ray.wait as {what}: {type(e).__name__}: {e}")
        # passing an ObjectRef as an argument: Ray resolves it, Weft passes the Task
        t = rt.spawn(lambda xs: xs + [0], refs[0])
        e = t.exception()
        print(f"  a Task passed as an argument (Ray resolves ObjectRefs): {type(e).__name__}: {e}; "
              f"note: {(getattr(e, '__notes__', None) or ['none'])[0][:70]}...")
        t = rt.spawn(lambda xs: [1] + xs, [refs[0]])
        print(f"  a list holding a Task, concatenated in the body: succeeds, {t.result()!r:.60}")

        # @ray.remote as @weft.spawn: spawns at once, with no arguments
        @weft.spawn
        def quick_sort_remote(collection):
            return sorted(collection)
        e = quick_sort_remote.exception()
        print(f"  @weft.spawn above def (as @ray.remote): the name is a {type(quick_sort_remote).__name__} "
              f"that ran at once: {type(e).__name__}: {e}")


PROBE_CHILD = r"""
import sys, time, faulthandler, warnings, weft
faulthandler.dump_traceback_later(float(sys.argv[3]), exit=True)
warnings.simplefilter("always")
form, workers = sys.argv[1], int(sys.argv[2])
T = weft.TaskSpace("T")
async def awaits():
    return await T["never"]
t0 = time.monotonic()
with weft.Runtime(workers=workers) as rt:
    if form == "body-waits-slot":                   # the body waits for the key itself
        outer = rt.spawn(lambda: T["never"].result(), name="outer")
    elif form == "body-waits-body-waits-slot":      # a body waits for a body that waits for the key
        inner = rt.spawn(lambda: T["never"].result(), name="inner")
        outer = rt.spawn(lambda: inner.result(), name="outer")
    elif form == "body-waits-deps-slot":            # a body waits for a task with deps=[the key]
        inner = rt.spawn(lambda: 1, deps=[T["never"]], name="inner")
        outer = rt.spawn(lambda: inner.result(), name="outer")
    elif form == "body-waits-await-slot":           # a body waits for an async body awaiting the key
        inner = rt.spawn(awaits, name="inner")
        outer = rt.spawn(lambda: inner.result(), name="outer")
    elif form == "nested-3-spawned-in-bodies":      # three levels, each spawned by its parent
        def level(k):
            if k == 0:
                return T["never"].result()
            return rt.spawn(level, k - 1, name=f"level{k - 1}").result()
        outer = rt.spawn(level, 3, name="outer")
    if len(sys.argv) > 4:                           # the program's thread waits first
        try:
            outer.result(timeout=float(sys.argv[4]))
        except TimeoutError:
            print(f"main .result(timeout) timed out after {time.monotonic() - t0:.1f} s", flush=True)
e = outer.exception()
print(f"closed after {time.monotonic() - t0:.1f} s: outer -> {type(e).__name__}: {str(e)[:110]}", flush=True)
"""


def probes():
    bad = False
    env = {**os.environ, "WEFT_STALL_WARN_MS": "1000"}
    runs = [(form, 2, None) for form in ("body-waits-slot", "body-waits-body-waits-slot", "body-waits-deps-slot",
                                          "body-waits-await-slot", "nested-3-spawned-in-bodies")]
    runs += [("body-waits-body-waits-slot", 1, None), ("nested-3-spawned-in-bodies", 1, None),
             ("body-waits-slot", 2, "3"), ("body-waits-deps-slot", 2, "3")]
    for form, workers, main_wait in runs:
        extra = [main_wait] if main_wait else []
        label = f"{form}, workers={workers}{', main waits 3 s first' if main_wait else ''}"
        try:
            r = subprocess.run([sys.executable, "-c", PROBE_CHILD, form, str(workers), "10", *extra],
                               capture_output=True, text=True, timeout=20, env=env)
        except subprocess.TimeoutExpired:
            print(f"  {label}: HANGS (no exit in 20 s)")
            bad = True
            continue
        warned = [ln.split("TaskWarning: ")[1][:80] for ln in r.stderr.splitlines() if "TaskWarning: " in ln]
        if "Fatal Python error: Aborted" in r.stderr or "Timeout (" in r.stderr:
            print(f"  {label}: HANGS: killed by its 10-s faulthandler deadline; "
                  f"stdout: {r.stdout.strip()!r:.120}; warnings: {warned}")
            bad = True
        else:
            out = " / ".join(r.stdout.strip().splitlines())
            print(f"  {label}: rc {r.returncode}: {out}; warnings: {warned}")
            bad |= r.returncode != 0
    return not bad


def main():
    ok = True
    rng = np.random.default_rng(0)
    data = rng.integers(1_000_000, size=args.size).tolist()
    ok &= run_case("pure Python (the GIL held)", data, args.threshold, False, args.reps)
    npdata = rng.integers(1_000_000, size=args.np_size)
    ok &= run_case("NumPy (the GIL released)", npdata, args.np_threshold, True, args.reps)
    if args.probes:
        print("\n== Ray idioms")
        idioms()
        print("\n== a body waiting, directly or not, for a task-space key nobody spawns; then the with block ends")
        if not probes():
            print("  (a probe hung: see the findings in examples/ports/python/README.md)")
            ok &= not args.strict
    print("\nall results equal to the sequential run" if ok else "\nDIFFERS (or, with --strict, a probe hung): see above")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
