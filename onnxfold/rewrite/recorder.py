"""The recording of each rewrite into a :class:`~onnxfold.rewrite.log.RewriteLog` as the driver
rewrites (``optimize(..., record_rewrites=True)``): its *before* window cut out before the
rewrite is put in, its *after* window once it is in (``rewrite/log.py`` says what a window
holds and why).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from onnxfold.declare.builder import Built, BuiltNode, Replaced
from onnxfold.ir import provenance
from onnxfold.ir.constants import constant_array
from onnxfold.ir.graph import captured_values
from onnxfold.rewrite.log import MAX_WINDOW_NODES, RewriteLog, RewriteRecord, Window
from onnxfold.rewrite.splice import as_replacement


def new_log(model: ir.Model) -> RewriteLog:
    """A log for ``model`` as it is now (the original)."""
    graph = model.graph
    names = {str(v.name) for v in [*graph.inputs, *graph.initializers.values()] if v.name}
    names.update(str(v.name) for node in graph for v in node.outputs if v.name)
    return RewriteLog(model, names)


@dataclass
class _Pending:
    record: RewriteRecord
    replaced: list[ir.Value]  # their replacements, in order, once the rewrite is in
    graph: ir.Graph
    built: set[ir.Value]  # the values this rewrite's nodes compute: never leaves


class Recorder:
    """Writes each rewrite of a run into ``log``."""

    def __init__(self, log: RewriteLog) -> None:
        self.log = log

    def before(self, rule: str, root: ir.Node, result: Replaced, built: Sequence[Built],
               matched: Collection[ir.Node] = (), rounds: bool = False) -> _Pending:
        """Record what ``rule``'s rewrite at ``root`` replaces, before it is put in;
        ``matched``: the nodes of its match; ``rounds``: the rule may round differently."""
        graph = root.graph
        assert graph is not None
        replacement = as_replacement(result, root)
        record = RewriteRecord(rule, root.name or root.op_type, rounds=rounds)
        self.log.records.append(record)
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
        if graph is not self.log.main:
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
        if value.name in self.log.original:
            return str(value.name)
        standing = provenance.stands_for(value)
        return standing if standing is not None and standing in self.log.original else None


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
