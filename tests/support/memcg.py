"""A memory cgroup for one child process, for the tests that run the CLI under a memory limit.

The cgroup is created inside this process's own memory cgroup (so the child stays within every
limit above it), under cgroup v2 (``memory.max``, ``memory.swap.max`` 0) or v1
(``memory.limit_in_bytes``); the child is moved into it by the peak-RSS relay before it runs
(``measured_child``). :func:`unavailable` says why none can be made here (the test skips with
that reason).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from dataclasses import dataclass

import pytest

from onnxfold.host.memory_limits import hierarchies
from tests.support.measured_child import run_measured


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str
    oom_kills: int
    peak: int | None  # the cgroup's peak usage in bytes, where the kernel reports it
    max_rss: int  # the child's peak resident set in bytes (tests.support.measured_child)


class MemoryCgroup:
    def __init__(self, directory: str, version: int) -> None:
        self.directory, self.version = directory, version

    def _write(self, name: str, value: str) -> None:
        with open(os.path.join(self.directory, name), "w") as f:
            f.write(value)

    def _read(self, name: str) -> str | None:
        try:
            with open(os.path.join(self.directory, name)) as f:
                return f.read()
        except OSError:
            return None

    def limit(self, nbytes: int) -> None:
        if self.version == 2:
            self._write("memory.max", str(nbytes))
            if os.path.exists(os.path.join(self.directory, "memory.swap.max")):
                self._write("memory.swap.max", "0")
        else:
            self._write("memory.limit_in_bytes", str(nbytes))
            if os.path.exists(os.path.join(self.directory, "memory.memsw.limit_in_bytes")):
                self._write("memory.memsw.limit_in_bytes", str(nbytes))

    def oom_kills(self) -> int:
        text = self._read("memory.events" if self.version == 2 else "memory.oom_control") or ""
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def peak(self) -> int | None:
        text = self._read("memory.peak" if self.version == 2 else "memory.max_usage_in_bytes")
        return int(text) if text and text.strip().isdigit() else None

    def run(self, args: list[str], timeout: float = 600) -> Outcome:
        """``python -m onnxfold ARGS`` inside this cgroup."""
        procs = os.path.join(self.directory, "cgroup.procs")
        done, max_rss = run_measured(args, timeout=timeout, cgroup_procs=procs)
        return Outcome(done.returncode, done.stdout, done.stderr, self.oom_kills(), self.peak(),
                       max_rss)

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            os.rmdir(self.directory)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _own_directory(mount: str, path: str) -> str:
    directory = os.path.join(mount, path.lstrip("/"))
    return directory if os.path.isdir(directory) else mount


def create(limit: int) -> MemoryCgroup | str:
    """A new memory cgroup limited to ``limit`` bytes, or why none can be made here."""
    found = hierarchies()
    if not found:
        return "no memory cgroup hierarchy is mounted (or /proc cannot be read)"
    reasons = []
    for hierarchy in sorted(found, key=lambda h: h.limit_file != "memory.max"):
        version = 2 if hierarchy.limit_file == "memory.max" else 1
        parent = _own_directory(hierarchy.mount, hierarchy.path)
        if version == 2:
            listed = os.path.join(parent, "cgroup.controllers")
            controllers = _read(listed).split() if os.path.exists(listed) else []
            if "memory" not in controllers:
                reasons.append(f"cgroup v2 at {parent}: no memory controller")
                continue
            subtree = os.path.join(parent, "cgroup.subtree_control")
            try:
                if "memory" not in _read(subtree).split():
                    with open(subtree, "w") as f:
                        f.write("+memory")
            except OSError as e:
                reasons.append(f"cgroup v2 at {parent}: cannot enable the memory controller "
                               f"for children ({e.strerror})")
                continue
        directory = os.path.join(parent, f"onnxfold-test-{uuid.uuid4().hex[:8]}")
        try:
            os.mkdir(directory)
        except OSError as e:
            reasons.append(f"cgroup v{version} at {parent}: cannot create a cgroup "
                           f"({e.strerror})")
            continue
        group = MemoryCgroup(directory, version)
        try:
            group.limit(limit)
        except OSError as e:
            group.remove()
            reasons.append(f"cgroup v{version}: cannot set a memory limit ({e.strerror})")
            continue
        return group
    return "; ".join(reasons)


def run_in_memory_cgroup(limit: int, args: list[str], timeout: float = 600) -> Outcome:
    """``python -m onnxfold ARGS`` in a cgroup of its own limited to ``limit`` bytes, removed
    after; the calling test skips, saying why, where no cgroup can be made."""
    group = create(limit)
    if isinstance(group, str):
        pytest.skip(f"no memory cgroup: {group}")
    try:
        return group.run(args, timeout)
    finally:
        group.remove()
