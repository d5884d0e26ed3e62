"""Constness analysis: which values of a graph are compile-time constants.

A value is constant if it is a non-overridable initializer, the output of a ``Constant`` node,
a constant of an enclosing scope, or an output of a *foldable* node: a deterministic node of the
default domain whose inputs are all constant (and whose subgraphs only capture constants).
``Shape``/``Size`` of a value with a statically known shape are foldable too. Which ops are
non-deterministic or shape-only are facts the rules declare (``rules/facts.py``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Protocol

import onnx_ir as ir

from onnxfold.analysis.declines import DeclineKind, Reason
from onnxfold.ir.graph import (  # kept: re-exported, where the rule API finds it
    DEFAULT_DOMAINS,
    captured_values,
    is_overridable,
    kept,
    static_shape,
)

# com.microsoft: onnxruntime's contrib ops, folded through its fallback (no native rules)
FOLDABLE_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft"})


class OpFacts(Protocol):
    """What the analysis must know about ops, as the rules declare it (``rules/facts.py``,
    the folders' ``shape_only``). A ``Catalogue`` is one, filtered or not (it keeps every
    rule's op facts): callers pass theirs, so that this layer reads no global catalogue."""

    @property
    def never_folded(self) -> frozenset[str]:
        """Ops never folded whatever their inputs (non-deterministic)."""
        ...

    @property
    def shape_only(self) -> frozenset[str]:
        """Ops folded from their input's shape alone (Shape, Size)."""
        ...




def why_not_foldable(node: ir.Node, keep: Collection[str] = (), *,
                     facts: OpFacts) -> Reason | None:
    """The reason a node can never be folded, whatever its inputs (``keep``: op types and node
    names the user keeps)."""
    if kept(node, keep):
        return Reason(DeclineKind.KEPT, node.op_type if node.op_type in keep else "by name")
    if node.domain not in FOLDABLE_DOMAINS:
        return Reason(DeclineKind.CUSTOM_DOMAIN, f"'{node.domain}'")
    if node.op_type in facts.never_folded:
        return Reason(DeclineKind.NON_DETERMINISTIC)
    return None


@dataclass
class ConstPlan:
    """The outcome of the analysis for one graph.

    ``refused`` holds nodes whose inputs are all constant but that may never fold, with why.
    """

    constant: set[ir.Value] = field(default_factory=set)
    sources: set[ir.Value] = field(default_factory=set)
    foldable: list[ir.Node] = field(default_factory=list)
    refused: list[tuple[ir.Node, Reason]] = field(default_factory=list)


def plan_graph(graph: ir.Graph, ir_version: int, outer: Iterable[ir.Value] = (),
               inputs_are_constant: bool = False, shape_folding: bool = True,
               constant_inputs: bool = False, keep: Collection[str] = (), *,
               facts: OpFacts) -> ConstPlan:
    """Mark the constant values and the foldable nodes of ``graph``, in topological order.

    ``constant_inputs``: every graph input counts as constant, without data (a runtime-fold
    model, whose inputs are the runtime constants); ``keep``: op types and node names never
    folded.
    """
    plan = ConstPlan()
    plan.constant.update(outer)
    if constant_inputs:
        plan.constant.update(graph.inputs)
    plan.sources.update(outer)
    shape_only = facts.shape_only
    constant = plan.constant  # (per node: set methods, no generators; it runs once per pass)
    for value in graph.initializers.values():
        if (inputs_are_constant or not is_overridable(value, graph, ir_version)) \
                and value.const_value is not None:
            constant.add(value)
            plan.sources.add(value)
    for node in graph:
        default, op_type = node.domain in DEFAULT_DOMAINS, node.op_type
        if default and op_type == "Constant":
            constant.update(node.outputs)
            plan.sources.update(node.outputs)
            continue
        inputs = [v for v in node.inputs if v is not None]
        reason = why_not_foldable(node, keep, facts=facts)
        if reason is not None:
            if constant.issuperset(inputs):
                plan.refused.append((node, reason))
            continue
        if default and op_type in shape_only and inputs:
            ok = inputs[0] in constant or (shape_folding and static_shape(inputs[0]))
        else:
            ok = bool(inputs) and constant.issuperset(inputs) and \
                constant.issuperset(captured_values(node))
        if ok:
            plan.foldable.append(node)
            constant.update(node.outputs)
    return plan


def runtime_constant_nodes(graph: ir.Graph, runtime_inputs: Collection[ir.Value],
                           constant: Collection[ir.Value], keep: Collection[str] = (), *,
                           facts: OpFacts) -> list[ir.Node]:
    """The nodes of ``graph`` (in order) computed only from ``runtime_inputs`` (graph inputs
    constant at run time) and ``constant`` values, reading at least one of the former, that
    may fold (``why_not_foldable``): what a runtime fold computes once the first call's
    feeds are known. ``Constant`` nodes are not among them."""
    known: set[ir.Value] = set(runtime_inputs)
    nodes: list[ir.Node] = []
    for node in graph:
        if node.domain in DEFAULT_DOMAINS and node.op_type == "Constant":
            continue
        inputs = [v for v in node.inputs if v is not None] + captured_values(node)
        if not any(v in known for v in inputs) or \
                not all(v in known or v in constant for v in inputs) or \
                why_not_foldable(node, keep, facts=facts) is not None:
            continue
        nodes.append(node)
        known.update(node.outputs)
    return nodes

