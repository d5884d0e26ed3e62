"""Where the memory stages' walk places each node of the optimized model (``_Walk.placed``,
``check/running/stage_plan.py``): the step that pairs the two chains of stages, tested on
hand-made graphs (issue 83: its subtlest step had no test of its own). Each node of the
optimized graph goes into the stage where the original makes a value of the same name;
else where the original makes or reads a weight it reads by that name; else with the first
node that reads what it makes; and never into a stage before one it reads from."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

from onnxfold.check.running.stage_plan import _Walk


def _walk(nodes, inputs, outputs, weights) -> _Walk:
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, f, [2, 2]) for n in inputs],
        [helper.make_tensor_value_info(n, f, None) for n in outputs],
        [numpy_helper.from_array(np.ones((2, 2), np.float32), n) for n in weights])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=8)
    return _Walk(ir.serde.deserialize_model(model))


def _node(op, ins, out):
    return helper.make_node(op, ins, [out], name=out)


# the original: x -> a = x @ w1 -> b = relu(a) -> c = b @ w2 -> d = relu(c), in two runs
ORIGINAL = _walk([_node("MatMul", ["x", "w1"], "a"), _node("Relu", ["a"], "b"),
                  _node("MatMul", ["b", "w2"], "c"), _node("Relu", ["c"], "d")],
                 ["x"], ["d"], ["w1", "w2"])
RUNS = [[0, 1], [2, 3]]


def _placed(walk: _Walk) -> list[list[str]]:
    return [[str(walk.nodes[p].outputs[0].name) for p in group]
            for group in walk.placed(ORIGINAL, RUNS)]


def test_a_node_goes_where_the_original_makes_its_name():
    same = _walk([_node("MatMul", ["x", "w1"], "a"), _node("Relu", ["a"], "b"),
                  _node("MatMul", ["b", "w2"], "c"), _node("Relu", ["c"], "d")],
                 ["x"], ["d"], ["w1", "w2"])
    assert _placed(same) == [["a", "b"], ["c", "d"]]


def test_a_renamed_node_goes_with_the_weight_it_reads():
    """A Gemm the fold made of the first MatMul and its Relu (a new name) reads ``w1``: it goes
    where the original reads ``w1``, the first stage, though what reads it is in the
    second."""
    fused = _walk([_node("Gemm", ["x", "w1"], "gemm"), _node("MatMul", ["gemm", "w2"], "c"),
                   _node("Relu", ["c"], "d")], ["x"], ["d"], ["w1", "w2"])
    assert _placed(fused) == [["gemm"], ["c", "d"]]


def test_a_node_of_no_known_name_or_weight_goes_with_its_first_reader():
    """A node the fold made of nothing the original names (a Mul of the input by itself)
    goes with the node that reads it, the first stage's MatMul, not to the last stage."""
    merged = _walk([_node("Mul", ["x", "x"], "scaled"), _node("MatMul", ["scaled", "w1"], "a"),
                    _node("Relu", ["a"], "b"), _node("MatMul", ["b", "w2"], "c"),
                    _node("Relu", ["c"], "d")], ["x"], ["d"], ["w1", "w2"])
    assert _placed(merged) == [["scaled", "a", "b"], ["c", "d"]]


def test_a_group_never_reads_a_later_one():
    """``a`` and ``b`` have the names of values the original makes in the first stage, but
    here they read ``c``, which it makes in the second: they move down with what they
    read."""
    reordered = _walk([_node("MatMul", ["x", "w2"], "c"), _node("Relu", ["c"], "a"),
                       _node("Relu", ["a"], "b")], ["x"], ["b"], ["w2"])
    groups = _placed(reordered)
    position = {name: k for k, group in enumerate(groups) for name in group}
    assert position == {"c": 1, "a": 1, "b": 1}, groups
