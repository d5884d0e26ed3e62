"""A subgraph initializer named as a value of the enclosing scopes (``io/scoped_names.py``):
onnxruntime runs a node's subgraph with the node's implicit inputs fed by name, and a value
fed takes the place of the initializer of its name. The oracle is onnxruntime itself: each
model below is run as it is and after the fold, and both must give the same bits (found in
a review: the fold renamed the branch's initializer apart and the folded model read it,
x*3, where onnxruntime runs the original with the outer value, x*2)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxfold.pipeline.optimizer import optimize

X = np.array([1.0, 2.0, 3.0, 4.0], np.float32)


def _k(value: float, name: str = "k") -> onnx.TensorProto:
    return numpy_helper.from_array(np.array([value], np.float32), name)


def _branch(name: str, nodes: list, initializers: list, output: str) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [],
                             [helper.make_tensor_value_info(output, TensorProto.FLOAT, [4])],
                             initializers)


def _if_model(sibling_reads_outer: bool, main_reads_outer: bool, outer: str,
              nested: bool = False, other_shape: bool = False) -> onnx.ModelProto:
    """An If whose then branch holds an initializer ``k`` (3.0; in a nested If with
    ``nested``) beside a ``k`` of the main graph (2.0: an initializer, a Constant's output or
    a graph input), the else branch reading the outer ``k`` or not."""
    own = numpy_helper.from_array(np.full((1, 1) if other_shape else (1,), 3.0, np.float32),
                                  "k")
    then = _branch("then", [helper.make_node("Mul", ["x", "k"], ["t"])], [own], "t")
    if nested:
        inner = then
        inner.name = "inner"
        then = _branch("then", [helper.make_node("If", ["p"], ["t"], then_branch=inner,
                                                 else_branch=_branch(
                                                     "inner_else", [helper.make_node(
                                                         "Neg", ["x"], ["n"])], [], "n"))],
                       [], "t")
    other = _branch("else", [helper.make_node("Add", ["x", "k" if sibling_reads_outer
                                                      else "x"], ["e"])], [], "e")
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["p"]),
             helper.make_node("If", ["p"], ["y"], then_branch=then, else_branch=other)]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])]
    initializers = [numpy_helper.from_array(np.array(0.0, np.float32), "zero")]
    if outer == "initializer":
        initializers.append(_k(2.0))
    elif outer == "constant":
        nodes.insert(0, helper.make_node("Constant", [], ["k"], value=_k(2.0, "c")))
    else:
        inputs.append(helper.make_tensor_value_info("k", TensorProto.FLOAT, [1]))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])]
    if main_reads_outer:
        nodes.append(helper.make_node("Identity", ["k"], ["k_out"]))
        outputs.append(helper.make_tensor_value_info("k_out", TensorProto.FLOAT, [1]))
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _runs(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options).run(None, feeds)


@pytest.mark.parametrize("outer", ["initializer", "constant", "input"])
@pytest.mark.parametrize("sibling_reads_outer", [True, False])
@pytest.mark.parametrize("main_reads_outer", [True, False])
@pytest.mark.parametrize("nested", [False, True])
def test_the_fold_reads_a_branch_initializer_as_onnxruntime_does(outer, sibling_reads_outer,
                                                                 main_reads_outer, nested):
    model = _if_model(sibling_reads_outer, main_reads_outer, outer, nested)
    feeds = {"x": X, **({"k": np.array([2.0], np.float32)} if outer == "input" else {})}
    expected = _runs(model, feeds)
    before = model.SerializeToString()
    folded = optimize(model).to_proto()
    assert model.SerializeToString() == before  # (the caller's proto as it was)
    got = _runs(folded, feeds)
    assert [a.tobytes() for a in got] == [a.tobytes() for a in expected]


def test_the_outer_value_is_what_onnxruntime_reads_here():
    """The premise, measured: the then branch's own ``k`` (3.0) is read only where no other
    subgraph of the If reads the outer ``k`` (2.0)."""
    for sibling_reads, factor in ((True, 2.0), (False, 3.0)):
        y = _runs(_if_model(sibling_reads, False, "initializer"), {"x": X})[0]
        assert y.tolist() == (X * factor).tolist()


def test_an_initializer_of_another_shape_is_left_to_be_renamed_apart():
    """(onnxruntime refuses such a model: the fed value's shape is not the declared one)"""
    model = _if_model(True, False, "initializer", other_shape=True)
    folded = optimize(model).to_proto()
    then = next(a.g for a in folded.graph.node[-1].attribute if a.name == "then_branch")
    assert [t.name for t in then.initializer] == ["k__onnxfold0"]
