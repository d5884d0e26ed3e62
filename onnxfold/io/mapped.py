"""Weights as views into one shared memory mapping per file.

onnx-ir's ``ExternalTensor`` maps its whole file the first time it is read, once per tensor,
and Python's ``mmap`` keeps a duplicate of the file descriptor for each mapping: a model of
20,000 weights stored in one file (every large inline weight of a .onnx is a reference into
the .onnx itself, see ``onnxfold.io.reader``) would hold 20,000 descriptors and 20,000
mappings of the whole file, which ``ulimit -n`` and ``ulimit -v`` refuse long before the
weights are large. :class:`MappedTensor` reads its bytes as a view of the one mapping of its
file (per device and inode), so descriptors and mappings grow with the number of files, never
with the number of weights. The mapping lives as long as a view of it does.
"""

from __future__ import annotations

import mmap
import os
import threading
import weakref

import numpy as np
import onnx_ir as ir

from onnxfold.errors import InputError
from onnxfold.limits import limit_error

FileIdentity = tuple[int, int]  # (st_dev, st_ino)

_maps: dict[FileIdentity, weakref.ref[mmap.mmap]] = {}
_lock = threading.Lock()


def _open_checked(path: str, identity: FileIdentity | None) -> int:
    """A read-only descriptor of ``path`` (never through a symlink), which must be the file of
    ``identity`` when one is given."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as e:
        limit = limit_error(e, f"{path}: cannot open external data")
        if limit is not None:
            raise limit from None
        raise InputError(f"{path}: cannot read external data ({e.strerror})") from None
    info = os.fstat(fd)
    if identity is not None and (info.st_dev, info.st_ino) != identity:
        os.close(fd)
        raise InputError(f"{path}: external data file was replaced after it was checked")
    return fd


def shared_map(path: str, identity: FileIdentity | None) -> mmap.mmap:
    """The read-only mapping of the whole file ``path`` shared by every tensor that reads it.

    ``identity`` (device, inode) is the file checked at load time (``onnxfold.io.trust``);
    another file now at ``path`` is an InputError. Without one, the file is keyed by what it
    is when opened.
    """
    with _lock:
        if identity is not None:
            ref = _maps.get(identity)
            shared = ref() if ref is not None else None
            if shared is not None and not shared.closed:
                return shared
        fd = _open_checked(path, identity)
        try:
            info = os.fstat(fd)
            key = (info.st_dev, info.st_ino)
            ref = _maps.get(key)
            shared = ref() if ref is not None else None
            if shared is None or shared.closed:
                try:
                    shared = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
                except OSError as e:
                    limit = limit_error(e, f"{path}: cannot map external data")
                    if limit is not None:
                        raise limit from None
                    raise InputError(f"{path}: cannot map external data ({e.strerror})"
                                     ) from None
                _forget_dead()
                _maps[key] = weakref.ref(shared)
        finally:
            os.close(fd)  # the mapping keeps its own duplicate of the descriptor
        return shared


def _forget_dead() -> None:
    for key in [k for k, ref in _maps.items() if ref() is None]:
        del _maps[key]


def drop_resident_pages() -> None:
    """Give back the resident pages of every shared mapping (they are read again on access).

    Releasing one weight's pages is not enough after reading many small weights in a row: the
    kernel maps a file's page-cache folios whole (up to 2 MiB) on a fault, so reading the next
    weight maps the pages of the ones already released again. A pass that reads every weight
    calls this once at its end.
    """
    with _lock:
        shared = [m for ref in _maps.values() if (m := ref()) is not None and not m.closed]
    for mapping in shared:
        if hasattr(mmap, "MADV_DONTNEED") and len(mapping):
            try:
                mapping.madvise(mmap.MADV_DONTNEED)
            except (OSError, ValueError):
                pass


def live_maps() -> int:
    """How many shared mappings are alive (one per file being read)."""
    with _lock:
        return sum(1 for ref in _maps.values() if (m := ref()) is not None and not m.closed)


class MappedTensor(ir.ExternalTensor):
    """An external tensor read as a view of its file's shared mapping (:func:`shared_map`).

    It is an ``ir.ExternalTensor`` for everything else: onnx-ir serializes it as a reference,
    and the writer copies its byte range file to file. ``release`` drops only this tensor's
    view: the mapping belongs to every tensor of the file.
    """

    __slots__ = ("identity",)
    identity: FileIdentity | None  # the file checked at load time, when it was checked

    def __init__(self, *args, identity: FileIdentity | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.identity = identity

    def _packed(self) -> np.ndarray:
        """The tensor's bytes as stored, a uint8 view of the shared mapping."""
        shared = shared_map(self.path, self.identity)
        offset, length = self.offset or 0, self.length or self.nbytes
        if offset + length > len(shared):
            raise InputError(f"{self.path}: external data of {self.name!r} ends at byte "
                             f"{offset + length}, past the end of the file ({len(shared)} B)")
        return np.frombuffer(shared, np.uint8, count=length, offset=offset)

    def _load(self) -> None:
        self._check_validity()
        if self.size == 0:  # nothing to map
            self._array = np.empty(self.shape.numpy(), dtype=self.dtype.numpy())
            return
        packed = self._packed()
        if self.dtype.bitwidth < 8:  # unpacked into new memory, as onnx-ir does
            self._array = ir.PackedTensor(packed, self.dtype, shape=self.shape).numpy()
            return
        dtype = np.dtype(self.dtype.numpy()).newbyteorder("<")
        self._array = packed.view(dtype).reshape(self.shape.numpy())

    def numpy(self) -> np.ndarray:
        self._check_validity()
        if self._array is None:
            self._load()
        assert self._array is not None
        return self._array

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        arr = self.numpy()
        return arr if dtype is None else arr.astype(dtype, copy=False)

    def tobytes(self) -> bytes:
        self._check_validity()
        if self.size == 0:
            return b""
        return self._packed().tobytes()

    def release(self) -> None:
        """Drop this tensor's view (the shared mapping stays while other views use it)."""
        self._array = None
