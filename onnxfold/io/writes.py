"""Writes of an output file: large copies around the page cache (``O_DIRECT``) where the file
system allows it, the rest through it.

A buffered write copies every byte into the page cache, and on Linux two threads writing one
file take turns on its inode lock while they copy: measured on a 2.8 GB model, two threads'
buffered writes took 2.5 s and a ``sync`` 0.7 s more, two threads' direct writes 1.3 s in all,
with no copy and nothing left to flush. The writer therefore copies a transposed weight into a
buffer placed so that the file's page boundaries fall on the buffer's, writes the whole pages
from it directly, and writes the few bytes at each end (pages shared with a neighbour) through
the page cache. A page is only ever written one way, so the kernel's coherence between the two
paths is never leaned on by two threads at once (a short direct write off a page boundary,
which Linux does not make, would leave the rest of its page to a later page-cache write of the
same thread). Where direct writes are refused (tmpfs, an exotic file system) the bytes go
through the page cache.
"""

from __future__ import annotations

import errno
import mmap
import os

import numpy as np

from onnxfold.ir.arrays import aligned_bytes

ALIGNMENT = max(4096, mmap.PAGESIZE)  # bytes: file offsets, lengths and addresses written
# directly are multiples of this (a page: never a page written both ways)
DIRECT_MIN = 1 << 20  # bytes: smaller pieces go through the page cache


def open_direct(fd: int) -> int | None:
    """A second write descriptor of ``fd``'s file with ``O_DIRECT``, or None where there is
    none (no ``O_DIRECT``, no ``/proc``, a file system that refuses it). It is opened through
    ``/proc/self/fd``: the open file itself, never a path another process could swap."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return None
    try:
        return os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | flag | os.O_CLOEXEC)
    except OSError:
        return None


def placement(offset: int) -> int:
    """Where in an aligned buffer to put the bytes that go to file ``offset``: their distance
    past the last page boundary, so that the file's page boundaries meet the buffer's."""
    return offset % ALIGNMENT


class AlignedBuffer:
    """One reusable buffer starting on a page boundary (:data:`ALIGNMENT`), grown as needed:
    a fresh large buffer per tensor page-faults all of its pages again."""

    def __init__(self) -> None:
        self._buffer = aligned_bytes(0, ALIGNMENT)

    def bytes(self, nbytes: int) -> np.ndarray:
        """``nbytes`` bytes starting on a page boundary (contents undefined)."""
        if nbytes > self._buffer.nbytes:
            self._buffer = aligned_bytes(nbytes, ALIGNMENT)
        return self._buffer[:nbytes]


class Writes:
    """Writes of an output file: through ``fd``, and, for the whole pages of large pieces held
    in a placed buffer, through a direct descriptor of the same file (:func:`open_direct`),
    given up for the rest of the file after the first refusal. Shared by the writer's two
    threads: the direct descriptor stays open until the context manager closes it (never
    ``fd``), a refusal only raises a flag."""

    def __init__(self, fd: int, direct: bool = True) -> None:
        self.fd = fd
        self._direct = open_direct(fd) if direct else None
        self._refused = False  # a direct write was refused: page-cache writes from then on

    def __enter__(self) -> Writes:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._direct is not None:
            os.close(self._direct)
            self._direct = None

    def write(self, data, offset: int) -> int:  # (any buffer: bytes, memoryview, ndarray)
        """Write ``data`` at ``offset``; its whole pages directly when it is large and placed
        (its address is ``offset`` modulo :data:`ALIGNMENT`). Returns the bytes written."""
        view = memoryview(data).cast("B")
        head, tail = _whole_pages(view, offset)
        if tail - head < DIRECT_MIN or self._direct is None or self._refused:
            return pwrite_all(self.fd, view, offset)
        pwrite_all(self.fd, view[:head], offset)
        done = head + self._write_direct(view[head:tail], offset + head)
        pwrite_all(self.fd, view[done:], offset + done)
        return len(view)

    def _write_direct(self, view: memoryview, offset: int) -> int:
        """Write ``view`` directly as far as the kernel takes it; bytes it refuses are left
        to the caller (and later pieces go through the page cache)."""
        assert self._direct is not None
        done = 0
        while done < len(view) and not self._refused:
            try:
                written = os.pwrite(self._direct, view[done:], offset + done)
            except OSError as e:
                if e.errno != errno.EINVAL:
                    raise
                written = 0
            if not written or written % ALIGNMENT:
                self._refused = True  # refused, or a short write off a page boundary
            done += written
        return done


def _whole_pages(view: memoryview, offset: int) -> tuple[int, int]:
    """(start, end) within ``view`` of the whole file pages it covers, when its address is
    placed for ``offset``; (0, 0) when it is not."""
    if not len(view):
        return 0, 0
    address = np.frombuffer(view, np.uint8).ctypes.data
    if (address - offset) % ALIGNMENT:
        return 0, 0
    head = -offset % ALIGNMENT
    tail = (offset + len(view)) // ALIGNMENT * ALIGNMENT - offset
    return (head, tail) if tail > head else (0, 0)


def pwrite_all(fd: int, data, offset: int) -> int:  # (any buffer)
    """Write all of ``data`` at ``offset`` (``pwrite`` may take less than asked)."""
    view = memoryview(data).cast("B")
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)
    return done
