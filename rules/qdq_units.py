"""onnxruntime's QDQ node units, which a rewrite must not break.

A statically quantized model (``quantize_static``, QDQ format; QAT exports; NPU toolchains)
computes every quantized op in float between a ``DequantizeLinear`` of each input and a
``QuantizeLinear`` of its output: ``DQ -> op -> Q``. onnxruntime turns each such unit into one
integer kernel (``QLinearMatMul``, ``QLinearConv``, ``MatMulIntegerToFloat``, ``MatMulNBits``
for weight-only int4, ...), and NPU execution providers take only whole units. A rewrite that
replaces or removes the op of a unit, or computes something new from its dequantized weight
(a ``Concat`` of the Q, K and V weights, a weight scaled by a batch norm), leaves float ops
that onnxruntime runs as they are, on every call: a static-QDQ BERT ran 2.3x slower after
``merge_shared_input_matmuls`` merged its projections (issue 35).

A node is in a unit when it reads a ``DequantizeLinear`` output or one of its outputs is read
by a ``QuantizeLinear``, directly or through the ops onnxruntime's QDQ propagation moves a Q or
DQ across (``PROPAGATING``: it makes ``DQ -> Transpose -> MatMul`` a ``DQ -> MatMul`` unit).
Rules whose rewrite would break one are tagged ``keeps_qdq_units``
(``@pattern(..., tags=[KEEPS_QDQ_UNITS])``): the driver refuses their proposals that remove or
rewire a node of a unit (``onnxfold/ir/qdq_units.py``); a check that chooses among nodes asks
:func:`qdq_unit_of` or declines with :func:`breaks_qdq_units`. Float models have no such node,
so nothing changes for them.
"""

from __future__ import annotations

import onnx_ir as ir

from onnxfold.declare import Reject
from onnxfold.ir.qdq_units import broken_unit, dequantized, qdq_unit_of, quantized

__all__ = ["breaks_qdq_units", "dequantized", "qdq_unit_of", "quantized"]


def breaks_qdq_units(*nodes: ir.Node) -> Reject | None:
    """A rejection if any of ``nodes`` (what a rewrite replaces or removes) is in a QDQ node
    unit; None if the rewrite breaks none. In a check::

        if (unit := breaks_qdq_units(layer, op)) is not None:
            return unit
    """
    reason = broken_unit(nodes)
    return None if reason is None else Reject(reason)
