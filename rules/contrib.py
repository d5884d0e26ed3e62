"""onnxruntime's contrib ops (domain ``com.microsoft``): they fold through the onnxruntime
fallback, which sizes their outputs before running them; these draw random numbers and never
fold. Facts are by op name, so the names here must not be those of deterministic ops."""

from __future__ import annotations

from onnxfold.declare import OpFact

FACTS = tuple(OpFact(op, nondeterministic=True) for op in (
    "BiasDropout", "BitmaskDropout", "BitmaskBiasDropout", "Sampling", "BeamSearch",
    "GreedySearch", "WhisperBeamSearch"))
