"""Contained steps: a rule or pass that raises names itself instead of breaking the run.

``optimize`` catches :class:`StepFailed`, starts again from the untouched model without that
step and reports it; ``strict`` (tests, ``--strict``) lets the original error through. A
resource limit (too many open files, no address space) is no failure of the step: it stops the
run as a :class:`ResourceLimitError` naming the limit (``onnxfold.host.limits``); nor is an input
file truncated or removed under the run (``InputChanged``, an InputError).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from onnxfold.errors import ResourceLimitError
from onnxfold.host.limits import limit_error
from onnxfold.io.checked import InputChanged

T = TypeVar("T")


class StepFailed(Exception):
    """Step ``step`` (a rule name, or a pass name) raised ``error``."""

    def __init__(self, step: str, error: BaseException) -> None:
        super().__init__(f"{step}: {type(error).__name__}: {' '.join(str(error).split())}")
        self.step, self.error = step, error


def contained(step: object, strict: bool, fn: Callable[[], T]) -> T:
    """``fn()``, with an exception turned into :class:`StepFailed` (re-raised when strict).

    ``step`` names the step, as ``str(step)`` when it fails (an object can name the rule a
    long loop was applying at that moment)."""
    try:
        return fn()
    except (StepFailed, ResourceLimitError, InputChanged, MemoryError, KeyboardInterrupt):
        raise
    except Exception as e:
        limit = limit_error(e, str(step))
        if limit is not None:
            raise limit from e
        if strict:
            raise
        raise StepFailed(str(step), e) from e
