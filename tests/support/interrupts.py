"""The command line stopped at a named point of its run (``onnxfold.host.points``) and sent a
signal there (or its directories moved); what it printed and left.

``run_paused`` starts ``python -m onnxfold ARGS`` with ``ONNXFOLD_TEST_PAUSE_AT`` naming the
point, waits until the run is there (its marker file appears), sends the signal, then lets it go
on (removes the marker: a signal deferred at that point acts when the step ends) and waits for
it to end; ``run_acted_on`` does anything else there (swaps a directory under the run).
``leftovers`` lists what onnxfold files a directory holds besides the outputs. The command is
``tests.support.cli``'s (``onnxfold_argv``).
"""

from __future__ import annotations

import glob
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from onnxfold.host.points import PAUSE_AT_ENV, PAUSE_DIR_ENV
from tests.support.cli import onnxfold_argv

TIMEOUT = 120
_OURS = re.compile(r"^\..*\.onnxfold-(\d+-|lock$)")  # temporary files and lock files


def signals_restored() -> None:
    """In the child, before it runs onnxfold: SIGINT, SIGTERM and SIGHUP at their defaults,
    whatever the suite was started with (``nohup`` ignores SIGHUP, a shell's background job
    SIGINT, and an ignored signal stays ignored in the run: these tests send them)."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


@dataclass
class Ending:
    """How a run ended: its exit code and output, and whether it reached the point."""

    code: int
    stdout: str
    stderr: str
    paused: bool  # it reached the point (the signal came there)


def run_paused(args: list, point: str, signum: int, pauses: Path, env: dict | None = None,
               cwd: str | None = None, settle: float = 0.1, held: tuple[str, ...] = ()) -> Ending:
    """Run the CLI until it pauses at ``point``, send ``signum``, let it go on; how it ended.
    ``pauses``: an empty directory for the marker files. A run that ends before reaching the
    point is returned with ``paused`` False (the signal never sent). ``held``: points where
    the run's other processes (a batch's jobs) wait too until the signal has been sent, so
    that however slow the machine, none of them gets past one before it."""
    return run_acted_on(args, point, lambda proc: proc.send_signal(signum), pauses, env, cwd,
                        settle, held)


def run_acted_on(args: list, point: str, act: Callable[[subprocess.Popen], object],
                 pauses: Path, env: dict | None = None, cwd: str | None = None,
                 settle: float = 0.1, held: tuple[str, ...] = ()) -> Ending:
    """Run the CLI until it pauses at ``point``, ``act(process)`` (send a signal, move a
    directory), let it go on; how it ended (``paused`` False: it ended before the point, and
    ``act`` was not called). ``held``: as for :func:`run_paused`."""
    environment = {**os.environ, **(env or {}), PAUSE_AT_ENV: ",".join((point, *held)),
                   PAUSE_DIR_ENV: str(pauses)}
    environment.pop("ONNXFOLD_DEBUG", None)
    proc = subprocess.Popen(onnxfold_argv(*args), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=environment, cwd=cwd,
                            preexec_fn=signals_restored)
    deadline = time.monotonic() + TIMEOUT
    marker = None
    while marker is None and proc.poll() is None and time.monotonic() < deadline:
        found = glob.glob(str(pauses / f"{point}.*"))
        marker = found[0] if found else None
        time.sleep(0.01)
    if marker is not None:
        act(proc)
        time.sleep(settle)  # a signal deferred there waits for the step to go on
        for path in glob.glob(str(pauses / "*")):
            os.unlink(path)
    stdout, stderr = proc.communicate(timeout=TIMEOUT)
    return Ending(proc.returncode, stdout, stderr, marker is not None)


def leftovers(*directories: Path | str) -> list[str]:
    """onnxfold's temporary and lock files in ``directories`` (and below)."""
    found = []
    for directory in directories:
        for root, _, files in os.walk(directory):
            found += [os.path.join(root, name) for name in files if _OURS.match(name)]
    return sorted(found)


def assert_interrupted(ending: Ending, signum: int) -> None:
    """Exit ``128 + signum`` and exactly one line on stderr: ``onnxfold: interrupted``."""
    assert ending.paused, f"the run ended (exit {ending.code}) before the point:\n{ending.stderr}"
    assert ending.code == 128 + signum, f"exit {ending.code}; stderr:\n{ending.stderr}"
    assert ending.stderr == "onnxfold: interrupted\n", ending.stderr


SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGINT": signal.SIGINT, "SIGHUP": signal.SIGHUP}


@dataclass
class Stopped:
    """How a run signalled in the middle of an inference ended: its ending, and the CPU and
    wall seconds it spent from the signal to its exit."""

    ending: Ending
    cpu_after: float
    wall_after: float


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used so far (Linux ``/proc``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_signalled_in_inference(args: list, signum: int, work: Path, env: dict | None = None,
                               running: float = 0.5) -> Stopped:
    """Run the CLI until it starts an onnxruntime inference (the ``inference`` point), let
    it run ``running`` seconds into it, send ``signum``; how it ended, and what it spent
    after the signal (CPU seconds from ``/proc`` then and ``wait4`` at its exit: a loaded
    machine stretches the wall time, not the CPU time). ``work``: an empty directory for the
    marker files and the run's stdout and stderr."""
    pauses = work / "pauses"
    pauses.mkdir()
    environment = {**os.environ, **(env or {}), PAUSE_AT_ENV: "inference",
                   PAUSE_DIR_ENV: str(pauses)}
    environment.pop("ONNXFOLD_DEBUG", None)
    with open(work / "stdout", "w") as out, open(work / "stderr", "w") as err:
        proc = subprocess.Popen(onnxfold_argv(*args), stdout=out, stderr=err,
                                env=environment, text=True, preexec_fn=signals_restored)
    deadline = time.monotonic() + TIMEOUT
    marker = None
    while marker is None and proc.poll() is None and time.monotonic() < deadline:
        found = glob.glob(str(pauses / "inference.*"))
        marker = found[0] if found else None
        time.sleep(0.01)
    cpu_then = wall_then = 0.0
    if marker is not None:
        os.unlink(marker)
        time.sleep(running)
        cpu_then, wall_then = _cpu_seconds(proc.pid), time.monotonic()
        proc.send_signal(signum)
    code, cpu_total = _reaped(proc)
    wall_after = time.monotonic() - wall_then
    ending = Ending(code, (work / "stdout").read_text(), (work / "stderr").read_text(),
                    marker is not None)
    return Stopped(ending, cpu_total - cpu_then, wall_after)


def _reaped(proc: subprocess.Popen) -> tuple[int, float]:
    """Wait for ``proc`` (killed after ``TIMEOUT``); its exit code (-N: signal N, as Popen
    says) and the user + system CPU seconds it used in all."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            proc.kill()
            raise subprocess.TimeoutExpired(proc.args, TIMEOUT)
        time.sleep(0.01)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_utime + usage.ru_stime
