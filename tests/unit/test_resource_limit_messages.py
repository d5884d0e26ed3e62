"""Real resource-limit failures, each produced in a child process, named with their limit."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _child(body: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(body)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_a_thread_the_address_space_cannot_hold():
    said = _child("""
        import resource, threading
        from onnxfold.limits import describe
        with open("/proc/self/status") as f:
            size = next(int(l.split()[1]) for l in f if l.startswith("VmSize")) << 10
        resource.setrlimit(resource.RLIMIT_AS, (size + (1 << 20), resource.RLIM_INFINITY))
        try:
            threading.Thread(target=lambda: None).start()
        except RuntimeError as e:
            print(describe(e))
    """)
    assert said.startswith("cannot start a thread (ulimit -v is "), said


def test_too_many_open_files():
    said = _child("""
        import os, resource
        from onnxfold.limits import describe
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(
            resource.RLIMIT_NOFILE)[1]))
        held = []
        try:
            while True:
                held.append(os.open("/dev/null", os.O_RDONLY))
        except OSError as e:
            print(describe(e))
    """)
    assert said == "too many open files (ulimit -n is 64)"


def test_other_errors_are_not_limits():
    from onnxfold.limits import describe

    assert describe(OSError(2, "No such file or directory")) is None
    assert describe(ValueError("bad")) is None
