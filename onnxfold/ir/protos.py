"""Walking ONNX protobuf messages (the few places that work on ``onnx.ModelProto``)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any

import onnx
import onnx_ir as ir

SMALL_TENSOR_BYTES = 1024  # shape inference gets the data of initializers up to this size


def graph_protos(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and every subgraph in it, depth first."""
    yield graph
    yield from _subgraphs(graph.node)


def _subgraphs(nodes: Iterable[onnx.NodeProto]) -> Iterator[onnx.GraphProto]:
    """The graphs in ``nodes``' attributes, and every subgraph in them, depth first."""
    for node in nodes:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from graph_protos(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    yield from graph_protos(sub)


def tensor_protos(graph: onnx.GraphProto | onnx.FunctionProto, initializers: bool = True
                  ) -> list[onnx.TensorProto]:
    """The tensors ``graph`` (or a function body) holds itself, not its subgraphs': its
    initializers (unless ``initializers`` is False; a function has none) and its nodes'
    tensor attributes."""
    found = list(graph.initializer) if initializers and isinstance(graph, onnx.GraphProto) \
        else []
    found += [a.t for n in graph.node for a in n.attribute if a.type == onnx.AttributeProto.TENSOR]
    return found


def function_graphs(model: onnx.ModelProto) -> Iterator[onnx.FunctionProto | onnx.GraphProto]:
    """Every model-local function body, and every subgraph inside one (what
    :func:`graph_protos` of the main graph does not reach)."""
    for function in model.functions:
        yield function
        yield from _subgraphs(function.node)


def tensor_nbytes(tensor: onnx.TensorProto) -> int | None:
    """The bytes of ``tensor``'s data from its dims and type (None: strings, unknown type)."""
    try:
        dtype = ir.DataType(tensor.data_type)
    except ValueError:
        return None
    return data_nbytes(tensor.dims, dtype)


def data_nbytes(dims: Iterable[int], dtype: ir.DataType) -> int | None:
    """The bytes of data of ``dims`` and ``dtype``, sub-byte types packed, as onnx-ir's
    ``nbytes`` counts them but in integers (no float overflow); None: strings, no size."""
    if dtype in (ir.DataType.STRING, ir.DataType.UNDEFINED):
        return None
    try:
        bits = dtype.bitwidth
    except TypeError:
        return None
    return -(-math.prod(dims) * bits // 8)


def copy_field(target: object, desc: Any, value: object) -> None:
    """Set the field ``desc`` (a protobuf ``FieldDescriptor``) of the message ``target`` to
    ``value``, a copy: repeated fields extended, messages copied, scalars set."""
    repeated = desc.is_repeated if hasattr(desc, "is_repeated") else \
        desc.label == desc.LABEL_REPEATED  # protobuf before 5.x
    if repeated:
        getattr(target, desc.name).extend(value)
    elif desc.type == desc.TYPE_MESSAGE:
        getattr(target, desc.name).CopyFrom(value)
    else:
        setattr(target, desc.name, value)
