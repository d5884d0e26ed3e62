"""What the fold reads of a run's options, as frozen values: each step gets the slice it uses.

The plan and materialization read the :class:`SizePolicy` (what a fold may cost in bytes),
the evaluation reads the :class:`Evaluation` limits (fallback, timeout, memory), and the fold
of a model reads :class:`FoldSettings`, which holds both and what decides constness. The user's
``FoldOptions`` (``onnxfold.pipeline.options``) takes its defaults from these classes and
builds them (``FoldOptions.fold_settings``), so a fold called without options folds as a run
with none does.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SizePolicy:
    """Which folds are refused for their size (docs/policy.md).

    ``expansion_factor``, ``expansion_min_bytes``: a result above both this many times its
    inputs' bytes and this size stays computed at run time; ``max_tensor_bytes``: no result
    larger than this; ``growth_factor`` (None: no bound), ``growth_min_bytes``: a kept result
    may be this many times the constants it replaces, above this size; ``max_growth_bytes``:
    the whole run's growth; ``fold_fp16_casts``, ``fold_qdq``: widening casts of float16
    weights and dequantizations of quantized ones fold too.
    """

    expansion_factor: float = 4.0
    expansion_min_bytes: int = 1 << 20
    max_tensor_bytes: int | None = None
    growth_factor: float | None = 1.0
    growth_min_bytes: int = 1 << 20
    max_growth_bytes: int | None = None
    fold_fp16_casts: bool = False
    fold_qdq: bool = False


@dataclass(frozen=True)
class Evaluation:
    """How planned nodes are evaluated.

    ``fallback``: nodes no native rule folds run in onnxruntime; ``fold_timeout``: seconds an
    onnxruntime fold may take (None: no bound); ``memory_limit``: the pool's heap, beyond which
    it spills to files; ``pool_budget``: what the pool may hold (None: from the machine's
    memory); ``strict``: a rule that fails raises instead of being declined.
    """

    fallback: bool = True
    fold_timeout: float | None = 30.0
    memory_limit: int | None = None
    pool_budget: int | None = None
    strict: bool = False


@dataclass(frozen=True)
class FoldSettings:
    """Everything one fold of a model reads: what counts as constant, the size policy and the
    evaluation limits.

    ``keep``: op types and node names never folded (``--keep``); ``inputs_are_constant``:
    initializers that are also graph inputs are constants; ``shape_folding``: Shape and Size
    of statically known shapes fold.
    """

    keep: frozenset[str] = frozenset()
    inputs_are_constant: bool = False
    shape_folding: bool = True
    policy: SizePolicy = field(default_factory=SizePolicy)
    evaluation: Evaluation = field(default_factory=Evaluation)
