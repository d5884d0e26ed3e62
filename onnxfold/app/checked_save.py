"""Save a folded model only if it still computes what the original did (``optimize --check``).

The model is written once, to a temporary file beside the output (its external data, if any,
already under the fresh name it keeps, which no published model names yet), compared with the
original in onnxruntime, and only then moved into place; on failure (or any error) the
temporary files are removed and the output is neither created nor overwritten. Every file is
made in the output's pinned directory (``onnxfold.io.pinned``), and the written model is read
back through it. (The data was written twice before: once for the check, again under the
final name, 12 GB each for a 7B decoder.)
"""

from __future__ import annotations

import os
from collections.abc import Callable

import onnx_ir as ir

from onnxfold.check.compare import CheckCouldNotRun, compare_models
from onnxfold.check.result import CompareResult
from onnxfold.check.running.options import CompareOptions
from onnxfold.host.points import reached
from onnxfold.io import save_model
from onnxfold.io.outputs import OutputGuard
from onnxfold.io.pinned import PinnedOutput
from onnxfold.io.writer import SaveInfo, input_files
from onnxfold.pipeline.evidence import RunEvidence


def save_checked(model: ir.Model, original: str | os.PathLike,
                 path: str | os.PathLike | PinnedOutput, *, n: int,
                 options: CompareOptions | None = None, guard: OutputGuard | None = None,
                 external_data: bool | None = None,
                 saving: Callable[[int, int], None] | None = None,
                 checking: Callable[[str], None] | None = None,
                 evidence: RunEvidence | None = None,
                 measure: Callable[[str], object] | None = None
                 ) -> tuple[SaveInfo | None, CompareResult | None]:
    """Write ``model`` to ``path`` if it matches ``original`` on ``n`` input sets (none: 0),
    and once ``measure(path of the written model)`` (``--latency``) returned: a run stopped
    or failing before then writes nothing.

    Returns the save info (None when nothing was written) and the comparison. ``options``: how
    the models are compared (inputs, seed, dims, ...); ``guard``: the output's guard, when the
    caller has claimed it (the command line's: what the output may replace is its business);
    else one protecting the model's files. ``saving`` and ``checking`` are the progress
    callbacks of :func:`save_model` and :func:`compare_models`; ``evidence``: what the run
    that folded ``model`` knows (its rewrites, the dims it fixed), for the check.
    """
    own = guard is None
    if guard is None:
        guard = OutputGuard(input_files(model))
    output = guard.pin(path, "output model")
    try:
        return _save_checked(model, original, output, guard, n, options or CompareOptions(),
                             external_data, saving, checking, evidence, measure)
    finally:
        if own:
            guard.close()  # the directory it pinned here, if any


class _Refused(Exception):
    """The check failed on the written model: nothing is published."""

    def __init__(self, result: CompareResult) -> None:
        super().__init__("the check failed")
        self.result = result


def _save_checked(model: ir.Model, original: str | os.PathLike, output: PinnedOutput,
                  guard: OutputGuard, n: int, options: CompareOptions,
                  external_data: bool | None, saving: Callable[[int, int], None] | None,
                  checking: Callable[[str], None] | None, evidence: RunEvidence | None,
                  measure: Callable[[str], object] | None
                  ) -> tuple[SaveInfo | None, CompareResult | None]:
    """The model written once, beside the output (its data under the name it keeps), checked
    and measured there, and published only then (``save_model``'s ``before_publish``)."""
    found: list[CompareResult | None] = []

    def judged(checked: str) -> None:
        reached("check-saved")
        try:
            result = compare_models(original, checked, n, options, progress=checking,
                                    evidence=evidence) if n else None
        except CheckCouldNotRun as e:  # named as the output, not its temporary file
            if e.result is not None:
                e.result.model_b = output.given
                e.result.not_run = e.result.not_run.replace(checked, output.given)
            raise CheckCouldNotRun(str(e).replace(checked, output.given), e.result) from None
        if result is not None:
            result.model_b = output.given  # report the output, not the temporary name
            result.failure = result.failure.replace(checked, output.given)
            if result.folds is not None:
                result.folds.model_b = output.given
            reached("check-compared")
            if not result.ok:
                raise _Refused(result)
        if measure is not None:
            measure(checked)
        found.append(result)

    try:
        info = save_model(model, output, external_data=external_data, progress=saving,
                          guard=guard, before_publish=judged)
    except _Refused as refused:
        return None, refused.result
    return info, found[0] if found else None
