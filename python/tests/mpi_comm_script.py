"""Run by test_comm.py under `mpirun -np 2`: allreduce, broadcast and a ring
exchange across the ranks, MPI started by weft itself (no mpi4py); then the
same over the ranks' GPUs (two virtual GPUs each: Communicator.mpi(gpus=)),
members numbered rank by rank."""
import numpy as np

import weft

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
    c.close()
print("mpi ok", flush=True)
