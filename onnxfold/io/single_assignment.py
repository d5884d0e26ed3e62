"""Every value of a graph defined once (ONNX's static single assignment).

A graph with two definitions of one name (two initializers ``W``, a dense and a sparse ``W``, a
Constant node and an initializer, two nodes' outputs, two inputs) is no valid ONNX graph, and
the copies need not agree: onnxruntime runs the last one it meets ("Duplicate initializer ...
the model will use the latest encountered initializer"), onnx-ir keeps one in a dict and drops
the other silently, so a check would verify one copy while onnxruntime runs the other. Such a
file is refused on its proto, before onnx-ir reads it or sparse tensors are densified: one
line naming the value and its two definitions.

A graph input that is also an initializer is one definition (an input with a default value:
IR < 4 lists every initializer among the inputs), and an empty output name is an output left
out: neither is a redefinition. A subgraph's node may not define a name its enclosing graphs
define (onnx's checker and onnxruntime refuse it too); a subgraph's own input or initializer
may shadow one (both accept that, and read the subgraph's). Each local function body is a scope
of its own.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Iterable, Iterator
from typing import NoReturn

import onnx

from onnxfold.errors import InputError


def refuse_redefinitions(proto: onnx.ModelProto, label: str) -> None:
    """InputError naming the first value of ``proto``'s graphs (its main graph and every
    subgraph) or of its local functions that is defined twice."""
    stack: list[tuple[onnx.GraphProto, ChainMap[str, str]]] = [(proto.graph, ChainMap())]
    while stack:
        graph, outer = stack.pop()
        scope = f"graph '{graph.name}'"
        own = _once(_graph_definitions(graph), scope, label)
        for node in graph.node:
            for name in node.output:
                if name and name in outer:
                    _refuse(name, scope, f"{outer[name]} of an enclosing graph and "
                            f"{own[name]}", label)
        inner = outer.new_child(own)
        stack.extend((sub, inner) for sub in _subgraphs(graph.node))
    for function in proto.functions:
        _once(_function_definitions(function), f"function '{function.name}'", label)


def _subgraphs(nodes: Iterable[onnx.NodeProto]) -> Iterator[onnx.GraphProto]:
    """The graphs in ``nodes``' attributes (not those nested in them)."""
    for node in nodes:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield attr.g
            elif attr.type == onnx.AttributeProto.GRAPHS:
                yield from attr.graphs


def _graph_definitions(graph: onnx.GraphProto) -> Iterator[tuple[str, str]]:
    """(name, what defines it) for every definition in ``graph``, an input and an
    initializer of one name counted as one."""
    initializers = {t.name for t in graph.initializer}
    for value in graph.input:
        if value.name not in initializers:
            yield value.name, "a graph input"
    for tensor in graph.initializer:
        yield tensor.name, "an initializer"
    for sparse in graph.sparse_initializer:
        yield sparse.values.name, "a sparse initializer"
    yield from _node_outputs(graph.node)


def _function_definitions(function: onnx.FunctionProto) -> Iterator[tuple[str, str]]:
    for name in function.input:
        yield name, "a function input"
    yield from _node_outputs(function.node)


def _node_outputs(nodes: Iterable[onnx.NodeProto]) -> Iterator[tuple[str, str]]:
    for node in nodes:
        what = f"the output of {node.op_type} node '{node.name}'" if node.name else \
            f"the output of a {node.op_type} node"
        for name in node.output:
            if name:
                yield name, what


def _once(definitions: Iterable[tuple[str, str]], scope: str, label: str) -> dict[str, str]:
    """What defines each name of ``definitions``; InputError for a name defined twice."""
    seen: dict[str, str] = {}
    for name, what in definitions:
        first = seen.get(name)
        if first is None:
            seen[name] = what
            continue
        _refuse(name, scope, f"{what}, twice" if what == first else f"{first} and {what}", label)
    return seen


def _refuse(name: str, scope: str, both: str, label: str) -> NoReturn:
    raise InputError(f"{label}: value '{name}' is defined twice in {scope} ({both}): an ONNX "
                     "graph defines each value once, and onnxruntime would run one definition "
                     "while the other is read")


__all__ = ["refuse_redefinitions"]
