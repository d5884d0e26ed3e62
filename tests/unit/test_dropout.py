"""Dropout in inference mode folds (constant data) or leaves the graph (runtime data); only
training mode, which draws a mask, stays."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxfold
from onnxfold.pipeline.options import FoldOptions

T = TensorProto
X = np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5


def _model(inputs: list[str], outputs: list[onnx.ValueInfoProto], initializers=(),
           graph_inputs=(), opset: int = 17, **attrs) -> onnx.ModelProto:
    node = helper.make_node("Dropout", inputs, [o.name for o in outputs], **attrs)
    graph = helper.make_graph([node], "g", list(graph_inputs), outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _fold(proto: onnx.ModelProto) -> onnx.ModelProto:
    return onnxfold.optimize(proto, FoldOptions(strict=True)).to_proto()


def _run(proto: onnx.ModelProto, feeds=None) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(proto.SerializeToString(), options,
                                providers=["CPUExecutionProvider"]).run(None, feeds or {})


OUT = helper.make_tensor_value_info("y", T.FLOAT, [3, 4])
MASK = helper.make_tensor_value_info("mask", T.BOOL, [3, 4])


@pytest.mark.parametrize("training", [None, False])
def test_inference_dropout_of_a_constant_folds_with_an_all_true_mask(training):
    inits = [numpy_helper.from_array(X, "x"), numpy_helper.from_array(np.float32(0.3), "r")]
    inputs = ["x", "r"]
    if training is not None:
        inits.append(numpy_helper.from_array(np.array(training), "t"))
        inputs.append("t")
    proto = _model(inputs, [OUT, MASK], inits)
    folded = _fold(proto)
    assert not folded.graph.node
    y, mask = _run(folded)
    np.testing.assert_array_equal(y, X)
    assert mask.dtype == bool and mask.all()


@pytest.mark.parametrize("opset", [7, 10])
def test_dropout_of_opsets_without_training_mode_folds(opset):
    mask_type = T.FLOAT if opset < 10 else T.BOOL
    proto = _model(["x"], [OUT, helper.make_tensor_value_info("mask", mask_type, [3, 4])],
                   [numpy_helper.from_array(X, "x")], opset=opset)
    folded = _fold(proto)
    assert not folded.graph.node
    for got, want in zip(_run(folded), _run(proto)):
        assert got.dtype == want.dtype  # onnxruntime's mask is all false before opset 12
        np.testing.assert_array_equal(got, want)


def test_training_dropout_of_a_constant_stays():
    inits = [numpy_helper.from_array(X, "x"), numpy_helper.from_array(np.float32(0.5), "r"),
             numpy_helper.from_array(np.array(True), "t")]
    result = onnxfold.optimize(_model(["x", "r", "t"], [OUT], inits), FoldOptions(strict=True))
    assert [n.op_type for n in result.to_proto().graph.node] == ["Dropout"]
    assert result.stats.via_fallback == 0  # onnxruntime would have drawn a mask once


def test_training_dropout_with_ratio_zero_drops_nothing_and_folds():
    inits = [numpy_helper.from_array(X, "x"), numpy_helper.from_array(np.float32(0.0), "r"),
             numpy_helper.from_array(np.array(True), "t")]
    folded = _fold(_model(["x", "r", "t"], [OUT, MASK], inits))
    assert not folded.graph.node
    y, mask = _run(folded)
    np.testing.assert_array_equal(y, X)
    assert mask.all()


def test_inference_dropout_of_runtime_data_is_removed():
    x_in = helper.make_tensor_value_info("x", T.FLOAT, [3, 4])
    relu = helper.make_node("Relu", ["d"], ["y"])
    node = helper.make_node("Dropout", ["x", "r"], ["d"])
    graph = helper.make_graph([node, relu], "g", [x_in], [OUT],
                              [numpy_helper.from_array(np.float32(0.5), "r")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    folded = _fold(proto)
    assert [n.op_type for n in folded.graph.node] == ["Relu"]
    np.testing.assert_array_equal(_run(folded, {"x": X})[0], _run(proto, {"x": X})[0])


@pytest.mark.parametrize("case", ["mask read", "training mode an input"])
def test_dropout_of_runtime_data_stays_when_it_may_draw_or_its_mask_is_read(case):
    x_in = helper.make_tensor_value_info("x", T.FLOAT, [3, 4])
    if case == "mask read":
        proto = _model(["x"], [OUT, MASK], graph_inputs=[x_in])
    else:
        proto = _model(["x", "", "t"], [OUT], graph_inputs=[
            x_in, helper.make_tensor_value_info("t", T.BOOL, [])])
    assert [n.op_type for n in _fold(proto).graph.node] == ["Dropout"]
