"""How long a pure-Python body takes, timed inside it, run four ways in
interleaved rounds: back to back in a loop on the program's thread
(`main`), the same loop inside one task on a worker (`one_task`), each
body a task of a chain on a 2-worker runtime (`chain`), and each body an
independent task (`indep`).  Prints each way's body time per round (the
median and the mean: the mean counts bodies held up mid-way), and the
medians over the rounds of the ratios of `chain` and `indep` to
`one_task` (a worker thread, nothing of the runtime's between the
bodies): what running the runtime's work between two bodies costs the
bodies themselves, which a chain's time outside its bodies (gil.py's
`gil_chain_gap_us`) leaves out and its time against the sequential loop
(`gil_chain_extra_us`) counts; and of `main` to `one_task`: the program's
thread against a worker's.

    .venv/bin/python bench/py/gil_body_speed.py [--us 50] [--bodies 2000] [--rounds 9]
"""
import argparse
import statistics as st
import time

import weft

pc = time.perf_counter


def body(n, rec):
    t0 = pc()
    x = 0
    for k in range(n):
        x += k
    rec(pc() - t0)
    return x


def calibrate(us):
    """Loop iterations for a body of about `us` microseconds."""
    n = 1000
    for _ in range(3):
        t0 = pc()
        for _ in range(100):
            body(n, lambda d: None)
        per = (pc() - t0) / 100
        n = max(1, int(n * us * 1e-6 / per))
    return n


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--us", type=float, default=50.0, help="body length (us)")
    ap.add_argument("--bodies", type=int, default=2000, help="bodies per way per round")
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args(argv)
    n = calibrate(args.us)
    N = args.bodies

    def loop(out):
        for _ in range(N):
            body(n, out.append)

    ways = ("main", "one_task", "chain", "indep")
    ratios = {"main": [], "chain": [], "indep": []}
    with weft.Runtime(workers=2) as rt:
        def run(way):
            out = []
            if way == "main":
                loop(out)
            elif way == "one_task":
                rt.spawn(loop, out).result()
            elif way == "chain":
                prev = rt.spawn(body, n, out.append)
                for _ in range(1, N):
                    prev = rt.spawn(body, n, out.append, deps=[prev])
                rt.wait_all()
            else:
                for _ in range(N):
                    rt.spawn(body, n, out.append)
                rt.wait_all()
            return st.median(out) * 1e6, st.fmean(out) * 1e6

        run("chain")  # (untimed: the runtime's first run, pinning learnt)
        print(f"# body of {args.us:g} us ({n} iterations), {N} bodies per way, {args.rounds} rounds; "
              "body time (us), timed inside the body: median / mean")
        print("# round " + " ".join(f"{w:>15}" for w in ways))
        for r in range(args.rounds):
            order = ways[r % 4:] + ways[:r % 4]  # each way after each other in turn
            got = {w: run(w) for w in order}
            print(f"  {r:5d} " + " ".join(f"{got[w][0]:7.2f} {got[w][1]:7.2f}" for w in ways), flush=True)
            for w in ratios:
                ratios[w].append((got[w][0] / got["one_task"][0], got[w][1] / got["one_task"][1]))
    for w, rs in ratios.items():
        print(f"gil_body_speed_vs_one_task {w} median {st.median(x for x, _ in rs):.3f} "
              f"mean {st.median(y for _, y in rs):.3f}")


if __name__ == "__main__":
    main()
