"""``onnxfold.optimize``: one pipeline of passes over an in-memory model.

::

    convert the opset (--target-opset) -> inline functions -> fix input shapes
    (--input-shape) -> infer shapes
    the fold stage (fold_stage.py):
        rewrite -> fold -> prune -> refine shapes, while a round learns something
        fold model-local function bodies
    the cleanups (cleanups.py: remove_identity -> constants_to_initializers ->
        dedupe_initializers -> prune_subgraph_initializers -> merge_duplicates)
        -> prune -> sorted
    (after the report: strip the exporters' metadata, unless --keep-metadata)

Each step is an onnx-ir ``InPlacePass`` with one job (``onnxfold/pipeline/passes.py``) whose
result says whether it changed the model and what it did; onnx-ir's ``PassManager`` runs the
list, and the fold stage decides from its passes' results whether another round runs.
``optimize``, the split and ``Session`` build it from the same :class:`FoldOptions`, each
pass getting its slice.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import onnx
import onnx_ir as ir
from onnx_ir.passes import PassBase, PassError, PassManager, PassResult

from onnxfold._version import __version__
from onnxfold.analysis.input_shapes import as_specs
from onnxfold.analysis.settings import RunSettings
from onnxfold.analysis.shapes import interface_of, keep_interface, lighten
from onnxfold.analysis.symbolic import blocked_scaffolding
from onnxfold.declare.catalogue import Catalogue, load_catalogue
from onnxfold.declare.pattern_rules import SHAPE_FOLDING
from onnxfold.errors import InputError
from onnxfold.io import load_model, map_types, save_model
from onnxfold.io.formats import HEAD_BYTES, describe_head
from onnxfold.io.reader import (
    SOURCE_KEY,
    UNKNOWN_OPS_KEY,
    load_with_light_proto,
    model_from_proto,
)
from onnxfold.io.writer import model_proto, prune_value_info
from onnxfold.ir import provenance
from onnxfold.ir.constants import source_array
from onnxfold.ir.graph import graphs_within, node_label
from onnxfold.pipeline.cleanups import CLEANUPS, cleanup_passes
from onnxfold.pipeline.collector import long_lived, settled
from onnxfold.pipeline.evidence import RunEvidence
from onnxfold.pipeline.fold_stage import FoldStage, StagePasses
from onnxfold.pipeline.leftovers import folded_regions, group_leftovers
from onnxfold.pipeline.options import FoldOptions
from onnxfold.pipeline.passes import (
    ConvertOpset,
    FixInputShapes,
    Fold,
    FoldFunctions,
    InferShapes,
    InlineFunctions,
    Prune,
    RefineShapes,
    Rewrite,
    Sorted,
    StripMetadata,
    restore,
)
from onnxfold.pipeline.phases import Phases, Timed
from onnxfold.pipeline.report import Report, model_counts, options_dict, runtime_op_counts
from onnxfold.pipeline.results import (
    ConversionResult,
    FoldStats,
    Recorded,
    StripResult,
    last_rejections,
    summarize,
)
from onnxfold.rewrite.log import RewriteLog
from onnxfold.rewrite.recorder import new_log
from onnxfold.rewrite.steps import StepFailed
from onnxfold.signature import RecordsCosts, Signature, facts

if TYPE_CHECKING:
    from onnxfold.io.writer import SaveInfo


@dataclass(kw_only=True)
class OptimizeResult:
    """The optimized model (in memory) and the report of what was done."""

    model: ir.Model
    report: Report
    stats: FoldStats = field(repr=False, default_factory=FoldStats)
    # what a check needs of the run: every rewrite (when asked), the dims --input-shape fixed
    evidence: RunEvidence = field(repr=False, default_factory=RunEvidence)
    # the input's and the optimized model's facts and compute (``onnxfold.signature``)
    signature: Signature | None = field(repr=False, default=None)

    def __repr__(self) -> str:
        """Counts, sizes and time (a notebook shows this, not the whole graph)."""
        r = self.report
        return (f"<OptimizeResult nodes {r.nodes_before} -> {r.nodes_after}, folded "
                f"{r.folded_nodes}, initializers {r.initializer_bytes_before / 2**20:.1f} MiB -> "
                f"{r.initializer_bytes_after / 2**20:.1f} MiB, {r.seconds:.2f} s>")

    def to_proto(self, spend: bool = False) -> onnx.ModelProto:
        """The model as an ``onnx.ModelProto`` with every weight's bytes in it (weights still
        in the input's file are read into the proto; :meth:`save` streams them instead). With
        ``spend`` the weights this result holds in memory are let go as they are serialized,
        so that only the proto holds them: the result is not to be used after."""
        proto = model_proto(self.model, spend)
        prune_value_info(self.model, proto)  # as in a saved file: no merely inferred types
        map_types.give_back_to(self.model, proto)
        return proto

    def save(self, path: str | os.PathLike, **kwargs: Any) -> SaveInfo:
        """Write the model (``onnxfold.save_model``: streamed, atomic, never over an input)."""
        return save_model(self.model, path, **kwargs)


ModelInput = ir.Model | onnx.ModelProto | bytes | str | os.PathLike


def as_ir_model(model: ModelInput, check: bool = True, keep_light: bool = False
                ) -> tuple[ir.Model, str | None, onnx.ModelProto | None]:
    """An ``ir.Model`` for what the caller holds: a path (memory-mapped, checked), an
    ``onnx.ModelProto`` or its bytes (checked like a file; external data refused), or an
    ``ir.Model`` (used as is). Also the path, when there is one, and with ``keep_light`` the
    reader's proto of a file's model (``load_with_light_proto``; else None)."""
    if isinstance(model, ir.Model):
        return model, None, None
    if isinstance(model, bytes | bytearray | memoryview):
        foreign = describe_head(bytes(model[:HEAD_BYTES]), len(model))
        if foreign is not None:
            raise InputError(foreign.message("bytes given"))
        try:
            model = onnx.ModelProto.FromString(bytes(model))
        except Exception:  # protobuf's DecodeError
            raise InputError("bytes given: not an ONNX model") from None
    if isinstance(model, onnx.ModelProto):  # (its messages name it as a caller gave it)
        return model_from_proto(model, "the model given", check=check), None, None
    path = os.fspath(model)  # type: ignore[arg-type]  # str or PathLike by elimination
    if not keep_light:
        return load_model(path, check=check), path, None
    loaded, light = load_with_light_proto(path, check=check)
    return loaded, path, light


def build_pipeline(options: FoldOptions, catalogue: Catalogue, log: list[PassResult],
                   progress: Callable[[int, int], None] | None = None,
                   skipped: frozenset[str] = frozenset(),
                   light: onnx.ModelProto | None = None,
                   phases: Phases | None = None,
                   settings: RunSettings | None = None,
                   rewrites: RewriteLog | None = None, label: str = "model",
                   signature: Signature | None = None) -> PassManager:
    """The passes of ``optimize`` for these options, each appending its result to ``log``;
    ``catalogue``: the run's rules and op facts, before the options disable some; ``skipped``
    names rules and passes (``fold``, ``prune``) left out after they failed;
    ``light``: the reader's proto of the model, for the first shape inference; ``phases``: the
    clock each pass's time counts on; ``settings``: what rewrites and cleanups read (by default
    the options' own, ``FoldOptions.run_settings``, knowing of no plugin ops); ``rewrites``:
    where every rewrite is recorded, for a check to validate (None: not recorded);
    ``label``: the model's name in an error of ``--target-opset``'s conversion;
    ``signature``: where the input's compute profile is recorded once the first shape
    inference is done (None: not recorded)."""
    settings = settings or options.run_settings()
    # (the catalogue's, before options disable rules: what the signature counts with)
    costs, steps = catalogue.costs, catalogue.shape_steps

    def wrap(step: PassBase) -> PassBase:
        """The pass, its result recorded in ``log`` and its time counted on ``phases``."""
        recorded = Recorded(step, log)
        return recorded if phases is None else Timed(recorded, phases)

    target = options.target_opset
    convert = [] if target is None else [wrap(ConvertOpset(target, label,
                                                           _folder(options, catalogue)))]
    shape_rules = frozenset() if options.shape_folding else catalogue.tagged(SHAPE_FOLDING)
    off = set(options.disabled_rules) | skipped | set(options.keep)
    catalogue = catalogue.without(off | shape_rules)
    folding = options.fold_settings()
    keep, strict = frozenset(options.keep), options.strict

    def prune() -> PassBase:
        return wrap(Prune(keep, options.inputs_are_constant, strict))

    def kept(name: str) -> bool:
        return name not in skipped

    stage = FoldStage(StagePasses(
        rewrite=wrap(Rewrite(catalogue, settings, inputs_are_constant=options.inputs_are_constant,
                             strict=strict, log=rewrites)) if kept("rewrite") else None,
        fold=(lambda spent: wrap(Fold(catalogue, folding, progress, spent)))
        if kept("fold") else None,
        prune=prune() if kept("prune") else None,
        refine_shapes=(lambda new: wrap(RefineShapes(options.shape_folding, new,
                                                     catalogue.shape_only)))
        if kept("refine_shapes") else None,
        # no fold at all: none in the bodies either
        fold_functions=(lambda spent: wrap(FoldFunctions(catalogue, folding, spent)))
        if kept("fold") and kept("fold_functions") else None))
    inline = options.inline_functions and kept("inline_functions")
    return PassManager([
        *convert,
        *([wrap(InlineFunctions(strict))] if inline else []),
        wrap(FixInputShapes(options.fixed_shapes)),
        # the reader's proto describes the model only if no pass before changed it
        wrap(InferShapes(light if not inline and not options.input_shapes and target is None
                         else None)),
        # (the input as loaded: what the signature counts as "before", whatever came since)
        *([] if signature is None else [_timed(RecordsCosts(
            signature, costs, steps, settings.named_dims_equal, light), phases)]),
        stage,
        *(wrap(cleanup) for cleanup in cleanup_passes(off, dataclasses.replace(
            settings, nondeterministic_ops=catalogue.nondeterministic), strict)),
        *([prune()] if kept("prune") else []),
        wrap(Sorted(strict)),
    ])


MAX_RESTARTS = 4


def _timed(step: PassBase, phases: Phases | None) -> PassBase:
    """``step``, its time counted on ``phases`` where given (its result not in the log)."""
    return step if phases is None else Timed(step, phases)


def optimize(model: ModelInput, options: FoldOptions | None = None,
             *, check: bool = True,
             input_shapes: Mapping[str, Sequence[int | str | None]] | Sequence[str] | None = None,
             progress: Callable[[int, int], None] | None = None,
             pristine: Callable[[], ir.Model] | None = None,
             loaded: Callable[[ir.Model], None] | None = None,
             phases: Phases | None = None, catalogue: Catalogue | None = None,
             record_rewrites: bool = False, **fold_options: Any) -> OptimizeResult:
    """Fold every constant subgraph of ``model``: a path, an ``onnx.ModelProto``, its bytes,
    or an ``ir.Model`` (changed in place).

    ``check``: run onnx's checker on the input (True or False; an accuracy check is
    ``simplify(check_n=N)`` or ``compare``). ``input_shapes`` (``{"input_ids": [1, 16]}`` or
    ``--input-shape`` strings) and any other :class:`FoldOptions` field given as a keyword
    (``fold_qdq=True``) override ``options``; an unknown keyword is an InputError naming the
    nearest one.

    Returns the model and a :class:`Report`; ``result.save(path)`` writes it,
    ``result.to_proto()`` gives a ModelProto. A rule or pass that fails is left out and the
    optimization starts again from the untouched model (from ``pristine()``, a fresh copy, when
    given; else from a copy taken first); the report lists it in ``skipped_steps``.
    ``loaded(model)`` runs once the model is read, before any pass (the command line refuses
    an output that would replace one of its files there, not after a whole fold).
    ``phases`` times each phase (the report's ``phases``; a fresh clock when not given).
    ``catalogue``: the rules and op facts to fold with (None: the installed rules,
    ``load_catalogue()``); a test or a plugin passes its own, ``options.disabled_rules``
    still apply to it. ``record_rewrites``: keep what every rewrite replaced and with what
    (``result.evidence.rewrites``, :mod:`onnxfold.rewrite.log`), for
    ``compare(..., evidence=result.evidence)`` to validate each one.
    """
    options = with_keywords(optimize, options, check, input_shapes, fold_options)
    catalogue = load_catalogue() if catalogue is None else catalogue
    with long_lived():  # fewer collections; a large model's objects are not walked by each
        return _optimize(model, options, catalogue, check, progress, pristine, loaded,
                         phases or Phases(), record_rewrites)


def with_keywords(caller: Callable[..., Any], options: FoldOptions | None, check: object,
                  input_shapes: Mapping[str, Sequence[int | str | None]] | Sequence[str] | None,
                  fold_options: Mapping[str, Any]) -> FoldOptions:
    """``options`` with the keywords of a call of ``caller`` (``optimize``, ``simplify``)
    applied: ``input_shapes`` and any ``FoldOptions`` field given as a keyword replace the
    options' own (``input_shapes=None``: the options' shapes stay). The one place both read
    their keywords, so that each takes the same ones and honours the same options. An
    unknown keyword, or a ``check`` that is not a bool, is an InputError."""
    name = caller.__name__
    if not isinstance(check, bool):
        raise InputError(f"check={check!r}: check runs onnx's checker on the input (True or "
                         "False); to compare outputs in onnxruntime use "
                         f"onnxfold.simplify(model, check_n={check!r}) or onnxfold.compare")
    fields = {f.name for f in dataclasses.fields(FoldOptions)}
    own = set(inspect.signature(caller).parameters) - {"model", "fold_options"}
    for keyword in fold_options:
        if keyword not in fields:
            near = difflib.get_close_matches(keyword, sorted(fields | own), n=1)
            hint = f" ({_ELSEWHERE[keyword]})" if keyword in _ELSEWHERE else \
                f" (did you mean {near[0]}=?)" if near else ""
            raise InputError(f"{name}() has no keyword {keyword}{hint}; FoldOptions fields: "
                             f"{', '.join(sorted(fields))}")
    changes = dict(fold_options)
    if input_shapes is not None:
        changes["input_shapes"] = as_specs(input_shapes)
    return dataclasses.replace(options or FoldOptions(), **changes)


# onnxsim's keywords, and where onnxfold takes what they mean
_ELSEWHERE = {"check_n": "an accuracy check is onnxfold.simplify(model, check_n=N)",
              "overwrite_input_shapes": "it is input_shapes= here",
              "skip_fuse_bn": "the fusions are rules: disabled_rules={'fuse_batch_norm_into_conv'}"}


def _refuse_unknown_disabled(disabled: Iterable[str], catalogue: Catalogue,
                             model: ir.Model) -> None:
    """An InputError for a ``--disable-rule`` name that is no rule, cleanup or op type (of
    ONNX's schemas or of the model): it would turn nothing off, silently (a renamed rule,
    a typo)."""
    rules = catalogue.names() | {cleanup.name for cleanup in CLEANUPS}
    unknown = sorted(name for name in disabled if name not in rules and not _an_op(name, model))
    if unknown:
        near = difflib.get_close_matches(unknown[0], sorted(rules), n=1)
        hint = f" (did you mean {near[0]}?)" if near else ""
        raise InputError(f"--disable-rule {unknown[0]}: no rule, cleanup or op type of that "
                         f"name{hint}; `onnxfold rules` lists the rules")


def _an_op(name: str, model: ir.Model) -> bool:
    """Whether ``name`` is an op type ONNX's schemas know (any domain) or the model uses."""
    if any(schema.name == name for schema in onnx.defs.get_all_schemas()):
        return True
    graphs = graphs_within([model.graph, *(f.graph for f in model.functions.values())])
    return any(node.op_type == name for graph in graphs for node in graph)


def _optimize(model: ModelInput, options: FoldOptions | None, catalogue: Catalogue,
              check: bool,
              progress: Callable[[int, int], None] | None,
              pristine: Callable[[], ir.Model] | None,
              loaded: Callable[[ir.Model], None] | None,
              phases: Phases,
              record_rewrites: bool = False) -> OptimizeResult:
    started = time.perf_counter()
    options = options or FoldOptions()
    with phases.phase("load"):
        model, path, light = as_ir_model(model, check, keep_light=True)
    if loaded is not None:
        loaded(model)
    light = lighten(light) if light is not None else None  # read here
    signature = Signature(facts(model))  # the input's, as loaded
    if path is not None:
        source = path
        pristine = pristine or (lambda: load_model(source, check=False))
    declared = interface_of(model.graph)  # kept whatever a rewrite puts in an output's place
    if pristine is None and not options.strict:
        snapshot = model.clone()
        pristine = snapshot.clone
    _refuse_unknown_disabled(options.disabled_rules, catalogue, model)
    settings = options.run_settings(model.meta.get(UNKNOWN_OPS_KEY, ()))
    before = model_counts(model)
    settled(before.nodes + before.constants)
    skipped: dict[str, str] = {}
    newest = onnx.defs.onnx_opset_version()
    opset = options.target_opset or model.opset_imports.get("", model.opset_imports.get(
        "ai.onnx", 1))
    unknown = [] if opset <= newest else [
        f"opset {opset} is newer than the installed onnx knows ({newest}): nothing is folded "
        "or rewritten (its ops may mean something new)"]
    frozen = frozenset({"rewrite", "fold", "refine_shapes", *catalogue.names(),
                        *(cleanup.name for cleanup in CLEANUPS)} if unknown else ())
    for _attempt in range(MAX_RESTARTS + 1):
        results: list[PassResult] = []
        rewrites = new_log(model) if record_rewrites else None
        try:
            # the reader's proto goes to the first pipeline only (a restart's model is no
            # longer the one read), whose passes drop it once read: held here, it kept a
            # model's Constant weights twice through the fold
            first, light = light, None
            passes = build_pipeline(options, catalogue, results, progress,
                                    frozenset(skipped) | frozen, light=first, phases=phases,
                                    settings=settings, rewrites=rewrites, label=path or "model",
                                    signature=signature)
            del first
            _run(passes, model)
            del passes
            break
        except StepFailed as failure:
            if pristine is None or failure.step in skipped:
                raise failure.error from None
            skipped[failure.step] = str(failure)
            restore(model, pristine())
    else:
        raise RuntimeError(f"optimize failed {MAX_RESTARTS + 1} times: {', '.join(skipped)}")
    keep_interface(model.graph, declared)
    stats = summarize(results, unknown + [f"{why}; please report" for why in skipped.values()])
    with phases.phase("report"):
        report = Report.build(path or model.meta.get(SOURCE_KEY), before, model_counts(model),
                              stats, time.perf_counter() - started)
        report.warnings = [f"{op} is not an ONNX op of the default domain (a plugin?): kept as "
                           "it is, never folded" for op in model.meta.get(UNKNOWN_OPS_KEY, ())
                           if op not in catalogue.runtime_ops]
        report.runtime_ops = runtime_op_counts(model, catalogue.runtime_ops)
        report.warnings += stats.warnings
        blocked = blocked_scaffolding(model, source_array, catalogue.shape_steps,
                                      options.assume_named_dims_equal)
        report.dynamic_shapes = [{"node": node_label(node), "op": node.op_type,
                                  "blocked_by": "; ".join(dims)} for node, dims in blocked]
        report.leftovers = group_leftovers(model, report.declined_nodes, report.dynamic_shapes,
                                           last_rejections(results))
        report.folded_regions = folded_regions(model)
        report.options = options_dict(options)
        report.inputs = {str(v.name): [d if isinstance(d, int) else getattr(d, "value", None)
                                       for d in (v.shape or ())]
                         for v in model.graph.inputs if v.name not in model.graph.initializers}
        report.conversion = next((r.conversion for r in results
                                  if isinstance(r, ConversionResult)), None)
    if options.strip_metadata is not None:  # after the report read the module paths
        stripping: list[PassResult] = []
        _run(PassManager([Recorded(StripMetadata(options.strip_metadata == "all"),
                                   stripping)]), model)
        stripped = cast(StripResult, stripping[0]).stripped
        report.metadata_stripped = {"mode": options.strip_metadata,
                                    "entries": stripped.entries, "bytes": stripped.bytes,
                                    "own": stripped.own}
    defaults = options_dict(FoldOptions())
    model.metadata_props[provenance.RUN] = provenance.run_record(__version__, {
        k: v for k, v in report.options.items()
        if v != defaults.get(k) and k not in _UNRECORDED})
    with phases.phase("signature"):
        signature.finish(model, catalogue.costs, catalogue.shape_steps)
    report.phases = phases.rounded()
    return OptimizeResult(model=model, report=report, stats=stats,
                          evidence=RunEvidence(rewrites, dict(stats.inputs_fixed.axes)),
                          signature=signature)


# options that change how the run went (its bounds, the metadata kept), not what the graph
# computes: left out of the output's record (``provenance.RUN``)
_UNRECORDED = frozenset({"strip_metadata", "memory_limit", "pool_budget", "fold_timeout"})


def _folder(options: FoldOptions, catalogue: Catalogue) -> Callable[[ir.Model], ir.Model]:
    """``--target-opset``'s fold at the model's own opset, for a converter that needs the
    constants the graph computes (``convert_opset``'s ``fold``): the same options, no
    conversion."""
    same = dataclasses.replace(options, target_opset=None)
    return lambda model: optimize(model, same, check=False, catalogue=catalogue).model


def _run(pipeline: PassManager, model: ir.Model) -> None:
    try:
        pipeline(model)
    except PassError as e:  # onnx-ir wraps each pass's error: report the pass's own
        cause: BaseException = e
        while isinstance(cause, PassError) and cause.__cause__ is not None:
            cause = cause.__cause__
        raise cause from None
