"""A serialized graph as parts: bytes, and long texts written a chunk at a time.

The writer serializes a model with its long string attributes empty (``onnxfold.ir.long_texts``)
and its large weights left out; :func:`graph_parts` then cuts the main graph's bytes at each
node that held a long text, and appends the text to that node as a field of its own. Protobuf
reads repeated fields in the order they come, however they are split (the graph's ``node``
field here, a node's ``attribute``), and a message's fields in any order, so the file holds
the same model; the text is encoded from the model's str 8 MiB at a time, never copied whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import onnx

from onnxfold.io import protowire as pw
from onnxfold.io.writes import pwrite_all
from onnxfold.ir.long_texts import SetAside

_TEXT_CHUNK = 8 << 20  # characters of a long text encoded at a time
_GRAPH_NODE = 1  # GraphProto.node
_NODE_ATTRIBUTE = 5  # NodeProto.attribute
_ATTRIBUTE_S = 4  # AttributeProto.s


@dataclass(frozen=True)
class Text:
    """A long text (or bytes that are no UTF-8) and its length once encoded."""

    value: str | bytes

    def chunks(self) -> Iterable[bytes]:
        if isinstance(self.value, bytes):
            yield self.value
            return
        for i in range(0, len(self.value), _TEXT_CHUNK):
            yield self.value[i:i + _TEXT_CHUNK].encode()

    @cached_property
    def nbytes(self) -> int:
        if isinstance(self.value, bytes) or self.value.isascii():
            return len(self.value)
        return sum(len(chunk) for chunk in self.chunks())


Part = bytes | Text


def nbytes(parts: Sequence[Part]) -> int:
    return sum(p.nbytes if isinstance(p, Text) else len(p) for p in parts)


def pwrite_parts(fd: int, parts: Iterable[Part], offset: int) -> int:
    """Write ``parts`` one after another from ``offset`` (never joined into one more copy);
    return the bytes written."""
    done = 0
    for part in parts:
        for piece in part.chunks() if isinstance(part, Text) else (part,):
            done += pwrite_all(fd, piece, offset + done)
    return done


def text_field(field: int, text: str | bytes) -> list[Part]:
    """The length-delimited protobuf ``field`` holding ``text``."""
    body = Text(text)
    return [pw.len_prefix(field, body.nbytes), body]


def graph_parts(graph: onnx.GraphProto, aside: Sequence[SetAside]) -> list[Part]:
    """``graph`` (serialized with the ``aside`` attributes empty; it is emptied of its nodes
    here) as parts, each long text written into its node."""
    if not aside:
        return [graph.SerializeToString()]
    by_node: dict[int, list[SetAside]] = {}
    for entry in aside:
        by_node.setdefault(entry.index, []).append(entry)
    parts: list[Part] = []
    done = 0  # nodes written so far
    for index in sorted(by_node):
        if index > done:
            before = onnx.GraphProto()
            before.node.extend(graph.node[done:index])
            parts.append(before.SerializeToString())
        node = _with_texts(graph.node[index], by_node[index])
        parts += [pw.len_prefix(_GRAPH_NODE, nbytes(node)), *node]
        done = index + 1
    del graph.node[:done]
    parts.append(graph.SerializeToString())  # the nodes after, and every other field
    return parts


def _with_texts(node: onnx.NodeProto, entries: list[SetAside]) -> list[Part]:
    """``node`` without the emptied attributes, then each of them, with its text."""
    names = {entry.attr.name for entry in entries}
    kept = [attr for attr in node.attribute if attr.name not in names]
    del node.attribute[:]
    node.attribute.extend(kept)
    parts: list[Part] = [node.SerializeToString()]
    for entry in entries:
        head = onnx.AttributeProto(name=entry.attr.name, type=onnx.AttributeProto.STRING)
        if entry.attr.doc_string:
            head.doc_string = entry.attr.doc_string
        body = [head.SerializeToString(), *text_field(_ATTRIBUTE_S, entry.attr.value)]
        parts += [pw.len_prefix(_NODE_ATTRIBUTE, nbytes(body)), *body]
    return parts
