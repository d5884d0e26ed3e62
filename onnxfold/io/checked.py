"""Checked reads of input files: bytes copied with ``pread``, where a mapping could fault.

A view of a memory-mapped input raises SIGBUS when another process truncates the file under
it, and Python cannot turn a signal raised inside a copy into an exception: the process dies.
A ``pread`` past the new end of the file just comes back short. Code that hands an input's
bytes to a serializer, a writer or onnxruntime after the fold (``OptimizeResult.save``,
``to_proto``, ``Session.run``) reads them through here, so a truncated or removed input is an
:class:`InputChanged` (an InputError) there, never a signal. Folding itself reads weights
through the mapping (``onnxfold.io.mapped``: no copy of weights that are only passed through),
checking the file's size each time a weight is handed out.
"""

from __future__ import annotations

import os

import numpy as np

from onnxfold.errors import InputError
from onnxfold.io.opener import open_regular
from onnxfold.io.tempfiles import TRUNCATED
from onnxfold.ir.arrays import ALIGNMENT, aligned_bytes

FileIdentity = tuple[int, int]  # (st_dev, st_ino)


class InputChanged(InputError):
    """An input file is not what was checked any more (truncated, removed or replaced while
    onnxfold reads it): the run stops, no step is to blame (``onnxfold.rewrite.steps``)."""


def open_input(path: str, identity: FileIdentity | None,
               purpose: str = "cannot open external data") -> int:
    """A read-only descriptor of ``path`` (never through a symlink, never a FIFO or anything but
    a regular file: ``onnxfold.io.opener``), which must be the file of
    ``identity`` when one is given (the file checked at load time, ``onnxfold.io.trust``).
    ``purpose`` starts the message when a resource limit refuses the open."""
    fd = open_regular(path, follow=False, error=InputChanged, doing=purpose)
    info = os.fstat(fd)
    if identity is not None and (info.st_dev, info.st_ino) != identity:
        os.close(fd)
        raise InputChanged(f"{path}: external data file was replaced after it was checked")
    return fd


def read_into(fd: int, out: np.ndarray, offset: int, path: str) -> None:
    """Fill ``out`` (contiguous) with the bytes of ``fd`` from ``offset``; InputChanged when the
    file ends first."""
    view = out.data.cast("B")
    done = 0
    while done < len(view):
        try:
            n = os.preadv(fd, [view[done:]], offset + done)
        except OSError as e:
            raise InputChanged(f"{path}: cannot read external data ({e.strerror})") from None
        if n == 0:
            raise InputChanged(f"{path}: {TRUNCATED} (it ends before byte {offset + len(view)})")
        done += n


def read_range(path: str, identity: FileIdentity | None, offset: int, length: int,
               out: np.ndarray | None = None) -> np.ndarray:
    """``length`` bytes of ``path`` from ``offset`` in a new uint8 array starting at a multiple
    of 64 bytes, as onnxruntime holds a tensor (a run fed it needs no aligned copy of a weight
    first); in ``out``, a contiguous uint8 array of that length, when given."""
    if out is None:
        out = aligned_bytes(length, ALIGNMENT)
    if not length:
        return out
    fd = open_input(path, identity)
    try:
        read_into(fd, out, offset, path)
    finally:
        os.close(fd)
    return out
