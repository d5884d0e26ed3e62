"""The fold rounds and the function bodies' fold: the one place that decides whether another
round runs.

::

    repeat (at most MAX_ROUNDS):
        rewrite -> fold (if the round can fold more) -> prune -> refine shapes
        until the round learned nothing a next round can use
    fold model-local function bodies

One fold round propagates constants fully on its own, so a round is worth another only when
it learned something a fold can use: a rewrite that stopped short of its fixed point, a fold
that folded (its constants may let a rewrite fire), or better shapes with a Shape or Size
node left to fold. Each pass's result says what it did (``results.py``; its ``modified``
only whether the model changed), and :func:`learned` reads the round's results. A round's
fold runs when the one before it refined shapes that can fold more, or its own rewrite
changed the model (the first round's always runs).

What the passes need of the run so far travels as values, not through an object they share:
each round's ``Fold`` is made with the growth the run's earlier folds let through
(``max_growth_bytes`` bounds the total) and ``FoldFunctions`` with the rounds' total, each
round's ``RefineShapes`` with the constants the round's rewrite and fold made (what shape
inference has not seen). The ``Rewrite`` and ``Prune`` passes serve every round (what the
rewrite keeps between its calls is its own).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import onnx_ir as ir
from onnx_ir.passes import InPlacePass, PassBase, PassResult

from onnxfold.pipeline.passes import initializers
from onnxfold.pipeline.results import (
    FoldFunctionsResult,
    FoldResult,
    RefineShapesResult,
    RewriteResult,
)

MAX_ROUNDS = 8


@dataclass(frozen=True)
class StagePasses:
    """The passes of the fold stage as the pipeline made them; None: left out (a step that
    failed, or one the model does not allow).

    ``fold(growth_spent)``, ``refine_shapes(new_constants)`` and ``fold_functions(growth_spent)``
    make the pass for one round (or for the bodies) with what it needs of the run so far.
    """

    rewrite: PassBase | None
    fold: Callable[[int], PassBase] | None
    prune: PassBase | None
    refine_shapes: Callable[[frozenset[ir.Value]], PassBase] | None
    fold_functions: Callable[[int], PassBase] | None


def learned(rewrite: RewriteResult | None, fold: FoldResult | None,
            refine: RefineShapesResult | None) -> bool:
    """Whether a round learned something the next round can use: its rewrite stopped short
    of its fixed point, its fold folded, or it refined shapes that can fold more."""
    return bool(rewrite is not None and rewrite.hits and not rewrite.converged) or \
        bool(fold is not None and fold.counts.folded > 0) or \
        bool(refine is not None and refine.enables_folds)


class FoldStage(InPlacePass):
    """Rewrite, fold, prune and refine shapes in rounds while a round learns something (at
    most ``max_rounds``), then fold the function bodies once (see the module docstring)."""

    name = "fold_stage"

    def __init__(self, passes: StagePasses, max_rounds: int = MAX_ROUNDS) -> None:
        self.passes, self.max_rounds = passes, max_rounds

    def call(self, model: ir.Model) -> PassResult:
        """Run the rounds and the bodies' fold; modified if any of their passes changed
        the model."""
        passes = self.passes
        news = True  # shapes changed in a way that can fold more (at first: everything is new)
        spent = 0  # bytes the folds so far let the model grow by
        modified = False
        for _ in range(self.max_rounds):
            before = frozenset(initializers(model))
            rewrite: RewriteResult | None = None
            if passes.rewrite is not None:
                rewrite = _typed(passes.rewrite, model, RewriteResult)
            rewritten = rewrite is not None and bool(rewrite.hits)
            fold: FoldResult | None = None
            new: frozenset[ir.Value] = frozenset()
            if passes.fold is not None and (news or rewritten):
                fold = _typed(passes.fold(spent), model, FoldResult)
                spent += fold.counts.growth_bytes
                # what the round's rewrite and fold made: inference has not seen their values
                new = frozenset(initializers(model) - before)
            prune = passes.prune(model) if passes.prune is not None else None
            refine: RefineShapesResult | None = None
            if passes.refine_shapes is not None:
                refine = _typed(passes.refine_shapes(new), model, RefineShapesResult)
                news = refine.enables_folds
            modified = modified or any(r is not None and r.modified
                                       for r in (rewrite, fold, prune, refine))
            if not learned(rewrite, fold, refine):
                break
        if passes.fold_functions is not None:
            bodies = _typed(passes.fold_functions(spent), model, FoldFunctionsResult)
            modified = modified or bodies.modified
        return PassResult(model, modified)


_R = TypeVar("_R", bound=PassResult)


def _typed(step: PassBase, model: ir.Model, kind: type[_R]) -> _R:
    """Run ``step`` on ``model``; its result, of the kind the step returns."""
    result = step(model)
    if not isinstance(result, kind):
        raise TypeError(f"{step}: returned a {type(result).__name__}, not a {kind.__name__}")
    return result
