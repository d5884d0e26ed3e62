"""``--inputs FILE.npz`` feeds ``compare`` and ``optimize --check``: string inputs (``<U``/``S``
arrays, never pickles) and shapes the file decides, such as a Paddle model's ``[1, ?, ?]`` fed
(1, 48, 192), where each unnamed ``?`` is a dim of its own.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from tests.support.cli import run_cli


def _save(path, nodes, inputs, outputs, inits=()):
    model = helper.make_model(helper.make_graph(nodes, "t", inputs, outputs, list(inits)),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return str(path)


def _strings(path):
    """y = x with "!" appended by a StringConcat whose suffix is folded from a Constant."""
    s = TensorProto.STRING
    suffix = helper.make_tensor("suffix", s, [1], [b"!"])
    return _save(path, [helper.make_node("Constant", [], ["c"], value=suffix),
                        helper.make_node("Identity", ["c"], ["c2"]),
                        helper.make_node("StringConcat", ["x", "c2"], ["y"])],
                 [helper.make_tensor_value_info("x", s, ["n"])],
                 [helper.make_tensor_value_info("y", s, ["n"])])


def _paddle(path):
    """A Paddle-style model: every unknown dim is ``?``; y = relu(x) * 2 (the 2 from a fold)."""
    f = TensorProto.FLOAT
    return _save(path, [helper.make_node("Add", ["one", "one"], ["two"]),
                        helper.make_node("Relu", ["x"], ["r"]),
                        helper.make_node("Mul", ["r", "two"], ["y"])],
                 [helper.make_tensor_value_info("x", f, [1, "?", "?"])],
                 [helper.make_tensor_value_info("y", f, [1, "?", "?"])],
                 [helper.make_tensor("one", f, [], [1.0])])


def _opset20(path):
    """StringConcat needs opset 20."""
    model = onnx.load(path)
    model.opset_import[0].version = 20
    model.ir_version = 9
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("dtype", ["<U3", "S3"])
def test_optimize_check_takes_string_inputs_from_an_npz(tmp_path, dtype):
    model = _opset20(_strings(tmp_path / "s.onnx"))
    np.savez(tmp_path / "in.npz", x=np.array(["ab", "cde"], dtype))
    out = tmp_path / "out.onnx"
    proc = run_cli("optimize", model, "-o", str(out), "--check", "2", "--inputs",
                str(tmp_path / "in.npz"))
    assert proc.returncode == 0, proc.stderr
    assert "input x: string[2] from --inputs" in proc.stdout
    assert "all outputs within tolerance" in proc.stdout
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert "Identity" not in [n.op_type for n in onnx.load(str(out)).graph.node]
    assert session.run(None, {"x": np.array(["ab", "cde"], object)})[0].tolist() == [
        "ab!", "cde!"]


def test_a_string_input_without_inputs_is_fed_random_words(tmp_path):
    model = _opset20(_strings(tmp_path / "s.onnx"))
    proc = run_cli("optimize", model, "-o", str(tmp_path / "out.onnx"), "--check", "1")
    assert proc.returncode == 0, proc.stderr
    assert "input x: string[1] random words (text)" in proc.stdout.replace(" / [2] / [3]", "")
    assert "y       string" in proc.stdout and "all outputs within tolerance" in proc.stdout
    assert "please report" not in proc.stdout  # merging duplicate nodes skips string Constants


def test_pickled_object_arrays_are_refused(tmp_path):
    model = _opset20(_strings(tmp_path / "s.onnx"))
    np.savez(tmp_path / "in.npz", x=np.array(["ab", None], object))
    proc = run_cli("optimize", model, "--check", "1", "--inputs", str(tmp_path / "in.npz"))
    assert proc.returncode == 2 and "object arrays are refused" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_compare_takes_string_inputs(tmp_path):
    model = _opset20(_strings(tmp_path / "s.onnx"))
    np.savez(tmp_path / "in.npz", x=np.array(["a", "b", "c"]))
    proc = run_cli("compare", model, model, "--inputs", str(tmp_path / "in.npz"))
    assert proc.returncode == 0, proc.stderr
    assert "y       string  [3]" in proc.stdout


def test_unnamed_question_mark_dims_take_the_shape_given(tmp_path):
    model = _paddle(tmp_path / "p.onnx")
    np.savez(tmp_path / "x.npz", x=np.linspace(-1, 1, 48 * 192, dtype=np.float32)
             .reshape(1, 48, 192))
    proc = run_cli("compare", model, model, "--inputs", str(tmp_path / "x.npz"))
    assert proc.returncode == 0, proc.stderr
    assert "[1,48,192]" in proc.stdout.replace(" ", "")
    out = tmp_path / "out.onnx"
    proc = run_cli("optimize", model, "-o", str(out), "--check", "1", "--inputs",
                str(tmp_path / "x.npz"))
    assert proc.returncode == 0, proc.stderr
    assert "all outputs within tolerance" in proc.stdout and out.exists()


def test_inputs_without_check_is_refused(tmp_path):
    model = _paddle(tmp_path / "p.onnx")
    np.savez(tmp_path / "x.npz", x=np.ones((1, 2, 3), np.float32))
    proc = run_cli("optimize", model, "-o", str(tmp_path / "out.onnx"), "--inputs",
                str(tmp_path / "x.npz"))
    assert proc.returncode == 2
    assert proc.stderr.startswith("onnxfold: error: --inputs ") and "--check" in proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["p.onnx", "x.npz"]
