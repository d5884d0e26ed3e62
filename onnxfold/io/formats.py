"""Name the model formats that are not ONNX, from a file's first bytes, before any parsing.

Users hand onnxfold what they have: a PyTorch checkpoint, a safetensors file, a TensorFlow
SavedModel, a TFLite or Keras file. Parsed as protobuf, those give messages such as
"unsupported protobuf wire type 3"; recognized here they give one line that says what the file
is and how to get an ONNX model from it. Detection reads a few hundred bytes (and, for a zip
archive, its central directory through :mod:`zipfile`); nothing is ever unpickled.

Strong signatures (magic bytes no ONNX file starts with) are checked before the protobuf
parser; weak ones (a TensorFlow GraphDef is protobuf too) only once the ONNX parse failed
(:func:`describe_after_failure`), so no ONNX model is ever refused by a guess.
"""

from __future__ import annotations

import contextlib
import os
import struct
import zipfile
from dataclasses import dataclass
from typing import BinaryIO

from onnxfold.errors import InputError
from onnxfold.io.opener import opened

HEAD_BYTES = 512  # what is read to recognize a file

_ZIP_MAGIC = b"PK\x03\x04"
_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
# torch.save's legacy (non-zip) format: pickle protocol 2, then this pickled magic number
_TORCH_LEGACY_MAGIC = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19."
_SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")


@dataclass(frozen=True)
class Foreign:
    """A file (or directory) that is a model of another framework: what it is and what to do."""

    what: str  # "a PyTorch checkpoint"
    advice: str  # "export it first (torch.onnx.export)"; PATH stands for the file's path

    def message(self, path: str) -> str:
        advice = self.advice.replace("PATH", path)
        return f"{path}: {self.what}, not an ONNX model: {advice}"


PYTORCH = Foreign("a PyTorch checkpoint",
                  "export it first (torch.onnx.export), then optimize the .onnx file")
PICKLE = Foreign("a Python pickle (perhaps a PyTorch checkpoint)",
                 "export the model to ONNX first (torch.onnx.export); onnxfold never unpickles")
SAFETENSORS = Foreign("a safetensors file (weights only, no graph)",
                      "export the model that uses these weights to ONNX first "
                      "(torch.onnx.export, or `optimum-cli export onnx`)")
SAVED_MODEL = Foreign("a TensorFlow SavedModel",
                      "convert it first (python -m tf2onnx.convert --saved-model PATH "
                      "--output model.onnx)")
SAVED_MODEL_FILE = Foreign("a TensorFlow SavedModel's graph",
                           "convert its directory first (python -m tf2onnx.convert "
                           "--saved-model DIRECTORY --output model.onnx)")
FROZEN_GRAPH = Foreign("a TensorFlow frozen graph (GraphDef)",
                       "convert it first (python -m tf2onnx.convert --graphdef PATH "
                       "--inputs ... --outputs ... --output model.onnx)")
TFLITE = Foreign("a TensorFlow Lite model",
                 "convert it first (python -m tf2onnx.convert --tflite PATH --output model.onnx)")
KERAS = Foreign("a Keras model",
                "convert it first (tf2onnx.convert.from_keras, or save it as a SavedModel "
                "and run python -m tf2onnx.convert --saved-model)")
HDF5 = Foreign("an HDF5 file (a Keras .h5 model?)",
               "convert the model to ONNX first (tf2onnx.convert.from_keras)")
NPZ = Foreign("a NumPy .npz archive of arrays",
              "give the .onnx model (arrays go to --inputs of compare or run)")
ZIP = Foreign("a zip archive", "extract the .onnx model from it first")


def describe(path: str) -> Foreign | None:
    """What ``path`` is when it is recognizably not ONNX (a file by its first bytes, a
    directory by the SavedModel it holds); None when it may be ONNX or cannot be read."""
    if os.path.isdir(path):
        if any(os.path.isfile(os.path.join(path, name)) for name in _SAVED_MODEL_FILES):
            return SAVED_MODEL
        return None
    try:
        with opened(path) as f:
            return describe_head(f.read(HEAD_BYTES), os.fstat(f.fileno()).st_size, f)
    except (OSError, InputError):
        return None  # the reader says why it cannot read it


def describe_head(head: bytes, size: int, file: BinaryIO | None = None) -> Foreign | None:
    """What a file of ``size`` bytes starting with ``head`` is, by its magic bytes alone
    (``file``, when given, lets a zip archive's directory be listed)."""
    if head.startswith(_ZIP_MAGIC):
        return _zip_kind(head, file)
    if head.startswith(_TORCH_LEGACY_MAGIC):
        return PYTORCH
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return PICKLE  # a pickle's PROTO opcode: no ONNX file starts with a tag of field >= 16
    if head.startswith(_HDF5_MAGIC):
        return HDF5
    if head[4:8] == b"TFL3" and struct.unpack("<I", head[:4])[0] < size:
        return TFLITE  # a flatbuffer: its root table's offset, then the file identifier
    if _is_safetensors(head, size):
        return SAFETENSORS
    return None


def _is_safetensors(head: bytes, size: int) -> bool:
    """An 8-byte little-endian header length that fits the file, then a JSON object."""
    if len(head) < 10:
        return False
    (length,) = struct.unpack("<Q", head[:8])
    return 2 <= length <= size - 8 and head[8:9] == b"{" and head[9:10] in (b'"', b"}", b" ")


def _zip_kind(head: bytes, file: BinaryIO | None) -> Foreign:
    """A PyTorch checkpoint (``*/data.pkl``), a Keras 3 ``.keras`` file, an .npz, or a zip."""
    names = [_first_entry(head)]
    if file is not None:
        with contextlib.suppress(zipfile.BadZipFile, OSError, ValueError), \
                zipfile.ZipFile(file) as archive:
            names = archive.namelist()
    if any(name == "data.pkl" or name.endswith("/data.pkl") for name in names):
        return PYTORCH
    if "config.json" in names and any(name.endswith(".weights.h5") for name in names):
        return KERAS
    if names and all(name.endswith(".npy") for name in names):
        return NPZ
    return ZIP


def _first_entry(head: bytes) -> str:
    """The name of a zip archive's first member, from its local file header."""
    if len(head) < 30:
        return ""
    (name_length,) = struct.unpack("<H", head[26:28])
    return head[30:30 + name_length].decode("utf-8", "replace")


def describe_after_failure(path: str) -> Foreign | None:
    """What a file that failed to parse as ONNX is, by weaker signs: a TensorFlow SavedModel's
    ``saved_model.pb``, or a GraphDef (a frozen graph: its first field is a node, a message
    whose own first fields are the node's name and op)."""
    if os.path.basename(path) in _SAVED_MODEL_FILES:
        return SAVED_MODEL_FILE
    try:
        with opened(path) as f:
            head = f.read(HEAD_BYTES)
    except (OSError, InputError):
        return None
    return FROZEN_GRAPH if _looks_like_graphdef(head) else None


def _looks_like_graphdef(head: bytes) -> bool:
    """``GraphDef.node`` (field 1, length-delimited) whose message starts with ``NodeDef.name``
    (field 1) then ``NodeDef.op`` (field 2), both text. ONNX's field 1 is a varint."""
    if head[:1] != b"\x0a":
        return False
    _, pos = _varint(head, 1)  # the node message's length
    for tag in (0x0A, 0x12):  # its name, then its op
        if pos >= len(head) or head[pos] != tag:
            return False
        length, pos = _varint(head, pos + 1)
        text = head[pos:pos + (length or 0)]
        if not length or len(text) != length or not _is_text(text):
            return False
        pos += length
    return True


def _is_text(value: bytes) -> bool:
    try:
        return value.decode("ascii").isprintable()
    except UnicodeDecodeError:
        return False


def _varint(data: bytes, pos: int) -> tuple[int | None, int]:
    value, shift = 0, 0
    while pos < len(data) and shift < 64:
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            return value, pos
        shift += 7
    return None, pos
