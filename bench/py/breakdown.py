"""Where a Weft Python task's microseconds go (stencil_1d, width 2).

Splits the empty-body cost of bench.py into:
  loop      the benchmark's own Python loop (building deps lists), no spawn
  spawn     weft.spawn from Python while no body runs (the graph waits on a gate)
  run/1w    running the released graph on 1 worker: GIL attach, call, result,
            detach, C dependency release; no hand-off between workers
  run/2w    the same on 2 workers: adds GIL and task hand-offs between workers
  total     spawn and run overlapped, as in bench.py (wall x workers / tasks)

    python bench/py/breakdown.py [--steps 1000] [--reps 5]
"""
import argparse
import statistics
import time

import weft

W = 2


def noop(*_):
    return None


def deps_of(t, i):
    return () if t == 0 else tuple(j for j in (i - 1, i, i + 1) if 0 <= j < W)


DEPS = {}  # (t, i) -> dependency columns, computed before any timing


def graph(steps):
    if steps not in DEPS:
        DEPS[steps] = [[deps_of(t, i) for i in range(W)] for t in range(steps)]
    return DEPS[steps]


def loop_only(steps):
    dg = graph(steps)
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
    dg = graph(steps)
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


def overlapped(rt, steps):
    spawn = rt.spawn
    dg = graph(steps)
    t0 = time.perf_counter()
    prev = [None] * W
    for t in range(steps):
        cur = []
        for i in range(W):
            cur.append(spawn(noop, deps=[prev[j] for j in dg[t][i]]))
        prev = cur
    rt.wait_all()
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    n = a.steps * W
    us = lambda s: s / n * 1e6  # noqa: E731
    print(f"loop     {us(statistics.median(loop_only(a.steps) for _ in range(a.reps))):6.2f} us per task (wall)")
    for workers in (1, 2):
        with weft.Runtime(workers=workers) as rt:
            gated(rt, a.steps)
            res = [gated(rt, a.steps) for _ in range(a.reps)]
            sp = statistics.median(r[0] for r in res)
            run = statistics.median(r[1] for r in res)
            if workers == 1:
                print(f"spawn    {us(sp):6.2f} us per task (wall, main thread, nothing running)")
            print(f"run/{workers}w   {us(run):6.2f} us per task (wall, after the gate opens)")
            if workers == 2:
                overlapped(rt, a.steps)
                tot = statistics.median(overlapped(rt, a.steps) for _ in range(a.reps))
                print(f"total    {us(tot):6.2f} us per task wall = {us(tot) * W:5.2f} us per task "
                      f"x {W} workers (bench.py's py_task_us)")


if __name__ == "__main__":
    main()
