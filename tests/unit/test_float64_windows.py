"""A rewrite's windows in float64: rounding where large terms cancel is told from a wrong
replacement (EfficientNet's batch norms folded into Convs were called different: 1-3 of
14,112 elements outside the elementwise tolerance, where terms of ~800 summed to ~0.25)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from onnxfold.check.rewrites.float64_windows import in_float64, rounding_only
from onnxfold.rewrite.log import Window


def _run32(nodes: list[onnx.NodeProto], feeds: dict[str, np.ndarray]) -> np.ndarray:
    graph = helper.make_graph(nodes, "w", [helper.make_tensor_value_info(
        n, onnx.TensorProto.FLOAT, list(a.shape)) for n, a in feeds.items()],
        [onnx.ValueInfoProto(name=nodes[-1].output[0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def _cancelling_conv():
    """Conv then a per-channel affine (a batch norm) with large terms that cancel: the
    replaced window, its float32 leaves, and a fused weight and bias made from them."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((1, 16, 8, 8)) * 30).astype(np.float32)
    w = rng.standard_normal((4, 16, 3, 3)).astype(np.float32)
    scale = rng.uniform(5, 30, (1, 4, 1, 1)).astype(np.float32)
    shift = rng.uniform(-800, 800, (1, 4, 1, 1)).astype(np.float32)
    before = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
              helper.make_node("Mul", ["c", "s"], ["m"]),
              helper.make_node("Add", ["m", "t"], ["y"])]
    window = Window(before, ["y"], {"x": "x"}, {"w": w, "s": scale, "t": shift})
    fused_w = (w * scale.reshape(4, 1, 1, 1)).astype(np.float32)
    return window, {"x": x}, {"x": x, "w": w, "s": scale, "t": shift}, fused_w, shift


def _fused(x, weight, bias):
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "t"], ["y"])]
    return _run32(nodes, {"x": x, "w": weight, "t": bias})


def test_a_correct_fusion_is_rounding_and_a_wrong_one_is_not():
    window, leaves, feeds, fused_w, shift = _cancelling_conv()
    replaced = _run32(window.nodes, feeds)
    exact = in_float64(window, leaves, {"": 17})
    assert exact is not None and exact[0].dtype == np.float64
    right = _fused(leaves["x"], fused_w, shift)
    assert rounding_only(replaced, right, exact[0])
    # a factor 1e-4 off in the fused weight: within an rtol of 1e-4 of most elements, but
    # far beyond the original's own rounding
    wrong = _fused(leaves["x"], (fused_w * np.float32(1 + 1e-4)).astype(np.float32), shift)
    assert not rounding_only(replaced, wrong, exact[0])
    # a bias 0.5 off is no rounding
    assert not rounding_only(replaced, right + np.float32(0.5), exact[0])


def test_a_window_that_casts_is_not_arbitrated():
    window = Window([helper.make_node("Cast", ["x"], ["y"], to=onnx.TensorProto.FLOAT)], ["y"],
                    {"x": "x"}, {})
    assert in_float64(window, {"x": np.ones(3, np.float32)}, {"": 17}) is None


def test_an_infinity_of_the_other_sign_is_no_rounding():
    """Where the float64 value is +inf, a replacement of -inf (1 / -0.0 for 1 / +0.0) or a
    finite one differs; the same infinity, or NaN for NaN, is no difference."""
    truth = np.array([np.inf, 1.0, np.nan], np.float64)
    replaced = np.array([np.inf, 1.0, np.nan], np.float32)
    assert rounding_only(replaced, replaced.copy(), truth)
    assert not rounding_only(replaced, np.array([-np.inf, 1.0, np.nan], np.float32), truth)
    assert not rounding_only(replaced, np.array([3.0e38, 1.0, np.nan], np.float32), truth)
    assert not rounding_only(replaced, np.array([np.inf, 1.0, 0.0], np.float32), truth)
    everywhere = np.array([np.inf, -np.inf])
    assert not rounding_only(everywhere.astype(np.float32),
                             np.array([-np.inf, -np.inf], np.float32), everywhere)
