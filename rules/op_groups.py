"""Groups of ops that several rules treat alike, each defined once and read from here."""

from __future__ import annotations

SAME_SHAPE = frozenset({
    "Identity", "Cast", "CastLike", "Neg", "Abs", "Sqrt", "Exp", "Log", "Erf", "Tanh",
    "Sigmoid", "Relu", "Softmax", "LogSoftmax", "IsNaN", "IsInf", "Not", "Reciprocal", "Floor",
    "Ceil", "Round", "Sign", "Sin", "Cos", "Gelu", "HardSigmoid", "HardSwish", "LeakyRelu",
    "Elu", "Selu", "Celu", "Softplus", "Softsign", "Mish", "ThresholdedRelu", "Clip", "PRelu",
    "Dropout", "LayerNormalization", "BatchNormalization", "InstanceNormalization",
    "LpNormalization", "Trilu", "Hardmax", "BitwiseNot"})  # output 0 has input 0's shape

BROADCAST = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "And", "Or", "Xor", "Equal", "Greater", "Less",
    "GreaterOrEqual", "LessOrEqual", "Where", "Max", "Min", "Sum", "Mean", "BitShift",
    "BitwiseAnd", "BitwiseOr", "BitwiseXor"})  # multidirectional broadcasting of all inputs

REDUCE_TO_AXES = frozenset({
    "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin"})  # keepdims ops
