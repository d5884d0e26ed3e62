"""The tests' peak-RSS measurement counts the command's own pages, whatever the size of the
process that starts it, and the command ends through the relay as it ended."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from tests.support.measured_child import RELAY, run_measured

MiB = 1 << 20


def test_the_peak_is_the_commands_own_not_the_test_processs(tmp_path):
    grown = np.ones(512 * MiB, np.uint8)  # this process: 512 MiB more, every page touched
    done, peak = run_measured(["--version"])
    assert done.returncode == 0, done.stderr
    assert 10 * MiB < peak < 256 * MiB, f"peak {peak >> 20} MiB"  # a fork of it: > 512 MiB
    assert grown[-1] == 1


def test_the_relay_ends_as_the_command_ended(tmp_path):
    peak = tmp_path / "peak"
    for code, body in ((0, "pass"), (3, "raise SystemExit(3)"),
                       (-9, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")):
        proc = subprocess.run([sys.executable, str(RELAY), str(peak), "--",
                               sys.executable, "-c", body])
        assert proc.returncode == code, (body, proc.returncode)
        assert int(peak.read_text()) > MiB
