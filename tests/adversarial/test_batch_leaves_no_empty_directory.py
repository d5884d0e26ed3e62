"""A batch creates its output directory only to hold outputs: when no job writes one (every
model is bad input), the directories it created are removed again; a directory that existed
before, or that holds an output, stays."""

from __future__ import annotations

import os

import onnx
from onnx import TensorProto, helper

from tests.support.cli import run_cli


def _good(path) -> str:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["X"], ["Y"])], "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def _bad(path) -> str:
    path.write_bytes(b"not a model")
    return str(path)


def test_every_job_failing_leaves_no_directory(tmp_path) -> None:
    proc = run_cli("optimize", _bad(tmp_path / "a.onnx"), _bad(tmp_path / "b.onnx"),
                "-o", str(tmp_path / "new/sub/"))
    assert proc.returncode == 2, proc.stderr
    assert not (tmp_path / "new").exists()


def test_an_existing_directory_stays(tmp_path) -> None:
    (tmp_path / "out").mkdir()
    proc = run_cli("optimize", _bad(tmp_path / "a.onnx"), _bad(tmp_path / "b.onnx"),
                "-o", str(tmp_path / "out/"))
    assert proc.returncode == 2, proc.stderr
    assert os.listdir(tmp_path / "out") == []


def test_a_directory_holding_an_output_stays(tmp_path) -> None:
    proc = run_cli("optimize", _bad(tmp_path / "a.onnx"), _good(tmp_path / "b.onnx"),
                "-o", str(tmp_path / "new/sub/"))
    assert proc.returncode == 2, proc.stderr
    assert os.listdir(tmp_path / "new/sub") == ["b.onnx"]
