"""One measured child process (wall, CPU, peak RSS via ``os.wait4``, timeout) and the
statistics every benchmark reports over several runs (medians, same-run ratios).

Each tool runs as its own child process so that its peak RSS is its own (``ru_maxrss`` of the
reaped child) and its wall time includes what a user waits for: interpreter start, imports,
reading and writing the model.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import signal
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass
class ChildRun:
    """One measured child process."""

    rc: int
    wall_s: float
    user_s: float
    sys_s: float
    maxrss_mib: float
    timed_out: bool
    stderr_tail: str
    error_line: str


_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Fault)\b")


def first_error_line(text: str, rc: int) -> str:
    """The first line of ``text`` (a child's stderr) that says what went wrong."""
    lines = text.splitlines()
    picked = ""
    for i, line in enumerate(lines):
        s = line.strip()
        if not s:
            continue
        if s.startswith("Traceback (most recent call last)"):
            # the exception line is the first unindented line after the frames
            exc = next((x.strip() for x in lines[i + 1:] if x.strip() and not x[:1].isspace()),
                       "")
            if exc:
                picked = exc
                break
        elif s.startswith("[E]") or _EXC_LINE.match(s) or s.startswith("terminate called"):
            picked = s
            break
    if not picked:
        picked = next((x.strip() for x in reversed(lines) if x.strip()), "")
    if rc < 0:
        try:
            sig = signal.Signals(-rc).name
        except ValueError:
            sig = f"signal {-rc}"
        picked = f"killed by {sig}" + (" (out of memory?)" if sig == "SIGKILL" else "") + \
            (f"; {picked}" if picked else "")
    elif not picked:
        picked = f"exit {rc}"
    return " ".join(picked.split())[:300]


def _limiter(rlimits: dict[int, int]) -> Callable[[], None]:
    """A ``preexec_fn`` that sets each resource's soft and hard limit in the child."""
    def apply() -> None:
        for which, value in rlimits.items():
            resource.setrlimit(which, (value, value))
    return apply


def run_child(cmd: list[str], log_stem: Path, timeout: float, cwd: Path | None = None,
              env: dict[str, str] | None = None,
              rlimits: dict[int, int] | None = None) -> ChildRun:
    """Run ``cmd``; time it and read its peak RSS with ``os.wait4`` (stdout/err go to files).

    The child gets its own process group, which is killed with SIGKILL after ``timeout`` s.
    It may write Python's bytecode caches, as a user's interpreter does: a development shell's
    ``PYTHONDONTWRITEBYTECODE`` would otherwise make every run compile each module edited
    since its cache was last written. ``env`` replaces the environment (default: this one's);
    ``rlimits`` (``resource.RLIMIT_*`` -> soft and hard limit) bound the child, as ``ulimit``.
    """
    out_path = log_stem.with_suffix(".out")
    err_path = log_stem.with_suffix(".err")
    env = {k: v for k, v in (os.environ if env is None else env).items()
           if k != "PYTHONDONTWRITEBYTECODE"}
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                cwd=cwd, start_new_session=True, env=env,
                                preexec_fn=_limiter(rlimits) if rlimits else None)
        done = threading.Event()
        timed_out = threading.Event()

        def kill() -> None:
            if not done.is_set():
                timed_out.set()
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            done.set()
            timer.cancel()
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4, tell Popen
    with contextlib.suppress(ProcessLookupError, PermissionError):  # stragglers (none expected)
        os.killpg(proc.pid, signal.SIGKILL)
    text = err_path.read_text(errors="replace")
    tail = text.strip().splitlines()[-8:]
    err_line = first_error_line(text, proc.returncode) if proc.returncode != 0 else ""
    return ChildRun(rc=proc.returncode, wall_s=wall, user_s=usage.ru_utime,
                    sys_s=usage.ru_stime, maxrss_mib=usage.ru_maxrss / 1024,
                    timed_out=timed_out.is_set(), stderr_tail="\n".join(tail),
                    error_line=err_line)


def run_status(runs: list[ChildRun], output: Path, timeout: float) -> tuple[str, str | None]:
    """(status, error) of a tool from its runs: ok / crashed: ... / timeout (N s)."""
    for x in runs:
        if x.timed_out:
            return f"timeout ({timeout:g} s)", f"timed out after {timeout:g} s"
        if x.rc != 0:
            return f"crashed: {x.error_line}", f"exit {x.rc}: {x.stderr_tail}"
    if not output.exists():
        return "crashed: exit 0 but no output written", "no output written"
    return "ok", None


def median(values: list[float]) -> float:
    """The median of ``values`` (the middle run: robust to one slow run on a shared machine)."""
    return statistics.median(values)


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``, or None when either is missing or the denominator is 0."""
    if numerator is None or not denominator:
        return None
    return numerator / denominator
