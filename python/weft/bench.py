"""Helpers for benchmarks and tests."""
from ._weft import _busy


def busy(microseconds):
    """Spin for `microseconds` (a number) in C with the GIL released."""
    _busy(microseconds)


# The C function itself, so that a task body costs one call.
busy = _busy  # noqa: F811

__all__ = ["busy"]
