"""``optimize A B ... -o DIR/ --job-timeout S``: a job still running after S seconds is killed
with the processes it started, reported as timed out (exit 3), and the other jobs finish; what
the killed job leaves (temporary files, its output's lock, its temporary directory) is removed
and a next run of the same output is not blocked."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from onnxfold.io.publication import HANG_AT_ENV, lock_path
from tests.support.cli import onnxfold_argv, run_cli
from tests.support.slow_conv import processes_mentioning, quick_model, slow_conv_model

TIMEOUT = 60


def _onnxfold(args, tmp_path, env=None):
    """Run the CLI with TMPDIR inside ``tmp_path`` (every temporary file of the run lands
    there, and every process of the run names it on its command line)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    return run_cli(*args, timeout=TIMEOUT,
                   env={**os.environ, "TMPDIR": str(scratch), **(env or {})})


def _leftovers(directory) -> list[str]:
    """Hidden files onnxfold leaves beside outputs (temporaries, locks); none where the batch
    removed the output directory it made and wrote nothing into."""
    if not os.path.isdir(directory):
        return []
    return sorted(name for name in os.listdir(directory) if name.startswith("."))


def test_a_hanging_job_is_killed_and_the_others_finish(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    slow_conv_model(str(models / "a_slow.onnx"))
    quick_model(str(models / "b_quick.onnx"))
    out = tmp_path / "out"
    summary = tmp_path / "summary.json"
    proc = _onnxfold(["optimize", models, "-o", f"{out}/", "--job-timeout", "4",
                      "--fold-timeout", "600", "--json", summary], tmp_path)
    assert proc.returncode == 3, proc.stderr
    outcomes = {os.path.basename(o["input"]): o for o in json.loads(summary.read_text())}
    assert outcomes["a_slow.onnx"]["status"] == "timed out"
    assert outcomes["a_slow.onnx"]["code"] == 3
    assert outcomes["a_slow.onnx"]["seconds"] >= 4  # killed at the timeout, not before
    assert outcomes["b_quick.onnx"]["status"] == "ok"
    assert "timed out" in proc.stdout
    assert "--job-timeout" in proc.stderr and "Traceback" not in proc.stderr
    assert sorted(os.listdir(out)) == ["b_quick.onnx"]
    assert _leftovers(out) == []
    assert os.listdir(tmp_path / "tmp") == []  # the batch's and the jobs' temporary files
    assert processes_mentioning(str(tmp_path)) == []  # the job and its onnxruntime children


def test_a_job_killed_holding_its_output_lock_blocks_no_later_run(tmp_path):
    model = quick_model(str(tmp_path / "m.onnx"))
    out = tmp_path / "out"
    out.mkdir()
    old = quick_model(str(out / "m.onnx"), seed=2)  # an earlier output, to be kept intact
    before = Path(old).read_bytes()
    proc = _onnxfold(["optimize", model, "-o", f"{out}/", "--job-timeout", "3"], tmp_path,
                     env={HANG_AT_ENV: "model-rename"})  # hangs holding the lock
    assert proc.returncode == 3, proc.stderr
    assert "timed out" in proc.stdout
    assert Path(old).read_bytes() == before
    assert not os.path.exists(lock_path(old))
    assert _leftovers(out) == []
    proc = _onnxfold(["optimize", model, "-o", f"{out}/", "--job-timeout", "20"], tmp_path)
    assert proc.returncode == 0, proc.stderr  # not blocked by the lock: it would time out
    assert Path(old).read_bytes() != before


def test_job_timeout_bad_values_are_one_line(tmp_path):
    model = quick_model(str(tmp_path / "m.onnx"))
    for args in (["--job-timeout", "0"], ["--job-timeout", "x"]):
        proc = _onnxfold(["optimize", model, "-o", f"{tmp_path}/out/", *args], tmp_path)
        assert proc.returncode == 2
        assert proc.stderr.count("\n") == 1 and "--job-timeout" in proc.stderr, proc.stderr
    proc = _onnxfold(["optimize", model, "-o", tmp_path / "o.onnx", "--job-timeout", "5"],
                     tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == ("onnxfold: error: --job-timeout: applies to batches (several models, "
                           "or -o DIR/)\n")
    assert not os.path.exists(tmp_path / "o.onnx")


def test_a_stopped_batch_stops_its_jobs_and_their_children(tmp_path):
    """Each job leads its own process group, out of reach of the terminal's Ctrl-C: SIGTERM
    (or Ctrl-C) of the batch must stop the jobs and their onnxruntime children itself."""
    models = tmp_path / "models"
    models.mkdir()
    slow_conv_model(str(models / "slow.onnx"))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    out = tmp_path / "out"
    batch = subprocess.Popen(onnxfold_argv("optimize", models / "slow.onnx", "-o", f"{out}/",
                                           "--fold-timeout", "600"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "TMPDIR": str(scratch)})
    deadline = time.monotonic() + 30
    while not processes_mentioning(f"onnxfold.fold.fallback_child {scratch}"):
        assert time.monotonic() < deadline and batch.poll() is None, "no fallback child"
        time.sleep(0.1)
    batch.terminate()
    _, stderr = batch.communicate(timeout=TIMEOUT)
    assert batch.returncode == 128 + signal.SIGTERM, stderr
    assert stderr == "onnxfold: interrupted\n"
    deadline = time.monotonic() + 10
    while processes_mentioning(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_mentioning(str(tmp_path)) == []
    assert os.listdir(scratch) == []
    assert _leftovers(out) == []
