"""How an optimized model is saved: checked first (``--check N``: written beside, compared, then
moved into place), written as it is (loaded in onnxruntime before it replaces anything), or
not at all (a dry run: a ``--check`` compares the model in memory).

Every file is written through the job's one ``OutputGuard`` and into the output pinned when it
was claimed (``optimize_command.py``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from onnxfold.app.commands import ModelJob, OptimizeSettings
from onnxfold.errors import InputError, one_line
from onnxfold.host.points import reached

if TYPE_CHECKING:
    import onnx

    from onnxfold.check.result import CompareResult
    from onnxfold.check.running.options import CompareOptions
    from onnxfold.io.outputs import OutputGuard
    from onnxfold.io.pinned import PinnedOutput
    from onnxfold.io.prefill import OutputPrefill
    from onnxfold.io.writer import SaveInfo
    from onnxfold.latency.measure import LatencyResult
    from onnxfold.pipeline.optimizer import OptimizeResult
    from onnxfold.pipeline.phases import Phases


@dataclass
class Claimed:
    """A model job with its outputs claimed: the guard that claimed them (and protects the
    input and its files), and the output model pinned (None: a dry run)."""

    job: ModelJob
    guard: OutputGuard
    target: PinnedOutput | None


@dataclass
class Saved:
    """What the fold and the save left: the optimized model and its report, the clock, the
    check's comparison (None: no check ran), what was written (None: nothing), why the
    check could not run ("" if it ran), ``--latency``'s timings, measured on the written
    model before it replaced anything; ``checking``: how the check compared (its dims
    ``--test-input-shape`` completed; None: no check), the input as it was read, and the
    comparison's options as judged before the claim (``options``)."""

    result: OptimizeResult
    phases: Phases
    check: CompareResult | None = None
    info: SaveInfo | None = None
    not_run: str = ""
    latency: LatencyResult | None = None
    checking: CompareOptions | None = None
    options: CompareOptions | None = None  # the comparison's options, as judged

    def compared(self) -> CompareOptions:
        """How ``--latency`` and the signature's first input set feed the models: as the
        check did where one ran, else by the comparison's options judged before the claim
        (``onnxfold.app.judgement``)."""
        options = self.checking or self.options
        assert options is not None, "the options are judged before the run"
        return options


def save(claimed: Claimed, settings: OptimizeSettings, result: OptimizeResult, phases: Phases,
         prefill: OutputPrefill | None, checking: CompareOptions | None,
         options: CompareOptions) -> Saved:
    """Save ``result``'s model as ``settings`` ask: checked, plain, or (a dry run) not at all
    (``checking``: the check's options, None: no check; ``options``: the comparison's, as
    judged)."""
    saved = Saved(result, phases, checking=checking, options=options)
    if claimed.target is None:  # a dry run: a --check compares in memory
        if checking is not None:
            with phases.phase("check"), _could_not_run(saved):
                saved.check = _check_in_memory(claimed.job, settings, result, checking, phases)
    elif checking is not None or settings.report.latency:  # published once checked, timed
        with phases.phase("check" if checking is not None else "save"), _could_not_run(saved):
            saved.info, saved.check = _save_checked(claimed, claimed.target, settings, saved,
                                                    checking)
    else:
        saved.info = _save_plain(claimed, claimed.target, settings, result, prefill, phases)
    return saved


def _save_checked(claimed: Claimed, target: PinnedOutput, settings: OptimizeSettings,
                  saved: Saved, checking: CompareOptions | None
                  ) -> tuple[SaveInfo | None, CompareResult | None]:
    """``--check N`` and ``--latency N``: written beside the output, compared with the input,
    timed, moved into place only then (``checked_save.py``)."""
    from onnxfold.app.checked_save import save_checked

    result, phases = saved.result, saved.phases

    def measure(path: str) -> None:
        saved.latency = measure_latency_of(claimed, settings, saved, path)

    return save_checked(result.model, claimed.job.source, target, n=settings.check.n,
                        options=checking, guard=claimed.guard, evidence=result.evidence,
                        external_data=settings.save.external,
                        saving=lambda done, total: phases.detail(
                            "writing " + _mib_of(done, total)),
                        checking=phases.detail,
                        measure=measure if settings.report.latency else None)


def measure_latency_of(claimed: Claimed, settings: OptimizeSettings, saved: Saved,
                       optimized: str | None = None) -> LatencyResult:
    """``--latency N``: the original and ``optimized`` (the written model, before it is
    published) timed in onnxruntime (``onnxfold.latency.measure``), both from files; a dry
    run's written to a scratch directory for the time it takes (a session made from bytes in
    memory is slower to create than from a file)."""
    import shutil

    from onnxfold.host import endings
    from onnxfold.io import save_model
    from onnxfold.io.tempfiles import scratch_directory
    from onnxfold.latency.measure import measure_latency

    scratch = None
    target = claimed.target
    try:
        with saved.phases.phase("latency"), _not_written(target):
            if optimized is None:
                scratch = scratch_directory("onnxfold-latency-")
                optimized = os.path.join(scratch, os.path.basename(claimed.job.source))
                save_model(saved.result.model, optimized, protect={claimed.job.source})
            reached("latency")
            options = saved.compared()
            latency = measure_latency(claimed.job.source, optimized, runs=settings.report.latency,
                                      threads=settings.report.latency_threads,
                                      dims=options.dims, int_ranges=options.int_ranges,
                                      custom_op_libraries=options.custom_op_libraries,
                                      progress=saved.phases.detail)
    finally:
        if scratch is not None:
            with endings.deferred():
                shutil.rmtree(scratch, ignore_errors=True)
    # the output as named (not the temporary file's path), or what a dry run timed
    latency.model_b = target.given if target is not None else "(folded, not written)"
    return latency


def _save_plain(claimed: Claimed, target: PinnedOutput, settings: OptimizeSettings,
                result: OptimizeResult, prefill: OutputPrefill | None, phases: Phases
                ) -> SaveInfo:
    """The model written as it is; loaded in onnxruntime before it replaces anything, when
    that is cheap (``app/verify.py``; the report says when it is not), and whatever its size
    when ``--target-opset`` converted it (onnx's converter can write what onnxruntime
    refuses)."""
    from onnxfold.app.verify import VERIFY_LIMIT, verifiable, verifier
    from onnxfold.io import save_model

    converted = settings.fold.target_opset is not None
    cheap, unverified = (False, None) if not settings.save.verify else \
        (True, None) if converted else verifiable(result.model)
    if unverified is not None:
        result.report.warnings.append(unverified)
    verify = verifier(claimed.job.source, limit=None if converted else VERIFY_LIMIT,
                      input_shapes=settings.fold.fixed_shapes,
                      target_opset=settings.fold.target_opset,
                      warn=result.report.warnings.append) if cheap else None
    with phases.phase("save"):
        return save_model(result.model, target, external_data=settings.save.external,
                          prefill=prefill, guard=claimed.guard, verify=verify,
                          progress=lambda done, total: phases.detail(_mib_of(done, total)))


def _check_in_memory(job: ModelJob, settings: OptimizeSettings, result: OptimizeResult,
                     checking: CompareOptions, phases: Phases) -> CompareResult:
    """A dry run's ``--check``: the folded model, as a proto in memory, against the input."""
    from onnxfold.check.compare import compare_models

    check = compare_models(job.source, in_memory(job, result), settings.check.n, checking,
                           progress=phases.detail, evidence=result.evidence)
    check.model_b = "(folded, not written)"
    return check


IN_MEMORY_CHECK_LIMIT = 1_800_000_000  # bytes of weights a dry run's check holds as one proto


def in_memory(job: ModelJob, result: OptimizeResult) -> onnx.ModelProto:
    """The folded model as a proto, for a dry run's check (2 GiB at most)."""
    if result.report.initializer_bytes_after > IN_MEMORY_CHECK_LIMIT:
        raise InputError(f"{job.source}: without -o the folded model is compared in memory, "
                         "and it is over protobuf's 2 GiB limit; give -o OUT to write it")
    return result.to_proto()


@contextlib.contextmanager
def _not_written(target: PinnedOutput | None) -> Iterator[None]:
    """A machine that ran short while ``--latency`` timed the output (before it replaced
    anything): its line says that nothing was written."""
    from onnxfold.errors import ResourceLimitError

    try:
        yield
    except ResourceLimitError as e:
        where = f"nothing was written to {target.given}" if target is not None else \
            "dry run: nothing written"
        raise ResourceLimitError(f"{e}; {where}") from None


@contextlib.contextmanager
def _could_not_run(saved: Saved) -> Iterator[None]:
    """Catch a check whose reference does not run on the feeds, keeping why in ``saved``."""
    from onnxfold.check.compare import CheckCouldNotRun

    try:
        yield
    except CheckCouldNotRun as e:
        saved.not_run = one_line(e)
        saved.check = e.result  # what was shown before it stopped, if anything


def _mib_of(done: int, total: int) -> str:
    """``120.0/480.0 MiB``: the save phase's detail."""
    return f"{done / 2**20:.1f}/{total / 2**20:.1f} MiB"
