"""An op of the default domain that onnx does not know (a TensorRT-style plugin) is kept as it
is, with a warning, and the rest of the model folds; a known op used at an opset it does not
exist in is still an invalid model."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

import onnxfold
from onnxfold import optimize
from onnxfold.errors import InputError
from tests.support.cli import run_cli
from tests.support.models import make_model, tensor, vinfo


def _model(op="MyPlugin", opset=17):
    nodes = [helper.make_node("Neg", ["W"], ["nw"]),
             helper.make_node(op, ["x", "nw"], ["p"]),
             helper.make_node("Relu", ["p"], ["y"])]
    return make_model(nodes, [vinfo("x", shape=[4, 4])], [vinfo("y", shape=[4, 4])],
                      [tensor("W", np.ones((4, 4), np.float32))], opset=opset)


def test_a_plugin_op_passes_through_with_a_warning(tmp_path):
    src, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(_model(), src)
    proc = run_cli("optimize", src, "-o", out, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "warning      MyPlugin is not an ONNX op" in proc.stdout + proc.stderr
    assert [n.op_type for n in onnx.load(out).graph.node] == ["MyPlugin", "Relu"]


def test_the_api_takes_a_plugin_model_too():
    result = onnxfold.optimize(_model())
    assert result.report.warnings and "MyPlugin" in result.report.warnings[0]
    assert [n.op_type for n in result.to_proto().graph.node] == ["MyPlugin", "Relu"]


def test_a_known_op_at_an_opset_without_it_is_still_invalid():
    with pytest.raises(InputError, match="No Op registered for Gelu"):
        onnxfold.optimize(_model("Gelu", opset=17))  # Gelu exists from opset 20 on


def test_two_calls_of_a_plugin_op_are_not_merged():
    nodes = [helper.make_node("MyRandomPlugin", ["x"], ["p1"]),
             helper.make_node("MyRandomPlugin", ["x"], ["p2"]),
             helper.make_node("Sub", ["p1", "p2"], ["y"])]
    model = make_model(nodes, [vinfo("x", shape=[4])], [vinfo("y", shape=[4])])
    folded = optimize(model).to_proto()
    assert [n.op_type for n in folded.graph.node].count("MyRandomPlugin") == 2
