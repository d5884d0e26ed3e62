"""A model's text fields that are not UTF-8, refused as the reader reads it.

Protobuf's string fields hold UTF-8 text; a file may hold other bytes there (protobuf's C++
parser, onnxruntime's, lets them through), and Python's protobuf then gives ``bytes`` where
every reader expects a ``str``. A name or op type that is no text is refused where the reader
reads the graph (``single_assignment``); the others - the model's producer and domain, the
doc strings (but the model's own), and the ``metadata_props`` of the model, its graphs,
functions, nodes, values and tensors - were read and carried on as bytes, until the
metadata's stripping or the writer failed on them: an internal error, where the file is at
fault. They are refused here, named.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import onnx_ir as ir

from onnxfold.errors import InputError


def refuse_undecodable_text(model: ir.Model, graphs: Iterable[ir.Graph], label: str) -> None:
    """InputError where a text field of ``model`` (``graphs``: every graph of it) is bytes
    that are no UTF-8 text: its producer, domain, doc strings or metadata. The model's own
    doc string is carried as its bytes (the reader takes it aside and the writer writes it
    back as it was read), and is let through."""
    _fields(label, "the model", model.producer_name, model.producer_version, model.domain)
    _metadata(label, "the model", model.metadata_props)
    for graph in graphs:
        _graph(label, graph)
    for function in model.functions.values():
        _fields(label, "a function", function.doc_string)
        _metadata(label, "a function", function.metadata_props)
        _nodes(label, function)


def _graph(label: str, graph: ir.Graph) -> None:
    _fields(label, "a graph", graph.doc_string)
    _metadata(label, "a graph", graph.metadata_props)
    for value in (*graph.inputs, *graph.outputs, *graph.initializers.values()):
        _value(label, value)
    _nodes(label, graph)


def _nodes(label: str, nodes: Iterable[ir.Node]) -> None:
    for node in nodes:
        _fields(label, "a node", node.doc_string)
        _metadata(label, "a node", node.metadata_props)
        for value in node.outputs:
            _value(label, value)


def _value(label: str, value: ir.Value) -> None:
    _metadata(label, "a value", value.metadata_props)
    tensor = value.const_value
    if tensor is not None:
        _metadata(label, "a tensor", tensor.metadata_props)


def _fields(label: str, what: str, *texts: object) -> None:
    if any(text is not None and not isinstance(text, str) for text in texts):
        raise InputError(f"{label}: invalid model: a doc string or producer field of {what} "
                         "is not UTF-8 text")


def _metadata(label: str, what: str, props: Mapping[Any, Any]) -> None:
    if props and not all(isinstance(k, str) and isinstance(v, str) for k, v in props.items()):
        raise InputError(f"{label}: invalid model: the metadata of {what} is not UTF-8 text")
