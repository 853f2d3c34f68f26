"""Numba-compiled kernels as task bodies: @numba.njit(nogil=True) kernels
run on two workers at once, a numba.cfunc is a weft.native body (and a
queue_native function) with weft.numba's helpers, and numba.cuda.jit
kernels run on a GPU task's data through ctx.numba_array() and
ctx.numba_stream() — on virtual GPUs under Numba's CUDA simulator (in a
subprocess: NUMBA_ENABLE_CUDASIM must be set before numba is imported), on
CUDA where a GPU is (scripts/gpu-check.sh).  Skipped, saying why, where
Numba cannot be imported (no wheel for free-threaded CPython 3.13:
WEFT_NUMBA_UNAVAILABLE tells why the scripts did not install it)."""
import ctypes
import os
import struct
import subprocess
import sys
import textwrap

import pytest

import weft

np = pytest.importorskip("numpy")


def _import_numba():
    try:
        import numba
    except ImportError as e:
        pytest.skip(os.environ.get("WEFT_NUMBA_UNAVAILABLE") or f"numba cannot be imported here: {e}",
                    allow_module_level=True)
    return numba


numba = _import_numba()
from numba import carray, types  # noqa: E402

import weft.numba as wn  # noqa: E402

SIMULATING = bool(numba.config.ENABLE_CUDASIM)

_libc = ctypes.CDLL(None)
_sched_yield = _libc.sched_yield
_sched_yield.restype = ctypes.c_int
_sched_yield.argtypes = ()


def _meet(nogil):
    """A kernel that raises its own flag, then waits (a bounded number of
    rounds, yielding the CPU in each: the call is opaque to the compiler, so
    the flag is read again) for the other kernel's.  True if it saw it."""
    @numba.njit(nogil=nogil)
    def meet(flags, me, other, rounds):
        flags[me] = 1
        for _ in range(rounds):
            if flags[other] != 0:
                return True
            _sched_yield()
        return False

    meet(np.zeros(1, np.int64), 0, 0, 1)  # compiled before the tasks run
    return meet


def test_nogil_kernels_run_on_two_workers_at_once(rt):
    """Each kernel waits inside its call for the other's flag: both can see
    it only if the two calls run at the same time, which the GIL would
    forbid."""
    meet = _meet(True)
    for _ in range(3):
        flags = np.zeros(2, np.int64)
        # rounds: a bound on the wait (each round yields), seconds on a busy machine
        a = rt.spawn(meet, flags, 0, 1, 50_000_000)
        b = rt.spawn(meet, flags, 1, 0, 50_000_000)
        assert (a.result(), b.result()) == (True, True)


def test_kernels_that_hold_the_gil_never_meet(rt):
    """The control: the same kernels compiled without nogil=True hold the
    GIL for their whole call, so exactly one of them sees the other's flag
    (the second, after the first gave up)."""
    meet = _meet(False)
    flags = np.zeros(2, np.int64)
    a = rt.spawn(meet, flags, 0, 1, 20_000)
    b = rt.spawn(meet, flags, 1, 0, 20_000)
    assert sorted((a.result(), b.result())) == [False, True]


# int scale(void *p): p -> {int64 n; double factor}, then the addresses of
# x (read) and y (written): y = factor * x
@numba.cfunc(types.intc(types.voidptr))
def scale(p):
    n = carray(p, 1, np.int64)[0]
    factor = carray(p, 2, np.float64)[1]
    if n < 0:
        return 3
    x = carray(wn.access(p, 16, 0), n, np.float64)
    y = carray(wn.access(p, 16, 1), n, np.float64)
    for i in range(n):
        y[i] = factor * x[i]
    return 0


# int bump(void *p): p -> {double *x; int64 n}: x += 1 (for queue_native)
@numba.cfunc(types.intc(types.voidptr))
def bump(p):
    head = carray(p, 2, np.int64)
    x = carray(wn.pointer(head[0]), head[1], np.float64)
    for i in range(head[1]):
        x[i] += 1.0
    return 0


def _arg(n, factor):
    return struct.pack("=qd", n, factor)


def test_cfunc_as_a_native_body_on_the_cpu(rt):
    """A cfunc body reads one handle and writes another, in order between
    Python tasks; its return value fails the task."""
    k = weft.native(scale)
    x, y = np.zeros(1000), np.zeros(1000)

    def produce():
        x[:] = np.arange(1000.0)

    rt.spawn(produce, writes=[x])
    rt.spawn(k, _arg(1000, 3.0), reads=[x], writes=[y])
    got = rt.spawn(lambda: y.copy(), reads=[y]).result()
    assert got.tolist() == [3.0 * i for i in range(1000)]
    bad = rt.spawn(k, _arg(-1, 1.0), reads=[x], writes=[y])
    with pytest.raises(RuntimeError, match="returned 3"):
        bad.result()


@pytest.mark.parametrize("check", ["0", "1"])
def test_cfunc_native_body_and_queue_native_on_a_virtual_gpu(check, monkeypatch):
    """With device_data=True a cfunc body gets the replicas on the task's
    GPU (on its stream); a cfunc queued with queue_native gets the address
    packed into its argument; a CPU task reads the result back.  In checking
    mode (WEFT_VGPU_CHECK=1) the virtual GPU checks the order of both."""
    monkeypatch.setenv("WEFT_VGPU_CHECK", check)
    x, y = np.arange(256.0), np.zeros(256)
    with weft.Runtime(workers=2, devices="cpu,vgpu:2") as rt:
        rt.spawn(weft.native(scale), _arg(256, 2.0), reads=[x], writes=[y], placement=weft.gpu(0),
                 device_data=True)

        def body():
            ctx = weft.context()
            ctx.queue_native(bump, struct.pack("=qq", ctx.addresses[0], 256), reads=[0], writes=[0])

        rt.spawn(body, readwrites=[y], placement=weft.gpu(1), device_data=True)
        got = rt.spawn(lambda: y.copy(), reads=[y]).result()
    assert got.tolist() == [2.0 * i + 1.0 for i in range(256)]


def test_numba_array_refuses_what_a_cuda_kernel_cannot_use():
    """The host's copy, and a virtual GPU without the simulator, are errors
    that say what to write instead."""
    with weft.Runtime(workers=2, devices="cpu,vgpu:1") as rt:
        x = np.zeros(8)

        def body():
            with pytest.raises(RuntimeError, match="host's copy.*device_data=True"):
                weft.context().numba_array(0)

        rt.spawn(body, readwrites=[x], placement=weft.gpu).result()
        rt.spawn(body, readwrites=[x]).result()
        if not SIMULATING:
            def vbody():
                ctx = weft.context()
                with pytest.raises(RuntimeError, match="NUMBA_ENABLE_CUDASIM=1"):
                    ctx.numba_array(0)
                with pytest.raises(RuntimeError, match="NUMBA_ENABLE_CUDASIM=1"):
                    ctx.numba_stream()
                with pytest.raises(ValueError, match="1 GPU"):
                    ctx.numba_stream(1)

            rt.spawn(vbody, readwrites=[x], placement=weft.gpu, device_data=True).result()


SIM_SCRIPT = textwrap.dedent("""
    import numpy as np, weft
    from numba import cuda

    @cuda.jit
    def fill(x, v):
        i = cuda.grid(1)
        if i < x.size:
            x[i] = v + i

    @cuda.jit
    def axpy(y, a, x):
        i = cuda.grid(1)
        if i < y.size:
            y[i] += a * x[i]

    n = 300
    x, y = np.zeros(n), np.ones(n)
    with weft.Runtime(workers=2, devices="cpu,vgpu:2") as rt:
        def writer():
            ctx = weft.context()
            d = ctx.numba_array(0)
            assert d.__array_interface__["data"][0] == ctx.view(0).ptr   # the replica itself: no copy
            fill[(n + 127) // 128, 128, ctx.numba_stream()](d, 10.0)

        def update():
            ctx = weft.context()
            yd, xd = ctx.numba_array(y), ctx.numba_array(x)
            axpy[(n + 127) // 128, 128, ctx.numba_stream()](yd, 2.0, xd)

        rt.spawn(writer, writes=[x], placement=weft.gpu(0), device_data=True)
        rt.spawn(update, reads=[x], readwrites=[y], placement=weft.gpu(1), device_data=True)
        got = rt.spawn(lambda: (x.copy(), y.copy()), reads=[x, y]).result()
    assert got[0].tolist() == [10.0 + i for i in range(n)], got[0]
    assert got[1].tolist() == [1.0 + 2.0 * (10.0 + i) for i in range(n)], got[1]
    print("simulated chain: ok")
""")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("check", ["0", "1"])
def test_cuda_jit_kernels_on_virtual_gpus_under_the_simulator(check):
    """A chain of numba.cuda.jit kernels on two virtual GPUs, then a CPU
    reader: a writer fills x on vgpu 0, an update on vgpu 1 reads x (copied
    across) and updates y, and the host reads both.  The simulator runs
    each kernel in the body when launched (it models no stream), after the
    view waited for the copies in."""
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "WEFT_VGPU_CHECK": check}
    r = subprocess.run([sys.executable, "-c", SIM_SCRIPT], capture_output=True, text=True, timeout=170, env=env)
    assert r.returncode == 0 and "simulated chain: ok" in r.stdout, (r.stdout, r.stderr)


def _cuda_runtime():
    if SIMULATING:
        return None
    from numba import cuda

    if not cuda.is_available():
        return None
    try:
        rt = weft.Runtime(workers=2, devices="cpu,cuda")
    except ValueError:
        return None
    if not any(d["kind"] == "cuda" for d in rt.devices):
        rt.close()
        return None
    return rt


def test_cuda_jit_kernels_on_a_cuda_gpu():
    """On CUDA: the device array is the view's memory on the task's stream,
    the kernels go on that stream, and a chain of GPU tasks then a CPU
    reader gives the values."""
    rt = _cuda_runtime()
    if rt is None:
        pytest.skip("no CUDA device for numba.cuda here (scripts/gpu-check.sh runs this on a GPU)")
    from numba import cuda

    @cuda.jit
    def fill(x, v):
        i = cuda.grid(1)
        if i < x.size:
            x[i] = v + i

    @cuda.jit
    def twice(x):
        i = cuda.grid(1)
        if i < x.size:
            x[i] *= 2.0

    n = 1 << 16
    x = np.zeros(n)
    with rt:
        def writer():
            ctx = weft.context()
            d, s = ctx.numba_array(0), ctx.numba_stream()
            assert d.__cuda_array_interface__["data"][0] == ctx.view(0).ptr
            assert s.handle.value == ctx.streams[0]
            assert cuda.get_current_device().id == ctx.ordinals[0]
            fill[(n + 255) // 256, 256, s](d, 1.0)

        def double():
            ctx = weft.context()
            twice[(n + 255) // 256, 256, ctx.numba_stream()](ctx.numba_array(0))

        rt.spawn(writer, writes=[x], placement=weft.gpu, device_data=True)
        rt.spawn(double, readwrites=[x], placement=weft.gpu, device_data=True)
        got = rt.spawn(lambda: x.copy(), reads=[x]).result()
    assert got.tolist() == [2.0 * (1.0 + i) for i in range(n)]
