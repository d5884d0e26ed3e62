"""A copy of a model proto for onnx's checker and shape inference, without its strings' text.

Neither the checker nor shape inference reads the characters of a string tensor or of a
``Constant``'s ``value_string(s)``: only their type and shape (the checker counts the
elements). A model with a 200 MB string initializer or ``Constant`` would otherwise have it
copied into the checker's proto, serialized for the checker, and serialized and parsed twice
more by every shape inference. In the copy, every string tensor keeps its name, type, dims and
element count, each element empty, and a ``Constant``'s ``value_string(s)`` is emptied likewise.

A proto whose graph took at most ``CAREFUL_ABOVE`` bytes in the file is copied whole, as it is
(one call into protobuf: its strings are small); a bigger one is copied node by node and
tensor by tensor, so that no string is copied at all (protobuf's ``ByteSize`` would serialize a
message to measure it, so nothing here asks for a size).

An in-memory proto (``onnxfold.optimize(onnx.load(p))``) holds its weights' bytes, where a
file's reader left them in the file: with ``data_from``, a main-graph initializer of at least
that many raw bytes is not copied but declared a typed graph input, as a file's external
weights are (``reader._without_external``), so that the checker serializes no weight of
either.
"""

from __future__ import annotations

import onnx

from onnxfold.ir.protos import copy_field, tensor_nbytes

CAREFUL_ABOVE = 16 << 20  # bytes of graph read: a smaller proto is copied whole, then emptied
_A = onnx.AttributeProto
_NESTED = (_A.TENSOR, _A.TENSORS, _A.GRAPH, _A.GRAPHS)


def light_copy(proto: onnx.ModelProto, graph_bytes: int | None = None,
               data_from: int | None = None) -> onnx.ModelProto:
    """``proto`` copied, with its strings' text emptied unless ``graph_bytes`` (the size of its
    graph as read; None: unknown) is at most ``CAREFUL_ABOVE``; ``data_from``: main-graph
    initializers of at least so many raw bytes become typed inputs (None: every one copied)."""
    copy = onnx.ModelProto()
    if graph_bytes is not None and graph_bytes <= CAREFUL_ABOVE and data_from is None:
        copy.CopyFrom(proto)
        return copy
    for desc, value in proto.ListFields():
        if desc.name == "graph":
            _copy_graph(value, copy.graph, data_from)
        else:
            copy_field(copy, desc, value)
    return copy


def _copy_graph(graph: onnx.GraphProto, target: onnx.GraphProto,
                data_from: int | None = None) -> None:
    declared = []  # bulky initializers, declared inputs after the graph's own
    for desc, value in graph.ListFields():
        if desc.name == "initializer":
            for tensor in value:
                if data_from is not None and _bulky(tensor, data_from):
                    declared.append(tensor)
                else:
                    _copy_tensor(tensor, target.initializer.add())
        elif desc.name == "node":
            for node in value:
                _copy_node(node, target.node.add())
        else:
            copy_field(target, desc, value)
    inputs = {value.name for value in graph.input}
    target.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, t.dims)
                        for t in declared if t.name not in inputs)


def _bulky(tensor: onnx.TensorProto, least: int) -> bool:
    """Whether ``tensor`` holds at least ``least`` bytes as raw data and nothing else the
    checker judges (no typed data field beside it, not external): sized by its dims and type,
    as reading ``raw_data`` would copy the bytes out."""
    if not tensor.HasField("raw_data") or tensor.data_location == onnx.TensorProto.EXTERNAL \
            or tensor.external_data or any(len(getattr(tensor, field)) for field in _TYPED):
        return False
    nbytes = tensor_nbytes(tensor)
    return nbytes is not None and nbytes >= least


_TYPED = ("float_data", "int32_data", "string_data", "int64_data", "double_data",
          "uint64_data")


def _has_text(node: onnx.NodeProto) -> bool:
    """Whether ``node`` may hold a string whose text the copy empties."""
    return any(a.type in _NESTED or _is_constant_text(node, a) for a in node.attribute)


def _is_constant_text(node: onnx.NodeProto, attr: onnx.AttributeProto) -> bool:
    return node.op_type == "Constant" and node.domain in ("", "ai.onnx") and \
        attr.name in ("value_string", "value_strings")


def _copy_node(node: onnx.NodeProto, target: onnx.NodeProto) -> None:
    if not _has_text(node):
        target.CopyFrom(node)
        return
    for desc, value in node.ListFields():
        if desc.name != "attribute":
            copy_field(target, desc, value)
            continue
        for attr in value:
            copied = target.attribute.add()
            if attr.type not in _NESTED and not _is_constant_text(node, attr):
                copied.CopyFrom(attr)
                continue
            for adesc, avalue in attr.ListFields():
                if adesc.name == "t":
                    _copy_tensor(avalue, copied.t)
                elif adesc.name == "tensors":
                    for tensor in avalue:
                        _copy_tensor(tensor, copied.tensors.add())
                elif adesc.name == "g":
                    _copy_graph(avalue, copied.g)
                elif adesc.name == "graphs":
                    for sub in avalue:
                        _copy_graph(sub, copied.graphs.add())
                elif adesc.name == "s":
                    copied.s = b""
                elif adesc.name == "strings":
                    copied.strings.extend([b""] * len(avalue))
                else:
                    copy_field(copied, adesc, avalue)


def _copy_tensor(tensor: onnx.TensorProto, target: onnx.TensorProto) -> None:
    if tensor.data_type != onnx.TensorProto.STRING:
        target.CopyFrom(tensor)
        return
    for desc, value in tensor.ListFields():
        if desc.name != "string_data":
            copy_field(target, desc, value)
    target.string_data.extend([b""] * len(tensor.string_data))
