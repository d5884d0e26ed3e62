"""Compare two models' outputs in onnxruntime on the same inputs.

Folding must not change what a model computes. This runs the original and the rewritten model
one after the other (CPU, at onnxruntime's default optimization level unless told otherwise:
the original as a user runs it) on seeded random or user-supplied inputs
(:mod:`onnxfold.check.feeds`), and reports per output how far apart they are
(``compare_result.py``). When the second model carries onnxfold's provenance, every folded
tensor is also re-derived from the original without any input
(:mod:`onnxfold.check.fold_verification`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx_ir as ir

from onnxfold.check import memory_room
from onnxfold.check.compare_options import CompareOptions
from onnxfold.check.compare_result import (
    CompareResult,
    OutputDiff,
    accumulate,
    as_array,
)
from onnxfold.check.feeds import FeedPlan, dtype_name, load_given
from onnxfold.check.fold_verification import verify_folds
from onnxfold.check.levels import DEFAULT_LEVEL
from onnxfold.check.sessions import (
    ModelRef,
    graph_of,
    label_of,
    open_session,
    out_of_memory,
    run_session,
)
from onnxfold.declare.catalogue import Catalogue, load_catalogue
from onnxfold.errors import InputError, one_line
from onnxfold.fold.materialize import PROVENANCE_KEY
from onnxfold.fold.recipes import Recipe
from onnxfold.runtime import custom_ops


class CheckCouldNotRun(InputError):
    """The reference (model A) does not run on the feeds: nothing was compared. Bad input
    (exit 2), but a run that folded keeps its products (its table, ``--json``, ``--report``)."""








def _names_differ(what: str, a: Sequence[str], b: Sequence[str]) -> str | None:
    only_a, only_b = [x for x in a if x not in b], [x for x in b if x not in a]
    if not only_a and not only_b:
        return None
    parts = [f"only in A: {', '.join(only_a)}" if only_a else "",
             f"only in B: {', '.join(only_b)}" if only_b else ""]
    return f"the models' {what} differ ({'; '.join(p for p in parts if p)})"






def _run_reference(sess, label: str, outputs: list[str], feeder: FeedPlan, seed: int, n: int,
                   run_options, progress: Callable[[str], None] = lambda text: None
                   ) -> tuple[list[dict], list[list], list[str]]:
    """Model A's feeds and outputs for ``n`` input sets. A binding of guessed dims that A
    itself cannot run is dropped (and said in a note) while another one remains."""
    failed: list[str] = []  # the guessed dims of each binding A could not run
    while True:
        all_feeds = [feeder.feeds(seed + k, k) for k in range(n)]
        try:
            results = []
            for k, feeds in enumerate(all_feeds):
                progress(f"original {k + 1}/{n}")
                results.append(run_session(sess, label, outputs, feeds, run_options,
                                           feeder.guesses()))
        except InputError as e:
            if not feeder.guessed:
                raise
            if out_of_memory(str(e)):  # smaller images, never larger
                smaller = feeder.next_smaller()
                if smaller is None:
                    raise
                dropped, feeder.bindings = feeder.bindings[0], [smaller]
            elif len(feeder.bindings) > 1:
                dropped = feeder.bindings.pop(0)
            elif (larger := feeder.next_larger()) is not None:
                dropped, feeder.bindings = feeder.bindings[0], [larger]
            else:
                raise
            failed.append(feeder.guessed_values(dropped))
            reason = "onnxruntime ran out of memory" if out_of_memory(str(e)) else \
                one_line(e).removeprefix(f"{label}: ").split("; dims guessed")[0]
            continue
        notes = [f"the reference could not run the guessed dims {' or '.join(failed)} "
                 f"({reason[:160]})"] if failed else []
        return all_feeds, results, notes


def compare(a: ModelRef, b: ModelRef, *,
            inputs: Mapping[str, np.ndarray] | str | os.PathLike | None = None, n: int = 1,
            seed: int = 0, dims: Mapping[str, int] | None = None,
            int_ranges: Mapping[str, tuple[int, int]] | None = None,
            rtol: float | None = None, atol: float | None = None,
            custom_op_libraries: Sequence[str | os.PathLike] = (),
            level: str = DEFAULT_LEVEL, verify: bool | None = None,
            recipes: Mapping[str, Recipe] | None = None,
            progress: Callable[[str], None] | None = None,
            catalogue: Catalogue | None = None) -> CompareResult:
    """Run models ``a`` and ``b`` (paths or ``onnx.ModelProto``) on the same inputs.

    Inputs are ``inputs`` (a dict or an .npz path) where given, else seeded random data shaped
    from model A's inputs (``dims`` binds symbolic dimensions, the rest are 1). ``n`` input sets
    use seeds ``seed .. seed+n-1``. An element matches when it is within the tolerance of its
    output's dtype (:mod:`onnxfold.check.tolerance`: float16/bfloat16 in ulps, float32 by rtol 1e-4
    and atol 1e-5, the rest exactly), or within ``atol + rtol*|b|`` when ``rtol`` or ``atol`` is
    given, or both are NaN. Raises InputError when a model cannot be read or run, or the I/O
    names differ. ``custom_op_libraries``: shared libraries of custom ops onnxruntime loads
    for both models (:mod:`onnxfold.runtime.custom_ops`). ``level``: onnxruntime's graph
    optimization level for both sessions (``disable``, ``basic``, ``extended``, ``all``: its
    default, how a user runs a model). ``verify``: re-derive every folded tensor of ``b`` from
    ``a`` (:func:`~onnxfold.check.fold_verification.verify_folds`); None: when ``b`` carries
    onnxfold's provenance. ``recipes``: how the fold computed ``b``'s tensors, when the caller
    folded it (:mod:`onnxfold.fold.recipes`), so that rewrite-made ones are verified too.
    ``progress(text)`` is told what runs
    (``loading original``, ``original 2/3``, ``loading optimized``, ``optimized 1/3``), for
    the progress line. ``catalogue``: whose shape steps relate the input dims and whose op
    facts say which folds are bitwise (None: the installed rules).
    """
    return compare_models(a, b, n, CompareOptions(
        inputs, seed, dict(dims or {}), dict(int_ranges or {}), rtol, atol,
        tuple(custom_op_libraries), level, verify), recipes=recipes, progress=progress,
        catalogue=catalogue)


def compare_models(a: ModelRef, b: ModelRef, n: int, options: CompareOptions, *,
                   recipes: Mapping[str, Recipe] | None = None,
                   progress: Callable[[str], None] | None = None,
                   catalogue: Catalogue | None = None) -> CompareResult:
    """:func:`compare`, its settings as one value (``onnxfold.check.compare_options``)."""
    catalogue = load_catalogue() if catalogue is None else catalogue
    tell = progress or (lambda text: None)
    if n < 1:
        raise InputError(f"the number of input sets must be at least 1, not {n}")
    rtol, atol, level = options.rtol, options.atol, options.level
    if any(t is not None and not t >= 0 for t in (rtol, atol)):
        raise InputError("rtol and atol must be non-negative")
    libraries = custom_ops.checked_libraries(options.custom_op_libraries)
    label_a, label_b = label_of(a, "model A"), label_of(b, "model B")
    graph_a, graph_b = graph_of(a, label_a), graph_of(b, label_b)
    verify = options.verify
    if verify is None:
        verify = carries_provenance(graph_b)
    import onnxruntime as ort

    run_options = ort.RunOptions()
    run_options.log_severity_level = 4
    # one model in memory at a time: A runs every input set, then B; both must fit
    weights = max(memory_room.weight_bytes(graph_a), memory_room.weight_bytes(graph_b))
    memory_room.prepare()
    try:
        memory_room.check_room(weights)
    except MemoryError as e:
        raise CheckCouldNotRun(str(e)) from None
    tell("loading original")
    sess_a = open_session(a, label_a, libraries, level)
    feeder = FeedPlan(sess_a, label_a, graph_a, load_given(options.inputs), options.dims,
                      options.int_ranges, catalogue.shape_steps)
    io_a = {get: [(v.name, v.type) for v in getattr(sess_a, get)()]
            for get in ("get_inputs", "get_outputs")}
    outputs = [name for name, _ in io_a["get_outputs"]]
    try:
        all_feeds, results_a, notes = _run_reference(sess_a, label_a, outputs, feeder,
                                                     options.seed, n, run_options, tell)
    except InputError as e:
        raise CheckCouldNotRun(*e.args) from None
    del sess_a
    memory_room.release()
    folds = None
    if verify:  # before B's session: no two models' weights in memory at once
        tell("verifying folds")
        folds = verify_folds(a, b, input_shapes={name: arr.shape for name, arr
                                                 in all_feeds[0].items()}, recipes=recipes,
                             progress=tell, catalogue=catalogue)
        folds.model_b = label_b
    result = CompareResult(label_a, label_b, [], feeder.describe(), n, options.seed, rtol, atol,
                           feeder.dims, feeder.defaulted, feeder.bindings,
                           feeder.plan.derived, notes, level, folds)
    try:
        tell("loading optimized")
        sess_b = open_session(b, label_b, libraries, level)
    except InputError as e:  # A loads and B does not: B is wrong, not the input
        result.failure = one_line(e)
        return result
    _same_interface(io_a, sess_b, label_a, label_b)
    rows: dict[str, OutputDiff] = {}
    for k, (feeds, result_a) in enumerate(zip(all_feeds, results_a)):
        tell(f"optimized {k + 1}/{n}")
        try:
            result_b = run_session(sess_b, label_b, outputs, feeds, run_options)
        except InputError as e:  # A ran these feeds and B does not: B is wrong
            result.failure = one_line(e).removesuffix(" (see --dim, --int-range, --inputs)")
            return result
        for name, va, vb in zip(outputs, result_a, result_b):
            va, vb = as_array(va), as_array(vb)
            row = rows.setdefault(name, OutputDiff(
                name, dtype_name(va.dtype), dtype_name(vb.dtype), list(va.shape),
                list(vb.shape)))
            accumulate(row, va, vb, rtol, atol)
    del sess_b
    memory_room.release()
    for row in rows.values():
        row.ok = row.shapes_equal and row.dtypes_equal and row.mismatches == 0
    result.rows = [rows[name] for name in outputs]
    return result


def _same_interface(io_a: Mapping[str, list[tuple[str, str]]], sess_b, label_a: str,
                    label_b: str) -> None:
    """InputError unless B's session has A's input and output names and input types."""
    for what, get in (("inputs", "get_inputs"), ("outputs", "get_outputs")):
        problem = _names_differ(what, [name for name, _ in io_a[get]],
                                [v.name for v in getattr(sess_b, get)()])
        if problem:
            raise InputError(f"{label_a} vs {label_b}: {problem}")
    types_b = {i.name: i.type for i in sess_b.get_inputs()}
    for name, type_a in io_a["get_inputs"]:
        if types_b[name] != type_a:
            raise InputError(f"{label_a} vs {label_b}: input {name} is {type_a} in A but "
                             f"{types_b[name]} in B")


def carries_provenance(model: ir.Model) -> bool:
    """Whether onnxfold wrote ``model`` (a folded initializer names the nodes it replaces)."""
    return any(value.const_value is not None and
               PROVENANCE_KEY in value.const_value.metadata_props
               for value in model.graph.initializers.values())


