"""ONNX element types <-> numpy dtypes (bfloat16 and float8 via ml_dtypes, as onnx-ir does)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir


def np_dtype(onnx_type: int) -> np.dtype:
    """The numpy dtype of an ONNX ``TensorProto.DataType`` value."""
    return np.dtype(ir.DataType(onnx_type).numpy())


def onnx_type(dtype: np.dtype) -> int:
    """The ONNX ``TensorProto.DataType`` value of a numpy dtype."""
    return int(ir.DataType.from_numpy(np.dtype(dtype)))


def is_float(dtype: np.dtype) -> bool:
    return ir.DataType.from_numpy(np.dtype(dtype)).is_floating_point()
