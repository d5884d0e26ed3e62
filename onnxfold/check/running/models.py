"""The models a check runs, read as graphs.

A check reads each model twice: as a graph (weights memory-mapped, for the feed plan and the
fold verification; here) and as an onnxruntime CPU session (``running.runner``). Both turn
what a user can get wrong (an unreadable file, an op onnxruntime does not know, feeds it
rejects) into one-line :class:`~onnxfold.errors.InputError` messages.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Container, Iterable, Iterator

import numpy as np
import onnx
import onnx_ir as ir

from onnxfold.analysis.expansion import refuse_onnxruntime_inlining
from onnxfold.check.running.held import HeldModel, HeldPath
from onnxfold.check.running.spilled import SpilledModel, copied
from onnxfold.errors import InputError, clipped
from onnxfold.io.mapped import MappedTensor
from onnxfold.io.reader import load_model, model_from_proto

ModelRef = str | os.PathLike | onnx.ModelProto | HeldModel | HeldPath

_ORT_TYPES = {
    "float": np.float32, "float16": np.float16, "double": np.float64, "bool": np.bool_,
    "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
    "string": np.object_,
}


def constant_tensor(node: ir.Node) -> ir.TensorProtocol | None:
    """The tensor of ``node`` where it is a ``Constant`` of the default domain holding one in
    its ``value`` (onnxruntime makes such a node an initializer when it loads a model: an
    exporter's weights, Paddle's among them), else None."""
    if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or node.inputs or \
            len(node.outputs) != 1 or list(node.attributes) != ["value"]:
        return None
    attribute = node.attributes["value"]
    return attribute.as_tensor() if attribute.type == ir.AttributeType.TENSOR else None


CONSTANT_NODE_BYTES = 1 << 16  # a Constant node larger: its tensor handed over as a weight


def constant_weight(node: ir.Node, in_place: bool = False) -> np.ndarray | None:
    """The array of ``node`` where it is a ``Constant`` holding a tensor of numbers of more
    than :data:`CONSTANT_NODE_BYTES` (an exporter's weight), else None. onnxruntime makes such
    a node an initializer of the same bytes when it loads a model, and its output is those
    bytes: a model the check builds of the original's nodes is handed it as an initializer,
    or a caller takes it as it is where it is asked for, and it is never serialized into the
    model (a 96 MiB model of Constant weights put three more copies of them on the check's
    peak). ``in_place``: see :func:`read_constant`."""
    tensor = constant_tensor(node)
    return read_constant(tensor, in_place) if tensor is not None and is_constant_weight(node) \
        else None


def is_constant_weight(node: ir.Node) -> bool:
    """Whether :func:`constant_weight` takes ``node`` for a weight (its tensor not read)."""
    tensor = constant_tensor(node)
    return tensor is not None and tensor.nbytes > CONSTANT_NODE_BYTES and \
        np.dtype(tensor.dtype.numpy()).kind in "biuf"


def without_constant_weights(nodes: Iterable[ir.Node], kept: Container[str] = ()
                             ) -> tuple[list[ir.Node], dict[ir.Value, np.ndarray]]:
    """``nodes`` less the Constants whose weight (:func:`constant_weight`) a model built of
    them is handed instead, and those weights by the value each Constant makes; a Constant
    whose value's name is in ``kept`` (one the model hands back) stays a node."""
    others: list[ir.Node] = []
    weights: dict[ir.Value, np.ndarray] = {}
    for node in nodes:
        weight = constant_weight(node)
        if weight is None or str(node.outputs[0].name) in kept:
            others.append(node)
        else:
            weights[node.outputs[0]] = weight
    return others, weights


def read_constant(tensor: ir.TensorProtocol, in_place: bool = False) -> np.ndarray:
    """A constant's array for a run of the check: a weight in a file read with ``pread``
    into memory of its own, starting at 64 bytes (a file truncated meanwhile is an
    InputError, never a bus error inside onnxruntime), or where ``in_place`` a view of the
    file's mapping where it lies (no copy; a file truncated during the run is a bus error,
    as for onnxruntime's own mappings: docs/trust.md); anything else as it is held."""
    if isinstance(tensor, MappedTensor):
        return tensor.numpy() if in_place and tensor.dtype.bitwidth >= 8 else \
            tensor.checked_numpy()
    return tensor.numpy()


def label_of(model: ModelRef, default: str) -> str:
    """How messages name ``model``: its path, or ``default`` for a proto (a held one's own
    label); InputError for anything else a caller gives (an ``ir.Model``: save it, or
    ``ir.to_proto`` it)."""
    if isinstance(model, HeldModel | SpilledModel):
        return model.label
    if isinstance(model, onnx.ModelProto):
        return default
    if not isinstance(model, str | os.PathLike):
        raise InputError(f"{default}: a path or an onnx.ModelProto is compared, not a "
                         f"{type(model).__name__}")
    return os.fspath(model)


@contextlib.contextmanager
def held(model: ModelRef, default: str) -> Iterator[ModelRef]:
    """``model`` read once for a whole check (named ``default`` where it is a proto, as
    :func:`label_of` names one): a proto's large weights written once to a scratch file
    (:class:`SpilledModel`, removed when the block ends), else held in memory
    (:class:`HeldModel`); a path as :class:`HeldPath`."""
    if isinstance(model, onnx.ModelProto):
        with copied(model, default) as copy:
            yield HeldModel(model, default) if copy is None else copy
    elif isinstance(model, str | os.PathLike) and not isinstance(model, HeldPath):
        yield HeldPath(model)
    else:
        yield model


def release_weights(model: ModelRef) -> None:
    """Let the weights a held proto's steps read go (``HeldModel.drop``; a path's mapped
    pages: ``io.mapped.drop_resident_pages``)."""
    if isinstance(model, HeldModel):
        model.drop()


def graph_of(model: ModelRef, label: str) -> ir.Model:
    """The model's graph (weights memory-mapped); also turns unreadable files into InputError,
    and refuses a model whose local functions onnxruntime would inline into too many nodes
    (``expansion.refuse_onnxruntime_inlining``)."""
    if isinstance(model, HeldModel | HeldPath):
        loaded = model.graph()
    elif isinstance(model, onnx.ModelProto):
        loaded = model_from_proto(model)
    else:
        loaded = load_model(model, check=False)
    refuse_onnxruntime_inlining(loaded, label)
    return loaded


def ort_message(e: Exception, path: str | None = None, label: str = "") -> str:
    """onnxruntime's message of ``e`` on one line, clipped, without its C++ noise; a model it
    loaded from ``path`` named ``label`` (not as "Load model from PATH failed:")."""
    text = str(e).strip()
    if path is not None:  # (before its first line is taken: a path may hold a newline)
        text = text.replace(f"Load model from {path} failed:", "").replace(path, label).strip()
    text = text.splitlines()[0] if text else type(e).__name__
    # onnxruntime's status, at its start and before each error it wraps in another
    text = _STATUS.sub("", text)
    # drop C++ source locations and signatures: "/src/x.cc:256 ns::f(args) message"
    text = re.sub(r"/\S*\.(?:cc|cpp|h):\d+ (?:[^()\s]+\([^()]*\) )?", " ", text)
    text = _CPP_SIGNATURE.sub("", text)
    text = _RUNNING_NODE.sub(lambda m: f"{m[1]} node '{m[2]}': ", text)
    return clipped(" ".join(text.split()), ORT_MESSAGE_LIMIT)


ORT_MESSAGE_LIMIT = 300
# onnxruntime's preamble of a kernel's failure, said in a few words: "Reshape node 'r': ..."
_RUNNING_NODE = re.compile(r"Non-zero status code returned while running (\w+) node\. "
                           r"Name:'([^']*)' Status Message: ")
# a C++ function's signature onnxruntime quotes before an ENFORCE's condition: "static
# onnxruntime::TensorShapeVector onnxruntime::SqueezeBase::ComputeOutputShape(const ...&) "
# (its arguments may hold one level of parentheses: "const std::function<bool(int)>&")
_CPP_SIGNATURE = re.compile(r"(?:(?:static|virtual|inline) )*(?:[\w:<>,*&]+ )?"
                            r"(?:\w+(?:<[^<>()]*>)?::)+~?\w+\((?:[^()]|\([^()]*\))*\)"
                            r"(?: const)? ")
_STATUS = re.compile(r"\[ONNXRuntimeError\] : \d+ : \w+ : ")


def numpy_type(ort_type: str, label: str, name: str) -> np.dtype:
    inner = ort_type[len("tensor("):-1] if ort_type.startswith("tensor(") else None
    if inner not in _ORT_TYPES:
        raise InputError(f"{label}: input {name} has type {ort_type}, which compare cannot "
                         "feed")
    return np.dtype(_ORT_TYPES[inner])
