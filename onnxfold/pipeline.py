"""``onnxfold.optimize``: load, infer shapes, fold to a fixed point, clean up, report."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

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
    for _ in range(MAX_ROUNDS):
        folded = stats.folded
        stats.rejected_patterns.clear()  # like declines: report what the last round saw
        rewritten = rewrite(model, disabled, stats.rejected_patterns, options.inputs_are_constant)
        stats.pattern_hits.update(rewritten)
        fold_model(model, options, stats=stats, pool=pool, progress=progress)
        cleanup(model, options.inputs_are_constant)
        if stats.folded == folded:
            break  # rewrites enable folds within their own round: nothing new will come
        if options.shape_folding:
            infer_shapes(model)
    stats.cleanup_hits.update(run_cleanups(model, disabled))
    cleanup(model, options.inputs_are_constant)
    report = Report.build(source, before, model_counts(model), stats,
                          time.perf_counter() - started)
    return OptimizeResult(model, report, stats)
