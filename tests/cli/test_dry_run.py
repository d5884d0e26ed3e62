"""``onnxfold optimize IN`` without ``-o``: a dry run that folds, prints the report and writes
no model; and ``-o`` that names a file where several models need a directory.

Every test lists the directories before and after: a dry run creates nothing (no model, no
temporary file, no lock), whether it checks (``--check`` compares in memory) or not, for one
model or a directory of them.
"""

from __future__ import annotations

import json
import os

import pytest
from onnx import TensorProto, helper

from tests.support.cli import run_cli

DRY_RUN = "dry run: nothing written (-o OUT to write)"


def _listing(*directories):
    return {str(d): sorted(os.listdir(d)) for d in directories}


def _foldable(path, scale=2.0):
    """y = x * (c + c): the Add folds."""
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("Add", ["c", "c"], ["d"]), helper.make_node("Mul", ["x", "d"], ["y"])],
        "t", [helper.make_tensor_value_info("x", f, ["n", 3])],
        [helper.make_tensor_value_info("y", f, ["n", 3])],
        [helper.make_tensor("c", f, [3], [scale, 1.0, 0.5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return path


@pytest.fixture
def models(tmp_path):
    directory = tmp_path / "models"
    directory.mkdir()
    _foldable(directory / "a.onnx")
    _foldable(directory / "b.onnx", scale=3.0)
    return directory


def test_optimize_without_output_prints_the_table_and_writes_nothing(tmp_path, models):
    before = _listing(tmp_path, models)
    proc = run_cli("optimize", str(models / "a.onnx"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["op", "before", "after", "delta"]  # the per-op table
    assert any(line.split()[:4] == ["Add", "1", "0", "-1"] for line in lines)
    assert lines[-1] == DRY_RUN
    assert "wrote" not in proc.stdout
    assert "usage" not in proc.stdout + proc.stderr
    assert _listing(tmp_path, models) == before


def test_a_dry_run_checks_in_memory(tmp_path, models):
    before = _listing(tmp_path, models)
    proc = run_cli("optimize", str(models / "a.onnx"), "--check", "2", "--dim", "n=4",
                cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "2 input sets" in proc.stdout and "all outputs within tolerance" in proc.stdout
    assert "(folded, not written)" in proc.stdout
    assert proc.stdout.splitlines()[-1] == DRY_RUN
    assert _listing(tmp_path, models) == before


def test_a_dry_run_writes_the_json_report_it_is_asked_for(tmp_path, models):
    report = tmp_path / "report.json"
    proc = run_cli("optimize", str(models / "a.onnx"), "--check", "1", "--json", str(report),
                "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""  # -q
    data = json.loads(report.read_text())
    assert data["output"] is None and data["output_bytes"] is None
    assert data["check"]["ok"] is True
    assert data["nodes_before"] == 2 and data["nodes_after"] == 1
    assert sorted(os.listdir(tmp_path)) == ["models", "report.json"]


def test_a_directory_without_output_is_a_dry_run_per_model(tmp_path, models):
    before = _listing(tmp_path, models)
    proc = run_cli("optimize", str(models), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = proc.stdout.splitlines()
    assert rows[0].split()[:3] == ["model", "nodes", "before"]
    assert [row.split()[1:3] for row in rows[1:3]] == [["2", "1"], ["2", "1"]]
    assert rows[-1] == "2 of 2 models: 2 ok; dry run: nothing written (-o OUT/ to write)"
    assert _listing(tmp_path, models) == before


@pytest.mark.parametrize("output", ["out.onnx", "existing.onnx", "existing_file"])
def test_several_models_into_a_file_output_are_refused(tmp_path, models, output):
    (tmp_path / "existing.onnx").write_bytes(b"")
    (tmp_path / "existing_file").write_bytes(b"keep")
    before = _listing(tmp_path, models)
    for inputs in ([str(models)], [str(models / "a.onnx"), str(models / "b.onnx")]):
        proc = run_cli("optimize", *inputs, "-o", output, cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"onnxfold: error: -o {output}: "), lines
        assert "directory" in lines[0]
        assert _listing(tmp_path, models) == before
    assert (tmp_path / "existing_file").read_bytes() == b"keep"


def test_a_directory_output_named_like_a_model_is_fine_with_a_slash(tmp_path, models):
    proc = run_cli("optimize", str(models), "-o", "out.onnx/", "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(tmp_path / "out.onnx")) == ["a.onnx", "b.onnx"]
