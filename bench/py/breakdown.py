"""Where a Weft Python task's microseconds go (stencil_1d, width 2).

Splits the empty-body cost of bench.py into:
  loop      the benchmark's own Python loop (building deps lists), no spawn
  spawn     weft.spawn from Python while no body runs (the graph waits on a gate)
  run/1w    running the released graph on 1 worker: GIL attach, call, result,
            detach, C dependency release; no hand-off between workers
  run/2w    the same on 2 workers: adds GIL and task hand-offs between workers
  total     spawn and run overlapped, as in bench.py (wall x workers / tasks)
and compares the GIL policies (--knobs): workers that sleep in CPython's GIL
instead of spinning for each other (gil_spin_ns=0), and spawn releasing the
GIL always (spawn_gil='release') or while a worker waits (spawn_gil='yield').

    python bench/py/breakdown.py [--steps 1000] [--reps 7] [--knobs]

Runs during which other processes used more than 10% of the machine are
repeated (see bench.py).
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import weft  # noqa: E402

W = 2


def noop(*_):
    return None


def loop_only(steps):
    dg = bench.graph(steps, W)
    t0 = time.perf_counter()
    prev = [None] * W
    for t in range(steps):
        cur = []
        for i in range(W):
            cur.append(noop([prev[j] for j in dg[t][i]]))
        prev = cur
    return time.perf_counter() - t0


def gated(rt, steps):
    """Spawn the graph behind a gate (a C busy-wait that does not hold the
    GIL and outlasts the spawning), then let it run: (spawn s, run s)."""
    gate_us = 30000 + steps * W * 10
    gate = rt.spawn(weft.bench.busy, gate_us)
    while gate.status != "running":
        pass
    tg = time.perf_counter()
    spawn = rt.spawn
    dg = bench.graph(steps, W)
    t0 = time.perf_counter()
    prev = [gate] * W
    for t in range(steps):
        cur = []
        for i in range(W):
            d = [prev[j] for j in dg[t][i]] or [gate]
            cur.append(spawn(noop, deps=d))
        prev = cur
    t1 = time.perf_counter()
    assert not gate.done(), "spawning took longer than the gate"
    rt.wait_all()
    t3 = time.perf_counter()
    return t1 - t0, t3 - (tg + gate_us / 1e6)


def quiet(fn, *a):
    """fn(*a), repeated (up to 5 times) while other processes were busy."""
    for attempt in range(5):
        s0 = bench._cpu_snapshot()
        r = fn(*a)
        if bench._others_busy(s0, bench._cpu_snapshot()) <= 0.10:
            break
        time.sleep(0.2)
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--knobs", action="store_true", help="also compare the GIL policies")
    a = ap.parse_args()
    n = a.steps * W
    us = lambda s: s / n * 1e6  # noqa: E731
    med = statistics.median
    print(f"loop     {us(med(quiet(loop_only, a.steps) for _ in range(a.reps))):6.2f} us per task (wall)")
    for workers in (1, 2):
        with weft.Runtime(workers=workers) as rt:
            gated(rt, a.steps)
            res = [quiet(gated, rt, a.steps) for _ in range(a.reps)]
            if workers == 1:
                print(f"spawn    {us(med(r[0] for r in res)):6.2f} us per task (wall, main thread, "
                      f"nothing running)")
            print(f"run/{workers}w   {us(med(r[1] for r in res)):6.2f} us per task (wall, after the gate opens)")
    ctx = {}
    bench.run_weft(a.steps, W, 2, None, ctx)
    tot = bench.measure(bench.run_weft, ctx, a.steps, W, 2, None, a.reps)
    bench.close_weft(ctx)
    print(f"total    {tot / 2:6.2f} us per task wall = {tot:5.2f} us per task x 2 workers "
          f"(bench.py's py_task_us)")
    if not a.knobs:
        return
    print("GIL policy                 empty (us/task)  busy(5) eff  busy(10) eff")
    for label, kw in (("default (hold, spin)", {}),
                      ("gil_spin_ns=0", {"gil_spin_ns": 0}),
                      ("spawn_gil='release'", {"spawn_gil": "release"}),
                      ("spawn_gil='yield'", {"spawn_gil": "yield"})):
        ctx = {"weft_rt": weft.Runtime(workers=2, **kw)}
        bench.run_weft(a.steps, W, 2, None, ctx)
        e = bench.measure(bench.run_weft, ctx, a.steps, W, 2, None, a.reps)
        b5 = bench.measure(bench.run_weft, ctx, a.steps, W, 2, 5, a.reps)
        b10 = bench.measure(bench.run_weft, ctx, a.steps, W, 2, 10, a.reps)
        bench.close_weft(ctx)
        print(f"{label:26s} {e:10.2f}      {bench.kernel_us(5) / b5:9.0%}   {bench.kernel_us(10) / b10:9.0%}")


if __name__ == "__main__":
    main()
