"""weft — Python tasks on Weft's C task runtime.

    import weft

    with weft.Runtime(workers=4) as rt:
        a = weft.spawn(sum, [1, 2, 3])
        b = weft.spawn(lambda x: x * 2, 10, deps=[a])
        print(a.result(), b.result())

The runtime holds Python's GIL only while Python code runs: a task body
attaches its worker's persistent thread state, runs, and detaches; waiting,
spawning under backpressure and closing release the GIL.  See
python/README.md for the whole API and its semantics.
"""
from __future__ import annotations

import atexit as _atexit
from typing import TYPE_CHECKING as _TYPE_CHECKING

if _TYPE_CHECKING:
    from typing import TypeVar as _TypeVar

    from ._weft import _BufferLike, _Mode, _Timeout

    _Obj = _TypeVar("_Obj", bound="_BufferLike | Data")


def _find_extension() -> None:
    """Running a script that sits in python/ puts the source tree's `weft`
    first on sys.path; it has no compiled extension.  Borrow the extension
    of an installed copy of the package (pip install .) in that case."""
    import importlib.machinery
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    for entry in sys.path:
        cand = os.path.abspath(os.path.join(entry or os.curdir, "weft"))
        if cand == here or not os.path.isdir(cand):
            continue
        try:
            names = os.listdir(cand)
        except OSError:
            continue
        if any(n.startswith("_weft.") and n.endswith(suffixes) for n in names):
            __path__.append(cand)
            return
    raise ImportError("weft's C extension is not built: run `pip install .` (or `make python-venv`) "
                      "in the repository root")


try:
    from . import _weft  # noqa: F401
except ImportError:
    import importlib.machinery as _machinery
    import os as _os

    # The C sources (*.c, _weft.h) sit here too: only a built extension counts.
    if any(n.startswith("_weft.") and n.endswith(tuple(_machinery.EXTENSION_SUFFIXES))
           for n in _os.listdir(_os.path.dirname(_os.path.abspath(__file__)))):
        raise  # the extension is here but does not load: show why
    _find_extension()

from ._weft import (  # noqa: F401
    COMMUTE,
    Acquired,
    MAX,
    MIN,
    SUM,
    RW,
    CancelledError,
    Communicator,
    Data,
    Native,
    R,
    Runtime,
    Task,
    TaskSpace,
    TaskWarning,
    View,
    W,
    current_runtime,
    current_task,
    data,
    gather,
    mpi_finalize,
    mpi_init,
    spawn,
    wait_all,
)
from ._weft import _close_all


def _runtime() -> Runtime:
    rt = current_runtime()
    if rt is None:
        raise RuntimeError("no active weft runtime: use `with weft.Runtime() as rt:` "
                           "(or call rt.acquire / rt.fetch on a runtime)")
    return rt


def acquire(obj: _Obj, mode: _Mode = "r", timeout: _Timeout = None) -> Acquired[_Obj]:
    """rt.acquire(obj, mode, timeout) on the current runtime (see python/README.md, Data)."""
    return _runtime().acquire(obj, mode, timeout)


def fetch(obj: _Obj, timeout: _Timeout = None) -> _Obj:
    """rt.fetch(obj, timeout) on the current runtime: obj's host memory made the newest value."""
    return _runtime().fetch(obj, timeout)

from ._comm import Grid, GridBlock, Transfer  # noqa: F401
from ._placement import Context, DeviceSet, Variants, context, cpu, gpu, variants
from ._native import Reduction, native
from . import _placement as _placement_mod

_weft._set_placement(_placement_mod._normalize, _placement_mod._call_placed, Variants, DeviceSet, Context)
from ._space import TaskList
from . import _space as _space_mod

_weft._set_space(_space_mod._expand, TaskList, _space_mod._flatten_deps)
from ._access import unordered

_weft._set_access(unordered)
from ._wait import (
    ALL_COMPLETED,
    FIRST_COMPLETED,
    FIRST_EXCEPTION,
    DoneAndNotDone,
    as_completed,
    wait,
)
from . import _wait as _wait_mod

_wait_mod._install_future_guard()
from . import bench  # noqa: F401

__version__ = "0.1.0"

__all__ = [
    "Runtime",
    "Task",
    "TaskSpace",
    "TaskList",
    "TaskWarning",
    "Data",
    "View",
    "Native",
    "native",
    "Reduction",
    "CancelledError",
    "spawn",
    "wait_all",
    "data",
    "acquire",
    "fetch",
    "Acquired",
    "current_runtime",
    "current_task",
    "gather",
    "wait",
    "as_completed",
    "DoneAndNotDone",
    "FIRST_COMPLETED",
    "FIRST_EXCEPTION",
    "ALL_COMPLETED",
    "bench",
    "R",
    "W",
    "RW",
    "COMMUTE",
    "unordered",
    "SUM",
    "MIN",
    "MAX",
    "cpu",
    "gpu",
    "variants",
    "context",
    "Context",
    "DeviceSet",
    "Variants",
    "Communicator",
    "Transfer",
    "Grid",
    "GridBlock",
    "mpi_init",
    "mpi_finalize",
]

# Runtimes still open at exit are closed (their tasks finish) while the
# interpreter can still run Python on the worker threads.
_atexit.register(_close_all)
