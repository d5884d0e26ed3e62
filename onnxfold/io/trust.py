"""The trust boundary for a model's tensor data: nothing is read before it is checked here.

External data (the rule, as onnxruntime >= 1.24 and onnx's checker apply it):

- ``location`` is a non-empty relative path; it may not be absolute or start with ``..`` once
  normalized (``sub/../w.bin`` is fine, ``../w.bin`` is not).
- Following symlinks, the file must lie inside the model's directory as given, or inside the
  directory of the model file's real path (the Hugging Face cache layout, where
  ``snapshots/REV/model.onnx`` and its data are symlinks into ``blobs/``).
- It must be an existing regular file with a single hard link (a hard link can make any file of
  the same filesystem look local), unless it is the model file itself.
- ``offset`` and ``length`` are non-negative; ``length``, when given, equals what the tensor's
  shape and dtype need, and ``offset + that`` fits in the file.

Inline data must hold exactly what the tensor's shape and dtype need. Every failure is an
:class:`InputError` naming the tensor. Validated external tensors point at the file's real
path, so a symlink swapped after the check cannot redirect a later read.
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
from collections.abc import Callable, Iterable, Iterator

import numpy as np
import onnx
import onnx_ir as ir

from onnxfold.errors import InputError
from onnxfold.host.terminal import printable
from onnxfold.io.mapped import MappedTensor
from onnxfold.io.publication import requested_of, variant_pattern
from onnxfold.io.tensor_facts import data_dims
from onnxfold.ir.graph import tensor_of
from onnxfold.ir.protos import data_nbytes, graph_protos


class CheckedExternalTensor(MappedTensor):
    """An external tensor whose file this module has already checked (see the module doc),
    read through its file's shared mapping (``onnxfold.io.mapped``).

    onnx-ir's own load-time check knows only the logical model directory, so it would refuse
    the hub cache layout and a model file with a second hard link, both of which onnxruntime
    loads; the check done here is the one that applies.
    """

    __slots__ = ()

    def _check_path_containment(self) -> None:
        """Called by onnx-ir before it opens the file: it must still be the file checked."""
        ensure_same_file(self.path, self.identity)


def ensure_same_file(path: str, identity: tuple[int, int] | None) -> None:
    """InputError unless ``path`` is (not through a symlink) the file of ``identity``."""
    if identity is None:
        return
    try:
        info = os.lstat(path)
    except OSError as e:
        raise InputError(f"{path}: external data file is gone ({e.strerror})") from None
    if stat.S_ISLNK(info.st_mode) or (info.st_dev, info.st_ino) != identity:
        raise InputError(f"{path}: external data file was replaced after it was checked")


def _inside(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def resolve_location(location: str, model_path: str, what: str) -> tuple[str, os.stat_result]:
    """The real path of an external-data file named by ``location``, and its ``stat``;
    InputError if refused."""
    if not location:
        raise InputError(f"{model_path}: {what}: empty external data location")
    if "\0" in location:
        raise InputError(f"{model_path}: {what}: external data location contains a NUL byte")
    if os.path.isabs(location) or location.startswith(("/", "\\")) or (
            len(location) > 1 and location[1] == ":"):
        raise InputError(f"{model_path}: {what}: absolute external data location {location!r} "
                         "(must be relative to the model's directory)")
    normal = os.path.normpath(location)
    if normal == ".." or normal.startswith(".." + os.sep):
        raise InputError(f"{model_path}: {what}: external data location {location!r} leaves "
                         "the model's directory")
    logical_dir = os.path.dirname(os.path.abspath(model_path))
    real = os.path.realpath(os.path.join(logical_dir, normal))
    allowed = (os.path.realpath(logical_dir), os.path.dirname(os.path.realpath(model_path)))
    if not any(_inside(real, d) for d in allowed):
        raise InputError(f"{model_path}: {what}: external data location {location!r} resolves "
                         "outside the model's directory")
    try:
        info = os.stat(real)
    except OSError:
        raise InputError(f"{model_path}: {what}: external data file not found: "
                         f"{location}") from None
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{model_path}: {what}: external data location {location!r} is not a "
                         "regular file")
    if info.st_nlink > 1 and not os.path.samefile(real, model_path) and \
            not _one_data_two_names(real, info):
        raise InputError(f"{model_path}: {what}: external data file {location!r} has "
                         f"{info.st_nlink} hard links (refused, as onnx's checker does)")
    return real, info


def _one_data_two_names(real: str, info: os.stat_result) -> bool:
    """Whether the file's only other name is its variant beside it (``m.onnx.data`` and
    ``m.onnx.onnxfold-3f9a0c12.data``, one file): what a kill leaves while onnxfold gives published
    data its plain name back (``writer._Files.take_requested_name``). Both names are in the
    model's directory, so the second link exposes no file from elsewhere."""
    if info.st_nlink != 2:
        return False
    directory, name = os.path.split(real)
    requested = requested_of(name)
    others = [requested] if requested is not None else []
    with contextlib.suppress(OSError):
        pattern = variant_pattern(name)
        others += [entry.name for entry in os.scandir(directory) if pattern.match(entry.name)]
    for other in others:
        with contextlib.suppress(OSError):
            seen = os.stat(os.path.join(directory, other), follow_symlinks=False)
            if (seen.st_dev, seen.st_ino) == (info.st_dev, info.st_ino):
                return True
    return False


Rebind = Callable[[ir.TensorProtocol], None]


def _tensors(graphs: Iterable[ir.Graph]
             ) -> Iterator[tuple[str, ir.TensorProtocol, Rebind | None, bool]]:
    """Every tensor of ``graphs`` (a model's, ``all_graphs``: initializers and tensor
    attributes): what it is, the tensor, a function that puts a replacement in its place, and
    whether it is an initializer (which may keep referring to its file)."""
    for graph in graphs:
        initializers = graph.initializers  # a UserDict: its plain dict iterates faster
        for name, value in getattr(initializers, "data", initializers).items():
            if value.const_value is not None:
                yield f"initializer {name}", value.const_value, functools.partial(
                    setattr, value, "const_value"), True
        for node in graph:
            attributes = node.attributes
            # onnx-ir's Attributes is a UserDict: its plain dict iterates several times faster
            for attr in getattr(attributes, "data", attributes).values():
                kind = attr.type
                if kind is not _TENSOR and kind is not _TENSORS:
                    continue
                what = f"{node.op_type} attribute {attr.name}"
                if kind is _TENSOR:
                    yield what, tensor_of(attr), functools.partial(_rebind_attr, node,
                                                                   attr.name), False
                else:
                    for tensor in attr.as_tensors():
                        yield what, tensor, None, False


_TENSOR, _TENSORS = ir.AttributeType.TENSOR, ir.AttributeType.TENSORS


def _rebind_attr(node: ir.Node, name: str, tensor: ir.TensorProtocol) -> None:
    node.attributes[name] = ir.AttrTensor(name, tensor)


def _expected_bytes(tensor: ir.TensorProtocol, model_path: str, what: str,
                    dtype: ir.DataType | None = None) -> int:
    """The bytes ``tensor``'s dims and dtype (``dtype``: read already) need; InputError if
    they are invalid or have no size."""
    dims = list(data_dims(tensor))
    if any(not isinstance(d, int) or d < 0 for d in dims):
        raise InputError(f"{model_path}: {what}: invalid dimensions {dims}")
    if dtype is None:
        dtype = _dtype(tensor, model_path, what)
    if dtype in (ir.DataType.STRING, ir.DataType.UNDEFINED):
        raise InputError(f"{model_path}: {what}: {dtype.name.lower()} tensors cannot hold "
                         "raw or external data")
    nbytes = data_nbytes(dims, dtype)
    if nbytes is None:
        raise InputError(f"{model_path}: {what}: data type {dtype.name} has no size")
    return nbytes


def _dtype(tensor: ir.TensorProtocol, model_path: str, what: str) -> ir.DataType:
    try:
        return tensor.dtype
    except ValueError:  # a data_type number onnx-ir does not know
        proto = getattr(tensor, "raw", None)
        number = proto.data_type if isinstance(proto, onnx.TensorProto) else "?"
        raise InputError(f"{model_path}: {what}: unknown data type {number}") from None


def _checked_external(tensor: ir.ExternalTensor, model_path: str, what: str,
                      resolved: dict[str, tuple[str, os.stat_result]]) -> CheckedExternalTensor:
    """``tensor`` bound to its checked file; ``resolved`` caches each location's resolution
    for the model being checked (thousands of small weights name the same file)."""
    location = os.fspath(tensor.location)
    if location not in resolved:
        resolved[location] = resolve_location(location, model_path, what)
    real, info = resolved[location]
    offset, length = tensor.offset or 0, tensor.length
    needed = _expected_bytes(tensor, model_path, what)
    if offset < 0 or (length is not None and length < 0):
        raise InputError(f"{model_path}: {what}: negative external data offset or length")
    if length is not None and length != needed:
        raise InputError(f"{model_path}: {what}: external data length {length} B does not match "
                         f"its shape and dtype ({needed} B)")
    if offset + needed > info.st_size:
        ends = offset + needed
        raise InputError(f"{model_path}: {what}: external data ends at byte "
                         f"{ends if ends < 2**63 else 'beyond 2**63'}, "
                         f"past the end of {tensor.location} ({info.st_size} B)")
    checked = CheckedExternalTensor(
        os.path.basename(real), offset, needed, tensor.dtype, shape=tensor.shape,
        name=tensor.name or "", doc_string=tensor.doc_string,
        metadata_props=dict(tensor.metadata_props), base_dir=os.path.dirname(real),
        identity=(info.st_dev, info.st_ino))
    return checked


def _check_inline(tensor: ir.TensorProtocol, model_path: str, what: str) -> None:
    proto = getattr(tensor, "raw", None)
    raw = getattr(proto, "raw_data", None)
    dtype = _dtype(tensor, model_path, what)
    if dtype == ir.DataType.STRING and not raw:
        return
    needed = _expected_bytes(tensor, model_path, what, dtype)
    if raw:
        if len(raw) != needed:
            raise InputError(f"{model_path}: {what}: raw_data has {len(raw)} B, its shape and "
                             f"dtype need {needed} B")
        return
    _check_int32_data(proto, tensor.dtype, model_path, what)
    try:
        arr = tensor.numpy()
    except Exception as e:  # onnx-ir raises several types on malformed typed fields
        raise InputError(f"{model_path}: {what}: unreadable tensor data "
                         f"({type(e).__name__})") from None
    if tuple(arr.shape) != tuple(tensor.shape.numpy()):
        raise InputError(f"{model_path}: {what}: data does not match its shape")


# Types stored bit pattern by bit pattern in int32_data, and the patterns' range: onnxruntime
# refuses a model with a value outside it ("data overflow"). Integer types narrower than int32
# (int8/16, uint8/16, the packed 4- and 2-bit ones) it accepts and truncates, as numpy (and so
# onnx-ir) does: those are not refused. A bool is any value but 0 to onnxruntime, the low byte
# to onnx-ir: normalized to 0/1 where they differ.
_INT32_DATA_BITS = {  # (the newer types only where the installed onnx-ir knows them)
    getattr(ir.DataType, name): bits
    for name, bits in (("FLOAT16", 16), ("BFLOAT16", 16), ("FLOAT8E4M3FN", 8),
                       ("FLOAT8E4M3FNUZ", 8), ("FLOAT8E5M2", 8), ("FLOAT8E5M2FNUZ", 8),
                       ("FLOAT8E8M0", 8), ("FLOAT4E2M1", 8))
    if hasattr(ir.DataType, name)}


def _check_int32_data(proto: object, dtype: ir.DataType, model_path: str, what: str) -> None:
    """Refuse a float16/bfloat16/float8/float4 tensor whose ``int32_data`` holds a value
    outside its bit patterns, as onnxruntime does when it loads the model; read a bool's
    values as onnxruntime does."""
    if not isinstance(proto, onnx.TensorProto) or not proto.int32_data:
        return
    if dtype == ir.DataType.BOOL:
        values = np.asarray(proto.int32_data, dtype=np.int64)
        if ((values != 0) & (values != 1)).any():  # read before numpy() caches anything
            proto.int32_data[:] = (values != 0).astype(np.int32).tolist()
        return
    bits = _INT32_DATA_BITS.get(dtype)
    if bits is None:
        return
    values = np.asarray(proto.int32_data, dtype=np.int64)
    bad = values[(values < 0) | (values >= 1 << bits)]
    if bad.size:
        raise InputError(f"{model_path}: {what}: {dtype.name.lower()} value {int(bad[0])} in "
                         f"int32_data is not a {bits}-bit pattern (onnxruntime refuses the "
                         "model: data overflow)")


def check_external_fields(proto: onnx.ModelProto, model_path: str) -> None:
    """Before a tensor of ``proto`` is read as a model's (onnx-ir's reader, then
    :func:`check_tensor_data`): each external tensor's ``offset`` and ``length``, where given,
    a non-negative integer (InputError naming the tensor, as for the rest of the rule; onnx's
    own refusal reached the user only as onnx-ir's failure to describe it)."""
    external = onnx.TensorProto.EXTERNAL
    for graph in graph_protos(proto.graph):
        for tensor in graph.initializer:
            if tensor.data_location == external:
                _external_fields(tensor, model_path, f"initializer {tensor.name}")
        for node in graph.node:
            for attr in node.attribute:
                for tensor in (attr.t, *attr.tensors) if attr.type in _TENSOR_ATTRIBUTES \
                        else ():
                    if tensor.data_location == external:
                        _external_fields(tensor, model_path,
                                         f"{node.op_type} attribute {attr.name}")


_TENSOR_ATTRIBUTES = (onnx.AttributeProto.TENSOR, onnx.AttributeProto.TENSORS)


def _external_fields(tensor: onnx.TensorProto, model_path: str, what: str) -> None:
    """:func:`check_external_fields` of one external tensor (``what`` names it)."""
    for entry in tensor.external_data:
        if entry.key not in ("offset", "length"):
            continue
        try:
            value = int(entry.value)
        except ValueError:
            raise InputError(f"{model_path}: {printable(what)}: external data {entry.key} "
                             f"'{printable(entry.value[:40])}' is not an integer") from None
        if value < 0:
            raise InputError(f"{model_path}: {printable(what)}: negative external data "
                             "offset or length")


def check_tensor_data(graphs: Iterable[ir.Graph], model_path: str) -> set[str]:
    """Check the data of every tensor in ``graphs`` (a model's, ``all_graphs``; see the module
    doc); rebind external tensors to real paths.

    Returns the data files the model reads (real paths).
    """
    files: set[str] = set()
    resolved: dict[str, tuple[str, os.stat_result]] = {}
    for what, tensor, rebind, initializer in list(_tensors(graphs)):
        if isinstance(tensor, CheckedExternalTensor):
            continue
        if not isinstance(tensor, ir.ExternalTensor):
            _check_inline(tensor, model_path, what)
        elif rebind is None:
            raise InputError(f"{model_path}: {what}: external data in a tensor list is not "
                             "supported")
        else:
            checked = _checked_external(tensor, model_path, what, resolved)
            files.add(checked.path)
            if initializer:
                rebind(checked)
            else:  # an attribute keeps no reference to the input's files: its bytes, read now
                rebind(ir.Tensor(np.array(checked.numpy()), name=tensor.name))
    return files
