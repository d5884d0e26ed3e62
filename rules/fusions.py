"""Constant weight fusions: a rewrite moves a constant operation into a weight, the fold then
computes the new weight (the new nodes go right before the node they replace, after every
value they read) (onnx-mlir's FuseBatchNorm/FuseMulConv patterns, onnxruntime's basic
ConvBNFusion). Only float32/float64 weights used by nothing else (also through Identity
nodes), so no tensor is duplicated; only finite factors whose products with the weights stay
finite. As in onnxruntime's fusions, the sign of an exact-zero result may differ (-0.0 for
+0.0): the fused convolution sums products that were scaled before, not after.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx_ir as ir

from onnxfold.analysis import through_identities
from onnxfold.patterns import P, Reject, RewriteContext, Var, pattern

_FLOATS = (ir.DataType.FLOAT, ir.DataType.DOUBLE)
_CONV = P(("Conv", "ConvTranspose"), Var("x"), Var("w", const=True), ..., name="conv",
          single_use=True)
_BATCH_NORM = P("BatchNormalization", _CONV, Var("scale", const=True), Var("bias", const=True),
                Var("mean", const=True), Var("var", const=True), name="bn")


def _finite(ctx: RewriteContext, *values: ir.Value) -> bool:
    """Whether the data of every one of ``values`` is at hand and finite (an inf or NaN
    multiplied into a weight no longer gives the NaNs and infs of the original)."""
    arrays = [ctx.array(v) for v in values]
    return all(a is not None and bool(np.isfinite(a).all()) for a in arrays)


def _scaled_stays_finite(ctx: RewriteContext, w: ir.Value, factor: np.ndarray) -> bool:
    """Whether every weight times the largest factor stays finite (an overflow to inf would
    give NaN where the original gives 0)."""
    weight = ctx.array(w)
    if weight is None or weight.size == 0 or factor.size == 0:
        return weight is not None
    top = float(np.abs(weight).max()) * float(np.abs(factor).max())
    return bool(np.isfinite(np.asarray(top, weight.dtype)))


def _sole_reader(ctx: RewriteContext, value: ir.Value | None) -> bool:
    """Whether ``value`` (through the Identity nodes exporters share weights with) is read by
    one node only: fusing it then duplicates nothing."""
    return all(ctx.single_use(link) for link in through_identities(value))


def _output_channel_axis(conv: ir.Node, w_rank: int) -> int | None:
    """The axis of the weight that indexes output channels (None: not one axis)."""
    group = conv.attributes.get_int("group") or 1
    if conv.op_type == "Conv":
        return 0
    return 1 if group == 1 and w_rank >= 2 else None


def _channels(ctx: RewriteContext, conv: ir.Node, w: ir.Value) -> int | None:
    """The convolution's output channel count (None: unknown, or a grouped ConvTranspose)."""
    shape = ctx.shape(w)
    axis = _output_channel_axis(conv, len(shape)) if shape is not None else None
    return None if shape is None or axis is None else shape[axis]


def _batch_norm_fusable(ctx: RewriteContext, conv: ir.Node, bn: ir.Node, w: ir.Value,
                        **_: object) -> bool | Reject:
    if len(bn.outputs) != 1 or bn.attributes.get_int("training_mode"):
        return Reject("training-mode BatchNormalization")
    if bn.attributes.get_int("spatial", 1) == 0:
        return Reject("spatial=0: per-activation parameters")
    bias = conv.inputs[2] if len(conv.inputs) > 2 else None
    if bias is not None and not ctx.is_constant(bias):
        return Reject("the convolution's bias is not constant")
    if not all(_sole_reader(ctx, v) for v in (w, bias)):
        return Reject("the weight is shared: fusing would duplicate it")
    if w.dtype not in _FLOATS or any(v.dtype != w.dtype for v in bn.inputs if v is not None):
        return Reject("not one float32/float64 dtype")
    channels = _channels(ctx, conv, w)
    if channels is None:
        return Reject("grouped ConvTranspose, or the weight's shape is unknown")
    if any(ctx.shape(v) != (channels,) for v in bn.inputs[1:]):
        return Reject("BatchNormalization parameters are not one per output channel")
    scale, var = bn.inputs[1], bn.inputs[4]
    assert scale is not None and var is not None  # matched by the pattern
    eps = bn.attributes.get_float("epsilon", 1e-5)
    if not _finite(ctx, scale, var) or not (np.asarray(ctx.array(var)) + eps > 0).all():
        return Reject("scale or variance not at hand, not finite, or var + epsilon <= 0")
    with np.errstate(all="ignore"):
        factor = np.asarray(ctx.array(scale)) / np.sqrt(np.asarray(ctx.array(var)) + eps)
    if not _scaled_stays_finite(ctx, w, factor):
        return Reject("the fused weight would overflow")
    return True


@pattern(_BATCH_NORM, check=_batch_norm_fusable, name="fuse_batch_norm_into_conv")
def fuse_batch_norm_into_conv(ctx: RewriteContext, conv: ir.Node, bn: ir.Node, x: ir.Value,
                              w: ir.Value, scale: ir.Value, bias: ir.Value, mean: ir.Value,
                              var: ir.Value) -> None:
    """BN(Conv(x, W, B)) -> Conv(x, W * s, (B - mean) * s + bias), s = scale / sqrt(var + eps),
    along the weight's output-channel axis."""
    dtype = w.dtype
    assert dtype is not None  # the check compared it
    np_dtype = dtype.numpy()

    def node(op: str, *inputs: ir.Value) -> ir.Value:
        return ctx.add_node(op, list(inputs), bn, dtype=dtype, base=f"{conv.name}_{op}")

    eps = ctx.constant_value(np.asarray(bn.attributes.get_float("epsilon", 1e-5), np_dtype),
                             "bn_epsilon")
    s = node("Div", scale, node("Sqrt", node("Add", var, eps)))
    old_bias = conv.inputs[2] if len(conv.inputs) > 2 else None
    shifted = node("Neg", mean) if old_bias is None else node("Sub", old_bias, mean)
    new_bias = node("Add", node("Mul", shifted, s), bias)
    _fused_conv(conv, bn, x, node("Mul", w, _along_output_channels(ctx, s, conv, w, bn)),
                new_bias, ctx)


def _channel_constant(ctx: RewriteContext, conv: ir.Node, w: ir.Value, c: ir.Value,
                      **_: object) -> bool | Reject:
    """Whether ``c``, broadcast against the convolution's output (N, M, ...), is one value per
    output channel (shape (M, 1, ..), (1, M, 1, ..) or all ones) and changes nothing else."""
    c_shape, w_shape = ctx.shape(c), ctx.shape(w)
    channels = _channels(ctx, conv, w)
    if c_shape is None or w_shape is None or channels is None:
        return Reject("shapes unknown, or grouped ConvTranspose")
    rank = len(w_shape)  # the output's rank
    if len(c_shape) > rank or c.dtype != w.dtype or w.dtype not in _FLOATS:
        return Reject("not a per-channel float constant of the output's dtype")
    channel_at = rank - 2  # the channel axis, counted from the end
    for i, d in enumerate(reversed(c_shape)):
        if d != 1 and (i != channel_at or d != channels):
            return Reject("not one value per output channel")
    if not _finite(ctx, c):
        return Reject("the constant is not at hand or not finite")
    bias = conv.inputs[2] if len(conv.inputs) > 2 else None
    if not all(_sole_reader(ctx, v) for v in (w, bias)):
        return Reject("the weight is shared: fusing would duplicate it")
    if bias is not None and not ctx.is_constant(bias):
        return Reject("the bias is not constant")
    if not _scaled_stays_finite(ctx, w, np.asarray(ctx.array(c))):
        return Reject("the fused weight would overflow")
    return True


def _channel_vector(ctx: RewriteContext, c: ir.Value, op: ir.Node) -> ir.Value:
    """``c`` flattened (inserted before ``op``): one entry, or one per output channel."""
    flat = ctx.constant_value(np.array([-1], np.int64), "flat")
    return ctx.add_node("Reshape", [c, flat], op, dtype=c.dtype, base=f"{op.name}_c")


def _fused_conv(conv: ir.Node, op: ir.Node, x: ir.Value, weight: ir.Value, bias: ir.Value,
             ctx: RewriteContext) -> None:
    """``op`` (reading the convolution) becomes Conv(x, weight, bias)."""
    fused = ctx.add_node(conv.op_type, [x, weight, bias], op,
                         attributes=conv.attributes.values(), dtype=weight.dtype,
                         shape=op.outputs[0].shape, base=op.outputs[0].name)
    ctx.replace_node(op, fused)
    ctx.remove_if_unused(conv)


def _along_output_channels(ctx: RewriteContext, factors: ir.Value, conv: ir.Node, w: ir.Value,
                           at: ir.Node) -> ir.Value:
    """``factors`` (one per output channel, or one) reshaped to broadcast along the weight's
    output-channel axis, inserted before ``at``."""
    w_shape = ctx.shape(w)
    axis = _output_channel_axis(conv, len(w_shape)) if w_shape is not None else None
    assert w_shape is not None and axis is not None  # the checks saw both
    target = np.ones(len(w_shape), np.int64)
    target[axis] = -1
    return ctx.add_node("Reshape", [factors, ctx.constant_value(target, "channel_shape")], at,
                        dtype=factors.dtype, base=f"{conv.name}_scale")


def _bias_or_zeros(ctx: RewriteContext, conv: ir.Node, w: ir.Value) -> ir.Value:
    if len(conv.inputs) > 2 and conv.inputs[2] is not None:
        return conv.inputs[2]
    channels = _channels(ctx, conv, w)
    assert channels is not None and w.dtype is not None  # the check saw both
    return ctx.constant_value(np.zeros(channels, w.dtype.numpy()), "conv_bias")


def _with_a_channel_constant(op: str) -> Callable[[Callable], Callable]:
    """Declare the decorated rewrite for ``op(Conv(...), c)`` and ``op(c, Conv(...))``, ``c``
    one constant per output channel."""
    def register(fn: Callable) -> Callable:
        for operands in ((_CONV, Var("c", const=True)), (Var("c", const=True), _CONV)):
            fn = pattern(P(op, *operands, name="op"), check=_channel_constant)(fn)
        return fn

    return register


@_with_a_channel_constant("Mul")
def fuse_mul_into_conv(ctx: RewriteContext, conv: ir.Node, op: ir.Node, x: ir.Value,
                       w: ir.Value, c: ir.Value) -> None:
    """Conv(x, W, B) * c -> Conv(x, W * c', B * c), c one value per output channel."""
    vector = _channel_vector(ctx, c, op)
    weight = ctx.add_node("Mul", [w, _along_output_channels(ctx, vector, conv, w, op)], op,
                          dtype=w.dtype, base=f"{conv.name}_w")
    bias = ctx.add_node("Mul", [_bias_or_zeros(ctx, conv, w), vector], op, dtype=w.dtype,
                        base=f"{conv.name}_b")
    _fused_conv(conv, op, x, weight, bias, ctx)


@_with_a_channel_constant("Add")
def fuse_add_into_conv(ctx: RewriteContext, conv: ir.Node, op: ir.Node, x: ir.Value,
                       w: ir.Value, c: ir.Value) -> None:
    """Conv(x, W, B) + c -> Conv(x, W, B + c), c one value per output channel."""
    bias = ctx.add_node("Add", [_bias_or_zeros(ctx, conv, w), _channel_vector(ctx, c, op)],
                        op, dtype=w.dtype, base=f"{conv.name}_b")
    _fused_conv(conv, op, x, w, bias, ctx)
