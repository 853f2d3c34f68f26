"""The Python part of `make demo`: a task graph run by Weft from Python.

    .venv/bin/python python/demo.py [trace.json]
"""
import os
import sys
import time

import weft

trace = sys.argv[1] if len(sys.argv) > 1 else os.path.join("build", "demo-trace-py.json")
os.makedirs(os.path.dirname(trace) or ".", exist_ok=True)

with weft.Runtime(workers=2, trace=trace) as rt:
    # 1. A wavefront over a task space, spawned last step first: every task
    #    names T[t-1, j] before it exists.
    W, STEPS = 4, 200
    T = weft.TaskSpace("wave")
    grid: dict[tuple[int, int], int] = {}

    def cell(t: int, i: int) -> int:
        left = grid.get((t - 1, i - 1), 0)
        up = grid.get((t - 1, i), 1 if t == 0 else 0)
        grid[t, i] = (left + up) % 1_000_003
        return grid[t, i]

    for t in reversed(range(STEPS)):
        for i in range(W):
            deps = [T[t - 1, j] for j in (i - 1, i) if 0 <= j < W] if t else []
            weft.spawn(cell, t, i, deps=deps, task=T[t, i])
    print(f"wavefront: {W * STEPS} tasks, last cell = {T[STEPS - 1, W - 1].result()}")

    # 2. Bodies that release the GIL run in parallel on the two workers.
    t0 = time.perf_counter()
    for _ in range(200):
        weft.spawn(weft.bench.busy, 1000)  # 1 ms of C each, GIL released
    rt.wait_all()
    wall = time.perf_counter() - t0
    print(f"200 x 1 ms GIL-releasing bodies: {wall * 1e3:.0f} ms on {rt.workers} workers "
          f"(speed-up {0.2 / wall:.1f}x)")

    # 3. Small Python tasks cost microseconds.
    n = 20000
    t0 = time.perf_counter()
    for _ in range(n):
        weft.spawn(int)
    rt.wait_all()
    print(f"{n} empty Python tasks: {(time.perf_counter() - t0) / n * 1e6:.2f} us each")

    # 4. A failure cancels its dependents, which name it.
    bad = weft.spawn(int, "not a number", name="parse")
    dep = weft.spawn(print, "never printed", deps=[bad], name="report")
    print("failure:", repr(bad.exception()))
    print("dependent:", dep.exception())

print(f"trace written to {trace} (open it in https://ui.perfetto.dev)")
