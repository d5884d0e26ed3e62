"""Each pass of the pipeline returns what it did as its own PassResult; the run's totals (and
the report) are added up from those results; strict invariants are onnx-ir pre- and
postconditions of the passes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx_ir.passes import PassResult, PostconditionError

from onnxfold.analysis.declines import DeclineKind, Reason
from onnxfold.declare.catalogue import load_catalogue
from onnxfold.fold.folder import FoldCounts, GrowthLedger
from onnxfold.fold.pool import BufferPool
from onnxfold.io.reader import model_from_proto
from onnxfold.pipeline.optimizer import build_pipeline
from onnxfold.pipeline.options import FoldOptions
from onnxfold.pipeline.passes import Fold, RoundState
from onnxfold.pipeline.results import (
    CleanupsResult,
    FoldResult,
    RewriteResult,
    summarize,
)
from tests.support.models import make_model, tensor, vinfo


def _model():
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
             helper.make_node("Identity", ["wt"], ["wi"]),
             helper.make_node("MatMul", ["x", "wi"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[1, 3])], [vinfo("y", shape=[1, 2])],
                       [tensor("w", w)])
    return model_from_proto(proto, check=False)


def test_the_pipeline_collects_one_result_per_pass_run():
    log: list[PassResult] = []
    build_pipeline(FoldOptions(strict=True), log)(_model())
    folds = [r for r in log if isinstance(r, FoldResult)]
    assert folds[0].counts is not None and folds[0].counts.folded == 2  # Transpose, Identity
    assert folds[0].counts.rule_hits == {"Transpose": 1, "Identity": 1}
    assert folds[1].counts is None  # the second round had nothing new to fold
    assert sum(isinstance(r, RewriteResult) for r in log) == 2
    assert sum(isinstance(r, CleanupsResult) for r in log) == 1
    stats = summarize(log)
    assert (stats.folded, stats.native, stats.rounds, stats.materialized) == (2, 2, 1, 1)


def _counts(folded: int, *declines: str) -> FoldCounts:
    counts = FoldCounts(folded=folded, native=folded)
    counts.declined_nodes = [(f"n{i}", "Op", Reason(DeclineKind(kind)))
                             for i, kind in enumerate(declines)]
    return counts


def test_totals_add_counts_and_keep_the_last_rounds_declines():
    model = _model()
    results: list[PassResult] = [
        FoldResult(model, True, _counts(3, "growth", "no rule")),
        RewriteResult(model, False),
        FoldResult(model, True, _counts(1, "size")),
        FoldResult(model, False, None),  # a round with nothing new: no fold ran
    ]
    stats = summarize(results, ["skipped x; please report"])
    assert (stats.folded, stats.rounds) == (4, 2)
    assert stats.declined == {"size": 1}  # each round re-examines what is left
    assert [node for node, _, _ in stats.declined_nodes] == ["n0"]
    assert stats.skipped_steps == ("skipped x; please report",)


def test_strict_fold_requires_an_empty_pool_after_it():
    model = _model()
    pool = BufferPool()
    catalogue = load_catalogue()
    fold = Fold(catalogue, FoldOptions(strict=True).fold_settings(), RoundState(), pool,
                GrowthLedger(), None)
    fold(model)  # an empty pool after a complete fold: the postcondition holds
    pool.put(model.graph.initializers["w"], np.zeros(2, np.float32), 1)
    with pytest.raises(PostconditionError, match="buffers left in the pool"):
        fold.ensures(model)
    Fold(catalogue, FoldOptions().fold_settings(), RoundState(), pool, GrowthLedger(),
         None).ensures(model)
