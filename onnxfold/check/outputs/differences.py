"""How far one output of model A is from model B's over every input set: :class:`OutputDiff`,
filled one input set at a time by :func:`accumulate` with the tolerance of its dtype
(``judging.tolerance``) and, where given, the magnitude of the terms each element sums;
:func:`compared_outputs`, the comparison of both models' runs, a function of their results.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from onnxfold.check.inputs.feeds import dtype_name
from onnxfold.check.judging.bits import same_bits
from onnxfold.check.judging.tolerance import HALF as HALF_TYPES
from onnxfold.check.judging.tolerance import allowed, ulp
from onnxfold.check.judging.tolerance import for_dtype as tolerance_for
from onnxfold.check.outputs import map_outputs

REL_FLOOR = 1e-3  # max rel counts elements at least this share of the output's max |b|


@dataclass
class OutputDiff:
    """How one output of model A differs from model B over all input sets."""

    name: str
    dtype_a: str
    dtype_b: str
    shape_a: list[int]
    shape_b: list[int]
    elements: int = 0
    max_abs_diff: float = 0.0
    # the largest |a-b|/|b| over the elements that matter: |b| at least REL_FLOOR of the
    # output's largest magnitude (a logit near zero that is the difference of large ones
    # carries their rounding, and its relative error says nothing)
    max_rel_diff: float = 0.0
    max_ulps: float | None = None  # float16/bfloat16 outputs: the largest |a-b| in ulps at b
    tolerance: str = ""  # what "within tolerance" meant for this output (tolerance.describe)
    mismatches: int = 0
    # elements outside rtol/atol that the magnitude of their summed terms let through
    # (tolerance.SUMMED_UNITS; counted over every input set)
    summed: int = 0
    bitwise_equal: bool = True
    shapes_equal: bool = True
    dtypes_equal: bool = True
    ok: bool = True


def as_array(value) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    try:
        return np.asarray(value)
    except ValueError:  # ragged sequences
        arr = np.empty(1, object)
        arr[0] = value
        return arr


def accumulate(row: OutputDiff, a, b, rtol: float | None, atol: float | None,
               summed: np.ndarray | None = None) -> None:
    """Fold one input set's outputs ``a`` (model A) and ``b`` (model B) into ``row``, with the
    tolerance of ``a``'s dtype unless ``rtol``/``atol`` override it; ``summed``: the
    magnitude of what was summed to make each element of ``a`` (``judging.magnitudes``;
    None: not computed, rtol/atol alone)."""
    a, b = as_array(a), as_array(b)
    tolerance = tolerance_for(a.dtype, rtol, atol)
    row.tolerance = tolerance.describe()
    row.elements += max(a.size, b.size)
    row.dtypes_equal &= a.dtype == b.dtype
    if a.shape != b.shape:
        row.shapes_equal = row.bitwise_equal = False
        row.mismatches += max(a.size, b.size)
        return
    row.bitwise_equal &= a.dtype == b.dtype and (
        same_bits(a, b) if a.dtype.kind != "O" else bool(np.all(a == b)))
    if a.dtype.kind in "OSU" or b.dtype.kind in "OSU":
        row.mismatches += int(np.sum(a != b))
        return
    with np.errstate(all="ignore"):
        x = a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)
        y = b.astype(np.complex128 if b.dtype.kind == "c" else np.float64)
        same = (a == b) if a.dtype == b.dtype else (x == y)
        same |= np.isnan(x) & np.isnan(y)
        finite = np.isfinite(x) & np.isfinite(y)
        diff = np.abs(x - y)
        close = same | (finite & (diff <= allowed(tolerance, y, a.dtype.name, finite)))
        if summed is not None and summed.shape == x.shape and not close.all():
            widened = same | (finite & (diff <= allowed(tolerance, y, a.dtype.name, finite,
                                                          summed=summed)))
            row.summed += int((widened & ~close).sum())
            close = widened
        differ = finite & ~same
        spacing = ulp(y, a.dtype.name) if a.dtype == b.dtype and a.dtype.name in HALF_TYPES \
            else None
        if spacing is not None:
            worst = float((diff[differ] / spacing[differ]).max()) if differ.any() else 0.0
            row.max_ulps = max(row.max_ulps or 0.0, worst)
        if differ.any():
            row.max_abs_diff = max(row.max_abs_diff, float(diff[differ].max()))
            magnitude = np.abs(y)
            floor = REL_FLOOR * float(magnitude[finite].max())
            mattering = differ & (magnitude > 0) & (magnitude >= floor)
            if mattering.any():
                rel = float((diff[mattering] / magnitude[mattering]).max())
                row.max_rel_diff = max(row.max_rel_diff, rel)
    row.mismatches += int((~close).sum())


def compared_outputs(names: Sequence[str], runs: Iterable[tuple[Sequence, Sequence]],
                     rtol: float | None, atol: float | None
                     ) -> tuple[dict[str, OutputDiff], set[str]]:
    """Both models' outputs (``names``), run by run (``runs``: A's outputs and B's on one
    input set), compared: a row per output, and the outputs that are sequences of maps with
    the same keys (compared as their values, [sequence length, keys])."""
    rows: dict[str, OutputDiff] = {}
    maps: set[str] = set()
    for result_a, result_b in runs:
        for name, va, vb in zip(names, result_a, result_b):
            va, vb, unzipped = map_outputs.as_value_arrays(va, vb)
            if unzipped:
                maps.add(name)
            va, vb = as_array(va), as_array(vb)
            row = rows.setdefault(name, OutputDiff(
                name, dtype_name(va.dtype), dtype_name(vb.dtype), list(va.shape),
                list(vb.shape)))
            accumulate(row, va, vb, rtol, atol)
    return rows, maps
