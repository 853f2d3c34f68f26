"""Run by test_comm.py under `mpirun -np 2`: allreduce, broadcast and a ring
exchange across the ranks, MPI started by weft itself (no mpi4py); then the
same over the ranks' GPUs (two virtual GPUs each: Communicator.mpi(gpus=)),
members numbered rank by rank, with reduce, allgather and reduce_scatter
against a sequential fold (float sums: each rank's, then the ranks'); and
those three again with rank 0 on two GPUs and rank 1 on one."""
import numpy as np

import weft

FOLDS = {weft.SUM: np.add, weft.MIN: np.minimum, weft.MAX: np.maximum}


def value(k, size, dtype, seed):
    """Member k's input: integers of both signs, or thirds (whose sums round)."""
    g = np.random.default_rng(seed * 1000 + k)
    v = g.integers(-10000, 10000, size)
    return (v / 3.0).astype(dtype) if np.dtype(dtype).kind == "f" else v.astype(dtype)


def fold(op, parts, base):
    """parts folded as the communicator folds: each rank's members in
    member order, then the ranks' results in rank order (for integers, min
    and max the same as one sequential fold)."""
    f = FOLDS[op]
    per_rank = []
    for r in range(len(base) - 1):
        acc = parts[base[r]].copy()
        for k in range(base[r] + 1, base[r + 1]):
            acc = f(acc, parts[k])
        per_rank.append(acc)
    acc = per_rank[0]
    for a in per_rank[1:]:
        acc = f(acc, a)
    return acc


def flat(op, parts):
    acc = parts[0].copy()
    for p in parts[1:]:
        acc = FOLDS[op](acc, p)
    return acc


def new_collectives(rt, c, mine, base):
    """reduce (root on every member), allgather and reduce_scatter on c,
    whose members on this rank are `mine`; base[r]: rank r's first."""
    n = c.size
    seed = 0
    for dtype in (np.int32, np.int64, np.float32, np.float64):
        for op in (weft.SUM, weft.MIN, weft.MAX):
            for count in (0, 1, 1001):
                seed += 1
                want_flat = None
                # reduce, the root on every member in turn
                for root in range(n):
                    ins = [value(k, count, dtype, seed) for k in range(n)]
                    want = fold(op, ins, base)
                    if np.dtype(dtype).kind != "f" or op != weft.SUM:
                        want_flat = flat(op, ins)
                        assert (want == want_flat).all()
                    send = [ins[k].copy() if k in mine else None for k in range(n)]
                    recv = [np.full(count, 7, dtype) if k in mine else None for k in range(n)]
                    if root not in mine:
                        recv = [None] * n   # recv may be None but at the root
                    c.reduce(recv, send, op=op, root=root).wait()
                    if root in mine:
                        got = rt.spawn(lambda: recv[root].copy(), reads=[recv[root]]).result()
                        assert got.tobytes() == want.tobytes(), (root, dtype, op, count, got, want)
                # allgather (no operator): member k's block at k * count
                ins = [value(k, count, dtype, seed + 500) for k in range(n)]
                send = [ins[k].copy() if k in mine else None for k in range(n)]
                recv = [np.zeros(n * count, dtype) if k in mine else None for k in range(n)]
                if op == weft.SUM:
                    c.allgather(recv, send).wait()
                    got = rt.spawn(lambda: [recv[k].copy() for k in mine], reads=[recv[k] for k in mine]).result()
                    want = np.concatenate(ins)
                    for g in got:
                        assert g.tobytes() == want.tobytes(), (dtype, count, g, want)
                # reduce_scatter: member k gets block k of the fold
                ins = [value(k, n * count, dtype, seed + 900) for k in range(n)]
                want = fold(op, ins, base)
                send = [ins[k].copy() if k in mine else None for k in range(n)]
                recv = [np.zeros(count, dtype) if k in mine else None for k in range(n)]
                c.reduce_scatter(recv, send, op=op).wait()
                got = rt.spawn(lambda: [recv[k].copy() for k in mine], reads=[recv[k] for k in mine]).result()
                for k, g in zip(mine, got):
                    blk = want[k * count:(k + 1) * count]
                    assert g.tobytes() == blk.tobytes(), (k, dtype, op, count, g, blk)
    # misuse: refused before anything is posted, naming the argument
    bad = [np.zeros(1) if k in mine else None for k in range(n)]
    for call, match in ((lambda: c.reduce(bad, bad, root=n), "root"),
                        (lambda: c.allgather([np.zeros(2) if k in mine else None for k in range(n)],
                                             [np.zeros(2) if k in mine else None for k in range(n)]),
                         "recv of member %d has 16 bytes, %d needed" % (mine[0], 16 * n)),
                        (lambda: c.reduce_scatter(bad, [np.zeros(2) if k in mine else None for k in range(n)]),
                         "send of member %d has 16 bytes, %d needed" % (mine[0], 8 * n))):
        try:
            call()
        except ValueError as e:
            assert match in str(e), (match, str(e))
        else:
            raise AssertionError("not refused: " + match)

with weft.Runtime(workers=2) as rt:
    c = weft.Communicator.mpi(timeout=30)
    r, n = c.rank, c.size
    assert n == 2, n
    a = np.arange(5, dtype=np.int64) + 100 * r
    c.allreduce(a).wait()
    want = sum(np.arange(5, dtype=np.int64) + 100 * k for k in range(n))
    assert (a == want).all(), (r, a, want)
    b = np.full(3, float(r))
    c.broadcast(b, root=1).wait()
    assert (b == 1.0).all(), (r, b)
    src, dst = np.full(4, float(r + 1)), np.zeros(4)
    xs = [weft.Transfer(k, (k + 1) % n, src if k == r else None, dst if (k + 1) % n == r else None, 32)
          for k in range(n)]
    c.exchange(xs).wait()
    assert (dst == float((r - 1) % n + 1)).all(), (r, dst)
    c.close()

with weft.Runtime(workers=2, devices="cpu,vgpu:2") as rt:
    c = weft.Communicator.mpi(gpus=[0, 1], timeout=30)
    n, first = c.size, c.rank
    assert n == 4 and first in (0, 2), (n, first)
    mine = [first, first + 1]
    bufs = [np.arange(6, dtype=np.float64) + 10 * k if k in mine else None for k in range(n)]
    c.allreduce(bufs).wait()
    want = sum(np.arange(6, dtype=np.float64) + 10 * k for k in range(n))
    got = rt.spawn(lambda: [bufs[k].copy() for k in mine], reads=[bufs[k] for k in mine]).result()
    assert all((g == want).all() for g in got), (first, got, want)
    src = [np.full(4, float(k + 1)) if k in mine else None for k in range(n)]
    dst = [np.zeros(4) if k in mine else None for k in range(n)]
    xs = [weft.Transfer(k, (k + 1) % n, src[k], dst[(k + 1) % n], 32) for k in range(n)]
    c.exchange(xs).wait()
    got = rt.spawn(lambda: [dst[k].copy() for k in mine], reads=[dst[k] for k in mine]).result()
    for k, g in zip(mine, got):
        assert (g == float((k - 1) % n + 1)).all(), (k, g)
    new_collectives(rt, c, mine, [0, 2, 4])
    c.close()
    # uneven: rank 0 on GPUs 0 and 1, rank 1 on GPU 1 alone
    c = weft.Communicator.mpi(gpus=[0, 1] if r == 0 else [1], timeout=30)
    assert c.size == 3 and c.rank == (0 if r == 0 else 2), (c.size, c.rank)
    new_collectives(rt, c, [0, 1] if r == 0 else [2], [0, 2, 3])
    c.close()
print("mpi ok", flush=True)
