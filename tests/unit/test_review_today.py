"""Review of the 2026-11-23 additions (fusions, structure rewrites, contrib and plugin ops,
``--keep``): each test was a confirmed divergence from the original model in onnxruntime, or a
broken promise, found by attacking the new code; all are fixed (regression tests)."""

from __future__ import annotations

import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnxfold import FoldOptions, optimize
from tests.support.models import make_model, tensor, vinfo

RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _seeded(monkeypatch):
    """Each test draws the same numbers whatever ran before it in its worker (a shared
    generator made the data, and a tolerance near a cancellation, depend on test order)."""
    monkeypatch.setattr(sys.modules[__name__], "RNG", np.random.default_rng(0))


def _w(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _session(model):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def _run(model, feeds):
    return _session(model).run(None, feeds)


def _out(name, rank):
    return vinfo(name, shape=[f"{name}{i}" for i in range(rank)])


def _conv_then(op, c, cout, bias=True, conv_op="Conv", weight=None):
    w_shape = (cout, 4, 3, 3) if conv_op == "Conv" else (4, cout, 3, 3)
    nodes = [helper.make_node(conv_op, ["x", "W"] + (["B"] if bias else []), ["c"],
                              pads=[1, 1, 1, 1]),
             helper.make_node(op, ["c", "k"], ["y"])]
    inits = [tensor("W", _w(*w_shape) if weight is None else weight), tensor("k", c)]
    inits += [tensor("B", _w(cout))] if bias else []
    return make_model(nodes, [vinfo("x", shape=["N", 4, 8, 8])], [_out("y", 4)], inits,
                      opset=15)


# --- rules/fusions.py -----------------------------------------------------------------------

@pytest.mark.parametrize("conv_op", ["Conv", "ConvTranspose"])
@pytest.mark.parametrize("bias", [True, False])
def test_add_broadcasting_the_channel_axis_still_runs(conv_op, bias):
    original = _conv_then("Add", _w(3, 1, 1), cout=1, bias=bias, conv_op=conv_op)
    x = {"x": _w(2, 4, 8, 8)}
    expected = _run(original, x)[0]
    assert expected.shape[1] == 3
    folded = optimize(original).to_proto()
    np.testing.assert_allclose(_run(folded, x)[0], expected, rtol=1e-4, atol=1e-5)


def _batch_norm_opset7(spatial, param_shape):
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"],
                              spatial=spatial)]
    inits = [tensor("W", _w(6, 4, 3, 3)), tensor("B", _w(6)), tensor("s", _w(*param_shape)),
             tensor("b", _w(*param_shape)), tensor("m", _w(*param_shape)),
             tensor("v", np.abs(_w(*param_shape)) + 0.1)]
    return make_model(nodes, [vinfo("x", shape=["N", 4, 8, 8])], [_out("y", 4)], inits,
                      opset=7)


def test_batch_norm_spatial_0_is_not_fused_as_per_channel():
    original = _batch_norm_opset7(spatial=0, param_shape=(6, 8, 8))
    x = {"x": _w(2, 4, 8, 8)}
    expected = _run(original, x)[0]
    folded = optimize(original).to_proto()
    np.testing.assert_allclose(_run(folded, x)[0], expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fusion", ["mul", "batch_norm"])
def test_a_fused_weight_that_overflows_is_not_fused(fusion):
    big = np.full((6, 4, 3, 3), 1e20, np.float32)
    if fusion == "mul":
        original = _conv_then("Mul", np.full((6, 1, 1), 1e20, np.float32), cout=6, bias=False,
                              weight=big)
    else:
        nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
                 helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"])]
        inits = [tensor("W", big), tensor("s", np.full(6, 1e20, np.float32)),
                 tensor("b", np.zeros(6, np.float32)), tensor("m", np.zeros(6, np.float32)),
                 tensor("v", np.ones(6, np.float32))]
        original = make_model(nodes, [vinfo("x", shape=["N", 4, 8, 8])], [_out("y", 4)],
                              inits, opset=15)
    x = {"x": np.zeros((1, 4, 8, 8), np.float32)}
    expected = _run(original, x)[0]
    assert np.isfinite(expected).all()
    folded = optimize(original).to_proto()
    np.testing.assert_array_equal(_run(folded, x)[0], expected)


def test_batch_norm_with_parameters_of_the_wrong_size_is_not_fused():
    original = _batch_norm_opset7(spatial=1, param_shape=(1,))
    original.opset_import[0].version = 15
    del original.graph.node[1].attribute[:]
    with pytest.raises(Exception):  # noqa: B017,PT011 - onnxruntime's own refusal
        _session(original)
    folded = optimize(original).to_proto()
    with pytest.raises(Exception):  # noqa: B017,PT011
        _session(folded)


# --- contrib ops: the pool budget -----------------------------------------------------------

def _range_then_topk(n, domain):
    nodes = [helper.make_node("Range", ["s", "l", "d"], ["r"], domain=domain),
             helper.make_node("TopK", ["r", "k"], ["v", "i"]),
             helper.make_node("Identity", ["v"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        [tensor("s", np.array(0, np.float32)), tensor("l", np.array(n, np.float32)),
         tensor("d", np.array(1, np.float32)), tensor("k", np.array([1], np.int64))])
    opsets = [helper.make_opsetid("", 17)] + (
        [helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model


@pytest.mark.parametrize("domain", ["", "com.microsoft"])
def test_a_contrib_intermediate_respects_the_pool_budget(domain):
    n = 16 * 1024 * 1024  # 64 MiB of float32, the budget 4 MiB
    result = optimize(_range_then_topk(n, domain), FoldOptions(pool_budget=4 << 20))
    assert "Range" in [node.op_type for node in result.to_proto().graph.node]


# --- plugin ops ------------------------------------------------------------------------------

def test_two_calls_of_a_plugin_op_are_not_merged():
    nodes = [helper.make_node("MyRandomPlugin", ["x"], ["p1"]),
             helper.make_node("MyRandomPlugin", ["x"], ["p2"]),
             helper.make_node("Sub", ["p1", "p2"], ["y"])]
    model = make_model(nodes, [vinfo("x", shape=[4])], [vinfo("y", shape=[4])])
    folded = optimize(model).to_proto()
    assert [n.op_type for n in folded.graph.node].count("MyRandomPlugin") == 2


# --- --keep ----------------------------------------------------------------------------------

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
    _run(_reshape_relu_reshape(), {"x": _w(2, 6)})


# --- rules/structure.py ----------------------------------------------------------------------

def test_split_to_sequence_scalar_split_with_keepdims_0():
    nodes = [helper.make_node("SplitToSequence", ["x", "s"], ["q"], axis=1, keepdims=0),
             helper.make_node("SequenceAt", ["q", "i"], ["y"])]
    model = make_model(nodes, [vinfo("x", shape=["N", 3])], [vinfo("y", shape=["N"])],
                       [tensor("s", np.array(1, np.int64)), tensor("i", np.array(0, np.int64))])
    x = {"x": _w(2, 3)}
    expected = _run(model, x)[0]
    assert expected.shape == (2,)
    got = _run(optimize(model).to_proto(), x)[0]
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("after", ["BatchNormalization", "Mul"])
def test_a_weight_shared_through_identity_is_not_duplicated(after):
    c = 32
    nodes = [helper.make_node("Identity", ["W"], ["w1"]),
             helper.make_node("Identity", ["W"], ["w2"]),
             helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "w2"], ["y2"], pads=[1, 1, 1, 1])]
    inits = [tensor("W", _w(c, c, 3, 3))]
    if after == "Mul":
        nodes.append(helper.make_node("Mul", ["c1", "k"], ["y1"]))
        inits.append(tensor("k", _w(c, 1, 1)))
    else:
        nodes.append(helper.make_node("BatchNormalization", ["c1", "s", "b", "m", "v"], ["y1"]))
        inits += [tensor("s", _w(c)), tensor("b", _w(c)), tensor("m", _w(c)),
                  tensor("v", np.abs(_w(c)) + 0.1)]
    original = make_model(nodes, [vinfo("x", shape=["N", c, 8, 8])],
                          [_out("y1", 4), _out("y2", 4)], inits, opset=15)
    folded = optimize(original).to_proto()

    def weight_bytes(model):
        return sum(int(np.prod(t.dims)) * 4 for t in model.graph.initializer)

    assert weight_bytes(folded) <= weight_bytes(original)
