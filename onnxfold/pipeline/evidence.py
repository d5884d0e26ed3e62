"""What a check needs from the run that folded a model, beyond what the model carries itself.

A folded model carries the provenance of each of its tensors (``onnxfold.ir.provenance``):
enough for any later check to re-derive its folds. Two things only the run knows: every
rewrite it made (when asked to record them: ``optimize(..., record_rewrites=True)``,
``rewrite/log.py``), which the check validates one by one; and the input dims
``--input-shape`` fixed, the only dims the optimized model may fix that the original leaves
dynamic (any other is a broken promise: dynamic axes stay dynamic).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from onnxfold.rewrite.log import RewriteLog


@dataclass(frozen=True)
class RunEvidence:
    """``rewrites``: every rewrite of the run (None: not recorded); ``fixed``: by input, the
    axes ``--input-shape`` made static."""

    rewrites: RewriteLog | None = None
    fixed: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
