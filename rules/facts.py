"""Facts about ops that decide how the engine treats them (not how to evaluate them).

- ``nondeterministic``: never folded, whatever its inputs (a fold would freeze one draw).
  Dropout ``draws_only_in_training``: it is the identity in inference mode
  (``rules/dropout.py``) and its folder declines training mode, the one mode that draws (two
  Dropouts are still never merged as duplicates).
- ``kept_quantized``: a dequantization kept by default so a quantized model stays quantized
  and small (``--fold-qdq`` folds it); one whose result is only quantized again by foldable
  nodes folds with them into a quantized weight (``policy.refuse_dequantization``).
- ``requantizes``: the op that quantizes such a result again (QuantizeLinear, input 0).
- ``bitwise``: the op's native folder computes what onnxruntime's kernel computes, bit for bit,
  on floating-point values too: elementwise IEEE operations in one dtype (each correctly
  rounded), selections, comparisons and data movement. Matrix products, reductions that add
  (their summation order is the kernel's), transcendental functions and Pow are not: their
  folds are within a few ulps of onnxruntime's, which is enough unless the value reaches a
  ``discontinuous`` op (``onnxfold/fold/exactness.py``: those run on onnxruntime's kernels).
- ``discontinuous``: a one-ulp change of a floating-point input can move the result by a whole
  step: quantizations, casts to integers, rounding, comparisons, arg-extrema, thresholds, and
  sizes computed from floats (Range, Resize's scales).

- ``view``: the folder returns a view of its input 0 where that input is in C order (the
  transposes and reshapes of ``shape_ops.py``): the fold allocates nothing for it.
- ``order_varies``: onnxruntime's kernel itself sums in an order that changes with the
  alignment of its input's memory (its vectorized reductions peel an unaligned head), so the
  same values give other bits in another session: ``ReduceMean`` over 64 rows of 147 values
  misaligned by 4 bytes differs in 39 of its 64 results, a training-mode
  ``BatchNormalization`` of the same values in 566 of 9,408. Its folds, native or through
  onnxruntime, are judged within a tolerance, never bitwise. The reductions that add or
  multiply, and the normalizations that compute statistics with them (BatchNormalization
  only in training mode: in inference mode its statistics are inputs). Kernels that add in a
  loop of their own (MatMul, Gemm and Conv, whose prepacking the fallback reproduces;
  LayerNormalization, Softmax, Sum and Mean over more than two inputs) gave the same bits
  for the same values at every alignment tried (0, 4, 8 and 12 bytes off; one and two
  threads): they are not bitwise against numpy (no ``bitwise`` fact), but a fold through
  onnxruntime is onnxruntime's bits. ``tests/unit/test_op_facts.py``
  runs every op declared bitwise against onnxruntime, its inputs aligned and not.

Shape-only ops (Shape, Size: they need an input's shape, not its data) are the folders declared
with ``shape_only=True`` in ``shape_ops.py``.
"""

from __future__ import annotations

import onnx_ir as ir

from onnxfold.declare import OpFact

_BITWISE = (
    # elementwise, correctly rounded in IEEE arithmetic (numpy and onnxruntime alike)
    "Abs", "Neg", "Add", "Sub", "Mul", "Div", "Sqrt", "Reciprocal", "Max", "Min", "Relu",
    "Clip", "Where", "Floor", "Ceil", "Round", "Sign", "Cast", "CastLike", "Dropout",
    "QuantizeLinear", "DequantizeLinear", "ReduceMax", "ReduceMin",
    # comparisons, logic and integers
    "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Xor",
    "IsNaN", "IsInf", "ArgMax", "ArgMin", "NonZero", "Unique", "BitShift", "BitwiseAnd",
    "BitwiseOr", "BitwiseXor", "BitwiseNot",
    # data movement
    "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split",
    "Slice", "Gather", "GatherElements", "GatherND", "Expand", "Tile", "Pad", "Compress",
    "Trilu", "OneHot", "EyeLike", "ConstantOfShape", "Shape", "Size",
)

# Where and Compress select by a boolean condition: a float reaches it through a comparison
_DISCONTINUOUS = (
    "QuantizeLinear", "DynamicQuantizeLinear", "Round", "Floor", "Ceil", "Sign", "Mod",
    "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "IsInf", "IsNaN",
    "ArgMax", "ArgMin", "TopK", "NonZero", "Unique", "Hardmax", "Shrink", "ThresholdedRelu",
    "Range", "Resize", "Upsample", "OneHot", "MaxPool",
    # score thresholds and box overlaps compared; pixel positions rounded or floored
    "NonMaxSuppression", "GridSample", "RoiAlign", "MaxRoiPool",
)
_DISCONTINUOUS_ELSEWHERE = (
    *(("com.microsoft", op) for op in (
        "QuantizeLinear", "DynamicQuantizeMatMul", "DynamicQuantizeLSTM", "QAttention")),
    *(("ai.onnx.ml", op) for op in (
        "TreeEnsemble", "TreeEnsembleClassifier", "TreeEnsembleRegressor", "Binarizer",
        "LabelEncoder", "LinearClassifier", "SVMClassifier")),
)

_ORDER_VARIES = (
    "ReduceSum", "ReduceMean", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
    "ReduceLogSumExp", "ReduceProd", "InstanceNormalization", "GroupNormalization",
    "MeanVarianceNormalization", "LpNormalization", "RMSNormalization",
)


def _training(node: ir.Node) -> bool:
    """A BatchNormalization that computes its statistics from its input (training mode)."""
    return node.attributes.get_int("training_mode", 0) == 1


FACTS = (
    *(OpFact(op, nondeterministic=True) for op in (
        "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
        "Bernoulli")),
    OpFact("Dropout", nondeterministic=True, draws_only_in_training=True),
    OpFact("DequantizeLinear", kept_quantized=True),
    OpFact("QuantizeLinear", requantizes=True),
    *(OpFact(op, bitwise=True) for op in _BITWISE),
    *(OpFact(op, discontinuous=True) for op in _DISCONTINUOUS),
    *(OpFact(op, domain=domain, discontinuous=True) for domain, op in _DISCONTINUOUS_ELSEWHERE),
    *(OpFact(op, discontinuous=True, only_to_integers=True) for op in ("Cast", "CastLike")),
    *(OpFact(op, view=True) for op in (
        "Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity")),
    *(OpFact(op, order_varies=True) for op in _ORDER_VARIES),
    OpFact("BatchNormalization", order_varies=True, when=_training),
)
