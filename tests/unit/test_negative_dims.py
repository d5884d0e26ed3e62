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


def test_a_minus_one_dim_that_inference_carries_is_no_size_for_the_shape_values():
    """Paddle's ``x: [-1, 3, ?, ?]``: onnx's inference carries the -1 through a pooling to
    ``[-1, 8, 1, 1]``, and the symbolic shape values read it as an int: ``Shape`` of it was
    folded to ``[-1, 8, 1, 1]``, its batch taken as the target of a Reshape (which happened to
    work: -1 infers it; the value did not: the check's fold verification found it on
    rapidocr's classifier). The batch is read at run time."""
    rng = np.random.default_rng(0)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, "h", "w"])
    ints = [helper.make_tensor(n, TensorProto.INT64, [1], [v]) for n, v in
            (("zero", 0), ("one", 1), ("eight", 8))]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"]),
         helper.make_node("GlobalAveragePool", ["c"], ["p"]),
         helper.make_node("Shape", ["p"], ["s"]),
         helper.make_node("Slice", ["s", "zero", "one"], ["batch"]),
         helper.make_node("Concat", ["batch", "eight"], ["target"], axis=0),
         helper.make_node("Reshape", ["p", "target"], ["r"]),
         helper.make_node("Identity", ["batch"], ["b"])],
        "g", [x], [helper.make_tensor_value_info("r", TensorProto.FLOAT, ["n", 8]),
                   helper.make_tensor_value_info("b", TensorProto.INT64, [1])],
        [helper.make_tensor("w", TensorProto.FLOAT, [8, 3, 1, 1],
                            rng.standard_normal(24).astype(np.float32).tolist()), *ints])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    folded = onnxfold.optimize(proto, FoldOptions(strict=True)).to_proto()
    session = ort.InferenceSession(folded.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    reshaped, batch = session.run(None, {"x": np.zeros((2, 3, 5, 5), np.float32)})
    assert reshaped.shape == (2, 8) and batch.tolist() == [2]
