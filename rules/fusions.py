"""Constant weight fusions: a rewrite moves a constant operation into a weight, the fold then
computes the new weight (onnx-mlir's FuseBatchNorm/FuseMulConv patterns, onnxruntime's basic
ConvBNFusion). Only float32/float64 weights used by nothing else, so no tensor is duplicated.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxfold.patterns import P, Reject, RewriteContext, Var, pattern

_FLOATS = (ir.DataType.FLOAT, ir.DataType.DOUBLE)
_CONV = P(("Conv", "ConvTranspose"), Var("x"), Var("w", const=True), ..., name="conv",
          single_use=True)
_BATCH_NORM = P("BatchNormalization", _CONV, Var("scale", const=True), Var("bias", const=True),
                Var("mean", const=True), Var("var", const=True), name="bn")


def _output_channel_axis(conv: ir.Node, w_rank: int) -> int | None:
    """The axis of the weight that indexes output channels (None: not one axis)."""
    group = conv.attributes.get_int("group") or 1
    if conv.op_type == "Conv":
        return 0
    return 1 if group == 1 and w_rank >= 2 else None


def _batch_norm_fusable(ctx: RewriteContext, conv: ir.Node, bn: ir.Node, w: ir.Value,
                        **_: object) -> bool | Reject:
    if len(bn.outputs) != 1 or bn.attributes.get_int("training_mode"):
        return Reject("training-mode BatchNormalization")
    bias = conv.inputs[2] if len(conv.inputs) > 2 else None
    if bias is not None and not ctx.is_constant(bias):
        return Reject("the convolution's bias is not constant")
    if any(v is not None and not ctx.single_use(v) for v in (w, bias)):
        return Reject("the weight is shared: fusing would duplicate it")
    shape = ctx.shape(w)
    if w.dtype not in _FLOATS or any(v.dtype != w.dtype for v in bn.inputs if v is not None):
        return Reject("not one float32/float64 dtype")
    if shape is None or _output_channel_axis(conv, len(shape)) is None:
        return Reject("grouped ConvTranspose, or the weight's shape is unknown")
    return True


@pattern(_BATCH_NORM, check=_batch_norm_fusable, name="fuse_batch_norm_into_conv")
def fuse_batch_norm_into_conv(ctx: RewriteContext, conv: ir.Node, bn: ir.Node, x: ir.Value,
                              w: ir.Value, scale: ir.Value, bias: ir.Value, mean: ir.Value,
                              var: ir.Value) -> None:
    """BN(Conv(x, W, B)) -> Conv(x, W * s, (B - mean) * s + bias), s = scale / sqrt(var + eps),
    along the weight's output-channel axis."""
    dtype = w.dtype
    assert dtype is not None  # the check compared it
    rank = len(ctx.shape(w) or ())
    axis = _output_channel_axis(conv, rank)
    np_dtype = dtype.numpy()

    def node(op: str, *inputs: ir.Value) -> ir.Value:
        return ctx.add_node(op, list(inputs), conv, dtype=dtype, base=f"{conv.name}_{op}")

    eps = ctx.constant_value(np.asarray(bn.attributes.get_float("epsilon", 1e-5), np_dtype),
                             "bn_epsilon")
    s = node("Div", scale, node("Sqrt", node("Add", var, eps)))
    target = np.ones(rank, np.int64)
    target[axis] = -1
    per_channel = ctx.add_node("Reshape", [s, ctx.constant_value(target, "bn_scale_shape")],
                               conv, dtype=dtype, base=f"{conv.name}_scale")
    old_bias = conv.inputs[2] if len(conv.inputs) > 2 else None
    shifted = node("Neg", mean) if old_bias is None else node("Sub", old_bias, mean)
    new_bias = node("Add", node("Mul", shifted, s), bias)
    fused = ctx.add_node(conv.op_type, [x, node("Mul", w, per_channel), new_bias], conv,
                         attributes=conv.attributes.values(), dtype=dtype,
                         shape=bn.outputs[0].shape, base=bn.outputs[0].name)
    ctx.replace_node(bn, fused)
    ctx.remove_if_unused(conv)
