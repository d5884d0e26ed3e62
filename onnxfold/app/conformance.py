"""The ONNX node test suite as a folding oracle.

``onnx.backend.test.case.node.collect_testcases`` builds ~1,900 single-op models with inputs and
expected outputs. Each case's inputs become initializers; onnxfold must then either fold the
graph completely, with values equal to the expected outputs within the case's tolerances, or
say why not (non-deterministic op, unsupported type, ...). A case onnxruntime can run but
onnxfold leaves unfolded is a gap; a folded value that differs is *wrong*.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass

import numpy as np
import onnx
import onnx_ir as ir
from onnx import numpy_helper

from onnxfold.analysis.declines import DeclineKind
from onnxfold.ir.constants import constant_array
from onnxfold.pipeline.optimizer import optimize
from onnxfold.pipeline.options import FoldOptions

FOLDED_NATIVE, FOLDED_FALLBACK, DECLINED, GAP, WRONG = (
    "folded_native", "folded_fallback", "declined", "gap", "wrong")


@dataclass
class CaseResult:
    """How one node test case went."""

    name: str
    ops: str
    outcome: str
    reason: str = ""
    ort_runs: bool = False


def collect_cases() -> list:
    import warnings

    import onnx.backend.test.case.node as node_cases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return [c for c in node_cases.collect_testcases("") if c.kind == "node"]


def _ort_outputs(model: onnx.ModelProto, inputs: list) -> list | None:
    """onnxruntime's outputs for the case, or None if it cannot run it."""
    from onnxfold.host.ort_sessions import open_session

    try:
        sess = open_session(model.SerializeToString())
        names = [i.name for i in sess.get_inputs()]
        return sess.run(None, dict(zip(names, inputs)))
    except Exception:  # any failure means onnxruntime cannot run this case
        return None


def _as_initializers(model: onnx.ModelProto, inputs: list) -> onnx.ModelProto | None:
    folded = onnx.ModelProto()
    folded.CopyFrom(model)
    graph = folded.graph
    for info, value in zip(list(graph.input), inputs):
        if isinstance(value, np.generic):  # a scalar input (a Dropout's ratio, training_mode)
            value = np.asarray(value)
        if not isinstance(value, np.ndarray):
            return None
        graph.initializer.append(numpy_helper.from_array(value, info.name))
    del graph.input[:]
    return folded


def _equal(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> str | None:
    """None when equal within tolerance, else what differs."""
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} != {want.dtype}"
    if want.dtype.kind in "OSUb" or want.dtype.kind in "iu":
        return None if np.array_equal(got, want) else "values differ"
    g, w = got.astype(np.float64), want.astype(np.float64)
    if np.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True):
        return None
    return f"max abs diff {np.nanmax(np.abs(g - w)):.3g}"


def run_case(case, strict: bool = False) -> CaseResult:
    """Fold one node test case and judge the result."""
    ops = ",".join(sorted({n.op_type for n in case.model.graph.node}))
    inputs, expected = case.data_sets[0]
    ort_out = _ort_outputs(case.model, list(inputs))
    result = CaseResult(case.name, ops, DECLINED, ort_runs=ort_out is not None)
    model = _as_initializers(case.model, list(inputs))
    if model is None:
        result.reason = "unsupported type: sequence/optional input"
        return result
    try:
        ir_model = ir.serde.deserialize_model(model)
        options = FoldOptions.everything(strict=strict)  # exactness is checked, not policy
        report = optimize(ir_model, options).report
    except Exception as e:
        if strict:
            raise
        result.outcome, result.reason = WRONG, f"crash: {type(e).__name__}: {e}"[:200]
        return result
    outputs = [constant_array(v) for v in ir_model.graph.outputs]
    remaining = [n for n in ir_model.graph if n.op_type != "Constant"]
    if any(o is None for o in outputs) or remaining:
        reasons = sorted(report.declined)
        result.reason = "; ".join(reasons) or "not folded, no reason given"
        result.outcome = GAP if result.ort_runs and not _acceptable(reasons) else DECLINED
        return result
    for i, (got, want) in enumerate(zip(outputs, expected)):
        assert got is not None  # a None output returned above
        if isinstance(want, onnx.TensorProto):  # cases of types numpy cannot name (int16 blocks)
            want = numpy_helper.to_array(want)
        diff = _equal(got, np.asarray(want), case.rtol, case.atol)
        # onnxfold promises onnxruntime's values; note where the runtime itself deviates
        if (diff is not None and ort_out is not None
                and _equal(got, np.asarray(ort_out[i]), case.rtol, case.atol) is None):
                result.reason = "matches onnxruntime, which deviates from the reference"
                continue
        if diff is not None:
            result.outcome, result.reason = WRONG, diff
            return result
    result.outcome = FOLDED_FALLBACK if report.folded_fallback else FOLDED_NATIVE
    return result


ACCEPTED = frozenset(k.value for k in (DeclineKind.NON_DETERMINISTIC,
                                       DeclineKind.UNSUPPORTED_TYPE, DeclineKind.CUSTOM_DOMAIN,
                                       DeclineKind.HALF_PRECISION))


def _acceptable(kinds: list[str]) -> bool:
    return bool(kinds) and all(k in ACCEPTED for k in kinds)


def _run_index(index: int) -> CaseResult:
    return run_case(_CASES[index])


_CASES: list = []


def run_all(jobs: int | None = None) -> list[CaseResult]:
    """Every node test case, in ``jobs`` processes."""
    global _CASES
    _CASES = collect_cases()
    jobs = jobs or os.cpu_count() or 1
    if jobs == 1:
        return [run_case(c) for c in _CASES]
    with ProcessPoolExecutor(jobs) as pool:
        return list(pool.map(_run_index, range(len(_CASES)), chunksize=16))


def summarize(results: list[CaseResult]) -> dict:
    """Totals, per-op outcomes and every non-folded case with its reason (JSON-ready)."""
    totals = Counter(r.outcome for r in results)
    per_op: dict[str, Counter] = defaultdict(Counter)
    for r in results:
        per_op[r.ops][r.outcome] += 1
    reasons = Counter(r.reason.split(":")[0] for r in results if r.outcome == DECLINED)
    runnable = [r for r in results if r.ort_runs]
    return {
        "cases": len(results),
        "totals": dict(totals),
        "declined_by_reason": dict(reasons),
        "ort_runnable": len(runnable),
        "ort_runnable_folded": sum(r.outcome.startswith("folded") for r in runnable),
        "per_op": {op: dict(c) for op, c in sorted(per_op.items())},
        "not_folded": [asdict(r) for r in results if not r.outcome.startswith("folded")],
    }

