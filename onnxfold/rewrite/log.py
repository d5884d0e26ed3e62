"""What each rewrite replaced and with what, kept so that a check can validate every rewrite.

A rewrite claims that the values it puts in compute what the values they replace computed, for
every input of the model. When asked (``optimize(..., record_rewrites=True)``, as ``--check``
does), the driver records each rewrite as two small graphs: the *before* window, the nodes that
computed the replaced values (as they stood), and the *after* window, the nodes that compute
their replacements (as they stand once it is in). Both read *leaves*: values a check can
compute from the original model alone, because the original has a value of that name (a value
of the graph keeps the meaning of the original's value of its name: ``replace_value`` and the
fold give the name to what replaces it) or because a rewrite's constant stands for one
(``provenance.STANDS_FOR``), and constants (their arrays kept; a tensor held in a proto kept as
the tensor, read where the window runs: each read of a proto's tensor is a copy, and a check of
a proto held a copy of every weight a window read, 324 MiB on BERT-base). Where a window reads
a value that is neither (a value an earlier rewrite built), the window grows to that value's
producer, within :data:`MAX_WINDOW_NODES`; past that, or at a value of an enclosing graph, the
record says why it cannot be validated.

A kept node that a rewrite rewired (``Replacement.inputs``) counts as replaced by itself: its
outputs before and after are compared.

``onnxfold.check.rewrites.validation`` runs both windows in onnxruntime on the values the
original computes for the leaves on the check's input sets (every binding of the dims it ran),
and compares them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx_ir as ir

from onnxfold.declare.builder import Built, BuiltNode, Replaced
from onnxfold.ir import provenance
from onnxfold.ir.constants import constant_array
from onnxfold.ir.graph import captured_values
from onnxfold.rewrite.splice import as_replacement

MAX_WINDOW_NODES = 64


@dataclass
class Window:
    """Nodes (in order) computing ``outputs`` from leaves: values the original computes
    (``originals``: the name the window reads -> the original's value of it) and constants
    (``constants``, by name)."""

    nodes: list[onnx.NodeProto] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    originals: dict[str, str] = field(default_factory=dict)
    constants: dict[str, np.ndarray | ir.TensorProtocol] = field(default_factory=dict)


@dataclass
class RewriteRecord:
    """One rewrite: its rule and node, the window it replaced and its replacement (their
    outputs pair up in order), or why it cannot be validated (``unresolved``)."""

    rule: str
    node: str
    before: Window | None = None
    after: Window | None = None
    unresolved: str = ""


@dataclass
class _Pending:
    record: RewriteRecord
    replaced: list[ir.Value]  # their replacements, in order, once the rewrite is in
    graph: ir.Graph
    built: set[ir.Value]  # the values this rewrite's nodes compute: never leaves


class RewriteLog:
    """The records of one optimization. ``original``: the value names of the original model's
    main graph, read before any pass changed it."""

    def __init__(self, model: ir.Model, original: Collection[str]) -> None:
        self.model = model
        self.original = frozenset(original)
        self.records: list[RewriteRecord] = []

    @property
    def main(self) -> ir.Graph:
        """The model's main graph now (``--target-opset``'s conversion puts in a new one
        before any rewrite: its rewrites are the main graph's too)."""
        return self.model.graph

    @property
    def opsets(self) -> dict[str, int]:
        """The opsets the recorded windows are written in (the converted ones, where
        ``--target-opset`` converted the model)."""
        return dict(self.model.opset_imports)

    @classmethod
    def of(cls, model: ir.Model) -> RewriteLog:
        """A log for ``model`` as it is now (the original)."""
        graph = model.graph
        names = {str(v.name) for v in [*graph.inputs, *graph.initializers.values()] if v.name}
        names.update(str(v.name) for node in graph for v in node.outputs if v.name)
        return cls(model, names)

    def before(self, rule: str, root: ir.Node, result: Replaced, built: Sequence[Built],
               matched: Collection[ir.Node] = ()) -> _Pending:
        """Record what ``rule``'s rewrite at ``root`` replaces, before it is put in;
        ``matched``: the nodes of its match."""
        graph = root.graph
        assert graph is not None
        replacement = as_replacement(result, root)
        record = RewriteRecord(rule, root.name or root.op_type)
        self.records.append(record)
        replaced = list(replacement.values)
        inside = set(replacement.inputs) | set(matched)
        # a rewired node's output is compared where something outside the rewrite reads it
        # (or the graph returns it): inside it, what it computes may change (flattened by an
        # elementwise chain moved between Reshapes) as long as what leaves it does not
        replaced += [out for node in replacement.inputs for out in node.outputs
                     if out not in replacement.values and (
                         out in graph.outputs or any(u.node not in inside for u in out.uses()))]
        built_values = {out for item in built if isinstance(item, BuiltNode)
                        for out in item.node.outputs}
        pending = _Pending(record, [replacement.values.get(v, v) for v in replaced], graph,
                           built_values)
        if graph is not self.main:
            record.unresolved = "a rewrite in a subgraph (the original's values are the main " \
                "graph's)"
        elif any(not v.name for v in replaced):
            record.unresolved = "a replaced value has no name"
        else:
            record.before = self._window(replaced, graph, record, computed=True)
        return pending

    def after(self, pending: _Pending) -> None:
        """Record the replacement of ``pending``, now that it is in."""
        record = pending.record
        if record.unresolved or record.before is None:
            return
        if any(not v.name for v in pending.replaced):
            record.unresolved = "a replacement has no name"
            return
        record.after = self._window(pending.replaced, pending.graph, record, computed=False,
                                    built=pending.built)

    def _window(self, outputs: list[ir.Value], graph: ir.Graph, record: RewriteRecord,
                computed: bool, built: set[ir.Value] | frozenset = frozenset()
                ) -> Window | None:
        """The nodes of ``graph`` computing ``outputs`` back to leaves (see module); with
        ``computed``, each output by its own producer (the nodes a rewrite replaces), else an
        output may be a leaf itself (a replacement that is a constant, or a value the original
        has). The ``built`` values (what this rewrite's nodes compute) are never leaves: what
        they stand for is the claim being validated. None (and ``record.unresolved`` says
        why) where it cannot be cut out."""
        window = Window(outputs=[str(v.name) for v in outputs])
        nodes: set[ir.Node] = set()
        stack = list(outputs)
        seen: set[ir.Value] = set()
        expand = set(outputs) if computed else set()
        while stack:
            value = stack.pop()
            if value in seen:
                continue
            seen.add(value)
            name = str(value.name or "")
            if value not in expand and value not in built:
                constant = _constant(value)
                if constant is not None and name:
                    window.constants[name] = constant
                    continue
                original = self._original_of(value)
                if original is not None:
                    window.originals[name] = original
                    continue
            producer = value.producer()
            if producer is None or producer.graph is not graph or not name:
                record.unresolved = (f"it reads {name or 'an unnamed value'}, which the original "
                                     "does not compute (a value a rewrite built, or of an "
                                     "enclosing graph)")
                return None
            if producer not in nodes:
                nodes.add(producer)
                if len(nodes) > MAX_WINDOW_NODES:
                    record.unresolved = f"its window exceeds {MAX_WINDOW_NODES} nodes"
                    return None
                stack.extend(v for v in [*producer.inputs, *captured_values(producer)]
                             if v is not None)
        window.nodes = [ir.serde.serialize_node(n) for n in _in_order(nodes, graph)]
        return window

    def _original_of(self, value: ir.Value) -> str | None:
        """The original's value that ``value`` is: the one of its name, or the one a
        rewrite's value stands for (None: the original computes no such value)."""
        if provenance.rewired(value):
            return None  # its name no longer means the original's value of that name
        if value.name in self.original:
            return str(value.name)
        standing = provenance.stands_for(value)
        return standing if standing is not None and standing in self.original else None


def _constant(value: ir.Value) -> np.ndarray | ir.TensorProtocol | None:
    """``value``'s constant as a window keeps it (see the module), None where it is none."""
    if isinstance(value.const_value, ir.serde.TensorProtoTensor):
        return value.const_value
    return constant_array(value)


def _in_order(nodes: Iterable[ir.Node], graph: ir.Graph) -> list[ir.Node]:
    """``nodes`` in an order where each comes after the nodes it reads (the graph's own order
    where it is one; nodes just built are not in it yet)."""
    chosen = set(nodes)
    ordered: list[ir.Node] = []
    done: set[ir.Node] = set()

    def visit(node: ir.Node) -> None:
        stack = [(node, False)]
        while stack:
            current, expanded = stack.pop()
            if current in done:
                continue
            if expanded:
                done.add(current)
                ordered.append(current)
                continue
            stack.append((current, True))
            for value in current.inputs:
                producer = value.producer() if value is not None else None
                if producer is not None and producer in chosen and producer not in done:
                    stack.append((producer, False))

    for node in chosen:
        visit(node)
    return ordered


__all__ = ["MAX_WINDOW_NODES", "RewriteLog", "RewriteRecord", "Window"]
