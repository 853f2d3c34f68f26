"""Parla's tall-skinny QR ("Direct TSQR"), ported to Weft's Python API.

Original: ut-parla/Parla.py, examples/TSQR/qr_parla.py (its CPU path,
`-p cpu`), with the same repository's examples/TSQR/qr_dask.py
(`dask.array.linalg.qr`) as the Dask comparison. The algorithm (Benson,
Gleich, Demmel, "Direct TSQR") factors a tall matrix A (rows >> cols) in
three steps:

  t1[i]  one task per block of `-b` rows: Q1_i, R1_i = qr(A_i), written
         into the block's rows of Q1 and R1 (NumPy/LAPACK, GIL released)
  t2     qr of the stacked R1 (nblocks*cols x cols): Q2, and R, the result
  t3[i]  one task per block: Q_i = Q1_i @ Q2_i, after t1[i] and t2

As in the original, an `async def` task drives it: it loops over the
iterations (a matrix `np.random.seed(i); np.random.rand(rows, cols)` each),
awaits the coroutine `tsqr_blocked(A)`, which spawns the tasks into task
spaces `T1` and `T3` and awaits `T1`, `t2` and `T3`.

What changed and why:
- Parla's `@spawn(taskid=T1[i], placement=...)` closures become
  `weft.spawn(t1, ..., task=T1[i], reads=[A_i], writes=[Q1_i, R1_i])`: the
  blocks are contiguous row ranges of the arrays, named in `reads=`/`writes=`
  (Parla's tasks share the arrays without declaring them; the original's
  `LDeviceSequenceBlocked` partitions become plain row slices). t2 keeps
  the original's `dependencies=T1` as `deps=T1` and reads R1 as a whole;
  t3 keeps `dependencies=[T1[i], t2]` and gets Q2 with `t2.result()` in its
  body (the Task passed as an argument).
- The GPU paths (`-p gpu/both/puregpu`, CuPy) and the timing statistics
  class (`perfStats`, per-task H2D/kernel/D2H times) are left out: this port
  is about the CPU path. Each t1 task does instead, with `--pycheck 1` (the
  default), a pure-Python check of its block (the column norms of A_i and
  R_i agree: QR preserves them), over Python lists, holding the GIL about
  60% of the task's time; so the tasks mix GIL-held Python with GIL-released
  LAPACK, and t1's work stands for the original's per-task bookkeeping in
  Python. `--pycheck 0` leaves it out.
- Parla frees each iteration's arrays when the program drops them; Weft
  keeps every range named in `reads=`/`writes=` registered (and its array
  alive) until it is unregistered or the runtime closes, so each
  factorization unregisters its 41 ranges (`unregister()` below; the
  runtime is one for all iterations). `--keep-registered 1` leaves them
  registered, and the memory grown is printed.
- `OMP_NUM_THREADS=--threads` (the original's `-t`) becomes
  `OPENBLAS_NUM_THREADS=1` set before NumPy loads, as docs/python-guide.md
  asks: one BLAS thread per task.
- The original prints "Correct result!" from `check_result` (Q @ R == A,
  Q orthonormal, R upper triangular, all `np.allclose`); the port checks
  that too, and checks EXACTLY (bit for bit) Weft's Q, R and block checks
  against a sequential run of the same functions, against a
  ThreadPoolExecutor running the same three phases and against Dask's
  threaded scheduler running the same functions as `dask.delayed` calls
  (when Dask is installed). `dask.array.linalg.qr` (qr_dask.py) is timed
  too and checked with `check_result` only (it is another implementation).

Timed: each system's time per factorization, the median over
`--iterations` matrices x `--reps` repetitions (the first repetition of
each is a warm-up and is not counted), since the machine may be shared.

Run:  python examples/ports/python/parla_tsqr.py [-r 5000] [-c 100] [-b 500] [-i 3]
                                                [--reps 3] [--workers 2] [--pycheck 1]
                                                [--keep-registered 0]
                                                [--only seq,weft,weft-main,threads,dask,dask-array]
Exits 1 on a wrong result.
"""
import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")       # one BLAS thread per task, before NumPy loads

import concurrent.futures  # noqa: E402

import numpy as np  # noqa: E402

import weft  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("-r", "--rows", type=int, default=5000, help="rows of A; must be >> cols")
parser.add_argument("-c", "--cols", type=int, default=100, help="columns of A")
parser.add_argument("-b", "--block_size", type=int, default=500, help="rows per block; >= cols")
parser.add_argument("-i", "--iterations", type=int, default=3, help="matrices factored per repetition")
parser.add_argument("--reps", type=int, default=3, help="timed repetitions (plus one warm-up)")
parser.add_argument("--workers", type=int, default=2)
parser.add_argument("--pycheck", type=int, default=1, help="1: each t1 task checks its block in pure Python")
parser.add_argument("--keep-registered", type=int, default=0,
                    help="1: leave each iteration's blocks registered (they stay alive until the runtime closes)")
parser.add_argument("--only", default="seq,weft,weft-main,threads,dask,dask-array",
                    help="comma-separated systems to time (the sequential run is always the reference)")
args = parser.parse_args()

NROWS, NCOLS, BLOCK = args.rows, args.cols, args.block_size
assert NCOLS <= BLOCK, "Block size must be greater than or equal to the number of columns"
NBLOCKS = (NROWS + BLOCK - 1) // BLOCK
assert NROWS - (NBLOCKS - 1) * BLOCK >= NCOLS, "the last block needs at least as many rows as columns"


def rows(i):
    return slice(i * BLOCK, min((i + 1) * BLOCK, NROWS))


def rrows(i):
    return slice(i * NCOLS, (i + 1) * NCOLS)


# ---- the kernels, shared by every run ---------------------------------------

def qr_block(block):
    """The original's CPU kernel."""
    return np.linalg.qr(block)


def matmul_block(block_1, block_2):
    return block_1 @ block_2


def norm_check(a_block, r_block):
    """Pure Python: the largest relative difference between a column's norm
    in A_i and in R_i (QR keeps them; about 1e-15)."""
    a, r = a_block.tolist(), r_block.tolist()
    worst = 0.0
    for j in range(len(a[0])):
        sa = 0.0
        for row in a:
            sa += row[j] * row[j]
        sr = 0.0
        for row in r:
            sr += row[j] * row[j]
        worst = max(worst, abs(sa - sr) / sa)
    return worst


def t1(a_block, q1_block, r1_block):
    q, r = qr_block(a_block)
    q1_block[...] = q
    r1_block[...] = r
    return norm_check(a_block, r) if args.pycheck else 0.0


def t2(r1):
    return qr_block(r1)                   # Q2, R


def t3(q1_block, q2_block, q_block):
    q_block[...] = matmul_block(q1_block, q2_block)


def empty():
    return np.empty((NROWS, NCOLS)), np.empty((NBLOCKS * NCOLS, NCOLS)), np.empty((NROWS, NCOLS))


# ---- sequential -------------------------------------------------------------

def sequential(A):
    Q1, R1, Q = empty()
    checks = [t1(A[rows(i)], Q1[rows(i)], R1[rrows(i)]) for i in range(NBLOCKS)]
    Q2, R = t2(R1)
    for i in range(NBLOCKS):
        t3(Q1[rows(i)], Q2[rrows(i)], Q[rows(i)])
    return Q, R, checks


# ---- Weft: the original's async driver --------------------------------------

def t3_task(q1_block, t2_task, i, q_block):
    Q2, _ = t2_task.result()              # finished: t3 depends on t2
    t3(q1_block, Q2[rrows(i)], q_block)


def unregister(rt, A, Q1, R1, Q):
    """Every range named in reads=/writes= stays registered, and its array
    alive, until it is unregistered or the runtime closes: one call per
    range (unregistering a whole array leaves its slices registered)."""
    if args.keep_registered:
        return
    for i in range(NBLOCKS):
        for x in (A[rows(i)], Q1[rows(i)], R1[rrows(i)], Q[rows(i)]):
            rt.unregister(x)
    rt.unregister(R1)


async def tsqr_blocked(A):
    Q1, R1, Q = empty()
    T1 = weft.TaskSpace("T1")
    for i in range(NBLOCKS):
        a, q1, r1 = A[rows(i)], Q1[rows(i)], R1[rrows(i)]
        weft.spawn(t1, a, q1, r1, task=T1[i], reads=[a], writes=[q1, r1])
    await T1
    t2_task = weft.spawn(t2, R1, deps=T1, reads=[R1], name="t2")
    Q2, R = await t2_task
    T3 = weft.TaskSpace("T3")
    for i in range(NBLOCKS):
        q1, q = Q1[rows(i)], Q[rows(i)]
        weft.spawn(t3_task, q1, t2_task, i, q, task=T3[i], deps=[T1[i], t2_task], reads=[q1], writes=[q])
    await T3
    checks = await T1[0:NBLOCKS]          # the t1 results, as weft.gather
    unregister(weft.current_runtime(), A, Q1, R1, Q)
    return Q, R, checks


async def test_tsqr_blocked(matrices):
    out = []
    for A in matrices:
        t0 = time.perf_counter()
        Q, R, checks = await tsqr_blocked(A)
        out.append(((Q, R, checks), time.perf_counter() - t0))
    return out


def with_weft(matrices, rt):
    return rt.spawn(test_tsqr_blocked, matrices, name="main").result()


# ---- Weft from the program's thread, with .result() and T.wait() -----------

def with_weft_main(matrices, rt):
    out = []
    for A in matrices:
        t0 = time.perf_counter()
        Q1, R1, Q = empty()
        T1 = weft.TaskSpace("T1")
        for i in range(NBLOCKS):
            a, q1, r1 = A[rows(i)], Q1[rows(i)], R1[rrows(i)]
            rt.spawn(t1, a, q1, r1, task=T1[i], reads=[a], writes=[q1, r1])
        t2_task = rt.spawn(t2, R1, deps=T1, reads=[R1], name="t2")
        T3 = weft.TaskSpace("T3")
        for i in range(NBLOCKS):
            q1, q = Q1[rows(i)], Q[rows(i)]
            rt.spawn(t3_task, q1, t2_task, i, q, task=T3[i], deps=[T1[i], t2_task], reads=[q1],
                     writes=[q])
        T3[0:NBLOCKS].wait()
        R = t2_task.result()[1]
        checks = [T1[i].result() for i in range(NBLOCKS)]
        unregister(rt, A, Q1, R1, Q)
        out.append(((Q, R, checks), time.perf_counter() - t0))
    return out


# ---- baselines: ThreadPoolExecutor, Dask --------------------------------------

def with_threads(matrices, ex):
    out = []
    for A in matrices:
        t0 = time.perf_counter()
        Q1, R1, Q = empty()
        f1 = [ex.submit(t1, A[rows(i)], Q1[rows(i)], R1[rrows(i)]) for i in range(NBLOCKS)]
        checks = [f.result() for f in f1]
        Q2, R = ex.submit(t2, R1).result()
        for f in [ex.submit(t3, Q1[rows(i)], Q2[rrows(i)], Q[rows(i)]) for i in range(NBLOCKS)]:
            f.result()
        out.append(((Q, R, checks), time.perf_counter() - t0))
    return out


def dask_t1(a_block):                     # the same kernels, returning values as Dask wants
    q1, r1 = np.empty(a_block.shape), np.empty((NCOLS, NCOLS))
    check = t1(a_block, q1, r1)
    return q1, r1, check


def dask_t3(q1_block, q2r, i):
    q = np.empty(q1_block.shape)
    t3(q1_block, q2r[0][rrows(i)], q)
    return q


def with_dask(matrices):
    import dask
    out = []
    for A in matrices:
        t0 = time.perf_counter()
        b = [dask.delayed(dask_t1, nout=3)(A[rows(i)]) for i in range(NBLOCKS)]
        q2r = dask.delayed(t2)(dask.delayed(np.vstack)([x[1] for x in b]))
        q = dask.delayed(np.vstack)([dask.delayed(dask_t3)(b[i][0], q2r, i) for i in range(NBLOCKS)])
        Q, (_, R), checks = dask.compute(q, q2r, [x[2] for x in b], scheduler="threads",
                                         num_workers=args.workers)
        out.append(((Q, R, list(checks)), time.perf_counter() - t0))
    return out


def with_dask_array(matrices):
    """The original's qr_dask.py: dask.array.linalg.qr over chunks of BLOCK rows."""
    import dask
    import dask.array as da
    out = []
    for A in matrices:
        t0 = time.perf_counter()
        Q, R = da.linalg.qr(da.from_array(A, chunks=(BLOCK, NCOLS)))
        Q, R = dask.compute(Q, R, scheduler="threads", num_workers=args.workers)
        out.append(((Q, R, None), time.perf_counter() - t0))
    return out


# ---- checks -----------------------------------------------------------------

def check_result(A, Q, R):
    """The original's check."""
    is_correct_prod = np.allclose(np.matmul(Q, R), A)
    is_ortho_Q = np.allclose(np.matmul(Q.transpose(), Q), np.identity(NCOLS))
    is_upper_R = np.allclose(R, np.triu(R))
    return is_correct_prod and is_ortho_Q and is_upper_R


def same(a, b):
    return (np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
            and (a[2] is None or b[2] is None or a[2] == b[2]))


def timed(label, run, refs, matrices, exact=True):
    """Runs `run` 1 + --reps times over the matrices; checks every result;
    prints the median time per factorization over the timed repetitions."""
    times, ok = [], True
    for rep in range(1 + args.reps):
        res = run(matrices)
        for k, ((Q, R, checks), dt) in enumerate(res):
            good = same((Q, R, checks), refs[k]) if exact else check_result(matrices[k], Q, R)
            if not good:
                ok = False
                print(f"  {label}: iteration {k} (repetition {rep}) DIFFERS")
            if rep:
                times.append(dt)
    med = statistics.median(times)
    what = ("equal to the sequential run" if exact else "correct (check_result)") if ok else "DIFFERS"
    print(f"{label:<26} {med * 1e3:8.1f} ms  (min {min(times) * 1e3:.1f}, max {max(times) * 1e3:.1f})   {what}")
    return ok, med


def rss_mib():
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 2**20
    except OSError:
        return 0


def main():
    print(f"A: {NROWS} x {NCOLS} in {NBLOCKS} blocks of {BLOCK} rows; {args.iterations} matrices x "
          f"{args.reps} repetitions; {args.workers} workers; pycheck {args.pycheck}; "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}")
    matrices = []
    for i in range(args.iterations):
        np.random.seed(i)
        matrices.append(np.random.rand(NROWS, NCOLS))

    refs = [sequential(A) for A in matrices]
    ok = all(check_result(A, Q, R) for A, (Q, R, _) in zip(matrices, refs))
    ok &= all(max(c) < 1e-10 for _, _, c in refs)
    print(f"sequential check_result: {'Correct result!' if ok else 'ERROR: Incorrect final result!'}")

    def seq(ms):
        out = []
        for A in ms:
            t0 = time.perf_counter()
            r = sequential(A)
            out.append((r, time.perf_counter() - t0))
        return out

    only = set(args.only.split(","))
    if "seq" in only:
        ok &= timed("sequential", seq, refs, matrices)[0]
    if only & {"weft", "weft-main"}:
        rss0 = rss_mib()
        with weft.Runtime(workers=args.workers) as rt:
            if "weft" in only:
                ok &= timed("weft (async driver task)", lambda ms: with_weft(ms, rt), refs, matrices)[0]
            if "weft-main" in only:
                ok &= timed("weft (main thread)", lambda ms: with_weft_main(ms, rt), refs, matrices)[0]
            stats = rt.stats()
            grown = rss_mib() - rss0
        print(f"  weft stats: tasks_run {stats['tasks_run']}, steals {stats['steals']}, "
              f"gil_kept {stats['gil_kept']}, autopins {stats['autopins']}; memory grown {grown} MiB "
              f"(--keep-registered {args.keep_registered})")
    if "threads" in only:
        with concurrent.futures.ThreadPoolExecutor(args.workers) as ex:
            ok &= timed("ThreadPoolExecutor", lambda ms: with_threads(ms, ex), refs, matrices)[0]
    if only & {"dask", "dask-array"}:
        try:
            import dask  # noqa: F401
        except ImportError:
            print("dask                       (not installed)")
        else:
            if "dask" in only:
                ok &= timed("dask.delayed threads", with_dask, refs, matrices)[0]
            if "dask-array" in only:
                ok &= timed("dask.array.linalg.qr", with_dask_array, refs, matrices, exact=False)[0]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
