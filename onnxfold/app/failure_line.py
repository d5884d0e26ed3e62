"""What a failed check names on its one stderr line: the first few things that failed and how
many more (a planted bug can fail hundreds of rewrites; the summary printed above lists each),
and, where only outputs failed and onnxfold's own changes were exact, what made them differ
and the flag that compares without it (:func:`rounding_hint`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from onnxfold.check.result import CompareResult

SHOWN = 3  # failures named on the line
MERGED = "merge_shared_input_matmuls"  # Q/K/V products merged into one MatMul


def failing_named(failing: Sequence[str], shown: int = SHOWN) -> str:
    """The first ``shown`` of ``failing``, and how many more."""
    more = len(failing) - shown
    return ", ".join(failing[:shown]) + (f" and {more} more" if more > 0 else "")


def rounding_hint(check: CompareResult) -> str:
    """Where only outputs failed (no fold or rewrite differs, the optimized model ran):
    the rewrites that rounded apart from the original (validated within tolerance, not bit for
    bit) and ``--disable-rule`` for each; where every fold and rewrite was bitwise on its own
    and the tolerance is 0 (bit for bit asked), that onnxruntime's graph optimizations met two
    different graphs (``--ort-level basic`` compares without its fusions), and
    ``merge_shared_input_matmuls`` if it merged products; where the original differs as much
    from itself between onnxruntime's levels (``check.unstable``), that instead of any rule.
    "" otherwise."""
    rewrites, folds = check.rewrites, check.folds
    if check.failure or rewrites is None or not rewrites.ok or (folds is not None and
                                                                not folds.ok):
        return ""
    if check.unstable:
        return (f"; the original itself differs as much between onnxruntime's optimization "
                f"levels ({check.unstable}): its outputs turn on near ties (a top-k, an "
                "argmax, a comparison) and move with any rounding, onnxruntime's own "
                "included, so no --disable-rule is named (docs/check.md)")
    rounded = list(dict.fromkeys(r.rule for r in rewrites.rewrites if r.state == "within"))
    if rounded:
        return ("; these rewrites round apart from the original (their sums in another "
                "order): " + " ".join(f"--disable-rule {rule}" for rule in rounded))
    if check.rtol != 0 or check.atol != 0 or check.level not in ("extended", "all") or \
            (folds is not None and folds.count("within")):
        return ""
    merged = any(r.rule == MERGED for r in rewrites.rewrites)
    return (f"; every fold and rewrite is bitwise on its own: onnxruntime's optimizations at "
            f"level {check.level} round the two graphs apart (--ort-level basic compares "
            "without its fusions)" +
            (f"; --disable-rule {MERGED} keeps the Q/K/V products as exported" if merged
             else ""))


__all__ = ["SHOWN", "failing_named", "rounding_hint"]
