"""Every bad input is one line on stderr and exit 2 (or exit 0 where the input is valid).

Each case runs the real command line in a subprocess on a model built here: numbers beyond
int64 or in non-ASCII digits, a shape contradicting the model, a bad ``--memory-limit``, no
usable temporary directory (single run, ``run`` and a batch, which must leave no output
directory behind), names carrying terminal escape sequences, a float16 tensor that overflows
its ``int32_data``, onnxruntime's start-up warning with a read-only HOME under ``-q``, and a
NaN cast to int64 used as a shape. The environment cases need a private mount namespace
(``unshare -rm``: read-only ``/tmp``, ``/var/tmp``, HOME), skipped where it is unavailable.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

TIMEOUT = 120
HUGE = "99999999999999999999999"  # beyond int64
ESCAPES = "\x1b]0;owned\x07\x1b[31m\x9b2J\u202e\r"  # title, colour, CSI, bidi override, CR


def _save(path: Path, nodes, inputs, outputs, initializers=(), name: str = "g") -> str:
    graph = helper.make_graph(nodes, name, inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return str(path)


def add_one(path: Path) -> str:
    """Y = X + 1 with X float32[2, n]."""
    one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
    return _save(path, [helper.make_node("Add", ["X", "one"], ["Y"], name="add")],
                 [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, "n"])],
                 [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, "n"])], [one])


# -- running the command line, in a mount namespace where the case needs one ------------------
UNSHARE = shutil.which("unshare")


def _namespaces_work() -> bool:
    if UNSHARE is None:
        return False
    probe = subprocess.run([UNSHARE, "-rm", "sh", "-c", "mount --bind /tmp /tmp"],
                           capture_output=True, timeout=30)
    return probe.returncode == 0


NAMESPACES = _namespaces_work()


def read_only(*paths: str) -> str:
    """Shell commands making ``paths`` read-only inside the namespace."""
    return "".join(f"mount --bind {p} {p} && mount -o remount,bind,ro {p} && " for p in paths)


def writable(*paths: str) -> str:
    """Shell commands making ``paths`` writable again under a read-only parent."""
    return "".join(f"mount --bind {p} {p} && mount -o remount,bind,rw {p} && " for p in paths)


@dataclass
class Run:
    """A command line, the environment it adds, and the mounts to set up first."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    mounts: str = ""  # shell commands run (as root of a user namespace) before onnxfold
    cwd: str | None = None


def run_cli(run: Run) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "onnxfold", *run.argv]
    if run.mounts:
        if not NAMESPACES:
            pytest.skip("needs `unshare -rm` (user and mount namespaces)")
        command = [UNSHARE, "-rm", "sh", "-c", run.mounts + 'exec "$@"', "sh", *command]
    env = {**os.environ, **run.env}
    env.pop("ONNXFOLD_DEBUG", None)
    return subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT,
                          env=env, cwd=run.cwd)


# -- the cases --------------------------------------------------------------------------------
@dataclass
class Case:
    """``build(tmp_path)`` -> the run; then the exit code, stderr's line count, and words that
    stderr must (``says``) and must not (``hides``) contain."""

    build: Callable[[Path], Run]
    code: int = 2
    lines: int = 1
    says: tuple[str, ...] = ()
    hides: tuple[str, ...] = ()
    after: Callable[[Path, subprocess.CompletedProcess], None] | None = None


def _optimize(*flags: str) -> Callable[[Path], Run]:
    def build(tmp: Path) -> Run:
        return Run(["optimize", add_one(tmp / "m.onnx"), "-o", str(tmp / "o.onnx"), *flags])
    return build


def _no_temp_directory(*argv: str, batch: bool = False) -> Callable[[Path], Run]:
    """``TMPDIR`` missing, ``/tmp``, ``/var/tmp`` and the current directory read-only: no
    directory ``tempfile`` could use; outputs go to a writable ``out``."""
    def build(tmp: Path) -> Run:
        model = add_one(tmp / "m.onnx")
        (tmp / "out").mkdir()
        np.savez(tmp / "x.npz", X=np.zeros((2, 3), np.float32))
        if batch:
            args = ["optimize", model, add_one(tmp / "m2.onnx"), "-o", str(tmp / "out/many/")]
        else:
            args = [a.format(model=model, tmp=tmp) for a in argv]
        return Run(args, env={"TMPDIR": str(tmp / "missing")}, cwd=str(tmp),
                   mounts=read_only("/tmp", "/var/tmp", str(tmp)) + writable(str(tmp / "out")))
    return build


def _left_no_directory(tmp: Path, proc: subprocess.CompletedProcess) -> None:
    assert not (tmp / "out/many").exists(), "the batch left its output directory behind"
    assert os.listdir(tmp / "out") == []


def _full_temp_directory(tmp: Path) -> Run:
    """``TMPDIR`` a full 64 KiB file system, and no other usable directory."""
    run = _no_temp_directory(batch=True)(tmp)
    full = tmp / "full"
    full.mkdir()
    run.env["TMPDIR"] = str(full)
    run.mounts = (f"mount -t tmpfs -o size=64k tmpfs {full} && "
                  f"(dd if=/dev/zero of={full}/fill bs=4k 2>/dev/null; true) && " + run.mounts)
    return run


CASES: dict[str, Case] = {
    "input-shape beyond int64": Case(_optimize("--input-shape", f"X:2,{HUGE}"),
                                     says=("--input-shape", HUGE)),
    "input-shape dim binding beyond int64": Case(_optimize("--input-shape", f"n={HUGE}"),
                                                 says=("--input-shape",)),
    "dim beyond int64": Case(_optimize("--check", "1", "--dim", f"n={HUGE}"), says=("--dim",)),
    "superscript digit": Case(_optimize("--input-shape", "X:2,\u00b2"), says=("--input-shape",)),
    "input-shape contradicting the model": Case(_optimize("--input-shape", "X:3,4"),
                                                says=("--input-shape", "dim 0")),
    "bad memory-limit": Case(_optimize("--memory-limit", "5Q"), says=("--memory-limit",)),
    "no temp directory, one model": Case(
        _no_temp_directory("optimize", "{model}", "-o", "{tmp}/out/o.onnx", "-q"),
        code=0, lines=0),
    "no temp directory, run": Case(
        _no_temp_directory("run", "{model}", "--inputs", "{tmp}/x.npz"),
        says=("set TMPDIR to a writable directory",)),
    "no temp directory, batch": Case(_no_temp_directory(batch=True),
                                     says=("set TMPDIR to a writable directory",),
                                     after=_left_no_directory),
    "full temp directory, batch": Case(_full_temp_directory,
                                       says=("set TMPDIR to a writable directory",),
                                       after=_left_no_directory),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_line(name: str, tmp_path: Path) -> None:
    case = CASES[name]
    proc = run_cli(case.build(tmp_path))
    lines = proc.stderr.splitlines()
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == case.code, f"exit {proc.returncode}; stderr:\n{proc.stderr}"
    assert len(lines) == case.lines, f"{len(lines)} stderr lines:\n{proc.stderr}"
    if case.code == 2:
        assert lines[0].startswith("onnxfold: error: "), lines[0]
    for word in case.says:
        assert word in proc.stderr, proc.stderr
    for word in case.hides:
        assert word not in proc.stderr + proc.stdout, proc.stderr + proc.stdout
    if case.after is not None:
        case.after(tmp_path, proc)
