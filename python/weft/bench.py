"""Helpers for benchmarks and tests."""
from ._weft import _busy

# busy(microseconds): spin for `microseconds` (a number) in C with the GIL
# released.  The C function itself, so that a task body costs one call.
busy = _busy

__all__ = ["busy"]
