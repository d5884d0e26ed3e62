"""``python -m onnxfold ARGS`` in a child process set up by ``preexec_fn`` (limits), or inside a
memory cgroup, its output kept in files rather than pipes and its peak RSS measured by
``peak_rss_relay.py`` (a child forked from a large test process would count that process's
pages in its own peak): the command and the result are ``tests.support.cli``'s
(``onnxfold_argv``, ``Finished``).
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from tests.support.cli import TIMEOUT, Finished, onnxfold_argv

RELAY = Path(__file__).with_name("peak_rss_relay.py")


def run_measured(args: list, preexec_fn: Callable[[], None] | None = None,
                 timeout: float = TIMEOUT, *, cgroup_procs: str | None = None
                 ) -> tuple[Finished, int]:
    """(how the child ended, its peak RSS in bytes; 0 when it was killed after ``timeout``
    seconds). ``preexec_fn`` runs in the relay (limits set there hold for the command too);
    ``cgroup_procs``: the command joins that cgroup (the relay stays outside it)."""
    with tempfile.TemporaryDirectory() as tmp:
        peak_file = os.path.join(tmp, "peak")
        argv = [sys.executable, str(RELAY), peak_file,
                *(["--enter", cgroup_procs] if cgroup_procs else []), "--",
                *onnxfold_argv(*args)]
        with open(os.path.join(tmp, "out"), "w+") as out, \
                open(os.path.join(tmp, "err"), "w+") as err:
            proc = subprocess.Popen(argv, stdout=out, stderr=err, text=True,
                                    preexec_fn=preexec_fn, start_new_session=True)
            timer = threading.Timer(timeout, lambda: _kill_group(proc.pid))
            timer.start()
            try:
                proc.wait()
            finally:
                timer.cancel()
            _kill_group(proc.pid)  # nothing of it outlives it
            out.seek(0)
            err.seek(0)
            done = Finished(proc.returncode, out.read(), err.read())
        peak = int(Path(peak_file).read_text()) if os.path.exists(peak_file) else 0
    return done, peak


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


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
