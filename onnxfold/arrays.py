"""Small numpy helpers shared by the engine and the backends."""

from __future__ import annotations

import mmap

import numpy as np


def c_contiguous(arr: np.ndarray) -> np.ndarray:
    """``arr`` in C order, copied only if needed; 0-d arrays stay 0-d.

    (``np.ascontiguousarray`` turns a 0-d array into a 1-d one, which changes its ONNX shape.)
    """
    arr = np.asarray(arr)
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


def memory_owner(arr: np.ndarray) -> object:
    """The object that owns ``arr``'s memory: the root ndarray, or a buffer (mmap, bytes)."""
    base = arr
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    if isinstance(base, memoryview) and base.obj is not None:
        return base.obj
    return base


def release_pages(arr: np.ndarray) -> bool:
    """Drop the resident pages of the file mapping behind ``arr`` (they re-read on access).

    Reading a memory-mapped weight makes its pages part of the process's resident set until
    the mapping goes away; once a weight has been consumed this gives them back at once.
    """
    owner = memory_owner(arr)
    if isinstance(owner, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
        try:
            owner.madvise(mmap.MADV_DONTNEED)
        except (OSError, ValueError):
            return False
        return True
    return False
