"""Matrix ops: MatMul, Gemm, Einsum, Trilu."""

from __future__ import annotations

import numpy as np

from onnxfold.registry import Decline, folder

_MATMUL_DTYPES = tuple(
    np.dtype(t) for t in (np.float16, np.float32, np.float64, np.int32, np.int64)
)


def _check(*xs):
    dtype = xs[0].dtype
    if dtype not in _MATMUL_DTYPES or any(x.dtype != dtype for x in xs):
        raise Decline(f"matrix product of {', '.join(str(x.dtype) for x in xs)}")


@folder("MatMul")
def mat_mul(a, b):
    _check(a, b)
    try:
        return np.matmul(a, b)
    except ValueError as e:
        raise Decline(str(e)) from None


@folder("Gemm", since=7)
def gemm(a, b, c=None, alpha=1.0, beta=1.0, transA=0, transB=0):  # noqa: N803 - ONNX names
    _check(*(t for t in (a, b, c) if t is not None))
    if a.ndim != 2 or b.ndim != 2:
        raise Decline("Gemm operands must be 2-D")
    a = a.T if transA else a
    b = b.T if transB else b
    if a.shape[1] != b.shape[0]:
        raise Decline(f"Gemm shapes {a.shape} and {b.shape}")
    y = np.matmul(a, b)
    if alpha != 1.0:
        y = np.multiply(y, np.asarray(alpha, dtype=y.dtype))
    if c is not None and beta != 0.0:  # onnxruntime ignores C when beta is 0
        cc = c if beta == 1.0 else np.multiply(c, np.asarray(beta, dtype=c.dtype))
        try:
            y = np.add(y, np.broadcast_to(cc, y.shape))
        except ValueError as e:
            raise Decline(str(e)) from None
    return y


@folder("Einsum", since=12)
def einsum(*xs, equation):
    if len({x.dtype for x in xs}) != 1 or xs[0].dtype.kind not in "iuf":
        raise Decline("Einsum inputs must share one numeric dtype")
    try:
        return np.asarray(np.einsum(equation.replace(" ", ""), *xs)).astype(xs[0].dtype, copy=False)
    except ValueError as e:
        raise Decline(str(e)) from None


@folder("Trilu", since=14)
def trilu(x, k=None, upper=1):
    if x.ndim < 2:
        raise Decline("Trilu of a tensor of rank < 2")
    kk = 0 if k is None else int(np.asarray(k).reshape(-1)[0])
    return np.triu(x, kk) if upper else np.tril(x, kk)
