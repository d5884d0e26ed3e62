"""One measured child process: wall time, user/system CPU and peak RSS (``os.wait4``), timeout."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent.parent

# Runs one of the _child_* functions of foldbench.checks in a fresh interpreter:
# argv = [bench dir, func, args...].
HELPER_CODE = (
    "import sys; sys.path.insert(0, sys.argv[1]); from foldbench import checks; "
    "getattr(checks, sys.argv[2])(*sys.argv[3:])"
)


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


def run_child(cmd: list[str], log_stem: Path, timeout: float,
              cwd: Path | None = None) -> ChildRun:
    """Run ``cmd``; time it and read its peak RSS with ``os.wait4`` (stdout/err go to files).

    The child gets its own process group, which is killed with SIGKILL after ``timeout`` s.
    It may write Python's bytecode caches, as a user's interpreter does: a development shell's
    ``PYTHONDONTWRITEBYTECODE`` would otherwise make every run compile each module edited
    since its cache was last written.
    """
    out_path = log_stem.with_suffix(".out")
    err_path = log_stem.with_suffix(".err")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                cwd=cwd, start_new_session=True, env=env)
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


def run_helper(func: str, args: list[str], log_stem: Path, timeout: float) -> dict[str, Any]:
    """Run ``foldbench.checks.<func>(*args, json_out)`` in a child; return the JSON it wrote."""
    json_out = log_stem.with_suffix(".json")
    json_out.unlink(missing_ok=True)
    cmd = [sys.executable, "-c", HELPER_CODE, str(BENCH_DIR), func, *args, str(json_out)]
    run = run_child(cmd, log_stem, timeout)
    if run.rc != 0 or not json_out.exists():
        why = "timed out" if run.timed_out else f"exit {run.rc}"
        return {"error": f"{func} {why}: {run.stderr_tail[-600:]}"}
    return json.loads(json_out.read_text())


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

