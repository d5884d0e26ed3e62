"""The check in stages, planned: where a model whose onnxruntime session does not fit in
memory is cut into stages run one session at a time (``running.stages`` runs them), and where
the optimized model is cut beside it.

A session peaks at about twice the weights it loads (``memory.SESSION_FACTOR``; three times in
float16, cast to float32): a 7B decoder needs ~23 GB, where the fold itself needs half a GB.
So where a session does not fit, the original's graph is cut, in its node order, into
*stages* of at most ``budget`` bytes of weights (a single node whose weights exceed it is a
stage of its own), preferring to end a stage after a node whose value the other model
computes too. A stage is a model of its nodes alone: its inputs are what the graph's inputs
and earlier stages hand it, its outputs what later stages read, the graph's outputs and the
values kept (those at its cut). A node computed from constants alone (a weight's transpose) is
computed in every stage that reads it (:meth:`_Walk.sunk`), never handed on, so onnxruntime
folds it into a constant there as it does in one session.

**Cuts at values both models have.** The optimized model's nodes go into the original's
stages by name (:meth:`_Walk.placed`): each where the original makes a value of a name it
makes, else where the original reads a constant of a name it reads (a weight the fold made
keeps the name of the value it replaces), else with the first node that reads what it makes
(a Conv the fold merged a normalization into goes with the Relu after it), never before what
it reads; a group heavier than the budget is split on its own, and the original is then cut
where the optimized model is, by the same rule the other way. The values both chains hand on
at a cut are compared there.
"""


from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import onnx_ir as ir

from onnxfold.check.running import memory
from onnxfold.check.running.models import constant_tensor
from onnxfold.ir.graph import captured_values
from onnxfold.numbers import size_text

# ops that draw at random: each evaluation is another value, so none is computed twice
_DRAWS = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
                    "Multinomial", "Bernoulli", "Dropout"})


@dataclass
class Stage:
    """Consecutive nodes of one graph run as one model: what it reads from before it (graph
    inputs and earlier stages' values), the initializers it reads, what it hands on, and
    the bytes of its weights."""

    nodes: list[ir.Node]
    reads: list[str]
    constants: list[str]
    writes: list[str]
    weight_bytes: int
    half_bytes: int = 0  # of them, 16-bit floats (a session holds them cast to float32 too)


@dataclass
class StagePlan:
    """Both models' stages; ``cuts``: at each cut between the original's stages, the values
    both chains hand on there (the same names; empty where they share none)."""

    a: list[Stage]
    b: list[Stage]
    cuts: list[tuple[str, ...]] = field(default_factory=list)
    budget: int = 0

    def describe(self, why: str) -> str:
        """One line for the verdict's notes; ``why``: why the check runs in stages."""
        largest = max((w.weight_bytes for w in [*self.a, *self.b]), default=0)
        # the original's stages that hold nodes (placed on the optimized model's cuts, some
        # hold none: they run nothing), and the places between them where a value was compared
        holding, compared = 0, set()
        for k, stage in enumerate(self.a):
            holding += bool(stage.nodes)
            if k < len(self.cuts) and self.cuts[k]:
                compared.add(holding)
        return (f"compared stage by stage ({why}): the original in {holding} stages, "
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
        stage_of = {p: k for k, run in enumerate(runs) for p in run}
        first_read: dict[str, int] = {}
        for position, names in enumerate(other.reads):
            for name in names:
                first_read.setdefault(name, position)
        anchors: list[int | None] = []
        for position, node in enumerate(self.nodes):
            same = [stage_of[other.made[str(o.name)]] for o in node.outputs
                    if str(o.name) in other.made]
            if not same:
                same = [stage_of[other.made.get(name, first_read.get(name, 0))]
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
        a stage that read it from an earlier one would run its readers on an input, and
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

    def stages(self, groups: Sequence[Sequence[int]]) -> list[Stage]:
        """A stage of each group of positions (each in order; a group reads no later one)."""
        stages = []
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
            stages.append(Stage([self.nodes[p] for p in positions], list(reads),
                                list(constants), writes, sum(_sizes(held).values()),
                                sum(t.nbytes for t in held.values() if t.dtype in
                                    (ir.DataType.FLOAT16, ir.DataType.BFLOAT16))))
            later |= set(reads)
        return stages[::-1]


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


def plan_stages(a: ir.Model, b: ir.Model, budget: int) -> StagePlan:
    """Stages of at most ``budget`` bytes of weights for both models, cut where both hand
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
    stages_a, stages_b = walk_a.stages(walk_a.sunk(runs)), walk_b.stages(walk_b.sunk(groups))
    cuts: list[tuple[str, ...]] = []
    compared: set[str] = set()  # each value is compared at the first cut it crosses
    for k in range(len(runs) - 1):
        shared = _handed_on(stages_a, k) & _handed_on(stages_b, k) - compared
        cuts.append(tuple(sorted(shared)))
        compared |= shared
    return StagePlan(stages_a, [w for w in stages_b if w.nodes], cuts, budget)


def heaviest(stages: Iterable[Stage]) -> tuple[int, int]:
    """The bytes of weights, and of 16-bit float weights, of the stage of ``stages`` that
    needs the most memory (:func:`memory.stage_bytes`)."""
    return max(((w.weight_bytes, w.half_bytes) for w in stages),
               key=lambda sizes: memory.stage_bytes(*sizes), default=(0, 0))


def plan_alone(model: ir.Model, budget: int) -> list[Stage]:
    """Stages of at most ``budget`` bytes of weights for ``model`` alone (a model of the
    check's own, with no other to cut beside)."""
    walk = _Walk(model)
    return walk.stages(walk.sunk(walk.greedy(range(len(walk.nodes)), budget)))


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


def _handed_on(stages: Sequence[Stage], k: int) -> set[str]:
    """What stages ``0..k`` hand on to the stages after them."""
    made = {str(o.name) for w in stages[:k + 1] for n in w.nodes for o in n.outputs}
    return made & {name for w in stages[k + 1:] for name in w.reads}
