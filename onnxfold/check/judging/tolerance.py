"""How close two runs of an output must be, chosen from the output's dtype.

onnxruntime computes many float16 ops through float32 (ops without a float16 kernel, fused or
not), so an honest rewrite that moves where a value is rounded to float16 changes results by
about one float16 ulp: a relative tolerance made for float32 fails thousands of elements of an
honest float16 model, and one wide enough for float16 hides wrong float32 folds. So:

- float16 and bfloat16 outputs are compared in ulps: an element passes when it is within
  ``HALF_ULPS`` ulps of its own value plus ``HALF_MAGNITUDE_ULPS`` ulp of the output's magnitude
  (its largest finite value in that input set; a value near zero that is the difference of
  large ones carries their rounding). A weight moved by 4 ulps moves the outputs it reaches by
  about 4 ulps of their value, and fails.
- float32 and float64 keep ``rtol``/``atol`` (``|a-b| <= atol + rtol*|b|``) at
  :data:`FLOAT_RTOL` / :data:`FLOAT_ATOL`, and add :data:`SUMMED_UNITS` units of roundoff
  (``u``: 2**-24, 2**-53) of the magnitude of what was summed to make the element
  (``judging.magnitudes``): an element of a sum whose terms cancel is only as exact as its
  terms' magnitude, never as its own (``docs/check.md``, "Tolerances from error analysis").
  That magnitude is computed only for the elements outside the first part: it is never
  negative, so the others pass whatever it is.
- integers, booleans and strings must be equal.

A caller that gives ``rtol`` or ``atol`` overrides all of this with that formula for every
float output (the one not given keeps the float32 default).
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

FLOAT_RTOL, FLOAT_ATOL = 1e-4, 1e-5
HALF_ULPS, HALF_MAGNITUDE_ULPS = 2.0, 1.0
# units of roundoff of the magnitude of the summed terms an element of a float32 or float64
# output may differ by beyond rtol/atol: twice (two models) the terms' own error and the
# sum's rounding, 32 units, where honest folds measure at most 5.2 (docs/check.md)
SUMMED_UNITS = 64.0
# the unit roundoff of the dtypes the summed magnitude applies to
ROUNDOFF = {"float32": 2.0 ** -24, "float64": 2.0 ** -53}

# (mantissa bits, smallest normal exponent) of the float types whose ulps are reported
_FORMATS: dict[str, tuple[int, int]] = {
    "float16": (10, -14), "bfloat16": (7, -126), "float32": (23, -126), "float64": (52, -1022),
}
HALF = ("float16", "bfloat16")


@dataclass(frozen=True)
class Tolerance:
    """When an element of one output matches: in ulps (half types) or ``atol + rtol*|b|``."""

    rtol: float | None = None
    atol: float | None = None
    ulps: float | None = None
    magnitude_ulps: float | None = None
    # units of roundoff of the magnitude of the element's summed terms (None: not used)
    summed_units: float | None = None

    def describe(self) -> str:
        if self.ulps is not None:
            return f"{self.ulps:g} ulp + {self.magnitude_ulps:g} ulp of max |x|"
        if self.rtol is None:
            return "exact"
        summed = f" + {self.summed_units:g}u of |terms|" if self.summed_units else ""
        return f"rtol {self.rtol:g}, atol {self.atol:g}{summed}"


EXACT = Tolerance()


def for_dtype(dtype: np.dtype, rtol: float | None = None, atol: float | None = None
              ) -> Tolerance:
    """The tolerance of an output of ``dtype``; ``rtol``/``atol`` given override it."""
    if dtype.kind not in "fc" and dtype != np.dtype(ml_dtypes.bfloat16):
        return EXACT
    if rtol is not None or atol is not None:
        return Tolerance(rtol=FLOAT_RTOL if rtol is None else rtol,
                         atol=FLOAT_ATOL if atol is None else atol)
    if dtype.name in HALF:
        return Tolerance(ulps=HALF_ULPS, magnitude_ulps=HALF_MAGNITUDE_ULPS)
    return Tolerance(rtol=FLOAT_RTOL, atol=FLOAT_ATOL,
                     summed_units=SUMMED_UNITS if dtype.name in ROUNDOFF else None)


def ulp(values: np.ndarray, dtype_name: str) -> np.ndarray | None:
    """The ulp of ``dtype_name`` at each of ``values`` (float64), or None for other types.

    Below the smallest normal number the ulp stays the subnormal spacing.
    """
    fmt = _FORMATS.get(dtype_name)
    if fmt is None:
        return None
    mantissa, min_exp = fmt
    magnitude = np.abs(values)
    _, exp = np.frexp(magnitude)
    exp = np.where(magnitude > 0, exp - 1, min_exp)  # frexp: x = m * 2**exp, 0.5 <= m < 1
    return np.ldexp(1.0, np.maximum(exp, min_exp) - mantissa)


def allowed(tolerance: Tolerance, reference: np.ndarray, dtype_name: str,
            finite: np.ndarray, magnitude: float | None = None,
            summed: np.ndarray | None = None) -> np.ndarray | float:
    """How far each element may be from ``reference`` (float64) under ``tolerance``;
    ``magnitude``: the largest finite ``|reference|`` of the whole output where ``reference``
    is a slice of it; ``summed``: the magnitude of what was summed to make each element
    (``judging.magnitudes``; None: not computed, the rest of the rule alone; an element
    where it is not finite gets nothing from it)."""
    base = _allowed(tolerance, reference, dtype_name, finite, magnitude)
    if summed is None or not tolerance.summed_units or dtype_name not in ROUNDOFF:
        return base
    with np.errstate(invalid="ignore"):
        extra = np.where(np.isfinite(summed), summed, 0.0) * (
            tolerance.summed_units * ROUNDOFF[dtype_name])
    return base + extra


def _allowed(tolerance: Tolerance, reference: np.ndarray, dtype_name: str,
             finite: np.ndarray, magnitude: float | None = None) -> np.ndarray | float:
    if tolerance.ulps is not None:
        own = ulp(reference, dtype_name)
        assert own is not None and tolerance.magnitude_ulps is not None
        if magnitude is None:
            magnitude = float(np.abs(reference[finite]).max()) if finite.any() else 0.0
        scale = ulp(np.array(magnitude), dtype_name)
        assert scale is not None
        return tolerance.ulps * own + tolerance.magnitude_ulps * float(scale)
    if tolerance.rtol is None or tolerance.atol is None:
        return 0.0
    return tolerance.atol + tolerance.rtol * np.abs(reference)
