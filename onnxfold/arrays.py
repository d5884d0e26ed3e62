"""Small numpy helpers shared by the engine and the backends."""

from __future__ import annotations

import numpy as np


def c_contiguous(arr: np.ndarray) -> np.ndarray:
    """``arr`` in C order, copied only if needed; 0-d arrays stay 0-d.

    (``np.ascontiguousarray`` turns a 0-d array into a 1-d one, which changes its ONNX shape.)
    """
    arr = np.asarray(arr)
    return arr if arr.flags.c_contiguous else arr.copy(order="C")
