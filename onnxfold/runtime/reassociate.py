"""Low-rank branches merged into their base weights before a split: LoRA adapters fed as inputs.

``x @ W + s * (x @ A) @ B`` becomes ``x @ (W + s * A @ B)`` where A, B or s are runtime
constants (``rules/low_rank.py`` has the forms and the declines). It runs as a rewrite of that
rule alone, before the model is folded (so that no other rewrite hides a base product, such as
the Q/K/V merge of ``rules/shared_input_matmuls.py``) and once more after (what the fold
exposed: dynamo gives a Conv adapter a zero bias computed from shapes): the new weight's nodes
read runtime constants, so the split puts them in ``runtime_fold`` and the entry session
receives the merged weight as an initializer (onnxruntime prepacks it). The merge is the default for
runtime constants; ``--disable-rule merge_low_rank_branches`` (or
``FoldOptions(disabled_rules={"merge_low_rank_branches"})``) keeps the branches as they are.
The reasons branches stayed are counted for the caller's report.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import onnx_ir as ir

from onnxfold.analysis.shapes import infer_shapes
from onnxfold.declare.catalogue import Catalogue
from onnxfold.declare.pattern_rules import PatternRule
from onnxfold.pipeline.options import FoldOptions
from onnxfold.rewrite.driver import rewrite
from onnxfold.rewrite.steps import StepFailed

RULE = "merge_low_rank_branches"


@dataclass(frozen=True)
class LowRankMerges:
    """What the merge did: ``merged`` sums (one per base weight that took its branches in),
    ``kept``: why branches stayed, with how many sums each reason held back; ``skipped``: the
    rule's error when it failed (the model is then as it was)."""

    merged: int = 0
    kept: dict[str, int] = field(default_factory=dict)
    skipped: str | None = None
    enabled: bool = True

    def __add__(self, later: LowRankMerges) -> LowRankMerges:
        """This merge and a later one over the same model (what stayed is the later's say)."""
        return LowRankMerges(self.merged + later.merged, later.kept,
                             self.skipped or later.skipped, self.enabled and later.enabled)

    def summary(self) -> str:
        """One line for a report: how many weights took their branches in, and why not more."""
        if not self.enabled:
            return f"low-rank branches kept as they are ({RULE} disabled)"
        if self.skipped is not None:
            return f"low-rank branches kept: skipped {self.skipped}; please report"
        parts = [f"low-rank branches merged into {self.merged} weight(s)"]
        parts += [f"kept {n}: {reason}" for reason, n in sorted(self.kept.items())]
        return "; ".join(parts)


def merge_low_rank_branches(model: ir.Model, runtime_inputs: Sequence[ir.Value],
                            catalogue: Catalogue, options: FoldOptions | None = None
                            ) -> LowRankMerges:
    """Merge ``model``'s low-rank branches across ``runtime_inputs`` (graph inputs) in place,
    with ``catalogue``'s rule of that name (none: nothing merges)."""
    options = options or FoldOptions()
    off = set(options.disabled_rules) | set(options.keep)
    catalogue = catalogue.only(RULE).without(off)
    if not catalogue.of(PatternRule):
        return LowRankMerges(enabled=False)
    if not runtime_inputs:
        return LowRankMerges()
    infer_shapes(model)  # the factors' shapes decide what merges
    settings = options.run_settings(runtime_inputs=(str(v.name) for v in runtime_inputs))
    snapshot = None if options.strict else model.graph.clone()
    rejected_at: dict[ir.Node, str] = {}
    try:
        done = rewrite(model, catalogue, strict=options.strict, rejected_at=rejected_at,
                       settings=settings)
    except StepFailed as failure:
        assert snapshot is not None  # strict lets the rule's own error through
        model.graph = snapshot
        return LowRankMerges(skipped=str(failure))
    kept = Counter(why.split(": ", 1)[-1] for node, why in rejected_at.items()
                   if node.graph is not None)
    return LowRankMerges(done.hits.get(RULE, 0), dict(kept))
