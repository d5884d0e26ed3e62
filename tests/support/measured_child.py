"""``python -m onnxfold ARGS`` in a child process set up by ``preexec_fn`` (limits, a cgroup),
its output kept in files rather than pipes and its peak RSS measured with ``os.wait4``.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable


def run_measured(args: list[str], preexec_fn: Callable[[], None], timeout: float
                 ) -> tuple[int, str, str, int]:
    """(exit code, stdout, stderr, the child's peak RSS in bytes); the child is killed after
    ``timeout`` seconds."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "onnxfold", *args], stdout=out,
                                stderr=err, text=True, preexec_fn=preexec_fn)
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read(), err.read(), usage.ru_maxrss * 1024


def run_limited(args: list[str], nofile: int | None = None, address_space: int | None = None,
                timeout: float = 300) -> tuple[int, str, str, int]:
    """``python -m onnxfold ARGS`` under the given limits (open files, address space) ->
    (exit code, stdout, stderr, the child's peak RSS in bytes)."""
    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
        if address_space is not None:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    return run_measured(args, limit, timeout)
