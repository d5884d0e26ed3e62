"""How much memory this process may use: the host's RAM, or less inside a memory cgroup.

A container (a CI job, a Kubernetes pod) is usually given far less than the host's RAM, and
``sysconf`` reports the host's: a budget derived from it lets a fold grow until the kernel
kills the process. The limit that applies is the tightest of the host's physical memory and
the memory limits of the process's own cgroup and of every cgroup above it (a child cannot
use more than its parent): ``memory.max`` under cgroup v2, ``memory.limit_in_bytes`` under
cgroup v1. The cgroups are found from ``/proc/self/cgroup`` and the mounts in
``/proc/self/mounts``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

UNLIMITED = 1 << 60  # cgroup v1 reports "no limit" as a number near 2**63
PROC_CGROUP = "/proc/self/cgroup"
PROC_MOUNTS = "/proc/self/mounts"


@dataclass(frozen=True)
class Hierarchy:
    """A mounted cgroup hierarchy holding the memory controller."""

    mount: str  # where it is mounted
    limit_file: str  # memory.max (v2) or memory.limit_in_bytes (v1)
    path: str  # this process's cgroup in it, from /proc/self/cgroup ("/" for the root)


def physical_memory() -> int | None:
    """The host's RAM in bytes, None where it cannot be read."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def host_available() -> int | None:
    """The host's memory available now (``MemAvailable`` of /proc/meminfo: free memory and
    the page cache that can be dropped), None where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _memory_mounts(mounts: str) -> Iterator[tuple[str, int]]:
    """(mount point, cgroup version) of each hierarchy that can limit memory."""
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        point, kind, options = fields[1], fields[2], fields[3].split(",")
        if kind == "cgroup2":
            yield point, 2
        elif kind == "cgroup" and "memory" in options:
            yield point, 1


def hierarchies(proc_cgroup: str = PROC_CGROUP, proc_mounts: str = PROC_MOUNTS
                ) -> list[Hierarchy]:
    """The memory hierarchies this process belongs to (none where /proc cannot be read)."""
    cgroups, mounts = _read(proc_cgroup), _read(proc_mounts)
    if cgroups is None or mounts is None:
        return []
    v2_path: str | None = None
    v1_path: str | None = None
    for line in cgroups.splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if number == "0" and controllers == "":
            v2_path = path
        elif "memory" in controllers.split(","):
            v1_path = path
    found = []
    for point, version in _memory_mounts(mounts):
        own = v2_path if version == 2 else v1_path
        if own is not None:
            found.append(Hierarchy(point, "memory.max" if version == 2
                                   else "memory.limit_in_bytes", own))
    return found


def _limit_in(directory: str, limit_file: str) -> int | None:
    text = _read(os.path.join(directory, limit_file))
    if text is None or text.strip() in ("", "max"):
        return None
    try:
        value = int(text.strip())
    except ValueError:
        return None
    return value if 0 < value < UNLIMITED else None


def _own_directory(hierarchy: Hierarchy) -> str:
    """The directory of this process's cgroup: its path under the mount, or the mount itself
    where that path is not visible (a container whose cgroup namespace is its root)."""
    directory = os.path.join(hierarchy.mount, hierarchy.path.lstrip("/"))
    return directory if os.path.isdir(directory) else hierarchy.mount


def hierarchy_limit(hierarchy: Hierarchy) -> int | None:
    """The tightest memory limit on the way from this process's cgroup up to the mount."""
    directory = os.path.normpath(_own_directory(hierarchy))
    mount = os.path.normpath(hierarchy.mount)
    limits = []
    while True:
        limit = _limit_in(directory, hierarchy.limit_file)
        if limit is not None:
            limits.append(limit)
        if directory == mount or not directory.startswith(mount):
            break
        directory = os.path.dirname(directory)
    return min(limits) if limits else None


def cgroup_limit(proc_cgroup: str = PROC_CGROUP, proc_mounts: str = PROC_MOUNTS
                 ) -> int | None:
    """The tightest memory limit of this process's cgroups (v1 and v2), None without one."""
    limits = [limit for h in hierarchies(proc_cgroup, proc_mounts)
              if (limit := hierarchy_limit(h)) is not None]
    return min(limits) if limits else None


# memory.stat's counts of page cache that is dirty or being written back (v1: the cgroup and
# those under it; v2: the cgroup's own, which holds those under it)
_UNDROPPABLE = {"memory.limit_in_bytes": ("total_dirty", "total_writeback"),
                "memory.max": ("file_dirty", "file_writeback")}


def cgroup_dirty_bytes(proc_cgroup: str = PROC_CGROUP, proc_mounts: str = PROC_MOUNTS) -> int:
    """The page cache charged to this process's limited cgroups that the kernel cannot drop
    at once: pages dirty or under writeback (a file just written, such as the output a check
    reads next, on a file system that keeps them). The kernel must write them out before it
    can reclaim them, and under a limit it may kill sooner than it waits: they are counted
    as used, not as room. The most of any hierarchy whose chain has a limit; 0 where none is
    limited or readable."""
    most = 0
    for hierarchy in hierarchies(proc_cgroup, proc_mounts):
        if hierarchy_limit(hierarchy) is None:
            continue
        text = _read(os.path.join(_own_directory(hierarchy), "memory.stat")) or ""
        keys = _UNDROPPABLE[hierarchy.limit_file]
        total = 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key in keys and value.strip().isdigit():
                total += int(value)
        most = max(most, total)
    return most


def available_memory() -> int | None:
    """What this process may use at most: the tightest of the host's RAM and its cgroups'
    limits; None when neither can be read."""
    known = [m for m in (physical_memory(), cgroup_limit()) if m is not None]
    return min(known) if known else None


def resident_bytes() -> int | None:
    """This process's resident memory now (None where /proc cannot tell)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def memory_left() -> int | None:
    """What this process may still allocate: what is left of :func:`available_memory` beside
    its resident memory, and no more than the host has available now (None: unknown)."""
    known = []
    limit, used = available_memory(), resident_bytes()
    if limit is not None and used is not None:
        known.append(max(limit - used, 0))
    free = host_available()
    if free is not None:
        known.append(free)
    return min(known) if known else None
