"""Pattern rules that make more of the graph foldable or cheaper to fold.

- Postponing expanding ops: ``f(Expand(c, s), k...)`` with constant ``c, k`` becomes
  ``Expand(f(c, k...), s)``, so the elementwise chain folds on the small tensor and the big one is
  never materialized. The same for ``Tile`` with scalar-like operands, and ``ConstantOfShape``
  becomes ``Expand`` of its scalar when elementwise ops follow.
- ``If`` with a constant condition is replaced by the branch it takes.
- Consecutive Transposes merge; a Reshape of a Reshape, Squeeze, Unsqueeze, Flatten or a
  Transpose of size-1 axes keeps the Reshape; a Squeeze or Unsqueeze of a Reshape to a
  constant shape is one Reshape (no-op Cast/Reshape/Expand/Pad/Transpose: ``no_ops.py``).
"""

from __future__ import annotations

import math
from typing import cast

import numpy as np
import onnx_ir as ir

from onnxfold.declare import (
    REWRITES_CONSTANTS,
    GraphView,
    Match,
    OpBuilder,
    P,
    Reject,
    Replacement,
    Var,
    pattern,
)
from onnxfold.ir.graph import tensor_of

from .op_groups import BROADCASTING, POINTWISE_UNARY

ELEMENTWISE = POINTWISE_UNARY + BROADCASTING
EXPANDING = ("Expand", "Tile")
RESHAPING = ("Reshape", "Squeeze", "Unsqueeze", "Flatten")  # move no element


def _broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...] | None:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return None


def _expanding_input(node: ir.Node, ctx: GraphView) -> tuple[int, ir.Node] | None:
    """The index and the producer of the one input produced by a constant Expand/Tile, all
    others constant."""
    found = None
    for i, v in enumerate(node.inputs):
        if v is None:
            continue
        producer = v.producer()
        # what to build: the Expand only this node reads is postponed (a shared one is a
        # constant operand like any other)
        if producer is not None and producer.op_type in EXPANDING and ctx.single_use(v):
            if found is not None:
                return None
            found = i, producer
        elif not ctx.is_constant(v):
            return None
    return found


def _postponable(ctx: GraphView, node: ir.Node) -> bool | Match | Reject:
    if len(node.outputs) != 1:
        return False
    expanding = _expanding_input(node, ctx)
    if expanding is None:
        return False
    i, expand = expanding
    small, spec = expand.inputs[0], expand.inputs[1]
    if not (ctx.is_constant(small) and ctx.is_constant(spec)):
        return False
    others = [v for j, v in enumerate(node.inputs) if j != i and v is not None]
    small_shape = ctx.shape(small)
    other_shapes = [ctx.shape(v) for v in others]
    spec_value = ctx.array(spec)
    if small_shape is None or spec_value is None or any(s is None for s in other_shapes):
        return Reject("shapes not statically known")
    known = cast("list[tuple[int, ...]]", other_shapes)  # no None: checked just above
    inner = _broadcast(small_shape, *known)
    if expand.op_type == "Expand":
        big = _broadcast(small_shape, tuple(int(d) for d in spec_value))
        before = _broadcast(big, *known) if big is not None else None
        after = _broadcast(inner, tuple(int(d) for d in spec_value)) \
            if inner is not None else None  # () is a valid (scalar) shape
        if before is None or before != after:
            return Reject("the broadcast result would change")
    elif any(math.prod(s) != 1 or len(s) > len(small_shape) for s in known):
        return Reject("Tile with a non-scalar operand")  # only operands equal on every tile
    return Match(i=i, expand=expand, inner=inner)


@pattern(P(ELEMENTWISE, name="node"), check=_postponable, name="postpone_expand",
         tags=[REWRITES_CONSTANTS])
def postpone_expand(op: OpBuilder, node: ir.Node, i: int, expand: ir.Node,
                    inner: tuple[int, ...] | None) -> ir.Value:
    """f(Expand(c, s), k) -> Expand(f(c, k), s), f(Tile(c, r), k) -> Tile(f(c, k), r)."""
    small, spec = expand.inputs[0], expand.inputs[1]
    # a known inner shape lets the next op of a chain be postponed in the same sweep
    small_result = op.node(
        node.op_type, *(small if j == i else v for j, v in enumerate(node.inputs)),
        _domain=node.domain, _dtype=node.outputs[0].dtype,
        _shape=ir.Shape(inner) if inner is not None else None, _attributes=node.attributes)
    return op.node(expand.op_type, small_result, spec)


def _feeds_a_foldable_elementwise(ctx: GraphView, node: ir.Node, shape: ir.Value) -> bool:
    out = node.outputs[0]
    # what to build: an Expand for the one reader, only worth it when that elementwise op can
    # then fold on the scalar
    user = ctx.reader(out)
    if user is None or not ctx.is_constant(shape):
        return False
    return user.op_type in ELEMENTWISE and all(
        v is out or v is None or ctx.is_constant(v) for v in user.inputs)


@pattern(P("ConstantOfShape", Var("shape"), name="node"), check=_feeds_a_foldable_elementwise,
         name="constant_of_shape_as_expand", tags=[REWRITES_CONSTANTS])
def constant_of_shape_as_expand(op: OpBuilder, node: ir.Node, shape: ir.Value) -> ir.Value:
    """ConstantOfShape(s) feeding elementwise ops -> Expand(scalar, s), to postpone it."""
    attr = node.attributes.get("value")
    scalar = np.asarray(tensor_of(attr).numpy().reshape(()) if attr is not None
                        else np.float32(0))
    value = op.constant(scalar, "constant_of_shape_value")
    return op.Expand(value, shape, _dtype=ir.DataType.from_numpy(scalar.dtype))


def _condition_known(ctx: GraphView, node: ir.Node, cond: ir.Value) -> bool | Match | Reject:
    array = ctx.array(cond)
    if array is None:
        return False  # not constant, or not folded yet: the fold pass then the next round
    if array.size != 1:
        return Reject("condition is not a single value")
    taken = "then_branch" if bool(array.reshape(-1)[0]) else "else_branch"
    if taken not in node.attributes or \
            len(node.attributes[taken].as_graph().outputs) != len(node.outputs):
        return Reject("branch output count differs")
    return Match(branch=node.attributes[taken].as_graph())


@pattern(P("If", Var("cond"), name="node"), check=_condition_known, name="inline_constant_if",
         tags=[REWRITES_CONSTANTS])
def inline_constant_if(op: OpBuilder, branch: ir.Graph) -> tuple[ir.Value, ...]:
    """If(c) with a constant condition becomes the nodes of the branch it takes (the other
    branch goes with the If)."""
    return op.inline(branch)


def _composed(ctx: GraphView, p1: tuple[int, ...] | None, p2: tuple[int, ...] | None
              ) -> Match | Reject:
    if p1 is None or p2 is None:
        return Reject("perm not given")
    return Match(perm=[p1[i] for i in p2])


@pattern(P("Transpose", P("Transpose", Var("x"), name="first", perm=Var("p1"), bypassed=True),
           name="second", perm=Var("p2")), check=_composed)
def merge_transposes(op: OpBuilder, x: ir.Value, perm: list[int]) -> ir.Value:
    """Transpose(Transpose(x, p1), p2) -> Transpose(x, p1[p2]) (or x itself)."""
    return x if perm == sorted(perm) else op.Transpose(x, perm=perm)


def _squeezed_axes(ctx: GraphView, node: ir.Node) -> list[int] | None:
    """The axes a Squeeze or Unsqueeze names (input 1 from opset 13 on, else the attribute),
    as given; None where they are not constant (or not given: a Squeeze of every 1)."""
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        axes = ctx.array(node.inputs[1])
        if axes is None or axes.dtype.kind not in "iu" or axes.ndim > 1:
            return None
        return [int(a) for a in axes.reshape(-1)]
    given = node.attributes.get_ints("axes", None)
    return None if given is None else list(given)


def _moves_elements(ctx: GraphView, first: ir.Node, x: ir.Value) -> Reject | None:
    """Why ``first`` (Reshape, Squeeze, Unsqueeze, Flatten, Transpose) may not give ``x``'s
    elements in their order whenever it runs, or run wherever a Reshape of ``x`` to the same
    count does; None if it does: a Squeeze only of axes provably 1 (else it fails where the
    merged Reshape would not), a Transpose only of axes provably 1 past the others."""
    rank = len(x.shape) if x.shape is not None else None
    if first.op_type == "Transpose":
        perm = first.attributes.get_ints("perm", None)
        order = list(perm) if perm is not None else \
            list(range(rank))[::-1] if rank is not None else None
        if rank is None or order is None or sorted(order) != list(range(rank)):
            return Reject("a Transpose of an unknown rank")
        moved = [p for p in order if ctx.dim(x, p) != 1]
        return None if moved == sorted(moved) else \
            Reject("a Transpose of axes not provably 1")
    if first.op_type != "Squeeze":
        return None
    axes = _squeezed_axes(ctx, first)
    if axes is None:  # every 1 squeezed: no failure
        return None if len(first.inputs) < 2 or first.inputs[1] is None else \
            Reject("Squeeze axes not constant")
    if rank is None or not all(-rank <= a < rank and ctx.dim(x, a % rank) == 1 for a in axes):
        return Reject("a Squeeze of an axis not provably 1")
    return None


def _target_reading_x(ctx: GraphView, x: ir.Value, first: ir.Node, second: ir.Node,
                      target: ir.Value) -> Match | Reject:
    """The target of ``second`` reading ``x`` itself (``merged``), and the one it reads now
    (``given``): a 0 (copy) entry where ``first``'s output has a static dim there is that
    dim, and stays a 0 only where that dim is provably ``x``'s own."""
    shape = ctx.array(target)
    if shape is None or shape.dtype.kind not in "iu" or shape.ndim != 1:
        return Reject("target shape not constant")
    moves = _moves_elements(ctx, first, x)
    if moves is not None:
        return moves
    if second.attributes.get_int("allowzero", 0) or not (shape == 0).any():
        return Match(merged=shape, given=shape)
    merged = shape.copy()
    for i in np.flatnonzero(shape == 0).tolist():
        copied = ctx.dim(first.outputs[0], i)
        if isinstance(copied, int) and copied > 0:
            merged[i] = copied
        elif copied is None or copied != ctx.dim(x, i):
            return Reject("target shape copies dimensions (0 entries)")
    return Match(merged=merged, given=shape)


@pattern(P("Reshape", P((*RESHAPING, "Transpose"), Var("x"), ..., name="first", bypassed=True),
           Var("target"), ..., name="second"), check=_target_reading_x)
def merge_reshapes(op: OpBuilder, x: ir.Value, second: ir.Node, target: ir.Value,
                   merged: np.ndarray, given: np.ndarray) -> Replacement:
    """Reshape(f(x), s) -> Reshape(x, s) for f a Reshape, Squeeze, Unsqueeze, Flatten or a
    Transpose of axes of size 1 (none moves an element): the torch exporters'
    ``Reshape(Squeeze(Shape(x)[0:1]), [-1])`` is then ``Shape(x)[0:1]`` (``drop_noop``); a
    GRU's ``Reshape(Transpose([S, 2, 1, H], [0, 2, 1, 3]), [0, 0, -1])`` is ``Reshape(x,
    [0, 1, -1])``."""
    if not np.array_equal(merged, given):
        target = op.constant(merged.astype(given.dtype), "shape")
    return Replacement(inputs={second: [x, target, *second.inputs[2:]]})


def _reshaped_again(ctx: GraphView, first: ir.Node, second: ir.Node,
                    target: ir.Value) -> Match | Reject:
    """The constant target of one Reshape doing ``second`` (Squeeze or Unsqueeze) after
    ``first`` (a Reshape to ``target``)."""
    shape = ctx.array(target)
    if shape is None or shape.dtype.kind not in "iu" or shape.ndim != 1:
        return Reject("target shape not constant")
    before = [int(d) for d in shape]
    axes = _squeezed_axes(ctx, second)
    if second.op_type == "Unsqueeze":
        rank = len(before) + len(axes or ())
        at = sorted({a % rank for a in axes or () if -rank <= a < rank})
        if axes is None or len(at) != len(axes):
            return Reject("axes not constant, repeated or out of range")
        rest = iter(enumerate(before))
        places = [(None, 1) if i in at else next(rest) for i in range(rank)]
    else:
        if axes is None:
            return Reject("a Squeeze of every 1 (which a -1 may be)")
        rank = len(before)
        at = sorted({a % rank for a in axes if -rank <= a < rank})
        if len(at) != len(axes) or any(before[a] != 1 for a in at):
            return Reject("a squeezed axis not 1 in the target")
        places = [(i, d) for i, d in enumerate(before) if i not in at]
    allowzero = first.attributes.get_int("allowzero", 0)
    if not allowzero and any(d == 0 and i != j for j, (i, d) in enumerate(places)):
        return Reject("a 0 (copy) entry would copy another dim")
    return Match(dims=[d for _, d in places])


@pattern(P(("Unsqueeze", "Squeeze"), P("Reshape", Var("x"), Var("target"), name="first"), ...,
           name="second"), check=_reshaped_again)
def reshape_then_unsqueeze(op: OpBuilder, x: ir.Value, first: ir.Node, dims: list[int]
                           ) -> ir.Value:
    """Unsqueeze(Reshape(x, [-1, 32]), [1]) -> Reshape(x, [-1, 1, 32]); Squeeze(Reshape(x,
    [-1, 1, 32]), [1]) -> Reshape(x, [-1, 32]): a Squeeze or Unsqueeze moves no element, so
    one Reshape to the final shape does both (a 0 entry only where it copies the same dim)."""
    allowzero = {a.name: a for a in first.attributes.values() if a.name == "allowzero"}
    return op.Reshape(x, op.constant(np.asarray(dims, np.int64), "shape"), **allowzero)


def _narrow_constant(ctx: GraphView, widen: ir.Node, narrow: ir.Value,
                     perm: tuple[int, ...] | None) -> bool | Match | Reject:
    shape = ctx.shape(narrow)
    if not ctx.is_constant(narrow) or shape is None:
        return False
    scale_shape = None
    if widen.op_type == "DequantizeLinear":
        if widen.attributes.get("block_size") is not None and \
                widen.attributes["block_size"].as_int() != 0:
            return Reject("blocked dequantization")
        scale_shape = ctx.shape(widen.inputs[1])
        if scale_shape is None:
            return Reject("scale shape not known")
    order = list(perm) if perm is not None else list(range(len(shape)))[::-1]
    per_axis = scale_shape is not None and math.prod(scale_shape) > 1
    return Match(order=order, shape=shape, per_axis=per_axis)


@pattern(P("Transpose", P(("Cast", "DequantizeLinear"), Var("narrow"), ..., name="widen"),
           name="transpose", perm=Var("perm")), check=_narrow_constant,
         tags=[REWRITES_CONSTANTS])
def transpose_before_widening(op: OpBuilder, widen: ir.Node, narrow: ir.Value,
                              order: list[int], shape: tuple[int, ...], per_axis: bool
                              ) -> ir.Value:
    """Transpose(Cast(c)) -> Cast(Transpose(c)); Transpose(DequantizeLinear(q, s, z)) ->
    DequantizeLinear(Transpose(q), s, z) with the axis moved: for constant ``c``/``q`` the
    transpose then folds in the narrow dtype, while the widening op may stay (size policy)."""
    attributes: dict[str, ir.Attr | int] = {
        a.name: a for a in widen.attributes.values() if a.name != "axis"}
    if per_axis:
        axis = widen.attributes["axis"].as_int() if "axis" in widen.attributes else 1
        attributes["axis"] = order.index(axis % len(shape))
    moved = op.Transpose(narrow, perm=order, _dtype=narrow.dtype,
                         _shape=ir.Shape([shape[p] for p in order]),
                         _name=narrow.name or "Transpose")
    return op.node(widen.op_type, moved, *widen.inputs[1:], _domain=widen.domain,
                   _attributes=attributes)


def _like_dtype_known(ctx: GraphView, like: ir.Value) -> bool | Match:
    if like.dtype is None or like.dtype == ir.DataType.STRING:
        return False
    return Match(dtype=like.dtype)


@pattern(P("CastLike", Var("x", const=True), Var("like"), name="node"), check=_like_dtype_known)
def cast_like_of_a_constant(op: OpBuilder, node: ir.Node, x: ir.Value, dtype: ir.DataType
                            ) -> ir.Value:
    """CastLike(c, y) reads only y's dtype: with a constant c it is Cast(c, to=dtype(y)), which
    folds (an attention scale's CastLike otherwise blocks the Sqrt after it)."""
    saturation = {a.name: a for a in node.attributes.values()
                  if a.name in ("saturate", "round_mode")}
    return op.Cast(x, to=int(dtype), **saturation, _dtype=dtype)
