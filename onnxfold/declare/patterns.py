"""The pattern language: what a pattern rule matches, and what it captures by name.

``P(op, *inputs, name=..., commute=..., bypassed=..., **attributes)`` matches a
default-domain node of ``op`` (or of one of several ops) and, position by position, its inputs;
``Var(name, const=...)`` matches any value. Named parts are captured: a ``P`` its node, a
``Var`` its value, and a ``Var`` given as an attribute the attribute's value (None where the
node does not have it)::

    P("Transpose", P("Transpose", Var("x"), perm=Var("p1"), name="first"), perm=Var("p2"))

captures ``x`` (a value), ``first`` (a node), ``p1`` and ``p2`` (tuples of ints, or None). With
``commute=True`` a two-input pattern also matches its inputs swapped (``Add``, ``Mul``): it
stands for both orders, tried in turn (:meth:`P.orders`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import onnx_ir as ir

from onnxfold.analysis.constness import kept
from onnxfold.ir.graph import DEFAULT_DOMAINS

if TYPE_CHECKING:
    from onnxfold.declare.view import GraphView


@dataclass(frozen=True)
class Var:
    """Any value (``const``: only a constant one), captured as ``name``; given as an attribute
    of a :class:`P`, that attribute's value (None where the node does not have it)."""

    name: str | None = None
    const: bool = False


@dataclass(frozen=True)
class P:
    """A value computed by a default-domain node of ``op`` (one of them, for a tuple), whose
    inputs match ``inputs`` position by position (an input list ending in ``...`` allows more).
    The node is captured as ``name``; ``commute``: two inputs, in either order; ``bypassed``:
    the rewrite composes past this node (a Transpose of a Transpose: one Transpose), so that
    nodes outside the match may keep reading it (by default the rewrite removes every node of
    its match, and the driver refuses a proposal that would leave one read outside it:
    ``onnxfold/rewrite/judge.py``); ``attributes``: attribute names and the :class:`Var` that
    captures each one's value."""

    op: str | tuple[str, ...]
    inputs: tuple[Any, ...] | None  # patterns, maybe ending in ...
    name: str | None
    commute: bool
    bypassed: bool
    attributes: tuple[tuple[str, Var], ...]
    _op_set: frozenset[str] = field(init=False, repr=False, compare=False)
    _open_ended: bool = field(init=False, repr=False, compare=False)
    _input_patterns: tuple[Any, ...] = field(init=False, repr=False, compare=False)

    def __init__(self, op: str | Iterable[str], *inputs: Pattern | Any, name: str | None = None,
                 commute: bool = False, bypassed: bool = False, **attributes: Var) -> None:
        if commute and (len(inputs) != 2 or Ellipsis in inputs):
            raise ValueError(f"commute=True needs exactly two input patterns, not {inputs}")
        if any(not isinstance(a, Var) or a.const for a in attributes.values()):
            raise TypeError(f"an attribute is matched by a Var (not const): {attributes}")
        object.__setattr__(self, "op", op if isinstance(op, str) else tuple(op))
        object.__setattr__(self, "inputs", inputs or None)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "commute", commute)
        object.__setattr__(self, "bypassed", bypassed)
        object.__setattr__(self, "attributes", tuple(attributes.items()))
        # what match_node reads of itself at every node a sweep tries (not compared)
        object.__setattr__(self, "_op_set", frozenset(self.ops))
        open_ended = bool(inputs) and inputs[-1] is Ellipsis
        object.__setattr__(self, "_open_ended", open_ended)
        object.__setattr__(self, "_input_patterns", inputs[:-1] if open_ended else inputs)

    @property
    def ops(self) -> tuple[str, ...]:
        """The op types this pattern's node may have."""
        return (self.op,) if isinstance(self.op, str) else self.op

    def op_types(self) -> Iterator[str]:
        """Every op type this pattern matches, its inputs' included."""
        yield from self.ops
        for sub in self.inputs or ():
            if isinstance(sub, P):
                yield from sub.op_types()

    def names(self) -> Iterator[str]:
        """The names this pattern captures (its inputs' and attributes' included)."""
        if self.name is not None:
            yield self.name
        for sub in (*(self.inputs or ()), *(var for _, var in self.attributes)):
            if isinstance(sub, P):
                yield from sub.names()
            elif isinstance(sub, Var) and sub.name is not None:
                yield sub.name

    def bypassed_names(self) -> Iterator[str]:
        """The names of the nodes this pattern marks ``bypassed`` (its inputs' included)."""
        if self.bypassed and self.name is not None:
            yield self.name
        for sub in self.inputs or ():
            if isinstance(sub, P):
                yield from sub.bypassed_names()

    def orders(self) -> tuple[P, ...]:
        """This pattern as patterns without ``commute``: one per order of the inputs of each
        commutative part (the inputs as given first; for nested parts, the inner orders
        outermost)."""
        if self.inputs is None:
            return (self,)
        choices = [sub.orders() if isinstance(sub, P) else (sub,) for sub in self.inputs]
        return tuple(
            P(self.op, *order, name=self.name, commute=False, bypassed=self.bypassed,
              **dict(self.attributes))
            for inputs in itertools.product(*choices)
            for order in ((inputs, inputs[::-1]) if self.commute else (inputs,)))

    def match_node(self, node: ir.Node, ctx: GraphView, captures: dict[str, Any]) -> bool:
        """Whether ``node`` matches (inputs in the given order), filling ``captures``."""
        if node.op_type not in self._op_set or node.domain not in DEFAULT_DOMAINS:
            return False
        if kept(node, ctx.settings.keep):
            return False
        if self.inputs is not None:
            open_ended, patterns = self._open_ended, self._input_patterns
            given = node.inputs
            if len(given) < len(patterns) or (not open_ended and len(given) > len(patterns)):
                return False
            for sub, value in zip(patterns, given):
                if not _match_value(sub, value, ctx, captures):
                    return False
        for attribute, var in self.attributes:
            if var.name is not None:
                found = node.attributes.get(attribute)
                captures[var.name] = None if found is None else found.value
        if self.name is not None:
            captures[self.name] = node
        return True


Pattern = P | Var


def _match_value(pattern: Pattern, value: ir.Value | None, ctx: GraphView,
                 captures: dict[str, Any]) -> bool:
    if isinstance(pattern, Var):
        if value is None or (pattern.const and not ctx.is_constant(value)):
            return False
        if pattern.name is not None:
            captures[pattern.name] = value
        return True
    producer = value.producer() if value is not None else None
    return producer is not None and pattern.match_node(producer, ctx, captures)


def depth(pattern: P) -> int:
    """How many nodes deep ``pattern`` matches (1: its root alone)."""
    inner = [depth(sub) for sub in pattern.inputs or () if isinstance(sub, P)]
    return 1 + max(inner, default=0)
