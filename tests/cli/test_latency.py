"""`optimize --latency N`: session creation and inference of the original and the output in
onnxruntime, interleaved, at its default level and with optimizations off, each a median with
its spread and the run-by-run ratio with its spread and verdict; sizes and dynamic dims; in
the summary, --json (against its schema) and the Python API; one model at a time where both
sessions do not fit under the memory limit. (No test asserts what a verdict is: a loaded
machine decides that; ``tests/unit/test_latency_spread.py`` holds how samples give one.)"""

import glob
import json
import os
import re
import signal

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxfold
from onnxfold.pipeline.report_schema import validate
from tests.support import memcg
from tests.support.cli import assert_one_error_line, run_cli
from tests.support.files import assert_unchanged, snapshot
from tests.support.interrupts import run_acted_on
from tests.support.measured_child import run_limited
from tests.support.models import MODELS

BERT = os.path.join(MODELS, "tiny_bert_ts.onnx")


def weight_transposed(path, rows: int, dynamic: bool = True) -> None:
    """y = x @ Transpose(W): the Transpose folds; W is ``rows`` x 256 float32."""
    w = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((rows, 256)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
         helper.make_node("MatMul", ["x", "wt"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n" if dynamic else 2, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n" if dynamic else 2, rows])],
        [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(path))


def test_latency_is_in_the_summary_and_the_json(tmp_path):
    out, report = tmp_path / "o.onnx", tmp_path / "r.json"
    proc = run_cli("optimize", BERT, "-o", str(out), "--latency", "3", "--json", str(report))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("latency      "))
    assert "1 thread, default session options; medians [quartiles; min-max below 8 samples] " \
        "of 3 interleaved runs" in lines[head] and "ratios run by run" in lines[head]
    assert lines[head + 1].strip().startswith("feeds input_ids int64[1,16]")
    assert lines[head + 2].strip() == "default level (all):"
    spread = r"[\d.]+ \[[\d.]+-[\d.]+\]"
    # 3 runs: too few for a verdict; 8 session creations (each model first in half): one
    for line, what, says in ((lines[head + 3], "run", "too few runs to tell"),
                             (lines[head + 4], "session", "faster|slower|within noise")):
        assert re.fullmatch(rf" {{15}}{what} +{spread} -> {spread} (us|ms): [\d.]+x "
                            rf"\[[\d.]+-[\d.]+\], ({says})", line), line
    assert lines[head + 5].strip() == "optimizations off:"
    assert lines[head + 8].startswith("size         0.4 MiB -> 0.4 MiB on disk")
    data = json.loads(report.read_text())
    assert validate(data) == []
    latency = data["latency"]
    assert latency["runs"] == 3 and latency["threads"] == 1 and latency["interleaved"]
    assert latency["file_bytes"] == [os.path.getsize(BERT), os.path.getsize(out)]
    for timing in latency["timings"]:
        assert all(ms > 0 for ms in timing["run_ms"] + timing["create_ms"])
        assert timing["run_ratio"] == pytest.approx(timing["run_ms"][1] / timing["run_ms"][0])
        for which, samples in (("run", 3), ("create", 8)):
            compared = timing[which]
            assert compared["ratio"]["samples"] == samples and compared["ratio"]["kind"] == \
                ("range" if samples < 8 else "quartiles")
            original = compared["original"]
            assert original["low"] <= original["median"] <= original["high"]
            assert original["median"] == pytest.approx(
                timing["run_ms" if which == "run" else "create_ms"][0])
    assert data["options"]["latency"] == 3


def test_dynamic_dims_kept_and_a_dry_run_times_the_model_from_a_scratch_file(tmp_path):
    """A dry run's output is written to a scratch directory for the time it is timed (a
    session from bytes in memory is slower to create than from a file), then removed."""
    src, scratch = tmp_path / "m.onnx", tmp_path / "tmp"
    scratch.mkdir()
    weight_transposed(src, 64)
    proc = run_cli("optimize", str(src), "--latency", "2", "--latency-threads", "2",
                   "--json", str(tmp_path / "r.json"), env={**os.environ, "TMPDIR": str(scratch)})
    assert proc.returncode == 0, proc.stderr
    assert "2 threads" in proc.stdout and "dynamic dims kept: n" in proc.stdout
    assert sorted(os.listdir(tmp_path)) == ["m.onnx", "r.json", "tmp"]
    assert [n for n in os.listdir(scratch) if n != ".ses"] == []  # (.ses: onnxruntime's own)
    latency = json.loads((tmp_path / "r.json").read_text())["latency"]
    assert latency["model_b"] == "(folded, not written)" and latency["file_bytes"][1] > 0


def test_the_python_api_measures_two_models(tmp_path):
    src = tmp_path / "m.onnx"
    weight_transposed(src, 64, dynamic=False)
    folded = onnxfold.optimize(str(src)).to_proto()
    result = onnxfold.measure_latency(str(src), folded, runs=2, levels=("disable",))
    (timing,) = result.timings
    assert timing.level == "disable" and result.model_b == "model B"
    assert result.dynamic_dims == ([], []) and result.file_bytes[1] == folded.ByteSize()
    assert "optimizations off:" in result.summary()


@pytest.mark.parametrize("value", ["0", "-1", "x"])
def test_bad_latency_threads_are_one_line(tmp_path, value):
    proc = run_cli("optimize", BERT, "--latency", "1", "--latency-threads", value)
    assert proc.returncode == 2 and proc.stderr.startswith("onnxfold: error: ")
    assert len(proc.stderr.splitlines()) == 1


def test_in_a_tight_memory_limit_the_models_are_timed_one_after_the_other(tmp_path):
    """Two sessions over 64 MiB of weights (about 190 MiB each) do not fit in what a 464 MiB
    cgroup leaves the process; one does: timed one model after the other, never killed. (The
    output's 64 MiB, written just before, count against the limit while they are dirty page
    cache: at 400 MiB one session fitted only where the kernel had written them out, and a
    loaded CI machine had not.)"""
    src = tmp_path / "big.onnx"
    weight_transposed(src, 65536)
    outcome = memcg.run_in_memory_cgroup(
        464 << 20, ["optimize", str(src), "-o", str(tmp_path / "o.onnx"), "--latency", "1",
                    "--json", str(tmp_path / "r.json")])
    assert outcome.oom_kills == 0 and outcome.returncode == 0, outcome.stderr
    assert "one model after the other (both did not fit in memory at once)" in outcome.stdout
    assert json.loads((tmp_path / "r.json").read_text())["latency"]["interleaved"] is False


@pytest.mark.parametrize("signum", [None, signal.SIGTERM])
def test_a_dry_runs_output_is_timed_from_a_file_removed_however_the_run_ends(tmp_path, signum):
    src, scratch, pauses = tmp_path / "m.onnx", tmp_path / "tmp", tmp_path / "pauses"
    scratch.mkdir()
    pauses.mkdir()
    weight_transposed(src, 64)
    seen = []

    def act(proc):
        seen.extend(glob.glob(str(scratch / "onnxfold-latency-*" / "m.onnx")))
        if signum is not None:
            proc.send_signal(signum)

    ending = run_acted_on(["optimize", str(src), "--latency", "1"], "latency", act, pauses,
                          env={"TMPDIR": str(scratch)})
    assert ending.paused and len(seen) == 1  # the output, written for the timing
    assert ending.code == (128 + signum if signum else 0), ending.stderr
    assert [n for n in os.listdir(scratch) if n != ".ses"] == []


def _asks_ten_gigabytes(path) -> None:
    """y = Expand(x + 1, [100000, 1]), x float32 [1, n]: at n=25000 onnxruntime asks for
    10 GB for y (nothing to fold but the 1)."""
    one = numpy_helper.from_array(np.ones((1, 1), np.float32), "one")
    shape = numpy_helper.from_array(np.array([100000, 1], np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("Identity", ["one"], ["one2"]),
         helper.make_node("Add", ["x", "one2"], ["x1"]),
         helper.make_node("Expand", ["x1", "shape"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [100000, "n"])], [one, shape])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(path))


@pytest.mark.parametrize("dry_run", [False, True], ids=["output", "dry-run"])
def test_a_run_the_machine_cannot_hold_could_not_run(tmp_path, dry_run):
    """Under a 4 GiB address space, a model whose run asks onnxruntime for 10 GB: the check's
    runner says the machine ran short (MachineShort), which --latency let through as an
    internal error, exit 3, "this is a bug". It is a run that could not run: exit 2, one
    line, the existing output untouched, nothing left beside it."""
    src, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    _asks_ten_gigabytes(src)
    out.write_bytes(b"OLD")
    before = snapshot(tmp_path)
    done, _ = run_limited(["optimize", src, *([] if dry_run else ["-o", out]), "--latency", "2",
                           "--dim", "n=25000"], address_space=4 << 30)
    assert_one_error_line(done, "latency: could not run: ", "out of memory",
                          "dry run: nothing written" if dry_run else
                          f"nothing was written to {out}")
    assert_unchanged(before, snapshot(tmp_path))


def test_the_dims_input_shape_fixes_feed_both_models(tmp_path):
    """The output fixes n at 2 (--input-shape): both models are timed on feeds of n=2 (the
    original's plan guessed n=1, which the output refused: an internal error, exit 3)."""
    src = tmp_path / "m.onnx"
    weight_transposed(src, 64)
    proc = run_cli("optimize", src, "-o", tmp_path / "o.onnx", "--input-shape", "n=2",
                   "--latency", "1")
    assert proc.returncode == 0, proc.stderr
    assert "feeds x float32[2,256]" in proc.stdout


@pytest.mark.parametrize("check", [[], ["--check", "1"]])
def test_the_timing_runs_the_first_input_set_the_check_runs(tmp_path, check):
    """A reflect Pad of 40 needs more than 40 samples: the plan's first guesses (16, then 1)
    fail in the original, and the check goes on to 64. The timing takes the set the check
    finds (it timed the first guess, and a command that passed without --latency ended in
    exit 2: a fresh audio export, sew-d, ran short at length 16)."""
    src = tmp_path / "pad.onnx"
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
         helper.make_node("Pad", ["x", "p"], ["padded"], mode="reflect"),
         helper.make_node("MatMul", ["wt", "padded"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "samples"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "out"])],
        [numpy_helper.from_array(np.ones((1, 1), np.float32), "w"),
         numpy_helper.from_array(np.array([0, 0, 0, 40], np.int64), "p")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(src))
    proc = run_cli("optimize", src, "-o", tmp_path / "o.onnx", "--latency", "1", *check)
    assert proc.returncode == 0, proc.stderr
    assert "feeds x float32[1,64]" in proc.stdout
