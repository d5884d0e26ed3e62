"""Save an onnx-ir model by streaming its weights, atomically.

The graph is serialized without its large initializers; each of them is then appended to the
file as a protobuf field written piece by piece: weights still on disk are copied file-to-file,
folded arrays are written from their buffers (non-contiguous views in chunks). No full
in-memory protobuf of the model is ever built. Models whose weights exceed the protobuf limit
are written with external data. Everything goes to temporary files renamed at the end, so a
failure never leaves a half-written output, and the model's own input files are never targets.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import onnx
import onnx_ir as ir

from onnxfold.arrays import copy_c_order, release_pages
from onnxfold.errors import OutputError
from onnxfold.io import protowire as pw
from onnxfold.io.prefill import OutputPrefill
from onnxfold.io.tempfiles import temp_beside

STREAM_THRESHOLD = 1024
PROTOBUF_LIMIT = 2**31 - 1
EMBED_LIMIT = 1_800_000_000  # leave headroom under protobuf's 2 GiB for the graph itself
_CHUNK = 16 << 20


@dataclass
class SaveInfo:
    """What was written."""

    path: str
    data_path: str | None
    bytes_written: int
    streamed_tensors: int


def _write_all(fd: int, data) -> int:
    view = memoryview(data).cast("B")
    done = 0
    while done < len(view):
        done += os.write(fd, view[done:])
    return done


def _copy_range(src_path: str, offset: int, length: int, dst_fd: int) -> None:
    with open(src_path, "rb") as src:
        left = length
        pos = offset
        try:
            while left:
                n = os.copy_file_range(src.fileno(), dst_fd, left, pos)
                if n == 0:
                    raise OSError("short copy")
                pos += n
                left -= n
            return
        except OSError:
            pass
        src.seek(pos)
        while left:
            chunk = src.read(min(left, _CHUNK))
            if not chunk:
                raise OutputError(f"source data ended early: {src_path}")
            _write_all(dst_fd, chunk)
            left -= len(chunk)


class _Scratch:
    """One reusable buffer for the pieces of non-contiguous arrays.

    A fresh buffer per tensor would page-fault all of its pages again (large allocations are
    new mappings): reusing one halves the cost of writing BERT's transposed weights.
    """

    def __init__(self) -> None:
        self._buffer = np.empty(0, np.uint8)

    def array(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if nbytes > self._buffer.nbytes:
            self._buffer = np.empty(nbytes, np.uint8)
        return self._buffer[:nbytes].view(dtype).reshape(shape)


def _array_chunks(arr: np.ndarray, scratch: _Scratch) -> Iterator[np.ndarray]:
    """Contiguous pieces of ``arr`` in C order, without copying it whole.

    Non-contiguous views are copied piece by piece into ``scratch``: each piece must be
    consumed before the next is asked for.
    """
    if arr.ndim == 0 or arr.flags.c_contiguous:
        yield np.ascontiguousarray(arr).reshape(-1)
        return
    rows = max(1, _CHUNK // max(1, arr[0].nbytes))
    for i in range(0, arr.shape[0], rows):
        piece = arr[i : i + rows]
        out = scratch.array(piece.shape, piece.dtype)
        half = len(piece) // 2
        if piece.nbytes >= _PARALLEL_COPY and half:
            other = _helper().submit(copy_c_order, piece[half:], out[half:])
            copy_c_order(piece[:half], out[:half])
            other.result()
        else:
            copy_c_order(piece, out)
        yield out.reshape(-1)


_PARALLEL_COPY = 4 << 20


@functools.cache
def _helper() -> ThreadPoolExecutor:
    """A second thread for copying large transposed views (numpy releases the GIL)."""
    return ThreadPoolExecutor(1, thread_name_prefix="onnxfold-copy")


def _write_tensor_data(fd: int, tensor: ir.TensorProtocol, scratch: _Scratch) -> None:
    if isinstance(tensor, ir.ExternalTensor):
        _copy_range(tensor.path, tensor.offset or 0, tensor.length or tensor.nbytes, fd)
        return
    if tensor.dtype.bitwidth < 8:
        _write_all(fd, tensor.tobytes())
        return
    arr = tensor.numpy()
    for chunk in _array_chunks(arr, scratch):
        if chunk.dtype.byteorder == ">":
            chunk = chunk.byteswap().view(chunk.dtype.newbyteorder("<"))
        _write_all(fd, chunk.view(np.uint8))
    release_pages(arr)  # a folded view of a mapped weight: its pages are no longer needed


def _streamable(tensor: ir.TensorProtocol | None) -> bool:
    """Large tensors with data; placeholders (references filled in elsewhere) are not."""
    return (tensor is not None and tensor.dtype != ir.DataType.STRING
            and tensor.nbytes >= STREAM_THRESHOLD
            and not getattr(tensor, "is_placeholder", False))


def _header(name: str, tensor: ir.TensorProtocol, external: tuple[str, int] | None) -> bytes:
    proto = onnx.TensorProto(name=name, dims=list(tensor.shape.numpy()),
                             data_type=int(tensor.dtype))
    for key, value in getattr(tensor, "metadata_props", {}).items():
        proto.metadata_props.add(key=key, value=value)
    if external is not None:
        location, offset = external
        proto.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", location), ("offset", str(offset)),
                           ("length", str(tensor.nbytes))):
            proto.external_data.add(key=key, value=value)
    return proto.SerializeToString()


def _input_files(model: ir.Model) -> set[str]:
    files = set()
    for graph in model.graphs():
        for value in graph.initializers.values():
            if isinstance(value.const_value, ir.ExternalTensor) and \
                    not getattr(value.const_value, "is_placeholder", False):
                files.add(os.path.realpath(value.const_value.path))
    return files


def _inline_references(model: ir.Model, streamed: set[ir.Value]
                       ) -> dict[ir.Value, ir.TensorProtocol]:
    """Give every initializer that is not streamed but still refers to the input's files (a
    small tensor, or one in a subgraph) its data, so that the serializer writes the bytes rather
    than a path that does not exist beside the output; returns the replaced references."""
    replaced = {}
    for graph in model.graphs():
        for value in graph.initializers.values():
            tensor = value.const_value
            if value in streamed or not isinstance(tensor, ir.ExternalTensor) or \
                    getattr(tensor, "is_placeholder", False):
                continue
            replaced[value] = tensor
            value.const_value = ir.Tensor(tensor.numpy(), name=tensor.name,
                                          metadata_props=dict(tensor.metadata_props))
    return replaced


def save_model(model: ir.Model, path: str | os.PathLike, external_data: bool | None = None,
               data_name: str | None = None, protect: set[str] | None = None,
               prefill: OutputPrefill | None = None) -> SaveInfo:
    """Write ``model`` to ``path``; ``external_data=None`` chooses external data only if needed.

    ``protect`` lists files that must never be written (the CLI passes the input model); the
    model's own external-data sources are protected too. ``prefill``, started for ``path``
    before folding, provides the (already warm) temporary file to write over.
    """
    path = os.fspath(path)
    data_name = data_name or os.path.basename(path) + ".data"
    data_path = os.path.join(os.path.dirname(os.path.abspath(path)), data_name)
    guarded = _input_files(model) | {os.path.realpath(p) for p in (protect or set())}
    for target in (path, data_path):
        if os.path.realpath(target) in guarded:
            raise OutputError(f"{target}: refusing to overwrite an input of this model")
    if os.path.isdir(path):
        raise OutputError(f"{path}: is a directory")

    graph = model.graph
    streamed = {name: v for name, v in graph.initializers.items() if _streamable(v.const_value)}
    total = sum(v.const_value.nbytes for v in streamed.values())
    if external_data is None:
        external_data = total > EMBED_LIMIT
    if not external_data and total > PROTOBUF_LIMIT:
        raise OutputError(f"{path}: {total} bytes of weights exceed protobuf's 2 GiB limit; "
                          "use external data")

    inlined = _inline_references(model, set(streamed.values()))
    for name in streamed:
        graph.initializers.pop(name)
    try:
        proto = ir.serde.serialize_model(model)
    finally:
        for value in streamed.values():
            graph.register_initializer(value)
        for value, reference in inlined.items():
            value.const_value = reference
    graph_bytes = proto.graph.SerializeToString()
    proto.ClearField("graph")
    head = proto.SerializeToString()

    fd, tmp = (prefill and prefill.take(path)) or temp_beside(path)
    data_fd = data_tmp = None
    scratch = _Scratch()
    try:
        offset = 0
        headers = []
        if external_data:
            data_fd, data_tmp = temp_beside(data_path)
            for name, value in streamed.items():
                headers.append(_header(name, value.const_value, (data_name, offset)))
                _write_tensor_data(data_fd, value.const_value, scratch)
                offset += value.const_value.nbytes
            fields = [pw.len_prefix(5, len(h)) + h for h in headers]
            graph_len = len(graph_bytes) + sum(len(f) for f in fields)
            written = _write_all(fd, head + pw.len_prefix(7, graph_len) + graph_bytes)
            for field in fields:
                written += _write_all(fd, field)
        else:
            pieces = []
            for name, value in streamed.items():
                header = _header(name, value.const_value, None)
                raw = pw.len_prefix(9, value.const_value.nbytes)
                body_len = len(header) + len(raw) + value.const_value.nbytes
                pieces.append((pw.len_prefix(5, body_len) + header + raw, value.const_value))
            graph_len = len(graph_bytes) + sum(len(p) + t.nbytes for p, t in pieces)
            written = _write_all(fd, head + pw.len_prefix(7, graph_len) + graph_bytes)
            for prefix, tensor in pieces:
                written += _write_all(fd, prefix)
                _write_tensor_data(fd, tensor, scratch)
                written += tensor.nbytes
        os.ftruncate(fd, os.lseek(fd, 0, os.SEEK_CUR))  # a prefilled file may be longer
        os.close(fd)
        fd = None
        if data_fd is not None:
            os.close(data_fd)
            data_fd = None
            os.replace(data_tmp, data_path)
        os.replace(tmp, path)
    except OSError as e:
        raise OutputError(f"{path}: write failed ({e.strerror or e})") from None
    finally:
        for open_fd in (fd, data_fd):
            if open_fd is not None:
                os.close(open_fd)
        for leftover in (tmp, data_tmp):
            if leftover and os.path.exists(leftover):
                os.unlink(leftover)
    return SaveInfo(path, data_path if external_data else None, written + offset, len(streamed))
