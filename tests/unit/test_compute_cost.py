"""FLOPs and MACs per op type as the signature counts a model at bound input shapes
(``onnxfold.signature.counted``: its profile, the fold's walk at those shapes where the
profile leaves a shape unknown; the costs ``rules/op_costs.py`` declares), against counts
written out here by hand from each op's definition: a MatMul and a Gemm (``transA``)
multiply-accumulate ``K`` terms per output element, a Conv ``C/group x kernel`` per output
element, a ConvTranspose each input element through its weights; elementwise ops and
reductions by their declared factor; data movement counts nothing; a custom op, a
control-flow node or a node whose shape stays dynamic is not counted, and says so. A dynamic
dim declared by name (or as dynamo's sum ``n + 1``) deeper in the graph takes the bound value;
shapes ONNX's inference cannot follow, the walk does."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from onnxfold.declare.catalogue import load_catalogue
from onnxfold.declare.costs import OpCost
from onnxfold.pipeline.passes import InferShapes
from onnxfold.signature import counted
from tests.support.models import make_model, tensor, vinfo

CATALOGUE = load_catalogue()


def _count(proto, inputs):
    """The count of ``proto`` (its shapes inferred first, as a run does) at ``inputs``."""
    import onnx_ir as ir

    model = ir.serde.deserialize_model(proto)
    InferShapes()(model)
    found = counted(model, inputs, CATALOGUE.costs, CATALOGUE.shape_steps)
    return {op: (flops, macs) for op, (_, flops, macs) in found.ops.items()}, found


def test_contractions_and_convolutions_count_their_multiply_accumulates():
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),  # [n, 16, 64] @ [64, 32]
             helper.make_node("Gemm", ["a", "b", "bias"], ["g"], transA=1),  # A'[5,7] B[7,3]
             helper.make_node("Conv", ["img", "k"], ["c"], group=2, pads=[1, 1, 1, 1]),
             helper.make_node("ConvTranspose", ["img", "kt"], ["t"], strides=[2, 2])]
    inits = [tensor("w", rng.standard_normal((64, 32)).astype(np.float32)),
             tensor("b", rng.standard_normal((7, 3)).astype(np.float32)),
             tensor("k", rng.standard_normal((6, 2, 3, 3)).astype(np.float32)),
             tensor("kt", rng.standard_normal((4, 5, 3, 3)).astype(np.float32))]
    proto = make_model(nodes, [vinfo("x", shape=["n", 16, 64]), vinfo("a", shape=[7, 5]),
                               vinfo("img", shape=[1, 4, 8, 8]), vinfo("bias", shape=[3])],
                       [vinfo("m"), vinfo("g"), vinfo("c"), vinfo("t")], inits)
    counted, found = _count(proto, {"x": [3, 16, 64]})
    assert counted["MatMul"] == (2 * 3 * 16 * 32 * 64, 3 * 16 * 32 * 64)
    assert counted["Gemm"] == (2 * 5 * 3 * 7 + 5 * 3, 5 * 3 * 7)  # + C, once per output
    conv = 1 * 6 * 8 * 8 * (2 * 3 * 3)  # output elements x (C/group x kernel)
    assert counted["Conv"] == (2 * conv, conv)
    transposed = (1 * 4 * 8 * 8) * (5 * 3 * 3)  # input elements x (M/group x kernel)
    assert counted["ConvTranspose"] == (2 * transposed, transposed)
    assert found.uncounted == {}


def test_elementwise_reductions_free_and_what_is_not_counted():
    nodes = [helper.make_node("Gelu", ["x"], ["g"]),
             helper.make_node("Softmax", ["g"], ["s"]),
             helper.make_node("Add", ["s", "x"], ["a"]),
             helper.make_node("Transpose", ["a"], ["t"], perm=[1, 0]),
             helper.make_node("Mystery", ["t"], ["u"], domain="com.example"),
             helper.make_node("NonZero", ["u"], ["nz"]),
             helper.make_node("Relu", ["nz"], ["r"])]  # its shape depends on the data
    proto = make_model(nodes, [vinfo("x", shape=["n", 10])], [vinfo("r")], opset=20)
    proto.opset_import.append(helper.make_opsetid("com.example", 1))
    counted, found = _count(proto, {"x": [4, 10]})
    assert counted["Gelu"] == (8 * 40, 0) and counted["Softmax"] == (5 * 40, 0)
    assert counted["Add"] == (40, 0) and counted["Transpose"] == (0, 0)
    assert found.uncounted == {"com.example.Mystery": 1, "Relu": 1}
    assert sum(row[1] for row in found.ops.values()) == 8 * 40 + 5 * 40 + 40


def test_named_dims_and_sums_deeper_in_the_graph_take_the_bound_values():
    """A value declared ``[n, past + n]`` (dynamo writes such sums) is counted at n=3,
    past=5; the same graph without a bound dim leaves its MatMul uncounted."""
    nodes = [helper.make_node("MatMul", ["x", "y"], ["m"])]
    proto = make_model(nodes, [vinfo("x", shape=["n", "past + n"]),
                               vinfo("y", shape=["past + n", 2])], [vinfo("m")])
    counted, _ = _count(proto, {"x": [3, 8], "y": [8, 2]})
    assert counted["MatMul"] == (2 * 3 * 2 * 8, 3 * 2 * 8)
    _, found = _count(proto, {})
    assert found.uncounted == {"MatMul": 1}


def test_shapes_inference_cannot_follow_come_from_the_walk():
    """``Expand(x, Where(ConstantOfShape(...)))``: onnx's inference loses the shape at the
    Where; the fold's walk follows the shape value through it, and the MatMul after it is
    counted."""
    nodes = [helper.make_node("ConstantOfShape", ["two"], ["ones"],
                              value=numpy_helper.from_array(np.array([1], np.int64))),
             helper.make_node("Equal", ["ones", "minus"], ["eq"]),
             helper.make_node("Where", ["eq", "ones", "target"], ["shape"]),
             helper.make_node("Expand", ["x", "shape"], ["e"]),
             helper.make_node("MatMul", ["e", "w"], ["m"])]
    inits = [tensor("two", np.array([2], np.int64)), tensor("minus", np.array([-1], np.int64)),
             tensor("target", np.array([6, 4], np.int64)),
             tensor("w", np.ones((4, 3), np.float32))]
    proto = make_model(nodes, [vinfo("x", shape=[1, 4])], [vinfo("m")], inits)
    found, alone = _count(proto, {})
    assert found["MatMul"] == (2 * 6 * 3 * 4, 6 * 3 * 4) and "MatMul" not in alone.uncounted


def test_a_cost_of_an_unknown_kind_is_refused_when_declared():
    with pytest.raises(ValueError, match="kind 'quadratic' is none of"):
        OpCost("Foo", "quadratic")
