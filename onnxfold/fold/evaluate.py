"""Evaluate a fold plan: every planned node once, in order, its outputs into the buffer pool.

A node runs by its native rule (numpy, in its own dtype; a float16 op onnxruntime computes in
float32 is computed so here too, rounded once at the end) or, when it has none or its rule
declines, through onnxruntime (``fallback.run_batch``: neighbouring such nodes batched into one
session). Before a node runs its outputs are sized against the pool budget (``budget.py``).
A node that cannot run is abandoned: it stays in the graph, and the computed values it reads
must then be kept. A buffer leaves the pool when its last planned reader has run.

The result (:class:`Evaluated`) says which values to keep, how each node was folded, what each
value was computed from (provenance) and what was declined; ``materialize.py`` writes it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_ir as ir

from onnxfold.analysis.declines import Decline, DeclineKind, Reason
from onnxfold.declare.catalogue import Catalogue
from onnxfold.declare.registry import FolderRule
from onnxfold.fold import fallback
from onnxfold.fold.budget import loop_work, over_budget, planned_bytes, pool_budget
from onnxfold.fold.half_kernels import in_float32_by_onnxruntime
from onnxfold.fold.plan import FoldPlan
from onnxfold.fold.pool import BufferPool
from onnxfold.fold.settings import Evaluation
from onnxfold.ir.blocks import Concatenated
from onnxfold.ir.constants import source_array
from onnxfold.ir.graph import captured_values, is_default_op, node_label, static_shape, tensor_of

PROVENANCE_LIMIT = 64
UNBUILT_FROM = 1 << 20  # bytes: a Concat of weights' views this large is not built here
# a size refusal, or a draw (Dropout in training mode): onnxruntime must not run it either
_NEVER_TO_ONNXRUNTIME = (DeclineKind.SIZE, DeclineKind.NON_DETERMINISTIC)
_NEEDS_ONNXRUNTIME = Reason(DeclineKind.EXACTNESS, "its value reaches a discontinuous op "
                                                   "(docs/exactness.md): onnxruntime folds it")


@dataclass
class Evaluated:
    """What evaluating one graph's plan left: kept values are still in the pool."""

    keep: dict[ir.Value, None] = field(default_factory=dict)  # ordered: initializer order
    how: dict[ir.Node, str] = field(default_factory=dict)  # "native" or "fallback"
    provenance: dict[ir.Value, tuple[str, ...]] = field(default_factory=dict)
    # values a native folder that is not bitwise computed, or that read one: numpy's rounding
    # may differ from onnxruntime's by a few ulps there (docs/exactness.md)
    rounded: set[ir.Value] = field(default_factory=set)
    input_bytes: dict[ir.Value, int] = field(default_factory=dict)  # per value: its node's
    declined: list[tuple[ir.Node, Reason]] = field(default_factory=list)
    rule_hits: Counter = field(default_factory=Counter)
    fallback_sessions: int = 0


def attr_value(attr: ir.Attr) -> Any:
    """An attribute as a folder rule receives it (tensors as arrays, lists for tuples)."""
    if attr.type == ir.AttributeType.TENSOR:
        return tensor_of(attr).numpy()
    if attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
        raise Decline("graph attributes are left to onnxruntime")
    value = attr.value
    if isinstance(value, tuple):
        value = list(value)
    return value


def evaluate_native(node: ir.Node, rule: FolderRule, args: list, opset: int
                    ) -> list[np.ndarray]:
    """``node``'s outputs by ``rule`` from its input arrays (a shape tuple for a shape-only
    rule). A float16 op onnxruntime computes in float32 is computed in float32 here, rounded
    once at the end. Raises Decline when the rule declines or returns the wrong dtype."""
    attributes = node.attributes
    kwargs = {name: attr_value(attr) for name, attr in attributes.items()} if attributes else {}
    half = None if rule.half_as_given else in_float32_by_onnxruntime(node, args, opset)
    if half is not None:  # as onnxruntime runs it: in float32, rounded once at the end
        args = [a.astype(np.float32) if isinstance(a, np.ndarray) and a.dtype == half
                else a for a in args]
    result = rule.fn(*args, **kwargs)  # (under np.errstate(all="ignore"): Evaluator.run)
    outs = [np.asarray(o) for o in (result if isinstance(result, (tuple, list)) else (result,))]
    if half is not None:  # (overflow to inf is what onnxruntime's rounding gives too)
        outs = [o.astype(half) if v.dtype is not None and v.dtype.numpy() == half
                else o for o, v in zip(outs, node.outputs)]
    for value, arr in zip(node.outputs, outs):
        dtype = value.dtype
        if dtype is not None and arr.dtype != (expected := dtype.numpy()):
            raise Decline(f"{rule.name} returned {arr.dtype}, expected {expected}",
                          DeclineKind.RULE_ERROR)
    return outs


def _floating(value: ir.Value, arr: np.ndarray | None) -> bool:
    """Whether ``value`` (computed as ``arr``, or not returned: by its declared type) holds
    floats (bfloat16 and float8 arrays are of numpy kind "V")."""
    if arr is not None:
        return arr.dtype.kind == "f" or "float" in arr.dtype.name
    return value.dtype is not None and value.dtype.is_floating_point()


Observer = Callable[[dict[ir.Value, np.ndarray]], None]


class Evaluator:
    """Runs one graph's :class:`FoldPlan` through ``pool`` (see the module docstring).

    ``opset_imports``: what a fallback session imports (a function body adds its own);
    ``observe``: told each node's results as they are computed (a probe learns sizes)."""

    def __init__(self, plan: FoldPlan, graph: ir.Graph, model: ir.Model, limits: Evaluation,
                 catalogue: Catalogue, pool: BufferPool, opset_imports: dict[str, int],
                 progress: Callable[[int, int], None] | None = None,
                 observe: Observer | None = None) -> None:
        self.plan, self.graph, self.model, self.limits = plan, graph, model, limits
        self.catalogue, self.pool, self.progress, self.observe = catalogue, pool, progress, observe
        self.opset_imports = opset_imports
        self.opset = opset_imports.get("", 1)
        self.graph_outputs = frozenset(graph.outputs)  # the evaluation edits no graph
        self.budget = pool_budget(limits.pool_budget, limits.memory_limit)
        self.readers = Counter(plan.readers)  # readers still to come: released as they run
        self.running = set(plan.order)  # planned and not abandoned
        self.out = Evaluated()

    def run(self) -> Evaluated:
        """Evaluate every planned node once, in order (numpy's floating-point errors ignored:
        a fold computes what onnxruntime computes, inf and nan included)."""
        with np.errstate(all="ignore"):
            return self._run()

    def _run(self) -> Evaluated:
        order = self.plan.order
        self.out.declined.extend(self.plan.refused)
        i = 0
        while i < len(order):
            node = order[i]
            i += 1
            if self.progress is not None:
                self.progress(i, len(order))
            if not self._inputs_ready(node):
                self._abandon(node, self._why_unavailable(node))
                continue
            reason = self._budget(node)
            if reason is not None:
                self._abandon(node, reason)
                continue
            reason = _NEEDS_ONNXRUNTIME if node in self.plan.on_onnxruntime else \
                self._try_native(node)
            if reason is None:
                continue
            if self.limits.strict and reason.kind is DeclineKind.RULE_ERROR:
                raise RuntimeError(str(reason))
            if reason.kind in _NEVER_TO_ONNXRUNTIME or not self.limits.fallback or \
                    not self._has_data(node):
                self._abandon(node, reason)
                continue
            batch, produced = [node], set(node.outputs)
            while i < len(order) and self._wants_fallback(order[i], batch, produced):
                batch.append(order[i])
                produced.update(order[i].outputs)
                i += 1
            self._run_fallback(batch)
        return self.out

    def _inputs_ready(self, node: ir.Node) -> bool:
        """Whether what ``node`` reads is in the pool (or, for a shape-only op, its input's
        shape is known)."""
        if node.op_type in self.plan.shape_only:
            return self._shape_known(node)
        pool = self.pool
        return all(v in pool or self._available(v) for v in self.plan.reads(node))

    # -- bookkeeping -------------------------------------------------------------------------
    def _kept_by_graph(self, value: ir.Value) -> bool:
        if value in self.graph_outputs:
            return True
        unneeded = self.plan.unneeded  # (they read nothing for the graph: it drops them)
        return any(user not in self.running and user not in unneeded for user, _ in value.uses())

    def _available(self, value: ir.Value) -> bool:
        if value in self.pool:
            return True
        if value in self.plan.const.sources:
            arr = source_array(value)
            if arr is None:
                return False
            self.pool.put(value, arr, self.readers[value], source=True)
            return value in self.pool
        return False

    def _abandon(self, node: ir.Node, reason: Reason | None) -> None:
        """``node`` stays in the graph: its constant inputs must now be kept."""
        self.running.discard(node)
        if reason is not None:
            self.out.declined.append((node, reason))
        sources, keep = self.plan.const.sources, self.out.keep
        for v in self.plan.reads(node):
            if v in self.pool:
                if v not in sources and v not in keep:
                    keep[v] = None
                    self.pool.hold(v)
                self.pool.release(v)
            elif v in sources and self.readers[v] > 0:
                self.readers[v] -= 1

    def _finish(self, node: ir.Node, results: dict[ir.Value, np.ndarray], how: str) -> None:
        if self.observe is not None:
            self.observe(results)
        out, pool = self.out, self.pool
        origin = {node_label(node): None}
        for v in node.inputs:
            if v is not None and (upstream := out.provenance.get(v)):
                origin.update(dict.fromkeys(upstream))
        names = tuple(origin)[:PROVENANCE_LIMIT]
        in_bytes = sum(pool.get(v).nbytes for v in node.inputs if v in pool)
        # a native fold that is not bitwise, or one whose kernel sums in an order that varies
        # with the memory it reads (onnxruntime's too: rules/facts.py's order_varies)
        rounded = any(v in out.rounded for v in node.inputs if v is not None) or (
            how == "native" and (node.domain or "", node.op_type) not in self.catalogue.bitwise
        ) or self.catalogue.order_varies(node)
        for value in node.outputs:  # those a fallback batch used within it too (not returned)
            out.provenance[value] = names
            if rounded and _floating(value, results.get(value)):
                out.rounded.add(value)
        for value, arr in results.items():
            out.input_bytes[value] = in_bytes
            keep = self._kept_by_graph(value)
            if keep:
                out.keep[value] = None
            pool.put(value, arr, self.readers[value] + int(keep))
        for v in self.plan.reads(node):
            if v in pool:
                pool.release(v)
        out.how[node] = how

    # -- evaluation --------------------------------------------------------------------------
    def _try_native(self, node: ir.Node) -> Reason | None:
        """Fold ``node`` with its rule; return None on success or the reason it declined."""
        rule = self.catalogue.folder(node.domain, node.op_type, node.version or self.opset)
        if rule is None:
            return Reason(DeclineKind.NO_RULE)
        lazy = self._unbuilt_concat(node)
        if lazy is not None:  # the Concat rule's result, built where it is written
            self.out.rule_hits[rule.name] += 1
            self._finish(node, {node.outputs[0]: lazy}, "native")  # type: ignore[dict-item]
            return None
        try:
            outs = evaluate_native(node, rule, self._native_args(node, rule), self.opset)
        except Decline as e:
            return e.reason
        except Exception as e:
            if self.limits.strict:
                raise
            return Reason(DeclineKind.RULE_ERROR, f"{rule.name}: {type(e).__name__}: {e}")
        self.out.rule_hits[rule.name] += 1
        self._finish(node, dict(zip(node.outputs, outs)), "native")
        return None

    def _native_args(self, node: ir.Node, rule: FolderRule) -> list:
        if rule.shape_only:
            x = node.inputs[0]
            assert x is not None  # the data input of Shape and Size is required
            shape = self.pool.get(x).shape if x in self.pool else static_shape(x)
            assert shape is not None  # run() checked _shape_known
            return [tuple(shape)]
        return [self._array(v) if v is not None else None for v in node.inputs]

    def _array(self, value: ir.Value) -> np.ndarray:
        """``value``'s array in the pool, built where it is an unbuilt concatenation (a fold
        that reads one: rare, and the budget sized its node's output, not this)."""
        found = self.pool.get(value)
        return np.asarray(found) if isinstance(found, Concatenated) else found

    def _unbuilt_concat(self, node: ir.Node) -> Concatenated | None:
        """``node``'s result left unbuilt (``onnxfold.ir.blocks``): a Concat of at least
        :data:`UNBUILT_FROM` bytes whose inputs hold no memory of the pool's (weights' views,
        or concatenations left unbuilt themselves); None for any other node."""
        if not is_default_op(node, "Concat") or len(node.outputs) != 1 or \
                any(v is None or v not in self.pool or self.pool.holds_memory(v)
                    for v in node.inputs):
            return None
        pieces = [self.pool.get(v) for v in node.inputs if v is not None]
        axis = node.attributes.get_int("axis", 0)
        first = pieces[0]
        if first.ndim == 0 or not -first.ndim <= axis < first.ndim:
            return None
        axis %= first.ndim
        if any(isinstance(p, Concatenated) and p.axis != axis for p in pieces):
            return None  # pieces are arrays: one of another axis is built (a block's rows)
        if any(p.dtype != first.dtype or p.ndim != first.ndim or
               p.shape[:axis] + p.shape[axis + 1:] != first.shape[:axis] + first.shape[axis + 1:]
               for p in pieces) or sum(p.nbytes for p in pieces) < UNBUILT_FROM:
            return None
        expected = node.outputs[0].dtype
        if expected is not None and expected.numpy() != first.dtype:
            return None
        flat = [q for p in pieces for q in (p.pieces if isinstance(p, Concatenated) and
                                            p.axis == axis else (p,))]
        return Concatenated(flat, axis)

    def _run_fallback(self, batch: list[ir.Node]) -> None:
        """Evaluate ``batch`` through the executor fallback (``fallback.run_batch``)."""
        # spilling (--memory-limit) makes room for what fits the budget on its own
        room = self.budget if self.limits.memory_limit is not None else \
            max(self.budget - self.pool.live_bytes, 0)
        for node, outcome, sessions in fallback.run_batch(
                batch, self._pooled, lambda v: v in self.graph_outputs,
                self.opset_imports, self.model.ir_version, self.limits.fold_timeout,
                room, self._stored):
            self.out.fallback_sessions += sessions
            if isinstance(outcome, dict):
                self._finish(node, outcome, "fallback")
            else:
                self._abandon(node, outcome)

    def _budget(self, node: ir.Node) -> Reason | None:
        """Why ``node`` may not run now: its outputs would not fit the pool budget (checked
        before they exist), or it is a constant Loop running too long."""
        if node.op_type in self.plan.shape_only:
            return None
        arrays = self._pooled
        reason = loop_work(node, arrays)
        if reason is not None:
            return reason
        if self._views(node) or self._unbuilt_concat(node) is not None:
            return None  # nothing is allocated
        rule = self.catalogue.size_rule(node.op_type) if is_default_op(node) else None
        need = planned_bytes(node, arrays, rule.fn if rule else None,
                             lambda: {n: attr_value(a) for n, a in node.attributes.items()})
        if need is not None and self.limits.memory_limit is not None:
            self.pool.make_room(need)
        return over_budget(need, self.pool.live_bytes, self.budget,
                           spilling=self.limits.memory_limit is not None)

    def _views(self, node: ir.Node) -> bool:
        """Whether ``node``'s folder returns a view of its input 0 (an op the catalogue says
        does so, on an input in C order): it needs no bytes of the budget."""
        if not is_default_op(node) or node.op_type not in self.catalogue.views or \
                not node.inputs or (x := node.inputs[0]) is None or not self._available(x):
            return False
        found = self.pool.get(x)
        return isinstance(found, np.ndarray) and found.flags.c_contiguous

    def _stored(self, value: ir.Value) -> bool:
        """Whether ``value`` is an initializer or a Constant of the model (not a computed value,
        nor a graph input that ``--inputs-are-constant`` made constant)."""
        producer = value.producer()
        constant = value.const_value is not None or (
            producer is not None and is_default_op(producer, "Constant"))
        return constant and value not in self.graph.inputs and \
            value not in self.model.graph.inputs

    def _pooled(self, value: ir.Value) -> np.ndarray | None:
        return self._array(value) if self._available(value) else None

    def _why_unavailable(self, node: ir.Node) -> Reason | None:
        """A reason if an input is a constant onnxfold cannot hold (upstream declines have one)."""
        for v in self.plan.reads(node):
            if v in self.plan.const.sources and source_array(v) is None:
                return Reason(DeclineKind.UNSUPPORTED_TYPE, "string or sparse constant")
        return None

    def _has_data(self, node: ir.Node) -> bool:
        """Whether every input of ``node`` is in the pool (shape-only folds may lack data)."""
        return all(v is None or self._available(v) for v in node.inputs)

    def _shape_known(self, node: ir.Node) -> bool:
        x = node.inputs[0]
        assert x is not None  # the data input of Shape and Size is required
        return self._available(x) or static_shape(x) is not None

    def _wants_fallback(self, node: ir.Node, batch: list[ir.Node], produced: set[ir.Value]
                        ) -> bool:
        """Extend a fallback batch (computing ``produced``) with ``node`` if it has no rule and
        its inputs are ready. A contrib op runs alone: only a batch's outputs are sized before
        it runs, and nothing sized a contrib op's outputs before (onnx does not know it). (Only
        the first node of a batch may be a contrib op: no other joins one.)"""
        if node not in self.plan.on_onnxruntime and \
                self.catalogue.folder(node.domain, node.op_type, node.version or self.opset):
            return False
        if not is_default_op(node) or not is_default_op(batch[0]):
            return False
        if self._budget(node) is not None:
            return False  # runs on its own, to be refused by the budget
        inputs = [v for v in node.inputs if v is not None] + captured_values(node)
        return all(v in produced or self._available(v) for v in inputs)
