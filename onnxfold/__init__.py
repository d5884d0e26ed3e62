"""onnxfold: ONNX constant folding with a reference-counted buffer pool.

>>> import onnxfold
>>> result = onnxfold.optimize("model.onnx")          # doctest: +SKIP
>>> onnxfold.save_model(result.model, "folded.onnx")   # doctest: +SKIP
>>> print(result.report.summary())                     # doctest: +SKIP

The public names are imported on first use, so ``onnxfold optimize`` does not pay for the
comparison, split and session machinery.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from onnxfold._deferred_imports import defer
from onnxfold._lazy import lazy_attributes

defer("sympy", "onnx_ir._symbolic_shapes")  # onnx-ir imports sympy eagerly; folding never needs it

__version__ = "0.1.0"

_HOMES = {
    "CompareResult": "comparison", "compare": "comparison",
    "InputError": "errors", "OnnxfoldError": "errors", "OutputError": "errors",
    "FoldOptions": "fold", "FoldStats": "fold",
    "load_model": "io", "save_model": "io",
    "OptimizeResult": "pipeline", "optimize": "pipeline",
    "Report": "report",
    "Session": "session",
    "split_model": "split", "write_split": "split", "simplify": "simplify",
}

__all__ = [
    "CompareResult",
    "FoldOptions",
    "FoldStats",
    "InputError",
    "OnnxfoldError",
    "OptimizeResult",
    "OutputError",
    "Report",
    "Session",
    "__version__",
    "compare",
    "load_model",
    "optimize",
    "save_model",
    "simplify",
    "split_model",
    "write_split",
]

if TYPE_CHECKING:
    from onnxfold.comparison import CompareResult, compare
    from onnxfold.errors import InputError, OnnxfoldError, OutputError
    from onnxfold.fold import FoldOptions, FoldStats
    from onnxfold.io import load_model, save_model
    from onnxfold.pipeline import OptimizeResult, optimize
    from onnxfold.report import Report
    from onnxfold.session import Session
    from onnxfold.simplify import simplify
    from onnxfold.split import split_model, write_split


__getattr__ = lazy_attributes(__name__, _HOMES)


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
