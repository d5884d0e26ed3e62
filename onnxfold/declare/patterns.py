"""Pattern rules (graph rewrites that enable or improve folding) and whole-model cleanups.

A pattern is data: ``P(op, *inputs, name=..., single_use=...)`` matches a default-domain node
and, position by position, its inputs; ``Var(name, const=...)`` matches any value. Named parts
are captured (a ``P`` captures its node, a ``Var`` its value) and arrive as keyword arguments
to the rule's ``check`` and ``rewrite``, after the :class:`RewriteContext`::

    @pattern(P("Transpose", P("Transpose", Var("x"), name="first"), name="second"))
    def merge_transposes(ctx, x, first, second): ...

``check`` (optional) returns True to rewrite, False when the match does not apply after all, or
a :class:`Reject` carrying the reason (``--explain`` lists it); ``rewrite`` then changes the
graph. A cleanup (:func:`cleanup`) runs once over the whole model and returns how many changes
it made. Every rule has a name, the op types it works on and its source location; the
catalogue (:mod:`onnxfold.declare.catalogue`) disables rules by name or op type. Hit counts live in
the run's statistics only.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_ir as ir

from onnxfold.analysis.constness import OpFacts, kept, runtime_constant_nodes, why_not_foldable
from onnxfold.analysis.settings import RunSettings
from onnxfold.analysis.symbolic import (
    Dim,
    Known,
    ShapeSteps,
    dim_symbol,
    known_constant,
    shape_values,
    shared_dim_names,
    updated_shape_values,
)
from onnxfold.declare.registry import mark, source_of
from onnxfold.ir.constants import source_array
from onnxfold.ir.edits import names_for, replace_value
from onnxfold.ir.graph import is_default_op, static_shape, through_identities

IDENTITY_HOPS = 16  # Identity nodes RewriteContext.array looks through
_RUNTIME_CONSTANTS = "runtime constants"  # RewriteContext.memo's key for them


@dataclass(frozen=True)
class Var:
    """Any value (``const``: only a constant one), captured as ``name``."""

    name: str | None = None
    const: bool = False


@dataclass(frozen=True)
class P:
    """A value computed by a default-domain node of ``op`` (one of them, for a tuple), whose
    inputs match ``inputs`` position by position (an input list ending in ``...`` allows more).
    The node is captured as ``name``; ``single_use``: its output has one reader and is not a
    graph output."""

    op: str | tuple[str, ...]
    inputs: tuple[Any, ...] | None  # patterns, maybe ending in ...
    name: str | None
    single_use: bool

    def __init__(self, op: str | Iterable[str], *inputs: Pattern | Any, name: str | None = None,
                 single_use: bool = False) -> None:
        object.__setattr__(self, "op", op if isinstance(op, str) else tuple(op))
        object.__setattr__(self, "inputs", inputs or None)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "single_use", single_use)

    @property
    def ops(self) -> tuple[str, ...]:
        return (self.op,) if isinstance(self.op, str) else self.op

    def op_types(self) -> Iterator[str]:
        """Every op type this pattern matches, its inputs' included."""
        yield from self.ops
        for sub in self.inputs or ():
            if isinstance(sub, P):
                yield from sub.op_types()

    def match_node(self, node: ir.Node, ctx: RewriteContext, captures: dict[str, Any]) -> bool:
        if node.op_type not in self.ops or not is_default_op(node) or kept(node, ctx.keep):
            return False
        if self.single_use and not all(ctx.single_use(v) for v in node.outputs):
            return False
        if self.inputs is not None:
            open_ended = self.inputs[-1] is Ellipsis
            patterns = self.inputs[:-1] if open_ended else self.inputs
            given = list(node.inputs)
            if len(given) < len(patterns) or (not open_ended and len(given) > len(patterns)):
                return False
            for sub, value in zip(patterns, given):
                if not _match_value(sub, value, ctx, captures):
                    return False
        if self.name is not None:
            captures[self.name] = node
        return True


Pattern = P | Var


def _match_value(pattern: Pattern, value: ir.Value | None, ctx: RewriteContext,
                 captures: dict[str, Any]) -> bool:
    if isinstance(pattern, Var):
        if value is None or (pattern.const and not ctx.is_constant(value)):
            return False
        if pattern.name is not None:
            captures[pattern.name] = value
        return True
    producer = value.producer() if value is not None else None
    return producer is not None and pattern.match_node(producer, ctx, captures)


@dataclass(frozen=True)
class Reject:
    """A match a rule's check refused, and why (kept for ``--explain``)."""

    reason: str


Check = Callable[..., bool | Reject]


@dataclass(frozen=True)
class PatternRule:
    """A rewrite: where it applies (``roots``, the op types of nodes it starts from), every op
    type it matches (``uses``), and its check and rewrite."""

    name: str
    pattern: P
    rewrite: Callable[..., object]
    check: Check | None
    source: str
    roots: tuple[str, ...] = ()

    @property
    def uses(self) -> frozenset[str]:
        return frozenset(self.pattern.op_types())

    @property
    def op_types(self) -> tuple[str, ...]:
        return self.roots or self.pattern.ops

    def apply(self, node: ir.Node, ctx: RewriteContext) -> bool | Reject:
        """Match at ``node``; rewrite and return True, or return False / the rejection."""
        captures: dict[str, Any] = {}
        if not self.pattern.match_node(node, ctx, captures):
            return False
        verdict = self.check(ctx, **captures) if self.check is not None else True
        if verdict is True:
            ctx.touched.update(_surroundings(captures.values()))
            self.rewrite(ctx, **captures)
        return verdict


def _surroundings(captured: Iterable[object]) -> set[ir.Node]:
    """The matched nodes, the producers of the values they and the matched values read, and
    the readers of what they compute: where a rewrite of the match changes the graph."""
    found: set[ir.Node | None] = set()
    for part in captured:
        if isinstance(part, ir.Node):
            found.add(part)
            found.update(v.producer() for v in part.inputs if v is not None)
            found.update(use.node for v in part.outputs for use in v.uses())
        elif isinstance(part, ir.Value):
            found.add(part.producer())
            found.update(use.node for use in part.uses())
    return {node for node in found if node is not None}


@dataclass(frozen=True)
class CleanupRule:
    """A whole-model pass ``fn(model, settings) -> number of changes`` (``settings``: the
    run's :class:`RunSettings`, e.g. what the user keeps); ``op_types`` it removes."""

    name: str
    fn: Callable[[ir.Model, RunSettings], int]
    source: str
    op_types: tuple[str, ...] = ()


@dataclass(frozen=True)
class SizeRule:
    """The bytes the outputs of ``op_type`` take, from its constant inputs (``rules/sizes.py``)."""

    name: str
    op_type: str
    fn: Callable[..., int | None]
    source: str

    @property
    def op_types(self) -> tuple[str, ...]:
        return (self.op_type,)


def output_bytes(op_types: str | Iterable[str]) -> Callable[[Callable], Callable]:
    """Declare ``fn(*inputs, **attributes) -> bytes`` the output size of ``op_types``."""
    ops = (op_types,) if isinstance(op_types, str) else tuple(op_types)

    def register(fn: Callable) -> Callable:
        for op in ops:
            mark(fn, SizeRule(f"{fn.__name__}.{op}", op, fn, source_of(fn)))
        return fn

    return register


def pattern(matches: P, *, check: Check | None = None, name: str | None = None
            ) -> Callable[[Callable], Callable]:
    """Declare the decorated function the rewrite of ``matches`` (see the module doc)."""

    def register(fn: Callable) -> Callable:
        return mark(fn, PatternRule(name or fn.__name__, matches, fn, check, source_of(fn)))

    return register


def cleanup(name: str | None = None, op_types: Iterable[str] = ()) -> Callable:
    """Declare a whole-model cleanup ``fn(model, settings) -> number of changes``."""

    def register(fn: Callable) -> Callable:
        return mark(fn, CleanupRule(name or fn.__name__, fn, source_of(fn), tuple(op_types)))

    return register


@dataclass
class RewriteContext:
    """What a pattern may ask about the graph it rewrites, and how it changes it."""

    graph: ir.Graph
    model: ir.Model
    constant: set[ir.Value]
    facts: OpFacts  # what the rules declare about ops (the catalogue of every rule)
    rejected: Counter = field(default_factory=Counter)
    rejected_at: dict[ir.Node, str] | None = None  # node -> "rule: reason", when asked for
    # what each op does to shape values and dims (the catalogue's ``shape_steps``)
    shape_steps: ShapeSteps = field(kw_only=True, repr=False)
    settings: RunSettings = field(default_factory=RunSettings, kw_only=True)
    _shape_values: dict[ir.Value, Known] | None = field(default=None, repr=False)
    _arrays: dict[ir.Value, np.ndarray | None] = field(default_factory=dict, repr=False)
    touched: set[ir.Node] = field(default_factory=set, kw_only=True, repr=False)
    """Where the driver collects, before each rewrite, the nodes the rewrite may change
    (:func:`_surroundings` of its match), to try the rules there again."""
    memo: dict[str, object] = field(default_factory=dict, repr=False)
    """What a rule computed about the graph for this sweep; emptied when a node is added
    (``add_node``). A rewrite that reroutes existing values without adding a node keeps it:
    what it remembers must stay true under such reroutes (``rules/zero_sign.py``'s answers do,
    as long as values are only rerouted to readers of the same kind)."""

    @property
    def keep(self) -> frozenset[str]:
        """Op types and node names no pattern may match (``--keep``)."""
        return self.settings.keep

    def shared_dim_names(self) -> frozenset[str]:
        """The input dim names that prove nothing in this run (``symbolic.shared_dim_names``)."""
        return shared_dim_names(self.model, self.settings.named_dims_equal)

    def is_constant(self, value: ir.Value | None) -> bool:
        return value is not None and value in self.constant

    def is_runtime_constant(self, value: ir.Value | None) -> bool:
        """Whether ``value`` is computed from the run's runtime-constant inputs
        (``settings.runtime_inputs``, main graph only) and constants by nodes that may fold:
        known once the first call's feeds are, not before (a compile-time constant is not)."""
        if value is None or not self.settings.runtime_inputs or self.graph is not \
                self.model.graph:
            return False
        found = self.memo.get(_RUNTIME_CONSTANTS)
        if not isinstance(found, frozenset):  # computed once per sweep (and after add_node)
            inputs = [v for v in self.graph.inputs if v.name in self.settings.runtime_inputs]
            nodes = runtime_constant_nodes(self.graph, inputs, self.constant, self.keep,
                                           facts=self.facts)
            found = frozenset(inputs).union(*(n.outputs for n in nodes))
            self.memo[_RUNTIME_CONSTANTS] = found
        return value in found

    def known_at_fold(self, value: ir.Value | None) -> bool:
        """Whether ``value`` is a constant or a runtime constant (:meth:`is_runtime_constant`)."""
        return self.is_constant(value) or self.is_runtime_constant(value)

    def array(self, value: ir.Value | None) -> np.ndarray | None:
        """The data of an initializer or Constant output, also through Identity nodes (an
        exporter's way to share one weight); not of values still to be folded."""
        if value is None:
            return None
        if value in self._arrays:  # a constant's data does not change during a sweep
            return self._arrays[value]
        found = None
        for link in itertools.islice(through_identities(value), IDENTITY_HOPS):
            found = source_array(link)
            if found is not None:
                break
        self._arrays[value] = found
        return found

    def shape(self, value: ir.Value | None) -> tuple[int, ...] | None:
        if value is None:
            return None
        if value.const_value is not None:
            return tuple(value.const_value.shape.numpy())
        return static_shape(value)

    def producer(self, value: ir.Value | None, *op_types: str) -> ir.Node | None:
        """The default-domain node of one of ``op_types`` that computes ``value``, if any."""
        node = value.producer() if value is not None else None
        if node is None or node.op_type not in op_types or not is_default_op(node):
            return None
        return node

    def produced_here(self, value: ir.Value) -> bool:
        """Whether a node of this graph computes ``value`` (what a graph output must be)."""
        producer = value.producer()
        return producer is not None and producer.graph is self.graph

    def shape_value(self, value: ir.Value) -> Known | None:
        """What a small integer tensor of this graph computes, element by element (static
        ints or dynamic dims: ``onnxfold.analysis.symbolic``); computed once per rewrite sweep,
        except for a constant's, read at once."""
        found = known_constant(value, self.array)
        if found is not None:
            return found
        computed = self._shape_values
        if computed is None:
            computed = self.compute_shape_values()
        return computed.get(value)

    def computed_shape_values(self) -> dict[ir.Value, Known] | None:
        """The shape values of this graph if a rule asked for them (None if none did)."""
        return self._shape_values

    def compute_shape_values(self) -> dict[ir.Value, Known]:
        """The shape values of this graph, computed now (what :meth:`shape_value` reads)."""
        self._shape_values = shape_values(self.graph, self.array, self.shared_dim_names(),
                                          steps=self.shape_steps)
        return self._shape_values

    def update_shape_values(self, previous: dict[ir.Value, Known],
                            changed_nodes: set[ir.Node]) -> set[ir.Value]:
        """Take this graph's shape values from ``previous`` (what an earlier context of it
        computed) with the nodes changed since computed again; return the values whose shape
        value or refined dims changed (``symbolic.updated_shape_values``)."""
        self._shape_values, changed = updated_shape_values(
            self.graph, previous, changed_nodes, self.array, self.shared_dim_names(),
            steps=self.shape_steps)
        return changed

    def dim(self, value: ir.Value, axis: int) -> Dim | None:
        """Axis ``axis`` of ``value`` as an int or a symbol (``onnxfold.analysis.symbolic``)."""
        return dim_symbol(value, axis, self.shared_dim_names())

    def single_use(self, value: ir.Value) -> bool:
        return len(value.uses()) == 1 and value not in self.graph.outputs

    def fresh_name(self, base: str) -> str:
        return names_for(self.model).fresh(base)

    def constant_value(self, array: np.ndarray, base: str) -> ir.Value:
        """A new initializer holding ``array``."""
        name = self.fresh_name(base)
        value = ir.Value(name=name, shape=ir.Shape(array.shape),
                         type=ir.TensorType(ir.DataType.from_numpy(array.dtype)),
                         const_value=ir.Tensor(array, name=name))
        self.graph.register_initializer(value)
        self.constant.add(value)  # a pattern later in this sweep may build on it
        if self.model.ir_version < 4 and self.graph is self.model.graph:
            self.graph.inputs.append(value)  # IR 3: initializers are inputs (main graph only)
        return value

    def add_node(self, op_type: str, inputs: list, before: ir.Node, *, attributes=(),
                 dtype: ir.DataType | None = None, shape: ir.Shape | None = None,
                 domain: str = "", base: str | None = None) -> ir.Value:
        """Insert a one-output node before ``before``; return its (freshly named) output."""
        self.memo.clear()
        node = ir.Node(domain, op_type, inputs, attributes=list(attributes),
                       name=self.fresh_name(op_type))
        out = node.outputs[0]
        out.name = self.fresh_name(base or op_type)
        if dtype is not None:  # unknown stays unknown: a TensorType(None) cannot be saved
            out.dtype = dtype
        out.shape = shape
        self.graph.insert_before(before, node)
        ins = [v for v in node.inputs if v is not None]
        if ins and why_not_foldable(node, facts=self.facts) is None and \
                all(v in self.constant for v in ins):
            self.constant.add(out)  # what the plan of the next sweep would say
        return out

    def replace_node(self, node: ir.Node, new: ir.Value) -> None:
        """``new`` takes over the only output of ``node``, which leaves the graph."""
        self.replace_output(node.outputs[0], new)
        self.graph.remove(node, safe=True)

    def remove_if_unused(self, node: ir.Node) -> None:
        """Remove ``node`` (of this graph or an enclosing one) once a rewrite has moved every
        reader of its results elsewhere."""
        graph = node.graph
        if graph is not None and all(not v.uses() and v not in graph.outputs
                                     for v in node.outputs):
            graph.remove(node, safe=True)

    def replace_output(self, old: ir.Value, new: ir.Value) -> None:
        """Route every use of ``old`` to ``new``; where ``old`` was a graph output, ``new``
        takes its name, type and shape (output names and declarations stay as they were)."""
        replace_value(self.graph, old, new, self.fresh_name)


