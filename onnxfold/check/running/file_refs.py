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
wire format itself, within the limits onnxruntime's protobuf reads it by (a key or a length in
at most 5 bytes, a key below 2**32, a file below 2 GiB: no length past it), and copies every
other field verbatim, so what onnxruntime runs is still its own reading of the file, never
onnxfold's reader's (the check's anchor stays independent of the code it checks). This walker
is the check's own, not ``io/protowire.py`` (the reader's and the writer's): a fault in where
a weight's bytes lie would otherwise be read alike by the fold and by the check's session of
the original, and a fold of the wrong bytes certified. A file this
does not read as plainly as that is handed over as a path, as before: a field in the deprecated
group encoding or past those limits, a graph given twice, a weight already external (its
location is the folder of the path given, the references' that of the file itself: one model
never mixes both), a file that is a link into another folder (a node's external data resolves
beside the path given), a referenced name defined again (twice, by a node, a sparse
initializer), names that are no UTF-8, or more fields than a model has (a hostile file read
field by field would take longer than onnxruntime's refusal of it).

The file's identity is taken when it is read (:class:`Referenced`); a caller checks it again
once the session is built and after its last run (:func:`unchanged`): onnxruntime reads those
weights through its mapping as long as the session lives, as it reads any external data, so a
file rewritten meanwhile would change them, and one truncated is a bus error, as the fold's own
mapped reads are (docs/trust.md).
"""

from __future__ import annotations

import mmap
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from onnxfold.io.opener import opened

# an initializer's bytes left in the file from this size on (smaller ones stay in the proto:
# fewer mappings, and nothing to gain on them)
MIN_BYTES = 1 << 20
MAX_FILE = 1 << 31  # protobuf's limit: onnxruntime refuses a larger file from its path
MAX_FIELDS = 1_000_000  # more than any model's (a 7B decoder's graph: about 60,000)

# field numbers (onnx.proto3) and wire types
_MODEL_GRAPH = 7
_GRAPH_NODE, _GRAPH_INITIALIZER, _GRAPH_SPARSE = 1, 5, 15
_NODE_OUTPUT = 2
_TENSOR_NAME, _TENSOR_RAW_DATA, _TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION = 8, 9, 13, 14
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5
_EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL

Identity = tuple[int, int, int, int, int]


class _Unread(Exception):
    """The file is not plain enough for this reading: hand it over as a path."""


@dataclass(frozen=True)
class Referenced:
    """The file's bytes as onnxruntime gets them, the folder its references resolve in, and
    the file's identity when it was read (:func:`identity_of`)."""

    proto: bytes
    folder: str
    identity: Identity


def identity_of(info: os.stat_result) -> Identity:
    """What says a file is still the one read: device, inode, size, modification and change
    times (a rewrite whose modification time was set back still changes the latter)."""
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns


def unchanged(path: str, identity: Identity) -> bool:
    """Whether ``path`` (followed) is still the file of ``identity``."""
    try:
        return identity_of(os.stat(os.path.realpath(path))) == identity
    except OSError:
        return False


def referenced(path: str) -> Referenced | None:
    """``path``'s model with each top-level initializer of at least :data:`MIN_BYTES` of
    ``raw_data`` referring to those bytes in the file; None where there is none, or the file
    is not read plainly (see module): then onnxruntime reads the path itself. InputError where
    ``path`` is no regular file (``io.opener``)."""
    real = os.path.realpath(path)
    folder, location = os.path.split(real)
    if folder != os.path.realpath(os.path.dirname(os.path.abspath(path))):
        return None  # a link into another folder
    try:
        folder.encode(), location.encode()
    except UnicodeEncodeError:  # (onnxruntime takes its options as UTF-8)
        return None
    with opened(real, what="model") as f:
        info = os.fstat(f.fileno())
        if not MIN_BYTES <= info.st_size < MAX_FILE:
            return None
        try:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):  # (emptied meanwhile, or no mapping here)
            return None
    with data:
        view = memoryview(data)
        try:
            proto = _referenced(view, location)
        except (_Unread, IndexError):
            return None
        finally:
            view.release()
    return None if proto is None else Referenced(proto, folder, identity_of(info))


def _referenced(data: memoryview, location: str) -> bytes | None:
    """The model in ``data`` with its large initializers referenced (None: none is)."""
    budget = _Budget()
    graph = None
    for number, kind, start, body, end in _fields(data, 0, len(data), budget):
        if number == _MODEL_GRAPH and kind == _LENGTH:
            if graph is not None:  # (protobuf merges them: not read here)
                raise _Unread
            graph = start, body, end
    if graph is None:
        return None
    start, body, end = graph
    parts = _graph(data, body, end, location, budget)
    if all(isinstance(part, range) for part in parts):
        return None
    joined = b"".join(part if isinstance(part, bytes) else data[part.start:part.stop]
                      for part in parts)
    return b"".join((data[:start], _key(_MODEL_GRAPH, _LENGTH), _varint(len(joined)), joined,
                     data[end:]))


def _graph(data: memoryview, begin: int, end: int, location: str, budget: _Budget
           ) -> list[bytes | range]:
    """The graph's fields: its large initializers referenced (bytes), every other field the
    range of the file it is (copied once, when joined)."""
    parts: list[bytes | range] = []
    names: list[str] = []  # every initializer's and every node output's
    referred: set[str] = set()
    for number, kind, start, body, stop in _fields(data, begin, end, budget):
        tensor = None
        if number == _GRAPH_SPARSE:
            raise _Unread  # (a name it defines is not read here)
        if number == _GRAPH_NODE and kind == _LENGTH:
            names.extend(_strings(data, body, stop, _NODE_OUTPUT, budget))
        elif number == _GRAPH_INITIALIZER and kind == _LENGTH:
            name, tensor = _tensor(data, body, stop, location, budget)
            names.append(name)
            if tensor is not None:
                referred.add(name)
        parts.append(range(start, stop) if tensor is None else
                     _key(number, _LENGTH) + _varint(len(tensor)) + tensor)
    defined = Counter(names)
    if any(defined[name] > 1 for name in referred):
        raise _Unread  # a referenced name defined again
    return parts


def _tensor(data: memoryview, begin: int, end: int, location: str, budget: _Budget
            ) -> tuple[str, bytes | None]:
    """The name of the TensorProto in ``data[begin:end]`` (the last given, as protobuf reads
    it) and its fields with its ``raw_data`` referenced, or None to keep it as it is (small,
    or its bytes given twice)."""
    kept: list[range] = []
    raw: list[range] = []
    name: list[str] = []
    for number, kind, start, body, stop in _fields(data, begin, end, budget):
        if number in (_TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION):
            raise _Unread  # a weight already external: its location is the path's folder's
        if number == _TENSOR_RAW_DATA and kind == _LENGTH:
            raw.append(range(body, stop))
            continue
        if number == _TENSOR_NAME and kind == _LENGTH:
            name.append(_text(data, body, stop))
        kept.append(range(start, stop))
    found = name[-1] if name else ""
    if len(raw) != 1 or len(raw[0]) < MIN_BYTES:
        return found, None
    parts = [bytes(data[r.start:r.stop]) for r in kept]
    for key, value in (("location", location), ("offset", str(raw[0].start)),
                       ("length", str(len(raw[0])))):
        parts.append(_string(_TENSOR_EXTERNAL_DATA,
                             _string(1, key.encode()) + _string(2, value.encode())))
    parts.append(_key(_TENSOR_DATA_LOCATION, _VARINT) + _varint(_EXTERNAL))
    return found, b"".join(parts)


def _strings(data: memoryview, begin: int, end: int, field: int, budget: _Budget
             ) -> Iterator[str]:
    """The strings of ``field`` in the message ``data[begin:end]``."""
    for number, kind, _, body, stop in _fields(data, begin, end, budget):
        if number == field and kind == _LENGTH:
            yield _text(data, body, stop)


def _text(data: memoryview, begin: int, end: int) -> str:
    try:
        return bytes(data[begin:end]).decode()
    except UnicodeDecodeError:
        raise _Unread from None


class _Budget:
    """The fields a reading may walk (:data:`MAX_FIELDS`)."""

    def __init__(self) -> None:
        self.left = MAX_FIELDS

    def spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise _Unread


def _fields(data: memoryview, pos: int, end: int, budget: _Budget
            ) -> Iterator[tuple[int, int, int, int, int]]:
    """Each field of the message in ``data[pos:end]``: (number, wire type, its start, its
    body's start, its end)."""
    while pos < end:
        budget.spend()
        start = pos
        key, pos = _read_varint(data, pos, 5)
        if key >= 1 << 32:  # (protobuf reads a key as 32 bits: another field's number)
            raise _Unread
        number, kind = key >> 3, key & 7
        body = pos
        if kind == _VARINT:
            _, pos = _read_varint(data, pos, 10)
        elif kind == _FIXED64:
            pos += 8
        elif kind == _FIXED32:
            pos += 4
        elif kind == _LENGTH:
            size, body = _read_varint(data, pos, 5)  # (past the file's end: below)
            pos = body + size
        else:  # the deprecated groups (3, 4) and anything else
            raise _Unread
        if pos > end or number == 0:
            raise _Unread
        yield number, kind, start, body, pos


def _read_varint(data: memoryview, pos: int, most: int) -> tuple[int, int]:
    """The varint at ``pos`` (at most ``most`` bytes long) and where it ends."""
    value = 0
    for k in range(most):
        byte = data[pos + k]
        value |= (byte & 0x7F) << (7 * k)
        if byte < 0x80:
            return value, pos + k + 1
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
