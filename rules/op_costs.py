"""What a node of each op computes, for the report's FLOPs and MACs (``onnxfold.analysis.cost``
holds each kind's formula). ``factor``: FLOPs per element, counted where its kind says
(elementwise: per output element; reduction: per input element); a transcendental function
or a comparison is one FLOP, as profilers count them. An op not declared here is reported as
not counted, never guessed.
"""

from __future__ import annotations

from onnxfold.declare import OpCost

_ORT = "com.microsoft"
_ONE_PER_ELEMENT = (
    "Add", "Sub", "Mul", "Div", "Neg", "Abs", "Max", "Min", "Mod", "Pow", "Sqrt", "Reciprocal",
    "Exp", "Log", "Tanh", "Sigmoid", "Erf", "Sin", "Cos", "Relu", "LeakyRelu", "PRelu", "Elu",
    "Selu", "Softplus", "Clip", "Where", "Floor", "Ceil", "Round", "Sign", "Equal", "Less",
    "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Not", "IsNaN", "IsInf")
_DATA_MOVEMENT = (
    "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Concat", "Split", "Slice",
    "Gather", "GatherElements", "GatherND", "Expand", "Tile", "Pad", "Identity", "Shape", "Size",
    "Constant", "ConstantOfShape", "Range", "Cast", "CastLike", "ScatterND", "ScatterElements",
    "Dropout", "Trilu", "OneHot", "EyeLike", "DepthToSpace", "SpaceToDepth", "NonZero")
_REDUCING = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
             "ArgMax", "ArgMin", "GlobalAveragePool", "GlobalMaxPool", "AveragePool", "MaxPool",
             "CumSum", "TopK")

COSTS = (
    *(OpCost(op, "contraction") for op in ("MatMul", "MatMulInteger", "QLinearMatMul")),
    OpCost("Gemm", "contraction", bias=2),
    OpCost("Conv", "convolution"), OpCost("ConvInteger", "convolution"),
    OpCost("QLinearConv", "convolution", weights=3),
    OpCost("ConvTranspose", "transposed convolution"),
    *(OpCost(op, "elementwise") for op in _ONE_PER_ELEMENT),
    *(OpCost(op, "elementwise", 2) for op in ("QuantizeLinear", "DequantizeLinear",
                                              "BatchNormalization", "HardSigmoid")),
    OpCost("HardSwish", "elementwise", 3), OpCost("Gelu", "elementwise", 8),
    *(OpCost(op, "reduction") for op in _REDUCING),
    *(OpCost(op, "reduction", 2) for op in ("ReduceL2", "ReduceSumSquare")),
    *(OpCost(op, "reduction", 5) for op in ("Softmax", "LogSoftmax")),
    *(OpCost(op, "reduction", 8) for op in ("LayerNormalization", "InstanceNormalization",
                                            "GroupNormalization", "RMSNormalization")),
    *(OpCost(op, "free") for op in _DATA_MOVEMENT),
    # onnxruntime's own ops: SimplifiedLayerNormalization in the default domain, the rest in
    # com.microsoft (what its transformer optimizer and genai's builder emit)
    OpCost("SimplifiedLayerNormalization", "reduction", 8),
    *(OpCost(op, "contraction", domain=_ORT) for op in (
        "MatMulNBits", "FusedMatMul", "MatMulIntegerToFloat", "DynamicQuantizeMatMul",
        "MatMulBnb4")),
    *(OpCost(op, "reduction", 9, domain=_ORT) for op in (
        "SkipLayerNormalization", "SkipSimplifiedLayerNormalization")),
    *(OpCost(op, "reduction", 8, domain=_ORT) for op in (
        "LayerNormalization", "SimplifiedLayerNormalization")),
    *(OpCost(op, "elementwise", 8, domain=_ORT) for op in (
        "Gelu", "FastGelu", "BiasGelu", "QuickGelu")),
    OpCost("RotaryEmbedding", "elementwise", 3, domain=_ORT),
    OpCost("GroupQueryAttention", "attention", domain=_ORT),
    *(OpCost(op, "free", domain=_ORT) for op in ("GatherBlockQuantized",)),
)
