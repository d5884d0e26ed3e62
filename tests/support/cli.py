"""The command line as a subprocess (on a pipe or on a
pseudo-terminal), the one-line error it must print, and the smallest model to run it on.

``tests.support.cli_exit`` has the (exit code, stdout, stderr) form the adversarial tier uses.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

from onnx import TensorProto, helper


def run_cli(*args: str | os.PathLike, cwd=None, env=None, timeout: float = 300
            ) -> subprocess.CompletedProcess:
    """``python -m onnxfold ARGS`` (paths as they are), its output captured as text."""
    return subprocess.run([sys.executable, "-m", "onnxfold", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd, env=env)


def assert_one_error_line(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    """Exit 2 with exactly one ``onnxfold: error:`` line holding every fragment."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("onnxfold: error:"), proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert "Traceback" not in proc.stderr


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


def run_on_terminal(args: list[str], env=None, cwd=None, timeout: float = 300
                    ) -> tuple[int, str, str]:
    """Run the CLI with stderr on a pseudo-terminal: (exit code, stdout, what the terminal
    got)."""
    master, slave = pty.openpty()
    chunks = []
    try:
        proc = subprocess.Popen([sys.executable, "-m", "onnxfold", *args],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave,
                                env=env, cwd=cwd)
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
