"""Normalizations an exporter wrote op by op, and the affine tail a runtime needs to fuse them.

TorchScript writes ``nn.LayerNorm`` as ``(x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps)``
(ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div) followed by its affine tail, ``* scale +
bias``; T5's and Llama's RMSNorm as ``x * 1 / sqrt(mean(x^2) + eps)`` (or ``x / sqrt(...)``)
followed by ``* scale``. onnxruntime fuses each back into one kernel (``LayerNormFusion``,
``SimplifiedLayerNormFusion``), but only with its tail: the fusion starts from the Mul (and
Add) after the normalization. A freshly initialized layer's scale is all ones and its bias
all zeros, neutral elements ``drop_neutral_element`` would remove, after which the runtime
runs seven to nine ops per norm instead of one (an opset-13 ALBERT, a T5: 1.02-1.03x slower).
onnxruntime 1.32 fuses the forms that divide by the deviation, not those that multiply by its
``Reciprocal`` (dynamo's RMSNorm): their tails go, as any neutral element does.

- :func:`affine_tail`: whether a Mul or Add is such a tail; ``drop_neutral_element`` keeps
  it (``--explain`` says why), whatever the opset.
- ``write_normalization``: where the model's opset has the op (LayerNormalization from 17,
  RMSNormalization from 23), the decomposition and its tail become that one op, with the
  tail's constants as its scale and bias (ones where there is no tail). The kernel computes
  the mean and variance in its own order: ``rounds_differently``. onnxruntime runs its own
  fusion of the original with the same kernel and attributes, so at its default level both
  compute the same bits. float32 only (the op's ``epsilon`` is a float32 attribute; float16
  would run in float32 under the default ``stash_type``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from onnxfold.declare import KEEPS_QDQ_UNITS, GraphView, Match, OpBuilder, P, pattern

_SINCE = {"LayerNormalization": 17, "RMSNormalization": 23}


def _made_by(ctx: GraphView, value: ir.Value | None, *ops: str) -> ir.Node | None:
    """The node of this graph (default domain) of one of ``ops`` that computes ``value``."""
    node = value.producer() if value is not None else None
    # what to build: onnxruntime fuses a normalization within one graph (a tail in a subgraph
    # of a head outside it is no tail it keeps)
    if node is None or node.op_type not in ops or node.domain not in ("", "ai.onnx") or \
            not ctx.here(node):
        return None
    return node


def _fixed(ctx: GraphView, value: ir.Value | None) -> bool:
    """Whether ``value`` is a constant to onnxruntime's fusion: one the fold computes, or data
    (also through an Identity ``--keep`` keeps: an exporter's shared weight, no constant of
    the fold, which onnxruntime reads through all the same)."""
    return ctx.is_constant(value) or ctx.has_array(value)


def _scalar(ctx: GraphView, value: ir.Value | None) -> float | None:
    array = ctx.array(value)
    return float(array.reshape(-1)[0]) if array is not None and array.size == 1 else None


def _axes(ctx: GraphView, node: ir.Node) -> tuple[int, ...] | None:
    """A ReduceMean's axes (attribute before opset 18, input from it) where it keeps dims."""
    if node.attributes.get_int("keepdims", 1) != 1:
        return None
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        array = ctx.array(node.inputs[1])
        return tuple(int(a) for a in array.reshape(-1)) if array is not None else None
    given = node.attributes.get_ints("axes", None)
    return tuple(given) if given else None


@dataclass(frozen=True)
class Norm:
    """A normalization written out: its op, input, reduced axes, epsilon (a constant value),
    the node whose output is the normalized ``x`` (before any tail), every node of it, and
    whether onnxruntime fuses it (with a Div by the deviation: not ``* Reciprocal(...)``)."""

    op: str
    x: ir.Value
    axes: tuple[int, ...]
    epsilon: ir.Value
    head: ir.Node
    nodes: tuple[ir.Node, ...]
    fused: bool


@dataclass(frozen=True)
class _Deviation:
    """``sqrt(mean(base^2) + eps)``: its base, its ReduceMean, eps, and its nodes."""

    base: ir.Value
    mean: ir.Node
    epsilon: ir.Value
    nodes: tuple[ir.Node, ...]


def _deviation(ctx: GraphView, divisor: ir.Value | None) -> _Deviation | None:
    root = _made_by(ctx, divisor, "Sqrt")
    added = _made_by(ctx, root.inputs[0] if root is not None else None, "Add")
    if root is None or added is None or len(added.inputs) != 2:
        return None
    for mean_side, eps in ((added.inputs[0], added.inputs[1]), (added.inputs[1], added.inputs[0])):
        mean = _made_by(ctx, mean_side, "ReduceMean")
        square = _made_by(ctx, mean.inputs[0] if mean is not None else None, "Pow")
        if mean is not None and square is not None and square.inputs[0] is not None and \
                eps is not None and _fixed(ctx, eps) and _scalar(ctx, square.inputs[1]) == 2.0:
            return _Deviation(square.inputs[0], mean, eps, (root, added, mean, square))
    return None


def norm_head(ctx: GraphView, value: ir.Value | None) -> Norm | None:
    """The normalization whose normalized input ``value`` is: a LayerNorm's ``Div(x - m,
    sqrt(mean((x - m)^2) + eps))`` with ``m = mean(x)``, or an RMSNorm's ``x / sqrt(mean(x^2) +
    eps)``, ``x * (1 / sqrt(...))`` or ``x * Reciprocal(sqrt(...))``."""
    head = _made_by(ctx, value, "Div", "Mul")
    if head is None or len(head.inputs) != 2:
        return None
    first, second = head.inputs
    orders = ((first, second),) if head.op_type == "Div" else ((first, second), (second, first))
    for numerator, divisor in orders:
        inverse = _made_by(ctx, divisor, "Reciprocal", "Div") if head.op_type == "Mul" else None
        if head.op_type == "Mul" and (inverse is None or (inverse.op_type == "Div" and
                                      _scalar(ctx, inverse.inputs[0]) != 1.0)):
            continue
        found = _deviation(ctx, inverse.inputs[-1] if inverse is not None else divisor)
        if found is None or numerator is None:
            continue
        nodes = (head, *found.nodes, *((inverse,) if inverse is not None else ()))
        fused = inverse is None or inverse.op_type == "Div"
        norm = _centred(ctx, numerator, found, head, nodes, fused)
        if norm is None and found.base is numerator:
            norm = Norm("RMSNormalization", numerator, _axes(ctx, found.mean) or (),
                        found.epsilon, head, nodes, fused)
        if norm is not None:
            return norm
    return None


def _centred(ctx: GraphView, numerator: ir.Value, found: _Deviation, head: ir.Node,
             nodes: tuple[ir.Node, ...], fused: bool) -> Norm | None:
    """A LayerNorm's head: ``numerator`` and the deviation's base are ``x - mean(x)`` (one
    Sub, or two equal ones as older exporters wrote them) over the variance's axes."""
    first, second = _made_by(ctx, numerator, "Sub"), _made_by(ctx, found.base, "Sub")
    if first is None or second is None:
        return None
    x, centre = first.inputs[0], first.inputs[1]
    mean = _made_by(ctx, centre, "ReduceMean")
    if x is None or mean is None or mean.inputs[0] is not x or second.inputs[0] is not x or \
            second.inputs[1] is not centre or _axes(ctx, mean) != _axes(ctx, found.mean):
        return None
    return Norm("LayerNormalization", x, _axes(ctx, mean) or (), found.epsilon, head,
                tuple(dict.fromkeys((*nodes, first, second, mean))), fused)


def affine_tail(ctx: GraphView, node: ir.Node) -> tuple[Norm, tuple[ir.Node, ...]] | None:
    """The normalization ``node`` is the affine tail of, and the tail's nodes up to it: a Mul
    of its normalized value (maybe through a Cast) by a constant, or a LayerNorm's Add of such
    a Mul and a constant."""
    if len(node.inputs) != 2 or node.op_type not in ("Mul", "Add"):
        return None
    for value, other in ((node.inputs[0], node.inputs[1]), (node.inputs[1], node.inputs[0])):
        if not _fixed(ctx, other) or ctx.is_constant(value):
            continue
        if node.op_type == "Add":
            scaled = _made_by(ctx, value, "Mul")
            found = affine_tail(ctx, scaled) if scaled is not None else None
            if found is not None and found[0].op == "LayerNormalization":
                return found[0], (*found[1], node)
            continue
        cast = _made_by(ctx, value, "Cast")
        norm = norm_head(ctx, cast.inputs[0] if cast is not None else value)
        if norm is not None:
            return norm, (node,)
    return None


# --- write_normalization: the op itself, where the opset has it ----------------------------

@dataclass(frozen=True)
class _Written:
    """What the rewrite needs: the input, the op, its axis and epsilon, scale and bias; and
    the decomposition's and its tail's nodes, which the driver judges removable (none read
    outside them, none a graph output)."""

    x: ir.Value
    op_type: str
    axis: int
    epsilon: float
    scale: ir.Value | np.ndarray
    bias: ir.Value | np.ndarray | None
    nodes: tuple[ir.Node, ...]


def _per_feature(ctx: GraphView, value: ir.Value | None, normalized: tuple[int, ...],
                 dtype: ir.DataType | None, rank: int) -> ir.Value | np.ndarray | None:
    """A tail constant as the op's scale or bias: itself where its shape is the normalized
    one, else its data broadcast to it (None: it varies along other axes or has more than
    ``rank`` axes, or another type)."""
    array = ctx.array(value)
    if value is None or array is None or value.dtype != dtype or array.ndim > rank or \
            any(d != 1 for d in array.shape[:max(0, array.ndim - len(normalized))]):
        return None
    tail = array.shape[max(0, array.ndim - len(normalized)):]
    if any(d not in (1, n) for d, n in zip(tail[::-1], normalized[::-1])):
        return None
    if array.shape == normalized:
        return value
    return np.ascontiguousarray(np.broadcast_to(array.reshape(tail), normalized))


def _tail_nodes(ctx: GraphView, node: ir.Node) -> tuple[Norm, tuple[ir.Node, ...]] | None:
    """``node`` as the last of a normalization with its tail: (the norm, its tail nodes)."""
    found = affine_tail(ctx, node)
    if found is not None:
        return found
    norm = norm_head(ctx, node.outputs[0])
    return (norm, ()) if norm is not None else None


def _constant_of(ctx: GraphView, node: ir.Node) -> ir.Value | None:
    return next((v for v in node.inputs if _fixed(ctx, v)), None)


def _goes_on(ctx: GraphView, node: ir.Node) -> bool:
    """Whether the only reader of ``node``'s output continues its normalization's tail and
    the op is written there or further on."""
    # what to build: where another node or the graph's outputs read this value, the op is
    # written here, without the rest of the tail
    reader = ctx.reader(node.outputs[0])
    if reader is None:
        return False
    found = _tail_nodes(ctx, reader) if reader.op_type in ("Mul", "Add") else None
    return found is not None and node in (found[0].head, *found[1]) and (
        bool(_match(ctx, reader)) or _goes_on(ctx, reader))


def _writable(ctx: GraphView, node: ir.Node) -> bool | Match:
    """The op to write for the normalization ``node`` ends, unless its tail goes on (asked
    last: most nodes are no normalization's, and most opsets have neither op)."""
    if ctx.opset() < min(_SINCE.values()):
        return False
    found = _match(ctx, node)
    return found if found and not _goes_on(ctx, node) else False


def _keeps_rank(ctx: GraphView, nodes: tuple[ir.Node, ...], rank: int) -> bool:
    """Whether no constant the decomposition reads (epsilon, the exponent 2, an RMSNorm's
    numerator 1) has more axes than its input: a size-1 constant of higher rank broadcasts
    the result into more axes, which the op would not."""
    return all(array.ndim <= rank for node in nodes for value in node.inputs
               if (array := ctx.array(value)) is not None)


def _match(ctx: GraphView, node: ir.Node) -> bool | Match:
    found = _tail_nodes(ctx, node)
    if found is None or ctx.opset() < _SINCE[found[0].op]:
        return False
    norm, tail = found
    x, rank = norm.x, len(norm.x.shape) if norm.x.shape is not None else 0
    epsilon = _scalar(ctx, norm.epsilon)
    if x.dtype != ir.DataType.FLOAT or not rank or epsilon is None or \
            norm.epsilon.dtype != ir.DataType.FLOAT or not _keeps_rank(ctx, norm.nodes, rank):
        return False
    axes = sorted(a % rank if -rank <= a < rank else rank for a in norm.axes)
    assert x.shape is not None
    normalized = tuple(d for d in x.shape[axes[0]:] if isinstance(d, int)) if axes else ()
    if not axes or axes != list(range(axes[0], rank)) or len(normalized) != len(axes):
        return False
    ones = np.ones(normalized, np.float32)
    scale = _per_feature(ctx, _constant_of(ctx, tail[0]), normalized, x.dtype, rank) \
        if tail else ones
    bias = _per_feature(ctx, _constant_of(ctx, tail[1]), normalized, x.dtype, rank) \
        if len(tail) > 1 else None
    if scale is None or (len(tail) > 1 and bias is None):
        return False
    return Match.of(_Written(x, norm.op, axes[0] - rank, epsilon, scale, bias,
                             (*norm.nodes, *tail)))


@pattern(P(("Add", "Mul", "Div"), name="node"), check=_writable, rounds_differently=True,
         tags=[KEEPS_QDQ_UNITS])
def write_normalization(op: OpBuilder, x: ir.Value, op_type: str, axis: int, epsilon: float,
                        scale: ir.Value | np.ndarray, bias: ir.Value | np.ndarray | None
                        ) -> ir.Value:
    """A LayerNorm or RMSNorm written out, with its affine tail -> the one op."""
    inputs = [v if isinstance(v, ir.Value) else op.constant(v, f"{x.name}_{role}")
              for v, role in ((scale, "scale"), (bias, "bias")) if v is not None]
    return op.node(op_type, x, *inputs, axis=axis, epsilon=epsilon)
