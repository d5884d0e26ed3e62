"""Whether the original's own outputs hold under onnxruntime's optimization levels.

An output that turns on near ties (a top-k over near-equal scores, an argmax, a comparison)
moves with any change of rounding: onnxruntime's own fusions at one level against another move
it as much as a rewrite of onnxfold's that sums in another order. Where a check fails on such
outputs alone, naming the rules that rounded apart sends the user after a cause that is not
one (disabling them leaves the original as unstable as it was). So, where only outputs failed,
the original runs again at another level on the same input sets: the outputs where it differs
from itself by as much as the optimized model differs from it are named, and the failure line
says that instead of naming rules (``onnxfold.app.failure_line``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from onnxfold.check.inputs.feeds import dtype_name
from onnxfold.check.outputs.differences import OutputDiff, accumulate, as_array
from onnxfold.check.running.models import ModelRef
from onnxfold.check.running.runner import open_session, run_model

# a spread "as large" as the optimized model's difference: at least this share of its
# largest absolute difference (an index that moves by 61 against one that moves by 30 is the
# same kind of move; one that moves by 1 is not)
SHARE = 0.5


def other_level(level: str) -> str:
    """The level the original is run at again: none of onnxruntime's rewrites, or (where the
    check ran without them) all of them."""
    return "all" if level == "disable" else "disable"


def unstable_outputs(model: ModelRef, label: str, libraries: Sequence[str], level: str,
                     feeds: Sequence[dict[str, np.ndarray]], got: Sequence[list],
                     failing: Sequence[OutputDiff], outputs: Sequence[str],
                     rtol: float | None, atol: float | None, run_options) -> str:
    """The outputs among ``failing`` on which ``model``, run at :func:`other_level` on
    ``feeds``, differs from ``got`` (its outputs at ``level``) by at least :data:`SHARE` of
    the optimized model's largest difference, as a text for a note (each with its
    mismatches); "" where any failing output holds (then the optimized model's difference is
    not the original's own spread)."""
    other = other_level(level)
    session = open_session(model, label, libraries, other)
    wanted = {row.name for row in failing}
    spread: dict[str, OutputDiff] = {}
    for feed, reference in zip(feeds, got):
        again = run_model(session, label, list(outputs), feed, run_options)
        for name, a, b in zip(outputs, reference, again):
            if name not in wanted:
                continue
            a, b = as_array(a), as_array(b)
            row = spread.setdefault(name, OutputDiff(name, dtype_name(a.dtype),
                                                     dtype_name(b.dtype), list(a.shape),
                                                     list(b.shape)))
            accumulate(row, a, b, rtol, atol)
    for row in failing:
        own = spread.get(row.name)
        if own is None or own.mismatches == 0 or not own.shapes_equal or \
                own.max_abs_diff < SHARE * row.max_abs_diff:
            return ""
    return ", ".join(f"{row.name} {spread[row.name].mismatches}/{spread[row.name].elements} "
                     f"elements, max abs {spread[row.name].max_abs_diff:.3g}"
                     for row in failing) + f" at level {other} against {level}"


__all__ = ["SHARE", "other_level", "unstable_outputs"]
