"""Run a command and report its peak RSS: ``python peak_rss_relay.py PEAK_FILE [--enter
CGROUP_PROCS] -- ARGV...`` writes the peak in bytes (``os.wait4``) into PEAK_FILE and ends as
the command ended (its exit code, or the signal that killed it).

A child forked from a large process counts that process's resident pages in its own peak (Linux
keeps the old memory map's high-water mark across exec, ``vfork`` included): a pytest worker
grown to 600 MiB made a 90 MiB fold measure 614 MiB. Started from this small, fresh interpreter
instead, the command's peak is its own. ``--enter``: the command (not this relay) joins the
cgroup whose ``cgroup.procs`` is named (before it runs), so the relay's memory counts against
that cgroup's limit no more than the test process's does.
Standard library only, run by path: nothing of the repository is imported.
"""

import contextlib
import os
import resource
import signal
import subprocess
import sys


def main(argv: list[str]) -> int:
    peak_file, rest = argv[0], argv[1:]
    procs = None
    if rest[:1] == ["--enter"]:
        procs, rest = rest[1], rest[2:]
    if rest[:1] == ["--"]:
        rest = rest[1:]

    def enter() -> None:
        with open(procs, "w") as f:
            f.write(str(os.getpid()))

    proc = subprocess.Popen(rest, preexec_fn=enter if procs is not None else None)

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):  # (its pid stays its own until reaped)
            os.kill(proc.pid, signum)

    for stop in (signal.SIGTERM, signal.SIGINT):  # a stop for the relay is one for the command
        signal.signal(stop, forward)
    _, status, usage = os.wait4(proc.pid, 0)
    with open(peak_file, "w") as f:
        f.write(str(usage.ru_maxrss * 1024))
    code = os.waitstatus_to_exitcode(status)
    if code < 0:  # killed by a signal: end the same way (no second core dump)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if -code != signal.SIGKILL:  # the one no handler can take
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
