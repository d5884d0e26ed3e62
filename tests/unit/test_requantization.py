"""A requantization ``QuantizeLinear(DequantizeLinear(w))`` of a constant quantized weight (int8
to int8 with another scale and zero point, as static-QDQ exports write it) folds into one
quantized initializer: with default flags and with ``--fold-qdq``, computing what onnxruntime
computes and never making the model bigger."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxfold import FoldOptions, optimize
from tests.support.models import without_run_record

K, N = 256, 192  # 48 KiB of int8 (192 KiB as float32)


def _model(consumer: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """wq -> DequantizeLinear(s, zp) -> QuantizeLinear(s2, zp2) -> ``consumer``: a float MatMul
    behind a DequantizeLinear, or MatMulInteger reading the requantized weight itself."""
    rng = np.random.default_rng(3)
    wq = rng.integers(-128, 127, (K, N), endpoint=True).astype(np.int8)
    inits = [numpy_helper.from_array(wq, "wq"),
             numpy_helper.from_array(np.array(0.0123, np.float32), "s"),
             numpy_helper.from_array(np.array(-3, np.int8), "zp"),
             numpy_helper.from_array(np.array(0.0207, np.float32), "s2"),
             numpy_helper.from_array(np.array(2, np.int8), "zp2")]
    nodes = [helper.make_node("DequantizeLinear", ["wq", "s", "zp"], ["w"]),
             helper.make_node("QuantizeLinear", ["w", "s2", "zp2"], ["wq2"])]
    if consumer == "MatMul":
        nodes += [helper.make_node("DequantizeLinear", ["wq2", "s2", "zp2"], ["wd"]),
                  helper.make_node("MatMul", ["x", "wd"], ["y"])]
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, K])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, N])
        feeds = {"x": rng.standard_normal((2, K)).astype(np.float32)}
    else:
        nodes.append(helper.make_node("MatMulInteger", ["x", "wq2", "zx", "zp2"], ["y"]))
        inits.append(numpy_helper.from_array(np.array(-1, np.int8), "zx"))
        x = helper.make_tensor_value_info("x", TensorProto.INT8, [2, K])
        y = helper.make_tensor_value_info("y", TensorProto.INT32, [2, N])
        feeds = {"x": rng.integers(-128, 127, (2, K), endpoint=True).astype(np.int8)}
    graph = helper.make_graph(nodes, "requantized", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), feeds


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def _requantized_by_onnxruntime(model: onnx.ModelProto) -> np.ndarray:
    """onnxruntime's own QuantizeLinear(DequantizeLinear(wq)), the weight the fold must keep."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.node[2:]
    del probe.graph.input[:]
    del probe.graph.output[:]
    probe.graph.output.append(helper.make_tensor_value_info("wq2", TensorProto.INT8, [K, N]))
    return _run(probe, {})


@pytest.mark.parametrize("fold_qdq", [False, True], ids=["default", "fold-qdq"])
def test_a_requantization_read_by_an_integer_op_folds_into_one_int8_weight(fold_qdq):
    model, feeds = _model("MatMulInteger")
    folded = optimize(model, FoldOptions(fold_qdq=fold_qdq, strict=True)).to_proto()
    assert [n.op_type for n in folded.graph.node] == ["MatMulInteger"]
    (weight,) = [t for t in folded.graph.initializer if t.name == folded.graph.node[0].input[1]]
    assert weight.data_type == TensorProto.INT8
    np.testing.assert_array_equal(numpy_helper.to_array(weight),
                                  _requantized_by_onnxruntime(model))
    assert without_run_record(folded).ByteSize() <= model.ByteSize()
    np.testing.assert_array_equal(_run(folded, feeds), _run(model, feeds))


def test_a_requantization_behind_a_kept_dequantization_folds_into_one_int8_weight():
    model, feeds = _model("MatMul")
    folded = optimize(model, FoldOptions(strict=True)).to_proto()
    assert [n.op_type for n in folded.graph.node] == ["DequantizeLinear", "MatMul"]
    (weight,) = [t for t in folded.graph.initializer if t.name == folded.graph.node[0].input[0]]
    assert weight.data_type == TensorProto.INT8
    np.testing.assert_array_equal(numpy_helper.to_array(weight),
                                  _requantized_by_onnxruntime(model))
    assert without_run_record(folded).ByteSize() <= model.ByteSize()
    np.testing.assert_array_equal(_run(folded, feeds), _run(model, feeds))


def test_the_dequantization_let_through_is_returned_not_marked_on_the_node():
    """refuse_dequantization hands refuse_growth the dequantizations it let through as a value:
    nothing stays on the nodes for a later run with other options to misread."""
    import onnx_ir as ir

    from onnxfold.declare.catalogue import load_catalogue
    from onnxfold.fold.policy import refuse_dequantization

    model = ir.serde.deserialize_model(_model("MatMul")[0])
    dequantize, quantize, dequantize_again, _ = list(model.graph)
    foldable = [dequantize, quantize, dequantize_again]
    planned = set(foldable)
    catalogue = load_catalogue()
    refused, let_through = refuse_dequantization(foldable, planned, catalogue.kept_quantized,
                                                 False, catalogue.requantizing)
    assert let_through == {dequantize}  # requantized right after: folds
    assert [node for node, _ in refused] == [dequantize_again]  # read as float: stays
    assert all(not node.meta for node in foldable)
    assert refuse_dequantization(foldable, set(foldable), catalogue.kept_quantized, True,
                                 catalogue.requantizing) == ([], frozenset())
