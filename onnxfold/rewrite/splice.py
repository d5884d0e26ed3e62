"""A rewrite's result put into the graph: what the builder made goes in, readers move to the
new values, and the nodes the rewrite leaves without readers go.

In this order (the order every rule used to edit in, so that fresh names and node order are
what they were): the replaced outputs' new values take the old ones' type and shape where the
rewrite left them unset; moved nodes move; what the builder made goes in before the matched
node (or ``Replacement.before``), in the order it was built (constants registered, nodes
inserted, inlined subgraphs' initializers and nodes moved in; the built nodes take the matched
node's metadata, its provenance); kept nodes read their new
inputs; values take their new shapes; each replaced value's readers read its replacement (an
Identity in between where the replacement cannot be this graph's output as it is); then the
replaced values' producers and the match's nodes left without readers are removed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, MutableSet, Sequence
from dataclasses import dataclass

import onnx_ir as ir

from onnxfold.analysis.constness import OpFacts, why_not_foldable
from onnxfold.declare.builder import (
    Built,
    BuiltConstant,
    BuiltNode,
    Inlined,
    Replaced,
    Replacement,
)
from onnxfold.ir import provenance
from onnxfold.ir.edits import detach, replace_value
from onnxfold.ir.graph import subgraphs, use_count
from onnxfold.rewrite.judge import stands_for_output


@dataclass(frozen=True)
class Spliced:
    """What putting a rewrite in changed that the driver must know: the nodes that read a
    replaced value (they read its replacement now), and the nodes built (marked as changed;
    any empties the rules' memo)."""

    readers: frozenset[ir.Node]
    built: tuple[ir.Node, ...]  # the nodes the rewrite built, now in the graph
    # the producers of what nodes already in the graph read now in place of what they read
    # (a replacement, a kept node's new inputs): they have a new reader
    feeding: frozenset[ir.Node] = frozenset()
    moved: tuple[ir.Node, ...] = ()  # the nodes moved to another place in the graph
    # the nodes already in the graph that read other values now, or produce or read a value
    # whose shape changed: with ``built``, every node whose shape value may differ
    rewired: frozenset[ir.Node] = frozenset()


def splice(graph: ir.Graph, model: ir.Model, root: ir.Node, built: Sequence[Built],
           result: Replaced, matched: Iterable[ir.Node], constant: MutableSet[ir.Value],
           facts: OpFacts, fresh: Callable[[str], str], rule: str = "rewrite") -> Spliced:
    """Put ``result`` (a rewrite's return, ``built`` what its builder made) into ``graph``
    in place of what it replaces; ``matched``: the nodes of the match, removed if this leaves
    them without readers; ``constant``: the values known constant, to which new values computed
    from constants only are added (what the next sweep's plan would say); ``fresh``: the
    model's names (for an Identity, and for a graph output's old value); ``rule``: whose
    rewrite it is (the values it built say so, ``onnxfold.ir.provenance``)."""
    replacement = as_replacement(result, root)
    _type_like_replaced(replacement.values, built)
    _mark_built(replacement, built, rule, graph, fresh)
    readers = frozenset(use.node for old in replacement.values for use in old.uses())
    kept = set(replacement.inputs)
    producers = [p for old in replacement.values if (p := old.producer()) is not None]
    candidates = [*producers, *(n for n in matched if n not in kept and _read(n))]
    before = replacement.before or root
    for node in replacement.moved:
        if node.graph is graph:
            graph.remove(node)
            graph.insert_before(before, node)
    _insert(graph, model, before, built, constant, facts, fresh)
    _keep_provenance(root, built)
    for node, inputs in replacement.inputs.items():
        _rewire(node, inputs)
    for value, shape in replacement.shapes.items():
        value.shape = shape
    rewired = set(readers) | set(replacement.inputs)
    reshaped = list(replacement.shapes)
    for old, new in replacement.values.items():
        if old in graph.outputs:
            if not stands_for_output(new, graph):
                identity = ir.Node("", "Identity", [new], name=fresh("Identity"))
                identity.outputs[0].name = fresh(old.name or "output")
                graph.insert_before(before, identity)
                rewired.add(identity)
                new = identity.outputs[0]
            reshaped.append(new)  # (it may take the output's declared shape)
        replace_value(graph, old, new, fresh)
    for value in reshaped:
        rewired.update(use.node for use in value.uses())
        if (producer := value.producer()) is not None:
            rewired.add(producer)
    _remove_unread(candidates)
    given = [*replacement.values.values(),
             *(v for inputs in replacement.inputs.values() for v in inputs)]
    feeding = frozenset(p for v in given if v is not None and (p := v.producer()) is not None)
    return Spliced(readers, tuple(item.node for item in built if isinstance(item, BuiltNode)),
                   feeding, tuple(replacement.moved), frozenset(rewired))


def as_replacement(result: Replaced, root: ir.Node) -> Replacement:
    """A rewrite's return as a :class:`Replacement`: a value replaces ``root``'s first output,
    a sequence of values its outputs in order."""
    if isinstance(result, Replacement):
        return result
    if isinstance(result, ir.Value):
        return Replacement(values={root.outputs[0]: result})
    return Replacement(values=dict(zip(root.outputs, result)))


def _mark_built(replacement: Replacement, built: Sequence[Built], rule: str,
                graph: ir.Graph, fresh: Callable[[str], str]) -> None:
    """Every value the rewrite built says so, and each that replaces a value stands for it
    (``provenance.mark_replacement``): the fold keeps a recipe for what it stores of them,
    and a check compares a replacement with the value of the original it stands for. The
    outputs of kept nodes it rewires may no longer mean what they meant: marked too; and
    those it gives another shape (the elementwise chain moved between Reshapes computes the
    flattened values) renamed (a graph output keeps its name), so that a name of the
    original always means the original's value of that name (a check judges a file by
    names, whatever it says)."""
    values = replacement.values
    for node in replacement.inputs:
        for out in node.outputs:
            if out not in values:
                provenance.mark_rewired(out, rule)
                if out.name and out in replacement.shapes and out not in graph.outputs:
                    out.name = fresh(out.name)
    made = [item.value for item in built if isinstance(item, BuiltConstant)] + \
        [out for item in built if isinstance(item, BuiltNode) for out in item.node.outputs]
    for value in made:
        value.meta[provenance.MADE_BY] = rule
        if value.const_value is not None:  # saved: a check names the rule that built it
            value.const_value.metadata_props[provenance.MADE_BY] = rule
    mine = set(made)
    for old, new in values.items():
        if new in mine:
            provenance.mark_replacement(old, new, rule)


def _type_like_replaced(values: Mapping[ir.Value, ir.Value], built: Sequence[Built]) -> None:
    """Give each new value that replaces an output the dtype and shape of that output, where
    the rewrite left them unset."""
    untyped = {value: flags for item in built if isinstance(item, BuiltNode)
               for value, flags in zip(item.node.outputs, item.untyped)}
    for old, new in values.items():
        dtype_unset, shape_unset = untyped.get(new, (False, False))
        if dtype_unset and old.dtype is not None:
            new.dtype = old.dtype
        if shape_unset:
            new.shape = old.shape


def _insert(graph: ir.Graph, model: ir.Model, before: ir.Node, built: Sequence[Built],
            constant: MutableSet[ir.Value], facts: OpFacts, fresh: Callable[[str], str]
            ) -> None:
    """Put what the builder made before ``before``, in order (an inlined subgraph's
    initializers, and its nodes whose names the graph has, renamed: ``fresh``)."""
    for item in built:
        if isinstance(item, BuiltConstant):
            graph.register_initializer(item.value)
            constant.add(item.value)  # a pattern later in this sweep may build on it
            if model.ir_version < 4 and graph is model.graph:
                graph.inputs.append(item.value)  # IR 3: initializers are inputs (main graph)
        elif isinstance(item, BuiltNode):
            node = item.node
            graph.insert_before(before, node)
            ins = [v for v in node.inputs if v is not None]
            if len(node.outputs) == 1 and ins and why_not_foldable(node, facts=facts) is None \
                    and all(v in constant for v in ins):
                constant.add(node.outputs[0])  # what the plan of the next sweep would say
        elif isinstance(item, Inlined):
            item.graph.outputs.clear()  # a value that is an output of one graph cannot move
            for value in item.initializers:
                assert value.name is not None  # initializers are named
                item.graph.initializers.pop(value.name)
                value.name = fresh(value.name)
                graph.register_initializer(value)
            names: set[str] | None = None  # the graph's node names, where one may clash
            for node in item.nodes:
                item.graph.remove(node)
                if node.name:  # onnxruntime refuses two nodes of one name in a graph
                    names = names if names is not None else {n.name for n in graph if n.name}
                    while node.name in names:
                        node.name = fresh(node.name)
                    names.add(node.name)
                graph.insert_before(before, node)


def _keep_provenance(root: ir.Node, built: Sequence[Built]) -> None:
    """The nodes a rewrite built carry the matched node's metadata (an exporter's module
    path and source line: dynamo's ``namespace`` and ``pkg.torch.onnx.*``), so a profile or a
    report still attributes them to the code they came from; a node given its own keeps it.
    Inlined nodes keep their own."""
    if not root.metadata_props:
        return
    for item in built:
        if isinstance(item, BuiltNode) and not item.node.metadata_props:
            item.node.metadata_props.update(root.metadata_props)


def _rewire(node: ir.Node, inputs: Sequence[ir.Value | None]) -> None:
    """``node`` reads ``inputs`` (input by input, in order; fewer drop the last ones)."""
    given = node.inputs
    for i in range(len(given)):
        value = inputs[i] if i < len(inputs) else None
        if given[i] is not value:
            node.replace_input_with(i, value)
    if len(inputs) != len(given):
        node.resize_inputs(len(inputs))
        for i in range(len(given), len(inputs)):
            node.replace_input_with(i, inputs[i])


def _read(node: ir.Node) -> bool:
    """Whether anything reads an output of ``node`` (a node, or its graph as an output);
    counted, not copied: a value read by every layer is asked at each splice near it."""
    outputs = node.graph.outputs if node.graph is not None else ()
    return any(use_count(v) or v in outputs for v in node.outputs)


def _remove_unread(candidates: list[ir.Node]) -> None:
    """Remove each of ``candidates`` once nothing reads it (from its own graph, which may
    enclose the matched one), its subgraphs detached from the values they read."""
    removed = True
    while removed:
        removed = False
        for node in candidates:
            graph = node.graph
            if graph is None or _read(node):
                continue
            for sub in subgraphs(node):
                _detach(sub)
            detach(node)  # (graph.remove's safe checks would ask again what _read did)
            graph.remove(node)
            removed = True


def _detach(graph: ir.Graph) -> None:
    """Make a discarded subgraph stop reading outer values, so that they can be removed."""
    for inner in graph:
        for sub in subgraphs(inner):
            _detach(sub)
        detach(inner)
    graph.outputs.clear()
