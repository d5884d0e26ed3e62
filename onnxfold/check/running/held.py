"""A model a caller handed the check as an ``onnx.ModelProto``, read once for the whole check.

protobuf copies a tensor's bytes out of a proto at every read (``raw_data`` comes back as new
``bytes``), so a check that read a proto as it reads a file (its graph again for each step
that walks it, its serialization again for each onnxruntime session) copied the weights a
dozen times: ``simplify(onnx.load(p), check_n=3)`` on BERT-base took 11.6 s against 8.4 s for
``simplify(p, check_n=3)`` (issue 84). :class:`HeldModel` reads the graph once, as the reader
reads any proto (``model_from_proto``: every check a file gets), and each step that walks it
gets a clone sharing its tensors (``ir.Model.clone``: a step may reinfer its shapes). A large
initializer's bytes are copied out of the proto once, where something first reads them, into
an aligned array (``handed``) that every later read shares; a session gets the proto without
those initializers' bytes (placeholders), the arrays handed over, as the check's other
sessions run (``runner.NodesModel``). :meth:`HeldModel.drop` lets the arrays go where a file's
mapped pages are let go (before the other model's session is built), and a later read copies
them again.

A model file is read once too (:class:`HeldPath`): a check walked its graph five times, each a
parse of the file (0.08 s on a 600 KB decoder, 0.22 s on BERT-base), where a clone of one
parse costs a quarter of that; onnxruntime still opens the file itself.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import numpy as np
import onnx
import onnx_ir as ir

from onnxfold.check.running.handed import aligned, handable_as, placeholder_of
from onnxfold.host.limits import out_of_memory
from onnxfold.io.reader import load_model, model_from_proto
from onnxfold.ir.protos import copy_field


class HeldModel:
    """``proto`` read once (see the module); ``label`` names it in messages."""

    def __init__(self, proto: onnx.ModelProto, label: str) -> None:
        self.label = label
        self._model = model_from_proto(proto, label)
        self._read: dict[str, np.ndarray] = {}  # the arrays read so far, by initializer
        self._large: dict[str, ir.TensorProtocol] = {}  # their tensors as the proto holds them
        initializers = self._model.graph.initializers
        for tensor in proto.graph.initializer:  # the main graph's, as onnxruntime reads them
            value = initializers.get(tensor.name)
            if value is None or value.const_value is None or not _plain(tensor):
                continue
            held = value.const_value
            if not handable_as(np.dtype(held.dtype.numpy()), held.nbytes):
                continue
            self._large[tensor.name] = held
            value.const_value = ir.LazyTensor(
                functools.partial(self._tensor, tensor.name), held.dtype,
                ir.Shape(held.shape.numpy()), name=tensor.name, doc_string=held.doc_string,
                metadata_props=dict(held.metadata_props))  # (onnxfold's records among them)
        self._light = _without(proto, self._large)

    def graph(self) -> ir.Model:
        """The model's graph, the caller's own (its large weights shared, read-only)."""
        return self._model.clone()

    def session_source(self) -> tuple[bytes, dict[str, np.ndarray]]:
        """What a session over the model loads: the proto with placeholders for its large
        initializers, and their arrays by name (each read once, shared; the session must
        keep them as long as it lives)."""
        return self._light, {name: self._array(name) for name in self._large}

    def drop(self) -> None:
        """Let the arrays read so far go (a later read copies them out of the proto again)."""
        self._read.clear()

    def _array(self, name: str) -> np.ndarray:
        """Weight ``name``'s array; the machine running short copying it out of the proto is
        a ResourceLimitError (one line: the check could not run), never a raw MemoryError."""
        array = self._read.get(name)
        if array is None:
            try:
                array = aligned(self._large[name].numpy())
            except MemoryError:
                raise out_of_memory(f"{self.label}: reading weight {name}") from None
            array.flags.writeable = False  # shared by every clone and session
            self._read[name] = array
        return array

    def _tensor(self, name: str) -> ir.Tensor:
        return ir.Tensor(self._array(name), name=name)


class HeldPath(os.PathLike):
    """A model file read once for a whole check, where a step first walks its graph (an
    unreadable file raises there, as reading it did); each step gets a clone (its weights'
    mapped tensors shared). Anything that opens the file (onnxruntime) gets its path."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        self._model: ir.Model | None = None

    def __fspath__(self) -> str:
        return self.path

    def __str__(self) -> str:
        return self.path

    def __repr__(self) -> str:
        return f"HeldPath({self.path!r})"

    def graph(self) -> ir.Model:
        """The model's graph, the caller's own (its weights shared, mapped)."""
        if self._model is None:
            self._model = load_model(self.path, check=False)
        return self._model.clone()


def _plain(tensor: onnx.TensorProto) -> bool:
    """Whether ``tensor`` is a dense initializer holding its data in its proto."""
    return tensor.data_location != onnx.TensorProto.EXTERNAL and not tensor.external_data


def _without(proto: onnx.ModelProto, large: dict[str, ir.TensorProtocol]) -> bytes:
    """``proto`` serialized with placeholders for the initializers ``large`` names."""
    def placed(tensor: onnx.TensorProto) -> onnx.TensorProto:
        held = large.get(tensor.name)
        return tensor if held is None else placeholder_of(
            tensor.name, np.dtype(held.dtype.numpy()), tuple(held.shape.numpy()))

    return with_initializers(proto, placed).SerializeToString()


def with_initializers(proto: onnx.ModelProto,
                      each: Callable[[onnx.TensorProto], onnx.TensorProto]) -> onnx.ModelProto:
    """A copy of ``proto`` whose main graph's initializers are ``each`` of the proto's, in
    order (the rest copied as it is)."""
    light = onnx.ModelProto()
    for desc, value in proto.ListFields():
        if desc.name != "graph":
            copy_field(light, desc, value)
    for desc, value in proto.graph.ListFields():
        if desc.name != "initializer":
            copy_field(light.graph, desc, value)
            continue
        light.graph.initializer.extend(each(tensor) for tensor in value)
    return light
