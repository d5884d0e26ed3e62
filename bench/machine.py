"""The facts a result table is dated with: the CPU, the memory and the package versions."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import UTC, datetime
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


def dated(command: str, packages: tuple[str, ...], more_versions: str = "",
          memory: bool = True) -> str:
    """The line a result table is dated with: ```command```, the time (UTC), the commit, the
    CPU, cores (and memory), and the versions of ``packages`` (then ``more_versions``)."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent,
                            text=True, capture_output=True).stdout.strip()
    info = describe(packages)
    versions = ", ".join(f"{k} {v}" for k, v in info["versions"].items()) + more_versions
    machine = f"{info['cpu']}, {info['cores']} cores" + \
        (f", {info['mem_gib']} GiB" if memory else "")
    return (f"`{command}`, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, commit {commit or '?'}; "
            f"{machine}; {versions}.")
