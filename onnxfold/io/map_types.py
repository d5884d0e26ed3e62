"""Values of map type, which onnx-ir cannot represent: set aside on read, given back on write.

A ZipMap (scikit-learn's classifiers converted by skl2onnx, onnxruntime's own samples) outputs
a sequence of maps, ``seq(map(int64, tensor(float)))``; onnx-ir 1.1 raises "Map types are not
supported yet" on any value declared with such a type, wherever it is (an input, an output, a
``value_info``). onnxfold folds no map and reads no map's type, so the reader takes each such
declared type out of the proto before onnx-ir reads it (the value is then of unknown type, as
one without a ``value_info``) and keeps it in ``Model.meta``; the writer puts each back into
the value of that name in the written proto. The checker has run on the proto before (it
requires the type of an output), and onnxruntime reads the written file with its types.
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx
import onnx_ir as ir

from onnxfold.ir.protos import graph_protos

MAP_TYPES_KEY = "onnxfold.map_types"  # Model.meta: {value name: its TypeProto's bytes}


def holds_a_map(type_proto: onnx.TypeProto) -> bool:
    """Whether ``type_proto`` is a map or holds one (in a sequence or an optional)."""
    kind = type_proto.WhichOneof("value")
    if kind == "map_type":
        return True
    if kind == "sequence_type":
        return holds_a_map(type_proto.sequence_type.elem_type)
    if kind == "optional_type":
        return holds_a_map(type_proto.optional_type.elem_type)
    return False


def set_aside(proto: onnx.ModelProto) -> dict[str, bytes]:
    """Take every map-holding type out of the value declarations of ``proto``'s graphs and
    local functions; return them by value name (serialized ``TypeProto``)."""
    aside: dict[str, bytes] = {}
    for info in _declarations(proto):
        if info.HasField("type") and holds_a_map(info.type):
            aside.setdefault(info.name, info.type.SerializeToString())
            info.ClearField("type")
    return aside


def give_back(aside: dict[str, bytes], proto: onnx.ModelProto) -> None:
    """Put the types :func:`set_aside` took back into ``proto``: on each declaration of one
    of their names that has no type."""
    if not aside:
        return
    for info in _declarations(proto):
        typed = aside.get(info.name)
        if typed is not None and info.type.WhichOneof("value") is None:
            info.type.ParseFromString(typed)


def give_back_to(model: ir.Model, proto: onnx.ModelProto) -> None:
    """:func:`give_back` the types the reader set aside for ``model`` (in its ``meta``) into
    ``proto``, ``model`` serialized."""
    give_back(model.meta.get(MAP_TYPES_KEY) or {}, proto)


def _declarations(proto: onnx.ModelProto) -> Iterator[onnx.ValueInfoProto]:
    """Every typed value declaration of ``proto``: its graphs' inputs, outputs and
    ``value_info``, its local functions' ``value_info``."""
    for graph in graph_protos(proto.graph):
        yield from graph.input
        yield from graph.output
        yield from graph.value_info
    for function in proto.functions:
        yield from function.value_info


__all__ = ["MAP_TYPES_KEY", "give_back", "give_back_to", "holds_a_map", "set_aside"]
