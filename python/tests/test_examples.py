"""The Python examples (examples/python/*.py) run and check themselves:
each prints "equal to the sequential computation" and exits 0, or says
"DIFFERS" and exits 1.  Run as a user would, in a process of their own."""
import os
import subprocess
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(f for f in os.listdir(EXAMPLES) if f.endswith(".py")))
@pytest.mark.parametrize("env", [{}, {"WEFT_VGPU_CHECK": "1"}, {"WEFT_VGPU_SCHEDULE": "7"}])
def test_example(name, env):
    if name == "gpu_body.py":
        pytest.importorskip("numpy")
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, name)], capture_output=True, text=True,
                       timeout=110, env={**os.environ, **env})
    assert r.returncode == 0 and "equal to the sequential computation" in r.stdout, (r.stdout, r.stderr)
