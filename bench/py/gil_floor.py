"""The floor under bench/py/gil.py: how efficiently can 2 threads run its
bodies (f*T us of pure Python, the GIL held, then (1-f)*T us of C with the
GIL released) on this interpreter and this machine, with and without Weft?

Systems (each point runs them all, interleaved round by round, the order
rotating; `_pin`: the two threads pinned one per CPU, else placed by the
scheduler):

  weft, weft_pin      gil.py's Weft runner (default GIL policy), 2 workers;
                      weft_pin with pin_workers=True (weft: the default,
                      "auto", which pins them once it sees them packed)
  weft_nopin          (not run unless named) weft with pin_workers=False:
                      the workers left to the scheduler
  weft_hold0          (not run unless named) weft with gil_hold_ns=0: the
                      GIL given back after every body
  threads, threads_pin  two threading.Thread sharing one iterator over the
                      bodies: gil.py's body (its C part through ctypes)
  capi, capi_pin      gil_floor.c: two pthreads, each PyGILState_Ensure once,
                      then per body: call the Python part, PyEval_SaveThread,
                      the C part, PyEval_RestoreThread -- one GIL release and
                      one take per body, the least CPython's public API allows
  capi_spin_pin       capi_pin, each take first spinning while the GIL is
                      held (CPython's internal GIL state, as
                      python/weft/gil_state.c reads it): the take without
                      CPython's sleeping waiter
  c, c_pin            pure C: two pthreads, a mutex + condition variable +
                      flag in place of the GIL (a taker that finds it held
                      sleeps, the dropper signals: the shape of CPython's
                      GIL), held for the first f*T us of each body
  c_spin_pin          c_pin with a spin lock
  capi_awake_pin, c_awake_pin   (not run unless named) capi_pin and c_pin
                      with a SCHED_IDLE spinner on every CPU: a sleeping
                      waiter is woken on a CPU that is not halted

On the free-threaded build (PYTHON_GIL=0) there is no GIL to hand off:
the question is then what two plain threads get from the same bodies, and
only weft, weft_pin, weft_nopin, weft_hold0, threads and threads_pin run (by default
the first four); the bound is 2 at every f, and no hand-off is timed.

efficiency = (sequential time / system time) / min(2, 1/f), the sequential
time being the system's own one-thread form: gil.py's plain loop for weft
and threads, capi on one pthread for the capi rows, c on one pthread for
the c rows.  Each figure is the median over --reps rounds of the ratio
within a round; a round during which other processes used more than a
quarter of the machine is run again (at most twice).  The Python part of
capi is calibrated on its own (the Python function alone takes f*T us);
that of weft and threads as gil.py does (the body's call included).

It first prints the one-way cost of a hand-off between two threads
(`pingpong`: a mutex and condition variable; the same with a SCHED_IDLE
spinner on every CPU, so that the woken thread's CPU is not halted; an
atomic flag spun on; the median of 5 runs of 20000 round trips), and ends
with, per point:

  gil_floor_eff <system> T=<T> f=<f> <v>
  gil_floor_weft_vs_best T=<T> f=<f> <v>       weft's efficiency / the best
                                               of threads, capi and their
                                               _pin forms (the best CPython
                                               allows through its API)
  gil_floor_weft_pin_vs_best T=<T> f=<f> <v>   the same for weft_pin

(gil_floor_ft_... on the free-threaded build, against the best of threads
and threads_pin.)

    .venv/bin/python bench/py/gil_floor.py [--T 50,200,1000] [--f 0.5]
        [--reps 7] [--work-ms 40] [--systems ...] [--rounds]
"""
import argparse
import ctypes
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gil  # noqa: E402  (gil.py: the bodies, calibration, Weft's runner)
from bench import _cpu_snapshot, _others_busy  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def build_floor(tmp):
    """gil_floor.c as a shared library, loaded with ctypes.PyDLL (its
    functions are called with the GIL held; floor_capi_bodies releases it
    while its threads run)."""
    so = os.path.join(tmp, "gil_floor.so")
    inc = sysconfig.get_paths()["include"]
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-pthread", "-I", inc, "-o", so,
                    os.path.join(HERE, "gil_floor.c")], check=True)
    lib = ctypes.PyDLL(so)
    u64, i, lng = ctypes.c_uint64, ctypes.c_int, ctypes.c_long
    lib.floor_pingpong.argtypes, lib.floor_pingpong.restype = [lng, i, i], ctypes.c_double
    lib.floor_c_bodies.argtypes, lib.floor_c_bodies.restype = [lng, u64, u64, i, i, i], u64
    lib.floor_capi_bodies.argtypes = [ctypes.py_object, lng, u64, i, i, i]
    lib.floor_capi_bodies.restype = u64
    lib.floor_capi_can_spin.argtypes, lib.floor_capi_can_spin.restype = [], i
    lib.floor_set_pin.argtypes, lib.floor_set_pin.restype = [i], None
    return lib


def pingpong(lib):
    """One-way hand-off cost (us), the median of 5 runs of each kind."""
    kinds = {"condvar": (0, 0), "condvar_awake": (0, 1), "spin": (1, 0)}
    out = {}
    for name, (spin, awake) in kinds.items():
        v = [lib.floor_pingpong(20000, spin, awake) for _ in range(5)]
        if min(v) < 0:
            raise RuntimeError(f"pingpong {name}: a thread could not be made")
        out[name] = statistics.median(v) / 1000
    return out


def make_py_part(n_py):
    def py():
        x = 0
        for _ in range(n_py):  # pure Python: the GIL held
            x += 1
        return x

    return py


def cpus():
    return sorted(os.sched_getaffinity(0))


# --- systems: each returns wall seconds for n bodies -------------------------


def _threads(pin):
    def run(ctx, p):
        body, n, n_py, c_ns = ctx["body"], p["n"], p["n_py"], p["c_ns"]
        # Under the GIL the threads share one iterator (each takes the next
        # body when it is free); without it a range iterator is not safe to
        # share (3.13t hands one index to both), so each takes every other.
        it = iter(range(n))
        out = []
        rec = out.append
        where = cpus()

        def loop(k):
            if pin:
                os.sched_setaffinity(0, {where[k % len(where)]})
            for i in it if ctx["gil"] else range(k, n, 2):
                body(i, n_py, c_ns, rec)

        t0 = time.perf_counter()
        ts = [threading.Thread(target=loop, args=(k,)) for k in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        wall = time.perf_counter() - t0
        gil.check("indep", n, out)
        return wall

    return run


def _weft(pin, hold=None):
    run_weft = gil._weft_runner(None, pin=pin, hold=hold)

    def run(ctx, p):
        sub = ctx.setdefault(("weft_ctx", pin, hold), {"workers": 2, "where": "cpu"})
        wall, out = run_weft(sub, ctx["body"], p["n"], "indep", p["n_py"], p["c_ns"])
        gil.check("indep", p["n"], out)
        return wall

    return run


def run_seq(ctx, p):
    wall, out = gil.run_seq(ctx, ctx["body"], p["n"], "indep", p["n_py"], p["c_ns"])
    gil.check("indep", p["n"], out)
    return wall


def _floor(fn, bodies, threads, spin, pin, awake):
    """A runner of gil_floor.c's fn (floor_capi_bodies or floor_c_bodies):
    bodies(p) is its arguments before threads, spin and awake."""
    def run(ctx, p):
        lib = ctx["lib"]
        lib.floor_set_pin(pin)
        ns = getattr(lib, fn)(*bodies(p), threads, spin, awake)
        if ns == 0:
            raise RuntimeError(f"{fn} failed (a thread not made, or the Python part raised)")
        return ns / 1e9

    return run


def _capi(threads, spin, pin, awake=0):
    return _floor("floor_capi_bodies", lambda p: (p["capi_py"], p["n"], p["c_ns"]), threads, spin, pin, awake)


def _c(threads, spin, pin, awake=0):
    return _floor("floor_c_bodies", lambda p: (p["n"], p["held_ns"], p["c_ns"]), threads, spin, pin, awake)


# name: (runner, the name of its sequential form; None: a sequential form)
SYSTEMS = {
    "seq": (run_seq, None),
    "weft": (_weft(None), "seq"),
    "weft_pin": (_weft(True), "seq"),
    "weft_nopin": (_weft(False), "seq"),
    "weft_hold0": (_weft(None, hold=0), "seq"),
    "threads": (_threads(0), "seq"),
    "threads_pin": (_threads(1), "seq"),
    "capi_seq": (_capi(1, 0, 0), None),
    "capi": (_capi(2, 0, 0), "capi_seq"),
    "capi_pin": (_capi(2, 0, 1), "capi_seq"),
    "capi_spin_pin": (_capi(2, 1, 1), "capi_seq"),
    "capi_awake_pin": (_capi(2, 0, 1, awake=1), "capi_seq"),
    "c_seq": (_c(1, 0, 0), None),
    "c": (_c(2, 0, 0), "c_seq"),
    "c_pin": (_c(2, 0, 1), "c_seq"),
    "c_spin_pin": (_c(2, 1, 1), "c_seq"),
    "c_awake_pin": (_c(2, 0, 1, awake=1), "c_seq"),
}
RAW = ("threads", "threads_pin", "capi", "capi_pin")  # the best CPython allows, without Weft
FT_SYSTEMS = ("weft", "weft_pin", "weft_nopin", "weft_hold0", "threads", "threads_pin")  # those without a GIL
FT_DEFAULT = "weft,weft_pin,threads,threads_pin"


def run_point(ctx, names, p, reps, busy_stats):
    """{system: [wall s per round]} for names (sequential forms included):
    every system once per round, the order rotating."""
    walls = {s: [] for s in names}
    warm = dict(p, n=min(p["n"], 8))
    for name in names:  # warm-up (and Weft's runtimes made), not timed
        SYSTEMS[name][0](ctx, warm)
    for r in range(reps):
        k = r % len(names)
        order = names[k:] + names[:k]
        for attempt in range(3):
            recalibrate(ctx, p)
            a = _cpu_snapshot()
            got = {s: SYSTEMS[s][0](ctx, p) for s in order}
            if _others_busy(a, _cpu_snapshot()) <= 0.25:
                break
            if attempt == 2:
                busy_stats["kept"] += 1
                break
            busy_stats["rerun"] += 1
        for s in names:
            walls[s].append(got[s])
    return walls


def _least_us(fn, calls, times=5):
    """fn's time per call (us), the least of `times` timings of `calls`
    back-to-back calls."""
    best = float("inf")
    for _ in range(times):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
    return best


def recalibrate(ctx, p):
    """Scale the Python parts (gil.py's body with its call, and capi's
    function) to f*T us again (gil.rescale_py says why)."""
    want = p["py_us"]
    if want <= 0:
        return
    p["n_py"] = gil.rescale_py(ctx["body"], p["n_py"], want)
    got = _least_us(p["capi_py"], max(3, round(300 / want)))
    p["capi_n"] = max(1, round(p["capi_n"] * want / got))
    p["capi_py"] = make_py_part(p["capi_n"])


def plan_point(ctx, T, f, args):
    """The point's parameters: the Python parts calibrated to f*T us."""
    n_py = round(f * T * 1000 / ctx["ns_iter"])
    p = {"n": max(8, round(args.work_ms * 1000 / T)), "n_py": n_py, "capi_n": n_py, "f": f,
         "c_ns": round((1 - f) * T * 1000), "held_ns": round(f * T * 1000), "py_us": f * T,
         "capi_py": make_py_part(n_py)}
    for _ in range(2):
        recalibrate(ctx, p)
    return p


def one_point(ctx, shown, names, T, f, args, busy):
    p = plan_point(ctx, T, f, args)
    walls = run_point(ctx, names, p, args.reps, busy)
    b = min(2.0, 1.0 / f) if f > 0 and ctx["gil"] else 2.0
    eff = {s: statistics.median(a / w for a, w in zip(walls[SYSTEMS[s][1]], walls[s])) / b
           for s in shown}
    raw = [eff[s] for s in RAW if s in eff]
    ratios = {w: eff[w] / max(raw) for w in ("weft", "weft_pin") if raw and w in eff}
    seq = walls[names[0]]
    print(f"  {T:6.0f} {f:5.2f} {statistics.median(seq) / p['n'] * 1e6:7.1f} "
          + " ".join(f"{eff[s]:>{max(7, len(s))}.3f}" for s in shown)
          + "".join(f"  {w}/best {v:.3f}" for w, v in ratios.items()), flush=True)
    if args.rounds:
        for s in names:
            print(f"#   {s:<14} us per body, by round: "
                  + " ".join(f"{w / p['n'] * 1e6:6.1f}" for w in walls[s]))
    for s in shown:
        print(f"{ctx['figure']}_eff {s} T={T:g} f={f:g} {eff[s]:.3f}")
    for w, v in ratios.items():
        print(f"{ctx['figure']}_{w}_vs_best T={T:g} f={f:g} {v:.3f}", flush=True)


def close_all(ctx):
    for k, sub in ctx.items():
        if isinstance(k, tuple) and k[0] == "weft_ctx":
            gil.close_all(sub)


DEFAULT = "weft,weft_pin,threads,threads_pin,capi,capi_pin,capi_spin_pin,c,c_pin,c_spin_pin"


def loadavg():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--T", default="50,200,1000", help="body lengths (us)")
    ap.add_argument("--f", default="0.5", help="Python fractions of the body")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--work-ms", type=float, default=40.0, help="sequential work per run (ms)")
    ap.add_argument("--systems", default=None,
                    help=f"of {','.join(s for s, (_, b) in SYSTEMS.items() if b)} (their sequential forms run too)")
    ap.add_argument("--rounds", action="store_true", help="also print every round's us per body")
    args = ap.parse_args(argv)
    has_gil = gil.gil_enabled()
    if args.systems is None:
        args.systems = DEFAULT if has_gil else FT_DEFAULT
    shown = [s for s in args.systems.split(",") if s]
    for s in shown:
        if s not in SYSTEMS or SYSTEMS[s][1] is None:
            ap.error(f"--systems: unknown system {s!r}")
        if not has_gil and s not in FT_SYSTEMS:
            ap.error(f"--systems: {s} stands in for or hands off the GIL, which this interpreter runs "
                     f"without (PYTHON_GIL=0): name only {', '.join(FT_SYSTEMS)}")
    names = []
    for s in shown:
        for x in (SYSTEMS[s][1], s):
            if x not in names:
                names.append(x)
    Ts = [float(x) for x in args.T.split(",")]
    fs = [float(x) for x in args.f.split(",")]

    cspin, _qspin, tmp = gil.build_kernel()
    ctx = {}
    try:
        lib = build_floor(tmp) if has_gil else None
        body = gil.make_body(cspin)
        ctx.update(lib=lib, body=body, ns_iter=gil.calibrate(body), workers=2, where="cpu", gil=has_gil,
                   figure="gil_floor" if has_gil else "gil_floor_ft")
        spin = ('yes' if lib.floor_capi_can_spin() else 'no (GIL layout unknown: no spin)') if lib else '-'
        print(f"# GIL floor: python={sys.version.split()[0]} gil={'yes' if has_gil else 'no'} "
              f"cpus={os.cpu_count()} reps={args.reps} work={args.work_ms} ms/run loadavg={loadavg()} "
              f"capi_spin={spin}", flush=True)
        if lib:
            pp = pingpong(lib)
            print("# one-way hand-off between two threads, us: " +
                  ", ".join(f"{k} {v:.2f}" for k, v in pp.items()), flush=True)
            for k, v in pp.items():
                print(f"gil_floor_handoff_us {k} {v:.2f}")
        busy = {"rerun": 0, "kept": 0}
        print(f"# {'T_us':>6} {'f':>5} {'seq_us':>7} " + " ".join(f"{s:>7}" for s in shown), flush=True)
        for T in Ts:
            for f in fs:
                one_point(ctx, shown, names, T, f, args, busy)
        print(f"# rounds run again because other processes were busy: {busy['rerun']}; "
              f"kept although disturbed: {busy['kept']}; loadavg={loadavg()}")
    finally:
        close_all(ctx)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
