"""What an optimized model does for deployment: its latency and size beside the original's.

People optimize a model so that it loads and runs faster; this measures both in onnxruntime on
the CPU, the way a model is deployed: session creation and one inference, for the original
and the optimized model, at onnxruntime's default optimization level (``all``) and with its
optimizations off (``disable``: what runs where onnxruntime's own graph optimizations do not,
and what a model pays for work a fold left in the graph), with a stated number of threads.

Runs are interleaved (original, optimized, optimized, original, ...) after warm-up runs, and
each time is a median: a machine's noise then falls on both models alike. Session creation is
timed :data:`CREATIONS` times per model, interleaved too. The inputs are the check's first
input set (:mod:`onnxfold.check.feeds`: realistic sizes, the graph's dim relations). Both
sessions are held at once where both fit the memory limit, else one model is timed after the
other (and the result says so).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from onnxfold.analysis.symbolic import ShapeSteps
from onnxfold.check import memory_room
from onnxfold.check.compare_options import checked_dims
from onnxfold.check.feeds import FeedPlan, shape_text
from onnxfold.check.sessions import ModelRef, graph_of, label_of, open_session, run_session
from onnxfold.declare.catalogue import Catalogue, load_catalogue
from onnxfold.errors import InputError
from onnxfold.host.machine import cpu_model
from onnxfold.io.writer import input_files
from onnxfold.runtime import custom_ops

LEVELS = ("all", "disable")  # onnxruntime's default, and its optimizations off
CREATIONS = 3  # session creations timed per model and level
WARMUP = 2  # inference runs per model before timing


@dataclass(frozen=True)
class Timing:
    """Median milliseconds at one optimization level: original, optimized."""

    level: str
    create_ms: tuple[float, float]
    run_ms: tuple[float, float]

    @property
    def run_ratio(self) -> float:
        return self.run_ms[1] / self.run_ms[0] if self.run_ms[0] else float("nan")

    @property
    def create_ratio(self) -> float:
        return self.create_ms[1] / self.create_ms[0] if self.create_ms[0] else float("nan")


@dataclass
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
                            "create_ratio": t.create_ratio} for t in self.timings]
        data["file_bytes"], data["dynamic_dims"] = list(self.file_bytes), [
            list(d) for d in self.dynamic_dims]
        return data

    def summary(self) -> str:
        """Lines for the report: how it was measured, a line per level, sizes and dims."""
        how = "interleaved" if self.interleaved else "one model after the other (both did " \
            "not fit in memory at once)"
        lines = [f"latency      onnxruntime CPU ({self.cpu}), {self.threads} thread"
                 f"{'s' if self.threads != 1 else ''}, default session options; median of "
                 f"{self.runs} {how} runs after {WARMUP} warm-up",
                 f"{'':13}feeds " + ", ".join(self.feeds)]
        for t in self.timings:
            name = LEVEL_NAMES.get(t.level, f"level {t.level}") + ":"
            run = f"run {_ms(t.run_ms[0])} -> {_ms(t.run_ms[1])} ({t.run_ratio:.2f}x)"
            lines.append(f"{'':13}{name:24}{run:38}session {_ms(t.create_ms[0])} -> "
                         f"{_ms(t.create_ms[1])} ({t.create_ratio:.2f}x)")
        a_dims, b_dims = self.dynamic_dims
        lost = [d for d in a_dims if d not in b_dims]
        dims = ("dynamic dims kept: " + ", ".join(a_dims) if not lost else
                f"dynamic dims {', '.join(a_dims)} -> {', '.join(b_dims) or 'none'}") \
            if a_dims else "no dynamic dims"
        lines.append(f"{'size':13}{_mib(self.file_bytes[0])} -> {_mib(self.file_bytes[1])} "
                     f"on disk; {dims}")
        lines += [f"{'':13}{note}" for note in self.notes]
        return "\n".join(lines)


LEVEL_NAMES = {"all": "default level (all)", "disable": "optimizations off"}


def _ms(value: float) -> str:
    """Milliseconds with three significant digits (microseconds, "us", below 1 ms)."""
    if value < 1:
        return f"{value * 1e3:.3g} us"
    return f"{value:.3g} ms" if value < 100 else f"{value:.0f} ms"


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def measure_latency(a: ModelRef, b: ModelRef, runs: int = 20, *, threads: int = 1,
                    levels: Sequence[str] = LEVELS, dims: Mapping[str, int] | None = None,
                    int_ranges: Mapping[str, tuple[int, int]] | None = None,
                    custom_op_libraries: Sequence[str | os.PathLike] = (),
                    progress: Callable[[str], None] | None = None,
                    catalogue: Catalogue | None = None) -> LatencyResult:
    """Session creation and inference latency of ``a`` (the original) and ``b`` (the
    optimized model), paths or ``onnx.ModelProto``, in onnxruntime on the CPU with
    ``threads`` intra-op threads, at each of ``levels``; medians of ``runs`` interleaved runs.
    ``dims``/``int_ranges`` shape the inputs as in :func:`~onnxfold.check.comparison.compare`.
    Raises InputError where a model cannot be loaded or run, or there is not memory for one
    session. ``catalogue``: whose shape steps relate the input dims (None: the installed
    rules)."""
    catalogue = load_catalogue() if catalogue is None else catalogue
    tell = progress or (lambda text: None)
    if runs < 1 or threads < 1:
        raise InputError(f"latency: runs ({runs}) and threads ({threads}) must be at least 1")
    checked_dims(dims)
    libraries = custom_ops.checked_libraries(custom_op_libraries)
    label_a, label_b = label_of(a, "model A"), label_of(b, "model B")
    graph_a, graph_b = graph_of(a, label_a), graph_of(b, label_b)
    weights = [memory_room.weight_bytes(g) for g in (graph_a, graph_b)]
    memory_room.prepare()
    free = memory_room.room()
    together = free is None or sum(map(memory_room.session_bytes, weights)) <= free
    if not together:
        try:
            memory_room.check_room(max(weights))
        except MemoryError as e:
            raise InputError(f"latency: {e}".replace("the check needs", "it needs")
                             .replace("or without --check", "or without --latency")) from None

    def opener(model: ModelRef, label: str, level: str) -> Callable[[], Any]:
        return lambda: open_session(model, label, libraries, level, threads=threads)

    feeds, described = _feeds(opener(a, label_a, "disable"), label_a, graph_a, dims, int_ranges,
                                 catalogue.shape_steps)
    result = LatencyResult(label_a, label_b, runs, threads, described, [],
                           (_file_bytes(a, graph_a), _file_bytes(b, graph_b)),
                           (_symbolic_dims(graph_a), _symbolic_dims(graph_b)), together)
    del graph_a, graph_b
    for level in levels:
        tell(f"latency, level {level}")
        open_a, open_b = opener(a, label_a, level), opener(b, label_b, level)
        if together:
            timing = _interleaved(level, open_a, open_b, (label_a, label_b), feeds, runs)
        else:
            timing = _one_after_the_other(level, open_a, open_b, (label_a, label_b), feeds,
                                          runs)
        result.timings.append(timing)
        memory_room.release()
    return result


def _feeds(open_a: Callable[[], Any], label: str, graph: ir.Model,
           dims: Mapping[str, int] | None, int_ranges: Mapping[str, tuple[int, int]] | None,
           steps: ShapeSteps) -> tuple[dict[str, np.ndarray], list[str]]:
    """The check's first input set for model A, and how each input is shaped."""
    session = open_a()
    plan = FeedPlan(session, label, graph, {}, dims or {}, int_ranges or {}, steps)
    feeds = plan.feeds(0)
    outputs = [o.name for o in session.get_outputs()]
    run_session(session, label, outputs, feeds, None)  # a binding A cannot run fails here
    del session
    memory_room.release()
    return feeds, [f"{info.name} {info.dtype}{shape_text(info.shape)}" for info in
                   plan.describe()]


def _created(open_session_: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    session = open_session_()
    return session, (time.perf_counter() - started) * 1e3


def _timed_run(session, label: str, feeds: dict[str, np.ndarray]) -> float:
    """One inference's milliseconds (the feeds ran once bounded already: :func:`_feeds`)."""
    started = time.perf_counter()
    session.run(None, feeds)
    return (time.perf_counter() - started) * 1e3


def _interleaved(level: str, open_a: Callable[[], Any], open_b: Callable[[], Any],
                 labels: tuple[str, str], feeds: dict[str, np.ndarray], runs: int) -> Timing:
    """Both sessions held at once: creations and runs alternate A B B A A B ..."""
    openers = (open_a, open_b)
    sessions: list[Any] = [None, None]
    created: tuple[list[float], list[float]] = ([], [])
    for i in range(CREATIONS * 2):
        which = (i + i // 2) % 2  # A B B A A B
        sessions[which] = None
        memory_room.release()
        sessions[which], ms = _created(openers[which])
        created[which].append(ms)
    for which in (0, 1):
        for _ in range(WARMUP):
            _timed_run(sessions[which], labels[which], feeds)
    times: tuple[list[float], list[float]] = ([], [])
    for i in range(runs * 2):
        which = (i + i // 2) % 2
        times[which].append(_timed_run(sessions[which], labels[which], feeds))
    return Timing(level, (statistics.median(created[0]), statistics.median(created[1])),
                  (statistics.median(times[0]), statistics.median(times[1])))


def _one_after_the_other(level: str, open_a: Callable[[], Any], open_b: Callable[[], Any],
                         labels: tuple[str, str], feeds: dict[str, np.ndarray],
                         runs: int) -> Timing:
    """One session at a time (memory is tight): each model's creations, then its runs."""
    create, run = [], []
    for open_, label in zip((open_a, open_b), labels):
        created = []
        for _ in range(CREATIONS):
            session, ms = _created(open_)
            created.append(ms)
            if len(created) < CREATIONS:
                del session
                memory_room.release()
        for _ in range(WARMUP):
            _timed_run(session, label, feeds)
        times = [_timed_run(session, label, feeds) for _ in range(runs)]
        del session
        memory_room.release()
        create.append(statistics.median(created))
        run.append(statistics.median(times))
    return Timing(level, (create[0], create[1]), (run[0], run[1]))


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
    """The named symbolic dims of the main graph's inputs, in order (``?`` for unnamed)."""
    found: dict[str, None] = {}
    for value in graph.graph.inputs:
        if value.shape is None or value.const_value is not None:
            continue
        for dim in value.shape:
            if not isinstance(dim, int):
                found[str(dim.value) if dim.value else "?"] = None
    return list(found)
