"""The README's Python example (and python/README-example.py) run as written."""
import pathlib
import re
import subprocess
import sys


ROOT = pathlib.Path(__file__).resolve().parents[2]


def _run(code, tmp_path):
    script = tmp_path / "example.py"
    script.write_text(code)
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=60, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_readme_python_example(tmp_path):
    readme = (ROOT / "README.md").read_text()
    m = re.search(r"```python\n(.*?)```", readme, re.S)
    assert m is not None, "README.md has no ```python block"
    out = _run(m.group(1), tmp_path)
    assert "sum of squares = 338350" in out and "read 42" in out


def test_python_readme_example_file(tmp_path):
    code = (ROOT / "python" / "README-example.py").read_text()
    out = _run(code, tmp_path)
    assert "sum of squares = 338350" in out


def test_scripts_in_python_dir_borrow_the_installed_extension():
    # A script run from python/ (python/demo.py, make demo) finds the source
    # package first; it has the C sources and header but no built extension,
    # and must use the installed one.
    code = "import weft; print(weft.spawn.__module__, weft.__file__)"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       cwd=ROOT / "python")
    assert p.returncode == 0, p.stderr
    assert str(ROOT / "python" / "weft") in p.stdout
