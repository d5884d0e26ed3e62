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
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.cli import TIMEOUT, Finished, children_cpu, onnxfold_argv

RELAY = Path(__file__).with_name("peak_rss_relay.py")


def run_measured(args: list, preexec_fn: Callable[[], None] | None = None,
                 timeout: float = TIMEOUT, *, cgroup_procs: str | None = None
                 ) -> tuple[Finished, int]:
    """``python -m onnxfold ARGS``: see :func:`run_relayed`."""
    return run_relayed(onnxfold_argv(*args), preexec_fn, timeout, cgroup_procs=cgroup_procs)


def run_relayed(command: list[str], preexec_fn: Callable[[], None] | None = None,
                timeout: float = TIMEOUT, *, cgroup_procs: str | None = None
                ) -> tuple[Finished, int]:
    """``command`` run by the relay: (how it ended, its peak RSS in bytes; 0 when the relay
    wrote none).
    ``preexec_fn`` runs in the relay (limits set there hold for the command too);
    ``cgroup_procs``: the command joins that cgroup (the relay stays outside it). A child
    still running after ``timeout`` seconds is killed, with the relay, and
    ``subprocess.TimeoutExpired`` raised; whatever ends this call, nothing of the child
    outlives it."""
    before = children_cpu()
    with tempfile.TemporaryDirectory() as tmp:
        peak_file = os.path.join(tmp, "peak")
        argv = [sys.executable, str(RELAY), peak_file,
                *(["--enter", cgroup_procs] if cgroup_procs else []), "--",
                *command]
        with open(os.path.join(tmp, "out"), "w+") as out, \
                open(os.path.join(tmp, "err"), "w+") as err:
            # its own process group: a kill reaches the command behind the relay too
            proc = subprocess.Popen(argv, stdout=out, stderr=err, text=True,
                                    preexec_fn=preexec_fn, start_new_session=True)
            try:
                proc.wait(timeout)
            except BaseException:  # a timeout, an interrupt: the relay is not reaped yet
                _end_group(proc)
                raise
            out.seek(0)
            err.seek(0)
            done = Finished(proc.returncode, out.read(), err.read(), children_cpu() - before)
        peak = int(Path(peak_file).read_text()) if os.path.exists(peak_file) else 0
    return done, peak


def _end_group(proc: subprocess.Popen) -> None:
    """Kill ``proc``'s process group, the relay not reaped yet (its pid, the group's id, is
    then no other's), and wait until every process of it is gone. (A relay that ended by
    itself has reaped its command: nothing of the group is left then.)"""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _running_in_group(proc.pid):
        time.sleep(0.01)  # the command, reparented, may take a moment to die


def _running_in_group(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (a zombie no reaper collects, as under
    a container's init, does not)."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue  # gone meanwhile
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


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
