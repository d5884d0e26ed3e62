"""The rule catalogue: every folder, pattern, size rule, op fact, op cost and shape step of
``onnxfold.rules``, immutable.

:func:`load_catalogue` imports the rule modules once, in the order ``onnxfold.rules.MODULES``
gives, and collects what their decorators declared (decorated functions, and tuples of them for
rules made in a loop) into one ordered tuple of rule records.
``catalogue.without(names)`` is a filtered copy: a name disables the rule of that
name, an op type every rule working on that op (a folder of it, a pattern matching it, a cleanup
removing it; a pattern rooted at several ops only loses that root). Opset ranges are resolved
against ``onnx.defs`` here, so a rule never advertises an opset in which its op does not exist.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
from collections.abc import Iterable, Iterator
from dataclasses import InitVar, dataclass, field
from types import ModuleType
from typing import Protocol, TypeVar, runtime_checkable

import onnx_ir as ir

from onnxfold.analysis.step_inputs import ShapeSteps
from onnxfold.declare.costs import OpCost
from onnxfold.declare.pattern_rules import PatternRule
from onnxfold.declare.registry import RULES_ATTR, FolderRule, OpFact, ShapeDimsRule, ShapeValueRule
from onnxfold.declare.sizes import SizeRule

_MAX_OPSET = 10**9
_R = TypeVar("_R")


Rule = FolderRule | PatternRule | SizeRule | OpFact | OpCost | ShapeValueRule | ShapeDimsRule
"""A record the catalogue holds. A new kind is its record class and its name here."""


@runtime_checkable
class Disableable(Protocol):
    """A rule ``--disable-rule`` can turn off (folders, patterns, cleanups): ``without(off)``
    is the rule left when the names and op types ``off`` are disabled (None: none)."""

    name: str

    def without(self, off: frozenset[str]) -> Disableable | None:
        """The rule left when ``off`` is disabled (None: none)."""


@dataclass(frozen=True)
class Catalogue:
    """Every rule record, in one ordered list: the modules of ``rules.MODULES`` in that order,
    each module's rules in declaration order. That order is the order patterns are tried at
    a node and cleanups run. Size rules, op facts and the symbolic shape steps are never
    disabled (they measure and describe ops).

    The one value the engine reads rules and op facts from: a filtered copy
    (:meth:`without`, :meth:`only`) keeps every op fact of the catalogue it was made from,
    including those derived from folders (``shape_only``: Shape and Size fold from shapes
    alone even when ``--disable-rule Shape`` drops their folder). ``shape_only_of``: the
    ``shape_only`` of the catalogue this one is filtered from (None: this one's folders').
    """

    rules: tuple[Rule, ...]
    shape_only_of: InitVar[frozenset[str] | None] = None
    # lookups built once from the rules above (not arguments, not compared)
    _index: dict[tuple[str, str], list[FolderRule]] = field(init=False, repr=False,
                                                            compare=False)
    _sizes: dict[str, SizeRule] = field(init=False, repr=False, compare=False)
    _shape_only: frozenset[str] = field(init=False, repr=False)

    def __post_init__(self, shape_only_of: frozenset[str] | None) -> None:
        index: dict[tuple[str, str], list[FolderRule]] = {}
        for rule in self.of(FolderRule):
            for other in index.get((rule.domain, rule.op_type), []):
                if other.since <= (rule.until or _MAX_OPSET) and \
                        rule.since <= (other.until or _MAX_OPSET):
                    raise ValueError(f"rule {rule.name} overlaps {other.name} for {rule.op_type}")
            index.setdefault((rule.domain, rule.op_type), []).append(rule)
        object.__setattr__(self, "_index", index)
        object.__setattr__(self, "_sizes", {r.op_type: r for r in self.of(SizeRule)})
        object.__setattr__(self, "_shape_only", frozenset(
            r.op_type for r in self.of(FolderRule) if r.shape_only) if shape_only_of is None
            else shape_only_of)
        for fact in self.of(OpFact):
            if fact.when is not None and (fact.bitwise or fact.discontinuous or fact.view or
                                          fact.nondeterministic or fact.kept_quantized or
                                          fact.requantizes or fact.runtime_op):
                raise ValueError(f"{fact.name}: only order_varies may hold at some nodes only; "
                                 "the other facts are read per op type")
        for kind in (ShapeValueRule, ShapeDimsRule):
            seen: dict[str, ShapeValueRule | ShapeDimsRule] = {}
            steps: tuple[ShapeValueRule | ShapeDimsRule, ...] = self.of(kind)
            for step in steps:
                if step.op_type in seen:
                    raise ValueError(f"{step.name} declared twice: {step.source} and "
                                     f"{seen[step.op_type].source}")
                seen[step.op_type] = step

    def of(self, kind: type[_R]) -> tuple[_R, ...]:
        """The rules of one kind, in catalogue order."""
        return tuple(r for r in self.rules if isinstance(r, kind))

    @functools.cached_property
    def costs(self) -> dict[tuple[str, str], OpCost]:
        """What a node of each op computes, by (domain, op type): the report's FLOPs."""
        return {(cost.domain, cost.op_type): cost for cost in self.of(OpCost)}

    @functools.cached_property
    def shape_steps(self) -> ShapeSteps:
        """The per-op steps of ``onnxfold.analysis.symbolic``, by op type."""
        dims = self.of(ShapeDimsRule)
        return ShapeSteps({r.op_type: r.fn for r in self.of(ShapeValueRule)},
                          {r.op_type: r.fn for r in dims if not r.every_output},
                          {r.op_type: r.fn for r in dims if r.every_output})

    @property
    def shape_only(self) -> frozenset[str]:
        """Ops folded from their input's shape alone (Shape, Size): an op fact, so those of
        every folder declared, whichever a filter left out."""
        return self._shape_only

    @functools.cached_property
    def nondeterministic(self) -> frozenset[str]:
        """Ops that may draw random numbers (never folded where they do)."""
        return frozenset(f.op_type for f in self.of(OpFact) if f.nondeterministic)

    @functools.cached_property
    def never_folded(self) -> frozenset[str]:
        """Non-deterministic ops whatever their inputs (not those drawing only in training)."""
        return frozenset(f.op_type for f in self.of(OpFact)
                         if f.nondeterministic and not f.draws_only_in_training)

    @functools.cached_property
    def runtime_ops(self) -> frozenset[str]:
        """Default-domain ops onnxruntime registers where onnx has no schema of them."""
        return frozenset(f.op_type for f in self.of(OpFact) if f.runtime_op and not f.domain)

    @functools.cached_property
    def kept_quantized(self) -> frozenset[str]:
        """Ops kept as they are in a quantized model unless ``--fold-qdq``."""
        return frozenset(f.op_type for f in self.of(OpFact) if f.kept_quantized)

    @functools.cached_property
    def requantizing(self) -> frozenset[str]:
        """Default-domain ops that quantize a dequantized input 0 again (QuantizeLinear)."""
        return frozenset(f.op_type for f in self.of(OpFact) if f.requantizes and not f.domain)

    @functools.cached_property
    def bitwise(self) -> frozenset[tuple[str, str]]:
        """(domain, op) whose native folders compute what onnxruntime computes, bit for bit."""
        return frozenset((f.domain, f.op_type) for f in self.of(OpFact) if f.bitwise)

    @functools.cached_property
    def _order_varies(self) -> dict[tuple[str, str], tuple[OpFact, ...]]:
        found: dict[tuple[str, str], tuple[OpFact, ...]] = {}
        for fact in self.of(OpFact):
            if fact.order_varies:
                key = (fact.domain, fact.op_type)
                found[key] = (*found.get(key, ()), fact)
        return found

    def order_varies(self, node: ir.Node) -> bool:
        """Whether onnxruntime's kernel for ``node`` sums in an order that changes with the
        memory its input lies in: the bits of a fold of it are the original session's only by
        chance, whoever computed them (``OpFact.order_varies``)."""
        domain = "" if node.domain == "ai.onnx" else node.domain
        return any(f.holds_at(node) for f in self._order_varies.get((domain, node.op_type), ()))

    @functools.cached_property
    def views(self) -> frozenset[str]:
        """Default-domain ops whose folders return a view of a C-ordered input 0."""
        return frozenset(f.op_type for f in self.of(OpFact) if f.view and not f.domain)

    @functools.cached_property
    def discontinuous(self) -> dict[tuple[str, str], OpFact]:
        """(domain, op) -> its fact, for ops a one-ulp input change can move by a whole step."""
        return {(f.domain, f.op_type): f for f in self.of(OpFact) if f.discontinuous}

    def size_rule(self, op_type: str) -> SizeRule | None:
        """The output-size rule of a default-domain op, or None."""
        return self._sizes.get(op_type)

    def folder(self, domain: str, op_type: str, opset: int) -> FolderRule | None:
        """The folder for this op at this opset, or None."""
        domain = "" if domain == "ai.onnx" else domain
        for rule in self._index.get((domain, op_type), ()):
            if rule.covers(opset):
                return rule
        return None

    def patterns_by_op(self) -> dict[str, list[PatternRule]]:
        """The patterns tried at a node of each op type, in declaration order."""
        by_op: dict[str, list[PatternRule]] = {}
        for rule in self.of(PatternRule):
            for op in rule.op_types:
                by_op.setdefault(op, []).append(rule)
        return by_op

    def names(self) -> set[str]:
        """The names of the rules ``--disable-rule`` takes (folders, patterns, cleanups)."""
        return {r.name for r in self.rules if isinstance(r, Disableable)}

    def tagged(self, tag: str) -> frozenset[str]:
        """The names of the patterns that declare ``tag`` (``pattern_rules.TAGS``)."""
        return frozenset(r.name for r in self.of(PatternRule) if tag in r.tags)

    def without(self, disabled: Iterable[str]) -> Catalogue:
        """A copy without the rules ``disabled`` names (rule names or op types); its op facts
    are this one's."""
        off = frozenset(disabled)
        if not off:
            return self
        rules: list[Rule] = []
        for rule in self.rules:
            left = rule.without(off) if isinstance(rule, Disableable) else rule
            if left is not None:
                rules.append(left)  # type: ignore[arg-type]  # a rule's own kind
        return Catalogue(tuple(rules), self.shape_only)

    def only(self, *names: str) -> Catalogue:
        """A copy with just the rules of these names (and all of this one's op facts)."""
        keep = set(names)
        return Catalogue(tuple(r for r in self.rules if not isinstance(r, Disableable)
                               or r.name in keep), self.shape_only)

    def __add__(self, other: Catalogue) -> Catalogue:
        """Both catalogues' rules (this one's first)."""
        return Catalogue(self.rules + other.rules, self.shape_only | other.shape_only)


@functools.cache
def _first_versions() -> dict[tuple[str, str], int]:
    """(domain, op) -> the opset that introduced it (one walk over onnx's schemas)."""
    import onnx

    first: dict[tuple[str, str], int] = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        key = (schema.domain, schema.name)
        first[key] = min(first.get(key, schema.since_version), schema.since_version)
    return first


def _resolved(rule: FolderRule) -> FolderRule:
    """``rule`` with ``since`` moved to the first version of the op's schema in force then,
    and named ``Op`` or ``Op_vN`` after it."""
    import onnx

    try:
        since = onnx.defs.get_schema(rule.op_type, rule.since, rule.domain).since_version
    except onnx.defs.SchemaError:  # the op is newer than ``since``: its first version
        since = _first_versions()[(rule.domain, rule.op_type)]
    name = rule.name or rule.op_type + (f"_v{since}" if since > 1 or rule.until else "")
    return dataclasses.replace(rule, since=since, name=name)


def _declared(objects: Iterable[object]) -> Iterator[object]:
    """Module attributes that carry rule declarations: functions, and tuples of them (tables),
    and op facts."""
    for obj in objects:
        for item in obj if isinstance(obj, tuple) else (obj,):
            if hasattr(item, RULES_ATTR) or isinstance(item, OpFact | OpCost):
                yield item


def _modules(package: ModuleType) -> tuple[str, ...]:
    """The package's rule modules in its explicit order (``MODULES``); a module it does not
    list is an error, not a module silently left out or put at a place no one chose."""
    order = tuple(package.MODULES)
    present = {info.name for info in pkgutil.iter_modules(package.__path__)}
    unlisted, missing = present - set(order), set(order) - present
    if unlisted or missing:
        raise ValueError(f"{package.__name__}.MODULES must list every rule module in order: "
                         f"unlisted {sorted(unlisted)}, missing {sorted(missing)}")
    return order


@functools.cache
def load_catalogue() -> Catalogue:
    """Every rule of every module in ``onnxfold.rules`` (imported once), in the modules'
    order ``onnxfold.rules.MODULES`` and each module's declaration order."""
    import onnxfold.rules as package  # here, not at the top: the rules import this package

    rules: list[Rule] = []
    for name in _modules(package):
        module = importlib.import_module(f"{package.__name__}.{name}")
        seen: set[int] = set()
        for fn in _declared(vars(module).values()):
            if isinstance(fn, OpFact | OpCost):
                rules.append(fn)
                continue
            if id(fn) in seen or getattr(fn, "__module__", None) != module.__name__:
                continue  # an alias, or a rule imported from another module
            seen.add(id(fn))
            rules.extend(_resolved(rule) if isinstance(rule, FolderRule) else rule
                         for rule in getattr(fn, RULES_ATTR, ()))
    return Catalogue(tuple(rules))
