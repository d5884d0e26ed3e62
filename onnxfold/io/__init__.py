"""Model I/O: memory-mapped loading and streaming, atomic saving.

``load_model`` and ``save_model`` are imported on first use, so the light modules of this
package (``prefill``, ``tempfiles``) can start work before numpy and onnx are loaded.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__all__ = ["load_model", "save_model"]
_HOMES = {"load_model": "reader", "save_model": "writer"}

if TYPE_CHECKING:
    from onnxfold.io.reader import load_model
    from onnxfold.io.writer import save_model


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'onnxfold.io' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"onnxfold.io.{home}"), name)
    globals()[name] = value
    return value
