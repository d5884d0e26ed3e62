"""Load an ONNX model into onnx-ir without copying its weights.

Large initializers stored inline (``raw_data`` inside the .onnx) are turned into external-data
references that point at their own bytes inside the .onnx file, so onnx-ir memory-maps them like
any external tensor: loading a 400 MiB model reads only its graph, never its weights.
"""

from __future__ import annotations

import os
import stat
from typing import overload

import onnx
import onnx_ir as ir

from onnxfold.analysis import UNKNOWN_OPS_KEY, all_graphs, in_order
from onnxfold.errors import InputError
from onnxfold.io import protowire as pw
from onnxfold.io.node_bound import refuse_too_many_nodes
from onnxfold.io.sparse import densify, has_sparse
from onnxfold.io.trust import check_tensor_data
from onnxfold.limits import limit_error, out_of_memory
from onnxfold.logs import quiet
from onnxfold.protos import (
    SMALL_TENSOR_BYTES,
    function_graphs,
    graph_protos,
    tensor_nbytes,
    tensor_protos,
)

# ModelProto.graph, GraphProto.initializer, TensorProto.raw_data / external_data / data_location
_MODEL_GRAPH, _GRAPH_INITIALIZER = 7, 5
_TENSOR_RAW_DATA, _TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION = 9, 13, 14
LAZY_THRESHOLD = 4096  # smaller inline weights stay in the bytes read (a mapping costs more)
WHOLE_READ_LIMIT = 32 << 20  # a model file up to this size is read at once to find its weights
SOURCE_KEY = "onnxfold.source"  # Model.meta: the file a model was loaded from
DATA_FILES_KEY = "onnxfold.data_files"  # Model.meta: the external-data files it was read from


def _entry(key: str, value: str) -> bytes:
    body = pw.len_prefix(1, len(key.encode())) + key.encode()
    body += pw.len_prefix(2, len(value.encode())) + value.encode()
    return pw.len_prefix(_TENSOR_EXTERNAL_DATA, len(body)) + body


def _strip_tensor(buf, start: int, end: int, location: str) -> bytes | None:
    """The tensor message with its raw_data replaced by a reference into the file, or None
    (left to protobuf as it is: small data, or a tensor whose fields a reference could not
    replace exactly, such as raw_data given twice, where the last one counts, or data already
    said to be elsewhere)."""
    raw: list[tuple[int, int, int]] = []
    for field, _wire, fstart, pstart, fend in pw.iter_fields(buf, start, end):
        if field == _TENSOR_RAW_DATA:
            raw.append((fstart, pstart, fend))
        elif field in (_TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION):
            return None
    if len(raw) != 1 or raw[0][2] - raw[0][1] < LAZY_THRESHOLD:
        return None
    fstart, pstart, fend = raw[0]
    ref = (_entry("location", location) + _entry("offset", str(pstart))
           + _entry("length", str(fend - pstart)))
    location_field = pw.tag(_TENSOR_DATA_LOCATION, pw.VARINT) + pw.encode_varint(1)
    return bytes(buf[start:fstart]) + bytes(buf[fend:end]) + ref + location_field


def _strip_graph(buf, start: int, end: int, location: str) -> bytes:
    out = bytearray()
    copied = start  # the fields before this are in ``out``; the rest is copied in one piece
    for field, _wire, fstart, pstart, fend in pw.iter_fields(buf, start, end):
        stripped = _strip_tensor(buf, pstart, fend, location) \
            if field == _GRAPH_INITIALIZER else None
        if stripped is not None:
            out += buf[copied:fstart]
            out += pw.len_prefix(_GRAPH_INITIALIZER, len(stripped)) + stripped
            copied = fend
    out += buf[copied:end]
    return bytes(out)


class _FileBytes:
    """A file's bytes by index and slice, read with ``pread`` (a small window is cached).

    Walking the protobuf headers through a memory map would map the page-cache folios around
    every header (up to 2 MiB each, where the kernel caches the file in large folios) and count
    them as resident; reads copy only the bytes asked for.
    """

    _WINDOW = 16 << 10

    def __init__(self, fd: int, size: int) -> None:
        self._fd, self._size = fd, size
        self._start, self._window = 0, b""

    def _read(self, start: int, stop: int) -> bytes:
        parts, pos = [], start
        while pos < stop:
            part = os.pread(self._fd, stop - pos, pos)
            if not part:
                raise IndexError("read past the end of the file")
            parts.append(part)
            pos += len(part)
        return b"".join(parts)

    @overload
    def __getitem__(self, key: int) -> int: ...
    @overload
    def __getitem__(self, key: slice) -> bytes: ...

    def __getitem__(self, key: int | slice) -> int | bytes:
        if isinstance(key, slice):
            start, stop = key.start, min(key.stop, self._size)
            if self._start <= start and stop <= self._start + len(self._window):
                return self._window[start - self._start:stop - self._start]
            return self._read(start, stop)
        if not self._start <= key < self._start + len(self._window):
            if not 0 <= key < self._size:
                raise IndexError("read past the end of the file")
            self._start = key
            self._window = self._read(key, min(key + self._WINDOW, self._size))
        return self._window[key - self._start]


def _graph_only_bytes(path: str) -> bytes:
    """The model's bytes with every large inline weight replaced by a reference to itself."""
    size = os.path.getsize(path)
    if size == 0:
        raise InputError(f"{path}: empty file, not an ONNX model")
    location = os.path.basename(path)
    with open(path, "rb") as f:
        # a small file is read whole: indexing bytes is several times faster than _FileBytes,
        # which matters for graphs of many nodes (every field header is walked)
        buf: bytes | _FileBytes
        if size <= WHOLE_READ_LIMIT:
            buf = f.read(size + 1)
            if len(buf) != size:
                raise InputError(f"{path}: changed while being read")
        else:
            buf = _FileBytes(f.fileno(), size)
        out = bytearray()
        try:
            for field, _wire, fstart, pstart, fend in pw.iter_fields(buf, 0, size):
                if fend > size:
                    raise ValueError("truncated")
                if field == _MODEL_GRAPH:
                    graph = _strip_graph(buf, pstart, fend, location)
                    out += pw.len_prefix(_MODEL_GRAPH, len(graph)) + graph
                else:
                    out += buf[fstart:fend]
        except (ValueError, IndexError) as e:
            raise InputError(f"{path}: not an ONNX model or truncated ({e})") from None
    return bytes(out)


def _without_external(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy fit for the checker: external weights become typed graph inputs.

    The checker resolves external files against the current directory, not the model's; the
    files are checked separately (``onnxfold.io.trust``).
    """
    checked = onnx.ModelProto()
    checked.CopyFrom(proto)
    inputs = {i.name for i in checked.graph.input}
    kept = []
    for tensor in checked.graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            kept.append(tensor)
        elif tensor.name not in inputs:
            checked.graph.input.append(
                onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, tensor.dims))
    del checked.graph.initializer[:]
    checked.graph.initializer.extend(kept)
    for graph in graph_protos(checked.graph):  # elsewhere: an empty stand-in of the same type
        for tensor in tensor_protos(graph, initializers=graph is not checked.graph):
            if tensor.data_location == onnx.TensorProto.EXTERNAL:
                tensor.CopyFrom(onnx.TensorProto(name=tensor.name, data_type=tensor.data_type,
                                                 dims=[0]))
    return checked


def _defined(value: ir.Value) -> bool:
    return value.producer() is not None or value.is_graph_input() or value.is_initializer()


Reorders = list[list[int] | None]  # per graph (all_graphs' order): new position -> old index


def check_structure(model: ir.Model, path: str) -> Reorders:
    """Every value read is defined somewhere, and every graph can be sorted (a graph out of
    order is sorted, as onnxruntime accepts it); InputError otherwise, even with the checker
    off (``--skip-check``). How each graph was reordered (None: it was in order)."""
    graphs = all_graphs(model)  # listed before any sort changes which subgraph comes first
    reorders: Reorders = []
    for graph in graphs:
        for node in graph:
            for value in node.inputs:
                if value is not None and not _defined(value):
                    raise InputError(f"{path}: value '{value.name}' read by {node.op_type} node "
                                     f"'{node.name}' is never defined")
        for value in graph.outputs:
            if not _defined(value):
                raise InputError(f"{path}: graph output '{value.name}' is never defined")
        if in_order(graph):
            reorders.append(None)
            continue
        index = {id(node): i for i, node in enumerate(graph)}
        try:
            graph.sort()
        except ValueError:
            raise InputError(f"{path}: graph '{graph.name}' has a cycle") from None
        reorders.append([index[id(node)] for node in graph])
    return reorders


def _reordered(proto: onnx.ModelProto, reorders: Reorders) -> onnx.ModelProto:
    """``proto`` (a copy of the one the model was read from) with its graphs' nodes in the
    order :func:`check_structure` sorted the model's into."""
    for graph, order in zip(list(graph_protos(proto.graph)), reorders, strict=True):
        if order is not None:
            nodes = list(graph.node)
            del graph.node[:]
            graph.node.extend(nodes[i] for i in order)
    return proto


LIGHT_PROTO_KEY = "onnxfold.light_proto"  # Model.meta: the graph as read, for shape inference
_UNSORTED = "must be topologically sorted"  # onnx's checker, on a graph out of order


def load_model(path: str | os.PathLike, check: bool = True,
               keep_light: bool = False) -> ir.Model:
    """Load ``path`` with weights memory-mapped; raise InputError on anything unreadable.

    ``keep_light``: also keep, in ``model.meta[LIGHT_PROTO_KEY]``, the proto as read with its
    large weights as typed graph inputs (what shape inference wants), when it describes the
    model exactly (no graph needed sorting, no subgraph weight is external): the first
    inference then need not serialize the model again.
    """
    path = os.fspath(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as e:
        raise InputError(f"{path}: cannot open ({e.strerror})") from None
    if stat.S_ISDIR(info.st_mode):
        raise InputError(f"{path}: is a directory, not an ONNX file")
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{path}: not a regular file")
    try:
        proto = onnx.ModelProto.FromString(_graph_only_bytes(path))
    except InputError:
        raise
    except (OSError, MemoryError) as e:  # a resource limit is named, the input is not blamed
        raise limit_error(e, f"{path}: cannot load") or \
            InputError(f"{path}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    except Exception as e:  # protobuf's DecodeError and friends
        raise InputError(f"{path}: not an ONNX model ({type(e).__name__})") from None
    if not proto.HasField("graph") or proto.ir_version == 0:
        raise InputError(f"{path}: not an ONNX model (no graph or IR version)")
    refuse_too_many_nodes(proto, path)
    densify(proto, path)
    _refuse_external_in_functions(proto, path)
    light = _without_external(proto) if check or keep_light else None
    unsorted = False
    try:
        unknown = _run_checker(light, path) if light is not None and check else \
            unknown_default_ops(proto, path)
    except InputError as e:  # checked again once sorted (onnxruntime accepts it unsorted)
        if _UNSORTED not in str(e):
            raise
        unsorted = True
    model, data_files, reorders = _checked_model(proto, path)
    if unsorted:
        assert light is not None  # the checker ran on it
        unknown = _run_checker(_reordered(light, reorders), path)
    if keep_light and light is not None and not any(reorders) and \
            not _external_in_subgraphs(proto) and not _small_external(proto):
        model.meta[LIGHT_PROTO_KEY] = light
    model.meta[UNKNOWN_OPS_KEY] = tuple(unknown)
    model.meta[DATA_FILES_KEY] = frozenset(data_files)
    model.meta[SOURCE_KEY] = os.path.abspath(path)
    return model


CHECK_INLINE_LIMIT = 1 << 30  # bytes of an in-memory proto checked as it is; above: see below
PLUGIN_DOMAIN = "onnxfold.unknown"


def _run_checker(proto: onnx.ModelProto, label: str) -> list[str]:
    """onnx's checker; its first line as an InputError. Ops of the default domain that onnx
    does not know (TensorRT-style plugins) are let through: the model is checked with them in
    a domain of their own, and their names are returned (they are never folded)."""
    try:
        onnx.checker.check_model(proto)
        return []
    except UnicodeDecodeError:  # onnx's message quotes the offending bytes, and cannot be read
        raise InputError(f"{label}: invalid model: a name or op type is not UTF-8 text"
                         ) from None
    except onnx.checker.ValidationError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        failure = InputError(f"{label}: invalid model: {first}")
    unknown = unknown_default_ops(proto, label)
    if not unknown or "No Op registered for" not in str(failure):
        raise failure
    moved = onnx.ModelProto()
    moved.CopyFrom(proto)
    for graph in graph_protos(moved.graph):
        for node in graph.node:
            if node.domain in ("", "ai.onnx") and node.op_type in unknown:
                node.domain = PLUGIN_DOMAIN
    moved.opset_import.append(onnx.helper.make_opsetid(PLUGIN_DOMAIN, 1))
    try:
        onnx.checker.check_model(moved)
    except onnx.checker.ValidationError:
        raise failure from None
    return unknown


def unknown_default_ops(proto: onnx.ModelProto, label: str = "model") -> list[str]:
    """Op types of the default domain, in any graph of ``proto``, that onnx has no schema for."""
    nodes = [node for graph in graph_protos(proto.graph) for node in graph.node]
    if any(not isinstance(node.op_type, str) or not isinstance(node.domain, str)
           for node in nodes):  # protobuf gives bytes where they are not UTF-8
        raise InputError(f"{label}: invalid model: an op type or domain is not UTF-8 text")
    found = {node.op_type for node in nodes if node.domain in ("", "ai.onnx")}
    return sorted(op for op in found if not onnx.defs.has(op, ""))


def _refuse_external_in_functions(proto: onnx.ModelProto, label: str) -> None:
    """A tensor in a local function's body stored as external data: refused (the checks of
    data files, and the writer, cover the graphs; a body's file would be resolved against
    the working directory)."""
    for body in function_graphs(proto):
        if any(t.data_location == onnx.TensorProto.EXTERNAL for t in tensor_protos(body)):
            raise InputError(f"{label}: a tensor in local function body '{body.name}' is "
                             "stored as external data, which onnxfold does not support")


def _small_external(proto: onnx.ModelProto) -> bool:
    """Whether a main-graph initializer small enough for shape inference to get its data
    (``shapes.serialize_light``) is stored as external data (the reader's proto has none)."""
    return any(t.data_location == onnx.TensorProto.EXTERNAL and
               (tensor_nbytes(t) or 0) <= SMALL_TENSOR_BYTES for t in proto.graph.initializer)


def _external_in_subgraphs(proto: onnx.ModelProto) -> bool:
    return any(t.data_location == onnx.TensorProto.EXTERNAL
               for graph in graph_protos(proto.graph) if graph is not proto.graph
               for t in tensor_protos(graph))


def _checked_model(proto: onnx.ModelProto, label: str) -> tuple[ir.Model, set[str], Reorders]:
    """``proto`` as an ir.Model whose structure and tensor data are checked, the data files
    it reads, and how its graphs were sorted (:func:`check_structure`)."""
    try:
        with quiet("onnx_ir"):  # it logs, then keeps, inputs it cannot find: checked below
            model = ir.serde.deserialize_model(proto)
    except MemoryError:
        raise out_of_memory(f"{label}: cannot load") from None
    except Exception as e:
        limit = limit_error(e, f"{label}: cannot load")
        if limit is not None:
            raise limit from None
        raise InputError(f"{label}: cannot read model: {e}".splitlines()[0]) from None
    reorders = check_structure(model, label)
    files = check_tensor_data(model, label)
    _typed_by_their_data(model)
    return model, files, reorders


def _typed_by_their_data(model: ir.Model) -> None:
    """An initializer's declared type and shape (a ``value_info`` entry may claim anything)
    become its data's, which is what onnxruntime and shape inference of the file use."""
    for graph in all_graphs(model):
        for value in graph.initializers.values():
            tensor = value.const_value
            if tensor is None:
                continue
            if value.shape is None or tuple(value.shape) != tuple(tensor.shape):
                value.shape = ir.Shape(tensor.shape.numpy())
            if value.dtype != tensor.dtype:
                value.type = ir.TensorType(tensor.dtype)


def _huge(proto: onnx.ModelProto) -> bool:
    """Whether ``proto`` is too big to pass to onnx's checker as it is (which serializes it)."""
    try:
        return proto.ByteSize() >= CHECK_INLINE_LIMIT
    except Exception:  # protobuf refuses to size a message of 2 GiB or more  # noqa: BLE001
        return True


def model_from_proto(proto: onnx.ModelProto, label: str = "model", check: bool = False
                     ) -> ir.Model:
    """An in-memory model (``onnx.ModelProto``) with the checks a file gets (onnx's checker
    too, with ``check``). It has no directory, so external-data references are refused: load
    it from its file instead."""
    refuse_too_many_nodes(proto, label)
    _refuse_external_in_functions(proto, label)
    for graph in graph_protos(proto.graph):
        if any(t.data_location == onnx.TensorProto.EXTERNAL for t in tensor_protos(graph)):
            raise InputError(f"{label}: refers to external data, which an in-memory model "
                             "cannot locate safely; pass the model's file path")
    late = _huge(proto)  # the checker would serialize it: not above 2 GiB
    try:
        unknown = _run_checker(proto, label) if check and not late else \
            unknown_default_ops(proto, label)
    except InputError as e:  # checked again once sorted (onnxruntime accepts it unsorted)
        if _UNSORTED not in str(e):
            raise
        late = True
    if has_sparse(proto):  # densified in a copy: the caller's proto is left as it was
        copy = onnx.ModelProto()
        copy.CopyFrom(proto)
        densify(copy, label)
        proto = copy
    model = _checked_model(proto, label)[0]
    if check and late:  # sorted, without its large weights (typed inputs instead)
        from onnxfold.shapes import serialize_light

        unknown = _run_checker(serialize_light(model), label)
    model.meta[UNKNOWN_OPS_KEY] = tuple(unknown)
    return model
