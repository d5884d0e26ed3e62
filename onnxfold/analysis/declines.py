"""Why a node was not folded: a kind from a fixed set, and a detail for people.

Reports, ``--explain`` and the conformance tier group by kind; nothing branches on the text.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class DeclineKind(enum.Enum):
    """The kinds of reasons a constant-foldable node stays in the graph."""

    NO_RULE = "no rule"
    RULE_DECLINED = "rule declined"
    RULE_ERROR = "rule error"
    SIZE = "size"
    GROWTH = "growth"
    MODEL_GROWTH = "model growth"
    QDQ_POLICY = "qdq policy"
    UNSUPPORTED_TYPE = "unsupported type"
    HALF_PRECISION = "float16 rounding"
    EXACTNESS = "needs onnxruntime's kernel"
    RUNTIME_ERROR = "onnxruntime"
    NON_DETERMINISTIC = "non-deterministic op"
    CUSTOM_DOMAIN = "custom domain"
    KEPT = "kept (--keep)"


@dataclass(frozen=True)
class Reason:
    """One decline: its kind and what exactly happened."""

    kind: DeclineKind
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind.value}: {self.detail}" if self.detail else self.kind.value


class Decline(Exception):
    """Raised by a rule to say it does not handle this case (the reason is the message)."""

    def __init__(self, detail: str, kind: DeclineKind = DeclineKind.RULE_DECLINED) -> None:
        super().__init__(detail)
        self.reason = Reason(kind, detail)
