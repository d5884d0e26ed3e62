"""Shapes inferred again after a fold (``RefineShapes``): a constant the fold (or the round's
rewrite) created makes a shape known that a Shape node waits for, and the next round folds it.
Without subgraphs only what the waiting Shape/Size nodes depend on is inferred again
(``infer_shapes_upstream``), which must give those values what inferring the whole model gives
them."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper as nh

from onnxfold.analysis.shapes import infer_shapes, infer_shapes_upstream
from tests.support.running import assert_same_bits, fold_proto


def _padded(pads_from_max: bool = True, dynamic_branch: bool = False) -> onnx.ModelProto:
    """``y = Pad(x, pads) * sum(Shape(Pad(x, pads)))``; ``pads`` a ``Max`` of two constants
    (onnx's data propagation does not compute Max: the Pad's shape is known only once the fold
    made ``pads`` a constant) or a constant; ``dynamic_branch`` adds ``z = Shape(Relu(w))`` of
    an input of dynamic length, a Shape that waits for ever, upstream of no new constant."""
    nodes = [h.make_node("Pad", ["x", "pads"], ["r"]),
             h.make_node("Shape", ["r"], ["s"]),
             h.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
             h.make_node("ReduceSum", ["sf"], ["total"], keepdims=0),
             h.make_node("Mul", ["r", "total"], ["y"])]
    weights = [nh.from_array(np.array([1, 1, 1, 1], np.int64), "a")]
    if pads_from_max:
        nodes.insert(0, h.make_node("Max", ["a", "b"], ["pads"]))
        weights.append(nh.from_array(np.zeros(4, np.int64), "b"))
    else:
        weights[0].name = "pads"
    inputs = [h.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])]
    outputs = [h.make_tensor_value_info("y", TensorProto.FLOAT, [4, 5])]
    if dynamic_branch:
        nodes += [h.make_node("Relu", ["w"], ["wr"]), h.make_node("Shape", ["wr"], ["z"])]
        inputs.append(h.make_tensor_value_info("w", TensorProto.FLOAT, ["n"]))
        outputs.append(h.make_tensor_value_info("z", TensorProto.INT64, [1]))
    graph = h.make_graph(nodes, "g", inputs, outputs, weights)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def _feeds(dynamic_branch: bool) -> dict[str, np.ndarray]:
    feeds = {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}
    if dynamic_branch:
        feeds["w"] = np.ones(5, np.float32)
    return feeds


def test_a_shape_a_folded_constant_makes_known_folds_in_the_next_round(tmp_path):
    for dynamic_branch in (False, True):
        original = _padded(dynamic_branch=dynamic_branch)
        folded, _, _ = fold_proto(original, tmp_path)
        ops = [n.op_type for n in folded.graph.node if n.op_type != "Constant"]
        # the Shape of the Pad, its Cast and ReduceSum fold; the Shape of the dynamic w stays
        assert ops == ["Pad", "Mul"] + (["Relu", "Shape"] if dynamic_branch else [])
        assert_same_bits(original, folded, _feeds(dynamic_branch))


def test_inferring_upstream_gives_what_inferring_the_whole_model_gives():
    whole = ir.from_proto(_padded(pads_from_max=False, dynamic_branch=True))
    part = ir.from_proto(_padded(pads_from_max=False, dynamic_branch=True))
    assert infer_shapes(whole) > 0
    values = {v.name: v for node in part.graph for v in node.outputs}
    pads = part.graph.initializers["pads"]
    assert infer_shapes_upstream(part, [values["r"]], new={pads}) > 0
    assert values["r"].shape == ir.Shape([4, 5])
    expected = {v.name: v for node in whole.graph for v in node.outputs}
    assert expected["r"].shape == values["r"].shape and expected["r"].dtype == values["r"].dtype
    # what ``r`` does not depend on is left as it was
    assert values["wr"].shape is None
    assert expected["wr"].shape == ir.Shape(["n"])


def test_nothing_is_inferred_again_without_a_new_constant_upstream():
    model = ir.from_proto(_padded(pads_from_max=False))
    r = next(v for node in model.graph for v in node.outputs if v.name == "r")
    unrelated = ir.Value(name="elsewhere")
    assert infer_shapes_upstream(model, [r], new={unrelated}) == 0
    assert r.shape is None


def test_a_shape_a_rewritten_reshape_target_makes_known_folds_in_the_next_round(tmp_path):
    # ddddocr's LSTM input: Reshape(x, [N, 1, C*W]) of dims read from x's Shape; at opset 12
    # onnx's data propagation does not multiply, so the Reshape's shape is unknown until the
    # rewrite writes its target [0, 1, 512]: a constant inference must see, although the fold
    # made none, so that Shape(r)[2] folds
    nodes = [h.make_node("Shape", ["x"], ["s"]),
             h.make_node("Gather", ["s", "i0"], ["n"]), h.make_node("Gather", ["s", "i1"], ["c"]),
             h.make_node("Gather", ["s", "i2"], ["d"]), h.make_node("Gather", ["s", "i3"], ["w"]),
             h.make_node("Mul", ["d", "w"], ["dw"]),
             h.make_node("Unsqueeze", ["n"], ["n1"], axes=[0]),
             h.make_node("Unsqueeze", ["c"], ["c1"], axes=[0]),
             h.make_node("Unsqueeze", ["dw"], ["dw1"], axes=[0]),
             h.make_node("Concat", ["n1", "c1", "dw1"], ["target"], axis=0),
             h.make_node("Reshape", ["x", "target"], ["r"]),
             h.make_node("Shape", ["r"], ["rs"]),
             h.make_node("Gather", ["rs", "i2"], ["width"]),
             h.make_node("Cast", ["width"], ["wf"], to=TensorProto.FLOAT),
             h.make_node("Mul", ["r", "wf"], ["y"])]
    weights = [nh.from_array(np.array(i, np.int64), f"i{i}") for i in range(4)]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TensorProto.FLOAT,
                                                               ["N", 1, 64, 8])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1, 512])],
                         weights)
    original = h.make_model(graph, opset_imports=[h.make_opsetid("", 12)])
    folded, _, _ = fold_proto(original, tmp_path)
    assert [n.op_type for n in folded.graph.node] == ["Reshape", "Mul"]
    for n in (1, 3):
        x = np.random.default_rng(n).standard_normal((n, 1, 64, 8)).astype(np.float32)
        assert_same_bits(original, folded, {"x": x})
