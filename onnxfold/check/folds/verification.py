"""Verify every initializer of an optimized model that the original does not hold as it is,
by computing it again from the original, without trusting anything the fold concluded.

Each initializer is judged by what it claims to be (``onnxfold.ir.provenance``):

- a **fold** keeps the name of the value of the original it replaces: that value's cone (the
  original's nodes back to its constants and inputs, ``cones.py``) runs in onnxruntime and the
  result is compared with it (``fold_verdicts.judge``);
- a **rewrite's constant** in place of a value of the original (a shape value a rewrite proved,
  ``STANDS_FOR``) is compared with that value, the same way;
- a tensor folded from nodes a **rewrite built** (a merged Q/K/V weight) is computed again by
  its saved recipe, from the original's tensors (``recipe_runs.py``).

A fold is right only for every input: how the original's value reads the graph inputs decides
what a match proves (``input_reads.py``). A fold whose original reads an input's *values*
differs by definition (it baked one input). One that reads the inputs' dynamic dims is
re-derived at every binding of the dims the check ran (which give every guessed dim at least
two values) and must match at each; it is *verified* for every value of the dims only where
``dim_proof.py`` shows it constant over them, else it is *sampled*. One that reads neither is
computed once. A rewrite's constant whose original reads input values is compared on the
check's input sets, and at best sampled.

Batches of targets run in one session each, their outputs bounded by ``batch_bytes`` and by a
share of the memory left (``BATCH_ROOM_SHARE``); a
failing batch is retried target by target so that one bad cone does not hide the others.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import onnx
import onnx_ir as ir

from onnxfold.check.folds import recipe_forms
from onnxfold.check.folds.dim_proof import DimProof
from onnxfold.check.folds.recipe_runs import Derived, RecipeRunner, Unresolved
from onnxfold.check.folds.verdicts import (
    BITWISE,
    DIFFERS,
    OTHER_VALUES,
    PARAMETER,
    PROVED,
    SAMPLED,
    STATIC,
    UNVERIFIABLE,
    WITHIN,
    FoldVerification,
    expects_bits,
    judge,
    verdict_of,
)
from onnxfold.check.inputs.input_reads import InputReads
from onnxfold.check.inputs.pinned import pinned_dims
from onnxfold.check.judging import exact_ops, exactness
from onnxfold.check.judging.bits import bit_mismatches, same_bits
from onnxfold.check.judging.magnitudes import magnitudes
from onnxfold.check.judging.verdicts import Verdict
from onnxfold.check.running import memory, string_values
from onnxfold.check.running.cones import Cones, WeightStore, reinferred
from onnxfold.check.running.models import ModelRef, graph_of, label_of
from onnxfold.check.running.runner import MachineShort, RunFailed, TimedOut
from onnxfold.io.mapped import prefetch_ahead
from onnxfold.ir import provenance
from onnxfold.ir import recipes as saved_recipes
from onnxfold.ir.graph import (
    all_graphs,
    is_default_op,
    is_overridable,
    is_static_dim,
    static_shape,
    tensor_of,
)
from onnxfold.ir.recipes import MAX_RECIPE_NODES

BATCH_BYTES = 64 * 2**20  # the folded bytes one session re-derives at most
# and at most this share of the memory left: a batch's session holds its cones' weights (and
# onnxruntime's copy of them), their results, and the folded tensors they are compared with
# (64 MiB of transposed Constant weights took ~290 MiB, and the kernel killed the check in a
# 608 MiB cgroup where 1/6 of the room was 31 MiB)
BATCH_ROOM_SHARE = 6
HELD_SHARE = 4  # a batch keeps the weights its cones read for its bindings in 1/4 of the room
BATCH_TARGETS = 512
SMALL_SHOWN = 8  # a differing tensor of at most this many elements is shown in the reason

NO_ORIGINAL = ("no value of that name in the original and no onnxfold provenance (renamed, or "
               "made by another tool); only the comparison on inputs covers it")
# why a fold may carry no recipe (``onnxfold.fold.recipes.capture``)
NO_RECIPE = (f"its cone had more than {MAX_RECIPE_NODES} nodes or large attributes, spanned a "
             "subgraph, or read a value of no static shape or no name")
FOLD_WITHOUT_ORIGINAL = ("folded from a value the original does not name, and no recipe was "
                         f"saved with it ({NO_RECIPE}); only the comparison on inputs covers it")
# another tool may write a Reshape target with 0 (copy this dim) or -1 (infer it) where the
# original computes the dim: the same Reshape, not a wrong value
RESHAPE_CODES = ("no onnxfold provenance on it (another tool's, or carried from the input "
                 "onnxfold read): another tool may write a Reshape target's dims as 0 or -1, "
                 "which the Reshape reads as the dims the original computes")
# the verdicts' ``via`` of a tensor whose recipe is not the original's computation: never a
# parameter judged with the file's windows (``check/rewrites/in_files.py``)
FOREIGN = "a recipe of its own"
UNVALIDATED = ("made by a rewrite (a parameter of it, or a tensor that matches the recipe the "
               "model carries): a model's own record proves nothing, and only optimize --check "
               "validates the rewrite that made it")


@dataclass
class _Target:
    """An initializer to compare with a value of the original, and how."""

    source: ir.Value  # the original's value
    folded: ir.Value  # the optimized model's initializer
    via: str
    runs: str  # "once", "bindings" or "inputs" (see _judged)
    shaped: bool = False  # input values reach it only through shapes they decide
    claim: str = ""  # why a difference is not verifiable rather than a failure (_target)
    maybe: str = ""  # the input values it may read (through an op the check reads whole)
    derived: list[np.ndarray] = field(default_factory=list)  # one per run


def verify_folds(original: ModelRef, optimized: ModelRef, *,
                 bindings: Sequence[Mapping[str, Sequence[int]]] = (),
                 inputs: Sequence[Mapping[str, np.ndarray]] = (),
                 batch_bytes: int = BATCH_BYTES,
                 progress: Callable[[str], None] | None = None,
                 libraries: Sequence[str] = (),
                 own_output: bool = False,
                 weights: WeightStore | None = None,
                 shaped: ir.Model | None = None) -> FoldVerification:
    """Re-derive every initializer of ``optimized`` that ``original`` does not hold as it is
    (see module).

    ``bindings``: the shapes of the original's inputs at each binding of the dims the check
    ran (a cone that reads input shapes runs on zeros of each); ``inputs``: the check's input
    sets (a rewrite's constant whose original reads input values is compared on each). Without
    them, what needs them is said not verifiable. Raises InputError when a model cannot be
    read. ``libraries``: the custom-op libraries the original needs (checked:
    ``runtime.custom_ops``). ``weights``: where the original's weights the cones read are
    kept (a store the check's next step reads them from again; None: each batch keeps its
    own, in a share of the memory left). ``shaped``: the original's graph as read here, where
    a caller holds one (its own copy, its shapes inferred again: ``cones.reinferred``; no
    dim of its inputs that ``optimized`` fixes).

    ``own_output``: ``optimized`` is the model this process's run just made (``optimize
    --check``), so what its metadata says of how a tensor was made is that run's own record,
    and its rewrites are validated beside this verification. Otherwise (``compare``,
    ``verify-folds``: a file, untrusted) a claim of the metadata never certifies anything: a
    tensor that matches the recipe it carries, a rewrite's parameter, or a value it says a
    rewrite rewired is *not verifiable* (only a validated rewrite proves them), and a value
    under a name the original computes that holds other values is said to differ only where
    the model carries onnxfold's provenance (another tool may reuse a name for an equivalent
    value: onnxruntime's Reshape targets with 0 for "copy this dim").
    """
    tell = progress or (lambda text: None)
    label_a, label_b = label_of(original, "model A"), label_of(optimized, "model B")
    graph_b = graph_of(optimized, label_b)
    graph_a = shaped
    if graph_a is None:
        graph_a = graph_of(original, label_a)
        _pin(graph_a, graph_b)
        reinferred(graph_a)
    fed = _fed(graph_a, graph_b)
    verifier = _Verifier(graph_a, graph_b, fed, list(bindings), list(inputs),
                         libraries, own_output, weights)
    result = FoldVerification(label_a, label_b,
                              bindings=[{k: list(v) for k, v in b.items()} for b in bindings])
    targets: list[_Target] = []
    by_recipe: list[tuple[ir.Value, saved_recipes.Recipe]] = []
    for folded in [*graph_b.graph.initializers.values(), *_constant_nodes(graph_b.graph)]:
        found = verifier.classify(folded)
        if isinstance(found, _Target):
            targets.append(found)
        elif isinstance(found, Verdict):
            result.tensors.append(found)
        elif isinstance(found, saved_recipes.Recipe):
            by_recipe.append((folded, found))
        else:
            result.unchanged += 1
    # cones that only move data apart from those that compute, each in the graph's order: a
    # batch of moved weights reads them where they lie (BERT-base's first batch of 16
    # transposes and a mask's cone copied 63 MB to run them)
    moves = verifier.cones.moves_only
    targets.sort(key=lambda t: (not moves(t.source), verifier.cones.position(t.source)))
    room = memory.room()
    batches = list(_batches(targets, batch_bytes if room is None else
                            min(batch_bytes, room // BATCH_ROOM_SHARE),
                            lambda t: moves(t.source)))
    for k, batch in enumerate(batches):
        tell(f"verifying folds {k + 1}")
        if k + 1 < len(batches):  # the next batch's weights read while this one runs
            verifier.prefetch(batches[k + 1])
        for target, verdict in zip(batch, verifier.verify(batch)):
            producer = target.source.producer()
            if verdict.state == BITWISE and verdict.dims == STATIC and producer is not None \
                    and producer.op_type == "Constant" and producer.domain in ("", "ai.onnx"):
                result.unchanged += 1  # a Constant node's value, now an initializer
            else:
                result.tensors.append(verdict)
    if by_recipe:
        tell("verifying rewrite-made folds")
        result.tensors.extend(verifier.by_recipes(by_recipe))
    result.tensors.extend(_nested_constants(graph_a, graph_b))
    order = {name: i for i, name in enumerate(graph_b.graph.initializers)}
    result.tensors.sort(key=lambda t: order.get(t.name, 0))
    return result


def reads_dynamic_dims(original: ir.Model, optimized: ir.Model) -> bool:
    """Whether :func:`verify_folds` would re-derive some tensor of ``optimized`` at every
    binding of the dims: one under the name of a value ``original`` computes (or that
    stands for one) from the shapes of an input with a dynamic dim. Where none is, the
    reference need not run the bindings no compared input set uses (on a model checked in
    stages, each is a whole run of the original). Errs towards True: the dims
    ``optimized`` fixes are not pinned here, and every such name counts, whatever its
    claims."""
    fed = _fed(original, optimized)
    dynamic = _dynamic_mask(fed)
    if not dynamic:
        return False
    computed = {str(v.name): v for node in original.graph for v in node.outputs}
    reads = InputReads(original, fed)
    for folded in [*optimized.graph.initializers.values(), *_constant_nodes(optimized.graph)]:
        tensor = folded.const_value
        standing = tensor.metadata_props.get(provenance.STANDS_FOR) if tensor is not None \
            else None
        for name in (str(folded.name), standing):
            source = computed.get(name) if name is not None else None
            if source is not None and reads.of(source).shapes & dynamic:
                return True
    return False


def _constant_nodes(graph: ir.Graph) -> list[ir.Value]:
    """The outputs of ``graph``'s Constant nodes (``value``), each as a detached value holding
    its tensor: a constant the optimized model holds there is judged as an initializer is."""
    return [ir.Value(name=node.outputs[0].name, const_value=tensor)
            for node, tensor in _constant_tensors(graph)]


def _nested_constants(original: ir.Model, optimized: ir.Model) -> list[Verdict]:
    """The constants inside subgraphs (an If's branch, a Loop's body) and model-local function
    bodies of ``optimized`` that ``original`` does not hold there with the same bytes under
    the same name: not re-derived (the original's values there are not computed alone), said
    (a fold or an edit there is covered by the comparison on inputs only)."""
    held: dict[str, list[ir.TensorProtocol]] = {}
    for tensors, _ in _nested_places(original):
        for t in tensors:
            held.setdefault(str(t.name), []).append(t)
    return [Verdict(str(t.name), UNVERIFIABLE, dtype=t.dtype.name.lower(),
                    shape=[int(d) for d in t.shape.numpy()], via="original",
                    reason=f"a constant inside {where} that the original does not hold there "
                    "as it is: only the comparison on inputs can cover it, where they reach it")
            for tensors, where in _nested_places(optimized) for t in tensors
            if not any(_same(t, o) for o in held.get(str(t.name), ()))]


def _nested_places(model: ir.Model) -> list[tuple[list[ir.TensorProtocol], str]]:
    """The constants of ``model``'s subgraphs and local function bodies, by place."""
    places = [([v.const_value for v in graph.initializers.values()
                if v.const_value is not None] + _constants(graph),
               "a subgraph (an If branch or a Loop body)")
              for graph in all_graphs(model) if graph is not model.graph]
    places += [(_constants(function), f"the body of local function {function.name}")
               for function in model.functions.values()]
    return places


def _constants(nodes: Iterable[ir.Node]) -> list[ir.TensorProtocol]:
    """The tensors of the Constant nodes among ``nodes`` (``value`` attributes)."""
    return [tensor for _, tensor in _constant_tensors(nodes)]


# a Constant's literal forms besides ``value`` (ONNX's Constant-13), as the tensors they
# stand for: a scalar or a 1-D tensor of float32, int64 or strings
_LITERALS = {"value_float": (np.float32, False), "value_floats": (np.float32, True),
             "value_int": (np.int64, False), "value_ints": (np.int64, True),
             "value_string": (np.object_, False), "value_strings": (np.object_, True)}


def _constant_tensors(nodes: Iterable[ir.Node]
                      ) -> Iterator[tuple[ir.Node, ir.TensorProtocol]]:
    """Each Constant node among ``nodes`` that holds a tensor of its own, with it: a
    ``value``, or one of the literal forms (``value_floats`` ...: a file may write any of
    them, and a tensor in one is a constant as much as one in ``value``). The check's own
    reading: not ``onnxfold.ir.constants``, the fold's, which skips strings and keeps what it
    read on the node."""
    for node in nodes:
        if not is_default_op(node, "Constant"):
            continue
        name = next((n for n in ("value", *_LITERALS) if n in node.attributes), None)
        if name is None:
            continue
        attr = node.attributes[name]
        if attr.is_ref():  # a function body's Constant taking its caller's attribute: none
            continue  # of its own
        if name == "value":
            if attr.type == ir.AttributeType.TENSOR:
                yield node, tensor_of(attr)
        else:
            dtype, listed = _LITERALS[name]
            values = attr.value
            if dtype is np.object_:
                values = [v.decode() if isinstance(v, bytes) else v
                          for v in (values if listed else [values])]
                array = np.array(values, dtype=np.object_).reshape(-1 if listed else ())
            else:
                array = np.array(list(values) if listed else values, dtype=dtype)
            yield node, ir.tensor(array, name=node.outputs[0].name)


def _pin(original: ir.Model, optimized: ir.Model) -> None:
    """The original's inputs with the dims the optimized model fixes (``--input-shape``):
    the verification holds there only, as the comparison does."""
    pinned = pinned_dims(original, optimized, {})
    for value in original.graph.inputs:
        if value.shape is None:
            continue
        axes = pinned.axes.get(str(value.name), {})
        dims = [axes.get(i, pinned.named.get(str(getattr(d, "value", d)), d))
                if not is_static_dim(d) else d for i, d in enumerate(value.shape)]
        value.shape = ir.Shape(dims)


def _fed(original: ir.Model, optimized: ir.Model) -> list[ir.Value]:
    """The original's graph inputs a run feeds: those without an initializer, and those whose
    initializer is only a default (IR 4 on) that the optimized model still lets a caller
    override (it must not have baked their value; ``--inputs-are-constant`` lets it, and
    then they are no longer inputs there)."""
    overridable = {v.name for v in optimized.graph.inputs}
    graph = original.graph
    return [v for v in graph.inputs if v.name not in graph.initializers or (
        is_overridable(v, graph, original.ir_version) and v.name in overridable)]


def _dynamic_mask(fed: list[ir.Value]) -> int:
    """The fed inputs with a dynamic dim, as a bitmask of :class:`InputReads`."""
    return sum(1 << i for i, value in enumerate(fed) if _dynamic(value))


def _dynamic(value: ir.Value) -> bool:
    """Whether ``value`` has a dim onnxruntime lets a caller choose (a negative one, Paddle's
    -1, included: ``static_shape``)."""
    return static_shape(value) is None


class _Verifier:
    """What one verification knows of the original: its cones, how they read the inputs,
    what is shown constant over the dims, and the bindings and input sets to run at."""

    def __init__(self, original: ir.Model, optimized: ir.Model, fed: list[ir.Value],
                 bindings: list[Mapping[str, Sequence[int]]],
                 inputs: list[Mapping[str, np.ndarray]], libraries: Sequence[str],
                 own_output: bool, weights: WeightStore | None = None) -> None:
        self.original, self.optimized = original, optimized
        self.weights = weights
        self.own_output = own_output
        self.onnxfold_made = own_output or provenance.written_by_onnxfold(optimized)
        self.cones = Cones(original, fed, libraries)
        self.reads = InputReads(original, fed)
        self.proof = DimProof(original, fed)
        self.dynamic = _dynamic_mask(fed)
        self.fed = fed
        self.bindings = [self._zeros(b) for b in bindings] or [self._zeros({})]
        self.inputs = inputs
        self._arrays: dict[str, np.ndarray] = {}  # the original's values at the first binding

    def _zeros(self, shapes: Mapping[str, Sequence[int]]) -> dict[str, np.ndarray]:
        """Zeros for every fed input at ``shapes`` (else its static shape, else 1 per dim)."""
        arrays = {}
        for value in self.fed:
            shape = shapes.get(str(value.name)) or static_shape(value) or \
                tuple(d if is_static_dim(d) else 1 for d in (value.shape or ()))
            dtype = value.dtype.numpy() if value.dtype is not None else np.float32
            arrays[str(value.name)] = np.zeros(tuple(shape), dtype)
        return arrays

    def classify(self, folded: ir.Value
                 ) -> _Target | Verdict | saved_recipes.Recipe | None:
        """How ``folded`` is verified: a target to compare with a value of the original, a
        recipe to run, a verdict now (not verifiable, or differs), or None (unchanged)."""
        tensor = folded.const_value
        if tensor is None:
            return None
        name = str(folded.name)
        props = tensor.metadata_props
        source = self.cones.values.get(name)
        stored = _stored(source) if source is not None else None
        if stored is not None and _same(stored, tensor):
            return None  # the original's own data (a weight; a Constant's, now an initializer)
        # a name of the original means the original's value of that name, whatever the
        # tensor says (a record says where to look, never what to excuse): onnxfold gives
        # what a rewrite built or rewired a name of its own (``rewrite/splice.py``)
        if source is not None and source.producer() is not None:
            # onnxfold records every tensor it folds: one it carried through from its own
            # input (another tool's output) is that tool's, as in a model without provenance
            if _reshape_target(source) and not (
                    self.onnxfold_made and any(key in props for key in provenance.TENSOR_KEYS)):
                return self._target(source, folded, "original", claim=RESHAPE_CODES)
            return self._target(source, folded, "original")
        if source is not None and source in self.fed:
            return verdict_of(folded, DIFFERS, reason=f"holds a value for the graph input "
                              f"{name}, which a caller feeds")
        if source is not None:
            return self._other_values(source, folded)
        return self._by_record(folded, props)

    def _by_record(self, folded: ir.Value, props: Mapping[str, str]
                   ) -> _Target | Verdict | saved_recipes.Recipe:
        """A tensor under a name the original does not hold: what its record says it is
        (the value of the original it stands for, a recipe, a rewrite's parameter), judged
        by the check's own means; else not verifiable."""
        # the strictest word first: a value of the original it stands for is compared with
        # it, whatever else the record says (a tag may only make a verdict stricter)
        standing = props.get(provenance.STANDS_FOR)
        if standing is not None and standing in self.cones.values:
            return self._target(self.cones.values[standing], folded, f"stands for {standing}")
        if provenance.REWIRED in props:
            recipe = saved_recipes.decode(props.get(provenance.RECIPE, ""))
            return recipe if recipe is not None else verdict_of(
                folded, UNVERIFIABLE, via="rewired", reason=(
                    f"computed by nodes {props[provenance.REWIRED]} rewired, and no recipe "
                    f"was saved with it ({NO_RECIPE}); only the comparison on inputs covers "
                    "it"))
        if provenance.RECIPE in props:
            recipe = saved_recipes.decode(props[provenance.RECIPE])
            if recipe is not None:
                return recipe
            return verdict_of(folded, UNVERIFIABLE, reason="its saved recipe cannot be read")
        if provenance.MADE_BY in props:
            if not self.own_output:
                return verdict_of(folded, UNVERIFIABLE, via="rewrite", reason=UNVALIDATED)
            return verdict_of(folded, PARAMETER, via="rewrite", reason=(
                f"built by {props[provenance.MADE_BY]} as part of its replacement"))
        if provenance.FOLDED_FROM in props:
            return verdict_of(folded, UNVERIFIABLE, reason=FOLD_WITHOUT_ORIGINAL)
        return verdict_of(folded, UNVERIFIABLE, reason=NO_ORIGINAL)

    def _other_values(self, source: ir.Value, folded: ir.Value) -> _Target | Verdict:
        """An initializer under the name of one of the original's, with other bytes and no
        record of what made it: compared with the original's in onnxfold's output (onnxfold
        writes a value it changed under a new name, recorded), else not verifiable (another
        tool may change a weight it keeps the name of)."""
        if self.onnxfold_made:
            return self._target(source, folded, "original")
        return verdict_of(folded, UNVERIFIABLE, reason=OTHER_VALUES)

    def _target(self, source: ir.Value, folded: ir.Value, via: str, claim: str = ""
                ) -> _Target | Verdict:
        """How ``folded`` is compared with the original's ``source``; ``claim``: why a
        difference is not verifiable rather than a failure (a claim of the model's metadata
        that nothing here can check, or a model another tool made), "" where it differs."""
        why = self.cones.outside(source)
        if why is not None:
            return verdict_of(folded, UNVERIFIABLE, via=via, reason=why)
        reads = self.reads.of(source)
        if reads.values_direct:
            read = reads.values_shown or reads.values_direct  # (what a failure names: shown)
            names = ", ".join(self.reads.names(read))
            node = self.reads.reader(source, read)
            where = f" (through {node.op_type} node {node.name})" if node is not None else ""
            if via == "original" and not reads.values_shown:  # (only through ops read whole)
                maybe = f"its original may read the values of input {names}{where}"
                if not self.inputs:
                    return verdict_of(folded, UNVERIFIABLE, via=via, reason=(
                        f"{maybe}; compare and --check compare it on their input sets"))
                return _Target(source, folded, via, "inputs", maybe=maybe)
            if via == "original":
                return verdict_of(folded, DIFFERS, via="original",
                                  reason=f"its original reads the values of input {names}"
                                  f"{where}: a fold computes a value once, so it must not depend "
                                  "on them")
            if not self.inputs:
                return verdict_of(folded, UNVERIFIABLE, via=via, reason=(
                    "a rewrite's constant whose original reads input values; compare and "
                    "--check compare it on their input sets"))
            return _Target(source, folded, via, "inputs")
        if reads.values:  # input values reach it only through shapes they decide
            if not self.inputs:
                return verdict_of(folded, UNVERIFIABLE, via=via, reason=(
                    "its original reads a shape the input values decide; compare and --check "
                    "compare it on their input sets"))
            return _Target(source, folded, via, "inputs", shaped=True)
        runs = "bindings" if reads.shapes & self.dynamic else "once"
        return _Target(source, folded, via, runs, claim=claim)

    def prefetch(self, batch: list[_Target]) -> None:
        """Have the kernel read ahead the weights ``batch`` reads: the original's its cones
        read and the optimized model's folded tensors (those in a file's mapping)."""
        _, leaves = self.cones.cone([t.source for t in batch])
        prefetch_ahead([*(v.const_value for v in leaves), *(t.folded.const_value for t in batch)])

    def verify(self, batch: list[_Target]) -> list[Verdict]:
        """Re-derive ``batch`` (one session per run); on failure, each target alone."""
        room = memory.room()  # a cone run at each binding reads its weights once
        try:
            own = WeightStore(None if room is None else room // HELD_SHARE)
            with self.cones.holding(self.weights if self.weights is not None else own):
                for group, runs in _by_runs(batch):
                    for inputs in self._runs(runs):
                        derived = self.cones.run([t.source for t in group], inputs)
                        for target in group:
                            target.derived.append(derived[target.source])
        except (RunFailed, MachineShort) as e:
            for target in batch:
                target.derived.clear()
            if len(batch) == 1:
                return [self._unrunnable(batch[0], e)]
            return [v for target in batch for v in self.verify([target])]
        verdicts = [self._judged(target) for target in batch]
        for target in batch:  # judged: what was derived is not held past its batch
            target.derived.clear()
        return verdicts

    def _runs(self, runs: str) -> Sequence[Mapping[str, np.ndarray]]:
        if runs == "inputs":
            return list(self.inputs)
        return self.bindings if runs == "bindings" else self.bindings[:1]

    def _unrunnable(self, target: _Target, error: Exception) -> Verdict:
        reason = f"the machine ran short computing it from the original ({error}): not run" \
            if isinstance(error, MachineShort) and not isinstance(error, TimedOut) else \
            f"onnxruntime cannot compute it from the original: {str(error)[:200]}"
        return verdict_of(target.folded, UNVERIFIABLE, via=target.via, reason=reason)

    def _judged(self, target: _Target) -> Verdict:
        """One verdict from the runs of ``target``: the first run that differs (said where),
        else how the match holds over the dims."""
        exact = exactness.exact(self.cones, target.source) or (
            expects_bits(target.folded) and exactness.reproducible(self.cones, target.source))
        runs = self._runs(target.runs)
        stored = _stored(target.source)
        exact = exact or stored is not None  # a copy: nothing after may widen its verdict
        verdicts = []
        for k, (derived, inputs) in enumerate(zip(target.derived, runs)):
            verdict = judge(target.folded, derived, exact) if stored is None else \
                _stored_verdict(target.folded, stored)
            if verdict.state == DIFFERS and not exact:  # the magnitudes of its summed terms
                summed = self._summed(target.source, inputs)
                if summed is not None:
                    verdict = judge(target.folded, derived, exact, summed)
            verdict.via = target.via
            if verdict.state == DIFFERS and not exact:
                closer = exactness.arbitrate(self.cones, target.source, _array(target.folded),
                                             derived, inputs)
                if closer is not None:
                    verdict.state, verdict.reason = WITHIN, closer
            if verdict.state == DIFFERS:
                if len(runs) > 1:
                    verdict.reason = f"{_where(target.runs, k, runs)}: {verdict.reason}"
                verdict.reason += _shown(target.folded, derived)
                verdict.bindings = len(runs)
                if target.claim and (target.claim != RESHAPE_CODES or
                                     _codes_only(_array(target.folded), derived)):
                    verdict.state = UNVERIFIABLE
                    verdict.reason = f"holds other values than the original's ({target.claim})"
                return verdict
            verdicts.append(verdict)
        verdict = max(verdicts, key=lambda v: (v.state == WITHIN, v.max_ulps or 0.0))
        verdict.bindings = len(runs)
        if target.runs == "once":
            verdict.dims = STATIC
        elif target.runs == "bindings" and self.proof.proved(target.source):
            verdict.dims = PROVED
        elif target.runs == "bindings":
            names = self._dims_read(target.source)
            verdict.state, verdict.reason = SAMPLED, (
                f"its original reads the dynamic dims of {names} in a way the symbolic dims do "
                f"not show constant; equal at each of the {len(runs)} bindings run")
        elif target.shaped and self.proof.proved(target.source):
            verdict.dims = PROVED  # the shape it reads is static where it reads it
        elif target.shaped:
            verdict.state, verdict.reason = SAMPLED, (
                "its original reads a shape the input values decide, in a way the symbolic "
                f"dims do not show constant; equal on each of the {len(runs)} input sets")
        else:
            what = target.maybe or "a rewrite's constant whose original reads input values"
            verdict.state, verdict.reason = SAMPLED, (
                f"{what}; equal on each of the {len(runs)} input sets compared")
        return verdict

    def _summed(self, source: ir.Value, inputs: Mapping[str, np.ndarray]
                ) -> np.ndarray | None:
        """The magnitude of what was summed to make each element of ``source``, its cone run
        with its twins (``judging.magnitudes``) on ``inputs``; None where it cannot run."""
        try:
            (summed,) = magnitudes(self.cones.model, [source], inputs, self.cones.libraries)
        except (RunFailed, MachineShort):
            return None
        return summed

    def _dims_read(self, source: ir.Value) -> str:
        reads = self.reads.of(source)
        names = []
        for value in self.fed:
            if str(value.name) in self.reads.names(reads.shapes & self.dynamic):
                dims = [str(getattr(d, "value", d)) for d in (value.shape or ())
                        if not is_static_dim(d)]
                names.append(f"{value.name} ({', '.join(dims)})")
        return "; ".join(names)

    def by_recipes(self, targets: list[tuple[ir.Value, saved_recipes.Recipe]]
                   ) -> list[Verdict]:
        """Each of ``targets`` (made by a rewrite) against its recipe re-run in onnxruntime."""
        self._prefetch({leaf.name for _, recipe in targets for leaf in recipe.leaves
                        if leaf.constant})
        runner = RecipeRunner(self.original, self.optimized, self._computed, self._shape_of,
                              self.cones.libraries)
        verdicts = []
        for folded, recipe in targets:
            name = str(folded.name)
            alien = None if self.own_output else recipe_forms.foreign(
                name, recipe, self.original, self._resolvable)
            try:
                derived = runner.derive(name, recipe)
            except Unresolved as e:  # (a file's recipe of its own: never a parameter)
                verdicts.append(verdict_of(folded, UNVERIFIABLE, via=FOREIGN if alien else
                                           "rewrite", reason=f"made by a rewrite; {e}"))
                continue
            nodes = [_bare(n) for n in recipe.nodes]
            exact = not any(exact_ops.order_varies(n) for n in nodes) and (
                expects_bits(folded) or all(exact_ops.exact(n) for n in nodes))
            verdict = judge(folded, derived.array, exact)
            verdict.via, verdict.dims, verdict.bindings = "recipe", STATIC, 1
            if verdict.state == DIFFERS:
                verdict.reason = f"its recipe computes other values: {verdict.reason}" + \
                    _shown(folded, derived.array)
            elif alien is not None:  # the file's own computation of its own tensor
                verdict.state, verdict.max_ulps, verdict.via = UNVERIFIABLE, None, FOREIGN
                verdict.reason = (f"made by a rewrite, the file says; {alien}: only the "
                                  "comparison on inputs covers it")
            elif not self.own_output:  # consistent with the model's own claim, not proved
                verdict.state, verdict.reason, verdict.max_ulps = UNVERIFIABLE, UNVALIDATED, None
            elif derived.sampled:
                verdict.state, verdict.reason = SAMPLED, f"made by a rewrite; {derived.sampled[0]}"
            verdicts.append(verdict)
        return verdicts

    def _resolvable(self, name: str) -> bool:
        """Whether a recipe's leaf ``name`` is taken from the original when the recipe runs
        (``RecipeRunner``: its initializer, or a value computed from it) or the optimized
        model (an initializer, verified on its own), not from the recipe's own bytes."""
        return name in self.original.graph.initializers or \
            name in self.optimized.graph.initializers or self._computable(name) is not None

    def _computable(self, name: str) -> ir.Value | None:
        """The original's computed value ``name``, where it reads no input value and no
        outer value (None otherwise)."""
        value = self.cones.values.get(name)
        if value is None or value.producer() is None or self.cones.outside(value) is not None \
                or self.reads.of(value).values:
            return None
        return value

    def _prefetch(self, names: set[str]) -> None:
        """Compute the original's values of ``names`` at the first binding in one run where
        it can (a recipe's leaves), for :meth:`_computed`."""
        wanted = [v for name in sorted(names) if name not in self._arrays and
                  (v := self._computable(name)) is not None]
        if not wanted:
            return
        with contextlib.suppress(RunFailed, MachineShort):  # then each alone, when asked
            self._arrays.update({str(v.name): a for v, a in
                                 self.cones.run(wanted, self.bindings[0]).items()})

    def _computed(self, name: str) -> Derived | None:
        """The array the original computes for its value ``name`` at the first binding (None:
        no such value, one that reads input values, or one onnxruntime cannot compute)."""
        value = self._computable(name)
        if value is None:
            return None
        if name not in self._arrays:
            try:
                self._arrays[name] = self.cones.run([value], self.bindings[0])[value]
            except (RunFailed, MachineShort):
                return None
        reads = self.reads.of(value)
        sampled = [] if not reads.shapes & self.dynamic or self.proof.proved(value) else [
            f"reads {name}, which the original computes from dynamic dims not shown constant"]
        return Derived(self._arrays[name], sampled)

    def _shape_of(self, name: str) -> tuple[int, ...] | None:
        value = self.cones.values.get(name)
        return static_shape(value) if value is not None else None


def _bare(proto: onnx.NodeProto) -> ir.Node:
    """A recipe's node as the op facts read one: its op and attributes, no values."""
    return ir.Node(proto.domain, proto.op_type, [], attributes=[
        ir.serde.deserialize_attribute(a) for a in proto.attribute])


def _by_runs(batch: list[_Target]) -> Iterable[tuple[list[_Target], str]]:
    """``batch`` grouped by how its targets run."""
    groups: dict[str, list[_Target]] = {}
    for target in batch:
        groups.setdefault(target.runs, []).append(target)
    return [(group, runs) for runs, group in groups.items()]


def _reshape_target(source: ir.Value) -> bool:
    """Whether the original reads ``source`` only as the target shape of Reshape nodes."""
    uses = list(source.uses())
    return bool(uses) and all(is_default_op(node, "Reshape") and index == 1
                              for node, index in uses) and not source.is_graph_output()


def _codes_only(folded: np.ndarray, derived: np.ndarray) -> bool:
    """Whether ``folded`` differs from ``derived`` only where it holds 0 or -1 (a Reshape's
    codes for a dim it copies or infers), at the same shape."""
    if folded.shape != derived.shape or folded.dtype.kind not in "iu":
        return False
    differ = folded != derived
    return bool(np.all(np.isin(folded[differ], (0, -1))))


def _where(runs: str, k: int, all_runs: Sequence[Mapping[str, np.ndarray]]) -> str:
    """Which run ``k`` was, for a reason: the input shapes of a binding, or an input set."""
    if runs == "inputs":
        return f"on input set {k + 1}"
    shapes = ", ".join(f"{name} {list(arr.shape)}" for name, arr in all_runs[k].items())
    return f"at the binding {k + 1} of the dims ({shapes})"


def _shown(folded: ir.Value, derived: np.ndarray) -> str:
    """Both values, where they are small enough to show."""
    got = _array(folded)
    if got.size > SMALL_SHOWN or derived.size > SMALL_SHOWN:
        return ""
    return string_values.shown_pair(got, derived)


def _array(folded: ir.Value) -> np.ndarray:
    tensor = folded.const_value
    assert tensor is not None
    return tensor.numpy()


def _batches(targets: list[_Target], limit: int, kind: Callable[[_Target], object]
             ) -> Iterable[list[_Target]]:
    """``targets`` in order, in batches of at most ``limit`` folded bytes (a larger target is
    a batch of its own) and :data:`BATCH_TARGETS` targets, of one ``kind`` each."""
    batch: list[_Target] = []
    size = 0
    for target in targets:
        tensor = target.folded.const_value
        nbytes = tensor.nbytes if tensor is not None else 0
        if batch and (size + nbytes > limit or len(batch) >= BATCH_TARGETS or
                      kind(target) != kind(batch[-1])):
            yield batch
            batch, size = [], 0
        batch.append(target)
        size += nbytes
    if batch:
        yield batch


def _stored(value: ir.Value) -> ir.TensorProtocol | None:
    """The tensor the original stores as ``value`` (an initializer's, a Constant's ``value``
    attribute), None where it computes it."""
    producer = value.producer()
    if producer is None:
        return value.const_value
    attr = producer.attributes.get("value")
    if producer.op_type == "Constant" and producer.domain in ("", "ai.onnx") and \
            attr is not None and attr.type == ir.AttributeType.TENSOR:
        return tensor_of(attr)
    return None


def _stored_verdict(folded: ir.Value, stored: ir.TensorProtocol) -> Verdict:
    """``folded`` against the data the original stores for it (a fold copies it bit for bit),
    never against what onnxruntime gives of it (a bfloat16 comes back through float32, which
    keeps no NaN's payload): bitwise where it is the same, else a difference, counted on the
    stored data."""
    tensor = folded.const_value
    assert tensor is not None
    if _same(stored, tensor):
        return verdict_of(folded, BITWISE)
    verdict = verdict_of(folded, DIFFERS)
    if stored.dtype != tensor.dtype or tuple(stored.shape) != tuple(tensor.shape):
        verdict.reason = f"the original stores {stored.dtype.name.lower()}" \
            f"{[int(d) for d in stored.shape.numpy()]}"
        return verdict
    got, own = _comparable(tensor), _comparable(stored)
    verdict.mismatches = sum(a != b for a, b in zip(got, own)) if isinstance(got, tuple) \
        else bit_mismatches(got, cast(np.ndarray, own))
    verdict.reason = (f"{verdict.mismatches} of {math.prod(verdict.shape)} "
                      "elements hold other bits than the original stores (a fold copies a "
                      "weight or a Constant bit for bit)")
    return verdict


def _same(a: ir.TensorProtocol, b: ir.TensorProtocol) -> bool:
    """Whether ``a`` and ``b`` hold the same elements, bit for bit (of a 4-bit or 2-bit type,
    the elements, not the bytes: a last byte's unused half is no element, and a tensor
    written again from its elements has it zero)."""
    if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
        return False
    x, y = _comparable(a), _comparable(b)
    return x == y if isinstance(x, tuple) else same_bits(x, cast(np.ndarray, y))


def _comparable(tensor: ir.TensorProtocol) -> np.ndarray | tuple[bytes, ...]:
    """``tensor``'s elements in a form compared bit for bit: a string tensor's strings (their
    exact bytes), a 4-bit or 2-bit one's elements one a byte, widened (ints to int16, floats
    to float32: exact for them), any other its array."""
    if tensor.dtype == ir.DataType.STRING:
        return cast(tuple, string_values.tensor_key(tensor))
    arr = tensor.numpy()
    if tensor.dtype.bitwidth < 8:
        return arr.astype(np.float32 if tensor.dtype.is_floating_point() else np.int16)
    return arr


__all__ = ["BITWISE", "DIFFERS", "SAMPLED", "UNVERIFIABLE", "WITHIN", "FoldVerification",
           "Verdict", "verify_folds"]
