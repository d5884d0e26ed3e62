"""The whole-model cleanups: passes run once after the fold stage, in the order
:data:`CLEANUPS` lists them (``optimizer.build_pipeline`` puts them between the fold stage
and the last prune). Engine code, not rules: each walks and edits the whole model.

Each is an onnx-ir in-place pass (:class:`Cleanup`) named as ``--disable-rule`` and the
report call it; one that removes an op (``removes``) is off under ``--disable-rule OP`` and
``--keep OP``, as a pattern of that op is. What it changed is a :class:`CleanupsResult`: its
hits and the nodes it removed net. A cleanup that raises is contained like a rule
(``StepFailed`` with its name: ``optimize`` starts again without it).
"""

from __future__ import annotations

import functools
import hashlib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from typing import ClassVar, NamedTuple

import numpy as np
import onnx_ir as ir
from onnx_ir.passes import InPlacePass

from onnxfold.analysis.constness import kept
from onnxfold.analysis.settings import RunSettings
from onnxfold.io.mapped import MappedTensor, drop_resident_pages
from onnxfold.ir import provenance
from onnxfold.ir.arrays import c_contiguous, release_pages
from onnxfold.ir.blocks import Concatenated
from onnxfold.ir.constants import constant_array
from onnxfold.ir.edits import names_for, replace_value
from onnxfold.ir.graph import all_graphs, counted, is_default_op, tensor_of
from onnxfold.pipeline.results import CleanupsResult
from onnxfold.rewrite.judge import stands_for_output
from onnxfold.rewrite.steps import contained


class Cleanup(InPlacePass):
    """A whole-model cleanup: :meth:`clean` edits the model in place and returns how many
    changes it made. ``settings``: the run's :class:`RunSettings` (what the user keeps, the
    non-deterministic and unknown ops); ``strict``: an error is raised as it is, not
    contained."""

    name: ClassVar[str]
    removes: ClassVar[tuple[str, ...]] = ()  # the op types it removes

    def __init__(self, settings: RunSettings, strict: bool) -> None:
        self.settings, self.strict = settings, strict

    def call(self, model: ir.Model) -> CleanupsResult:
        """Clean once; modified if a change was made, with its hits and the nodes it
        removed (as the report counts them: told by the cleanup, not counted again over the
        model before and after, two whole-model walks a cleanup)."""
        done = contained(self.name, self.strict, functools.partial(self.clean, model))
        if not done.changes:
            return CleanupsResult(model, False)
        return CleanupsResult(model, True, Counter({self.name: done.changes}),
                              Counter({self.name: done.removed}))

    def clean(self, model: ir.Model) -> Cleaned:
        """Change ``model``; how many changes were made and counted nodes removed."""
        raise NotImplementedError


class Cleaned(NamedTuple):
    """What a cleanup did: its changes, and the nodes the report counts that it removed."""

    changes: int
    removed: int


def _removable(node: ir.Node, graph: ir.Graph) -> ir.Value | None:
    """``x`` where ``y = Identity(x)`` can go (else None). A graph output ``y`` may only
    become ``x`` where onnxruntime runs that correctly: ``x`` computed by a node of the same
    graph (a subgraph must not return an outer-scope value or its own input directly) and not
    already an output (a subgraph returning one value twice computes wrong states in
    onnxruntime's Scan)."""
    x, y = node.inputs[0] if node.inputs else None, node.outputs[0]
    if x is None or len(node.outputs) != 1:
        return None
    if y not in graph.outputs:
        return x
    return x if stands_for_output(x, graph) and graph.outputs.count(y) == 1 else None


def remove_identity(model: ir.Model, settings: RunSettings) -> int:
    """Identity nodes disappear where that is safe (graph outputs keep their names)."""
    removed = 0
    for graph in all_graphs(model):
        for node in list(graph):
            x = _removable(node, graph) if is_default_op(node, "Identity") else None
            if x is None or kept(node, settings.keep):
                continue
            replace_value(graph, node.outputs[0], x, names_for(model).fresh)
            graph.remove(node, safe=True)
            removed += 1
    return removed


def constants_to_initializers(model: ir.Model, settings: RunSettings) -> int:
    """The main graph's ``Constant`` nodes become initializers (as onnxruntime does when it
    loads a model); subgraphs keep theirs, and so do string constants and IR 3 models."""
    if model.ir_version < 4:
        return 0  # there every initializer must be a graph input: the interface would change
    graph = model.graph
    names = names_for(model)
    moved = 0
    keep = settings.keep
    for node in list(graph):
        if not is_default_op(node, "Constant") or len(node.outputs) != 1 or kept(node, keep):
            continue
        out = node.outputs[0]
        arr = constant_array(out)
        if arr is None or out.name is None or out.name in graph.initializers:
            continue
        name = out.name
        out.name = names.fresh(name)
        value = ir.Value(name=name, shape=ir.Shape(arr.shape),
                         type=ir.TensorType(ir.DataType.from_numpy(arr.dtype)),
                         const_value=ir.Tensor(arr, name=name))
        out.replace_all_uses_with(value, replace_graph_outputs=True)
        graph.register_initializer(value)
        graph.remove(node, safe=True)
        moved += 1
    return moved


class _ResidentBound:
    """Keeps what reading many mapped weights leaves resident under ``LIMIT``: the pages of
    all shared mappings are dropped once that much may have been mapped since the last drop.
    A read maps the whole page-cache folio around it (up to ``FOLIO`` bytes), so releasing
    each weight's own pages is not enough: the next weight, in the same folio, maps them
    again. Small weights side by side share folios and are counted once."""

    LIMIT = 32 << 20
    FOLIO = 2 << 20

    def __init__(self) -> None:
        self.mapped = 0
        self.last: tuple[str, int] | None = None  # the folio the previous read ended in

    def read(self, tensor: ir.TensorProtocol, places: int) -> None:
        """``tensor`` was read at ``places`` places (spread over it)."""
        if not isinstance(tensor, MappedTensor):
            return
        start = tensor.offset or 0
        first, last = start // self.FOLIO, (start + max(tensor.nbytes, 1) - 1) // self.FOLIO
        folios = min(last - first + 1, places)
        if self.last == (tensor.path, first):
            folios -= 1
        self.last = (tensor.path, last)
        self.mapped += folios * self.FOLIO
        if self.mapped >= self.LIMIT:
            drop_resident_pages()
            self.mapped = 0


def _sample_digest(tensor: ir.TensorProtocol, bound: _ResidentBound) -> bytes:
    """A digest of 64 elements in 4 runs of 16 spread over the tensor (its first and last
    included): it reads 4 places, not all of it (a weight's pages not in memory are a read
    each: 64 single elements cost 8 s of random reads over a 7B decoder's weights; of an
    unbuilt concatenation, the places in its pieces: it is not built)."""
    bound.read(tensor, _PLACES)
    raw = tensor.raw if isinstance(tensor, ir.Tensor) else None
    arr = raw if isinstance(raw, Concatenated) else tensor.numpy()
    picks = _picks(arr.size)
    sampled = arr.take_flat(picks) if isinstance(arr, Concatenated) else arr.flat[picks]
    digest = hashlib.blake2b(np.asarray(sampled).tobytes(), digest_size=16).digest()
    for read in arr.pieces if isinstance(arr, Concatenated) else (arr,):
        release_pages(read)
    return digest


_PLACES, _RUN = 4, 16  # runs of consecutive elements sampled, and their length


def _picks(size: int) -> np.ndarray:
    """Distinct, increasing positions of ``size`` elements: ``_PLACES`` runs of ``_RUN``
    spread evenly, the first and the last element included (all where there are fewer)."""
    if size <= _PLACES * _RUN:
        return np.arange(size, dtype=np.int64)
    starts = np.arange(_PLACES, dtype=np.int64) * (size - _RUN) // (_PLACES - 1)
    return (starts[:, None] + np.arange(_RUN, dtype=np.int64)).reshape(-1)


def _digest(tensor: ir.TensorProtocol, bound: _ResidentBound) -> bytes:
    bound.read(tensor, tensor.nbytes)
    arr = tensor.numpy()
    data = c_contiguous(arr)
    digest = hashlib.blake2b(data.reshape(-1).view(np.uint8).data, digest_size=32)
    release_pages(arr)
    return digest.digest()


class _Weight(NamedTuple):
    """An initializer with data, with its name and its tensor."""

    name: str
    value: ir.Value
    tensor: ir.TensorProtocol


def _groups(values: Iterable[_Weight], key: Callable[[_Weight], object]) -> list[list[_Weight]]:
    """The groups of two or more ``values`` of the same ``key``."""
    grouped: dict = defaultdict(list)
    for value in values:
        grouped[key(value)].append(value)
    return [members for members in grouped.values() if len(members) > 1]


def dedupe_initializers(model: ir.Model) -> int:
    """Identical initializers (same dtype, shape and bytes) become one; inputs are left alone
    (but those an IR 3 fold listed there, :func:`_folded_input`).

    Candidates are narrowed by dtype and shape, then by a digest of a few sampled KiB; only
    tensors that still collide are hashed whole, so distinct weights are barely read.
    """
    removed = 0
    bound = _ResidentBound()
    for graph in all_graphs(model):
        inputs = frozenset(graph.inputs)
        candidates = [_Weight(name, v, v.const_value)
                      for name, v in graph.initializers.items()
                      if v.const_value is not None and v not in graph.outputs and
                      (v not in inputs or _folded_input(model, graph, v.const_value))
                      and v.const_value.dtype != ir.DataType.STRING]
        shaped = _groups(candidates, lambda w: (w.tensor.dtype, tuple(w.tensor.shape.numpy())))
        for same_shape in shaped:
            for same_sample in _groups(same_shape, lambda w: _sample_digest(w.tensor, bound)):
                seen: dict[bytes, ir.Value] = {}
                for weight in same_sample:
                    keep = seen.setdefault(_digest(weight.tensor, bound), weight.value)
                    if keep is weight.value:
                        continue
                    weight.value.replace_all_uses_with(keep)
                    graph.initializers.pop(weight.name)
                    if weight.value in inputs:
                        graph.inputs.remove(weight.value)
                    removed += 1
    drop_resident_pages()
    return removed


def _folded_input(model: ir.Model, graph: ir.Graph, tensor: ir.TensorProtocol) -> bool:
    """Whether an initializer that is an input is one the fold made: in IR 3 the fold lists
    what it stores among the main graph's inputs (as that IR asks of every initializer), but
    no caller feeds it."""
    return model.ir_version < 4 and graph is model.graph and \
        provenance.FOLDED_FROM in tensor.metadata_props


def prune_subgraph_initializers(model: ir.Model) -> int:
    """Initializers of subgraphs (Loop/If/Scan bodies) that nothing reads any more disappear.

    Folding a body's weight leaves the weight unused, and onnx-ir's unused-node pass only
    prunes the main graph's initializers: without this the body would keep both.
    """
    removed = 0
    for graph in all_graphs(model):
        if graph is model.graph:
            continue
        kept = set(graph.inputs) | set(graph.outputs)
        for name, value in list(graph.initializers.items()):
            if not value.uses() and value not in kept:
                graph.initializers.pop(name)
                removed += 1
    return removed


def _attribute_key(attr: ir.Attr) -> object:
    """A hashable form of an attribute's value; None when it cannot be compared cheaply (a
    subgraph, a large tensor)."""
    if attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
        return None
    if attr.type == ir.AttributeType.TENSOR:
        tensor = tensor_of(attr)
        if tensor.size > 1024 or tensor.dtype == ir.DataType.STRING:
            return None  # strings have no bytes to compare (and are rare in Constants)
        return (int(tensor.dtype), tuple(tensor.shape.numpy()), tensor.tobytes())
    if attr.type == ir.AttributeType.TENSORS:
        return None
    return repr(attr.value)  # repr keeps 0.0 and -0.0 (and every float) apart


def _node_key(node: ir.Node, nondeterministic: frozenset[str]) -> tuple | None:
    if not is_default_op(node) or node.op_type in nondeterministic:
        return None  # another domain's op may keep state or draw random numbers
    attributes = []
    for name, attr in sorted(node.attributes.items()):
        key = _attribute_key(attr)
        if key is None:
            return None
        attributes.append((name, int(attr.type), key))
    return (node.op_type, node.overload, len(node.outputs),
            tuple(id(v) if v is not None else None for v in node.inputs), tuple(attributes))


def merge_duplicates(model: ir.Model, settings: RunSettings) -> Cleaned:
    """Nodes computing the same op of the same inputs with the same attributes become one (the
    copies of ``Reshape(dim, [1])`` or ``Where(mask, -inf, 0)`` exporters emit per layer).
    Never for non-deterministic ops, other domains or nodes with subgraphs."""
    # plugins (ops onnx does not know) may draw random numbers or keep state: never merged
    nondeterministic = settings.nondeterministic_ops | settings.unknown_ops
    names = names_for(model)
    keep = settings.keep
    merged = constants = 0
    for graph in all_graphs(model):
        first: dict[tuple, ir.Node] = {}
        for node in list(graph):
            key = None if kept(node, keep) else _node_key(node, nondeterministic)
            if key is None:
                continue
            original = first.setdefault(key, node)
            if original is node or any(v in graph.outputs for v in node.outputs):
                continue
            for old, new in zip(node.outputs, original.outputs):
                replace_value(graph, old, new, names.fresh)
            graph.remove(node, safe=True)
            merged += 1
            constants += counted((node,)) == 0
    return Cleaned(merged, merged - constants)


class RemoveIdentity(Cleanup):
    """Identity nodes disappear where that is safe (graph outputs keep their names)."""

    name = "remove_identity"
    removes = ("Identity",)

    def clean(self, model: ir.Model) -> Cleaned:
        """Remove every removable Identity; how many went."""
        removed = remove_identity(model, self.settings)
        return Cleaned(removed, removed)


class ConstantsToInitializers(Cleanup):
    """The main graph's ``Constant`` nodes become initializers (as onnxruntime does when it
    loads a model); subgraphs keep theirs, and so do string constants and IR 3 models."""

    name = "constants_to_initializers"
    removes = ("Constant",)

    def clean(self, model: ir.Model) -> Cleaned:
        """Move the main graph's constants; how many moved (Constant nodes: not counted)."""
        return Cleaned(constants_to_initializers(model, self.settings), 0)


class DedupeInitializers(Cleanup):
    """Identical initializers (same dtype, shape and bytes) become one."""

    name = "dedupe_initializers"

    def clean(self, model: ir.Model) -> Cleaned:
        """Merge identical initializers; how many went."""
        return Cleaned(dedupe_initializers(model), 0)


class PruneSubgraphInitializers(Cleanup):
    """Initializers of subgraphs that nothing reads any more disappear."""

    name = "prune_subgraph_initializers"

    def clean(self, model: ir.Model) -> Cleaned:
        """Remove the unread subgraph initializers; how many went."""
        return Cleaned(prune_subgraph_initializers(model), 0)


class MergeDuplicates(Cleanup):
    """Nodes computing the same op of the same inputs with the same attributes become one."""

    name = "merge_duplicates"

    def clean(self, model: ir.Model) -> Cleaned:
        """Merge duplicate nodes; how many went."""
        return merge_duplicates(model, self.settings)


# The cleanups in the order they run.
CLEANUPS: tuple[type[Cleanup], ...] = (RemoveIdentity, ConstantsToInitializers,
                                       DedupeInitializers, PruneSubgraphInitializers,
                                       MergeDuplicates)


def cleanup_passes(off: Iterable[str], settings: RunSettings, strict: bool) -> list[Cleanup]:
    """The cleanups to run, in order: all but those ``off`` names (by name, or an op type
    they remove)."""
    disabled = frozenset(off)
    return [cleanup(settings, strict) for cleanup in CLEANUPS
            if cleanup.name not in disabled and not set(cleanup.removes) & disabled]
