"""``--keep OP|NODE`` (``FoldOptions.keep``): nothing of a kept op or node is folded, natively or
through onnxruntime, nor rewritten or removed; the rest folds as before."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from onnxfold import FoldOptions, optimize
from tests.support.cli import run_cli
from tests.support.models import make_model, tensor, vinfo
from tests.support.running import run_ort


def _model():
    """y = x + Transpose(W) + Neg(A) + Neg(B) + Hardmax(H) + Transpose(Transpose(x))."""
    nodes = [helper.make_node("Transpose", ["W"], ["wt"], name="t_w"),
             helper.make_node("Neg", ["A"], ["na"], name="neg_a"),
             helper.make_node("Neg", ["B"], ["nb"], name="neg_b"),
             helper.make_node("Hardmax", ["H"], ["hm"], name="hardmax"),  # no native rule
             helper.make_node("Transpose", ["x"], ["xt"], name="t_x1", perm=[1, 0]),
             helper.make_node("Transpose", ["xt"], ["xtt"], name="t_x2", perm=[1, 0]),
             helper.make_node("Add", ["xtt", "wt"], ["s1"]),
             helper.make_node("Add", ["s1", "na"], ["s2"]),
             helper.make_node("Add", ["s2", "nb"], ["s3"]),
             helper.make_node("Add", ["s3", "hm"], ["y"])]
    rng = np.random.default_rng(0)
    weights = [tensor(n, rng.standard_normal((4, 4)).astype(np.float32)) for n in "WABH"]
    return make_model(nodes, [vinfo("x", shape=[4, 4])], [vinfo("y", shape=[4, 4])], weights)


def _ops(model) -> list[str]:
    return sorted(n.op_type for n in model.graph.node)


def _names(model) -> set[str]:
    return {n.name for n in model.graph.node}


def _run(model) -> np.ndarray:
    return run_ort(model, {"x": np.arange(16, dtype=np.float32).reshape(4, 4)})[0]


def test_everything_folds_without_keep():
    folded = optimize(_model()).to_proto()
    assert _ops(folded) == ["Add"] * 4  # every Transpose, both Negs and Hardmax went


def test_a_kept_op_type_is_never_folded_nor_rewritten():
    original = _model()
    result = optimize(original, FoldOptions(keep=("Transpose",)))
    folded = result.to_proto()
    assert _ops(folded).count("Transpose") == 3  # of W (foldable) and the pair merge_transposes
    assert "Neg" not in _ops(folded) and "Hardmax" not in _ops(folded)  # would merge
    assert "kept (--keep)" in result.report.declined
    np.testing.assert_allclose(_run(folded), _run(original), rtol=1e-6)


def test_a_kept_node_name_is_never_folded_natively_or_through_onnxruntime():
    original = _model()
    folded = optimize(original, FoldOptions(keep=("neg_a", "hardmax", "t_x1"))).to_proto()
    assert {"neg_a", "hardmax", "t_x1", "t_x2"} <= _names(folded)  # t_x2 may not merge into t_x1
    assert "neg_b" not in _names(folded) and "t_w" not in _names(folded)
    np.testing.assert_allclose(_run(folded), _run(original), rtol=1e-6)


def test_the_cli_flag(tmp_path):
    src, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(_model(), src)
    proc = run_cli("optimize", src, "-o", out, "-q", "--keep", "Neg", "--keep", "hardmax",
                   timeout=60)
    assert proc.returncode == 0, proc.stderr
    folded = onnx.load(out)
    assert _ops(folded).count("Neg") == 2 and "hardmax" in _names(folded)
    assert "Transpose" not in _ops(folded)


def _ops_and_names(model):
    return [(n.op_type, n.name) for n in model.graph.node]


def test_keep_a_constant_node_by_name():
    nodes = [helper.make_node("Constant", [], ["c"], name="const_c",
                              value=tensor("c", np.ones(4, np.float32))),
             helper.make_node("Add", ["x", "c"], ["y"])]
    model = make_model(nodes, [vinfo("x", shape=[4])], [vinfo("y", shape=[4])])
    folded = optimize(model, FoldOptions(keep=("const_c",))).to_proto()
    assert ("Constant", "const_c") in _ops_and_names(folded)


def _split_to_sequence():
    nodes = [helper.make_node("SplitToSequence", ["x", "s"], ["q"], axis=0, name="sts"),
             helper.make_node("SequenceAt", ["q", "i"], ["y"], name="at0")]
    return make_model(nodes, [vinfo("x", shape=[4, "N"])], [vinfo("y", shape=[2, "N"])],
                      [tensor("s", np.array([2, 2], np.int64)), tensor("i", np.array(0, np.int64))])


@pytest.mark.parametrize("keep", ["SequenceAt", "at0"])
def test_keep_sequence_at(keep):
    folded = optimize(_split_to_sequence(), FoldOptions(keep=(keep,))).to_proto()
    assert "SequenceAt" in [n.op_type for n in folded.graph.node]


def _reshape_relu_reshape():
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["r"], name="inner"),
             helper.make_node("Relu", ["r"], ["e"], name="relu"),
             helper.make_node("Reshape", ["e", "s2"], ["y"], name="outer")]
    return make_model(nodes, [vinfo("x", shape=["N", 6])], [vinfo("y", shape=["a", 3])],
                      [tensor("s1", np.array([-1, 2, 3], np.int64)),
                       tensor("s2", np.array([-1, 3], np.int64))])


@pytest.mark.parametrize("keep", ["inner", "Relu", "relu"])
def test_keep_inside_reshape_elementwise_reshape(keep):
    result = optimize(_reshape_relu_reshape(), FoldOptions(keep=(keep,)))
    assert "elementwise_between_reshapes" not in result.report.pattern_hits
    names = [n.name for n in result.to_proto().graph.node]
    assert names == ["inner", "relu", "outer"]


def test_keep_a_node_nothing_reads():
    nodes = [helper.make_node("Neg", ["x"], ["dead"], name="debug_neg"),
             helper.make_node("Relu", ["x"], ["y"])]
    model = make_model(nodes, [vinfo("x", shape=[4])], [vinfo("y", shape=[4])])
    folded = optimize(model, FoldOptions(keep=("debug_neg",))).to_proto()
    assert "debug_neg" in [n.name for n in folded.graph.node]


def test_keep_sanity_the_models_are_valid():
    """The models above are valid and run (so the tests are about the optimizer)."""
    for model in (_split_to_sequence(), _reshape_relu_reshape()):
        onnx.checker.check_model(model)
    run_ort(_reshape_relu_reshape(), {"x": np.arange(12, dtype=np.float32).reshape(2, 6)})
