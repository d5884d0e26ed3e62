"""Data movement and shape ops: results are numpy views of the input wherever numpy gives views.

Shape arguments arrive as int64 (or int32) tensors and are read with ``.tolist()`` so that
sentinels such as INT64_MAX never overflow. Invalid nodes (out-of-range indices, bad axes)
are declined: onnxruntime then reports the error the way it does at run time.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from onnxfold.declare import Decline, folder
from onnxfold.ir.slicing import onnx_slice


def _ints(x: np.ndarray | list[int]) -> list[int]:
    """An int list from a tensor input or a list attribute."""
    return [int(v) for v in np.asarray(x).reshape(-1).tolist()]


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise Decline(f"axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _axes(axes: np.ndarray | list[int], rank: int) -> list[int]:
    out = [_axis(a, rank) for a in _ints(axes)]
    if len(set(out)) != len(out):
        raise Decline(f"repeated axes {out}")
    return out


@folder("Identity")
def identity(x: np.ndarray) -> np.ndarray:
    return x


@folder("Transpose")
def transpose(x: np.ndarray, perm: list[int] | None = None) -> np.ndarray:
    if perm is not None and sorted(perm) != list(range(x.ndim)):
        raise Decline(f"invalid perm {perm} for rank {x.ndim}")
    return np.transpose(x, perm)


@folder("Reshape", since=5)
def reshape(x: np.ndarray, shape: np.ndarray, allowzero: int = 0) -> np.ndarray:
    dims = _ints(shape)
    if not allowzero:
        if len(dims) > x.ndim and any(d == 0 for d in dims[x.ndim :]):
            raise Decline("0 in shape beyond the input rank")
        dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
    if dims.count(-1) > 1 or any(d < -1 for d in dims):
        raise Decline(f"invalid shape {dims}")
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        if known == 0 or x.size % known:
            raise Decline(f"cannot infer -1 reshaping {x.shape} to {dims}")
        dims[dims.index(-1)] = x.size // known
    if math.prod(dims) != x.size:
        raise Decline(f"cannot reshape {x.shape} to {dims}")
    return x.reshape(dims)


@folder("Flatten")
def flatten(x: np.ndarray, axis: int = 1) -> np.ndarray:
    if not -x.ndim <= axis <= x.ndim:
        raise Decline(f"axis {axis} out of range for rank {x.ndim}")
    axis = axis + x.ndim if axis < 0 else axis
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


def _squeeze(x: np.ndarray, axes: np.ndarray | list[int] | None) -> np.ndarray:
    if axes is None or len(_ints(axes)) == 0:
        return x.reshape([d for d in x.shape if d != 1])
    axes = _axes(axes, x.ndim)
    if any(x.shape[a] != 1 for a in axes):
        raise Decline(f"cannot squeeze axes {axes} of shape {x.shape}")
    return np.squeeze(x, tuple(axes))


@folder("Squeeze", since=1, until=12)
def squeeze_v1(x: np.ndarray, axes: list[int] | None = None) -> np.ndarray:
    return _squeeze(x, axes)


@folder("Squeeze", since=13)
def squeeze(x: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
    return _squeeze(x, axes)


def _unsqueeze(x: np.ndarray, axes: np.ndarray | list[int]) -> np.ndarray:
    axes = _axes(axes, x.ndim + len(_ints(axes)))
    return np.expand_dims(x, tuple(axes))


@folder("Unsqueeze", since=1, until=12)
def unsqueeze_v1(x: np.ndarray, axes: list[int]) -> np.ndarray:
    return _unsqueeze(x, axes)


@folder("Unsqueeze", since=13)
def unsqueeze(x: np.ndarray, axes: np.ndarray) -> np.ndarray:
    return _unsqueeze(x, axes)


@folder("Concat", since=4)
def concat(*xs: np.ndarray, axis: int) -> np.ndarray:
    if len({x.dtype for x in xs}) != 1 or len({x.ndim for x in xs}) != 1:
        raise Decline("inputs differ in dtype or rank")
    try:
        return np.concatenate(xs, axis=_axis(axis, xs[0].ndim))
    except ValueError as e:
        raise Decline(str(e)) from None


def _split(x: np.ndarray, sizes: list[int], axis: int) -> tuple[np.ndarray, ...]:
    axis = _axis(axis, x.ndim)
    if any(s < 0 for s in sizes) or sum(sizes) != x.shape[axis]:
        raise Decline(f"split {sizes} does not cover dimension {x.shape[axis]}")
    return tuple(np.split(x, np.cumsum(sizes)[:-1].tolist(), axis=axis))


@folder("Split", since=2, until=12)
def split_v2(x: np.ndarray, split: list[int] | np.ndarray | None = None,
             axis: int = 0) -> tuple[np.ndarray, ...]:
    if split is None:
        raise Decline("equal split: the number of outputs is not known to the rule")
    return _split(x, _ints(split), axis)


@folder("Split", since=13, until=17)
def split_v13(x: np.ndarray, split: np.ndarray | None = None,
              axis: int = 0) -> tuple[np.ndarray, ...]:
    return split_v2(x, split, axis)


@folder("Split", since=18)
def split(x: np.ndarray, split: np.ndarray | None = None, axis: int = 0,
          num_outputs: int | None = None) -> tuple[np.ndarray, ...]:
    if split is not None:
        return _split(x, _ints(split), axis)
    if num_outputs is None:
        raise Decline("neither split nor num_outputs")
    dim = x.shape[_axis(axis, x.ndim)]
    chunk = -(-dim // num_outputs)
    last = dim - chunk * (num_outputs - 1)
    if last <= 0:  # onnxruntime rejects splits that leave an output empty
        raise Decline(f"cannot split {dim} into {num_outputs} chunks of {chunk}")
    return _split(x, [chunk] * (num_outputs - 1) + [last], axis)


def _slice(x: np.ndarray, starts: np.ndarray | list[int], ends: np.ndarray | list[int],
           axes: np.ndarray | list[int] | None, steps: np.ndarray | None) -> np.ndarray:
    first, last = _ints(starts), _ints(ends)
    axis_list = list(range(len(first))) if axes is None else _axes(axes, x.ndim)
    step_list = [1] * len(first) if steps is None else _ints(steps)
    if not len(first) == len(last) == len(axis_list) == len(step_list):
        raise Decline("starts, ends, axes and steps differ in length")
    index = [slice(None)] * x.ndim
    for start, end, axis, step in zip(first, last, axis_list, step_list):
        if step == 0:
            raise Decline("slice step 0")
        index[axis] = onnx_slice(start, end, step, x.shape[axis])
    return x[tuple(index)]


@folder("Slice", since=1, until=9)
def slice_v1(x: np.ndarray, starts: list[int], ends: list[int],
             axes: list[int] | None = None) -> np.ndarray:
    return _slice(x, starts, ends, axes, None)


@folder("Slice", since=10)
def slice_(x: np.ndarray, starts: np.ndarray, ends: np.ndarray, axes: np.ndarray | None = None,
           steps: np.ndarray | None = None) -> np.ndarray:
    return _slice(x, starts, ends, axes, steps)


def _check_indices(indices: np.ndarray, dim: int) -> None:
    if indices.size and (indices.min() < -dim or indices.max() >= dim):
        raise Decline(f"index out of range [-{dim}, {dim})")


@folder("Gather")
def gather(x: np.ndarray, indices: np.ndarray, axis: int = 0) -> np.ndarray:
    axis = _axis(axis, x.ndim)
    _check_indices(indices, x.shape[axis])
    return np.take(x, indices.astype(np.int64, copy=False), axis=axis)


@folder("GatherElements", since=11)
def gather_elements(x: np.ndarray, indices: np.ndarray, axis: int = 0) -> np.ndarray:
    axis = _axis(axis, x.ndim)
    if indices.ndim != x.ndim:
        raise Decline("indices rank differs from data rank")
    _check_indices(indices, x.shape[axis])
    idx = indices.astype(np.int64)
    idx[idx < 0] += x.shape[axis]
    if any(i > n for d, (i, n) in enumerate(zip(idx.shape, x.shape)) if d != axis):
        raise Decline("indices larger than data outside the gather axis")
    # outside the axis, indices may be smaller than the data: read only the covered corner
    corner = tuple(slice(None) if d == axis else slice(0, n) for d, n in enumerate(idx.shape))
    return np.take_along_axis(x[corner], idx, axis=axis)


@folder("GatherND", since=11)
def gather_nd(x: np.ndarray, indices: np.ndarray, batch_dims: int = 0) -> np.ndarray:
    b, k = batch_dims, indices.shape[-1] if indices.ndim else 0
    if indices.ndim < 1 or not 1 <= k <= x.ndim - b or x.shape[:b] != indices.shape[:b]:
        raise Decline(f"unsupported GatherND shapes {x.shape} {indices.shape} batch_dims={b}")
    for j in range(k):
        _check_indices(indices[..., j], x.shape[b + j])
    batch = math.prod(x.shape[:b])
    data = x.reshape(batch, *x.shape[b:])
    idx = indices.reshape(batch, *indices.shape[b:])
    rows = np.arange(batch).reshape((batch,) + (1,) * (idx.ndim - 2))
    index = (rows, *np.moveaxis(idx, -1, 0))  # not inline: mypy reads x[(a, *b)] as 3.11 syntax
    out = data[index]
    return out.reshape(indices.shape[:-1] + x.shape[b + k :])


@folder("Expand", since=8)
def expand(x: np.ndarray, shape: np.ndarray) -> np.ndarray:
    try:
        out_shape = np.broadcast_shapes(x.shape, tuple(_ints(shape)))
    except ValueError as e:
        raise Decline(str(e)) from None
    return np.broadcast_to(x, out_shape)


@folder("Tile", since=6)
def tile(x: np.ndarray, repeats: np.ndarray) -> np.ndarray:
    reps = _ints(repeats)
    if len(reps) != x.ndim or any(r < 0 for r in reps):
        raise Decline(f"invalid repeats {reps} for rank {x.ndim}")
    return np.tile(x, reps)


@folder("Shape", until=14, shape_only=True)
def shape_v1(shape: tuple[int, ...]) -> np.ndarray:
    return np.array(shape, dtype=np.int64)


@folder("Shape", since=15, shape_only=True)
def shape_(shape: tuple[int, ...], start: int = 0, end: int | None = None) -> np.ndarray:
    rank = len(shape)
    end = rank if end is None else end
    start, end = (min(max(v + rank if v < 0 else v, 0), rank) for v in (start, end))
    return np.array(shape[start:end], dtype=np.int64)


@folder("Size", shape_only=True)
def size(shape: tuple[int, ...]) -> np.ndarray:
    count = math.prod(shape)
    if count > np.iinfo(np.int64).max:  # a shape inferred from a huge constant target
        raise Decline(f"{count} elements: more than int64 holds")
    return np.array(count, dtype=np.int64)


_NP_PAD_MODE: dict[str, Literal["constant", "reflect", "edge", "wrap"]] = {
    "constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


def _pad(x: np.ndarray, pads: list[int], mode: str, value: np.ndarray,
         axes: np.ndarray | None = None) -> np.ndarray:
    if mode not in _NP_PAD_MODE:
        raise Decline(f"pad mode {mode}")
    axis_list = list(range(x.ndim)) if axes is None else _axes(axes, x.ndim)
    if len(pads) != 2 * len(axis_list):
        raise Decline(f"{len(pads)} pads for {len(axis_list)} axes")
    before, after = [0] * x.ndim, [0] * x.ndim
    for i, a in enumerate(axis_list):
        before[a], after[a] = pads[i], pads[i + len(axis_list)]
    # negative pads crop first (as onnxruntime does), then the rest is padded
    if any(d + min(b, 0) + min(e, 0) < 0 for d, b, e in zip(x.shape, before, after)):
        raise Decline("negative pads remove more than the dimension")
    x = x[tuple(slice(-min(b, 0), d + min(e, 0)) for d, b, e in zip(x.shape, before, after))]
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(before, after)]
    for dim, (b, e) in zip(x.shape, widths):
        if b == e == 0:
            continue
        if mode == "reflect" and (b >= dim or e >= dim):
            raise Decline(f"reflect pad {b},{e} not below dimension {dim}")
        if mode in ("edge", "wrap") and dim == 0:
            raise Decline(f"{mode} pad of an empty dimension")
    if mode == "constant":
        return np.pad(x, widths, mode="constant", constant_values=value)
    return np.pad(x, widths, mode=_NP_PAD_MODE[mode])


@folder("Pad", since=2, until=10)
def pad_v2(x: np.ndarray, pads: list[int], mode: str = "constant",
           value: float = 0.0) -> np.ndarray:
    return _pad(x, list(pads), mode, np.asarray(value).astype(x.dtype))


@folder("Pad", since=11)
def pad(x: np.ndarray, pads: np.ndarray, constant_value: np.ndarray | None = None,
        axes: np.ndarray | None = None, mode: str = "constant") -> np.ndarray:
    value = np.zeros((), x.dtype) if constant_value is None else constant_value.reshape(())
    return _pad(x, _ints(pads), mode, value, axes)


@folder("Compress", since=9)
def compress(x: np.ndarray, condition: np.ndarray, axis: int | None = None) -> np.ndarray:
    if axis is None:
        x, axis = x.reshape(-1), 0
    axis = _axis(axis, x.ndim)
    # onnxruntime ignores condition entries beyond the dimension
    return np.compress(condition.reshape(-1)[: x.shape[axis]].astype(bool), x, axis=axis)


@folder("NonZero", since=9)
def non_zero(x: np.ndarray) -> np.ndarray:
    return np.array(np.nonzero(x.reshape(-1) if x.ndim == 0 else x), dtype=np.int64)


@folder("Unique", since=11)
def unique(x: np.ndarray, axis: int | None = None,
           sorted: int = 1) -> tuple[np.ndarray, ...]:  # the ONNX attribute name
    if axis is not None:
        raise Decline("Unique along an axis")
    if x.dtype.kind == "f" and np.isnan(x).any():
        raise Decline("Unique with NaN")
    if x.dtype.kind in "OSU":
        raise Decline("Unique of strings")
    flat = x.reshape(-1)
    values, first, inverse, counts = np.unique(
        flat, return_index=True, return_inverse=True, return_counts=True
    )
    if not sorted:  # order of first occurrence
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        values, first, counts, inverse = values[order], first[order], counts[order], rank[inverse]
    i64 = np.int64
    return values, first.astype(i64), inverse.reshape(-1).astype(i64), counts.astype(i64)
