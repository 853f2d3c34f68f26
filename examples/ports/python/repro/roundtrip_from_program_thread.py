"""One spawn-and-wait round trip from the program's thread costs several
times a ThreadPoolExecutor's.

Found porting parla_tsqr.py: its driver on the program's thread (spawn the
blocks, `T3[0:n].wait()`, `.result()`, then one `rt.unregister` per range,
each a waited empty task) took 23-25 ms a factorization with 40 blocks of
100 x 20 (`-r 4000 -c 20 -b 100 --pycheck 0`), against 5-9 ms for the same
graph driven from an `async def` task, 4-6 ms for a ThreadPoolExecutor and
3-6 ms sequential.  `rt.unregister` of a range took 40-100 us from the
program's thread (7-40 us in later runs) against 2-7 us from inside a task (where the wait runs the
empty task itself).

Times `rt.spawn(f).result()` of an empty function, one at a time, against
`ex.submit(f).result()` on a 2-thread ThreadPoolExecutor, and
`rt.unregister` of a range from the program's thread and from a task
(medians of 7 x 300).  A timing: run it on a quiet machine.  Exits 1 when
weft's round trip is more than twice the executor's (measured 2.1-5.5 times
on a 2-core VM with another process busy on one core).
"""
import concurrent.futures
import statistics
import sys
import time

import numpy as np

import weft

N = 300


def f():
    return None


def unregister_all(rt, a):
    t0 = time.perf_counter()
    for i in range(N):
        rt.unregister(a[i])
    return (time.perf_counter() - t0) / N * 1e6


def registered(rt):
    a = np.zeros((N, 8))
    for i in range(N):
        rt.spawn(f, reads=[a[i]])
    rt.wait_all()
    return a


def main():
    res = {"weft spawn().result()": [], "ThreadPoolExecutor submit().result()": [],
           "weft unregister, program's thread": [], "weft unregister, in a task": []}
    with weft.Runtime(workers=2) as rt, concurrent.futures.ThreadPoolExecutor(2) as ex:
        for _ in range(7):
            t0 = time.perf_counter()
            for _ in range(N):
                rt.spawn(f).result()
            res["weft spawn().result()"].append((time.perf_counter() - t0) / N * 1e6)
            t0 = time.perf_counter()
            for _ in range(N):
                ex.submit(f).result()
            res["ThreadPoolExecutor submit().result()"].append((time.perf_counter() - t0) / N * 1e6)
            res["weft unregister, program's thread"].append(unregister_all(rt, registered(rt)))
            res["weft unregister, in a task"].append(rt.spawn(unregister_all, rt, registered(rt)).result())
    med = {k: statistics.median(v) for k, v in res.items()}
    for k, v in med.items():
        print(f"{k:40} {v:7.1f} us")
    return 1 if med["weft spawn().result()"] > 2 * med["ThreadPoolExecutor submit().result()"] else 0


if __name__ == "__main__":
    sys.exit(main())
