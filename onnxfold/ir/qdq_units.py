"""onnxruntime's QDQ node units: which nodes a rewrite must leave whole in a quantized model.

A statically quantized model (``quantize_static``, QDQ format; QAT exports; NPU toolchains)
computes every quantized op in float between a ``DequantizeLinear`` of each input and a
``QuantizeLinear`` of its output, ``DQ -> op -> Q``. onnxruntime turns each such unit into one
integer kernel (``QLinearMatMul``, ``QLinearConv``, ``MatMulIntegerToFloat``, ``MatMulNBits``
for weight-only int4, ...), and NPU execution providers take only whole units. A rewrite that
replaces or removes the op of a unit, or computes something new from its dequantized weight
(a ``Concat`` of the Q, K and V weights, a weight scaled by a batch norm), leaves float ops
that onnxruntime runs as they are, on every call: a static-QDQ BERT ran 2.3x slower after
``merge_shared_input_matmuls`` merged its projections (issue 35). Float models have no such
node, so nothing changes for them.

A node is in a unit when it reads a ``DequantizeLinear`` output or one of its
outputs is read by a ``QuantizeLinear``, directly or through the ops onnxruntime's QDQ
propagation moves a Q or DQ across (``PROPAGATING``). The rewrite driver refuses a proposal
of a rule tagged ``keeps_qdq_units`` that would remove or rewire such a node
(``rewrite/judge.py``, tagged ``@pattern(..., tags=[KEEPS_QDQ_UNITS])``); rules ask
:func:`qdq_unit_of` and :func:`dequantized` themselves only where they choose among nodes
(which sibling products to merge, which branch to fold into a weight).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import onnx_ir as ir

QDQ_DOMAINS = ("", "ai.onnx", "com.microsoft")  # com.microsoft: onnxruntime's contrib Q/DQ
# onnxruntime's QDQPropagationTransformer (CanNodePropagate), and Identity, which it removes
PROPAGATING = frozenset({"Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Slice",
                         "MaxPool"})
MAX_HOPS = 8  # propagating nodes followed from a value


def _is(node: ir.Node | None, op_type: str) -> bool:
    return node is not None and node.op_type == op_type and node.domain in QDQ_DOMAINS


def _propagates(node: ir.Node) -> bool:
    return node.op_type in PROPAGATING and node.domain in ("", "ai.onnx")


def dequantized(value: ir.Value | None) -> bool:
    """Whether ``value`` is a ``DequantizeLinear`` output, or one moved by ``PROPAGATING``
    ops (through their data input, input 0)."""
    for _ in range(MAX_HOPS + 1):
        producer = value.producer() if value is not None else None
        if producer is None:
            return False
        if _is(producer, "DequantizeLinear"):
            return True
        if not _propagates(producer) or not producer.inputs:
            return False
        value = producer.inputs[0]
    return False


def _readers(value: ir.Value, hops: int) -> Iterator[tuple[ir.Node, int]]:
    """The nodes reading ``value`` (and at which input), followed through ``PROPAGATING``
    nodes reading it as their data input, at most ``hops`` deep."""
    for node, index in value.uses():
        yield node, index
        if hops and index == 0 and _propagates(node) and node.outputs:
            yield from _readers(node.outputs[0], hops - 1)


def quantized(value: ir.Value) -> bool:
    """Whether ``value`` is read by a ``QuantizeLinear`` (as the data it quantizes), directly
    or through ``PROPAGATING`` ops."""
    return any(_is(node, "QuantizeLinear") and index == 0
               for node, index in _readers(value, MAX_HOPS))


def qdq_unit_of(node: ir.Node) -> str | None:
    """How ``node`` belongs to a QDQ node unit (None: it does not), in words that do not
    name values, so that ``--explain`` counts the declines of one rule together."""
    if any(value is not None and dequantized(value) for value in node.inputs):
        return f"{node.op_type} reads a DequantizeLinear output"
    if any(quantized(value) for value in node.outputs):
        return f"a QuantizeLinear reads the {node.op_type}'s result"
    return None


def broken_unit(nodes: Iterable[ir.Node]) -> str | None:
    """Why a rewrite replacing or removing ``nodes`` would break a QDQ node unit (the first
    of them in one), None if it breaks none."""
    for node in nodes:
        how = qdq_unit_of(node)
        if how is not None:
            return f"in a QDQ node unit onnxruntime runs as an integer kernel: {how}"
    return None
