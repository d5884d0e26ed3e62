"""Cleanup rules: whole-model passes run once after folding, declared with :func:`cleanup`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import onnx_ir as ir

from onnxfold.analysis.settings import RunSettings
from onnxfold.declare.registry import mark, source_of


@dataclass(frozen=True)
class CleanupRule:
    """A whole-model pass ``fn(model, settings) -> number of changes`` (``settings``: the
    run's :class:`RunSettings`, e.g. what the user keeps); ``op_types`` it removes."""

    name: str
    fn: Callable[[ir.Model, RunSettings], int]
    source: str
    op_types: tuple[str, ...] = ()

    def without(self, off: frozenset[str]) -> CleanupRule | None:
        """None if ``off`` names this cleanup or an op it removes, else this cleanup."""
        return None if self.name in off or set(self.op_types) & off else self


def cleanup(name: str | None = None, op_types: Iterable[str] = ()) -> Callable:
    """Declare a whole-model cleanup ``fn(model, settings) -> number of changes``; ``op_types``:
    the ops it removes (``--disable-rule OP`` then turns it off)."""

    def register(fn: Callable) -> Callable:
        return mark(fn, CleanupRule(name or fn.__name__, fn, source_of(fn), tuple(op_types)))

    return register
