"""onnx's version converter, on a model-local function's body: converted as the graph of a
model of its own (the converter converts a model's main graph only), its inputs untyped.

What the converter adds to that graph as initializers comes back as Constant nodes (a function
has none), and the body then imports the target opset. The converter's C++ assertions arrive
as exceptions: the caller says what they mean (:func:`converter_reason` cleans their text).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import onnx
import onnx.version_converter

from onnxfold.errors import clipped

DEFAULT_DOMAINS = ("", "ai.onnx")


def convert_function(function: onnx.FunctionProto, target: int, ir_version: int
                     ) -> onnx.FunctionProto:
    """A copy of ``function`` with its body converted to opset ``target`` of the default
    domain (the converter's exception where it cannot)."""
    wrapped = onnx.helper.make_model(
        onnx.helper.make_graph(list(function.node), function.name or "body",
                               [onnx.ValueInfoProto(name=n) for n in function.input],
                               [onnx.ValueInfoProto(name=n) for n in function.output]),
        opset_imports=list(function.opset_import), ir_version=ir_version)
    converted = onnx.version_converter.convert_version(wrapped, target)
    result = onnx.FunctionProto()
    result.CopyFrom(function)
    del result.node[:]
    result.node.extend(_as_constants(converted.graph.initializer))
    result.node.extend(converted.graph.node)
    for entry in result.opset_import:
        if entry.domain in DEFAULT_DOMAINS:
            entry.version = target
    return result


def _as_constants(initializers: Iterable[onnx.TensorProto]) -> list[onnx.NodeProto]:
    """Initializers the converter added to a body's graph, as Constant nodes."""
    return [onnx.helper.make_node("Constant", [], [t.name], value=t) for t in initializers]


def converter_reason(error: Exception) -> str:
    """The converter's message without its C++ source location, on one line."""
    text = " ".join(str(error).split()) or type(error).__name__
    text = re.sub(r"^\S*\.(?:h|cc|cpp):\d+: (?:\w+: )?", "", text)
    text = re.sub(r"^Assertion `[^`]*` failed: ", "", text)
    return clipped(text, 400)
