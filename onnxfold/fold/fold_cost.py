"""How much arithmetic a batch of fallback nodes costs, estimated from shapes before it runs.

onnxruntime stops a run (``RunOptions.terminate``) only between kernels, so a single long
kernel outlives ``--fold-timeout``; the fallback runs the batches this estimate calls expensive
in a child process that can be killed (``onnxfold.fold.fallback_child``). The estimate counts
floating-point operations (a multiply-add is 2) of the kernels whose cost grows faster than
their inputs and outputs: convolutions, matrix products, recurrent layers. Every other op
counts one operation per element it reads or writes. A shape that is not known counts as
nothing: the estimate errs towards running in the process, where the timeout still applies
between kernels.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx_ir as ir

from onnxfold.ir.graph import static_shape

Shape = tuple[int, ...]


def batch_flops(nodes: Sequence[ir.Node], feeds: Mapping[ir.Value, np.ndarray]) -> int:
    """The estimated operations of running ``nodes``; ``feeds`` give the shapes of the
    constant inputs (the other values' come from their static shapes)."""

    def shape(value: ir.Value | None) -> Shape | None:
        if value is None:
            return None
        if value in feeds:
            return tuple(feeds[value].shape)
        return static_shape(value)

    return sum(node_flops(node, shape) for node in nodes)


def node_flops(node: ir.Node, shape: Callable[[ir.Value | None], Shape | None]) -> int:
    """The estimated operations of ``node`` (``shape``: a value's shape, or None)."""
    inputs = [shape(v) for v in node.inputs]
    outputs = [shape(v) for v in node.outputs]
    estimate = _SPECIAL.get(node.op_type)
    if estimate is not None:
        special = estimate(node, inputs, outputs)
        if special is not None:
            return special
    return sum(math.prod(s) for s in (*inputs, *outputs) if s is not None)


def _attribute(node: ir.Node, name: str, default: int) -> int:
    attr = node.attributes.get(name)
    return default if attr is None else int(attr.as_int())


def _conv(node: ir.Node, inputs: list[Shape | None], outputs: list[Shape | None]) -> int | None:
    """2 x output elements x input channels per group x kernel elements (Conv and its
    quantized forms, whose weight is the second input, or the fourth for QLinearConv)."""
    weight = inputs[3] if node.op_type == "QLinearConv" and len(inputs) > 3 else \
        (inputs[1] if len(inputs) > 1 else None)
    out = outputs[0] if outputs else None
    if weight is None or len(weight) < 3:
        return None
    if out is None:  # as large as the input's spatial extent, Cout channels: 'same' padding
        x = inputs[0]
        if x is None or len(x) != len(weight):
            return None
        out = (x[0], weight[0], *x[2:])
    return 2 * math.prod(out) * math.prod(weight[1:])


def _conv_transpose(node: ir.Node, inputs: list[Shape | None],
                    outputs: list[Shape | None]) -> int | None:
    """2 x input elements x output channels per group x kernel elements."""
    x, weight = inputs[0], inputs[1] if len(inputs) > 1 else None
    if x is None or weight is None or len(weight) < 3:
        return None
    return 2 * math.prod(x) * math.prod(weight[1:])


def _matmul(node: ir.Node, inputs: list[Shape | None], outputs: list[Shape | None]
            ) -> int | None:
    """2 x output elements x the reduced dimension (MatMul, Gemm and their variants)."""
    a = inputs[3] if node.op_type == "QLinearMatMul" and len(inputs) > 3 else inputs[0]
    out = outputs[0] if outputs else None
    if a is None or not a or out is None:
        return None
    reduced = a[0] if node.op_type == "Gemm" and _attribute(node, "transA", 0) else a[-1]
    return 2 * math.prod(out) * reduced


def _recurrent(node: ir.Node, inputs: list[Shape | None], outputs: list[Shape | None]
               ) -> int | None:
    """2 x steps x batch x (input + hidden) x gates x hidden, per direction (LSTM, GRU, RNN;
    X is [seq, batch, input], or [batch, seq, input] with layout=1)."""
    x, weight = inputs[0], inputs[1] if len(inputs) > 1 else None
    if x is None or weight is None or len(x) != 3 or len(weight) != 3:
        return None
    hidden = _attribute(node, "hidden_size", 0)
    directions, gate_rows, input_size = weight
    return 2 * x[0] * x[1] * directions * gate_rows * (input_size + hidden)


_SPECIAL: dict[str, Callable[[ir.Node, list[Shape | None], list[Shape | None]], int | None]] = {
    "Conv": _conv, "ConvInteger": _conv, "QLinearConv": _conv, "FusedConv": _conv,
    "ConvTranspose": _conv_transpose,
    "MatMul": _matmul, "Gemm": _matmul, "MatMulInteger": _matmul, "QLinearMatMul": _matmul,
    "FusedMatMul": _matmul, "FusedGemm": _matmul, "MatMulIntegerToFloat": _matmul,
    "LSTM": _recurrent, "GRU": _recurrent, "RNN": _recurrent,
}
