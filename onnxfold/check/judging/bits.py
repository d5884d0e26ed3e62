"""Whether two arrays hold the same bits: the check's one way of asking it.

``a.tobytes() == b.tobytes()`` copies both arrays whole to compare them (a transposed weight of
a 7B decoder: two 90 MB copies, 3.6 s of an 8-layer slice's fold verification). Compared in
place as 8-byte words where the bytes allow, a chunk at a time (no temporary larger than a
chunk's), the same question costs a sixteenth.
"""

from __future__ import annotations

import numpy as np

CHUNK = 16 << 20  # bytes compared at a time


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` (of fixed-size dtypes) have the same shape, dtype and bytes,
    in C order."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    x, y = _bytes(a), _bytes(b)
    for start in range(0, x.size, CHUNK):
        u, v = x[start:start + CHUNK], y[start:start + CHUNK]
        if u.size % 8 == 0:
            u, v = u.view(np.uint64), v.view(np.uint64)
        if not np.array_equal(u, v):
            return False
    return True


def _bytes(arr: np.ndarray) -> np.ndarray:
    """``arr``'s bytes in C order, as a flat uint8 array (a copy only where it is not C
    ordered)."""
    flat = np.ascontiguousarray(arr).reshape(-1)
    return flat.view(np.uint8)


def differing_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per element of ``a`` and ``b`` (of one fixed-size dtype and shape): whether its bits
    differ (where :func:`same_bits` says no, which elements)."""
    width = f"u{a.dtype.itemsize}"
    return np.ascontiguousarray(a).view(width) != np.ascontiguousarray(b).view(width)


def bit_mismatches(a: np.ndarray, b: np.ndarray) -> int:
    """How many elements of ``a`` and ``b`` differ in their bits."""
    return int(np.sum(differing_bits(a, b)))
