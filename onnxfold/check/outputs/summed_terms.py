"""Outputs judged again, where rtol/atol alone find elements apart, with the magnitude of what
was summed to make each element (``judging.magnitudes``, ``judging.tolerance``).

An element of a sum whose terms cancel carries their rounding, not its own: a convolution
with standardized weights gives outputs near zero from terms of a few hundred, and two honest
evaluations of it differ there by far more than ``1e-4`` of the element. The first pass of the
comparison judges every element by rtol/atol; an output with elements outside is judged again,
over every input set, with those elements allowed ``SUMMED_UNITS`` units of roundoff of the
magnitude of their summed terms, which the original computes in onnxruntime on the same feeds
(a model of its nodes and their twins, through the check's own runner). Where that model
cannot run (an op onnxruntime has no kernel for in a twin, the machine short of memory),
rtol/atol alone judge, and a note says so. Where the outputs ran stage by stage (no session
over the whole original fits), so do the original and its twins, with the same budget of
weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np
import onnx_ir as ir

from onnxfold.check.judging.magnitudes import magnitudes, magnitudes_in_stages
from onnxfold.check.judging.tolerance import ROUNDOFF, for_dtype
from onnxfold.check.outputs.differences import OutputDiff, accumulate, as_array
from onnxfold.check.running.cones import reinferred
from onnxfold.check.running.models import ModelRef, graph_of
from onnxfold.check.running.runner import MachineShort, RunFailed


def candidates(rows: dict[str, OutputDiff], rtol: float | None, atol: float | None
               ) -> list[str]:
    """The outputs the magnitudes may judge again: elements outside rtol/atol, the same
    shapes and dtypes in both models, a dtype the magnitudes apply to, and no tolerance the
    caller gave (``--rtol``/``--atol`` mean that formula alone)."""
    return [name for name, row in rows.items() if row.mismatches and row.shapes_equal and
            row.dtypes_equal and row.dtype_a in ROUNDOFF and
            for_dtype(np.dtype(row.dtype_a), rtol, atol).summed_units]


def judge_again(rows: dict[str, OutputDiff], names: Sequence[str], a: ModelRef, label: str,
                sets: Sequence[tuple[dict[str, np.ndarray], list, list]],
                outputs: Sequence[str], rtol: float | None, atol: float | None,
                libraries: Sequence[str], budget: int | None = None, level: str = "all"
                ) -> str:
    """Rebuild the rows of ``names`` over ``sets`` (each: the feeds, A's and B's outputs in
    the order of ``outputs``) with the magnitudes of their elements (computed stage by
    stage, ``budget`` bytes of weights each, where it is given); "" or a note on those whose
    magnitudes could not be computed (their rows are left as they are). The outputs are
    computed together, and where that fails each alone: one output whose twins cannot run (a
    sequence, the result of a subgraph onnxruntime refuses as a twin) costs no other its
    magnitudes."""
    model = reinferred(graph_of(a, label))
    by_name = {str(v.name): v for v in model.graph.outputs}
    if any(name not in by_name for name in names):
        return "the magnitudes of the summed terms were not computed: an output is not one " \
            "of the original's graph outputs"
    tensors = [name for name in names if isinstance(by_name[name].type, ir.TensorType) and
               by_name[name].dtype is not None]  # (a sequence has no twin)
    failed: dict[str, str] = {name: "not a tensor" for name in names if name not in tensors}
    groups = [tensors] if tensors else []
    while groups:
        group = groups.pop()
        found = _computed(model, [by_name[name] for name in group], sets, budget, libraries,
                          level)
        if isinstance(found, Exception):
            if len(group) > 1:
                groups.extend([name] for name in group)
            else:
                failed[group[0]] = str(found).splitlines()[0][:160] if str(found) else \
                    type(found).__name__
            continue
        _rebuilt(rows, group, found, sets, outputs, rtol, atol)
    if not failed:
        return ""
    return (f"the magnitudes of the summed terms of {', '.join(failed)} could not be computed "
            f"({next(iter(failed.values()))}): rtol/atol alone judged them")


def _computed(model: ir.Model, values: list[ir.Value],
              sets: Sequence[tuple[dict[str, np.ndarray], list, list]], budget: int | None,
              libraries: Sequence[str], level: str) -> list[list[np.ndarray]] | Exception:
    """The twins of ``values`` on each set's feeds, or what stopped them."""
    try:
        if budget is not None:
            found = magnitudes_in_stages(model, values, [feeds for feeds, _, _ in sets],
                                         budget, libraries, level)
            stopped = next((e for e in found if isinstance(e, Exception)), None)
            return stopped if stopped is not None else \
                [cast(list[np.ndarray], f) for f in found]
        return [magnitudes(model, values, feeds, libraries) for feeds, _, _ in sets]
    except (RunFailed, MachineShort) as e:
        return e


def _rebuilt(rows: dict[str, OutputDiff], names: Sequence[str],
             computed: list[list[np.ndarray]],
             sets: Sequence[tuple[dict[str, np.ndarray], list, list]], outputs: Sequence[str],
             rtol: float | None, atol: float | None) -> None:
    """The rows of ``names`` judged again with their ``computed`` magnitudes."""
    position = {name: k for k, name in enumerate(outputs)}
    for k, name in enumerate(names):
        old = rows[name]
        row = OutputDiff(old.name, old.dtype_a, old.dtype_b, old.shape_a, old.shape_b)
        for (_, got_a, got_b), summed in zip(sets, computed):
            va, vb = as_array(got_a[position[name]]), as_array(got_b[position[name]])
            accumulate(row, va, vb, rtol, atol, summed=summed[k])
        rows[name] = row
