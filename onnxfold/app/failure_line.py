"""What a failed check names on its one stderr line: the first few things that failed and how
many more (a planted bug can fail hundreds of rewrites; the summary printed above lists each)."""

from __future__ import annotations

from collections.abc import Sequence

SHOWN = 3  # failures named on the line


def failing_named(failing: Sequence[str], shown: int = SHOWN) -> str:
    """The first ``shown`` of ``failing``, and how many more."""
    more = len(failing) - shown
    return ", ".join(failing[:shown]) + (f" and {more} more" if more > 0 else "")


__all__ = ["SHOWN", "failing_named"]
