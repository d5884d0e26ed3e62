"""External data outside the main graph's initializers (a Constant node's tensor attribute, an
initializer of an If branch): read from the model's directory whatever the working directory,
never written over by the output, and an output that does not fold them still loads."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.support.cli import REFUSAL_TIMEOUT, assert_ok, assert_one_error_line, run_cli
from tests.support.external_weights import (
    D,
    ort_run,
    weights,
)
from tests.support.files import (
    assert_unchanged,
    snapshot,
)
from tests.support.models import make_model, tensor, vinfo


def _constant_external(model_dir, transpose=True):
    """W is a Constant node whose tensor attribute is external data in w.bin."""
    model_dir.mkdir(parents=True, exist_ok=True)
    w, _ = weights()
    (model_dir / "w.bin").write_bytes(w.tobytes())
    t = onnx.TensorProto(name="Wc", data_type=TensorProto.FLOAT, dims=[D, D],
                         data_location=TensorProto.EXTERNAL)
    t.external_data.add(key="location", value="w.bin")
    nodes = [helper.make_node("Constant", [], ["W"], value=t)]
    if transpose:
        nodes.append(helper.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0]))
    nodes.append(helper.make_node("MatMul", ["x", "Wt" if transpose else "W"], ["y"]))
    proto = make_model(nodes, [vinfo("x", shape=[1, D])], [vinfo("y", shape=[1, D])])
    path = model_dir / "m.onnx"
    onnx.save_model(proto, str(path))
    return path


def test_output_over_a_constant_attributes_data_file_is_refused(tmp_path):
    model = _constant_external(tmp_path / "model")
    before = snapshot(tmp_path)
    done = run_cli("optimize", "m.onnx", "-o", "w.bin", cwd=model.parent, timeout=REFUSAL_TIMEOUT)
    assert_one_error_line(done)
    assert_unchanged(before, snapshot(tmp_path))


def test_unfolded_constant_with_external_data_gives_a_valid_output(tmp_path):
    """MatMul(x, Constant) folds nothing: the output still named w.bin beside itself (exit 0,
    onnxruntime cannot load it)."""
    model = _constant_external(tmp_path / "model", transpose=False)
    (tmp_path / "out").mkdir()
    out = tmp_path / "out" / "o.onnx"
    done = run_cli("optimize", "m.onnx", "-o", out, cwd=model.parent, timeout=REFUSAL_TIMEOUT)
    assert_ok(done)
    x = {"x": np.ones((1, D), np.float32)}
    np.testing.assert_allclose(ort_run(out, x)[0], ort_run(model, x)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("where", ["constant", "subgraph"])
def test_external_data_outside_the_main_graph_loads_from_any_cwd(tmp_path, where):
    """The checker resolves these locations against the working directory (only main-graph
    initializers are hidden from it): valid models are refused unless run from their dir."""
    model_dir = tmp_path / "model"
    if where == "constant":
        model = _constant_external(model_dir)
    else:
        w, _ = weights()
        then = helper.make_graph(
            [helper.make_node("Transpose", ["Wa"], ["Wat"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "Wat"], ["ya"])], "then", [],
            [vinfo("ya", shape=[1, D])], [tensor("Wa", w)])
        other = helper.make_graph([helper.make_node("Identity", ["x"], ["yb"])], "else", [],
                                  [vinfo("yb", shape=[1, D])])
        proto = make_model([helper.make_node("If", ["c"], ["y"], then_branch=then,
                                             else_branch=other)],
                           [vinfo("x", shape=[1, D]), vinfo("c", TensorProto.BOOL, [])],
                           [vinfo("y", shape=[1, D])])
        model_dir.mkdir()
        model = model_dir / "m.onnx"
        onnx.save_model(proto, str(model), save_as_external_data=True, location="w.bin",
                        size_threshold=0)
    out = tmp_path / "o.onnx"
    done = run_cli("optimize", model, "-o", out, cwd=tmp_path, timeout=REFUSAL_TIMEOUT)
    assert_ok(done)
    x = {"x": np.ones((1, D), np.float32), "c": np.array(True)}
    np.testing.assert_allclose(ort_run(out, x)[0], ort_run(model, x)[0], rtol=1e-5, atol=1e-6)
