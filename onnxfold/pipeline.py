"""``onnxfold.optimize``: one pipeline of passes over an in-memory model.

::

    infer shapes
    repeat until nothing changes (at most MAX_ROUNDS):
        rewrite -> fold -> prune -> refine shapes
    cleanups -> prune

Each stage is an onnx-ir ``InPlacePass`` with one job (``onnxfold/passes.py``) whose result
says whether it changed the model; onnx-ir's ``PassManager`` runs the list and repeats the
fold rounds until a round changes nothing. ``optimize``, the split and ``Session`` build it
from the same :class:`FoldOptions`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import onnx_ir as ir
from onnx_ir.passes import PassError, PassManager

from onnxfold.catalogue import load_catalogue
from onnxfold.fold import FoldOptions, FoldStats
from onnxfold.io import load_model
from onnxfold.passes import (
    Cleanups,
    Fold,
    InferShapes,
    Prune,
    RefineShapes,
    Rewrite,
    RoundState,
)
from onnxfold.pool import BufferPool
from onnxfold.report import Report, model_counts

MAX_ROUNDS = 8


@dataclass
class OptimizeResult:
    """The optimized model (in memory) and the report of what was done."""

    model: ir.Model
    report: Report
    stats: FoldStats = field(repr=False, default_factory=FoldStats)


def build_pipeline(options: FoldOptions, stats: FoldStats,
                   progress: Callable[[int, int], None] | None = None) -> PassManager:
    """The passes of ``optimize`` for these options, recording into ``stats``."""
    catalogue = load_catalogue().without(options.disabled_rules)
    pool = BufferPool(memory_limit=options.memory_limit)
    state = RoundState()
    return PassManager([
        InferShapes(),
        PassManager([
            Rewrite(catalogue, options, stats, state),
            Fold(catalogue, options, stats, state, pool, progress),
            Prune(options),
            RefineShapes(options, state),
        ], steps=MAX_ROUNDS, early_stop=True),
        Cleanups(catalogue, stats),
        Prune(options),
    ])


def optimize(model: ir.Model | str | os.PathLike, options: FoldOptions | None = None,
             *, check: bool = True,
             progress: Callable[[int, int], None] | None = None) -> OptimizeResult:
    """Fold every constant subgraph of ``model`` (a path or an ``ir.Model``, changed in place).

    Returns the model and a :class:`Report`; save it with :func:`onnxfold.save_model`.
    """
    from onnxfold.io.reader import SOURCE_KEY

    started = time.perf_counter()
    options = options or FoldOptions()
    if not isinstance(model, ir.Model):
        model = load_model(os.fspath(model), check=check)
    before = model_counts(model)
    stats = FoldStats()
    try:
        build_pipeline(options, stats, progress)(model)
    except PassError as e:  # the pass's own exception is the one worth reporting
        cause: BaseException = e
        while isinstance(cause, PassError) and cause.__cause__ is not None:
            cause = cause.__cause__
        raise cause from None
    report = Report.build(model.meta.get(SOURCE_KEY), before, model_counts(model), stats,
                          time.perf_counter() - started)
    return OptimizeResult(model, report, stats)
