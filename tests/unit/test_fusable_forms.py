"""The forms onnxruntime's transformer fusers match stay as they match them (``rules/fusable.py``;
the whole story on real exports: tests/fusions): Q, K and V projections split into heads are
not merged, a 2-D integer mask widened by two Unsqueezes keeps them, the Reshape of a Gemm's
product stays, and a product of two scaled operands is scaled once after the MatMul, computing
what the original computes in onnxruntime within float rounding."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.support.models import make_model, tensor, vinfo
from tests.support.running import fold_proto, run_ort

D, HEADS = 8, 2


def _ops(proto):
    return sorted(n.op_type for n in proto.graph.node)


def _projections(into_heads: bool):
    """Three biased projections of ``x [N, S, D]``, each reshaped into heads and transposed
    (or only reshaped), concatenated."""
    rng = np.random.default_rng(0)
    nodes, inits, outs = [], [tensor("heads", np.array([0, 0, HEADS, D // HEADS], np.int64))], []
    for kind in "qkv":
        inits += [tensor(f"w{kind}", rng.standard_normal((D, D)).astype(np.float32)),
                  tensor(f"b{kind}", rng.standard_normal(D).astype(np.float32))]
        nodes += [helper.make_node("MatMul", ["x", f"w{kind}"], [f"{kind}0"]),
                  helper.make_node("Add", [f"{kind}0", f"b{kind}"], [f"{kind}1"]),
                  helper.make_node("Reshape", [f"{kind}1", "heads"], [f"{kind}2"])]
        if into_heads:
            nodes.append(helper.make_node("Transpose", [f"{kind}2"], [f"{kind}3"],
                                          perm=[0, 2, 1, 3]))
        outs.append(f"{kind}3" if into_heads else f"{kind}2")
    nodes.append(helper.make_node("Concat", outs, ["y"], axis=-1))
    return make_model(nodes, [vinfo("x", shape=["N", "S", D])], [vinfo("y", shape=[None] * 4)],
                      inits)


def test_projections_into_heads_stay_apart_and_others_merge(tmp_path):
    folded, report, _ = fold_proto(_projections(into_heads=True), tmp_path)
    assert _ops(folded).count("MatMul") == 3
    assert any("attention heads" in reason for reason in report.patterns_rejected)
    (tmp_path / "b").mkdir()
    folded, _, _ = fold_proto(_projections(into_heads=False), tmp_path / "b")
    assert _ops(folded).count("MatMul") == 1 and "Split" in _ops(folded)


@pytest.mark.parametrize(("elem", "kept"), [(TensorProto.INT64, True), (TensorProto.BOOL, True),
                                            (TensorProto.FLOAT, False)])
def test_a_mask_widened_by_two_unsqueezes_keeps_them(tmp_path, elem, kept):
    nodes = [helper.make_node("Unsqueeze", ["mask", "a1"], ["u"]),
             helper.make_node("Unsqueeze", ["u", "a2"], ["y"])]
    proto = make_model(nodes, [vinfo("mask", elem, ["N", "S"])], [vinfo("y", elem, [None] * 4)],
                       [tensor("a1", np.array([1], np.int64)),
                        tensor("a2", np.array([2], np.int64))])
    folded, _, _ = fold_proto(proto, tmp_path)
    assert _ops(folded) == (["Unsqueeze", "Unsqueeze"] if kept else ["Unsqueeze"])


def test_the_reshapes_around_a_gemms_product_stay(tmp_path):
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["g"]),
             helper.make_node("Reshape", ["g", "three"], ["r"]),
             helper.make_node("Tanh", ["r"], ["t"]),
             helper.make_node("Reshape", ["t", "two"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[6, D])], [vinfo("y", shape=[6, D])], [
        tensor("w", rng.standard_normal((D, D)).astype(np.float32)),
        tensor("b", rng.standard_normal(D).astype(np.float32)),
        tensor("three", np.array([2, 3, D], np.int64)), tensor("two", np.array([6, D], np.int64))])
    folded, report, _ = fold_proto(proto, tmp_path)
    assert _ops(folded).count("Reshape") == 2
    assert any("Gemm's product" in reason for reason in report.patterns_rejected)


def _scaled_product(s, t, extra_reader=False):
    nodes = [helper.make_node("Mul", ["a", "s"], ["as"]),
             helper.make_node("Mul", ["t", "b"], ["bt"]),
             helper.make_node("MatMul", ["as", "bt"], ["y"])]
    outputs = [vinfo("y", shape=[None] * 4)]
    if extra_reader:
        nodes.append(helper.make_node("Neg", ["as"], ["z"]))
        outputs.append(vinfo("z", shape=[None] * 4))
    return make_model(nodes, [vinfo("a", shape=["N", HEADS, "S", 4]),
                              vinfo("b", shape=["N", HEADS, 4, "S"])], outputs,
                      [tensor("s", np.asarray(s, np.float32)),
                       tensor("t", np.asarray(t, np.float32))])


def test_a_product_of_scaled_operands_is_scaled_once(tmp_path):
    proto = _scaled_product(0.42044821, [[[[0.42044821]]]])
    folded, _, out = fold_proto(proto, tmp_path)
    assert _ops(folded) == ["MatMul", "Mul"]
    mul = next(n for n in folded.graph.node if n.op_type == "Mul")
    assert mul.input[0] == next(n for n in folded.graph.node if n.op_type == "MatMul").output[0]
    rng = np.random.default_rng(2)
    for n, s in ((1, 5), (3, 2)):
        feeds = {"a": rng.standard_normal((n, HEADS, s, 4)).astype(np.float32),
                 "b": rng.standard_normal((n, HEADS, 4, s)).astype(np.float32)}
        want, got = run_ort(proto, feeds)[0], run_ort(out, feeds)[0]
        assert want.shape == got.shape
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("s", "t", "extra_reader"), [
    ([0.5, 0.25, 0.5, 0.5], 0.5, False),  # one scale per column: not one value
    (0.5, [[[[[0.5]]]]], False),  # a scale that adds a dim
    (0.5, 0.5, True),  # the scaled operand is read elsewhere
    (1e-30, 1e-30, False),  # the scales' product underflows
])
def test_a_scale_that_cannot_move_stays(tmp_path, s, t, extra_reader):
    folded, _, _ = fold_proto(_scaled_product(s, t, extra_reader), tmp_path)
    assert _ops(folded).count("Mul") == 2
