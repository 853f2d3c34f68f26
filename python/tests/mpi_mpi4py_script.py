"""Run by test_comm.py under `mpirun -np 2`: weft communicators made from
mpi4py communicators (MPI started by mpi4py, with MPI_THREAD_MULTIPLE):
COMM_WORLD, a Dup() of it and a Split() that numbers the ranks backwards,
each with an all-reduce and a ring exchange checked against what the
ranks' own mpi4py calls say; then one over the ranks' GPUs from a Dup()."""
from mpi4py import MPI

import numpy as np

import weft

assert MPI.Query_thread() == MPI.THREAD_MULTIPLE, MPI.Query_thread()
world = MPI.COMM_WORLD
wr, wn = world.Get_rank(), world.Get_size()
assert wn == 2, wn

with weft.Runtime(workers=2) as rt:
    dup = world.Dup()
    backwards = world.Split(color=0, key=wn - 1 - wr)
    for label, mc in (("world", world), ("dup", dup), ("split", backwards)):
        c = weft.Communicator.mpi(mc, timeout=30)
        r, n = c.rank, c.size
        assert (r, n) == (mc.Get_rank(), mc.Get_size()), (label, r, n)
        if label == "split":
            assert r == wn - 1 - wr, (label, r, wr)
        a = np.arange(7, dtype=np.int64) * (r + 1) + 1000 * wr
        want = np.zeros(7, dtype=np.int64)
        mc.Allreduce(a, want, op=MPI.SUM)        # the program's own MPI on the same ranks
        c.allreduce(a).wait()
        assert (a == want).all(), (label, r, a, want)
        # a ring: each rank's row to the next rank of mc (by mc's numbering)
        src = np.full(4, float(10 * wr + 1))
        dst = np.zeros(4)
        xs = [weft.Transfer(k, (k + 1) % n, src if k == r else None, dst if (k + 1) % n == r else None, 32)
              for k in range(n)]
        c.exchange(xs).wait()
        prev_world = mc.sendrecv(wr, dest=(r + 1) % n, source=(r - 1) % n)  # who precedes me in mc
        assert (dst == float(10 * prev_world + 1)).all(), (label, r, dst, prev_world)
        c.close()
    dup.Free()
    backwards.Free()

with weft.Runtime(workers=2, devices="cpu,vgpu:2") as rt:
    mc = world.Dup()
    c = weft.Communicator.mpi(mc, gpus=[0, 1], timeout=30)
    n, first = c.size, c.rank
    assert n == 4 and first == 2 * wr, (n, first)
    mine = [first, first + 1]
    bufs = [np.arange(6, dtype=np.float64) + 10 * k if k in mine else None for k in range(n)]
    c.allreduce(bufs).wait()
    want = (np.arange(6, dtype=np.float64) + 0) + (np.arange(6) + 10.0)
    want = want + ((np.arange(6) + 20.0) + (np.arange(6) + 30.0))
    got = rt.spawn(lambda: [bufs[k].copy() for k in mine], reads=[bufs[k] for k in mine]).result()
    assert all(g.tobytes() == want.tobytes() for g in got), (first, got, want)
    c.close()
    mc.Free()
print("mpi4py ok", flush=True)
