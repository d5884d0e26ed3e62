"""Size rules: the bytes an op's outputs take, from its constant inputs, before it runs."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from onnxfold.declare.registry import mark, source_of


@dataclass(frozen=True)
class SizeRule:
    """The bytes the outputs of ``op_type`` take, from its constant inputs (``rules/sizes.py``)."""

    name: str
    op_type: str
    fn: Callable[..., int | None]
    source: str

    @property
    def op_types(self) -> tuple[str, ...]:
        """The op it measures, as a tuple (as other rules give theirs)."""
        return (self.op_type,)


def output_bytes(op_types: str | Iterable[str]) -> Callable[[Callable], Callable]:
    """Declare ``fn(*inputs, **attributes) -> bytes`` the output size of ``op_types`` (an upper
    bound is fine; None: not known)."""
    ops = (op_types,) if isinstance(op_types, str) else tuple(op_types)

    def register(fn: Callable) -> Callable:
        for op in ops:
            mark(fn, SizeRule(f"{fn.__name__}.{op}", op, fn, source_of(fn)))
        return fn

    return register
