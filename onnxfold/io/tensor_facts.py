"""A tensor's dims and byte size, read cheaply.

onnx-ir's ``shape`` of a tensor read from a file builds a new ``Shape`` at every call, and
``nbytes`` asks for it again (~8 us a call): loading and saving a graph of thousands of small
weights ask for them several times per weight. Here a tensor read from a file answers from
its ``TensorProto``, with the same result onnx-ir's properties give.
"""

from __future__ import annotations

import math

import onnx
import onnx_ir as ir


def data_dims(tensor: ir.TensorProtocol) -> tuple[int, ...]:
    """The dims of ``tensor``'s data (``tensor.shape``'s, as ints)."""
    proto = getattr(tensor, "raw", None)
    return tuple(proto.dims) if isinstance(proto, onnx.TensorProto) else \
        tuple(tensor.shape.numpy())


def data_nbytes(tensor: ir.TensorProtocol) -> int:
    """``tensor.nbytes``: onnx-ir's formula (sub-byte types packed), its dims from the proto
    for a tensor read from a file."""
    proto = getattr(tensor, "raw", None)
    if isinstance(proto, onnx.TensorProto):
        return math.ceil(tensor.dtype.itemsize * math.prod(proto.dims))
    return tensor.nbytes
