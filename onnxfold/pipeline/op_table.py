"""The per-op table of a report: how many nodes of each op type before and after.

Rows are sorted by what changed (the largest drop first, then ops that appeared, then the
unchanged ones by count), so the first lines say what the optimization did; a ``total`` row
ends the table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from onnxfold.host.terminal import printable


@dataclass(frozen=True)
class OpRow:
    """One op type's node count before and after the run (a row of the summary's table)."""

    op: str
    before: int
    after: int

    @property
    def delta(self) -> int:
        """How many nodes of the op the run added (negative: removed)."""
        return self.after - self.before

    def to_dict(self) -> dict:
        """The row as the JSON report's ``ops`` entry."""
        return {"op": self.op, "before": self.before, "after": self.after, "delta": self.delta}


def op_rows(before: Mapping[str, int], after: Mapping[str, int]) -> list[OpRow]:
    """One row per op type seen before or after, most changed first."""
    rows = [OpRow(op, before.get(op, 0), after.get(op, 0)) for op in {*before, *after}]
    rows.sort(key=lambda r: (r.delta == 0, -abs(r.delta), r.delta > 0, -r.before, r.op))
    return rows


def format_table(rows: list[OpRow]) -> str:
    """The rows as aligned text, with a ``total`` row."""
    total = OpRow("total", sum(r.before for r in rows), sum(r.after for r in rows))
    names = [printable(r.op) for r in rows] + [total.op]  # escaped before measuring widths
    width = max([len("op"), *map(len, names)])
    lines = [f"{'op':{width}}  {'before':>6}  {'after':>6}  {'delta':>6}"]
    for row, name in zip([*rows, total], names):
        if row is total:
            lines.append("-" * len(lines[0]))
        delta = f"{row.delta:+d}" if row.delta else "0"
        lines.append(f"{name:{width}}  {row.before:>6}  {row.after:>6}  {delta:>6}")
    return "\n".join(lines)
