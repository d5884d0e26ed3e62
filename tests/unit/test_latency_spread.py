"""How ``--latency`` sums up timings (``onnxfold.latency.spread``): each model's median and
spread (quartiles from 8 samples, else the range), the run-by-run ratios and the verdict they
give: faster or slower only where the whole spread is on one side of 1.0x."""

from __future__ import annotations

import math

import pytest

from onnxfold.latency.measure import Timing
from onnxfold.latency.spread import (
    FASTER,
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
    ([0.5, 0.6, 0.55, 0.52, 0.58], FASTER),
    ([1.5, 1.6, 1.45, 1.52, 1.7], SLOWER),
    ([0.5, 8.37, 0.9, 1.2, 1.0], NOISE),  # the 0.51x and 8.37x: a spread over 1.0x
    ([0.5, 0.6], TOO_FEW),
])
def test_the_verdict_follows_the_spread_of_the_ratios(ratios, says):
    assert verdict(Spread.of(ratios)) == says


def test_ratios_pair_each_optimized_sample_with_the_original_beside_it():
    assert paired_ratios([2.0, 4.0, 0.0], [1.0, 8.0, 1.0]) == [0.5, 2.0]  # a 0 is skipped


def test_a_timing_compares_run_by_run():
    """Both models slowed by the same load in the same pair: the medians' ratio moves, the
    paired ratios do not."""
    timing = Timing("all", ((10.0, 10.0, 10.0), (5.0, 5.0, 5.0)),
                    ((1.0, 4.0, 1.0, 4.0), (0.5, 2.0, 0.5, 2.0)))
    run = timing.compared("run")
    assert run["ratio"]["median"] == run["ratio"]["low"] == run["ratio"]["high"] == 0.5
    assert run["verdict"] == FASTER and timing.create_ratio == 0.5
    assert math.isclose(run["original"]["median"], 2.5)
