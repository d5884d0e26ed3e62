"""What re-deriving a folded tensor gave, and how one verdict is reached from two arrays.

A verdict is a claim about every input the model accepts, so it says what it rests on:

- **bitwise** / **within N ulps**: equal to what the original computes, bit for bit, or within
  the ulp budget of a fold that is not bitwise (``docs/exactness.md``), or equal but for NaN
  bits where the original computes the value (what it stores is compared as bytes); for
  every value of the dims: the value reads no dynamic dim, or it was shown constant over them
  (``dims`` says which);
- **sampled**: equal at every binding of the dims and every input set the check ran, but not
  shown for every one: a value the original computes from dynamic dims in a way the symbolic
  dims cannot follow, or a rewrite's constant whose original reads input values;
- **differs**: the check fails, naming the tensor, the binding and how;
- **not verifiable**: nothing to re-derive it from, with the reason (counted by reason);
- **parameter of a rewrite**: a constant a rewrite built as part of what it put in (merged
  Unsqueeze axes, a Split's sizes), with no value of the original to stand for: it is judged
  with its rewrite, by the rewrite validation (``check.rewrites``), not here.

The verdict type is the check's one (``judging.verdicts``), shared with the rewrite
validation.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
import onnx_ir as ir

from onnxfold.check.judging.bits import bit_mismatches, differing_bits, same_bits
from onnxfold.check.judging.tolerance import ROUNDOFF, SUMMED_UNITS, ulp
from onnxfold.check.judging.verdicts import (
    BITWISE,
    DIFFERS,
    PARAMETER,
    SAMPLED,
    UNVERIFIABLE,
    WITHIN,
    Verdict,
    Verdicts,
)
from onnxfold.check.running import string_values
from onnxfold.ir import provenance

# the budget of a fold that is not bitwise (a MatMul or a sum folded by numpy): numpy and
# onnxruntime's kernels add in other orders (docs/exactness.md, "Checking folds")
ULPS_OWN, ULPS_MAGNITUDE = 4.0, 2.0

STATES = (BITWISE, WITHIN, SAMPLED, DIFFERS, UNVERIFIABLE, PARAMETER)
# how a bitwise or within verdict holds over the dims
STATIC, PROVED = "static", "proved"


@dataclass
class FoldVerification(Verdicts):
    """Every initializer of the optimized model that the original does not hold as it is."""

    model_a: str
    model_b: str
    tensors: list[Verdict] = field(default_factory=list)
    unchanged: int = 0  # initializers the original holds with the same bytes (not folds)
    bindings: list[dict[str, list[int]]] = field(default_factory=list)  # input shapes used

    @property
    def verdicts(self) -> list[Verdict]:  # type: ignore[override]
        return self.tensors

    @property
    def edited(self) -> list[str]:
        """The initializers that are no folds: weights of the original under their names with
        other values (``OTHER_VALUES``), counted apart from the folded tensors."""
        return [t.name for t in self.tensors if t.reason == OTHER_VALUES]

    @property
    def complete(self) -> bool:
        """Every tensor verified for every input (nothing sampled or left unverifiable; the
        parameters of rewrites are their rewrites' to validate)."""
        return all(t.state in (BITWISE, WITHIN, PARAMETER) for t in self.tensors)

    def to_dict(self) -> dict:
        data = asdict(self)
        data.update(ok=self.ok, complete=self.complete,
                    counts={s: self.count(s) for s in STATES},
                    reasons={s: self.reasons(s) for s in (SAMPLED, UNVERIFIABLE, PARAMETER)},
                    verdict=self.verdict())
        return data

    def verdict(self, rewrites_validated: bool = False) -> str:
        """What the folds' verification showed, as the last line says it; the tensors rewrites
        made are said validated only where ``rewrites_validated`` (every rewrite was)."""
        if not self.ok:
            return f"folded tensors differ: {', '.join(self.failing)}"
        made = self.count(PARAMETER)
        them = "it" if made == 1 else "them"
        judged = f"validated with {them} on the input sets" if rewrites_validated else \
            f"judged with {'its rewrite' if made == 1 else 'their rewrites'}, not all validated"
        if self.complete:
            return "every folded tensor verified for every input" + (
                f" but {made} {'tensor a rewrite' if made == 1 else 'tensors rewrites'} made "
                f"({judged})" if made else "")
        edited = len(self.edited)
        counts = [f"{self.count(BITWISE) + self.count(WITHIN)} verified for every input"]
        left = ((SAMPLED, self.count(SAMPLED)), (UNVERIFIABLE, self.count(UNVERIFIABLE) - edited))
        counts += [f"{n} {state}" for state, n in left if n]
        counts += [f"{edited} weight{'s' if edited != 1 else ''} of the original with other "
                   "values (not folds)"] if edited else []
        counts += [f"{made} made by rewrites ({judged})"] if made else []
        return f"folds: {', '.join(counts)}"

    def last_line(self) -> str:
        """``verify-folds``' last line: the verdict, and whether it is a full verification."""
        full = self.ok and self.complete and not self.count(PARAMETER)
        return self.verdict() + ("" if full or not self.ok else NOT_FULL)

    def summary(self) -> str:
        """One line, then one per differing tensor and per reason of the sampled and the
        unverifiable (naming the tensors)."""
        nan_bits = sum(t.state == WITHIN and t.reason.endswith(NAN_BITS)
                       for t in self.tensors)
        within = [t.max_ulps or 0.0 for t in self.tensors
                  if t.state == WITHIN and not t.reason.endswith(NAN_BITS)]
        proved = sum(t.state in (BITWISE, WITHIN) and t.dims == PROVED for t in self.tensors)
        edited = self.edited
        parts = [f"{self.count(BITWISE)} bitwise"]
        if within:
            parts.append(f"{len(within)} within {max(within):.3g} ulps (not bitwise ops)")
        if nan_bits:
            parts.append(f"{nan_bits} within: NaNs of other bits (the same values)")
        if proved:
            parts[-1] += f" ({proved} of these shown constant over the dynamic dims)"
        if self.count(SAMPLED):
            parts.append(f"{self.count(SAMPLED)} sampled (equal where run, not proved)")
        if self.count(UNVERIFIABLE) > len(edited):
            parts.append(f"{self.count(UNVERIFIABLE) - len(edited)} not verifiable")
        parts.append(f"{self.count(DIFFERS)} differ")
        made = sum(t.via != "original" and t.state not in (UNVERIFIABLE, PARAMETER)
                   for t in self.tensors)
        bindings = f" at {len(self.bindings)} bindings of the dims" if len(self.bindings) > 1 \
            else ""
        parameters = self.count(PARAMETER)
        lines = [f"fold verification: {len(self.tensors) - parameters - len(edited)} "
                 f"initializers re-derived from the original in onnxruntime{bindings}"
                 + (f" ({made} made by rewrites)" if made else "") + f": {', '.join(parts)}"
                 + (f"; {parameters} more are parameters of rewrites (judged with them)"
                    if parameters else "")
                 + (f"; {len(edited)} more {'is a weight' if len(edited) == 1 else 'are weights'}"
                    f" of the original under {'its' if len(edited) == 1 else 'their'} name with "
                    "other values, not folded (below)" if edited else "")]
        lines += [f"  DIFFERS {t.name} {t.dtype}{t.shape}: {t.reason}" for t in self.tensors
                  if t.state == DIFFERS]
        for state in (SAMPLED, UNVERIFIABLE):
            lines += self.reason_lines(state)
        return "\n".join(lines)


# the suffix of a verdict that passed without being a full verification (the reasons above it)
NOT_FULL = " (not a full verification: see above)"
# the reason of an initializer that is no fold: an original weight of its name, edited
OTHER_VALUES = ("an original initializer of that name holds other values, and the file carries "
                "no record of onnxfold (another tool's, or its records stripped: another tool "
                "may change a weight it keeps the name of); only the comparison on inputs "
                "covers it")


# a verdict within only by NaN bits (its reason ends so, the summary counts it apart)
NAN_BITS = "NaNs of other bits than the original's: the same values, not the same bits"


def verdict_of(folded: ir.Value, state: str, **fields) -> Verdict:
    """A verdict on ``folded`` (an initializer) in ``state`` (re-derived from the value of
    its name in the original unless ``via`` says otherwise)."""
    tensor = folded.const_value
    assert tensor is not None
    fields.setdefault("via", "original")
    return Verdict(str(folded.name), state, dtype=tensor.dtype.name.lower(),
                   shape=[int(d) for d in tensor.shape.numpy()], **fields)


def expects_bits(folded: ir.Value) -> bool:
    """Whether the fold says it computed ``folded`` as onnxruntime does, bit for bit: it
    carries provenance and no ``provenance.ROUNDING`` (no native folder that is not bitwise
    computed it)."""
    tensor = folded.const_value
    return tensor is not None and provenance.FOLDED_FROM in tensor.metadata_props and \
        provenance.ROUNDING not in tensor.metadata_props


def judge(folded: ir.Value, derived: np.ndarray, exact: bool,
          summed: np.ndarray | None = None) -> Verdict:
    """``folded`` against the ``derived`` array: bitwise, or (``exact`` False: a cone with
    an op that is not bitwise) within the ulp budget, or it differs. ``summed``: the
    magnitude of what was summed to make each element (``judging.magnitudes``), which
    widens the budget of a fold that is not bitwise by ``SUMMED_UNITS`` units of roundoff of
    it (float32 and float64; None: the ulp budget alone).

    NaNs of other bits than ``derived``'s are the same values, never bitwise: within (a
    computed NaN's payload is the arithmetic's to choose; what the original stores is
    compared with its bytes instead, ``verification._stored_verdict``)."""
    tensor = folded.const_value
    assert tensor is not None
    verdict = verdict_of(folded, BITWISE)
    got = tensor.numpy()
    if tensor.dtype == ir.DataType.STRING and derived.dtype.kind in "OSU" \
            and got.shape == derived.shape:  # each string's exact bytes: the array form drops NULs
        texts = map(string_values.as_bytes, derived.reshape(-1).tolist())
        wrong = sum(a != b for a, b in zip(string_values.tensor_key(tensor), texts))
        if wrong:
            verdict.state, verdict.mismatches = DIFFERS, wrong
            verdict.reason = f"{wrong} of {got.size} elements differ"
        return verdict
    if got.dtype != derived.dtype or got.shape != derived.shape:
        verdict.state = DIFFERS
        verdict.reason = f"the original computes {derived.dtype}{list(derived.shape)}"
        return verdict
    if same_bits(got, derived):
        return verdict
    if got.dtype.kind != "f" and got.dtype.name != "bfloat16":
        verdict.state = DIFFERS
        verdict.mismatches = int(np.sum(got != derived))
        verdict.reason = f"{verdict.mismatches} of {got.size} elements differ"
        return verdict
    if ulp(np.zeros(0), got.dtype.name) is None:  # float8, float4: no ulp to measure by
        return _without_ulps(verdict, got, derived, exact)
    same, ulps, within = ulp_distance(got, derived, exact, None if exact else summed)
    verdict.max_ulps = float(np.nanmax(ulps)) if ulps.size else 0.0
    if not exact:
        verdict.mismatches = int((~same & ~within).sum())
        if not verdict.mismatches:
            verdict.state = WITHIN
            return verdict
        terms = f" + {SUMMED_UNITS:g}u of |terms|" if summed is not None and \
            got.dtype.name in ROUNDOFF else ""
        verdict.reason = (f"{verdict.mismatches} of {got.size} elements beyond "
                          f"{ULPS_OWN:g} ulps + {ULPS_MAGNITUDE:g} ulps of max |x|{terms} "
                          f"(max {verdict.max_ulps:.3g} ulps)")
    else:
        verdict.mismatches = int((~same).sum())
        if not verdict.mismatches:  # NaNs of other bits: the same values, not the same bits
            verdict.state, verdict.max_ulps = WITHIN, None
            verdict.reason = f"{bit_mismatches(got, derived)} of {got.size} elements are " \
                f"{NAN_BITS}"
            return verdict
        verdict.reason = (f"{verdict.mismatches} of {got.size} elements differ from "
                          f"the original's bits (bits expected: its cone's ops are bitwise, or "
                          f"onnxruntime's, which give the same bits wherever they run; max "
                          f"{verdict.max_ulps:.3g} ulps)")
    verdict.state = DIFFERS
    return verdict


def _without_ulps(verdict: Verdict, got: np.ndarray, derived: np.ndarray, exact: bool
                  ) -> Verdict:
    """The verdict on a float type no ulp is reported for (float8, float4), whose elements
    differ in bits: within where they are NaNs of other bits alone, else a difference where
    the cone is bitwise, and not verifiable where it is not (no budget to judge it by)."""
    x, y = got.astype(np.float64), derived.astype(np.float64)
    nans = np.isnan(x) & np.isnan(y)
    wrong = int(np.sum(differing_bits(got, derived) & ~nans))
    if not wrong:
        verdict.state, verdict.reason = WITHIN, \
            f"{bit_mismatches(got, derived)} of {got.size} elements are {NAN_BITS}"
    elif exact:
        verdict.state, verdict.mismatches = DIFFERS, wrong
        verdict.reason = f"{wrong} of {got.size} elements differ from the original's bits"
    else:
        verdict.state = UNVERIFIABLE
        verdict.reason = (f"{wrong} of {got.size} elements differ from what onnxruntime "
                          f"computes, by ops that are not bitwise, and no ulp budget is kept "
                          f"for {got.dtype.name}")
    return verdict


def ulp_distance(got: np.ndarray, derived: np.ndarray, exact: bool,
                 summed: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per element: whether ``got`` is ``derived`` (a NaN any NaN; a zero's sign counts where
    ``exact``: 1 / -0.0 is -inf), the distance in ulps of ``derived``'s dtype, and whether it
    is within the budget of a fold that is not bitwise (``summed``: the magnitudes of the
    elements' summed terms, ``SUMMED_UNITS`` units of roundoff of which are added to it)."""
    x, y = got.astype(np.float64), derived.astype(np.float64)
    with np.errstate(all="ignore"):
        same = ((x == y) & ((x != 0) | (np.signbit(x) == np.signbit(y)) | (not exact))) | \
            (np.isnan(x) & np.isnan(y))
        diff = np.where(same, 0.0, np.abs(x - y))
        own = ulp(y, got.dtype.name)
        assert own is not None
        finite = np.isfinite(y)
        magnitude = float(np.abs(y[finite]).max()) if finite.any() else 0.0
        scale = float(ulp(np.array(magnitude), got.dtype.name))  # type: ignore[arg-type]
        ulps = np.where(same, 0.0, diff / own)
        budget = ULPS_OWN * own + ULPS_MAGNITUDE * scale
        if summed is not None and summed.shape == y.shape and got.dtype.name in ROUNDOFF:
            budget = budget + np.where(np.isfinite(summed), summed, 0.0) * (
                SUMMED_UNITS * ROUNDOFF[got.dtype.name])
        within = diff <= budget
    return same, ulps, within
