"""A GRU's or LSTM's initial state of +0.0 built from the batch dim goes
(``rules/recurrent_states.py``): onnxruntime starts from +0.0 without one. Each case runs the
original and the folded model in onnxruntime at two bindings of batch and sequence, bit for bit;
a state of -0.0, of a shape not provably the op's, or of an RNN stays."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.support.models import make_model, tensor, vinfo
from tests.support.running import assert_same_bits, fold_proto

HIDDEN, FEATURES = 8, 4
GATES = {"GRU": 3, "LSTM": 4, "RNN": 1}


def _zeros(name, batch_of="x", axis=1, directions=1, fill=0.0, dynamo=False):
    """Nodes computing ``name``: zeros of [directions, batch, HIDDEN], batch read from
    ``batch_of``'s ``axis``: TorchScript's ConstantOfShape of a Concat, or dynamo's Expand of a
    scalar (then sliced, as per layer)."""
    p = name + "_"
    nodes = [helper.make_node("Shape", [batch_of], [p + "s"]),
             helper.make_node("Gather", [p + "s", "ax" + str(axis)], [p + "b"]),
             helper.make_node("Unsqueeze", [p + "b", "zero"], [p + "b1"]),
             helper.make_node("Concat", ["dirs", p + "b1", "hid"], [p + "shape"], axis=0)]
    value = helper.make_tensor("v", TensorProto.FLOAT, [1], [fill])
    if dynamo:
        nodes += [helper.make_node("Expand", ["neg_zero_f" if np.signbit(fill) else "zero_f",
                                              p + "shape"], [p + "full"]),
                  helper.make_node("Slice", [p + "full", "zero", "dirs", "zero"], [name])]
    else:
        nodes.append(helper.make_node("ConstantOfShape", [p + "shape"], [name], value=value))
    return nodes


def _model(op="GRU", directions=1, states=None, dynamo=False):
    """x -> op with initial states (``states``: their builders' keyword arguments) -> Y, Y_h."""
    states = states if states is not None else [{}]
    rng = np.random.default_rng(0)
    gates = GATES[op] * HIDDEN
    nodes = []
    names = []
    for i, kwargs in enumerate(states):
        names.append(f"h{i}")
        nodes += _zeros(f"h{i}", directions=directions, dynamo=dynamo, **kwargs)
    attrs = {"hidden_size": HIDDEN,
             "direction": "bidirectional" if directions == 2 else "forward"}
    nodes.append(helper.make_node(op, ["x", "W", "R", "B", "", *names], ["y", "y_h"], **attrs))
    inits = [tensor("W", rng.standard_normal((directions, gates, FEATURES)).astype(np.float32)),
             tensor("R", rng.standard_normal((directions, gates, HIDDEN)).astype(np.float32)),
             tensor("B", rng.standard_normal((directions, 2 * gates)).astype(np.float32)),
             tensor("dirs", np.array([directions])), tensor("hid", np.array([HIDDEN])),
             tensor("ax0", np.array(0)), tensor("ax1", np.array(1)),
             tensor("zero", np.array([0])), tensor("zero_f", np.float32(0)),
             tensor("neg_zero_f", np.float32(-0.0))]
    inputs = [vinfo("x", shape=["S", "N", FEATURES]), vinfo("w", shape=["M", "S", FEATURES])]
    outputs = [vinfo("y", shape=[None] * 4), vinfo("y_h", shape=[None] * 3)]
    return make_model(nodes, inputs, outputs, inits, opset=17)


def _feeds():
    for n, s in ((1, 5), (3, 2)):
        rng = np.random.default_rng(n)
        yield {"x": rng.standard_normal((s, n, FEATURES)).astype(np.float32),
               "w": np.ones((n, s, FEATURES), np.float32)}


def _ops(proto):
    return sorted(n.op_type for n in proto.graph.node)


@pytest.mark.parametrize(("op", "directions", "count", "dynamo"), [
    ("GRU", 1, 1, False), ("GRU", 2, 1, True), ("LSTM", 1, 2, False), ("LSTM", 2, 2, True)])
def test_a_zero_initial_state_goes(tmp_path, op, directions, count, dynamo):
    proto = _model(op, directions, [{}] * count, dynamo)
    folded, report, out = fold_proto(proto, tmp_path)
    assert _ops(folded) == [op]
    assert report.pattern_hits["drop_zero_initial_state"] == 1
    for feeds in _feeds():
        assert_same_bits(proto, out, feeds)


@pytest.mark.parametrize(("op", "state", "why"), [
    ("GRU", {"fill": -0.0}, None),  # -0.0 is not the state the op starts from
    ("GRU", {"fill": -0.0, "dynamo": True}, None),
    ("GRU", {"batch_of": "w", "axis": 0},  # w's M is not provably x's batch
     "a zero initial state of a shape not provably the op's"),
    ("RNN", {}, None)])  # its kernel adds h * R only for a given state
def test_an_initial_state_stays(tmp_path, op, state, why):
    dynamo = state.pop("dynamo", False)
    proto = _model(op, states=[state], dynamo=dynamo)
    folded, report, out = fold_proto(proto, tmp_path)
    assert op in _ops(folded) and len(folded.graph.node) > 1
    assert "drop_zero_initial_state" not in report.pattern_hits
    if why is not None:
        assert report.patterns_rejected == {f"drop_zero_initial_state: {why}": 1}
    for feeds in _feeds():
        assert_same_bits(proto, out, feeds)
