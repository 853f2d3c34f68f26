"""The ports of other systems' programs (examples/ports/python/*.py) run and
check themselves: each exits 0 after comparing its result with the
original's (NumPy, or Dask where installed), or 1 saying "DIFFERS".  Run as
a user would, in a process of their own, with a model directory of their
own so that other runs' "dmda" models do not steer the placement."""
import os
import subprocess
import sys

import pytest

PORTS = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "ports", "python")
SMALL = {
    "parla_blocked_cholesky.py": ["-b", "48", "-nblocks", "5", "-trials", "2"],
    "dask_array_reductions.py": ["--n", "480", "--chunk", "120"],
    "dask_delayed_tree_sum.py": ["--count", "64", "--sleep", "0.0005"],
    "dask_delayed_tree.py": ["--count", "512", "--work", "100"],
    "dask_word_count.py": ["--lines", "200", "--repeat", "1", "--reps", "1"],
    "parla_timestep_gil.py": ["--steps", "8", "-t", "1000", "--frac", "0.5", "--restrict", "1"],
    "parla_jacobi.py": ["--n", "300", "--steps", "4", "--divisions", "6", "--reps", "1"],
    "parla_tsqr.py": ["-r", "2100", "-c", "50", "-b", "250", "-i", "2", "--reps", "1"],
    "ray_nested_quicksort.py": ["--size", "20000", "--threshold", "1000", "--np-size", "200000",
                                "--np-threshold", "10000", "--reps", "1", "--probes", "0", "--pool-deadline", "1",
                                "--timeout", "100"],
    "ray_monte_carlo_pi.py": ["--tasks", "8", "--samples", "5000", "--np-samples", "100000", "--reps", "1",
                              "--pool-deadline", "1", "--timeout", "100"],
}


def test_every_port_is_listed():
    assert sorted(f for f in os.listdir(PORTS) if f.endswith(".py")) == sorted(SMALL)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(SMALL))
@pytest.mark.parametrize("env", [{}, {"WEFT_VGPU_CHECK": "1"}])
def test_port(name, env, tmp_path):
    args = SMALL[name]
    if os.environ.get("WEFT_PY_SANITIZER") and "--pool-deadline" in args:
        # The thread pools' nested waits deadlock and leave their threads
        # blocked: under TSan with an interpreter it cannot see into, those
        # threads' hand-offs read as races in CPython and NumPy alone.
        args = [*args, "--pools", "0"]
    r = subprocess.run([sys.executable, os.path.join(PORTS, name), *args], capture_output=True,
                       text=True, timeout=110,
                       env={**os.environ, "WEFT_PERFMODEL_DIR": str(tmp_path), "OPENBLAS_NUM_THREADS": "1", **env})
    assert r.returncode == 0 and "equal to" in r.stdout and "DIFFERS" not in r.stdout, (r.stdout, r.stderr)
