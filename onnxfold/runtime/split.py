"""Runtime constants: split a model into ``runtime_fold`` (run once) and ``entry`` (every call).

Graph inputs the user marks as constant at run time (weights fed at the first call) make a
three-level lattice: compile-time constants (folded by the fold pass), runtime constants (depend
only on marked inputs and compile-time constants), dynamic values. The runtime-constant nodes
become the ``runtime_fold`` model, run once; its outputs are the *frontier*: runtime-constant
values that dynamic nodes (or graph outputs) read. ``entry`` is the rest, taking the frontier
values as extra inputs. An expanding op at the frontier stays in entry, so the fold hands over
the small tensor. Optionally compile-time constants go into a ``compiletime_fold`` model too,
for users who fold them late.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import onnx
import onnx_ir as ir

from onnxfold._version import __version__
from onnxfold.analysis.constness import (
    OpFacts,
    plan_graph,
    runtime_constant_nodes,
    why_not_foldable,
)
from onnxfold.analysis.shapes import infer_shapes
from onnxfold.declare.catalogue import Catalogue, load_catalogue
from onnxfold.errors import InputError, OutputError
from onnxfold.fold.policy import static_nbytes
from onnxfold.host.terminal import printable
from onnxfold.io import save_model
from onnxfold.io.door import claimed
from onnxfold.io.outputs import OutputGuard
from onnxfold.io.pinned import PinnedOutput
from onnxfold.io.publication import output_lock
from onnxfold.io.tempfiles import write_text
from onnxfold.io.writer import input_files
from onnxfold.ir.arrays import c_contiguous
from onnxfold.ir.dtypes import np_dtype
from onnxfold.ir.graph import captured_values, external_inputs, is_default_op, subgraphs
from onnxfold.pipeline.optimizer import optimize
from onnxfold.pipeline.options import FoldOptions
from onnxfold.pipeline.passes import remove_dead_nodes
from onnxfold.runtime.file_weights import held_as_inputs, runtime_only_weights
from onnxfold.runtime.reassociate import LowRankMerges, merge_low_rank_branches

FRONTIER_EXPANSION = 4.0
FRONTIER_MIN_BYTES = 1 << 20


@dataclass
class Lattice:
    """Which values are compile-time constant, runtime constant, or (by omission) dynamic."""

    compile_time: set[ir.Value]
    runtime: set[ir.Value]
    compile_nodes: list[ir.Node]
    runtime_nodes: list[ir.Node]


def match_inputs(graph: ir.Graph, names_or_patterns: Iterable[str]) -> list[ir.Value]:
    """Graph inputs named by ``names_or_patterns`` (exact names or shell patterns like 'w*')."""
    chosen: list[ir.Value] = []
    for spec in names_or_patterns:
        hits = [v for v in graph.inputs  # graph inputs are named
                if v.name == spec or fnmatch.fnmatchcase(cast(str, v.name), spec)]
        if not hits:
            names = ", ".join(printable(cast(str, v.name)) for v in graph.inputs)
            raise InputError(f"--runtime-const {printable(spec)}: no graph input matches "
                             f"(inputs: {names})")
        chosen.extend(v for v in hits if v not in chosen)
    return chosen


def _hoist(model: ir.Model, known: set[ir.Value], runtime: set[ir.Value], facts: OpFacts
           ) -> int:
    """Move subgraph nodes that read only runtime/compile-time constants to the main graph.

    Such a node computes the same value on every execution of its subgraph, so the split can
    fold it once like any other runtime constant. Nested subgraphs are hoisted level by level.
    """
    graph = model.graph
    moved = 0
    for top in list(graph):
        stack = list(subgraphs(top))
        while stack:
            sub = stack.pop()
            for node in list(sub):
                stack.extend(subgraphs(node))
                inputs = [v for v in list(node.inputs) + captured_values(node) if v is not None]
                if node.op_type == "Identity" and all(o in sub.outputs for o in node.outputs):
                    continue  # the subgraph's hand-over of a hoisted value
                if (not inputs or why_not_foldable(node, facts=facts)
                        or is_default_op(node, "Constant")
                        or not all(v in known or v in runtime for v in inputs)
                        or not any(v in runtime for v in inputs)):
                    continue
                sub.remove(node)
                graph.insert_before(top, node)
                runtime.update(node.outputs)
                _keep_subgraph_outputs(sub, node)
                moved += 1
    return moved


def _keep_subgraph_outputs(sub: ir.Graph, hoisted: ir.Node) -> None:
    """A subgraph output must be produced inside it: hoisted outputs get an Identity there."""
    for value in hoisted.outputs:
        for i, out in enumerate(sub.outputs):
            if out is value:
                ident = ir.Node("", "Identity", [value])
                ident.outputs[0].name = value.name
                ident.outputs[0].type, ident.outputs[0].shape = value.type, value.shape
                value.name = f"{value.name}__onnxfold_hoisted"
                sub.append(ident)
                sub.outputs[i] = ident.outputs[0]


def analyse(model: ir.Model, runtime_inputs: Sequence[ir.Value], facts: OpFacts) -> Lattice:
    """The three-level constness lattice of the main graph (subgraph nodes hoisted into it);
    ``facts``: the op facts of the run's catalogue."""
    graph = model.graph
    plan = plan_graph(graph, model.ir_version, facts=facts)
    while _hoist(model, set(plan.constant), _runtime_values(graph, plan, runtime_inputs, facts),
                 facts):
        plan = plan_graph(graph, model.ir_version, facts=facts)
    rt_nodes = _runtime_nodes(graph, plan, runtime_inputs, facts)
    rt = set(runtime_inputs) | {v for n in rt_nodes for v in n.outputs}
    return Lattice(set(plan.constant), rt, list(plan.foldable), rt_nodes)


def _runtime_nodes(graph: ir.Graph, plan, runtime_inputs: Sequence[ir.Value], facts: OpFacts
                   ) -> list[ir.Node]:
    """The runtime-constant nodes, with the compile-time nodes the fold left (its policy
    declined them: a Cast that would double a weight, a reshape of one) that they read: the
    runtime fold computes those too, or it would read values with no data."""
    nodes = runtime_constant_nodes(graph, runtime_inputs, plan.constant, facts=facts)
    chosen = set(nodes)
    foldable = set(plan.foldable)
    todo = [v for n in nodes for v in n.inputs if v is not None]
    while todo:
        producer = todo.pop().producer()
        if producer is not None and producer in foldable and producer not in chosen and \
                producer.graph is graph:
            chosen.add(producer)
            todo.extend(v for v in producer.inputs if v is not None)
    return [n for n in graph if n in chosen]


def _runtime_values(graph: ir.Graph, plan, runtime_inputs: Sequence[ir.Value], facts: OpFacts
                    ) -> set[ir.Value]:
    nodes = _runtime_nodes(graph, plan, runtime_inputs, facts)
    return set(runtime_inputs) | {v for n in nodes for v in n.outputs}


def _readers_outside(value: ir.Value, group: set[ir.Node], graph: ir.Graph) -> bool:
    return value in graph.outputs or any(u.node not in group for u in value.uses())


def _keep_expansions_in_entry(nodes: list[ir.Node], graph: ir.Graph) -> list[ir.Node]:
    """Move frontier nodes whose output is much bigger than their inputs back to entry."""
    group = set(nodes)
    changed = True
    while changed:
        changed = False
        for node in reversed(nodes):
            if node not in group:
                continue
            outs = [v for v in node.outputs if _readers_outside(v, group, graph)]
            if not outs:
                continue
            out_bytes = [static_nbytes(v) for v in outs]
            in_bytes = [static_nbytes(v) for v in node.inputs if v is not None]
            if None in out_bytes or None in in_bytes:
                continue
            out_total, in_total = sum(cast(list[int], out_bytes)), sum(cast(list[int], in_bytes))
            if out_total > max(FRONTIER_MIN_BYTES, FRONTIER_EXPANSION * in_total):
                group.discard(node)
                changed = True
    return [n for n in nodes if n in group]


def _extract(model: ir.Model, nodes: list[ir.Node], inputs: list[ir.Value],
             outputs: list[ir.Value], name: str, shared_from: int | None = None) -> ir.Model:
    """A standalone copy of ``nodes`` reading ``inputs`` (+ initializers) giving ``outputs``."""
    members = set(nodes)
    needed = external_inputs(nodes)
    constants = [n for n in model.graph if is_default_op(n, "Constant") and n not in members
                 and any(o in needed for o in n.outputs)]
    initializers = []
    for v in needed:
        if v in inputs or (v.producer() is not None and v.producer() in constants):
            continue
        if v.const_value is None:
            raise InputError(f"{name}: value {v.name} is neither an input nor a constant")
        initializers.append(v)
    graph = ir.GraphView(inputs, outputs, nodes=constants + nodes, initializers=initializers,
                         opset_imports=dict(model.opset_imports), name=name).clone()
    _describe_like_a_loaded_part(graph, shared_from)
    return ir.Model(graph, ir_version=max(model.ir_version, 4))


def _describe_like_a_loaded_part(graph: ir.Graph, shared_from: int | None = None) -> None:
    """Describe the part's values as a proto of it did (parts were protos; the written files
    stay what they were): inputs and outputs as in the model, each initializer by its tensor,
    the values between nodes not at all. An initializer holds a copy of its data: serialized, a
    reference would name the input's file relative to nowhere, and a backend may read the part
    at every fold, long after the input was loaded; except, with ``shared_from``, the file's
    tensors of that many bytes or more (a Session hands them to its backend as arrays read
    from the file's mapping, never serialized)."""
    for value in graph.initializers.values():
        tensor = value.const_value
        assert tensor is not None  # _extract took only values with one
        if isinstance(tensor, ir.ExternalTensor) and (shared_from is None or
                                                       tensor.nbytes < shared_from):
            tensor = ir.Tensor(np.array(tensor.numpy()), name=tensor.name)
        value.const_value = tensor
        value.type, value.shape = ir.TensorType(tensor.dtype), ir.Shape(tensor.shape.numpy())
        value.doc_string = None
        value.metadata_props.clear()
    interface = set(graph.outputs)
    for node in graph:
        for value in node.outputs:
            if value not in interface:
                value.type = value.shape = value.const_value = value.doc_string = None
                value.metadata_props.clear()


def _cut(model: ir.Model, nodes: list[ir.Node], frontier: list[ir.Value]) -> None:
    """Remove ``nodes`` from the main graph; ``frontier`` values become graph inputs."""
    graph = model.graph
    for value in frontier:
        replacement = ir.Value(name=value.name, shape=value.shape, type=value.type)
        value.name = f"{value.name}__onnxfold_folded"
        value.replace_all_uses_with(replacement, replace_graph_outputs=True)
        graph.inputs.append(replacement)
    for node in reversed(nodes):
        graph.remove(node, safe=True)


@dataclass
class SplitModels:
    """The parts of a split model and the manifest that ties them together."""

    entry: ir.Model
    runtime_fold: ir.Model
    compiletime_fold: ir.Model | None
    manifest: dict = field(default_factory=dict)
    low_rank: LowRankMerges = field(default_factory=LowRankMerges)

    @property
    def fold_inputs(self) -> list[str]:
        return [cast(str, v.name) for v in self.runtime_fold.graph.inputs]  # graph inputs: named

    @property
    def fold_outputs(self) -> list[str]:
        return [cast(str, v.name) for v in self.runtime_fold.graph.outputs]


WEIGHT_INPUT_BYTES = 64 << 10  # fold initializers handed to a backend as inputs from here up


def weights_as_inputs(fold: ir.Model, min_bytes: int = WEIGHT_INPUT_BYTES
                      ) -> tuple[ir.Model, dict[str, np.ndarray]]:
    """A copy of the ``fold`` model whose initializers of ``min_bytes`` or more are graph
    inputs, and their arrays (shared, not copied). A backend then neither copies the base
    weights a merge reads (onnxruntime would hold its own) nor compiles them into a module
    (IREE's would be as large as they are, and keyed by their values: one per model). An
    initializer the fold left as a strided view (a folded Transpose) is made contiguous in
    ``fold`` too, once: a backend would copy it on every call."""
    for value in fold.graph.initializers.values():
        tensor = value.const_value
        if tensor is not None and tensor.nbytes >= min_bytes:
            array = tensor.numpy()
            if not array.flags.c_contiguous:
                value.const_value = ir.Tensor(c_contiguous(array), name=value.name)
    part = fold.clone()
    arrays: dict[str, np.ndarray] = {}
    graph = part.graph
    for name, value in list(graph.initializers.items()):
        tensor = value.const_value
        if tensor is None or tensor.nbytes < min_bytes or value in graph.inputs:
            continue
        arrays[name] = tensor.numpy()
        graph.initializers.pop(name)
        value.const_value = None
        graph.inputs.append(value)
    return part, arrays


COMPILE_TIME = ("fold", "keep", "separate")


def optimize_and_split(model: ir.Model, runtime_constants: Iterable[str], catalogue: Catalogue,
                       options: FoldOptions | None = None, compile_time: str = "fold",
                       file_weights: bool = False) -> SplitModels:
    """Fold ``model``'s compile-time constants, then split it around its runtime constants
    (``model`` becomes the entry model). ``compile_time``: ``"fold"`` them first (the default),
    ``"keep"`` them in entry unfolded (onnxruntime folds them when it loads entry), or put them
    in a ``"separate"`` ``compiletime_fold`` model. Low-rank branches over the runtime
    constants are merged into their base weights first (``onnxfold.runtime.reassociate``).
    ``catalogue``: the rules and op facts of the fold, the merge and the split (the caller's
    choice: ``Session`` and the ``split`` command). ``file_weights``: the weights only the
    runtime fold reads are not folded at compile time and stay references to the model's
    file in the runtime fold (``onnxfold.runtime.file_weights``: a Session's), else the
    parts hold copies of their data (files written by ``write_split``)."""
    if compile_time not in COMPILE_TIME:
        raise InputError(f"compile_time must be one of {', '.join(COMPILE_TIME)}")
    runtime_constants = list(runtime_constants)
    options = options or FoldOptions()
    merges = merge_low_rank_branches(model, match_inputs(model.graph, runtime_constants),
                                     catalogue, options)
    if compile_time == "fold":
        held = runtime_only_weights(model, match_inputs(model.graph, runtime_constants),
                                    catalogue, WEIGHT_INPUT_BYTES) if file_weights else []
        with held_as_inputs(model, held):
            optimize(model, options, catalogue=catalogue)
        merges = merges + merge_low_rank_branches(
            model, match_inputs(model.graph, runtime_constants), catalogue, options)
    parts = split_model(model, runtime_constants,
                        separate_compile_time=compile_time == "separate",
                        keep=options.run_settings().keep,
                        catalogue=catalogue, file_weights=file_weights)
    parts.low_rank = merges
    return parts


def split_model(model: ir.Model, runtime_constants: Iterable[str], *,
                separate_compile_time: bool = False,
                keep: frozenset[str] = frozenset(), catalogue: Catalogue | None = None,
                file_weights: bool = False) -> SplitModels:
    """Split ``model`` (changed in place into the entry model) around its runtime constants.

    ``separate_compile_time`` puts compile-time constant subgraphs, unfolded, in a separate
    ``compiletime_fold`` model whose outputs feed entry and runtime_fold as inputs; ``keep``:
    op types and node names (``--keep``) whose nodes stay even when nothing reads them;
    ``catalogue``: whose op facts decide what is constant (None: the installed rules,
    ``load_catalogue()``); ``file_weights``: the runtime fold's weights of
    ``WEIGHT_INPUT_BYTES`` or more stay references to the model's file (a Session reads them
    there), else every part holds copies of its data.
    """
    facts = load_catalogue() if catalogue is None else catalogue
    graph = model.graph
    rt_inputs = match_inputs(graph, runtime_constants)
    infer_shapes(model)  # sizes at the frontier decide where expanding ops go
    lattice = analyse(model, rt_inputs, facts)
    rt_nodes = _keep_expansions_in_entry(lattice.runtime_nodes, graph)
    rt_set = set(rt_nodes)
    frontier = [v for n in rt_nodes for v in n.outputs
                if v.name and _readers_outside(v, rt_set, graph)]
    read = set(external_inputs(rt_nodes))  # a subgraph's captured reads too
    fold_inputs = [v for v in rt_inputs if v in read]

    compiletime = None
    ct_frontier: list[ir.Value] = []
    if separate_compile_time and lattice.compile_nodes:
        ct_set = set(lattice.compile_nodes)
        ct_frontier = [v for n in lattice.compile_nodes for v in n.outputs
                       if v.name and _readers_outside(v, ct_set, graph)]
        compiletime = _extract(model, lattice.compile_nodes, [], ct_frontier,
                               "compiletime_fold")
    ct_fed = [v for v in ct_frontier if any(u.node in rt_set for u in v.uses())]
    runtime = _extract(model, rt_nodes, fold_inputs + ct_fed, frontier, "runtime_fold",
                       WEIGHT_INPUT_BYTES if file_weights else None)

    _cut(model, rt_nodes, frontier)
    if compiletime is not None:
        _cut(model, lattice.compile_nodes, ct_frontier)
    remove_dead_nodes(model, keep)
    read_by_entry = set(external_inputs(list(graph)))  # a removed Loop's body still "uses" it
    for value in fold_inputs:
        if value not in read_by_entry and value not in graph.outputs:
            graph.inputs.remove(value)
            if value.name in graph.initializers and not value.uses():
                # its default too (a split adapter's LoRA input): onnxruntime would say it
                # removes it, one warning per weight at every session
                graph.initializers.pop(str(value.name))
    manifest = build_manifest(model, runtime, compiletime,
                              [cast(str, v.name) for v in rt_inputs])  # graph inputs: named
    return SplitModels(model, runtime, compiletime, manifest)


def _io(values: Iterable[ir.Value]) -> list[dict]:
    """Name, dtype and dims of each value; a value not typed as a tensor has neither."""
    out = []
    for v in values:
        tensor = v.type if isinstance(v.type, ir.TensorType) else None
        dims = None if tensor is None or v.shape is None else [
            d if isinstance(d, int) else (d.value or None) for d in v.shape]
        dtype = np_dtype(tensor.dtype).name if tensor and tensor.dtype else None
        out.append({"name": v.name, "dtype": dtype, "shape": dims})
    return out


def build_manifest(entry: ir.Model, runtime: ir.Model, compiletime: ir.Model | None,
                   runtime_constants: list[str]) -> dict:
    return {
        "format": "onnxfold-split/1",
        "onnxfold": __version__,
        "onnx": onnx.__version__,
        "opsets": {d or "ai.onnx": v for d, v in entry.opset_imports.items()},
        "runtime_constants": runtime_constants,
        "runtime_fold": {"file": "runtime_fold.onnx", "inputs": _io(runtime.graph.inputs),
                         "outputs": _io(runtime.graph.outputs)},
        "compiletime_fold": None if compiletime is None else {
            "file": "compiletime_fold.onnx", "outputs": _io(compiletime.graph.outputs)},
        "entry": {"file": "entry.onnx",
                  "inputs": [v.name for v in entry.graph.inputs],
                  "from_fold": [v.name for v in runtime.graph.outputs]},
    }


SPLIT_FILES = ("entry.onnx", "runtime_fold.onnx", "compiletime_fold.onnx", "manifest.json")


@contextlib.contextmanager
def split_outputs(out_dir: str | os.PathLike, inputs: Iterable[str] = (),
                  models: Iterable[str] = ()) -> Iterator[OutputGuard]:
    """The files of a split (:data:`SPLIT_FILES`) claimed in ``out_dir`` for the block
    (``onnxfold.io.door``: none may replace ``inputs``, ``models`` or the files their weights
    are read from), the directory made first if it is missing and removed again, if empty,
    when the block fails."""
    out_dir = os.fspath(out_dir)
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise OutputError(f"{out_dir}: exists and is not a directory")
    created = not os.path.exists(out_dir)
    if created:  # a link to nothing yet is written through, as an output file's
        try:
            os.mkdir(os.path.realpath(out_dir))
        except OSError as e:
            raise OutputError(f"{out_dir}: cannot create the output directory ({e.strerror})"
                              ) from None
    try:
        guard = claimed([(os.path.join(out_dir, name), name) for name in SPLIT_FILES],
                        inputs, models)
        with contextlib.closing(guard):
            yield guard
    except BaseException:
        if created:
            with contextlib.suppress(OSError):
                os.rmdir(os.path.realpath(out_dir))
        raise


def write_split(parts: SplitModels, out_dir: str | os.PathLike, *,
                guard: OutputGuard | None = None) -> list[str]:
    """Write entry.onnx, runtime_fold.onnx (and compiletime_fold.onnx) and manifest.json.

    Every path is claimed before the first is written (:func:`split_outputs`, or the
    caller's ``guard`` from it: never over the input model or its data); a failure removes
    what was written, and the directory if this call created it.
    """
    if guard is None:
        with split_outputs(out_dir, input_files(parts.entry)) as claimed_here:
            return write_split(parts, out_dir, guard=claimed_here)
    models = [("entry.onnx", parts.entry), ("runtime_fold.onnx", parts.runtime_fold)]
    if parts.compiletime_fold is not None:
        models.append(("compiletime_fold.onnx", parts.compiletime_fold))
    written: list[PinnedOutput] = []
    manifest = guard.pinned(os.path.join(out_dir, "manifest.json"))
    try:
        with output_lock(manifest):  # one split at a time: never the parts of two
            for name, part in models:
                output = guard.pinned(os.path.join(out_dir, name))
                save_model(part, output, guard=guard)
                written.append(output)
            write_text(manifest, json.dumps(parts.manifest, indent=2))
            written.append(manifest)
    except BaseException:
        for output in written:
            with contextlib.suppress(OSError):
                output.directory.unlink(output.name)
        raise
    return [output.given for output in written]
