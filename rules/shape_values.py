"""Shape scaffolding of models with dynamic axes: whatever part of a shape is known folds.

``Shape(x) -> Gather/Slice -> Unsqueeze -> Concat -> Reshape`` chains are built from a model's
dims; with a batch or sequence axis dynamic, onnx sees none of them as constant. The shape
values of ``onnxfold.analysis.symbolic`` say, element by element, what they compute: a value with
only static elements becomes an initializer, and a ``Reshape`` target with one dynamic element left
is written with ``0`` (copy the input's dim, when it provably is that dim and ``allowzero`` is
not set) or ``-1`` (beside static nonzero elements only, so that it is right for an empty
tensor too). A Reshape, Expand, Slice, Transpose or Tile whose output is, dim for dim, its own
dynamic input goes (``drop_noop``, ``no_ops.py``).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxfold.declare import (
    SHAPE_FOLDING,
    GraphView,
    Known,
    Match,
    OpBuilder,
    P,
    Reject,
    Replacement,
    Var,
    pattern,
)

SHAPE_BUILDERS = ("Shape", "Size", "Gather", "Slice", "Concat", "Unsqueeze", "Squeeze", "Cast",
                  "CastLike", "Add", "Sub", "Mul", "Div", "Equal", "Identity", "Where", "Reshape",
                  "Neg", "ReduceProd", "ReduceSum", "Max", "Min")


def _static_but_not_constant(ctx: GraphView, node: ir.Node) -> bool | Match:
    out = node.outputs[0] if len(node.outputs) == 1 else None
    if out is None:
        return False
    known = ctx.shape_value(out)
    return Match(known=known) if known is not None and known.is_constant else False


@pattern(P(SHAPE_BUILDERS, name="node"), check=_static_but_not_constant,
         tags=[SHAPE_FOLDING])
def known_shape_value(op: OpBuilder, node: ir.Node, known: Known) -> ir.Value:
    """A shape tensor whose every element is static, whatever the dynamic dims: a constant."""
    return op.constant(known.array(), node.outputs[0].name or "shape")


def _target(ctx: GraphView, node: ir.Node, x: ir.Value, target: ir.Value
            ) -> list[int] | Reject | None:
    """The constant Reshape target equal to ``target``, None if not applicable."""
    if ctx.is_constant(target):
        return None  # it folds (asked first: cheaper than the shape values)
    known = ctx.shape_value(target)
    if known is None or known.is_constant or known.scalar:
        return None
    allowzero = bool(node.attributes.get_int("allowzero", 0))
    out: list[int | None] = []
    copies = uncopyable = False
    for i, element in enumerate(known.elements):
        if isinstance(element, int):
            out.append(element)
        else:  # 0 copies the input's dim i: right only when it is that very dim
            same = ctx.dim(x, i) == element
            uncopyable = uncopyable or (same and allowzero)  # there a 0 is a 0
            same = same and not allowzero
            copies = copies or same
            out.append(0 if same else None)
    unknown = [i for i, e in enumerate(out) if e is None]
    if len(unknown) > 1 and uncopyable:
        return Reject("allowzero: a 0 cannot copy a dim")
    if len(unknown) > 1 or (unknown and -1 in out):
        names = ", ".join(ctx.describe_dim(a) for a in known.blocking())
        return Reject(f"more than one dynamic element in the target (made of {names})")
    if unknown and (copies or 0 in out):
        # onnxruntime cannot infer a -1 next to a dim that is 0 at run time (an empty batch)
        return Reject("a -1 beside a copied dynamic dim fails on empty tensors")
    return [-1 if e is None else e for e in out]


def _target_known(ctx: GraphView, node: ir.Node, x: ir.Value, target: ir.Value
                  ) -> bool | Match | Reject:
    found = _target(ctx, node, x, target)
    if isinstance(found, Reject):
        return found
    return Match(dims=found) if found is not None else False


@pattern(P("Reshape", Var("x"), Var("target"), name="node"), check=_target_known,
         tags=[SHAPE_FOLDING])
def reshape_known_target(op: OpBuilder, node: ir.Node, x: ir.Value, target: ir.Value,
                         dims: list[int]) -> Replacement:
    """Reshape(x, Concat(Shape(x)[0:1], [192])) -> Reshape(x, [0, 192]): the shape
    scaffolding feeding the target then has no reader left."""
    shape = op.constant(np.asarray(dims, np.int64), target.name or "shape")
    return Replacement(inputs={node: [x, shape]})


