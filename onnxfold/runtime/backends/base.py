"""The backend interface."""

from __future__ import annotations

from typing import Protocol

import numpy as np
import onnx_ir as ir

from onnxfold.errors import OnnxfoldError


class BackendUnavailable(OnnxfoldError):
    """A backend's dependency is missing; the message says what to install."""


class FoldBackend(Protocol):
    """Runs one ``runtime_fold`` model, possibly many times."""

    name: str

    def prepare(self, model: ir.Model) -> None:
        """Load or compile ``model`` (called once, before the first run; not changed: a
        backend that needs a protobuf serializes it itself)."""

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Evaluate the fold on ``feeds``; return every graph output by name."""
