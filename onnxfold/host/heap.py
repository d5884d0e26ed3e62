"""Giving freed memory back to the system (glibc only; elsewhere nothing).

glibc keeps freed memory of allocations below its *dynamic* mmap threshold in the heap, and
the threshold rises each time a large mapped block is freed (up to 32 MiB): after a fold frees
its arrays, later ones of that size come from the heap, and freed again they stay resident. A
Session that builds a folded set after another kept 300 MiB more than the sets held; after
each set, :func:`trim` returns what is free (``malloc_trim``). A session opened after a fold
retained 230 MiB more than in a fresh process: the check and ``--latency`` fix the threshold
first (:func:`prepare`) and release the heap after each session.

Each release starts with a collection of what cycles hold, and a full collection after a fold
walks every object the fold left alive (its graphs, the rules): 0.07-0.15 s each, four times a
check. Within :func:`apart` a collection walks only the objects made inside it.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import gc
import threading
from collections.abc import Callable, Iterator


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameters
M_TRIM_THRESHOLD = -1
DEFAULT_TRIM = 128 << 10  # glibc's default trim threshold
PREPARED_THRESHOLD = 1 << 20  # bytes: allocations this large are mapped, and unmapped when freed
# within pooled(): glibc's own largest dynamic threshold (64-bit)
POOLED_THRESHOLD = 32 << 20
_pooling: set[object] = set()  # a token of each pooled() block entered and not left
_advised: bool | None = None  # numpy's huge page advice before the first of them
_pooling_lock = threading.Lock()


def _threshold(size: int, trim: int | None = None) -> None:
    """Fix glibc's mmap threshold at ``size`` bytes, and where given the free top of a heap it
    keeps rather than give back at ``trim`` bytes."""
    libc = _libc()
    with contextlib.suppress(AttributeError):
        if libc is not None:
            libc.mallopt(M_MMAP_THRESHOLD, size)
            if trim is not None:
                libc.mallopt(M_TRIM_THRESHOLD, trim)


def prepare() -> None:
    """Fix glibc's mmap threshold at 1 MiB, so that a session's large buffers are returned to
    the system when freed; then :func:`release`."""
    _threshold(PREPARED_THRESHOLD)
    release()


def _numpy_hugepage_switch() -> Callable[[bool], bool] | None:
    """numpy's switch of its ``madvise(MADV_HUGEPAGE)`` on arrays of 4 MiB or more (returns
    the previous setting; None: this numpy has none)."""
    import numpy as np

    for name in ("_core", "core"):  # numpy 2, numpy 1
        module = getattr(np, name, None)
        switch = getattr(getattr(module, "multiarray", None), "_set_madvise_hugepage", None)
        if switch is not None:
            return switch
    return None


@contextlib.contextmanager
def pooled(keep: int = DEFAULT_TRIM) -> Iterator[None]:
    """Within the block, buffers up to :data:`POOLED_THRESHOLD` come from the heap and go back
    to it when freed, for the next allocation to reuse; on leaving, the threshold is
    :func:`prepare`'s again and the heap is released. For many small runs that allocate the
    same buffers run after run (the check's runs of cones and windows): a freshly mapped
    buffer page-faults every page again and unmapping it stops every thread of the process
    (BERT-base's fold verification 0.75 -> 0.5 s and rewrite validation 1.49 -> 1.10 s, the
    check's peak within 10 MiB). Not for building a whole model's session: what it frees
    while building stays resident until the block ends (two BERT-base sessions built at
    once peaked 550 MiB higher).

    Within the block numpy does not ask the kernel for transparent huge pages for its large
    arrays either: where the kernel's THP ``defrag`` setting is ``madvise`` (Debian's and
    Ubuntu's default), such a fault may first compact memory; BERT-base's weights read in
    0.55-0.74 s with the advice and 0.22 s without, and its whole ``--check 3`` ran 0.94x.

    The settings are the process's: blocks in several threads at once count as one, set by
    the first to enter and put back by the last to leave (what numpy's advice was before).
    An exception landing anywhere in entering (KeyboardInterrupt between two lines) puts
    them back too: each block is a token, added in one call and discarded in ``finally``."""
    global _advised
    token = object()
    switch = _numpy_hugepage_switch()
    try:
        with _pooling_lock:  # (held for the settings only, never across the block)
            if not _pooling:
                _advised = switch(False) if switch is not None else None
                _threshold(POOLED_THRESHOLD, keep)
            _pooling.add(token)
        yield
    finally:
        with _pooling_lock:
            _pooling.discard(token)
            if not _pooling:
                _threshold(PREPARED_THRESHOLD, DEFAULT_TRIM)
                if switch is not None and _advised is not None:
                    switch(_advised)
                _advised = None
        release()


def trim() -> None:
    """Return the heap's free memory to the system."""
    libc = _libc()
    with contextlib.suppress(AttributeError):
        if libc is not None:
            libc.malloc_trim(0)


def release() -> None:
    """Collect what cycles hold, then return the heap's free memory to the system."""
    gc.collect()
    trim()


_apart: list[object] = []  # a token per apart() block entered and not left


@contextlib.contextmanager
def apart() -> Iterator[None]:
    """Within the block, :func:`release` collects among the objects made inside it only: what
    was alive before is set aside (``gc.freeze``, after a collection) and given back on
    leaving (``gc.unfreeze``), so a cycle it forms later is still collected."""
    gc.collect()
    token = object()
    try:  # (an exception landing between the freeze and the block still undoes both)
        gc.freeze()
        _apart.append(token)
        yield
    finally:
        with contextlib.suppress(ValueError):
            _apart.remove(token)
        gc.unfreeze()


def set_aside() -> None:
    """Within :func:`apart`, what is alive now is set aside too until the block ends (what a
    step holds for the rest of it: the check's graphs of both models, walked by each of its
    seven collections, 0.07 s of BERT-base's check, 0.03 s without); outside, nothing. A
    cycle among these objects is collected once the block ends."""
    if _apart:
        gc.freeze()
