"""A body that spawns N children and waits for them in spawn order
(`[t.result() for t in ts]`: Ray's `ray.get(list)` inside a task, the
pattern of Ray's nested-tasks.py `h`) gets no parallelism on 2 workers: the
other worker steals the children one at a time in spawn order, which is the
order the parent waits in, so the parent finds each awaited child already
running, blocks on it, and never runs a sibling.  The same children waited
for in reverse order, or awaited with `weft.gather` in an `async def` body,
or spawned from the program's thread, run on both workers.

Found porting ray_monte_carlo_pi.py (its `h` form: 1.0-1.15x of sequential
on 2 workers, where the flat form gets 2.2x) and ray_nested_quicksort.py.
docs/python-guide.md (Waiting, nesting) says a wait inside a task runs the
awaited task's own unstarted predecessors and nothing else; it does not
say that the parent's worker then idles while the parent's other children
wait in a queue.

Children are 20-ms GIL-released busy-waits (`weft.bench.busy`); prints the
medians of 5 runs; exits 1 when the in-order wait takes over 1.4x the
reverse-order one.
"""
import statistics
import sys
import time

import weft

N, US = 16, 20_000


def child():
    weft.bench.busy(US)


def in_order():
    ts = [weft.spawn(child) for _ in range(N)]
    return [t.result() for t in ts]


def reverse_order():
    ts = [weft.spawn(child) for _ in range(N)]
    return [t.result() for t in reversed(ts)]


async def gathered():
    return await weft.gather([weft.spawn(child) for _ in range(N)])


def main():
    med = {}
    with weft.Runtime(workers=2) as rt:
        for name, run in (("from the program's thread", lambda: [t.result() for t in [rt.spawn(child) for _ in range(N)]]),
                          ("body, waits in spawn order", lambda: rt.spawn(in_order).result()),
                          ("body, waits in reverse order", lambda: rt.spawn(reverse_order).result()),
                          ("async body, weft.gather", lambda: rt.spawn(gathered).result())):
            times, steals = [], []
            for _ in range(5):
                s0 = rt.stats()["steals"]
                t0 = time.perf_counter()
                run()
                times.append(time.perf_counter() - t0)
                steals.append(rt.stats()["steals"] - s0)
            med[name] = statistics.median(times)
            print(f"{name:30} {med[name] * 1e3:7.1f} ms (one worker: {N * US / 1e3:.0f} ms, two: {N * US / 2e3:.0f} ms)"
                  f"   steals per run {steals}")
    ratio = med["body, waits in spawn order"] / med["body, waits in reverse order"]
    print(f"in spawn order / reverse order: {ratio:.2f}")
    return 1 if ratio > 1.4 else 0


if __name__ == "__main__":
    sys.exit(main())
