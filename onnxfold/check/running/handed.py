"""Arrays the check hands onnxruntime as a session's initializers, and how it hands them.

A constant larger than :data:`HANDED_FROM` bytes is not written into the model the session
loads: its initializer is a placeholder (external data under a name no file has) and the array
is handed over with ``add_external_initializers`` (``runner.NodesModel``, ``held.HeldModel``).
Every array the check gives onnxruntime starts at a multiple of 64 bytes, as a session's own
initializers do (:func:`aligned`): onnxruntime's vectorized reductions sum the elements before
the first aligned address apart, so the same values 4 bytes off give other bits.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
from onnx import helper

# constants at most this large are written into the model; larger ones are handed over
HANDED_FROM = 4096
# dtypes onnxruntime's Python API does not hand over, and the dtype each is carried in
CARRIED = {np.dtype(t): np.dtype(c) for t, c in (
    (ml_dtypes.bfloat16, np.float32), (ml_dtypes.float8_e4m3fn, np.float32),
    (ml_dtypes.float8_e4m3fnuz, np.float32), (ml_dtypes.float8_e5m2, np.float32),
    (ml_dtypes.float8_e5m2fnuz, np.float32), (ml_dtypes.int4, np.int8),
    (ml_dtypes.uint4, np.uint8))}
ALIGNED = 64  # bytes: where onnxruntime's allocator starts every tensor of a session


def handable(array: np.ndarray) -> bool:
    """Whether ``array`` is handed over rather than written into the model: larger than
    :data:`HANDED_FROM`, of numbers onnxruntime's Python API takes as they are."""
    return handable_as(array.dtype, array.nbytes)


def handable_as(dtype: np.dtype, nbytes: int) -> bool:
    """:func:`handable` of an array of ``dtype`` and ``nbytes`` not read yet."""
    return nbytes > HANDED_FROM and dtype.kind in "biuf" and dtype not in CARRIED


def placeholder(name: str, array: np.ndarray) -> onnx.TensorProto:
    """An initializer whose bytes the session options hand over."""
    return placeholder_of(name, array.dtype, array.shape)


def placeholder_of(name: str, dtype: np.dtype, shape: tuple[int, ...]) -> onnx.TensorProto:
    """:func:`placeholder` of an array of ``dtype`` and ``shape`` not read yet."""
    tensor = onnx.TensorProto(name=name, data_type=onnx_type(dtype), dims=shape,
                              data_location=onnx.TensorProto.EXTERNAL)
    tensor.external_data.add(key="location", value=f"onnxfold-check-{name}")
    return tensor


def aligned(array: np.ndarray) -> np.ndarray:
    """``array`` in C order, its shape kept (``np.ascontiguousarray`` makes a scalar 1-d),
    starting at a multiple of :data:`ALIGNED` bytes (see the module; the check's own copy,
    not the fold's)."""
    if array.flags.c_contiguous and (array.ctypes.data % ALIGNED == 0 or
                                     array.dtype.kind == "O"):  # (references: no bytes)
        return array
    if array.dtype.kind == "O":
        return np.array(array, order="C")
    raw = np.empty(array.nbytes + ALIGNED, np.uint8)
    start = -raw.ctypes.data % ALIGNED
    out = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    np.copyto(out, array)
    return out


def onnx_type(dtype: np.dtype) -> int:
    """ONNX's element type of numpy's ``dtype``."""
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
