"""Seeds of the structural pattern rules (``rules/no_ops.py``'s ``drop_noop``,
``rules/rewrites.py``, ``rules/shape_values.py``, ``rules/structure.py``): for each, a small
model on which the rule, tried alone, rewrites at the node ``at`` names
(``tests/support/rule_seeds.py``).

Every node is named; the values a match consumes are read only inside it, and the graph's
output is computed by a node named ``after`` beyond the rewritten region.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests.support.models import make_model, tensor, vinfo
from tests.support.rule_seeds import Seed


def _data(*shape: int, dtype: type = np.float32) -> np.ndarray:
    """Deterministic non-trivial values of ``shape``."""
    return np.random.default_rng(0).standard_normal(shape).astype(dtype)


def _ints(*values: int) -> np.ndarray:
    """An int64 vector (a shape, axes, starts...)."""
    return np.array(values, np.int64)


def _node(op: str, inputs: list[str], outputs: list[str], name: str, **attrs) -> onnx.NodeProto:
    """A node of ``op`` named ``name``."""
    return helper.make_node(op, inputs, outputs, name=name, **attrs)


def drop_noop() -> onnx.ModelProto:
    """x: [N, 3, 4] -> Cast to float (its own type: a no-op) -> Relu."""
    nodes = [_node("Cast", ["x"], ["c"], "cast", to=TensorProto.FLOAT),
             _node("Relu", ["c"], ["y"], "after")]
    return make_model(nodes, [vinfo("x", shape=["N", 3, 4])], [vinfo("y", shape=["N", 3, 4])])


def postpone_expand() -> onnx.ModelProto:
    """x + (Expand(c [1, 4], [3, 4]) * k [1]): the Mul of the expanded constant."""
    nodes = [_node("Expand", ["c", "s"], ["e"], "expand"),
             _node("Mul", ["e", "k"], ["m"], "mul"),
             _node("Add", ["x", "m"], ["y"], "after")]
    inits = [tensor("c", _data(1, 4)), tensor("s", _ints(3, 4)),
             tensor("k", np.array([1.5], np.float32))]
    return make_model(nodes, [vinfo("x", shape=["N", 3, 4])], [vinfo("y", shape=["N", 3, 4])],
                      inits)


def constant_of_shape_as_expand() -> onnx.ModelProto:
    """x + ConstantOfShape([3, 4], 2.0) * k: the ConstantOfShape feeds a foldable Mul."""
    value = helper.make_tensor("value", TensorProto.FLOAT, [1], [2.0])
    nodes = [_node("ConstantOfShape", ["s"], ["c"], "constant_of_shape", value=value),
             _node("Mul", ["c", "k"], ["m"], "mul"),
             _node("Add", ["x", "m"], ["y"], "after")]
    inits = [tensor("s", _ints(3, 4)), tensor("k", _data(4))]
    return make_model(nodes, [vinfo("x", shape=["N", 3, 4])], [vinfo("y", shape=["N", 3, 4])],
                      inits)


def inline_constant_if() -> onnx.ModelProto:
    """If(true initializer) of x: then Sigmoid(x), else Neg(x); then Relu."""
    then_branch = helper.make_graph([_node("Sigmoid", ["x"], ["t"], "then_sigmoid")], "then",
                                    [], [vinfo("t", shape=["N", 3, 4])])
    else_branch = helper.make_graph([_node("Neg", ["x"], ["f"], "else_neg")], "else",
                                    [], [vinfo("f", shape=["N", 3, 4])])
    nodes = [_node("If", ["cond"], ["b"], "if", then_branch=then_branch,
                   else_branch=else_branch),
             _node("Relu", ["b"], ["y"], "after")]
    return make_model(nodes, [vinfo("x", shape=["N", 3, 4])], [vinfo("y", shape=["N", 3, 4])],
                      [tensor("cond", np.array(True))])


def merge_transposes() -> onnx.ModelProto:
    """x: [2, 3, 4] -> Transpose [1, 0, 2] -> Transpose [0, 2, 1] -> Relu."""
    nodes = [_node("Transpose", ["x"], ["t1"], "first", perm=[1, 0, 2]),
             _node("Transpose", ["t1"], ["t2"], "second", perm=[0, 2, 1]),
             _node("Relu", ["t2"], ["y"], "after")]
    return make_model(nodes, [vinfo("x", shape=[2, 3, 4])], [vinfo("y", shape=[3, 4, 2])])


def merge_reshapes() -> onnx.ModelProto:
    """x: [2, 3, 4] -> Reshape [6, 4] -> Reshape [4, 6] -> Relu."""
    nodes = [_node("Reshape", ["x", "s1"], ["r1"], "first"),
             _node("Reshape", ["r1", "s2"], ["r2"], "second"),
             _node("Relu", ["r2"], ["y"], "after")]
    inits = [tensor("s1", _ints(6, 4)), tensor("s2", _ints(4, 6))]
    return make_model(nodes, [vinfo("x", shape=[2, 3, 4])], [vinfo("y", shape=[4, 6])], inits)


def reshape_then_unsqueeze() -> onnx.ModelProto:
    """x: [N, 3, 4] -> Reshape [-1, 4] -> Unsqueeze [1] -> Relu."""
    nodes = [_node("Reshape", ["x", "s"], ["r"], "first"),
             _node("Unsqueeze", ["r", "axes"], ["u"], "second"),
             _node("Relu", ["u"], ["y"], "after")]
    inits = [tensor("s", _ints(-1, 4)), tensor("axes", _ints(1))]
    return make_model(nodes, [vinfo("x", shape=["N", 3, 4])], [vinfo("y", shape=["M", 1, 4])],
                      inits)


def transpose_before_widening() -> onnx.ModelProto:
    """x + Transpose(Cast(c float16 [3, 4] to float)): the Transpose of a widened constant."""
    nodes = [_node("Cast", ["c"], ["w"], "cast", to=TensorProto.FLOAT),
             _node("Transpose", ["w"], ["t"], "transpose", perm=[1, 0]),
             _node("Add", ["x", "t"], ["y"], "after")]
    return make_model(nodes, [vinfo("x", shape=["N", 4, 3])], [vinfo("y", shape=["N", 4, 3])],
                      [tensor("c", _data(3, 4, dtype=np.float16))])


def known_shape_value() -> onnx.ModelProto:
    """Expand(x, Shape(x)[1:3]) of x: [N, 3, 4]: the Slice is [3, 4] whatever N."""
    nodes = [_node("Shape", ["x"], ["s"], "shape"),
             _node("Slice", ["s", "start", "end"], ["d"], "slice"),
             _node("Expand", ["x", "d"], ["y"], "after")]
    inits = [tensor("start", _ints(1)), tensor("end", _ints(3))]
    return make_model(nodes, [vinfo("x", shape=["N", 3, 4])], [vinfo("y", shape=["N", 3, 4])],
                      inits)


def reshape_known_target() -> onnx.ModelProto:
    """Reshape(x, Concat(Shape(x)[0:1], [12])) of x: [N, 3, 4] -> Relu."""
    nodes = [_node("Shape", ["x"], ["s"], "shape", end=1),
             _node("Concat", ["s", "rest"], ["target"], "concat", axis=0),
             _node("Reshape", ["x", "target"], ["r"], "reshape"),
             _node("Relu", ["r"], ["y"], "after")]
    return make_model(nodes, [vinfo("x", shape=["N", 3, 4])], [vinfo("y", shape=["N", 12])],
                      [tensor("rest", _ints(12))])


def split_to_sequence_as_split() -> onnx.ModelProto:
    """SplitToSequence(x: [N, 6], [2, 4], axis 1) read by SequenceAt 0 and -1 -> Concat."""
    nodes = [_node("SplitToSequence", ["x", "split"], ["seq"], "split", axis=1),
             _node("SequenceAt", ["seq", "i0"], ["a"], "at_first"),
             _node("SequenceAt", ["seq", "i1"], ["b"], "at_last"),
             _node("Concat", ["b", "a"], ["y"], "after", axis=1)]
    inits = [tensor("split", _ints(2, 4)), tensor("i0", np.array(0, np.int64)),
             tensor("i1", np.array(-1, np.int64))]
    return make_model(nodes, [vinfo("x", shape=["N", 6])], [vinfo("y", shape=["N", 6])], inits)


def elementwise_between_reshapes() -> onnx.ModelProto:
    """x: [2, 3, 4] -> Reshape [6, 4] -> Mul by a scalar -> Reshape [2, 12] -> Relu."""
    nodes = [_node("Reshape", ["x", "s1"], ["r"], "inner"),
             _node("Mul", ["r", "k"], ["m"], "mul"),
             _node("Reshape", ["m", "s2"], ["o"], "outer"),
             _node("Relu", ["o"], ["y"], "after")]
    inits = [tensor("s1", _ints(6, 4)), tensor("k", np.array(1.5, np.float32)),
             tensor("s2", _ints(2, 12))]
    return make_model(nodes, [vinfo("x", shape=[2, 3, 4])], [vinfo("y", shape=[2, 12])], inits)


def concat_without_empty_inputs() -> onnx.ModelProto:
    """Concat(Neg(x), x[..., 4:], axis -1) of x: [N, 4] (the slice is empty) -> Relu; shapes
    inferred (the rule reads the ranks and dims of the Concat's inputs and output)."""
    nodes = [_node("Slice", ["x", "four", "end", "last"], ["tail"], "slice"),
             _node("Neg", ["x"], ["n"], "neg"),
             _node("Concat", ["n", "tail"], ["c"], "concat", axis=-1),
             _node("Relu", ["c"], ["y"], "after")]
    inits = [tensor("four", _ints(4)), tensor("end", _ints(2**63 - 1)),
             tensor("last", _ints(-1))]
    model = make_model(nodes, [vinfo("x", shape=["N", 4])], [vinfo("y", shape=["N", 4])], inits)
    return onnx.shape_inference.infer_shapes(model)


def merge_unsqueezes() -> onnx.ModelProto:
    """x: [N, 4] -> Unsqueeze [1] -> Unsqueeze [3] -> Relu."""
    nodes = [_node("Unsqueeze", ["x", "a1"], ["u"], "first"),
             _node("Unsqueeze", ["u", "a2"], ["v"], "second"),
             _node("Relu", ["v"], ["y"], "after")]
    inits = [tensor("a1", _ints(1)), tensor("a2", _ints(3))]
    return make_model(nodes, [vinfo("x", shape=["N", 4])], [vinfo("y", shape=["N", 1, 4, 1])],
                      inits)


SEEDS: dict[str, Seed] = {
    "drop_noop": Seed(drop_noop, "cast"),
    "postpone_expand": Seed(postpone_expand, "mul"),
    "constant_of_shape_as_expand": Seed(constant_of_shape_as_expand, "constant_of_shape"),
    "inline_constant_if": Seed(inline_constant_if, "if"),
    "merge_transposes": Seed(merge_transposes, "second"),
    "merge_reshapes": Seed(merge_reshapes, "second"),
    "reshape_then_unsqueeze": Seed(reshape_then_unsqueeze, "second"),
    "transpose_before_widening": Seed(transpose_before_widening, "transpose"),
    "known_shape_value": Seed(known_shape_value, "slice"),
    "reshape_known_target": Seed(reshape_known_target, "reshape"),
    "split_to_sequence_as_split": Seed(split_to_sequence_as_split, "split"),
    "elementwise_between_reshapes": Seed(elementwise_between_reshapes, "outer"),
    "concat_without_empty_inputs": Seed(concat_without_empty_inputs, "concat"),
    "merge_unsqueezes": Seed(merge_unsqueezes, "second"),
}
