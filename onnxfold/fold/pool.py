"""The buffer pool: reference-counted storage for intermediate constant-folding results.

Each constant value being folded owns one entry. Its count is the number of readers still to
come (constant nodes that will consume it) plus one hold per reason the graph keeps it (a graph
output, a dynamic consumer). When the count reaches zero the entry is dropped at once. Results
of reshape/transpose/slice are numpy views of their source; memory is accounted per *owning*
allocation, so a view costs nothing and its base stays counted while any view of it lives.
Memory-mapped weights are accounted separately (they are file pages, not heap).
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeGuard, cast

import numpy as np

from onnxfold.errors import OutputError
from onnxfold.io.tempfiles import scratch_file
from onnxfold.io.writes import pwrite_all
from onnxfold.ir.arrays import byte_bounds, memory_owner, release_pages
from onnxfold.ir.blocks import Concatenated

if TYPE_CHECKING:
    from typing_extensions import Buffer


def _owner_nbytes(owner: object, arr: np.ndarray | Concatenated) -> tuple[int, bool]:
    """(bytes owned, is heap memory). Memory-mapped files are not heap, nor a concatenation
    left unbuilt (its pieces are views of weights)."""
    if isinstance(owner, np.ndarray):
        return owner.nbytes, True
    if isinstance(owner, mmap.mmap | Concatenated):
        return arr.nbytes, False
    return memoryview(owner).nbytes if _has_buffer(owner) else arr.nbytes, True


def _owner_key(owner: object, arr: np.ndarray) -> Hashable:
    """What ``arr``'s memory is accounted under: its owner, or for a file mapping (which
    holds every weight of its file) the byte range of the mapping ``arr`` spans."""
    if isinstance(owner, mmap.mmap):
        return (id(owner), *byte_bounds(arr))
    return id(owner)


def _drop_cached(fd: int) -> None:
    """Write ``fd``'s dirty pages out and drop them from the page cache.

    Inside a memory cgroup the page cache of the spill file is charged to the cgroup like the
    heap it replaces, and dirty pages cannot be reclaimed until written: without this a spill
    moves the bytes without lowering the usage the cgroup limits. Read back later, the pages
    are clean and the kernel can reclaim them under pressure.
    """
    os.fdatasync(fd)
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def _has_buffer(obj: object) -> TypeGuard[Buffer]:
    try:
        memoryview(cast("Buffer", obj))  # the probe: TypeError if obj has no buffer
    except TypeError:
        return False
    return True


@dataclass
class _Entry:
    array: np.ndarray
    count: int
    owner_key: Hashable


class BufferPool:
    """Reference-counted arrays keyed by value; tracks live and peak heap bytes."""

    def __init__(self, memory_limit: int | None = None,
                 spill_dir: str | None = None) -> None:
        self._entries: dict[Hashable, _Entry] = {}
        # _owner_key -> [owner, live entry count, bytes, heap]
        self._owners: dict[Hashable, list] = {}
        self.live_bytes = 0
        self.peak_bytes = 0
        self.memory_limit = memory_limit
        self.spill_dir = spill_dir
        self.spilled = 0
        self.spilled_bytes = 0

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, key: Hashable, array: np.ndarray, count: int, source: bool = False) -> None:
        """Store ``array`` for ``key`` with ``count`` pending readers/holds (0 frees at once).

        ``source`` arrays (weights owned by the model, often memory-mapped) are not pool memory.
        """
        if key in self._entries:
            raise KeyError(f"value {key!r} is already in the pool")
        owner = memory_owner(array)
        okey = _owner_key(owner, array)
        rec = self._owners.get(okey)
        if rec is None:
            nbytes, heap = _owner_nbytes(owner, array)
            heap = heap and not source
            rec = self._owners[okey] = [owner, 0, nbytes, heap]
            if heap:
                self.live_bytes += nbytes
                self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        rec[1] += 1
        self._entries[key] = _Entry(array, count, okey)
        if count <= 0:
            self._drop(key)
        elif self.memory_limit is not None and self.live_bytes > self.memory_limit:
            self._spill_until_under_limit()

    def make_room(self, nbytes: int) -> None:
        """Before allocating ``nbytes``: spill buffers so the result fits under the limit."""
        if self.memory_limit is not None and self.live_bytes + nbytes > self.memory_limit:
            self._spill_until_under_limit(self.memory_limit - nbytes)

    def _spill_until_under_limit(self, target: int | None = None) -> None:
        """Move the largest heap buffers to temporary files (memory-mapped) until under limit.

        Only buffers whose memory no other entry shares are moved, so moving one really frees
        it. A spilled buffer is read back through the page cache and counts as mapped memory.
        """
        candidates = sorted(((rec[2], key) for key, entry in self._entries.items()
                             for rec in [self._owners[entry.owner_key]]
                             if rec[3] and rec[1] == 1), key=lambda c: -c[0])
        target = self.memory_limit if target is None else target
        assert target is not None  # both callers check that memory_limit is set
        for _nbytes, key in candidates:
            if self.live_bytes <= target:
                return
            self._spill(key)

    def _spill(self, key: Hashable) -> None:
        entry = self._entries[key]
        array = entry.array
        fd, path = scratch_file("onnxfold-spill-", ".bin", self.spill_dir)
        try:  # reserve the blocks now: a full disk is an error here, never SIGBUS later
            if hasattr(os, "posix_fallocate") and array.nbytes:
                os.posix_fallocate(fd, 0, array.nbytes)
        except OSError as e:
            os.close(fd)
            os.unlink(path)
            raise OutputError(f"cannot spill {array.nbytes} B to {os.path.dirname(path)} "
                              f"({e.strerror}); free space or raise --memory-limit") from None
        try:  # written, not copied into a writable mapping: its dirty pages would be resident
            # beside the array until written back, raising the peak the limit is meant to lower
            pwrite_all(fd, np.ascontiguousarray(array).reshape(-1).view(np.uint8), 0)
            _drop_cached(fd)
            readonly: np.ndarray = np.memmap(path, dtype=array.dtype, mode="r",
                                             shape=array.shape or (1,))
        finally:
            os.close(fd)
            os.unlink(path)  # the mapping keeps the data; nothing is left on disk afterwards
        if array.ndim == 0:
            readonly = readonly.reshape(())
        rec = self._owners.pop(entry.owner_key)
        self.live_bytes -= rec[2]
        self.spilled += 1
        self.spilled_bytes += rec[2]
        owner = memory_owner(readonly)
        okey = _owner_key(owner, readonly)
        self._owners[okey] = [owner, 1, array.nbytes, False]
        entry.array, entry.owner_key = readonly, okey
        release_pages(readonly)

    def get(self, key: Hashable) -> np.ndarray:
        """The array of ``key`` (a :class:`~onnxfold.ir.blocks.Concatenated` where the
        evaluator left a concatenation unbuilt: its callers say so)."""
        return self._entries[key].array

    def holds_memory(self, key: Hashable) -> bool:
        """Whether ``key``'s array is (a view of) heap memory the pool counts, rather than a
        weight's file mapping or an unbuilt concatenation of such."""
        return bool(self._owners[self._entries[key].owner_key][3])

    def count(self, key: Hashable) -> int:
        return self._entries[key].count

    def hold(self, key: Hashable, n: int = 1) -> None:
        """Add ``n`` holds (a new reader or a reason to keep the value)."""
        self._entries[key].count += n

    def release(self, key: Hashable, n: int = 1) -> None:
        """Drop ``n`` holds; the entry is freed when none remain."""
        entry = self._entries[key]
        entry.count -= n
        if entry.count < 0:
            raise RuntimeError(f"value {key!r} released more often than held")
        if entry.count == 0:
            self._drop(key)

    def _drop(self, key: Hashable) -> None:
        entry = self._entries.pop(key)
        rec = self._owners[entry.owner_key]
        rec[1] -= 1
        if rec[1] == 0:
            del self._owners[entry.owner_key]
            if rec[3]:
                self.live_bytes -= rec[2]
            else:
                release_pages(entry.array)  # a consumed weight leaves the resident set

    def keys(self) -> list[Hashable]:
        return list(self._entries)
