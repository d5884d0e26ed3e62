"""Which ops the check holds to bits: the check's own list, not the rules' op facts.

A folded value whose cone holds only *exact* ops must be the original's bits: whoever computes
them correctly gets onnxruntime's. The fold declares its own list (``rules/facts.py``:
``bitwise``, ``order_varies``) to decide how it folds; were the check to read it, a fact
declared wrongly there (an op said bitwise that is not, or one said to vary that does not)
would loosen or tighten the check's verdict on the very folds it governs. So the check keeps
its own lists, from the ops' definitions:

- **exact**: nothing is computed (a ``Constant``, data movement and selection: reshapes,
  transposes, gathers, slices, concatenations, pads), IEEE operations correctly rounded in one
  dtype (``+ - * /``, ``sqrt``, ``1/x``, ``abs``, ``max``), rounding to integers,
  comparisons, logic and integer arithmetic, and casts (onnx's rounding is to the nearest
  even, which numpy and onnxruntime implement alike) except to ``bfloat16`` and the 8-bit
  floats, whose conversions have modes of their own (``saturate``, truncation in older
  kernels). Not exact: matrix products and reductions that add (their order of summation is
  the kernel's), transcendental functions, ``Pow``, normalizations.
- **order varies**: onnxruntime's kernel itself sums in an order that follows its input's
  alignment (its vectorized reductions peel an unaligned head): the same values give other
  bits in another session, so even a fold through onnxruntime is judged within a tolerance.
  The reductions that add or multiply and the normalizations that compute statistics with
  them (BatchNormalization only in training mode: in inference its statistics are inputs).

``tests/unit/test_check_exact_ops.py`` runs every exact op in onnxruntime against numpy,
aligned and not, and holds that the check does not read the rules' facts.
"""

from __future__ import annotations

import onnx
import onnx_ir as ir

_EXACT = (
    # nothing computed: constants, data movement, selection
    "Constant", "ConstantOfShape", "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze",
    "Transpose", "Concat", "Split", "Slice", "Gather", "GatherElements", "GatherND", "Expand",
    "Tile", "Pad", "Compress", "Trilu", "OneHot", "EyeLike", "Shape", "Size", "Where",
    "DepthToSpace", "SpaceToDepth", "ReverseSequence", "Unique",
    "ReduceMax", "ReduceMin", "Max", "Min", "Relu", "Clip", "Dropout",
    # IEEE operations correctly rounded in one dtype
    "Abs", "Neg", "Add", "Sub", "Mul", "Div", "Sqrt", "Reciprocal",
    # rounding to integers, comparisons, logic, integers
    "Floor", "Ceil", "Round", "Sign", "Equal", "Less", "Greater", "LessOrEqual",
    "GreaterOrEqual", "Not", "And", "Or", "Xor", "IsNaN", "IsInf", "ArgMax", "ArgMin",
    "NonZero", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot",
    "QuantizeLinear", "DequantizeLinear",
)
# casts whose conversion has modes of its own (saturation, truncation in older kernels)
_CAST_MODES = frozenset({
    ir.DataType.BFLOAT16, ir.DataType.FLOAT8E4M3FN, ir.DataType.FLOAT8E4M3FNUZ,
    ir.DataType.FLOAT8E5M2, ir.DataType.FLOAT8E5M2FNUZ, ir.DataType.FLOAT4E2M1})
_ORDER_VARIES = (
    "ReduceSum", "ReduceMean", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
    "ReduceLogSumExp", "ReduceProd", "InstanceNormalization", "GroupNormalization",
    "MeanVarianceNormalization", "LpNormalization", "RMSNormalization",
)

EXACT: frozenset[tuple[str, str]] = frozenset(("", op) for op in _EXACT)


def exact(node: ir.Node | onnx.NodeProto) -> bool:
    """Whether every correct evaluation of ``node`` gives onnxruntime's bits (a node of the
    graph, a recipe's bare node, or a rewrite record's serialized one)."""
    if node.domain not in ("", "ai.onnx"):
        return False
    if node.op_type in ("Cast", "CastLike"):
        return _cast_target(node) not in (None, *_CAST_MODES)
    return ("", node.op_type) in EXACT


def _cast_target(node: ir.Node | onnx.NodeProto) -> ir.DataType | None:
    """The dtype a Cast or CastLike makes (None: unknown)."""
    if isinstance(node, onnx.NodeProto):
        to = next((a.i for a in node.attribute if a.name == "to"), 0)
        return ir.DataType(to) if to else None
    to = node.attributes.get_int("to", 0) if node.op_type == "Cast" else 0
    if to:
        return ir.DataType(to)
    return node.outputs[0].dtype if node.outputs else None


def order_varies(node: ir.Node) -> bool:
    """Whether onnxruntime's kernel for ``node`` sums in an order that follows its input's
    memory (see the module)."""
    if node.domain not in ("", "ai.onnx"):
        return False
    if node.op_type == "BatchNormalization":
        return node.attributes.get_int("training_mode", 0) == 1
    return node.op_type in _ORDER_VARIES
