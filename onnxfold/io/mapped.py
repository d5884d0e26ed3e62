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

import contextlib
import mmap
import os
import threading
import weakref
from collections.abc import Callable, Iterable

import numpy as np
import onnx_ir as ir

from onnxfold.errors import InputError, OnnxfoldError
from onnxfold.host.limits import limit_error
from onnxfold.io.checked import InputChanged, open_input, read_range
from onnxfold.io.threads import submit
from onnxfold.ir.arrays import byte_bounds, memory_owner

FileIdentity = tuple[int, int]  # (st_dev, st_ino)

_maps: dict[FileIdentity, weakref.ref[mmap.mmap]] = {}
# id(mapping) -> (the mapping, the file's path, its identity): where a mapped view's bytes are
_origins: dict[int, tuple[weakref.ref[mmap.mmap], str, FileIdentity]] = {}
_lock = threading.Lock()


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
        fd = open_input(path, identity)
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
                _origins[id(shared)] = (_maps[key], path, key)
        finally:
            os.close(fd)  # the mapping keeps its own duplicate of the descriptor
        return shared


def _forget_dead() -> None:
    for key in [k for k, ref in _maps.items() if ref() is None]:
        del _maps[key]
    for address in [a for a, (ref, _, _) in _origins.items() if ref() is None]:
        del _origins[address]


def input_origin(arr: np.ndarray) -> tuple[str, FileIdentity, int] | None:
    """Where ``arr``'s bytes are when it is a view of an input file's shared mapping: the
    file's path, its identity and the offset of ``arr``'s lowest byte in it; None otherwise
    (memory of its own, or a mapping of another kind such as the pool's spill files).

    Such a view faults (SIGBUS) when the file is truncated under it: code that must not die
    then reads these bytes with ``onnxfold.io.checked`` instead.
    """
    owner = memory_owner(arr)
    if not isinstance(owner, mmap.mmap) or owner.closed or arr.size == 0:
        return None
    with _lock:
        origin = _origins.get(id(owner))
    if origin is None or origin[0]() is not owner:
        return None
    base = np.frombuffer(owner, np.uint8, count=1).__array_interface__["data"][0]
    return origin[1], origin[2], byte_bounds(arr)[0] - base


def detached(arr: np.ndarray, scratch: Callable[[int], np.ndarray] | None = None
             ) -> np.ndarray:
    """``arr`` itself, or, when it is a view of an input file's mapping, the same array (shape,
    strides, read-only) over a ``pread`` copy of the bytes it spans: a truncated or removed
    file is an InputError here, and the copy cannot fault later. ``scratch(n)``, when given,
    provides the n-byte uint8 buffer to copy into (a writer reuses one: a fresh large buffer
    page-faults all its pages again)."""
    origin = input_origin(arr)
    if origin is None:
        return arr
    path, identity, offset = origin
    low, high = byte_bounds(arr)
    copy = read_range(path, identity, offset, high - low,
                      None if scratch is None else scratch(high - low))
    out: np.ndarray = np.ndarray(arr.shape, arr.dtype, buffer=copy,
                                 offset=arr.__array_interface__["data"][0] - low,
                                 strides=arr.strides)
    out.flags.writeable = False
    return out


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
            with contextlib.suppress(OSError, ValueError):
                mapping.madvise(mmap.MADV_DONTNEED)


# bytes asked for per WILLNEED: Linux reads at most one readahead window of the range it is
# given (the device's, 128 KiB to 8 MiB) and drops the rest, so one call over a 90 MB weight
# read 8 MiB of it ahead
PREFETCH_STEP = 2 << 20


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
        """The tensor's bytes as stored, a uint8 view of the shared mapping.

        The file's size now (not the mapping's, fixed when it was made) must cover them: a
        file truncated since it was mapped is an InputError here rather than a bus error at
        the first read of a page past its new end.
        """
        shared = shared_map(self.path, self.identity)
        offset, length = self._within(shared)
        return np.frombuffer(shared, np.uint8, count=length, offset=offset)

    def _within(self, shared: mmap.mmap) -> tuple[int, int]:
        """The tensor's (offset, length) in its file, which must still be long enough."""
        offset, length = self.offset or 0, self.length or self.nbytes
        try:
            size = min(len(shared), shared.size())  # size(): fstat of the mapped file
        except (OSError, ValueError) as e:  # ValueError: the mapping was closed
            raise InputChanged(f"{self.path}: cannot read external data ({e})") from None
        if offset + length > size:
            raise InputChanged(f"{self.path}: external data of {self.name!r} ends at byte "
                             f"{offset + length}, past the end of the file ({size} B)")
        return offset, length

    def checked_numpy(self) -> np.ndarray:
        """The tensor's data in memory of its own, read from the file with ``pread``: a file
        truncated or removed since it was checked is an InputError, never a bus error (a
        view of the mapping, :meth:`numpy`, faults when the file shrinks under it)."""
        self._check_validity()
        if self.size == 0:
            return np.empty(self.shape.numpy(), dtype=self.dtype.numpy())
        packed = read_range(self.path, self.identity, self.offset or 0,
                            self.length or self.nbytes)
        if self.dtype.bitwidth < 8:
            return ir.PackedTensor(packed, self.dtype, shape=self.shape).numpy()
        dtype = np.dtype(self.dtype.numpy()).newbyteorder("<")
        return packed.view(dtype).reshape(self.shape.numpy())

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
        """The data, a view of the shared mapping; the file's size is checked at every call
        (one ``fstat``), so a weight handed out again after its file shrank is an InputError
        rather than a bus error when it is read."""
        self._check_validity()
        if self._array is None:
            self._load()
        elif self._array.size and self.dtype.bitwidth >= 8:  # sub-byte data was unpacked
            owner = memory_owner(self._array)
            if isinstance(owner, mmap.mmap):
                self._within(owner)
        assert self._array is not None
        return self._array

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        arr = self.numpy()
        return arr if dtype is None else arr.astype(dtype, copy=False)

    def tobytes(self) -> bytes:
        """The bytes as stored, read with ``pread`` (see :meth:`checked_numpy`)."""
        self._check_validity()
        if self.size == 0:
            return b""
        return read_range(self.path, self.identity, self.offset or 0,
                          self.length or self.nbytes).tobytes()

    def release(self) -> None:
        """Drop this tensor's view (the shared mapping stays while other views use it)."""
        self._array = None

    def prefetch(self) -> None:
        """Ask the kernel to read the tensor's bytes into the page cache ahead, in the
        background (a reader that will want them after its current work, through the mapping
        or with ``pread``, then finds them in memory); a hint, which nothing fails on. It maps
        nothing (``posix_fadvise`` on a descriptor): mapping the whole file for a hint failed
        a check under ``ulimit -v`` that reads its weights with ``pread``."""
        if self.size == 0 or not hasattr(os, "posix_fadvise"):
            return
        with contextlib.suppress(OSError, ValueError, OnnxfoldError):  # (a limit, a change)
            fd = open_input(self.path, self.identity)
            try:
                start = self.offset or 0
                end = start + (self.length or self.nbytes)
                for at in range(start, end, PREFETCH_STEP):
                    os.posix_fadvise(fd, at, min(PREFETCH_STEP, end - at),
                                     os.POSIX_FADV_WILLNEED)
            finally:
                os.close(fd)


def prefetch_ahead(tensors: Iterable[ir.TensorProtocol | None]) -> None:
    """:meth:`MappedTensor.prefetch` for each of ``tensors`` held in a file, on an I/O thread
    (``onnxfold.io.threads``), and return at once: ``posix_fadvise`` reads much of the range
    before it returns (on a virtio disk most of what reading it costs), so a caller that hints
    the weights of its next step before computing this one would otherwise wait for them first
    (an 8-layer slice of a 7B decoder: 0.9 s of a check's 4.5 s run of the optimized model).
    Only the latest request is worked on: one a newer request finds unfinished is dropped (its
    caller has moved on, and pages read for a step already done would only crowd the page
    cache). A hint: where no thread can start, none is given until one can; the I/O threads are
    daemons, so nothing ever waits for it (not the end of the process after a signal)."""
    mapped = [t for t in tensors if isinstance(t, MappedTensor) and t.size]
    if mapped:
        _READ_AHEAD.ask(mapped)


class _ReadAhead:
    """:func:`prefetch_ahead`'s hints, given by one job at a time on an I/O thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: list[MappedTensor] = []
        self._generation = 0
        self._giving = False  # a job is queued or running: it takes the latest request

    def ask(self, tensors: list[MappedTensor]) -> None:
        with self._lock:
            self._latest, self._generation = tensors, self._generation + 1
            if self._giving:
                return
            self._giving = True
        try:
            submit(self._give)
        except BaseException:  # (a signal): no job takes the requests, the next ask starts one
            with self._lock:
                self._giving = False
            raise

    def _give(self) -> None:
        try:
            while True:
                with self._lock:
                    tensors, generation = self._latest, self._generation
                    self._latest = []
                    if not tensors:  # (decided under the lock an ``ask`` takes)
                        self._giving = False
                        return
                for tensor in tensors:
                    if self._generation != generation:
                        break  # a newer request: this one's caller has moved on
                    tensor.prefetch()
        except BaseException:
            with self._lock:
                self._giving = False
            raise


_READ_AHEAD = _ReadAhead()


def _after_fork() -> None:
    """A forked child has no job giving its parent's hints (and maybe a lock held)."""
    global _READ_AHEAD
    _READ_AHEAD = _ReadAhead()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
