"""Python tasks under GIL contention: bodies that hold the GIL for part of
their time and run compiled code that releases it for the rest.

A body of T us runs f*T us of pure Python (a loop, the GIL held), then
(1-f)*T us in a small C function built here (cc into a temporary folder,
loaded with ctypes, which releases the GIL around the call).  For every
point (T, f), shape and worker count, every system runs the same N bodies,
interleaved round by round with a plain sequential loop of them:

  efficiency = (sequential time / system time) / bound

where the bound is the best speed-up the point allows (bound() below):
min(workers, 1/f) for independent tasks under the GIL, the worker count
without it (a free-threaded interpreter run with PYTHON_GIL=0), 1 for a
chain.

Shapes: `indep` (N independent tasks, then a wait for all of them) and
`chain` (each task depends on the one before).  Systems: Weft with its
default GIL policy (`weft`), Weft with `gil_spin_ns=0` (`weft_spin0`),
Weft with its workers pinned one per CPU (`weft_pin`: pin_workers=True),
Weft giving the GIL back after every body (`weft_hold0`: gil_hold_ns=0),
a second runtime with the default policy (`weft_twin`: the control, which
shows how far two identical policies' figures differ),
`concurrent.futures.ThreadPoolExecutor` (`threadpool`; a chain's task first
waits for the previous future) and Dask's threaded scheduler (`dask`, when
installed); on request (`--systems ...,seq_again`, not by default) the
sequential loop again, as a system in the rotation: a control of the
order in which a round runs them.  Each figure is the median over --reps
rounds of the ratio taken within one round; a round during which other
processes used more than a quarter of the machine is run again (at most
twice).  For chains on the workers, --json's rows also keep each round's
mean body time (timed inside the body) and the process's CPU time over
the wall time, per system (`rounds`).

Where (--where): `cpu`, the bodies as above; `vgpu`, Weft's policies only,
on a runtime with devices "cpu,vgpu:2": each task is placed on a whole
virtual GPU (placement=weft.gpu), runs its Python part on the worker and
queues its C part on the task's stream (ctx.queue_native), where the
stream's thread runs it without the GIL.  Its bound: min(2, 1/f) for
independent tasks (two GPUs), 1/max(f, 1-f) for a chain (a link's body
starts once the body before it has returned, so its Python part may
overlap the C part before it).

Each Weft runtime, when made, first runs SETTLE_S (0.2 s) of its first
point's bodies untimed, so that what its default policy learns as it runs
(whether to pin its workers: weft_config.pin_workers) is learnt before it
is timed.

The calibration (each body's measured Python and C parts, timed on their
own back to back, the least of 7 timings) is printed first; each round
first scales the Python part to f*T us again (the interpreter's speed
drifts on a shared VM; the range of the scaling is printed at the end).  The output
ends with, for each variant (<name>: weft, or weft_vgpu on virtual GPUs;
weft_ft, weft_ft_vgpu without the GIL):

  gil_eff_min_t200 <name> <v>    least efficiency, independent tasks, 2
                                 workers, T >= 200 us, every f
  gil_eff_min_t50 <name> <v>     least efficiency, independent tasks, 2
                                 workers, T = 50 us, f <= 0.25
  gil_chain_extra_us <name> <v>  a chain's cost per task beyond its bodies
                                 (2 workers, the least T, the largest over f):
                                 its time against the sequential loop's
  gil_chain_gap_us <name> <v>    the same, from the time outside the bodies
                                 (each body timed inside, in both runs):
                                 what the interpreter's speed moving
                                 between the two runs leaves out (but a
                                 body slowed inside, waiting for the GIL,
                                 counts as body)
  gil_default_vs_best <name> <v> the worst ratio, over every point, of the
                                 default policy's time to the best Weft
                                 policy's that ran (weft_spin0, weft_pin,
                                 weft_hold0;
                                 per point and policy the median of the
                                 rounds' ratios; 1.0: the default is the
                                 best)
  gil_default_vs_twin <name> <v> the same statistic against weft_twin, the
                                 default itself: what noise alone gives

--json FILE writes every row (bench/py/gil_plot.py draws heat-maps from it).

    python bench/py/gil.py [--quick] [--reps 5] [--T 50,200,1000]
                           [--f 0,0.1,0.25,0.5,1] [--workers 1,2]
                           [--where cpu,vgpu]
                           [--systems weft,weft_spin0,weft_pin,weft_hold0,weft_twin,threadpool,dask]
                           [--work-ms 10] [--json FILE]
    PYTHON_GIL=0 build-ft/venv/bin/python bench/py/gil.py   # free-threaded
"""
import argparse
import ctypes
import json
import os
import shutil
import statistics
import struct
import sysconfig
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as futures_wait

import weft

# The suite's own measure of other processes' load (bench/py/bench.py).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import _cpu_snapshot, _others_busy  # noqa: E402

C_SOURCE = r"""
#include <stdint.h>
#include <string.h>
#include <time.h>

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Busy for ns nanoseconds: the compiled part of a body. */
void gil_bench_spin(uint64_t ns)
{
    uint64_t t0 = now_ns();
    while (now_ns() - t0 < ns) {
    }
}

/* The same, queued on a virtual GPU's stream (ctx.queue_native): arg
 * points to the nanoseconds. */
int gil_bench_spin_q(void *arg)
{
    uint64_t ns;
    memcpy(&ns, arg, sizeof ns);
    gil_bench_spin(ns);
    return 0;
}
"""


def build_kernel():
    """(the C function through ctypes, its form for queue_native, the
    temporary folder they live in)."""
    tmp = tempfile.mkdtemp(prefix="weft-gil-bench-")
    src, so = os.path.join(tmp, "spin.c"), os.path.join(tmp, "spin.so")
    with open(src, "w") as f:
        f.write(C_SOURCE)
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", so, src], check=True)
    lib = ctypes.CDLL(so)  # CDLL, not PyDLL: the call releases the GIL
    fn = lib.gil_bench_spin
    fn.argtypes = [ctypes.c_uint64]
    fn.restype = None
    qfn = lib.gil_bench_spin_q
    qfn.argtypes = [ctypes.c_void_p]
    qfn.restype = ctypes.c_int
    return fn, qfn, tmp


def make_body(cspin):
    def body(i, n_py, c_ns, record):
        x = 0
        for _ in range(n_py):  # pure Python: the GIL held
            x += 1
        if c_ns:
            cspin(c_ns)  # compiled: the GIL released
        record(i)
        return i

    return body


def make_vgpu_body(qspin):
    """The body placed on a virtual GPU: its Python part on the worker, its
    C part queued on the task's stream (run there without the GIL)."""
    def body(i, n_py, c_arg, record):
        x = 0
        for _ in range(n_py):  # pure Python: the GIL held
            x += 1
        if c_arg is not None:
            weft.context().queue_native(qspin, c_arg)
        record(i)
        return i

    return body


# --- calibration ------------------------------------------------------------


def _per_call_us(fn, n):
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def calibrate(body):
    """Nanoseconds per iteration of the body's Python loop (best of 5)."""
    n = 200000
    best = min(_per_call_us(lambda: body(0, n, 0, _drop), 1) for _ in range(5))
    return best * 1000 / n


def _drop(_):
    pass


def parts(body, n_py, c_ns, calls):
    """The body's measured Python part and C part (us, the least of 7
    timings of `calls` back-to-back calls each: what other processes add
    is left out).  The Python part includes the call of the body; the C
    part, ctypes' call."""
    py = min(_per_call_us(lambda: body(0, n_py, 0, _drop), calls) for _ in range(7))
    full = min(_per_call_us(lambda: body(0, n_py, c_ns, _drop), calls) for _ in range(7))
    return py, full - py, full


# --- systems: each runs n bodies and returns (wall s, what the bodies recorded)


def run_seq(ctx, body, n, shape, n_py, c_ns):
    out = []
    rec = out.append
    t0 = time.perf_counter()
    for i in range(n):
        body(i, n_py, c_ns, rec)
    return time.perf_counter() - t0, out


NGPU = 2  # virtual GPUs of the `vgpu` variant ("cpu,vgpu:2")


# What a Weft runtime runs, untimed, when it is made: what the default
# policy learns as it runs (whether the operating system keeps its workers
# packed on one CPU, and then pinning them: weft_config.pin_workers) is
# learnt before any of its runs is timed, as in a program that runs for
# longer than this.  (How long the learning takes is measured apart:
# tests/test_autopin.c, docs/performance.md.)
SETTLE_S = 0.2


def _weft_runner(gil_spin_ns, pin=None, twin=False, hold=None):
    """pin: pin_workers= (None: the runtime's default, "auto"); hold:
    gil_hold_ns= (None: the default); twin: a runtime of its own with the
    same settings (the control: the same policy measured as another
    system)."""
    def run(ctx, body, n, shape, n_py, c_ns):
        vgpu = ctx["where"] == "vgpu"
        key = ("weft", gil_spin_ns, pin, twin, hold)
        rt = ctx.get(key)
        fresh = rt is None
        if fresh:
            kw = {} if gil_spin_ns is None else {"gil_spin_ns": gil_spin_ns}
            if pin is not None:
                kw["pin_workers"] = pin
            if hold is not None:
                kw["gil_hold_ns"] = hold
            if vgpu:
                kw["devices"] = f"cpu,vgpu:{NGPU}"
            rt = ctx[key] = weft.Runtime(workers=ctx["workers"], **kw)
        spawn = rt.spawn
        kw = {}
        c = c_ns
        b = body
        if vgpu:  # a whole GPU each: at most NGPU C parts at once
            b, kw = ctx["vbody"], {"placement": weft.gpu}
            c = struct.pack("Q", c_ns) if c_ns else None

        def once():
            out = []
            rec = out.append
            t0 = time.perf_counter()
            if shape == "indep":
                for i in range(n):
                    spawn(b, i, n_py, c, rec, **kw)
            else:
                prev = spawn(b, 0, n_py, c, rec, **kw)
                for i in range(1, n):
                    prev = spawn(b, i, n_py, c, rec, deps=[prev], **kw)
            rt.wait_all()
            return time.perf_counter() - t0, out

        if fresh:
            end = time.perf_counter() + SETTLE_S
            while time.perf_counter() < end:
                once()
        return once()

    return run


def _after(prev, body, i, n_py, c_ns, rec):
    if prev is not None:
        prev.result()
    return body(i, n_py, c_ns, rec)


def run_threadpool(ctx, body, n, shape, n_py, c_ns):
    ex = ctx.get("threadpool")
    if ex is None:
        ex = ctx["threadpool"] = ThreadPoolExecutor(ctx["workers"])
    out = []
    rec = out.append
    t0 = time.perf_counter()
    if shape == "indep":
        fs = [ex.submit(body, i, n_py, c_ns, rec) for i in range(n)]
        futures_wait(fs)
    else:
        prev = None
        for i in range(n):
            prev = ex.submit(_after, prev, body, i, n_py, c_ns, rec)
        prev.result()
    return time.perf_counter() - t0, out


def _chain_step(_prev, body, i, n_py, c_ns, rec):
    return body(i, n_py, c_ns, rec)


def run_dask(ctx, body, n, shape, n_py, c_ns):
    import dask.threaded

    out = []
    rec = out.append
    t0 = time.perf_counter()
    if shape == "indep":
        dsk = {("b", i): (body, i, n_py, c_ns, rec) for i in range(n)}
    else:
        dsk = {("b", 0): (body, 0, n_py, c_ns, rec)}
        for i in range(1, n):
            dsk[("b", i)] = (_chain_step, ("b", i - 1), body, i, n_py, c_ns, rec)
    dask.threaded.get(dsk, list(dsk), num_workers=ctx["workers"])
    return time.perf_counter() - t0, out


def close_all(ctx):
    for k, v in list(ctx.items()):
        if isinstance(k, tuple) and k[0] == "weft":
            v.close()
        elif k == "threadpool":
            v.shutdown()
    ctx.clear()


SYSTEMS = {
    "weft": (_weft_runner(None), None),
    "weft_spin0": (_weft_runner(0), None),
    "weft_pin": (_weft_runner(None, pin=True), None),
    "weft_hold0": (_weft_runner(None, hold=0), None),
    "weft_twin": (_weft_runner(None, twin=True), None),
    "threadpool": (run_threadpool, None),
    "dask": (run_dask, "dask"),
    "seq_again": (run_seq, None),
}
WEFT_POLICIES = ("weft", "weft_spin0", "weft_pin", "weft_hold0")  # (weft_twin is the control, not a policy)


def available(mod):
    if mod is None:
        return True
    try:
        __import__(mod)
        return True
    except Exception:
        return False


# --- disturbance ------------------------------------------------------------


STATS = {"rerun": 0, "busy_kept": 0, "py_scale": (1.0, 1.0)}


def check(shape, n, out):
    """The bodies all ran, once each (in order, for a chain)."""
    want = list(range(n))
    got = out if shape == "chain" else sorted(out)
    if got != want:
        raise AssertionError(f"{shape}: bodies recorded {len(out)} results, not 0..{n - 1} "
                             f"{'in order' if shape == 'chain' else 'once each'}")


def rescale_py(body, n_py, py_us):
    """n_py scaled so that the body's Python part (its call included) takes
    py_us again: the least of 5 timings of about 300 us of calls.  The
    interpreter's speed drifts on a shared VM (by a quarter within a run,
    seen on this project's 2-vCPU VM) while the C part is timed, and at
    f = 0.5 a Python part a few percent off its C part moves a point from
    bound by the GIL to bound by the cores."""
    calls = max(3, round(300 / py_us))
    got = min(_per_call_us(lambda: body(0, n_py, 0, _drop), calls) for _ in range(5))
    return max(1, round(n_py * py_us / got))


def timed_body(body):
    """(body wrapped to time each call, the list of the calls' times): a
    chain's time outside its bodies is its wall time less their sum."""
    spans = []
    pc = time.perf_counter

    def timed(i, n_py, c_ns, record):
        t0 = pc()
        body(i, n_py, c_ns, record)
        spans.append(pc() - t0)

    return timed, spans


def point(ctx, body, systems, n, shape, n_py, c_ns, reps, check_busy, py_us=0.0, spans=None, gaps=None,
          bodies=None):
    """{system: [wall s of each round]}, seq included.  Each round runs the
    sequential loop, then the systems, starting with the next one each round.
    The run right after the sequential loop can be slower (by up to a third
    on 1 ms bodies on a 2-vCPU VM, where the CPU left idle during the loop
    seems to come back late), so each system takes that place in turn.
    With py_us, each round first scales the Python part to py_us again
    (rescale_py).  With spans (timed_body's list, body being the timed
    one), gaps[system] also gets each round's wall time less the bodies',
    and bodies[system] each round's mean body time (s) and the process's
    CPU time over the wall time (1: one thread running throughout)."""
    names = ["seq"] + systems
    walls = {s: [] for s in names}
    n_py0 = n_py
    for r in range(reps):
        k = r % len(systems) if systems else 0
        order = ["seq"] + systems[k:] + systems[:k]
        for attempt in range(3):
            if py_us > 0 and n_py:
                n_py = rescale_py(body, n_py, py_us)
                STATS["py_scale"] = (min(STATS["py_scale"][0], n_py / n_py0), max(STATS["py_scale"][1], n_py / n_py0))
            a = _cpu_snapshot()
            got, gap, span = {}, {}, {}
            for s in order:
                run = run_seq if s == "seq" else SYSTEMS[s][0]
                if spans is not None:
                    spans.clear()
                cpu0 = time.process_time()
                w, out = run(ctx, body, n, shape, n_py, c_ns)
                cpu = time.process_time() - cpu0
                check(shape, n, out)
                got[s] = w
                if spans is not None:
                    gap[s] = w - sum(spans)
                    span[s] = (sum(spans) / len(spans), cpu / w)
            busy = _others_busy(a, _cpu_snapshot()) if check_busy else 0.0
            if busy <= 0.25:
                break
            if attempt == 2:
                STATS["busy_kept"] += 1
                break
            STATS["rerun"] += 1
        for s in names:
            walls[s].append(got[s])
            if gaps is not None and s in gap:
                gaps.setdefault(s, []).append(gap[s])
            if bodies is not None and s in span:
                bodies.setdefault(s, []).append(span[s])
    return walls


def fmt(v):
    return "    -" if v is None else f"{v:5.2f}"


def gil_enabled():
    return getattr(sys, "_is_gil_enabled", lambda: True)()


def bound(shape, where, workers, f, gil):
    """The best speed-up over the sequential loop that the point allows.
    Python parts run one at a time under the GIL (`gil`), else up to one per
    worker; C parts run on the workers (`cpu`) or one per virtual GPU
    (`vgpu`, a whole GPU per task).  A chain on the CPU is sequential; on
    virtual GPUs a link's Python part may overlap the C part of the link
    before it (its body starts once the one before has returned), so a
    chain there is a 2-stage pipeline."""
    slots = workers if where == "cpu" else NGPU
    if shape == "chain":
        return 1.0 if where == "cpu" else 1.0 / max(f, 1.0 - f)
    py_at_once = 1 if gil else workers
    return min(slots, py_at_once / f) if f > 0 else float(slots)


def label(where, gil):
    """The name of Weft's summary lines for a variant."""
    return "weft" + ("" if gil else "_ft") + ("" if where == "cpu" else "_vgpu")


def summarise(rows, Ts, gil):
    """The gil_* lines, one set per variant (cpu, vgpu) that ran."""
    lines = []
    for where in ("cpu", "vgpu"):
        mine = [r for r in rows if r["where"] == where]
        if not mine:
            continue
        name = label(where, gil)

        def least(pred):
            v = [r["eff"]["weft"] for r in mine if "weft" in r["eff"] and pred(r)]
            return f"{min(v):.3f}" if v else "n/a"

        indep2 = lambda r: r["shape"] == "indep" and r["workers"] == 2  # noqa: E731
        lines.append(f"gil_eff_min_t200 {name} {least(lambda r: indep2(r) and r['T'] >= 200)}")
        lines.append(f"gil_eff_min_t50 {name} {least(lambda r: indep2(r) and r['T'] == 50 and r['f'] <= 0.25)}")
        ch = [r["extra_us"]["weft"] for r in mine
              if r["shape"] == "chain" and r["workers"] == 2 and r["T"] == min(Ts) and "weft" in r["extra_us"]]
        lines.append(f"gil_chain_extra_us {name} {max(ch):.2f}" if ch else f"gil_chain_extra_us {name} n/a")
        gp = [r["gap_us"]["weft"] for r in mine if r["shape"] == "chain" and r["workers"] == 2 and
              r["T"] == min(Ts) and "weft" in r.get("gap_us", {})]
        lines.append(f"gil_chain_gap_us {name} {max(gp):.2f}" if gp else f"gil_chain_gap_us {name} n/a")
        for fig in ("default_vs_best", "default_vs_twin"):
            v = [r[fig] for r in mine if fig in r]
            lines.append(f"gil_{fig} {name} {max(v):.3f}" if v else f"gil_{fig} {name} n/a")
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: T=200, f in {0, 0.5}, 2 workers, 2 rounds, tiny sizes")
    ap.add_argument("--T", default="50,200,1000", help="body lengths (us)")
    ap.add_argument("--f", default="0,0.1,0.25,0.5,1", help="Python fractions of the body")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--shapes", default="indep,chain")
    ap.add_argument("--where", default="cpu,vgpu",
                    help="cpu: bodies on the workers; vgpu: bodies placed on virtual GPUs "
                         f"(cpu,vgpu:{NGPU}) queueing their C part on the task's stream (Weft only)")
    ap.add_argument("--systems", default="weft,weft_spin0,weft_pin,weft_hold0,weft_twin,threadpool,dask")
    ap.add_argument("--reps", type=int, default=5, help="rounds per point (the median is kept)")
    ap.add_argument("--work-ms", type=float, default=10.0,
                    help="sequential work per run (ms): sets the number of bodies (at least 8)")
    ap.add_argument("--no-busy-check", action="store_true", help="do not rerun disturbed rounds")
    ap.add_argument("--json", default=None, help="also write every point's figures to this file")
    args = ap.parse_args(argv)
    if args.quick:
        args.T, args.f, args.workers, args.reps, args.work_ms = "200", "0,0.5", "2", 2, 2.0

    Ts = [float(x) for x in args.T.split(",")]
    fs = [float(x) for x in args.f.split(",")]
    workers_list = [int(x) for x in args.workers.split(",")]
    shapes = [s for s in args.shapes.split(",") if s]
    wheres = [w for w in args.where.split(",") if w]
    for w in wheres:
        if w not in ("cpu", "vgpu"):
            ap.error(f"--where: {w!r} is neither cpu nor vgpu")
    gil = gil_enabled()
    systems = []
    for s in (x.strip() for x in args.systems.split(",")):
        if not s:
            continue
        if s not in SYSTEMS:
            print(f"# unknown system {s}", file=sys.stderr)
            continue
        if not available(SYSTEMS[s][1]):
            print(f"# {s}: not installed (pip install {SYSTEMS[s][1]}): skipped", flush=True)
            continue
        systems.append(s)

    cspin, qspin, tmp = build_kernel()
    try:
        body = make_body(cspin)
        ns_iter = calibrate(body)
        print(f"# GIL contention sweep: python={sys.version.split()[0]} "
              f"({'GIL build' if gil and not sysconfig.get_config_var('Py_GIL_DISABLED') else 'free-threaded build, GIL ' + ('on' if gil else 'off')}) "
              f"cpus={os.cpu_count()} reps={args.reps} work={args.work_ms} ms/run "
              f"systems={','.join(systems)} where={','.join(wheres)}", flush=True)
        print(f"# calibration: {ns_iter:.2f} ns per Python loop iteration", flush=True)
        plan = {}
        print("#      T     f   python_us    C_us   body_us  bodies", flush=True)
        for T in Ts:
            for f in fs:
                n_py = round(f * T * 1000 / ns_iter)
                c_ns = round((1 - f) * T * 1000)
                n = max(8, round(args.work_ms * 1000 / T))
                calls = max(20, min(2000, n))
                py, c, full = parts(body, n_py, c_ns, calls)
                if n_py:  # once more, scaled by what the loop took in the body
                    n_py = max(1, round(n_py * f * T / py))
                    py, c, full = parts(body, n_py, c_ns, calls)
                plan[(T, f)] = (n_py, c_ns, n)
                print(f"# {T:6.0f} {f:5.2f} {py:10.2f} {c:8.2f} {full:8.2f} {n:6d}", flush=True)

        rows = []
        for where in wheres:
            # Virtual GPUs: Weft's policies only (its peers have no devices).
            here = systems if where == "cpu" else [s for s in systems if s in WEFT_POLICIES + ("weft_twin",)]
            if not here:
                continue
            for workers in workers_list:
                ctx = {"workers": workers, "where": where, "vbody": make_vgpu_body(qspin)}
                try:
                    for shape in shapes:
                        for T in Ts:
                            for f in fs:
                                rows.append(run_point(ctx, body, here, shape, T, f, plan[(T, f)], args, gil))
                finally:
                    close_all(ctx)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print_table(rows, systems)
    print(f"# rounds run again because other processes were busy: {STATS['rerun']}; "
          f"kept although disturbed: {STATS['busy_kept']}; Python parts rescaled per round by "
          f"{STATS['py_scale'][0]:.2f}-{STATS['py_scale'][1]:.2f} of the calibration")
    for line in summarise(rows, Ts, gil):
        print(line)
    if args.json:
        with open(args.json, "w") as fo:
            json.dump({"python": sys.version.split()[0], "gil": gil, "rows": rows, "stats": STATS}, fo)
    return rows


def run_point(ctx, body, systems, shape, T, f, planned, args, gil):
    """One row: every system's efficiency at (shape, T, f) on ctx's workers."""
    n_py, c_ns, n = planned
    workers, where = ctx["workers"], ctx["where"]
    spans, gaps, bodies = None, None, None
    if shape == "chain" and where == "cpu":  # (on virtual GPUs a body's C part runs after it returns)
        body, spans = timed_body(body)
        gaps, bodies = {}, {}
    # A warm-up (runtimes, pools, caches), not timed.
    point(ctx, body, systems, min(n, 8), shape, n_py, c_ns, 1, False, spans=spans)
    walls = point(ctx, body, systems, n, shape, n_py, c_ns, args.reps, not args.no_busy_check, f * T,
                  spans=spans, gaps=gaps, bodies=bodies)
    b = bound(shape, where, workers, f, gil)
    seq = walls["seq"]
    row = {"T": T, "f": f, "shape": shape, "workers": workers, "where": where, "n": n, "bound": b,
           "seq_us": statistics.median(seq) / n * 1e6, "eff": {}, "us": {}, "extra_us": {}}
    for s in systems:
        ratios = [a / w for a, w in zip(seq, walls[s])]
        row["eff"][s] = statistics.median(ratios) / b
        row["us"][s] = statistics.median(walls[s]) / n * 1e6
        row["extra_us"][s] = statistics.median((w - a) / n * 1e6 for a, w in zip(seq, walls[s]))
        if gaps:
            row.setdefault("gap_us", {})[s] = statistics.median(
                (w - a) / n * 1e6 for a, w in zip(gaps["seq"], gaps[s]))
    if bodies:
        # each round's mean body (us) and CPU time over wall time, per system
        row["rounds"] = {s: [[round(m * 1e6, 2), round(c, 3)] for m, c in v] for s, v in bodies.items()}
    others = [p for p in WEFT_POLICIES if p != "weft" and p in systems]
    if "weft" in systems and others:
        # The default's time over the point's best other policy: for each,
        # the median of the rounds' ratios (paired: one round's systems ran
        # under the same conditions).  Not each round's least time of all:
        # the least of several noisy times is biased low, so a default
        # identical to another policy would read as losing.
        row["default_vs_best"] = default_vs_best(walls, others)
    if "weft" in systems and "weft_twin" in systems:
        # The same against the default's twin: how far the statistic moves
        # between two identical policies (its noise, at this point).
        row["default_vs_twin"] = max(1.0, paired(walls["weft"], walls["weft_twin"]))
    return row


def paired(a, b):
    """The median over rounds of a's time over b's in the same round."""
    return statistics.median(x / y for x, y in zip(a, b))


def default_vs_best(walls, others):
    """The default's (walls["weft"]) time over the best of the other
    policies', each compared round by round (paired); at least 1.0."""
    return max(1.0, max(paired(walls["weft"], walls[p]) for p in others))


def print_table(rows, systems):
    """The table: efficiency of every system at every point."""
    head = " ".join(f"{s:>10}" for s in systems)
    print("# efficiency (speed-up over the sequential loop / bound)")
    print(f"# {'where':<5}{'shape':<6}{'w':>2}{'T_us':>6}{'f':>6}{'bound':>6} {'seq_us':>8} {head}"
          "  weft_extra_us  weft_gap_us  default/best  default/twin")
    for row in rows:
        cells = " ".join(f"{fmt(row['eff'].get(s)):>10}" for s in systems)
        dvb, dvt = row.get("default_vs_best"), row.get("default_vs_twin")
        ex = row["extra_us"].get("weft") if row["shape"] == "chain" else None
        gp = row.get("gap_us", {}).get("weft")
        print(f"# {row['where']:<5}{row['shape']:<6}{row['workers']:>2}{row['T']:>6.0f}{row['f']:>6.2f}"
              f"{row['bound']:>6.2f} {row['seq_us']:>8.1f} "
              f"{cells}  {'' if ex is None else f'{ex:13.2f}'}  {'' if gp is None else f'{gp:11.2f}'}"
              f"  {'' if dvb is None else f'{dvb:12.3f}'}"
              f"  {'' if dvt is None else f'{dvt:12.3f}'}")


if __name__ == "__main__":
    main()
