"""Runs under a limit on the process's tasks (a pids cgroup's ``pids.max``: what a container's
runtime sets, and what ``ulimit -u`` is for users other than root): no thread is the
machine's limit, never a Ctrl-C and never the model's fault.

With one task (no thread at all) numpy's OpenBLAS cannot start its threads while it loads and
raises SIGINT itself: the run said ``onnxfold: interrupted`` and exited 130. With two tasks
(one thread beside the main one) the fold runs: the I/O threads that cannot start leave their
jobs to the writer, which writes the same file.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.support.models import MODELS

PIDS = Path("/sys/fs/cgroup/pids")  # cgroup v1's pids controller (v2: unified, below)
UNIFIED = Path("/sys/fs/cgroup")
BOUND = 600  # seconds: a bound for a loaded machine, not a timing claim


def _pids_group() -> Path | str:
    """A fresh pids cgroup this process may move a child into, or why none can be made."""
    for root in (PIDS, UNIFIED):  # v1's controller has a hierarchy of its own; v2's, a file
        if not (root / "cgroup.procs").exists() or \
                (root == UNIFIED and "pids" not in _read(root / "cgroup.controllers")):
            continue
        group = root / f"onnxfold-tasks-{uuid.uuid4().hex[:8]}"
        try:
            group.mkdir()
        except OSError as e:
            return f"cannot make a pids cgroup in {root}: {e.strerror}"
        if (group / "pids.max").exists():
            return group
        group.rmdir()  # (v2 without pids enabled for its children)
    return "no pids cgroup controller on this machine"


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _run_with_tasks(group: Path, tasks: int, args: list[str], cwd: Path):
    (group / "pids.max").write_text(str(tasks))
    script = f"echo $$ > {group / 'cgroup.procs'} && exec \"$@\""
    return subprocess.run(["sh", "-c", script, "sh", sys.executable, "-m", "onnxfold", *args],
                          capture_output=True, text=True, timeout=BOUND, cwd=cwd)


@pytest.fixture
def group():
    made = _pids_group()
    if isinstance(made, str):
        pytest.skip(made)
    yield made
    os.rmdir(made)  # (its processes have all ended)


def test_no_thread_while_numpy_loads_is_the_machine_not_an_interrupt(group, tmp_path):
    model = os.path.join(MODELS, "tiny_bert_ts.onnx")
    done = _run_with_tasks(group, 1, ["optimize", model, "-o", "o.onnx"], tmp_path)
    last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    if done.returncode == 0:  # a numpy whose BLAS starts no thread: nothing to show here
        pytest.skip("numpy loaded without a thread on this machine")
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert last.startswith("onnxfold: error: cannot start a thread"), done.stderr
    assert "interrupted" not in done.stderr and "Traceback" not in done.stderr
    assert os.listdir(tmp_path) == []


def test_a_fold_with_no_io_thread_writes_the_same_file(group, tmp_path):
    model = os.path.join(MODELS, "tiny_bert_ts.onnx")
    whole = subprocess.run([sys.executable, "-m", "onnxfold", "optimize", model, "-o",
                            str(tmp_path / "whole.onnx"), "-q"], capture_output=True, text=True,
                           timeout=BOUND)
    assert whole.returncode == 0, whole.stderr
    limited = tmp_path / "limited"
    limited.mkdir()
    done = _run_with_tasks(group, 2, ["optimize", model, "-o", "o.onnx", "-q"], limited)
    assert done.returncode in (0, 2), (done.returncode, done.stderr)
    if done.returncode == 2:  # onnxruntime or a BLAS needed a thread more: said in one line
        assert done.stderr.strip().splitlines()[-1].startswith("onnxfold: error:")
        assert "cannot start a thread" in done.stderr and os.listdir(limited) == []
        return
    assert (limited / "o.onnx").read_bytes() == (tmp_path / "whole.onnx").read_bytes()
    assert os.listdir(limited) == ["o.onnx"]
