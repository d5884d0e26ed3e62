"""``onnxfold optimize a.onnx b.onnx dir/ -o OUTDIR/ -j N``: one process per model, a summary
table, the worst exit code; collisions and outputs over inputs refused before any job runs."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import helper

from onnxfold.app import batch, batch_jobs, batch_plan
from onnxfold.app.commands import OptimizeCommand
from onnxfold.app.parser import parse
from tests.support.cli import run_cli
from tests.support.models import make_model, tensor, vinfo
from tests.support.running import run_ort


def small_model(scale: float) -> onnx.ModelProto:
    """Y = X * (A + B) + C: the constant Add folds (nodes 2 -> 1 plus the one kept)."""
    nodes = [helper.make_node("Add", ["A", "B"], ["S"]),
             helper.make_node("Mul", ["X", "S"], ["P"]),
             helper.make_node("Add", ["P", "C"], ["Y"])]
    inits = [tensor("A", np.full((3,), scale, np.float32)),
             tensor("B", np.arange(3, dtype=np.float32)),
             tensor("C", np.ones((3,), np.float32))]
    return make_model(nodes, [vinfo("X", shape=[2, 3])], [vinfo("Y", shape=[2, 3])], inits)


def write(path, scale=1.0):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    onnx.save(small_model(scale), str(path))
    return str(path)


def invalid(path):
    """A file named .onnx that is no model (exit 2 class when optimized alone)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"\x08\x07this is not a protobuf model" * 3)
    return str(path)


def same_outputs(a, b):
    feeds = {"X": np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)}
    np.testing.assert_allclose(run_ort(a, feeds)[0], run_ort(b, feeds)[0], rtol=1e-6)


def no_temporaries(directory):
    leftovers = [n for n in os.listdir(directory) if ".onnxfold-" in n]
    assert not leftovers, leftovers


def rows(stdout):
    """The table's rows: model -> (before, after, status) (columns are two spaces apart)."""
    found = {}
    for line in stdout.splitlines()[1:-1]:
        parts = re.split(r"\s{2,}", line.strip())
        found[parts[0]] = (parts[1], parts[2], parts[4])
    return found


def test_several_models_one_invalid_two_jobs(tmp_path):
    good = [write(tmp_path / "in" / f"m{i}.onnx", scale=i) for i in range(3)]
    bad = invalid(tmp_path / "in" / "broken.onnx")
    out = tmp_path / "out"
    report = tmp_path / "summary.json"
    proc = run_cli("optimize", *good, bad, "-o", f"{out}/", "-j", "2", "--json", str(report))
    assert proc.returncode == 2, proc.stderr  # the worst job: bad input
    table = rows(proc.stdout)
    assert table[bad][2] == "bad input"
    for path in good:
        assert table[path] == ("3", "2", "ok"), proc.stdout
        same_outputs(path, str(out / os.path.basename(path)))
    assert not (out / "broken.onnx").exists()  # nothing half-written for the bad one
    assert sorted(os.listdir(out)) == ["m0.onnx", "m1.onnx", "m2.onnx"]
    no_temporaries(out)
    # the bad model's one-line error is on stderr, and names it
    assert any(line.startswith("onnxfold: error:") and bad in line
               for line in proc.stderr.splitlines()), proc.stderr
    assert "Traceback" not in proc.stderr
    data = {d["input"]: d for d in json.loads(report.read_text())}
    assert data[bad]["code"] == 2 and data[good[0]]["nodes_after"] == 2
    assert all(data[p]["code"] == 0 for p in good)


def test_directory_input_not_recursive_unless_asked(tmp_path):
    zoo = tmp_path / "zoo"
    write(zoo / "a.onnx")
    write(zoo / "b.onnx", scale=2.0)
    write(zoo / "sub" / "c.onnx", scale=3.0)
    (zoo / "notes.txt").write_text("not a model")
    out = tmp_path / "out"
    proc = run_cli("optimize", str(zoo), "-o", str(out) + "/", "-q")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""  # -q: nothing on success
    assert sorted(os.listdir(out)) == ["a.onnx", "b.onnx"]
    same_outputs(str(zoo / "b.onnx"), str(out / "b.onnx"))

    out2 = tmp_path / "out2"
    proc = run_cli("optimize", str(zoo), "-o", f"{out2}/", "--recursive", "-j", "2")
    assert proc.returncode == 0, proc.stderr
    assert (out2 / "sub" / "c.onnx").is_file() and (out2 / "a.onnx").is_file()
    same_outputs(str(zoo / "sub" / "c.onnx"), str(out2 / "sub" / "c.onnx"))
    assert "3 of 3 models: 3 ok" in proc.stdout


def test_recursive_walk_skips_the_output_directory_inside_it(tmp_path):
    zoo = tmp_path / "zoo"
    write(zoo / "a.onnx")
    write(zoo / "folded" / "old.onnx")  # an earlier run's output: not an input now
    proc = run_cli("optimize", str(zoo), "-r", "-o", str(zoo / "folded"))
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(zoo / "folded")) == ["a.onnx", "old.onnx"]
    assert "1 of 1 models" in proc.stdout


def test_same_basename_from_two_directories_is_refused_up_front(tmp_path):
    first = write(tmp_path / "x" / "model.onnx", scale=1.0)
    second = write(tmp_path / "y" / "model.onnx", scale=2.0)
    other = write(tmp_path / "x" / "other.onnx")
    out = tmp_path / "out"
    proc = run_cli("optimize", other, first, second, "-o", f"{out}/")
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip()
    assert line.startswith("onnxfold: error:") and len(line.splitlines()) == 1
    assert first in line and second in line and "both" in line
    assert not out.exists()  # no job ran, not even the one without a clash; nothing created

    # into an existing directory holding a file of that name: still nothing written
    out.mkdir()
    (out / "model.onnx").write_bytes(b"user data")
    proc = run_cli("optimize", first, second, "-o", str(out))
    assert proc.returncode == 2
    assert (out / "model.onnx").read_bytes() == b"user data"
    assert os.listdir(out) == ["model.onnx"]


def test_output_directory_holding_an_input_is_refused(tmp_path):
    a = write(tmp_path / "a.onnx")
    b = write(tmp_path / "b.onnx")
    before = (tmp_path / "a.onnx").read_bytes()
    proc = run_cli("optimize", a, b, "-o", str(tmp_path))
    assert proc.returncode == 2 and "holds the input" in proc.stderr, proc.stderr
    assert (tmp_path / "a.onnx").read_bytes() == before


def test_the_same_input_twice_and_an_empty_directory_are_bad_input(tmp_path):
    a = write(tmp_path / "in" / "a.onnx")
    proc = run_cli("optimize", a, a, "-o", f"{tmp_path / 'out'}/")
    assert proc.returncode == 2 and "given twice" in proc.stderr
    (tmp_path / "empty").mkdir()
    proc = run_cli("optimize", str(tmp_path / "empty"), "-o", f"{tmp_path / 'out'}/")
    assert proc.returncode == 2 and "no .onnx file" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_one_model_into_a_directory_and_a_missing_input(tmp_path):
    a = write(tmp_path / "in" / "a.onnx")
    out = tmp_path / "out"
    out.mkdir()
    proc = run_cli("optimize", a, "-o", str(out))  # an existing directory: the batch form
    assert proc.returncode == 0, proc.stderr
    same_outputs(a, str(out / "a.onnx"))
    missing = str(tmp_path / "in" / "missing.onnx")
    proc = run_cli("optimize", missing, a, "-o", str(out))
    assert proc.returncode == 2
    assert rows(proc.stdout)[missing][2] == "bad input"


def test_single_model_form_unchanged(tmp_path):
    a = write(tmp_path / "a.onnx")
    out = tmp_path / "a.opt.onnx"
    proc = run_cli("optimize", a, "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "nodes" in proc.stdout and "model " not in proc.stdout  # the report, not a table
    same_outputs(a, str(out))


def test_a_crashed_job_is_an_internal_error_and_the_others_go_on(tmp_path, monkeypatch):
    """A job killed by a signal (a crash in onnxruntime, say) is status 3; its temporary
    files are removed; the other jobs are still run."""
    good = write(tmp_path / "in" / "good.onnx")
    doomed = write(tmp_path / "in" / "doomed.onnx")
    out = tmp_path / "out"
    out.mkdir()
    jobs = batch_plan.plan([doomed, good], str(out)).jobs
    real_start = batch_jobs._start

    def start(command, job, scratch, index, debug):
        if job.source != doomed:
            return real_start(command, job, scratch, index, debug)
        script = ("import os, signal, sys; "
                  f"open(os.path.join({str(out)!r}, '.doomed.onnx.onnxfold-%d-abc.tmp' "
                  "% os.getpid()), 'w').write('half'); os.kill(os.getpid(), signal.SIGKILL)")
        return subprocess.Popen([sys.executable, "-c", script])

    monkeypatch.setattr(batch_jobs, "_start", start)
    command = parse(["optimize", doomed, good, "-o", str(out)]).command
    assert isinstance(command, OptimizeCommand)
    outcomes = batch_jobs.run_jobs(command, jobs, 2)
    assert [o.input for o in outcomes] == [doomed, good]
    assert outcomes[0].code == 3 and outcomes[0].status.startswith("crashed")
    assert outcomes[1].code == 0 and outcomes[1].nodes_after == 2
    assert os.listdir(out) == ["good.onnx"]  # the crashed job's temporary file is gone
    assert batch.worst(o.code for o in outcomes) == 3


@pytest.mark.parametrize(("codes", "expected"), [
    ([0, 0], 0), ([0, 1], 1), ([1, 2, 0], 2), ([2, 3, 1], 3), ([0, -11], 3), ([], 0)])
def test_worst_exit_code(codes, expected):
    assert batch.worst(codes) == expected


@pytest.mark.parametrize("target", ["weights", "output data"])
def test_the_json_summary_never_replaces_a_data_file(tmp_path, target):
    """The batch summary is guarded like the models: ``--json`` naming an input's external
    data, or an output's .data, is refused, never written over (which would leave a broken
    output behind an exit 0)."""
    from onnx.external_data_helper import convert_model_to_external_data

    (tmp_path / "m").mkdir()
    a = make_model([helper.make_node("Add", ["x", "W"], ["y"])], [vinfo("x", shape=[256])],
                   [vinfo("y", shape=[256])], [tensor("W", np.arange(256, dtype=np.float32))])
    convert_model_to_external_data(a, all_tensors_to_one_file=True, location="w.bin",
                                   size_threshold=0)
    onnx.save(a, tmp_path / "m" / "a.onnx")
    onnx.save(small_model(2.0), tmp_path / "b.onnx")
    weights = tmp_path / "m" / "w.bin"
    before = weights.read_bytes()
    json_path = weights if target == "weights" else tmp_path / "out" / "a.onnx.data"
    proc = run_cli("optimize", tmp_path / "m" / "a.onnx", tmp_path / "b.onnx", "-o",
                   f"{tmp_path / 'out'}/", "--external-data", "yes", "--json", json_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("onnxfold: error: ") and "JSON summary" in proc.stderr
    assert weights.read_bytes() == before
    assert not (tmp_path / "out" / "a.onnx").exists()
