"""Small numpy helpers shared by the engine and the backends."""

from __future__ import annotations

import mmap

import numpy as np

try:  # numpy >= 2.0
    from numpy.lib.array_utils import byte_bounds
except ImportError:  # numpy 1.x (the declared minimum is 1.23)
    byte_bounds = np.byte_bounds  # type: ignore[attr-defined]  # noqa: NPY201 - numpy 1.x only


def c_contiguous(arr: np.ndarray) -> np.ndarray:
    """``arr`` in C order, copied only if needed; 0-d arrays stay 0-d.

    (``np.ascontiguousarray`` turns a 0-d array into a 1-d one, which changes its ONNX shape.)
    """
    arr = np.asarray(arr)
    return arr if arr.flags.c_contiguous else copy_c_order(arr)


_STRIP_BYTES = 64  # one cache line of the destination per row
_PACKED_BYTES = 16  # bytes of one packed element of a transposing copy
_TILE = (64, 256)  # packed rows x columns copied at a time: 256 KiB, within a core's L2
_PACKABLE_KINDS = frozenset("biuf")  # plain bytes (no references, no sub-byte values)


def copy_c_order(arr: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Copy ``arr`` into C order (into ``out`` when given), cache-blocked for transposed views.

    When the last axis of ``arr`` is strided in memory (a transposed weight), a plain copy
    touches a new source cache line for every element. Copying strips of the last axis one
    cache line wide keeps the strip's source rows in cache: 2-3x faster on BERT's weights.
    A transpose of the last two axes goes faster still (:func:`_copy_transposed`).
    """
    if out is None:
        out = np.empty(arr.shape, arr.dtype)
    if arr.ndim < 2 or arr.strides[-1] == arr.itemsize or arr.size == 0:
        np.copyto(out, arr)
        return out
    if _copy_transposed(arr, out):
        return out
    width = max(1, _STRIP_BYTES // arr.itemsize)
    for start in range(0, arr.shape[-1], width):
        out[..., start : start + width] = arr[..., start : start + width]
    return out


def _copy_transposed(arr: np.ndarray, out: np.ndarray) -> bool:
    """Copy ``arr``, whose next-to-last axis is the contiguous one in memory (the transpose of
    a weight), into ``out`` by packed tiles; False (nothing copied) where it is not that.

    numpy copies a strided array element by element, so a 2-byte element costs as much as a
    16-byte one. Here ``k`` neighbours along the contiguous axis are moved as one 16-byte
    element (a tile transposed through a buffer that stays in cache), then spread over their
    ``k`` rows of ``out`` with short strides: ~2.5x the strip copy on a float16 weight. Bytes
    move unchanged (views of unsigned integers and raw bytes, never a cast).
    """
    size = arr.itemsize
    k = _PACKED_BYTES // size if _PACKED_BYTES % size == 0 else 1
    rows = arr.shape[-2] // k * k  # the rest (fewer than k rows) is copied in strips
    if (k < 2 or not rows or arr.strides[-2] != size or out.strides[-1] != size
            or arr.dtype.kind not in _PACKABLE_KINDS or out.dtype != arr.dtype):
        return False
    if rows < arr.shape[-2]:
        copy_c_order(arr[..., rows:, :], out[..., rows:, :])
        arr, out = arr[..., :rows, :], out[..., :rows, :]
    word = np.dtype(f"u{size}")
    packed_dtype = np.dtype(f"V{k * size}")
    tile = np.empty(_TILE, packed_dtype)
    for index in np.ndindex(*arr.shape[:-2]):
        packed = arr[index].T.view(packed_dtype).T  # [rows / k, columns] of k-element packs
        spread = out[index].view(word).reshape(rows // k, k, arr.shape[-1])
        for i in range(0, packed.shape[0], _TILE[0]):
            for j in range(0, packed.shape[1], _TILE[1]):
                source = packed[i : i + _TILE[0], j : j + _TILE[1]]
                held = tile[: source.shape[0], : source.shape[1]]
                np.copyto(held, source, casting="no")
                unpacked = held.view(word).reshape(*held.shape, k).transpose(0, 2, 1)
                np.copyto(spread[i : i + _TILE[0], :, j : j + _TILE[1]], unpacked, casting="no")
    return True


ALIGNMENT = 64  # bytes: the alignment onnxruntime's allocator gives every tensor


def aligned(arr: np.ndarray) -> np.ndarray:
    """``arr`` in C order starting at a multiple of :data:`ALIGNMENT` bytes, copied only where
    it is not. onnxruntime's vectorized reductions take the elements before the first aligned
    address apart, so the same values summed from a buffer 4 bytes off give other bits; a
    session holds its initializers aligned, so a value computed for comparison with one (a
    fold, a check) is fed aligned too."""
    arr = np.asarray(arr)
    if arr.flags.c_contiguous and (arr.ctypes.data % ALIGNMENT == 0 or arr.dtype.kind == "O"):
        return arr  # (an array of references has no bytes to align)
    if arr.dtype.kind == "O":
        return c_contiguous(arr)
    out = aligned_bytes(arr.nbytes, ALIGNMENT).view(arr.dtype).reshape(arr.shape)
    if arr.ndim:
        copy_c_order(arr, out)
    else:
        out[()] = arr
    return out


def aligned_bytes(nbytes: int, alignment: int) -> np.ndarray:
    """A new uint8 array of ``nbytes`` (contents undefined) starting at a multiple of
    ``alignment`` bytes (numpy gives 16 or 64)."""
    raw = np.empty(nbytes + alignment, np.uint8)
    start = -raw.ctypes.data % alignment
    return raw[start:start + nbytes]


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
    the mapping goes away; once a weight has been consumed this gives them back at once. Only
    the pages ``arr`` spans are dropped: one mapping holds every weight of a file.
    """
    owner = memory_owner(arr)
    if not isinstance(owner, mmap.mmap) or not hasattr(mmap, "MADV_DONTNEED"):
        return False
    span = mapped_span(arr, owner)
    if span is None:
        return False
    try:
        owner.madvise(mmap.MADV_DONTNEED, *span)
    except (OSError, ValueError):
        return False
    return True


def mapped_span(arr: np.ndarray, owner: mmap.mmap) -> tuple[int, int] | None:
    """(start, length) of the whole pages of ``owner`` that ``arr``'s bytes lie in, or None
    when ``arr`` is empty or the mapping is closed."""
    if arr.size == 0 or owner.closed or len(owner) == 0:
        return None
    base = np.frombuffer(owner, np.uint8, count=1).__array_interface__["data"][0]
    low, high = byte_bounds(arr)
    start = (low - base) // mmap.PAGESIZE * mmap.PAGESIZE
    end = min(high - base, len(owner))
    if start < 0 or end <= start:
        return None
    return start, end - start
