"""Ops that generate tensors from scalars or shapes: Range, ConstantOfShape, EyeLike, OneHot."""

from __future__ import annotations

import math

import numpy as np

from onnxfold.declare import Decline, folder
from onnxfold.ir.dtypes import np_dtype

_ZERO_F32 = np.zeros(1, dtype=np.float32)
_RANGE_DTYPES = tuple(np.dtype(t) for t in (np.float32, np.float64, np.int16, np.int32, np.int64))


@folder("Range", since=11)
def range_(start: np.ndarray, limit: np.ndarray, delta: np.ndarray,
           stash_type: int = 1) -> np.ndarray:
    dtype = start.dtype
    if dtype not in _RANGE_DTYPES:  # float16/bfloat16 (opset 27 stash_type) are left to ORT
        raise Decline(f"Range of {dtype}")
    start, limit, delta = (np.asarray(v, dtype).reshape(()) for v in (start, limit, delta))
    if delta == 0:
        raise Decline("Range with delta 0")
    if dtype.kind == "f":  # onnxruntime: ceil(1.0 * (limit - start) / delta), difference in T
        span = float(limit - start)
    else:
        span = int(limit) - int(start)
        info = np.iinfo(dtype)
        if dtype.itemsize >= 4 and not info.min <= span <= info.max:
            raise Decline("Range: limit - start overflows")
    count = span / float(delta)
    if not math.isfinite(count):
        raise Decline("Range with a non-finite element count")
    n = max(math.ceil(count), 0)
    if n == 0:
        return np.zeros(0, dtype)
    # onnxruntime accumulates (value += delta), which cumsum reproduces in T; in place, so the
    # rule allocates the one output array its size rule counts
    steps = np.full(n, delta, dtype)
    steps[0] = start
    return np.cumsum(steps, dtype=dtype, out=steps)


@folder("ConstantOfShape", since=9)
def constant_of_shape(shape: np.ndarray, value: np.ndarray = _ZERO_F32) -> np.ndarray:
    dims = [int(d) for d in np.asarray(shape).reshape(-1).tolist()]
    if any(d < 0 for d in dims):
        raise Decline(f"negative dimension in {dims}")
    value = np.asarray(value)
    if value.size != 1:
        raise Decline("ConstantOfShape value must have one element")
    return np.full(dims, value.reshape(()), dtype=value.dtype)


@folder("EyeLike", since=9)
def eye_like(x: np.ndarray, dtype: int | None = None, k: int = 0) -> np.ndarray:
    if x.ndim != 2:
        raise Decline("EyeLike of a non-2-D tensor")
    out_dtype = x.dtype if dtype is None else np_dtype(dtype)
    return np.eye(x.shape[0], x.shape[1], k=k, dtype=out_dtype)


@folder("OneHot", since=9)
def one_hot(indices: np.ndarray, depth: np.ndarray, values: np.ndarray,
            axis: int = -1) -> np.ndarray:
    if indices.dtype.kind == "f" and not np.isfinite(indices).all():
        raise Decline("OneHot with non-finite indices")
    if values.size != 2:
        raise Decline("OneHot values must have two elements")
    d = int(np.asarray(depth).reshape(-1)[0])  # float depth truncates, as in onnxruntime
    if d <= 0:
        raise Decline(f"OneHot depth {d}")
    rank = indices.ndim + 1
    if not -rank <= axis < rank:
        raise Decline(f"axis {axis} out of range")
    if indices.dtype.kind == "f" and (indices != np.trunc(indices)).any():
        # onnxruntime < 1.32 selects nothing for a non-integral index, 1.32 truncates it
        raise Decline("OneHot with non-integral float indices")
    idx = indices.astype(np.int64)
    idx = np.where(idx < 0, idx + d, idx)
    hot = np.expand_dims(idx, -1) == np.arange(d)
    hot = np.moveaxis(hot, -1, axis)
    off, on = values.reshape(-1)
    return np.where(hot, on, off)
