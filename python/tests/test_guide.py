"""The examples of docs/python-guide.md's section "Kernels written in
Python: Numba and CuPy" run as written, each in a process of its own (the
CUDA simulator's example sets NUMBA_ENABLE_CUDASIM before importing numba).
An example needing a library this interpreter lacks is skipped, saying
which: Numba's (no wheel for free-threaded CPython 3.13), CuPy's (a CUDA
machine: scripts/gpu-check.sh)."""
import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

GUIDE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "python-guide.md"
SECTION = "## Kernels written in Python: Numba and CuPy"


def _blocks():
    text = GUIDE.read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return re.findall(r"```python\n(.*?)```", text[start:end], re.S)


BLOCKS = _blocks()


def test_the_section_has_its_examples():
    assert len(BLOCKS) == 4, f"{SECTION!r}: {len(BLOCKS)} python blocks"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_guide_example(i, tmp_path):
    code = BLOCKS[i]
    for mod in ("numpy", "numba", "cupy"):
        if re.search(rf"^import .*\b{mod}\b|^from {mod}\b", code, re.M) and importlib.util.find_spec(mod) is None:
            why = os.environ.get("WEFT_NUMBA_UNAVAILABLE") if mod == "numba" else None
            pytest.skip(why or f"example {i} needs {mod}, which is not installed here")
    if code.startswith("# needs: cupy"):
        import cupy   # noqa: F401  (installed: a CUDA device must be there too)

        try:
            gpus = cupy.cuda.runtime.getDeviceCount()
        except cupy.cuda.runtime.CUDARuntimeError as e:
            pytest.skip(f"example {i} needs a CUDA GPU: {e}")
        if gpus < 1:
            pytest.skip(f"example {i} needs a CUDA GPU")
    script = tmp_path / "example.py"
    script.write_text(code)
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=170,
                       cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
