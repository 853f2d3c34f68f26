"""weft.unordered: an access that the data does not order (WEFT_UNORDERED)."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._weft import Data, _BufferLike


class unordered:
    """An access, in reads=, writes= or readwrites=, that the data does not
    order against the other unordered accesses of the same data spawned in
    a row (StarPU's sequential consistency turned off): order those tasks
    with deps= as needed.  They never overlap on the data at run time (one
    at a time, readers included), so each sees a whole value; the next
    ordinary access follows them all.  readwrites=[weft.unordered(x)] is
    commutes=[x]."""

    __slots__ = ("obj",)

    obj: _BufferLike | Data

    def __init__(self, obj: _BufferLike | Data) -> None:
        self.obj = obj

    def __repr__(self) -> str:
        return f"weft.unordered({self.obj!r})"
