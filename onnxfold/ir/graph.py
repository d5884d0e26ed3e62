"""Graph walks and questions about one value or node of an onnx-ir graph (no folding knowledge).

What every layer asks of a graph: its subgraphs and captured values, whether it is in
topological order, a node's label, a value's static shape, whether an initializer may be
overridden by an input, and a value's path through Identity nodes.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import TypeGuard, cast

import onnx_ir as ir

DEFAULT_DOMAINS = ("", "ai.onnx")
_GRAPH, _GRAPHS = ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS

# Ops whose output 0 holds input 0's elements in order: a cast or a new shape of them (what an
# input's ids or dims go through on their way to a Gather).
PASSES_ELEMENTS = frozenset({"Cast", "Identity", "Flatten", "Reshape", "Unsqueeze", "Squeeze"})


def tensor_of(attr: ir.Attr) -> ir.TensorProtocol:
    """A TENSOR attribute's tensor (``attr.as_tensor()`` checks the type through a runtime
    Protocol, ~30 us a call: too slow for graphs with thousands of Constant nodes)."""
    if attr.type != ir.AttributeType.TENSOR:
        raise TypeError(f"attribute {attr.name} is not a tensor")
    return cast(ir.TensorProtocol, attr.value)


def is_default_op(node: ir.Node, *op_types: str) -> bool:
    """Whether ``node`` is in the default ONNX domain (and, given ``op_types``, one of them)."""
    return node.domain in DEFAULT_DOMAINS and (not op_types or node.op_type in op_types)


def subgraphs(node: ir.Node) -> list[ir.Graph]:
    """The graphs in ``node``'s attributes (called for every node of every pass: kept cheap)."""
    found: list[ir.Graph] = []
    attributes = node.attributes
    # onnx-ir's Attributes is a UserDict: its plain dict iterates several times faster
    plain = getattr(attributes, "data", attributes)
    if plain:
        _add_graphs(plain.values(), found)
    return found


def _add_graphs(attributes: Iterable[ir.Attr], found: list[ir.Graph]) -> None:
    """Append the graphs of ``attributes`` (one node's) to ``found``."""
    for attr in attributes:
        kind = attr.type
        if kind is _GRAPH and isinstance(attr, ir.Attr):
            found.append(attr.value)
        elif kind is _GRAPHS and isinstance(attr, ir.Attr):
            found.extend(attr.value)


def use_count(value: ir.Value) -> int:
    """How many uses ``value`` has (a node reading it at two inputs counts twice), as
    ``len(value.uses())`` - without the copy of every use ``uses()`` makes. A value read by
    every layer of a model (a sequence length, a mask) has hundreds of uses, and asking its
    count at each rewrite near it made that copy a cost per layer that grows with the layers
    (on a 128-layer Llama, 1.3 s of copies for 95,000 counts). onnx-ir keeps the uses in a dict
    (``Value._uses``); should it not, the count is the copy's length.
    ``tests/unit/test_use_count.py`` holds the two equal."""
    uses = getattr(value, "_uses", None)
    return len(uses) if isinstance(uses, dict) else len(value.uses())


def all_graphs(model: ir.Model) -> list[ir.Graph]:
    """``model.graph`` and every subgraph, each before the graphs inside it (the order of
    onnx-ir's ``Model.graphs()``, at a fraction of its cost), listed before any is used."""
    return graphs_within([model.graph])


def counted(nodes: Iterable[ir.Node]) -> int:
    """How many of ``nodes`` the report counts: all but Constant nodes."""
    return sum(1 for n in nodes if not (n.op_type == "Constant" and n.domain in ("", "ai.onnx")))


def graphs_within(graphs: list[ir.Graph]) -> list[ir.Graph]:
    """``graphs`` and every graph inside their nodes, each before the graphs inside it.

    Called by most passes on graphs of many thousand nodes: the loop over a graph's nodes
    looks into a node's attributes only when it has some (most nodes have none)."""
    out: list[ir.Graph] = []
    stack = list(reversed(graphs))
    while stack:
        graph = stack.pop()
        out.append(graph)
        inner: list[ir.Graph] = []
        for node in graph:
            attributes = node.attributes
            plain = getattr(attributes, "data", attributes)
            if plain:
                _add_graphs(plain.values(), inner)
        stack.extend(reversed(inner))
    return out


def captured_values(node: ir.Node) -> list[ir.Value]:
    """Values of enclosing scopes read inside ``node``'s subgraphs (recursively)."""
    top = subgraphs(node)
    if not top:
        return []  # most nodes: nothing to walk
    inner: set[ir.Value] = set()
    used: list[ir.Value] = []
    seen: set[ir.Value] = set()

    def walk(graph: ir.Graph) -> None:
        inner.update(graph.inputs)
        inner.update(graph.initializers.values())
        for n in graph:
            for sub in subgraphs(n):
                walk(sub)
            for v in n.inputs:
                if v is not None and v not in seen:
                    seen.add(v)
                    used.append(v)
            inner.update(n.outputs)

    for sub in top:
        walk(sub)
    return [v for v in used if v not in inner]


def in_order(graph: ir.Graph) -> bool:
    """Whether no node of ``graph`` reads (itself or in its subgraphs) a value that a later node
    of the graph computes: topological order, as ONNX requires."""
    seen: set[ir.Value] = set()
    for node in graph:
        reads = [v for v in node.inputs if v is not None] + captured_values(node)
        if any(v not in seen and (p := v.producer()) is not None and p.graph is graph
               for v in reads):
            return False
        seen.update(node.outputs)
    return True


def external_inputs(nodes: Sequence[ir.Node]) -> list[ir.Value]:
    """Values read by ``nodes`` (or their subgraphs) that none of them produces, in order."""
    produced = {v for n in nodes for v in n.outputs}
    needed: dict[ir.Value, None] = {}
    for node in nodes:
        for v in list(node.inputs) + captured_values(node):
            if v is not None and v not in produced:
                needed[v] = None
    return list(needed)


def through_identities(value: ir.Value | None) -> Iterator[ir.Value]:
    """``value``, then the input of the Identity node computing it, and so on up the chain
    (how exporters share one weight among readers)."""
    while value is not None:
        yield value
        producer = value.producer()
        if producer is None or not is_default_op(producer, "Identity"):
            return
        value = producer.inputs[0]


def identity_source(value: ir.Value, sources: Collection[ir.Value]) -> ir.Value | None:
    """The source constant (with data) ``value`` is an Identity, or a chain of them, of."""
    return next((v for v in itertools.islice(through_identities(value), 1, None)
                 if v in sources and v.const_value is not None), None)


def node_label(node: ir.Node) -> str:
    """A node's name, or for unnamed nodes the name of what it computes."""
    if node.name:
        return node.name
    first = next((v.name for v in node.outputs if v.name), None)
    return f"{node.op_type}->{first}" if first else node.op_type


def is_static_dim(dim: object) -> TypeGuard[int]:
    """Whether a declared dim is a size: an int of at least 0 (Paddle's -1, "any size", and
    every named or unnamed dim are dynamic: onnxruntime accepts any size there)."""
    return isinstance(dim, int) and dim >= 0


def static_shape(value: ir.Value) -> tuple[int, ...] | None:
    """``value``'s shape when every dim is a known size; None otherwise (a negative dim, as
    Paddle exports write -1 for "any", is not a size)."""
    shape = value.shape
    if shape is None:
        return None
    dims = shape.dims  # ints and SymbolicDims: onnx-ir makes every int-like dim an int
    for d in dims:
        if not isinstance(d, int) or d < 0:
            return None
    return cast("tuple[int, ...]", dims)  # one pass, no generators: called per node per pass


def is_overridable(value: ir.Value, graph: ir.Graph, ir_version: int) -> bool:
    """From IR 4 on, an initializer that is also a graph input is only a default."""
    return ir_version >= 4 and value in graph.inputs


def kept(node: ir.Node, keep: Collection[str]) -> bool:
    """Whether ``keep`` (``--keep``: op types and node names) names ``node``."""
    return bool(keep) and (node.op_type in keep or (bool(node.name) and node.name in keep))
