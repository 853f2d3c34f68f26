"""C functions that Weft calls without Python: weft.native() makes a task
body of one (the C side is native.c), and Context.queue_native() queues one
on a GPU stream (place.c)."""

import ctypes


def _c_address(fn, what):
    """The address of the C function fn: a ctypes function (a CDLL's
    function, a CFUNCTYPE instance, a Numba cfunc's .ctypes) or an int."""
    if isinstance(fn, int) and not isinstance(fn, bool):
        if fn <= 0:
            raise ValueError(f"{what}: fn's address {fn} is not a function's")
        return fn
    if isinstance(fn, ctypes._CFuncPtr):
        addr = ctypes.cast(fn, ctypes.c_void_p).value or 0
        if addr == 0:
            raise ValueError(f"{what}: fn is a NULL function pointer")
        return addr
    raise TypeError(f"{what}: fn is a ctypes function or an address, not {type(fn).__name__!r}")


def native(fn, *, model_ns=0):
    """A C function `int fn(void *p)` as a task body that runs without
    Python: spawn(weft.native(f), arg, reads=..., ...) runs no Python code
    on the worker, and takes the GIL only to report a failure.

    fn: a ctypes function (a CDLL's function, a CFUNCTYPE instance, a Numba
    cfunc's .ctypes) or an address; kept alive by the result.  Make it once
    and spawn it as often as needed.

    What fn gets: p points to a copy of the spawn's one argument (None, or
    any contiguous buffer: bytes, a ctypes structure, an array), made when
    the task is spawned, followed at the next multiple of 8 bytes by the
    address of each of the task's accesses (void *, in the order of
    Context.addresses: reads, writes, readwrites, commutes, then reduces),
    where the task runs: the host's buffers, or with device_data=True the
    task's device copies (a reduction's: its private copy).  Accesses are
    whole buffers (a tile is refused).

    Where it runs: on the CPU, fn is called by the worker; on a GPU it is
    queued on the stream of the task's first GPU (as Context.queue_native,
    every access read and the written ones written, for the virtual GPUs'
    checking mode; model_ns: the modelled time of a call there).  On a CUDA
    GPU that is a host function in stream order: it may not call CUDA.  A
    non-zero return fails the task with RuntimeError and cancels its
    dependents.  fn must not call Weft."""
    from . import _weft

    if not isinstance(model_ns, int) or isinstance(model_ns, bool) or model_ns < 0:
        raise ValueError(f"native(): model_ns must be a non-negative int, not {model_ns!r}")
    addr = _c_address(fn, "native()")
    name = getattr(fn, "__name__", None)
    return _weft.Native(addr, fn, model_ns, name if isinstance(name, str) else hex(addr))
