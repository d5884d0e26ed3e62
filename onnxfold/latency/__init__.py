"""Latency: both models timed in onnxruntime, interleaved (``--latency``). Not accuracy: it
reuses the check's floor (feeds, sessions) and judges speed only."""

# the most timed runs a measurement takes (``--latency N``, ``measure_latency(runs=)``): a
# million runs of the smallest model already take hours; more is a typo, refused at once
MAX_RUNS = 1_000_000
