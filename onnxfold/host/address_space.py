"""A temporary bound on this process's address space, for a computation that cannot be sized
before it runs.

onnxruntime cannot shape the outputs of some contrib ops (``com.microsoft::CDist`` is declared
with no dims), so nothing knows before they run whether a result takes 4 bytes or 4 GB. Such a
node runs with the soft ``RLIMIT_AS`` lowered to the address space already in use plus what
the pool budget has left (and a small allowance for the run's own bookkeeping): an allocation
beyond it fails inside onnxruntime ("Failed to allocate memory", a declined fold) instead of
exhausting the machine's or the container's memory. The limit is restored as soon as the run
returns, and the outputs are then checked against the budget.

The limit is process-wide: while it holds, every thread's allocations count against it. The
fold runs on one thread; the CLI's prefill thread writes from a buffer it allocated before.
Linux only (``/proc/self/statm``); elsewhere ``bounded`` yields False and the caller declines.
"""

from __future__ import annotations

import itertools
import os
import resource
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# Address space a run may take beyond its outputs: onnxruntime's arena bookkeeping, a malloc
# arena a worker thread creates, Python objects. Kept small: the outputs are bounded by what
# the budget has left plus this.
RUN_ALLOWANCE = 64 << 20
_STATM = "/proc/self/statm"
# Bounds may nest and overlap, on one thread (a check's cone run bounded, whose onnxruntime
# run bounds an unsized contrib op again) or on several (a caller bounds the run it waits for
# while the worker running it bounds a node): the limit in force is the tightest of the bounds
# in force, and the limit the process had before the first of them comes back when the last
# ends. The lock guards that bookkeeping only, never a bound's block: a thread waiting for a
# worker holds no lock the worker may ask for.
_lock = threading.Lock()
_bounds: dict[int, int] = {}  # the bounds in force: token -> limit
_before: list[int] = []  # the soft limit before the first bound in force (one element)
_tokens = itertools.count()


def address_space_in_use() -> int | None:
    """Bytes of address space this process has mapped (``VmSize``), None where unknown."""
    try:
        with open(_STATM, encoding="ascii") as f:
            pages = int(f.read().split()[0])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


@contextmanager
def bounded(extra_bytes: int) -> Iterator[bool]:
    """Within the block, the process may map at most ``extra_bytes`` + ``RUN_ALLOWANCE`` more
    bytes than it has mapped now (never more than a limit already in force). Yields whether
    the bound is in place."""
    in_use = address_space_in_use()
    if in_use is None:
        yield False
        return
    token = _enter(in_use + max(extra_bytes, 0) + RUN_ALLOWANCE)
    try:
        yield True
    finally:
        if token is not None:
            _leave(token)


def _enter(limit: int) -> int | None:
    """Put ``limit`` in force (None: a tighter limit already is, nothing to undo)."""
    with _lock:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        base = _before[0] if _bounds else soft
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        if base != resource.RLIM_INFINITY and base <= limit:
            return None
        if not _bounds:
            _before[:] = [soft]
        token = next(_tokens)
        _bounds[token] = limit
        _apply(hard)
        return token


def _leave(token: int) -> None:
    with _lock:
        del _bounds[token]
        _apply(resource.getrlimit(resource.RLIMIT_AS)[1])


def _apply(hard: int) -> None:
    """The soft limit: the tightest bound in force, or the one found before the first."""
    soft = min(_bounds.values()) if _bounds else _before.pop()
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
