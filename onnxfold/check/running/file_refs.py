"""A model file handed to onnxruntime with its large weights left in the file.

onnxruntime loading a file whose weights are embedded parses every weight's bytes into a
string and copies them again into its tensors: on BERT-base (415 MB in the file) a session
took 1.0 s, where the same model with its weights as external data took 0.6 s and peaked
400 MiB lower (onnxruntime maps external data instead). :func:`referenced` gives the check the
file's bytes with each large top-level initializer's ``raw_data`` replaced by an external
reference *into the file itself* (its name, the offset and length of those bytes), so that
onnxruntime maps them where they are: the same values, the same graph, the same session
(outputs bitwise the same).

Everything but those bytes reaches onnxruntime as the file holds it: this reads the protobuf
wire format itself and copies every other field verbatim, so what onnxruntime runs is still
its own reading of the file, never onnxfold's reader's (the check's anchor stays independent
of the code it checks). A file this does not read as plainly as that (a field in the deprecated
group encoding, a graph given twice, a weight already external) is handed over as a path, as
before. The file's identity is taken when it is read (:class:`Referenced`): a caller checks it
again once the session is built (the file replaced in between would be read at offsets of
another file). onnxruntime then reads those weights through its mapping, as it reads any
external data: a file truncated under it is a bus error, as the fold's own mapped reads are
(docs/trust.md).
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass

# an initializer's bytes left in the file from this size on (smaller ones stay in the proto:
# fewer mappings, and nothing to gain on them)
MIN_BYTES = 1 << 20

# field numbers (onnx.proto3) and wire types
_MODEL_GRAPH, _GRAPH_INITIALIZER = 7, 5
_TENSOR_RAW_DATA, _TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION = 9, 13, 14
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5
_EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL


class _Unread(Exception):
    """The file is not plain enough for this reading: hand it over as a path."""


@dataclass(frozen=True)
class Referenced:
    """The file's bytes as onnxruntime gets them, the folder its references resolve in, and
    the file's identity when it was read (device, inode, size, modification time)."""

    proto: bytes
    folder: str
    identity: tuple[int, int, int, int]


def identity_of(info: os.stat_result) -> tuple[int, int, int, int]:
    """What says a file is still the one read: device, inode, size, modification time."""
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


def referenced(path: str) -> Referenced | None:
    """``path``'s model with each top-level initializer of at least :data:`MIN_BYTES` of
    ``raw_data`` referring to those bytes in the file; None where there is none, or the file
    is not read plainly (see module): then onnxruntime reads the path itself."""
    real = os.path.realpath(path)
    with open(real, "rb") as f:
        info = os.fstat(f.fileno())
        if info.st_size < MIN_BYTES:
            return None
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            view = memoryview(data)
            try:
                graph = _model(view)
                if graph is None:
                    return None
                start, body, end = graph
                proto = _joined(view, _graph(view, body, end, os.path.basename(real)),
                                start, end)
            except (_Unread, IndexError):
                return None
            finally:
                view.release()
    if proto is None:
        return None
    return Referenced(proto, os.path.dirname(real), identity_of(info))


def _model(data: memoryview) -> tuple[int, int, int] | None:
    """Where the ModelProto in ``data`` holds its graph: the field's start, its body's start
    and its end (None: no graph)."""
    found = None
    for number, kind, start, body, end in _fields(data, 0, len(data)):
        if number == _MODEL_GRAPH and kind == _LENGTH:
            if found is not None:  # (protobuf merges them: not read here)
                raise _Unread
            found = start, body, end
    return found


def _graph(data: memoryview, begin: int, end: int, location: str) -> list[bytes | range]:
    """The graph's fields: its large initializers referenced (bytes), every other field the
    range of the file it is (copied once, when joined)."""
    parts: list[bytes | range] = []
    for number, kind, start, body, stop in _fields(data, begin, end):
        tensor = _tensor(data, body, stop, location) \
            if number == _GRAPH_INITIALIZER and kind == _LENGTH else None
        parts.append(range(start, stop) if tensor is None else
                     _key(number, _LENGTH) + _varint(len(tensor)) + tensor)
    return parts


def _joined(data: memoryview, graph: list[bytes | range], start: int, end: int
            ) -> bytes | None:
    """The model's bytes, its graph field (``data[start:end]``) made of the fields ``graph``
    (None where none is referenced: nothing to gain)."""
    if all(isinstance(part, range) for part in graph):
        return None
    body = b"".join(part if isinstance(part, bytes) else data[part.start:part.stop]
                    for part in graph)
    return b"".join((data[:start], _key(_MODEL_GRAPH, _LENGTH), _varint(len(body)), body,
                     data[end:]))


def _tensor(data: memoryview, begin: int, end: int, location: str) -> bytes | None:
    """The TensorProto in ``data[begin:end]`` with its ``raw_data`` referenced, or None to
    keep it as it is (small, already external, or its bytes given twice)."""
    kept, raw = [], []
    for number, kind, start, body, stop in _fields(data, begin, end):
        if number in (_TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION):
            raise _Unread  # a weight already external: its location is the model's folder's
        if number == _TENSOR_RAW_DATA and kind == _LENGTH:
            raw.append((body, stop))
        else:
            kept.append(bytes(data[start:stop]))
    if len(raw) != 1 or raw[0][1] - raw[0][0] < MIN_BYTES:
        return None
    offset, length = raw[0][0], raw[0][1] - raw[0][0]
    for key, value in (("location", location), ("offset", str(offset)),
                       ("length", str(length))):
        entry = _string(1, key.encode()) + _string(2, value.encode())
        kept.append(_string(_TENSOR_EXTERNAL_DATA, entry))
    kept.append(_key(_TENSOR_DATA_LOCATION, _VARINT) + _varint(_EXTERNAL))
    return b"".join(kept)


def _fields(data: memoryview, pos: int, end: int):
    """Each field of the message in ``data[pos:end]``: (number, wire type, its start, its
    body's start, its end)."""
    while pos < end:
        start = pos
        key, pos = _read_varint(data, pos)
        number, kind = key >> 3, key & 7
        body = pos
        if kind == _VARINT:
            _, pos = _read_varint(data, pos)
        elif kind == _FIXED64:
            pos += 8
        elif kind == _FIXED32:
            pos += 4
        elif kind == _LENGTH:
            size, body = _read_varint(data, pos)
            pos = body + size
        else:  # the deprecated groups (3, 4) and anything else
            raise _Unread
        if pos > end or number == 0:
            raise _Unread
        yield number, kind, start, body, pos


def _read_varint(data: memoryview, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise _Unread


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(number: int, kind: int) -> bytes:
    return _varint(number << 3 | kind)


def _string(number: int, value: bytes) -> bytes:
    return _key(number, _LENGTH) + _varint(len(value)) + value
