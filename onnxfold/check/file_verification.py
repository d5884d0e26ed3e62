"""``verify-folds``' result: the folds re-derived, and the file's rewritten windows validated.

The two verdicts come from the check's two sibling jobs (``check.folds``,
``check.rewrites``), which share nothing but their floor; here they are said together as
``optimize --check`` says its own folds and rewrites.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from onnxfold.check.folds.verdicts import NOT_FULL, FoldVerification
from onnxfold.check.rewrites.validation import RewriteValidation


@dataclass
class FileVerification(FoldVerification):
    """A :class:`FoldVerification` with the windows of the file validated (``rewrites``)."""

    rewrites: RewriteValidation | None = None

    @classmethod
    def of(cls, folds: FoldVerification, rewrites: RewriteValidation) -> FileVerification:
        return cls(**{f.name: getattr(folds, f.name) for f in fields(folds)},
                   rewrites=rewrites)

    @property
    def ok(self) -> bool:
        return super().ok and (self.rewrites is None or self.rewrites.ok)

    @property
    def failing(self) -> list[str]:
        return [*super().failing,
                *(self.rewrites.failing if self.rewrites is not None else [])]

    def to_dict(self) -> dict:
        data = super().to_dict()
        data["rewrites"] = self.rewrites.to_dict() if self.rewrites is not None else None
        return data

    def summary(self) -> str:
        lines = [super().summary()]
        if self.rewrites is not None and self.rewrites.rewrites:
            lines.append(self.rewrites.summary())
        return "\n".join(lines)

    def last_line(self) -> str:
        rewrites = self.rewrites
        if rewrites is None or not rewrites.rewrites:  # nothing rewritten: the folds say all
            return super().last_line()
        if not self.ok:
            return f"differs: {', '.join(self.failing)}"
        validated = rewrites.all_validated
        line = f"{self.verdict(validated)}; {rewrites.counted()}"
        return line + ("" if self.complete and validated else NOT_FULL)
