"""The original model's cones: the nodes that compute one of its values, run in onnxruntime.

A folded initializer keeps the name of the value it replaces (``fold.materialize.replacement``),
so the original says how that value was computed: the nodes between it and the original's
constants and inputs (its *cone*). :meth:`Cones.run` runs cones in onnxruntime through the
check's own runner (``running.runner``: graph optimizations off, the original's initializers
as initializers, so its kernels prepack exactly as the original session's do; values only fed
on elsewhere at the check's level, see :meth:`Cones.run`), with the graph
inputs they read fed as the caller says (zeros of one binding's shapes where only shapes are
read), within the memory this process may still use.

The model is the check's own copy, its types and shapes inferred by onnx from its inputs and
initializers alone (:func:`reinferred`): what the file declares of its intermediate values is
not trusted, and types an exporter left out are known (whether a cone's ops compute floats
decides how exactly it must match).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence

import numpy as np
import onnx
import onnx_ir as ir

from onnxfold.analysis.shapes import infer_shapes
from onnxfold.check.running import memory, string_values
from onnxfold.check.running.handed import HANDED_FROM, handable
from onnxfold.check.running.models import constant_weight, is_constant_weight, read_constant
from onnxfold.check.running.op_reads import SHAPE_ONLY_READS, TYPE_ONLY_READS
from onnxfold.check.running.runner import (
    Fed,
    MachineShort,
    NodesModel,
    RunFailed,
    Wanted,
    run_nodes,
)
from onnxfold.io.mapped import drop_resident_pages
from onnxfold.ir.graph import captured_values

# ops that only move data (their kernels prepack nothing, so a constant they read is fed as
# it is: the same bits, without onnxruntime's copy of a weight into the session; the check's
# own list, not the rules')
MOVES_DATA = frozenset({
    "Identity", "Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Concat", "Split",
    "Slice", "Gather", "Expand", "Tile"})
# the weights a kept session's run read where they lie stay resident for its next run where
# they take at most this share of the memory left (see Cones.run)
LINGER_SHARE = 4


def reinferred(model: ir.Model) -> ir.Model:
    """``model`` (the check's own copy) with the types and shapes of its intermediate values
    and outputs forgotten and inferred again by onnx from its inputs and initializers."""
    inputs = set(model.graph.inputs)
    for node in model.graph:
        for value in node.outputs:
            if value not in inputs:
                value.shape = None
                value.type = None
    with contextlib.suppress(Exception):  # an aid: a graph onnx cannot infer keeps what it has
        infer_shapes(model)
    return model


def cone_of(graph: ir.Graph, roots: Iterable[ir.Value],
            follows: Callable[[ir.Node, int], bool] = lambda node, index: True
            ) -> tuple[set[ir.Node], set[ir.Value]]:
    """The nodes of ``graph`` computing ``roots`` (what their subgraphs read included) and the
    values they read from outside it (constants and graph inputs); ``follows(node, i)``:
    whether the walk goes on through input ``i`` of ``node``."""
    nodes: set[ir.Node] = set()
    leaves: set[ir.Value] = set()
    stack = list(roots)
    seen: set[ir.Value] = set()
    while stack:
        value = stack.pop()
        if value in seen:
            continue
        seen.add(value)
        producer = value.producer()
        if producer is None or producer.graph is not graph:
            leaves.add(value)
            continue
        if producer not in nodes:
            nodes.add(producer)
            stack.extend(v for i, v in enumerate(producer.inputs)
                         if v is not None and follows(producer, i))
            stack.extend(captured_values(producer))
    return nodes, leaves


def _reaches_values(node: ir.Node, index: int) -> bool:
    """Whether input ``index`` of ``node`` reaches its values (not read for a shape or a type
    alone: ``Shape(x)``, ``CastLike(c, x)``)."""
    op = node.op_type if node.domain in ("", "ai.onnx") else None
    return (op, index) not in SHAPE_ONLY_READS and (op, index) not in TYPE_ONLY_READS


PREPARED_CONES = 16  # the cones a Cones keeps ready to build a run's model from


@dataclasses.dataclass(frozen=True)
class _Prepared:
    """A cone ready to build a run's model from: the values it reads from outside (constants
    and graph inputs), its large Constants (taken out of the nodes: their weights are read
    at each run, never kept here) and which of them the other nodes read, those nodes
    serialized, and whether they only move data (no kernel that could prepack: weights fed,
    not copied)."""

    leaves: set[ir.Value]
    weights: list[ir.Node]
    read: frozenset[ir.Value]
    protos: list[onnx.NodeProto]
    moved_only: bool

    def held(self, in_place: bool = False) -> dict[ir.Value, np.ndarray]:
        """The large Constants' weights by the value each makes, read now (``in_place``: see
        ``models.read_constant``)."""
        arrays = {node.outputs[0]: constant_weight(node, in_place) for node in self.weights}
        return {value: array for value, array in arrays.items() if array is not None}


@dataclasses.dataclass(frozen=True)
class _KeptSession:
    """A session of :meth:`Cones._values_at` kept for the next run: the sources its run was
    asked for, the values it computes, the shapes it is fed, its cone, its model and session,
    and the names of the large constants it is fed at each run."""

    sources: frozenset[ir.Value]
    wanted: tuple[ir.Value, ...]
    shapes: tuple[tuple[str, Fed], ...]
    prepared: _Prepared
    model: NodesModel
    session: object
    large: tuple[str, ...]


class WeightStore:
    """The original's weights as the check's runs copy them (``pread``, starting at 64 bytes:
    runs whose bits may depend on where a weight starts), kept up to ``budget`` bytes (None:
    no bound). One store may serve every step of one check over the original: the fold
    verification and the rewrite validation read the same weights (BERT-base's were read
    twice, 0.3 s and 0.64 s of ``pread``, before its runs read them in place). A weight is
    kept as read, so what a run computes from it is what it computes from the file;
    :meth:`clear` lets every one go."""

    def __init__(self, budget: int | None) -> None:
        self.arrays: dict[str, np.ndarray] = {}
        self.room = budget  # bytes more it may keep

    def get(self, name: str, read: Callable[[], np.ndarray]) -> np.ndarray:
        """The weight ``name``: as kept, else ``read()`` (kept where it fits)."""
        if name in self.arrays:
            return self.arrays[name]
        array = read()
        if self.room is None or array.nbytes <= self.room:
            self.arrays[name] = array
            if self.room is not None:
                self.room -= array.nbytes
        return array

    def clear(self) -> None:
        """Let every weight kept go (before another model's session)."""
        self.arrays.clear()


class Cones:
    """The original graph's cones. ``fed``: the graph inputs a run feeds (the others keep the
    values of their initializers). Which ops are held to bits, and which kernels sum in an order
    that follows their input's memory, are the check's own lists (``judging.exact_ops``).
    ``level``: onnxruntime's graph optimization level of a run for values to feed elsewhere
    (``run(exact=False)``; a run for the original's bits is always at ``disable``)."""

    def __init__(self, model: ir.Model, fed: Collection[ir.Value],
                 libraries: Sequence[str] = (), level: str = "disable") -> None:
        self.model, self.level = model, level
        graph = model.graph
        self.order = {node: i for i, node in enumerate(graph)}
        self.values: dict[str, ir.Value] = {}
        for value in [*graph.inputs, *graph.initializers.values()]:
            self.values[str(value.name)] = value
        for node in graph:
            for out in node.outputs:
                if out.name:
                    self.values[out.name] = out
        self.fed = set(fed)
        self.libraries = tuple(libraries)  # custom ops the original needs (checked)
        self._outer: set[ir.Value] | None = None  # values whose cones read an outer value
        self._held: WeightStore | None = None  # weights kept between runs
        self._cones: dict[tuple[ir.Value, ...], _Prepared] = {}  # (see _prepared)
        self._kept: dict[str, _KeptSession] = {}  # by level: sessions for values, kept
        self._refused: set[frozenset[ir.Value]] = set()  # sources failing at self.level
        self._lingering = False  # a kept session's weights left resident for its next run
        self._moving: dict[ir.Value, bool] = {}  # (see moves_only)

    @contextlib.contextmanager
    def holding(self, store: WeightStore) -> Iterator[None]:
        """Within the block, the weights :meth:`run` copies are kept in ``store`` for the runs
        after it, up to its budget (a store may outlive the block: the check's next step reads
        them from it again; a weight read where it lies is not copied, nor held): the same
        cones run once per input set or binding read the same weights (validating BERT-base's
        rewrites on 3 input sets read its 415 MB three times). A weight is held as read, so
        what a run computes from it is what it computed without the block. Between runs at
        most the store's budget stays held (a run needs the weights it reads anyway: on
        BERT-base the check's peak is the same with and without holding, 1,005 and 1,008
        MiB). The sessions kept for runs of values (:meth:`_values`) are dropped on
        leaving."""
        self._held = store
        try:
            yield
        finally:
            self._held = None
            self._kept.clear()  # and the sessions kept for values (:meth:`_values`)
            self._let_go()

    def _weight(self, leaf: ir.Value, in_place: bool = False) -> np.ndarray:
        """``leaf``'s array, read with ``pread`` (or as held, see :meth:`holding`); where
        ``in_place``, a view of its file's mapping (``models.read_constant``: nothing to
        hold)."""
        tensor = leaf.const_value
        assert tensor is not None
        if in_place:
            return read_constant(tensor, in_place=True)
        if self._held is None:
            return read_constant(tensor)
        return self._held.get(str(leaf.name), lambda: read_constant(tensor))

    def cone(self, roots: Iterable[ir.Value]) -> tuple[list[ir.Node], set[ir.Value]]:
        """The nodes computing ``roots`` (in graph order) and the values they read from
        outside (constants and graph inputs)."""
        nodes, leaves = cone_of(self.model.graph, roots)
        return sorted(nodes, key=self.order.__getitem__), leaves

    def position(self, value: ir.Value) -> int:
        """Where ``value``'s producer stands in the original graph (batches follow it)."""
        producer = value.producer()
        return self.order.get(producer, 0) if producer is not None else 0

    def outside(self, source: ir.Value) -> str | None:
        """Why ``source`` cannot be re-derived from this graph's constants and inputs alone
        (None: it can)."""
        if self._outer is None:
            self._outer = self._reading_outer()
        if source in self._outer:
            return "reads a value onnxfold cannot re-derive alone (a value of an enclosing scope)"
        return None

    def _reading_outer(self) -> set[ir.Value]:
        """The values whose cones read a value that is neither a constant nor fed (one pass
        over the graph in order)."""
        graph = self.model.graph
        found = {v for v in graph.inputs if v not in self.fed and v.const_value is None}
        for node in graph:
            reads = [*(v for v in node.inputs if v is not None), *captured_values(node)]
            if any(v in found or (v.producer() is None and v.const_value is None and
                                  v not in self.fed) for v in reads):
                found.update(node.outputs)
        return found

    def run(self, sources: list[ir.Value], inputs: Mapping[str, np.ndarray],
            exact: bool = True, optimized: bool = True) -> dict[ir.Value, np.ndarray]:
        """The arrays the original computes for ``sources``, its graph inputs fed ``inputs``
        (by name): bit for bit as the original computes them, or (``exact=False``) as values
        to feed elsewhere, its kernels not prepacking their weights (saving its copies): as
        onnxruntime computes them at the cones' ``level`` (the check's: the original's fused
        kernels, most of BERT-base's leaves in a third of the time ``disable`` took), or at
        ``disable`` where not ``optimized`` (a value compared as it is, the reference a
        window is judged against: the original's nodes, not onnxruntime's rewrite of them).
        A run whose bits cannot depend on where an array starts reads the original's weights
        where they lie in its file (views of the mapping: no copy of them; their pages given
        back after the run, but where a kept session reads them again, :meth:`_lingers`):
        one whose nodes only move data (BERT-base's transposed weights), and one for values
        both windows read alike (``optimized``: the values are never compared themselves).
        Elsewhere a weight is read into memory of its own starting at 64 bytes,
        as a session holds it. Raises RunFailed when onnxruntime cannot run the cones,
        MachineShort when the machine runs short (``running.runner``)."""
        prepared = (None if exact else self._covering(sources, inputs)) or \
            self._prepared(sources)
        in_place = prepared.moved_only if exact else optimized
        constants: dict[str, np.ndarray] = {}
        fed: dict[str, np.ndarray] = {}
        for leaf in prepared.leaves:
            if leaf in self.fed and str(leaf.name) in inputs:
                fed[str(leaf.name)] = inputs[str(leaf.name)]
            else:  # (an overridable default the set does not feed: the default, as run)
                constants[str(leaf.name)] = self._weight(leaf, in_place)
        held = prepared.held(in_place)
        constants.update({str(v.name): w for v, w in held.items() if v in prepared.read})
        given = {s: held[s] for s in sources if s in held}  # asked for: its tensor as it is
        wanted = [s for s in sources if s not in given]
        if not wanted:
            return given
        try:
            if exact:
                arrays = run_nodes(prepared.protos, [_wanted(s) for s in wanted],
                                   constants=constants, inputs=fed,
                                   opsets=dict(self.model.opset_imports),
                                   ir_version=self.model.ir_version, libraries=self.libraries,
                                   prepacking=not prepared.moved_only, aligned=not in_place)
            else:
                arrays = self._values(prepared, sources, wanted, constants, fed, optimized)
        finally:  # the weights it read are read again where needed, not held
            self._lingering = in_place and self._lingers(prepared, constants)
            if not self._lingering:
                drop_resident_pages()
        computed = {source: string_values.as_tensor_form(array) if isinstance(array, np.ndarray)
                    else array for source, array in zip(wanted, arrays)}
        return {source: given[source] if source in given else computed[source]
                for source in sources}

    def _lingers(self, prepared: _Prepared, read: Mapping[str, np.ndarray]) -> bool:
        """Whether the weights a run of ``prepared`` just ``read`` where they lie stay
        resident: where a session kept for the next input set runs that cone (it reads them
        all again: BERT-base's leaves refaulted 415 MB at each set, 0.12 s of a check) and
        they take at most a :data:`LINGER_SHARE` of the memory left. They go where that
        session goes (:meth:`_let_go`)."""
        if not any(kept.prepared is prepared for kept in self._kept.values()):
            return False
        room = memory.room()
        return room is None or sum(a.nbytes for a in read.values()) <= room // LINGER_SHARE

    def _let_go(self) -> None:
        """Give back the pages a kept session's run left resident (:meth:`_lingers`)."""
        if self._lingering:
            self._lingering = False
            drop_resident_pages()

    def _covering(self, sources: list[ir.Value], inputs: Mapping[str, np.ndarray]
                  ) -> _Prepared | None:
        """The cone of a session kept for values (:meth:`_values_at`) where it computes
        ``sources`` and more on inputs of the shapes of ``inputs`` (BERT-base's first input
        set asks for 222 leaves, the next two for 220 of them), else None."""
        for kept in self._kept.values():
            if not kept.sources.issuperset(sources) or \
                    any(name not in inputs for name, _ in kept.shapes):
                continue
            if tuple((name, Fed.of(name, inputs[name])) for name, _ in kept.shapes) == \
                    kept.shapes:
                return kept.prepared
        return None

    def _values(self, prepared: _Prepared, sources: list[ir.Value], wanted: list[ir.Value],
                constants: dict[str, np.ndarray], fed: dict[str, np.ndarray],
                optimized: bool) -> list:
        """``wanted``'s arrays as values to feed elsewhere (:meth:`run`): at the cones'
        level where ``optimized``, else at ``disable``; at ``disable`` too where the model
        would hold a large constant onnxruntime takes no array of (bfloat16, float8, 4-bit,
        strings: written into it, and at another level folded into float32 copies), and
        where onnxruntime failed at the level for these sources (its optimizers may refuse
        a graph its kernels run; remembered for the next input sets)."""
        written = any(array.nbytes > HANDED_FROM and not handable(array)
                      for array in constants.values())
        key = frozenset(sources)
        if not optimized or written or self.level == "disable" or key in self._refused:
            return self._values_at("disable", prepared, sources, wanted, constants, fed,
                                   optimized, keep=not written)
        try:
            return self._values_at(self.level, prepared, sources, wanted, constants, fed,
                                   optimized)
        except RunFailed:
            self._refused.add(key)
            return self._values_at("disable", prepared, sources, wanted, constants, fed,
                                   optimized)

    def _values_at(self, level: str, prepared: _Prepared, sources: list[ir.Value],
                   wanted: list[ir.Value], constants: dict[str, np.ndarray],
                   fed: dict[str, np.ndarray], optimized: bool, keep: bool = True) -> list:
        """:meth:`_values` at ``level`` (``optimized``: values both windows read alike, fed
        where they lie, see :meth:`run`); within :meth:`holding` (and where ``keep``), in the
        session kept from the last such run at ``level`` of the same cone where it computes
        ``wanted`` (and maybe more) on inputs of the same shapes (the next input set:
        BERT-base's leaves' session and its model cost 0.1-0.2 s a set). A kept session
        holds no weight between runs (every large constant is fed at each run, as it is
        read); it is dropped on leaving :meth:`holding`, or where another cone or other
        shapes run at its level."""
        shapes = tuple(sorted((name, Fed.of(name, array)) for name, array in fed.items()))
        kept = self._kept.get(level)
        if kept is None or kept.prepared is not prepared or kept.shapes != shapes or \
                not set(wanted) <= set(kept.wanted):
            self._kept.pop(level, None)  # (the last one's session goes before another)
            self._let_go()  # (and the weights it left resident)
            model = NodesModel(
                prepared.protos, [_wanted(s) for s in wanted], constants=constants,
                inputs={name: Fed.of(name, array) for name, array in fed.items()},
                opsets=dict(self.model.opset_imports), ir_version=self.model.ir_version,
                prepacking=False, level=level)
            session = model.session(self.libraries)
            large = tuple(model.constant_feeds)
            model.constant_feeds = {}  # fed at each run, never held here
            kept = _KeptSession(frozenset(sources), tuple(wanted), shapes, prepared, model,
                                session, large)
            self._kept[level] = kept
        if self._held is None or not keep:  # kept only within holding(), which drops it
            self._kept.pop(level, None)
        try:  # (values both windows read alike: their weights fed where they lie)
            arrays = kept.model.run({**fed, **{name: constants[name] for name in kept.large}},
                                    self.libraries, kept.session, aligned=not optimized)
        except (RunFailed, MachineShort):
            self._kept.pop(level, None)
            raise
        computed = dict(zip(kept.wanted, arrays))
        return [computed[value] for value in wanted]

    def _prepared(self, sources: list[ir.Value]) -> _Prepared:
        """What a run of ``sources``' cone builds its model from, made once for the runs of
        the same cone on every input set and binding (the cone's walk, its large Constants
        taken out, its nodes serialized: 0.25 s a run on BERT-base's leaves), the last
        :data:`PREPARED_CONES` kept."""
        key = tuple(sources)
        if key in self._cones:
            return self._cones[key]
        nodes, leaves = self.cone(sources)
        kept: list[ir.Node] = []
        weights: list[ir.Node] = []
        for node in nodes:
            (weights if is_constant_weight(node) else kept).append(node)
        read = frozenset(v for n in kept for v in (*n.inputs, *captured_values(n))
                         if v is not None)
        prepared = _Prepared(
            leaves, weights, read,
            [ir.serde.serialize_node(n) for n in kept],
            all(self.moves_only(source) for source in sources))
        while len(self._cones) >= PREPARED_CONES:
            del self._cones[next(iter(self._cones))]
        self._cones[key] = prepared
        return prepared

    def moves_only(self, value: ir.Value) -> bool:
        """Whether every node of ``value``'s cone but its large Constants (weights) only
        moves data (:data:`MOVES_DATA`): a run of it reads its weights where they lie
        (:meth:`run`). Remembered per value: one pass over the graph however many are
        asked."""
        stack = [value]
        while stack:
            top = stack[-1]
            if top in self._moving:
                stack.pop()
                continue
            producer = top.producer()
            if producer is None or producer.graph is not self.model.graph or \
                    is_constant_weight(producer):
                self._moving[stack.pop()] = True
                continue
            if producer.domain not in ("", "ai.onnx") or producer.op_type not in MOVES_DATA:
                self._moving[stack.pop()] = False
                continue
            unknown = [v for v in producer.inputs if v is not None and v not in self._moving]
            if unknown:
                stack.extend(unknown)
                continue
            self._moving[stack.pop()] = all(self._moving[v] for v in producer.inputs
                                            if v is not None)
        return self._moving[value]

    def valued(self, source: ir.Value) -> list[ir.Node]:
        """The nodes of ``source``'s cone whose values reach its values: not those read only
        for a shape or a type (``Shape(x)``, ``CastLike(c, x)``: what computes ``x`` decides
        nothing of the bits)."""
        nodes, _ = cone_of(self.model.graph, [source], _reaches_values)
        return sorted(nodes, key=self.order.__getitem__)


def _wanted(value: ir.Value) -> Wanted:
    """How the runner hands ``value`` back: its dtype where the original's types say, a
    sequence (a list) where they say so or nothing."""
    if value.type is None or isinstance(value.type, ir.SequenceType):  # may be a sequence
        return Wanted(str(value.name), sequence=True)
    return Wanted(str(value.name), value.dtype.numpy() if value.dtype is not None and
                  value.dtype != ir.DataType.STRING else None)
