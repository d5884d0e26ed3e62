"""Constant weight fusions (``rules/fusions.py``): the folded model has fewer nodes and computes
what the original computes in onnxruntime (float tolerance: the fused weight rounds once)."""

from __future__ import annotations

import sys

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from onnxfold import optimize
from tests.support.models import make_model, tensor, vinfo

RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _seeded(monkeypatch):
    """Each test draws the same numbers whatever ran before it in its worker (a shared
    generator made the data, and a tolerance near a cancellation, depend on test order)."""
    monkeypatch.setattr(sys.modules[__name__], "RNG", np.random.default_rng(0))


def _w(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _bn_params(c):
    return [tensor("scale", _w(c)), tensor("bn_bias", _w(c)), tensor("mean", _w(c)),
            tensor("var", (np.abs(_w(c)) + 0.1).astype(np.float32))]


def _model(op="Conv", bias=True, group=1, shared=False, training=False):
    c_in, c_out = 4, 6
    w_shape = (c_out, c_in // group, 3, 3) if op == "Conv" else (c_in, c_out // group, 3, 3)
    conv_inputs = ["x", "W"] + (["B"] if bias else [])
    nodes = [helper.make_node(op, conv_inputs, ["c"], group=group, pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "scale", "bn_bias", "mean", "var"],
                              ["y"], epsilon=1e-3, **({"training_mode": 1} if training else {}))]
    outputs = [vinfo("y", shape=["N", c_out, 8, 8])]
    inputs = [vinfo("x", shape=["N", c_in, 8, 8])]
    if shared:  # the weight is read at run time too
        nodes.append(helper.make_node("Mul", ["W", "k"], ["w_k"]))
        outputs.append(vinfo("w_k", shape=list(w_shape)))
        inputs.append(vinfo("k", shape=[]))
    inits = [tensor("W", _w(*w_shape)), *_bn_params(c_out)] + (
        [tensor("B", _w(c_out))] if bias else [])
    return make_model(nodes, inputs, outputs, inits, opset=15)


def _session(model):
    options = ort.SessionOptions()  # onnxruntime's own Conv+BN fusion off: the plain original
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def _same(original, folded):
    sess_a, sess_b = _session(original), _session(folded)
    for n in (1, 3):
        x = RNG.standard_normal((n, 4, 8, 8)).astype(np.float32)
        for a, b in zip(sess_a.run(None, {"x": x}), sess_b.run(None, {"x": x})):
            np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("op", "bias", "group"), [
    ("Conv", True, 1), ("Conv", False, 1), ("Conv", True, 2), ("ConvTranspose", True, 1),
    ("ConvTranspose", False, 1)])
def test_batch_norm_folds_into_the_convolution(op, bias, group):
    original = _model(op, bias, group)
    result = optimize(original)
    folded = result.to_proto()
    assert [n.op_type for n in folded.graph.node] == [op]
    assert result.report.pattern_hits.get("fuse_batch_norm_into_conv") == 1
    _same(original, folded)


@pytest.mark.parametrize("case", [{"shared": True}, {"training": True},
                                  {"op": "ConvTranspose", "group": 2}])
def test_batch_norm_stays_where_fusing_would_cost_or_change_something(case):
    original = _model(**case)
    result = optimize(original)
    assert "BatchNormalization" in [n.op_type for n in result.to_proto().graph.node]
    assert "fuse_batch_norm_into_conv" not in result.report.pattern_hits


def _conv_then(op, c, conv_op="Conv", bias=True):
    c_in, c_out = 4, 6
    out_shape = ["N", c_out, 8, 8] if np.ndim(c) < 5 else [1, "N", c_out, 8, 8]
    w_shape = (c_out, c_in, 3, 3) if conv_op == "Conv" else (c_in, c_out, 3, 3)
    nodes = [helper.make_node(conv_op, ["x", "W"] + (["B"] if bias else []), ["c"],
                              pads=[1, 1, 1, 1]),
             helper.make_node(op, ["c", "k"], ["y"])]
    inits = [tensor("W", _w(*w_shape)), tensor("k", c)] + ([tensor("B", _w(c_out))] if bias
                                                           else [])
    return make_model(nodes, [vinfo("x", shape=["N", c_in, 8, 8])],
                      [vinfo("y", shape=out_shape)], inits, opset=15)


PER_CHANNEL = [_w(6, 1, 1), _w(1, 6, 1, 1), np.float32(1.5), _w(1, 1, 1)]


@pytest.mark.parametrize("op", ["Mul", "Add"])
@pytest.mark.parametrize("c", PER_CHANNEL, ids=["M11", "1M11", "scalar", "111"])
@pytest.mark.parametrize(("conv_op", "bias"), [("Conv", True), ("Conv", False),
                                               ("ConvTranspose", True)])
def test_a_per_channel_constant_folds_into_the_convolution(op, c, conv_op, bias):
    original = _conv_then(op, c, conv_op, bias)
    result = optimize(original)
    folded = result.to_proto()
    assert [n.op_type for n in folded.graph.node] == [conv_op]
    assert result.report.pattern_hits.get(f"fuse_{op.lower()}_into_conv") == 1
    _same(original, folded)


@pytest.mark.parametrize("op", ["Mul", "Add"])
@pytest.mark.parametrize("c", [_w(6, 8, 1), _w(1, 1, 6, 1, 1), _w(8)],
                         ids=["spatial", "higher-rank", "last-axis"])
def test_a_constant_varying_along_another_axis_stays(op, c):
    original = _conv_then(op, c)
    result = optimize(original)
    assert f"fuse_{op.lower()}_into_conv" not in result.report.pattern_hits
    _same(original, result.to_proto())


def test_a_constant_with_inf_or_nan_stays():
    c = _w(6, 1, 1)
    c[2, 0, 0] = np.inf
    for op in ("Mul", "Add"):
        result = optimize(_conv_then(op, c))
        assert f"fuse_{op.lower()}_into_conv" not in result.report.pattern_hits


def test_batch_norm_with_a_non_positive_variance_stays():
    original = _model()
    var = next(t for t in original.graph.initializer if t.name == "var")
    var.CopyFrom(tensor("var", np.full(6, -1.0, np.float32)))
    result = optimize(original)
    assert "fuse_batch_norm_into_conv" not in result.report.pattern_hits


def test_batch_norm_parameters_from_constant_nodes_after_the_conv_fold_in_one_run():
    """The exporter's Constant nodes for the BN parameters sit between the Conv and the BN:
    the fused weight arithmetic must go after them (it went before the Conv: an unsorted graph
    whose arithmetic nothing folded)."""
    original = _model()
    graph = original.graph
    params = [t for t in graph.initializer if t.name in ("scale", "bn_bias", "mean", "var")]
    constants = [helper.make_node("Constant", [], [t.name], value=t) for t in params]
    for t in params:
        graph.initializer.remove(t)
    conv, bn = graph.node
    del graph.node[:]
    graph.node.extend([conv, *constants, bn])
    folded = optimize(original).to_proto()
    assert [n.op_type for n in folded.graph.node] == ["Conv"]
    _same(original, folded)


def test_batch_norm_parameters_shared_through_identity_nodes_fold():
    """torchvision's default init gives every BatchNorm the same parameters, which the
    exporter shares through Identity nodes: the fusion reads them through those."""
    names = ("scale", "bn_bias", "mean", "var")
    nodes = [helper.make_node("Identity", [n], [f"{n}_{k}"]) for k in (1, 2) for n in names]
    nodes += [helper.make_node("Conv", ["x", "W1"], ["c1"], pads=[1, 1, 1, 1]),
              helper.make_node("BatchNormalization", ["c1", *(f"{n}_1" for n in names)], ["b1"]),
              helper.make_node("Conv", ["b1", "W2"], ["c2"], pads=[1, 1, 1, 1]),
              helper.make_node("BatchNormalization", ["c2", *(f"{n}_2" for n in names)], ["y"])]
    inits = [tensor("W1", _w(4, 4, 3, 3)), tensor("W2", _w(4, 4, 3, 3)), *_bn_params(4)]
    original = make_model(nodes, [vinfo("x", shape=["N", 4, 8, 8])],
                          [vinfo("y", shape=["N", 4, 8, 8])], inits, opset=15)
    result = optimize(original)
    assert [n.op_type for n in result.to_proto().graph.node] == ["Conv", "Conv"]
    assert result.report.pattern_hits.get("fuse_batch_norm_into_conv") == 2
    _same(original, result.to_proto())


@pytest.mark.parametrize("op", ["Mul", "Add"])
def test_the_constant_may_come_first(op):
    original = _conv_then(op, _w(6, 1, 1))
    node = original.graph.node[1]
    node.input[:] = [node.input[1], node.input[0]]  # op(k, c)
    result = optimize(original)
    assert [n.op_type for n in result.to_proto().graph.node] == ["Conv"]
    _same(original, result.to_proto())


def _run(model, feeds):
    return _session(model).run(None, feeds)


def _out(name, rank):
    return vinfo(name, shape=[f"{name}{i}" for i in range(rank)])


def _conv_then_sized(op, c, cout, bias=True, conv_op="Conv", weight=None):
    w_shape = (cout, 4, 3, 3) if conv_op == "Conv" else (4, cout, 3, 3)
    nodes = [helper.make_node(conv_op, ["x", "W"] + (["B"] if bias else []), ["c"],
                              pads=[1, 1, 1, 1]),
             helper.make_node(op, ["c", "k"], ["y"])]
    inits = [tensor("W", _w(*w_shape) if weight is None else weight), tensor("k", c)]
    inits += [tensor("B", _w(cout))] if bias else []
    return make_model(nodes, [vinfo("x", shape=["N", 4, 8, 8])], [_out("y", 4)], inits,
                      opset=15)


@pytest.mark.parametrize("conv_op", ["Conv", "ConvTranspose"])
@pytest.mark.parametrize("bias", [True, False])
def test_add_broadcasting_the_channel_axis_still_runs(conv_op, bias):
    original = _conv_then_sized("Add", _w(3, 1, 1), cout=1, bias=bias, conv_op=conv_op)
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
        original = _conv_then_sized("Mul", np.full((6, 1, 1), 1e20, np.float32), cout=6, bias=False,
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
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime's own refusal
        _session(original)
    folded = optimize(original).to_proto()
    with pytest.raises(Exception):  # noqa: B017
        _session(folded)


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
