"""What each pass of ``optimize`` reports, and the run's totals built from those reports.

Every pass returns an onnx-ir ``PassResult``; the passes with more to say than "changed or not"
return a subclass carrying it (as onnxscript's ``FoldConstantsResult``): the rewrite its hits
and rejections, the fold its counts and declines, the cleanups their hits, the inlining the
warning of a step not taken. ``optimize`` collects the results of one run in order
(:class:`Recorded`) and :func:`summarize` adds them up into a :class:`FoldStats`, which the
report is built from. Nothing is written into a shared object while the passes run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx_ir as ir
from onnx_ir.passes import InPlacePass, PassBase, PassResult

from onnxfold.analysis.declines import Reason
from onnxfold.analysis.input_shapes import Fixed
from onnxfold.fold.folder import FoldCounts
from onnxfold.pipeline.metadata import Stripped


@dataclass
class ConversionResult(PassResult):
    """``ConvertOpset``: what the conversion did (``opset_conversion.Conversion.to_dict``)."""

    conversion: dict[str, Any] | None = None


@dataclass
class StripResult(PassResult):
    """``StripMetadata``: the metadata entries it dropped and their encoded bytes."""

    stripped: Stripped = field(default_factory=Stripped)


@dataclass
class InlineResult(PassResult):
    """``InlineFunctions``: why nothing was inlined, if it was not (a report warning)."""

    declined: str | None = None


@dataclass
class InputShapesResult(PassResult):
    """``FixInputShapes``: the dims ``--input-shape`` bound, and on which inputs."""

    fixed: Fixed = field(default_factory=Fixed)


@dataclass
class RewriteResult(PassResult):
    """``Rewrite``: hits per pattern, the nodes of the graph a pattern declined at its last
    try (node -> "rule: reason"), and whether it reached its fixed point (``converged``: a
    next call finds nothing new unless another pass changes the model)."""

    hits: Counter = field(default_factory=Counter)
    rejected_at: dict[ir.Node, str] = field(default_factory=dict)
    converged: bool = True
    removed: Counter = field(default_factory=Counter)  # nodes removed net, per pattern
    modules: dict[str, Counter] = field(default_factory=dict)  # pattern -> module -> hits


@dataclass
class FoldResult(PassResult):
    """``Fold``: what the round's fold did."""

    counts: FoldCounts = field(default_factory=FoldCounts)


@dataclass
class RefineShapesResult(PassResult):
    """``RefineShapes``: whether the better shapes can fold more (a Shape or Size node is
    still in the graph)."""

    enables_folds: bool = False


@dataclass
class FoldFunctionsResult(PassResult):
    """``FoldFunctions``: what folding the model-local function bodies did (None: no
    function)."""

    counts: FoldCounts | None = None


@dataclass
class CleanupsResult(PassResult):
    """A cleanup pass (``cleanups.py``): its hits, and the nodes it removed net."""

    hits: Counter = field(default_factory=Counter)
    removed: Counter = field(default_factory=Counter)


@dataclass(frozen=True, kw_only=True)
class FoldStats:
    """The totals of one ``optimize`` run, built from its passes' results (:func:`summarize`).

    Declines and pattern rejections are those of the last fold and rewrite (each round
    re-examines what is left) plus the function bodies'; hits and counts add up over the run.
    """

    folded: int = 0
    native: int = 0
    via_fallback: int = 0
    fallback_sessions: int = 0
    materialized: int = 0
    materialized_bytes: int = 0
    declined: dict[str, int] = field(default_factory=dict)  # by DeclineKind value
    declined_nodes: tuple[tuple[str, str, Reason], ...] = ()
    rule_hits: dict[str, int] = field(default_factory=dict)
    pattern_hits: dict[str, int] = field(default_factory=dict)
    rejected_patterns: dict[str, int] = field(default_factory=dict)
    cleanup_hits: dict[str, int] = field(default_factory=dict)
    # nodes each pattern and cleanup removed net, and each pattern's hits by module
    rule_removed: dict[str, int] = field(default_factory=dict)
    pattern_modules: dict[str, dict[str, int]] = field(default_factory=dict)
    pool_peak_bytes: int = 0
    growth_bytes: int = 0
    spilled: int = 0
    spilled_bytes: int = 0
    rounds: int = 0  # fold rounds that ran
    folded_in_functions: int = 0  # of ``folded``: nodes in model-local function bodies
    function_constants: int = 0  # Constant nodes written into function bodies
    unneeded: int = 0  # constant nodes whose results nothing needed: pruned, never computed
    skipped_steps: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()  # for the report: a step not taken
    inputs_fixed: Fixed = field(default_factory=Fixed)  # what --input-shape bound


class Recorded(InPlacePass):
    """Runs ``inner`` and appends its result to ``log`` (the run's results, in order)."""

    def __init__(self, inner: PassBase, log: list[PassResult]) -> None:
        self.inner, self.log = inner, log
        self.name = getattr(inner, "name", type(inner).__name__)

    def call(self, model: ir.Model) -> PassResult:
        """Run the pass; record and return its result."""
        result = self.inner(model)
        self.log.append(result)
        return result


def last_rejections(results: Sequence[PassResult]) -> dict[ir.Node, str]:
    """The nodes the last rewrite rejected a pattern at (node -> "rule: reason")."""
    rewrites = [r for r in results if isinstance(r, RewriteResult)]
    return rewrites[-1].rejected_at if rewrites else {}


def summarize(results: Sequence[PassResult], skipped_steps: Sequence[str] = ()) -> FoldStats:
    """The totals of a run from its passes' results, in the order the passes ran."""
    folds = [r.counts for r in results if isinstance(r, FoldResult)]
    bodies = [r.counts for r in results
              if isinstance(r, FoldFunctionsResult) and r.counts is not None]
    everything = folds + bodies
    rewrites = [r for r in results if isinstance(r, RewriteResult)]
    declined_nodes = [*(folds[-1].declined_nodes if folds else ()),
                      *(item for counts in bodies for item in counts.declined_nodes)]
    return FoldStats(
        **{name: sum(getattr(c, name) for c in everything)
           for name in ("folded", "native", "via_fallback", "fallback_sessions",
                        "materialized", "materialized_bytes", "growth_bytes", "unneeded")},
        declined=dict(Counter(reason.kind.value for _, _, reason in declined_nodes)),
        declined_nodes=tuple(declined_nodes),
        rule_hits=_added(c.rule_hits for c in everything),
        pattern_hits=_added(r.hits for r in rewrites),
        rejected_patterns=dict(Counter(rewrites[-1].rejected_at.values())) if rewrites else {},
        cleanup_hits=_added(r.hits for r in results if isinstance(r, CleanupsResult)),
        rule_removed=_added([*(r.removed for r in rewrites),
                             *(r.removed for r in results if isinstance(r, CleanupsResult))]),
        pattern_modules=_modules(rewrites),
        pool_peak_bytes=max((c.pool_peak_bytes for c in everything), default=0),
        spilled=sum(c.spilled for c in folds),
        spilled_bytes=sum(c.spilled_bytes for c in folds),
        rounds=len(folds),
        folded_in_functions=sum(c.folded for c in bodies),
        function_constants=sum(c.function_constants for c in bodies),
        skipped_steps=tuple(skipped_steps),
        warnings=tuple(r.declined for r in results
                       if isinstance(r, InlineResult) and r.declined is not None),
        inputs_fixed=next((r.fixed for r in results if isinstance(r, InputShapesResult)),
                          Fixed()))


def _modules(rewrites: Sequence[RewriteResult]) -> dict[str, dict[str, int]]:
    """Each pattern's hits by module, over every rewrite of the run."""
    total: dict[str, Counter] = {}
    for result in rewrites:
        for rule, modules in result.modules.items():
            total.setdefault(rule, Counter()).update(modules)
    return {rule: dict(modules) for rule, modules in total.items()}


def _added(counters: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """The counters added up, keys in the order they first appear."""
    total: Counter = Counter()
    for counter in counters:
        total.update(counter)
    return dict(total)
