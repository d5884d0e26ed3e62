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
out: neither is a redefinition. A subgraph's node may not define a name *visible* in it (onnx's
checker refuses it too): an enclosing graph's input or initializer, or the output of a node
before the subgraph's holder. The holder's own outputs and the nodes after it are not visible
inside it, so a branch may define them: optimum's merged decoders name an If's outputs and its
branches' (``present.0.decoder.key``) alike, which onnx's checker and onnxruntime accept. A
subgraph's own input or initializer may shadow any outer name (both accept that, and read the
subgraph's). Each local function body is a scope of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NoReturn

import onnx

from onnxfold.errors import InputError

_NOT_TEXT = "an op type or domain is not UTF-8 text"
_NAME_NOT_TEXT = "a node or value name is not UTF-8 text"


def refuse_redefinitions(proto: onnx.ModelProto, label: str) -> frozenset[str]:
    """InputError naming the first value of ``proto``'s graphs (its main graph and every
    subgraph) or of its local functions that is defined twice, or for a graph's name, op
    type or domain, or a function's or its nodes' name, that is not UTF-8 text (protobuf gives
    bytes for those), for a node with two attributes of one name, or for a value a function
    body reads and never defines; the op types of the default domain the graphs use. One walk
    of every node, the reader's only one in Python before onnx-ir reads the model (it was
    three: this check, the names' and the op types')."""
    ops: set[str] = set()
    stack: list[tuple[onnx.GraphProto, _Scopes]] = [(proto.graph, ())]
    while stack:
        graph, outer = stack.pop()
        own, inner_graphs = _walk(graph, outer, ops, label)
        stack.extend((sub, (*outer, (own, holder))) for sub, holder in inner_graphs)
    for function in proto.functions:
        _text(label, function.name, *function.input, *function.output,
              *(name for node in function.node
                for name in (node.name, *node.input, *node.output)))
        defined = _once(_function_definitions(function), f"function '{function.name}'", label)
        for node in function.node:
            if len(node.attribute) > 1:
                _attributes_once(node, label)
            read = next((name for name in node.input if name and name not in defined), None)
            if read is not None:  # (a graph's: io.reader.check_structure)
                raise InputError(f"{label}: function '{function.name}': value '{read}' read "
                                 f"by {node.op_type} node '{node.name}' is never defined")
    return frozenset(ops)


# What defines each name of a graph and where: -1 for its inputs and initializers, else the
# index of the node whose output it is.
_Definitions = dict[str, tuple[object, int]]
# The graphs enclosing a subgraph, outermost first, each with the index of the node holding the
# next one: a name is visible inside if defined before that node.
_Scopes = tuple[tuple[_Definitions, int], ...]


def _visible(outer: _Scopes, name: str) -> object | None:
    """What defines ``name`` where a subgraph enclosed by ``outer`` sees it, or None."""
    for definitions, holder in reversed(outer):
        found = definitions.get(name)
        if found is not None and found[1] < holder:
            return found[0]
    return None


def _walk(graph: onnx.GraphProto, outer: _Scopes, ops: set[str], label: str
          ) -> tuple[_Definitions, list[tuple[onnx.GraphProto, int]]]:
    """One graph: what defines each of its names (a word, or the node) and where, checked once
    each and not visible from an enclosing graph; its subgraphs, in order, each with its
    holder's index; its default-domain op types into ``ops``."""
    scope = f"graph '{graph.name}'"
    _text(label, graph.name, *(v.name for values in (graph.input, graph.output,
                                                      graph.value_info) for v in values))
    own: _Definitions = {name: (what, -1) for name, what in
                         _once(_declared_definitions(graph, label), scope, label).items()}
    subgraphs: list[tuple[onnx.GraphProto, int]] = []
    for index, node in enumerate(graph.node):
        op, domain = node.op_type, node.domain
        if not isinstance(op, str) or not isinstance(domain, str):
            raise InputError(f"{label}: invalid model: {_NOT_TEXT}")
        if domain in ("", "ai.onnx"):
            ops.add(op)
        _text(label, node.name, *node.input)
        for name in node.output:
            if not isinstance(name, str):
                raise InputError(f"{label}: invalid model: {_NAME_NOT_TEXT}")
            if not name:
                continue
            first = own.setdefault(name, (node, index))[0]
            if first is not node:
                _refuse(name, scope, _both(first, node), label)
            if outer and (seen := _visible(outer, name)) is not None:
                _refuse(name, scope, f"{_what(seen)} of an enclosing graph and "
                        f"{_what(node)}", label)
        if len(node.attribute) > 1:
            _attributes_once(node, label)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                subgraphs.append((attr.g, index))
            elif attr.type == onnx.AttributeProto.GRAPHS:
                subgraphs.extend((sub, index) for sub in attr.graphs)
    return own, subgraphs


def _attributes_once(node: onnx.NodeProto, label: str) -> None:
    """InputError where ``node`` has two attributes of one name: onnxruntime reads the first
    (a Constant's two ``value``s), onnx-ir keeps the last, so a fold would compute another
    model than the one onnxruntime runs (onnx's checker refuses it too)."""
    names = [attr.name for attr in node.attribute]
    if len(set(names)) != len(names):
        twice = next(name for name in names if names.count(name) > 1)
        raise InputError(f"{label}: invalid model: node '{node.name or node.op_type}' "
                         f"({node.op_type}) has two attributes named '{twice}'")


def _text(label: str, *names: object) -> None:
    if not all(isinstance(name, str) for name in names):
        raise InputError(f"{label}: invalid model: {_NAME_NOT_TEXT}")


def _what(definer: object) -> str:
    """A definition in words: a graph input, an initializer, or a node's output."""
    if not isinstance(definer, onnx.NodeProto):
        return str(definer)
    return f"the output of {definer.op_type} node '{definer.name}'" if definer.name else \
        f"the output of a {definer.op_type} node"


def _both(first: object, second: object) -> str:
    what = _what(second)
    return f"{what}, twice" if _what(first) == what else f"{_what(first)} and {what}"


def _declared_definitions(graph: onnx.GraphProto, label: str) -> Iterator[tuple[str, str]]:
    """(name, what defines it) for the inputs and initializers of ``graph``, an input and an
    initializer of one name counted as one."""
    initializers = {t.name for t in graph.initializer}
    _text(label, *initializers)
    for value in graph.input:
        if value.name not in initializers:
            yield value.name, "a graph input"
    for tensor in graph.initializer:
        yield tensor.name, "an initializer"
    for sparse in graph.sparse_initializer:
        yield sparse.values.name, "a sparse initializer"


def _function_definitions(function: onnx.FunctionProto) -> Iterator[tuple[str, str]]:
    for name in function.input:
        yield name, "a function input"
    yield from _node_outputs(function.node)


def _node_outputs(nodes: Iterable[onnx.NodeProto]) -> Iterator[tuple[str, str]]:
    for node in nodes:
        for name in node.output:
            if name:
                yield name, _what(node)


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
