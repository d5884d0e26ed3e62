"""What runtime constants cost and gain on a user's own model: ``onnxfold run --runtime-const
... --compare``, and the core of ``python -m bench run adapters``.

The same feeds run, interleaved round by round (so a busy neighbour slows every row alike), in:

- onnxruntime with the runtime constants as inputs (fed every call: how the model runs as it
  is, and how Olive's adapters-as-inputs models run);
- onnxruntime with them as initializers (the model as if they had been known when it was
  exported: for weights fed as inputs, the pre-folded model);
- onnxruntime's multi-LoRA, when adapter files are given: ``LoraAdapter`` and
  ``RunOptions.add_active_adapter`` on the model with default values for the adapter inputs;
- ``onnxfold.Session`` with the runtime constants in the feeds (a drop-in's call: the change
  check and feed routing included), and with them from the adapter (``adapter=``, not fed);
- the Session's entry session alone, through ``InferenceSession.run`` (what a Session call
  should cost no more than).

Each row: the medians of the rounds' wall and CPU times (the process's user + system time,
steadier than wall on a shared machine) in milliseconds, and the CPU time's ratio to the first
row.
Also: the Session's first call (its fold and the entry session's creation), what was merged,
and with several adapters the median time to switch among them once each has its set.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_ir as ir

from onnxfold.host.ort_sessions import open_session
from onnxfold.io import load_model, save_model
from onnxfold.io.tempfiles import scratch_directory
from onnxfold.latency import measure
from onnxfold.pipeline.options import FoldOptions
from onnxfold.runtime.adapters import read_adapter
from onnxfold.runtime.session import Session

INPUTS = "onnxruntime, runtime constants as inputs"
BAKED = "onnxruntime, runtime constants as initializers"
MULTI_LORA = "onnxruntime multi-LoRA (LoraAdapter)"
SESSION = "onnxfold.Session ({backend}), constants fed"
SESSION_ADAPTER = "onnxfold.Session ({backend}), adapter set"
ENTRY = "entry session alone (InferenceSession.run)"


@dataclass
class Comparison:
    """Medians (ms: wall, CPU) per row in order, the Session's costs and what it merged."""

    rows: dict[str, Timing]
    rounds: int
    backend: str
    init_seconds: float  # Session(...): fold at compile time, merge, split, backend prepare
    fold_seconds: float  # the first call's fold
    bind_seconds: float  # the first call's entry session
    merges: str
    adapters: int = 0
    switch_ms: list[float] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    def ratio(self, row: str, to: str | None = None) -> float:
        """``row``'s CPU time over ``to``'s (the first row's by default)."""
        base = self.rows[to or next(iter(self.rows))].cpu
        return self.rows[row].cpu / base if base else float("nan")

    def render(self) -> str:
        """The comparison as text lines."""
        width = max(len(r) for r in self.rows)
        lines = [f"medians of {self.rounds} interleaved calls (wall, CPU), CPU ratio to the "
                 "first row:"]
        lines += [f"  {row:<{width}}  {t.wall:9.3f} ms  {t.cpu:9.3f} ms  "
                  f"{self.ratio(row):6.3f}x" for row, t in self.rows.items()]
        lines += [f"  {row}: not run ({why})" for row, why in self.skipped.items()]
        session = SESSION.format(backend=self.backend)
        if ENTRY in self.rows and session in self.rows:
            lines.append("a Session call / the entry session alone: "
                         f"{self.ratio(session, ENTRY):.3f}x")
        lines.append(f"Session: made in {self.init_seconds:.2f} s; first call: fold "
                     f"{self.fold_seconds * 1e3:.1f} ms, entry session "
                     f"{self.bind_seconds * 1e3:.1f} ms; {self.merges}")
        if self.switch_ms:
            lines.append(f"switching among {self.adapters} adapter files (sets kept): median "
                         f"{statistics.median(self.switch_ms):.2f} ms, max "
                         f"{max(self.switch_ms):.2f} ms")
        return "\n".join(lines)


@dataclass(frozen=True)
class Timing:
    """Medians of one row's calls, in seconds: wall time, and the process's CPU time (user +
    system), which a busy neighbour does not add to (steadier than wall on a shared machine)."""

    wall: float
    cpu: float


def interleaved(calls: Mapping[str, Callable[[], object]], rounds: int) -> dict[str, Timing]:
    """Each call ``rounds`` times, interleaved after warm-up rounds as ``--latency`` runs its
    models (:func:`onnxfold.latency.measure.rounds`), each timed; the medians of each."""

    def timed(call: Callable[[], object]) -> Callable[[], tuple[float, float]]:
        def seconds() -> tuple[float, float]:
            wall, cpu = time.perf_counter(), time.process_time()
            call()
            return time.perf_counter() - wall, time.process_time() - cpu
        return seconds

    samples = measure.rounds([timed(call) for call in calls.values()], rounds)
    return {name: Timing(statistics.median(w for w, _ in s), statistics.median(c for _, c in s))
            for name, s in zip(calls, samples)}


def with_initializers(model_path: str, arrays: Mapping[str, np.ndarray], directory: str,
                      name: str, as_defaults: bool) -> str:
    """A copy of the model with ``arrays`` as initializers: still inputs (defaults: what
    onnxruntime's multi-LoRA needs), or not (the model as if they had been constants)."""
    model = load_model(model_path, check=False)
    graph = model.graph
    for value in list(graph.inputs):
        given = value.name
        if given is None or given not in arrays:
            continue
        value.const_value = ir.Tensor(np.ascontiguousarray(arrays[given]), name=given)
        if given not in graph.initializers:
            graph.register_initializer(value)
        if not as_defaults:
            graph.inputs.remove(value)
    model.ir_version = max(model.ir_version, 4)
    path = os.path.join(directory, name)
    save_model(model, path, external_data=True)
    return path


def compare(model_path: str, runtime_constants: Sequence[str], feeds: Mapping[str, np.ndarray],
            backend: str = "ort", rounds: int = 20, adapters: Sequence[str] = (),
            sess_options: Any = None, options: FoldOptions | None = None) -> Comparison:
    """Run the rows of the module doc on ``feeds`` (every input's array; with ``adapters``,
    the first adapter file's tensors stand for the runtime constants)."""
    import onnxruntime as ort

    files = [read_adapter(a) for a in adapters]
    feeds = {**feeds, **files[0]} if files else dict(feeds)
    if not runtime_constants and files:
        runtime_constants = sorted(files[0])
    started = time.perf_counter()
    session = Session(model_path, runtime_constants, backend=backend, sess_options=sess_options,
                      options=options)
    init_seconds = time.perf_counter() - started
    session.run(None, feeds)
    constants = {n: feeds[n] for n in session.runtime_constants}
    dynamic = {n: a for n, a in feeds.items() if n not in constants}
    tmp = scratch_directory("onnxfold-compare-")  # the command line's own (an interrupted
    try:                                         # run removes it even while a call runs on)
        calls: dict[str, Callable[[], object]] = {}
        skipped: dict[str, str] = {}
        plain = open_session(model_path, sess_options)
        calls[INPUTS] = lambda: plain.run(None, feeds)
        baked = open_session(
            with_initializers(model_path, constants, tmp, "baked.onnx", False), sess_options)
        calls[BAKED] = lambda: baked.run(None, dynamic)
        if files:
            lora = open_session(
                with_initializers(model_path, constants, tmp, "defaults.onnx", True),
                sess_options)
            active = ort.LoraAdapter()
            active.Load(os.fspath(adapters[0]))
            run_options = ort.RunOptions()
            run_options.add_active_adapter(active)
            # the RunOptions does not keep its adapter alive: the call holds both
            calls[MULTI_LORA] = lambda: (active, lora.run(None, dynamic, run_options))[1]
        else:
            skipped[MULTI_LORA] = "no adapter file given"
        calls[SESSION.format(backend=backend)] = lambda: session.run(None, feeds)
        if files:
            adapted = Session(model_path, runtime_constants, backend=backend,
                              sess_options=sess_options, options=options, adapter=adapters[0])
            adapted.run(None, dynamic)
            calls[SESSION_ADAPTER.format(backend=backend)] = lambda: adapted.run(None, dynamic)
        entry = session.entry_session
        entry_feeds = {n: a for n, a in feeds.items() if n in session.entry_inputs}
        calls[ENTRY] = lambda: entry.run(None, entry_feeds)
        medians = interleaved(calls, rounds)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    switch_ms = switching(session, adapters, rounds) if len(adapters) > 1 else []
    in_ms = {k: Timing(t.wall * 1e3, t.cpu * 1e3) for k, t in medians.items()}
    return Comparison(in_ms, rounds, backend, init_seconds,
                      session.fold_seconds, session.bind_seconds,
                      session.parts.low_rank.summary(), len(adapters), switch_ms, skipped)


def switching(session: Session, adapters: Sequence[str | os.PathLike], rounds: int
              ) -> list[float]:
    """Milliseconds of each switch among the ``adapters`` files once each has its set."""
    for path in adapters:
        session.set_adapter(path)
    folds = session.folds
    times = []
    for _ in range(max(2, rounds // len(adapters))):
        for path in adapters:
            started = time.perf_counter()
            session.set_adapter(path)
            times.append((time.perf_counter() - started) * 1e3)
    assert session.folds == folds, "a kept set was folded again"
    return times
