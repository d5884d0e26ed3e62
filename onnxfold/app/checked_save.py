"""Save a folded model only if it still computes what the original did (``optimize --check``).

The model is written to a temporary file beside the output, compared with the original in
onnxruntime, and only then moved into place; on failure (or any error) the temporary files are
removed and the output is neither created nor overwritten. Every file is made in the output's
pinned directory (``onnxfold.io.pinned``), and the written model is read back through it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

import onnx_ir as ir

from onnxfold.check.compare import compare_models
from onnxfold.check.result import CompareResult
from onnxfold.check.running.options import CompareOptions
from onnxfold.host import endings
from onnxfold.host.points import reached
from onnxfold.io import save_model
from onnxfold.io.outputs import OutputGuard
from onnxfold.io.pinned import PinnedOutput
from onnxfold.io.tempfiles import temporary, write_failed
from onnxfold.io.writer import SaveInfo, input_files, remove_input_data
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


def _save_checked(model: ir.Model, original: str | os.PathLike, output: PinnedOutput,
                  guard: OutputGuard, n: int, options: CompareOptions,
                  external_data: bool | None, saving: Callable[[int, int], None] | None,
                  checking: Callable[[str], None] | None, evidence: RunEvidence | None,
                  measure: Callable[[str], object] | None
                  ) -> tuple[SaveInfo | None, CompareResult | None]:
    directory = output.directory
    fd, tmp = temporary(directory, output.name, suffix=".check.onnx")
    os.close(fd)
    tmp_data = None
    try:
        info = save_model(model, output.sibling(tmp), external_data=external_data,
                          data_name=tmp + ".data", progress=saving, guard=guard)
        if info.data_path is not None:
            tmp_data = os.path.basename(info.data_path)
        reached("check-saved")
        checked = directory.path_of(tmp)
        result = compare_models(original, checked, n, options, progress=checking,
                                evidence=evidence) if n else None
        if result is not None:
            result.model_b = output.given  # report the output, not the temporary name
            result.failure = result.failure.replace(checked, output.given)
            if result.folds is not None:
                result.folds.model_b = output.given
            reached("check-compared")
            if not result.ok:
                return None, result
        if measure is not None:
            measure(checked)
        if tmp_data is None:
            in_place = guard.replaces_input(output)
            with endings.deferred():
                endings.check()  # nothing is published once a signal came
                directory.replace(tmp, output.name)
            if in_place:
                remove_input_data(model, output, None)
            return SaveInfo(output.given, None, info.bytes_written,
                            info.streamed_tensors), result
        # The .onnx names its data file, so external data is written again under the final name.
        return save_model(model, output, external_data=True, guard=guard), result
    except OSError as e:
        raise write_failed(output.given, e) from None
    finally:
        with endings.deferred():
            for leftover in (tmp, tmp_data):
                if leftover:
                    with contextlib.suppress(FileNotFoundError):
                        directory.unlink(leftover)
