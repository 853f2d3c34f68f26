"""rt.acquire(buf, mode) / rt.fetch(buf): the calling thread uses a buffer's
host memory between tasks (C's weft_data_acquire_many / weft_data_release),
on the CPU and on virtual GPUs, where the newest value of a buffer written
by a GPU task lives in the GPU's replica until something brings it home."""
import threading
import time

import pytest

import weft


def vgpus(n=2):
    return weft.Runtime(workers=2, devices=f"cpu,vgpu:{n}", vgpu_memory=1 << 20)


def cpu():
    return weft.Runtime(workers=2, devices="cpu")


def gpu_fill(value):
    """A body for a GPU task: a kernel on its stream fills its replica."""
    def body():
        ctx = weft.context()
        v = ctx.view(0)

        def k():
            m = memoryview(v)
            m[:] = bytes([value]) * len(m)

        ctx.queue(k, writes=[v])
    return body


def gpu_read(out):
    def body():
        ctx = weft.context()
        v = ctx.view(0)
        ctx.queue(lambda: out.append(bytes(memoryview(v))), reads=[v])
    return body


def test_fetch_brings_a_gpu_write_home():
    buf = bytearray(16)
    with vgpus() as rt:
        rt.spawn(gpu_fill(5), writes=[buf], placement=weft.gpu, device_data=True)
        rt.wait_all()
        assert buf == bytearray(16)  # the newest value is on the GPU
        assert rt.fetch(buf) is buf
        assert buf == bytes([5]) * 16
        with rt.acquire(buf) as b:  # "r" by default
            assert b is buf and b == bytes([5]) * 16


@pytest.mark.parametrize("make", [cpu, vgpus], ids=["cpu", "vgpu"])
def test_acquire_w_reaches_a_reader_and_spawns_wait(make):
    buf = bytearray(8)
    seen = []
    with make() as rt:
        gpu = rt.devices[-1]["kind"] == "vgpu"
        if gpu:
            rt.spawn(gpu_fill(1), writes=[buf], placement=weft.gpu, device_data=True)
        else:
            rt.spawn(lambda b: b.__setitem__(slice(None), b"\x01" * 8), buf, writes=[buf])
        with rt.acquire(buf, "w") as b:
            b[:] = b"\x07" * 8
            if gpu:
                t = rt.spawn(gpu_read(seen), reads=[buf], placement=weft.gpu, device_data=True)
            else:
                t = rt.spawn(lambda x: seen.append(bytes(x)), buf, reads=[buf])
            time.sleep(0.05)
            assert t.status == "waiting" and not seen  # waits for the release
        t.wait(timeout=10)
        assert seen == [b"\x07" * 8]
        # "rw": the newest value in, the caller's writes out
        with rt.acquire(buf, "rw") as b:
            assert b == b"\x07" * 8
            b[0] = 9
        assert rt.spawn(lambda x: x[0], buf, reads=[buf]).result(timeout=10) == 9


@pytest.mark.parametrize("make", [cpu, vgpus], ids=["cpu", "vgpu"])
def test_release_on_exception_and_explicit_release(make):
    buf = bytearray(4)
    with make() as rt:
        rt.data(buf)
        with pytest.raises(KeyError):
            with rt.acquire(buf, "rw"):
                raise KeyError("inside")
        a = rt.acquire(buf, "r")
        assert a.held
        with pytest.raises(RuntimeError, match="acquired"):
            rt.unregister(buf)  # would wait for the release forever
        a.release()
        assert not a.held
        with pytest.raises(ValueError, match="not held"):
            a.release()
        rt.unregister(buf)


def test_timeout_holds_nothing():
    buf = bytearray(4)
    go = threading.Event()
    with cpu() as rt:
        t = rt.spawn(lambda b: (go.wait(10), b.__setitem__(0, 3)), buf, writes=[buf])
        with pytest.raises(TimeoutError, match="nothing is held"):
            rt.acquire(buf, "r", timeout=0.02)
        with pytest.raises(TimeoutError):
            rt.acquire(buf, "w", timeout=0.01)  # not refused as acquired already
        go.set()
        t.wait(timeout=10)
        assert rt.fetch(buf, timeout=10)[0] == 3  # the abandoned "w" changed nothing


@pytest.mark.parametrize("make", [cpu, vgpus], ids=["cpu", "vgpu"])
def test_failed_writer_then_acquire(make):
    buf = bytearray(4)

    def bad(b):
        raise ValueError("bad writer")

    with make() as rt:
        t = rt.spawn(bad, buf, writes=[buf], name="bad-writer")
        with pytest.raises(weft.CancelledError, match="bad-writer"):
            rt.acquire(buf, "r")
        with pytest.raises(weft.CancelledError):
            rt.fetch(buf)
        with rt.acquire(buf, "w") as b:  # a write makes it valid again
            b[:] = b"\x02" * 4
        assert rt.fetch(buf) == b"\x02" * 4
        assert isinstance(t.exception(), ValueError)
        rt.wait_all()


def test_misuse():
    buf = bytearray(4)
    with cpu() as rt:
        with pytest.raises(ValueError, match='"r", "w" or "rw"'):
            rt.acquire(buf, "x")
        with pytest.raises(TypeError):
            rt.acquire(42)
        with pytest.raises(ValueError, match="read-only"):
            rt.acquire(b"abcd", "w")
        rt.data(buf)
        with rt.acquire(buf):
            with pytest.raises(ValueError, match="acquired already"):
                rt.acquire(buf)
        # from a task: refused
        t = rt.spawn(lambda: rt.acquire(buf))
        with pytest.raises(RuntimeError, match="from a task"):
            t.result(timeout=10)
        # the runtime still works
        assert rt.spawn(lambda b: len(b), buf, reads=[buf]).result(timeout=10) == 4
    with pytest.raises(RuntimeError, match="closed"):
        rt.acquire(buf)


def test_never_registered_is_nothing_to_do():
    buf = bytearray(b"abc")
    with cpu() as rt:
        assert rt.fetch(buf) is buf
        with rt.acquire(buf, "rw") as b:
            b[0] = ord("x")
        assert buf == b"xbc"
        with weft.Runtime(workers=1, devices="cpu"):
            assert weft.fetch(buf) is buf


def test_overlapping_ranges_are_acquired_together():
    np = pytest.importorskip("numpy")
    a = np.zeros(8, dtype=np.uint8)
    with vgpus(1) as rt:
        rt.spawn(gpu_fill(4), writes=[a], placement=weft.gpu, device_data=True)
        rt.wait_all()
        assert rt.fetch(a[:4]).tolist() == [4] * 4  # a view of part of it
        with rt.acquire(a[2:6], "rw") as v:
            v[:] = 6
        assert rt.fetch(a).tolist() == [4, 4, 6, 6, 6, 6, 4, 4]


def test_held_at_close_is_released():
    buf = bytearray(4)
    rt = cpu()
    rt.data(buf)
    a = rt.acquire(buf, "w")
    buf[:] = b"\x05" * 4
    seen = []
    rt.spawn(lambda b: seen.append(bytes(b)), buf, reads=[buf])
    rt.close()  # releases it: the reader runs
    assert seen == [b"\x05" * 4]
    a.release()  # nothing left to release: no error
