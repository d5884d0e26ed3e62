"""Report files a command writes beside its work (``--json``, the HTML report): each into the
file its command's guard pinned when the command claimed it, never over an input."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from onnxfold.io.outputs import OutputGuard


def guard_inputs(models: Sequence[str]) -> OutputGuard:
    """A guard protecting ``models`` and every file their weights are read from."""
    from onnxfold.io import load_model
    from onnxfold.io.outputs import OutputGuard
    from onnxfold.io.writer import input_files

    guard = OutputGuard(models)
    for path in models:
        guard.protect(input_files(load_model(path, check=False)))
    return guard


def write_report(path: str, text: str, guard: OutputGuard | None) -> None:
    """Write a report to ``path``: into the file ``guard`` pinned for it when it was
    claimed."""
    from onnxfold.io.tempfiles import write_text

    pinned = guard.pinned(path) if guard is not None else None
    if pinned is None:
        raise RuntimeError(f"{path}: written before it was claimed")
    write_text(pinned, text)
