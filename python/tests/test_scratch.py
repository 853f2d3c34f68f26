"""Scratch buffers from Python (C's WEFT_SCRATCH, StarPU's STARPU_SCRATCH):
spawn(..., scratch=[4096, a]) gives the task a buffer of each size (an int,
or a buffer's or weft.Data's size) of its own where it runs, contents
unspecified, no dependencies.  The body reaches them after its other
accesses (ctx.view(i), ctx.scratch(k), ctx.addresses, a native body's
addresses): writable, C-contiguous, shaped like the item that gave the size.
Checked on the host and on virtual GPUs (device_data=True), two at once,
no ordering with a writer of the same array (by events), the checking mode's
poison, a native body, the other spawn forms, and misuse."""
import struct
import threading

import pytest

import weft

np = pytest.importorskip("numpy")
pytestmark = pytest.mark.timeout(60)

WAIT = 20   # seconds: a deadlock guard for events, never reached when all is well


def test_sizes_on_the_host(rt):
    a = np.arange(6.0)
    out = np.zeros(1)

    def body(x):
        ctx = weft.context()
        v0, v1 = ctx.scratch(0), ctx.scratch(1)
        assert ctx.view(2).ptr == v0.ptr and ctx.view(3).ptr == v1.ptr   # after reads=, writes=
        assert (v0.nbytes, v0.shape, v0.format, v0.readonly, v0.device) == (4096, (4096,), "B", False, "cpu")
        assert v1.nbytes == 100 and v0.ptr != v1.ptr
        assert ctx.addresses[2:] == (v0.ptr, v1.ptr)
        s = np.frombuffer(v0, dtype=np.float64)   # writable: the task's own memory
        s[:] = x.sum()
        memoryview(v1)[:3] = b"abc"
        out[0] = s[-1]
        return bytes(memoryview(v1)[:3])

    assert rt.spawn(body, a, reads=[a], writes=[out], scratch=[4096, 100]).result() == b"abc"
    assert rt.spawn(lambda: out[0], reads=[out]).result() == 15.0
    assert a.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_a_buffer_or_data_gives_size_and_layout(rt):
    a = np.zeros((3, 4), dtype=np.float32)
    b = np.zeros(10, dtype=np.int16)[::2]   # strided: the scratch buffer is packed
    d = rt.data(np.zeros(7, dtype=np.int64))

    def body():
        ctx = weft.context()
        x, y, z, w = (np.asarray(ctx.scratch(k)) for k in range(4))
        assert (x.shape, x.dtype, x.flags.c_contiguous, x.flags.writeable) == ((3, 4), np.float32, True, True)
        assert (y.shape, y.dtype, y.flags.c_contiguous) == ((5,), np.int16, True)
        assert (z.shape, z.dtype) == ((7,), np.int64)
        assert (w.shape, w.dtype) == ((12,), np.uint8)
        x[:] = 1
        z[:] = 2
        return float(x.sum()), int(z.sum())

    assert rt.spawn(body, scratch=[a, b, d, 12]).result() == (12.0, 14)
    assert a.sum() == 0 and d.obj.sum() == 0   # the items only gave sizes


def test_a_tile_gives_its_span(rt):
    g = np.zeros((8, 6))
    tiles = rt.partition(g, (2, 2), halo=1)
    t = tiles[0][0]

    def body():
        v = weft.context().scratch(0)
        return v.shape, v.nbytes

    shape, n = rt.spawn(body, scratch=[t]).result()
    assert n == shape[0] * shape[1] * 8 and shape[0] >= 4 and shape[1] >= 3


def test_scratch_runs_while_a_writer_holds_the_array(rt):
    """Ordered with nothing: a task with scratch=[a] starts while a task
    writing a waits for it to have started, and a writer spawned after a
    scratch task runs while that one waits for it."""
    a = np.zeros(64)
    for scratch_first in (False, True):
        in_w, in_s = threading.Event(), threading.Event()

        def writer():
            in_w.set()
            assert in_s.wait(WAIT), "the scratch task did not start beside the writer"
            a[:] = 1

        def scratcher():
            in_s.set()
            assert in_w.wait(WAIT), "the writer did not start beside the scratch task"
            np.asarray(weft.context().scratch(0))[:] = 7

        if scratch_first:
            ts = [rt.spawn(scratcher, scratch=[a]), rt.spawn(writer, readwrites=[a])]
        else:
            ts = [rt.spawn(writer, readwrites=[a]), rt.spawn(scratcher, scratch=[a])]
        for t in ts:
            t.result()
    assert rt.spawn(lambda: a.tolist(), reads=[a]).result() == [1.0] * 64


def test_on_a_virtual_gpu_two_at_once():
    with weft.Runtime(workers=2, devices="cpu,vgpu:1", vgpu_memory=1 << 20) as rt:
        inside = threading.Barrier(2, timeout=WAIT)

        def body():
            v = weft.context().scratch(0)
            assert v.device == "vgpu:0" and v.nbytes == 8192
            arr = np.asarray(v)   # (a virtual GPU's memory: the body's once its stream ran)
            arr[:] = 3
            inside.wait()   # both at once
            return v.ptr, int(arr.sum())

        ts = [rt.spawn(body, scratch=[8192], placement=weft.gpu(0), share=0.5, device_data=True) for _ in range(2)]
        (p0, s0), (p1, s1) = (t.result() for t in ts)
        assert p0 != p1 and s0 == s1 == 3 * 8192
        used = rt.devices[1]["memory_used"]
        assert 2 * 8192 <= used <= rt.devices[1]["memory"]
        # without device_data the buffer is the host's, wherever the task runs
        assert rt.spawn(lambda: weft.context().scratch(0).device, scratch=[64], placement=weft.gpu).result() == "cpu"


def test_many_on_a_small_virtual_gpu():
    """Buffers kept on the GPU between tasks give way to others' (eviction):
    many sizes on 64 KiB never run out."""
    with weft.Runtime(workers=2, devices="cpu,vgpu:1", vgpu_memory=64 << 10) as rt:
        def body(n):
            v = weft.context().scratch(0)
            np.asarray(v)[:] = 1
            return v.nbytes == n

        sizes = [(4 + k % 9) << 10 for k in range(60)]
        ts = [rt.spawn(body, n, scratch=[n], placement=weft.gpu, share=0.25, device_data=True) for n in sizes]
        assert all(t.result() for t in ts)
        assert rt.devices[1]["memory_used"] <= 64 << 10


def test_queued_work_names_it_by_index(monkeypatch):
    """ctx.queue(..., writes=[i]) with a scratch buffer's index, in checking
    mode: no violation (the poison fill is its writer, on the stream), and
    the kernel finds the poison (0xDB) before it writes."""
    monkeypatch.setenv("WEFT_VGPU_CHECK", "1")
    rt = weft.Runtime(workers=2, devices="cpu,vgpu:1")
    monkeypatch.delenv("WEFT_VGPU_CHECK")
    out = np.zeros(1)
    with rt:
        def body():
            ctx = weft.context()
            v = ctx.scratch(0)
            i = len(ctx.views) - 1

            def kernel():
                x = np.asarray(v)
                out[0] = float(np.all(x == 0xDB))
                x[:] = 5
            ctx.queue(kernel, reads=[i], writes=[i])

        for _ in range(3):   # the same buffer again: poisoned again
            out[0] = 0
            rt.spawn(body, scratch=[256], placement=weft.gpu, device_data=True).result()
            assert out[0] == 1.0

        def host():
            return bool(np.all(np.asarray(weft.context().scratch(0)) == 0xDB))

        assert all(rt.spawn(host, scratch=[300]).result() for _ in range(3))


NATIVE = r"""
#include <stddef.h>
#include <string.h>
/* arg: long n; accesses: out (one double, written), then a scratch buffer of n doubles */
int use_scratch(void *p)
{
    long n = *(long *)p;
    void **a = (void **)((char *)p + 8);
    double *out = a[0], *s = a[1], sum = 0;
    for (long i = 0; i < n; i++) s[i] = (double)i;
    for (long i = 0; i < n; i++) sum += s[i];
    *out = sum;
    return 0;
}
"""


def test_a_native_body_gets_its_address(c_library):
    lib = c_library("scratchnative", NATIVE)
    k = weft.native(lib.use_scratch)
    with weft.Runtime(workers=2, devices="cpu,vgpu:1") as rt:
        for where in (None, weft.gpu):
            out = np.zeros(1)
            rt.spawn(k, struct.pack("=q", 100), writes=[out], scratch=[800], placement=where,
                     device_data=where is not None).result()
            assert rt.spawn(lambda: out[0], reads=[out]).result() == 4950.0


def test_every_spawn_form_takes_it(rt):
    T = weft.TaskSpace("T")
    got = []

    @rt.spawn(scratch=[16])
    def t1():
        got.append(weft.context().scratch(0).nbytes)

    t1.wait()
    rt.spawn(lambda: got.append(weft.context().scratch(0).nbytes), scratch=32, task=T[0]).wait()
    weft.spawn(lambda: got.append(weft.context().scratch(0).nbytes), scratch=(48,), runtime=rt).wait()
    assert got == [16, 32, 48]


def test_misuse_is_refused_clearly(rt):
    a = np.zeros(4)
    with pytest.raises(ValueError, match=r"scratch\[0\]: 0 bytes"):
        rt.spawn(lambda: None, scratch=[0])
    with pytest.raises(ValueError, match=r"scratch\[1\]: -5 bytes"):
        rt.spawn(lambda: None, scratch=[8, -5])
    with pytest.raises(TypeError, match=r"scratch\[0\]: expected a size in bytes"):
        rt.spawn(lambda: None, scratch=["x"])
    with pytest.raises(TypeError, match="got a bool"):
        rt.spawn(lambda: None, scratch=[True])
    with pytest.raises(TypeError, match="scratch= expects"):
        rt.spawn(lambda: None, scratch=3.5)

    def body():
        ctx = weft.context()
        with pytest.raises(IndexError, match="has 1 scratch buffer"):
            ctx.scratch(1)
        with pytest.raises(ValueError, match="does not access"):
            ctx.view(a)   # an item of scratch= only gave its size
        return True

    assert rt.spawn(body, scratch=[a]).result()
    with weft.Runtime(workers=1) as other:
        d = other.data(np.zeros(2))
        with pytest.raises(ValueError, match="another runtime"):
            rt.spawn(lambda: None, scratch=[d])
    with pytest.raises(TypeError, match="unexpected keyword argument 'scratches'"):
        rt.spawn(lambda: None, scratches=[1])

