"""Tiled Cholesky's Python driver (apps/cholesky/cholesky.py): the command
line on the CPU and on two virtual GPUs (also in their checking mode,
where every queued kernel names the tiles it reads and writes), each
checking ||L L^T - A|| and the distance to numpy.linalg.cholesky; N=400
in tiles of at most 64 (7 x 7 near-equal tiles: N not a multiple of B);
and the same L, to rounding, from every device mix, in this process.
The matrix is the C driver's (chol_matrix_fill), entry for entry.  The
kernels are SciPy's BLAS/LAPACK when SciPy is installed, NumPy's without
it: both are run (the second with SciPy's import blocked).  Dask's
Cholesky on the same matrix (bench/py/cholesky_dask.py, bench/cholesky.sh's
chol_dask) is checked too, where Dask is installed."""
import importlib.util
import os
import re
import subprocess
import sys

import pytest

np = pytest.importorskip("numpy")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DRIVER = os.path.join(REPO, "apps", "cholesky", "cholesky.py")


@pytest.fixture(scope="module")
def chol():
    if not os.path.isfile(DRIVER):
        pytest.skip("apps/cholesky/cholesky.py is not in this tree")
    spec = importlib.util.spec_from_file_location("cholesky", DRIVER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _tasks(out):
    """{device: tasks} from the driver's table."""
    rows = re.findall(r"^  (cpu|vgpu:\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)$", out, re.M)
    return {r[0]: int(r[5]) for r in rows}


@pytest.mark.parametrize("devices,checking", [("cpu", False), ("cpu,vgpu:2", False), ("cpu,vgpu:2", True)])
def test_driver(devices, checking):
    if not os.path.isfile(DRIVER):
        pytest.skip("apps/cholesky/cholesky.py is not in this tree")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    env.pop("WEFT_VGPU_CHECK", None)
    if checking:
        env["WEFT_VGPU_CHECK"] = "1"
    p = subprocess.run([sys.executable, DRIVER, "-n", "400", "-b", "64", "--devices", devices, "--workers", "2",
                        "--check"], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(r"^check: .*PASS$", p.stdout, re.M), p.stdout
    tasks = _tasks(p.stdout)
    nt = 7
    assert sum(tasks.values()) == nt * (nt + 1) * (nt + 2) // 6, p.stdout  # every kernel call, once
    if devices == "cpu":
        assert list(tasks) == ["cpu"]
    else:
        assert set(tasks) == {"cpu", "vgpu:0", "vgpu:1"}, p.stdout


@pytest.mark.parametrize("devices", ["cpu", "cpu,vgpu:2"])
def test_driver_without_scipy(devices):
    """The NumPy-only kernels (SciPy's import fails), which the output
    names, factor the matrix as well."""
    if not os.path.isfile(DRIVER):
        pytest.skip("apps/cholesky/cholesky.py is not in this tree")
    code = ("import runpy, sys; sys.modules['scipy'] = None; "
            f"sys.argv = [{DRIVER!r}, '-n', '400', '-b', '64', '--devices', {devices!r}, '--workers', '2', "
            "'--check']; runpy.run_path(sys.argv[0], run_name='__main__')")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    env.pop("WEFT_VGPU_CHECK", None)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(r"^kernels: NumPy alone \(SciPy is not installed", p.stdout, re.M), p.stdout
    assert re.search(r"^check: .*PASS$", p.stdout, re.M), p.stdout


def test_scipy_kernels_named(chol):
    pytest.importorskip("scipy", reason="SciPy is not installed: the driver uses NumPy's kernels")
    assert chol.KERNEL_IMPL.startswith("SciPy's BLAS/LAPACK")


def test_same_factor_on_every_device_mix(chol):
    a0 = chol.matrix(400, 7)
    assert np.array_equal(a0, a0.T)
    factors = {}
    for devices in ("cpu", "cpu,vgpu:2", "cpu,vgpu:4"):
        a = a0.copy()
        chol.factor(a, 64, devices=devices, workers=2)
        res, diff = chol.check(a0, a)
        assert res < 1e-12 and diff < 1e-12, (devices, res, diff)
        factors[devices] = np.tril(a)
    ref = factors["cpu"]
    for devices, low in factors.items():
        assert np.linalg.norm(low - ref) / np.linalg.norm(ref) < 1e-13, devices


DASK_SCRIPT = os.path.join(REPO, "bench", "py", "cholesky_dask.py")


def test_dask_cholesky_script():
    """bench/py/cholesky_dask.py (chol_dask's Dask leg) factors the same
    matrix correctly, and refuses N not a multiple of B with the reason."""
    pytest.importorskip("dask.array", reason="Dask is not installed: bench/cholesky.sh prints no chol_dask")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    p = subprocess.run([sys.executable, DASK_SCRIPT, "-n", "384", "-b", "64", "--check"], capture_output=True,
                       text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(r"^time [0-9.]+ s", p.stdout, re.M), p.stdout
    assert re.search(r"^check: .*PASS$", p.stdout, re.M), p.stdout
    p = subprocess.run([sys.executable, DASK_SCRIPT, "-n", "400", "-b", "64"], capture_output=True, text=True,
                       timeout=120, env=env)
    assert p.returncode == 2 and "not a multiple of B=64" in p.stderr, p.stdout + p.stderr
