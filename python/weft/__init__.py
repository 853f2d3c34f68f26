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
import atexit as _atexit

from ._weft import (  # noqa: F401
    COMMUTE,
    RW,
    CancelledError,
    Data,
    R,
    Runtime,
    Task,
    TaskSpace,
    W,
    current_runtime,
    current_task,
    data,
    spawn,
    wait_all,
)
from ._weft import _close_all
from . import bench  # noqa: F401

__version__ = "0.1.0"

__all__ = [
    "Runtime",
    "Task",
    "TaskSpace",
    "Data",
    "CancelledError",
    "spawn",
    "wait_all",
    "data",
    "current_runtime",
    "current_task",
    "bench",
    "R",
    "W",
    "RW",
    "COMMUTE",
]

# Runtimes still open at exit are closed (their tasks finish) while the
# interpreter can still run Python on the worker threads.
_atexit.register(_close_all)
