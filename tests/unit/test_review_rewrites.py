"""Miscompiles a review of the dynamic-shape, CSE and CastLike rewrites found (regressions)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as T
from onnx import helper

from tests.support.models import make_model, tensor, vinfo
from tests.support.running import fold_proto, run_ort

F, INT = T.FLOAT, T.INT64


def _same(original, folded, feeds):
    for exp, got in zip(run_ort(original, feeds), run_ort(folded, feeds)):
        assert exp.shape == got.shape and exp.dtype == got.dtype
        np.testing.assert_array_equal(exp, got)
        if exp.dtype.kind == "f":
            np.testing.assert_array_equal(np.signbit(exp), np.signbit(got))


def test_reshape_known_target_minus_one_fails_on_empty_batch(tmp_path):
    # Reshape(x[N,K,4], [N, K*4]) -> Reshape(x, [0, -1]); onnxruntime refuses -1 when N == 0
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "z", "o"], ["n"]),
             helper.make_node("Slice", ["s", "o", "t"], ["k"]),
             helper.make_node("Mul", ["k", "four"], ["k4"]),
             helper.make_node("Concat", ["n", "k4"], ["tgt"], axis=0),
             helper.make_node("Reshape", ["x", "tgt"], ["y"])]
    model = make_model(nodes, [vinfo("x", F, ["N", "K", 4])], [vinfo("y", F, [None, None])],
                       [tensor("z", np.array([0])), tensor("o", np.array([1])),
                        tensor("t", np.array([2])), tensor("four", np.array([4]))])
    folded, _, _ = fold_proto(model, tmp_path)
    for shape in [(2, 3, 4), (2, 0, 4), (0, 3, 4)]:
        _same(model, folded, {"x": np.ones(shape, np.float32)})


def test_same_dim_param_on_two_inputs_is_not_the_same_size(tmp_path):
    # onnxruntime does not check that inputs sharing a dim_param agree: Shape(x) - Shape(w)
    # must not become 0
    nodes = [helper.make_node("Shape", ["x"], ["sx"]), helper.make_node("Shape", ["w"], ["sw"]),
             helper.make_node("Sub", ["sx", "sw"], ["d"]),
             helper.make_node("Add", ["d", "q"], ["y"])]
    model = make_model(nodes, [vinfo("x", F, ["N"]), vinfo("w", F, ["N"]), vinfo("q", INT, [1])],
                       [vinfo("y", INT, [1])])
    folded, _, _ = fold_proto(model, tmp_path)
    _same(model, folded, {"x": np.ones(3, np.float32), "w": np.ones(2, np.float32),
                          "q": np.array([5])})  # expected [6], folded gives [5]


def test_reshape_copy_of_another_inputs_dim_with_the_same_name(tmp_path):
    # Reshape(x[N,6], Concat(Shape(w[N]), [-1])) -> Reshape(x, [0, -1]): wrong when w's N != x's
    nodes = [helper.make_node("Shape", ["w"], ["sw"]),
             helper.make_node("Concat", ["sw", "m1"], ["tgt"], axis=0),
             helper.make_node("Reshape", ["x", "tgt"], ["y"])]
    model = make_model(nodes, [vinfo("x", F, ["N", 6]), vinfo("w", F, ["N"])],
                       [vinfo("y", F, [None, None])], [tensor("m1", np.array([-1]))])
    folded, _, _ = fold_proto(model, tmp_path)
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    _same(model, folded, {"x": x, "w": np.ones(3, np.float32)})  # expected (3, 4), got (2, 6)


def test_merge_duplicates_keeps_zero_and_negative_zero_apart(tmp_path):
    # float attributes compare 0.0 == -0.0: If-body Constants merge, x/0 - x/-0 becomes nan
    then = helper.make_graph([
        helper.make_node("Constant", [], ["a"], value_float=0.0),
        helper.make_node("Constant", [], ["b"], value_float=-0.0),
        helper.make_node("Div", ["x", "a"], ["t1"]), helper.make_node("Div", ["x", "b"], ["t2"]),
        helper.make_node("Sub", ["t1", "t2"], ["t"])], "then", [], [vinfo("t", F, [3])])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                              [vinfo("e", F, [3])])
    model = make_model([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
                       [vinfo("x", F, [3]), vinfo("c", T.BOOL, [])], [vinfo("y", F, [3])])
    folded, _, _ = fold_proto(model, tmp_path)
    _same(model, folded, {"x": np.array([1, -2, 3], np.float32), "c": np.array(True)})


def test_merge_duplicates_keeps_training_mode_dropouts_apart(tmp_path):
    # Dropout with training_mode draws a mask: two of them are not one
    nodes = [helper.make_node("Dropout", ["x", "r", "tm"], ["d1"]),
             helper.make_node("Dropout", ["x", "r", "tm"], ["d2"]),
             helper.make_node("Sub", ["d1", "d2"], ["y"])]
    model = make_model(nodes, [vinfo("x", F, [1000]), vinfo("tm", T.BOOL, [])],
                       [vinfo("y", F, [1000])], [tensor("r", np.array(0.5, np.float32))])
    folded, _, _ = fold_proto(model, tmp_path)
    feeds = {"x": np.ones(1000, np.float32), "tm": np.array(True)}
    assert np.count_nonzero(run_ort(model, feeds)[0]) > 0
    assert np.count_nonzero(run_ort(folded, feeds)[0]) > 0  # folded: all zeros


def test_cast_like_of_a_constant_to_string(tmp_path):
    # strict fold raises TypeError('Bitwidth not available for ONNX data type: STRING')
    nodes = [helper.make_node("CastLike", ["c", "l"], ["cc"]),
             helper.make_node("Identity", ["cc"], ["y"])]
    model = make_model(nodes, [vinfo("l", T.STRING, [1])], [vinfo("y", T.STRING, [3])],
                       [tensor("c", np.array([1.5, -2.5, 7.0], np.float32))], opset=19,
                       ir_version=9)
    folded, _, _ = fold_proto(model, tmp_path)
    _same(model, folded, {"l": np.array(["a"], dtype=object)})
