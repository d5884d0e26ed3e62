"""How far timings spread, and what a ratio of two models' timings says once they do.

A latency is a distribution, not a number: on a loaded machine one model's runs move by 2x
from one to the next. Each model's samples are summed up as their median and spread
(:class:`Spread`: the quartiles from :data:`QUARTILES_FROM` samples, below that the range), and
the two models are compared run by run: the runs were interleaved (A B B A ...), so each
optimized run has an original run next to it that met the same load, and their ratio cancels
it. The ratio's median and spread then give the verdict (:func:`verdict`): *faster* or
*slower* only where the whole spread of at least :data:`MIN_PAIRS` pairs (their quartiles) is
on one side of 1.0x, *within noise* where it covers 1.0x, and *too few runs to tell* from
fewer pairs: the range of 3 samples was all on one side in 6 of 7 runs of a model against
itself (which session is created first moves its time by +-20%).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

QUARTILES_FROM = 8  # samples from which the spread is the quartiles, not the range
MIN_PAIRS = QUARTILES_FROM  # pairs below which no verdict is given: the quartiles need them
FASTER, SLOWER, NOISE, TOO_FEW = "faster", "slower", "within noise", "too few runs to tell"


@dataclass(frozen=True)
class Spread:
    """The median of some samples and how far they spread: ``low``..``high`` are the first
    and third quartiles (``kind`` "quartiles"), or the minimum and maximum ("range")."""

    median: float
    low: float
    high: float
    kind: str
    samples: int

    @classmethod
    def of(cls, samples: Sequence[float]) -> Spread:
        """The spread of ``samples`` (at least one)."""
        values = sorted(samples)
        if len(values) >= QUARTILES_FROM:
            low, _, high = statistics.quantiles(values, n=4, method="inclusive")
            return cls(statistics.median(values), low, high, "quartiles", len(values))
        return cls(statistics.median(values), values[0], values[-1], "range", len(values))

    def covers(self, value: float) -> bool:
        return self.low <= value <= self.high

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def paired_ratios(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """``b[i] / a[i]``: each optimized sample against the original one taken beside it."""
    return [y / x for x, y in zip(a, b) if x > 0]


def verdict(ratio: Spread) -> str:
    """What the spread of the paired ratios says: faster, slower, within noise (it covers
    1.0x), or nothing from fewer than :data:`MIN_PAIRS` pairs."""
    if ratio.samples < MIN_PAIRS:
        return TOO_FEW
    if ratio.covers(1.0):
        return NOISE
    return FASTER if ratio.high < 1.0 else SLOWER
