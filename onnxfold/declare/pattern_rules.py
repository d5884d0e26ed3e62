"""Pattern rules: a pattern, a check and a rewrite, declared with :func:`pattern`.

::

    @pattern(P("Sub", Var("x"), P("Neg", Var("y"))))
    def sub_of_neg(op: OpBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
        return op.Add(x, y)

The check (``check=``, optional) receives the :class:`~onnxfold.declare.view.GraphView` and
the captures it names as keyword arguments, and returns a verdict
(:mod:`onnxfold.declare.verdicts`). The rewrite receives an
:class:`~onnxfold.declare.builder.OpBuilder` and, as keyword arguments, the captures and what
the check's :class:`~onnxfold.declare.verdicts.Match` found, those it names (a ``**`` parameter
takes all); it returns the new values (:mod:`onnxfold.declare.builder`). Every rule has a name,
the op types it works on and its source location; hit counts live in the run's statistics.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from onnxfold.declare.builder import Replaced
from onnxfold.declare.patterns import P
from onnxfold.declare.registry import mark, source_of
from onnxfold.declare.verdicts import Check

SHAPE_FOLDING = "shape_folding"
KEEPS_QDQ_UNITS = "keeps_qdq_units"
REWRITES_CONSTANTS = "rewrites_constants"
# the tags a rule may declare, and what the engine does with each
TAGS = {
    SHAPE_FOLDING: "it replaces values computed from the shapes of dynamic tensors with the "
                   "constants it proves: off with --no-shape-folding, as the folds of Shape "
                   "and Size are",
    KEEPS_QDQ_UNITS: "its rewrite would break onnxruntime's QDQ node units (it computes new "
                     "weights from what it removes): the driver refuses its proposals that "
                     "remove or rewire a node of one (onnxfold/ir/qdq_units.py)",
    REWRITES_CONSTANTS: "it rewrites what computes constants, so that the fold can compute "
                        "them within its size policy (an Expand postponed past the ops it "
                        "feeds): the driver tries it at a node whose results are all "
                        "constant, where it skips every other rule (the fold computes them)",
}


def keyword_names(fn: Callable) -> tuple[str, ...] | None:
    """The names ``fn`` takes after its first parameter (None: it takes any, ``**``)."""
    parameters = list(inspect.signature(fn).parameters.values())[1:]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return tuple(p.name for p in parameters)


def call_with(fn: Callable[..., Any], names: tuple[str, ...] | None, first: object,
              found: Mapping[str, object]) -> Any:
    """``fn(first, **the entries of found it names)`` (``names``: :func:`keyword_names`)."""
    if names is None:
        return fn(first, **found)
    return fn(first, **{name: found[name] for name in names})


@dataclass(frozen=True)
class PatternRule:
    """A rewrite: where it applies (``roots``, the op types of nodes it starts from), every op
    type it matches (``uses``), and its check and rewrite."""

    name: str
    pattern: P
    rewrite: Callable[..., Replaced]
    check: Check | None
    source: str
    roots: tuple[str, ...] = ()
    # its replacement computes the same real numbers with other float roundings (a product
    # of constants merged: (x * k) * c -> x * (k * c)); the rewrite validation then allows
    # ulps where it would otherwise ask for bits
    rounds_differently: bool = False
    # what the engine needs to know of the rule, by name (:data:`TAGS`): the option that turns
    # it off, say, without the engine naming the rule
    tags: frozenset[str] = frozenset()
    orders: tuple[P, ...] = field(init=False, repr=False, compare=False)
    check_names: tuple[str, ...] | None = field(init=False, repr=False, compare=False)
    bypassed: frozenset[str] = field(init=False, repr=False, compare=False)
    rewrite_names: tuple[str, ...] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        unknown_tags = set(self.tags) - set(TAGS)
        if unknown_tags:
            raise TypeError(f"{self.name} declares unknown tags {sorted(unknown_tags)}; the "
                            f"tags the engine reads: {', '.join(sorted(TAGS))}")
        object.__setattr__(self, "orders", self.pattern.orders())
        object.__setattr__(self, "bypassed", frozenset(self.pattern.bypassed_names()))
        check_names = keyword_names(self.check) if self.check is not None else ()
        captured = set(self.pattern.names())
        unknown = set(check_names or ()) - captured
        if unknown:
            raise TypeError(f"the check of {self.name} asks for {sorted(unknown)}, which its "
                            "pattern does not capture")
        if check_names is not None and set(check_names) == captured:
            check_names = None  # every capture: passed as they are (no copy per match)
        object.__setattr__(self, "check_names", check_names)
        object.__setattr__(self, "rewrite_names", keyword_names(self.rewrite))

    @property
    def uses(self) -> frozenset[str]:
        """Every op type the pattern matches, its inputs' included."""
        return frozenset(self.pattern.op_types())

    @property
    def op_types(self) -> tuple[str, ...]:
        """The op types of the nodes the rule is tried at."""
        return self.roots or self.pattern.ops

    def without(self, off: frozenset[str]) -> PatternRule | None:
        """This rule without what ``off`` disables: None if it names the rule or an op the
        pattern matches below its root, else the rule tried only at the roots left (None if
        none is)."""
        if self.name in off or (self.uses - set(self.op_types)) & off:
            return None
        roots = tuple(op for op in self.op_types if op not in off)
        return dataclasses.replace(self, roots=roots) if roots else None


def pattern(matches: P, *, check: Check | None = None, name: str | None = None,
            rounds_differently: bool = False, tags: Iterable[str] = ()
            ) -> Callable[[Callable], Callable]:
    """Declare the decorated function the rewrite of ``matches`` (see the module doc);
    ``rounds_differently``: its replacement reassociates float arithmetic (see PatternRule);
    ``tags``: what the engine must know of it (:data:`TAGS`)."""

    def register(fn: Callable) -> Callable:
        return mark(fn, PatternRule(name or fn.__name__, matches, fn, check, source_of(fn),
                                    rounds_differently=rounds_differently,
                                    tags=frozenset(tags)))

    return register
