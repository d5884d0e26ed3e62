"""The one way tests run onnxfold's command line (or any Python child) in a subprocess, the
exit checks they share, and the smallest model to run it on.

``run_cli("optimize", src, "-o", out)`` runs ``python -m onnxfold ARGS`` (paths as they are) and
returns a ``Finished``: (returncode, stdout, stderr), read by name or unpacked. ``run_python``
runs ``python ARGS`` the same way (``"-c", code`` or a script), ``run_command`` any command
(the command line under ``unshare``, say). A test that must hold the
process itself (a signal, a limit, a peak RSS: ``interrupts``, ``measured_child``) builds its
command with ``onnxfold_argv``. The checks take a ``Finished``: ``assert_ok`` (exit 0, no
traceback), ``assert_one_error_line`` (exit 2 or as given, one ``onnxfold: error: ...`` line
holding the given fragments, no traceback), ``assert_no_traceback``. ``run_on_terminal`` runs
the command line with stderr on a pseudo-terminal.
"""

from __future__ import annotations

import os
import pty
import resource
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from onnx import TensorProto, helper

from tests.support import zygote

TIMEOUT = 300  # a run that takes longer fails its test (subprocess.TimeoutExpired)
REFUSAL_TIMEOUT = 60  # a hostile input is refused (or folded) within this


class Finished(NamedTuple):
    """How a child ended: its exit code and what it wrote, as text, and the CPU seconds (user
    + system) it and the children it waited for used: what a test bounds where a wall-clock
    bound would fail on a loaded machine."""

    returncode: int
    stdout: str
    stderr: str
    cpu: float = 0.0


def children_cpu() -> float:
    """User + system CPU seconds of this process's reaped children so far (``cpu`` of a run
    is the difference around it: tests run one child at a time per process)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def onnxfold_argv(*args: object) -> list[str]:
    """The command ``python -m onnxfold ARGS`` (each argument as ``str``), for a test that
    starts the process itself."""
    return [sys.executable, "-m", "onnxfold", *map(str, args)]


def run_command(command: Sequence[object], cwd: str | os.PathLike | None = None,
                env: Mapping[str, str] | None = None, timeout: float = TIMEOUT,
                input: str | None = None) -> Finished:
    """Run ``command`` (each part as ``str``), its output captured as text; ``input``, if
    given, is written to its stdin. ``run_cli`` and ``run_python`` are this."""
    before = children_cpu()
    proc = subprocess.run([str(part) for part in command], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=env, input=input)
    return Finished(proc.returncode, proc.stdout, proc.stderr, children_cpu() - before)


def run_python(*args: object, cwd: str | os.PathLike | None = None,
               env: Mapping[str, str] | None = None, timeout: float = TIMEOUT,
               input: str | None = None) -> Finished:
    """``python ARGS`` (``"-c", code, ...``, a script, ``"-m", module``): see ``run_command``."""
    return run_command([sys.executable, *args], cwd=cwd, env=env, timeout=timeout, input=input)


def run_cli(*args: object, cwd: str | os.PathLike | None = None,
            env: Mapping[str, str] | None = None, timeout: float = TIMEOUT,
            input: str | None = None) -> Finished:
    """``python -m onnxfold ARGS`` (paths as they are): see ``run_command``. Forked from the
    worker's zygote (``tests/support/zygote.py``: the imports done once) where the run would
    inherit what the zygote has; spawned otherwise, and everywhere with
    ``ONNXFOLD_TEST_SPAWN=1``."""
    if env is None:
        forked = zygote.run([str(a) for a in args], cwd, timeout, input)
        if forked is not None:
            return forked
    return run_command(onnxfold_argv(*args), cwd=cwd, env=env, timeout=timeout, input=input)


def assert_no_traceback(done: Finished) -> None:
    """No Python traceback on stderr, whatever the exit code."""
    last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    assert "Traceback" not in done.stderr, \
        f"exit {done.returncode}, traceback: {last}\n{done.stderr}"


def assert_ok(done: Finished) -> None:
    """Exit 0, no traceback."""
    assert_no_traceback(done)
    assert done.returncode == 0, f"exit {done.returncode}; stderr:\n{done.stderr}"


def assert_one_error_line(done: Finished, *fragments: str, code: int = 2) -> None:
    """Exit ``code``; stderr is exactly one line ``onnxfold: error: ...`` holding every
    fragment; no traceback."""
    assert_no_traceback(done)
    assert done.returncode == code, \
        f"exit {done.returncode} (want {code}); stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, f"stderr is {len(lines)} lines:\n{done.stderr}"
    assert lines[0].startswith("onnxfold: error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def save_add_model(path: Path) -> Path:
    """y = x + [1, 2] (float32[2]), saved to ``path``."""
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "c"], ["y"])], "t",
        [helper.make_tensor_value_info("x", f, [2])], [helper.make_tensor_value_info("y", f, [2])],
        [helper.make_tensor("c", f, [2], [1.0, 2.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return path


def run_on_terminal(args: list[str], env=None, cwd=None, timeout: float = TIMEOUT
                    ) -> tuple[int, str, str]:
    """Run the CLI with stderr on a pseudo-terminal: (exit code, stdout, what the terminal
    got)."""
    master, slave = pty.openpty()
    chunks = []
    try:
        proc = subprocess.Popen(onnxfold_argv(*args), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=slave, env=env, cwd=cwd)
        os.close(slave)
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: the child closed its end
                break
            if not data:
                break
            chunks.append(data)
        assert proc.stdout is not None
        stdout = proc.stdout.read().decode()
        code = proc.wait(timeout=timeout)
    finally:
        os.close(master)
    return code, stdout, b"".join(chunks).decode(errors="replace")
