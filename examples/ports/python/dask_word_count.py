"""Dask's word count, ported to Weft's Python API.

Original: dask/dask-tutorial, 01x_lazy.ipynb, "Example 1: simple word count":
a regular expression (`\\w+`) splits a text file into words, first over the
whole file, then line by line so that only one line is in memory; the
tutorial's point is that the per-piece counts are independent and can be
made lazy (`dask.delayed`) and summed.

What the port does with it, as a text-processing pipeline over many small
chunks of lines (the repository's own README.md and docs/*.md, repeated
`--repeat` times, cut into chunks of `--lines` lines):

  read(i)        a simulated file read: `time.sleep(--io)` (GIL released),
                 then the chunk's lines
  count(r)       the tutorial's body: `len(splitter.findall(line))` per line,
                 plus a `collections.Counter` of lower-cased words: pure
                 Python, holding the GIL nearly all its time
  hist(r, h)     NumPy: the byte histogram of the chunk (`np.bincount`, GIL
                 released inside), written into the chunk's own array
                 (`writes=[h]`)
  merge(a, b)    a tree of Counter merges (pure Python), Dask's lazy-value
                 edges written as `deps=` and `.result()` in the body
  sum_hists      `reads=` every chunk's histogram, `writes=` the total
  summary        an `async def` body that awaits the merged Counter, the word
                 total and the histogram total, and returns the top words

What changed: Dask hands a lazy value's result to the next call; Weft runs a
task when it is spawned and hands the body the Task, so the bodies call
`.result()` on the Tasks among their arguments (`call()` below, as in
dask_delayed_tree_sum.py). The notebook reads one file; the port reads
chunks of an in-memory text with a sleep standing for the read.

Checked against a plain sequential run of the same functions (exact: the
word total, the Counter, the histogram bit for bit, the top words), and
timed against it, against a ThreadPoolExecutor running the same graph, and
against Dask's threaded scheduler when Dask is installed.

Run:  python examples/ports/python/dask_word_count.py [--lines 40] [--repeat 2] [--io 0.0005]
                                                       [--workers 2] [--gil-hold-ns N] [--reps 3]
Exits 1 on a wrong result.
"""
import argparse
import collections
import concurrent.futures
import glob
import os
import re
import sys
import time

import numpy as np

import weft

parser = argparse.ArgumentParser()
parser.add_argument("--lines", type=int, default=40, help="lines per chunk")
parser.add_argument("--repeat", type=int, default=2, help="times the text is repeated")
parser.add_argument("--io", type=float, default=0.0005, help="seconds each simulated read sleeps")
parser.add_argument("--workers", type=int, default=2)
parser.add_argument("--gil-hold-ns", type=int, default=None, help="weft.Runtime(gil_hold_ns=...)")
parser.add_argument("--reps", type=int, default=3, help="timed repetitions (the best is shown)")
args = parser.parse_args()

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
TEXT_FILES = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
LINES = []
for _ in range(args.repeat):
    for path in TEXT_FILES:
        with open(path, encoding="utf-8") as f:
            LINES.extend(f.readlines())
CHUNKS = [LINES[i:i + args.lines] for i in range(0, len(LINES), args.lines)]

splitter = re.compile(r"\w+")


# ---- the pipeline's functions, shared by every run -------------------------

def read(i):
    time.sleep(args.io)                       # the file read: GIL released
    return CHUNKS[i]


def count(lines):
    n = 0
    words = collections.Counter()
    for line in lines:                        # the tutorial's line-by-line count
        found = splitter.findall(line)
        n += len(found)
        for w in found:
            words[w.lower()] += 1
    return n, words


def hist(lines, h):
    data = np.frombuffer("".join(lines).encode("utf-8"), dtype=np.uint8)
    h[:] = np.bincount(data, minlength=256)  # NumPy: GIL released in the kernel


def merge(a, b):
    out = collections.Counter(a)
    out.update(b)
    return out


def sum_hists(hs, total):
    total[:] = 0
    for h in hs:
        total += h


def top(words, n=10):
    return sorted(words.items(), key=lambda kv: (-kv[1], kv[0]))[:n]


def sequential():
    counts, hs = [], []
    for i in range(len(CHUNKS)):
        r = read(i)
        counts.append(count(r))
        h = np.zeros(256, dtype=np.int64)
        hist(r, h)
        hs.append(h)
    level = [c[1] for c in counts]
    while len(level) > 1:
        level = [merge(level[k], level[k + 1]) if k + 1 < len(level) else level[k]
                 for k in range(0, len(level), 2)]
    total = np.zeros(256, dtype=np.int64)
    sum_hists(hs, total)
    return sum(c[0] for c in counts), level[0], total, top(level[0])


# ---- Weft ------------------------------------------------------------------

def _resolved(fn, *a):
    return fn(*(x.result() if isinstance(x, weft.Task) else x for x in a))


def call(fn, *a, **kw):
    """dask.delayed(fn)(*a): the Tasks among a are followed, the body gets their results.
    Every such task runs `_resolved`: `kind=` keeps each function's timings apart."""
    return weft.spawn(_resolved, fn, *a, deps=[x for x in a if isinstance(x, weft.Task)],
                      name=fn.__name__, kind=fn.__name__, **kw)


def words_of(c):
    return c[1]


def n_of(c):
    return c[0]


def total_words(counts):
    # waits for other tasks inside the body (t.result()): they are deps, so
    # they have finished; the loop is pure Python
    return sum(c.result()[0] for c in counts)


async def summary(merged, n_words, total):
    words = await merged
    n = await n_words
    await total                               # the task writing the total histogram
    return n, words, top(words)


def with_weft(rt_kwargs):
    with weft.Runtime(**rt_kwargs) as rt:
        t0 = time.perf_counter()
        hs = [np.zeros(256, dtype=np.int64) for _ in CHUNKS]
        total = np.zeros(256, dtype=np.int64)
        reads = [call(read, i) for i in range(len(CHUNKS))]
        counts = [call(count, r) for r in reads]
        hists = [call(hist, r, h, writes=[h]) for r, h in zip(reads, hs)]
        level = [call(words_of, c) for c in counts]
        while len(level) > 1:
            level = [call(merge, level[k], level[k + 1]) if k + 1 < len(level) else level[k]
                     for k in range(0, len(level), 2)]
        n_words = weft.spawn(total_words, counts, deps=counts, name="total_words")
        summed = weft.spawn(sum_hists, hs, total, reads=hs, writes=[total], name="sum_hists")
        s = weft.spawn(summary, level[0], n_words, summed, name="summary")
        n, words, best = s.result()
        dt = time.perf_counter() - t0
        assert all(h.done() for h in hists)
        stats = rt.stats()
    return (n, words, total, best), dt, stats


# ---- baselines: ThreadPoolExecutor, Dask -----------------------------------

def with_threads(workers):
    with concurrent.futures.ThreadPoolExecutor(workers) as ex:
        t0 = time.perf_counter()
        hs = [np.zeros(256, dtype=np.int64) for _ in CHUNKS]
        reads = [ex.submit(read, i) for i in range(len(CHUNKS))]
        counts = [ex.submit(lambda r: count(r.result()), r) for r in reads]
        hists = [ex.submit(lambda r, h: hist(r.result(), h), r, h) for r, h in zip(reads, hs)]
        level = [ex.submit(lambda c: c.result()[1], c) for c in counts]
        while len(level) > 1:
            level = [ex.submit(lambda a, b: merge(a.result(), b.result()), level[k], level[k + 1])
                     if k + 1 < len(level) else level[k] for k in range(0, len(level), 2)]
        for h in hists:
            h.result()
        total = np.zeros(256, dtype=np.int64)
        sum_hists(hs, total)
        words = level[0].result()
        out = sum(c.result()[0] for c in counts), words, total, top(words)
        dt = time.perf_counter() - t0
    return out, dt


def with_dask(workers):
    try:
        import dask
    except ImportError:
        return None, None
    delayed = dask.delayed
    t0 = time.perf_counter()
    hs = [np.zeros(256, dtype=np.int64) for _ in CHUNKS]
    reads = [delayed(read)(i) for i in range(len(CHUNKS))]
    counts = [delayed(count)(r) for r in reads]
    hists = [delayed(hist)(r, h) for r, h in zip(reads, hs)]
    level = [delayed(words_of)(c) for c in counts]
    while len(level) > 1:
        level = [delayed(merge)(level[k], level[k + 1]) if k + 1 < len(level) else level[k]
                 for k in range(0, len(level), 2)]
    n = delayed(sum)([delayed(n_of)(c) for c in counts])
    n, words, _ = dask.compute(n, level[0], hists, scheduler="threads", num_workers=workers)
    total = np.zeros(256, dtype=np.int64)
    sum_hists(hs, total)
    dt = time.perf_counter() - t0
    return (n, words, total, top(words)), dt


def same(a, b):
    return a[0] == b[0] and a[1] == b[1] and np.array_equal(a[2], b[2]) and a[3] == b[3]


def best_of(fn):
    best, res = None, None
    for _ in range(args.reps):
        r = fn()
        res, dt = r[0], r[1]
        best = dt if best is None else min(best, dt)
    return res, best, r


def main():
    print(f"{len(LINES)} lines in {len(CHUNKS)} chunks of {args.lines}; {args.workers} workers")
    ok = True
    t0 = time.perf_counter()
    ref = sequential()
    t_seq = time.perf_counter() - t0
    for _ in range(args.reps - 1):
        t0 = time.perf_counter()
        sequential()
        t_seq = min(t_seq, time.perf_counter() - t0)
    print(f"sequential          {t_seq * 1e3:8.1f} ms   {ref[0]} words, {len(ref[1])} distinct, top {ref[3][:3]}")

    kw = {"workers": args.workers}
    if args.gil_hold_ns is not None:
        kw["gil_hold_ns"] = args.gil_hold_ns
    runs = [("weft", kw), ("weft gil_hold_ns=0", {**kw, "gil_hold_ns": 0})]
    for label, rk in runs:
        res, dt, last = best_of(lambda: with_weft(rk))
        good = same(res, ref)
        ok &= good
        print(f"{label:<19} {dt * 1e3:8.1f} ms   {'equal to the sequential run' if good else 'DIFFERS'}"
              f"   (gil_kept {last[2].get('gil_kept')}, steals {last[2].get('steals')})")

    res, dt, _ = best_of(lambda: with_threads(args.workers))
    good = same(res, ref)
    ok &= good
    print(f"ThreadPoolExecutor  {dt * 1e3:8.1f} ms   {'equal' if good else 'DIFFERS'}")

    res, dt = with_dask(args.workers)
    if res is None:
        print("dask                (not installed)")
    else:
        res, dt, _ = best_of(lambda: with_dask(args.workers))
        good = same(res, ref)
        ok &= good
        print(f"dask threads        {dt * 1e3:8.1f} ms   {'equal' if good else 'DIFFERS'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
