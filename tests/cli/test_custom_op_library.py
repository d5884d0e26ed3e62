"""``--custom-op-library PATH`` (optimize --check, compare) and ``Session(custom_op_libraries=)``:
the path is the user's file, checked before anything runs, and one line when it is wrong.

A real library is the one onnxruntime-extensions ships (its ``ai.onnx.contrib`` ops): the
tests that load it skip where that package is not installed; the refusals run everywhere.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxfold
from onnxfold.errors import InputError
from tests.support.cli import assert_one_error_line, run_cli, save_add_model


def _cli(*args):
    return run_cli(*args, timeout=120)


@pytest.fixture
def model_path(tmp_path):
    return str(save_add_model(tmp_path / "m.onnx"))


@pytest.mark.parametrize(("make", "fragment"), [
    (lambda d: str(d / "missing.so"), "no such file"),
    (lambda d: str(d), "not a regular file"),
    (lambda d: (d / "notes.so").write_text("not a library") and str(d / "notes.so"),
     "onnxruntime cannot load it")])
def test_a_bad_library_is_one_line_and_writes_nothing(model_path, tmp_path, make, fragment):
    library = make(tmp_path)
    out = tmp_path / "out.onnx"
    assert_one_error_line(_cli("optimize", model_path, "-o", str(out), "--check", "1",
                         "--custom-op-library", library), fragment)
    assert not out.exists()
    assert_one_error_line(_cli("compare", model_path, model_path, "--custom-op-library", library),
                    fragment)


def test_every_library_is_checked(model_path, tmp_path):
    (tmp_path / "a.so").write_bytes(b"")
    proc = _cli("compare", model_path, model_path, "--custom-op-library", str(tmp_path / "a.so"),
                "--custom-op-library", str(tmp_path / "b.so"))
    assert_one_error_line(proc, "b.so")


def test_session_and_compare_check_the_paths(model_path, tmp_path):
    with pytest.raises(InputError, match="not a regular file"):
        onnxfold.Session(model_path, custom_op_libraries=[tmp_path])
    with pytest.raises(InputError, match=r"missing\.so"):
        onnxfold.compare(model_path, model_path, custom_op_libraries=[tmp_path / "missing.so"])
    session = onnxfold.Session(model_path, custom_op_libraries=[])
    assert session.run(None, {"x": np.ones(2, np.float32)})[0].tolist() == [2.0, 3.0]


def test_a_custom_op_without_its_library_names_the_flag(tmp_path):
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("MyRelu", ["x"], ["y"], domain="my.ops")], "t",
        [helper.make_tensor_value_info("x", f, [2])], [helper.make_tensor_value_info("y", f, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("my.ops", 1)])
    model.ir_version = 8
    path = tmp_path / "custom.onnx"
    path.write_bytes(model.SerializeToString())
    proc = _cli("optimize", str(path), "-o", str(tmp_path / "out.onnx"), "--check", "1")
    assert_one_error_line(proc, "--custom-op-library PATH loads the library")
    assert not (tmp_path / "out.onnx").exists()


@pytest.fixture
def contrib_model(tmp_path):
    """y = Inverse(x) + c*2: an ai.onnx.contrib op (onnxruntime-extensions) and a foldable
    product."""
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("Mul", ["c", "two"], ["c2"]),
         helper.make_node("Inverse", ["x"], ["inv"], domain="ai.onnx.contrib"),
         helper.make_node("Add", ["inv", "c2"], ["y"])], "t",
        [helper.make_tensor_value_info("x", f, [3, 3])],
        [helper.make_tensor_value_info("y", f, [3, 3])],
        [helper.make_tensor("c", f, [3, 3], np.eye(3).ravel().tolist()),
         helper.make_tensor("two", f, [], [2.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.onnx.contrib", 1)])
    model.ir_version = 8
    path = tmp_path / "contrib.onnx"
    path.write_bytes(model.SerializeToString())
    return str(path)


def _extensions_library() -> str:
    extensions = pytest.importorskip(
        "onnxruntime_extensions", reason="a real custom-op library: pip install "
        "onnxruntime-extensions")
    return extensions.get_library_path()


def test_a_real_library_lets_check_compare_and_session_run(contrib_model, tmp_path):
    library = _extensions_library()
    out = tmp_path / "out.onnx"
    proc = _cli("optimize", contrib_model, "-o", str(out), "--check", "2",
                "--custom-op-library", library)
    assert proc.returncode == 0, proc.stderr
    assert "all outputs within tolerance" in proc.stdout and out.exists()
    assert "nodes        3 -> 2" in proc.stdout  # the product folded, the custom op stayed
    proc = _cli("compare", contrib_model, str(out), "--custom-op-library", library)
    assert proc.returncode == 0, proc.stderr
    x = np.array([[2, 0, 0], [0, 4, 0], [0, 0, 8]], np.float32)
    session = onnxfold.Session(str(out), custom_op_libraries=[library])
    np.testing.assert_allclose(session.run(None, {"x": x})[0],
                               np.diag([2.5, 2.25, 2.125]).astype(np.float32))
    assert_one_error_line(_cli("compare", contrib_model, str(out)), "--custom-op-library")
    np.savez(tmp_path / "x.npz", x=x)
    proc = _cli("run", str(out), "--inputs", str(tmp_path / "x.npz"), "-o",
                str(tmp_path / "y.npz"), "--custom-op-library", library)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npz")["y"],
                               np.diag([2.5, 2.25, 2.125]).astype(np.float32))
    assert_one_error_line(_cli("run", str(out), "--inputs", str(tmp_path / "x.npz"),
                         "--custom-op-library", str(tmp_path / "missing.so")), "missing.so")
