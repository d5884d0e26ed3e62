"""Matrix ops: MatMul, Gemm, Einsum, Trilu.

numpy's float16 matmul accumulates in float32 and rounds once, like onnxruntime's; float16 Gemm
is likewise evaluated in float32 (alpha * A.B + beta * C) and rounded once at the end.
"""

from __future__ import annotations

import numpy as np

from onnxfold.declare import Decline, folder

_MATMUL_DTYPES = tuple(
    np.dtype(t) for t in (np.float16, np.float32, np.float64, np.int32, np.int64)
)


def _check(*xs: np.ndarray) -> None:
    dtype = xs[0].dtype
    if dtype not in _MATMUL_DTYPES or any(x.dtype != dtype for x in xs):
        raise Decline(f"matrix product of {', '.join(str(x.dtype) for x in xs)}")


@folder("MatMul")
def mat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    _check(a, b)
    try:
        return np.asarray(np.matmul(a, b))
    except ValueError as e:
        raise Decline(str(e)) from None


@folder("Gemm", since=7)
def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None, alpha: float = 1.0,
         beta: float = 1.0,
         transA: int = 0, transB: int = 0) -> np.ndarray:  # noqa: N803 - ONNX attribute names
    _check(*(t for t in (a, b, c) if t is not None))
    if a.ndim != 2 or b.ndim != 2:
        raise Decline("Gemm operands must be 2-D")
    dtype = a.dtype
    if dtype.kind in "iu" and (alpha != 1.0 or beta not in (0.0, 1.0)):
        raise Decline("integer Gemm with a fractional alpha or beta")
    acc = np.float32 if dtype == np.float16 else dtype
    a = (a.T if transA else a).astype(acc, copy=False)
    b = (b.T if transB else b).astype(acc, copy=False)
    if a.shape[1] != b.shape[0]:
        raise Decline(f"Gemm shapes {a.shape} and {b.shape}")
    y = np.matmul(a, b)
    if alpha != 1.0:
        y = np.multiply(y, np.asarray(alpha, dtype=acc))
    if c is not None and beta != 0.0:  # onnxruntime ignores C when beta is 0
        cc = c.astype(acc, copy=False)
        cc = cc if beta == 1.0 else np.multiply(cc, np.asarray(beta, dtype=acc))
        try:
            y = np.add(y, np.broadcast_to(cc, y.shape))
        except ValueError as e:
            raise Decline(str(e)) from None
    return y.astype(dtype, copy=False)


@folder("Einsum", since=12)
def einsum(*xs: np.ndarray, equation: str) -> np.ndarray:
    dtype = xs[0].dtype
    if any(x.dtype != dtype for x in xs) or dtype.kind not in "iuf":
        raise Decline("Einsum inputs must share one numeric dtype")
    acc = np.float32 if dtype == np.float16 else dtype  # onnxruntime: float16 via float32
    try:
        out = np.einsum(equation.replace(" ", ""), *(x.astype(acc, copy=False) for x in xs))
    except ValueError as e:
        raise Decline(str(e)) from None
    return np.asarray(out).astype(dtype, copy=False)


@folder("Trilu", since=14)
def trilu(x: np.ndarray, k: np.ndarray | None = None, upper: int = 1) -> np.ndarray:
    if x.ndim < 2:
        raise Decline("Trilu of a tensor of rank < 2")
    kk = 0 if k is None else int(np.asarray(k).reshape(-1)[0])
    return np.triu(x, kk) if upper else np.tril(x, kk)
