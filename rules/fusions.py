"""Constant weight fusions: a rewrite moves a constant operation into a weight, the fold then
computes the new weight (the new nodes go right before the node they replace, after every
value they read) (onnx-mlir's FuseBatchNorm/FuseMulConv patterns, onnxruntime's basic
ConvBNFusion and MatMulAddFusion): BatchNormalization into Conv, ConvTranspose, Gemm and 2-D
MatMul weights (the MatMul becomes a Gemm), per-channel Mul/Add into Conv, MatMul(2-D) + Add
into Gemm, and (x * k) * c into x * (k * c). Only float32/float64 weights used by nothing else
(also through Identity nodes), so no tensor is duplicated; only finite factors whose products
with the weights stay finite (MatMul + Add -> Gemm computes no weight, and takes float16 too:
onnxruntime's CPU Gemm runs it). As in onnxruntime's fusions, the sign of an exact-zero result
may differ (-0.0 for +0.0): the fused convolution sums products that were scaled before, not
after.

A fused weight rounds once where the original rounded twice (``W * s`` before the products,
``k * c`` before ``x``), so results move within float tolerance, as with onnxruntime's own
fusions. ``(x * k) * c -> x * (k * c)`` also moves where the range ends: an ``x * k`` that
overflows to inf (or underflows to 0) in the original may not in the fused product, and back;
only constants whose product is finite and normal are merged. ``(x + k) + c`` is not merged:
the original loses the low bits of ``x`` to ``k``, the fused sum keeps them, and that
difference is not relative to the result (cancellation makes it any size).

No fusion touches a quantized (QDQ) model's node units (``onnxfold/ir/qdq_units.py``; each fusion is
tagged ``keeps_qdq_units``, and the driver refuses its proposals that would): a layer or op
that reads a ``DequantizeLinear`` output or whose result a ``QuantizeLinear`` reads stays, so
its weight stays quantized and onnxruntime still runs the unit as an integer kernel (a fused
weight would be a float constant; a MatMul + Add made a Gemm would no longer be
``MatMulIntegerToFloat`` or ``MatMulNBits``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from onnxfold.declare import KEEPS_QDQ_UNITS, GraphView, Match, OpBuilder, P, Reject, Var, pattern
from onnxfold.ir import provenance
from onnxfold.ir.graph import through_identities

from .no_ops import broadcasts_into

_FLOATS = (ir.DataType.FLOAT, ir.DataType.DOUBLE)
_GEMM_FLOATS = (*_FLOATS, ir.DataType.FLOAT16)  # MatMul+Add -> Gemm computes no weight
_CONV = P(("Conv", "ConvTranspose"), Var("x"), Var("w", const=True), ..., name="layer")
_LINEAR = P(("Gemm", "MatMul"), Var("x"), Var("w", const=True), ..., name="layer")


def _batch_norm_of(layer: P) -> P:
    return P("BatchNormalization", layer, Var("scale", const=True), Var("bias", const=True),
             Var("mean", const=True), Var("var", const=True), name="bn")


def _finite(ctx: GraphView, *values: ir.Value) -> bool:
    """Whether the data of every one of ``values`` is at hand and finite (an inf or NaN
    multiplied into a weight no longer gives the NaNs and infs of the original)."""
    arrays = [ctx.array(v) for v in values]
    return all(a is not None and bool(np.isfinite(a).all()) for a in arrays)


def _scaled_stays_finite(ctx: GraphView, w: ir.Value, factor: np.ndarray) -> bool:
    """Whether every weight times the largest factor stays finite (an overflow to inf would
    give NaN where the original gives 0)."""
    weight = ctx.array(w)
    if weight is None or weight.size == 0 or factor.size == 0:
        return weight is not None
    top = float(np.abs(weight).max()) * float(np.abs(factor).max())
    with np.errstate(over="ignore"):  # the overflow is the answer, not a warning
        return bool(np.isfinite(np.asarray(top, weight.dtype)))


def _sole_reader(ctx: GraphView, value: ir.Value | None) -> bool:
    """Whether ``value`` (through the Identity nodes exporters share weights with) is read by
    one node only, or is a fold its readers share only because their copies were equal
    (``provenance.SHARED``): fusing it then duplicates nothing the model had."""
    # what to build: a weight is no node of the match, but fusing a shared one writes it twice
    return all(ctx.single_use(link) or provenance.SHARED in link.meta
               for link in through_identities(value))


def _gemm_available(ctx: GraphView) -> bool:
    """Whether Gemm broadcasts C by itself (opset 7 on; before, a ``broadcast`` attribute)."""
    return ctx.opset() >= 7


def _output_channel_axis(layer: ir.Node, w_rank: int) -> int | None:
    """The axis of the weight that indexes output channels (a Gemm's or 2-D MatMul's output
    columns; None: not one axis)."""
    if layer.op_type == "Conv":
        return 0
    if layer.op_type == "Gemm":
        return 0 if layer.attributes.get_int("transB", 0) else 1
    if layer.op_type == "MatMul":
        return 1 if w_rank == 2 else None
    group = layer.attributes.get_int("group") or 1
    return 1 if group == 1 and w_rank >= 2 else None


@dataclass(frozen=True)
class _Layout:
    """A layer's output channel count, its weight's rank and dtype, and the axis of the weight
    that indexes output channels: what a fusion's check finds and its rewrite receives."""

    channels: int
    rank: int
    axis: int
    dtype: ir.DataType | None


def _channel_layout(ctx: GraphView, layer: ir.Node, w: ir.Value) -> _Layout | None:
    """The layer's :class:`_Layout`; None: the weight shape is unknown, a grouped
    ConvTranspose, or a MatMul weight that is not 2-D."""
    shape = ctx.shape(w)
    axis = _output_channel_axis(layer, len(shape)) if shape is not None else None
    if shape is None or axis is None:
        return None
    return _Layout(shape[axis], len(shape), axis, w.dtype)


def _per_channel(shape: tuple[int, ...], channels: int, channel_at: int) -> bool:
    """Whether a constant of ``shape`` holds one value per channel (axis ``channel_at``,
    counted from the end) or one value: every other dim is 1."""
    return all(d == 1 or (i == channel_at and d == channels)
               for i, d in enumerate(reversed(shape)))


def _bias(layer: ir.Node) -> ir.Value | None:
    return layer.inputs[2] if len(layer.inputs) > 2 else None


def _beta(layer: ir.Node) -> float:
    return layer.attributes.get_float("beta", 1.0) if layer.op_type == "Gemm" else 1.0


def _linear_fusable(ctx: GraphView, layer: ir.Node, x: ir.Value, bias: ir.Value | None,
                    channels: int) -> bool | Reject:
    """The Gemm/MatMul side of a BatchNormalization fusion: a 2-D product whose C is one
    value per output column (or one)."""
    if not _gemm_available(ctx):
        return Reject("opset < 7: no Gemm with a broadcast C")
    if layer.op_type == "MatMul" and (x.shape is None or len(x.shape) != 2):
        return Reject("MatMul input not known to be 2-D")
    c_shape = ctx.shape(bias) if bias is not None else ()
    if c_shape is None or len(c_shape) > 2 or not _per_channel(c_shape, channels, 0):
        return Reject("Gemm's C is not one value per output column")
    if _beta(layer) != 1.0 and bias is not None and not _finite(ctx, bias):
        return Reject("Gemm's beta is not 1 and C is not finite")
    return True


def _batch_norm_fusable(ctx: GraphView, layer: ir.Node, bn: ir.Node, x: ir.Value,
                        w: ir.Value, scale: ir.Value, var: ir.Value) -> bool | Match | Reject:
    if len(bn.outputs) != 1 or bn.attributes.get_int("training_mode"):
        return Reject("training-mode BatchNormalization")
    if bn.attributes.get_int("spatial", 1) == 0:
        return Reject("spatial=0: per-activation parameters")
    bias = _bias(layer)
    if bias is not None and not ctx.is_constant(bias):
        return Reject("the layer's bias is not constant")
    if not all(_sole_reader(ctx, v) for v in (w, bias)):
        return Reject("the weight is shared: fusing would duplicate it")
    if w.dtype not in _FLOATS or any(v.dtype != w.dtype for v in bn.inputs if v is not None):
        return Reject("not one float32/float64 dtype")
    layout = _channel_layout(ctx, layer, w)
    if layout is None:
        return Reject("grouped ConvTranspose, MatMul weight not 2-D, or weight shape unknown")
    channels = layout.channels
    if layer.op_type in ("Gemm", "MatMul"):
        linear = _linear_fusable(ctx, layer, x, bias, channels)
        if linear is not True:
            return linear
    if any(ctx.shape(v) != (channels,) for v in bn.inputs[1:]):
        return Reject("BatchNormalization parameters are not one per output channel")
    eps = bn.attributes.get_float("epsilon", 1e-5)
    if not _finite(ctx, scale, var) or not (np.asarray(ctx.array(var)) + eps > 0).all():
        return Reject("scale or variance not at hand, not finite, or var + epsilon <= 0")
    with np.errstate(all="ignore"):
        factor = np.asarray(ctx.array(scale)) / np.sqrt(np.asarray(ctx.array(var)) + eps)
    if not _scaled_stays_finite(ctx, w, factor):
        return Reject("the fused weight would overflow")
    return Match.of(layout)


@pattern(_batch_norm_of(_LINEAR), check=_batch_norm_fusable, name="fuse_batch_norm_into_gemm",
         tags=[KEEPS_QDQ_UNITS])
@pattern(_batch_norm_of(_CONV), check=_batch_norm_fusable, name="fuse_batch_norm_into_conv",
         tags=[KEEPS_QDQ_UNITS])
def fuse_batch_norm(op: OpBuilder, layer: ir.Node, bn: ir.Node, x: ir.Value, w: ir.Value,
                    scale: ir.Value, bias: ir.Value, mean: ir.Value, var: ir.Value,
                    dtype: ir.DataType, rank: int, axis: int) -> ir.Value:
    """BN(Conv(x, W, B)) -> Conv(x, W * s, (B - mean) * s + bias), s = scale / sqrt(var + eps),
    along the weight's output-channel axis; BN(Gemm(x, W, C)) -> Gemm(x, W * s, (beta * C -
    mean) * s + bias) with beta 1 (alpha kept), BN(MatMul(x, W)) -> Gemm(x, W * s, ...)."""
    np_dtype = dtype.numpy()

    def node(op_type: str, *inputs: ir.Value) -> ir.Value:
        return op.node(op_type, *inputs, _dtype=dtype, _name=f"{layer.name}_{op_type}")

    eps = op.constant(np.asarray(bn.attributes.get_float("epsilon", 1e-5), np_dtype),
                      "bn_epsilon")
    s = node("Div", scale, node("Sqrt", node("Add", var, eps)))
    old_bias = _bias(layer)
    if old_bias is not None and _beta(layer) != 1.0:
        old_bias = node("Mul", old_bias, op.constant(np.asarray(_beta(layer), np_dtype),
                                                     "gemm_beta"))
    shifted = node("Neg", mean) if old_bias is None else node("Sub", old_bias, mean)
    new_bias = node("Add", node("Mul", shifted, s), bias)
    scaled = node("Mul", w, _along_output_channels(op, s, layer, rank, axis))
    return _fused(op, layer, x, scaled, new_bias)


def _channel_constant(ctx: GraphView, layer: ir.Node, w: ir.Value, c: ir.Value
                      ) -> bool | Match | Reject:
    """Whether ``c``, broadcast against the convolution's output (N, M, ...), is one value per
    output channel (shape (M, 1, ..), (1, M, 1, ..) or all ones) and changes nothing else."""
    c_shape, w_shape = ctx.shape(c), ctx.shape(w)
    layout = _channel_layout(ctx, layer, w)
    if c_shape is None or w_shape is None or layout is None:
        return Reject("shapes unknown, or grouped ConvTranspose")
    rank = len(w_shape)  # the output's rank
    if len(c_shape) > rank or c.dtype != w.dtype or w.dtype not in _FLOATS:
        return Reject("not a per-channel float constant of the output's dtype")
    if not _per_channel(c_shape, layout.channels, rank - 2):  # the channel axis,
        return Reject("not one value per output channel")  # from the end
    if not _finite(ctx, c):
        return Reject("the constant is not at hand or not finite")
    bias = _bias(layer)
    if not all(_sole_reader(ctx, v) for v in (w, bias)):
        return Reject("the weight is shared: fusing would duplicate it")
    if bias is not None and not ctx.is_constant(bias):
        return Reject("the bias is not constant")
    if not _scaled_stays_finite(ctx, w, np.asarray(ctx.array(c))):
        return Reject("the fused weight would overflow")
    return Match.of(layout)


def _channel_vector(op: OpBuilder, c: ir.Value, node: ir.Node) -> ir.Value:
    """``c`` flattened: one entry, or one per output channel."""
    flat = op.constant(np.array([-1], np.int64), "flat")
    return op.Reshape(c, flat, _dtype=c.dtype, _name=f"{node.name}_c")


def _fused(op: OpBuilder, layer: ir.Node, x: ir.Value, weight: ir.Value, bias: ir.Value
           ) -> ir.Value:
    """layer(x, weight, bias), in place of the matched node reading ``layer``: a Conv,
    ConvTranspose or Gemm with the layer's attributes (a Gemm's beta now 1), a Gemm for a
    MatMul."""
    op_type = "Gemm" if layer.op_type == "MatMul" else layer.op_type
    attributes = {a.name: a for a in layer.attributes.values() if a.name != "beta"}
    return op.node(op_type, x, weight, bias, _dtype=weight.dtype, _attributes=attributes)


def _along_output_channels(op: OpBuilder, factors: ir.Value, layer: ir.Node, rank: int,
                           axis: int) -> ir.Value:
    """``factors`` (one per output channel, or one) reshaped to broadcast along axis ``axis``
    of the layer's weight (of rank ``rank``), its output-channel axis."""
    target = np.ones(rank, np.int64)
    target[axis] = -1
    return op.Reshape(factors, op.constant(target, "channel_shape"), _dtype=factors.dtype,
                      _name=f"{layer.name}_scale")


def _bias_or_zeros(op: OpBuilder, layer: ir.Node, channels: int, dtype: ir.DataType
                   ) -> ir.Value:
    bias = _bias(layer)
    if bias is not None:
        return bias
    return op.constant(np.zeros(channels, dtype.numpy()), "conv_bias")


def _with_a_constant(op_type: str, operand: P) -> P:
    """``op_type(operand, c)`` or ``op_type(c, operand)``, ``c`` a constant."""
    return P(op_type, operand, Var("c", const=True), name="node", commute=True)


@pattern(_with_a_constant("Mul", _CONV), check=_channel_constant, tags=[KEEPS_QDQ_UNITS])
def fuse_mul_into_conv(op: OpBuilder, layer: ir.Node, node: ir.Node, x: ir.Value, w: ir.Value,
                       c: ir.Value, channels: int, rank: int, axis: int, dtype: ir.DataType
                       ) -> ir.Value:
    """Conv(x, W, B) * c -> Conv(x, W * c', B * c), c one value per output channel."""
    vector = _channel_vector(op, c, node)
    weight = op.Mul(w, _along_output_channels(op, vector, layer, rank, axis), _dtype=w.dtype,
                    _name=f"{layer.name}_w")
    bias = op.Mul(_bias_or_zeros(op, layer, channels, dtype), vector, _dtype=w.dtype,
                  _name=f"{layer.name}_b")
    return _fused(op, layer, x, weight, bias)


@pattern(_with_a_constant("Add", _CONV), check=_channel_constant, tags=[KEEPS_QDQ_UNITS])
def fuse_add_into_conv(op: OpBuilder, layer: ir.Node, node: ir.Node, x: ir.Value, w: ir.Value,
                       c: ir.Value, channels: int, dtype: ir.DataType) -> ir.Value:
    """Conv(x, W, B) + c -> Conv(x, W, B + c), c one value per output channel."""
    bias = op.Add(_bias_or_zeros(op, layer, channels, dtype), _channel_vector(op, c, node),
                  _dtype=w.dtype, _name=f"{layer.name}_b")
    return _fused(op, layer, x, w, bias)


def _gemm_bias_fits(ctx: GraphView, layer: ir.Node, x: ir.Value, w: ir.Value,
                    c: ir.Value) -> bool | Reject:
    """Whether MatMul(x, W) + c is a Gemm: x 2-D (its rank known), W a 2-D constant, c a
    constant Gemm broadcasts to the (M, N) product that changes nothing of its shape."""
    if not _gemm_available(ctx):
        return Reject("opset < 7: no Gemm with a broadcast C")
    w_shape = ctx.shape(w)
    if x.shape is None or len(x.shape) != 2 or w_shape is None or len(w_shape) != 2:
        return Reject("not a 2-D MatMul (the input's rank unknown or not 2)")
    if w.dtype not in _GEMM_FLOATS or x.dtype != w.dtype or c.dtype != w.dtype:
        return Reject("not one float16/float32/float64 dtype")
    if not broadcasts_into(ctx, c, layer.outputs[0]):
        return Reject("the constant is not Gemm's C: it broadcasts beyond the (M, N) product")
    return True


@pattern(_with_a_constant("Add", P("MatMul", Var("x"), Var("w", const=True), name="layer")),
         check=_gemm_bias_fits, tags=[KEEPS_QDQ_UNITS])
def fuse_matmul_add_into_gemm(op: OpBuilder, layer: ir.Node, x: ir.Value, w: ir.Value,
                              c: ir.Value) -> ir.Value:
    """MatMul(x, W) + c -> Gemm(x, W, c), x and W 2-D (onnxruntime's MatMulAddFusion)."""
    return _fused(op, layer, x, w, c)


def _constants_merge(ctx: GraphView, x: ir.Value, k: ir.Value, c: ir.Value) -> bool | Reject:
    """Whether (x * k) * c may be x * (k * c): float, both constants broadcast into x (so
    neither the chain nor the product changes x's shape), and k * c finite, normal where
    neither factor is 0, and no bigger than the larger factor."""
    if x.dtype not in _FLOATS or k.dtype != x.dtype or c.dtype != x.dtype:
        return Reject("not one float32/float64 dtype")
    if not (broadcasts_into(ctx, k, x) and broadcasts_into(ctx, c, x)):
        return Reject("a constant broadcasts beyond x's shape (or that shape is unknown)")
    a, b = ctx.array(k), ctx.array(c)
    if a is None or b is None or not _finite(ctx, k, c):
        return Reject("a constant is not at hand or not finite")
    with np.errstate(all="ignore"):
        product = a * b
    tiny = np.finfo(product.dtype).tiny
    if product.size > max(a.size, b.size) or not np.isfinite(product).all() or \
            ((np.abs(product) < tiny) & (a != 0) & (b != 0)).any():
        return Reject("the merged constant would be bigger, overflow or underflow")
    return True


_SCALED = P("Mul", Var("x"), Var("k", const=True), name="inner", commute=True)


@pattern(_with_a_constant("Mul", _SCALED),
         check=_constants_merge, rounds_differently=True, tags=[KEEPS_QDQ_UNITS])
def merge_constant_factors(op: OpBuilder, node: ir.Node, x: ir.Value, k: ir.Value,
                           c: ir.Value) -> ir.Value:
    """(x * k) * c -> x * (k * c), k and c constants (the fold computes k * c)."""
    factor = op.Mul(k, c, _dtype=x.dtype, _name=f"{node.name}_factor")
    return op.Mul(x, factor, _dtype=x.dtype)
