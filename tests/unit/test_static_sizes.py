"""Sizes known before evaluation: a value's static shape (``ir.graph.static_shape``) and its
bytes (``fold.policy.static_nbytes``), what the growth policy and the pool budget judge."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from onnxfold.fold.policy import static_nbytes
from onnxfold.ir.graph import static_shape


def _value(dims: list | None, dtype: ir.DataType | None = ir.DataType.FLOAT) -> ir.Value:
    return ir.Value(name="v", shape=None if dims is None else ir.Shape(dims),
                    type=None if dtype is None else ir.TensorType(dtype))


@pytest.mark.parametrize(("dims", "expected"), [
    ([2, 3, 4], (2, 3, 4)), ([], ()), ([0, 5], (0, 5)),
    ([2, "N", 4], None), ([2, None], None), ([-1, 3], None), (None, None)])
def test_static_shape_is_every_dim_a_known_size(dims, expected):
    shape = static_shape(_value(dims))
    assert shape == expected
    assert shape is None or all(type(d) is int for d in shape)


def test_a_dim_set_from_a_numpy_integer_reads_as_an_int():
    value = _value([np.int64(3), 2])
    assert static_shape(value) == (3, 2)
    assert static_nbytes(value) == 24


@pytest.mark.parametrize(("dims", "dtype", "expected"), [
    ([2, 3], ir.DataType.FLOAT, 24), ([], ir.DataType.INT64, 8), ([4, 0], ir.DataType.FLOAT, 0),
    ([2, 3], ir.DataType.STRING, None), ([2, 3], None, None), ([2, "N"], ir.DataType.FLOAT, None),
    (None, ir.DataType.FLOAT, None)])
def test_static_nbytes_from_shape_and_dtype(dims, dtype, expected):
    assert static_nbytes(_value(dims, dtype)) == expected


def test_static_nbytes_of_a_constant_is_its_tensor_s_whatever_its_declared_shape():
    value = _value(["N"], ir.DataType.FLOAT)
    value.const_value = ir.Tensor(np.zeros((5, 2), np.float32))
    assert static_nbytes(value) == 40
