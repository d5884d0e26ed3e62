"""The fold pass: evaluate every foldable node once, in topological order, through the pool.

Readers are counted before evaluation starts; a buffer leaves the pool as soon as its last
reader has run. Values the graph keeps (graph outputs, inputs of nodes that stay) are
materialized as initializers; everything else lives and dies in the pool.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from onnxfold.analysis.constness import ConstPlan, plan_graph
from onnxfold.analysis.declines import Decline, DeclineKind, Reason
from onnxfold.declare.catalogue import Catalogue, load_catalogue
from onnxfold.declare.registry import FolderRule
from onnxfold.fold import fallback
from onnxfold.fold.budget import expansion, loop_work, over_budget, planned_bytes, pool_budget
from onnxfold.fold.exactness import needing_onnxruntime
from onnxfold.fold.half_kernels import in_float32_by_onnxruntime, refuse_unrounded
from onnxfold.fold.options import FoldOptions
from onnxfold.fold.policy import (
    HALF_FLOATS,
    QUANTIZED,
    origins,
    refuse_dequantization,
    refuse_growth,
    static_nbytes,
)
from onnxfold.fold.pool import BufferPool
from onnxfold.fold.shape_inputs import unusable_as_shape
from onnxfold.ir.constants import source_array
from onnxfold.ir.graph import (
    captured_values,
    identity_source,
    is_default_op,
    is_overridable,
    node_label,
    static_shape,
    subgraphs,
    tensor_of,
)

PROVENANCE_KEY = "onnxfold.folded_from"
PROVENANCE_LIMIT = 64
# a size refusal, or a draw (Dropout in training mode): onnxruntime must not run it either
_NEVER_TO_ONNXRUNTIME = (DeclineKind.SIZE, DeclineKind.NON_DETERMINISTIC)
_NEEDS_ONNXRUNTIME = Reason(DeclineKind.EXACTNESS, "its value reaches a discontinuous op "
                                                   "(docs/exactness.md): onnxruntime folds it")


@dataclass
class FoldStats:
    """What the pass did."""

    folded: int = 0
    native: int = 0
    via_fallback: int = 0
    fallback_sessions: int = 0
    materialized: int = 0
    materialized_bytes: int = 0
    declined: Counter = field(default_factory=Counter)  # by DeclineKind value
    declined_nodes: list[tuple[str, str, Reason]] = field(default_factory=list)
    rule_hits: Counter = field(default_factory=Counter)
    pattern_hits: Counter = field(default_factory=Counter)
    rejected_patterns: Counter = field(default_factory=Counter)
    rejected_at: dict[ir.Node, str] = field(default_factory=dict)  # node -> "rule: reason"
    cleanup_hits: Counter = field(default_factory=Counter)
    pool_peak_bytes: int = 0
    growth_bytes: int = 0
    spilled: int = 0
    spilled_bytes: int = 0
    rounds: int = 0
    folded_in_functions: int = 0  # of ``folded``: nodes in model-local function bodies
    function_constants: int = 0  # Constant nodes written into function bodies (not initializers)
    skipped_steps: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # for the report: a step not taken


def _attr_value(attr: ir.Attr):
    if attr.type == ir.AttributeType.TENSOR:
        return tensor_of(attr).numpy()
    if attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
        raise Decline("graph attributes are left to onnxruntime")
    value = attr.value
    if isinstance(value, tuple):
        value = list(value)
    return value


class GraphFolder:
    """Folds one graph's foldable nodes; see the module docstring."""

    def __init__(self, graph: ir.Graph, model: ir.Model, options: FoldOptions,
                 catalogue: Catalogue, stats: FoldStats, pool: BufferPool,
                 progress: Callable[[int, int], None] | None = None,
                 outer: Iterable[ir.Value] = ()) -> None:
        self.graph, self.model, self.options = graph, model, options
        self.catalogue, self.stats, self.pool = catalogue, stats, pool
        self.facts = load_catalogue()  # every rule's op facts, whatever the options disable
        self.shape_only = self.facts.shape_only
        self.opset_imports = dict(model.opset_imports)  # what the fallback's session imports
        self.opset = self.opset_imports.get("", 1)
        self.progress = progress
        self.plan: ConstPlan = self._make_plan(outer)
        self.planned = set(self.plan.foldable)
        qdq_refused, requantized = refuse_dequantization(
            self.plan.foldable, self.planned, catalogue.kept_quantized, options.fold_qdq,
            catalogue.requantizing)
        qdq_refused += refuse_unrounded(self.plan.foldable, self.planned, self.opset)
        self._prune_unreachable()
        budget = None if options.max_growth_bytes is None else \
            options.max_growth_bytes - stats.growth_bytes
        widening = {**(HALF_FLOATS if options.fold_fp16_casts else {}),
                    **(QUANTIZED if options.fold_qdq else {})}
        refused, growth = refuse_growth(self.plan, self.planned, graph, options.growth_factor,
                                        options.growth_min_bytes, budget, widening,
                                        catalogue.requantizing, requantized)
        stats.growth_bytes += growth
        self._prune_unreachable()
        self.policy_refused = qdq_refused + refused
        self.on_onnxruntime = needing_onnxruntime(
            {n: None for n in self.plan.foldable if n in self.planned}, catalogue, self.opset,
            model.graph, graph)
        self.budget = pool_budget(options.pool_budget, options.memory_limit)
        self.input_bytes: dict[ir.Value, int] = {}  # per computed value: its node's inputs
        self._origins: dict[ir.Value, frozenset[ir.Value]] | None = None  # on first use
        self.how: dict[ir.Node, str] = {}
        self.keep: dict[ir.Value, None] = {}  # ordered: initializers are added in this order
        self.readers: Counter = Counter()
        self.provenance: dict[ir.Value, tuple[str, ...]] = {}

    def _make_plan(self, outer: Iterable[ir.Value]) -> ConstPlan:
        """The constness analysis of ``self.graph`` (a function body's folder narrows it)."""
        return plan_graph(self.graph, self.model.ir_version, outer,
                          inputs_are_constant=self.options.inputs_are_constant,
                          shape_folding=self.options.shape_folding, keep=self.options.keep,
                          facts=self.facts)

    def _prune_unreachable(self) -> None:
        """Unplan nodes downstream of refused ones: their inputs will never be constant."""
        available = set(self.plan.sources)
        for node in self.plan.foldable:
            if node in self.planned and (
                    node.op_type in self.shape_only or
                    all(v in available for v in self._reads(node))):
                available.update(node.outputs)
            else:
                self.planned.discard(node)

    # -- bookkeeping -------------------------------------------------------------------------
    def _reads(self, node: ir.Node) -> list[ir.Value]:
        """Distinct values whose data ``node`` reads.

        Shape-only folds read a constant input's buffer for its shape, and nothing otherwise.
        """
        if is_default_op(node, *self.shape_only):
            return [node.inputs[0]] if node.inputs[0] in self.plan.constant else []
        seen: dict[ir.Value, None] = {}
        for v in list(node.inputs) + captured_values(node):
            if v is not None:
                seen[v] = None
        return list(seen)

    def _kept_by_graph(self, value: ir.Value) -> bool:
        if value in self.graph.outputs:
            return True
        return any(user not in self.planned for user, _ in value.uses())

    def _count(self) -> None:
        """Readers still to come per value: only nodes that will run release their reads."""
        for node in self.plan.foldable:
            if node in self.planned:
                for v in self._reads(node):
                    self.readers[v] += 1

    def _available(self, value: ir.Value) -> bool:
        if value in self.pool:
            return True
        if value in self.plan.sources:
            arr = source_array(value)
            if arr is None:
                return False
            self.pool.put(value, arr, self.readers[value], source=True)
            return value in self.pool
        return False

    def _abandon(self, node: ir.Node, reason: Reason | None) -> None:
        """``node`` stays in the graph: its constant inputs must now be kept."""
        self.planned.discard(node)
        if reason is not None:
            self._record(node, reason)
        for v in self._reads(node):
            if v in self.pool:
                if v not in self.plan.sources and v not in self.keep:
                    self.keep[v] = None
                    self.pool.hold(v)
                self.pool.release(v)
            elif v in self.plan.sources and self.readers[v] > 0:
                self.readers[v] -= 1

    def _record(self, node: ir.Node, reason: Reason) -> None:
        self.stats.declined[reason.kind.value] += 1
        self.stats.declined_nodes.append((node_label(node), node.op_type, reason))

    def _finish(self, node: ir.Node, results: dict[ir.Value, np.ndarray], how: str) -> None:
        origin = {node_label(node): None}
        for v in node.inputs:
            origin.update(dict.fromkeys(self.provenance.get(v, ()) if v is not None else ()))
        names = tuple(origin)[:PROVENANCE_LIMIT]
        in_bytes = sum(self.pool.get(v).nbytes for v in node.inputs if v in self.pool)
        for value, arr in results.items():
            self.provenance[value] = names
            self.input_bytes[value] = in_bytes
            keep = self._kept_by_graph(value)
            if keep:
                self.keep[value] = None
            self.pool.put(value, arr, self.readers[value] + int(keep))
        for v in self._reads(node):
            if v in self.pool:
                self.pool.release(v)
        self.stats.folded += 1
        self.how[node] = how
        if how == "native":
            self.stats.native += 1
        else:
            self.stats.via_fallback += 1

    # -- evaluation --------------------------------------------------------------------------
    def _native(self, node: ir.Node, rule: FolderRule) -> list[np.ndarray]:
        kwargs = {name: _attr_value(attr) for name, attr in node.attributes.items()}
        if rule.shape_only:
            x = node.inputs[0]
            assert x is not None  # the data input of Shape and Size is required
            shape = self.pool.get(x).shape if x in self.pool else static_shape(x)
            assert shape is not None  # run() checked _shape_known
            args: list = [tuple(shape)]
        else:
            args = [self.pool.get(v) if v is not None else None for v in node.inputs]
        half = None if rule.half_as_given else \
            in_float32_by_onnxruntime(node, args, self.opset)
        if half is not None:  # as onnxruntime runs it: in float32, rounded once at the end
            args = [a.astype(np.float32) if isinstance(a, np.ndarray) and a.dtype == half
                    else a for a in args]
        with np.errstate(all="ignore"):
            result = rule.fn(*args, **kwargs)
            outs = list(result) if isinstance(result, (tuple, list)) else [result]
            outs = [np.asarray(o) for o in outs]
            if half is not None:  # (overflow to inf is what onnxruntime's rounding gives too)
                outs = [o.astype(half) if v.dtype is not None and v.dtype.numpy() == half
                        else o for o, v in zip(outs, node.outputs)]
        for value, arr in zip(node.outputs, outs):
            if value.dtype is not None and arr.dtype != value.dtype.numpy():
                raise Decline(f"{rule.name} returned {arr.dtype}, expected "
                              f"{value.dtype.numpy()}", DeclineKind.RULE_ERROR)
        return outs

    def _try_native(self, node: ir.Node) -> Reason | None:
        """Fold ``node`` with its rule; return None on success or the reason it declined."""
        rule = self.catalogue.folder(node.domain, node.op_type, node.version or self.opset)
        if rule is None:
            return Reason(DeclineKind.NO_RULE)
        try:
            outs = self._native(node, rule)
        except Decline as e:
            return e.reason
        except Exception as e:
            if self.options.strict:
                raise
            return Reason(DeclineKind.RULE_ERROR, f"{rule.name}: {type(e).__name__}: {e}")
        self.stats.rule_hits[rule.name] += 1
        self._finish(node, dict(zip(node.outputs, outs)), "native")
        return None

    def _run_fallback(self, batch: list[ir.Node]) -> None:
        """Evaluate ``batch`` through the executor fallback (``fallback.run_batch``)."""
        # spilling (--memory-limit) makes room for what fits the budget on its own
        room = self.budget if self.options.memory_limit is not None else \
            max(self.budget - self.pool.live_bytes, 0)
        for node, outcome, sessions in fallback.run_batch(
                batch, self._pooled, lambda v: v in self.graph.outputs,
                self.opset_imports, self.model.ir_version, self.options.fold_timeout,
                room, self._stored):
            self.stats.fallback_sessions += sessions
            if isinstance(outcome, dict):
                self._finish(node, outcome, "fallback")
            else:
                self._abandon(node, outcome)

    def run(self) -> None:
        self._count()
        reason: Reason | None
        for node, reason in self.plan.refused + self.policy_refused:
            self._record(node, reason)
        order = [n for n in self.plan.foldable if n in self.planned]
        i = 0
        while i < len(order):
            node = order[i]
            i += 1
            if self.progress is not None:
                self.progress(i, len(order))
            if not self._shape_known(node) if node.op_type in self.shape_only else \
                    not all(self._available(v) for v in self._reads(node)):
                self._abandon(node, self._why_unavailable(node))
                continue
            reason = self._budget(node)
            if reason is not None:
                self._abandon(node, reason)
                continue
            if node in self.on_onnxruntime:
                reason = _NEEDS_ONNXRUNTIME
            else:
                reason = self._try_native(node)
                if reason is None:
                    continue
            if self.options.strict and reason.kind is DeclineKind.RULE_ERROR:
                raise RuntimeError(str(reason))
            if reason.kind in _NEVER_TO_ONNXRUNTIME or not self.options.fallback or \
                    not self._has_data(node):
                self._abandon(node, reason)
                continue
            batch = [node]
            while i < len(order) and self._wants_fallback(order[i], batch):
                batch.append(order[i])
                i += 1
            self._run_fallback(batch)
        self.stats.pool_peak_bytes = max(self.stats.pool_peak_bytes, self.pool.peak_bytes)

    def _budget(self, node: ir.Node) -> Reason | None:
        """Why ``node`` may not run now: its outputs would not fit the pool budget (checked
        before they exist), or it is a constant Loop running too long."""
        if node.op_type in self.shape_only:
            return None
        arrays = self._pooled
        reason = loop_work(node, arrays)
        if reason is not None:
            return reason
        rule = self.catalogue.size_rule(node.op_type) if is_default_op(node) else None
        need = planned_bytes(node, arrays, rule.fn if rule else None,
                             lambda: {n: _attr_value(a) for n, a in node.attributes.items()})
        if need is not None and self.options.memory_limit is not None:
            self.pool.make_room(need)
        return over_budget(need, self.pool.live_bytes, self.budget,
                           spilling=self.options.memory_limit is not None)

    def _stored(self, value: ir.Value) -> bool:
        """Whether ``value`` is an initializer or a Constant of the model (not a computed value,
        nor a graph input that ``--inputs-are-constant`` made constant)."""
        producer = value.producer()
        constant = value.const_value is not None or (
            producer is not None and is_default_op(producer, "Constant"))
        return constant and value not in self.graph.inputs and \
            value not in self.model.graph.inputs

    def _pooled(self, value: ir.Value) -> np.ndarray | None:
        return self.pool.get(value) if self._available(value) else None

    def _why_unavailable(self, node: ir.Node) -> Reason | None:
        """A reason if an input is a constant onnxfold cannot hold (upstream declines have one)."""
        for v in self._reads(node):
            if v in self.plan.sources and source_array(v) is None:
                return Reason(DeclineKind.UNSUPPORTED_TYPE, "string or sparse constant")
        return None

    def _has_data(self, node: ir.Node) -> bool:
        """Whether every input of ``node`` is in the pool (shape-only folds may lack data)."""
        return all(v is None or self._available(v) for v in node.inputs)

    def _shape_known(self, node: ir.Node) -> bool:
        x = node.inputs[0]
        assert x is not None  # the data input of Shape and Size is required
        return self._available(x) or static_shape(x) is not None

    def _wants_fallback(self, node: ir.Node, batch: list[ir.Node]) -> bool:
        """Extend a fallback batch with ``node`` if it has no rule and its inputs are ready.
        A contrib op runs alone: only a batch's outputs are sized before it runs, and nothing
        sized a contrib op's outputs before (onnx does not know it)."""
        if node not in self.on_onnxruntime and \
                self.catalogue.folder(node.domain, node.op_type, node.version or self.opset):
            return False
        if not is_default_op(node) or not all(is_default_op(n) for n in batch):
            return False
        if self._budget(node) is not None:
            return False  # runs on its own, to be refused by the budget
        produced = {v for n in batch for v in n.outputs}
        inputs = [v for v in node.inputs if v is not None] + captured_values(node)
        return all(v in produced or self._available(v) for v in inputs)

    # -- materialization ---------------------------------------------------------------------
    def materialize(self) -> None:
        """Turn every kept computed value into an initializer replacing its producer's output."""
        for value in list(self.keep):
            if value not in self.pool:
                continue
            arr = self.pool.get(value)
            refused = expansion(arr.nbytes, self._derived_bytes(value),
                                self.options.expansion_factor, self.options.expansion_min_bytes,
                                self.options.max_tensor_bytes) or unusable_as_shape(value, arr)
            producer = value.producer()
            if refused is not None and producer is not None:
                self._unfold(producer, refused)  # its node stays and computes it at run time
                self.pool.release(value)
                continue
            source = self._aliased_source(value)
            if source is not None:  # an Identity of a constant: read the constant itself
                value.replace_all_uses_with(source)
                self.pool.release(value)
                continue
            self._store(value, arr)
            self.pool.release(value)

    def _derived_bytes(self, value: ir.Value) -> int:
        """The bytes of the distinct source constants ``value`` is computed from (at most its
        node's input bytes): a result is judged against what it replaces, across a chain. A
        node refused by the budget leaves its input kept, and a Concat(x, x) chain doubles at
        every step while each step is only 1x its direct inputs."""
        if self._origins is None:
            self._origins = origins(self.plan)
        sources = self._origins.get(value)
        direct = self.input_bytes.get(value, 0)
        if sources is None:
            return direct
        return min(direct, sum(static_nbytes(s) or 0 for s in sources))

    def _store(self, value: ir.Value, arr: np.ndarray) -> None:
        """Replace ``value`` (by name too) with an initializer holding ``arr``."""
        new = self._replacement(value, arr)
        self.graph.register_initializer(new)
        if self.model.ir_version < 4 and self.graph is self.model.graph:
            self.graph.inputs.append(new)
        self.stats.materialized += 1
        self.stats.materialized_bytes += arr.nbytes

    def _replacement(self, value: ir.Value, arr: np.ndarray) -> ir.Value:
        """A constant value named as ``value`` (renamed aside) that replaces it everywhere,
        graph outputs included."""
        name = value.name
        value.name = f"{name}__onnxfold_replaced"
        tensor = ir.Tensor(arr, name=name)
        tensor.metadata_props[PROVENANCE_KEY] = ",".join(self.provenance.get(value, ()))
        new = ir.Value(name=name, shape=ir.Shape(arr.shape),
                       type=ir.TensorType(ir.DataType.from_numpy(arr.dtype)),
                       const_value=tensor)
        value.replace_all_uses_with(new, replace_graph_outputs=True)
        return new

    def _aliased_source(self, value: ir.Value) -> ir.Value | None:
        """The source constant ``value`` is an Identity (chain) of, when its readers can read
        that instead: one copy per reader would duplicate a shared weight (two Identities of
        one weight, as exporters share weights) where the source costs nothing more."""
        return None if value in self.graph.outputs else identity_source(value, self.plan.sources)

    def _unfold(self, node: ir.Node, reason: Reason) -> None:
        """``node`` was evaluated but its result is not kept: it stays in the graph."""
        self._record(node, reason)
        how = self.how.pop(node, None)
        if how is not None:
            self.stats.folded -= 1
            if how == "native":
                self.stats.native -= 1
            else:
                self.stats.via_fallback -= 1


def fold_model(model: ir.Model, options: FoldOptions | None = None,
               catalogue: Catalogue | None = None, stats: FoldStats | None = None,
               pool: BufferPool | None = None,
               progress: Callable[[int, int], None] | None = None) -> FoldStats:
    """Fold every graph of ``model`` in place (one round); return what happened."""
    options = options or FoldOptions()
    catalogue = catalogue or load_catalogue().without(options.disabled_rules)
    stats = stats or FoldStats()
    stats.declined.clear()  # every round re-examines what is left: report the last one's view
    stats.declined_nodes.clear()
    pool = BufferPool() if pool is None else pool  # an empty pool is falsy (len 0)

    def fold_graph(graph: ir.Graph, outer: set[ir.Value]) -> None:
        folder = GraphFolder(graph, model, options, catalogue, stats, pool, progress, outer)
        folder.run()
        folder.materialize()
        visible = outer | visible_constants(graph, model.ir_version, options.inputs_are_constant)
        for node in graph:
            for sub in subgraphs(node):
                fold_graph(sub, visible)

    fold_graph(model.graph, set())
    if options.strict and len(pool):
        raise RuntimeError(f"buffers left in the pool after folding: {pool.keys()[:5]}")
    stats.rounds += 1
    stats.spilled, stats.spilled_bytes = pool.spilled, pool.spilled_bytes
    return stats


def visible_constants(graph: ir.Graph, ir_version: int, inputs_are_constant: bool
                      ) -> set[ir.Value]:
    """Constants of ``graph`` that its subgraphs may use: initializers and Constant outputs."""
    found = {v for v in graph.initializers.values() if v.const_value is not None and (
        inputs_are_constant or not is_overridable(v, graph, ir_version))}
    found.update(n.outputs[0] for n in graph if is_default_op(n, "Constant") and n.outputs)
    return found
