"""What an optimized model does for deployment: its latency and size beside the original's.

People optimize a model so that it loads and runs faster; this measures both in onnxruntime on
the CPU, the way a model is deployed: session creation and one inference, for the original
and the optimized model, at onnxruntime's default optimization level (``all``) and with its
optimizations off (``disable``: what runs where onnxruntime's own graph optimizations do not,
and what a model pays for work a fold left in the graph), with a stated number of threads.

Runs are interleaved (original, optimized, optimized, original, ...) after warm-up runs: a
machine's noise then falls on both models alike. Each model's times are given as a median and
a spread, and the models are compared run by run (each optimized run against the original run
beside it): the ratio's median and spread, and a verdict, *faster*, *slower* or *within noise*
where the spread covers 1.0x, from enough pairs only (``spread.py``). Session creation is timed
:data:`CREATIONS` times per model, interleaved too (each model created first in half the
pairs), from files (a dry run's output is written to a scratch file first:
a session made from bytes in memory is slower to create than from a file). The inputs are the
check's first input set (:mod:`onnxfold.check.inputs.feeds`: realistic sizes, the graph's dim
relations). Both sessions are held at once where both fit the memory limit, else one model is
timed after the other (and the result says so; its ratios then pair runs taken apart).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

import numpy as np
import onnx
import onnx_ir as ir

from onnxfold.check.inputs.feeds import FeedPlan, shape_text
from onnxfold.check.outputs.doomed_bindings import FailedNodes
from onnxfold.check.outputs.reference_runs import run_reference
from onnxfold.check.running import memory as memory_room
from onnxfold.check.running.models import ModelRef, graph_of, label_of
from onnxfold.check.running.options import checked_dims
from onnxfold.check.running.runner import MachineShort, WholeSession, open_session
from onnxfold.errors import InputError, OnnxfoldError, ResourceLimitError
from onnxfold.host import heap, interruptible, limits
from onnxfold.host.machine import checked_threads, cpu_model
from onnxfold.host.terminal import printable
from onnxfold.io.writer import input_files
from onnxfold.ir.graph import is_static_dim
from onnxfold.latency import MAX_RUNS
from onnxfold.latency.spread import MIN_PAIRS, QUARTILES_FROM, Spread, paired_ratios, verdict
from onnxfold.runtime import custom_ops

LEVELS = ("all", "disable")  # onnxruntime's default, and its optimizations off
# session creations timed per model and level: enough pairs for a verdict (spread.MIN_PAIRS),
# an even number so that each model is created first in half of them
CREATIONS = MIN_PAIRS
WARMUP = 2  # inference runs per model before timing
T = TypeVar("T")


@dataclass(frozen=True)
class Timing:
    """Every sample at one optimization level, in milliseconds, original's and optimized's:
    the session creations and the runs, each optimized one taken beside its original one
    (``paired``: interleaved; False: one model after the other)."""

    level: str
    creates: tuple[tuple[float, ...], tuple[float, ...]]
    runs: tuple[tuple[float, ...], tuple[float, ...]]
    paired: bool = True

    @property
    def create_ms(self) -> tuple[float, float]:
        """Median session creation: original, optimized."""
        return (statistics.median(self.creates[0]), statistics.median(self.creates[1]))

    @property
    def run_ms(self) -> tuple[float, float]:
        """Median inference: original, optimized."""
        return (statistics.median(self.runs[0]), statistics.median(self.runs[1]))

    @property
    def run_ratio(self) -> float:
        return self.run_ms[1] / self.run_ms[0] if self.run_ms[0] else float("nan")

    @property
    def create_ratio(self) -> float:
        return self.create_ms[1] / self.create_ms[0] if self.create_ms[0] else float("nan")

    def compared(self, which: str) -> dict[str, Any]:
        """``run`` or ``create``: each model's spread, the paired ratios' spread, the verdict."""
        a, b = self.runs if which == "run" else self.creates
        ratio = Spread.of(paired_ratios(a, b) or [float("nan")])
        return {"original": Spread.of(a).to_dict(), "optimized": Spread.of(b).to_dict(),
                "ratio": ratio.to_dict(), "verdict": verdict(ratio)}


@dataclass(kw_only=True)
class LatencyResult:
    """Latency and size of ``model_a`` (the original) and ``model_b`` (the optimized)."""

    model_a: str
    model_b: str
    runs: int
    threads: int
    feeds: list[str]  # "name dtype[shape]" of each input fed
    timings: list[Timing]
    file_bytes: tuple[int, int]  # the .onnx and its external data, each model
    dynamic_dims: tuple[list[str], list[str]]  # the symbolic input dims of each model
    interleaved: bool = True  # False: both sessions did not fit in memory at once
    notes: list[str] = field(default_factory=list)
    cpu: str = field(default_factory=cpu_model)  # the processor it was measured on

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["timings"] = [{"level": t.level, "create_ms": list(t.create_ms),
                            "run_ms": list(t.run_ms), "run_ratio": t.run_ratio,
                            "create_ratio": t.create_ratio, "run": t.compared("run"),
                            "create": t.compared("create")} for t in self.timings]
        data["file_bytes"], data["dynamic_dims"] = list(self.file_bytes), [
            list(d) for d in self.dynamic_dims]
        return data

    def summary(self) -> str:
        """Lines for the report: how it was measured, a line per level, sizes and dims."""
        how = "interleaved" if self.interleaved else "one model after the other (both did " \
            "not fit in memory at once)"
        lines = [f"latency      onnxruntime CPU ({self.cpu}), {self.threads} thread"
                 f"{'s' if self.threads != 1 else ''}, default session options; medians "
                 f"[quartiles; min-max below {QUARTILES_FROM} samples] of {self.runs} {how} "
                 f"runs after {WARMUP} warm-up and of {CREATIONS} session creations from the "
                 f"files; ratios run by run, a verdict from {MIN_PAIRS} pairs on",
                 f"{'':13}feeds " + ", ".join(self.feeds)]
        for t in self.timings:
            lines.append(f"{'':13}{LEVEL_NAMES.get(t.level, f'level {t.level}')}:")
            for which, label in (("run", "run"), ("create", "session")):
                lines.append(f"{'':15}{label:9}" + _compared_text(t.compared(which)))
        a_dims, b_dims = self.dynamic_dims
        lost = [d for d in a_dims if d not in b_dims]
        dims = ("dynamic dims kept: " + ", ".join(a_dims) if not lost else
                f"dynamic dims {', '.join(a_dims)} -> {', '.join(b_dims) or 'none'}") \
            if a_dims else "no dynamic dims"
        lines.append(f"{'size':13}{_mib(self.file_bytes[0])} -> {_mib(self.file_bytes[1])} "
                     f"on disk; {dims}")
        lines += [f"{'':13}{note}" for note in self.notes]
        return "\n".join(map(printable, lines))  # names escaped: each stays on its line


LEVEL_NAMES = {"all": "default level (all)", "disable": "optimizations off"}


def _compared_text(compared: dict[str, Any]) -> str:
    """``1.23 [1.20-1.31] -> 1.10 [1.05-1.20] ms: 0.89x [0.85-0.95], faster``."""
    a, b, ratio = compared["original"], compared["optimized"], compared["ratio"]
    scale, unit = (1e3, "us") if max(a["median"], b["median"]) < 1 else (1.0, "ms")
    return (f"{_spread_text(a, scale)} -> {_spread_text(b, scale)} {unit}: "
            f"{ratio['median']:.2f}x [{ratio['low']:.2f}-{ratio['high']:.2f}], "
            f"{compared['verdict']}")


def _spread_text(spread: dict[str, Any], scale: float) -> str:
    """``1.23 [1.20-1.31]``: a median and its spread, times ``scale``."""
    return (f"{_number(spread['median'] * scale)} [{_number(spread['low'] * scale)}-"
            f"{_number(spread['high'] * scale)}]")


def _number(value: float) -> str:
    """Three significant digits, whole numbers from 100 on."""
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def measure_latency(a: ModelRef, b: ModelRef, *, runs: int = 20, threads: int = 1,
                    levels: Sequence[str] = LEVELS, dims: Mapping[str, int] | None = None,
                    int_ranges: Mapping[str, tuple[int, int]] | None = None,
                    custom_op_libraries: Sequence[str | os.PathLike] = (),
                    progress: Callable[[str], None] | None = None) -> LatencyResult:
    """Session creation and inference latency of ``a`` (the original) and ``b`` (the
    optimized model), paths or ``onnx.ModelProto``, in onnxruntime on the CPU with
    ``threads`` intra-op threads, at each of ``levels``; medians of ``runs`` interleaved runs.
    ``dims``/``int_ranges`` shape the inputs as in :func:`~onnxfold.check.compare.compare`.
    Raises InputError where a model cannot be loaded or run, or there is not memory for one
    session, ResourceLimitError where the machine ran short (memory, a thread, a descriptor:
    could not run, never a bug)."""
    with _machine_short(), heap.apart():  # (its collections walk what it makes)
        return _measure(a, b, runs, threads, levels, dims, int_ranges, custom_op_libraries,
                        progress)


@contextlib.contextmanager
def _machine_short() -> Iterator[None]:
    """What the machine ran short of, wherever in the timing it did (the check's runner's
    ``MachineShort``, or onnxruntime's own error in a timed run), as ResourceLimitError: the
    latency could not run; the models may be fine."""
    try:
        yield
    except OnnxfoldError:
        raise
    except MachineShort as e:
        raise ResourceLimitError(f"latency: could not run: {e}") from None
    except Exception as e:
        short = limits.shortage(e)
        if short is None:
            raise
        raise ResourceLimitError(f"latency: could not run: {short}") from None


def _measure(a: ModelRef, b: ModelRef, runs: int, threads: int, levels: Sequence[str],
             dims: Mapping[str, int] | None, int_ranges: Mapping[str, tuple[int, int]] | None,
             custom_op_libraries: Sequence[str | os.PathLike],
             progress: Callable[[str], None] | None) -> LatencyResult:
    """:func:`measure_latency`'s work."""
    tell = progress or (lambda text: None)
    if not 1 <= runs <= MAX_RUNS:
        raise InputError(f"latency: runs ({runs}) must be from 1 to {MAX_RUNS:,}")
    try:
        checked_threads(threads, "latency: threads")
    except ValueError as e:
        raise InputError(str(e)) from None
    checked_dims(dims)
    libraries = custom_ops.checked_libraries(custom_op_libraries)
    label_a, label_b = label_of(a, "model A"), label_of(b, "model B")
    graph_a, graph_b = graph_of(a, label_a), graph_of(b, label_b)
    weights = [memory_room.weighed(g) for g in (graph_a, graph_b)]
    heap.prepare()
    free = memory_room.room()
    together = free is None or sum(memory_room.session_bytes(*w) for w in weights) <= free
    if not together:
        try:
            memory_room.check_room(*max(weights, key=lambda w: memory_room.session_bytes(*w)))
        except MemoryError as e:
            raise InputError(f"latency: {e}".replace("the check needs", "it needs")
                             .replace("or without --check", "or without --latency")) from None

    def opener(model: ModelRef, label: str, level: str) -> Callable[[], Any]:
        return lambda: open_session(model, label, libraries, level, threads=threads,
                                    referenced=False)  # (created as a user's is)

    feeds, described = _feeds(opener(a, label_a, "disable"), label_a, graph_a, dims, int_ranges,
                              _static_dims(graph_b))
    result = LatencyResult(
        model_a=label_a, model_b=label_b, runs=runs, threads=threads, feeds=described,
        timings=[], file_bytes=(_file_bytes(a, graph_a), _file_bytes(b, graph_b)),
        dynamic_dims=(_symbolic_dims(graph_a), _symbolic_dims(graph_b)), interleaved=together)
    del graph_a, graph_b
    for level in levels:
        tell(f"latency, level {level}")
        openers = (opener(a, label_a, level), opener(b, label_b, level))
        result.timings.append(_timing(level, openers, (label_a, label_b), feeds, runs,
                                      together))
        heap.release()
    return result


def _static_dims(graph: ir.Model) -> dict[str, dict[int, int]]:
    """The static dims of ``graph``'s inputs, by input and axis: where the optimized model
    fixes a dim the original leaves dynamic (``--input-shape``), both are fed that size."""
    return {str(v.name): {axis: d for axis, d in enumerate(v.shape or ()) if isinstance(d, int)}
            for v in graph.graph.inputs}


def _feeds(open_a: Callable[[], Any], label: str, graph: ir.Model,
           dims: Mapping[str, int] | None, int_ranges: Mapping[str, tuple[int, int]] | None,
           pinned: Mapping[str, Mapping[int, int]]
           ) -> tuple[dict[str, np.ndarray], list[str]]:
    """The check's first input set for model A (``pinned``: the dims model B fixes, by input
    and axis), and how each input is shaped: found as the check finds it (``run_reference``),
    so that where A cannot run the plan's first guess of a dim (an audio model's length of
    16, an image side of 224) the timing runs the guess that ran, as the check does."""
    session = open_a()
    plan = FeedPlan(session, label, graph, {}, dims or {}, int_ranges or {}, pinned)
    outputs = [o.name for o in session.get_outputs()]
    reference = run_reference(session, label, outputs, plan, 0, 1, None,
                              failures=FailedNodes(graph), every_binding=False)
    del session
    heap.release()
    return reference.feeds[0], [f"{info.name} {info.dtype}{shape_text(info.shape)}"
                                for info in plan.describe()]


def _timed_run(session: WholeSession, label: str, feeds: dict[str, np.ndarray]) -> float:
    """One inference's milliseconds (the feeds ran once bounded already: :func:`_feeds`),
    timed in the thread that runs it (``onnxfold.host.interruptible``: stopped by a signal
    or the inference time limit)."""

    def timed(options: Any) -> float:
        started = time.perf_counter()
        session.session.run(None, feeds, options)  # (onnxruntime's own, not bounded again)
        return (time.perf_counter() - started) * 1e3

    return interruptible.run(timed, what=label)


def rounds(calls: Sequence[Callable[[], T]], runs: int, warmup: int = WARMUP) -> list[list[T]]:
    """Each of ``calls`` ``runs`` times after ``warmup`` rounds, one call of each a round, each
    round starting one further along (two calls: A B B A A B ...), so that a machine's noise
    falls on every call alike and no call always runs after the same one, whose caches it
    would inherit. What each call returned in the timed rounds, in order (its time: each call
    times itself, where it runs)."""
    returned: list[list[T]] = [[] for _ in calls]
    for r in range(warmup + runs):
        for k in range(len(calls)):
            which = (r + k) % len(calls)
            value = calls[which]()
            if r >= warmup:
                returned[which].append(value)
    return returned


def _timing(level: str, openers: tuple[Callable[[], Any], Callable[[], Any]],
            labels: tuple[str, str], feeds: dict[str, np.ndarray], runs: int,
            together: bool) -> Timing:
    """Both models' session creations and runs: with both sessions held at once (``together``)
    the creations alternate, then the runs (:func:`rounds`); else (memory is tight) one model's
    creations and runs, its session let go, then the other's."""
    sessions: list[Any] = [None, None]

    def create(which: int) -> Callable[[], float]:
        def created() -> float:
            sessions[which] = None
            heap.release()
            started = time.perf_counter()
            sessions[which] = openers[which]()
            return (time.perf_counter() - started) * 1e3
        return created

    def run(which: int) -> Callable[[], float]:
        return lambda: _timed_run(sessions[which], labels[which], feeds)

    if together:
        creates = rounds([create(0), create(1)], CREATIONS, warmup=0)
        times = rounds([run(0), run(1)], runs)
    else:
        creates, times = [], []
        for which in (0, 1):
            creates += rounds([create(which)], CREATIONS, warmup=0)
            times += rounds([run(which)], runs)
            sessions[which] = None
            heap.release()
    return Timing(level, (tuple(creates[0]), tuple(creates[1])),
                  (tuple(times[0]), tuple(times[1])), paired=together)


def _file_bytes(model: ModelRef, graph: ir.Model) -> int:
    """The bytes of the model's file and its external data (a proto: its serialized size);
    a file named twice (its path as given, and as resolved: inline weights read from the model
    file itself) counts once."""
    if isinstance(model, onnx.ModelProto):
        return model.ByteSize()
    sizes = {}
    for path in input_files(graph):
        if os.path.isfile(path):
            info = os.stat(path)
            sizes[info.st_dev, info.st_ino] = info.st_size
    return sum(sizes.values())


def _symbolic_dims(graph: ir.Model) -> list[str]:
    """The named symbolic dims of the main graph's inputs, in order (``?`` for unnamed ones
    and Paddle's -1: any size)."""
    found: dict[str, None] = {}
    for value in graph.graph.inputs:
        if value.shape is None or value.const_value is not None:
            continue
        for dim in value.shape:
            if not is_static_dim(dim):
                found[str(getattr(dim, "value", None) or "?")] = None
    return list(found)
