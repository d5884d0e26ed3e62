"""The save and check phases say how far they are: ``save 12.0/48.0 MiB`` (weights written of
all) and ``check original 2/3`` / ``check optimized 1/3`` (input sets run), on a terminal only.

The callbacks are tested on the real writer and the real comparison in onnxruntime; the line
itself on a pseudo-terminal (``pty``) with a model of several MiB of weights.
"""

from __future__ import annotations

import os

import numpy as np
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxfold.check.compare import compare
from onnxfold.io import load_model, save_model
from tests.support.cli import run_cli, run_on_terminal

WEIGHTS = 6  # 6 x 1 MiB float32 weights


def _model(path):
    """x @ w0 @ w1 ... with 512x512 float32 weights (1 MiB each), the first one negated (a
    Neg that folds)."""
    rng = np.random.default_rng(0)
    nodes, inits, last = [], [], "x"
    for i in range(WEIGHTS):
        w = (rng.standard_normal((512, 512)) / 24).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        weight = f"w{i}"
        if i == 0:
            nodes.append(helper.make_node("Neg", ["w0"], ["w0n"]))
            weight = "w0n"
        nodes.append(helper.make_node("MatMul", [last, weight], [f"h{i}"]))
        last = f"h{i}"
    f = TensorProto.FLOAT
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", f, [2, 512])],
                              [helper.make_tensor_value_info(last, f, [2, 512])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return path


def test_save_model_reports_the_bytes_written_of_the_total(tmp_path):
    model = load_model(str(_model(tmp_path / "m.onnx")))
    calls: list[tuple[int, int]] = []
    info = save_model(model, tmp_path / "out.onnx", progress=lambda d, t: calls.append((d, t)))
    total = WEIGHTS * 512 * 512 * 4
    assert {t for _, t in calls} == {total}
    done = [d for d, _ in calls]
    assert done[0] == 0 and done[-1] == total and done == sorted(done)
    assert len(set(done)) > WEIGHTS  # one step per weight (and its framing), not one at the end
    assert info.bytes_written > total


def test_save_model_reports_progress_with_external_data_too(tmp_path):
    model = load_model(str(_model(tmp_path / "m.onnx")))
    calls: list[tuple[int, int]] = []
    save_model(model, tmp_path / "out.onnx", external_data=True,
               progress=lambda d, t: calls.append((d, t)))
    assert calls[-1][0] == calls[-1][1] == WEIGHTS * 512 * 512 * 4


def test_compare_reports_each_input_set_of_each_model(tmp_path):
    path = str(_model(tmp_path / "m.onnx"))
    told: list[str] = []
    result = compare(path, path, n=2, progress=told.append)
    assert result.ok
    assert told == ["loading original", "original 1/2", "original 2/2", "loading optimized",
                    "optimized 1/2", "optimized 2/2", "verifying folds"]


def _on_terminal(args, tmp_path):
    """Run the CLI with stderr on a pseudo-terminal and the progress line from the start."""
    return run_on_terminal(args, env={**os.environ, "ONNXFOLD_PROGRESS_AFTER": "0"},
                           cwd=tmp_path)


def _redraws(terminal):
    return [part for part in terminal.replace("\x1b[K", "").replace("\r\n", "\r").split("\r")
            if part]


def test_the_save_line_counts_mib_on_a_terminal(tmp_path):
    source = _model(tmp_path / "m.onnx")
    code, _, terminal = _on_terminal(["optimize", str(source), "-o", "out.onnx"], tmp_path)
    assert code == 0, terminal
    saves = [line for line in _redraws(terminal) if line.startswith("save ")]
    assert saves and saves[-1].startswith("save 6.0/6.0 MiB "), saves
    assert saves[-1].endswith(" s")


@pytest.mark.parametrize("output", [["-o", "out.onnx"], []])
def test_the_check_line_ends_at_the_checks_last_step_on_a_terminal(tmp_path, output):
    source = _model(tmp_path / "m.onnx")
    code, stdout, terminal = _on_terminal(["optimize", str(source), *output, "--check", "3"],
                                          tmp_path)
    assert code == 0, terminal
    checks = [line for line in _redraws(terminal) if line.startswith("check ")]
    # the cones run after both models' input sets (each set's line: the callback's test)
    assert checks[-1].startswith("check verifying folds "), checks
    assert "all outputs within tolerance" in stdout


def test_no_save_or_check_progress_on_a_pipe(tmp_path):
    source = _model(tmp_path / "m.onnx")
    env = {**os.environ, "ONNXFOLD_PROGRESS_AFTER": "0"}
    piped = run_cli("optimize", source, "-o", tmp_path / "out.onnx", "--check", "2", env=env)
    assert piped.returncode == 0 and piped.stderr == ""
    assert ir.load(str(tmp_path / "out.onnx")).graph.num_nodes() == WEIGHTS
