"""Helpers for Numba-compiled native bodies: a `numba.cfunc` used as
`weft.native(f)` or with `Context.queue_native(f, ...)` gets a `void *` and
must turn the addresses it is handed into arrays.  Numba's `carray` wants a
pointer, and Numba itself has no way to read a pointer out of memory or to
make one of an int; these two functions, usable in `@numba.cfunc` and
`@numba.njit` code, do:

    access(p, argsize, i)   the address of the task's access i, for a
                            native body's p whose argument has argsize
                            bytes (the addresses follow it at the next
                            multiple of 8 bytes)
    pointer(address)        an int address as a void * (e.g. one of
                            ctx.addresses packed into queue_native's
                            argument)

    import numpy as np, numba, weft
    from numba import carray, types
    from weft.numba import access

    @numba.cfunc(types.intc(types.voidptr))      # int scale(void *p)
    def scale(p):
        n = carray(p, 1, np.int64)[0]            # the argument: one int64
        x = carray(access(p, 8, 0), n, np.float64)
        y = carray(access(p, 8, 1), n, np.float64)
        for i in range(n):
            y[i] = 2.0 * x[i]
        return 0

    rt.spawn(weft.native(scale), struct.pack("q", len(x)), reads=[x], writes=[y])

Importing this module imports Numba; `import weft` does not.
"""
from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["access", "pointer"]

_I64 = ir.IntType(64)


def _is_pointer(t: Any) -> bool:
    return isinstance(t, (types.RawPointer, types.CPointer))


@intrinsic
def access(typingctx: Any, p: Any, argsize: Any, i: Any) -> Any:
    """The address (a void *) of access i of a native body whose pointer is
    p and whose argument is argsize bytes long: the i-th pointer stored at
    p + argsize rounded up to a multiple of 8 (python/README.md, Native
    bodies).  No bounds check: i must be below the task's access count."""
    if not (_is_pointer(p) and isinstance(argsize, types.Integer) and isinstance(i, types.Integer)):
        return None
    sig = types.voidptr(p, argsize, i)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        ptr, n, k = args
        n = context.cast(builder, n, sig.args[1], types.int64)
        k = context.cast(builder, k, sig.args[2], types.int64)
        off = builder.and_(builder.add(n, ir.Constant(_I64, 7)), ir.Constant(_I64, ~7))
        off = builder.add(off, builder.mul(k, ir.Constant(_I64, 8)))
        slot = builder.inttoptr(builder.add(builder.ptrtoint(ptr, _I64), off), cgutils.voidptr_t.as_pointer())
        return builder.load(slot)

    return sig, codegen


@intrinsic
def pointer(typingctx: Any, address: Any) -> Any:
    """An int address as a void *, for numba.carray."""
    if not isinstance(address, types.Integer):
        return None
    sig = types.voidptr(address)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        a = context.cast(builder, args[0], sig.args[0], types.int64)
        return builder.inttoptr(a, cgutils.voidptr_t)

    return sig, codegen
