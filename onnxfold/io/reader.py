"""Load an ONNX model into onnx-ir without copying its weights.

Large initializers stored inline (``raw_data`` inside the .onnx) are turned into external-data
references that point at their own bytes inside the .onnx file, so onnx-ir memory-maps them like
any external tensor: loading a 400 MiB model reads only its graph, never its weights.
"""

from __future__ import annotations

import dataclasses
import errno
import math
import mmap
import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import overload

import onnx
import onnx_ir as ir

from onnxfold.analysis.shapes import serialize_light, without_large_constants
from onnxfold.errors import InputError
from onnxfold.host.limits import limit_error, out_of_memory
from onnxfold.host.logs import quiet
from onnxfold.io import formats, map_types
from onnxfold.io import protowire as pw
from onnxfold.io.attribute_types import refuse_mistyped_attributes
from onnxfold.io.light_copy import light_copy
from onnxfold.io.node_bound import refuse_too_many_nodes
from onnxfold.io.opener import opened, why
from onnxfold.io.scoped_names import outer_values_over_fed_initializers, rename_shadowing_values
from onnxfold.io.single_assignment import refuse_redefinitions
from onnxfold.io.sparse import densify, has_sparse
from onnxfold.io.tensor_facts import data_dims
from onnxfold.io.text_fields import refuse_undecodable_text
from onnxfold.io.trust import check_external_fields, check_tensor_data
from onnxfold.ir.graph import all_graphs, captured_values
from onnxfold.ir.long_texts import LONG_TEXT
from onnxfold.ir.protos import (
    SMALL_TENSOR_BYTES,
    function_graphs,
    graph_protos,
    tensor_nbytes,
    tensor_protos,
)

# ModelProto.graph, GraphProto.initializer, TensorProto.raw_data / external_data / data_location
_MODEL_GRAPH, _GRAPH_NODE, _GRAPH_INITIALIZER = 7, 1, 5
_NODE_ATTRIBUTE = 5
_ATTRIBUTE_NAME, _ATTRIBUTE_S, _ATTRIBUTE_TYPE, _ATTRIBUTE_REF = 1, 4, 20, 21
_TENSOR_RAW_DATA, _TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION = 9, 13, 14
LAZY_THRESHOLD = 4096  # smaller inline weights stay in the bytes read (a mapping costs more)
WHOLE_READ_LIMIT = 32 << 20  # a model file up to this size is read at once to find its weights
SOURCE_KEY = "onnxfold.source"  # Model.meta: the file a model was loaded from
DATA_FILES_KEY = "onnxfold.data_files"  # Model.meta: the external-data files it was read from
UNKNOWN_OPS_KEY = "onnxfold.unknown_ops"  # Model.meta: default-domain ops onnx does not know


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


class _Output:
    """The bytes protobuf will parse, built in an anonymous mapping of the input's size (the
    result is never longer: a reference is shorter than the weight it replaces). Pages never
    written cost nothing, and file ranges are read straight into it (``preadv``), so the
    graph's bytes exist once, not once per concatenation."""

    def __init__(self, capacity: int) -> None:
        try:
            self.map = mmap.mmap(-1, max(capacity, 1))
        except OSError as e:  # no address space left for it: as a failed allocation
            if e.errno == errno.ENOMEM:
                raise MemoryError(f"cannot map {capacity} bytes") from None
            raise
        self.view = memoryview(self.map)
        self.pos = 0

    def add(self, data: bytes) -> None:
        self.view[self.pos:self.pos + len(data)] = data
        self.pos += len(data)

    def copy(self, buf: bytes | _FileBytes, start: int, stop: int) -> None:
        """Append ``buf[start:stop]``."""
        if isinstance(buf, _FileBytes):
            buf.read_into(self.view[self.pos:self.pos + stop - start], start)
        else:
            self.view[self.pos:self.pos + stop - start] = memoryview(buf)[start:stop]
        self.pos += stop - start

    def close(self) -> None:
        self.view.release()
        self.map.close()


Texts = dict[int, list[tuple[str, bytes]]]  # node index -> (attribute name, its text)


def _long_text(buf: bytes | _FileBytes, start: int, end: int
               ) -> tuple[str, int, int, int] | None:
    """The attribute message ``buf[start:end]``'s name, and where its text field starts, its
    text starts and ends, when it is a STRING attribute of ``LONG_TEXT`` bytes or more (one
    text field, no reference to a function attribute); else None."""
    name, texts, kind = None, [], None
    for field, _wire, fstart, pstart, fend in pw.iter_fields(buf, start, end):
        if field == _ATTRIBUTE_NAME:
            name = bytes(buf[pstart:fend])
        elif field == _ATTRIBUTE_S:
            texts.append((fstart, pstart, fend))
        elif field == _ATTRIBUTE_TYPE:
            kind = pw.read_varint(buf, pw.read_varint(buf, fstart)[1])[0]
        elif field == _ATTRIBUTE_REF:
            return None
    if name is None or kind != onnx.AttributeProto.STRING or len(texts) != 1 or \
            texts[0][2] - texts[0][1] < LONG_TEXT:
        return None
    try:
        decoded = name.decode()
    except UnicodeDecodeError:  # refused by the checks of names later
        return None
    return decoded, *texts[0]


def _strip_node_texts(buf: bytes | _FileBytes, start: int, end: int
                      ) -> tuple[bytes, list[tuple[str, int, int]]] | None:
    """The node message ``buf[start:end]`` without the text of each long STRING attribute
    (the attribute stays, its text field left out), and each text's attribute name and place
    in ``buf``; None where it has none."""
    parts: list[bytes] = []
    texts = []
    copied = start
    for field, _wire, fstart, pstart, fend in pw.iter_fields(buf, start, end):
        if field != _NODE_ATTRIBUTE or fend - pstart < LONG_TEXT:
            continue
        found = _long_text(buf, pstart, fend)
        if found is None:
            continue
        name, text_field, text_start, text_end = found
        attr = bytes(buf[pstart:text_field]) + bytes(buf[text_end:fend])
        parts += [bytes(buf[copied:fstart]), pw.len_prefix(_NODE_ATTRIBUTE, len(attr)), attr]
        copied = fend
        texts.append((name, text_start, text_end))
    if not texts:
        return None
    parts.append(bytes(buf[copied:end]))
    return b"".join(parts), texts


def _add_stripped_graph(out: _Output, buf: bytes | _FileBytes, start: int, end: int,
                        location: str, texts: Texts, nodes: int) -> int:
    """Append the model's graph field, its large inline weights replaced by references and
    its nodes' long texts left out (read into ``texts``, by node index: ``nodes`` came in
    earlier graph fields, which protobuf merges into one); the nodes counted so far."""
    edits = []  # (field start, field end, replacement) of each stripped initializer or node
    for field, _wire, fstart, pstart, fend in pw.iter_fields(buf, start, end):
        stripped = _strip_tensor(buf, pstart, fend, location) \
            if field == _GRAPH_INITIALIZER else None
        if stripped is not None:
            edits.append((fstart, fend, pw.len_prefix(_GRAPH_INITIALIZER, len(stripped))
                          + stripped))
        if field == _GRAPH_NODE:
            if fend - pstart >= LONG_TEXT and (node := _strip_node_texts(buf, pstart, fend)):
                node_bytes, found = node
                edits.append((fstart, fend, pw.len_prefix(_GRAPH_NODE, len(node_bytes))
                               + node_bytes))
                texts[nodes] = [(name, _read(buf, a, b)) for name, a, b in found]
            nodes += 1
    length = end - start + sum(len(new) - (fend - fstart) for fstart, fend, new in edits)
    out.add(pw.len_prefix(_MODEL_GRAPH, length))
    copied = start  # the bytes before this are in ``out``
    for fstart, fend, new in edits:
        out.copy(buf, copied, fstart)
        out.add(new)
        copied = fend
    out.copy(buf, copied, end)
    return nodes


def _read(buf: bytes | _FileBytes, start: int, stop: int) -> bytes:
    """``buf[start:stop]`` as bytes of their own (one copy)."""
    return buf[start:stop] if isinstance(buf, _FileBytes) else bytes(memoryview(buf)[start:stop])


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

    def read_into(self, target: memoryview, start: int) -> None:
        """Fill ``target`` with the file's bytes from ``start`` on."""
        done = 0
        while done < len(target):
            count = os.preadv(self._fd, [target[done:]], start + done)
            if not count:
                raise IndexError("read past the end of the file")
            done += count

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


def _parse_graph_only(path: str) -> tuple[onnx.ModelProto, int, Texts]:
    """The model parsed with every large inline weight replaced by a reference to itself and
    every long text of its main graph's nodes left out; the bytes parsed; those texts."""
    location = os.path.basename(path)
    with opened(path) as f:  # a regular file, whatever the path names by now
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            raise InputError(f"{path}: empty file, not an ONNX model")
        # a small file is read whole: indexing bytes is several times faster than _FileBytes,
        # which matters for graphs of many nodes (every field header is walked)
        buf: bytes | _FileBytes
        if size <= WHOLE_READ_LIMIT:
            buf = f.read(size + 1)
            if len(buf) != size:
                raise InputError(f"{path}: changed while being read")
        else:
            buf = _FileBytes(f.fileno(), size)
        out = _Output(size)
        texts: Texts = {}
        nodes = 0
        try:
            try:
                for field, _wire, fstart, pstart, fend in pw.iter_fields(buf, 0, size):
                    if fend > size:
                        raise ValueError("truncated")
                    if field == _MODEL_GRAPH:
                        nodes = _add_stripped_graph(out, buf, pstart, fend, location, texts,
                                                    nodes)
                    else:
                        out.copy(buf, fstart, fend)
            except (ValueError, IndexError) as e:
                raise InputError(f"{path}: not an ONNX model or truncated ({e})") from None
            del buf
            return onnx.ModelProto.FromString(out.view[:out.pos]), out.pos, texts
        finally:
            out.close()


@dataclass
class _DocStrings:
    """doc_strings taken out of the reader's proto before it is copied and converted, and the
    long string attributes (``onnxfold.ir.long_texts``) the reader left out of it
    (:func:`_parse_graph_only`), given to the ir.Model afterwards: a 200 MB doc_string or a
    custom op's 256 MiB payload is then held once (the model's), not also by the proto, the
    checker's copy and every serialization for shape inference."""

    model: str | None = None
    graph: str | None = None
    nodes: dict[int, str] = dataclasses.field(default_factory=dict)  # by main-graph index
    # long texts of the main graph's nodes, by index: (attribute name, its bytes)
    texts: dict[int, list[tuple[str, bytes]]] = dataclasses.field(default_factory=dict)

    @classmethod
    def take(cls, proto: onnx.ModelProto) -> _DocStrings:
        docs = cls()
        if proto.HasField("doc_string"):
            docs.model = proto.doc_string
            proto.ClearField("doc_string")
        if proto.graph.HasField("doc_string"):
            docs.graph = proto.graph.doc_string
            proto.graph.ClearField("doc_string")
        for index, node in enumerate(proto.graph.node):
            if node.HasField("doc_string"):
                docs.nodes[index] = node.doc_string
                node.ClearField("doc_string")
        return docs

    def give(self, model: ir.Model) -> None:
        """Set them on ``model``, just deserialized from the proto they were taken from."""
        if self.model is not None:
            model.doc_string = self.model
        if self.graph is not None:
            model.graph.doc_string = self.graph
        if self.nodes or self.texts:
            for index, node in enumerate(model.graph):
                if index in self.nodes:
                    node.doc_string = self.nodes[index]
                for name, raw in self.texts.pop(index, ()):
                    node.attributes[name] = _text_attribute(node.attributes[name], raw)


def _text_attribute(emptied: ir.Attr, raw: bytes) -> ir.Attr:
    """The STRING attribute ``emptied`` with its text back: a str, or the bytes as they are
    where they are no UTF-8 (as onnx-ir keeps them)."""
    try:
        value: str | bytes = raw.decode()
    except UnicodeDecodeError:
        value = raw
    del raw  # (the caller's reference goes with its list entry)
    return ir.Attr(emptied.name, ir.AttributeType.STRING, value, doc_string=emptied.doc_string)


def _without_external(proto: onnx.ModelProto, parsed_bytes: int | None = None,
                      subgraphs: bool = True) -> onnx.ModelProto:
    """A copy fit for the checker: external weights become typed graph inputs, bulky strings
    empty ones (``onnxfold.io.light_copy``). ``subgraphs``: False when the caller knows the
    main graph has none (its nodes' attributes are then not walked to look for them).

    The checker resolves external files against the current directory, not the model's; the
    files are checked separately (``onnxfold.io.trust``).
    """
    checked = light_copy(proto, parsed_bytes)
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in checked.graph.initializer):
        _external_as_inputs(checked.graph)
    graphs = graph_protos(checked.graph) if subgraphs else [checked.graph]
    for graph in graphs:  # elsewhere: an empty stand-in of the same type
        for tensor in tensor_protos(graph, initializers=graph is not checked.graph):
            if tensor.data_location == onnx.TensorProto.EXTERNAL:
                tensor.CopyFrom(onnx.TensorProto(name=tensor.name, data_type=tensor.data_type,
                                                 dims=[0]))
    return checked


def _external_as_inputs(graph: onnx.GraphProto) -> None:
    """``graph``'s external initializers become typed inputs (the rest stay, in order)."""
    inputs = {i.name for i in graph.input}
    kept = []
    for tensor in graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            kept.append(tensor)
        elif tensor.name not in inputs:
            graph.input.append(
                onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, tensor.dims))
    del graph.initializer[:]
    graph.initializer.extend(kept)


def _defined(value: ir.Value) -> bool:
    return value.producer() is not None or value.is_graph_input() or value.is_initializer()


Reorders = list[list[int] | None]  # per graph (all_graphs' order): new position -> old index


def check_structure(graphs: Sequence[ir.Graph], path: str) -> Reorders:
    """Every value read is defined somewhere, and every graph can be sorted (a graph out of
    order is sorted, as onnxruntime accepts it); InputError otherwise, even with the checker
    off (``--skip-check``). ``graphs``: a model's (``all_graphs``), listed before any sort
    changes which subgraph comes first. How each graph was reordered (None: in order)."""
    reorders: Reorders = []
    for graph in graphs:
        if _reads_defined_in_order(graph, path):
            reorders.append(None)
            continue
        index = {id(node): i for i, node in enumerate(graph)}
        try:
            graph.sort()
        except ValueError:
            raise InputError(f"{path}: graph '{graph.name}' has a cycle") from None
        reorders.append([index[id(node)] for node in graph])
    return reorders


MAX_TENSOR_BYTES = (1 << 63) - 1  # what numpy, onnxruntime and a file offset can address


def check_declared_sizes(graphs: Sequence[ir.Graph], path: str) -> None:
    """InputError for a value (an input, an output, a ``value_info``) declared with dims whose
    known ones alone make more bytes than :data:`MAX_TENSOR_BYTES`: no tensor of that type can
    exist (but an empty one, where a symbolic dim is 0), so the model can never run, and every
    size computed from it would overflow int64 (numpy's arrays, onnxruntime's feeds)."""
    for graph in graphs:
        values = [*graph.inputs, *graph.outputs, *(v for node in graph for v in node.outputs)]
        for value in values:
            shape, dtype = value.shape, value.dtype
            if shape is None or dtype is None:
                continue
            known = [d for d in shape if isinstance(d, int)]
            try:
                bits = dtype.bitwidth
            except TypeError:  # strings: at least a byte each
                bits = 8
            nbytes = -(-math.prod(known) * bits // 8)
            if nbytes > MAX_TENSOR_BYTES:
                dims = [d if isinstance(d, int) else str(d) for d in shape]
                raise InputError(f"{path}: value '{value.name}' is declared "
                                 f"{dtype.name.lower()}{dims}: {nbytes} bytes or more, more "
                                 f"than any tensor can hold ({MAX_TENSOR_BYTES})")


def _reads_defined_in_order(graph: ir.Graph, path: str) -> bool:
    """InputError unless every value ``graph`` reads or returns is defined; whether the graph
    is in topological order (``onnxfold.ir.graph.in_order``). One walk for both: loading a
    graph of many nodes walks it as few times as it can."""
    ordered = True
    seen: set[ir.Value] = set()  # the outputs of the nodes walked so far
    for node in graph:
        for value in node.inputs:
            if value is None:
                continue
            producer = value.producer()
            if producer is None:
                if not (value.is_graph_input() or value.is_initializer()):
                    raise InputError(f"{path}: value '{value.name}' read by {node.op_type} "
                                     f"node '{node.name}' is never defined")
            elif ordered and producer.graph is graph and value not in seen:
                ordered = False
        if ordered and any(value not in seen and (p := value.producer()) is not None
                           and p.graph is graph for value in captured_values(node)):
            ordered = False
        seen.update(node.outputs)
    for value in graph.outputs:
        if not _defined(value):
            raise InputError(f"{path}: graph output '{value.name}' is never defined")
    return ordered


def _reordered(proto: onnx.ModelProto, reorders: Reorders) -> onnx.ModelProto:
    """``proto`` (a copy of the one the model was read from) with its graphs' nodes in the
    order :func:`check_structure` sorted the model's into."""
    for graph, order in zip(list(graph_protos(proto.graph)), reorders, strict=True):
        if order is not None:
            nodes = list(graph.node)
            del graph.node[:]
            graph.node.extend(nodes[i] for i in order)
    return proto


_UNSORTED = "must be topologically sorted"  # onnx's checker, on a graph out of order


def load_model(path: str | os.PathLike, *, check: bool = True) -> ir.Model:
    """Load ``path`` with weights memory-mapped; raise InputError on anything unreadable."""
    return _load(os.fspath(path), check, keep_light=False)[0]


def load_with_light_proto(path: str | os.PathLike, check: bool = True
                          ) -> tuple[ir.Model, onnx.ModelProto | None]:
    """:func:`load_model`, and the proto as read with its large weights as typed graph inputs
    (what shape inference wants) when it describes the model exactly (no graph needed
    sorting, no subgraph weight is external), else None: the first inference then need not
    serialize the model again."""
    return _load(os.fspath(path), check, keep_light=True)


def _load(path: str, check: bool, keep_light: bool
          ) -> tuple[ir.Model, onnx.ModelProto | None]:
    try:
        info = os.stat(path)
    except OSError as e:
        raise InputError(f"{path}: {why(e)}") from None
    if stat.S_ISDIR(info.st_mode):
        foreign = formats.describe(path)
        raise InputError(foreign.message(path) if foreign is not None else
                         f"{path}: is a directory, not an ONNX file")
    foreign = formats.describe(path)  # a few bytes: named before protobuf parses anything
    if foreign is not None:
        raise InputError(foreign.message(path))
    try:
        proto, parsed_bytes, texts = _parse_graph_only(path)
    except InputError as e:
        raise _named(path) or e from None
    except (OSError, MemoryError) as e:  # a resource limit is named, the input is not blamed
        raise limit_error(e, f"{path}: cannot load") or \
            InputError(f"{path}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    except Exception as e:  # protobuf's DecodeError and friends
        raise _named(path) or InputError(f"{path}: not an ONNX model ({type(e).__name__})"
                                         ) from None
    if not proto.HasField("graph") or proto.ir_version == 0:
        raise _named(path) or InputError(f"{path}: not an ONNX model (no graph or IR version)")
    graphs = refuse_too_many_nodes(proto, path)  # the graph protos, for the checks below
    ops = refuse_redefinitions(proto, path)  # (and every name is text)
    densify(proto, path, graphs)
    _refuse_external_in_functions(proto, path)
    docs = _DocStrings.take(proto)
    docs.texts = texts
    light = _without_node_metadata(_without_external(proto, parsed_bytes,
                                                     subgraphs=len(graphs) > 1)) \
        if check or keep_light else None
    unsorted = False
    try:
        unknown = _run_checker(light, path, ops) if light is not None and check else \
            unknown_default_ops(ops)
    except InputError as e:  # checked again once sorted (onnxruntime accepts it unsorted)
        if _UNSORTED not in str(e):
            raise
        unsorted = True
    model, data_files, reorders, renamed = _checked_model(proto, path, docs)
    if unsorted:
        assert light is not None  # the checker ran on it
        unknown = _run_checker(_reordered(light, reorders), path, ops)
    describes = keep_light and light is not None and not any(reorders) and \
        not renamed and \
        not _external_in_subgraphs(graphs) and not _small_external(proto)
    model.meta[UNKNOWN_OPS_KEY] = tuple(unknown)
    model.meta[DATA_FILES_KEY] = frozenset(data_files)
    model.meta[SOURCE_KEY] = os.path.abspath(path)
    return model, light if describes else None


def _without_node_metadata(light: onnx.ModelProto) -> onnx.ModelProto:
    """``light`` (the reader's proto for onnx's checker, kept for the first shape inference)
    without its nodes' ``metadata_props`` (in place): neither the checker nor inference reads
    them (the checker refuses a model's duplicate keys, not a node's), and an exporter's
    (dynamo's stack trace, namespace and FX node of every node, ~1.8 KiB a node) are most of a
    graph's proto, which the checker serializes and parses (0.34 s against 0.05 s without them
    on a 128-layer dynamo Llama) and inference serializes, parses and copies back (~1.3 MiB a
    layer)."""
    for graph in graph_protos(light.graph):
        for node in graph.node:
            del node.metadata_props[:]
    for function in light.functions:
        for node in function.node:
            del node.metadata_props[:]
    return light


def _named(path: str) -> InputError | None:
    """The error naming what a file that is not ONNX is, when its weaker signs tell
    (:func:`onnxfold.io.formats.describe_after_failure`)."""
    foreign = formats.describe_after_failure(path)
    return InputError(foreign.message(path)) if foreign is not None else None


CHECK_INLINE_LIMIT = 1 << 30  # bytes of an in-memory proto checked as it is; above: see below
PLUGIN_DOMAIN = "onnxfold.unknown"


def _run_checker(proto: onnx.ModelProto, label: str, ops: frozenset[str]) -> list[str]:
    """onnx's checker; its first line as an InputError. Ops of the default domain that onnx
    does not know (TensorRT-style plugins: among ``ops``, those the graphs use) are let
    through: the model is checked with them in a domain of their own, and their names are
    returned (they are never folded)."""
    try:
        onnx.checker.check_model(without_large_constants(proto))  # (their data: trust.py)
        return unknown_default_ops(ops)  # none
    except UnicodeDecodeError:  # onnx's message quotes the offending bytes, and cannot be read
        raise InputError(f"{label}: invalid model: a name or op type is not UTF-8 text"
                         ) from None
    except onnx.checker.ValidationError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        failure = InputError(f"{label}: invalid model: {first}")
    unknown = unknown_default_ops(ops)
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


def unknown_default_ops(ops: frozenset[str]) -> list[str]:
    """Those of ``ops`` (op types of the default domain a model's graphs use:
    ``refuse_redefinitions`` collects them) that onnx has no schema for."""
    return sorted(op for op in ops if not onnx.defs.has(op, ""))


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


def _external_in_subgraphs(graphs: Sequence[onnx.GraphProto]) -> bool:
    """Whether a tensor of a subgraph is stored as external data (``graphs``: a model's main
    graph, then its subgraphs: ``graph_protos``)."""
    return any(t.data_location == onnx.TensorProto.EXTERNAL
               for graph in graphs[1:] for t in tensor_protos(graph))


def _checked_model(proto: onnx.ModelProto, label: str, docs: _DocStrings | None = None,
                   shared: bool = False) -> tuple[ir.Model, set[str], Reorders, int]:
    """``proto`` as an ir.Model whose structure and tensor data are checked, the data files
    it reads, how its graphs were sorted (:func:`check_structure`) and how many values of its
    subgraphs were renamed (``scoped_names``); ``docs``: the doc_strings taken out of
    ``proto``, given back to the model; ``shared``: ``proto`` is a caller's, which the model's
    tensors share and nothing here may change."""
    check_external_fields(proto, label)  # what onnx-ir would fail to read, named first
    aside = map_types.set_aside(proto)  # onnx-ir cannot read them
    try:
        with quiet("onnx_ir"):  # it logs, then keeps, inputs it cannot find: checked below
            model = ir.serde.deserialize_model(proto)
        if aside:
            model.meta[map_types.MAP_TYPES_KEY] = aside
        if docs is not None:
            docs.give(model)
    except MemoryError:
        raise out_of_memory(f"{label}: cannot load") from None
    except Exception as e:
        limit = limit_error(e, f"{label}: cannot load")
        if limit is not None:
            raise limit from None
        raise InputError(f"{label}: cannot read model: {_root_cause(e)}".splitlines()[0]
                         ) from None
    finally:
        map_types.give_back(aside, proto)  # the caller's proto as it was
    graphs = all_graphs(model)
    refuse_undecodable_text(model, graphs, label)
    reorders = check_structure(graphs, label)
    if any(order is not None for order in reorders):
        graphs = all_graphs(model)  # sorted: its subgraphs may come in another order
    refuse_mistyped_attributes(graphs, model.opset_imports.get(
        "", model.opset_imports.get("ai.onnx")), label)
    check_declared_sizes(graphs, label)
    files = check_tensor_data(graphs, label)
    _typed_by_their_data(graphs)
    if shared:
        _renamed_apart(graphs)
    _metadata_held_once(graphs, shared)
    outer_values_over_fed_initializers(model)
    return model, files, reorders, rename_shadowing_values(model)


def _root_cause(error: BaseException) -> str:
    """What caused ``error``: onnx-ir wraps the error of each graph, node and attribute it
    reads in one naming only where it was ("Error calling _deserialize_graph with: <graph
    name>"); the innermost says what is wrong."""
    seen = {id(error)}
    while error.__cause__ is not None and id(error.__cause__) not in seen:
        error = error.__cause__
        seen.add(id(error))
    return f"{error}" or type(error).__name__


class CallersTensor(ir.serde.TensorProtoTensor):
    """A tensor of a proto the caller holds, read from it as it is, that takes a copy of its
    own before anything is written into it (:meth:`own`): onnx-ir's tensor of a proto writes
    its name into the proto, so a subgraph's value renamed apart from an outer one
    (``scoped_names``), a value the fold renames, or the serializer naming each initializer
    after its value, changed the proto the caller holds (a silero VAD model's branch then read
    an initializer no longer there, and a check against that proto refused it)."""

    __slots__ = ("_own",)

    def __init__(self, proto: onnx.TensorProto) -> None:
        super().__init__(proto)
        self._own = False

    def own(self) -> onnx.TensorProto:
        """The proto this tensor may write into: a copy of the caller's, made once."""
        if not self._own:
            own = onnx.TensorProto()
            own.CopyFrom(self._proto)
            self._proto, self._own = own, True
        return self._proto

    @property
    def name(self) -> str:
        return self._proto.name

    @name.setter
    def name(self, value: str | None) -> None:
        if (value or "") == self._proto.name:
            return
        if value is None:
            self.own().ClearField("name")
        else:
            self.own().name = value


def _renamed_apart(graphs: Iterable[ir.Graph]) -> None:
    """Every initializer read from a caller's proto as a :class:`CallersTensor`."""
    for graph in graphs:
        for value in graph.initializers.values():
            tensor = value.const_value
            if type(tensor) is ir.serde.TensorProtoTensor:
                value.const_value = CallersTensor(tensor.raw)


def _metadata_held_once(graphs: Iterable[ir.Graph], shared: bool) -> None:
    """An initializer onnx-ir keeps as its proto (``TensorProtoTensor``) has its metadata both
    there and in its ``metadata_props``, and onnx-ir 1.1 writes both: each entry twice in the
    output, and one dropped from the dict still written. The dict becomes the one place.
    ``shared``: the protos are a caller's (``model_from_proto``), left as they were: such a
    tensor is read from a copy of its proto instead (:meth:`CallersTensor.own`; its data
    copied: only tensors with metadata, an onnxfold output's folds among them)."""
    for graph in graphs:
        for value in graph.initializers.values():
            tensor = value.const_value
            proto = getattr(tensor, "raw", None)
            if not isinstance(proto, onnx.TensorProto) or not proto.metadata_props:
                continue
            if shared:
                assert isinstance(tensor, CallersTensor)  # (_renamed_apart made it one)
                proto = tensor.own()
            del proto.metadata_props[:]


def _typed_by_their_data(graphs: Iterable[ir.Graph]) -> None:
    """An initializer's declared type and shape (a ``value_info`` entry may claim anything)
    become its data's, which is what onnxruntime and shape inference of the file use."""
    for graph in graphs:
        initializers = graph.initializers  # a UserDict: its plain dict iterates faster
        for value in getattr(initializers, "data", initializers).values():
            tensor = value.const_value
            if tensor is None:
                continue
            dims = data_dims(tensor)
            if value.shape is None or tuple(value.shape) != dims:
                value.shape = ir.Shape(dims)
            if value.dtype != tensor.dtype:
                value.type = ir.TensorType(tensor.dtype)


def _huge(proto: onnx.ModelProto) -> bool:
    """Whether ``proto`` is too big to pass to onnx's checker as it is (which serializes it)."""
    try:
        return proto.ByteSize() >= CHECK_INLINE_LIMIT
    except Exception:  # protobuf refuses to size a message of 2 GiB or more
        return True


def model_from_proto(proto: onnx.ModelProto, label: str = "model", check: bool = False
                     ) -> ir.Model:
    """An in-memory model (``onnx.ModelProto``) with the checks a file gets (onnx's checker
    too, with ``check``). It has no directory, so external-data references are refused: load
    it from its file instead."""
    refuse_too_many_nodes(proto, label)
    ops = refuse_redefinitions(proto, label)
    _refuse_external_in_functions(proto, label)
    for graph in graph_protos(proto.graph):
        if any(t.data_location == onnx.TensorProto.EXTERNAL for t in tensor_protos(graph)):
            raise InputError(f"{label}: refers to external data, which an in-memory model "
                             "cannot locate safely; pass the model's file path")
    # the checker's copy: weights as typed inputs (their data: trust.py), as a file's are
    light = without_large_constants(_without_node_metadata(
        light_copy(proto, data_from=LAZY_THRESHOLD))) if check else None
    late = light is not None and _huge(light)  # the checker serializes it: not above 2 GiB
    try:
        unknown = _run_checker(light, label, ops) if light is not None and not late else \
            unknown_default_ops(ops)
    except InputError as e:  # checked again once sorted (onnxruntime accepts it unsorted)
        if _UNSORTED not in str(e):
            raise
        late = True
    shared = True
    if has_sparse(proto):  # densified in a copy: the caller's proto is left as it was
        copy = onnx.ModelProto()
        copy.CopyFrom(proto)
        densify(copy, label)
        proto, shared = copy, False
    model = _checked_model(proto, label, shared=shared)[0]
    if late:  # sorted, without its large weights (typed inputs instead)
        unknown = _run_checker(serialize_light(model), label, ops)
    model.meta[UNKNOWN_OPS_KEY] = tuple(unknown)
    return model
