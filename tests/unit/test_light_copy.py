"""``onnxfold.io.light_copy``: the checker's and shape inference's copy of a model keeps every
field except the text of its strings (element counts, types and dims stay), so both see the
same model; copied carefully (node by node) it equals the whole copy but for that text."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxfold.io.light_copy import light_copy


def _model() -> onnx.ModelProto:
    body = helper.make_graph(
        [helper.make_node("Constant", [], ["c"], value_strings=["inner", "text"]),
         helper.make_node("Identity", ["c"], ["o"])], "body", [],
        [helper.make_tensor_value_info("o", TensorProto.STRING, [2])])
    nodes = [helper.make_node("Equal", ["s", "q"], ["e"], doc_string="kept"),
             helper.make_node("Constant", [], ["k"], value_string="a long text"),
             helper.make_node("If", ["cond"], ["r"], then_branch=body, else_branch=body),
             helper.make_node("Cast", ["w"], ["wf"], to=TensorProto.DOUBLE),
             helper.make_node("Pad", ["wf", "p"], ["y"], mode="reflect")]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("q", TensorProto.STRING, [3]),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info(n, t, shape) for n, t, shape in (
            ("e", TensorProto.BOOL, [3]), ("k", TensorProto.STRING, []),
            ("r", TensorProto.STRING, [2]), ("y", TensorProto.DOUBLE, [4, 4]))],
        [helper.make_tensor("s", TensorProto.STRING, [3], [b"x", b"yy", b"zzz"]),
         numpy_helper.from_array(np.ones((2, 2), np.float32), "w"),
         numpy_helper.from_array(np.array([1, 1, 1, 1], np.int64), "p")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.doc_string = "model doc"
    return model


def _without_text(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    s = copy.graph.initializer[0]
    s.ClearField("string_data")
    s.string_data.extend([b""] * 3)
    copy.graph.node[1].attribute[0].s = b""
    for branch in copy.graph.node[2].attribute:
        strings = branch.g.node[0].attribute[0].strings
        del strings[:]
        strings.extend([b"", b""])
    return copy


def test_a_careful_copy_differs_only_in_the_text_of_strings():
    model = _model()
    light = light_copy(model)  # size unknown: copied node by node
    assert light == _without_text(model)
    assert model.graph.initializer[0].string_data[2] == b"zzz"  # the original is untouched


def test_the_checker_and_shape_inference_see_the_same_model():
    model, light = _model(), light_copy(_model())
    onnx.checker.check_model(light)
    full = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    lighter = onnx.shape_inference.infer_shapes(light, strict_mode=True)
    assert list(full.graph.value_info) == list(lighter.graph.value_info)
    assert list(full.graph.output) == list(lighter.graph.output)


def test_a_small_graph_is_copied_whole():
    model = _model()
    assert light_copy(model, graph_bytes=model.ByteSize()) == model
