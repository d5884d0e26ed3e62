"""Compare two models' outputs in onnxruntime on the same inputs.

Folding must not change what a model computes. This runs the original and the rewritten model
one after the other (CPU, at onnxruntime's default optimization level unless told otherwise:
the original as a user runs it) on seeded random or user-supplied inputs
(:mod:`onnxfold.check.inputs.feeds`, run by :mod:`onnxfold.check.outputs.reference_runs`),
and reports per output how far apart they are (``onnxfold.check.result``). Every initializer
of the second model that the first does not hold as it is is also re-derived from the first
(:mod:`onnxfold.check.folds.verification`), at every binding of the dims the reference ran.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from onnxfold.check.file_verification import FileVerification
from onnxfold.check.folds.verdicts import FoldVerification
from onnxfold.check.folds.verification import reads_dynamic_dims, verify_folds
from onnxfold.check.inputs.feeds import FeedPlan, dtype_name, load_given
from onnxfold.check.inputs.pinned import pinned_dims
from onnxfold.check.outputs import stability, summed_terms
from onnxfold.check.outputs.differences import OutputDiff, accumulate, as_array, compared_outputs
from onnxfold.check.outputs.doomed_bindings import FailedNodes
from onnxfold.check.outputs.interfaces import same_interface
from onnxfold.check.outputs.reference_runs import (
    Optimized,
    Reference,
    run_optimized,
    run_reference,
)
from onnxfold.check.result import CompareResult
from onnxfold.check.rewrites.file_windows import rewritten_windows
from onnxfold.check.rewrites.in_files import (
    judge_parameters,
    reshaped_values,
    validated_windows,
)
from onnxfold.check.rewrites.validation import RewriteValidation, read_by, validate_rewrites
from onnxfold.check.running import memory as memory_room
from onnxfold.check.running.aside import SessionAside
from onnxfold.check.running.aside import started as started_aside
from onnxfold.check.running.cones import Cones, WeightStore, reinferred
from onnxfold.check.running.levels import DEFAULT_LEVEL
from onnxfold.check.running.models import ModelRef, graph_of, held, label_of, release_weights
from onnxfold.check.running.options import CompareOptions
from onnxfold.check.running.runner import (
    MachineShort,
    Runner,
    open_session,
    session_parts,
)
from onnxfold.check.running.stage_plan import (
    Stage,
    StagePlan,
    heaviest,
    plan_stages,
    read_from_inputs,
)
from onnxfold.check.running.stages import Chain
from onnxfold.errors import InputError, ResourceLimitError, one_line
from onnxfold.host import heap
from onnxfold.host.interruptible import InferenceTimeout
from onnxfold.io.mapped import drop_resident_pages
from onnxfold.ir import provenance
from onnxfold.ir.graph import is_overridable
from onnxfold.numbers import size_text
from onnxfold.pipeline.evidence import RunEvidence
from onnxfold.rewrite.log import RewriteLog
from onnxfold.runtime import custom_ops

# the original's weights kept for the fold verification's and the rewrite validation's runs
# take at most this share of the memory left (each step's own share before)
WEIGHTS_SHARE = 4


class CheckCouldNotRun(InputError):
    """The comparison could not run: the reference (model A) does not run on the feeds, or the
    machine ran short where nothing smaller was left to try. Bad input (exit 2), not a failed
    check; a run that folded keeps its products (its table, ``--json``, ``--report``), and
    ``result`` holds what was shown before it stopped (None: nothing was)."""

    def __init__(self, message: str, result: CompareResult | None = None) -> None:
        super().__init__(message)
        self.result = result


def compare(a: ModelRef, b: ModelRef, *,
            inputs: Mapping[str, np.ndarray] | str | os.PathLike | None = None, n: int = 1,
            seed: int = 0, dims: Mapping[str, int] | None = None,
            int_ranges: Mapping[str, tuple[int, int]] | None = None,
            rtol: float | None = None, atol: float | None = None,
            custom_op_libraries: Sequence[str | os.PathLike] = (),
            level: str = DEFAULT_LEVEL, verify: bool | None = None,
            progress: Callable[[str], None] | None = None,
            evidence: RunEvidence | None = None,
            window_bytes: int | None = None) -> CompareResult:
    """Run models ``a`` and ``b`` (paths or ``onnx.ModelProto``) on the same inputs.

    Inputs are ``inputs`` (a dict or an .npz path) where given, else seeded random data shaped
    from model A's inputs (``dims`` binds symbolic dimensions, the rest are 1). ``n`` input sets
    use seeds ``seed .. seed+n-1``. An element matches when it is within the tolerance of its
    output's dtype (:mod:`onnxfold.check.judging.tolerance`: float16/bfloat16 in ulps, float32
    by rtol 1e-4 and atol 1e-5, the rest exactly), or within ``atol + rtol*|b|`` when ``rtol``
    or ``atol`` is given, or both are NaN. Raises InputError when a model cannot be read or run,
    or the I/O names differ. ``custom_op_libraries``: shared libraries of custom ops onnxruntime
    loads for both models (:mod:`onnxfold.runtime.custom_ops`). ``level``: onnxruntime's graph
    optimization level for both sessions (``disable``, ``basic``, ``extended``, ``all``: its
    default, how a user runs a model). ``verify``: re-derive every initializer of ``b`` that
    ``a`` does not hold as it is (:func:`~onnxfold.check.folds.verification.verify_folds`;
    False: not; None or True: always, and what cannot be re-derived is said).
    ``progress(text)`` is told what runs
    (``loading original``, ``original 2/3``, ``loading optimized``, ``optimized 1/3``), for
    the progress line. ``evidence``: what the run
    that made ``b`` knows (``optimize(...).evidence``): with ``record_rewrites=True`` every
    rewrite is validated on the input sets, and ``b`` may fix only the dims its
    ``input_shapes`` fixed. ``window_bytes``: run both models stage by stage, each stage
    at most this many bytes of weights (None: only where a session over a whole model does
    not fit in the memory left).
    """
    return compare_models(a, b, n, CompareOptions(
        inputs=inputs, seed=seed, dims=dict(dims or {}), int_ranges=dict(int_ranges or {}),
        rtol=rtol, atol=atol, custom_op_libraries=tuple(custom_op_libraries), level=level,
        verify=verify, window_bytes=window_bytes), progress=progress, evidence=evidence)


def compare_models(a: ModelRef, b: ModelRef, n: int, options: CompareOptions, *,
                   progress: Callable[[str], None] | None = None,
                   evidence: RunEvidence | None = None) -> CompareResult:
    """:func:`compare`, its settings as one value (``onnxfold.check.running.options``);
    ``evidence``: what the run that made ``b`` knows: its rewrites, each validated on the
    input sets (:mod:`onnxfold.check.rewrites.validation`), and the dims it fixed (any other
    dim ``b`` fixes that ``a`` leaves dynamic fails the check)."""
    tell = progress or (lambda text: None)
    if n < 1:
        raise InputError(f"the number of input sets must be at least 1, not {n}")
    # its collections walk what it makes, not what the fold left
    with heap.apart(), held(a, "model A") as a, held(b, "model B") as b:
        return _compared(a, b, n, options, tell, evidence)


def _compared(a: ModelRef, b: ModelRef, n: int, options: CompareOptions,
              tell: Callable[[str], None], evidence: RunEvidence | None) -> CompareResult:
    """:func:`compare_models`' work."""
    leaves = read_by(evidence.rewrites.records) if evidence is not None and \
        evidence.rewrites is not None else set()
    # a file with no run's record at hand: its rewritten windows found in it (file_windows)
    run = _Run(a, b, options, tell, leaves,
               in_file=evidence is None and options.verify is not False, aside=True)
    unasked = run.pinned.unasked(evidence.fixed) if evidence is not None else \
        _unrecorded_pins(run)
    notes = [run.pinned.note("--input-shape" if evidence is not None else "the second model")] \
        if run.pinned and not unasked else []
    if run.overrides and n > 1:
        notes.append(f"{', '.join(run.overrides)} (initializers a caller may override) fed "
                     "from input set 2 on, each moved about 1% from its default")
    folds: FoldVerification | None = None
    validated: RewriteValidation | None = None
    # in stages, where each binding is a whole run of the original over its weights read
    # again, the bindings no compared set uses run only for folds re-derived at each of them
    every_binding = run.stages is None or (
        options.verify is not False and reads_dynamic_dims(run.graph_a, run.graph_b))
    while True:
        reference = run.reference(n, every_binding)
        feeder = run.feeder
        result = CompareResult(
            model_a=run.label_a, model_b=run.label_b, rows=[], inputs=feeder.describe(), n=n,
            seed=options.seed, rtol=options.rtol, atol=options.atol, dims=feeder.dims,
            defaulted_dims=feeder.defaulted,
            bindings=[feeder.shown(b) for b in feeder.bindings],
            derived_dims=feeder.plan.derived, notes=notes + reference.notes,
            level=options.level)
        result.single_dims = reference.single
        result.fixed_defaults = run.fixed_defaults
        if run.aside is None or not run.aside.built:  # B's session opens next: what A's
            release_weights(a)  # proto copied goes first
        # B runs right after A, and its session goes before the original's cones run: no
        # model's session beside them (BERT-base's check peaked at 1,002 MiB with B's session,
        # built aside, alive through them; 806 MiB without); its values are judged then, and
        # not held through the cones either (in stages, its values at every cut)
        optimized = _ran_optimized(b, run, reference)
        if optimized.ran is not None:
            _describe_stages(result, run, optimized.cuts)
        ran = optimized.ran if optimized.short is None else None
        if ran is not None:
            _judge_outputs(result, run, reference, ran)
        failure, short, judged = optimized.failure, optimized.short, ran is not None
        del optimized, ran
        if short is None or not feeder.has_smaller:  # (else: at smaller dims)
            folds, validated = _checked_by_cones(a, b, run, reference, evidence, folds,
                                                 validated)
        result.folds, result.rewrites = folds, validated
        if short is None:
            result.failure = failure or unasked
            if judged:
                _measure_stability(result, run, reference)
            return result
        result.short_reason = short
        group = feeder.next_smaller()
        if group is None:
            result.not_run = (f"{run.label_b}: the machine ran short running it on every input "
                              f"set the original ran ({result.short_reason})")
            raise CheckCouldNotRun(result.not_run, result) from None
        # B ran out of memory on every input set A ran (after A, in the same process):
        # both again at smaller images, so that both are compared where both fit
        notes.append("the optimized model ran out of memory at the dims " + " or ".join(
            feeder.guessed_values(bound) for bound in feeder.bindings) + "; both were "
            "compared at smaller images")
        feeder.bindings = group


def _checked_by_cones(a: ModelRef, b: ModelRef, run: _Run, reference: Reference,
                      evidence: RunEvidence | None, folds: FoldVerification | None,
                      validated: RewriteValidation | None
                      ) -> tuple[FoldVerification | None, RewriteValidation | None]:
    """The steps that run the original's cones on the reference's input sets, each where not
    done yet: every fold re-derived (``folds``), every rewrite of the run's record
    (``evidence``) or window found in the file validated (``validated``); one store of the
    original's weights for both, and what they read of either file given back after."""
    options = run.options
    weights = _weight_store()  # read once for the folds' and the rewrites' cones
    rewrites = evidence.rewrites if evidence is not None else None
    with _pooled(run.stages is None):
        if options.verify is not False and folds is None:
            run.tell("verifying folds")
            folds = verify_folds(a, b, bindings=reference.shapes, inputs=reference.feeds,
                                 progress=run.tell, libraries=run.libraries,
                                 own_output=evidence is not None, weights=weights,
                                 shaped=_shaped_for_folds(run))
            folds.model_b = run.label_b
        if rewrites is not None and validated is None:
            validated = _validated(run, rewrites, reference, weights)
        elif run.found is not None and validated is None:
            validated = _file_validated(b, run, reference, folds, weights)
        weights.clear()
        run.shaped_a = None
    drop_resident_pages()  # what the cones read of either file
    release_weights(a)  # (and of a proto, the copies read out of it)
    return folds, validated


def verify_models(a: ModelRef, b: ModelRef, options: CompareOptions | None = None, *,
                  progress: Callable[[str], None] | None = None) -> FoldVerification:
    """``onnxfold verify-folds``: the original run once at every binding of the dims (which
    bindings are valid inputs, and one input set for what only inputs can sample), then every
    initializer of ``b`` the original does not hold as it is re-derived at those bindings
    (:func:`~onnxfold.check.folds.verification.verify_folds`). Where the original cannot run
    (out of time, no binding that runs), each fold is re-derived alone, and what needs the
    bindings or inputs is said not verifiable."""
    tell = progress or (lambda text: None)
    # its collections walk what it makes, not what the fold left
    with heap.apart(), held(a, "model A") as a, held(b, "model B") as b:
        return _verified(a, b, options, tell)


def _verified(a: ModelRef, b: ModelRef, options: CompareOptions | None,
              tell: Callable[[str], None]) -> FoldVerification:
    """:func:`verify_models`' work."""
    run = _Run(a, b, options or CompareOptions(), tell, in_file=True)
    try:
        reference: Reference | None = run.reference(1)
    except (CheckCouldNotRun, InferenceTimeout):  # the original does not run (in time):
        reference = None  # its folds alone, and what needs bindings or inputs said
    tell("verifying folds")
    weights = _weight_store()
    with _pooled(run.stages is None):
        folds = verify_folds(a, b, bindings=reference.shapes if reference else (),
                             inputs=reference.feeds if reference else (), progress=tell,
                             libraries=run.libraries, weights=weights,
                             shaped=_shaped_for_folds(run))
        if reference is None or run.found is None:  # its windows need the input sets
            return folds
        return FileVerification.of(folds,
                                   _file_validated(b, run, reference, folds, weights))


class _Run:
    """What a comparison of ``a`` and ``b`` holds while it runs: the models' labels, the
    options checked, the dims ``b`` pins, the feed plan over ``a``'s inputs, and ``a``'s
    session until the reference has run. ``aside``: ``b``'s session is built beside ``a``'s
    where both fit (``running.aside``)."""

    def __init__(self, a: ModelRef, b: ModelRef, options: CompareOptions,
                 tell: Callable[[str], None],
                 leaves: Collection[str] = (), in_file: bool = False,
                 aside: bool = False) -> None:
        if any(t is not None and not t >= 0 for t in (options.rtol, options.atol)):
            raise InputError("rtol and atol must be non-negative")
        self.a, self.options, self.tell = a, options, tell
        self.libraries = custom_ops.checked_libraries(options.custom_op_libraries)
        self.label_a, self.label_b = label_of(a, "model A"), label_of(b, "model B")
        graph_a, graph_b = graph_of(a, self.label_a), graph_of(b, self.label_b)
        # ``in_file``: the rewrites to validate are the windows found in the files
        self.found = rewritten_windows(graph_a, graph_b) if in_file else None
        if self.found is not None:
            leaves = read_by(self.found.records)
        import onnxruntime as ort

        self.run_options = ort.RunOptions()
        self.run_options.log_severity_level = 4
        # one model in memory at a time: A runs every input set, then B; both must fit, or
        # both run stage by stage
        heap.prepare()
        self.weighed = (memory_room.weighed(graph_a), memory_room.weighed(graph_b))
        planned = _stages(*self.weighed, graph_a, graph_b, options.window_bytes)
        self.stages: StagePlan | None = planned[0] if planned is not None else None
        self.stages_why = planned[1] if planned is not None else ""
        self.b_in_stages = ""  # why B alone ran stage by stage, where it did
        # in stages: the rewrites' leaves A's chain keeps, those computed from the inputs
        # (a leaf of the weights alone, a transposed weight, is computed again where read)
        self.leaves = frozenset(leaves) & read_from_inputs(graph_a) if self.stages else \
            frozenset()
        self.pinned = pinned_dims(graph_a, graph_b, options.dims)
        self.graph_a, self.graph_b = graph_a, graph_b  # (a binding that fails: inference
        self.shaped_a: ir.Model | None = None  # (see _shaped_original)
        heap.set_aside()  # (its graphs live through the check; what it builds next may not)
        tell("loading original")  # tells the next ones)
        self.aside = self._aside(b) if aside else None
        self.session: Runner | None = self._session_a()  # (where it raises: no wait)
        if self.aside is not None:
            self.aside.wait()  # no run of the check beside a build (running.aside)
        self.feeder = FeedPlan(self.session, self.label_a, graph_a, load_given(options.inputs),
                               {**self.pinned.named, **options.dims}, options.int_ranges,
                               self.pinned.axes)
        self.io_a = {"get_inputs": [(v.name, v.type) for v in self.session.get_inputs()],
                     "get_outputs": [(v.name, v.type) for v in self.session.get_outputs()]}
        self.overrides, fixed = _overridable(graph_a, graph_b)
        # (one --inputs gave is compared at that value: the second model computes with the
        # default it fixed, and a difference shows)
        self.fixed_defaults = [name for name in fixed if name not in self.feeder.given]
        self.outputs = [name for name, _ in self.io_a["get_outputs"]]
        # in stages: A's values at the cuts and the rewrites' leaves, per input set compared
        self.chain_values: list[dict] = []

    def reference(self, n: int, every_binding: bool = True) -> Reference:
        """``a`` on ``n`` input sets and every binding (:func:`run_reference`; only the ``n``
        sets where not ``every_binding``); its session is dropped after (opened again if a
        later call needs it)."""
        if self.session is None:
            self.tell("loading original")
            self.session = self._session_a()
        try:
            with _pooled(not self.session.in_stages):
                reference = run_reference(self.session, self.label_a, self.outputs,
                                          self.feeder, self.options.seed, n, self.run_options,
                                          self.tell, self.overrides, FailedNodes(self.graph_a),
                                          every_binding)
            if self.session.in_stages:  # its values at the cuts and the leaves
                self.chain_values = [self.session.results(feeds) for feeds in reference.feeds]
            self.session.still_read()
            return reference
        except (InputError, MachineShort) as e:
            raise CheckCouldNotRun(str(e)) from None
        finally:
            self.session = None
            heap.release()

    def _aside(self, b: ModelRef) -> SessionAside | None:
        """``b``'s session, building beside ``a``'s, where both are whole sessions that fit
        together (None: ``b``'s is opened after ``a``'s runs, as :meth:`session_b` does)."""
        if self.stages is not None or not memory_room.both_sessions_fit(*self.weighed):
            return None
        try:
            parts = session_parts(b, self.libraries, self.options.level)
        except (InputError, ResourceLimitError):  # said where B's session is opened, after
            return None  # A's runs, as without the build aside
        return started_aside(parts, self.label_b)

    def _session_a(self) -> Runner:
        """Model A's session, or its chain of stages where the check runs in stages."""
        if self.stages is None:
            return _original_session(self.a, self.label_a, self.libraries, self.options.level)
        return self._chain(self.graph_a, self.stages.a, self.label_a, self.leaves)

    def session_b(self, b: ModelRef) -> Runner:
        """Model B's session (or chain of stages); InputError where onnxruntime cannot load
        it, MachineShort where the machine ran short even in stages."""
        if self.stages is not None:  # (it keeps the leaves it makes too: a value handed
            # back is rounded to its dtype where a session keeps it in float32, and both chains
            # must round the same values)
            return self._chain(self.graph_b, self.stages.b, self.label_b, self.leaves)
        try:
            if self.aside is not None:
                aside, self.aside = self.aside, None
                return aside.session()
            return open_session(b, self.label_b, self.libraries, self.options.level)
        except MachineShort:  # A's session fitted, B's does not: B in stages, if they fit
            budget = memory_room.stage_budget()
            if budget is None:
                raise
            plan = plan_stages(self.graph_a, self.graph_b, budget)
            try:
                memory_room.check_stage(*heaviest(plan.b))
            except (MemoryError, ValueError):
                raise MachineShort(f"{self.label_b}: loading it: its session does not fit "
                                   "after the original's, nor its largest stage") from None
            self.b_in_stages = (
                f"the optimized model ran stage by stage (its session did not fit after "
                f"the original's): {len(plan.b)} stages of at most {size_text(budget)} of "
                "weights, fed, run end to end and compared with the original's one session "
                "at the outputs")
            return Chain(self.graph_b, plan.b, self.label_b, self.libraries,
                         self.options.level)

    def _chain(self, graph: ir.Model, stages: list[Stage], label: str,
               also: Collection[str] = ()) -> Chain:
        """A chain of ``graph``'s ``stages`` that keeps the values at the cuts, and
        ``also``."""
        assert self.stages is not None
        chain = Chain(graph, stages, label, self.libraries, self.options.level,
                      kept=[*(name for cut in self.stages.cuts for name in cut), *also])
        chain.tell = lambda text: self.tell(f"{label}: {text}")
        return chain


def _stages(weighed_a: tuple[int, int], weighed_b: tuple[int, int], a: ir.Model,
            b: ir.Model, budget: int | None) -> tuple[StagePlan, str] | None:
    """How the check runs the models (``weighed_*``: their weights and 16-bit floats'
    bytes, ``memory.weighed``): whole (None) where a session over the larger fits in the
    memory left, else stage by stage (``budget``: the stages' weights, forced), with
    why; CheckCouldNotRun where not even the largest stage fits."""
    why = f"stages of at most {size_text(budget)} of weights asked for" if budget else ""
    if budget is None:
        weights, cast = max(weighed_a, weighed_b, key=lambda w: memory_room.session_bytes(*w))
        try:
            memory_room.check_room(weights, cast)
            return None
        except MemoryError as e:
            budget = memory_room.stage_budget()
            if budget is None:
                raise CheckCouldNotRun(str(e)) from None
            why = (f"a session over a whole model needs about "
                   f"{size_text(memory_room.session_bytes(weights, cast))}, more than the memory "
                   "left")
    plan = plan_stages(a, b, budget)
    try:
        memory_room.check_stage(*heaviest([*plan.a, *plan.b]))
    except MemoryError as e:
        raise CheckCouldNotRun(str(e)) from None
    return plan, why


def _original_session(a: ModelRef, label: str, libraries: Sequence[str], level: str
                      ) -> Runner:
    """Model A's session; CheckCouldNotRun where the machine ran short loading it."""
    try:
        return open_session(a, label, libraries, level)
    except MachineShort as e:
        raise CheckCouldNotRun(str(e)) from None


KEPT_FREE = 64 << 20  # bytes of a heap's free top kept while runs reuse their buffers
KEPT_FREE_SHARE = 32  # and at most this share of the memory left


def _pooled(whole: bool) -> contextlib.AbstractContextManager:
    """Where the check runs a model on its input sets, verifies folds or validates rewrites
    (``whole``: with whole sessions, none built in the block): many runs, each allocating
    the buffers the last freed, with glibc's large buffers pooled in the heap
    (``heap.pooled``: ResNet-50's three input sets 0.18 -> 0.10 s), and the heap released
    after; the free top of a heap kept for the next buffers up to :data:`KEPT_FREE` or a
    :data:`KEPT_FREE_SHARE` of the memory left. Not where a chain of stages runs (the memory
    left is short, every buffer goes back to the system when freed, and each stage's session
    is built within the run)."""
    if not whole:
        return contextlib.nullcontext()
    room = memory_room.room()
    return heap.pooled(KEPT_FREE if room is None else min(KEPT_FREE, room // KEPT_FREE_SHARE))


def _weight_store() -> WeightStore:
    """Where the original's weights the fold verification's and the rewrite validation's
    cones read are kept for both: a :data:`WEIGHTS_SHARE` of the memory left (each step kept
    its own in as much before, one after the other)."""
    room = memory_room.room()
    return WeightStore(None if room is None else room // WEIGHTS_SHARE)


def _validated(run: _Run, rewrites: RewriteLog, reference: Reference,
               weights: WeightStore) -> RewriteValidation:
    """Every rewrite of the run's record ``rewrites`` validated on the reference's input
    sets (a run that rewrote nothing: nothing to validate, and the original is not loaded
    again for it)."""
    if not rewrites.records:
        return RewriteValidation(sets=len(reference.feeds))
    rounding = frozenset(record.rule for record in rewrites.records if record.rounds)
    return validate_rewrites(
        rewrites, _cones(_shaped_original(run), run, run.options.level),
        reference.feeds, run.tell, rounding, run.chain_values, weights)


def _shaped_original(run: _Run) -> ir.Model:
    """The original as the fold verification and the rewrite validation read it: the check's
    own copy, its shapes inferred again (``cones.reinferred``), made once for both (each made
    its own before: a clone and an inference, 0.08 s on BERT-base) and let go after them."""
    if run.shaped_a is None:
        run.shaped_a = reinferred(graph_of(run.a, run.label_a))
    return run.shaped_a


def _shaped_for_folds(run: _Run) -> ir.Model | None:
    """The copy the fold verification reads: the shared one where the optimized model pins no
    dim, else None (it pins its own: a fold that holds at a pinned dim is verified there)."""
    return None if run.pinned else _shaped_original(run)


def _cones(shaped: ir.Model, run: _Run, level: str) -> Cones:
    """The cones of the original (``shaped``: the check's copy, its shapes inferred) the
    rewrites' leaves are computed by, at ``level``: the check's for a run's own record (its
    windows are the original's nodes around each rewrite, the leaves only the values they
    both read), ``disable`` for the windows found in a file (the original's values under
    names the file holds in another form are compared where they are read: such a leaf is
    the reference, and must be the original's nodes' value, not onnxruntime's rewrite of
    them: a dropped ``+ 0.0`` there passed a wrong file)."""
    return Cones(shaped, [v for v in shaped.graph.inputs
                          if v.name not in shaped.graph.initializers], run.libraries, level)


def _file_validated(b: ModelRef, run: _Run, reference: Reference,
                    folds: FoldVerification | None, weights: WeightStore) -> RewriteValidation:
    """The windows of a file that the original does not hold, validated on the reference's
    input sets (``in_files``); the tensors of ``folds`` only validated windows read judged
    with them."""
    assert run.found is not None
    if not run.found.records:  # the file holds no node the original does not
        return RewriteValidation(sets=len(reference.feeds), in_file=True)
    shaped = _shaped_original(run)
    cones = _cones(shaped, run, "disable")
    found, validation = validated_windows(
        run.graph_a, run.graph_b, run.found,
        lambda windows: validate_rewrites(windows, cones, reference.feeds, run.tell,
                                          known=run.chain_values, weights=weights),
        reshaped_values(shaped, reinferred(graph_of(b, run.label_b))))
    if folds is not None:
        judge_parameters(folds.tensors, found, validation, folds.edited)
    return validation


def _overridable(a: ir.Model, b: ir.Model) -> tuple[dict[str, np.ndarray], list[str]]:
    """The float defaults of ``a``'s initializers a caller may override (IR 4 on: also graph
    inputs) that ``b`` lets a caller override too (fed, moved a little, from the second input
    set on), and the names of those ``b`` no longer lets a caller override (it fixed them:
    compared at their defaults only, and said)."""
    open_b = {v.name for v in b.graph.inputs if v.name in b.graph.initializers} \
        if b.ir_version >= 4 else set()
    fed, fixed = {}, []
    for value in a.graph.inputs:
        if not is_overridable(value, a.graph, a.ir_version) or value.name not in \
                a.graph.initializers or value.const_value is None:
            continue
        if value.name in open_b:
            fed[str(value.name)] = value.const_value.numpy()
        else:
            fixed.append(str(value.name))
    return fed, fixed


def _cut_rows(plan: StagePlan, values_a: list[dict], values_b: list[dict | None],
              result: CompareResult) -> list[OutputDiff]:
    """The values both chains handed on at each cut, compared over the input sets both ran
    (the tolerance of their dtype, as outputs), where both have the same shape and dtype (a
    rewrite may keep a value's name and change its shape: ``[1, 16, 128]`` as ``[16, 128]``
    before a MatMul)."""
    rows: dict[str, OutputDiff] = {}
    for got_a, got_b in zip(values_a, values_b):
        if got_b is None:
            continue
        for k, cut in enumerate(plan.cuts):
            for name in cut:
                va, vb = as_array(got_a[name]), as_array(got_b[name])
                if va.shape != vb.shape or va.dtype != vb.dtype:
                    continue
                row = rows.setdefault(name, OutputDiff(
                    f"{name} (cut {k + 1})", dtype_name(va.dtype), dtype_name(vb.dtype),
                    list(va.shape), list(vb.shape)))
                accumulate(row, va, vb, result.rtol, result.atol)
    for row in rows.values():
        row.ok = row.shapes_equal and row.dtypes_equal and row.mismatches == 0
    return list(rows.values())


def _unrecorded_pins(run: _Run) -> str:
    """For a file: the dims it fixes where the original leaves them dynamic although its own
    record of the run that wrote it (``onnxfold.run``) says no ``--input-shape`` was given, as
    a failure ("" where it fixes none, says it was given one, or carries no readable record:
    then it is compared where it fixes them, and said). A record may only make a verdict
    stricter: this is where it does."""
    options = provenance.recorded_options(run.graph_b)
    if not run.pinned or options is None or "input_shapes" in options:
        return ""
    return run.pinned.unasked({}, "its own record of the run that wrote it says no "
                              "--input-shape fixed them")


def _measure_stability(result: CompareResult, run: _Run, reference: Reference) -> None:
    """Where only outputs failed (the optimized model ran, every fold and rewrite held) and
    the original runs in one session: whether the original differs as much from itself at
    another optimization level (``outputs.stability``); said in a note and kept on
    ``result`` for the failure line."""
    failing = [row for row in result.rows if not row.ok]
    if not failing or result.failure or run.stages is not None or run.b_in_stages or \
            (result.folds is not None and not result.folds.ok) or \
            (result.rewrites is not None and not result.rewrites.ok):
        return
    run.tell("running the original at another optimization level")
    try:
        spread = stability.unstable_outputs(
            run.a, run.label_a, run.libraries, run.options.level, reference.feeds,
            reference.outputs, failing, run.outputs, result.rtol, result.atol,
            run.run_options)
    except (InputError, MachineShort):  # an aid to the message: the verdict stands as it is
        return
    finally:
        heap.release()
    if spread:
        result.unstable = spread
        result.notes.append(f"the original itself differs as much between onnxruntime's "
                            f"optimization levels ({spread}): its outputs turn on near ties")


@dataclass
class _OptimizedRun:
    """Model B on the reference's input sets: its runs (``ran``: None where it failed or its
    session did not open), the values its chain of stages handed on at the cuts per set, why
    it failed where A ran (B's fault: the check fails) or what the machine ran short of on
    every set (``short``: smaller inputs are tried)."""

    ran: Optimized | None = None
    cuts: list[dict | None] = field(default_factory=list)
    failure: str = ""
    short: str | None = None  # (None: compared on some sets at least)


def _ran_optimized(b: ModelRef, run: _Run, reference: Reference) -> _OptimizedRun:
    """Run B on the reference's input sets (its session then let go). Both ran after
    weighing the memory left, so a B that fits nowhere the original fitted is tried where
    both may fit (``short``); one that runs out on some sets only is compared on the others,
    and the verdict names the sets it was not compared on."""
    run.tell("loading optimized")
    try:
        sess_b = run.session_b(b)
    except InputError as e:  # A loads and B does not: B is wrong, not the input
        return _OptimizedRun(failure=one_line(e))
    except MachineShort as e:  # the machine's: A's outputs are held, smaller ones may fit
        return _OptimizedRun(short=str(e))
    same_interface(run.io_a, sess_b, run.label_a, run.label_b)
    with _pooled(not sess_b.in_stages):
        ran = run_optimized(sess_b, run.label_b, run.outputs, reference, run.run_options,
                            run.tell)
    sess_b.still_read()
    cuts = [sess_b.results(feeds) if got is not None else None
            for feeds, got in zip(ran.feeds, ran.outputs)] \
        if sess_b.in_stages and not ran.failure else []
    del sess_b
    heap.release()
    if ran.failure:
        return _OptimizedRun(failure=ran.failure)
    return _OptimizedRun(ran, cuts, short=ran.short if all(
        got is None for got in ran.outputs) else None)


def _describe_stages(result: CompareResult, run: _Run, cuts_b: list[dict | None]) -> None:
    """Where the models ran stage by stage: how, and the values both handed on at the cuts
    compared; where only B did, why."""
    if run.stages is not None:
        result.windows = run.stages.describe(run.stages_why)
        result.cut_rows = _cut_rows(run.stages, run.chain_values, cuts_b, result)
    elif run.b_in_stages:
        result.windows = run.b_in_stages


def _judge_outputs(result: CompareResult, run: _Run, reference: Reference,
                   ran: Optimized) -> None:
    """``result``'s rows: B's outputs against A's on every set both ran (where A ran, B may
    have run short: not compared there, and the verdict says so, not a full one)."""
    outputs = run.outputs
    compared = [(a, b) for a, b in zip(reference.outputs, ran.outputs) if b is not None]
    result.short_of_memory = [k + 1 for k, got in enumerate(ran.outputs) if got is None]
    rows, maps = compared_outputs(outputs, compared, result.rtol, result.atol)
    # elements outside rtol/atol: judged again with the magnitudes of their summed terms
    again = [n for n in summed_terms.candidates(rows, result.rtol, result.atol) if n not in maps]
    if again:
        sets = [(feeds, got_a, got_b) for feeds, got_a, got_b in
                zip(reference.feeds, reference.outputs, ran.outputs) if got_b is not None]
        note = summed_terms.judge_again(
            rows, again, run.a, run.label_a, sets, outputs, result.rtol, result.atol,
            run.libraries, run.stages.budget if run.stages is not None else None,
            run.options.level)
        result.notes += [note] if note else []
    for row in rows.values():
        row.ok = row.shapes_equal and row.dtypes_equal and row.mismatches == 0
    for name in sorted(maps):
        result.notes.append(f"output {name} is a sequence of maps with the same keys in both "
                            "models: compared as its values, [sequence length, keys]")
    result.rows = [rows[name] for name in outputs]
