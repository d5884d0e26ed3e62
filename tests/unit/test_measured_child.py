"""The tests' peak-RSS measurement counts the command's own pages, whatever the size of the
process that starts it, and the command ends through the relay as it ended."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.support.measured_child import RELAY, run_measured, run_relayed

MiB = 1 << 20


def test_the_peak_is_the_commands_own_not_the_test_processs(tmp_path):
    grown = np.ones(512 * MiB, np.uint8)  # this process: 512 MiB more, every page touched
    done, peak = run_measured(["--version"])
    assert done.returncode == 0, done.stderr
    assert 10 * MiB < peak < 256 * MiB, f"peak {peak >> 20} MiB"  # a fork of it: > 512 MiB
    assert grown[-1] == 1


@pytest.mark.parametrize("code, body", [
    (0, "pass"), (3, "raise SystemExit(3)"),
    (-9, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"),
    (-15, "import os, signal; os.kill(os.getpid(), signal.SIGTERM)")])
def test_the_relay_ends_as_the_command_ended(tmp_path, code, body):
    peak = tmp_path / "peak"
    proc = subprocess.run([sys.executable, str(RELAY), str(peak), "--",
                           sys.executable, "-c", body])
    assert proc.returncode == code, proc.returncode
    assert int(peak.read_text()) > MiB


def test_a_child_past_its_timeout_is_killed_with_what_it_started(tmp_path):
    pid_file = tmp_path / "pid"
    starts_a_sleeper = (f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, "
                        f"'-c', 'import time; time.sleep(60)']); "
                        f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    with pytest.raises(subprocess.TimeoutExpired):  # at 3 s, not after the 60 s sleep:
        run_relayed([sys.executable, "-c", starts_a_sleeper], timeout=3)  # proc.wait's
    sleeper = Path(f"/proc/{int(pid_file.read_text())}/stat")
    # gone, or a zombie a container's init may never reap: not left sleeping
    assert not sleeper.exists() or sleeper.read_text().rsplit(")", 1)[1].split()[0] == "Z"
