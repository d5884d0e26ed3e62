"""A GRU's or LSTM's initial state of +0.0 is the state it starts from without one.

Exporters build ``torch.zeros(layers * directions, x.size(0), hidden)`` as
``Shape -> Gather -> Unsqueeze -> Concat -> ConstantOfShape`` (TorchScript) or ``Expand`` of a
scalar 0 (dynamo), sliced per layer: seven nodes that run on every call for a state the op
assumes anyway. onnxruntime's GRU and LSTM kernels start from a buffer filled with ``T{}``
(+0.0) and copy a given ``initial_h`` / ``initial_c`` over it (``deep_cpu_gru.cc``,
``uni_directional_lstm.cc``), so a state of +0.0 computes the same bits as none. It goes when:

- every element is +0.0 for every value of the dynamic dims (a ``ConstantOfShape`` or an
  ``Expand`` of +0.0 to a shape of dims that are never negative, then only ops that move or
  keep elements: ``Slice``, ``Transpose``, ``Identity``, a ``Cast`` to a float type); -0.0
  would not do (``z * h`` keeps its sign);
- its shape is provably the one the op checks (``[num_directions, batch, hidden_size]``), so
  the op fails without it wherever it failed with it. (onnxruntime runs no ``layout=1``
  recurrent op: those are left alone.)

``RNN`` keeps its state: its kernel computes ``h * R`` only for a given one, and the sum of
those zeros may be -0.0 where the missing one adds +0.0.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxfold.declare import (
    GraphView,
    Match,
    OpBuilder,
    P,
    Reject,
    Replacement,
    nonnegative,
    pattern,
)
from onnxfold.ir.graph import is_default_op, tensor_of

STATES = {"GRU": (5,), "LSTM": (5, 6)}  # initial_h (and initial_c): optional inputs
MOVES = ("Slice", "Transpose", "Identity", "Cast")  # keep each element's bits (Cast: to float)
MAX_HOPS = 8


def _plus_zeros(array: np.ndarray) -> bool:
    return array.dtype.kind == "f" and not array.any() and not np.signbit(array).any()


def _never_negative(ctx: GraphView, shape: ir.Value | None) -> bool:
    known = ctx.shape_value(shape) if shape is not None else None
    return known is not None and not known.scalar and all(nonnegative(e) for e in known.elements)


def _filled(ctx: GraphView, node: ir.Node) -> bool:
    """Whether ``node`` fills its output with +0.0 and cannot fail for its shape."""
    if node.op_type == "ConstantOfShape":
        attr = node.attributes.get("value")
        fill = tensor_of(attr).numpy() if attr is not None else np.zeros(1, np.float32)
        return _plus_zeros(fill) and _never_negative(ctx, node.inputs[0])
    if node.op_type == "Expand" and len(node.inputs) == 2:
        scalar = ctx.array(node.inputs[0])
        return scalar is not None and scalar.size == 1 and _plus_zeros(scalar) and \
            _never_negative(ctx, node.inputs[1])
    return False


def all_plus_zero(ctx: GraphView, value: ir.Value | None) -> bool:
    """Whether every element of ``value`` is +0.0, whatever the dynamic dims."""
    for _ in range(MAX_HOPS):
        if value is None:
            return False
        array = ctx.array(value)
        if array is not None:
            return _plus_zeros(array)
        node = value.producer()
        if node is None or not is_default_op(node):
            return False
        if _filled(ctx, node):
            return True
        to = node.attributes.get_int("to") if node.op_type == "Cast" else None
        if node.op_type not in MOVES or (to is not None and (
                to not in {int(t) for t in ir.DataType} or
                not ir.DataType(to).is_floating_point())):
            return False
        value = node.inputs[0] if node.inputs else None
    return False


def _hidden_size(ctx: GraphView, node: ir.Node) -> int | None:
    given = node.attributes.get_int("hidden_size")
    if given is not None:
        return given
    r = ctx.shape(node.inputs[2]) if len(node.inputs) > 2 else None
    return r[2] if r is not None and len(r) == 3 else None


def _default_shaped(ctx: GraphView, node: ir.Node, state: ir.Value) -> bool:
    """Whether ``state`` has the shape the op demands of it, for every dynamic dim."""
    x = node.inputs[0]
    if x is None or state.shape is None or len(state.shape) != 3:
        return False
    directions = 2 if node.attributes.get_string("direction", "forward") == "bidirectional" \
        else 1
    batch = ctx.dim(x, 1)
    return batch is not None and ctx.dim(state, 0) == directions and \
        ctx.dim(state, 1) == batch and ctx.dim(state, 2) == _hidden_size(ctx, node)


def _zero_states(ctx: GraphView, node: ir.Node) -> list[int] | Reject:
    """The positions of ``node``'s initial states that are +0.0 of the default shape."""
    found = []
    for i in STATES[node.op_type]:
        state = node.inputs[i] if i < len(node.inputs) else None
        if state is None or not all_plus_zero(ctx, state):
            continue
        if not _default_shaped(ctx, node, state):
            return Reject("a zero initial state of a shape not provably the op's")
        found.append(i)
    return found


def _has_zero_states(ctx: GraphView, node: ir.Node) -> bool | Match | Reject:
    if not is_default_op(node) or len(node.inputs) <= min(STATES[node.op_type]) or \
            node.attributes.get_int("layout", 0) != 0:
        return False
    found = _zero_states(ctx, node)
    if isinstance(found, Reject):
        return found
    return Match(zero=found) if found else False


@pattern(P(tuple(STATES), name="node"), check=_has_zero_states)
def drop_zero_initial_state(op: OpBuilder, node: ir.Node, zero: list[int]) -> Replacement:
    """GRU(x, W, R, B, lens, zeros) -> GRU(x, W, R, B, lens): the state it starts from."""
    inputs = [None if i in zero else v for i, v in enumerate(node.inputs)]
    while inputs[-1] is None:  # input 0, the data, is given
        inputs.pop()
    return Replacement(inputs={node: inputs})
