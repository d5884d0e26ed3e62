"""Groups of ops that several rules treat alike, each defined once and read from here."""

from __future__ import annotations

SAME_SHAPE = frozenset({
    "Identity", "Cast", "CastLike", "Neg", "Abs", "Sqrt", "Exp", "Log", "Erf", "Tanh",
    "Sigmoid", "Relu", "Softmax", "LogSoftmax", "IsNaN", "IsInf", "Not", "Reciprocal", "Floor",
    "Ceil", "Round", "Sign", "Sin", "Cos", "Gelu", "HardSigmoid", "HardSwish", "LeakyRelu",
    "Elu", "Selu", "Celu", "Softplus", "Softsign", "Mish", "ThresholdedRelu", "Clip", "PRelu",
    "Dropout", "LayerNormalization", "BatchNormalization", "InstanceNormalization",
    "LpNormalization", "Trilu", "Hardmax", "BitwiseNot"})  # output 0 has input 0's shape

# Elementwise ops of one input that ``rules/rewrites.py`` moves an Expand past.
POINTWISE_UNARY = (
    "Abs", "Neg", "Sqrt", "Exp", "Log", "Floor", "Ceil", "Round", "Sign", "Sin", "Cos", "Tan",
    "Tanh", "Sigmoid", "Relu", "Reciprocal", "Erf", "Not", "Cast", "IsNaN", "Softsign",
    "LeakyRelu", "Elu", "Selu", "HardSigmoid", "Softplus", "Gelu", "HardSwish", "Mish")

# Elementwise ops whose inputs broadcast to the output: all of them multidirectionally, or
# (PRelu) the slope to X's shape. Their output size is the broadcast of their inputs' shapes.
BROADCASTING = (
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Equal", "Less", "Greater",
    "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Where", "BitShift", "BitwiseAnd",
    "BitwiseOr", "BitwiseXor", "PRelu", "Sum", "Mean")

# Multidirectional broadcasting of all inputs: the output dims are their broadcast.
MULTIDIRECTIONAL = frozenset(BROADCASTING) - {"PRelu"}

# Elementwise ops: each output element is computed from the input elements at its position
# (``rules/structure.py`` moves a Reshape past a region of them).
POINTWISE = frozenset(POINTWISE_UNARY + BROADCASTING) | {
    "IsInf", "Celu", "ThresholdedRelu", "BitwiseNot"}

REDUCE_TO_AXES = frozenset({
    "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin"})  # keepdims ops
