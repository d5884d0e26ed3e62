"""Reductions (Reduce*, ArgMax/ArgMin, CumSum).

``axes`` is an attribute up to ReduceSum-12 / Reduce*-17 and an optional input afterwards; the
same rule serves both since both arrive as the second argument. An empty axes list with
``noop_with_empty_axes`` reduces over no axis: the non-reduction steps still apply (ReduceL1
returns abs(x)), which numpy reproduces with ``axis=()``.

Like onnxruntime, float16/bfloat16 are accumulated in float32 and rounded once at the end
(checked bitwise against it); float32/float64 accumulate in their own type. Integer sums and
products are exact in onnxruntime and saturate on overflow, so an overflowing integer
reduction is declined (the overflow is detected on a float64 estimate).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from onnxfold.declare import Decline, folder

_HALF = ("float16", "bfloat16")
Reducer = Callable[[np.ndarray, tuple[int, ...], int], np.ndarray]  # (x, axes, keepdims)
Estimate = Callable[[np.ndarray, tuple[int, ...]], Any]  # a float64 result, for overflow


def _norm_axes(x: np.ndarray, axes: np.ndarray | list[int] | None,
               noop_with_empty_axes: int) -> tuple[int, ...]:
    axes = [] if axes is None else [int(a) for a in np.asarray(axes).reshape(-1).tolist()]
    if not axes:
        return () if noop_with_empty_axes else tuple(range(x.ndim))
    rank = max(x.ndim, 1)
    if any(not -rank <= a < rank for a in axes):
        raise Decline(f"axes {axes} out of range for rank {x.ndim}")
    out = tuple(sorted({a % rank for a in axes}))
    if x.ndim == 0:
        return ()
    if len(out) != len(axes):
        raise Decline(f"repeated axes {axes}")
    return out


def _count(x: np.ndarray, axes: tuple[int, ...]) -> int:
    return math.prod(x.shape[a] for a in axes)


def _float_only(x: np.ndarray, op: str) -> None:
    if x.dtype.kind != "f" and x.dtype.name != "bfloat16":
        raise Decline(f"{op} of {x.dtype} (onnxruntime's integer rounding is not reproduced)")


def _sum(x: np.ndarray, ax: tuple[int, ...], keepdims: int) -> np.ndarray:
    return np.sum(x, axis=ax, dtype=x.dtype, keepdims=bool(keepdims))


def _reduce_sum(x: np.ndarray, ax: tuple[int, ...], keepdims: int) -> np.ndarray:
    return _sum(x, ax, keepdims)


def _reduce_sum_square(x: np.ndarray, ax: tuple[int, ...], keepdims: int) -> np.ndarray:
    return _sum(np.multiply(x, x), ax, keepdims)


def _reduce_l1(x: np.ndarray, ax: tuple[int, ...], keepdims: int) -> np.ndarray:
    return _sum(np.abs(x), ax, keepdims)


def _reduce_l2(x: np.ndarray, ax: tuple[int, ...], keepdims: int) -> np.ndarray:
    _float_only(x, "ReduceL2")
    return np.sqrt(_sum(np.multiply(x, x), ax, keepdims))


def _reduce_log_sum(x: np.ndarray, ax: tuple[int, ...], keepdims: int) -> np.ndarray:
    _float_only(x, "ReduceLogSum")
    return np.log(_sum(x, ax, keepdims))


def _reduce_log_sum_exp(x: np.ndarray, ax: tuple[int, ...], keepdims: int) -> np.ndarray:
    _float_only(x, "ReduceLogSumExp")
    if not np.isfinite(x).all():  # its kernel: [inf, NaN] is inf, [NaN, inf] NaN, and
        # [-inf, -1e4] is -inf: not what a maximum subtracted gives
        raise Decline("onnxruntime's ReduceLogSumExp of an infinity or NaN is left to it")
    top = np.max(x, axis=ax, keepdims=True, initial=-np.inf)
    top = np.where(np.isfinite(top), top, np.zeros((), x.dtype))
    total = _sum(np.exp(x - top), ax, keepdims=True)
    out = np.log(total) + top
    return out if keepdims else np.squeeze(out, ax)


def _reduce_prod(x: np.ndarray, ax: tuple[int, ...], keepdims: int) -> np.ndarray:
    return np.prod(x, axis=ax, dtype=x.dtype, keepdims=bool(keepdims))


def _reduce_mean(x: np.ndarray, ax: tuple[int, ...], keepdims: int) -> np.ndarray:
    n = _count(x, ax)
    if n == 0:
        raise Decline("mean over an empty set is undefined")
    total = _sum(x, ax, keepdims)
    count = np.asarray(n, dtype=x.dtype)
    if x.dtype.kind not in "iu":
        return np.divide(total, count)
    q = np.floor_divide(total, count)  # onnxruntime divides in T: truncate toward zero
    return np.where((q < 0) & (q * count != total), q + 1, q).astype(x.dtype)


def _extremum(fn: Callable[..., np.ndarray]) -> Reducer:
    def run(x: np.ndarray, ax: tuple[int, ...], keepdims: int) -> np.ndarray:
        if _count(x, ax) == 0:
            raise Decline("max/min over an empty set")
        if x.dtype.kind == "f" and np.isnan(x).any():
            raise Decline("onnxruntime's max/min skip NaN depending on position")
        return fn(x, axis=ax, keepdims=bool(keepdims))

    return run


_REDUCERS = {  # op: (reducer, opset where axes became an input, integer estimate or None)
    "ReduceSum": (_reduce_sum, 13, lambda f, ax: np.sum(f, axis=ax)),
    "ReduceSumSquare": (_reduce_sum_square, 18, lambda f, ax: np.sum(f * f, axis=ax)),
    "ReduceL1": (_reduce_l1, 18, lambda f, ax: np.sum(np.abs(f), axis=ax)),
    "ReduceL2": (_reduce_l2, 18, None),
    "ReduceLogSum": (_reduce_log_sum, 18, None),
    "ReduceLogSumExp": (_reduce_log_sum_exp, 18, None),
    "ReduceProd": (_reduce_prod, 18, lambda f, ax: np.prod(f, axis=ax)),
    "ReduceMean": (_reduce_mean, 18, lambda f, ax: np.sum(f, axis=ax)),
    "ReduceMax": (_extremum(np.max), 18, None),
    "ReduceMin": (_extremum(np.min), 18, None),
}


_EXACT_IN_DOUBLE = 2.0**53


def _check_int_overflow(x: np.ndarray, ax: tuple[int, ...], estimate: Estimate | None,
                        exact: bool = False) -> None:
    if estimate is None or x.dtype.kind not in "iu" or x.size == 0:
        return
    approx = estimate(x.astype(np.float64), ax)
    info = np.iinfo(x.dtype)
    if approx.max(initial=0) >= info.max * 0.9999 or approx.min(initial=0) <= info.min * 0.9999:
        raise Decline("integer reduction overflows (onnxruntime saturates)")
    if not exact and x.dtype.itemsize == 8 and (np.abs(approx).max(initial=0) >= _EXACT_IN_DOUBLE or
                                  np.abs(x.astype(np.float64)).max() >= _EXACT_IN_DOUBLE):
        # onnxruntime reduces 64-bit integers through double: beyond 2**53 it rounds
        raise Decline("64-bit integer reduction beyond 2**53 (onnxruntime rounds through double)")


def _log_sum_exp_as_its_function(x: np.ndarray, ax: tuple[int, ...], keepdims: int) -> np.ndarray:
    """ReduceLogSumExp-18's function body: exp in double without subtracting the maximum.
    onnxruntime has no float16/bfloat16 kernel and runs this body in a model of opset 18 only
    (a large value gives inf there); at other opsets it casts to float32 for its kernel (a
    large value gives a number)."""
    with np.errstate(over="ignore", divide="ignore"):
        return np.log(np.sum(np.exp(x.astype(np.float64)), axis=ax, keepdims=bool(keepdims)))


# float16/bfloat16 results onnxruntime computes one way or another depending on the model's
# opset, which a rule does not see: where the two ways differ the rule declines (and the
# onnxruntime fallback folds the node at the model's opset); such a rule takes its float16
# input as it is (``half_as_given``)
_HALF_BY_OPSET = {"ReduceLogSumExp": _log_sum_exp_as_its_function}


def _make(reducer: Reducer, estimate: Estimate | None,
          other_way: Reducer | None = None) -> Callable[..., np.ndarray]:
    exact = reducer in (_REDUCERS["ReduceMax"][0], _REDUCERS["ReduceMin"][0])

    def rule(x: np.ndarray, axes: np.ndarray | list[int] | None = None, keepdims: int = 1,
             noop_with_empty_axes: int = 0) -> np.ndarray:
        ax = _norm_axes(x, axes, noop_with_empty_axes)
        _check_int_overflow(x, ax, estimate, exact)
        if x.dtype.name in _HALF and not exact:
            out = np.asarray(reducer(x.astype(np.float32), ax, keepdims)).astype(x.dtype)
            if other_way is not None and not np.array_equal(
                    out, np.asarray(other_way(x, ax, keepdims)).astype(x.dtype),
                    equal_nan=True):
                raise Decline("onnxruntime computes this differently at different opsets")
            return out
        return np.asarray(reducer(x, ax, keepdims))

    return rule


# axes is an attribute before `input_since` and an optional input from it on
REDUCE_RULES = tuple(
    rule for op, (reducer, input_since, estimate) in _REDUCERS.items()
    for rule in (folder(op, since=1, until=input_since - 1)(_make(reducer, estimate)),
                 folder(op, since=input_since, half_as_given=op in _HALF_BY_OPSET)(
                     _make(reducer, estimate, _HALF_BY_OPSET.get(op)))))


def _arg(fn: Callable[..., np.ndarray], x: np.ndarray, axis: int, keepdims: int,
         select_last_index: int) -> np.ndarray:
    if x.ndim == 0:
        raise Decline("arg-reduction of a scalar")
    if not -x.ndim <= axis < x.ndim:
        raise Decline(f"axis {axis} out of range")
    axis %= x.ndim
    if x.shape[axis] == 0:
        raise Decline("arg-reduction over an empty axis")
    if x.dtype.kind == "f" and np.isnan(x).any():
        raise Decline("onnxruntime's ArgMax/ArgMin skip NaN depending on position")
    if select_last_index:
        out = x.shape[axis] - 1 - fn(np.flip(x, axis), axis=axis, keepdims=bool(keepdims))
    else:
        out = fn(x, axis=axis, keepdims=bool(keepdims))
    return np.asarray(out, dtype=np.int64)


@folder("ArgMax")
def arg_max(x: np.ndarray, axis: int = 0, keepdims: int = 1,
            select_last_index: int = 0) -> np.ndarray:
    return _arg(np.argmax, x, axis, keepdims, select_last_index)


@folder("ArgMin")
def arg_min(x: np.ndarray, axis: int = 0, keepdims: int = 1,
            select_last_index: int = 0) -> np.ndarray:
    return _arg(np.argmin, x, axis, keepdims, select_last_index)


@folder("CumSum", since=11)
def cum_sum(x: np.ndarray, axis: np.ndarray, exclusive: int = 0, reverse: int = 0) -> np.ndarray:
    if x.ndim == 0:
        raise Decline("CumSum of a scalar")
    ax = int(np.asarray(axis).reshape(-1)[0])
    if not -x.ndim <= ax < x.ndim:
        raise Decline(f"axis {ax} out of range")
    ax %= x.ndim
    y = np.flip(x, ax) if reverse else x
    # float16/bfloat16 accumulate in float32, as in onnxruntime; integers wrap
    acc = np.float32 if x.dtype.name in _HALF else x.dtype
    out = np.cumsum(y, axis=ax, dtype=acc).astype(x.dtype, copy=False)
    if exclusive:  # shift by one along the axis, starting from 0
        along = (slice(None),) * ax
        out = np.concatenate(
            [np.zeros_like(out[(*along, slice(0, 1))]), out[(*along, slice(0, -1))]], axis=ax
        )
    return np.flip(out, ax) if reverse else out
