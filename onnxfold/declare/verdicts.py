"""What a pattern rule's check answers: a match (with what it found), or a rejection and why.

A check returns :class:`Match` (or True) to rewrite, :class:`Reject` to decline for a reason
``--explain`` lists, or False when the match does not apply after all and there is nothing
worth reporting (a value that folds anyway). A :class:`Match` carries what the check computed,
so that the rewrite receives it instead of deriving the match again::

    def _composed(ctx: GraphView, p1: tuple[int, ...], p2: tuple[int, ...]) -> Match | Reject:
        ...
        return Match(perm=[p1[i] for i in p2])

A helper several checks share returns a typed value (a dataclass) rather than a Match, and a
check that accepts returns ``Match.of(it)``: its fields reach the rewrite by name, and no
check reads another's Match by key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


@dataclass(frozen=True)
class Reject:
    """A match a rule's check refused, and why (kept for ``--explain``)."""

    reason: str


class Match:
    """A check's yes, with what it found: each keyword argument reaches the rewrite as the
    keyword argument of that name, beside the pattern's captures."""

    __slots__ = ("found",)

    def __init__(self, **found: Any) -> None:
        self.found = found

    @classmethod
    def of(cls, found: DataclassInstance) -> Match:
        """A match of what a dataclass holds, field by field: what a check computes with a
        helper's typed result (``layout.channels``, not ``found["channels"]``) reaches the
        rewrite by the fields' names."""
        return cls(**{f.name: getattr(found, f.name) for f in dataclasses.fields(found)})

    def __repr__(self) -> str:
        return f"Match({', '.join(self.found)})"


Verdict = bool | Match | Reject
Check = Callable[..., Verdict]
