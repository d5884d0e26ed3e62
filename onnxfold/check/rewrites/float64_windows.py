"""A rewrite's windows run again in float64, to tell rounding from a wrong rewrite.

Where a window sums many terms that cancel (a Conv with a batch norm folded into its weight,
its output near zero beside terms in the hundreds), both the replaced window and its
replacement carry rounding far beyond any elementwise tolerance of the result. Run in float64
by onnx's reference evaluator, the replaced window gives the value both approximate: the
replacement is a rounding of the same computation where its error from that value is no
larger than :data:`ERROR_RATIO` times the replaced window's own (a wrong rewrite, an epsilon
dropped or a factor misplaced, is off by far more than the original's rounding).

A window that casts or reads a type attribute (its float64 run would not mean the same), or
that the reference evaluator cannot run, is not arbitrated.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx

from onnxfold.rewrite.log import Window

ERROR_RATIO = 2.0  # the replacement's worst error may be this many times the original's
TYPED_OPS = frozenset({"Cast", "CastLike", "EyeLike", "RandomNormal", "RandomUniform",
                       "RandomNormalLike", "RandomUniformLike", "Multinomial",
                       "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"})


def in_float64(window: Window, leaves: Mapping[str, np.ndarray | None],
               opsets: Mapping[str, int]) -> list[np.ndarray] | None:
    """``window``'s outputs computed in float64 from the original's ``leaves`` (by the
    original's name) and its constants, every float widened (None: not arbitrable)."""
    if any(n.op_type in TYPED_OPS or n.domain not in ("", "ai.onnx") or
           any(a.name in ("to", "dtype") or a.type in (onnx.AttributeProto.GRAPH,
                                                       onnx.AttributeProto.GRAPHS)
               for a in n.attribute) for n in window.nodes):
        return None
    feeds: dict[str, np.ndarray] = {}
    for read, original in window.originals.items():
        array = leaves.get(original)
        if array is None:
            return None
        feeds[read] = _widened(np.asarray(array))
    feeds.update({name: _widened(np.asarray(a)) for name, a in window.constants.items()})
    graph = onnx.helper.make_graph(
        list(window.nodes), "window",
        [onnx.helper.make_tensor_value_info(
            name, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
         for name, a in feeds.items()],
        [onnx.ValueInfoProto(name=o) for o in window.outputs])
    model = onnx.helper.make_model(graph, opset_imports=[
        onnx.helper.make_opsetid(d, v) for d, v in opsets.items() if d in ("", "ai.onnx")])
    try:
        from onnx.reference import ReferenceEvaluator

        return [np.asarray(a) for a in ReferenceEvaluator(model).run(None, feeds)]
    except Exception:  # the reference evaluator raises many unrelated types
        return None


def rounding_only(replaced: np.ndarray, replacement: np.ndarray, exact: np.ndarray) -> bool:
    """Whether ``replacement`` is no further from ``exact`` (the float64 value) than
    :data:`ERROR_RATIO` times ``replaced``'s worst error, with an ulp of ``exact``'s largest
    magnitude to spare (both exact is no license for a step); where ``exact`` is not finite,
    ``replacement`` is that same infinity or a NaN where it is one (-inf for +inf is no
    rounding)."""
    if replaced.shape != exact.shape or replacement.shape != exact.shape:
        return False
    with np.errstate(all="ignore"):
        truth = exact.astype(np.float64)
        got = replacement.astype(np.float64)
        old = np.abs(replaced.astype(np.float64) - truth)
        new = np.abs(got - truth)
    finite = np.isfinite(truth)
    if not np.array_equal(np.isfinite(replacement) | ~finite, np.ones_like(finite)):
        return False
    beyond, at = truth[~finite], got[~finite]
    if not np.all((beyond == at) | (np.isnan(beyond) & np.isnan(at))):
        return False
    if not finite.any():
        return True
    spare = float(np.spacing(np.asarray(np.abs(truth[finite]).max(), replaced.dtype)))
    return float(new[finite].max()) <= ERROR_RATIO * float(old[finite].max()) + spare


def _widened(array: np.ndarray) -> np.ndarray:
    return array.astype(np.float64) if array.dtype.kind == "f" or \
        array.dtype.name == "bfloat16" else array
