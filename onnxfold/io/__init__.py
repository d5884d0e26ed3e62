"""Model I/O: memory-mapped loading and streaming, atomic saving.

``load_model`` and ``save_model`` are imported on first use, so the light modules of this
package (``prefill``, ``tempfiles``) can start work before numpy and onnx are loaded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from onnxfold._lazy import lazy_attributes

__all__ = ["load_model", "save_model"]
_HOMES = {"load_model": "reader", "save_model": "writer"}

if TYPE_CHECKING:
    from onnxfold.io.reader import load_model
    from onnxfold.io.writer import save_model


__getattr__ = lazy_attributes(globals(), _HOMES)
