"""``--fold-timeout S`` stops a single onnxruntime kernel that runs far longer than S.

onnxruntime reads ``RunOptions.terminate`` only between kernels, so a constant Conv of ~3e11
operations (20 s or more) would run to its end under ``--fold-timeout 2`` in process. The
fallback runs such a batch in a child process that is killed at the timeout; the Conv stays,
declined with "exceeded --fold-timeout", and the run leaves no process and no temporary file
behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import numpy as np
import onnxruntime as ort

from onnxfold.host.machine import usable_cores
from tests.support.cli import onnxfold_argv, run_cli
from tests.support.slow_conv import processes_mentioning, quick_model, slow_conv_model

TIMEOUT = 60


def test_a_long_kernel_stops_at_the_fold_timeout(tmp_path):
    model = slow_conv_model(str(tmp_path / "slow.onnx"))
    out, report = tmp_path / "out.onnx", tmp_path / "report.json"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    base = run_cli("optimize", quick_model(str(tmp_path / "quick.onnx")), "-o",
                   tmp_path / "quick_out.onnx", "--fold-timeout", "2", timeout=TIMEOUT, env=env)
    proc = run_cli("optimize", model, "-o", out, "--fold-timeout", "2", "--json", report,
                   timeout=TIMEOUT, env=env)
    assert proc.returncode == 0 and base.returncode == 0, proc.stderr + base.stderr
    # CPU, not wall time (a loaded machine stretches the latter): the run's own work, a
    # child's start-up and 2 s of the kernel on each of onnxruntime's threads, no more
    allowed = 2 * base.cpu + 2 * usable_cores() + 3
    assert proc.cpu < allowed, f"{proc.cpu:.1f} s of CPU under --fold-timeout 2"
    declined = json.dumps(json.loads(report.read_text()))
    assert "exceeded --fold-timeout (2 s)" in declined
    assert [n.op_type for n in _nodes(str(out))] == ["Conv", "Add"]  # the Conv stayed
    assert [name for name in os.listdir(scratch) if name != ".ses"] == []  # (.ses:
    # onnxruntime's own telemetry session id, written by any session)
    assert processes_mentioning(str(tmp_path)) == []


def _nodes(path: str):
    import onnx

    return onnx.load(path, load_external_data=False).graph.node


def test_a_kernel_within_the_fold_timeout_still_folds_in_a_child(tmp_path):
    """A Conv of 4e9 operations under --fold-timeout 4 runs in the child and folds: the
    folded model computes what the original computes, to the bit."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 48, 64, 64)).astype(np.float32)
    w = (rng.standard_normal((48, 48, 15, 15)) * 0.01).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["X", "W"], ["c"], pads=[7] * 4),
         helper.make_node("Add", ["x", "c"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 48, 64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 48, 64, 64])],
        [numpy_helper.from_array(x, "X"), numpy_helper.from_array(w, "W")])
    model = str(tmp_path / "m.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    out = str(tmp_path / "out.onnx")
    proc = run_cli("optimize", model, "-o", out, "--fold-timeout", "4", timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert [n.op_type for n in _nodes(out)] == ["Add"]
    feed = {"x": rng.standard_normal((1, 48, 64, 64)).astype(np.float32)}
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    got = ort.InferenceSession(out, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    assert got.tobytes() == want.tobytes()


def test_the_kernels_process_dies_with_a_killed_run(tmp_path):
    """A run killed from outside (SIGKILL: no handler runs) leaves no onnxruntime process
    computing on: the child asked Linux to kill it with its parent."""
    model = slow_conv_model(str(tmp_path / "slow.onnx"))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    run = subprocess.Popen(onnxfold_argv("optimize", model, "-o", tmp_path / "out.onnx",
                                         "--fold-timeout", "600"),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env={**os.environ, "TMPDIR": str(scratch)})
    deadline = time.monotonic() + 30
    child = f"onnxfold.fold.fallback_child {scratch}"  # its command line names its directory
    while not (processes_mentioning(child) and _running_kernel(scratch)):
        assert time.monotonic() < deadline and run.poll() is None, "no fallback child started"
        time.sleep(0.1)
    run.kill()
    run.wait()
    deadline = time.monotonic() + 10
    while processes_mentioning(str(scratch)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_mentioning(str(scratch)) == []


def _running_kernel(scratch) -> bool:
    """Whether a fallback child has built its session (its inputs are removed then)."""
    return any(name.startswith("onnxfold-fallback-") and not os.path.exists(
        os.path.join(scratch, name, "model.onnx")) for name in os.listdir(scratch))
