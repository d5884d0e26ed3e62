"""``onnxfold.optimize``: load, infer shapes, fold to a fixed point, clean up, report."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from onnxfold.analysis import SHAPE_ONLY, static_shape
from onnxfold.fold import FoldOptions, FoldStats, fold_model
from onnxfold.io import load_model
from onnxfold.patterns import rewrite, run_cleanups
from onnxfold.pool import BufferPool
from onnxfold.report import Report, model_counts
from onnxfold.shapes import infer_shapes

MAX_ROUNDS = 8


@dataclass
class OptimizeResult:
    """The optimized model (in memory) and the report of what was done."""

    model: ir.Model
    report: Report
    stats: FoldStats = field(repr=False, default_factory=FoldStats)


def drop_dead_initializer_inputs(model: ir.Model, constant_inputs: bool) -> None:
    """Remove initializer-backed graph inputs that folding left unused.

    In IR 3 every initializer is an input and a constant; once its readers are folded away it
    must leave the input list too, or the model would carry a dangling input. The same holds
    for overridable initializers the user declared constant.
    """
    graph = model.graph
    if model.ir_version >= 4 and not constant_inputs:
        return
    outputs = set(graph.outputs)
    for value in list(graph.inputs):
        if value.name in graph.initializers and not value.uses() and value not in outputs:
            graph.inputs.remove(value)


def cleanup(model: ir.Model, constant_inputs: bool) -> None:
    drop_dead_initializer_inputs(model, constant_inputs)
    RemoveUnusedNodesPass()(model)


def _initializers(model: ir.Model) -> set[ir.Value]:
    return {v for graph in model.graphs() for v in graph.initializers.values()}


def _asks_shapes(model: ir.Model) -> bool:
    """Whether a Shape/Size node is left: the only folds a better shape can enable."""
    return any(node.op_type in SHAPE_ONLY for graph in model.graphs() for node in graph)


def _may_refine_shapes(model: ir.Model, new_constants: set[ir.Value]) -> bool:
    """Whether inferring shapes again can reveal more.

    Inference last ran before the fold; what it did not know then are the values of the
    constants the fold created. Only a node reading one of them, with an output whose shape
    is not yet static, can get a better shape (and pass it on downstream).
    """
    for graph in model.graphs():
        for node in graph:
            if any(v in new_constants for v in node.inputs) and any(
                    static_shape(v) is None for v in node.outputs):
                return True
    return False


def optimize(model: ir.Model | str | os.PathLike, options: FoldOptions | None = None,
             *, check: bool = True,
             progress: Callable[[int, int], None] | None = None) -> OptimizeResult:
    """Fold every constant subgraph of ``model`` (a path or an ``ir.Model``, changed in place).

    Returns the model and a :class:`Report`; save it with :func:`onnxfold.save_model`.
    """
    started = time.perf_counter()
    options = options or FoldOptions()
    source = None
    if not isinstance(model, ir.Model):
        source = os.fspath(model)
        model = load_model(source, check=check)
    before = model_counts(model)
    stats = FoldStats()
    pool = BufferPool(memory_limit=options.memory_limit)
    if options.shape_folding:
        infer_shapes(model)
    disabled = set(options.disabled_rules)
    news = True  # whether this round can fold what the last one could not
    for _ in range(MAX_ROUNDS):
        folded = stats.folded
        stats.rejected_patterns.clear()  # like declines: report what the last round saw
        rewritten = rewrite(model, disabled, stats.rejected_patterns, options.inputs_are_constant)
        stats.pattern_hits.update(rewritten)
        if not (news or rewritten):
            break  # a fold round propagates fully: without new shapes or rewrites it repeats
        constants = _initializers(model)
        fold_model(model, options, stats=stats, pool=pool, progress=progress)
        cleanup(model, options.inputs_are_constant)
        if stats.folded == folded:
            break  # rewrites enable folds within their own round: nothing new will come
        refined = options.shape_folding and _may_refine_shapes(
            model, _initializers(model) - constants) and infer_shapes(model) > 0
        news = refined and _asks_shapes(model)  # rewrites see the new shapes anyway
    stats.cleanup_hits.update(run_cleanups(model, disabled))
    cleanup(model, options.inputs_are_constant)
    report = Report.build(source, before, model_counts(model), stats,
                          time.perf_counter() - started)
    return OptimizeResult(model, report, stats)
