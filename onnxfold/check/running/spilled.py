"""A proto the check was handed, its large weights written once to a private scratch file.

A check of a proto needs a source for onnxruntime's session beside the proto the caller
holds: protobuf gives no view into a proto's bytes (a read of ``raw_data`` is a new copy), and
onnxruntime copies the initializers it is handed. Held in memory (``held.HeldModel``), the
check of ``simplify(onnx.load(p), check_n=3)`` on BERT-base peaked at the path's peak plus the
proto plus one more copy of the weights (issue 84 item 2). Written once to a file, the weights
are what a model file's are: onnxruntime reads them from the file, the check's steps map them
(``io.mapped``), their pages are the page cache's (given back under pressure, let go by
``drop_resident_pages``), and a check of a proto costs what the check of its file costs.

What is written: every initializer of the main graph holding, in ``raw_data``, exactly its
elements' bytes (more than ``HANDED_FROM`` of a type of whole bytes), each at an offset aligned
to a page, as the writer aligns a model's data (onnxruntime's kernels give other bits for data
4 bytes off); the rest of the proto (small, typed-field, string, sparse, external or odd
tensors, the nodes' Constants, the branches) stays in the
model file beside it as the proto holds it, so onnxruntime and the check read what they read
from the proto itself. Where no scratch file can be written (no temporary directory, a full or
read-only disk), :func:`spilled` gives None and the check holds the proto in memory as before.

The scratch directory (``io.tempfiles.scratch_directory``: private, removed by a command-line
run however it ends) is removed by :meth:`SpilledModel.close`; messages name the model by its
label, never by the scratch path.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import shutil
from collections.abc import Iterator

import onnx
import onnx_ir as ir

from onnxfold.check.running.handed import HANDED_FROM
from onnxfold.check.running.held import HeldPath, with_initializers
from onnxfold.errors import InputError, NoTempDirectoryError, OnnxfoldError
from onnxfold.io.reader import load_model
from onnxfold.io.tempfiles import scratch_directory
from onnxfold.ir.protos import (
    copy_field,
    function_graphs,
    graph_protos,
    tensor_nbytes,
    tensor_protos,
)

# bytes: each weight's offset, a page (the check's own: it takes nothing of the writer's)
ALIGNMENT = max(4096, mmap.PAGESIZE)
MODEL = "model.onnx"
WEIGHTS = "weights"
_T = onnx.TensorProto


class SpilledModel(HeldPath):
    """A proto's model file in a scratch directory (see the module), named ``label``."""

    def __init__(self, directory: str, label: str) -> None:
        super().__init__(os.path.join(directory, MODEL))
        self.directory = directory
        self.label = label
        try:  # read now, as a held proto is: its faults said where the proto's were
            self._model = load_model(self.path, check=False)
        except OnnxfoldError as e:
            e.args = (self.named(str(e)),)
            raise

    def named(self, message: str, label: str | None = None) -> str:
        """``message`` with the scratch path said as ``label`` (default: the model's)."""
        label = self.label if label is None else label
        return message.replace(self.path, label).replace(self.directory, label)

    def close(self) -> None:
        """Remove the scratch directory (its mappings stay valid until they are let go)."""
        _removed(self.directory)


def _removed(directory: str) -> None:
    """Remove a scratch directory: its files by name (no descriptor needed: a process out of
    descriptors removes them too), then whatever else is there."""
    for name in (MODEL, WEIGHTS):
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(directory, name))
    try:
        os.rmdir(directory)
    except OSError:
        shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def copied(proto: onnx.ModelProto, label: str, said_as: str | None = None
           ) -> Iterator[SpilledModel | None]:
    """:func:`spilled` for the block, its directory removed when the block ends however it
    ends; an onnxfold error raised in the block names the copy as ``said_as`` (default:
    ``label``), never by its scratch path."""
    copy = spilled(proto, label)
    if copy is None:
        yield None
        return
    try:
        yield copy
    except OnnxfoldError as e:
        e.args = (copy.named(str(e), said_as),)
        raise
    finally:
        copy.close()


def spilled(proto: onnx.ModelProto, label: str) -> SpilledModel | None:
    """``proto`` as a :class:`SpilledModel`, or None where the caller holds it in memory
    instead: nothing of it would be spilled, it refers to external data (which a proto cannot
    locate: the reader of a proto refuses it, and read from the scratch directory a reference
    would find the scratch files), no scratch file can be written, or the copy is not read as
    the proto is (the reader of a file judges some things the reader of a proto does not:
    ``ir_version`` 0; the proto's own reader then says what is wrong, as it says it)."""
    if all(_spilled_bytes(t) is None for t in proto.graph.initializer) or _external(proto):
        return None
    try:
        directory = scratch_directory("onnxfold-check-")
    except NoTempDirectoryError:
        return None
    try:
        _write(proto, directory)
        return SpilledModel(directory, label)
    except (OSError, InputError):  # a full or read-only disk, a quota; a copy read otherwise
        _removed(directory)
        return None
    except BaseException:
        _removed(directory)
        raise


def _external(proto: onnx.ModelProto) -> bool:
    """Whether a tensor of ``proto`` (any graph's, any function's) refers to external data."""
    graphs = [*graph_protos(proto.graph), *function_graphs(proto)]
    return any(t.data_location == _T.EXTERNAL or t.external_data
               for graph in graphs for t in tensor_protos(graph))


def _spilled_bytes(tensor: onnx.TensorProto) -> int | None:
    """The bytes ``tensor``'s elements take where it may be spilled (of a type of whole bytes,
    in ``raw_data`` alone, more than ``HANDED_FROM``; see the module), else None. Its
    ``raw_data`` is not read here (each read is a copy)."""
    nbytes = tensor_nbytes(tensor)
    if nbytes is None or nbytes <= HANDED_FROM or ir.DataType(tensor.data_type).bitwidth % 8 \
            or tensor.data_location == _T.EXTERNAL or tensor.external_data or \
            not tensor.HasField("raw_data") or any(d < 0 for d in tensor.dims) or \
            tensor.float_data or tensor.int32_data or tensor.string_data or \
            tensor.int64_data or tensor.double_data or tensor.uint64_data:
        return None
    return nbytes


def _write(proto: onnx.ModelProto, directory: str) -> None:
    """The scratch model (``MODEL``) and its weights (``WEIGHTS``) into ``directory``."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(os.path.join(directory, WEIGHTS), flags, 0o600)
    end = 0

    def written(tensor: onnx.TensorProto) -> onnx.TensorProto:
        """``tensor`` as the scratch model holds it: its bytes written, or itself."""
        nonlocal end
        nbytes = _spilled_bytes(tensor)
        data = tensor.raw_data if nbytes is not None else b""  # (a copy: read once)
        if nbytes is None or len(data) != nbytes:  # (short or long: as the proto has)
            return tensor
        offset = end + -end % ALIGNMENT
        _write_at(fd, data, offset)
        end = offset + nbytes
        return _reference(tensor, offset, nbytes)

    try:
        light = with_initializers(proto, written)
    finally:
        os.close(fd)
    with open(os.path.join(directory, MODEL), "xb") as model:
        model.write(light.SerializeToString())


def _write_at(fd: int, data: bytes, offset: int) -> None:
    """Write ``data`` at ``offset`` whole (a write may take part of it)."""
    view = memoryview(data)
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)


def _reference(tensor: onnx.TensorProto, offset: int, length: int) -> onnx.TensorProto:
    """``tensor`` without its bytes, pointing at them in ``WEIGHTS``."""
    reference = onnx.TensorProto()
    for desc, value in tensor.ListFields():
        if desc.name != "raw_data":
            copy_field(reference, desc, value)
    reference.data_location = _T.EXTERNAL
    for key, text in (("location", WEIGHTS), ("offset", str(offset)), ("length", str(length))):
        reference.external_data.add(key=key, value=text)
    return reference


