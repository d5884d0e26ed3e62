"""The rewrite driver: the catalogue's patterns applied from a worklist until nothing changes.

As MLIR's greedy pattern driver and tinygrad's ``graph_rewrite``: the rules are indexed by op
type, the first sweep tries every node once in graph order, and after a rewrite only the nodes
near it are marked to be tried again (its surroundings, the nodes next to them, and their
readers within the depth of the deepest pattern): later in the same sweep if they come after
it, else in the next one. A later sweep tries only the marked nodes, plus the readers of
values whose constness or shape value changed: each sweep plans every graph's constants again
and, if a rule asked for its shape values in the sweep before, updates them for the nodes
rewrites changed (computing again only those and what their changes reach). When nothing is
marked the driver stops without trying a node, instead of confirming with a sweep of the
whole model.

A rule that raises is contained: ``StepFailed`` with its name unless not strict.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Collection, Iterable, MutableSet, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import NamedTuple

import onnx_ir as ir

from onnxfold.analysis.constness import plan_graph
from onnxfold.analysis.dim_algebra import Known
from onnxfold.analysis.settings import DEFAULTS, RunSettings
from onnxfold.analysis.step_inputs import ShapeSteps
from onnxfold.declare.catalogue import Catalogue
from onnxfold.declare.pattern_rules import PatternRule
from onnxfold.declare.patterns import depth
from onnxfold.ir.graph import all_graphs, subgraphs, use_count
from onnxfold.rewrite.log import RewriteLog
from onnxfold.rewrite.steps import contained
from onnxfold.rewrite.sweep import (
    WIDE,
    Effects,
    GraphState,
    RuleOrders,
    Sweep,
    Trying,
    marked_readers,
    rule_orders,
)

MAX_ITERATIONS = 10
REACH_MARGIN = 1  # reader hops a rewrite marks beyond what the deepest pattern needs


def rewrite(model: ir.Model, catalogue: Catalogue, rejected: Counter | None = None,
            inputs_are_constant: bool = False, constant_inputs: bool = False,
            strict: bool = True, rejected_at: dict[ir.Node, str] | None = None,
            settings: RunSettings = DEFAULTS, resume: Resumable | None = None,
            log: RewriteLog | None = None) -> Rewritten:
    """Apply the catalogue's patterns everywhere until nothing changes.

    ``constant_inputs``: the main graph's inputs count as constants (see ``plan_graph``). A
    rule that raises raises ``StepFailed`` with its name (unless ``strict``).
    ``rejected_at`` receives each node a pattern declined, with the rule and its reason (the
    report groups them by module). ``settings``: the run's, for the rules (``GraphView.settings``).
    ``resume``: what an earlier call with the same catalogue and arguments left (the caller
    keeps it between calls): this call then tries only the nodes that what changed the model
    since (passes other than rewrites) may concern, instead of every node. ``log``: records
    every rewrite (:mod:`onnxfold.rewrite.log`), for a check to validate.
    """
    effects = Effects()
    rejected = rejected if rejected is not None else Counter()
    by_op = catalogue.patterns_by_op()
    reach = pattern_reach(by_op) - 1 + REACH_MARGIN
    work = resume.worklist(model, reach) if resume is not None else _Worklist(reach)
    try:
        return _rewrite(model, rule_orders(by_op), catalogue, work, effects, rejected,
                        inputs_are_constant, constant_inputs, strict, rejected_at, settings,
                        catalogue.shape_steps, log)
    finally:
        if resume is not None:
            resume.left(model, work)


def _rewrite(model: ir.Model, rules: RuleOrders, facts: Catalogue,
             work: _Worklist, effects: Effects, rejected: Counter, inputs_are_constant: bool,
             constant_inputs: bool, strict: bool, rejected_at: dict[ir.Node, str] | None,
             settings: RunSettings, shape_steps: ShapeSteps, log: RewriteLog | None
             ) -> Rewritten:
    """:func:`rewrite`'s sweeps, from ``work``'s marks."""
    tried = 0
    for sweeps in range(1, MAX_ITERATIONS + 1):
        changed = False
        graphs = all_graphs(model)
        owners: dict[ir.Graph, ir.Node] | None = None  # once a sweep changed the model
        for graph in graphs:
            if owners is not None and not _in_model(graph, owners, model.graph):
                work.forget(graph)  # discarded by a rewrite of this sweep (an If inlined)
                continue
            plan = plan_graph(graph, model.ir_version, inputs_are_constant=inputs_are_constant,
                              constant_inputs=constant_inputs and graph is model.graph,
                              keep=settings.keep, facts=facts)
            state = GraphState(graph, model, plan.constant, facts, rejected, rejected_at,
                               shape_steps=shape_steps, settings=settings, log=log)
            work.begin(graph, state)
            if not work.any_marked(graph):
                work.end(graph, state)
                state.close()
                continue
            trying = Trying()
            sweep = Sweep(state, rules, effects, trying, work)
            swept = contained(trying, strict, sweep.run)
            tried += sweep.tried
            work.end(graph, state)
            state.close()
            changed |= swept
            if swept and owners is None and len(graphs) > 1:
                owners = _owners(model.graph)
        if not changed:
            return Rewritten(effects.hits, converged=True, sweeps=sweeps, tried=tried,
                             effects=effects)
    return Rewritten(effects.hits, converged=False, sweeps=MAX_ITERATIONS, tried=tried,
                     effects=effects)


def _owners(main: ir.Graph) -> dict[ir.Graph, ir.Node]:
    """Each subgraph in ``main`` and the node whose attribute holds it."""
    found: dict[ir.Graph, ir.Node] = {}
    stack = [main]
    while stack:
        for node in stack.pop():
            for sub in subgraphs(node):
                found[sub] = node
                stack.append(sub)
    return found


def _in_model(graph: ir.Graph, owners: dict[ir.Graph, ir.Node], main: ir.Graph) -> bool:
    """Whether ``graph`` is still in the model: ``main``, or held by a node that is still in
    a graph that is (``owners``: as the model held its subgraphs at some point of this sweep;
    since, only removals and moves: an owner left without a graph is gone, a moved one is
    followed)."""
    while graph is not main:
        owner = owners.get(graph)
        if owner is None or owner.graph is None:
            return False
        graph = owner.graph
    return True


@dataclass
class Rewritten:
    """What ``rewrite`` did: hits per rule, and whether its last sweep changed nothing (then
    a next call finds nothing either, unless something else changed the model meanwhile)."""

    hits: Counter
    converged: bool
    sweeps: int = 0  # over every graph; if converged, the last one rewrote nothing
    # (it may have tried no node: nothing was marked)
    tried: int = 0  # nodes whose patterns were tried, over every sweep (a retry counts again)
    effects: Effects = field(default_factory=Effects)  # hits, nodes removed, modules, by rule

    def __bool__(self) -> bool:
        return bool(self.hits)


def pattern_reach(by_op: dict[str, list[PatternRule]]) -> int:
    """The depth of the deepest pattern: a change affects the roots up to one less reader
    links below it."""
    return max((depth(rule.pattern) for rules in by_op.values() for rule in rules),
               default=1)


def near(starts: Iterable[ir.Node], hops: int, *, upstream: bool = True) -> set[ir.Node]:
    """``starts`` and every node within ``hops`` reader links of one of them (and producer
    links, if ``upstream``); a reader link only as :func:`~onnxfold.rewrite.sweep.marked_readers`
    gives it (none through a widely read value)."""
    found = set(starts)
    frontier = list(found)
    for _ in range(hops):
        step: list[ir.Node] = []
        for node in frontier:
            if upstream:
                for value in node.inputs:
                    producer = value.producer() if value is not None else None
                    if producer is not None and producer not in found:
                        found.add(producer)
                        step.append(producer)
            for value in node.outputs:
                for reader in marked_readers(value):
                    if reader not in found:
                        found.add(reader)
                        step.append(reader)
        frontier = step
    return found


@dataclass
class _Seen:
    """What the rules of a graph's last sweep read beyond its nodes: the constants, and the
    shape values (if a rule asked for them)."""

    constant: AbstractSet[ir.Value]  # held weakly between calls (``Resumable.left``)
    shape_values: dict[ir.Value, Known] | None


class _Worklist:
    """The nodes whose patterns are to be tried (every node, at first), the nodes rewrites
    changed since their graph's last sweep, and what each graph's last sweep saw, to mark the
    readers of what changed since."""

    def __init__(self, reach: int) -> None:
        self.reach = reach
        # sets, held weakly between calls (``Resumable.left``); the changed nodes by graph (a
        # sweep takes each graph's own: not every changed node at every graph)
        self.marked: MutableSet[ir.Node] = set()
        self.changed: dict[ir.Graph, MutableSet[ir.Node]] = {}
        self.seen: dict[ir.Graph, _Seen] = {}

    def note_changed(self, nodes: Iterable[ir.Node]) -> None:
        """Add ``nodes`` to the changed nodes of their graphs (a removed node has none)."""
        changed = self.changed
        for node in nodes:
            graph = node.graph
            if graph is not None:
                bucket = changed.get(graph)
                if bucket is None:
                    bucket = changed[graph] = set()
                bucket.add(node)

    def begin(self, graph: ir.Graph, state: GraphState) -> None:
        """Before a sweep of ``graph``: a graph not swept before is marked whole; else the
        readers of values whose constness or shape value changed since its last sweep (the
        shape values updated for the nodes rewrites changed)."""
        last = self.seen.get(graph)
        edited: set[ir.Node] = set()
        moved = []  # into another graph since (an inlined branch's nodes): changed there
        for node in self.changed.pop(graph, ()):
            if node.graph is graph:
                edited.add(node)
            elif node.graph is not None:
                moved.append(node)
        self.note_changed(moved)
        if last is None:
            self.marked |= set(graph)
            return
        changed = set(last.constant).symmetric_difference(state.constant)
        if last.shape_values is not None:
            changed |= state.update_shape_values(last.shape_values, edited)
        if changed:
            readers = [use.node for v in changed for use in v.uses()]
            self.marked |= near(readers, self.reach, upstream=False)

    def end(self, graph: ir.Graph, state: GraphState) -> None:
        """After a sweep of ``graph``: what it saw, for the next sweep to compare with."""
        self.seen[graph] = _Seen(state.constant, state.shape_values)

    def forget(self, graph: ir.Graph) -> None:
        """``graph`` left the model: nothing of it is kept (its nodes read nothing of the
        model's any more, and are never swept)."""
        self.seen.pop(graph, None)
        self.changed.pop(graph, None)

    def any_marked(self, graph: ir.Graph) -> bool:
        marked = self.marked
        return any(node in marked for node in graph)  # the graph's size, not the marks'

    def take(self, node: ir.Node) -> bool:
        """Whether ``node`` is marked (and unmark it: it is about to be tried)."""
        if node in self.marked:
            self.marked.discard(node)
            return True
        return False

    def added(self, nodes: list[ir.Node]) -> None:
        """Mark the nodes a sweep's rewrites added to its graph, what is next to them and
        their readers within reach (what the surroundings of a rewrite may not reach: the
        inner nodes of a chain it inserted)."""
        if nodes:
            edited = near(nodes, 1)
            self.note_changed(nodes)
            self.marked |= near(edited, self.reach, upstream=False)

    def rewritten(self, touched: set[ir.Node], built: Collection[ir.Node] = (),
                  feeding: Collection[ir.Node] = (), rewired: Collection[ir.Node] = ()
                  ) -> None:
        """Mark what a rewrite changed: ``touched`` (its surroundings before it, and the nodes
        it ``built``) and the nodes next to them now, and their readers within reach (a
        pattern matches upwards from its root: a change concerns the roots downstream of it).
        The nodes ``built`` and ``rewired`` (reading other values, or values of a new shape)
        are the changed ones, whose shape values the next sweep computes again: the nodes
        around them read and produce what they did.

        Next to a node that reads more than :data:`~onnxfold.rewrite.sweep.WIDE` values
        (a Sum or a Concat of thousands) are only its readers and, of its producers, those
        ``feeding`` it what the rewrite gave it, unless it was built: the others still have
        it as their reader, once each. Marking every producer of such a node at every rewrite
        of one of its inputs made a Sum of 4,000 rewritten Muls a quadratic walk (16 s)."""
        alive = [node for node in touched if node.graph is not None]
        wide = [n for n in alive if n not in built and len(n.inputs) > WIDE]
        edited = near([n for n in alive if n in built or len(n.inputs) <= WIDE], 1)
        if wide:
            edited |= near(wide, 1, upstream=False)
            edited.update(n for n in feeding if n.graph is not None)
        self.note_changed(n for group in (built, rewired) for n in group)
        self.marked |= near(edited, self.reach, upstream=False)
        touched.clear()


class _NodeState(NamedTuple):
    """A node as a :func:`rewrite` call left it: what it read (weakly: a reference must not
    keep a weight the fold replaces alive), and per output its type, dims, number of readers
    and whether it is a graph output."""

    inputs: tuple[weakref.ref | None, ...]
    outputs: tuple[tuple[object, object, int, bool], ...]


def _node_state(node: ir.Node, graph_outputs: set[ir.Value]) -> _NodeState:
    # list comprehensions, not generators: this runs for every node at the end of each call
    return _NodeState(tuple([None if v is None else weakref.ref(v) for v in node.inputs]),
                      tuple([(v.type, _dims(v), use_count(v), v in graph_outputs)
                             for v in node.outputs]))


def _dims(value: ir.Value) -> tuple | None:
    """``value``'s dims, copied (a shape can change in place)."""
    shape = value.shape
    return None if shape is None else tuple(shape.dims)


def _same_values(refs: tuple[weakref.ref | None, ...], values: Sequence[ir.Value | None]
                 ) -> bool:
    if len(refs) != len(values):
        return False
    for ref, v in zip(refs, values):
        if (v is not None) if ref is None else (ref() is not v):
            return False
    return True


class _Snapshot:
    """A graph as a :func:`rewrite` call left it: each node's state and the graph's inputs,
    held weakly."""

    def __init__(self, graph: ir.Graph) -> None:
        outputs = set(graph.outputs)
        self.nodes: weakref.WeakKeyDictionary[ir.Node, _NodeState] = weakref.WeakKeyDictionary(
            {node: _node_state(node, outputs) for node in graph})
        self.graph_inputs = tuple(weakref.ref(v) for v in graph.inputs)

    def changes(self, graph: ir.Graph) -> tuple[set[ir.Node], set[ir.Node]]:
        """The nodes of ``graph`` changed since (added, rewired, producing or reading a value
        whose type or shape changed: what their shape values and refined dims come from), and
        the nodes next to a change (a value of theirs lost readers or its graph-output
        status: a pattern asking for a single reader may match now)."""
        edited: set[ir.Node] = set()
        nearby: set[ir.Node] = set()
        outputs = set(graph.outputs)
        for node in graph:
            before = self.nodes.get(node)
            if before is None or not _same_values(before.inputs, node.inputs):
                edited.add(node)
                continue
            for value, (kind, dims, uses, is_output) in zip(node.outputs, before.outputs):
                if kind != value.type or dims != _dims(value):
                    edited.add(node)
                    edited.update(use.node for use in value.uses() if use.node.graph is graph)
                elif use_count(value) != uses or (value in outputs) != is_output:
                    nearby.add(node)
        return edited, nearby


class Resumable:
    """What a :func:`rewrite` call leaves for the next one on the same model (its worklist,
    and a snapshot of each graph), so that the next call, after other passes changed the model
    (the fold, pruning, inferring shapes again), tries only the nodes those changes concern:
    nodes added or rewired, the producers and readers of values whose type or shape changed,
    producers of values that lost a reader, and their readers within the patterns' reach. A
    graph whose inputs changed is tried whole, and so is every graph when the main graph's
    did. Everything kept of the model is held weakly, but for the small shape values."""

    def __init__(self) -> None:
        self._work: _Worklist | None = None
        self._model: weakref.ref | None = None
        self._main_inputs: tuple[weakref.ref, ...] = ()
        self._snapshots: dict[ir.Graph, _Snapshot] = {}

    def worklist(self, model: ir.Model, reach: int) -> _Worklist:
        """The worklist to go on with: the last one, marked for what changed since."""
        work = self._work
        if work is None or self._model is None or self._model() is not model or \
                work.reach != reach or not _same_values(self._main_inputs, model.graph.inputs):
            return _Worklist(reach)  # the main graph's inputs name the dims of every graph
        for graph, snapshot in self._snapshots.items():
            if graph not in work.seen:
                continue
            if not _same_values(snapshot.graph_inputs, graph.inputs):
                del work.seen[graph]  # inputs decide the dims' symbols: a fresh start
                continue
            edited, nearby = snapshot.changes(graph)
            work.note_changed(edited)
            work.marked |= near(edited | nearby, work.reach, upstream=False)
        return work

    def left(self, model: ir.Model, work: _Worklist) -> None:
        """Keep ``work`` and a snapshot of every graph it saw, as the call leaves them."""
        self._work, self._model = work, weakref.ref(model)
        self._main_inputs = tuple(weakref.ref(v) for v in model.graph.inputs)
        for seen in work.seen.values():
            seen.constant = weakref.WeakSet(seen.constant)
        work.marked = weakref.WeakSet(work.marked)
        work.changed = {graph: weakref.WeakSet(nodes) for graph, nodes in work.changed.items()}
        self._snapshots = {graph: _Snapshot(graph) for graph in work.seen}
