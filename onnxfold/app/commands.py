"""What a command line asks for, as typed values: parsed once (``onnxfold.app.parser``), then
handed to the command that runs it.

An ``optimize`` command is its inputs and output, how a batch of them runs
(:class:`BatchRequest`), and the :class:`OptimizeSettings` every model is run with: the fold
options, how the output is saved, the accuracy check and what is reported. One model of it is
a :class:`ModelJob` (its source, its output and what that may replace); a batch gives each of
its job processes the job and the settings, pickled, never the parser's namespace. Nothing
here is written to after the parse; a command that needs a variant makes a copy
(``dataclasses.replace``).

A value holds the flags as given (``--dim batch=2`` stays text) where reading them can fail
(the parse prints no error of its own, and a batch hands them to its jobs as typed): an
``optimize`` command's are all read and judged in one step before anything is claimed
(``onnxfold.app.judgement``), whether a check, ``--latency`` or the signature uses them or not.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from onnxfold.check.running.levels import DEFAULT_LEVEL
from onnxfold.host.interruptible import DEFAULT_LIMIT
from onnxfold.io.data_names import with_own_data
from onnxfold.pipeline.options import FoldOptions

if TYPE_CHECKING:
    from onnxfold.app.shards import Shard
    from onnxfold.check.running.options import CompareOptions
    from onnxfold.declare.catalogue import Catalogue


@dataclass(frozen=True)
class ComparisonFlags:
    """How two models are compared in onnxruntime (``--inputs``, ``--dim``, ``--int-range``,
    ``--seed``, ``--custom-op-library``, ``--rtol``, ``--atol``, ``--ort-level``,
    ``--no-fold-verification``), as given; ``inference_timeout``: the seconds one of its
    inferences (and ``--latency``'s) may take (``--inference-timeout``)."""

    inputs: str | None = None
    dims: tuple[str, ...] = ()
    int_ranges: tuple[str, ...] = ()
    seed: int = 0
    custom_op_libraries: tuple[str, ...] = ()
    rtol: float | None = None
    atol: float | None = None
    level: str = DEFAULT_LEVEL
    fold_verification: bool = True
    inference_timeout: float = DEFAULT_LIMIT

    def resolved(self) -> CompareOptions:
        """The comparison's settings: ``--dim`` and ``--int-range`` parsed, each custom-op
        library an existing file (InputError naming the first that is not)."""
        from onnxfold.check.inputs.feeds import parse_dims, parse_int_ranges
        from onnxfold.check.running.options import CompareOptions
        from onnxfold.runtime.custom_ops import checked_libraries

        return CompareOptions(
            inputs=self.inputs, dims=parse_dims(self.dims),
            int_ranges=parse_int_ranges(self.int_ranges), seed=self.seed, rtol=self.rtol,
            atol=self.atol, custom_op_libraries=checked_libraries(self.custom_op_libraries),
            level=self.level, verify=None if self.fold_verification else False)


@dataclass(frozen=True)
class CheckRequest:
    """``--check N``: compare the output with the input on ``n`` input sets (0: no check);
    ``shapes``: onnxsim's ``--test-input-shape`` (the input shapes the check runs the
    original at, as text: their dynamic dims join ``--dim``'s)."""

    n: int = 0
    comparison: ComparisonFlags = field(default_factory=ComparisonFlags)
    shapes: tuple[str, ...] = ()


@dataclass(frozen=True)
class SaveRequest:
    """How the output is written: ``external_data`` (``auto``, ``yes``, ``no``), loaded in
    onnxruntime before it replaces anything (``verify``; off: ``--no-verify``), its file's
    pages warmed while the model folds (``prefill``; off: ``--no-prefill``)."""

    external_data: str = "auto"
    verify: bool = True
    prefill: bool = True

    @property
    def external(self) -> bool | None:
        """``save_model``'s ``external_data``: None lets the size decide."""
        return {"auto": None, "yes": True, "no": False}[self.external_data]


@dataclass(frozen=True)
class ReportRequest:
    """What a run reports: the ``--json`` and HTML (``--report``) files, ``--quiet``,
    ``--verbose``, ``--explain``, and ``--latency N`` runs with ``--latency-threads``."""

    json: str | None = None
    html: str | None = None
    quiet: bool = False
    verbose: bool = False
    explain: bool = False
    latency: int = 0
    latency_threads: int = 1


@dataclass(frozen=True)
class OptimizeSettings:
    """What every model of an ``optimize`` command is run with. ``check_input``: onnx's
    checker runs on the input (off: ``--skip-check``); ``catalogue``: the rules (None: the
    installed ones; no flag sets it: a program running the command line hands its own, as a
    test injecting a rule does)."""

    fold: FoldOptions = field(default_factory=FoldOptions)
    check_input: bool = True
    save: SaveRequest = field(default_factory=SaveRequest)
    check: CheckRequest = field(default_factory=CheckRequest)
    report: ReportRequest = field(default_factory=ReportRequest)
    catalogue: Catalogue | None = None

    def reported(self) -> dict[str, Any]:
        """The command-line settings the JSON report's ``options`` records besides the fold
        options, under their flags' names."""
        flags = self.check.comparison
        return {"check": self.check.n, "inputs": flags.inputs, "seed": flags.seed,
                "rtol": flags.rtol, "atol": flags.atol, "dim": list(flags.dims),
                "int_range": list(flags.int_ranges), "external_data": self.save.external_data,
                "skip_check": not self.check_input, "no_verify": not self.save.verify,
                "ort_level": flags.level, "no_fold_verification": not flags.fold_verification,
                "latency": self.report.latency, "latency_threads": self.report.latency_threads}


@dataclass(frozen=True)
class ModelJob:
    """One model to optimize: where it is read (``source``), where it is written
    (``output``; None: a dry run) and the files that output may replace (``replaces``: the
    input itself and its ``.data`` or ``_data``, when ``-o`` names the input)."""

    source: str
    output: str | None
    replaces: tuple[str, ...] = ()

    @classmethod
    def of(cls, source: str, output: str | None) -> ModelJob:
        """The job of optimizing ``source`` into ``output``: it may replace the input itself
        (and its ``.data`` or ``_data`` beside it) when the output is the input."""
        if output is None:
            return cls(source, None)
        try:
            same = os.path.samefile(source, output)
        except OSError:
            same = False
        return cls(source, output, tuple(with_own_data([output])) if same else ())


@dataclass(frozen=True)
class JobOrder:
    """What a batch hands one of its job processes (pickled, ``onnxfold.app.job``): the
    model's job, the settings it runs with (its report into the batch's scratch directory,
    quiet), and whether errors print their traceback."""

    job: ModelJob
    settings: OptimizeSettings
    debug: bool = False


@dataclass(frozen=True)
class BatchRequest:
    """How several models run: ``jobs`` at a time (``-j``), each killed after
    ``job_timeout`` seconds, directories searched ``recursive``-ly, only those of ``shard``
    (``--shard K/N``)."""

    jobs: int | None = None
    job_timeout: float | None = None
    recursive: bool = False
    shard: Shard | None = None


@dataclass(frozen=True)
class OptimizeCommand:
    """``onnxfold optimize``: the models as given (several, or a directory: a batch), the
    output (a directory for a batch; None: a dry run), and what each model is run with;
    ``implied``: no command was named (``onnxfold IN OUT``), the run says it is ``optimize``;
    ``notes``: lines on how the command line was read (onnxsim's pass names with no
    counterpart), said once the outputs are claimed."""

    sources: tuple[str, ...]
    output: str | None = None
    settings: OptimizeSettings = field(default_factory=OptimizeSettings)
    batch: BatchRequest = field(default_factory=BatchRequest)
    implied: bool = False
    notes: tuple[str, ...] = ()

    def written(self) -> tuple[str | None, ...]:
        """The files it writes, as given."""
        return self.output, self.settings.report.json, self.settings.report.html


@dataclass(frozen=True)
class CompareCommand:
    """``onnxfold compare A B``: ``n`` input sets, the comparison as a ``--json`` file and an
    HTML page (``--report``) too."""

    a: str
    b: str
    n: int = 1
    json: str | None = None
    comparison: ComparisonFlags = field(default_factory=ComparisonFlags)
    html: str | None = None

    def written(self) -> tuple[str | None, ...]:
        """The files it writes, as given."""
        return (self.json, self.html)


@dataclass(frozen=True)
class VerifyFoldsCommand:
    """``onnxfold verify-folds A B``: every folded tensor of B re-derived from A (the
    comparison flags say how A's inputs are bound: ``--dim``, ``--inputs``, ...; each
    inference at most ``comparison.inference_timeout`` seconds); its verdicts as ``--json``
    and an HTML page (``--report``) too."""

    a: str
    b: str
    json: str | None = None
    comparison: ComparisonFlags = field(default_factory=lambda: ComparisonFlags())
    html: str | None = None

    def written(self) -> tuple[str | None, ...]:
        """The files it writes, as given."""
        return (self.json, self.html)


@dataclass(frozen=True)
class SplitCommand:
    """``onnxfold split``: the model cut around its ``runtime_constants`` into the ``output``
    directory; compile-time constants folded first (else written as a model of their own)."""

    source: str
    runtime_constants: tuple[str, ...]
    output: str
    fold_compile_time: bool = True
    fold: FoldOptions = field(default_factory=FoldOptions)
    check_input: bool = True

    def written(self) -> tuple[str | None, ...]:
        """The files it writes, as given (a directory)."""
        return (self.output,)


@dataclass(frozen=True)
class SplitAdapterCommand:
    """``onnxfold split-adapter MODEL -o BASE --adapter FILE``: the model's LoRA weights
    lifted to inputs of the base model ``output``, their arrays written to the onnxruntime
    adapter file ``adapter``."""

    source: str
    output: str
    adapter: str
    check_input: bool = True

    def written(self) -> tuple[str | None, ...]:
        """The files it writes, as given."""
        return (self.output, self.adapter)


@dataclass(frozen=True)
class RunCommand:
    """``onnxfold run``: the model run on ``inputs`` (an .npz) with its runtime constants
    folded once by ``backend``, ``repeat`` times; optionally compared with onnxruntime's ways
    of running it, and its outputs written to ``output``; each inference (the fold's and each
    call's) at most ``inference_timeout`` seconds."""

    model: str
    inputs: str
    runtime_constants: tuple[str, ...] = ()
    backend: str = "ort"
    repeat: int = 1
    cache_dir: str | None = None
    adapters: tuple[str, ...] = ()
    compare: bool = False
    threads: int | None = None
    output: str | None = None
    custom_op_libraries: tuple[str, ...] = ()
    fold: FoldOptions = field(default_factory=FoldOptions)
    inference_timeout: float = DEFAULT_LIMIT

    def written(self) -> tuple[str | None, ...]:
        """The files it writes, as given."""
        return (self.output,)


@dataclass(frozen=True)
class InspectCommand:
    """``onnxfold inspect``: opsets, counts and what is still foldable, as text or JSON."""

    source: str
    json: bool = False
    check_input: bool = True

    def written(self) -> tuple[str | None, ...]:
        """The files it writes: none."""
        return ()


@dataclass(frozen=True)
class RulesCommand:
    """``onnxfold rules``: the catalogue, or its coverage of the ONNX node tests (written to
    ``json``), measured by ``jobs`` processes."""

    coverage: bool = False
    json: str | None = None
    jobs: int | None = None

    def written(self) -> tuple[str | None, ...]:
        """The files it writes, as given."""
        return (self.json,)


Command = (OptimizeCommand | CompareCommand | VerifyFoldsCommand | SplitCommand | RunCommand
           | SplitAdapterCommand | InspectCommand | RulesCommand)


@dataclass(frozen=True)
class CommandLine:
    """A parsed command line: the command, and whether errors print their traceback
    (``--debug``)."""

    command: Command
    debug: bool = False


def inference_limit(command: Command) -> float | None:
    """The seconds each onnxruntime inference of ``command`` may take
    (``--inference-timeout``; ``onnxfold.host.interruptible``)."""
    if isinstance(command, OptimizeCommand):
        return command.settings.check.comparison.inference_timeout
    if isinstance(command, CompareCommand | VerifyFoldsCommand):
        return command.comparison.inference_timeout
    if isinstance(command, RunCommand):
        return command.inference_timeout
    return DEFAULT_LIMIT


def written_directories(command: Command) -> list[str]:
    """The directories ``command`` writes into (its temporary files go beside each output;
    a split's output is a directory, which it writes into as well)."""
    found = []
    for path in command.written():
        if path is not None:
            found.append(os.path.dirname(os.path.abspath(path)))
            if isinstance(command, SplitCommand):
                found.append(os.path.abspath(path))
    return found
