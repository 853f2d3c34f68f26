"""Whether a runtime's efficiency on the free-threaded build is a property
of the runtime for its life, or moves from round to round.

Five runtimes of 2 workers live side by side in one process; in each of
three rounds each is timed in turn (the order rotated) on batches of 200
pure-Python bodies of about 50 us, against the same bodies run one after
another on the program's thread: efficiency = sequential / (2 x batch).
Prints, per set of five runtimes, the three rounds' medians side by side.
A runtime that is slow for its life reads low in every round.

    PYTHON_GIL=0 build-ft/venv/bin/python bench/py/gil_ft_rounds.py [--sets 4] [--lazy]

--lazy makes each runtime at its first turn instead of all five first.
"""
import argparse
import statistics
import time

import weft

K = 5


def body(n: int = 1500) -> int:
    x = 0
    for i in range(n):
        x += i
    return x


def sequential(n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        body()
    return time.perf_counter() - t0


def batch(rt: weft.Runtime, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        rt.spawn(body)
    rt.wait_all()
    return time.perf_counter() - t0


def one_set(lazy: bool) -> list:
    rts: list = [None] * K if lazy else [weft.Runtime(workers=2) for _ in range(K)]
    warmed = [False] * K
    rounds = []
    for _ in range(3):
        eff: list = [[] for _ in range(K)]
        for r in range(5):
            s = sequential(200)
            for k in list(range(K))[r % K:] + list(range(K))[:r % K]:
                if rts[k] is None:
                    rts[k] = weft.Runtime(workers=2)
                if not warmed[k]:
                    end = time.perf_counter() + 0.2
                    while time.perf_counter() < end:
                        batch(rts[k], 200)
                    warmed[k] = True
                eff[k].append(s / batch(rts[k], 200) / 2)
        rounds.append([statistics.median(e) for e in eff])
    for rt in rts:
        rt.close()
    return rounds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", type=int, default=4)
    ap.add_argument("--lazy", action="store_true")
    a = ap.parse_args()
    print("runtimes 0-4, made in that order; rounds 1 | 2 | 3")
    for _ in range(a.sets):
        rounds = one_set(a.lazy)
        print(" | ".join(" ".join("%.2f" % x for x in m) for m in rounds))


if __name__ == "__main__":
    main()
