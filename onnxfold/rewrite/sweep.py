"""One sweep of one graph: the rules tried at its marked nodes, and what the driver keeps about
the graph meanwhile.

:class:`GraphState` is the driver's side of a graph for one sweep: the constants (added to as
rewrites build from them), the shape values (computed or updated once, when asked), the rules'
memo, the rejections, and the :class:`~onnxfold.declare.GraphView` the rules ask.
:class:`Sweep` tries the patterns of each marked node: a pattern matches (in each of its
orders), the check decides, the rewrite returns its replacement, and
:func:`~onnxfold.rewrite.splice.splice` puts it in; the nodes around it are marked again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable
from typing import Any, Protocol

import onnx_ir as ir

from onnxfold.analysis.constness import OpFacts
from onnxfold.analysis.dim_algebra import Known
from onnxfold.analysis.settings import RunSettings
from onnxfold.analysis.step_inputs import ShapeSteps, shared_dim_names
from onnxfold.analysis.symbolic import KnownValues, shape_values
from onnxfold.analysis.symbolic_update import updated_shape_values
from onnxfold.declare.builder import BuiltNode, OpBuilder
from onnxfold.declare.pattern_rules import (
    KEEPS_QDQ_UNITS,
    REWRITES_CONSTANTS,
    PatternRule,
    call_with,
)
from onnxfold.declare.patterns import P
from onnxfold.declare.verdicts import Match, Reject
from onnxfold.declare.view import GraphView
from onnxfold.ir.edits import detach, names_for
from onnxfold.ir.graph import counted, use_count
from onnxfold.ir.scopes import module_path
from onnxfold.rewrite.judge import match_refusal, nodes_of, refusal
from onnxfold.rewrite.log import RewriteLog
from onnxfold.rewrite.recorder import Recorder
from onnxfold.rewrite.splice import as_replacement, splice

RETRIES_PER_NODE = 4  # patterns tried again at a node one of them rewrote, per sweep
WIDE = 16  # readers beyond which a value is shared scaffolding (a dim, a mask): marked_readers


class GraphState:
    """The driver's bookkeeping of one graph for one sweep, and the view its rules ask.

    ``constant``: the values the sweep's plan found constant (rewrites add to it);
    ``rejected``: rejections counted by ``"rule: reason"``; ``rejected_at``: each node's last
    rejection, when asked for."""

    def __init__(self, graph: ir.Graph, model: ir.Model, constant: set[ir.Value],
                 facts: OpFacts, rejected: Counter, rejected_at: dict[ir.Node, str] | None,
                 *, shape_steps: ShapeSteps, settings: RunSettings,
                 log: RewriteLog | None = None) -> None:
        self.graph, self.model, self.constant, self.facts = graph, model, constant, facts
        # records each rewrite, when a check will validate them
        self.log = Recorder(log) if log is not None else None
        self.rejected, self.rejected_at, self.shape_steps = rejected, rejected_at, shape_steps
        self.memo: dict[str, Any] = {}
        self.shape_values: dict[ir.Value, Known] | None = None  # asked for, or updated
        self.positions: dict[ir.Node, int] | None = None  # asked for (GraphView.in_order)
        self.settings = settings
        self.shared: frozenset[str] | None = None  # asked for (shared_dim_names)
        self.view = GraphView(graph, model, constant, facts, shape_steps=shape_steps,
                              settings=settings, shape_values=self._shape_values,
                              memo=self.memo, positions=self._positions,
                              shared_dim_names=self.shared_dim_names)

    def close(self) -> None:
        """The sweep is over: its shape values (which the worklist keeps) read no constant
        through its view any more, and the view goes. The view, its shape values and this
        state refer to each other: a cycle that only a full collection frees, holding the
        plan's every constant meanwhile - the weights the fold replaces after this call
        among them (a second copy of a model's transposed weights)."""
        if isinstance(self.shape_values, KnownValues):
            self.shape_values.reading(None)
        del self.view

    def shared_dim_names(self) -> frozenset[str]:
        """The input dim names that prove nothing in this run (``symbolic.shared_dim_names``),
        computed when first asked in the sweep."""
        if self.shared is None:
            self.shared = shared_dim_names(self.model, self.settings.named_dims_equal)
        return self.shared

    def fresh(self, base: str) -> str:
        """A name the model does not use, after ``base`` (the model's allocator, made at the
        first name asked for: it reads every name of the model)."""
        return names_for(self.model).fresh(base)

    def _positions(self) -> dict[ir.Node, int]:
        """Each node's place in the graph, listed when first asked in the sweep; nodes built
        since have none, and a moved node loses its own (:meth:`moved`)."""
        if self.positions is None:
            self.positions = {node: i for i, node in enumerate(self.graph)}
        return self.positions

    def moved(self, nodes: Iterable[ir.Node]) -> None:
        """``nodes`` moved elsewhere in the graph: their places are no longer known."""
        if self.positions is not None:
            for node in nodes:
                self.positions.pop(node, None)

    def completing(self, value: ir.Value) -> bool:
        """Whether the symbolic walk gives ``value`` a shape where inference left it none: a
        value not known constant. A constant gets its shape from its data when it folds; a
        shape given before would put a rewrite's constant chain (a BatchNorm folded into a
        Conv: scale / sqrt(var + eps)...) under the fold's growth policy, which sizes results
        from static shapes and lets those of unknown size through, as it always has."""
        return value not in self.constant

    def _shape_values(self, view: GraphView) -> dict[ir.Value, Known]:
        """The graph's shape values: updated at the sweep's start, else computed now; values
        shape inference left without a shape are given the one their op's step derives
        (:meth:`completing`)."""
        if self.shape_values is None:
            self.shape_values = shape_values(self.graph, view.array, self.shared_dim_names(),
                                             steps=self.shape_steps, complete=self.completing)
        return self.shape_values

    def update_shape_values(self, previous: dict[ir.Value, Known],
                            changed_nodes: set[ir.Node]) -> set[ir.Value]:
        """Take this graph's shape values from ``previous`` (an earlier sweep's) with the
        nodes changed since computed again; return the values whose shape value or refined
        dims changed (``symbolic_update.updated_shape_values``)."""
        view = self.view
        self.shape_values, changed = updated_shape_values(
            self.graph, previous, changed_nodes, view.array, self.shared_dim_names(),
            steps=self.shape_steps, complete=self.completing)
        return changed


class Marks(Protocol):
    """Where a sweep takes its nodes from and reports what it changed (the worklist)."""

    def take(self, node: ir.Node) -> bool:
        """Whether ``node`` is marked (unmarking it)."""

    def rewritten(self, touched: set[ir.Node], built: Collection[ir.Node] = (),
                  feeding: Collection[ir.Node] = (), rewired: Collection[ir.Node] = ()
                  ) -> None:
        """Mark what a rewrite changed, from ``touched`` (its surroundings before it, and the
        nodes it ``built``); ``feeding``: the producers of what nodes read in place of what
        they read; ``rewired``: the nodes that read other values now, or values of a new
        shape."""

    def added(self, nodes: list[ir.Node]) -> None:
        """Mark the nodes a sweep's rewrites added."""


class Trying:
    """The rule a sweep is applying (what a failure is reported as)."""

    name = "rewrite"

    def __str__(self) -> str:
        return self.name


RuleOrders = dict[str, list[tuple[PatternRule, P]]]  # op type -> (rule, one of its orders)


def rule_orders(by_op: dict[str, list[PatternRule]]) -> RuleOrders:
    """Each op's rules, each order of a rule's pattern in turn (as separate rules would be)."""
    return {op: [(rule, order) for rule in rules for order in rule.orders]
            for op, rules in by_op.items()}


class Effects:
    """What the rewrites of a run did, by rule: its hits, the nodes they removed net (those
    they took out less those they built, Constant nodes not counted), and its hits by the module
    path the exporter recorded on the node each matched at (``ir/scopes.py``)."""

    def __init__(self) -> None:
        self.hits: Counter = Counter()
        self.removed: Counter = Counter()
        self.modules: dict[str, Counter] = {}

    def record(self, rule: str, module: str, removed: int) -> None:
        """One rewrite of ``rule`` at a node of ``module`` that removed ``removed`` nodes."""
        self.hits[rule] += 1
        self.removed[rule] += removed
        self.modules.setdefault(rule, Counter())[module] += 1


class Sweep:
    """One sweep of a graph: the patterns tried at its marked nodes, in graph order."""

    def __init__(self, state: GraphState, rules: RuleOrders, effects: Effects, trying: Trying,
                 marks: Marks) -> None:
        self.state, self.rules, self.effects, self.trying, self.marks = (
            state, rules, effects, trying, marks)
        self.tried = 0

    def run(self) -> bool:
        """Try the patterns at every marked node of the graph; whether anything changed."""
        graph, marks, changed = self.state.graph, self.marks, False
        nodes = list(graph)
        for node in nodes:
            for _ in range(RETRIES_PER_NODE):  # a rewritten node may match another pattern now
                if node.graph is not graph or not marks.take(node):
                    break  # removed by a rewrite in this sweep, or nothing changed near it
                if not self._try(node):
                    break
                changed = True
        if changed:  # nodes a rewrite added or moved here (an inlined branch) wait for the next
            before = set(nodes)
            marks.added([node for node in graph if node not in before])
        return changed

    def _try(self, node: ir.Node) -> bool:
        """Try each pattern of ``node``'s op type until one rewrites; whether one did. Where
        every result of ``node`` is constant the fold computes them: only the rules that
        rewrite constants for the fold (tagged ``rewrites_constants``) are tried there."""
        state = self.state
        rejected, rejected_at, view = state.rejected, state.rejected_at, state.view
        self.tried += 1
        if rejected_at is not None:
            rejected_at.pop(node, None)  # what held at an earlier try may hold no more
        constant = bool(node.outputs) and all(v in state.constant for v in node.outputs)
        for rule, order in self.rules.get(node.op_type, ()):
            if constant and REWRITES_CONSTANTS not in rule.tags:
                continue
            self.trying.name = rule.name
            captures: dict[str, Any] = {}
            if not order.match_node(node, view, captures):
                continue
            refused = match_refusal(nodes_of(captures.values())) \
                if KEEPS_QDQ_UNITS in rule.tags else None
            verdict: bool | Match | Reject = True
            if refused is not None:  # the driver's, before the check is asked
                verdict = Reject(refused)
            elif rule.check is not None:
                verdict = call_with(rule.check, rule.check_names, view, captures)
            if verdict is True or isinstance(verdict, Match):
                found = {**captures, **verdict.found} if isinstance(verdict, Match) \
                    else captures
                module = module_path(node)  # (the node may go)
                removed = self._rewrite(rule, node, captures, found)
                if not isinstance(removed, Reject):
                    self.effects.record(rule.name, module, removed)
                    return True
                verdict = removed  # the driver refused the proposal
            if isinstance(verdict, Reject):
                rejected[f"{rule.name}: {verdict.reason}"] += 1
                if rejected_at is not None:
                    rejected_at[node] = f"{rule.name}: {verdict.reason}"
        return False

    def _rewrite(self, rule: PatternRule, node: ir.Node, captures: dict[str, Any],
                 found: dict[str, Any]) -> int | Reject:
        """Rewrite the match of ``rule`` at ``node``, judge the proposal
        (:mod:`onnxfold.rewrite.judge`: a refusal is returned, and the proposal leaves no
        trace: its nodes read nothing, its names are free again), put it in, and mark around
        it; the nodes it removed net, Constant nodes not counted (as every count of the
        report): the splice removes only the match's nodes and the producers of what it
        replaced."""
        state = self.state
        touched = surroundings(captures.values())  # (before the builder's nodes read them)
        names = _Tentative(state.model)
        builder = OpBuilder(names.fresh, node.outputs[0].name if node.outputs else None,
                            state.view.opset())
        result = call_with(rule.rewrite, rule.rewrite_names, builder, found)
        proposal = as_replacement(result, node)
        captured = nodes_of(captures.values())
        matched = nodes_of(found.values())
        pattern_nodes = set(captured)
        reason = refusal(state.graph, proposal, builder.built, captured,
                         [n for n in matched if n not in pattern_nodes], state.settings.keep,
                         KEEPS_QDQ_UNITS in rule.tags,
                         [captures[name] for name in rule.bypassed if name in captures])
        if reason is not None:
            for item in builder.built:
                if isinstance(item, BuiltNode):
                    detach(item.node)  # (a built node reads its inputs from the start)
            names.release()
            return Reject(reason)
        replaced = {p for v in proposal.values if (p := v.producer()) is not None}
        pending = state.log.before(rule.name, node, result, builder.built, matched,
                                   rule.rounds_differently) if state.log is not None else None
        spliced = splice(state.graph, state.model, node, builder.built, result,
                         matched, state.constant, state.facts, state.fresh, rule.name)
        if pending is not None:
            state.log.after(pending)  # type: ignore[union-attr]  # set when pending is
        if spliced.built:
            state.memo.clear()
        state.moved(spliced.moved)
        touched |= spliced.readers
        touched.update(spliced.built)
        self.marks.rewritten(touched or {node}, spliced.built, spliced.feeding, spliced.rewired)
        gone = {n for n in (node, *matched, *replaced) if n.graph is None}
        return counted(gone) - counted(spliced.built)


def surroundings(captured: Iterable[object]) -> set[ir.Node]:
    """The matched nodes, the producers of the values they and the matched values read, and
    the readers of what they compute (:func:`marked_readers`): where a rewrite of the match
    changes the graph."""
    found: set[ir.Node | None] = set()
    for part in captured:
        if isinstance(part, ir.Node):
            found.add(part)
            found.update(v.producer() for v in part.inputs if v is not None)
            for v in part.outputs:
                found.update(marked_readers(v))
        elif isinstance(part, ir.Value):
            found.add(part.producer())
            found.update(marked_readers(part))
    return {node for node in found if node is not None}


def marked_readers(value: ir.Value) -> list[ir.Node]:
    """The readers of ``value`` a mark around a change reaches: none when more than
    :data:`WIDE` nodes read it. A rewrite next to such a value changes its readers' count by a
    few, which no judgement or check can tell from more than ``WIDE``; the
    readers a rewrite does change (rewired, built) are marked by name. Marking through it
    reached most of a dynamo export (a sequence length read by every layer) at every rewrite
    near it."""
    if use_count(value) > WIDE:
        return []
    return [use.node for use in value.uses()]


class _Tentative:
    """The names a proposal takes from the model's allocator, given back if the driver refuses
    it: a refused proposal must not shift the names of every later rewrite."""

    def __init__(self, model: ir.Model) -> None:
        self._model = model
        self._taken: list[str] = []
        self._mark = 0

    def fresh(self, base: str) -> str:
        allocator = names_for(self._model)  # (made at the first name asked for)
        if not self._taken:
            self._mark = allocator.mark()
        name = allocator.fresh(base)
        self._taken.append(name)
        return name

    def release(self) -> None:
        """Give the names taken back: the allocator as it was before the first."""
        if self._taken:
            names_for(self._model).rollback(self._mark, self._taken)
            self._taken.clear()
