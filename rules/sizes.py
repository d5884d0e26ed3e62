"""How many bytes an op's outputs take, from its constant inputs, before it is evaluated.

The fold pass checks every node's outputs against the pool budget *before* allocating them;
static shapes answer that for most nodes, these rules for the ops whose output size depends on
their input values (the expanding ops, and shapes not yet inferred). Each takes the input
arrays and attributes like a folder and returns a byte count (an upper bound is fine; it
includes a folder's own temporaries where they are as large as the output).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from onnxfold.declare import output_bytes

from .op_groups import BROADCASTING


def _ints(x: np.ndarray | list[int]) -> list[int]:
    return [int(v) for v in np.asarray(x).reshape(-1).tolist()]


def _itemsize(*xs: np.ndarray | None) -> int:
    return max((x.dtype.itemsize for x in xs if x is not None), default=8)


def _broadcast_elements(*shapes: Sequence[int]) -> int:
    rank = max((len(s) for s in shapes), default=0)
    dims = [1] * rank
    for shape in shapes:
        for i, d in enumerate(shape, rank - len(shape)):
            dims[i] = max(dims[i], int(d))
    return math.prod(dims)


@output_bytes(BROADCASTING)
def broadcasting(*xs: np.ndarray | None, **_attrs: object) -> int:
    present = [x for x in xs if x is not None]
    return _broadcast_elements(*(x.shape for x in present)) * _itemsize(*present)


@output_bytes("ConstantOfShape")
def constant_of_shape(shape: np.ndarray, value: np.ndarray | None = None) -> int:
    itemsize = np.asarray(value).dtype.itemsize if value is not None else 4
    return math.prod(max(d, 0) for d in _ints(shape)) * itemsize


@output_bytes("Tile")
def tile(x: np.ndarray, repeats: np.ndarray) -> int:
    return x.nbytes * math.prod(max(r, 0) for r in _ints(repeats))


@output_bytes("Expand")
def expand(x: np.ndarray, shape: np.ndarray) -> int:
    return _broadcast_elements(x.shape, _ints(shape)) * x.dtype.itemsize


@output_bytes("Range")
def range_(start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> int:
    try:
        count = math.ceil((float(np.asarray(limit).reshape(-1)[0]) -
                           float(np.asarray(start).reshape(-1)[0])) /
                          float(np.asarray(delta).reshape(-1)[0]))
    except (ZeroDivisionError, OverflowError, ValueError):
        return 0  # the folder declines these
    return max(count, 0) * start.dtype.itemsize


@output_bytes("Pad")
def pad(x: np.ndarray, pads: np.ndarray | None = None, *_rest: np.ndarray | None,
        **attrs: Any) -> int:
    amounts = _ints(pads if pads is not None else attrs.get("pads", []))
    if len(amounts) != 2 * x.ndim:
        return x.nbytes
    return math.prod(max(d + a + b, 0) for d, a, b in
                     zip(x.shape, amounts[:x.ndim], amounts[x.ndim:])) * x.dtype.itemsize


@output_bytes("OneHot")
def one_hot(indices: np.ndarray, depth: np.ndarray, values: np.ndarray, **_attrs: object) -> int:
    # the folder builds a boolean mask of the output's shape first: one more byte an element
    return indices.size * max(_ints(depth)[0], 0) * (values.dtype.itemsize + 1)


@output_bytes("Concat")
def concat(*xs: np.ndarray | None, **_attrs: object) -> int:
    return sum(x.nbytes for x in xs if x is not None)


@output_bytes(("MatMul", "MatMulInteger"))
def matmul(a: np.ndarray, b: np.ndarray, *_rest: np.ndarray | None) -> int:
    if a.ndim == 0 or b.ndim == 0:
        return a.nbytes + b.nbytes
    batch = _broadcast_elements(a.shape[:-2], b.shape[:-2])
    rows = a.shape[-2] if a.ndim > 1 else 1
    cols = b.shape[-1] if b.ndim > 1 else 1
    return batch * rows * cols * max(_itemsize(a, b), 4)


@output_bytes("Gemm")
def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None,
         transA: int = 0, transB: int = 0,  # noqa: N803 - ONNX attribute names
         **_attrs: object) -> int:
    rows = a.shape[-1] if transA else a.shape[0]
    cols = b.shape[0] if transB else b.shape[-1]
    return rows * cols * _itemsize(a, b)


@output_bytes(("Resize", "Upsample"))
def resize(x: np.ndarray, *args: np.ndarray | None, **_attrs: object) -> int | None:
    sizes = args[2] if len(args) > 2 and args[2] is not None and args[2].size else None
    if sizes is not None:
        return math.prod(_ints(sizes)) * x.dtype.itemsize
    scales = next((a for a in args if a is not None and a.dtype.kind == "f" and a.size), None)
    if scales is None or scales.size != x.ndim:
        return None
    return math.prod(math.floor(d * float(s)) for d, s in zip(x.shape, scales.reshape(-1))) \
        * x.dtype.itemsize


@output_bytes("Gather")
def gather(data: np.ndarray, indices: np.ndarray, axis: int = 0) -> int:
    if data.ndim == 0:
        return data.nbytes
    return indices.size * (data.size // max(data.shape[axis], 1)) * data.dtype.itemsize
