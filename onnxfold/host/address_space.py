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
# one bound at a time: each restores the limit it found; a bound within a bound on the same
# thread (a check's cone run bounded, whose fallback bounds an unsized contrib op again) keeps
# the tighter of the two
_lock = threading.RLock()


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
    bytes than it has mapped now (never more than a soft limit already set). Yields whether
    the bound is in place."""
    with _lock:
        in_use = address_space_in_use()
        if in_use is None:
            yield False
            return
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = in_use + max(extra_bytes, 0) + RUN_ALLOWANCE
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        if soft != resource.RLIM_INFINITY and soft <= limit:
            yield True  # a tighter limit is already in place
            return
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
        try:
            yield True
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
