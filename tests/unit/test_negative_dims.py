"""A dim written as -1 (Paddle exports' "any size") is not a size: Shape of such a value is not
folded to -1."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

import onnxfold
from onnxfold.pipeline.options import FoldOptions


def test_shape_of_a_value_with_a_minus_one_dim_is_not_folded():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 4])
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Shape", ["r"], ["s"])],
        "g", [x], [helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
        value_info=[helper.make_tensor_value_info("r", TensorProto.FLOAT, [-1, 4])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    folded = onnxfold.optimize(proto, FoldOptions(strict=True)).to_proto()
    session = ort.InferenceSession(folded.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    (shape,) = session.run(None, {"x": np.zeros((3, 4), np.float32)})
    np.testing.assert_array_equal(shape, [3, 4])
