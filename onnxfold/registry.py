"""Folder rules: how to evaluate one ONNX op on constant numpy inputs.

A rule is a plain function registered with :func:`folder`. Inputs arrive as positional numpy
arrays (``None`` for an omitted optional input), ONNX attributes as keyword arguments whose
Python defaults are the ONNX defaults. It returns an array or a tuple of arrays. A rule that
cannot handle a case raises :class:`Decline`; the engine then tries the onnxruntime fallback.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

DEFAULT_DOMAINS = ("", "ai.onnx")


class Decline(Exception):  # noqa: N818 - a rule declines, it is not an error
    """Raised by a rule to say it does not handle this case (the reason is the message)."""


@dataclass
class FolderRule:
    """One op evaluated natively for a range of opset versions."""

    name: str
    domain: str
    op_type: str
    since: int
    until: int | None
    fn: Callable
    source: str
    shape_only: bool = False
    hits: int = 0

    def covers(self, opset: int) -> bool:
        return self.since <= opset and (self.until is None or opset <= self.until)


@dataclass
class RuleRegistry:
    """All folder rules, indexed by (domain, op_type); rules can be disabled by name."""

    rules: dict[tuple[str, str], list[FolderRule]] = field(default_factory=dict)
    disabled: set[str] = field(default_factory=set)

    def add(self, rule: FolderRule) -> None:
        key = (rule.domain, rule.op_type)
        for other in self.rules.get(key, []):
            overlap = other.since <= (rule.until or 10**9) and rule.since <= (other.until or 10**9)
            if overlap:
                raise ValueError(f"rule {rule.name} overlaps {other.name} for {rule.op_type}")
        self.rules.setdefault(key, []).append(rule)

    def lookup(self, domain: str, op_type: str, opset: int) -> FolderRule | None:
        """The enabled rule for this op at this opset, or None."""
        domain = "" if domain == "ai.onnx" else domain
        for rule in self.rules.get((domain, op_type), []):
            if rule.covers(opset) and not self.is_disabled(rule):
                return rule
        return None

    def find(self, domain: str, op_type: str, opset: int) -> FolderRule | None:
        """The rule for this op at this opset, enabled or not."""
        domain = "" if domain == "ai.onnx" else domain
        for rule in self.rules.get((domain, op_type), []):
            if rule.covers(opset):
                return rule
        return None

    def is_disabled(self, rule: FolderRule) -> bool:
        """A rule is disabled by its own name or by its op type (all versions)."""
        return rule.name in self.disabled or rule.op_type in self.disabled

    def names(self) -> list[str]:
        return sorted({r.name for rules in self.rules.values() for r in rules})

    def all_rules(self) -> list[FolderRule]:
        return sorted((r for rs in self.rules.values() for r in rs), key=lambda r: r.name)

    def reset_hits(self) -> None:
        for rule in self.all_rules():
            rule.hits = 0


_PENDING: list[FolderRule] = []


def folder(
    op_types: str | Iterable[str],
    since: int = 1,
    until: int | None = None,
    domain: str = "",
    name: str | None = None,
    shape_only: bool = False,
) -> Callable[[Callable], Callable]:
    """Register ``fn`` as the folder of ``op_types`` for opsets ``since..until``.

    ``shape_only`` rules receive the *shape* (a tuple) of their first input instead of its data,
    so they fold whenever the shape is statically known (Shape, Size).
    """
    ops = [op_types] if isinstance(op_types, str) else list(op_types)

    def register(fn: Callable) -> Callable:
        src = f"{fn.__code__.co_filename}:{fn.__code__.co_firstlineno}"  # no source parsing
        for op in ops:
            rule_name = name or f"{op}" + (f"_v{since}" if since > 1 or until else "")
            if len(ops) > 1 and name:
                rule_name = f"{name}.{op}"
            _PENDING.append(FolderRule(rule_name, domain, op, since, until, fn, src, shape_only))
        return fn

    return register


_DEFAULT: RuleRegistry | None = None


def default_registry() -> RuleRegistry:
    """The registry of every rule module in ``onnxfold.rules`` (imported once)."""
    global _DEFAULT
    if _DEFAULT is None:
        import onnxfold.rules as pkg

        for mod in pkgutil.iter_modules(pkg.__path__):
            importlib.import_module(f"{pkg.__name__}.{mod.name}")
        registry = RuleRegistry()
        for rule in _PENDING:
            registry.add(rule)
        _DEFAULT = registry
    return _DEFAULT
