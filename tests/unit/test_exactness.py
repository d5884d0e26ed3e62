"""Bitwise where a step can flip: a folded value that reaches a discontinuous op (a
QuantizeLinear, a Cast to an integer type, a comparison, an ArgMax) is the one onnxruntime
computes, bit for bit; elsewhere native folds stay native."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxfold
from onnxfold.declare.catalogue import load_catalogue
from onnxfold.pipeline.options import FoldOptions

T = TensorProto


def _run(proto: onnx.ModelProto, feeds: dict | None = None) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(proto.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds or {})


def _matmul_then(tail: list[onnx.NodeProto], out: onnx.ValueInfoProto, extra=(),
                 seed: int = 0) -> onnx.ModelProto:
    """A constant MatMul [128,768]x[768,768] (an activation times a weight) feeding ``tail``."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((128, 768)).astype(np.float32)
    b = (rng.standard_normal((768, 768)) * 0.05).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["m"]), *tail], "g", [], [out],
        [numpy_helper.from_array(a, "a"), numpy_helper.from_array(b, "b"), *extra])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _fold(proto: onnx.ModelProto, **options) -> onnxfold.OptimizeResult:
    return onnxfold.optimize(proto, FoldOptions(strict=True, **options))


def _only_initializer(proto: onnx.ModelProto) -> np.ndarray:
    assert not proto.graph.node, [n.op_type for n in proto.graph.node]
    (tensor,) = proto.graph.initializer
    return numpy_helper.to_array(tensor)


@pytest.mark.parametrize("seed", [0, 1])
def test_matmul_quantized_is_bitwise_onnxruntime(seed):
    scale = numpy_helper.from_array(np.array(0.01, np.float32), "s")
    zero = numpy_helper.from_array(np.array(128, np.uint8), "z")
    proto = _matmul_then([helper.make_node("QuantizeLinear", ["m", "s", "z"], ["q"])],
                         helper.make_tensor_value_info("q", T.UINT8, [128, 768]),
                         (scale, zero), seed)
    folded = _fold(proto).to_proto()
    (expected,) = _run(proto)
    got = _only_initializer(folded)
    assert got.dtype == np.uint8 and int((got != expected).sum()) == 0


def test_matmul_cast_to_integer_is_bitwise_onnxruntime():
    proto = _matmul_then([helper.make_node("Mul", ["m", "k"], ["big"]),
                          helper.make_node("Cast", ["big"], ["i"], to=T.INT32)],
                         helper.make_tensor_value_info("i", T.INT32, [128, 768]),
                         (numpy_helper.from_array(np.array(1e5, np.float32), "k"),))
    (expected,) = _run(proto)
    np.testing.assert_array_equal(_only_initializer(_fold(proto).to_proto()), expected)


def test_matmul_rounded_after_a_runtime_op_is_bitwise_onnxruntime():
    """The runtime Add reads the folded initializer: it too must be onnxruntime's."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((64, 512)).astype(np.float32)
    b = (rng.standard_normal((512, 512)) * 0.05).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["m"]),
         helper.make_node("Add", ["m", "x"], ["s"]),
         helper.make_node("Round", ["s"], ["r"])],
        "g", [helper.make_tensor_value_info("x", T.FLOAT, [64, 512])],
        [helper.make_tensor_value_info("r", T.FLOAT, [64, 512])],
        [numpy_helper.from_array(a, "a"), numpy_helper.from_array(b, "b")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    result = _fold(proto)
    folded = result.to_proto()
    assert [n.op_type for n in folded.graph.node] == ["Add", "Round"]
    assert result.stats.via_fallback == 1
    (m_original,) = _run(_matmul_only(a, b))
    (m_folded,) = [numpy_helper.to_array(t) for t in folded.graph.initializer]
    assert np.array_equal(m_original.view(np.uint32), m_folded.view(np.uint32))


def _matmul_only(a: np.ndarray, b: np.ndarray) -> onnx.ModelProto:
    """MatMul(a, b) with both constant, as the original model's session runs it."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["m"])], "g", [],
        [helper.make_tensor_value_info("m", T.FLOAT, None)],
        [numpy_helper.from_array(a, "a"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_scores_a_suppression_compares_are_bitwise_onnxruntime():
    """NonMaxSuppression compares scores with a threshold and with each other: a folded score
    one ulp off onnxruntime's can keep another box, so the MatMul making them folds on
    onnxruntime's kernel."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((1, 64, 32)).astype(np.float32)
    b = rng.standard_normal((1, 32, 64)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["m"]),
         helper.make_node("Slice", ["m", "starts", "ends", "axes"], ["scores"]),
         helper.make_node("NonMaxSuppression", ["boxes", "scores", "keep", "iou", "threshold"],
                          ["selected"])],
        "g", [helper.make_tensor_value_info("boxes", T.FLOAT, [1, 64, 4])],
        [helper.make_tensor_value_info("selected", T.INT64, ["n", 3])],
        [numpy_helper.from_array(a, "a"), numpy_helper.from_array(b, "b"),
         numpy_helper.from_array(np.array([1], np.int64), "starts"),
         numpy_helper.from_array(np.array([2], np.int64), "ends"),
         numpy_helper.from_array(np.array([1], np.int64), "axes"),
         numpy_helper.from_array(np.array([8], np.int64), "keep"),
         numpy_helper.from_array(np.array([0.5], np.float32), "iou"),
         numpy_helper.from_array(np.array([0.0], np.float32), "threshold")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    result = _fold(proto)
    assert [n.op_type for n in result.to_proto().graph.node] == ["NonMaxSuppression"]
    assert result.stats.via_fallback == 1  # the MatMul; the Slice moves bits and stays native
    boxes = rng.random((1, 64, 4)).astype(np.float32)
    (expected,) = _run(proto, {"boxes": boxes})
    (got,) = _run(result.to_proto(), {"boxes": boxes})
    np.testing.assert_array_equal(got, expected)


def test_continuous_folds_read_at_run_time_stay_native():
    """A MatMul whose value only flows into continuous ops run on other inputs folds natively."""
    rng = np.random.default_rng(4)
    a = rng.standard_normal((16, 32)).astype(np.float32)
    b = rng.standard_normal((32, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["m"]),
         helper.make_node("Add", ["m", "x"], ["s"]), helper.make_node("Relu", ["s"], ["r"])],
        "g", [helper.make_tensor_value_info("x", T.FLOAT, [16, 8])],
        [helper.make_tensor_value_info("r", T.FLOAT, [16, 8])],
        [numpy_helper.from_array(a, "a"), numpy_helper.from_array(b, "b")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    stats = _fold(proto).stats
    assert stats.native == 1 and stats.via_fallback == 0


def test_a_folded_graph_output_is_bitwise_onnxruntime():
    """The model returns the folded initializer itself: MatMul -> Relu -> output."""
    proto = _matmul_then([helper.make_node("Relu", ["m"], ["r"])],
                         helper.make_tensor_value_info("r", T.FLOAT, [128, 768]))
    (expected,) = _run(proto)
    got = _only_initializer(_fold(proto).to_proto())
    assert np.array_equal(got.view(np.uint32), expected.view(np.uint32))


def test_batch_norm_of_a_constant_is_not_fused_but_folded_as_onnxruntime_computes_it():
    """Fusing BatchNormalization into a Conv rounds its weights once more: pointless (and
    off by ulps) when the Conv's input is a constant too."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 4, 8, 8)).astype(np.float32)
    w = rng.standard_normal((6, 4, 3, 3)).astype(np.float32)
    bn = [numpy_helper.from_array(rng.uniform(0.5, 2, 6).astype(np.float32), n)
          for n in ("scale", "bias", "mean", "var")]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"]),
         helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["y"])],
        "g", [], [helper.make_tensor_value_info("y", T.FLOAT, [1, 6, 6, 6])],
        [numpy_helper.from_array(x, "x"), numpy_helper.from_array(w, "w"), *bn])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    (expected,) = _run(proto)
    got = _only_initializer(_fold(proto).to_proto())
    assert np.array_equal(got.view(np.uint32), expected.view(np.uint32))


def test_without_fallback_an_inexact_fold_before_a_step_is_declined():
    scale = numpy_helper.from_array(np.array(0.01, np.float32), "s")
    proto = _matmul_then([helper.make_node("QuantizeLinear", ["m", "s"], ["q"])],
                         helper.make_tensor_value_info("q", T.UINT8, [128, 768]), (scale,))
    folded = _fold(proto, fallback=False).to_proto()
    assert [n.op_type for n in folded.graph.node] == ["MatMul", "QuantizeLinear"]


def test_discontinuous_and_bitwise_ops_are_declared_as_facts():
    catalogue = load_catalogue()
    for op in ("QuantizeLinear", "DynamicQuantizeLinear", "Round", "Floor", "Ceil", "Less",
               "Greater", "Equal", "ArgMax", "ArgMin", "TopK", "NonZero", "Sign", "Mod",
               "NonMaxSuppression", "GridSample", "RoiAlign", "MaxRoiPool"):
        assert ("", op) in catalogue.discontinuous, op
    assert catalogue.discontinuous[("", "Cast")].only_to_integers
    assert {("", "Add"), ("", "Mul"), ("", "Neg"), ("", "Transpose")} <= catalogue.bitwise
    for op in ("MatMul", "Gemm", "ReduceSum", "ReduceMean", "Exp", "Log", "Pow", "Sin"):
        assert ("", op) not in catalogue.bitwise, op
