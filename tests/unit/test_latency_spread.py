"""How ``--latency`` sums up timings (``onnxfold.latency.spread``): each model's median and
spread (quartiles from 8 samples, else the range), the run-by-run ratios and the verdict they
give: faster or slower only where the whole spread of at least 8 pairs is on one side of
1.0x, within noise where it covers 1.0x, too few runs to tell below 8 pairs; session creation
is timed 8 times per model, each model created first in half the pairs."""

from __future__ import annotations

import math

import pytest

from onnxfold.latency.measure import CREATIONS, Timing
from onnxfold.latency.spread import (
    FASTER,
    MIN_PAIRS,
    NOISE,
    SLOWER,
    TOO_FEW,
    Spread,
    paired_ratios,
    verdict,
)


def test_few_samples_spread_over_their_range():
    spread = Spread.of([3.0, 1.0, 2.0])
    assert (spread.median, spread.low, spread.high, spread.kind) == (2.0, 1.0, 3.0, "range")


def test_eight_samples_spread_over_their_quartiles():
    spread = Spread.of([float(v) for v in range(1, 9)])
    assert spread.kind == "quartiles" and spread.median == 4.5
    assert (spread.low, spread.high) == (2.75, 6.25)  # inclusive quartiles, not the range


@pytest.mark.parametrize(("ratios", "says"), [
    ([0.5, 0.6, 0.55, 0.52, 0.58, 0.61, 0.49, 0.7], FASTER),
    ([1.5, 1.6, 1.45, 1.52, 1.7, 1.2, 1.35, 1.4], SLOWER),
    # the 0.51x and 8.37x: a spread over 1.0x
    ([0.5, 8.37, 0.9, 1.2, 1.0, 0.95, 1.1, 0.8], NOISE),
    ([0.5, 0.6], TOO_FEW),
    # three session creations all on one side: which model was created first moved each by
    # +-20%, and the range of three called that "slower" in 6 of 7 runs
    ([1.12, 1.08, 1.15], TOO_FEW),
    ([1.2, 0.85, 1.18, 0.84, 1.22, 0.86, 1.19, 0.83], NOISE),  # first-created alternating
])
def test_the_verdict_follows_the_spread_of_the_ratios(ratios, says):
    assert verdict(Spread.of(ratios)) == says


def test_ratios_pair_each_optimized_sample_with_the_original_beside_it():
    assert paired_ratios([2.0, 4.0, 0.0], [1.0, 8.0, 1.0]) == [0.5, 2.0]  # a 0 is skipped


def test_a_timing_compares_run_by_run():
    """Both models slowed by the same load in the same pair: the medians' ratio moves, the
    paired ratios do not."""
    timing = Timing("all", ((10.0, 10.0, 10.0), (5.0, 5.0, 5.0)),
                    ((1.0, 4.0, 1.0, 4.0) * 2, (0.5, 2.0, 0.5, 2.0) * 2))
    run = timing.compared("run")
    assert run["ratio"]["median"] == run["ratio"]["low"] == run["ratio"]["high"] == 0.5
    assert run["verdict"] == FASTER and timing.create_ratio == 0.5
    assert math.isclose(run["original"]["median"], 2.5)


def test_session_creation_is_timed_often_enough_for_a_verdict_in_balanced_order():
    assert CREATIONS >= MIN_PAIRS and CREATIONS % 2 == 0
