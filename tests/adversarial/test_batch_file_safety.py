"""The batch CLI (``onnxfold optimize a.onnx b.onnx -o DIR/``) and the user's files: a job never
writes over another input's external data, and a batch terminated mid-way leaves no job
process and no file behind."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import time

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.external_data_helper import convert_model_to_external_data

from tests.support.cli import onnxfold_argv, run_cli
from tests.support.files import sha256
from tests.support.models import make_model, tensor, vinfo


def test_a_job_never_overwrites_another_inputs_external_data(tmp_path):
    x, z = tmp_path / "X", tmp_path / "Z"
    (x / "d").mkdir(parents=True)
    z.mkdir()
    a = make_model([helper.make_node("Add", ["x", "W"], ["y"])], [vinfo("x", shape=[256])],
                   [vinfo("y", shape=[256])], [tensor("W", np.arange(256, dtype=np.float32))])
    # a.onnx's weights live in X/d/b.onnx.data, a name another job's output also has
    convert_model_to_external_data(a, all_tensors_to_one_file=True, location="d/b.onnx.data",
                                   size_threshold=0)
    onnx.save(a, x / "a.onnx")
    b = make_model([helper.make_node("Add", ["x", "V"], ["y"])], [vinfo("x", shape=[4])],
                   [vinfo("y", shape=[4])], [tensor("V", np.ones(4, np.float32))])
    onnx.save(b, z / "b.onnx")
    data = x / "d" / "b.onnx.data"
    before = sha256(data)
    proc = run_cli("optimize", x / "a.onnx", z / "b.onnx", "-o", f"{x / 'd'}/",
                "--external-data", "yes")
    assert sha256(data) == before, f"exit {proc.returncode}: a.onnx's weights were replaced"
    onnx.checker.check_model(str(x / "a.onnx"), full_check=True)


def _slow_model(path):
    """A few seconds of folding: a chain of 2000 x 2000 MatMuls."""
    n = 2000
    nodes, prev = [], "W"
    for i in range(30):
        nodes += [helper.make_node("MatMul", [prev, "W"], [f"m{i}"]),
                  helper.make_node("Sin", [f"m{i}"], [f"s{i}"])]
        prev = f"s{i}"
    nodes += [helper.make_node("ReduceSum", [prev], ["r"], keepdims=0),
              helper.make_node("Add", ["x", "r"], ["y"])]
    weight = np.random.default_rng(0).random((n, n), dtype=np.float32) / n
    onnx.save(make_model(nodes, [vinfo("x", shape=[])], [vinfo("y", shape=[])],
                         [tensor("W", weight)]), path)


def _processes_reading(path):
    found = []
    for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            with open(cmdline, "rb") as f:
                if path.encode() in f.read():
                    found.append(int(cmdline.split("/")[2]))
        except OSError:
            continue
    return found


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds the jobs through /proc")
def test_a_terminated_batch_leaves_nothing_behind(tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    for k in range(2):
        _slow_model(inputs / f"s{k}.onnx")
    out, scratch = tmp_path / "out", tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    parent = subprocess.Popen(onnxfold_argv("optimize", inputs / "s0.onnx", inputs / "s1.onnx",
                                            "-o", f"{out}/"), env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    orders = []  # the first job's order (onnxfold.app.commands.JobOrder), written as it starts
    while not orders and time.monotonic() < deadline:
        orders = glob.glob(str(scratch / "onnxfold-batch-*" / "0.order"))
        time.sleep(0.05)
    assert orders, "the batch never started a job"
    time.sleep(1.0)  # the job is folding now
    parent.send_signal(signal.SIGTERM)
    parent.wait(timeout=60)
    for pid in _processes_reading(orders[0]):  # let orphaned jobs finish (or be gone)
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline + 120:
            time.sleep(0.1)
    # (onnxruntime itself leaves a ".ses" file in TMPDIR: not onnxfold's)
    leftovers = [name for name in os.listdir(scratch) if name.startswith("onnxfold")]
    written = sorted(os.listdir(out)) if out.exists() else []
    assert not leftovers and not written, f"left in TMPDIR: {leftovers}; written: {written}"
