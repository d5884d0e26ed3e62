"""A folded value that is no valid dimension where it is read as a shape is declined.

NaN, inf or 1e30 cast to int64 (-2**63 in numpy) and negative counts, feeding Reshape's
shape, ConstantOfShape's shape or Tile's repeats: onnxruntime refuses to load a model holding
such a constant there, so its producer stays, declined with the reason (before, the run
ended in "internal error: OutputRejected", exit 3).
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.support.cli import run_cli


def _model(path, value: float, op: str) -> str:
    nodes = [helper.make_node("Cast", ["v"], ["s"], to=TensorProto.INT64)]
    inputs = []
    if op == "Reshape":
        nodes.append(helper.make_node("Reshape", ["x", "s"], ["t"]))
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])]
    elif op == "ConstantOfShape":
        nodes.append(helper.make_node("ConstantOfShape", ["s"], ["t"]))
    else:
        nodes.append(helper.make_node("Tile", ["one", "s"], ["t"]))
    nodes.append(helper.make_node("ReduceMax", ["t"], ["y"], keepdims=0))
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(np.array([value], np.float32), "v"),
         numpy_helper.from_array(np.array([1.0], np.float32), "one")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


@pytest.mark.parametrize("op", ["Reshape", "ConstantOfShape", "Tile"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), 1e30, -5.0],
                         ids=["nan", "inf", "1e30", "negative"])
def test_an_invalid_shape_value_is_a_decline_with_its_reason(tmp_path, op, value):
    model, out, report = _model(tmp_path / "m.onnx", value, op), tmp_path / "o.onnx", \
        tmp_path / "r.json"
    result = run_cli("optimize", model, "-o", out, "--json", report, timeout=120)
    assert result.returncode == 0, result.stderr
    declined = json.loads(report.read_text())["declined_nodes"]
    cast = [d for d in declined if d["op"] == "Cast"]
    assert cast and f"{op}'s" in cast[0]["reason"], declined
    assert "onnxruntime would refuse the model" in cast[0]["reason"]
    # it loads where the original does: without onnxruntime's own constant folding (which
    # meets the same value and refuses both)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ort.InferenceSession(str(out), options, providers=["CPUExecutionProvider"])
    assert "Cast" in [n.op_type for n in onnx.load(out).graph.node]


def test_a_valid_shape_value_still_folds(tmp_path):
    from onnxfold import optimize

    result = optimize(_model(tmp_path / "m.onnx", 4.0, "Reshape"))
    assert "Cast" not in [n.op_type for n in result.model.graph]
