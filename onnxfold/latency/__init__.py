"""Latency: both models timed in onnxruntime, interleaved (``--latency``). Not accuracy: it
reuses the check's floor (feeds, sessions) and judges speed only."""
