"""``--strip-metadata``: the metadata exporters attach to each node and value, dropped.

torch's dynamo exporter records, on every node, its module path, class hierarchy, FX node and
Python stack trace (``namespace``, ``pkg.torch.onnx.*``), and on values their own; on a small
transformer that is 7-23% of the file. Nothing runs on it. Stripping drops the
``metadata_props`` of every node and value (initializers and their tensors, inputs, outputs,
intermediate values) of the main graph, its subgraphs and the local functions, and nodes'
``doc_string`` (the TorchScript exporter's source lines); the model's own and the graphs'
metadata (a model card, a producer's properties) stay.

onnxfold's own keys (those starting with :data:`OWN_PREFIX`: a folded tensor's provenance,
which ``--check`` and ``verify-folds`` re-derive it by) are kept unless ``everything``.

The bytes saved are the entries' encoded sizes, as protobuf writes them (each entry's tag and
length prefix included), of the entries the output would have held (an intermediate value's
metadata is written only with its ``value_info``, an initializer's value's not at all: its
tensor's is); a node's own length prefix may shrink by a byte or two more.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass

import onnx_ir as ir

from onnxfold.analysis.shapes import declared_names
from onnxfold.ir.graph import all_graphs

OWN_PREFIX = "onnxfold."
MODES = ("others", "all")  # what --strip-metadata drops: every key but onnxfold's, or all
TENSOR_TAG = 2  # TensorProto.metadata_props is field 16: a two-byte tag (a node's is 9: one)


@dataclass(frozen=True)
class Stripped:
    """What stripping removed: entries (keys, and doc strings) and their encoded bytes; of
    them, ``own`` entries were onnxfold's records (``--strip-metadata=all``), not the
    exporter's."""

    entries: int = 0
    bytes: int = 0
    own: int = 0

    def __add__(self, other: Stripped) -> Stripped:
        if other is _NONE:  # (most nodes and values: no record made)
            return self
        return Stripped(self.entries + other.entries, self.bytes + other.bytes,
                        self.own + other.own)


def strip_metadata(model: ir.Model, everything: bool = False) -> Stripped:
    """Drop, in place, the metadata of every node and value of ``model`` (onnxfold's own keys
    kept unless ``everything``); what was dropped."""
    total = Stripped()
    declared = declared_names(model)  # the values whose value_info the output keeps
    for graph in _graphs(model):
        interface = [*graph.inputs, *graph.outputs] if isinstance(graph, ir.Graph) else []
        for value in {id(v): v for v in interface}.values():  # written as value_info
            total += _strip(value.metadata_props, everything)
        for value in (graph.initializers.values() if isinstance(graph, ir.Graph) else ()):
            total += _strip(value.metadata_props, everything, written=False)
            tensor = value.const_value  # its tensor carries its own, written with it
            if tensor is not None and tensor.metadata_props:
                total += _strip(tensor.metadata_props, everything, tag=TENSOR_TAG)
        for node in graph:
            total += _strip(node.metadata_props, everything)
            if node.doc_string:
                total += Stripped(1, _field_bytes(len(node.doc_string.encode("utf-8"))))
                node.doc_string = None
            for value in node.outputs:
                written = declared is None or value.name in declared
                total += _strip(value.metadata_props, everything, written)
    return total


def _graphs(model: ir.Model) -> Iterator[ir.Graph | ir.Function]:
    """The main graph, its subgraphs, the local functions and the subgraphs in them."""
    yield from all_graphs(model)
    for function in model.functions.values():
        yield function
        stack: list[ir.Graph | ir.Function] = [function]
        while stack:
            for node in stack.pop():
                for attr in node.attributes.values():
                    if attr.type == ir.AttributeType.GRAPH:
                        yield attr.as_graph()
                        stack.append(attr.as_graph())
                    elif attr.type == ir.AttributeType.GRAPHS:
                        yield from attr.as_graphs()
                        stack.extend(attr.as_graphs())


def _strip(props: MutableMapping[str, str], everything: bool, written: bool = True,
           tag: int = 1) -> Stripped:
    """Drop the entries of ``props`` (onnxfold's own kept unless ``everything``); their bytes
    count where the output would have ``written`` them (an intermediate value's only with its
    value_info), each entry's field tag ``tag`` bytes long. (Run for every node and value of
    a model: an exporter's stack traces are most of a graph's bytes; a text's UTF-8 length
    is its length where it is ASCII, without encoding it.)"""
    if not props:  # most values carry none: no record made for them
        return _NONE
    dropped = [key for key in props if everything or not key.startswith(OWN_PREFIX)]
    size = own = 0
    for key in dropped:
        entry = _field_bytes(_utf8_length(key)) + _field_bytes(_utf8_length(props.pop(key)))
        size += _field_bytes(entry, tag)
        own += key.startswith(OWN_PREFIX)
    return Stripped(len(dropped), size if written else 0, own)


_NONE = Stripped()


def _utf8_length(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _field_bytes(length: int, tag: int = 1) -> int:
    """A length-delimited protobuf field of ``length`` bytes: its tag, its length, itself."""
    return tag + _varint_bytes(length) + length


def _varint_bytes(n: int) -> int:
    return 1 if n < 0x80 else 2 if n < 0x4000 else (n.bit_length() + 6) // 7
