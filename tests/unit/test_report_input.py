"""The report's ``input`` is the path as the caller gave it, made by the pipeline itself (the
command line patched it after the run, and the Python API reported an absolute path)."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
from onnx import helper, numpy_helper

import onnxfold
from onnxfold.io import load_model
from tests.support.cli import assert_ok, run_cli
from tests.support.models import make_model, vinfo


def _model():
    """y = x + (2 * 3): one fold."""
    two, three = (numpy_helper.from_array(np.float32(v), n) for v, n in ((2, "two"), (3, "three")))
    return make_model([helper.make_node("Mul", ["two", "three"], ["six"]),
                       helper.make_node("Add", ["x", "six"], ["y"])],
                      [vinfo("x", shape=[2])], [vinfo("y", shape=[2])], [two, three])


def test_a_path_is_reported_as_given_by_the_api_and_the_command_line(tmp_path, monkeypatch):
    onnx.save(_model(), tmp_path / "m.onnx")
    monkeypatch.chdir(tmp_path)
    assert onnxfold.optimize("m.onnx").report.input == "m.onnx"
    assert onnxfold.optimize(tmp_path / "m.onnx").report.input == str(tmp_path / "m.onnx")
    done = run_cli("optimize", "m.onnx", "-o", "o.onnx", "--json", "r.json", cwd=tmp_path)
    assert_ok(done)
    assert json.loads((tmp_path / "r.json").read_text())["input"] == "m.onnx"


def test_a_model_in_memory_names_its_file_only_when_it_came_from_one(tmp_path):
    onnx.save(_model(), tmp_path / "m.onnx")
    assert onnxfold.optimize(onnx.load(tmp_path / "m.onnx")).report.input is None
    loaded = load_model(str(tmp_path / "m.onnx"))
    assert onnxfold.optimize(loaded).report.input == os.path.abspath(tmp_path / "m.onnx")
