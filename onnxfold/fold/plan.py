"""What one graph's fold evaluates, decided before any data is read.

Pure: from a graph's constness analysis (``analysis.constness.ConstPlan``), the size policy, the
catalogue and the op facts, :func:`plan_fold` decides which nodes the evaluator runs and in
what order, which it refuses and why (the size policy, QDQ, float16 rounding), which must run
in onnxruntime rather than by a native rule, and how many planned readers each value has (the
pool frees a buffer when its last reader has run). Nodes downstream of a refused node are left
out: their inputs will never be constant. Nothing in the graph changes.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass

import onnx_ir as ir

from onnxfold.analysis.constness import ConstPlan
from onnxfold.analysis.declines import Reason
from onnxfold.declare.catalogue import Catalogue
from onnxfold.fold.exactness import needing_onnxruntime
from onnxfold.fold.half_kernels import refuse_unrounded
from onnxfold.fold.policy import (
    HALF_FLOATS,
    QUANTIZED,
    Origins,
    refuse_dequantization,
    refuse_growth,
)
from onnxfold.fold.settings import SizePolicy
from onnxfold.ir.graph import captured_values, is_default_op


@dataclass
class FoldPlan:
    """The nodes of one graph to evaluate, and why the others are not."""

    const: ConstPlan
    order: list[ir.Node]  # the planned nodes, in topological order
    refused: list[tuple[ir.Node, Reason]]  # by the constness analysis, then by the policy
    on_onnxruntime: Collection[ir.Node]  # planned nodes a native rule must not fold
    shape_only: frozenset[str]  # op types that read only their input's shape
    readers: Counter  # per value: how many planned nodes read its data
    growth_bytes: int  # what the growth policy let through
    reads_of: dict[ir.Node, tuple[ir.Value, ...]]  # per foldable node: see :func:`reads`
    origins: Origins  # per constant value: see policy.Origins
    # planned nodes left out of ``order``: nothing needs what they compute (:func:`needed_only`)
    unneeded: frozenset[ir.Node] = frozenset()

    def reads(self, node: ir.Node) -> tuple[ir.Value, ...]:
        """Distinct values whose data ``node`` reads (see :func:`reads`), as planned: nothing
        edits the graph between the plan and the evaluation of its nodes."""
        return self.reads_of[node]


def reads(node: ir.Node, const: ConstPlan, shape_only: Collection[str]
          ) -> tuple[ir.Value, ...]:
    """Distinct values whose data ``node`` reads.

    Shape-only folds read a constant input's buffer for its shape, and nothing otherwise.
    """
    if is_default_op(node, *shape_only):
        return (node.inputs[0],) if node.inputs[0] in const.constant else ()
    return tuple(dict.fromkeys(v for v in (*node.inputs, *captured_values(node))
                               if v is not None))


def plan_fold(const: ConstPlan, graph: ir.Graph, model: ir.Model, policy: SizePolicy,
              catalogue: Catalogue, shape_only: frozenset[str], opset: int,
              growth_spent: int = 0) -> FoldPlan:
    """The fold plan of ``graph`` (of ``model``), given its constness analysis ``const``;
    ``opset``: the default domain's opset the graph's nodes run at; ``growth_spent``: the bytes
    earlier folds of this run already grew the model by (``max_growth_bytes`` bounds the sum)."""
    planned = set(const.foldable)
    reads_of = {node: reads(node, const, shape_only) for node in const.foldable}
    origins_of = Origins(const)
    qdq_refused, requantized = refuse_dequantization(
        const.foldable, planned, catalogue.kept_quantized, policy.fold_qdq,
        catalogue.requantizing)
    qdq_refused += refuse_unrounded(const.foldable, planned, opset)
    _prune_unreachable(const, planned, shape_only, reads_of)
    allowance = None if policy.max_growth_bytes is None else \
        policy.max_growth_bytes - growth_spent
    widening = {**(HALF_FLOATS if policy.fold_fp16_casts else {}),
                **(QUANTIZED if policy.fold_qdq else {})}
    growth_refused, growth = refuse_growth(const, planned, graph, policy.growth_factor,
                                           policy.growth_min_bytes, allowance, widening,
                                           catalogue.requantizing, requantized, origins_of)
    if growth_refused:  # (else every planned node still reads what planned nodes compute)
        _prune_unreachable(const, planned, shape_only, reads_of)
    order = [n for n in const.foldable if n in planned]
    on_onnxruntime = needing_onnxruntime(dict.fromkeys(order), catalogue, opset, model.graph,
                                         graph)
    return FoldPlan(const, order, const.refused + qdq_refused + growth_refused,
                    on_onnxruntime, shape_only, _readers(order, reads_of), growth, reads_of,
                    origins_of)


def needed_only(plan: FoldPlan, graph: ir.Graph) -> FoldPlan:
    """``plan`` without the nodes whose results nothing needs: no output of theirs is a graph
    output or read by a node other than these (a rewrite left ``Shape(x)`` unread, a Mul reads
    only it). Evaluated, their results would be dropped and the nodes pruned as dead code; a
    fold of a 12k-node graph spent a third of its nodes on them. A reader in another graph (a
    subgraph capturing the value) needs it. What the plan decided before (refusals, growth)
    is unchanged: only what runs is."""
    outputs = frozenset(graph.outputs)
    unneeded: set[ir.Node] = set()
    for node in reversed(plan.order):  # readers before what they read
        if all(v not in outputs and all(use.node in unneeded for use in v.uses())
               for v in node.outputs):
            unneeded.add(node)
    if not unneeded:
        return plan
    order = [node for node in plan.order if node not in unneeded]
    return dataclasses.replace(plan, order=order, readers=_readers(order, plan.reads_of),
                               unneeded=frozenset(unneeded))


def _readers(order: list[ir.Node], reads_of: dict[ir.Node, tuple[ir.Value, ...]]) -> Counter:
    """How many of the nodes ``order`` runs read each value's data."""
    readers: Counter = Counter()
    for node in order:
        readers.update(reads_of[node])
    return readers


def _prune_unreachable(const: ConstPlan, planned: set[ir.Node], shape_only: frozenset[str],
                       reads_of: dict[ir.Node, tuple[ir.Value, ...]]) -> None:
    """Unplan nodes downstream of refused ones: their inputs will never be constant."""
    available = set(const.sources)
    for node in const.foldable:
        if node in planned and (node.op_type in shape_only or
                                available.issuperset(reads_of[node])):
            available.update(node.outputs)
        else:
            planned.discard(node)
