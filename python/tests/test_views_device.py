"""Views of a task's data where the task runs (weft.View, ctx.view/views/
array, spawn(device_data=True)): zero-copy on the host (buffer protocol,
NumPy) and on virtual GPUs (__cuda_array_interface__ v3, DLPack), the
pointer being the replica's own (weft_ctx_data), coherence through the data
layer, read-only accesses, and views refused once their task ended."""
import array
import ctypes
import sys
import threading

import pytest

import weft

# ---- DLPack, read back with ctypes (the structures of dlpack.h v1.0) ------


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


_api = ctypes.pythonapi
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
USED = ctypes.c_char_p(b"used_dltensor")  # a capsule keeps its name's pointer: this one lives on


def read_capsule(cap):
    """(name, the managed tensor structure, its address): valid while cap
    lives (an unused capsule frees its tensor)."""
    name = _api.PyCapsule_GetName(cap)
    addr = _api.PyCapsule_GetPointer(cap, name)
    kind = DLManagedTensorVersioned if name == b"dltensor_versioned" else DLManagedTensor
    return name.decode(), kind.from_address(addr), addr


def dl_facts(cap):
    """(name, the tensor's facts, flags or None, version or None), read while cap lives."""
    name, m, _ = read_capsule(cap)
    if name == "dltensor_versioned":
        return name, tensor_facts(m.dl_tensor), m.flags, (m.version.major, m.version.minor)
    return name, tensor_facts(m.dl_tensor), None, None


def tensor_facts(t):
    n = t.ndim
    return {"data": t.data or 0, "device": (t.device.device_type, t.device.device_id), "ndim": n,
            "dtype": (t.dtype.code, t.dtype.bits, t.dtype.lanes), "shape": tuple(t.shape[k] for k in range(n)),
            "strides": tuple(t.strides[k] for k in range(n)), "byte_offset": t.byte_offset}


class Py_buffer(ctypes.Structure):
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p), ("len", ctypes.c_ssize_t),
                ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                ("format", ctypes.c_char_p), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("suboffsets", ctypes.c_void_p), ("internal", ctypes.c_void_p)]


PyBUF_WRITABLE = 0x0001
_api.PyObject_GetBuffer.argtypes = [ctypes.py_object, ctypes.POINTER(Py_buffer), ctypes.c_int]
_api.PyObject_GetBuffer.restype = ctypes.c_int
_api.PyBuffer_Release.argtypes = [ctypes.POINTER(Py_buffer)]


def get_buffer(obj, flags):
    b = Py_buffer()
    _api.PyObject_GetBuffer(obj, ctypes.byref(b), flags)  # raises what the exporter raised
    _api.PyBuffer_Release(ctypes.byref(b))


def address_of(buf):
    """The address of a writable buffer object's memory."""
    return ctypes.addressof((ctypes.c_char * len(memoryview(buf).cast("B"))).from_buffer(buf))


def vgpus(n=2, **kw):
    return weft.Runtime(workers=2, devices=f"cpu,vgpu:{n}", vgpu_memory=1 << 20, **kw)


# ---- on the host ----------------------------------------------------------


def test_host_view_is_the_buffer_itself():
    buf = bytearray(range(16))
    with weft.Runtime(workers=2) as rt:
        def body(b):
            ctx = weft.context()
            v = ctx.view(0)
            assert v.valid and v.on_host and v.device == "cpu" and v.stream is None and v.index == 0
            assert v.ptr == weft._weft._ctx_data(0) == address_of(b)  # what C says: the host pointer
            assert (v.shape, v.strides, v.itemsize, v.format, v.typestr, v.ndim, v.nbytes) == \
                ((16,), (1,), 1, "B", "|u1", 1, 16)
            assert not v.readonly
            m = memoryview(v)
            assert m.nbytes == 16 and not m.readonly and m.tolist() == list(range(16))
            m[0] = 99  # through the view: the buffer itself
            assert b[0] == 99
            assert not hasattr(v, "__cuda_array_interface__")  # host memory
            ai = v.__array_interface__
            assert ai == {"shape": (16,), "typestr": "|u1", "data": (v.ptr, False), "strides": None, "version": 3}
            assert v.__dlpack_device__() == (1, 0)
            # the same access, named by its object and by its weft.Data
            assert ctx.view(b).ptr == ctx.view(rt.data(b)).ptr == v.ptr
            assert [w.ptr for w in ctx.views] == [v.ptr]
            return True

        assert rt.spawn(body, buf, readwrites=[buf]).result()
    assert buf[0] == 99


def test_host_view_numpy_zero_copy():
    np = pytest.importorskip("numpy")
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    out = np.zeros(12, dtype=np.int32)
    with weft.Runtime(workers=2) as rt:
        def body():
            ctx = weft.context()
            va, vo = ctx.view(a), ctx.view(out)
            assert va.readonly and not vo.readonly
            assert (va.shape, va.strides, va.typestr) == ((3, 4), (32, 8), "<f8")
            assert (vo.shape, vo.typestr) == ((12,), "<i4")
            x = np.asarray(va)
            y = ctx.array(1)
            assert x.ctypes.data == a.ctypes.data == va.ptr == weft._weft._ctx_data(0)
            assert y.ctypes.data == out.ctypes.data == vo.ptr == weft._weft._ctx_data(1)
            assert not x.flags.writeable and y.flags.writeable
            y[:] = (x * 2).ravel()
            z = np.from_dlpack(vo)  # DLPack, kDLCPU: the same memory
            assert z.ctypes.data == out.ctypes.data
            return x.shape

        assert rt.spawn(body, reads=[a], writes=[out]).result() == (3, 4)
    assert out.tolist() == list(range(0, 24, 2))


@pytest.mark.parametrize("placement", [None, weft.gpu])
def test_without_device_data_views_are_the_hosts(placement):
    """A task placed on a GPU but spawned without device_data=True uses the
    host's copy (as before views existed): its views are host views."""
    buf = bytearray(8)
    with vgpus() as rt:
        def body(b):
            v = weft.context().view(b)
            assert v.on_host and v.ptr == address_of(b) == weft._weft._ctx_data(0)
            memoryview(v)[:] = b"abcdefgh"
            return weft.context().devices

        devs = rt.spawn(body, buf, writes=[buf], placement=placement).result()
        assert len(devs) == (1 if placement else 0)
    assert buf == b"abcdefgh"


def test_device_data_on_the_cpu_is_the_host():
    buf = bytearray(4)
    with vgpus() as rt:
        def fill(b):
            v = weft.context().view(0)
            assert v.on_host and v.ptr == address_of(b)
            memoryview(v)[:] = b"cpu!"

        assert rt.spawn(fill, buf, writes=[buf], placement=weft.cpu, device_data=True).result() is None
    assert buf == b"cpu!"


@pytest.mark.parametrize("make, typestr, shape", [
    (lambda: array.array("i", [1, 2, 3]), "<i4", (3,)),
    (lambda: array.array("d", [1.5]), "<f8", (1,)),
    (lambda: array.array("H", [1, 2]), "<u2", (2,)),
    (lambda: bytearray(5), "|u1", (5,)),
    (lambda: bytes(3), "|u1", (3,)),
    (lambda: bytearray(0), "|u1", (0,)),
])
def test_item_types_from_the_buffer(make, typestr, shape):
    obj = make()
    with weft.Runtime(workers=1) as rt:
        def body():
            v = weft.context().view(0)
            return v.typestr, v.shape, v.nbytes, memoryview(v).tobytes()

        got = rt.spawn(body, reads=[obj]).result()
    assert got == (typestr, shape, len(memoryview(obj).cast("B")), bytes(memoryview(obj).cast("B")))


def test_numpy_layouts_and_types():
    np = pytest.importorskip("numpy")
    f = np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    c = np.array([1 + 2j, 3 - 4j], dtype=np.complex128)
    b = np.array([True, False, True])
    z = np.array(7.0)  # 0-d
    rec = np.zeros(2, dtype=[("x", "i4"), ("y", "f8")])  # a struct type: shown as bytes
    big = np.arange(3, dtype=">i4")  # byte-swapped: no DLPack type
    objs = [f, c, b, z, rec, big]
    with weft.Runtime(workers=1) as rt:
        def body():
            vs = weft.context().views
            facts = [(v.typestr, v.shape, v.strides, v.__array_interface__["strides"]) for v in vs]
            same = [np.asarray(v).ctypes.data == o.ctypes.data for v, o in zip(vs, objs)]
            arrays_equal = [np.array_equal(np.asarray(v), o) for v, o in zip(vs[:4] + vs[5:], objs[:4] + objs[5:])]
            dl = []
            for v in vs:
                try:
                    dl.append(dl_facts(v.__dlpack__(max_version=(1, 0)))[1])
                except BufferError as e:
                    dl.append(str(e))
            return facts, same, arrays_equal, dl

        facts, same, arrays_equal, dl = rt.spawn(body, reads=objs).result()
    assert facts[0] == ("<f4", (2, 3), (4, 8), (4, 8))  # Fortran order: strides given
    assert facts[1] == ("<c16", (2,), (16,), None)
    assert facts[2] == ("|b1", (3,), (1,), None)
    assert facts[3] == ("<f8", (), (), None)
    assert facts[4] == ("|u1", (rec.nbytes,), (1,), None)
    assert facts[5] == (">i4", (3,), (4,), None)
    assert all(same) and all(arrays_equal)
    assert dl[0]["dtype"] == (2, 32, 1) and dl[0]["strides"] == (1, 2)  # DLPack strides count items
    assert dl[1]["dtype"] == (5, 128, 1) and dl[2]["dtype"] == (6, 8, 1)
    assert dl[3]["ndim"] == 0 and dl[3]["shape"] == ()
    assert dl[4]["dtype"] == (1, 8, 1)
    assert "byte-swapped" in dl[5]


# ---- on virtual GPUs ------------------------------------------------------


def test_vgpu_view_is_the_replica():
    """device_data=True on a virtual GPU: the view is the task's replica (not
    the host buffer), described by __cuda_array_interface__ v3 with the
    task's stream and by a DLPack capsule, all with weft_ctx_data's pointer."""
    host = array.array("d", [1.0, 2.0, 3.0, 4.0])
    with vgpus() as rt:
        def body():
            ctx = weft.context()
            v = ctx.view(host)
            stream = ctx.streams[0]
            cai = v.__cuda_array_interface__
            name, dl, _, _ = dl_facts(v.__dlpack__())
            return (v.ptr, weft._weft._ctx_data(0), v.device, v.on_host, v.stream, stream, cai, name,
                    dl, v.__dlpack_device__(), ctx.devices)

        (ptr, c_ptr, device, on_host, vstream, stream, cai, name, dl, dldev, devs) = rt.spawn(
            body, readwrites=[host], placement=weft.gpu, device_data=True).result()
    assert ptr == c_ptr != address_of(host)  # the replica's own address, as C gives it
    assert device == f"vgpu:{devs[0] - 1}" and not on_host
    assert vstream == stream and stream not in (0, 1, 2)
    assert cai == {"shape": (4,), "typestr": "<f8", "data": (ptr, False), "strides": None, "version": 3,
                   "stream": stream}
    assert name == "dltensor"
    assert dl == {"data": ptr, "device": (1, 0), "ndim": 1, "dtype": (2, 64, 1), "shape": (4,), "strides": (1,),
                  "byte_offset": 0}
    assert dldev == (1, 0)  # kDLCPU: a virtual GPU's memory is the process's (docs/design.md)


@pytest.mark.parametrize("check", [False, True])
def test_vgpu_writes_through_the_replica_reach_later_tasks(monkeypatch, check):
    """A GPU task updates its replica from a callable queued on its stream
    (NumPy on the replica's memory, ordered after the copy into it); a task
    on the other GPU reads it there (copied between replicas); a CPU task
    and unregister see it in the host buffer.  In checking mode the queued
    callables name the views they read and write, and every read is checked
    to be ordered after the copy that filled the replica."""
    np = pytest.importorskip("numpy")
    if check:
        monkeypatch.setenv("WEFT_VGPU_CHECK", "1")
    a = np.arange(8, dtype=np.float64)
    seen = []
    with vgpus() as rt:
        def scale():
            ctx = weft.context()
            v = ctx.view(a)
            assert v.ptr != a.ctypes.data

            def kernel():
                assert v.valid  # the body returned; the task has not ended
                x = np.asarray(v)
                assert x.ctypes.data == v.ptr
                x *= 10

            ctx.queue(kernel, reads=[v], writes=[v])

        def read_on_other_gpu():
            ctx = weft.context()
            v = ctx.view(0)
            assert v.readonly and v.device == "vgpu:1"
            ctx.queue(lambda: seen.append(np.asarray(v).tolist()), reads=[v])

        rt.spawn(scale, readwrites=[a], placement=weft.gpu(0), device_data=True)
        rt.spawn(read_on_other_gpu, reads=[a], placement=weft.gpu(1), device_data=True)
        assert rt.spawn(lambda x: x.tolist(), a, reads=[a]).result() == [10.0 * i for i in range(8)]
        rt.wait_all()
    assert seen == [[10.0 * i for i in range(8)]]
    assert a.tolist() == [10.0 * i for i in range(8)]


@pytest.mark.parametrize("check", [False, True])
def test_vgpu_body_computes_on_its_views(monkeypatch, check):
    """Parla's idiom (CuPy computing in the body, on the current stream),
    with NumPy standing in on a virtual GPU: the body computes on the array
    it asks for.  The array holds the task's inputs though the predecessor's
    kernel is slow (the body waits for its stream before it gets the view),
    and what the body writes is the task's output, on that GPU and after."""
    np = pytest.importorskip("numpy")
    import time
    if check:
        monkeypatch.setenv("WEFT_VGPU_CHECK", "1")
    for rnd in range(4):
        a = np.zeros(64)
        with vgpus() as rt:
            def slow_fill():
                ctx = weft.context()
                v = ctx.view(a)

                def kernel():
                    time.sleep(0.005)
                    np.asarray(v)[:] = 42.0

                ctx.queue(kernel, writes=[v])

            def add_one():
                x = weft.context().array(a)  # the replica, inputs in
                assert float(x[0]) == 42.0 and float(x[-1]) == 42.0, x[:4]
                x += 1.0
                return float(x.sum())

            rt.spawn(slow_fill, writes=[a], placement=weft.gpu(0), device_data=True)
            t = rt.spawn(add_one, readwrites=[a], placement=weft.gpu(rnd % 2), device_data=True)
            assert t.result(timeout=30) == 43.0 * 64
            assert rt.spawn(lambda: float(a[5]), reads=[a]).result(timeout=30) == 43.0
        assert a.tolist() == [43.0] * 64


def test_vgpu_chain_and_unregister_bring_the_newest_value_back():
    buf = bytearray(4)
    with vgpus(1) as rt:
        def bump():
            ctx = weft.context()
            v = ctx.view(0)

            def k():
                m = memoryview(v)
                m[:] = bytes((x + 1) % 256 for x in m)

            ctx.queue(k, reads=[v], writes=[v])

        for _ in range(5):
            rt.spawn(bump, readwrites=[buf], placement=weft.gpu, device_data=True)
        rt.wait_all()
        rt.unregister(buf)
    assert buf == bytes([5, 5, 5, 5])


def test_device_views_and_overlapping_ranges():
    """Device views need memory registered as one range: a spawn with
    device_data=True naming an array that overlapping views were also
    registered from is refused with the ranges named (their handles would
    not know of a replica written on a device).  The other way round works:
    an array written on a GPU, then read through a view of part of it on the
    host, gives the GPU's values (the hand-over brings the array home)."""
    np = pytest.importorskip("numpy")
    a = np.arange(8, dtype=np.float64)
    b = np.arange(8, dtype=np.float64)
    with vgpus(1) as rt:
        def double():
            ctx = weft.context()
            v = ctx.view(0)
            ctx.queue(lambda: np.multiply(np.asarray(v), 2, out=np.asarray(v)), reads=[v], writes=[v])

        rt.spawn(double, readwrites=[a], placement=weft.gpu, device_data=True)
        assert rt.spawn(lambda x: x.tolist(), a[2:5], reads=[a[2:5]]).result() == [4.0, 6.0, 8.0]
        with pytest.raises(ValueError, match=r"device_data=True needs memory registered as one range.*"
                                             r"overlaps other registered ranges"):
            rt.spawn(double, readwrites=[a], placement=weft.gpu, device_data=True)
        # Without device views the same spawn runs, ordered with the view's reader.
        rt.spawn(lambda: np.multiply(a, 2, out=a), readwrites=[a]).result()
        # Named buffers keep their places before a's relation (its view a[2:5]): b is access 1.
        def second():
            assert weft.context().view(1).ptr == b.ctypes.data

        rt.spawn(second, reads=[a], readwrites=[b]).result()
        rt.wait_all()
    assert a.tolist() == [4.0 * i for i in range(8)]


# ---- read-only accesses ---------------------------------------------------


@pytest.mark.parametrize("device_data", [False, True])
def test_read_only_access_refuses_writable_exports(device_data):
    buf = bytearray(b"\x01\x02\x03\x04")
    with vgpus() as rt:
        def body():
            v = weft.context().view(0)
            assert v.readonly
            m = memoryview(v)
            assert m.readonly
            with pytest.raises(TypeError):
                m[0] = 9
            with pytest.raises(BufferError, match="read-only"):
                get_buffer(v, PyBUF_WRITABLE)
            cai = v.__cuda_array_interface__ if device_data else v.__array_interface__
            assert cai["data"][1] is True
            with pytest.raises(BufferError, match="max_version"):
                v.__dlpack__()  # DLPack before 1.0 cannot mark it read-only
            name, dl, flags, version = dl_facts(v.__dlpack__(max_version=(1, 2)))
            assert name == "dltensor_versioned" and version == (1, 0) and dl["data"] == v.ptr
            assert flags & 1  # DLPACK_FLAG_BITMASK_READ_ONLY
            try:
                import numpy as np
            except ImportError:
                return True
            assert not np.from_dlpack(v).flags.writeable
            assert not weft.context().array(0).flags.writeable
            return True

        assert rt.spawn(body, reads=[buf], placement=weft.gpu, device_data=device_data).result()
    assert buf == b"\x01\x02\x03\x04"


# ---- DLPack capsules ------------------------------------------------------


def test_dlpack_capsule_ownership():
    """An unused capsule frees its tensor; a consumer that renamed it to
    used_dltensor owns it and calls the deleter (the sanitizer runs catch a
    leak or a double free)."""
    buf = bytearray(32)
    with weft.Runtime(workers=1) as rt:
        def body():
            v = weft.context().view(0)
            for _ in range(3):
                v.__dlpack__()  # dropped unused: the capsule frees it
                v.__dlpack__(max_version=(1, 0))
            for versioned in (False, True):
                cap = v.__dlpack__(max_version=(1, 0)) if versioned else v.__dlpack__()
                name, m, addr = read_capsule(cap)
                assert m.dl_tensor.data == v.ptr
                assert _api.PyCapsule_SetName(cap, USED) == 0  # consumed
                DELETER(m.deleter)(addr)
                del cap  # must not free it again
            return True

        assert rt.spawn(body, writes=[buf]).result()


def test_dlpack_arguments():
    buf = bytearray(8)
    with vgpus() as rt:
        def body():
            ctx = weft.context()
            v = ctx.view(0)
            read_capsule(v.__dlpack__(stream=None))
            read_capsule(v.__dlpack__(stream=-1))
            read_capsule(v.__dlpack__(stream=ctx.streams[0]))  # the task's own stream
            read_capsule(v.__dlpack__(dl_device=(1, 0), copy=False))
            with pytest.raises(BufferError, match="stream"):
                v.__dlpack__(stream=1)
            with pytest.raises(TypeError):
                v.__dlpack__(stream="s")
            with pytest.raises(BufferError, match="never copied"):
                v.__dlpack__(copy=True)
            with pytest.raises(BufferError, match="another device"):
                v.__dlpack__(dl_device=(2, 0))
            return True

        assert rt.spawn(body, writes=[buf], placement=weft.gpu, device_data=True).result()


# ---- lifetime and misuse --------------------------------------------------


@pytest.mark.parametrize("device_data", [False, True])
def test_view_used_after_its_task_ended(device_data):
    buf = bytearray(8)
    with vgpus() as rt:
        def body():
            v = weft.context().view(0)
            return v, memoryview(v)

        v, m = rt.spawn(body, writes=[buf], placement=weft.gpu, device_data=device_data).result()
        assert not v.valid
        assert "its task ended" in repr(v)
        uses = [lambda: v.ptr, lambda: v.shape, lambda: v.nbytes, lambda: v.__dlpack__(),
                lambda: v.__dlpack_device__(), lambda: v.__array_interface__, lambda: memoryview(v),
                lambda: v.__cuda_array_interface__, lambda: hasattr(v, "__cuda_array_interface__")]
        for use in uses:
            with pytest.raises(RuntimeError, match="used after its task ended"):
                use()
        try:
            import numpy as np
        except ImportError:
            np = None
        if np is not None:
            with pytest.raises(RuntimeError, match="used after its task ended"):
                np.asarray(v)
        m.release()  # an export made meanwhile is not policed (documented)


def test_views_of_a_cpu_task_end_with_it():
    buf = bytearray(1)
    kept = []
    with weft.Runtime(workers=2) as rt:
        t = rt.spawn(lambda: kept.append(weft.context().view(0)), writes=[buf])
        t.result()
        assert not kept[0].valid
        with pytest.raises(RuntimeError, match="after its task ended"):
            kept[0].ptr


def test_misuse():
    buf, other = bytearray(2), bytearray(2)
    with vgpus() as rt:
        def body():
            ctx = weft.context()
            with pytest.raises(IndexError, match="has 1 data access"):
                ctx.view(1)
            with pytest.raises(IndexError):
                ctx.view(-1)
            with pytest.raises(ValueError, match="does not access"):
                ctx.view(other)
            errors = []

            def queued():
                try:
                    ctx.view(0)
                except RuntimeError as e:
                    errors.append(str(e))

            ctx.queue(queued)
            return ctx, errors

        ctx, errors = rt.spawn(body, reads=[buf], placement=weft.gpu, device_data=True).result()
        assert errors and "only inside a weft task body" in errors[0]
        with pytest.raises(RuntimeError, match="only inside a weft task body"):
            ctx.view(0)  # outside any body
        # another task's Context
        with pytest.raises(RuntimeError, match="belongs to another task"):
            rt.spawn(lambda: ctx.view(0), reads=[buf]).result()
        assert rt.spawn(lambda: weft.context().views, placement=weft.gpu).result() == ()
    with pytest.raises(TypeError, match="come from"):
        weft.View()


def test_views_from_many_tasks_at_once():
    """Tasks on both workers and two GPUs make views of their own buffers at
    the same time (free-threaded builds run the bodies in parallel)."""
    bufs = [bytearray(64) for _ in range(64)]
    with vgpus() as rt:
        def body(i):
            ctx = weft.context()
            v = ctx.view(0)
            ok = v.ptr == weft._weft._ctx_data(0) and v.nbytes == 64 and v.valid
            if v.on_host:
                memoryview(v)[:] = bytes([i]) * 64
            else:
                ctx.queue(lambda: memoryview(v).__setitem__(slice(None), bytes([i]) * 64), writes=[v])
            return ok

        ts = []
        for i, b in enumerate(bufs):
            placement = [weft.gpu(i % 2), weft.cpu] if i % 3 else None
            ts.append(rt.spawn(body, i, writes=[b], placement=placement, device_data=True))
        assert all(t.result() for t in ts)
        rt.wait_all()
        for b in bufs:
            rt.unregister(b)
    assert all(b == bytes([i]) * 64 for i, b in enumerate(bufs))


def test_views_used_by_other_threads_while_the_task_runs():
    buf = bytearray(1024)
    with weft.Runtime(workers=2) as rt:
        def body():
            v = weft.context().view(0)
            out = []

            def use():
                for _ in range(200):
                    out.append(v.ptr == v.__array_interface__["data"][0])

            th = [threading.Thread(target=use) for _ in range(3)]
            for x in th:
                x.start()
            for x in th:
                x.join()
            return all(out) and len(out) == 600

        assert rt.spawn(body, writes=[buf]).result()


# ---- CUDA (run by scripts/gpu-check.sh; skipped without a CUDA device) ----


def _cuda_runtime():
    try:
        rt = weft.Runtime(workers=2, devices="cpu,cuda")
    except ValueError:
        return None
    if not any(d["kind"] == "cuda" for d in rt.devices):
        rt.close()
        return None
    return rt


def test_cuda_view():
    rt = _cuda_runtime()
    if rt is None:
        pytest.skip("no CUDA device")
    host = array.array("f", [1.0] * 256)
    with rt:
        def body():
            ctx = weft.context()
            v = ctx.view(0)
            s = ctx.streams[0]
            cai = v.__cuda_array_interface__
            with pytest.raises(BufferError, match="device memory"):
                memoryview(v)
            with pytest.raises(AttributeError):
                v.__array_interface__
            with pytest.raises(BufferError, match="legacy default"):
                v.__dlpack__()
            name, dl, _, _ = dl_facts(v.__dlpack__(stream=s))
            return (v.ptr, weft._weft._ctx_data(0), cai, s, dl, v.__dlpack_device__(),
                    ctx.ordinals[0], type(ctx.array(0)).__module__)

        ptr, c_ptr, cai, s, dl, dldev, ordinal, mod = rt.spawn(
            body, readwrites=[host], placement=weft.gpu, device_data=True).result()
    assert ptr == c_ptr and cai["stream"] == s and s not in (0, 1, 2)
    assert cai["data"] == (ptr, False) and cai["shape"] == (256,) and cai["typestr"] == "<f4"
    assert dl["device"] == (2, ordinal) == dldev and dl["data"] == ptr
    assert mod.startswith("cupy") or mod.startswith("weft")


def test_checking_mode_failure_carries_its_report(monkeypatch, capfd):
    """The exception of a task the checking mode failed says what it found
    (what the body did, what to write instead), not only that device work
    failed; the report is printed on stderr too."""
    np = pytest.importorskip("numpy")
    monkeypatch.setenv("WEFT_VGPU_CHECK", "1")
    a = np.ones(4)
    with vgpus() as rt:
        def scale(x):
            x *= 2   # the host's buffer, not weft.context().array(x)

        t = rt.spawn(scale, a, readwrites=[a], placement=weft.gpu, device_data=True)
        err = t.exception(timeout=60)
        # (wait_all raises it too; writes=: an overwrite, which the failed
        # writer before it does not cancel)
        with pytest.raises(RuntimeError) as again:
            rt.spawn(scale, a, writes=[a], placement=weft.gpu, device_data=True, name="again")
            rt.wait_all()
    msg = str(err)
    assert isinstance(err, RuntimeError) and msg.startswith("the weft task failed: the checking mode found"), msg
    assert "the body of task 'scale'" in msg and "wrote the memory registered as access 0" in msg, msg
    assert "write the copy instead" in msg and "weft.context().array(x)" in msg, msg
    assert "the body of task 'again'" in str(again.value)
    assert "the body of task 'scale'" in capfd.readouterr().err


def test_checking_mode_reports_a_write_to_the_buffer_itself(monkeypatch, capfd):
    """With device_data=True on a GPU the task's data is its copy there: a
    body that writes the registered buffer itself (a CPU habit) loses the
    write.  The checking mode fails such a task and says why on stderr; a
    body that writes through its view passes, and so does one that writes
    the buffer of data it accesses on the host; outside the checking mode
    nothing is checked."""
    np = pytest.importorskip("numpy")
    monkeypatch.setenv("WEFT_VGPU_CHECK", "1")
    a = np.zeros(4)
    with vgpus() as rt:
        def cpu_habit(x):
            x[:] = 7.0

        t = rt.spawn(cpu_habit, a, readwrites=[a], placement=weft.gpu, device_data=True)
        with pytest.raises(RuntimeError):
            t.result(timeout=60)
        assert "wrote the memory registered as access 0 (data d" in capfd.readouterr().err

        def through_view():
            weft.context().array(a)[:] = 3.0

        # (writes=: an overwrite, which the failed writer before it does not cancel)
        rt.spawn(through_view, writes=[a], placement=weft.gpu, device_data=True).result(timeout=60)
        assert rt.fetch(a).tolist() == [3.0] * 4
        # a chain of GPU writers (each released early, its predecessor's
        # commit poisoning the buffer meanwhile) is not taken for the body's
        for _ in range(20):
            rt.spawn(through_view, readwrites=[a], placement=weft.gpu, device_data=True)
        rt.wait_all()
        assert "wrote the memory" not in capfd.readouterr().err
    monkeypatch.delenv("WEFT_VGPU_CHECK")
    b = np.zeros(4)
    with vgpus() as rt:
        rt.spawn(cpu_habit, b, readwrites=[b], placement=weft.gpu, device_data=True).result(timeout=60)


def test_checking_mode_reports_a_program_write_the_gpu_value_goes_over(monkeypatch, capfd):
    """After a task on a GPU wrote a buffer, its newest value is the GPU's
    copy: the program writing the buffer itself (outside a task that names
    it, without rt.acquire) loses that write when the value is brought
    back.  The checking mode says so on stderr, naming the data and the GPU,
    and fails what brought it back (rt.fetch here, a host task after); the
    ways that keep the write (rt.acquire, a task on the host writing the
    buffer, a write-only task) are not reported."""
    np = pytest.importorskip("numpy")
    monkeypatch.setenv("WEFT_VGPU_CHECK", "1")
    a = np.zeros(4)
    with vgpus() as rt:
        def fill(v):
            weft.context().array(a)[:] = v

        def add(v):
            weft.context().array(a)[:] += v

        rt.spawn(fill, 3.0, writes=[a], placement=weft.gpu(0), device_data=True).result(timeout=60)
        a[0] = 5.0  # lost: the GPU's value comes back over it
        with pytest.raises(RuntimeError, match="checking mode found the data's memory written"):
            rt.fetch(a, timeout=60)
        err = capfd.readouterr().err
        assert "was written on the host while the data's newest value was on vgpu:0 only" in err, err
        assert "rt.acquire(buf" in err and "registered as data d" in err
        assert a.tolist() == [3.0] * 4
        rt.spawn(add, 1.0, readwrites=[a], placement=weft.gpu(1), device_data=True).result(timeout=60)
        a[1] = 5.0
        with pytest.raises(RuntimeError, match="data check"):
            rt.spawn(lambda x: x.tolist(), a, reads=[a]).result(timeout=60)
        assert "newest value was on vgpu:1 only" in capfd.readouterr().err
        assert rt.spawn(lambda x: x.tolist(), a, reads=[a]).result(timeout=60) == [4.0] * 4  # (reported once)
        c = np.zeros(2)

        def fill_c():
            weft.context().array(c)[:] = 2.0

        rt.spawn(fill_c, writes=[c], placement=weft.gpu(1), device_data=True).result(timeout=60)
        c[1] = 5.0
        with pytest.raises(RuntimeError, match="checking mode found the data's memory written"):
            rt.unregister(c)  # (unregistered all the same)
        assert c.tolist() == [2.0, 2.0]
        assert "newest value was on vgpu:1 only" in capfd.readouterr().err
        # the quiet ways: acquired, a host task writing it, a write-only task
        rt.spawn(add, 1.0, readwrites=[a], placement=weft.gpu(0), device_data=True).result(timeout=60)
        with rt.acquire(a, "rw") as b:
            b[0] = 50.0
        rt.spawn(add, 1.0, readwrites=[a], placement=weft.gpu(1), device_data=True).result(timeout=60)
        rt.spawn(lambda x: x.__setitem__(1, 60.0), a, readwrites=[a]).result(timeout=60)
        rt.spawn(add, 1.0, readwrites=[a], placement=weft.gpu(0), device_data=True).result(timeout=60)
        a[2] = 7.0  # overwritten by the write-only task: not the data's value
        rt.spawn(lambda x: x.__setitem__(slice(None), 8.0), a, writes=[a]).result(timeout=60)
        rt.spawn(add, 1.0, readwrites=[a], placement=weft.gpu(1), device_data=True).result(timeout=60)
        assert rt.fetch(a, timeout=60).tolist() == [9.0] * 4
        rt.spawn(add, 1.0, readwrites=[a], placement=weft.gpu(0), device_data=True).result(timeout=60)
        rt.wait_all()
    assert a.tolist() == [10.0] * 4
    assert "was written on the host" not in capfd.readouterr().err
