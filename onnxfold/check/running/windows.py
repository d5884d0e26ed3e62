"""The check in windows: a model whose onnxruntime session does not fit in memory run as a
chain of windows, one session at a time, and compared with the other model at its outputs and
where both hand on the same values.

A session peaks at about twice the weights it loads (``memory.SESSION_FACTOR``; three times in
float16, cast to float32): a 7B decoder needs ~23 GB, where the fold itself needs half a GB.
So where a session does not fit, the original's graph is cut, in its node order, into
*windows* of at most ``budget`` bytes of weights (a single node whose weights exceed it is a
window of its own), preferring to end a window after a node whose value the other model
computes too. A window is a model of its nodes alone: its inputs are what the graph's inputs
and earlier windows hand it, its outputs what later windows read, the graph's outputs and the
values kept (those at its cut). Its weights are read once, with ``pread``, into a reused
buffer, and the next window's are read ahead while it runs. Every input set goes through a
window before the next window's session is built, so each weight is read once per model, not
once per input set. The peak is about one window plus the values one cut hands on
(``memory.window_bytes``: 3.3x a window's float32 weights measured, 4.4x its float16 ones).

**A window computes as a session over the whole model does.** Its weights are its session's
initializers, handed over from the buffer, which onnxruntime prepacks as it does a whole
model's (fed as inputs, they left the MatMuls unpacked, and onnxruntime's unpacked float
product sums in an order that follows the product's width: the fold's merge of three
projections into one MatMul then differed in the last bits, which 32 float16 layers grew into
a false alarm on a 7B decoder). A node computed from constants alone (a weight's transpose) is
computed in every window that reads it (:meth:`_Walk.sunk`), never handed on, so onnxruntime
folds it into a constant there as it does in one session.

**Cuts at values both models have.** The optimized model's nodes go into the original's
windows by name (:meth:`_Walk.placed`): each where the original makes a value of a name it
makes, else where the original reads a constant of a name it reads (a weight the fold made
keeps the name of the value it replaces), else with the first node that reads what it makes
(a Conv the fold merged a normalization into goes with the Relu after it), never before what
it reads; a group heavier than the budget is split on its own, and the original is then cut
where the optimized model is, by the same rule the other way. A value handed on is rounded to
its dtype where one session may keep it in float32 (onnxruntime computes a float16 op without
a float16 kernel in float32 and drops the casts between two such ops), so both chains are cut
at the same values and hand back the same ones (the caller keeps the same values in both).
Both chains run end to end, each on its own values (the errors a model accumulates across
windows are in its outputs), and the values both hand on at a cut are compared there: they
show where two chains part; the outputs decide.
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_ir as ir

from onnxfold.check.running import memory
from onnxfold.check.running.models import constant_tensor, without_constant_weights
from onnxfold.check.running.runner import (
    Fed,
    MachineShort,
    NodesModel,
    RunFailed,
    Wanted,
)
from onnxfold.host import heap
from onnxfold.io.checked import read_range
from onnxfold.io.mapped import MappedTensor, drop_resident_pages, prefetch_ahead
from onnxfold.ir.graph import captured_values
from onnxfold.numbers import size_text

# ops that draw at random: each evaluation is another value, so none is computed twice
_DRAWS = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
                    "Multinomial", "Bernoulli", "Dropout"})
# onnxruntime's names of tensor element types (its NodeArg.type: "tensor(float16)")
_ORT_NAMES = {ir.DataType.FLOAT: "float", ir.DataType.DOUBLE: "double"}


@dataclass
class Window:
    """Consecutive nodes of one graph run as one model: what it reads from before it (graph
    inputs and earlier windows' values), the initializers it reads, what it hands on, and
    the bytes of its weights."""

    nodes: list[ir.Node]
    reads: list[str]
    constants: list[str]
    writes: list[str]
    weight_bytes: int
    half_bytes: int = 0  # of them, 16-bit floats (a session holds them cast to float32 too)


@dataclass
class WindowPlan:
    """Both models' windows; ``cuts``: at each cut between the original's windows, the values
    both chains hand on there (the same names; empty where they share none)."""

    a: list[Window]
    b: list[Window]
    cuts: list[tuple[str, ...]] = field(default_factory=list)
    budget: int = 0

    def describe(self, why: str) -> str:
        """One line for the verdict's notes; ``why``: why the check runs in windows."""
        largest = max((w.weight_bytes for w in [*self.a, *self.b]), default=0)
        # the original's windows that hold nodes (placed on the optimized model's cuts, some
        # hold none: they run nothing), and the places between them where a value was compared
        holding, compared = 0, set()
        for k, window in enumerate(self.a):
            holding += bool(window.nodes)
            if k < len(self.cuts) and self.cuts[k]:
                compared.add(holding)
        return (f"compared window by window ({why}): the original in {holding} windows, "
                f"the optimized model in {len(self.b)}, at most {size_text(self.budget)} of "
                f"weights each where one node does not need more (the largest "
                f"{size_text(largest)}), weights prepacked, both chains run end to end and "
                f"compared at the outputs and at {len(compared)} of {max(holding - 1, 0)} "
                "cuts (the values both hand on there)")


class _Walk:
    """One graph in node order: what each node reads and weighs, and where each value is
    made."""

    def __init__(self, model: ir.Model) -> None:
        graph = model.graph
        self.model = model
        self.nodes = _in_order(graph)
        self.initializers = {str(name): v for name, v in graph.initializers.items()
                             if v.const_value is not None}
        self.outputs = {str(v.name) for v in graph.outputs}
        self.reads: list[list[str]] = []
        self.made: dict[str, int] = {}
        last: dict[str, int] = {}
        for position, node in enumerate(self.nodes):
            self.reads.append(list(dict.fromkeys(
                str(v.name) for v in [*node.inputs, *captured_values(node)]
                if v is not None and v.name)))
            for name in self.reads[-1]:
                last[name] = position
            for out in node.outputs:
                if out.name:
                    self.made[str(out.name)] = position
        # nodes computed from the model's own constants alone (no graph input, no initializer a
        # caller may override, nothing drawn at random, no subgraph): onnxruntime folds them
        # into constants of a session that holds them with their readers
        overridable = {str(v.name) for v in graph.inputs}
        self.constant: set[int] = set()
        for position, node in enumerate(self.nodes):
            if node.domain in ("", "ai.onnx") and node.op_type not in _DRAWS and not any(
                    a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
                    for a in node.attributes.values()) and all(
                    self.made.get(name) in self.constant if name in self.made else
                    name in self.initializers and name not in overridable
                    for name in self.reads[position]):
                self.constant.add(position)
        self.crossing: list[frozenset[str]] = []  # the values made by then and read after
        live: set[str] = set()
        for position, node in enumerate(self.nodes):
            live -= {name for name in self.reads[position] if last[name] == position}
            live |= {str(o.name) for o in node.outputs if last.get(str(o.name), -1) > position}
            self.crossing.append(frozenset(live))

    def weights(self, position: int) -> dict[str, int]:
        """The initializers node ``position`` reads, and their bytes."""
        found = {}
        for name in self.reads[position]:
            value = self.initializers.get(name)
            if value is not None and name not in self.made and value.const_value is not None:
                found[name] = value.const_value.nbytes
        return found

    def held(self, position: int) -> dict[str, ir.TensorProtocol]:
        """What node ``position`` holds in a session, by name: the initializers it reads, and
        its own tensor where it is a Constant (onnxruntime makes it an initializer)."""
        found = {name: self.initializers[name].const_value for name in self.weights(position)}
        tensor = constant_tensor(self.nodes[position])
        if tensor is not None:
            found[str(self.nodes[position].outputs[0].name)] = tensor
        return {name: t for name, t in found.items() if t is not None}

    def greedy(self, positions: Sequence[int], budget: int,
               shared: Callable[[int], bool] = lambda position: False) -> list[list[int]]:
        """``positions`` (in order) in runs of at most ``budget`` bytes of weights each (a
        node whose weights alone exceed it is a run of its own), each ending, where it can,
        after the last position of it where ``shared`` holds (a cut there hands on values
        the other model has too)."""
        runs: list[list[int]] = []
        run: list[int] = []
        held: dict[str, int] = {}
        for position in positions:
            weights = _sizes(self.held(position))
            if run and sum({**held, **weights}.values()) > budget:
                ends = [k for k, p in enumerate(run) if shared(p)]
                end = ends[-1] + 1 if ends else len(run)
                runs.append(run[:end])
                run, held = run[end:], {}
                for kept in run:
                    held.update(_sizes(self.held(kept)))
            run.append(position)
            held.update(weights)
        return [r for r in [*runs, run] if r]

    def placed(self, other: _Walk, runs: Sequence[Sequence[int]]) -> list[list[int]]:
        """This graph's nodes in as many groups as ``other``'s ``runs``: each node in the
        run where ``other`` makes a value of the same name (the first, where it makes
        several), else where ``other`` makes or reads a constant it reads by name (a weight
        the fold made keeps the name of the value it replaces), else with the first node
        that reads what it makes (a Conv the fold merged a normalization into goes with the
        Relu after it); a group never reads a later one."""
        window_of = {p: k for k, run in enumerate(runs) for p in run}
        first_read: dict[str, int] = {}
        for position, names in enumerate(other.reads):
            for name in names:
                first_read.setdefault(name, position)
        anchors: list[int | None] = []
        for position, node in enumerate(self.nodes):
            same = [window_of[other.made[str(o.name)]] for o in node.outputs
                    if str(o.name) in other.made]
            if not same:
                same = [window_of[other.made.get(name, first_read.get(name, 0))]
                        for name in self.weights(position)
                        if name in other.made or name in first_read]
            anchors.append(min(same) if same else None)
        readers: list[list[int]] = [[] for _ in self.nodes]
        for position, names in enumerate(self.reads):
            for name in names:
                if name in self.made and self.made[name] < position:
                    readers[self.made[name]].append(position)
        group = [len(runs) - 1] * len(self.nodes)
        for position in reversed(range(len(self.nodes))):  # as late as its readers allow
            anchor = anchors[position]
            group[position] = anchor if anchor is not None else min(
                (group[r] for r in readers[position]), default=len(runs) - 1)
        for position in range(len(self.nodes)):  # never before what it reads
            group[position] = max([group[position], *(
                group[self.made[name]] for name in self.reads[position]
                if name in self.made and self.made[name] < position)])
        groups: list[list[int]] = [[] for _ in runs]
        for position, k in enumerate(group):
            groups[k].append(position)
        return groups

    def sunk(self, groups: Sequence[Sequence[int]]) -> list[list[int]]:
        """``groups`` with each node computed from constants alone (:attr:`constant`) in every
        group that reads what it makes, and only there (besides its own where it makes a
        graph output): a session over a whole model folds such a node into a constant its
        readers take as one (a weight's transpose, prepacked for the MatMul that reads it), so
        a window that read it from an earlier one would run its readers on an input, and
        their kernels sum in another order (onnxruntime's unpacked and prepacked float
        products differ in their last bits)."""
        sunk = []
        for group in groups:
            have = {p for p in group if p not in self.constant or any(
                str(o.name) in self.outputs for o in self.nodes[p].outputs)}
            todo = list(have)
            while todo:
                for name in self.reads[todo.pop()]:
                    made = self.made.get(name)
                    if made is not None and made in self.constant and made not in have:
                        have.add(made)
                        todo.append(made)
            sunk.append(sorted(have))
        return sunk

    def windows(self, groups: Sequence[Sequence[int]]) -> list[Window]:
        """A window of each group of positions (each in order; a group reads no later one)."""
        windows = []
        later: set[str] = set(self.outputs)  # what the groups after the one at hand read
        for positions in reversed(groups):
            made_here = {str(o.name) for p in positions for o in self.nodes[p].outputs
                         if o.name}
            reads: dict[str, None] = {}
            constants: dict[str, int] = {}
            held: dict[str, ir.TensorProtocol] = {}  # the initializers, the Constants' tensors
            for p in positions:
                constants.update(self.weights(p))
                held.update(self.held(p))
                for name in self.reads[p]:
                    if name not in made_here and name not in constants:
                        reads[name] = None
            writes = [str(o.name) for p in positions for o in self.nodes[p].outputs
                      if o.name and str(o.name) in later]
            windows.append(Window([self.nodes[p] for p in positions], list(reads),
                                  list(constants), writes, sum(_sizes(held).values()),
                                  sum(t.nbytes for t in held.values() if t.dtype in
                                      (ir.DataType.FLOAT16, ir.DataType.BFLOAT16))))
            later |= set(reads)
        return windows[::-1]


def _sizes(tensors: Mapping[str, ir.TensorProtocol]) -> dict[str, int]:
    """The bytes of each of ``tensors``."""
    return {name: tensor.nbytes for name, tensor in tensors.items()}


def _in_order(graph: ir.Graph) -> list[ir.Node]:
    """``graph``'s nodes in an order where every value is made before it is read: the file's
    order where it is one (a valid model's is), else a stable topological order."""
    nodes = list(graph)
    reads = {n: [v for v in [*n.inputs, *captured_values(n)] if v is not None] for n in nodes}
    inside = set(nodes)
    needs = {n: {p for v in reads[n] if (p := v.producer()) in inside and p is not n}
             for n in nodes}
    done: set[ir.Node] = set()
    for node in nodes:
        if not needs[node] <= done:
            break
        done.add(node)
    else:
        return nodes
    position = {n: i for i, n in enumerate(nodes)}
    readers: dict[ir.Node, list[ir.Node]] = {n: [] for n in nodes}
    for node, wanted in needs.items():
        for need in wanted:
            readers[need].append(node)
    ready = [(position[n], n) for n in nodes if not needs[n]]
    heapq.heapify(ready)
    order = []
    while ready:
        _, node = heapq.heappop(ready)
        order.append(node)
        for reader in readers[node]:
            needs[reader].discard(node)
            if not needs[reader]:
                heapq.heappush(ready, (position[reader], reader))
    return order if len(order) == len(nodes) else nodes  # a cycle: onnxruntime will say


def plan_windows(a: ir.Model, b: ir.Model, budget: int) -> WindowPlan:
    """Windows of at most ``budget`` bytes of weights for both models, cut where both hand
    on values of the same names (see the module)."""
    walk_a, walk_b = _Walk(a), _Walk(b)
    both = frozenset(walk_a.made) & frozenset(walk_b.made)

    def hands_on_shared(walk: _Walk) -> Callable[[int], bool]:
        return lambda p: any(str(o.name) in both and str(o.name) in walk.crossing[p]
                             for o in walk.nodes[p].outputs)  # a value both compute

    runs = walk_a.greedy(range(len(walk_a.nodes)), budget, hands_on_shared(walk_a))
    groups = walk_b.placed(walk_a, runs)
    split_b: list[list[int]] = []  # a group heavier than the budget split on its own
    for group in groups:
        heavy = sum(_sizes({name: t for p in group for name, t in walk_b.held(p).items()}
                           ).values()) > budget
        split_b.extend(walk_b.greedy(group, budget, hands_on_shared(walk_b)) if heavy else
                       [group] if group else [])
    if len(split_b) > len(runs):  # the original cut where the optimized model was, by name:
        runs, groups = walk_a.placed(walk_b, split_b), split_b  # both hand on the same values
    windows_a, windows_b = walk_a.windows(walk_a.sunk(runs)), walk_b.windows(walk_b.sunk(groups))
    cuts: list[tuple[str, ...]] = []
    compared: set[str] = set()  # each value is compared at the first cut it crosses
    for k in range(len(runs) - 1):
        shared = _handed_on(windows_a, k) & _handed_on(windows_b, k) - compared
        cuts.append(tuple(sorted(shared)))
        compared |= shared
    return WindowPlan(windows_a, [w for w in windows_b if w.nodes], cuts, budget)


def heaviest(windows: Iterable[Window]) -> tuple[int, int]:
    """The bytes of weights, and of 16-bit float weights, of the window of ``windows`` that
    needs the most memory (:func:`memory.window_bytes`)."""
    return max(((w.weight_bytes, w.half_bytes) for w in windows),
               key=lambda sizes: memory.window_bytes(*sizes), default=(0, 0))


def plan_alone(model: ir.Model, budget: int) -> list[Window]:
    """Windows of at most ``budget`` bytes of weights for ``model`` alone (a model of the
    check's own, with no other to cut beside)."""
    walk = _Walk(model)
    return walk.windows(walk.sunk(walk.greedy(range(len(walk.nodes)), budget)))


def read_from_inputs(model: ir.Model) -> set[str]:
    """The names of ``model``'s values computed from its graph inputs (those a caller feeds:
    not the ones an initializer gives), the rest being constants of the model."""
    graph = model.graph
    found = {str(v.name) for v in graph.inputs if v.name not in graph.initializers}
    for node in _in_order(graph):
        if any(v is not None and str(v.name) in found
               for v in [*node.inputs, *captured_values(node)]):
            found.update(str(o.name) for o in node.outputs if o.name)
    return found


def _handed_on(windows: Sequence[Window], k: int) -> set[str]:
    """What windows ``0..k`` hand on to the windows after them."""
    made = {str(o.name) for w in windows[:k + 1] for n in w.nodes for o in n.outputs}
    return made & {name for w in windows[k + 1:] for name in w.reads}


@dataclass(frozen=True)
class Arg:
    """An input or output as onnxruntime's ``NodeArg`` describes it (``name``, ``type``,
    ``shape``), for the feed plan and the interface checks."""

    name: str
    type: str
    shape: list[int | str | None]


def _arg(value: ir.Value) -> Arg:
    shape: list[int | str | None] = [d if isinstance(d, int) else d.value
                                     for d in (value.shape or ())]
    return Arg(str(value.name), _ort_type(value.type), shape)


def _ort_type(type_: ir.TypeProtocol | None) -> str:
    """``type_`` as onnxruntime writes it: ``tensor(float16)``, ``seq(tensor(float))``."""
    if type_ is None:
        return "unknown"
    if isinstance(type_, ir.TensorType):
        dtype = type_.dtype
        return f"tensor({_ORT_NAMES.get(dtype, dtype.name.lower())})"
    if isinstance(type_, ir.SequenceType):
        return f"seq({_ort_type(type_.elem_type)})"
    return str(type_)


class Chain:
    """A model run as its windows, standing where a check holds an onnxruntime session
    (``get_inputs``, ``get_outputs``; :meth:`run_all` and ``runner.run_model`` run it).
    ``kept``: values besides the graph's outputs handed back (the cut values compared)."""

    bounds_its_runs = True  # ``runner.run_model`` runs it as it is: each window is bounded

    def __init__(self, model: ir.Model, windows: list[Window], label: str,
                 libraries: Sequence[str], level: str, kept: Iterable[str] = ()) -> None:
        self.model, self.windows, self.label = model, windows, label
        self.libraries, self.level = tuple(libraries), level
        graph = model.graph
        self._values = {str(v.name): v for n in graph for v in n.outputs if v.name}
        self._inputs = [v for v in graph.inputs if v.name not in graph.initializers]
        self._defaults = {str(v.name): v for v in graph.inputs if v.name in graph.initializers}
        self.kept = set(kept) | {str(v.name) for v in graph.outputs}
        # graph outputs no node makes: initializers (an output the fold made constant)
        made = {str(o.name) for n in graph for o in n.outputs}
        self._constant_outputs = [str(v.name) for v in graph.outputs if str(v.name) not in made
                                  and str(v.name) in graph.initializers]
        self._functions = [ir.serde.serialize_function(f) for f in model.functions.values()]
        # id of a set's feeds -> (the feeds, its kept values or what stopped it)
        self._done: dict[int, tuple[Mapping[str, np.ndarray], dict[str, Any] | Exception]] = {}
        self._later = [{name for w in windows[k + 1:] for name in w.reads}
                       for k in range(len(windows))]
        # what each window hands back: what it hands on, and the kept values it makes
        self._returned = [[*w.writes, *(name for n in w.nodes for o in n.outputs
                                        if (name := str(o.name)) in self.kept and
                                        name not in w.writes)] for w in windows]
        self.tell: Callable[[str], None] = lambda text: None
        self._weights = _WeightBuffer()
        # the element dtype of each sequence a window made (an empty one handed on has none)
        self._sequences: dict[str, np.dtype] = {}

    def get_inputs(self) -> list[Arg]:
        return [_arg(v) for v in self._inputs]

    def get_outputs(self) -> list[Arg]:
        return [_arg(v) for v in self.model.graph.outputs]

    def get_overridable_initializers(self) -> list[Arg]:
        return [_arg(v) for v in self._defaults.values()]

    def run_all(self, feed_sets: Sequence[Mapping[str, np.ndarray]]) -> None:
        """Run every input set of ``feed_sets`` through every window, window by window;
        :meth:`results` then gives each set's values (or what stopped it). What an earlier
        call ran is forgotten."""
        self._done.clear()
        states: list[dict[str, Any] | Exception] = [dict(feeds) for feeds in feed_sets]
        total = len(self.windows)
        for k in range(total):
            self.tell(f"window {k + 1}/{total}")
            if k + 1 < total:  # the next window's weights read while this one computes
                self._prefetch(self.windows[k + 1])
            self._run_window(k, states)
            drop_resident_pages()  # its weights are not read again by this chain
            heap.trim()  # what its session freed (a collection per window costs seconds)
        heap.release()
        for state in states:
            if not isinstance(state, Exception):
                for name in self._constant_outputs:
                    if name not in state:  # (an overridable one fed is the set's value)
                        state[name] = _constant(self.model.graph.initializers[name])
        for feeds, state in zip(feed_sets, states):
            self._done[id(feeds)] = (feeds, state if isinstance(state, Exception) else {
                name: value for name, value in state.items() if name in self.kept})

    def results(self, feeds: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """The graph's outputs and kept values for ``feeds`` (the very mapping
        :meth:`run_all` ran; another is run now); raises what stopped its run (RunFailed,
        MachineShort)."""
        entry = self._done.get(id(feeds))
        if entry is None or entry[0] is not feeds:
            self.run_all([feeds])
            entry = self._done[id(feeds)]
        done = entry[1]
        if isinstance(done, Exception):
            raise done
        return done

    def run(self, outputs: Sequence[str], feeds: Mapping[str, np.ndarray], run_options=None
            ) -> list:
        """onnxruntime's ``session.run``: ``outputs`` for ``feeds``."""
        done = self.results(feeds)
        return [done[name] for name in outputs]

    def _run_window(self, k: int, states: list[dict[str, Any] | Exception]) -> None:
        """Every set of ``states`` (its values so far, or what stopped it) through window
        ``k``: one session per shape of what it is fed (a session declares its inputs'
        shapes, as onnxruntime's shape inference needs: a Resize fed its sizes fails on an
        input of unknown shape)."""
        window, later, returned = self.windows[k], self._later[k], self._returned[k]
        if not returned:  # nothing it makes is read after it (a statistic no node reads)
            return
        weights: dict[str, np.ndarray] | None = None
        sessions: dict[tuple, tuple[NodesModel, Any] | Exception] = {}
        for k, state in enumerate(states):
            if isinstance(state, Exception):
                continue
            try:
                inputs = self._inputs_of(window, state)
                shapes = tuple((name, _shape_of(value)) for name, value in inputs.items())
                if shapes not in sessions:
                    try:
                        if weights is None:
                            weights = self._weights.read(window, self.model.graph, inputs)
                        built, session = self._session(window, inputs, returned, weights)
                        self._sequences.update(_sequence_dtypes(session))
                        sessions[shapes] = built, session
                    except (RunFailed, MachineShort) as e:
                        sessions[shapes] = e
                made = sessions[shapes]
                if isinstance(made, Exception):
                    raise made
                arrays = made[0].run(inputs, session=made[1])
            except (RunFailed, MachineShort) as e:
                states[k] = e
                continue
            state.update(zip(returned, arrays))
            for name in [n for n in state if n not in later and n not in self.kept
                         and n in self._values]:
                del state[name]  # no later window reads it

    def _prefetch(self, window: Window) -> None:
        """Have the kernel read ``window``'s weights ahead (those in a file's mapping)."""
        prefetch_ahead(self.model.graph.initializers[name].const_value
                       for name in window.constants)

    def _inputs_of(self, window: Window, state: dict[str, Any]) -> dict[str, Any]:
        """What ``window`` is fed: the values it reads (a graph input a set does not feed
        is an initializer's default) and its initializers overridable from outside."""
        inputs: dict[str, Any] = {}
        for name in window.reads:
            if name in state:
                inputs[name] = state[name]
            elif name in self._defaults:
                inputs[name] = self._defaults[name].const_value.numpy()  # type: ignore[union-attr]
            else:
                raise RunFailed(f"{name}: read by window nodes and made by none before them")
        for name in window.constants:
            if name in self._defaults:  # an overridable initializer: the set's value, if fed
                inputs[name] = state.get(name, self._defaults[name].const_value.numpy())  # type: ignore[union-attr]
        return inputs

    def _session(self, window: Window, inputs: Mapping[str, Any], returned: list[str],
                 constants: Mapping[str, np.ndarray]) -> tuple[NodesModel, Any]:
        """``window``'s model (:meth:`_model`) and a session over it: its inputs declared with
        the shapes they are fed, else, where onnxruntime refuses that, with none (a shape
        declared can fail its inference of a branch the run never takes: an ``If`` whose
        other branch squeezes an axis that is 2 here, which one session, knowing only the
        symbolic dim, accepts, as silero-vad's decoder did); what the first refusal said where
        both are refused."""
        built = self._model(window, inputs, returned, constants)
        try:
            return built, built.session(self.libraries)
        except RunFailed as refused:
            unshaped = self._model(window, inputs, returned, constants, shaped=False)
            try:
                return unshaped, unshaped.session(self.libraries)
            except RunFailed:
                raise refused from None

    def _model(self, window: Window, inputs: Mapping[str, Any], returned: list[str],
               constants: Mapping[str, np.ndarray], shaped: bool = True) -> NodesModel:
        """``window``'s nodes as a model, its inputs declared as ``inputs`` are (without
        their shapes where not ``shaped``), its ``constants`` as the original's initializers,
        handing back ``returned``."""
        declared = {name: Fed(self._sequences[name], sequence=True)
                    if isinstance(value, list | tuple) and not value and name in self._sequences
                    else Fed.of(name, value) for name, value in inputs.items()}
        if not shaped:
            declared = {name: dataclasses.replace(fed, shape=None)
                        for name, fed in declared.items()}
        wanted = [_wanted(self._values[name]) for name in returned]
        nodes, weights = without_constant_weights(window.nodes, kept=set(returned))
        handed = {**constants, **{str(v.name): w for v, w in weights.items()}}
        return NodesModel([ir.serde.serialize_node(n) for n in nodes], wanted,
                          constants=handed, inputs=declared,
                          opsets=dict(self.model.opset_imports),
                          ir_version=self.model.ir_version, prepacking=True,
                          functions=self._functions, level=self.level)


class _WeightBuffer:
    """One buffer a window's weights are read into, with ``pread``, reused window after
    window: each weight is read once for every input set (under a tight memory limit the
    file's pages of a window were evicted between its sets and read again, which doubled
    the time an 8-layer slice of a 7B decoder took in a 2 GiB cgroup), an input truncated
    meanwhile is an InputError rather than a bus error, and each weight starts 64 bytes
    aligned (a kernel may sum in another order at another alignment)."""

    ALIGN = 64

    def __init__(self) -> None:
        self._buffer = np.empty(0, np.uint8)

    def read(self, window: Window, graph: ir.Graph, fed: Mapping[str, Any]
             ) -> dict[str, np.ndarray]:
        """``window``'s constants (those ``fed`` does not override), its weights in a
        file copied into the buffer, the rest as they are."""
        tensors = {name: graph.initializers[name].const_value for name in window.constants
                   if name not in fed}
        copied = {name: t for name, t in tensors.items()
                  if isinstance(t, MappedTensor) and t.dtype.bitwidth >= 8 and t.size}
        total = sum(-(-t.nbytes // self.ALIGN) * self.ALIGN for t in copied.values())
        if total > self._buffer.nbytes:  # (its pages are touched once)
            raw = np.empty(total + self.ALIGN, np.uint8)  # numpy starts it 16 bytes aligned
            start = -raw.ctypes.data % self.ALIGN
            self._buffer = raw[start:start + total]
        found: dict[str, np.ndarray] = {}
        at = 0
        for name, tensor in tensors.items():
            assert tensor is not None  # (window constants hold data)
            if name not in copied:
                found[name] = tensor.numpy()
                continue
            assert isinstance(tensor, MappedTensor)
            region = self._buffer[at:at + tensor.nbytes]
            read_range(tensor.path, tensor.identity, tensor.offset or 0, tensor.nbytes, region)
            dtype = np.dtype(tensor.dtype.numpy()).newbyteorder("<")
            found[name] = region.view(dtype).reshape(tensor.shape.numpy())
            at += -(-tensor.nbytes // self.ALIGN) * self.ALIGN
        return found


def _constant(value: ir.Value) -> np.ndarray:
    """An initializer's array, read with ``pread`` where it is in a file (a truncated input
    is an InputError, never a bus error)."""
    tensor = value.const_value
    assert tensor is not None  # (an initializer)
    return tensor.checked_numpy() if isinstance(tensor, MappedTensor) else tensor.numpy()


_SEQUENCE = re.compile(r"^seq\(tensor\((\w+)\)\)$")
_NUMPY_NAMES = {"float": "float32", "double": "float64", "string": "object"}


def _sequence_dtypes(session: Any) -> dict[str, np.dtype]:
    """The element dtype of each sequence of tensors ``session`` hands back, as onnxruntime
    declares it (``seq(tensor(float))``), where numpy has one."""
    found = {}
    for arg in session.get_outputs():
        match = _SEQUENCE.match(str(arg.type))
        if match is not None:
            with contextlib.suppress(TypeError):
                found[str(arg.name)] = np.dtype(_NUMPY_NAMES.get(match[1], match[1]))
    return found


def _shape_of(value: Any) -> tuple:
    """A fed value's shape (a sequence's: its length and its elements')."""
    if isinstance(value, list | tuple):
        return ("sequence", *(tuple(np.shape(v)) for v in value))
    return tuple(np.shape(value))


def _wanted(value: ir.Value) -> Wanted:
    """How a window hands ``value`` back (its dtype where the graph's types say; a list
    where it may be a sequence)."""
    if value.type is None or isinstance(value.type, ir.SequenceType):
        return Wanted(str(value.name), sequence=True)
    return Wanted(str(value.name), value.dtype.numpy() if value.dtype is not None and
                  value.dtype != ir.DataType.STRING else None)
