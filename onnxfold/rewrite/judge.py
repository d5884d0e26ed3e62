"""What the driver refuses of a rewrite's proposal, before putting it in.

A rule proposes (its check's match, its rewrite's replacement); the driver judges the proposal
once, for every rule, instead of each rule policing what it may remove (as the onnxscript
rewriter's ``_valid_to_replace``). It refuses, with a reason ``--explain`` lists beside the
rules' own rejections, a proposal that:

- removes, rewires or moves a node ``--keep`` keeps (a pattern never matches one; a check that
  walks further, a sum's inner Adds or a MatMul's siblings, may find one);
- replaces, rewires or moves a node of another graph than the matched one (a check walking out
  of a subgraph), or removes a node its check found there;
- removes or rewires a node of one of onnxruntime's QDQ node units, where the rule is tagged
  ``keeps_qdq_units`` (``onnxfold/ir/qdq_units.py``: it computes new weights from what it
  removes, which onnxruntime would then run in float); a match whose pattern holds such a
  node is refused before the rewrite is asked (:func:`match_refusal`), that reason first;
- replaces a graph output with a value that cannot be one (an input, an initializer, a value of
  an enclosing graph, or another output: a graph output is computed by a node of its graph,
  once) when the proposal builds no node: what would stand for the output is an Identity in
  the place of the node it removes. Where the proposal builds nodes, the splice puts the
  Identity in (:func:`~onnxfold.rewrite.splice.splice`).

The nodes a proposal removes are the producers of the values it replaces and the nodes of its
match (the pattern's captures and whatever its check's match holds, in lists, tuples and
dataclasses) that it neither rewires nor moves: the splice removes those it leaves without
readers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Sequence

import onnx_ir as ir

from onnxfold.declare.builder import Built, BuiltNode, Inlined, Replacement
from onnxfold.ir.graph import kept
from onnxfold.ir.qdq_units import broken_unit


def refusal(graph: ir.Graph, proposal: Replacement, built: Sequence[Built],
            captured: Collection[ir.Node], found: Collection[ir.Node],
            keep: Collection[str], keeps_qdq_units: bool = False) -> str | None:
    """Why the driver refuses ``proposal`` (None: it does not), a rewrite in ``graph``:
    ``built`` what its builder made; ``captured`` the nodes its pattern matched (in this graph
    or, through a value a subgraph reads, an enclosing one), ``found`` those its check found;
    ``keep``: what ``--keep`` names; ``keeps_qdq_units``: the rule is tagged so. The reasons
    name op types, never values or nodes, so that ``--explain`` counts a rule's refusals
    together."""
    rewired, moved = proposal.inputs, set(proposal.moved)
    replaced = [p for old in proposal.values if (p := old.producer()) is not None]
    removed = [*replaced,
               *(n for n in (*captured, *found) if n not in rewired and n not in moved)]
    for nodes, how in ((removed, "remove"), (rewired, "rewire"), (proposal.moved, "move")):
        for node in nodes:
            if kept(node, keep):
                return f"it would {how} a {node.op_type} --keep keeps"
    for node in (*replaced, *rewired, *proposal.moved, *found):
        if node.graph is not graph:
            return f"it would change a {node.op_type} of another graph"
    if keeps_qdq_units:
        broken = broken_unit(dict.fromkeys((*removed, *rewired)))
        if broken is not None:
            return broken
    if not any(isinstance(item, BuiltNode | Inlined) for item in built):
        for old, new in proposal.values.items():
            if old in graph.outputs and not stands_for_output(new, graph):
                return "a graph output would become an Identity of a value computed elsewhere" \
                    if new not in graph.outputs else "a graph output would be returned twice"
    return None


def match_refusal(captured: Iterable[ir.Node]) -> str | None:
    """Why the driver refuses the match of a rule tagged ``keeps_qdq_units`` before its
    rewrite is asked (None: it does not): its pattern matched a node of a QDQ node unit (the
    reason ``--explain`` shows even where the check declined for its own)."""
    return broken_unit(captured)


def stands_for_output(value: ir.Value, graph: ir.Graph) -> bool:
    """Whether ``value`` may take the place of an output of ``graph``: a node of ``graph``
    computes it, and it is no output yet (a graph output is computed by a node of its graph,
    and returned once)."""
    producer = value.producer()
    return producer is not None and producer.graph is graph and value not in graph.outputs


def nodes_of(found: Iterable[object]) -> list[ir.Node]:
    """The nodes among what a match holds: nodes, and nodes in lists, tuples and dataclasses
    (nested), in order."""
    nodes: list[ir.Node] = []
    for part in found:
        if isinstance(part, ir.Node):
            nodes.append(part)
        elif isinstance(part, list | tuple):
            nodes.extend(nodes_of(part))
        elif dataclasses.is_dataclass(part) and not isinstance(part, type):
            nodes.extend(nodes_of(getattr(part, f.name) for f in dataclasses.fields(part)))
    return nodes
