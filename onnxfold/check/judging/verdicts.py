"""One verdict type for everything the check computes again: a folded tensor re-derived from
the original (``check.folds``) and a rewrite's replacement run against the window it replaced
(``check.rewrites``).

The states, and what each claims:

- **bitwise** / **within**: equal to what the original computes, bit for bit, or within the
  budget of what is not bitwise (``docs/exactness.md``, ``docs/check.md``);
- **sampled**: equal wherever the check ran it, not shown for every value of the dims;
- **differs**: the check fails, naming it and how;
- **not verifiable** (a tensor) / **not validated** (a rewrite): nothing could compute it
  again, with the reason (counted by reason, each naming what it concerns);
- **parameter of a rewrite**: a constant a rewrite built, judged with its rewrite.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

BITWISE, WITHIN, SAMPLED, DIFFERS = "bitwise", "within", "sampled", "differs"
UNVERIFIABLE, UNVALIDATED, PARAMETER = "not verifiable", "not validated", "parameter of a rewrite"
AGREES = (BITWISE, WITHIN)  # what computing it again agreed with
SHOWN_NAMES = 3  # names listed after a reason that several share
# a tensor of structure: an axes, shape or sizes tensor of at most this many integers (a
# recipe may hold such constants itself; a file's word may route such a tensor to the
# windows that read it, which judge it exactly)
STRUCTURE_ELEMENTS = 64


@dataclass
class Verdict:
    """What computing one thing again gave: ``name`` is a folded tensor's name, or a
    rewrite's ``RULE at NODE``."""

    name: str
    state: str
    reason: str = ""  # DIFFERS: how; UNVERIFIABLE, UNVALIDATED, SAMPLED: why; WITHIN: when
    max_ulps: float | None = None  # floats: the largest difference in ulps
    max_abs: float = 0.0  # the largest absolute difference where it is within
    mismatches: int = 0  # DIFFERS: elements outside the budget
    # a folded tensor's: its dtype and shape, what it was re-derived from ("original", "stands
    # for NAME", "recipe", "rewrite"), how a match holds over the dims (STATIC, PROVED), and at
    # how many bindings of the dims it was re-derived
    dtype: str = ""
    shape: list[int] = field(default_factory=list)
    via: str = ""
    dims: str = ""
    bindings: int = 0
    rule: str = ""  # a rewrite's rule and the node it was put in at
    node: str = ""
    output: str = ""  # a rewrite that differs: the replaced value it differs at
    # a rewrite validated at some input sets: those the machine ran short at (numbered from 1)
    unrun: list[int] = field(default_factory=list)


class Verdicts:
    """What a list of verdicts (``self.verdicts``) says together."""

    verdicts: list[Verdict]

    @property
    def ok(self) -> bool:
        return not any(v.state == DIFFERS for v in self.verdicts)

    def __bool__(self) -> bool:
        return self.ok

    def count(self, state: str) -> int:
        return sum(v.state == state for v in self.verdicts)

    @property
    def failing(self) -> list[str]:
        return [v.name for v in self.verdicts if v.state == DIFFERS]

    def reasons(self, state: str) -> dict[str, int]:
        """The reasons of the verdicts in ``state``, each with how many give it."""
        return dict(Counter(v.reason for v in self.verdicts if v.state == state))

    def reason_lines(self, state: str) -> list[str]:
        """One line per reason of ``state``: how many, why, and whom it concerns."""
        lines = []
        for reason, n in self.reasons(state).items():
            names = [v.name for v in self.verdicts if v.state == state and v.reason == reason]
            more = f" and {n - SHOWN_NAMES} more" if n > SHOWN_NAMES else ""
            lines.append(f"  {state} ({n}): {reason} ({', '.join(names[:SHOWN_NAMES])}{more})")
        return lines
