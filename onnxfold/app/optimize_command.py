"""``onnxfold optimize``: one model folded and written (a batch of several: ``batch.py``).

A model's run is a :class:`~onnxfold.app.commands.ModelJob` and the command's
:class:`~onnxfold.app.commands.OptimizeSettings`. Its outputs (the model, its external data, the
``--json`` and HTML reports) are claimed first, by one ``OutputGuard`` that also protects the
input and every file it reads, and their directories pinned: each is written where it was
resolved then, whatever moves later (``onnxfold.io.pinned``). Then the model is folded, saved
(``optimize_save.py``: checked, plain, or not at all in a dry run) and reported
(``optimize_report.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import sys
from typing import TYPE_CHECKING

from onnxfold.app import batch
from onnxfold.app.batch_plan import is_batch
from onnxfold.app.commands import ModelJob, OptimizeCommand, OptimizeSettings
from onnxfold.app.judgement import Judged, judged, judged_against
from onnxfold.app.optimize_report import report_run
from onnxfold.app.optimize_save import Claimed, Saved, save
from onnxfold.app.positional_output import read_positional
from onnxfold.errors import InputError
from onnxfold.host.points import reached
from onnxfold.io.data_names import expected_data_suffix
from onnxfold.pipeline.collector import long_lived

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    import onnx_ir as ir

    from onnxfold.io.outputs import OutputGuard
    from onnxfold.io.prefill import OutputPrefill


def run(command: OptimizeCommand, debug: bool = False, exiting: bool = False) -> int:
    """Run ``command``: a batch when it names several models, a directory, or ``-o DIR/``
    (``debug``: its jobs print tracebacks too); else its one model (``exiting``: the process
    ends right after, see ``collector.long_lived``). onnxsim's ``IN OUT`` is ``IN -o OUT``
    (``positional_output.py``)."""
    settings = command.settings
    read = read_positional(command.sources, command.output, command.implied)
    note = read.note
    if read.check_n is not None:  # onnxsim's IN OUT N: --check N
        if settings.check.n not in (0, read.check_n):
            raise InputError(f"{read.check_n}: onnxsim's check_n, and --check "
                             f"{settings.check.n}: give one")
        settings = dataclasses.replace(settings, check=dataclasses.replace(
            settings.check, n=read.check_n))
    if command.implied:  # one line says both: the command, and how IN OUT was read
        shown = " ".join(read.sources) + (f" -o {read.output}" if read.output else "") + (
            f" --check {read.check_n}" if read.check_n is not None else "")
        replacing = "; it is the input: replaced in place, as onnxsim does" if read.in_place \
            else "; it exists: replaced, as onnxsim does" if read.replaces else ""
        note = f"onnxfold: running onnxfold optimize {shown}" + (
            f" (onnxsim's IN OUT: the second path is the output{replacing})"
            if read.note else "")
    notes = [*command.notes, *([note] if note is not None else [])]
    note = "\n".join(notes) if notes else None
    command = dataclasses.replace(command, sources=read.sources, output=read.output,
                                  settings=settings)
    judgement = judged(settings)  # every option, before a batch plans or a model is claimed
    if is_batch(list(command.sources), command.output):
        if note is not None and not settings.report.quiet:
            print(note, file=sys.stderr)
        return batch.run(command, debug)
    if command.batch.job_timeout is not None:
        raise InputError("--job-timeout: applies to batches (several models, or -o DIR/)")
    if command.batch.shard is not None:
        raise InputError("--shard: splits a batch (several models, a directory, or -o DIR/)")
    return optimize_model(ModelJob.of(command.sources[0], command.output), settings,
                          collect_after=not exiting, note=note, judgement=judgement)


def optimize_model(job: ModelJob, settings: OptimizeSettings, collect_after: bool = True,
                   note: str | None = None, judgement: Judged | None = None) -> int:
    """Optimize one model; the exit code (0, or 1 when the check failed). ``note``: how the
    command line was read, said once the model is written (never over an error's one line);
    ``judgement``: the options as judged already (else judged here: a batch's job), before
    anything is claimed."""
    from onnxfold.io.outputs import OutputGuard

    judgement = judgement or judged(settings)
    guard = OutputGuard([job.source], job.replaces)
    try:
        claimed = _claim(job, settings, guard)
        with _start_prefill(claimed, settings) as prefill:
            reached("claimed")
            with long_lived(collect_after=collect_after):
                saved = _fold_and_save(claimed, settings, prefill, judgement)
                if note is not None and not settings.report.quiet:
                    print(note, file=sys.stderr)  # never over an error: that is one line
                return report_run(claimed, settings, saved)
    finally:
        guard.close()


def _claim(job: ModelJob, settings: OptimizeSettings, guard: OutputGuard) -> Claimed:
    """Claim the job's outputs with ``guard`` (``onnxfold.io.door``), their directories
    pinned."""
    from onnxfold.io.door import claimed

    inputs, output, report = settings.check.comparison.inputs, job.output, settings.report
    data = output + expected_data_suffix(job.source) if output is not None and \
        settings.save.external_data == "yes" else None
    claimed([(output, "output model"), (data, "output model's external data"),
             (report.json, "JSON report"), (report.html, "HTML report")],
            [inputs] if inputs else [], guard=guard)
    return Claimed(job, guard, guard.pinned(output) if output is not None else None)


def _start_prefill(claimed: Claimed, settings: OptimizeSettings
                   ) -> AbstractContextManager[OutputPrefill | None]:
    """Warm the output's temporary file while the model folds (``onnxfold.io.prefill``).

    The output is expected to be about as big as the input .onnx; ``--check`` writes elsewhere
    first, small models gain nothing, and a dry run (no target) writes no model.
    """
    from onnxfold.io.prefill import AVAILABLE, OutputPrefill

    source, target = claimed.job.source, claimed.target
    size = os.path.getsize(source) if os.path.isfile(source) else 0
    if target is None or settings.check.n or not settings.save.prefill or \
            size < _PREFILL_MIN or not AVAILABLE:
        return contextlib.nullcontext()
    return OutputPrefill(target, size)


_PREFILL_MIN = 16 << 20


def _fold_and_save(claimed: Claimed, settings: OptimizeSettings,
                   prefill: OutputPrefill | None, judgement: Judged) -> Saved:
    """Fold the job's model, then save (and check) it; the progress line shows both. What
    the options name of the model is judged as it is read, before any pass."""
    from onnxfold.app.progress import TerminalProgress
    from onnxfold.io import load_model
    from onnxfold.pipeline.optimizer import optimize
    from onnxfold.pipeline.phases import Phases

    source = claimed.job.source
    options = judgement.comparison
    checking = options if settings.check.n else None
    progress = None
    dims: dict[str, int] = {}  # the check's, from --test-input-shape
    try:  # optimize loads the model itself: its first shape inference reuses what was read
        progress = TerminalProgress() if _on_terminal(sys.stderr) and \
            not settings.report.quiet else None
        phases = Phases(progress)
        result = optimize(source, settings.fold, check=settings.check_input,
                          catalogue=settings.catalogue, progress=phases.fold_progress,
                          phases=phases,
                          pristine=lambda: load_model(source, check=False),
                          loaded=functools.partial(_loaded, claimed, judgement, settings,
                                                   dims),
                          record_rewrites=checking is not None)
        reached("folded")
        if checking is not None and dims:
            checking = dataclasses.replace(checking, dims={**dims, **checking.dims})
        return save(claimed, settings, result, phases, prefill, checking, options)
    finally:
        if progress is not None:
            progress.close()


def _loaded(claimed: Claimed, judgement: Judged, settings: OptimizeSettings,
            dims: dict[str, int], model: ir.Model) -> None:
    """Once the input is read: refuse an output that would replace one of its files, and
    options that name what the model does not have (``judgement.judged_against``); the
    check's ``dims`` that ``--test-input-shape`` gives the model as declared."""
    from onnxfold.io.writer import input_files

    reached("loaded")
    claimed.guard.protect(input_files(model))
    dims.update(judged_against(model, claimed.job.source, judgement.comparison,
                               judgement.test_shapes, settings.fold.fixed_shapes))


def _on_terminal(stream) -> bool:
    """Whether ``stream`` is a terminal (False where it is closed: ``2>&-`` leaves None)."""
    return stream is not None and not stream.closed and stream.isatty()
