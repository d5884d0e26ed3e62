"""Graph edits every rewrite needs: fresh names that never collide, and replacing a value."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable

import onnx_ir as ir

from onnxfold.ir.graph import all_graphs, captured_values, graphs_within, kept, subgraphs, use_count


class NameAllocator:
    """Fresh value and node names for one model: never one the model already uses."""

    def __init__(self, model: ir.Model) -> None:
        graphs = all_graphs(model)
        nodes = [n for g in graphs for n in g]
        self._used = {v.name for n in nodes for v in n.outputs if v.name}
        self._used.update(n.name for n in nodes if n.name)
        for graph in graphs:
            self._used.update(v.name for v in graph.inputs if v.name)
            self._used.update(graph.initializers)
        self._next = 0

    def fresh(self, base: str) -> str:
        while True:
            name = f"{base}__onnxfold{self._next}"
            self._next += 1
            if name not in self._used:
                self._used.add(name)
                return name

    def mark(self) -> int:
        """Where the allocator is, for :meth:`rollback`."""
        return self._next

    def rollback(self, mark: int, names: Iterable[str]) -> None:
        """Take back ``names``, given since ``mark`` (a rewrite the driver refused): the next
        names are those they would have been."""
        self._used.difference_update(names)
        self._next = mark

NAMES_KEY = "onnxfold.names"


def names_for(model: ir.Model) -> NameAllocator:
    """The model's name allocator (kept in ``model.meta`` for the model's lifetime)."""
    allocator = model.meta.get(NAMES_KEY)
    if allocator is None:
        allocator = model.meta[NAMES_KEY] = NameAllocator(model)
    return allocator


def replace_value(graph: ir.Graph, old: ir.Value, new: ir.Value,
                  fresh_name: Callable[[str], str]) -> None:
    """``new`` replaces ``old`` everywhere; a graph output keeps its name and declaration."""
    was_output = old in graph.outputs
    name = old.name
    old.replace_all_uses_with(new, replace_graph_outputs=True)
    if was_output:
        old.name = fresh_name(name or "replaced")
        new.name = name
        if new.type is None:
            new.type = old.type
        if new.shape is None or (old.shape is not None and len(old.shape) == len(new.shape)
                                 and not new.shape.is_static() and old.shape.is_static()):
            new.shape = old.shape


def remove_dead_nodes_in(graph: ir.Graph, keep: Collection[str],
                         live: set[ir.Graph] | None = None) -> int:
    """Remove the nodes of ``graph`` whose outputs nothing reads, except those ``keep``
    (``--keep``) names, until none is left; return how many went.

    ``live``: the graphs still in the model (every graph's, from the main one down). A read
    by a node of another graph does not count: the subgraph of a removed ``If`` or ``Loop``
    (folded, or inlined by a rewrite) still lists its nodes among the readers of the outer
    values it captured, which would keep their producers as dead code. The subgraphs of a node
    removed here leave ``live``.

    One walk from the last node to the first, plus a worklist: a node can only become dead
    when a reader of its outputs goes, so after each removal just the producers of the removed
    node's inputs and captured values (in this graph) are looked at again, not the whole
    graph. What is removed does not depend on the order (a node goes once nothing left reads
    it)."""
    outputs = frozenset(graph.outputs)
    dead: dict[ir.Node, None] = {}  # detached at once, unlinked together at the end
    pending = list(graph)  # popped from the end: readers before what they read, when sorted
    try:
        while pending:
            node = pending.pop()
            if node in dead or node.graph is not graph or kept(node, keep) or \
                    _read(node, outputs, live):
                continue
            inner = subgraphs(node)
            read = [*node.inputs, *(captured_values(node) if inner else ())]
            producers = [p for v in read if v is not None
                         and (p := v.producer()) is not None and p.graph is graph]
            for value in node.outputs:  # readers left only in removed subgraphs: unhooked
                for use in list(value.uses()):
                    use.node.replace_input_with(use.idx, None)
            detach(node)
            dead[node] = None
            if live is not None and inner:
                live.difference_update(graphs_within(inner))
            pending.extend(reversed(producers))
    finally:  # a detached node never stays in the graph
        if dead:
            graph.remove(dead)
    return len(dead)


def _read(node: ir.Node, outputs: frozenset[ir.Value], live: set[ir.Graph] | None) -> bool:
    """Whether an output of ``node`` is one of the graph's ``outputs`` or :func:`read_in`
    ``live`` (loops, not generators: every node of every graph is asked at each prune)."""
    for value in node.outputs:  # noqa: SIM110 - any() over a generator: 1.6x the time
        if value in outputs or read_in(value, live):
            return True
    return False


def detach(node: ir.Node) -> None:
    """Make ``node`` read nothing, input by input (what ``graph.remove(node, safe=True)`` does
    before it unlinks a node; without its checks, which cost more than the removal: a set of
    the graph's outputs per call)."""
    for i in range(len(node.inputs)):
        node.replace_input_with(i, None)


def read_in(value: ir.Value, live: set[ir.Graph] | None) -> bool:
    """Whether a node of one of the ``live`` graphs reads ``value`` (any node, without
    ``live``)."""
    if live is None:
        return use_count(value) > 0
    for use in value.uses():  # noqa: SIM110 - asked of every output at each prune: no generator
        if use.node.graph in live:
            return True
    return False
