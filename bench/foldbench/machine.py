"""What the header says about the machine, the interpreters and their floor RSS."""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from foldbench.runner import run_child


def package_version(pkg: str) -> str:
    """The installed version of ``pkg``, or ``not installed``."""
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "not installed"


def cpu_model(default: str) -> str:
    """The CPU's model name from /proc/cpuinfo, or ``default``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return default


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


def machine_info(tmp: Path, timeout: float, peers_python: str,
                 probe: dict[str, Any]) -> dict[str, Any]:
    """CPU, memory, versions, and the RSS of a trivial child of each interpreter (the floor)."""
    cpu = cpu_model("unknown")
    mem_kib = total_memory_kib()

    floor = run_child([sys.executable, "-c", "pass"], tmp / "floor", timeout)
    peers_floor = run_child([peers_python, "-c", "pass"], tmp / "floor_peers", timeout)
    return {
        "nproc": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "mem_total_gib": round(mem_kib / (1 << 20), 1),
        "cpu": cpu,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "onnxruntime": package_version("onnxruntime"),
        "onnx": package_version("onnx"),
        "numpy": package_version("numpy"),
        "onnxfold": package_version("onnxfold"),
        "rss_floor_mib": round(floor.maxrss_mib, 1),
        "peers_python": peers_python,
        "peers_rss_floor_mib": round(peers_floor.maxrss_mib, 1),
        "peers_versions": {m: (v["version"] if v.get("ok") else "not installed")
                           for m, v in probe.items()},
    }
