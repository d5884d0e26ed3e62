"""onnxfold: ONNX constant folding with a reference-counted buffer pool.

>>> import onnxfold
>>> result = onnxfold.optimize("model.onnx")          # doctest: +SKIP
>>> onnxfold.save_model(result.model, "folded.onnx")   # doctest: +SKIP
>>> print(result.report.summary())                     # doctest: +SKIP

The public names are imported on first use, so ``onnxfold optimize`` does not pay for the
comparison, split and session machinery; the functions and ``Session`` raise InputError in
Python words (``dims[batch]``, not ``--dim batch``: ``onnxfold.app.python_api``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from onnxfold._deferred_imports import defer
from onnxfold._lazy import lazy_attributes
from onnxfold._version import __version__

defer("sympy", "onnx_ir._symbolic_shapes")  # onnx-ir imports sympy eagerly; folding never needs it

_HOMES = {
    "CompareResult": "check.result", "compare": "check.compare",
    "LatencyResult": "latency.measure", "measure_latency": "latency.measure",
    "InputError": "errors", "OnnxfoldError": "errors", "OutputError": "errors",
    "InferenceTimeout": "host.interruptible", "inference_time_limit": "host.interruptible",
    "FoldOptions": "pipeline.options", "FoldStats": "pipeline.results",
    "load_model": "io", "save_model": "io",
    "OptimizeResult": "pipeline.optimizer", "optimize": "pipeline.optimizer",
    "Report": "pipeline.report",
    "Session": "runtime.session",
    "split_model": "runtime.split", "write_split": "runtime.split", "simplify": "app.simplify",
    "split_adapter": "runtime.adapter_split",
}

__all__ = [
    "CompareResult",
    "FoldOptions",
    "FoldStats",
    "InferenceTimeout",
    "InputError",
    "LatencyResult",
    "OnnxfoldError",
    "OptimizeResult",
    "OutputError",
    "Report",
    "Session",
    "__version__",
    "compare",
    "inference_time_limit",
    "load_model",
    "measure_latency",
    "optimize",
    "save_model",
    "simplify",
    "split_adapter",
    "split_model",
    "write_split",
]

if TYPE_CHECKING:
    from onnxfold.app.simplify import simplify
    from onnxfold.check.compare import compare
    from onnxfold.check.result import CompareResult
    from onnxfold.errors import InputError, OnnxfoldError, OutputError
    from onnxfold.host.interruptible import InferenceTimeout, inference_time_limit
    from onnxfold.io import load_model, save_model
    from onnxfold.latency.measure import LatencyResult, measure_latency
    from onnxfold.pipeline.optimizer import OptimizeResult, optimize
    from onnxfold.pipeline.options import FoldOptions
    from onnxfold.pipeline.report import Report
    from onnxfold.pipeline.results import FoldStats
    from onnxfold.runtime.adapter_split import split_adapter
    from onnxfold.runtime.session import Session
    from onnxfold.runtime.split import split_model, write_split


def _public(name: str, value: object) -> object:
    """The public ``value``: its errors name Python parameters, not flags
    (``onnxfold.app.python_api``)."""
    from onnxfold.app.python_api import public

    return public(name, value)


__getattr__ = lazy_attributes(globals(), _HOMES, _public)


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
