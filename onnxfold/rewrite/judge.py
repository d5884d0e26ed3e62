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
  node is refused before the check is asked (:func:`match_refusal`), that reason first;
- would leave a node of its match in place that it stops reading (a value the rewrite removes
  is read outside the match, or is a graph output it does not replace: the new nodes would
  compute it a second time), or gives a value a new shape that a node outside the match reads
  or that is a graph output (:func:`left_behind`; as the onnxscript rewriter's
  ``_valid_to_replace``, so that no rule counts readers to stay removable);
- replaces a graph output with a value that cannot be one (an input, an initializer, a value of
  an enclosing graph, or another output: a graph output is computed by a node of its graph,
  once) when the proposal builds no node and removes no more nodes than the Identities that
  would stand for such outputs: it would only put an Identity in the place of what it removes.
  The splice puts the Identity in (:func:`~onnxfold.rewrite.splice.splice`).

The nodes a proposal removes are the producers of the values it replaces and the nodes of its
match (the pattern's captures and whatever its check's match holds, in lists, tuples and
dataclasses) whose every reader goes with them or is rewired away from them; the nodes of its
match it rewires or moves stay, and so do a node its pattern marks ``bypassed`` (a rewrite
that composes past it: other readers keep it) and one the proposal's new nodes read.
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
            keep: Collection[str], keeps_qdq_units: bool = False,
            bypassed: Collection[ir.Node] = ()) -> str | None:
    """Why the driver refuses ``proposal`` (None: it does not), a rewrite in ``graph``:
    ``built`` what its builder made; ``captured`` the nodes its pattern matched (in this graph
    or, through a value a subgraph reads, an enclosing one), ``found`` those its check found;
    ``keep``: what ``--keep`` names; ``keeps_qdq_units``: the rule is tagged so;
    ``bypassed``: the captured nodes the rewrite composes past. The reasons name op types,
    never values or nodes, so that ``--explain`` counts a rule's refusals together."""
    rewired, moved = proposal.inputs, set(proposal.moved)
    replaced = [p for old in proposal.values if (p := old.producer()) is not None]
    matched = [n for n in (*captured, *found) if n not in rewired and n not in moved]
    removed = [*replaced, *matched]
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
    made = {item.node for item in built if isinstance(item, BuiltNode)}
    going, why = left_behind(proposal, replaced, matched, bypassed, made)
    if why is not None:
        return why
    if not any(isinstance(item, BuiltNode | Inlined) for item in built):
        standing = [(old, new) for old, new in proposal.values.items()
                    if old in graph.outputs and not stands_for_output(new, graph)]
        if standing and len(standing) >= len(going):
            return "a graph output would become an Identity of a value computed elsewhere" \
                if standing[0][1] not in graph.outputs else "a graph output would be returned twice"
    return None


def left_behind(proposal: Replacement, replaced: Collection[ir.Node],
                matched: Collection[ir.Node], bypassed: Collection[ir.Node] = (),
                built: Collection[ir.Node] = ()) -> tuple[set[ir.Node], str | None]:
    """The nodes ``proposal`` removes: the producers of what it replaces, and the nodes of
    ``matched`` each of whose readers goes too or is rewired away from it (none a graph
    output); and why the driver refuses it (None: it does not): a node it removes whose other
    result stays read or is a graph output, a matched node it stops reading that stays read
    by a node outside the match (unless ``bypassed``: other readers keep it; one the nodes it
    ``built`` read stays on purpose), or a value it gives a new shape read outside the
    match."""
    going = set(replaced)

    def gone(value: ir.Value, reader: ir.Node) -> bool:
        inputs = proposal.inputs.get(reader)
        return reader in going or (inputs is not None and value not in inputs)

    def removable(node: ir.Node) -> bool:
        outputs = node.graph.outputs if node.graph is not None else ()
        return all(v not in outputs and all(gone(v, use.node) for use in v.uses())
                   for v in node.outputs if v not in proposal.values)

    staying = [n for n in matched if n not in going]
    grown = True
    while grown:
        grown = False
        for node in staying:
            if node not in going and removable(node):
                going.add(node)
                grown = True
    for node in going:
        if not removable(node):  # a producer of a replaced value with another result in use
            return going, f"it would remove a {node.op_type} whose other result stays read"
    inside = going | set(matched) | set(proposal.inputs) | set(built)
    for node in staying:
        if node in going or node in bypassed or not _stops_reading(node, going, proposal):
            continue
        returned = node.graph is not None and any(v in node.graph.outputs for v in node.outputs)
        if returned or any(use.node not in inside for v in node.outputs for use in v.uses()):
            return going, f"a {node.op_type} it removes stays read outside the match"
    for value in proposal.shapes:
        if (value.graph is not None and value in value.graph.outputs) or \
                any(use.node not in inside for use in value.uses()):
            return going, "a value it reshapes is read outside the match"
    return going, None


def _stops_reading(node: ir.Node, going: Collection[ir.Node], proposal: Replacement) -> bool:
    """Whether a reader of ``node``'s outputs goes with ``proposal`` or is rewired away from
    what it read of ``node``: asked of the few nodes that go and are rewired, not of every
    reader (a node of the match may be read by every layer of a model: listing its readers
    at each rewrite near it made a layer's cost grow with the layers)."""
    outputs = set(node.outputs)
    if any(v in outputs for reader in going for v in reader.inputs):
        return True
    return any(v in outputs and v not in new for reader, new in proposal.inputs.items()
               for v in reader.inputs)


def match_refusal(captured: Iterable[ir.Node]) -> str | None:
    """Why the driver refuses the match of a rule tagged ``keeps_qdq_units`` before its
    check is asked (None: it does not): its pattern matched a node of a QDQ node unit (the
    reason ``--explain`` shows, whatever the check would have answered: the driver decides,
    not each rule)."""
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
