"""What a model computes: FLOPs and multiply-accumulates (MACs) per op type, from the shapes the
fold already knows, at input shapes a caller binds (the signature counts the original and the
optimized model at the same ones).

:func:`profile` reads each node's cost once, its shapes in the dims of the model's inputs:
ints, a dim's name or dynamo's sum of names (``"s70 + s88"``, as ONNX's inference writes
them), or the fold's symbolic dims (``analysis.dim_algebra``, refined by its walk where
inference wrote no name). :meth:`Profile.at` evaluates them at one binding: no shape inference
and no copy of the model (issue 66: the signature from what the run already has). A dim the
profile cannot express (an unnamed axis no walk refined, a size the data decides) leaves its
node uncounted, said per op type, never guessed.

What each op costs is declared per op in ``rules/op_costs.py`` as an
:class:`~onnxfold.declare.costs.OpCost` of a *kind*, whose formula is :func:`formula`'s:
``contraction`` (MatMul, Gemm: each output element a dot product of ``K`` terms),
``convolution`` (each output element the weights' ``C/group x kernel`` terms; transposed: each
input element scattered through them), ``elementwise`` (``factor`` FLOPs per output element),
``reduction`` (``factor`` per input element), ``attention`` (GroupQueryAttention: the scores
over the present keys, their softmax and weighted sum), ``free`` (data movement). A node of an
op no rule declares (a custom op, a control-flow node, a function call) is counted apart.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import onnx
import onnx_ir as ir

from onnxfold.analysis.dim_algebra import Sym, expression_of, expression_value
from onnxfold.analysis.step_inputs import REFINED_KEY
from onnxfold.declare.costs import OpCost
from onnxfold.ir.graph import is_static_dim

# A dim as the profile holds it: an int, a text (a name or a linear form of names, as the
# model declares it) or the fold's symbolic dim; None: not known
Dim = int | str | Sym | None
Shape = tuple[Dim, ...] | None


@dataclass(frozen=True)
class _Costed:
    """One node: its op (``domain.op`` outside the default domain), its cost (None: none
    declared) and the shapes its kind's formula reads: ``primary`` (the output, or the input a
    reduction counts, or a transposed convolution's input), ``secondary`` (a contraction's left
    input, a convolution's weights); ``transposed``: Gemm's ``transA``; ``biased``: a
    contraction's bias is given."""

    op: str
    cost: OpCost | None
    primary: _Read | None = None
    secondary: _Read | None = None
    transposed: bool = False
    biased: bool = False


@dataclass(frozen=True)
class _Read:
    """A value a node's formula reads: its name and its shape as the profile found it."""

    name: str
    shape: Shape


@dataclass
class Compute:
    """Per op type: ``[nodes, FLOPs, MACs]`` counted, and the nodes not counted (no declared
    cost, or a shape the binding does not make static), by op type."""

    ops: dict[str, list[int]] = field(default_factory=dict)
    uncounted: dict[str, int] = field(default_factory=dict)
    unknown: int = 0  # of the uncounted, nodes with a declared cost (a shape not static)
    # every static tensor type found, by value name (a count by inference only)
    types: dict[str, onnx.TypeProto] = field(default_factory=dict, repr=False)

    def add(self, op: str, counted: tuple[int, int] | None, costed: bool) -> None:
        """One node of ``op``: ``counted`` (FLOPs, MACs), or None where it is not
        (``costed``: it has a declared cost)."""
        if counted is None:
            self.uncounted[op] = self.uncounted.get(op, 0) + 1
            self.unknown += costed
            return
        row = self.ops.setdefault(op, [0, 0, 0])
        row[0] += 1
        row[1] += counted[0]
        row[2] += counted[1]

    def totals(self) -> dict:
        """FLOPs, MACs, each op's nodes, FLOPs and MACs (the most FLOPs first) and what was
        not counted: the signature's JSON form."""
        return {"flops": sum(row[1] for row in self.ops.values()),
                "macs": sum(row[2] for row in self.ops.values()),
                "ops": {op: {"nodes": n, "flops": f, "macs": m} for op, (n, f, m) in
                        sorted(self.ops.items(), key=lambda kv: -kv[1][1])},
                "not_counted": dict(self.uncounted)}


@dataclass(frozen=True)
class Profile:
    """The costed nodes of a model's main graph (:func:`profile`)."""

    nodes: tuple[_Costed, ...]

    def at(self, binding: Binding, elsewhere: Mapping[str, Shape] | None = None) -> Compute:
        """The compute with the model's inputs bound as ``binding`` says; ``elsewhere``:
        shapes by value name from a model that computes the same (the optimized one, for the
        original: the fold's walk knows shapes the first inference left unknown), taken
        where the profile's own are not known (:func:`known_shapes`)."""
        found = Compute()
        for node in self.nodes:
            found.add(node.op, _counted(node, binding, elsewhere)
                      if node.cost is not None else None, node.cost is not None)
        return found

    def complete(self) -> bool:
        """Whether every node with a declared cost reads shapes this profile knows in ints
        and the inputs' dims (then a binding of every input counts them all)."""
        return all(node.cost is None or all(
            read is None or (read.shape is not None and None not in read.shape)
            for read in (node.primary, node.secondary)) for node in self.nodes)


def profile(model: ir.Model, costs: Mapping[tuple[str, str], OpCost]) -> Profile:
    """The costed nodes of ``model``'s main graph, their shapes as the model's values hold
    them now (:func:`shape_of`)."""
    inputs = _Inputs(model)
    nodes = []
    for node in model.graph:
        domain = "" if node.domain == "ai.onnx" else node.domain
        cost = costs.get((domain, node.op_type))
        op = node.op_type if not domain else f"{domain}.{node.op_type}"
        if cost is None or cost.kind == "free":
            nodes.append(_Costed(op, cost))
            continue

        def shape(value: ir.Value | None) -> _Read | None:
            return None if value is None else _Read(str(value.name), shape_of(value, inputs))

        ins = list(node.inputs)
        first = ins[0] if ins else None
        out = node.outputs[0] if node.outputs else None
        if cost.kind == "contraction":
            bias = cost.bias is not None and len(ins) > cost.bias and ins[cost.bias] is not None
            nodes.append(_Costed(op, cost, shape(out), shape(first),
                                 transposed=bool(node.attributes.get_int("transA", 0)),
                                 biased=bias))
        elif cost.kind in ("convolution", "transposed convolution"):
            weights = ins[cost.weights] if len(ins) > cost.weights else None
            scattered = first if cost.kind == "transposed convolution" else out
            nodes.append(_Costed(op, cost, shape(scattered), shape(weights)))
        elif cost.kind == "attention":  # the output, and the present keys it attended
            keys = node.outputs[1] if len(node.outputs) > 1 else None
            nodes.append(_Costed(op, cost, shape(out), shape(keys)))
        else:
            nodes.append(_Costed(op, cost, shape(out if cost.kind == "elementwise" else first)))
    return Profile(tuple(nodes))


def input_dim_names(model: ir.Model) -> frozenset[str]:
    """The names of the dynamic dims of ``model``'s graph inputs."""
    return frozenset(name for value in model.graph.inputs for dim in (value.shape or ())
                     if isinstance(name := getattr(dim, "value", None), str) and name)


class _Inputs:
    """What a binding of ``model``'s graph inputs can size: their dims' names, and the fold's
    symbols of their axes."""

    def __init__(self, model: ir.Model) -> None:
        self.names = input_dim_names(model)
        self.ids = frozenset(id(v) for v in model.graph.inputs)
        self._syms: dict[Sym, bool] = {}  # each symbol judged once (a layer's dims recur)

    def text(self, name: object) -> bool:
        """Whether ``name`` is an input dim's name or a linear form of them (dynamo's
        ``s70 + s88``, whether or not an input declares the sum itself; not a name ONNX's
        inference made up, ``unk__3``)."""
        return name in self.names or expression_of(name, self.names)

    def sym(self, dim: Sym) -> bool:
        """Whether every atom of ``dim`` is an input dim's name or an input's axis, in an
        expression :class:`Binding` evaluates (not the walk's ``Opaque`` size of data)."""
        found = self._syms.get(dim)
        if found is None:
            found = self._syms[dim] = _evaluable(dim) and all(
                (a.expr[0] == "dim" and a.expr[1] in self.names) or
                (a.expr[0] == "axis" and a.expr[1] in self.ids) for a in dim.atoms())
        return found


_EVALUATED = frozenset({"dim", "axis", "Add", "Sub", "Mul", "Div", "Broadcast", "Reshape0", "Min"})


def _evaluable(dim: Sym) -> bool:
    """Whether :meth:`Binding.size` can evaluate every part of ``dim``."""
    return dim.expr[0] in _EVALUATED and all(
        _evaluable(part) for part in dim.expr[1:] if isinstance(part, Sym))


def shape_of(value: ir.Value | None, inputs: _Inputs) -> Shape:
    """``value``'s shape for the profile: a constant's own, else per axis its int, the dim the
    fold's walk proved (``REFINED_KEY``), or the name the model declares, each where a binding
    of the ``inputs`` sizes it (else None: not known); None where its rank is unknown."""
    if value is None:
        return None
    if value.const_value is not None:
        return tuple(int(d) for d in value.const_value.shape.numpy())
    shape = value.shape
    if shape is None:
        return None
    refined = value.meta.data.get(REFINED_KEY)
    refined = refined if refined is not None and len(refined) == len(shape) else None
    dims: list[Dim] = []
    for axis, dim in enumerate(shape.dims):
        if is_static_dim(dim):
            dims.append(dim)
        elif isinstance(dim, int) and id(value) in inputs.ids:  # (Paddle's -1: any size)
            dims.append(Sym(("axis", id(value), value.name or "?", axis)))
        elif refined is not None and isinstance(refined[axis], int | Sym) and (
                not isinstance(refined[axis], Sym) or inputs.sym(refined[axis])):
            dims.append(refined[axis])
        else:
            name = getattr(dim, "value", None)
            dims.append(name if inputs.text(name) else None)
    return tuple(dims)


def known_shapes(model: ir.Model) -> dict[str, Shape]:
    """The shapes of ``model``'s node outputs whose every dim is known (:func:`shape_of`), by
    name: what :func:`profile` of a model computing the same takes where its own are not."""
    found: dict[str, Shape] = {}
    inputs = _Inputs(model)
    for node in model.graph:
        for value in node.outputs:
            shape = shape_of(value, inputs)
            if value.name and shape is not None and None not in shape:
                found[value.name] = shape
    return found


class Binding:
    """Input shapes (by graph input) as the dims they bind: a dim's name, and the fold's symbol
    of each axis (a name on several inputs is one symbol per axis unless the run assumed
    named dims equal), each the size that input set gives it."""

    def __init__(self, model: ir.Model, shapes: Mapping[str, Sequence[int]]) -> None:
        self.named: dict[str, int] = {}
        self.symbols: dict[Sym, int] = {}
        self._sizes: dict[str | Sym, int | None] = {}  # each text or expression, sized once
        for value in model.graph.inputs:
            sizes = shapes.get(str(value.name))
            if sizes is None or value.shape is None or len(value.shape) != len(sizes):
                continue
            for axis, (dim, size) in enumerate(zip(value.shape.dims, sizes)):
                if is_static_dim(dim):
                    continue
                name = getattr(dim, "value", None)
                if isinstance(name, str) and name:
                    self.named[name] = int(size)
                    self.symbols[Sym(("dim", name))] = int(size)
                self.symbols[Sym(("axis", id(value), value.name or "?", axis))] = int(size)

    def size(self, dim: Dim) -> int | None:
        """``dim``'s size at this binding; None where it cannot say."""
        if isinstance(dim, int):
            return dim
        if dim is None:
            return None
        found = self._sizes.get(dim, _UNSIZED)
        if found is _UNSIZED:
            if isinstance(dim, str):  # a declared name (a sum an input declares), or a sum
                found = self.named[dim] if dim in self.named else \
                    expression_value(dim, self.named)
            else:
                found = self._evaluated(dim)
            self._sizes[dim] = found
        return found  # type: ignore[return-value]

    def sizes(self, shape: Shape) -> list[int] | None:
        """``shape``'s sizes at this binding; None where one is not known."""
        if shape is None:
            return None
        sizes = [self.size(d) for d in shape]
        return None if any(s is None or s < 0 for s in sizes) else \
            [s for s in sizes if s is not None]

    def _evaluated(self, dim: Sym) -> int | None:
        kind = dim.expr[0]
        if kind in ("dim", "axis"):
            found = self.symbols.get(dim)
            if found is None and kind == "dim":
                found = self.named.get(dim.expr[1])
            return found
        parts = [p if isinstance(p, int) else self._evaluated(p) for p in dim.expr[1:]]
        if any(p is None for p in parts):
            return None
        values: list[int] = parts  # type: ignore[assignment]  # (None ruled out above)
        if kind == "Add":
            return values[0] + values[1]
        if kind == "Sub":
            return values[0] - values[1]
        if kind == "Mul":
            return values[0] * values[1]
        if kind == "Div" and values[1]:  # integer Div truncates toward zero
            q = abs(values[0]) // abs(values[1])
            return q if (values[0] < 0) == (values[1] < 0) else -q
        if kind == "Broadcast":  # the one that is not 1
            return max(values)
        if kind == "Reshape0":
            return values[0] if values[0] != 0 else values[1]
        if kind == "Min":
            return min(values)
        return None


_UNSIZED = object()


def _counted(node: _Costed, binding: Binding, elsewhere: Mapping[str, Shape] | None
             ) -> tuple[int, int] | None:
    """(FLOPs, MACs) of ``node`` at ``binding``; None where a shape it needs is not static."""
    assert node.cost is not None
    if node.cost.kind == "free":  # (data movement: half a graph's nodes, nothing to size)
        return 0, 0
    return formula(node.cost, _read_sizes(node.primary, binding, elsewhere),
                   _read_sizes(node.secondary, binding, elsewhere), node.transposed,
                   node.biased)


def _read_sizes(read: _Read | None, binding: Binding, elsewhere: Mapping[str, Shape] | None
                ) -> list[int] | None:
    """``read``'s sizes at ``binding``, else those of its name ``elsewhere``."""
    if read is None:
        return None
    found = binding.sizes(read.shape)
    other = elsewhere.get(read.name) if found is None and elsewhere else None
    return found if other is None else binding.sizes(other)


def formula(cost: OpCost, primary: list[int] | None, secondary: list[int] | None,
            transposed: bool = False, biased: bool = False) -> tuple[int, int] | None:
    """(FLOPs, MACs) of one node of ``cost``'s kind from the static shapes it reads
    (``primary``, ``secondary``: see :class:`_Costed`); None where one it needs is missing."""
    if cost.kind == "free":
        return 0, 0
    if cost.kind == "contraction":
        if secondary is None or primary is None or not secondary:
            return None
        macs = math.prod(primary) * secondary[0 if transposed and len(secondary) == 2 else -1]
        return 2 * macs + (math.prod(primary) if biased else 0), macs
    if cost.kind in ("convolution", "transposed convolution"):
        if secondary is None or primary is None:
            return None
        macs = math.prod(primary) * math.prod(secondary[1:])
        return 2 * macs, macs
    if cost.kind == "attention":  # output [B, S, N*H], present keys [B, KV heads, T, H]
        if secondary is None or primary is None or len(secondary) != 4 or not secondary[3]:
            return None
        total, head = secondary[2], secondary[3]
        macs = 2 * math.prod(primary) * total  # Q K^T, then the scores times V
        return 2 * macs + 5 * math.prod(primary) // head * total, macs  # and their softmax
    return None if primary is None else (cost.factor * math.prod(primary), 0)
