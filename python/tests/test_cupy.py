"""CuPy in a GPU task's body on CUDA: ctx.array() is a cupy.ndarray on the
task's copy (no copy made), CuPy's current device and stream are the
task's, and RawKernel, ElementwiseKernel and array expressions go there,
in order between the task's inputs and its dependents.  Needs CuPy and a
CUDA GPU: skipped, saying which is missing, elsewhere (scripts/gpu-check.sh
installs the CuPy wheel for the machine's CUDA and runs it on a GPU)."""
import os
import subprocess
import sys
import textwrap

import pytest

import weft

np = pytest.importorskip("numpy")
cp = pytest.importorskip("cupy", reason="CuPy is not installed (it needs a CUDA machine: scripts/gpu-check.sh)")


@pytest.fixture
def cuda_rt():
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("CuPy sees no CUDA device")
    except cp.cuda.runtime.CUDARuntimeError as e:
        pytest.skip(f"CuPy cannot reach a CUDA device: {e}")
    rt = weft.Runtime(workers=2, devices="cpu,cuda")
    if not any(d["kind"] == "cuda" for d in rt.devices):
        rt.close()
        pytest.skip("weft was built without the CUDA device kind")
    with rt:
        yield rt


FILL = r"""
extern "C" __global__ void fill(double *x, double v, long long n)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = v + (double)i;
}
"""


def test_kernels_on_the_tasks_stream_and_device(cuda_rt):
    fill = cp.RawKernel(FILL, "fill")
    axpy = cp.ElementwiseKernel("float64 a, float64 x", "float64 y", "y += a * x", "weft_axpy")
    n = 1 << 16
    x, y = np.zeros(n), np.ones(n)

    def writer():
        ctx = weft.context()
        d = ctx.array(0)
        assert isinstance(d, cp.ndarray) and d.data.ptr == ctx.view(0).ptr     # the task's copy itself
        assert cp.cuda.get_current_stream().ptr == ctx.streams[0]
        assert cp.cuda.Device().id == ctx.ordinals[0]
        fill(((n + 255) // 256,), (256,), (d, np.float64(10.0), np.int64(n)))

    def update():
        ctx = weft.context()
        xd, yd = ctx.array(x), ctx.array(y)
        axpy(2.0, xd, yd)
        yd += xd * 0.5 - xd / 2                 # array expressions: a no-op in exact arithmetic here

    cuda_rt.spawn(writer, writes=[x], placement=weft.gpu, device_data=True)
    cuda_rt.spawn(update, reads=[x], readwrites=[y], placement=weft.gpu, device_data=True)
    gx, gy = cuda_rt.spawn(lambda: (x.copy(), y.copy()), reads=[x, y]).result()
    ref = 10.0 + np.arange(n)
    assert gx.tolist() == ref.tolist()
    assert gy.tolist() == (1.0 + 2.0 * ref).tolist()


def test_a_chain_of_many_small_tasks(cuda_rt):
    """Each task adds 1 on the GPU, in order: the sum shows none ran early."""
    a = np.zeros(4096)
    for _ in range(50):
        cuda_rt.spawn(lambda: weft.context().array(0).__iadd__(1.0), readwrites=[a], placement=weft.gpu,
                      device_data=True)
    assert cuda_rt.spawn(lambda: a.copy(), reads=[a]).result().tolist() == [50.0] * 4096


LATE_IMPORT = textwrap.dedent("""
    import numpy as np, weft
    x = np.zeros(16)
    with weft.Runtime(workers=2, devices="cpu,cuda") as rt:
        def body():
            import cupy                      # too late: the body started without it
            try:
                weft.context().array(0)
            except RuntimeError as e:
                return str(e)
            return "no error"
        print(rt.spawn(body, readwrites=[x], placement=weft.gpu, device_data=True).result())
""")


def test_cupy_imported_inside_the_body_is_refused(cuda_rt):
    """A body that imports CuPy itself would run on CuPy's default stream,
    unordered with the task's copies: ctx.array() says so instead."""
    r = subprocess.run([sys.executable, "-c", LATE_IMPORT], capture_output=True, text=True, timeout=100,
                       env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    assert "import cupy before the task runs" in r.stdout, r.stdout
