"""The rewrites an optimized file holds, found by the check itself from the two files.

``optimize --check`` validates each rewrite from the record its own run kept
(``rewrite.log``). A file read later (``verify-folds``, ``compare``) carries no record the check
may trust: its metadata is the optimizer's own word. So the check finds what was rewritten by
reading both models, and validates what the optimized file *computes*, not what a record says:

- a node of the optimized graph is *kept* where the original holds a node with the same op,
  inputs, outputs and attributes (its name aside): given the original's values of its inputs, it
  computes the original's values of its outputs;
- every other node is *new*. New nodes linked by values the original has no name for form one
  window; the window's *outputs* are the values it computes under a name the original computes
  (what the rest of the graph reads of it), its leaves the values it reads: under a name the
  original has (the original's values, computed on the check's input sets), or initializers of
  the optimized file (its own bytes: a merged weight, a rewrite's axes);
- the window it replaced is the original's nodes computing those outputs back to values both
  models hold (at most :data:`MAX_NODES`; past that, the original's values of the outputs
  themselves).

Both windows run on the original's values of the leaves (``check.rewrites.validation``). By
induction over the optimized graph, where every window agrees, every value it computes under an
original's name agrees with the original on the input sets; its initializers are the fold
verification's. Bits are asked only where neither window rounds (data movement, selection,
integers, comparisons): which rule made a window, and so whether it reassociates float
arithmetic, is the file's word, not the check's.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

import onnx
import onnx_ir as ir

from onnxfold.check.judging import exact_ops
from onnxfold.check.rewrites.same_roundings import ROUNDING
from onnxfold.ir.graph import captured_values
from onnxfold.rewrite.log import RewriteRecord, Window

MAX_NODES = 64  # nodes of a window, either side
RULE = "rewritten"  # how the verdicts name a window found here (its node: the first new one)


@dataclass
class FileRewrites:
    """The windows of the optimized model that differ from the original (records the rewrite
    validation runs) and the optimized model's initializers each reads."""

    records: list[RewriteRecord] = field(default_factory=list)
    opsets: dict[str, int] = field(default_factory=dict)
    # id(record) -> the initializers its nodes read, each with how many of them read it
    reads: dict[int, dict[str, int]] = field(default_factory=dict)
    # an initializer -> how many nodes of the graph read it (a graph output counts as one)
    readers: dict[str, int] = field(default_factory=dict)
    computed: set[str] = field(default_factory=set)  # the values new nodes compute


def rewritten_windows(original: ir.Model, optimized: ir.Model,
                      opened: Collection[str] = ()) -> FileRewrites:
    """The windows of ``optimized``'s main graph that ``original`` does not hold (module).
    ``opened``: values under an original's name where a window differed, compared no more
    there but where what reads them hands on (a Reshape target written ``[0, 0, -1, 2]`` for
    the dims the original computes means the same to the Reshape)."""
    graph_a, graph_b = original.graph, optimized.graph
    found = FileRewrites(opsets=dict(optimized.opset_imports))
    found.readers = _initializer_readers(graph_b, graph_b.outputs)
    kept = {_signature(node) for node in graph_a}
    new = [node for node in graph_b if _signature(node) not in kept or any(
        v is not None and v.name in opened for v in [*node.inputs, *captured_values(node)])]
    if not new:
        return found
    named_a = _names(graph_a)
    compared = named_a - set(opened)
    found.computed = {str(v.name) for n in new for v in n.outputs if v.name}
    same_opsets = dict(original.opset_imports) == dict(optimized.opset_imports)
    shared = _names(graph_b)
    producers = {str(v.name): node for node in graph_a for v in node.outputs if v.name}
    position = {id(node): k for k, node in enumerate(graph_a)}
    for nodes in _windows(new, compared):
        record = RewriteRecord(RULE, nodes[0].name or nodes[0].op_type)
        outputs = [v for n in nodes for v in n.outputs if v.name and v.name in compared]
        if not outputs:
            continue  # computes nothing the original names: nothing reads it
        found.records.append(record)
        after = _after(nodes, outputs, optimized.ir_version >= 4)
        found.reads[id(record)] = _initializer_readers(nodes)
        if len(nodes) > MAX_NODES:
            record.unresolved = f"a window of {len(nodes)} new nodes, more than {MAX_NODES}"
            continue
        names = [str(v.name) for v in outputs]
        before = _before(graph_a, names, shared, producers, position) if same_opsets else None
        record.before = before or _identity(names)
        record.after = after
    return found


def _initializer_readers(nodes: Iterable[ir.Node], outputs: Iterable[ir.Value] = ()
                         ) -> dict[str, int]:
    """Each initializer ``nodes`` read (inputs or subgraphs' outer reads), with how many of
    them read it; each of ``outputs`` that is one counts once more."""
    counts: dict[str, int] = {}
    for values in [*({v for v in [*n.inputs, *captured_values(n)] if v is not None}
                     for n in nodes), list(outputs)]:
        for value in values:
            if value.name and value.const_value is not None and value.producer() is None:
                counts[str(value.name)] = counts.get(str(value.name), 0) + 1
    return counts


def _signature(node: ir.Node) -> bytes:
    """What ``node`` computes from which names: its proto without its name and notes, its
    attributes by name (their order means nothing)."""
    proto = ir.serde.serialize_node(node)
    proto.name, proto.doc_string = "", ""
    del proto.metadata_props[:]
    attributes = sorted(proto.attribute, key=lambda a: a.name)
    del proto.attribute[:]
    proto.attribute.extend(attributes)
    return proto.SerializeToString(deterministic=True)


def _names(graph: ir.Graph) -> set[str]:
    """The names of the values ``graph`` holds: inputs, initializers, node outputs."""
    names = {str(v.name) for v in [*graph.inputs, *graph.initializers.values()] if v.name}
    names.update(str(v.name) for node in graph for v in node.outputs if v.name)
    return names


def _windows(new: list[ir.Node], named_a: set[str]) -> list[list[ir.Node]]:
    """``new`` (in graph order) in windows: nodes linked by a value one computes and another
    reads, where the original has no value of its name."""
    parent = {id(n): id(n) for n in new}

    def root(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for node in new:
        for value in [*node.inputs, *captured_values(node)]:
            producer = value.producer() if value is not None else None
            if producer is not None and id(producer) in parent and \
                    str(value.name) not in named_a:  # type: ignore[union-attr]
                parent[root(id(node))] = root(id(producer))
    groups: dict[int, list[ir.Node]] = {}
    for node in new:
        groups.setdefault(root(id(node)), []).append(node)
    return list(groups.values())


def _reads(nodes: Iterable[ir.Node]) -> list[ir.Value]:
    """The values ``nodes`` read from outside them (inputs and subgraphs' outer reads)."""
    nodes = list(nodes)
    inside = {id(v) for n in nodes for v in n.outputs}
    seen: set[int] = set()
    read = []
    for node in nodes:
        for value in [*node.inputs, *captured_values(node)]:
            if value is not None and value.name and id(value) not in inside and \
                    id(value) not in seen:
                seen.add(id(value))
                read.append(value)
    return read


def _after(nodes: list[ir.Node], outputs: list[ir.Value], defaults: bool) -> Window:
    """The optimized model's window: its nodes, reading the original's values of the names it
    has and the optimized model's own initializers (its bytes, read when the window runs);
    ``defaults``: an initializer that is also a graph input is only a default (IR 4 on), an
    input the check feeds as the original's."""
    window = Window(nodes=[ir.serde.serialize_node(n) for n in nodes],
                    outputs=[str(v.name) for v in outputs])
    for value in _reads(nodes):
        name = str(value.name)
        if value.const_value is not None and value.producer() is None and not (
                defaults and value.is_graph_input()):
            window.constants[name] = value.const_value  # (read when it runs)
        else:
            window.originals[name] = name
    return window


def _before(graph: ir.Graph, outputs: list[str], shared: set[str],
            by_output: Mapping[str, ir.Node], position: Mapping[int, int]) -> Window | None:
    """The original's nodes computing ``outputs`` back to the values both models hold, in
    graph order (None: more than :data:`MAX_NODES`); ``by_output``: its nodes by the names
    of their outputs, ``position``: by ``id``, where each stands in it."""
    chosen: dict[int, ir.Node] = {}
    todo = [by_output[name] for name in outputs if name in by_output]
    while todo:
        node = todo.pop()
        if id(node) in chosen:
            continue
        chosen[id(node)] = node
        if len(chosen) > MAX_NODES:
            return None
        for value in [*node.inputs, *captured_values(node)]:
            producer = value.producer() if value is not None else None
            if producer is not None and producer.graph is graph and \
                    str(value.name) not in shared:  # type: ignore[union-attr]
                todo.append(producer)
    nodes = sorted(chosen.values(), key=lambda n: position[id(n)])
    window = Window(nodes=[ir.serde.serialize_node(n) for n in nodes], outputs=list(outputs))
    window.originals = {str(v.name): str(v.name) for v in _reads(nodes)}
    window.originals.update({name: name for name in outputs if name not in by_output})
    return window


def _identity(outputs: list[str]) -> Window:
    """A window that computes nothing: the original's values of ``outputs`` as they are."""
    return Window(outputs=list(outputs), originals={name: name for name in outputs})


def asks_bits(record: RewriteRecord) -> bool:
    """Whether a window found here must give the bits of the window it replaced: every node
    of both gives the same bits however a window is arranged around it (exact, ``exact_ops``,
    and rounding no float)."""
    return all(exact_ops.exact(n) and n.op_type not in ROUNDING
               for w in (record.before, record.after) if w is not None for n in w.nodes)


def holds_subgraphs(record: RewriteRecord) -> bool:
    """Whether the optimized model's side of a window found here has a node with a subgraph
    (an If, a Loop)."""
    return record.after is not None and any(
        a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
        for n in record.after.nodes for a in n.attribute)
