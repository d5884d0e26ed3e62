"""Write the pieces of an output file at known offsets, the two halves on two threads.

The writer lays the whole file out before writing a byte (protobuf framing makes every size
known), so each piece has an offset: bytes (framing), a numpy array (a weight, maybe a
non-contiguous view that must be copied in C order), a range of another file (an unchanged
weight, copied file-to-file) or a sub-byte tensor. A large segment is cut in two (arrays between
rows, file ranges anywhere) and its halves are written concurrently: the copies of transposed
views run on two cores, their whole pages written around the page cache
(``onnxfold.io.writes``), while another thread reads the next weight from its input file; the
resident memory stays that of two weights. Those threads are the process's I/O threads
(``onnxfold.io.threads``); a half or a read no thread has started is done by the writer itself.
"""

from __future__ import annotations

import errno
import math
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from onnxfold.host.endings import uninterrupted
from onnxfold.io.checked import InputChanged, open_input
from onnxfold.io.mapped import detached, input_origin
from onnxfold.io.tempfiles import TRUNCATED
from onnxfold.io.tensor_facts import data_nbytes
from onnxfold.io.threads import Job, submit
from onnxfold.io.writes import AlignedBuffer, Writes, placement, pwrite_all
from onnxfold.ir.arrays import byte_bounds, copy_c_order, release_pages
from onnxfold.ir.blocks import Concatenated

_CHUNK = 16 << 20
PARALLEL_WRITE = 4 << 20  # a segment this big is written in two halves, one per thread


@dataclass(frozen=True)
class FileRange:
    """``length`` bytes of ``path`` from ``offset``: an unchanged weight."""

    path: str
    offset: int
    length: int
    identity: tuple[int, int] | None = None  # (device, inode) the file had when checked


@dataclass(frozen=True)
class Segment:
    """``data`` goes to ``offset`` of the output file."""

    offset: int
    # a tensor: sub-byte dtypes; a Concatenated: a concatenation built a block at a time
    data: bytes | np.ndarray | FileRange | Concatenated | ir.TensorProtocol

    @property
    def nbytes(self) -> int:
        if isinstance(self.data, bytes):
            return len(self.data)
        if isinstance(self.data, FileRange):
            return self.data.length
        return self.data.nbytes


ALIGNED_FROM = 1 << 20  # bytes: a weight this large starts at a multiple of ``align``


def layout(start: int, parts: Sequence[tuple[bytes, ir.TensorProtocol | None]],
           align: int = 1) -> tuple[list[Segment], int]:
    """Segments for each ``(prefix, tensor)`` placed one after another from ``start``, and the
    end offset; a tensor of :data:`ALIGNED_FROM` bytes or more starts at a multiple of
    ``align`` (zeros before it: onnxruntime maps an external weight whose offset is a
    multiple of the page size instead of reading it into memory)."""
    segments: list[Segment] = []
    pos = start
    for prefix, tensor in parts:
        if prefix:
            segments.append(Segment(pos, prefix))
            pos += len(prefix)
        if tensor is None:
            continue
        if (pad := -pos % align) and data_nbytes(tensor) >= ALIGNED_FROM:
            segments.append(Segment(pos, bytes(pad)))
            pos += pad
        data: np.ndarray | FileRange | Concatenated | ir.TensorProtocol
        if isinstance(tensor, ir.ExternalTensor):
            data = FileRange(tensor.path, tensor.offset or 0,
                             tensor.length or data_nbytes(tensor),
                             getattr(tensor, "identity", None))
        elif tensor.dtype.bitwidth < 8:
            data = tensor
        elif isinstance(tensor, ir.Tensor) and isinstance(tensor.raw, Concatenated):
            data = tensor.raw  # built a block of rows at a time as it is written
        else:
            data = tensor.numpy()
        segments.append(Segment(pos, data))
        pos += data_nbytes(tensor)
    return segments, pos


def halves(seg: Segment) -> tuple[Segment, Segment] | None:
    """``seg`` cut in two (arrays between rows, file ranges anywhere), or None where it cannot
    be (framing bytes, sub-byte tensors, a single row)."""
    data = seg.data
    if isinstance(data, FileRange) and data.length > 1:
        head = data.length // 2
        return (Segment(seg.offset, FileRange(data.path, data.offset, head, data.identity)),
                Segment(seg.offset + head, FileRange(data.path, data.offset + head,
                                                     data.length - head, data.identity)))
    if isinstance(data, np.ndarray) and data.ndim and len(data) > 1:
        top = data[: len(data) // 2]
        return Segment(seg.offset, top), Segment(seg.offset + top.nbytes, data[len(top):])
    if isinstance(data, Concatenated) and len(data) > 1:
        half = len(data) // 2
        first = data.rows(0, half)
        return Segment(seg.offset, first), Segment(seg.offset + first.nbytes,
                                                   data.rows(half, len(data)))
    return None


def write(fd: int, segments: list[Segment],
          progress: Callable[[int], None] | None = None, direct: bool = True) -> None:
    """Write every segment; those of ``PARALLEL_WRITE`` bytes or more in two halves at once,
    runs of small ones (under ``SMALL_SEGMENT`` bytes, in memory) gathered into one write.

    File ranges are copied through one descriptor per source file, opened once for the whole
    write (a model of 20,000 weights reads them all from one or two files). A view of an
    input's mapping (a transposed weight) is read while the segment before it is written
    (:class:`_ReadAhead`). Whole pages of large copies go around the page cache unless
    ``direct`` is False (``onnxfold.io.writes``). ``progress(n)`` is told the bytes of each
    segment written."""
    scratch = (_Scratch(), _Scratch())
    batch = _Batch(fd, progress)
    with SourceFiles() as sources, Writes(fd, direct) as writes, _ReadAhead(segments) as ahead:
        for index, given in enumerate(segments):
            seg = ahead.take(index)
            small = _small_bytes(seg)
            if small is None:
                batch.flush()
                _write_whole(writes, seg, scratch, sources)
                if progress is not None:
                    progress(seg.nbytes)
            elif not batch.add(seg.offset, small):
                batch.flush()
                batch.add(seg.offset, small)
            for done in _arrays_of(given.data):
                release_pages(done)  # a folded view of a mapped weight: its pages are done
        batch.flush()


class _ReadAhead:
    """The segments as :func:`unmapped` gives them, the next one that reads an input's mapping
    read on an I/O thread while the one before it is written: otherwise the disk idles
    while a weight is transposed and written, and the cores while the next is read (on a
    model read from a cold cache, 1.3 s of a 3.1 s write). Two buffers take turns: the one
    being written, the one being read into. A context manager: leaving waits for a read
    still going (one not started is dropped), so no read outlives the write."""

    def __init__(self, segments: Sequence[Segment]) -> None:
        self._segments = segments
        self._copies = (_Scratch(), _Scratch())
        self._pending: tuple[int, Job[Segment]] | None = None

    def __enter__(self) -> _ReadAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pending is not None:
            if not self._pending[1].cancel():
                uninterrupted(self._pending[1].exception)
            self._pending = None

    def take(self, index: int) -> Segment:
        """Segment ``index`` unmapped (segments are taken in order); starts reading the next."""
        if self._pending is not None and self._pending[0] == index:
            seg = self._pending[1].joined()
        else:
            seg = unmapped(self._segments[index], self._copies[index % 2])
        self._pending = None
        following = index + 1
        if following < len(self._segments) and _reads_mapping(self._segments[following]):
            self._pending = (following, submit(
                unmapped, self._segments[following], self._copies[following % 2]))
        return seg


def _reads_mapping(seg: Segment) -> bool:
    """Whether :func:`unmapped` reads ``seg``'s bytes out of an input file (every mapped piece
    of a concatenation; a view of a mapping that is not a plain range of the file)."""
    data = seg.data
    if isinstance(data, Concatenated):
        return any(input_origin(piece) is not None for piece in data.pieces)
    return isinstance(data, np.ndarray) and input_origin(data) is not None and \
        not _plain_range(data)


def _plain_range(arr: np.ndarray) -> bool:
    """Whether a view of an input's mapping is its file's bytes as they are (written by a
    file-to-file copy, never read)."""
    return arr.flags.c_contiguous and arr.dtype.byteorder != ">"


SMALL_SEGMENT = 64 << 10  # bytes: a segment below this is gathered with its neighbours
BATCH_BYTES = 1 << 20  # bytes gathered before they are written


def _small_bytes(seg: Segment) -> bytes | memoryview | None:
    """The bytes of ``seg`` as they go into the file (C order, little-endian) when it is
    small framing or a small weight held in memory; None for anything else (file ranges,
    large data). (Called after :func:`unmapped`: no array left here reads an input's
    mapping.)"""
    data = seg.data
    if isinstance(data, bytes):
        return data if len(data) < SMALL_SEGMENT else None
    if isinstance(data, FileRange) or data.nbytes >= SMALL_SEGMENT:
        return None
    if not isinstance(data, np.ndarray):  # a sub-byte tensor, a small concatenation
        return data.tobytes()
    flat = np.ascontiguousarray(data).reshape(-1)
    if flat.dtype.byteorder == ">":
        flat = flat.byteswap().view(flat.dtype.newbyteorder("<"))
    return flat.view(np.uint8).data


class _Batch:
    """Consecutive small segments written by one ``pwrite``: a graph of thousands of small
    weights is otherwise two system calls per weight (its framing, then its data)."""

    def __init__(self, fd: int, progress: Callable[[int], None] | None) -> None:
        self.fd, self.progress = fd, progress
        self.offset = 0
        self.buffer = bytearray()
        self.sizes: list[int] = []  # of each segment gathered, for ``progress``

    def add(self, offset: int, data: bytes | memoryview) -> bool:
        """Gather ``data``, to be written at ``offset``; False (nothing gathered) when it does
        not follow what is gathered, or would make the batch too big: flush first."""
        if self.sizes and (offset != self.offset + len(self.buffer)
                           or len(self.buffer) + len(data) > BATCH_BYTES):
            return False
        if not self.sizes:
            self.offset = offset
        self.buffer += data
        self.sizes.append(len(data))
        return True

    def flush(self) -> None:
        """Write what is gathered, then tell ``progress`` each segment's bytes."""
        if not self.sizes:
            return
        pwrite_all(self.fd, self.buffer, self.offset)
        if self.progress is not None:
            for size in self.sizes:
                self.progress(size)
        self.buffer = bytearray()
        self.sizes = []


def _write_whole(writes: Writes, seg: Segment, scratch: tuple[_Scratch, _Scratch],
                 sources: SourceFiles) -> None:
    """Write ``seg``; one of ``PARALLEL_WRITE`` bytes or more in two halves at once."""
    cut = halves(seg) if seg.nbytes >= PARALLEL_WRITE else None
    if cut is None:
        _write_one(writes, seg, scratch[0], sources)
        return
    other = submit(_write_one, writes, cut[1], scratch[1], sources)
    try:
        _write_one(writes, cut[0], scratch[0], sources)
    except BaseException:  # never leave it writing to a closed descriptor, nor start it
        if not other.cancel():
            uninterrupted(other.exception)
        raise
    failure = uninterrupted(other.exception)
    if failure is not None:
        raise failure


def _arrays_of(data: object) -> tuple[np.ndarray, ...]:
    """The arrays a segment's data reads (a concatenation's pieces)."""
    if isinstance(data, np.ndarray):
        return (data,)
    return data.pieces if isinstance(data, Concatenated) else ()


def unmapped(seg: Segment, scratch: _Scratch | None = None) -> Segment:
    """``seg``, or, when its array is a view of an input file's mapping (a weight the fold
    reshaped or transposed without copying), the same bytes read with checked reads: the range
    of the file when the view is contiguous, else the view over a ``pread`` copy of what it
    spans (into ``scratch``, reused). A file truncated meanwhile is then an InputError, never
    a bus error in the copy."""
    data = seg.data
    if isinstance(data, Concatenated):
        return Segment(seg.offset, _unmapped_pieces(data, scratch))
    if not isinstance(data, np.ndarray):
        return seg
    origin = input_origin(data)
    if origin is None:
        return seg
    if _plain_range(data):
        path, identity, offset = origin
        return Segment(seg.offset, FileRange(path, offset, data.nbytes, identity))
    buffer = None if scratch is None else (lambda n: scratch.array((n,), np.dtype(np.uint8)))
    return Segment(seg.offset, detached(data, buffer))


def _unmapped_pieces(data: Concatenated, scratch: _Scratch | None) -> Concatenated:
    """``data`` with each piece that is a view of an input's mapping read with checked reads
    (:func:`unmapped`'s copy), all into one buffer of ``scratch``'s (reused)."""
    spans = [byte_bounds(p) for p in data.pieces if input_origin(p) is not None]
    total = sum(high - low for low, high in spans)
    if not total:
        return data
    buffer = np.empty(total, np.uint8) if scratch is None else \
        scratch.array((total,), np.dtype(np.uint8))
    at = 0

    def region(n: int) -> np.ndarray:
        nonlocal at
        at += n
        return buffer[at - n:at]

    return data.with_pieces(lambda piece: detached(piece, region))


def _write_one(writes: Writes, seg: Segment, scratch: _Scratch, sources: SourceFiles) -> None:
    data = seg.data
    if isinstance(data, Concatenated):
        rows = max(1, _CHUNK // max(1, data.nbytes // max(len(data), 1)))
        pos = seg.offset
        for start in range(0, len(data), rows):
            block = data.rows(start, start + rows)
            out = block.block(scratch.array(block.shape, block.dtype, pos))
            if out.dtype.byteorder == ">":
                out = out.byteswap().view(out.dtype.newbyteorder("<"))
            pos += writes.write(out.reshape(-1).view(np.uint8), pos)
    elif isinstance(data, bytes):
        writes.write(data, seg.offset)
    elif isinstance(data, FileRange):
        copy_range(data, writes.fd, seg.offset, sources)
    elif isinstance(data, np.ndarray):
        pos = seg.offset
        for chunk in _array_chunks(data, scratch, pos):
            if chunk.dtype.byteorder == ">":
                chunk = chunk.byteswap().view(chunk.dtype.newbyteorder("<"))
            pos += writes.write(chunk.view(np.uint8), pos)
    else:
        writes.write(data.tobytes(), seg.offset)


class SourceFiles:
    """Read-only descriptors of the files ranges are copied from, one per file, opened on
    first use and closed together (a context manager). Safe to share between the two writing
    threads: every read gives its offset (``copy_file_range``, ``pread``)."""

    def __init__(self) -> None:
        self._fds: dict[tuple[str, tuple[int, int] | None], int] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> SourceFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def descriptor(self, source: FileRange) -> int:
        """The descriptor of ``source``'s file: opened without following a symlink, and the
        file that was checked when the model was loaded (``onnxfold.io.trust``)."""
        key = (source.path, source.identity)
        with self._lock:
            fd = self._fds.get(key)
            if fd is None:
                fd = self._fds[key] = _open_source(source)
            return fd

    def close(self) -> None:
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()


def _open_source(source: FileRange) -> int:
    return open_input(source.path, source.identity, "cannot open external data to copy it")


# copy_file_range's errors that say the kernel cannot copy between these files (another
# file system on older kernels, no such call, a file system without it, files it refuses):
# the bytes are copied by reads and writes instead
KERNEL_CANNOT_COPY = frozenset({errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL})


def copy_range(source: FileRange, dst_fd: int, dst_offset: int,
               sources: SourceFiles | None = None) -> None:
    """Copy file-to-file (``copy_file_range``; ``pread`` and write where the kernel cannot),
    reading through ``sources`` (a descriptor opened for this one copy without it)."""
    if sources is None:
        with SourceFiles() as own:
            copy_range(source, dst_fd, dst_offset, own)
        return
    src = sources.descriptor(source)
    left, pos, out = source.length, source.offset, dst_offset
    try:
        while left:
            n = os.copy_file_range(src, dst_fd, left, pos, out)
            if n == 0:  # the input ends early: the reads below say where
                break
            pos, out, left = pos + n, out + n, left - n
    except OSError as e:  # only where the kernel cannot copy these two files: a full disk or
        if e.errno not in KERNEL_CANNOT_COPY:  # an I/O error is the copy's own failure
            raise
    while left:
        chunk = os.pread(src, min(left, _CHUNK), pos)
        if not chunk:  # the input is shorter than when it was checked
            raise InputChanged(f"{source.path}: {TRUNCATED} (it ends before byte "
                               f"{source.offset + source.length})")
        out += pwrite_all(dst_fd, chunk, out)
        pos += len(chunk)
        left -= len(chunk)


class _Scratch:
    """One reusable buffer for the pieces of non-contiguous arrays.

    A fresh buffer per tensor would page-fault all of its pages again (large allocations are
    new mappings): reusing one halves the cost of writing BERT's transposed weights. An array
    asked for ``at`` a file offset is placed for a direct write there
    (``onnxfold.io.writes``).
    """

    def __init__(self) -> None:
        self._buffer = AlignedBuffer()

    def array(self, shape: tuple[int, ...], dtype: np.dtype, at: int = 0) -> np.ndarray:
        nbytes = math.prod(shape) * dtype.itemsize
        skip = placement(at)
        return self._buffer.bytes(skip + nbytes)[skip:].view(dtype).reshape(shape)


def _array_chunks(arr: np.ndarray, scratch: _Scratch, at: int) -> Iterator[np.ndarray]:
    """Contiguous pieces of ``arr`` in C order, without copying it whole.

    Non-contiguous views are copied piece by piece into ``scratch``, placed for file offset
    ``at`` onwards: each piece must be consumed before the next is asked for.
    """
    if arr.ndim == 0 or arr.flags.c_contiguous:
        yield np.ascontiguousarray(arr).reshape(-1)
        return
    rows = max(1, _CHUNK // max(1, arr[0].nbytes))
    for i in range(0, arr.shape[0], rows):
        piece = arr[i : i + rows]
        out = scratch.array(piece.shape, piece.dtype, at + i * arr[0].nbytes)
        copy_c_order(piece, out)
        yield out.reshape(-1)
