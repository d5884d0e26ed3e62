"""Size policy decided before evaluation: folds that would make the model bigger.

Folding replaces constant subgraphs by their results. That is a win only when the kept results
are no larger than the constants they replace. Two cases are refused by default:

- **growth**: a kept result larger than ``growth_factor`` times the *exclusive* constant bytes
  it comes from (constants that die with the fold). fp16 weights cast to fp32 double in size;
  a transpose of a weight that stays in use elsewhere (GPT-2's tied embedding) duplicates it.
- **model growth**: the sum of all growth above ``max_growth_bytes``.

Results under ``growth_min_bytes`` are always allowed. Sizes come from static shapes; a result
whose size is unknown before evaluation is allowed here (the expansion bound still applies).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxfold.analysis import ConstPlan, static_shape
from onnxfold.declines import DeclineKind, Reason

HALF_FLOATS = {ir.DataType.FLOAT16: 2, ir.DataType.BFLOAT16: 2}
QUANTIZED = {ir.DataType.INT8: 4, ir.DataType.UINT8: 4, ir.DataType.INT16: 2,
             ir.DataType.UINT16: 2, ir.DataType.INT4: 8, ir.DataType.UINT4: 8}


def static_nbytes(value: ir.Value) -> int | None:
    """Bytes of ``value`` from its static shape and dtype, or None."""
    if value.const_value is not None:
        return value.const_value.nbytes
    shape = static_shape(value)
    if shape is None or value.dtype is None or value.dtype == ir.DataType.STRING:
        return None
    return int(np.prod(shape, dtype=np.int64) * value.dtype.itemsize)


def _origins(plan: ConstPlan) -> dict[ir.Value, frozenset[ir.Value]]:
    """For every constant value, the source constants it is computed from."""
    origins: dict[ir.Value, frozenset[ir.Value]] = {v: frozenset((v,)) for v in plan.sources}
    for node in plan.foldable:
        found = frozenset().union(*(origins.get(v, frozenset()) for v in node.inputs
                                    if v is not None))
        for out in node.outputs:
            origins[out] = found
    return origins


def refuse_growth(plan: ConstPlan, planned: set[ir.Node], graph: ir.Graph,
                  growth_factor: float | None, growth_min_bytes: int,
                  max_growth_bytes: int | None, widening: dict[ir.DataType, int],
                  ) -> tuple[list[tuple[ir.Node, Reason]], int]:
    """Remove from ``planned`` the nodes whose kept results would grow the model; say why.

    ``widening`` maps source dtypes the user allows to widen (fp16 casts, dequantization) to
    the factor their bytes may grow by. Returns the refusals and the growth still planned.
    """
    origins = _origins(plan)
    refused: list[tuple[ir.Node, Reason]] = []
    outputs = set(graph.outputs)

    def kept(value: ir.Value) -> bool:
        return value in outputs or any(u.node not in planned for u in value.uses())

    def source_bytes(value: ir.Value) -> int:
        factor = widening.get(value.dtype, 1) if value.dtype is not None else 1
        return (static_nbytes(value) or 0) * factor

    changed = True
    while changed:
        changed = False
        alive = {s for s in plan.sources if kept(s) or s in graph.inputs}
        candidates = []
        for node in reversed(plan.foldable):
            if node not in planned:
                continue
            for out in node.outputs:
                size = static_nbytes(out)
                if size is None or size <= growth_min_bytes or not kept(out):
                    continue
                exclusive = sum(source_bytes(s) for s in origins.get(out, ()) if s not in alive)
                candidates.append((size - exclusive, size, exclusive, node))
        for _growth, size, exclusive, node in candidates:
            if growth_factor is not None and size > growth_factor * exclusive:
                shared = "; its source stays in use" if exclusive == 0 else ""
                refused.append((node, Reason(DeclineKind.GROWTH, f"result {size} B > "
                                             f"{growth_factor:g}x the {exclusive} B of constants "
                                             f"it replaces{shared}")))
                planned.discard(node)
                changed = True
        if not changed and max_growth_bytes is not None:
            total = sum(g for g, *_ in candidates if g > 0)
            by_growth = sorted(candidates, key=lambda c: c[0], reverse=True)
            for growth, _size, _exclusive, node in by_growth:
                if total <= max_growth_bytes or growth <= 0:
                    break
                refused.append((node, Reason(DeclineKind.MODEL_GROWTH, f"folding adds {total} B "
                                             f"> limit {max_growth_bytes} B")))
                planned.discard(node)
                total -= growth
                changed = True
    return refused, sum(g for g, *_rest, node in candidates if g > 0 and node in planned)


def refuse_dequantization(foldable: list[ir.Node], planned: set[ir.Node],
                          kept_ops: frozenset[str], fold_qdq: bool
                          ) -> list[tuple[ir.Node, Reason]]:
    """Quantized weights stay quantized unless ``fold_qdq``: their dequantizations (the ops
    ``rules/facts.py`` marks ``kept_quantized``) leave ``planned``; says why."""
    if fold_qdq:
        return []
    kept = [n for n in foldable if n.op_type in kept_ops]
    planned.difference_update(kept)
    why = Reason(DeclineKind.QDQ_POLICY, "quantized weights stay quantized (--fold-qdq)")
    return [(n, why) for n in kept]
