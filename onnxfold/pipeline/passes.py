"""The passes ``optimize`` is made of (``optimizer.build_pipeline`` says their order).

Each is an onnx-ir in-place pass with one job. Its result says whether it changed the model
(``PassResult.modified``, and nothing else) and, when it has more to say, what it did (its
``PassResult`` subclass, ``results.py``). Each is given the slice of the run's options it reads,
not the whole ``FoldOptions``, and what it needs of the run so far as values when it is made:
the fold rounds are driven by ``fold_stage.FoldStage``, which decides from these results
whether another round can learn something, and makes each round's ``Fold`` and
``RefineShapes`` with the growth spent so far and the constants new since the last inference.
No pass reads or writes another's state.

A step that raises (a bug: a rule or pass that cannot handle some model) raises
:class:`StepFailed` naming the step: a rule's name, or the pass's. ``optimize`` then starts
again from the untouched model without that step, so a failure costs one optimization, never
the run or a half-rewritten model (``strict`` re-raises the error instead).
"""

from __future__ import annotations

from collections.abc import Callable

import onnx
import onnx_ir as ir
from onnx_ir.passes import InPlacePass, PassResult, PostconditionError, PreconditionError

from onnxfold.analysis.input_shapes import InputShapes
from onnxfold.analysis.input_shapes import apply as apply_input_shapes
from onnxfold.analysis.settings import RunSettings
from onnxfold.analysis.shapes import MARKED_KEY, infer_shapes, infer_shapes_upstream, refinable_by
from onnxfold.declare.catalogue import Catalogue
from onnxfold.fold.folder import fold_model
from onnxfold.fold.function_bodies import fold_functions
from onnxfold.fold.pool import BufferPool
from onnxfold.fold.settings import FoldSettings
from onnxfold.host.points import reached
from onnxfold.ir.edits import NAMES_KEY, read_in, remove_dead_nodes_in
from onnxfold.ir.graph import all_graphs, in_order, static_shape
from onnxfold.pipeline.inlining import inline_functions
from onnxfold.pipeline.metadata import strip_metadata
from onnxfold.pipeline.opset_conversion import CONVERSION_KEY, convert_opset
from onnxfold.pipeline.results import (
    ConversionResult,
    FoldFunctionsResult,
    FoldResult,
    InlineResult,
    InputShapesResult,
    RefineShapesResult,
    RewriteResult,
    StripResult,
)
from onnxfold.rewrite.driver import Resumable, rewrite
from onnxfold.rewrite.log import RewriteLog
from onnxfold.rewrite.steps import contained


class ConvertOpset(InPlacePass):
    """``--target-opset``: the model converted to that opset of the default domain before any
    other pass reads it (``opset_conversion.py``); ``fold`` folds a copy at the model's own
    opset, for a converter that needs the constants the graph computes; ``label`` names the
    model in an error."""

    name = "convert_opset"

    def __init__(self, target: int, label: str, fold: Callable[[ir.Model], ir.Model]) -> None:
        self.target, self.label, self.fold = target, label, fold

    def call(self, model: ir.Model) -> ConversionResult:
        """Convert in place; what was done."""
        converted = convert_opset(model, self.target, self.label, self.fold)
        restore(model, converted)
        return ConversionResult(model, True, converted.meta.get(CONVERSION_KEY))


class StripMetadata(InPlacePass):
    """The exporters' metadata stripped (by default; ``--keep-metadata``: not run): every
    node's and value's metadata dropped, onnxfold's own keys kept unless ``everything``
    (``--strip-metadata=all``; ``metadata.py``); run after the report read the module
    paths."""

    name = "strip_metadata"

    def __init__(self, everything: bool) -> None:
        self.everything = everything

    def call(self, model: ir.Model) -> StripResult:
        """Strip in place; the entries and bytes dropped."""
        stripped = strip_metadata(model, self.everything)
        return StripResult(model, bool(stripped.entries), stripped)


def restore(model: ir.Model, fresh: ir.Model) -> None:
    """Make ``model`` (the caller's object: ``optimize`` changes an ``ir.Model`` in place)
    hold ``fresh``'s content, through onnx-ir's public attributes and dicts. What
    ``model.meta`` remembers of the old graph goes: its name allocator, and the mark that its
    declared types were recorded (the fresh graph's are recorded by its first inference)."""
    model.graph = fresh.graph
    model.ir_version, model.producer_name = fresh.ir_version, fresh.producer_name
    model.producer_version, model.domain = fresh.producer_version, fresh.domain
    model.model_version, model.doc_string = fresh.model_version, fresh.doc_string
    model.functions.clear()
    model.functions.update(fresh.functions)
    model.metadata_props.clear()
    model.metadata_props.update(fresh.metadata_props)
    model.meta.pop(NAMES_KEY, None)
    model.meta.pop(MARKED_KEY, None)


class FixInputShapes(InPlacePass):
    """``--input-shape``: overwrite input dims before anything is inferred from them."""

    name = "input_shapes"

    def __init__(self, shapes: InputShapes) -> None:
        self.shapes = shapes

    def call(self, model: ir.Model) -> InputShapesResult:
        """Fix the dims the shapes name; modified if one changed."""
        fixed = apply_input_shapes(model, self.shapes)
        return InputShapesResult(model, fixed.changed > 0, fixed)


class InlineFunctions(InPlacePass):
    """``--inline-functions``: every call of a model-local function becomes its body
    (``inlining.py``), unless the expanded graph would exceed ``EXPANSION_BUDGET`` nodes: then
    nothing is inlined and the report's warning says why (the bodies are still folded)."""

    name = "inline_functions"

    def __init__(self, strict: bool) -> None:
        self.strict = strict

    def call(self, model: ir.Model) -> InlineResult:
        """Inline every call, or none (the result says why)."""
        modified, declined = contained(self.name, self.strict, lambda: inline_functions(model))
        return InlineResult(model, modified, declined)


class InferShapes(InPlacePass):
    """ONNX shape inference with data propagation, merged into the model."""

    name = "infer_shapes"

    def __init__(self, light: onnx.ModelProto | None = None) -> None:
        self.light = light  # the model as read, if nothing changed it since (used once)

    def call(self, model: ir.Model) -> PassResult:
        """Infer every value's shape; modified if one is better known."""
        light, self.light = self.light, None
        return PassResult(model, infer_shapes(model, light) > 0)


class Rewrite(InPlacePass):
    """The catalogue's patterns, to a fixed point. One instance serves every round: what a
    call leaves the next (its worklist, the last reason each node was declined) is its own."""

    name = "rewrite"

    def __init__(self, catalogue: Catalogue, settings: RunSettings, *,
                 inputs_are_constant: bool, strict: bool, log: RewriteLog | None = None
                 ) -> None:
        self.catalogue, self.settings = catalogue, settings
        self.inputs_are_constant, self.strict = inputs_are_constant, strict
        self.log = log  # every rewrite recorded, when the run is to be checked
        self.resume = Resumable()  # what each call leaves the next (the same model's)
        # node -> "rule: reason" of its last try, kept across calls: a call tries only the
        # nodes changes concern, the others' last reason still holds
        self.rejected_at: dict[ir.Node, str] = {}

    def call(self, model: ir.Model) -> RewriteResult:
        """Rewrite until no pattern applies (or the driver's sweeps run out)."""
        done = rewrite(model, self.catalogue, None, self.inputs_are_constant,
                       strict=self.strict, rejected_at=self.rejected_at,
                       settings=self.settings, resume=self.resume, log=self.log)
        for node in [node for node in self.rejected_at if node.graph is None]:
            del self.rejected_at[node]  # removed: neither reported nor kept alive
        return RewriteResult(model, bool(done.hits), done.hits, dict(self.rejected_at),
                             done.converged, done.effects.removed, done.effects.modules)


def initializers(model: ir.Model) -> set[ir.Value]:
    """The initializers of every graph of ``model``."""
    return {v for graph in all_graphs(model) for v in graph.initializers.values()}


class Fold(InPlacePass):
    """Evaluate every foldable node once through a buffer pool of its own
    (``fold/folder.py``). ``growth_spent``: the bytes earlier folds of the run let the model
    grow by (``max_growth_bytes`` bounds the run's total)."""

    name = "fold"

    def __init__(self, catalogue: Catalogue, settings: FoldSettings,
                 progress: Callable[[int, int], None] | None = None,
                 growth_spent: int = 0) -> None:
        self.catalogue, self.settings, self.progress = catalogue, settings, progress
        self.growth_spent = growth_spent
        self.pool = BufferPool(memory_limit=settings.evaluation.memory_limit)

    def call(self, model: ir.Model) -> FoldResult:
        """Fold every graph once; what it folded."""
        reached("folding")
        counts = contained("fold", self.settings.evaluation.strict, lambda: fold_model(
            model, self.catalogue, self.settings, pool=self.pool,
            growth_spent=self.growth_spent, progress=self.progress))
        return FoldResult(model, counts.folded > 0, counts)

    def ensures(self, model: ir.Model) -> None:
        """Under ``strict``: every buffer has left the pool."""
        _pool_empty(self.pool, self.settings.evaluation.strict)


class FoldFunctions(InPlacePass):
    """The constants inside model-local function bodies, without inlining the functions
    (``function_bodies.py``). Once, after the rounds: a body has no rewrites or shape
    refinements to wait for, so one fold of it is complete. ``growth_spent``: what the
    rounds' folds let the model grow by."""

    name = "fold_functions"

    def __init__(self, catalogue: Catalogue, settings: FoldSettings,
                 growth_spent: int = 0) -> None:
        self.catalogue, self.settings, self.growth_spent = catalogue, settings, growth_spent
        self.pool = BufferPool(memory_limit=settings.evaluation.memory_limit)

    def call(self, model: ir.Model) -> FoldFunctionsResult:
        """Fold every body's constants; what it folded (None: no local function)."""
        if not model.functions:
            return FoldFunctionsResult(model, False)
        counts = contained(self.name, self.settings.evaluation.strict, lambda: fold_functions(
            model, self.settings, self.catalogue, self.pool, self.growth_spent))
        return FoldFunctionsResult(model, counts.folded > 0, counts)

    def ensures(self, model: ir.Model) -> None:
        """Under ``strict``: every buffer has left the pool."""
        _pool_empty(self.pool, self.settings.evaluation.strict)


def _pool_empty(pool: BufferPool, strict: bool) -> None:
    """A fold's postcondition (checked under ``strict``): every buffer has left the pool."""
    if strict and len(pool):
        raise PostconditionError(f"buffers left in the pool after folding: {pool.keys()[:5]}")


def remove_dead_nodes(model: ir.Model, keep: frozenset[str] = frozenset()) -> int:
    """Remove nodes whose outputs nothing reads (all graphs), except those ``keep`` names (op
    types and node names), and the main graph's unused initializers that are not inputs;
    return how many nodes went.

    (onnx-ir's RemoveUnusedNodesPass also trims a node's trailing empty inputs, which turns a
    valid ``Loop(M, "")`` into an invalid ``Loop(M)``.)
    """
    removed = 0
    while True:  # a node gone in a subgraph may leave an outer value unread
        graphs = all_graphs(model)
        live = set(graphs)
        gone = [remove_dead_nodes_in(graph, keep, live) for graph in graphs if graph in live]
        removed += sum(gone)
        if not any(gone[1:]):  # a removal in the main graph leaves nothing else to remove
            break
    graph = model.graph
    interface = set(graph.inputs) | set(graph.outputs)
    for name, value in list(graph.initializers.items()):
        if not read_in(value, live) and value not in interface:
            graph.initializers.pop(name)
    return removed


class Prune(InPlacePass):
    """Remove nodes nothing reads, and initializer inputs folding left unused.

    In IR 3 every initializer is an input and a constant; once its readers are folded away it
    must leave the input list too, or the model would carry a dangling input. The same holds
    for overridable initializers the user declared constant.
    """

    name = "prune"

    def __init__(self, keep: frozenset[str], inputs_are_constant: bool, strict: bool) -> None:
        self.keep, self.inputs_are_constant, self.strict = keep, inputs_are_constant, strict

    def call(self, model: ir.Model) -> PassResult:
        """Prune; modified if a node, an input or an initializer went."""
        return PassResult(model, contained("prune", self.strict, lambda: self._prune(model)))

    def _prune(self, model: ir.Model) -> bool:
        """Prune ``model``; whether anything went."""
        graph = model.graph
        sizes = len(graph.inputs), len(graph.initializers)
        if model.ir_version < 4 or self.inputs_are_constant:
            outputs = set(graph.outputs)
            for value in list(graph.inputs):
                if value.name in graph.initializers and not value.uses() and \
                        value not in outputs:
                    graph.inputs.remove(value)
        removed = remove_dead_nodes(model, self.keep)
        return removed > 0 or sizes != (len(graph.inputs), len(graph.initializers))


class RefineShapes(InPlacePass):
    """Infer shapes again when the round's new constants can make a shape known.

    Inference last ran before the round; what it did not know then are the values of the
    constants the rewrite (a Reshape's target written as a constant) and the fold created
    (``new_constants``, given by the round). Only a node reading one of them, with an output
    whose shape is not yet static, can get a better shape (and pass it on downstream); and
    better shapes only enable folds through a Shape/Size node still in the graph: the result
    says whether there is one (``enables_folds``). ``shape_only``: those ops (the
    catalogue's op fact).
    """

    name = "refine_shapes"

    def __init__(self, shape_folding: bool, new_constants: frozenset[ir.Value],
                 shape_only: frozenset[str]) -> None:
        self.shape_folding, self.new_constants = shape_folding, new_constants
        self.shape_only = shape_only

    def call(self, model: ir.Model) -> RefineShapesResult:
        """Infer again where a new constant can tell more; modified if a shape changed."""
        refined = self.shape_folding and self._refine(model) > 0
        shape_only = self.shape_only
        enables = refined and any(
            node.op_type in shape_only for graph in all_graphs(model) for node in graph)
        return RefineShapesResult(model, refined, enables)

    def _refine(self, model: ir.Model) -> int:
        """Infer again what a new constant can change; how many values changed. With
        subgraphs, the whole model; without, only what the Shape/Size nodes waiting for a
        shape read and what that depends on, if a new constant is among it."""
        new = self.new_constants
        if not new:
            return 0
        graphs = all_graphs(model)
        nodes = [node for graph in graphs for node in graph]
        shape_only = self.shape_only
        waiting = {node.inputs[0]: None for node in nodes
                   if node.op_type in shape_only and node.inputs and node.inputs[0] is not None
                   and static_shape(node.inputs[0]) is None}
        if not waiting:
            return 0  # no Shape/Size waits for a shape: nothing a better one could fold
        if len(graphs) > 1:  # values read from an enclosing graph: the whole model
            return infer_shapes(model) if any(refinable_by(n, new) for n in nodes) else 0
        return infer_shapes_upstream(model, list(waiting), new)


def unsorted_graphs(model: ir.Model) -> list[ir.Graph]:
    """The graphs of ``model`` not in topological order (``analysis.in_order``)."""
    return [graph for graph in all_graphs(model) if not in_order(graph)]


class Sorted(InPlacePass):
    """The last pass: every graph in topological order, as ONNX requires. A pass before that
    left one unsorted has a bug: under ``--strict`` that fails this pass's precondition, else
    the graph is sorted."""

    name = "sorted"

    def __init__(self, strict: bool) -> None:
        self.strict = strict

    def requires(self, model: ir.Model) -> None:
        """Under ``strict``: every graph is in topological order already."""
        unsorted = unsorted_graphs(model) if self.strict else []
        if unsorted:
            raise PreconditionError(f"graph {unsorted[0].name!r} was left out of topological "
                                    "order")

    def call(self, model: ir.Model) -> PassResult:
        """Sort the graphs out of order; modified if there was one."""
        unsorted = unsorted_graphs(model)
        for graph in unsorted:
            graph.sort()
        return PassResult(model, bool(unsorted))
