"""Failures the differential fuzzer found (``tests/fuzz``), each reduced to a few nodes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.support.models import make_model, tensor, vinfo
from tests.support.running import fold_proto, run_ort


def _same(proto, out, feeds):
    for a, b in zip(run_ort(proto, feeds), run_ort(out, feeds)):
        np.testing.assert_array_equal(a, b)


def test_a_loop_without_carried_values_keeps_its_empty_condition(tmp_path):
    # Loop(M, "") was written as Loop(M): one input, below the schema's two
    body = helper.make_graph([helper.make_node("Min", ["i", "x"], ["o"])], "body",
                             [vinfo("i", TensorProto.INT64, []), vinfo("c", TensorProto.BOOL, [])],
                             [vinfo("c", TensorProto.BOOL, []), vinfo("o", TensorProto.INT64, [])])
    proto = make_model([helper.make_node("Loop", ["M", ""], ["y"], body=body)],
                       [vinfo("x", TensorProto.INT64, [])], [vinfo("y", TensorProto.INT64, [4])],
                       [tensor("M", np.array(4, np.int64))])
    folded, _, out = fold_proto(proto, tmp_path)
    assert list(folded.graph.node[0].input) == ["M", ""]
    _same(proto, out, {"x": np.array(2, np.int64)})


def test_a_dead_noop_does_not_rename_a_graph_output(tmp_path):
    # y = Cast(n) (a no-op) is an output; a dead Expand(n, []) also dropped: y kept its name
    nodes = [helper.make_node("Neg", ["x"], ["n"]),
             helper.make_node("Cast", ["n"], ["y"], to=TensorProto.INT64),
             helper.make_node("Expand", ["n", "empty"], ["dead"])]
    proto = make_model(nodes, [vinfo("x", TensorProto.INT64, [3])],
                       [vinfo("y", TensorProto.INT64, [3])],
                       [tensor("empty", np.zeros(0, np.int64))])
    folded, _, out = fold_proto(proto, tmp_path)
    assert [o.name for o in folded.graph.output] == ["y"]
    _same(proto, out, {"x": np.array([1, -2, 3], np.int64)})


def test_a_replaced_output_keeps_its_declared_shape(tmp_path):
    # If inlined, then its result's Identity removed: the output's shape field must survive
    inner = helper.make_graph([helper.make_node("Abs", ["x"], ["a"])], "t", [],
                              [vinfo("a", shape=["N"])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["b"])], "e", [],
                              [vinfo("b", shape=["N"])])
    nodes = [helper.make_node("If", ["c"], ["r"], then_branch=inner, else_branch=other),
             helper.make_node("Identity", ["r"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=["N"])], [vinfo("y", shape=["N"])],
                       [tensor("c", np.array(True))])
    folded, _, out = fold_proto(proto, tmp_path)
    onnx.checker.check_model(folded, full_check=True)
    assert folded.graph.output[0].type.tensor_type.HasField("shape")
    _same(proto, out, {"x": np.float32([-1, 2, -3])})


@pytest.mark.parametrize("cond_is_input", [True, False])
def test_transposes_merged_across_a_branch_boundary(tmp_path, cond_is_input):
    # Transpose(w) in the main graph, Transpose of it inside an If branch
    then_b = helper.make_graph([helper.make_node("Transpose", ["t1"], ["t2"], perm=[1, 0])],
                               "then", [], [vinfo("t2", shape=[2, 3])])
    else_b = helper.make_graph([helper.make_node("Identity", ["z"], ["e"])], "else", [],
                               [vinfo("e", shape=[2, 3])])
    inits = [tensor("w", np.arange(6, dtype=np.float32).reshape(2, 3))]
    inputs = [vinfo("z", shape=[2, 3])]
    if cond_is_input:
        inputs.append(vinfo("c", TensorProto.BOOL, []))
    else:
        inits.append(tensor("c", np.array(True)))
    nodes = [helper.make_node("Transpose", ["w"], ["t1"], perm=[1, 0]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b)]
    proto = make_model(nodes, inputs, [vinfo("y", shape=[2, 3])], inits)
    _folded, _, out = fold_proto(proto, tmp_path)
    feeds = {"z": np.ones((2, 3), np.float32)}
    for c in ([True, False] if cond_is_input else [None]):
        if c is not None:
            feeds["c"] = np.array(c)
        _same(proto, out, feeds)


def test_a_multi_dimensional_integer_constant_is_not_a_shape(tmp_path):
    # inside a branch, Identity of an outer int64 [3, 2] constant was taken for a 6-element
    # shape tensor and replaced by a [6] initializer
    w = np.arange(6, dtype=np.int64).reshape(3, 2)
    then_b = helper.make_graph([helper.make_node("Identity", ["w"], ["v"]),
                                helper.make_node("Mul", ["v", "w"], ["v2"])], "then", [],
                               [vinfo("v2", TensorProto.INT64, [3, 2])])
    else_b = helper.make_graph([helper.make_node("Neg", ["w"], ["u"])], "else", [],
                               [vinfo("u", TensorProto.INT64, [3, 2])])
    nodes = [helper.make_node("If", ["c"], ["r"], then_branch=then_b, else_branch=else_b),
             helper.make_node("Add", ["r", "x"], ["y"])]
    proto = make_model(nodes, [vinfo("x", TensorProto.INT64, [3, 2]),
                               vinfo("c", TensorProto.BOOL, [])],
                       [vinfo("y", TensorProto.INT64, [3, 2])], [tensor("w", w)])
    _, _, out = fold_proto(proto, tmp_path)
    for c in (True, False):
        _same(proto, out, {"x": np.ones((3, 2), np.int64), "c": np.array(c)})
