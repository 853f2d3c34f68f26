"""Run by test_comm.py under `mpirun -np 2`: allreduce, broadcast and a ring
exchange across the ranks, MPI started by weft itself (no mpi4py)."""
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
print("mpi ok", flush=True)
