"""What Python's overheads cost in Weft, each beside the naive way, in the
same run (the overheads Oden and Nölp measured for Python on GPUs: handing
arrays between libraries, synchronising with the device, reaching the
data).  Every figure is the median over --reps rounds of a ratio taken
within one round (the two ways alternate, in turn first); a round during
which other processes used more than a quarter of the machine is run again
(at most twice).

  handoff   NumPy getting a task's data from a Weft view (reads=[a]) in
            the body, without a copy: through the buffer protocol
            (numpy.asarray(view)), __array_interface__ (an object that
            has only that), DLPack (numpy.from_dlpack(view)); beside a
            copy (numpy.array(view, copy=True)), for each --sizes.
            overhead_handoff_<way>_<size> weft = copy's time / the way's
  events    a chain of --chain tasks on virtual GPUs ("cpu,vgpu:2",
            placed on the first, device_data=True, each updating the same
            array) whose bodies queue a small kernel (--kernel-us of
            modelled time) on the task's stream (ctx.queue, the replica's
            address from ctx.addresses: no view, so no wait): Weft orders
            each task's stream after the one before by events; beside the
            same chain whose bodies then wait for their stream (ctx.view(0),
            which on a virtual GPU returns once the stream's work has run:
            weft_ctx_sync).  overhead_events_vs_sync weft = the waiting
            chain's time / the event-ordered chain's
  view      a chain of --chain CPU tasks (2 workers, readwrites=[a]) whose
            bodies add 1 to an element of the array: reached directly (the
            body's closure holds it) or through Weft
            (weft.context().array(0)); and the cost of one call of
            weft.context(), ctx.view(0), ctx.array(0) in a body.
            overhead_view_task weft = the direct chain's time / the
            chain through views (below 1: what getting a view costs)

Output: three tables (us), then the overhead_<name> weft <ratio> lines.

    python bench/py/overheads.py [--reps 9] [--sizes 4096,1048576,67108864]
                                 [--chain 1000] [--kernel-us 50] [--calls 2000]
                                 [--no-busy-check]
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import time
from typing import Any, Callable

import numpy as np

import weft

# The suite's own measure of other processes' load (bench/py/bench.py).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import _cpu_snapshot, _others_busy  # noqa: E402

STATS = {"rerun": 0, "busy_kept": 0}


def rounds(reps: int, ways: list[str], run: Callable[[str], float], check_busy: bool) -> dict[str, list[float]]:
    """{way: [its time in each round]}: every round runs every way, in turn
    first; a round while other processes were busy is run again."""
    got: dict[str, list[float]] = {w: [] for w in ways}
    for r in range(reps):
        order = ways[r % len(ways):] + ways[:r % len(ways)]
        for attempt in range(3):
            a = _cpu_snapshot()
            this = {w: run(w) for w in order}
            if not check_busy or _others_busy(a, _cpu_snapshot()) <= 0.25:
                break
            if attempt == 2:
                STATS["busy_kept"] += 1
                break
            STATS["rerun"] += 1
        for w in ways:
            got[w].append(this[w])
    return got


def median_ratio(num: list[float], den: list[float]) -> float:
    """The median over rounds of num / den, each taken within one round."""
    return statistics.median(n / d for n, d in zip(num, den))


# --- handing an array to another library ----------------------------------

class _InterfaceOnly:
    """An object with __array_interface__ alone (no buffer protocol)."""
    __slots__ = ("__array_interface__",)

    def __init__(self, interface: dict[str, Any]) -> None:
        self.__array_interface__ = interface


HANDOFF: dict[str, Callable[[Any], Any]] = {
    "copy": lambda v: np.array(v, copy=True),
    "buffer": np.asarray,
    "array_interface": lambda v: np.asarray(_InterfaceOnly(v.__array_interface__)),
    "dlpack": np.from_dlpack,
}


def handoff_body(way: str, loops: int) -> float:
    """In a task's body: seconds per hand-off of the task's data to NumPy
    (checked: shares the memory, or not for the copy)."""
    v = weft.context().view(0)
    fn = HANDOFF[way]
    x = fn(v)
    if np.shares_memory(x, np.asarray(v)) == (way == "copy"):
        raise AssertionError(f"handoff {way}: {'shares' if way == 'copy' else 'does not share'} the view's memory")
    del x
    t0 = time.perf_counter()
    for _ in range(loops):
        fn(v)
    return (time.perf_counter() - t0) / loops


def bench_handoff(sizes: list[int], reps: int, check_busy: bool) -> dict[int, dict[str, float]]:
    """{size: {way: median us per call}} and the ratios' lines' values
    (under key "ratio:<way>")."""
    out: dict[int, dict[str, float]] = {}
    with weft.Runtime(workers=2) as rt:
        for size in sizes:
            a = np.ones(max(1, size // 8))
            loops = max(5, min(20000, (1 << 30) // max(size, 1)))
            times = rounds(reps, list(HANDOFF),
                           lambda w: rt.spawn(handoff_body, w, loops, reads=[a]).result(), check_busy)
            row = {w: statistics.median(t) * 1e6 for w, t in times.items()}
            for w in HANDOFF:
                if w != "copy":
                    row["ratio:" + w] = median_ratio(times["copy"], times[w])
            out[size] = row
    return out


# --- ordering GPU work by events, or waiting for the stream ---------------

def _add_one(addr: int, n: int) -> None:
    """The kernel: adds 1 to n doubles at addr (a virtual GPU's replica)."""
    np.ctypeslib.as_array((ctypes.c_double * n).from_address(addr))[:] += 1.0


def body_events(n: int, model_ns: int) -> None:
    ctx = weft.context()
    ctx.queue(_add_one, ctx.addresses[0], n, model_ns=model_ns, reads=[0], writes=[0])


def body_sync(n: int, model_ns: int) -> None:
    ctx = weft.context()
    ctx.queue(_add_one, ctx.addresses[0], n, model_ns=model_ns, reads=[0], writes=[0])
    ctx.view(0)  # on a virtual GPU: returns once the stream's work has run (weft_ctx_sync)


def bench_events(chain: int, kernel_us: float, reps: int, check_busy: bool) -> dict[str, float]:
    """{way: median us per task} and "ratio": the waiting chain's time / the
    event-ordered chain's; every chain's additions are checked."""
    n = 1024
    model_ns = int(kernel_us * 1000)
    bodies = {"events": body_events, "sync": body_sync}
    with weft.Runtime(workers=2, devices="cpu,vgpu:2") as rt:
        def run(way: str) -> float:
            a = np.zeros(n)
            with rt.data(a) as d:
                t0 = time.perf_counter()
                for _ in range(chain):
                    rt.spawn(bodies[way], n, model_ns, readwrites=[d], placement=weft.gpu(0), device_data=True)
                rt.wait_all()
                s = time.perf_counter() - t0
            if not np.all(a == chain):
                raise AssertionError(f"events/{way}: the array holds {a[0]:g}, not {chain} (one addition per task)")
            return s

        run("events")  # the first chain makes the replica and the streams
        times = rounds(reps, list(bodies), run, check_busy)
    out = {w: statistics.median(t) / chain * 1e6 for w, t in times.items()}
    out["ratio"] = median_ratio(times["sync"], times["events"])
    return out


# --- a NumPy array directly, or through a Weft view -----------------------

def body_direct(a: np.ndarray) -> None:
    a[0] += 1.0


def body_view(a: np.ndarray) -> None:
    weft.context().array(0)[0] += 1.0


def per_call(calls: int) -> dict[str, float]:
    """In a task's body (readwrites=[a]): seconds per call of each way of
    reaching the task's data."""
    ctx = weft.context()
    ways: dict[str, Callable[[], Any]] = {
        "context()": weft.context,
        "ctx.view(0)": lambda: ctx.view(0),
        "ctx.array(0)": lambda: ctx.array(0),
    }
    out = {}
    for name, fn in ways.items():
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out[name] = (time.perf_counter() - t0) / calls
    return out


def bench_view(chain: int, calls: int, reps: int, check_busy: bool) -> dict[str, float]:
    """{way: median us per task, call: median us per call} and "ratio": the
    direct chain's time / the chain through views."""
    bodies = {"direct": body_direct, "view": body_view}
    calls_seen: list[dict[str, float]] = []
    with weft.Runtime(workers=2) as rt:
        def run(way: str) -> float:
            a = np.zeros(16)
            t0 = time.perf_counter()
            for _ in range(chain):
                rt.spawn(bodies[way], a, readwrites=[a])
            rt.wait_all()
            s = time.perf_counter() - t0
            if a[0] != chain:
                raise AssertionError(f"view/{way}: a[0] is {a[0]:g}, not {chain} (one addition per task)")
            return s

        run("view")
        times = rounds(reps, list(bodies), run, check_busy)
        for _ in range(reps):
            a = np.zeros(16)
            calls_seen.append(rt.spawn(per_call, calls, readwrites=[a]).result())
    out = {w: statistics.median(t) / chain * 1e6 for w, t in times.items()}
    for name in calls_seen[0]:
        out[name] = statistics.median(c[name] for c in calls_seen) * 1e6
    out["ratio"] = median_ratio(times["direct"], times["view"])
    return out


def size_name(size: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return f"{size}B"


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--sizes", default="4096,1048576,67108864", help="bytes handed over, comma-separated")
    ap.add_argument("--chain", type=int, default=1000, help="tasks in each chain")
    ap.add_argument("--kernel-us", type=float, default=50.0, help="modelled time of the queued kernel")
    ap.add_argument("--calls", type=int, default=2000, help="calls timed for each way of reaching the data")
    ap.add_argument("--no-busy-check", action="store_true", help="keep rounds while other processes are busy")
    o = ap.parse_args(argv)
    sizes = [int(s) for s in o.sizes.split(",") if s]
    if o.reps < 1 or o.chain < 1 or o.calls < 1 or not sizes or min(sizes) < 8 or o.kernel_us < 0:
        ap.error("--reps, --chain, --calls must be >= 1, --sizes at least 8 bytes each, --kernel-us >= 0")
    busy = not o.no_busy_check
    lines: dict[str, float] = {}

    print(f"== handing a task's data to NumPy (reads=[a], in the body): us per call, medians of {o.reps} rounds")
    ways = [w for w in HANDOFF if w != "copy"]
    print(f"  {'size':>8} {'copy':>10} " + " ".join(f"{w:>15}" for w in ways)
          + "  " + " ".join(f"{'copy/' + w:>21}" for w in ways))
    for size, row in bench_handoff(sizes, o.reps, busy).items():
        print(f"  {size_name(size):>8} {row['copy']:10.3f} " + " ".join(f"{row[w]:15.3f}" for w in ways)
              + "  " + " ".join(f"{row['ratio:' + w]:21.1f}" for w in ways))
        for w in ways:
            lines[f"handoff_{w}_{size_name(size)}"] = row["ratio:" + w]

    print(f"\n== a chain of {o.chain} tasks on vgpu:0 (cpu,vgpu:2), each queueing a {o.kernel_us:g} us kernel: "
          f"us per task")
    ev = bench_events(o.chain, o.kernel_us, o.reps, busy)
    print(f"  ordered by events (the body only queues)     {ev['events']:8.1f}")
    print(f"  the body waits for its stream (ctx.view(0))  {ev['sync']:8.1f}")
    lines["events_vs_sync"] = ev["ratio"]

    print(f"\n== a chain of {o.chain} CPU tasks (2 workers) adding 1 to an array's element: us per task")
    vw = bench_view(o.chain, o.calls, o.reps, busy)
    print(f"  the array directly (the body's closure)      {vw['direct']:8.2f}")
    print(f"  through weft.context().array(0)              {vw['view']:8.2f}")
    print("  one call in a body: " + ", ".join(f"{k} {vw[k]:.2f}" for k in ("context()", "ctx.view(0)",
                                                                            "ctx.array(0)")))
    lines["view_task"] = vw["ratio"]

    if STATS["rerun"] or STATS["busy_kept"]:
        print(f"# rounds run again while other processes were busy: {STATS['rerun']}; "
              f"kept busy after 3 tries: {STATS['busy_kept']}")
    print()
    for name, v in lines.items():
        print(f"overhead_{name} weft {v:.3f}")
    return lines


if __name__ == "__main__":
    main()
