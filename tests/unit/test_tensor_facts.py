"""A tensor's dims and bytes read from its proto (``onnxfold.io.tensor_facts``) are onnx-ir's
own, for every kind of tensor the writer meets: read from a file, in memory, sub-byte."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper, numpy_helper
from onnx_ir.serde import TensorProtoTensor

from onnxfold.io.tensor_facts import data_dims, data_nbytes

TENSORS = {
    "float from a file": TensorProtoTensor(
        numpy_helper.from_array(np.ones((3, 5, 2), np.float32), "w")),
    "scalar from a file": TensorProtoTensor(numpy_helper.from_array(np.int64(7), "s")),
    "empty from a file": TensorProtoTensor(
        numpy_helper.from_array(np.zeros((0, 4), np.float16), "e")),
    "int4 from a file": TensorProtoTensor(
        helper.make_tensor("q", onnx.TensorProto.INT4, [3, 3], [1] * 9)),
    "in memory": ir.Tensor(np.ones((4, 4), np.float64)),
}


@pytest.mark.parametrize("tensor", TENSORS.values(), ids=TENSORS.keys())
def test_dims_and_bytes_are_onnx_ir_s(tensor):
    assert data_dims(tensor) == tuple(tensor.shape.numpy())
    assert data_nbytes(tensor) == tensor.nbytes
