"""Wall time per phase of a run (load, shapes, rewrite, fold, cleanup, save, check).

A :class:`Phases` clock is handed down the pipeline; each stage runs inside
``with phases.phase(name)``. The seconds end up in the JSON report (``phases``) and the HTML
report; a listener (the terminal progress line, ``onnxfold.app.progress``) is told when a phase
starts and when its detail (``fold 120/900``) changes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

import onnx_ir as ir
from onnx_ir.passes import InPlacePass, PassBase, PassResult

# The phase each pipeline pass counts towards (a pass not listed counts as "cleanup").
PASS_PHASES = {
    "input_shapes": "shapes", "infer_shapes": "shapes", "refine_shapes": "shapes",
    "rewrite": "rewrite", "fold": "fold", "fold_functions": "fold", "convert_opset": "load",
    "signature": "signature",
}


class PhaseListener(Protocol):
    """What is told how a run goes (the terminal's progress line)."""

    def started(self, phase: str) -> None:
        """``phase`` started (or resumed, once a phase inside it ended)."""

    def detail(self, text: str) -> None:
        """How far the current phase is (``120/900``)."""


class Phases:
    """Seconds spent per phase, in the order the phases first ran."""

    def __init__(self, listener: PhaseListener | None = None) -> None:
        self.seconds: dict[str, float] = {}
        self.listener = listener
        self._current: str | None = None
        self._since = 0.0

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Count the time inside the block towards ``name``; a phase started inside another
        pauses the outer one (each second counts once)."""
        outer = self._current
        if outer == name:
            yield
            return
        now = time.perf_counter()
        if outer is not None:
            self._add(outer, now - self._since)
        self._current, self._since = name, now
        if self.listener is not None:
            self.listener.started(name)
        try:
            yield
        finally:
            now = time.perf_counter()
            self._add(name, now - self._since)
            self._current, self._since = outer, now
            if outer is not None and self.listener is not None:
                self.listener.started(outer)

    def _add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def detail(self, text: str) -> None:
        """Tell the listener how far the current phase is (``120/900``)."""
        if self.listener is not None:
            self.listener.detail(text)

    def fold_progress(self, done: int, total: int) -> None:
        """The fold pass's progress callback."""
        self.detail(f"{done}/{total}")

    def rounded(self) -> dict[str, float]:
        """Seconds per phase, to 0.1 ms (the report's ``phases``)."""
        return {name: round(seconds, 4) for name, seconds in self.seconds.items()}


class Timed(InPlacePass):
    """A pipeline pass whose time counts towards its phase (:data:`PASS_PHASES`)."""

    def __init__(self, inner: PassBase, phases: Phases) -> None:
        self.inner, self.phases = inner, phases
        self.name = getattr(inner, "name", type(inner).__name__)

    def call(self, model: ir.Model) -> PassResult:
        """Run the pass inside its phase; its result."""
        with self.phases.phase(PASS_PHASES.get(self.name, "cleanup")):
            return self.inner(model)
