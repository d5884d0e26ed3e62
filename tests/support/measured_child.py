"""``python -m onnxfold ARGS`` in a child process set up by ``preexec_fn`` (limits, a cgroup),
its output kept in files rather than pipes and its peak RSS measured with ``os.wait4``: the
command and the result are ``tests.support.cli``'s (``onnxfold_argv``, ``Finished``).
"""

from __future__ import annotations

import os
import resource
import subprocess
import tempfile
import threading
from collections.abc import Callable

from tests.support.cli import TIMEOUT, Finished, onnxfold_argv


def run_measured(args: list, preexec_fn: Callable[[], None], timeout: float
                 ) -> tuple[Finished, int]:
    """(how the child ended, its peak RSS in bytes); the child is killed after ``timeout``
    seconds."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(onnxfold_argv(*args), stdout=out, stderr=err, text=True,
                                preexec_fn=preexec_fn)
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Finished(proc.returncode, out.read(), err.read()), usage.ru_maxrss * 1024


def run_limited(args: list, nofile: int | None = None, address_space: int | None = None,
                timeout: float = TIMEOUT) -> tuple[Finished, int]:
    """``python -m onnxfold ARGS`` under the given limits (open files, address space) ->
    (how it ended, the child's peak RSS in bytes)."""
    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
        if address_space is not None:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    return run_measured(args, limit, timeout)
