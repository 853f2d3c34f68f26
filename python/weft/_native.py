"""C functions that Weft calls without Python: weft.native() makes a task
body of one (the C side is native.c), Context.queue_native() queues one
on a GPU stream (place.c), and weft.Reduction names the identity and
combine of a user-defined reduction (registered per runtime by spawn.c)."""

from __future__ import annotations

import ctypes
from _ctypes import CFuncPtr  # (ctypes._CFuncPtr: the type of ctypes functions)
from typing import TYPE_CHECKING, Any, Protocol, Union

if TYPE_CHECKING:
    from ._weft import Native


class _HasAddress(Protocol):
    """A Numba cfunc: its C function's address."""

    @property
    def address(self) -> int: ...


# A C function: a ctypes function (a CDLL's, a CFUNCTYPE instance, a Numba
# cfunc's .ctypes), an object with an int `address` (a Numba cfunc), or the
# address itself.
CFunction = Union[int, CFuncPtr, _HasAddress]


def _c_address(fn: CFunction, what: str) -> int:
    """The address of the C function fn: a ctypes function (a CDLL's
    function, a CFUNCTYPE instance, a Numba cfunc's .ctypes) or an int."""
    addr = getattr(fn, "address", None)  # a Numba cfunc
    if isinstance(addr, int) and not isinstance(fn, (int, CFuncPtr)):
        fn = addr
    if isinstance(fn, int) and not isinstance(fn, bool):
        if fn <= 0:
            raise ValueError(f"{what}: fn's address {fn} is not a function's")
        return fn
    if isinstance(fn, CFuncPtr):
        addr = ctypes.cast(fn, ctypes.c_void_p).value or 0
        if addr == 0:
            raise ValueError(f"{what}: fn is a NULL function pointer")
        return addr
    raise TypeError(f"{what}: fn is a ctypes function or an address, not {type(fn).__name__!r}")


def native(fn: CFunction, *, model_ns: int = 0) -> Native:
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
    Context.addresses: reads, writes, readwrites, commutes, reduces, then
    scratch), where the task runs: the host's buffers, or with
    device_data=True the task's device copies (a reduction's: its private
    copy; a scratch buffer: the task's own).  Accesses are whole buffers (a
    tile is refused).

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


class Reduction:
    """A user-defined reduction, for spawn(reduces=[(buf, red)]): an
    identity element and an associative combine over elements of any fixed
    size (argmin over (value, index) pairs, complex sums, a struct).  See
    python/README.md, Reductions.

    combine: a C function `void combine(void *inout, const void *in,
    size_t count, void *arg)` doing inout[i] = inout[i] OP in[i] for count
    elements at once (a ctypes function, a CFUNCTYPE instance, a Numba
    cfunc or its .ctypes, or an address).  Weft calls it from C, on the
    host, with no Python: a Python function is refused (it would run per
    element under the GIL).  It must be associative; it need not commute.
    dtype: a NumPy dtype (a structured one, say), or itemsize: the bytes of
    an element.
    identity: the identity element (bytes of itemsize, or with dtype a
    value NumPy converts to it: a tuple for a structured dtype); or init: a
    C function `void init(void *out, size_t count, void *arg)` setting
    count elements to it.
    arg: passed to combine and init (None, an int address, or a ctypes
    object, whose address is passed; kept alive by the reduction).
    name: for messages.

    Make it once: each runtime registers it on first use and keeps it (and
    its functions) until the runtime is closed."""

    __slots__ = ("combine", "init", "identity", "dtype", "itemsize", "arg", "name", "_weft_reduction")

    combine: CFunction
    init: CFunction | None
    identity: bytes | None
    dtype: Any  # a numpy.dtype, or None (made with itemsize=)
    itemsize: int
    arg: Any
    name: str
    _weft_reduction: tuple[int, int, bytes | None, int, int, str]

    def __init__(self, combine: CFunction, *, dtype: Any = None, itemsize: int | None = None, identity: Any = None,
                 init: CFunction | None = None, arg: Any = None, name: str | None = None) -> None:
        what = "Reduction()"
        if callable(combine) and not isinstance(combine, CFuncPtr) and not isinstance(
                getattr(combine, "address", None), int):
            raise TypeError(f"{what}: combine must be a C function (a ctypes function, a Numba cfunc, an "
                            f"address), not a Python callable: Weft calls it from C with no Python (compile "
                            f"it, e.g. with numba.cfunc)")
        if dtype is not None:
            import numpy as np

            dtype = np.dtype(dtype)
            if itemsize is not None and itemsize != dtype.itemsize:
                raise ValueError(f"{what}: itemsize {itemsize} is not dtype {dtype}'s {dtype.itemsize} bytes")
            itemsize = dtype.itemsize
        if not isinstance(itemsize, int) or isinstance(itemsize, bool) or itemsize <= 0:
            raise ValueError(f"{what}: give dtype= (a NumPy dtype) or itemsize= (bytes of an element, > 0), "
                             f"not {itemsize!r}")
        if (identity is None) == (init is None):
            raise ValueError(f"{what}: give identity= (the identity element) or init= (a C function that "
                             f"fills elements with it), one of them")
        ident = None
        if identity is not None:
            if dtype is not None and not isinstance(identity, (bytes, bytearray, memoryview)):
                import numpy as np

                ident = np.array(identity, dtype=dtype).tobytes()
            else:
                ident = bytes(memoryview(identity).cast("B"))
            if len(ident) != itemsize:
                raise ValueError(f"{what}: identity has {len(ident)} bytes; an element has {itemsize}")
        if arg is None:
            arg_addr = 0
        elif isinstance(arg, int) and not isinstance(arg, bool):
            arg_addr = arg
        else:
            arg_addr = ctypes.addressof(arg)
        self.combine = combine
        self.init = init
        self.identity = ident
        self.dtype = dtype
        self.itemsize = itemsize
        self.arg = arg
        self.name = name if name is not None else getattr(combine, "__name__", None) or "reduction"
        if not isinstance(self.name, str):
            raise TypeError(f"{what}: name must be a str, not {type(self.name).__name__!r}")
        # What spawn.c registers: (combine, init, identity, itemsize, arg, name).
        self._weft_reduction = (_c_address(combine, what), 0 if init is None else _c_address(init, what),
                                ident, itemsize, arg_addr, self.name)

    def __repr__(self) -> str:
        return f"weft.Reduction({self.name!r}, {self.itemsize}-byte elements)"
