"""Facts about ops that decide how the engine treats them (not how to evaluate them).

- ``nondeterministic``: never folded, whatever its inputs (a fold would freeze one draw).
- ``kept_quantized``: a dequantization kept by default so a quantized model stays quantized
  and small (``--fold-qdq`` folds it); one whose result is only quantized again by foldable
  nodes folds with them into a quantized weight (``policy.refuse_dequantization``).

Shape-only ops (Shape, Size: they need an input's shape, not its data) are the folders declared
with ``shape_only=True`` in ``shape_ops.py``.
"""

from __future__ import annotations

from onnxfold.registry import OpFact

FACTS = (
    *(OpFact(op, nondeterministic=True) for op in (
        "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
        "Bernoulli", "Dropout")),  # Dropout draws its mask when training_mode is true
    OpFact("DequantizeLinear", kept_quantized=True),
)
