"""doc_strings of the model, its graph and its nodes survive reading, folding and writing
(the reader gives them to the ir.Model instead of keeping them in its protos; the writer
writes the model's last), with inline weights and with external data, sorted or not."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxfold.io import load_model, save_model


def _model(unsorted: bool) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.arange(4096, dtype=np.float32).reshape(64, 64), "w")
    nodes = [helper.make_node("Relu", ["x"], ["h"], doc_string="relu doc é"),
             helper.make_node("MatMul", ["h", "w"], ["y"], doc_string="matmul doc")]
    if unsorted:
        nodes.reverse()
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 64])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 64])], [w], doc_string="graph doc")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              doc_string="model doc ü" * 1000)
    return model


@pytest.mark.parametrize("unsorted", [False, True], ids=["sorted", "unsorted"])
@pytest.mark.parametrize("external", [False, True], ids=["inline", "external"])
def test_doc_strings_survive_a_read_and_a_write(tmp_path, unsorted, external):
    source, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save(_model(unsorted), source)
    save_model(load_model(source), out, external_data=external)
    written = onnx.load(out)
    onnx.checker.check_model(str(out))
    assert written.doc_string == "model doc ü" * 1000
    assert written.graph.doc_string == "graph doc"
    assert {n.op_type: n.doc_string for n in written.graph.node} == {
        "Relu": "relu doc é", "MatMul": "matmul doc"}
    np.testing.assert_array_equal(numpy_helper.to_array(written.graph.initializer[0],
                                                        str(tmp_path)).ravel(),
                                  np.arange(4096, dtype=np.float32))
