"""The rule catalogue: every folder, pattern, cleanup, size rule, op fact and shape step of
``onnxfold.rules``, immutable.

:func:`load_catalogue` imports the rule modules once and collects what their decorators
declared (decorated functions, and tuples of them for rules made in a loop).
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

from onnxfold.analysis.symbolic import ShapeSteps
from onnxfold.declare.cleanups import CleanupRule
from onnxfold.declare.pattern_rules import PatternRule
from onnxfold.declare.registry import RULES_ATTR, FolderRule, OpFact, ShapeDimsRule, ShapeValueRule
from onnxfold.declare.sizes import SizeRule

_MAX_OPSET = 10**9


@dataclass(frozen=True)
class Catalogue:
    """Folders, patterns and cleanups, in declaration order; size rules, op facts and the
    symbolic shape steps (never disabled: they measure and describe ops).

    The one value the engine reads rules and op facts from: a filtered copy
    (:meth:`without`, :meth:`only`) keeps every op fact of the catalogue it was made from,
    including those derived from folders (``shape_only``: Shape and Size fold from shapes
    alone even when ``--disable-rule Shape`` drops their folder). ``shape_only_of``: the
    ``shape_only`` of the catalogue this one is filtered from (None: this one's folders').
    """

    folders: tuple[FolderRule, ...]
    patterns: tuple[PatternRule, ...]
    cleanups: tuple[CleanupRule, ...]
    sizes: tuple[SizeRule, ...] = ()  # never disabled: they only measure
    facts: tuple[OpFact, ...] = ()  # never disabled: they describe ops
    shape_value_rules: tuple[ShapeValueRule, ...] = ()
    shape_dims_rules: tuple[ShapeDimsRule, ...] = ()
    shape_only_of: InitVar[frozenset[str] | None] = None
    # lookups built once from the rules above (not arguments, not compared)
    _index: dict[tuple[str, str], list[FolderRule]] = field(init=False, repr=False,
                                                            compare=False)
    _sizes: dict[str, SizeRule] = field(init=False, repr=False, compare=False)
    _shape_only: frozenset[str] = field(init=False, repr=False)

    def __post_init__(self, shape_only_of: frozenset[str] | None) -> None:
        index: dict[tuple[str, str], list[FolderRule]] = {}
        for rule in self.folders:
            for other in index.get((rule.domain, rule.op_type), []):
                if other.since <= (rule.until or _MAX_OPSET) and \
                        rule.since <= (other.until or _MAX_OPSET):
                    raise ValueError(f"rule {rule.name} overlaps {other.name} for {rule.op_type}")
            index.setdefault((rule.domain, rule.op_type), []).append(rule)
        object.__setattr__(self, "_index", index)
        object.__setattr__(self, "_sizes", {r.op_type: r for r in self.sizes})
        object.__setattr__(self, "_shape_only", frozenset(
            r.op_type for r in self.folders if r.shape_only) if shape_only_of is None
            else shape_only_of)
        for steps in (self.shape_value_rules, self.shape_dims_rules):
            seen: dict[str, ShapeValueRule | ShapeDimsRule] = {}
            for step in steps:
                if step.op_type in seen:
                    raise ValueError(f"{step.name} declared twice: {step.source} and "
                                     f"{seen[step.op_type].source}")
                seen[step.op_type] = step

    @functools.cached_property
    def shape_steps(self) -> ShapeSteps:
        """The per-op steps of ``onnxfold.analysis.symbolic``, by op type."""
        return ShapeSteps(
            {r.op_type: r.fn for r in self.shape_value_rules},
            {r.op_type: r.fn for r in self.shape_dims_rules if not r.every_output},
            {r.op_type: r.fn for r in self.shape_dims_rules if r.every_output})

    @property
    def shape_only(self) -> frozenset[str]:
        """Ops folded from their input's shape alone (Shape, Size): an op fact, so those of
        every folder declared, whichever a filter left out."""
        return self._shape_only

    @functools.cached_property
    def nondeterministic(self) -> frozenset[str]:
        """Ops that may draw random numbers (never folded where they do)."""
        return frozenset(f.op_type for f in self.facts if f.nondeterministic)

    @functools.cached_property
    def never_folded(self) -> frozenset[str]:
        """Non-deterministic ops whatever their inputs (not those drawing only in training)."""
        return frozenset(f.op_type for f in self.facts
                         if f.nondeterministic and not f.draws_only_in_training)

    @functools.cached_property
    def kept_quantized(self) -> frozenset[str]:
        """Ops kept as they are in a quantized model unless ``--fold-qdq``."""
        return frozenset(f.op_type for f in self.facts if f.kept_quantized)

    @functools.cached_property
    def requantizing(self) -> frozenset[str]:
        """Default-domain ops that quantize a dequantized input 0 again (QuantizeLinear)."""
        return frozenset(f.op_type for f in self.facts if f.requantizes and not f.domain)

    @functools.cached_property
    def bitwise(self) -> frozenset[tuple[str, str]]:
        """(domain, op) whose native folders compute what onnxruntime computes, bit for bit."""
        return frozenset((f.domain, f.op_type) for f in self.facts if f.bitwise)

    @functools.cached_property
    def discontinuous(self) -> dict[tuple[str, str], OpFact]:
        """(domain, op) -> its fact, for ops a one-ulp input change can move by a whole step."""
        return {(f.domain, f.op_type): f for f in self.facts if f.discontinuous}

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
        for rule in self.patterns:
            for op in rule.op_types:
                by_op.setdefault(op, []).append(rule)
        return by_op

    def names(self) -> set[str]:
        """The names of the folders, patterns and cleanups (what ``--disable-rule`` takes)."""
        rules: tuple[FolderRule | PatternRule | CleanupRule, ...] = (
            *self.folders, *self.patterns, *self.cleanups)
        return {r.name for r in rules}

    def tagged(self, tag: str) -> frozenset[str]:
        """The names of the patterns that declare ``tag`` (``pattern_rules.TAGS``)."""
        return frozenset(r.name for r in self.patterns if tag in r.tags)

    def without(self, disabled: Iterable[str]) -> Catalogue:
        """A copy without the rules ``disabled`` names (rule names or op types); its op facts
    are this one's."""
        off = frozenset(disabled)
        if not off:
            return self
        patterns = []
        for rule in self.patterns:
            if rule.name in off or (rule.uses - set(rule.op_types)) & off:
                continue
            roots = tuple(op for op in rule.op_types if op not in off)
            if roots:
                patterns.append(dataclasses.replace(rule, roots=roots))
        return Catalogue(
            tuple(r for r in self.folders if r.name not in off and r.op_type not in off),
            tuple(patterns),
            tuple(r for r in self.cleanups if r.name not in off and not set(r.op_types) & off),
            self.sizes, self.facts, self.shape_value_rules, self.shape_dims_rules,
            self.shape_only)

    def only(self, *names: str) -> Catalogue:
        """A copy with just the rules of these names (and all of this one's op facts)."""
        keep = set(names)
        return Catalogue(tuple(r for r in self.folders if r.name in keep),
                         tuple(r for r in self.patterns if r.name in keep),
                         tuple(r for r in self.cleanups if r.name in keep), self.sizes,
                         self.facts, self.shape_value_rules, self.shape_dims_rules,
                         self.shape_only)

    def __add__(self, other: Catalogue) -> Catalogue:
        """Both catalogues' rules (this one's first)."""
        return Catalogue(self.folders + other.folders, self.patterns + other.patterns,
                         self.cleanups + other.cleanups, self.sizes + other.sizes,
                         self.facts + other.facts,
                         self.shape_value_rules + other.shape_value_rules,
                         self.shape_dims_rules + other.shape_dims_rules,
                         self.shape_only | other.shape_only)


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
            if hasattr(item, RULES_ATTR) or isinstance(item, OpFact):
                yield item


@functools.cache
def load_catalogue() -> Catalogue:
    """Every rule of every module in ``onnxfold.rules`` (imported once)."""
    import onnxfold.rules as package  # here, not at the top: the rules import this package

    folders: list[FolderRule] = []
    patterns: list[PatternRule] = []
    cleanups: list[CleanupRule] = []
    sizes: list[SizeRule] = []
    facts: list[OpFact] = []
    shape_value_rules: list[ShapeValueRule] = []
    shape_dims_rules: list[ShapeDimsRule] = []
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        seen: set[int] = set()
        for fn in _declared(vars(module).values()):
            if isinstance(fn, OpFact):
                facts.append(fn)
                continue
            if id(fn) in seen or getattr(fn, "__module__", None) != module.__name__:
                continue  # an alias, or a rule imported from another module
            seen.add(id(fn))
            for rule in getattr(fn, RULES_ATTR, ()):
                if isinstance(rule, FolderRule):
                    folders.append(_resolved(rule))
                elif isinstance(rule, PatternRule):
                    patterns.append(rule)
                elif isinstance(rule, CleanupRule):
                    cleanups.append(rule)
                elif isinstance(rule, SizeRule):
                    sizes.append(rule)
                elif isinstance(rule, ShapeValueRule):
                    shape_value_rules.append(rule)
                elif isinstance(rule, ShapeDimsRule):
                    shape_dims_rules.append(rule)
    return Catalogue(tuple(folders), tuple(patterns), tuple(cleanups), tuple(sizes),
                     tuple(facts), tuple(shape_value_rules), tuple(shape_dims_rules))
