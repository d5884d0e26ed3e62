"""The CLI as a subprocess, read as (exit code, stdout, stderr), and the exit checks every
hostile-input test makes: no traceback, one ``onnxfold: error:`` line, or success.

``tests.support.cli`` has the CompletedProcess form the CLI tier uses.
"""

from __future__ import annotations

from tests.support import cli

TIMEOUT = 60


def run_cli(args, cwd=None, timeout=TIMEOUT, env=None):
    """``python -m onnxfold ARGS`` -> (exit code, stdout, stderr)."""
    proc = cli.run_cli(*args, cwd=cwd, env=env, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def assert_no_traceback(code, stderr):
    """No Python traceback on stderr, whatever the exit code."""
    last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    assert "Traceback" not in stderr, f"exit {code}, traceback: {last}\n{stderr}"


def assert_one_line_error(code, stderr, expected=2):
    """Exit ``expected``; stderr is one line ``onnxfold: error: ...``, no traceback."""
    assert_no_traceback(code, stderr)
    lines = stderr.strip().splitlines()
    assert code == expected, f"exit {code} (want {expected}); stderr:\n{stderr}"
    assert len(lines) == 1, f"stderr is {len(lines)} lines:\n{stderr}"
    assert lines[0].startswith("onnxfold: error: "), lines[0]


def assert_ok(code, stderr):
    """Exit 0, no traceback."""
    assert_no_traceback(code, stderr)
    assert code == 0, f"exit {code}; stderr:\n{stderr}"
