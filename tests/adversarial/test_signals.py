"""SIGTERM, SIGINT and SIGHUP at every step of a run: one line, ``128 + N``, nothing left behind.

Each case stops the command line at a named point of its run (``onnxfold.host.points``), sends
the signal there, and lets it go on: it must exit ``128 + N`` with exactly one line,
``onnxfold: interrupted``, on stderr; leave no temporary file and no lock file beside the
output and nothing in ``TMPDIR`` (onnxruntime's own ``.ses`` aside); and leave the output
either as it was (absent, or the old model and data) or complete (a signal that comes while the
model and its data are being renamed into place waits for the last rename). Runs: a 256 MiB
external-data model written to a new output and replaced in place (SIGTERM, what ``timeout``,
CI runners, ``docker stop`` and Kubernetes send, left its temporaries, up to the model's full
size, and its lock; a Ctrl-C at start-up was sometimes lost or a traceback), a batch of two
(the signal passed on to its jobs), and the Python API (a ``KeyboardInterrupt``, its
temporaries gone).
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import onnx
import pytest

from onnxfold.host.points import PAUSE_AT_ENV, PAUSE_DIR_ENV
from tests.support import breadth
from tests.support.cli import onnxfold_argv, run_cli
from tests.support.interrupts import (
    Ending,
    assert_interrupted,
    leftovers,
    run_acted_on,
    run_paused,
)
from tests.support.models import transposed_weight
from tests.support.slow_conv import processes_mentioning

MiB = 1 << 20
SIGNALS = [signal.SIGTERM, signal.SIGINT]
IDS = ["SIGTERM", "SIGINT"]

# where a run can stop, in order; those from "data-rename" on publish what they wrote
BEFORE_SAVE = ["start", "importing", "parsed", "claimed", "loaded", "folding", "folded",
               "saving", "written"]
PUBLISHING = ["data-rename", "model-rename", "old-data-removal"]
AFTER = ["published", "reports"]
RENAMING = ["data-second-name", "variant-removal"]  # the plain data name given back in place
CHECKING = ["check-saved", "check-compared"]


def at_points(points: list[str]) -> list:
    """``(point, signum)`` cases: CI sends SIGTERM and SIGINT at alternate points (every point
    and both signals are tested), the breadth tier both at every point."""
    return [pytest.param(point, signum, id=f"{point}-{name}",
                         marks=() if (index + turn) % 2 == 0 else breadth.MARK)
            for index, point in enumerate(points)
            for turn, (signum, name) in enumerate(zip(SIGNALS, IDS))]


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(16 * MiB), b""):
            digest.update(block)
    return digest.hexdigest()


def data_named_by(model: Path) -> str:
    (location,) = {e.value for t in onnx.load(model, load_external_data=False).graph.initializer
                   for e in t.external_data if e.key == "location"}
    return location


@pytest.fixture(scope="module")
def folded(tmp_path_factory) -> dict[str, str]:
    """The sha256 of the model and the data an uninterrupted run writes."""
    work = tmp_path_factory.mktemp("reference")
    source = transposed_weight(work / "in")
    out = work / "out"
    out.mkdir()
    proc = run_cli("optimize", source, "-o", out / "m.onnx", "--external-data", "yes", "-q")
    assert proc.returncode == 0, proc.stderr
    hashes = {"model": sha256(out / "m.onnx"), "data": sha256(out / "m.onnx.data")}
    shutil.rmtree(work)  # 256 MiB, and only its hashes are needed
    return hashes


def _scratch(tmp_path: Path) -> tuple[Path, dict[str, str], Path]:
    """The run's TMPDIR (checked empty afterwards), the environment naming it, and the
    directory where the run's pause points wait."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    pauses = tmp_path / "pauses"
    pauses.mkdir()
    return tmp, {"TMPDIR": str(tmp)}, pauses


def assert_nothing_left(ending: Ending, *directories: Path, tmp: Path) -> None:
    assert leftovers(*directories) == [], ending.stderr
    assert [p.name for p in tmp.iterdir() if p.name != ".ses"] == []  # .ses: onnxruntime's


@pytest.mark.parametrize(("point", "signum"), at_points(BEFORE_SAVE + PUBLISHING + AFTER))
def test_a_signal_while_writing_a_new_output(tmp_path, folded, point, signum):
    source = transposed_weight(tmp_path / "in")
    out = tmp_path / "out"
    out.mkdir()
    tmp, env, pauses = _scratch(tmp_path)
    ending = run_paused(["optimize", source, "-o", out / "m.onnx", "--external-data", "yes",
                         "--json", out / "report.json"], point, signum, pauses, env)
    assert_interrupted(ending, signum)
    assert_nothing_left(ending, out, tmp_path / "in", tmp=tmp)
    if point in BEFORE_SAVE:
        assert os.listdir(out) == []
    else:  # the signal came as the model was published: it was, whole
        assert sorted(os.listdir(out)) == ["m.onnx", "m.onnx.data"]
        assert sha256(out / "m.onnx") == folded["model"]
        assert sha256(out / "m.onnx.data") == folded["data"]


@pytest.mark.parametrize(("point", "signum"), at_points([
    "claimed", "loaded", "folded", "saving", "written", *PUBLISHING, *RENAMING, "published"]))
def test_a_signal_while_replacing_a_model_in_place(tmp_path, folded, point, signum):
    """``-o`` the input itself: the old model with its old data, or the new with the new."""
    source = transposed_weight(tmp_path / "m")
    old = {"model": sha256(source), "data": sha256(tmp_path / "m" / "m.onnx.data")}
    tmp, env, pauses = _scratch(tmp_path)
    ending = run_paused(["optimize", source, "-o", source, "--external-data", "yes"], point,
                        signum, pauses, env)
    assert_interrupted(ending, signum)
    assert_nothing_left(ending, tmp_path / "m", tmp=tmp)
    data = data_named_by(source)
    assert sorted(os.listdir(tmp_path / "m")) == sorted(["m.onnx", data])
    if point in [*PUBLISHING, *RENAMING, "published"]:  # published whole, its data under
        # its plain name: a signal while the pair is published waits until the data has it
        # (optimum's hub loader fetches the data by that name)
        assert data == "m.onnx.data" and sha256(tmp_path / "m" / data) == folded["data"]
    else:  # the old pair
        assert sha256(source) == old["model"] and data == "m.onnx.data"
        assert sha256(tmp_path / "m" / data) == old["data"]


@pytest.mark.parametrize("signum", SIGNALS, ids=IDS)
@pytest.mark.parametrize("point", CHECKING)
def test_a_signal_while_checking(tmp_path, point, signum):
    """``--check``: the model written beside and compared; nothing published."""
    source = transposed_weight(tmp_path / "in", rows=256, cols=1024)
    out = tmp_path / "out"
    out.mkdir()
    tmp, env, pauses = _scratch(tmp_path)
    ending = run_paused(["optimize", source, "-o", out / "m.onnx", "--check", "1",
                         "--external-data", "yes"], point, signum, pauses, env)
    assert_interrupted(ending, signum)
    assert_nothing_left(ending, out, tmp=tmp)
    assert os.listdir(out) == []


def _batch_inputs(tmp_path: Path) -> list[Path]:
    return [transposed_weight(tmp_path / "in" / d, f"{d}.onnx", rows=1024, cols=8192)
            for d in ("a", "b")]


@pytest.mark.parametrize(("point", "signum"), at_points([
    "batch-planned", "batch-running", "claimed", "loaded", "folding", "saving", "written",
    "model-rename", "published"]))
def test_a_signal_to_a_batch_reaches_its_jobs(tmp_path, point, signum):
    """The batch passes the signal on to its jobs (each leads its own session, out of the
    terminal's reach), waits for them, and removes what they left; an output a job had
    begun to publish is whole."""
    inputs = _batch_inputs(tmp_path)
    out = tmp_path / "out"
    tmp, env, pauses = _scratch(tmp_path)
    # while the batch waits at its own points, its jobs are held before they save: on a slow
    # machine they would otherwise finish before the signal comes (a job done is published)
    held = ("saving",) if point.startswith("batch-") else ()
    ending = run_paused(["optimize", *inputs, "-o", f"{out}/", "--external-data", "yes",
                         "-j", "2"], point, signum, pauses, env, held=held)
    assert_interrupted(ending, signum)
    assert processes_mentioning(str(tmp_path)) == []
    assert_nothing_left(ending, tmp_path, tmp=tmp)
    written = sorted(os.listdir(out)) if out.exists() else []
    assert len(written) % 2 == 0, written  # models with their data, or nothing
    for name in written:
        if name.endswith(".onnx"):
            assert data_named_by(out / name) in written
    if point not in ("model-rename", "published"):
        assert written == [] and not out.exists()  # the directory it made is gone too


@pytest.mark.parametrize("point", ["claimed", "written"])
def test_a_hangup_ends_a_run_as_the_others_do(tmp_path, point):
    """SIGHUP: the terminal went away."""
    source = transposed_weight(tmp_path / "in", rows=256, cols=1024)
    out = tmp_path / "out"
    out.mkdir()
    tmp, env, pauses = _scratch(tmp_path)
    ending = run_paused(["optimize", source, "-o", out / "m.onnx"], point, signal.SIGHUP,
                        pauses, env)
    assert_interrupted(ending, signal.SIGHUP)
    assert_nothing_left(ending, out, tmp=tmp)
    assert os.listdir(out) == []


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGINT], ids=["SIGHUP", "SIGINT"])
def test_a_signal_ignored_at_start_stays_ignored(tmp_path, signum):
    """``nohup`` (SIGHUP), a job a script started in the background (SIGINT): a run started
    with the signal ignored is not ended by it."""
    source = transposed_weight(tmp_path / "in", rows=256, cols=1024)
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, PAUSE_AT_ENV: "claimed", PAUSE_DIR_ENV: str(tmp_path)}
    proc = subprocess.Popen(onnxfold_argv("optimize", source, "-o", out / "m.onnx", "-q"),
                            env=env, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signum, signal.SIG_IGN))
    deadline = time.monotonic() + 120
    while not glob.glob(str(tmp_path / "claimed.*")) and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signum)
    for marker in glob.glob(str(tmp_path / "claimed.*")):
        os.unlink(marker)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0 and stderr == "", stderr
    assert sorted(os.listdir(out)) == ["m.onnx", "m.onnx.data"]  # as the input: external data


API_RUN = """
import sys
import onnxfold
try:
    result = onnxfold.optimize(sys.argv[1])
    onnxfold.save_model(result.model, sys.argv[2], external_data=True)
except KeyboardInterrupt:
    sys.exit(42)
"""


@pytest.mark.parametrize("point", ["folding", "saving", "written", *PUBLISHING])
def test_ctrl_c_in_the_python_api_is_a_keyboard_interrupt_that_leaves_nothing(tmp_path,
                                                                                  point):
    """The API takes no signal over: Ctrl-C raises KeyboardInterrupt where it lands, and the
    save removes its temporary files and lock on the way out."""
    source = transposed_weight(tmp_path / "in", rows=1024, cols=8192)
    out = tmp_path / "out"
    out.mkdir()
    pauses = tmp_path / "pauses"
    pauses.mkdir()
    env = {**os.environ, PAUSE_AT_ENV: point, PAUSE_DIR_ENV: str(pauses)}
    proc = subprocess.Popen([sys.executable, "-c", API_RUN, source, out / "m.onnx"], env=env,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not os.listdir(pauses) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert os.listdir(pauses), "the run never reached the point"
    proc.send_signal(signal.SIGINT)
    time.sleep(0.1)
    shutil.rmtree(pauses)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 42, stderr
    assert leftovers(out, tmp_path / "in") == []
    written = sorted(os.listdir(out))
    if point == "old-data-removal":  # after the model's rename: published, whole
        assert written == ["m.onnx", "m.onnx.data"]
    else:  # before it (the renamed data too is removed)
        assert written == []


def _embedded(directory: Path) -> Path:
    """A 20 MiB model with its weight inside: big enough that the output's temporary file is
    made and warmed before the model is even read (``onnxfold.io.prefill``)."""
    directory.mkdir()
    onnx.save(onnx.load(transposed_weight(directory / "x", rows=2048, cols=2560)),
              directory / "m.onnx")
    shutil.rmtree(directory / "x")
    return directory / "m.onnx"


@pytest.mark.parametrize(("point", "signum"), at_points(["claimed", "folding", "saving"]))
def test_a_signal_while_the_output_is_prefilled(tmp_path, point, signum):
    source = _embedded(tmp_path / "in")
    out = tmp_path / "out"
    out.mkdir()
    tmp, env, pauses = _scratch(tmp_path)
    seen: list[str] = []

    def look_then_signal(proc: subprocess.Popen) -> None:
        seen.extend(leftovers(out))
        proc.send_signal(signum)

    ending = run_acted_on(["optimize", source, "-o", out / "m.onnx"], point, look_then_signal,
                          pauses, env)
    temporaries = [p for p in seen if not p.endswith("-lock")]
    assert len(temporaries) == 1, seen  # the output's temporary file, being filled
    assert_interrupted(ending, signum)
    assert_nothing_left(ending, out, tmp=tmp)
    assert os.listdir(out) == []


def _waiting_for_a_lock(pid: int) -> bool:
    """Whether process ``pid`` waits for a ``flock`` (``/proc/locks`` lists it with ``->``)."""
    with open("/proc/locks") as f:
        return any("->" in line and f" {pid} " in line for line in f)


@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="reads /proc/locks")
@pytest.mark.parametrize("signum", SIGNALS, ids=IDS)
def test_a_signal_while_waiting_for_another_runs_lock(tmp_path, signum):
    """Another run holds the output's lock: the waiting run ends at once, and leaves that
    run's lock file (and nothing of its own)."""
    import fcntl

    from onnxfold.io.publication import lock_path

    source = transposed_weight(tmp_path / "in", rows=256, cols=1024)
    out = tmp_path / "out"
    out.mkdir()
    lock = lock_path(str(out / "m.onnx"))
    held = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        proc = subprocess.Popen(onnxfold_argv("optimize", source, "-o", out / "m.onnx"),
                                stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while not _waiting_for_a_lock(proc.pid):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 128 + signum and stderr == "onnxfold: interrupted\n", stderr
        assert os.listdir(out) == [os.path.basename(lock)]  # the holder's, still there
    finally:
        os.unlink(lock)
        os.close(held)
