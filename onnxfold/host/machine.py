"""What this machine is, for a measurement to state: its CPU's model name, and how many cores
this process may run on.

A latency (``--latency``) or a benchmark means little without the processor it was measured
on; Linux names it in /proc/cpuinfo, elsewhere ``platform`` may. onnxruntime starts one thread
per intra-op thread asked for, each with its own stack and buffers: 100,000 of them grew a
process past 16 GB (and crashed it), so thread counts are bounded by :func:`usable_cores`.
"""

from __future__ import annotations

import os
import platform


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity: a container's cpuset), else the
    host's, at least 1."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):
        return max(os.cpu_count() or 1, 1)


def checked_threads(threads: int, what: str) -> int:
    """``threads`` when it is between 1 and :func:`usable_cores`; else ValueError saying so
    (``what``: the setting, for the message)."""
    cores = usable_cores()
    if not 1 <= threads <= cores:
        raise ValueError(f"{what} {threads}: between 1 and the {cores} core"
                         f"{'s' if cores != 1 else ''} this process may run on")
    return threads


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
