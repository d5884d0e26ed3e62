"""The fold of a model: per graph, plan, evaluate through the pool, materialize.

``plan.py`` decides what folds and why not (pure), ``evaluate.py`` computes the planned nodes
into the reference-counted pool (a buffer leaves it as soon as its last reader has run), and
``materialize.py`` turns the values the graph keeps (graph outputs, inputs of nodes that stay)
into initializers; everything else lives and dies in the pool. Subgraphs fold after their
graph, seeing its constants. :func:`fold_model` returns what it did as :class:`FoldCounts`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import onnx_ir as ir

from onnxfold.analysis.constness import plan_graph
from onnxfold.analysis.declines import Reason
from onnxfold.declare.catalogue import Catalogue
from onnxfold.fold.evaluate import Evaluated, Evaluator
from onnxfold.fold.materialize import Materialized, Store, as_initializer, materialize
from onnxfold.fold.plan import FoldPlan, needed_only, plan_fold
from onnxfold.fold.pool import BufferPool
from onnxfold.fold.settings import FoldSettings
from onnxfold.ir.graph import is_default_op, is_overridable, node_label, subgraphs

__all__ = ["FoldCounts", "fold_graph", "fold_model", "visible_constants"]


@dataclass
class FoldCounts:
    """What one fold (a round over the model's graphs, or the function bodies) did."""

    folded: int = 0
    native: int = 0
    via_fallback: int = 0
    fallback_sessions: int = 0
    materialized: int = 0  # initializers written
    materialized_bytes: int = 0
    function_constants: int = 0  # Constant nodes written into function bodies
    declined_nodes: list[tuple[str, str, Reason]] = field(default_factory=list)
    rule_hits: Counter = field(default_factory=Counter)
    growth_bytes: int = 0
    unneeded: int = 0  # planned nodes whose results nothing needed: pruned, never computed
    pool_peak_bytes: int = 0  # the pool's peak when the last graph was evaluated (0: none)
    spilled: int = 0  # the pool's spill totals at the end of the fold
    spilled_bytes: int = 0

    def add(self, evaluated: Evaluated, materialized: Materialized) -> None:
        """Count one graph's evaluation: a node counts as folded unless materialization
        refused all its kept results (it stays in the graph)."""
        stays = {node for node, _ in materialized.refused}
        for node, how in evaluated.how.items():
            if node not in stays:
                self.folded += 1
                if how == "native":
                    self.native += 1
                else:
                    self.via_fallback += 1
        self.fallback_sessions += evaluated.fallback_sessions
        self.rule_hits.update(evaluated.rule_hits)
        for node, reason in evaluated.declined + materialized.refused:
            self.declined_nodes.append((node_label(node), node.op_type, reason))


def fold_graph(plan: FoldPlan, graph: ir.Graph, model: ir.Model, settings: FoldSettings,
               catalogue: Catalogue, pool: BufferPool, opset_imports: dict[str, int],
               store: Store, counts: FoldCounts,
               progress: Callable[[int, int], None] | None = None) -> Materialized:
    """Evaluate ``plan`` and materialize what ``graph`` keeps through ``store``; add what
    happened to ``counts`` (the caller decides what the stored constants count as)."""
    evaluated = Evaluator(plan, graph, model, settings.evaluation, catalogue, pool,
                          opset_imports, progress).run()
    counts.pool_peak_bytes = max(counts.pool_peak_bytes, pool.peak_bytes)
    counts.growth_bytes += plan.growth_bytes
    counts.unneeded += len(plan.unneeded)
    materialized = materialize(evaluated, plan, graph, pool, settings.policy, store)
    counts.add(evaluated, materialized)
    return materialized


def fold_model(model: ir.Model, catalogue: Catalogue, settings: FoldSettings | None = None,
               pool: BufferPool | None = None,
               growth_spent: int = 0,
               progress: Callable[[int, int], None] | None = None) -> FoldCounts:
    """Fold every graph of ``model`` in place (one round); return what happened (its
    ``growth_bytes``: what this fold let the model grow by). ``growth_spent``: what earlier
    folds of the run let it grow by (``max_growth_bytes`` bounds the sum);
    ``catalogue``: the rules to fold with, and the op facts (a filtered catalogue keeps
    every rule's)."""
    settings = settings or FoldSettings()
    pool = BufferPool() if pool is None else pool  # an empty pool is falsy (len 0)
    opset_imports = dict(model.opset_imports)  # what the fallback's session imports
    counts = FoldCounts()

    def fold(graph: ir.Graph, outer: set[ir.Value]) -> None:
        const = plan_graph(graph, model.ir_version, outer,
                           inputs_are_constant=settings.inputs_are_constant,
                           shape_folding=settings.shape_folding, keep=settings.keep,
                           facts=catalogue)
        plan = needed_only(plan_fold(const, graph, model, settings.policy, catalogue,
                                     catalogue.shape_only, opset_imports.get("", 1),
                                     growth_spent + counts.growth_bytes), graph)
        done = fold_graph(plan, graph, model, settings, catalogue, pool, opset_imports,
                          as_initializer(graph, model), counts, progress)
        counts.materialized += done.stored
        counts.materialized_bytes += done.stored_bytes
        visible: set[ir.Value] | None = None  # found for the first subgraph: most graphs have none
        for node in graph:
            for sub in subgraphs(node):
                if visible is None:
                    visible = outer | visible_constants(graph, model.ir_version,
                                                        settings.inputs_are_constant)
                fold(sub, visible)

    fold(model.graph, set())
    counts.spilled, counts.spilled_bytes = pool.spilled, pool.spilled_bytes
    return counts


def visible_constants(graph: ir.Graph, ir_version: int, inputs_are_constant: bool
                      ) -> set[ir.Value]:
    """Constants of ``graph`` that its subgraphs may use: initializers and Constant outputs."""
    found = {v for v in graph.initializers.values() if v.const_value is not None and (
        inputs_are_constant or not is_overridable(v, graph, ir_version))}
    found.update(n.outputs[0] for n in graph if is_default_op(n, "Constant") and n.outputs)
    return found
