"""The forms onnxruntime's transformer fusers match, which a rewrite must leave as they are.

Deployers of transformers run onnxruntime's transformer optimizer
(``python -m onnxruntime.transformers.optimizer``, optimum's ``ORTOptimizer``, olive) after
any other tool: it fuses attention, embeddings and norms into onnxruntime's own ops
(``Attention``, ``EmbedLayerNormalization``, ...) whose kernels make these models fast. Its
matchers (``onnxruntime/transformers/fusion_attention.py`` and kin) read a fixed layout:

- the Q, K and V projections as three MatMuls of one input, each (with its bias ``Add``)
  reshaped into heads and transposed; merged into one MatMul and a Split they no longer match
  (``rules/shared_input_matmuls.py`` leaves projections into heads apart);
- the attention mask widened to 4-D by two ``Unsqueeze`` of the 2-D mask input; one merged
  ``Unsqueeze`` does not match (``rules/structure.py`` leaves that pair);
- a ``Gemm`` fed by a reshaped norm or activation read by a ``Reshape`` (the 2-D products of a
  dynamo GPT-2's MLP): its postprocessing assumes that Reshape and fails without it
  (``onnx_model_gpt2.py``), so the Reshapes around a pointwise region after a Gemm stay
  (``rules/structure.py`` ``elementwise_between_reshapes``);
- the scale applied once to the ``Q @ K^T`` product (``Div`` or ``Mul`` after the MatMul). A
  scaled-dot-product export scales Q and K each by a square root of the scale computed from a
  ``Shape`` (matched as such); folded, that root is a constant, so the fold writes the scale
  after the product instead (``scale_the_product_once``, below: one Mul where there were
  two, the same real numbers rounded otherwise).

The measurements behind this (every family, both orders, the peers beside):
``python -m bench run fusions`` and docs/fusions.md.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxfold.declare import GraphView, OpBuilder, P, Reject, Var, pattern
from onnxfold.ir.graph import is_default_op

from .no_ops import broadcasts_into

_FLOATS = (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16)
_MASKS = (ir.DataType.INT64, ir.DataType.INT32, ir.DataType.BOOL)


def splits_into_heads(ctx: GraphView, value: ir.Value) -> bool:
    """Whether ``value`` (a projection) is reshaped into heads and transposed, as an
    attention's Q, K and V are, after its bias ``Add`` if it has one: read by a Reshape that
    adds a dim, itself read by a Transpose."""
    # what to build: nothing, where the projections go into heads (the merge yields); a bias
    # Add of a constant between the product and its Reshape is looked through
    readers = ctx.readers(value)
    if len(readers) == 1 and is_default_op(readers[0][0], "Add") and any(
            v is not None and v is not value and ctx.is_constant(v)
            for v in readers[0][0].inputs):
        value = readers[0][0].outputs[0]
        # what to build: as above, past the bias
        readers = ctx.readers(value)
    rank = len(value.shape) if value.shape is not None else None
    for reader, index in readers:
        if index != 0 or not is_default_op(reader, "Reshape"):
            continue
        heads = reader.outputs[0]
        if rank is not None and heads.shape is not None and len(heads.shape) != rank + 1:
            continue
        # what to build: as above, the heads' Transpose decides the merge yields
        if any(is_default_op(after, "Transpose") for after, _ in ctx.readers(heads)):
            return True
    return False


def reshapes_a_gemm(reshape: ir.Node) -> bool:
    """Whether ``reshape`` reads a Gemm's product."""
    source = reshape.inputs[0] if reshape.inputs else None
    producer = source.producer() if source is not None else None
    return producer is not None and is_default_op(producer, "Gemm")


def is_mask_widening(ctx: GraphView, x: ir.Value, merged_axes: list[int]) -> bool:
    """Whether two Unsqueezes of ``x`` into ``merged_axes`` widen a 2-D mask input (integer or
    bool, as exporters declare ``attention_mask``) to the 4-D ``[batch, 1, 1, sequence]`` an
    attention adds to its scores."""
    return (not ctx.has_array(x) and x.producer() is None and x.shape is not None
            and len(x.shape) == 2 and merged_axes == [1, 2] and x.dtype in _MASKS)


def _scales_move(ctx: GraphView, node: ir.Node, a: ir.Value, b: ir.Value, s: ir.Value,
                 t: ir.Value) -> bool | Reject:
    """Whether ``(a * s) @ (b * t)`` may be ``(a @ b) * (s * t)``: one float dtype, ``s`` and
    ``t`` one finite value each that changes neither operand's shape, and ``s * t`` finite
    and normal (a scaled operand read elsewhere too: the driver refuses the rewrite)."""
    if a.dtype not in _FLOATS or {b.dtype, s.dtype, t.dtype} != {a.dtype}:
        return Reject("not one float dtype")
    first, second = ctx.array(s), ctx.array(t)
    if first is None or second is None or first.size != 1 or second.size != 1 or \
            not (broadcasts_into(ctx, s, a) and broadcasts_into(ctx, t, b)):
        return Reject("a scale is not one value that leaves its operand's shape")
    a_scale, b_scale = first.reshape(()), second.reshape(())
    with np.errstate(all="ignore"):
        product = a_scale * b_scale
    if not (np.isfinite(a_scale) and np.isfinite(b_scale) and np.isfinite(product)) or \
            (a_scale != 0 and b_scale != 0 and abs(product) < np.finfo(product.dtype).tiny):
        return Reject("a scale or their product is not finite and normal")
    return True


@pattern(P("MatMul", P("Mul", Var("a"), Var("s", const=True), commute=True),
           P("Mul", Var("b"), Var("t", const=True), commute=True), name="node"),
         check=_scales_move, rounds_differently=True)
def scale_the_product_once(op: OpBuilder, node: ir.Node, a: ir.Value, b: ir.Value,
                           s: ir.Value, t: ir.Value) -> ir.Value:
    """(a * s) @ (b * t) -> (a @ b) * (s * t), s and t one value each (the fold computes
    s * t): the form onnxruntime's attention fusers match."""
    out = node.outputs[0]
    product = op.MatMul(a, b, _dtype=out.dtype, _shape=out.shape, _name=f"{node.name}_product")
    scale = op.Mul(s, t, _dtype=out.dtype, _name=f"{node.name}_scale")
    return op.Mul(product, scale, _dtype=out.dtype, _shape=out.shape)
