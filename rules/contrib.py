"""onnxruntime's contrib ops (domain ``com.microsoft``): they fold through the onnxruntime
fallback, which sizes their outputs before running them; these draw random numbers and never
fold. Facts are by op name, so the names here must not be those of deterministic ops. And the
ops onnxruntime registers in the default domain where onnx has none (genai's builder emits
SimplifiedLayerNormalization there): onnxruntime's, not a plugin's
(``tests/unit/test_runtime_ops.py`` holds the list to onnxruntime's kernel registry)."""

from __future__ import annotations

from onnxfold.declare import OpFact

FACTS = tuple(OpFact(op, nondeterministic=True) for op in (
    "BiasDropout", "BitmaskDropout", "BitmaskBiasDropout", "Sampling", "BeamSearch",
    "GreedySearch", "WhisperBeamSearch"))

DEFAULT_DOMAIN = ("SimplifiedLayerNormalization", "Affine", "Crop", "DynamicSlice", "ImageScaler",
                  "ParametricSoftplus", "Scale", "ScaledTanh")
RUNTIME_OPS = tuple(OpFact(op, runtime_op=True) for op in DEFAULT_DOMAIN)
