"""The progress line on a terminal: one updating line per phase, for runs over ~2 s.

``load 1.2 s``, ``fold 1200/5400 3.4 s``, ``save 0.8 s``: a daemon thread redraws the current
phase's line twice a second once the run has taken :data:`DEFAULT_AFTER` seconds (the
``ONNXFOLD_PROGRESS_AFTER`` environment variable changes that, e.g. ``0`` in tests). A phase
seen for the first time starts a new line; a phase that comes back (the fold rounds repeat
shapes, rewrite, fold, cleanup) is drawn over the current line. Shown only when stderr is a
terminal and ``-q`` is not given: a pipe or a log file gets nothing.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TextIO

from onnxfold.host.terminal import unwrapped

DEFAULT_AFTER = 2.0
AFTER_ENV = "ONNXFOLD_PROGRESS_AFTER"
JOIN_SECONDS = 1.0  # the longest the end of a run waits for the redrawing thread
INTERVAL = 0.5
DETAIL_INTERVAL = 0.1  # a detail change (fold i/n) redraws at most this often


def progress_after() -> float:
    """Seconds before the first progress line (``ONNXFOLD_PROGRESS_AFTER``, default 2)."""
    try:
        return max(0.0, float(os.environ.get(AFTER_ENV, DEFAULT_AFTER)))
    except ValueError:
        return DEFAULT_AFTER


class TerminalProgress:
    """A :class:`onnxfold.pipeline.phases.PhaseListener` drawing the current phase on ``stream``."""

    def __init__(self, stream: TextIO | None = None, after: float | None = None) -> None:
        # its own control sequences redraw the line: written past the escaping of sys.stderr
        self.stream = stream if stream is not None else unwrapped(sys.stderr)
        self.after = progress_after() if after is None else after
        self.start = time.monotonic()
        self._lock = threading.Lock()
        self._phase: str | None = None
        self._detail = ""
        self._phase_start = self.start
        self._shown = False  # the current phase's line is on screen
        self._seen: set[str] = set()
        self._drawn = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, name="onnxfold-progress",
                                        daemon=True)
        self._thread.start()

    def started(self, phase: str) -> None:
        with self._lock:
            if phase == self._phase:
                return
            if phase not in self._seen:
                self._finish_line()
                self._seen.add(phase)
            self._phase, self._detail = phase, ""
            self._phase_start = time.monotonic()
            self._draw()

    def detail(self, text: str) -> None:
        with self._lock:
            self._detail = text
            if time.monotonic() - self._drawn >= DETAIL_INTERVAL:
                self._draw()

    def close(self) -> None:
        """Stop redrawing; the last phase's line is finished (nothing printed if none was)."""
        self._stop.set()
        self._thread.join(JOIN_SECONDS)  # a redraw blocked on a full pipe is left behind
        with self._lock:
            self._finish_line()
            self._phase = None

    def _tick(self) -> None:
        while not self._stop.wait(INTERVAL):
            with self._lock:
                self._draw()

    def _draw(self) -> None:
        now = time.monotonic()
        if self._phase is None or now - self.start < self.after:
            return
        detail = f" {self._detail}" if self._detail else ""
        line = f"{self._phase}{detail} {now - self._phase_start:.1f} s"
        self._write(f"\r\x1b[K{line}")
        self._shown, self._drawn = True, now

    def _finish_line(self) -> None:
        if self._shown:
            self._draw()
            self._write("\n")
        self._shown = False

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed terminal: progress is not worth an error
            self._stop.set()
