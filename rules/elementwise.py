"""Elementwise arithmetic, comparison, logic and unary math, computed in the node's own dtype.

numpy's broadcasting is ONNX's multidirectional broadcasting; integer arithmetic wraps as in
onnxruntime's C++ kernels; float16/bfloat16 results are rounded once per op, as the runtime does.
"""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np

from onnxfold.declare import Decline, folder
from onnxfold.ir.dtypes import is_float, np_dtype, onnx_type


def _is_int(x: np.ndarray) -> bool:
    return np.issubdtype(x.dtype, np.integer)


@folder("Add", since=7)
def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.add(a, b)


@folder("Sub", since=7)
def sub(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.subtract(a, b)


@folder("Mul", since=7)
def mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.multiply(a, b)


@folder("Div", since=7)
def div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if not _is_int(a):
        return np.divide(a, b)
    if np.any(b == 0):
        raise Decline("integer division by zero")
    q = np.floor_divide(a, b)
    # C++ truncates toward zero; numpy floors. Fix the quotients of inexact negative divisions.
    fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
    return (q + fix.astype(q.dtype)).astype(np.result_type(a, b))


@folder("Mod", since=10)
def mod(a: np.ndarray, b: np.ndarray, fmod: int = 0) -> np.ndarray:
    if _is_int(a) and np.any(b == 0):
        raise Decline("integer modulo by zero")
    return np.fmod(a, b) if fmod else np.mod(a, b)


@folder("Pow", since=7)
def pow_(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if _is_int(a):
        if np.any(np.asarray(b) < 0):
            raise Decline("integer power with a negative exponent")
        return np.power(a, b.astype(a.dtype))
    return np.power(a, b.astype(a.dtype))


@folder("BitShift", since=11)
def bit_shift(a: np.ndarray, b: np.ndarray, direction: str = "LEFT") -> np.ndarray:
    return np.left_shift(a, b) if direction == "LEFT" else np.right_shift(a, b)


_BINARY = {
    "Equal": np.equal, "Less": np.less, "Greater": np.greater,
    "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal,
    "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor,
    "BitwiseAnd": np.bitwise_and, "BitwiseOr": np.bitwise_or, "BitwiseXor": np.bitwise_xor,
}
BINARY_RULES = tuple(folder(op, since=7)(lambda a, b, fn=fn: fn(a, b))
                     for op, fn in _BINARY.items())

_UNARY = {
    "Abs": np.abs, "Neg": np.negative, "Sqrt": np.sqrt, "Exp": np.exp, "Log": np.log,
    "Floor": np.floor, "Ceil": np.ceil, "Round": np.round,
    "Sin": np.sin, "Cos": np.cos, "Tan": np.tan, "Asin": np.arcsin, "Acos": np.arccos,
    "Atan": np.arctan, "Sinh": np.sinh, "Cosh": np.cosh, "Asinh": np.arcsinh,
    "Acosh": np.arccosh, "Atanh": np.arctanh, "Tanh": np.tanh, "Not": np.logical_not,
    "BitwiseNot": np.invert, "IsNaN": np.isnan,
}
UNARY_RULES = tuple(folder(op, since=6)(lambda x, fn=fn: fn(x)) for op, fn in _UNARY.items())


@folder("Sign", since=9)
def sign(x: np.ndarray) -> np.ndarray:
    """onnxruntime's float16 and bfloat16 kernels compare (NaN is neither above nor below 0:
    its sign is 0, and so is -0.0's: +0.0); float and double keep NaN, as numpy does, double
    with its sign bit cleared."""
    out = np.sign(x)
    if x.dtype.name in ("float16", "bfloat16"):
        out = np.where(np.isnan(x) | (x == 0), np.zeros((), x.dtype), out)
    elif x.dtype == np.float64:
        out = np.where(np.isnan(x), np.abs(x), out)
    return out


@folder("Reciprocal", since=6)
def reciprocal(x: np.ndarray) -> np.ndarray:
    return np.divide(np.ones((), x.dtype), x)


@folder("Relu", since=6)
def relu(x: np.ndarray) -> np.ndarray:
    return np.where(x < 0, np.zeros((), x.dtype), x)  # keeps NaN (and -0.0) as onnxruntime


@folder("Sigmoid", since=6)
def sigmoid(x: np.ndarray) -> np.ndarray:
    one = np.ones((), x.dtype)
    return one / (one + np.exp(-x))


@folder("IsInf", since=10)
def is_inf(x: np.ndarray, detect_negative: int = 1, detect_positive: int = 1) -> np.ndarray:
    return (np.isposinf(x) & bool(detect_positive)) | (np.isneginf(x) & bool(detect_negative))


@folder("Where", since=9)
def where(cond: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """onnxruntime's kernel selects ``a`` where ``cond`` holds and ``b`` elsewhere (zeros in
    the other places of each) and merges the two by taking the first where it is not zero: a
    zero selected from ``a`` comes out as ``+0.0`` whatever its sign (``b``'s are kept)."""
    out = np.where(cond, a, b)
    if is_float(out.dtype):
        positive = np.broadcast_to(cond, out.shape) & (out == 0)
        if positive.any():
            out[positive] = 0
    return out


def _variadic(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    def run(*xs: np.ndarray) -> np.ndarray:
        out = xs[0]
        for x in xs[1:]:
            out = fn(out, x)
        return np.asarray(out)

    return run


maximum = folder("Max", since=8)(_variadic(np.maximum))
minimum = folder("Min", since=8)(_variadic(np.minimum))
sum_ = folder("Sum", since=8)(_variadic(np.add))


@folder("Mean", since=8)
def mean(*xs: np.ndarray) -> np.ndarray:
    total = _variadic(np.add)(*xs)
    return np.divide(total, np.asarray(len(xs), dtype=total.dtype))


@folder("Clip", since=11)
def clip(x: np.ndarray, lo: np.ndarray | None = None, hi: np.ndarray | None = None) -> np.ndarray:
    """A missing bound is the type's lowest or highest finite value, as in onnxruntime: a
    float infinity becomes finite; NaN stays."""
    if x.dtype.kind == "f" or x.dtype.name == "bfloat16":
        info = ml_dtypes.finfo(x.dtype)
        lo = np.asarray(info.min, x.dtype) if lo is None else lo
        hi = np.asarray(info.max, x.dtype) if hi is None else hi
    if lo is not None:
        x = np.maximum(x, lo)
    if hi is not None:
        x = np.minimum(x, hi)
    return np.asarray(x)


@folder("Clip", since=6, until=10)
def clip_v6(x: np.ndarray, min: float = -3.4028234663852886e38,
            max: float = 3.4028234663852886e38) -> np.ndarray:  # the ONNX attribute names
    return np.clip(x, np.asarray(min, x.dtype), np.asarray(max, x.dtype))


@folder("Cast", since=6)
def cast(x: np.ndarray, to: int, saturate: int = 1, round_mode: str = "up") -> np.ndarray:
    dtype = np_dtype(to)
    if x.dtype.kind in "OSU" or dtype.kind in "OSU":
        raise Decline("string casts are left to onnxruntime")
    if (dtype.itemsize == 1 and dtype.kind == "V") or any(
        f in dtype.name for f in ("float8", "float4")
    ):
        raise Decline(f"cast to {dtype.name} is left to onnxruntime")
    if "int4" in dtype.name or "int2" in dtype.name or "float8" in x.dtype.name:
        raise Decline(f"cast between {x.dtype.name} and {dtype.name} is left to onnxruntime")
    if np.issubdtype(dtype, np.integer) and is_float(x.dtype) and x.size:
        wide = x.astype(np.float64)
        if not np.isfinite(wide).all():
            raise Decline("cast of nan/inf to an integer type is implementation-defined")
        info = np.iinfo(dtype)
        if np.trunc(wide).min() < info.min or np.trunc(wide).max() > info.max:
            raise Decline(f"cast of out-of-range values to {dtype.name} is "
                          "implementation-defined")
    return x.astype(dtype)


@folder("CastLike", since=15)
def cast_like(x: np.ndarray, like: np.ndarray, saturate: int = 1,
              round_mode: str = "up") -> np.ndarray:
    return cast(x, onnx_type(like.dtype), saturate)
