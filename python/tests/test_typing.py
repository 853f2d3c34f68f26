"""The package ships its types (python/weft/_weft.pyi, py.typed, annotated
modules) and what they need at run time works.  The type check itself is
`scripts/typecheck.sh` (mypy --strict and stubtest), run by `make
python-test`; this file runs in every venv, the sanitizer and free-threaded
ones too, which have no mypy."""
import ast
import os

import pytest

import weft
from weft import _weft


def test_installed_package_ships_stub_and_marker():
    here = os.path.dirname(weft.__file__)
    assert os.path.isfile(os.path.join(here, "py.typed"))
    # The stub beside the extension itself (a source tree borrows an
    # installed copy's extension: see weft/__init__.py).
    ext = os.path.dirname(_weft.__file__)
    assert os.path.isfile(os.path.join(ext, "_weft.pyi"))


def _stub_names():
    path = os.path.join(os.path.dirname(__file__), "..", "weft", "_weft.pyi")
    with open(path) as f:
        tree = ast.parse(f.read())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_stub_declares_every_name_the_extension_exports():
    exported = {n for n in dir(_weft) if not (n.startswith("__") and n.endswith("__"))}
    missing = exported - _stub_names()
    assert not missing, f"python/weft/_weft.pyi lacks {sorted(missing)}"


def test_public_names_exist():
    for name in weft.__all__:
        assert hasattr(weft, name), name
    assert "gather" in weft.__all__


def test_generic_types_subscript_at_run_time():
    # The stubs make these generic; annotations evaluated at run time work.
    assert weft.Task[int].__origin__ is weft.Task
    assert weft.Acquired[bytearray].__origin__ is weft.Acquired
    assert weft.Variants[[int], str].__origin__ is weft.Variants

    def body() -> weft.Task[int]:  # evaluated when the def runs
        raise AssertionError

    assert body.__annotations__["return"] == weft.Task[int]


def test_constants_match_the_stub_comments():
    assert (weft.R, weft.W, weft.RW, weft.COMMUTE) == (1, 2, 3, 4)
    assert (weft.SUM, weft.MIN, weft.MAX) == (4096, 8192, 12288)


def test_acquire_and_fetch_without_a_runtime_raise_runtime_error():
    buf = bytearray(4)
    with pytest.raises(RuntimeError, match="no active weft runtime"):
        weft.acquire(buf)
    with pytest.raises(RuntimeError, match="no active weft runtime"):
        weft.fetch(buf)
