"""onnxfold: ONNX constant folding with a reference-counted buffer pool.

>>> import onnxfold
>>> result = onnxfold.optimize("model.onnx")          # doctest: +SKIP
>>> onnxfold.save_model(result.model, "folded.onnx")   # doctest: +SKIP
>>> print(result.report.summary())                     # doctest: +SKIP
"""

from onnxfold.compare import CompareResult, compare
from onnxfold.errors import InputError, OnnxfoldError, OutputError
from onnxfold.fold import FoldOptions, FoldStats
from onnxfold.io import load_model, save_model
from onnxfold.pipeline import OptimizeResult, optimize
from onnxfold.report import Report
from onnxfold.session import Session
from onnxfold.split import split_model, write_split

__version__ = "0.1.0"

__all__ = [
    "CompareResult", "FoldOptions", "FoldStats", "InputError", "OnnxfoldError", "OptimizeResult",
    "OutputError", "Report", "Session", "compare", "load_model", "optimize", "save_model",
    "split_model", "write_split", "__version__",
]
