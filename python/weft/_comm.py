"""Communication helpers of weft: Transfer (one point-to-point transfer of
an exchange) and Grid (2-D block decompositions for halo exchanges, over the
C core's weft_grid_block_get / weft_grid_exchange).  Communicator itself is
the C extension's (python/weft/comm.c)."""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple, SupportsInt, TypeAlias

from . import _weft

if TYPE_CHECKING:
    from ._weft import Data, _BufferLike

    # One side of a transfer: a buffer (None: another rank's, not read).
    _Side: TypeAlias = "_BufferLike | Data | None"

__all__ = ["Transfer", "Grid", "GridBlock"]


class Transfer:
    """One transfer of ``Communicator.exchange``: ``rows`` rows of ``nbytes``
    bytes from member ``from_``'s buffer ``src`` (starting ``src_offset``
    bytes in, rows ``src_pitch`` bytes apart) to member ``to``'s buffer
    ``dst`` (at ``dst_offset``, rows ``dst_pitch`` apart).  Offsets, sizes
    and pitches are in bytes (``a.itemsize``, ``a.strides[0]`` for a NumPy
    array).  Across MPI ranks the side of another rank may be None (it is
    not read).  A dict with the same keys (``"from"`` for ``from_`` too)
    does as well."""

    __slots__ = ("from_", "to", "src", "dst", "nbytes", "src_offset", "dst_offset", "rows", "src_pitch",
                 "dst_pitch")

    from_: int
    to: int
    src: _Side
    dst: _Side
    nbytes: int
    src_offset: int
    dst_offset: int
    rows: int
    src_pitch: int
    dst_pitch: int

    def __init__(self, from_: int, to: int, src: _Side, dst: _Side, nbytes: int, *, src_offset: int = 0,
                 dst_offset: int = 0, rows: int = 1, src_pitch: int = 0, dst_pitch: int = 0) -> None:
        self.from_, self.to, self.src, self.dst, self.nbytes = from_, to, src, dst, nbytes
        self.src_offset, self.dst_offset = src_offset, dst_offset
        self.rows, self.src_pitch, self.dst_pitch = rows, src_pitch, dst_pitch

    def __repr__(self) -> str:
        extra = ""
        if self.rows != 1:
            extra = f", rows={self.rows}, src_pitch={self.src_pitch}, dst_pitch={self.dst_pitch}"
        return (f"Transfer(from_={self.from_}, to={self.to}, nbytes={self.nbytes}, "
                f"src_offset={self.src_offset}, dst_offset={self.dst_offset}{extra})")


class GridBlock(NamedTuple):
    """Where a block lies in the grid (its interior: row0, col0, rows, cols, in
elements) and how its owner stores it: an array of ``shape`` = (rows + 2 halo,
cols + 2 halo) elements, row-major, rows ``pitch`` bytes apart, ``nbytes`` in
all."""

    row0: int
    col0: int
    rows: int
    cols: int
    pitch: int
    nbytes: int
    shape: tuple[int, int]


class Grid:
    """A ``rows`` x ``cols`` grid of elements (``dtype`` or ``elem`` bytes
    each) split into ``blocks`` = (brows, bcols) near-equal blocks, numbered
    row-major, each stored by its owner as an array of its own with a halo of
    ``halo`` cells on every side (C's weft_grid).

    ``g.block(b)`` says where block b lies and how it is stored;
    ``g.exchange(members, data)`` gives the transfers of one halo exchange
    (a list of Transfer for ``Communicator.exchange``): ``members[b]`` is
    block b's member (None: not part of it) and ``data[b]`` its array (None
    for blocks another rank holds)."""

    dtype: Any  # a numpy.dtype, or None (made with elem=)
    rows: int
    cols: int
    elem: int
    halo: int
    blocks: tuple[int, int]

    def __init__(self, rows: SupportsInt, cols: SupportsInt, *, dtype: Any = None, elem: SupportsInt | None = None,
                 halo: SupportsInt = 1, blocks: tuple[SupportsInt, SupportsInt] | list[SupportsInt] = (1, 1)) -> None:
        if (dtype is None) == (elem is None):
            raise TypeError("Grid(): give the element as dtype= (a NumPy dtype) or elem= (bytes), one of them")
        if dtype is not None:
            import numpy as np
            self.dtype = np.dtype(dtype)
            elem = self.dtype.itemsize
        else:
            self.dtype = None
        assert elem is not None  # (one of dtype= and elem=, checked above)
        try:
            brows, bcols = blocks
        except (TypeError, ValueError):
            raise TypeError(f"Grid(): blocks= expects (block rows, block columns), got {blocks!r}") from None
        self.rows, self.cols, self.elem, self.halo = int(rows), int(cols), int(elem), int(halo)
        self.blocks = (int(brows), int(bcols))
        if min(self.rows, self.cols, self.elem, self.halo, *self.blocks) < 0:
            raise ValueError(f"Grid(): negative size in {self!r}")
        self.block(0)  # the C core checks the geometry and says what is wrong

    @property
    def nblocks(self) -> int:
        return self.blocks[0] * self.blocks[1]

    def _args(self) -> tuple[int, int, int, int, int, int]:
        return (self.rows, self.cols, self.elem, self.halo, self.blocks[0], self.blocks[1])

    def block(self, b: int) -> GridBlock:
        if not 0 <= b < self.nblocks:
            raise ValueError(f"Grid.block(): block {b} of {self.nblocks}")
        row0, col0, rows, cols, pitch, nbytes = _weft._grid_block(*self._args(), b)
        h = self.halo
        return GridBlock(row0, col0, rows, cols, pitch, nbytes, (rows + 2 * h, cols + 2 * h))

    def empty(self, b: int) -> Any:
        """A zeroed NumPy array for block b, halo included (needs dtype=)."""
        import numpy as np
        if self.dtype is None:
            raise TypeError("Grid.empty(): the grid was made with elem=, not dtype=")
        return np.zeros(self.block(b).shape, dtype=self.dtype)

    def exchange(self, members: Iterable[int | None], data: Iterable[_Side]) -> list[Transfer]:
        members = list(members)
        data = list(data)
        if len(data) != self.nblocks:
            raise ValueError(f"Grid.exchange(): data has {len(data)} entries, the grid has {self.nblocks} blocks")
        raw = _weft._grid_exchange(*self._args(), [-1 if m is None else m for m in members])
        return [Transfer(fr, to, data[sb], data[db], nbytes, src_offset=so, dst_offset=do, rows=rows,
                         src_pitch=sp, dst_pitch=dp)
                for (sb, db, fr, to, so, sp, do, dp, nbytes, rows) in raw]

    def __repr__(self) -> str:
        what = f"dtype={self.dtype}" if self.dtype is not None else f"elem={self.elem}"
        return f"Grid({self.rows}, {self.cols}, {what}, halo={self.halo}, blocks={self.blocks})"
