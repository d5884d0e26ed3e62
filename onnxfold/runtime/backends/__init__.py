"""Backends that run a ``runtime_fold`` model: one interface, imported lazily.

- ``ort``: onnxruntime (the default).
- ``numpy``: onnxfold's own rules (onnxruntime for ops without one).
- ``mlir``: IREE, ONNX -> MLIR -> llvm-cpu, compiled once and cached on disk
  (needs iree-base-compiler and iree-base-runtime).
- ``onnx-mlir``: an onnx-mlir compiled library (an ``onnx-mlir`` binary or a docker engine).
"""

from __future__ import annotations

import importlib
import inspect
from typing import TYPE_CHECKING

from onnxfold.runtime.backends.base import BackendUnavailable, FoldBackend

if TYPE_CHECKING:
    from onnxfold.declare.catalogue import Catalogue

_MODULES = {"ort": "ort_backend", "numpy": "numpy_backend", "mlir": "iree_backend",
            "onnx-mlir": "onnx_mlir_backend"}
NAMES = tuple(_MODULES)


def get_backend(name: str, catalogue: Catalogue | None = None, **options) -> FoldBackend:
    """A new backend by name; raises BackendUnavailable with what to install when missing.
    ``catalogue``: the rules a backend that folds or rewrites with onnxfold's own uses
    (``numpy``, ``mlir``: their constructors take one); None: the installed rules."""
    if name not in _MODULES:
        raise BackendUnavailable(f"unknown backend '{name}' (choose from {', '.join(NAMES)})")
    module = importlib.import_module(f"onnxfold.runtime.backends.{_MODULES[name]}")
    if "catalogue" in inspect.signature(module.Backend).parameters:
        from onnxfold.declare.catalogue import load_catalogue

        options["catalogue"] = load_catalogue() if catalogue is None else catalogue
    return module.Backend(**options)


__all__ = ["NAMES", "BackendUnavailable", "FoldBackend", "get_backend"]
