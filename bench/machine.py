"""The facts a result table is dated with: the CPU, the memory and the package versions."""

from __future__ import annotations

import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

from onnxfold.host.machine import cpu_model


def package_version(pkg: str) -> str:
    """The installed version of ``pkg``, or ``not installed``."""
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "not installed"


def total_memory_kib() -> int:
    """The machine's memory (``MemTotal`` of /proc/meminfo) in KiB, 0 where unknown."""
    mem_kib = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    except OSError:
        pass
    return mem_kib


def describe(packages: tuple[str, ...]) -> dict[str, Any]:
    """CPU, cores, memory, platform, Python and the versions of ``packages``."""
    return {"cpu": cpu_model(), "cores": os.cpu_count(),
            "mem_gib": round(total_memory_kib() / (1 << 20), 1), "platform": platform.platform(),
            "python": platform.python_version(),
            "versions": {dist: package_version(dist) for dist in packages}}
