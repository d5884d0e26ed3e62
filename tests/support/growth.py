"""Whether a cost grows linearly, measured so that a loaded machine does not fail it."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

SCALE = 8  # the large input is this many times the small one
BOUND = 24  # linear growth is about SCALE, quadratic SCALE**2


def cpu_seconds(run: Callable[[Any], object], prepare: Callable[[], Any] = lambda: None,
                repeats: int = 2) -> float:
    """The least CPU time of ``run(prepare())`` over ``repeats`` calls (``prepare`` not timed:
    a fresh model for a run that changes it), without the cyclic garbage collector (whose
    full collections walk the test process's own objects too; the command line defers them
    while it folds)."""
    best = float("inf")
    for _ in range(repeats):
        prepared = prepare()
        gc.disable()
        try:
            started = time.process_time()
            run(prepared)
            best = min(best, time.process_time() - started)
        finally:
            gc.enable()
    return best


def assert_linear_growth(small: float, large: float, what: str, count: int) -> None:
    """``large`` is the CPU time of :data:`SCALE` times the ``count`` ``what`` of ``small``:
    linear growth is about 8x, quadratic 64x. The bound, 24x, leaves 3x for a loaded
    machine's noise (a suite running beside a test once made 4x the work cost 7.1x) and is
    still far below 64x."""
    assert large < BOUND * small, (
        f"{count:,} {what}: {small:.3f} s, {SCALE * count:,}: {large:.3f} s "
        f"({large / small:.1f}x)")
