"""A dim written as -1 (Paddle exports' "any size") is not a size: Shape of such a value is not
folded to -1, nor to what ONNX's inference computes with it as a number (``Pad(x, 1 each side)``
of a ``-1`` axis made it 1, a stride-2 Conv made it 0, and the fold folded ``Shape`` of them to
``[1, 3, 1, 1]`` and ``[1, 8, 0, 0]``; onnxruntime: ``[1, 3, 226, 226]`` at 224): inference now
sees such a dim as unknown, and the signature counts the Conv at the first set's size."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxfold
from onnxfold.app.signature import signature
from onnxfold.check.running.options import CompareOptions
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


def _model(batch: int) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, -1, -1])
    x.type.tensor_type.shape.dim[2].dim_value = -1  # (helper writes -1 as a dim_value)
    outputs = [helper.make_tensor_value_info("s", TensorProto.INT64, [4]),
               helper.make_tensor_value_info("sp", TensorProto.INT64, [4]),
               helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 4)]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
         helper.make_node("Shape", ["c"], ["s"]),
         helper.make_node("Pad", ["x", "p"], ["pd"]),
         helper.make_node("Shape", ["pd"], ["sp"]),
         helper.make_node("Relu", ["c"], ["y"])], "g", [x], outputs,
        [numpy_helper.from_array(np.ones((8, 3, 3, 3), np.float32), "w"),
         numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "p")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("batch", [1, -1])
def test_a_minus_one_dim_folds_nothing_it_does_not_know(batch, tmp_path):
    source = tmp_path / "m.onnx"
    onnx.save(_model(batch), source)
    result = onnxfold.optimize(str(source))
    folded = result.to_proto()
    sessions = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
                for m in (_model(batch), folded)]
    for size in (4, 9, 224):
        feeds = {"x": np.random.default_rng(size).random((1, 3, size, size), np.float32)}
        want, got = (s.run(None, feeds) for s in sessions)
        for a, b in zip(want, got):
            np.testing.assert_array_equal(a, b)
    assert result.signature is not None
    compute = signature(result.signature, 1, None, CompareOptions())["compute"]
    conv = 8 * 112 * 112 * 27  # output elements x (C x kernel), at 224
    assert compute["before"]["ops"]["Conv"]["macs"] == conv, compute
    assert compute["after"]["ops"]["Conv"]["macs"] == conv, compute
