"""A model another tool rewrote, then folded by onnxfold, compared with the export both came from
(export -> onnxruntime's transformer optimizer -> onnxfold, then ``compare EXPORT FINAL``): a
Reshape target the other tool wrote with 0/-1 codes under the original's name is that tool's,
not onnxfold's fold, and says so ("not verifiable", the outputs compared); the same tensor
recorded as onnxfold's fold is judged against the original and differs."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tests.support.cli import run_cli
from tests.support.models import make_model, tensor, vinfo


def _export(path):
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=0, end=1),
             helper.make_node("Concat", ["s", "tail"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["r"]),
             helper.make_node("Add", ["half", "quarter"], ["scale"]),
             helper.make_node("Mul", ["r", "scale"], ["m"]),
             helper.make_node("Relu", ["m"], ["y"])]
    onnx.save(make_model(nodes, [vinfo("x", shape=["N", 4])], [vinfo("y", shape=["N", 2, 2])],
                         [tensor("tail", np.array([2, 2], np.int64)),
                          tensor("half", np.full((2,), 0.5, np.float32)),
                          tensor("quarter", np.full((2,), 0.25, np.float32))], opset=17),
              str(path))


def _another_tools(path):
    """The export as a tool that folds shapes into 0/-1 codes writes it, with a bias of two
    constants left for onnxfold to fold (so its output carries onnxfold's record)."""
    nodes = [helper.make_node("Reshape", ["x", "target"], ["r"]),
             helper.make_node("Add", ["half", "quarter"], ["scale"]),
             helper.make_node("Mul", ["r", "scale"], ["m"]),
             helper.make_node("Relu", ["m"], ["y"])]
    onnx.save(make_model(nodes, [vinfo("x", shape=["N", 4])], [vinfo("y", shape=["N", 2, 2])],
                         [tensor("target", np.array([0, 2, 2], np.int64)),
                          tensor("half", np.full((2,), 0.5, np.float32)),
                          tensor("quarter", np.full((2,), 0.25, np.float32))], opset=17),
              str(path))


def test_a_reshape_target_another_tool_wrote_is_that_tools(tmp_path):
    export, tool, final = tmp_path / "e.onnx", tmp_path / "t.onnx", tmp_path / "f.onnx"
    _export(export)
    _another_tools(tool)
    assert run_cli("optimize", tool, "-o", final, "-q").returncode == 0
    done = run_cli("compare", export, final, "-n", "3")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not verifiable" in done.stdout and "another tool" in done.stdout
    assert "DIFFERS" not in done.stdout

    forged = onnx.load(str(final))  # the same tensor, recorded as onnxfold's fold
    (target,) = [t for t in forged.graph.initializer if t.name == "target"]
    entry = target.metadata_props.add()
    entry.key, entry.value = "onnxfold.folded_from", "Concat"
    onnx.save(forged, str(final))
    done = run_cli("compare", export, final, "-n", "3")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "DIFFERS target" in done.stdout
    assert numpy_helper.to_array(target).tolist() == [0, 2, 2]
