"""String attributes of a megabyte or more (a custom op's serialized payload, a Constant's
``value_string``): set aside while a model is serialized for what never reads their text.

Shape inference needs an attribute's type, not a 256 MiB text's characters, and the writer
writes the text itself, a chunk at a time, after the node it belongs to
(``onnxfold.io.writer``): held once, by the model, not again by a proto and its serialization.
Only the main graph's nodes are looked at, as the reader only takes those out of the proto it
parses (``onnxfold.io.reader``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import onnx_ir as ir

LONG_TEXT = 1 << 20  # characters (or bytes) from which a string attribute is set aside


def is_long_text(attr: ir.Attr) -> bool:
    """A STRING attribute (text, or bytes that are no UTF-8) of ``LONG_TEXT`` or more."""
    return attr.type == ir.AttributeType.STRING and not attr.is_ref() and \
        isinstance(attr.value, str | bytes) and len(attr.value) >= LONG_TEXT


@dataclass(frozen=True)
class SetAside:
    """One long text: the node (and its index in the main graph) and the attribute, whose
    place in the node an empty string holds meanwhile."""

    index: int
    node: ir.Node
    attr: ir.Attr


def long_texts(graph: ir.Graph) -> list[SetAside]:
    """The long-text attributes of ``graph``'s nodes (not of its subgraphs)."""
    return [SetAside(index, node, attr) for index, node in enumerate(graph)
            for attr in node.attributes.values() if is_long_text(attr)]


@contextmanager
def texts_set_aside(model: ir.Model) -> Iterator[list[SetAside]]:
    """Within the block, each long text of the main graph is an empty string of the same type
    (the attributes are yielded, holding the texts); then the texts are back."""
    aside = long_texts(model.graph)
    for entry in aside:
        entry.node.attributes[entry.attr.name] = ir.Attr(
            entry.attr.name, ir.AttributeType.STRING, "", doc_string=entry.attr.doc_string)
    try:
        yield aside
    finally:
        for entry in aside:
            entry.node.attributes[entry.attr.name] = entry.attr
