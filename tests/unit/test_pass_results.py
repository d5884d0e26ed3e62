"""Each pass of the pipeline returns what it did as its own PassResult (``modified``: the
model changed); the fold stage decides from those results whether another round runs; the
run's totals (and the report) are added up from them; strict invariants are onnx-ir pre- and
postconditions of the passes."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from onnx import helper
from onnx_ir.passes import PassResult, PostconditionError

from onnxfold.analysis.declines import DeclineKind, Reason
from onnxfold.declare.catalogue import load_catalogue
from onnxfold.fold.folder import FoldCounts
from onnxfold.io.reader import model_from_proto
from onnxfold.pipeline.cleanups import CLEANUPS
from onnxfold.pipeline.fold_stage import learned
from onnxfold.pipeline.optimizer import build_pipeline
from onnxfold.pipeline.options import FoldOptions
from onnxfold.pipeline.passes import Fold, Prune
from onnxfold.pipeline.results import (
    CleanupsResult,
    FoldResult,
    RefineShapesResult,
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
    build_pipeline(FoldOptions(strict=True), load_catalogue(), log)(_model())
    folds = [r for r in log if isinstance(r, FoldResult)]
    assert folds[0].counts is not None and folds[0].counts.folded == 2  # Transpose, Identity
    assert folds[0].counts.rule_hits == {"Transpose": 1, "Identity": 1}
    assert len(folds) == 1  # the second round had nothing new to fold: no fold ran
    assert sum(isinstance(r, RewriteResult) for r in log) == 2
    # one result per cleanup pass: the installed ones, then the catalogue's
    assert sum(isinstance(r, CleanupsResult) for r in log) == len(CLEANUPS)
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
    ]
    stats = summarize(results, ["skipped x; please report"])
    assert (stats.folded, stats.rounds) == (4, 2)
    assert stats.declined == {"size": 1}  # each round re-examines what is left
    assert [node for node, _, _ in stats.declined_nodes] == ["n0"]
    assert stats.skipped_steps == ("skipped x; please report",)


def test_strict_fold_requires_an_empty_pool_after_it():
    model = _model()
    catalogue = load_catalogue()
    fold = Fold(catalogue, FoldOptions(strict=True).fold_settings())
    fold(model)  # an empty pool after a complete fold: the postcondition holds
    fold.pool.put(model.graph.initializers["w"], np.zeros(2, np.float32), 1)
    with pytest.raises(PostconditionError, match="buffers left in the pool"):
        fold.ensures(model)
    lax = Fold(catalogue, FoldOptions().fold_settings())
    lax.pool.put(model.graph.initializers["w"], np.zeros(2, np.float32), 1)
    lax.ensures(model)


def test_modified_means_the_model_changed():
    """A pass's ``modified`` says whether it changed the model, nothing else: Prune reports
    the dead node it removed, and a second Prune finds nothing; a fold of a model with nothing
    to fold changes nothing."""
    dead = helper.make_node("Neg", ["x"], ["unused"])
    proto = make_model([helper.make_node("Relu", ["x"], ["y"]), dead],
                       [vinfo("x", shape=[1, 3])], [vinfo("y", shape=[1, 3])])
    model = model_from_proto(proto, check=False)
    prune = Prune(frozenset(), False, strict=True)
    assert prune(model).modified and len(model.graph) == 1
    assert not prune(model).modified
    assert not Fold(load_catalogue(), FoldOptions(strict=True).fold_settings())(model).modified


def test_a_round_runs_again_only_when_it_learned_something():
    """Round control is the fold stage's: a rewrite short of its fixed point, a fold that
    folded, or shapes refined where a Shape/Size can fold; not a pass that merely changed the
    model (a converged rewrite, better shapes with nothing to fold from them)."""
    model = _model()
    converged = RewriteResult(model, True, Counter({"p": 1}), {}, converged=True)
    short = RewriteResult(model, True, Counter({"p": 1}), {}, converged=False)
    folded = FoldResult(model, True, FoldCounts(folded=1))
    nothing = FoldResult(model, False, FoldCounts())
    shapes = RefineShapesResult(model, True, enables_folds=False)
    assert learned(short, None, None) and learned(None, folded, None)
    assert learned(None, None, RefineShapesResult(model, True, enables_folds=True))
    assert not learned(converged, nothing, shapes) and not learned(None, None, None)
