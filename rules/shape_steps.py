"""What each op does to shape values and to dims, for :mod:`onnxfold.analysis.symbolic`.

A ``@shape_value`` step gives the elements of a node's output from its inputs' shape values
(``Shape`` reads its input's dims, ``Gather`` picks elements, ``Add`` adds them); a
``@shape_dims`` step gives a node's output dims from its inputs' dims and shape values
(``Reshape`` to a known target, ``MatMul``, ``Concat``...). Each returns None where it cannot
prove the result: only provable steps are taken. The dim algebra (``arith``, broadcasting,
``quotient``) lives in :mod:`onnxfold.analysis.dim_algebra`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import onnx_ir as ir

from onnxfold.declare import (
    MAX_ELEMENTS,
    Dim,
    Dims,
    DimsInputs,
    Known,
    StepInputs,
    arith,
    broadcast_dims,
    broadcast_elements,
    dim_symbols,
    expression,
    has_factor,
    nonnegative,
    normalize_index,
    positive,
    quotient,
    shape_dims,
    shape_value,
    slice_elements,
    small_ints,
)
from onnxfold.ir.graph import tensor_of
from onnxfold.ir.slicing import onnx_slice

from .op_groups import MULTIDIRECTIONAL, REDUCE_TO_AXES, SAME_SHAPE

BIG = 2**31 - 1  # a Slice end at least this takes the rest of any axis
_SHAPE_CASTS = (ir.DataType.INT64, ir.DataType.INT32)

# Shape values: the elements of a node's output.


@shape_value("Shape")
def shape_of(step: StepInputs) -> Known | None:
    x = step.value(0)
    if x is None or x.shape is None:
        return None
    rank = len(x.shape)
    start = step.node.attributes.get_int("start", 0)
    end = step.node.attributes.get_int("end", rank)
    axes = range(rank)[onnx_slice(start, end, 1, rank)]
    if len(axes) > MAX_ELEMENTS:
        return None  # no shape value (a rank this large is data): its dims are not read
    dims = dim_symbols(x, step.ambiguous)
    return Known(tuple(dims[i] for i in axes) if dims is not None else ())


@shape_value("Identity")
def identity(step: StepInputs) -> Known | None:
    return step.get(0)


@shape_value("Cast", "CastLike")
def cast(step: StepInputs) -> Known | None:
    """A cast to an integer type (CastLike: to its second input's type) keeps the elements."""
    node = step.node
    if node.op_type == "CastLike":
        like = step.value(1)
        to = like.dtype.value if like is not None and like.dtype is not None else 0
    else:
        to = node.attributes.get_int("to", 0)
    if to not in _SHAPE_CASTS:  # (compared as ints: a number no DataType has is no cast here)
        return None
    source = step.get(0) or _whole_numbers(step.array(0))
    if source is None:
        return None
    return Known(source.elements, source.scalar, np.dtype(ir.DataType(to).numpy()))


def _whole_numbers(arr: np.ndarray | None) -> Known | None:
    """A small float constant holding whole numbers that a cast to an integer keeps exactly
    (``arange``'s ``CastLike(0.0, n)`` start and step): its elements, else None."""
    if arr is None or arr.dtype.kind != "f" or arr.ndim > 1 or arr.size > MAX_ELEMENTS:
        return None
    wide = arr.astype(np.float64)
    if not (np.isfinite(wide).all() and (wide == np.trunc(wide)).all()
            and (np.abs(wide) < 2.0**53).all()):
        return None
    return Known(tuple(int(e) for e in wide.reshape(-1).tolist()), arr.ndim == 0)


@shape_value("Gather")
def gather(step: StepInputs) -> Known | None:
    data, indices = step.get(0), step.array(1)
    picks = small_ints(indices)
    if data is None or data.scalar or indices is None or picks is None or \
            step.node.attributes.get_int("axis", 0) != 0:
        return None
    chosen = [normalize_index(i, len(data.elements)) for i in picks]
    if any(c is None for c in chosen):
        return None
    return Known(tuple(data.elements[c] for c in chosen if c is not None),
                 indices.ndim == 0, data.dtype)


@shape_value("Slice")
def slice_value(step: StepInputs) -> Known | None:
    data = step.get(0)
    starts, ends = step.ints(1), step.ints(2)
    axes = step.ints(3) if step.value(3) is not None else [0]
    steps = step.ints(4) if step.value(4) is not None else [1]
    if data is None or data.scalar or starts is None or ends is None or axes is None or \
            steps is None or axes not in ([0], [-1]) or len(starts) != 1:
        return None
    part = slice_elements(data.elements, starts[0], ends[0], steps[0])
    return None if part is None else Known(part, False, data.dtype)


@shape_value("Concat")
def concat_value(step: StepInputs) -> Known | None:
    parts = [step.get(i) for i in range(len(step.node.inputs))]
    if not parts or any(p is None or p.scalar for p in parts):
        return None
    return Known(tuple(e for p in parts if p is not None for e in p.elements), False,
                 parts[0].dtype if parts[0] is not None else np.dtype(np.int64))


@shape_value("Unsqueeze")
def unsqueeze_value(step: StepInputs) -> Known | None:
    source = step.get(0)
    axes = step.ints(1) if step.value(1) is not None else \
        list(step.node.attributes.get_ints("axes", []) or [])
    return Known(source.elements, False, source.dtype) \
        if source is not None and source.scalar and len(axes or ()) == 1 else None


@shape_value("Squeeze")
def squeeze_value(step: StepInputs) -> Known | None:
    source = step.get(0)
    return Known(source.elements, True, source.dtype) \
        if source is not None and len(source.elements) == 1 and not source.scalar else None


@shape_value("Add", "Sub", "Mul", "Div")
def arithmetic(step: StepInputs) -> Known | None:
    a, b = step.get(0), step.get(1)
    return broadcast_elements(step.node.op_type, a, b) \
        if a is not None and b is not None else None


@shape_value("Neg")
def negated(step: StepInputs) -> Known | None:
    a = step.get(0)
    return None if a is None else \
        Known(tuple(arith("Sub", 0, e) for e in a.elements), a.scalar, a.dtype)


@shape_value("ReduceProd", "ReduceSum")
def reduced_value(step: StepInputs) -> Known | None:
    """A 1-D shape value reduced whole (its one axis, or none given): its elements' product
    (a flattened size) or sum."""
    source, attrs, product = step.get(0), step.node.attributes, step.node.op_type == "ReduceProd"
    given = step.ints(1) if step.value(1) is not None else list(attrs.get_ints("axes", []) or [])
    noop, keep = attrs.get_int("noop_with_empty_axes", 0), attrs.get_int("keepdims", 1)
    if source is None or source.scalar or given is None or given not in ([], [0], [-1]) or \
            (not given and noop):
        return None
    total: Dim = 1 if product else 0
    for e in source.elements:
        total = arith("Mul" if product else "Add", total, e)
    return Known((total,), not keep, source.dtype)


@shape_value("Max", "Min")
def extreme(step: StepInputs) -> Known | None:
    """Two shape values' elementwise larger or smaller: where both are ints, or equal."""
    a, b = step.get(0), step.get(1)
    if a is None or b is None or len(step.node.inputs) != 2 or a.dtype != b.dtype:
        return None
    pairs = broadcast_elements("Sub", a, b)  # (the broadcast's shape and scalar-ness)
    if pairs is None:
        return None
    size, pick = len(pairs.elements), max if step.node.op_type == "Max" else min
    left, right = (k.elements * size if len(k.elements) == 1 else k.elements for k in (a, b))
    out = [pick(x, y) if isinstance(x, int) and isinstance(y, int) else x if x == y else None
           for x, y in zip(left, right)]
    return None if None in out else Known(tuple(out), pairs.scalar, a.dtype)  # type: ignore


@shape_value("Reshape")
def reshape_value(step: StepInputs) -> Known | None:
    """A scalar or 1-D shape value reshaped to [n] or [-1] keeps its elements."""
    source, target = step.get(0), step.ints(1)
    if source is None or target is None or len(target) != 1 or \
            target[0] not in (-1, len(source.elements)):
        return None
    return Known(source.elements, False, source.dtype)


@shape_value("Equal")
def equal(step: StepInputs) -> Known | None:
    a, b = step.get(0), step.get(1)
    if a is None or b is None:
        return None
    pairs = broadcast_elements("Sub", a, b)
    if pairs is None:
        return None
    return Known(tuple(1 if d == 0 else 0 if isinstance(d, int) or positive(d)
                       else expression("Equal", d, 0) for d in pairs.elements),
                 pairs.scalar, np.dtype(np.bool_))


@shape_value("Where")
def where(step: StepInputs) -> Known | None:
    """torch's expand(-1): ``Where(Equal(shape, -1), 1s, shape)``."""
    flags, a, b = step.array(0), step.get(1), step.get(2)
    derived = step.get(0)  # an Equal of shape values: known before it is folded
    if flags is None and derived is not None and derived.is_constant and \
            derived.dtype == np.bool_:
        flags = derived.array()
    if flags is None or flags.dtype != np.bool_ or flags.ndim > 1 or a is None or \
            b is None or a.dtype != b.dtype:
        return None
    cond = tuple(bool(f) for f in flags.reshape(-1).tolist())
    size = max(len(cond), len(a.elements), len(b.elements))
    if any(len(k) not in (1, size) for k in (cond, a.elements, b.elements)):
        return None
    take = cond * size if len(cond) == 1 else cond
    then, other = [k.elements * size if len(k.elements) == 1 else k.elements for k in (a, b)]
    return Known(tuple(then[i] if take[i] else other[i] for i in range(size)),
                 flags.ndim == 0 and a.scalar and b.scalar, a.dtype)


@shape_value("ConstantOfShape")
def constant_of_shape_value(step: StepInputs) -> Known | None:
    """torch's expand(-1): ``Mul(ConstantOfShape(Shape(s)), -1)``."""
    shape, attr = step.get(0), step.node.attributes.get("value")
    fill = tensor_of(attr).numpy() if attr is not None else np.zeros(1, np.float32)
    if shape is None or len(shape.elements) != 1 or fill.dtype.kind not in "iu" or \
            fill.size != 1:
        return None
    count = shape.elements[0]
    if not isinstance(count, int) or not 0 <= count <= MAX_ELEMENTS:  # a dynamic dim: unknown
        return None
    return Known((int(fill.reshape(-1)[0]),) * count, False, fill.dtype)


@shape_value("Size")
def size(step: StepInputs) -> Known | None:
    x = step.value(0)
    if x is None or x.shape is None:
        return None
    product: Dim = 1
    for d in dim_symbols(x, step.ambiguous) or ():
        product = arith("Mul", product, d)
    return Known((product,), True)


# Dims: shape inference may name a dim it could not relate to the inputs ``unk__2`` (an Add
# of [N, 128, 768] and a [unk__0, unk__1, 768] that a fold has since made [1, 128, 768] keeps
# ``unk__2``: re-inference does not rename it). What each op does to shapes proves it is ``N``.


@shape_dims("ConstantOfShape")
def constant_of_shape_dims(step: DimsInputs) -> Dims | None:
    shape = step.known_at(0)
    return None if shape is None or shape.scalar else shape.elements  # (a 0-D shape: invalid)


@shape_dims("Range")
def range_dims(step: DimsInputs) -> Dims | None:
    start, limit, delta = step.scalar(0), step.scalar(1), step.scalar(2)
    if isinstance(start, int) and isinstance(limit, int) and isinstance(delta, int) \
            and delta != 0:
        return (max(0, -((start - limit) // delta)),)
    if start == 0 and delta == 1 and limit is not None and nonnegative(limit):
        return (limit,)
    return None


@shape_dims(*sorted(SAME_SHAPE))
def same_shape(step: DimsInputs) -> Dims | None:
    return step.first


@shape_dims(*sorted(MULTIDIRECTIONAL))
def broadcast(step: DimsInputs) -> Dims | None:
    """The inputs' dims broadcast, right-aligned (from opset 7; before it, ``broadcast=1``
    aligned the second input at ``axis``: not derived)."""
    if "broadcast" in step.node.attributes:
        return None
    shapes = [step.dims(v) for v in step.node.inputs if v is not None]
    return None if not shapes or any(s is None for s in shapes) else \
        broadcast_dims([s for s in shapes if s is not None])


def sliced(first: Dims, starts: Known, ends: Known, axes: list[int] | None,
           steps: list[int] | None) -> Dims | None:
    """``first`` sliced (``onnxfold.ir.slicing`` clamps as onnxruntime does)."""
    count = len(starts.elements)
    axes = list(range(count)) if axes is None else axes
    steps = [1] * count if steps is None else steps
    if len(ends.elements) != count or len(axes) != count or len(steps) != count:
        return None
    out: list[Dim | None] = list(first)
    for start, end, axis, step in zip(starts.elements, ends.elements, axes, steps):
        a = normalize_index(axis, len(first))
        if a is None:
            return None
        d = first[a]
        if isinstance(d, int) and isinstance(start, int) and isinstance(end, int) and step:
            out[a] = len(range(d)[onnx_slice(start, end, step, d)])
        elif step == 1 and (start == 0 or (d is not None and start == arith("Sub", 0, d))) and (
                (isinstance(end, int) and end >= BIG) or end == d):
            out[a] = d  # (from 0, or from minus the axis's own size: the whole axis)
        elif start == 0 and step == 1 and isinstance(d, int) and not isinstance(end, int) \
                and nonnegative(end):
            out[a] = expression("Min", end, d)  # a position table cut to the sequence
        else:
            out[a] = None
    return tuple(out)


@shape_dims("Slice")
def slice_dims(step: DimsInputs) -> Dims | None:
    first, starts, ends = step.first, step.known_at(1), step.known_at(2)
    axes = step.ints(3) if step.value(3) is not None else []
    steps = step.ints(4) if step.value(4) is not None else []
    if first is None or starts is None or ends is None or axes is None or steps is None:
        return None
    return sliced(first, starts, ends, axes or None, steps or None)


@shape_dims(*sorted(REDUCE_TO_AXES))
def reduced(step: DimsInputs) -> Dims | None:
    """The dims a reduction leaves: its axes 1 (``keepdims``) or gone, the others kept (the
    axes an attribute, or input 1 from opset 13/18 on; none given: every axis, unless
    ``noop_with_empty_axes``)."""
    node, first = step.node, step.first
    if first is None:
        return None
    if node.op_type in ("ArgMax", "ArgMin"):
        given: list[int] | None = [node.attributes.get_int("axis", 0)]
    elif step.value(1) is not None:
        given = step.ints(1)
    else:
        given = list(node.attributes.get_ints("axes", []) or [])
    if given is None:
        return None
    if not given:
        if node.attributes.get_int("noop_with_empty_axes", 0):
            return first
        given = list(range(len(first)))
    axes = [normalize_index(a, len(first)) for a in given]
    if None in axes:
        return None
    keep = node.attributes.get_int("keepdims", 1)
    return tuple(1 if i in axes else d for i, d in enumerate(first) if keep or i not in axes)


@shape_dims("Transpose")
def transpose(step: DimsInputs) -> Dims | None:
    first = step.first
    if first is None:
        return None
    perm = list(step.node.attributes.get_ints("perm", []) or range(len(first))[::-1])
    return tuple(first[p] for p in perm) if sorted(perm) == list(range(len(first))) else None


def _axes(step: DimsInputs, rank: int) -> list[int] | None:
    """The Unsqueeze/Squeeze axes (input 1 or the attribute), normalized to ``rank``."""
    axes = step.ints(1) if step.value(1) is not None else \
        list(step.node.attributes.get_ints("axes", []) or []) or None
    if axes is None:
        return None
    found = [normalize_index(a, rank) for a in axes]
    return None if None in found else [a for a in found if a is not None]


@shape_dims("Unsqueeze")
def unsqueeze_dims(step: DimsInputs) -> Dims | None:
    first = step.first
    if first is None:
        return None
    given = step.ints(1) if step.value(1) is not None else \
        list(step.node.attributes.get_ints("axes", []) or [])
    axes = _axes(step, len(first) + len(given or ()))
    if axes is None or len(set(axes)) != len(axes):
        return None
    rest = iter(first)
    return tuple(1 if i in axes else next(rest) for i in range(len(first) + len(axes)))


@shape_dims("Squeeze")
def squeeze_dims(step: DimsInputs) -> Dims | None:
    first = step.first
    if first is None:
        return None
    axes = _axes(step, len(first))
    return None if axes is None else tuple(d for i, d in enumerate(first) if i not in axes)


def reshaped(source: Dims | None, target: Known, allowzero: bool) -> Dims:
    """``source`` (None: its rank unknown) reshaped to the shape value ``target`` (0 copies,
    -1 infers): as many dims as ``target`` has elements, whatever the source.

    An element ``e`` of ``target`` that is a dim (``Shape(y)``'s) is that dim, unless it is 0
    at run time and copies the source's: where the source has no dim at its place,
    onnxruntime refuses a 0 ("exceeds the dimension size of the input tensor"), so wherever
    the model runs it is ``e``."""
    out: list[Dim | None] = []
    for i, e in enumerate(target.elements):
        beyond = source is not None and i >= len(source)  # a 0 here fails (unless allowzero)
        copied = source[i] if source is not None and not beyond else None
        if isinstance(e, int):
            out.append(e if e > 0 or (e == 0 and allowzero) else copied if e == 0 else None)
        elif nonnegative(e) and (allowzero or beyond or has_factor(copied, e)):
            out.append(e)  # were e 0 at run time, the copied dim is 0 too (or it fails)
        elif nonnegative(e) and copied is not None:
            out.append(expression("Reshape0", e, copied))  # e, or the copied dim where e is 0
        else:
            out.append(None)
    inferred = [i for i, e in enumerate(target.elements) if e == -1]
    if source is not None and len(inferred) == 1 and None not in source and \
            sum(1 for d in out if d is None) == 1:  # the -1: what the other dims leave
        out[inferred[0]] = _left_over(source, out)
    return tuple(out)


def _product(dims: Iterable[Dim | None]) -> Dim | None:
    """The product of ``dims`` (in order); None if one is unknown."""
    total: Dim = 1
    for d in dims:
        if d is None:
            return None
        total = arith("Mul", total, d)
    return total


def _left_over(source: Dims, out: list[Dim | None]) -> Dim | None:
    """What a Reshape's -1 is: the product of ``source`` over that of the other dims."""
    total = _product(source)
    if total is None:
        return None
    others: Dim = 1
    for d in out:
        if d is not None:
            others = arith("Mul", others, d)
    divided = quotient(total, others)
    return expression("Div", total, others) if divided is None else divided


@shape_dims("Reshape")
def reshape_dims(step: DimsInputs) -> Dims | None:
    """The dims a known target gives, the input's rank known or not (:func:`reshaped`)."""
    target = step.known_at(1)
    return None if target is None or target.scalar else \
        reshaped(step.first, target, bool(step.node.attributes.get_int("allowzero", 0)))


@shape_dims("Tile")
def tile(step: DimsInputs) -> Dims | None:
    first, repeats = step.first, step.known_at(1)
    if first is None or repeats is None or repeats.scalar or \
            len(repeats.elements) != len(first):
        return None
    return tuple(None if d is None else arith("Mul", d, r)
                 for d, r in zip(first, repeats.elements))


@shape_dims("Expand")
def expand(step: DimsInputs) -> Dims | None:
    first, target = step.first, step.known_at(1)
    return None if first is None or target is None or target.scalar else \
        broadcast_dims([first, target.elements])


@shape_dims("MatMul")
def matmul(step: DimsInputs) -> Dims | None:
    return matmul_of(step.first, step.dims(step.value(1)))


def matmul_of(first: Dims | None, other: Dims | None) -> Dims | None:
    """The dims of a matrix product of ``first`` and ``other`` (rank 2 or more each)."""
    if first is None or other is None or len(first) < 2 or len(other) < 2:
        return None
    return (*broadcast_dims([first[:-2], other[:-2]]), first[-2], other[-1])


@shape_dims("Gather")
def gather_dims(step: DimsInputs) -> Dims | None:
    first = step.first
    if first is None:
        return None
    indices = step.dims(step.node.inputs[1]) if len(step.node.inputs) > 1 else None
    axis = normalize_index(step.node.attributes.get_int("axis", 0), len(first))
    return None if indices is None or axis is None else first[:axis] + indices + first[axis + 1:]


@shape_dims("Flatten")
def flatten(step: DimsInputs) -> Dims | None:
    first = step.first
    if first is None:
        return None
    axis = step.node.attributes.get_int("axis", 1)
    axis = axis + len(first) if axis < 0 else axis
    if not 0 <= axis <= len(first):
        return None
    head, tail = _product(first[:axis]), _product(first[axis:])
    return None if head is None or tail is None else (head, tail)


@shape_dims("Concat")
def concat_dims(step: DimsInputs) -> Dims | None:
    first = step.first
    if first is None:
        return None
    shapes = [step.dims(v) for v in step.node.inputs if v is not None]
    axis = normalize_index(step.node.attributes.get_int("axis", 0), len(first))
    if axis is None or any(s is None or len(s) != len(first) for s in shapes):
        return None
    out: list[Dim | None] = []
    for i in range(len(first)):
        column = [s[i] for s in shapes if s is not None]
        out.append(_summed(column) if i == axis else _agreed(column, step.of_inputs))
    return tuple(out)


def _summed(column: list[Dim | None]) -> Dim | None:
    """The Concat axis: the sum of the inputs' dims there."""
    total: Dim | None = 0
    for d in column:
        total = None if total is None or d is None else arith("Add", total, d)
    return total


def _agreed(column: list[Dim | None], of_inputs: Callable[[Dim], bool]) -> Dim | None:
    """Another Concat axis: the inputs agree there, so any known one is the dim: an int, else
    one made of the graph inputs' dims (a padded slice's own name says less)."""
    return next((d for d in column if isinstance(d, int)),
                next((d for d in column if d is not None and of_inputs(d)),
                     next((d for d in column if d is not None), None)))


@shape_dims("Split", every_output=True)
def split_dims(step: DimsInputs) -> list[Dims | None]:
    """The dims of each output of a Split whose sizes are given."""
    node, first = step.node, step.first
    sizes = step.known_at(1)
    if "split" in node.attributes:
        sizes = Known(tuple(node.attributes.get_ints("split", []) or ()))
    if first is None or sizes is None or sizes.scalar or \
            len(sizes.elements) != len(node.outputs):
        return []
    axis = normalize_index(node.attributes.get_int("axis", 0), len(first))
    if axis is None:
        return []
    return [(*first[:axis], size, *first[axis + 1:]) for size in sizes.elements]
