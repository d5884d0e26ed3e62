"""onnxfold: ONNX constant folding with a reference-counted buffer pool.

>>> import onnxfold
>>> result = onnxfold.optimize("model.onnx")          # doctest: +SKIP
>>> onnxfold.save_model(result.model, "folded.onnx")   # doctest: +SKIP
>>> print(result.report.summary())                     # doctest: +SKIP
"""

from onnxfold._deferred_imports import defer

defer("sympy", "onnx_ir._symbolic_shapes")  # onnx-ir imports sympy eagerly; folding never needs it

from onnxfold.compare import CompareResult, compare  # noqa: E402
from onnxfold.errors import InputError, OnnxfoldError, OutputError  # noqa: E402
from onnxfold.fold import FoldOptions, FoldStats  # noqa: E402
from onnxfold.io import load_model, save_model  # noqa: E402
from onnxfold.pipeline import OptimizeResult, optimize  # noqa: E402
from onnxfold.report import Report  # noqa: E402
from onnxfold.session import Session  # noqa: E402
from onnxfold.split import split_model, write_split  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "CompareResult", "FoldOptions", "FoldStats", "InputError", "OnnxfoldError", "OptimizeResult",
    "OutputError", "Report", "Session", "compare", "load_model", "optimize", "save_model",
    "split_model", "write_split", "__version__",
]
