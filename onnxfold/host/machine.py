"""What this machine is, for a measurement to state: its CPU's model name.

A latency (``--latency``) or a benchmark means little without the processor it was measured
on; Linux names it in /proc/cpuinfo, elsewhere ``platform`` may.
"""

from __future__ import annotations

import platform


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo's ``model name``), else what ``platform`` says,
    else ``unknown``."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"
