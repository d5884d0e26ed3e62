"""Whether a folded value's cone must give the original's bits, and, where a fold and
onnxruntime disagree, which of the two is closer to the exact value.

A cone (``running.cones``) whose every op computes bitwise what onnxruntime does (the check's
``exact_ops``: not the rules' facts), or computes no float, must give the original's bits to
the last one; one whose kernels sum in an order that follows their input's memory gives other
bits in another session even through onnxruntime, and is judged within a tolerance. Where a
fold of a sum or a transcendental differs beyond its budget, the node run alone in float64
says whether the fold is the more exact one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx_ir as ir

from onnxfold.check.judging.exact_ops import exact as exact_op
from onnxfold.check.judging.exact_ops import order_varies
from onnxfold.check.running.cones import Cones
from onnxfold.check.running.runner import MachineShort, RunFailed, Wanted, run_nodes

# ops whose result a float64 run of the node can arbitrate: where onnxruntime's float32 sum or
# transcendental is further from the exact value than the fold's, the fold is not wrong
ARBITRATED = frozenset({
    "ReduceMean", "ReduceSum", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
    "ReduceLogSumExp", "ReduceProd", "MatMul", "Gemm", "Exp", "Log", "Tanh", "Sigmoid", "Sin",
    "Cos", "Tan", "Sqrt", "Pow", "Softmax", "LogSoftmax", "Erf"})


def exact(cones: Cones, source: ir.Value) -> bool:
    """Whether every op of ``source``'s cone whose values reach it computes bitwise what
    onnxruntime does (the check's ``exact_ops``), or it computes no float
    (types inferred; a value of unknown type is taken as a float)."""
    nodes = cones.valued(source)
    return all((exact_op(n) and not order_varies(n)) or
               not any(o.dtype is None or o.dtype.is_floating_point() for o in n.outputs)
               for n in nodes)


def reproducible(cones: Cones, source: ir.Value) -> bool:
    """Whether onnxruntime computes ``source``'s cone with the same bits wherever it runs
    it: no node of it sums in an order that varies with its input's memory (a fold through
    onnxruntime is then the original's bits; else it is judged within a tolerance)."""
    return not any(order_varies(n) for n in cones.valued(source))


def arbitrate(cones: Cones, source: ir.Value, folded: np.ndarray, derived: np.ndarray,
              inputs: Mapping[str, np.ndarray]) -> str | None:
    """Where ``folded`` and onnxruntime's ``derived`` disagree beyond the budget: if
    ``source``'s node, run in float64 on the inputs onnxruntime computed for it, is at
    least as close to ``folded`` as to ``derived`` at every element, say so (the fold is
    the more exact one); None otherwise, or where it cannot be run in float64."""
    node = source.producer()
    if node is None or node.op_type not in ARBITRATED or node.domain not in ("", "ai.onnx") \
            or len(node.outputs) != 1 or folded.dtype.kind != "f":
        return None
    try:
        reads = [v for v in node.inputs if v is not None]
        computed = cones.run(reads, inputs) if reads else {}
        exact = _in_float64(node, [computed[v] if v is not None else None
                                   for v in node.inputs], cones.model, cones.libraries)
    except (RunFailed, MachineShort):
        return None
    if exact is None or exact.shape != folded.shape:
        return None
    with np.errstate(all="ignore"):
        fold_error = np.abs(folded.astype(np.float64) - exact)
        ort_error = np.abs(derived.astype(np.float64) - exact)
        spacing = np.spacing(np.abs(exact).astype(folded.dtype)).astype(np.float64)
    both = np.isfinite(fold_error) & np.isfinite(ort_error)
    if not both.all() or not np.all(fold_error <= ort_error + spacing):
        return None
    scale = np.where(spacing > 0, spacing, 1.0)
    return (f"closer to the float64 value of {node.op_type} than onnxruntime's "
            f"{folded.dtype} (max {float((fold_error / scale).max()):.3g} ulps from it, "
            f"onnxruntime {float((ort_error / scale).max()):.3g})")


def _in_float64(node: ir.Node, arrays: list[np.ndarray | None], model: ir.Model,
                libraries: Sequence[str]) -> np.ndarray | None:
    """``node`` run alone by onnxruntime with its float inputs widened to float64 (None where
    onnxruntime has no float64 kernel for it)."""
    proto = ir.serde.serialize_node(node)
    inputs: dict[str, np.ndarray] = {}
    for name, arr in zip(proto.input, arrays):
        if name and arr is not None:
            inputs[name] = arr.astype(np.float64) if arr.dtype.kind == "f" else arr
    try:
        (result,) = run_nodes([proto], [Wanted(proto.output[0])], inputs=inputs,
                              opsets=dict(model.opset_imports), ir_version=model.ir_version,
                              libraries=libraries)
    except (RunFailed, MachineShort):
        return None
    return np.asarray(result, np.float64)
