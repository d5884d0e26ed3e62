"""QuantizeLinear / DequantizeLinear, per-tensor and per-axis, 8/16-bit (and int32 input);
QuantizeLinear also to int4/uint4 and with blocked scales (the weights of QDQ models).

Like onnxruntime, float16 scales are applied in float32 and rounded to float16 once at the
end (not a float64 detour); quantization rounds half to even and saturates. Blocked
dequantization, float8 and bfloat16 are declined (onnxruntime folds them).
"""

from __future__ import annotations

import numpy as np

from onnxfold.declare import Decline, folder
from onnxfold.ir.dtypes import np_dtype

_QTYPES = tuple(np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16))
_SCALE_TYPES = (np.dtype(np.float32), np.dtype(np.float16))
_INT4 = {np_dtype(22): (-8, 7), np_dtype(21): (0, 15)}  # INT4, UINT4: (min, max)


def _bounds(dtype: np.dtype) -> tuple[int, int]:
    if dtype in _INT4:
        return _INT4[dtype]
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _blocked(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, axis: int,
             block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Blocked scale and zero point repeated to x's shape (or Decline)."""
    if zero_point is not None and zero_point.shape != scale.shape:
        raise Decline("scale and zero point shapes differ")
    if block_size < 0 or scale.ndim != x.ndim or not -x.ndim <= axis < x.ndim:
        raise Decline("invalid blocked quantization")
    axis %= x.ndim
    blocks = -(-x.shape[axis] // block_size)
    if scale.shape != tuple(blocks if i == axis else d for i, d in enumerate(x.shape)):
        raise Decline(f"blocked scale {scale.shape} for {x.shape} by {block_size}")

    def expand(a: np.ndarray) -> np.ndarray:
        return np.repeat(a, block_size, axis=axis)[
            tuple(slice(0, d) if i == axis else slice(None) for i, d in enumerate(x.shape))]

    zp = np.zeros((), np.int32) if zero_point is None else expand(zero_point.astype(np.int32))
    return expand(scale), zp


def _per_axis(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None,
              axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Scale and zero point reshaped to broadcast against x (or Decline)."""
    if zero_point is not None and zero_point.shape != scale.shape:
        raise Decline("scale and zero point shapes differ")
    shape: tuple[int, ...] = ()  # one scale: a scalar
    if scale.size != 1:
        if scale.ndim != 1 or not -x.ndim <= axis < x.ndim:
            raise Decline("blocked quantization or invalid axis")
        axis %= x.ndim
        if scale.shape[0] != x.shape[axis]:
            raise Decline(f"{scale.shape[0]} scales for dimension {x.shape[axis]}")
        shape = tuple(-1 if i == axis else 1 for i in range(x.ndim))
    zp = np.zeros((), np.int32) if zero_point is None else zero_point.reshape(shape)
    return scale.reshape(shape), zp.astype(np.int32)


@folder("DequantizeLinear", since=10)
def dequantize_linear(x: np.ndarray, x_scale: np.ndarray, x_zero_point: np.ndarray | None = None,
                      axis: int = 1, block_size: int = 0, output_dtype: int = 0) -> np.ndarray:
    if block_size:
        raise Decline("blocked dequantization")
    if x.dtype not in (*_QTYPES, np.dtype(np.int32)):
        raise Decline(f"dequantization of {x.dtype}")
    if x_scale.dtype not in _SCALE_TYPES:
        raise Decline(f"scale of {x_scale.dtype}")
    if output_dtype and np_dtype(output_dtype) != x_scale.dtype:
        raise Decline("output_dtype differs from the scale dtype")
    if x_zero_point is not None and x_zero_point.dtype != x.dtype:
        raise Decline("zero point dtype differs from x")
    scale, zp = _per_axis(x, x_scale, x_zero_point, axis)
    diff = np.subtract(x.astype(np.int32), zp)  # int32 arithmetic, wrapping as in onnxruntime
    y = np.multiply(diff.astype(np.float32), scale.astype(np.float32, copy=False))
    return y.astype(x_scale.dtype, copy=False)


@folder("QuantizeLinear", since=10)
def quantize_linear(x: np.ndarray, y_scale: np.ndarray, y_zero_point: np.ndarray | None = None,
                    axis: int = 1, saturate: int = 1, block_size: int = 0, output_dtype: int = 0,
                    precision: int = 0) -> np.ndarray:
    if precision:
        raise Decline("QuantizeLinear precision attribute")
    if x.dtype not in _SCALE_TYPES or y_scale.dtype != x.dtype:
        raise Decline(f"quantization of {x.dtype} with a {y_scale.dtype} scale")
    out = y_zero_point.dtype if y_zero_point is not None else np.dtype(np.uint8)
    if output_dtype:
        if y_zero_point is not None and np_dtype(output_dtype) != out:
            raise Decline("output_dtype differs from the zero point dtype")
        out = np_dtype(output_dtype)
    if out not in _QTYPES and out not in _INT4:
        raise Decline(f"quantization to {out}")
    if not np.isfinite(x).all():
        raise Decline("quantization of nan/inf is implementation-defined")
    if block_size:
        scale, zp = _blocked(x, y_scale, y_zero_point, axis, block_size)
    else:
        scale, zp = _per_axis(x, y_scale, y_zero_point, axis)
    if not (np.isfinite(scale).all() and (scale != 0).all()):
        raise Decline("zero or non-finite scale")
    # float16 is divided in float32 as in onnxruntime; rint rounds half to even
    q = np.rint(np.divide(x.astype(np.float32, copy=False), scale.astype(np.float32)))
    bound = np.float32(2**20)  # beyond every 16-bit range, exact in float32
    q = np.clip(q, -bound, bound).astype(np.int32) + zp
    low, high = _bounds(out)
    return np.clip(q, low, high).astype(out)
