"""What one node of an op computes, as a rule declares it (``rules/op_costs.py``): read by the
signature's compute (``onnxfold.signature.compute``), which holds the formula of each kind.

A *kind*: ``contraction`` (MatMul, Gemm: each output element a dot product of ``K`` terms),
``convolution`` (each output element the weights' ``C/group x kernel`` terms; transposed: each
input element scattered through them), ``elementwise`` (``factor`` FLOPs per output element),
``reduction`` (``factor`` per input element: a Softmax, a normalization), ``attention``
(onnxruntime's fused attention with a KV cache, GroupQueryAttention: the scores and their
weighted sum over the present keys, and the scores' softmax), ``free`` (data movement). A MAC
is one multiply and one add: 2 FLOPs.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("contraction", "convolution", "transposed convolution", "elementwise", "reduction",
         "attention", "free")


@dataclass(frozen=True)
class OpCost:
    """What one node of ``op_type`` computes (``rules/op_costs.py``): its ``kind`` (one of
    :data:`KINDS`), ``factor`` FLOPs per element where the kind counts elements, ``weights``:
    the input holding a convolution's weights (QLinearConv's is 3), ``bias``: an input added
    to each output element of a contraction where given (Gemm's C: one FLOP each)."""

    op_type: str
    kind: str
    factor: int = 1
    weights: int = 1
    bias: int | None = None
    domain: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"{self.name}: kind {self.kind!r} is none of {KINDS}")

    @property
    def name(self) -> str:
        """``cost.<op>``, for listings."""
        return f"cost.{self.op_type}"
