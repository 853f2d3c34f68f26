"""What an `async def` body costs beside a plain Python body.

    .venv/bin/python bench/py/async_bench.py [--tasks 20000] [--reps 7] [--workers 2]

In the same run, on one runtime, each measured as `--tasks` independent
tasks spawned from the main thread, then wait_all (wall time; µs per task
= wall x workers / tasks, as bench.py's py_task_us):

- plain:        `def body(): return None`
- async_none:   `async def body(): return None` (the coroutine runs to its
                end on the worker: no await)
- async_one:    `async def body(): return await weft.spawn(noop)` (spawns a
                child and awaits it: the child, still queued, is run right
                there by the awaiting worker, as a wait from a task would,
                so the coroutine goes on without suspending)
- async_two:    `async def body(): return await weft.gather(weft.spawn(noop),
                weft.spawn(noop))` (awaiting two tasks always suspends: a
                continuation task resumes the coroutine once both have
                finished; four C tasks and four Python bodies per measured
                task)
- async_ready:  `async def body(t): return await t` on a task spawned
                beforehand by the main thread and already finished (the
                await answers at once: no suspension)

Each line is the median of --reps runs; the ratios are to `plain`.
"""
import argparse
import statistics
import time

import weft


def noop():
    return None


def plain():
    return None


async def async_none():
    return None


async def async_one():
    return await weft.spawn(noop)


async def async_two():
    return await weft.gather(weft.spawn(noop), weft.spawn(noop))


async def async_ready(t):
    return await t


def run(rt, body, n, arg=None):
    t0 = time.perf_counter()
    if arg is None:
        for _ in range(n):
            rt.spawn(body)
    else:
        for _ in range(n):
            rt.spawn(body, arg)
    rt.wait_all()
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    cases = [("plain", plain, False), ("async_none", async_none, False), ("async_one", async_one, False),
             ("async_two", async_two, False), ("async_ready", async_ready, True)]
    walls = {name: [] for name, _, _ in cases}
    with weft.Runtime(workers=a.workers) as rt:
        done = rt.spawn(noop)
        done.wait()
        for name, body, with_arg in cases:          # warm up
            run(rt, body, min(a.tasks, 2000), done if with_arg else None)
        for _ in range(a.reps):                      # interleaved: the same machine state for each
            for name, body, with_arg in cases:
                walls[name].append(run(rt, body, a.tasks, done if with_arg else None))
    us = {name: statistics.median(w) * a.workers / a.tasks * 1e6 for name, w in walls.items()}
    for name, _, _ in cases:
        print(f"{name:12s} {us[name]:7.2f} us/task  {us[name] / us['plain']:5.2f}x plain")
    for name, _, _ in cases:
        print(f"py_async_us {name} {us[name]:.3f}")


if __name__ == "__main__":
    main()
