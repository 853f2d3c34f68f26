"""ctx.queue_native(): a C function queued on a GPU stream and called there
without Python, with a copy of its argument; its order on the stream, its
failures, what it names for the checking mode, misuse."""
import ctypes
import threading

import pytest

import weft

C_SOURCE = r"""
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct fill { unsigned char *dst; int64_t n; int value; };
int fill(void *arg) { const struct fill *f = arg; memset(f->dst, f->value, (size_t)f->n); return 0; }

struct add { double *x; int64_t n; double v; };
int add(void *arg)
{
    const struct add *a = arg;
    for (int64_t i = 0; i < a->n; i++) a->x[i] += a->v;
    return 0;
}

struct first { const unsigned char *src; unsigned char *out; };
int first_byte(void *arg) { const struct first *f = arg; *f->out = f->src[0]; return 0; }

int fail_with(void *arg) { return *(const int *)arg; }
int is_null(void *arg) { return arg != NULL; }
int is_aligned(void *arg) { return (uintptr_t)arg % _Alignof(max_align_t) != 0; }
"""


class Fill(ctypes.Structure):
    _fields_ = [("dst", ctypes.c_void_p), ("n", ctypes.c_int64), ("value", ctypes.c_int)]


class Add(ctypes.Structure):
    _fields_ = [("x", ctypes.c_void_p), ("n", ctypes.c_int64), ("v", ctypes.c_double)]


class First(ctypes.Structure):
    _fields_ = [("src", ctypes.c_void_p), ("out", ctypes.c_void_p)]


@pytest.fixture(scope="module")
def lib(c_library):
    return c_library("native", C_SOURCE)


def rt4(**kw):
    return weft.Runtime(workers=2, devices="cpu,vgpu:4", vgpu_memory=1 << 20, **kw)


def addr(buf):
    return ctypes.addressof(ctypes.c_char.from_buffer(buf))


def test_runs_in_stream_order_after_python_work(lib):
    """A C call queued after a Python callable runs after it; the argument
    was copied when queued (changing it later changes nothing)."""
    buf = bytearray(16)
    with rt4() as rt:
        gate = threading.Event()

        def body():
            ctx = weft.context()
            ctx.queue(gate.wait, 10)
            arg = Fill(addr(buf), 16, 7)
            ctx.queue_native(lib.fill, arg, writes=[buf])
            arg.value = 9  # after the copy: not seen
            ctx.queue(lambda: buf.__setitem__(0, buf[0] + 1), reads=[buf], writes=[buf])

        t = rt.spawn(body, placement="gpu:0")
        gate.set()
        t.result()
    assert bytes(buf) == bytes([8]) + bytes([7]) * 15


def test_a_c_function_as_an_address_and_without_an_argument(lib):
    with rt4() as rt:
        address = ctypes.cast(lib.is_null, ctypes.c_void_p).value
        rt.spawn(lambda: weft.context().queue_native(address), placement="gpu", kind="is_null").result()
        rt.spawn(lambda: weft.context().queue_native(lib.is_aligned, b"x"), placement="gpu",
                 kind="is_aligned").result()


def test_the_kernels_of_four_gpus_on_device_replicas(lib):
    """Each GPU's task adds to its own array's device replica from C; a CPU
    task then sees every sum (the replicas copied back)."""
    np = pytest.importorskip("numpy")
    arrays = [np.zeros(1000) for _ in range(4)]
    with rt4() as rt:
        def body(i):
            ctx = weft.context()
            v = ctx.view(0)
            for _ in range(5):
                ctx.queue_native(lib.add, Add(v.ptr, 1000, float(i + 1)), reads=[v], writes=[v])

        for i, a in enumerate(arrays):
            rt.spawn(body, i, readwrites=[a], placement=weft.gpu(i), device_data=True)
        sums = [rt.spawn(lambda x: float(x.sum()), a, reads=[a]).result() for a in arrays]
    assert sums == [5000.0 * (i + 1) for i in range(4)]


def test_a_non_zero_return_fails_the_task_and_cancels_its_dependents(lib):
    def fail_with(code):
        weft.context().queue_native(lib.fail_with, ctypes.c_int(code))

    with rt4() as rt:
        a = rt.spawn(fail_with, 3, placement="gpu:0")
        b = rt.spawn(print, deps=[a], placement="gpu:1")
        with pytest.raises(RuntimeError, match="device work failed"):
            a.result()
        with pytest.raises(weft.CancelledError):
            b.result()
        rt.wait_all()
        # still usable
        rt.spawn(fail_with, 0, placement="gpu").result()


def test_a_python_callback_through_ctypes():
    """A CFUNCTYPE of a Python function takes the GIL itself: it works, and
    sees the copy of its argument."""
    seen = []
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
    cb = proto(lambda p: seen.append(ctypes.string_at(p, 5)) or 0)
    with rt4() as rt:
        rt.spawn(lambda: weft.context().queue_native(cb, b"hello"), placement="gpu").result()
    assert seen == [b"hello"]


def test_checking_mode_sees_its_ranges(lib, monkeypatch):
    """In checking mode a range only written is filled with 0xDB before the
    call (so the ranges reached the checker), and a read of memory written
    by unordered work fails the task."""
    monkeypatch.setenv("WEFT_VGPU_CHECK", "1")
    rt = weft.Runtime(workers=2, devices="cpu,vgpu:2")
    monkeypatch.delenv("WEFT_VGPU_CHECK")
    src, out = bytearray(b"\x01" * 64), bytearray(1)
    with rt:
        def only_written():
            weft.context().queue_native(lib.first_byte, First(addr(src), addr(out)), writes=[src, out])

        rt.spawn(only_written, placement="gpu:0").result()
        assert out[0] == 0xDB
        started, release = threading.Event(), threading.Event()

        def write():
            def slow_fill():
                started.set()
                release.wait(10)
                src[:] = b"\x05" * 64
            weft.context().queue(slow_fill, writes=[src])

        def read_unordered():
            started.wait(10)
            weft.context().queue_native(lib.first_byte, First(addr(src), addr(out)), reads=[src], writes=[out])
            release.set()

        rt.spawn(write, placement="gpu:0")
        bad = rt.spawn(read_unordered, placement="gpu:1")
        with pytest.raises(RuntimeError, match="device work failed"):
            bad.result()
        rt.wait_all()


def test_misuse_is_refused_clearly(lib):
    with rt4() as rt:
        def run(*args, **kw):
            return rt.spawn(lambda: weft.context().queue_native(*args, **kw), placement="gpu").result()

        with pytest.raises(TypeError, match="ctypes function or an address"):
            run("fill")
        with pytest.raises(ValueError, match="not a function's"):
            run(0)
        with pytest.raises(ValueError, match="not a function's"):
            run(-5)
        with pytest.raises(TypeError, match="arg is not None or a contiguous buffer"):
            run(lib.is_null, 3)
        with pytest.raises(TypeError, match=r"writes\[0\] is not an access index or a contiguous writable buffer"):
            run(lib.is_null, writes=b"x")
        with pytest.raises(ValueError, match="gpu=1 of a task on 1 GPU"):
            run(lib.is_null, gpu=1)
        with pytest.raises(RuntimeError, match="queue_native\\(\\): only from the body of a task placed on GPUs"):
            rt.spawn(lambda: weft.context().queue_native(lib.is_null)).result()
        rt.spawn(lambda: weft.context().queue_native(lib.is_null), placement="gpu").result()  # still usable


def test_accesses_named_by_index(lib, monkeypatch):
    """ctx.addresses gives where each access is (as the views' ptr); reads
    and writes may name the task's accesses by index: in checking mode an
    access only written (by index) is filled with 0xDB before the call."""
    np = pytest.importorskip("numpy")
    monkeypatch.setenv("WEFT_VGPU_CHECK", "1")
    rt = weft.Runtime(workers=2, devices="cpu,vgpu:2")
    monkeypatch.delenv("WEFT_VGPU_CHECK")
    src, out = np.ones(8), np.zeros(8)
    with rt:
        def body():
            ctx = weft.context()
            a = ctx.addresses
            assert a == tuple(v.ptr for v in ctx.views) and a[0] != src.ctypes.data
            ctx.queue_native(lib.first_byte, First(a[1], a[0]), reads=[1], writes=[0])
            ctx.queue_native(lib.add, Add(a[1], 8, 2.0), reads=[1], writes=[1])
            with pytest.raises(IndexError, match="no data access 2 \\(it has 2\\)"):
                ctx.queue_native(lib.is_null, reads=[2])

        rt.spawn(body, writes=[out], readwrites=[src], placement="gpu:0", device_data=True).result()
        got = rt.spawn(lambda: (bytes(out.view(np.uint8)[:2]), src.tolist()), reads=[out, src]).result()
    assert got[1] == [3.0] * 8
    # byte 0: src's first byte (1.0 is 00 .. f0 3f); byte 1: the checker's fill
    assert got[0] == b"\x00\xdb"
