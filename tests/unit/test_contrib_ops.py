"""onnxruntime's contrib ops (``com.microsoft``) with constant inputs fold through the
fallback; random ones never do; their output size is checked before they run, or, where
onnxruntime cannot size it, bounded while they run and checked after."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnxfold import FoldOptions, optimize
from tests.support.models import make_model, tensor, vinfo

MS = "com.microsoft"


def _model(nodes, inits, shape=(4, 8)):
    model = make_model(nodes, [vinfo("x", shape=list(shape))], [vinfo("y", shape=list(shape))],
                       inits)
    model.opset_import.append(helper.make_opsetid(MS, 1))
    return model


def _run(model):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {"x": np.linspace(-2, 2, 32, dtype=np.float32).reshape(4, 8)})[0]


def _weights():
    rng = np.random.default_rng(0)
    return [tensor("W", rng.standard_normal((4, 8)).astype(np.float32)),
            tensor("b", rng.standard_normal(8).astype(np.float32))]


def test_a_contrib_op_of_constants_folds_through_onnxruntime():
    nodes = [helper.make_node("BiasGelu", ["W", "b"], ["g"], domain=MS),
             helper.make_node("Gelu", ["g"], ["gg"], domain=MS),
             helper.make_node("Add", ["x", "gg"], ["y"])]
    original = _model(nodes, _weights())
    result = optimize(original, FoldOptions(strict=True))
    folded = result.to_proto()
    assert [n.op_type for n in folded.graph.node] == ["Add"]
    assert result.report.folded_fallback == 2
    np.testing.assert_array_equal(_run(folded), _run(original))


def test_a_random_contrib_op_never_folds():
    nodes = [helper.make_node("BiasDropout", ["W", "b"], ["d"], domain=MS, ratio=0.5),
             helper.make_node("Add", ["x", "d"], ["y"])]
    folded = optimize(_model(nodes, _weights())).to_proto()
    assert "BiasDropout" in [n.op_type for n in folded.graph.node]


def test_a_contrib_op_too_big_for_the_budget_is_declined_before_it_runs():
    nodes = [helper.make_node("BiasGelu", ["W", "b"], ["g"], domain=MS),
             helper.make_node("Add", ["x", "g"], ["y"])]
    result = optimize(_model(nodes, _weights()), FoldOptions(pool_budget=64))
    assert "BiasGelu" in [n.op_type for n in result.to_proto().graph.node]
    assert "size" in result.report.declined


def test_a_sub_byte_result_is_never_taken_from_onnxruntime():
    """onnxruntime's Python API returns 4-bit results with wrong values: the fallback declines
    them (rules/quant.py folds QuantizeLinear to int4 natively)."""
    import onnx_ir as ir

    from onnxfold.fold import fallback

    x, scale = ir.Value(name="x"), ir.Value(name="scale")
    node = ir.Node("", "QuantizeLinear", [x, scale], name="q")
    node.outputs[0].name, node.outputs[0].dtype = "q_out", ir.DataType.INT4
    feeds = {x: np.linspace(-8, 7, 8, dtype=np.float32), scale: np.float32(1.0)}
    (node_out, outcome, _), = fallback.run_batch([node], feeds.get, lambda v: True, {"": 21}, 10)
    assert node_out is node and not isinstance(outcome, dict)
    assert outcome is not None and outcome.kind.name == "UNSUPPORTED_TYPE"


def test_a_contrib_op_onnxruntime_cannot_shape_is_not_counted_as_a_scalar():
    """onnxruntime declares CDist's output with no dims: a 1.4 MB result, not 4 bytes, is
    over a 256 KiB budget once computed."""
    rng = np.random.default_rng(1)
    inits = [tensor("A", rng.standard_normal((600, 8)).astype(np.float32)),
             tensor("B", rng.standard_normal((600, 8)).astype(np.float32))]
    nodes = [helper.make_node("CDist", ["A", "B"], ["d"], domain=MS),
             helper.make_node("ReduceSum", ["d"], ["s"], keepdims=0),
             helper.make_node("Add", ["x", "s"], ["y"])]
    result = optimize(_model(nodes, inits), FoldOptions(pool_budget=256 << 10))
    assert "CDist" in [n.op_type for n in result.to_proto().graph.node]
    assert "size" in result.report.declined


def test_a_contrib_op_of_unknown_output_size_within_the_budget_folds():
    """CDist's output is unknown before it runs; a 16 MB result fits a 256 MiB budget."""
    rng = np.random.default_rng(2)
    inits = [tensor("A", rng.standard_normal((2000, 8)).astype(np.float32)),
             tensor("B", rng.standard_normal((2000, 8)).astype(np.float32))]
    nodes = [helper.make_node("CDist", ["A", "B"], ["d"], domain=MS),
             helper.make_node("ReduceMax", ["d"], ["s"], keepdims=0),
             helper.make_node("Add", ["x", "s"], ["y"])]
    original = _model(nodes, inits)
    result = optimize(original, FoldOptions(pool_budget=256 << 20, strict=True))
    folded = result.to_proto()
    assert [n.op_type for n in folded.graph.node] == ["Add"], result.report.declined_nodes
    np.testing.assert_array_equal(_run(folded), _run(original))


def _range_then_topk(n, domain):
    nodes = [helper.make_node("Range", ["s", "l", "d"], ["r"], domain=domain),
             helper.make_node("TopK", ["r", "k"], ["v", "i"]),
             helper.make_node("Identity", ["v"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        [tensor("s", np.array(0, np.float32)), tensor("l", np.array(n, np.float32)),
         tensor("d", np.array(1, np.float32)), tensor("k", np.array([1], np.int64))])
    opsets = [helper.make_opsetid("", 17)] + (
        [helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model


@pytest.mark.parametrize("domain", ["", "com.microsoft"])
def test_a_contrib_intermediate_respects_the_pool_budget(domain):
    n = 16 * 1024 * 1024  # 64 MiB of float32, the budget 4 MiB
    result = optimize(_range_then_topk(n, domain), FoldOptions(pool_budget=4 << 20))
    assert "Range" in [node.op_type for node in result.to_proto().graph.node]
