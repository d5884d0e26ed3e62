"""A concatenation of weights that is never built whole: its pieces and axis, built a block of
rows at a time where it is written.

Merging the projections that read one input (``Q``, ``K`` and ``V``; a gate and an up
projection) concatenates their transposed weights: on a 7B decoder, 32 tensors of 48 MiB
each, which a fold held on the heap from the moment it computed them until the save wrote
them (1.5 GiB of its 2 GiB peak), and refused under a memory limit. A
:class:`Concatenated` costs no memory of its own: its pieces are views of the weights' file
mappings (a transpose is a view too). The writer asks it for blocks of rows in C order
(:meth:`block`), each built into a reused buffer; anything else that reads it as an array
(``np.asarray``: a fold that reads it, a digest) builds it whole, as numpy does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from onnxfold.ir.arrays import copy_c_order


class Concatenated:
    """``np.concatenate(pieces, axis)``, not built (see the module). The pieces share a dtype
    and a rank of at least one; ``axis`` is non-negative."""

    def __init__(self, pieces: Sequence[np.ndarray], axis: int) -> None:
        first = pieces[0]
        if any(p.dtype != first.dtype or p.ndim != first.ndim for p in pieces) or \
                not 0 <= axis < first.ndim:
            raise ValueError("pieces of one dtype and rank, and an axis of that rank")
        self.pieces, self.axis = tuple(pieces), axis
        shape = list(first.shape)
        shape[axis] = sum(p.shape[axis] for p in pieces)
        self.shape = tuple(shape)
        self.dtype = first.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def __array__(self, dtype: np.dtype | None = None, copy: bool | None = None
                  ) -> np.ndarray:
        built = self.block()
        return built if dtype is None else built.astype(dtype)

    def tobytes(self) -> bytes:
        return self.block().tobytes()

    def rows(self, start: int, stop: int) -> Concatenated:
        """Rows ``start:stop`` of the first axis, not built either."""
        start, stop = max(start, 0), min(stop, len(self))
        if self.axis > 0:
            return Concatenated([p[start:stop] for p in self.pieces], self.axis)
        pieces, offset = [], 0
        for piece in self.pieces:
            low, high = max(start - offset, 0), min(stop - offset, len(piece))
            if low < high:
                pieces.append(piece[low:high])
            offset += len(piece)
        if not pieces:  # no row: an empty piece keeps the dtype and the other dims
            pieces = [self.pieces[0][:0]]
        return Concatenated(pieces, 0)

    def with_pieces(self, read: Callable[[np.ndarray], np.ndarray]) -> Concatenated:
        """The same concatenation of ``read(piece)`` for each piece (the writer's checked
        copies of pieces that are views of an input's mapping)."""
        return Concatenated([read(p) for p in self.pieces], self.axis)

    def block(self, out: np.ndarray | None = None) -> np.ndarray:
        """Build it (into ``out``, C order, of its shape and dtype, when given)."""
        if out is None:
            out = np.empty(self.shape, self.dtype)
        index: list[slice] = [slice(None)] * self.ndim
        at = 0
        for piece in self.pieces:
            index[self.axis] = slice(at, at + piece.shape[self.axis])
            copy_c_order(piece, out[tuple(index)])
            at += piece.shape[self.axis]
        return out

    def take_flat(self, positions: np.ndarray) -> np.ndarray:
        """The elements at ``positions`` of its C-order flattening, without building it."""
        coords = np.unravel_index(positions, self.shape)
        found = np.empty(len(positions), self.dtype)
        bounds = np.cumsum([0, *(p.shape[self.axis] for p in self.pieces)])
        owner = np.searchsorted(bounds, coords[self.axis], side="right") - 1
        for k, piece in enumerate(self.pieces):
            mine = owner == k
            if mine.any():
                local = [c[mine] for c in coords]
                local[self.axis] = local[self.axis] - bounds[k]
                found[mine] = piece[tuple(local)]
        return found

    def __repr__(self) -> str:
        return (f"Concatenated({len(self.pieces)} pieces, axis={self.axis}, "
                f"shape={self.shape}, dtype={self.dtype})")
