"""rules/generators.py against onnxruntime (bitwise)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.ort_oracle import check, check_declines, rand


@pytest.mark.parametrize(
    "start,limit,delta",
    [(0, 10, 1), (3, 9, 3), (10, 4, -2), (5, 5, 1), (1, 0, 1), (-7, 20, 4), (2, -30, -7)],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int16, np.int32, np.int64])
def test_range(start, limit, delta, dtype):
    check("Range", [np.array(v, dtype) for v in (start, limit, delta)], {}, 11)


@pytest.mark.parametrize(
    "start,limit,delta",
    [(0.1, 100.0, 0.7), (1.0, 0.0, -0.013), (-3.3, 3.3, 0.1), (0.0, 1.0, 0.3), (1e7, 1e7 + 9, 3.1)],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_range_float_accumulation(start, limit, delta, dtype):
    # onnxruntime accumulates value += delta, so rounding errors build up along the output
    check("Range", [np.array(v, dtype) for v in (start, limit, delta)], {}, 11)


def test_range_int_wrap_and_declines():
    i16 = [np.array(v, np.int16) for v in (3, 30000, 10000)]
    check("Range", i16, {}, 11)
    check_declines("Range", [np.array(v, np.int64) for v in (0, 5, 0)], {}, 11)
    big = [np.array(v, np.int32) for v in (2**31 - 3, -(2**31) + 3, -(2**31) + 5)]
    check_declines("Range", big, {}, 11)
    check_declines("Range", [np.array(v, np.float16) for v in (0, 5, 1)], {}, 11)


@pytest.mark.parametrize("shape", [[2, 3], [], [0, 4], [5]])
@pytest.mark.parametrize(
    "value",
    [
        None,
        np.array([2.5], np.float32),
        np.array([-7], np.int64),
        np.array([True]),
        np.array([3], np.int8),
        np.array([1.5], np.float16),
        np.array([9], np.uint8),
        np.array([-1e300], np.float64),
        np.array([4], np.int32),
    ],
)
def test_constant_of_shape(shape, value):
    attrs = {} if value is None else {"value": value}
    check("ConstantOfShape", [np.array(shape, np.int64)], attrs, 20)
    if value is None or value.dtype in (np.float32, np.int64, np.int32, np.float64):
        check("ConstantOfShape", [np.array(shape, np.int64)], attrs, 9)


@pytest.mark.parametrize("xshape", [(3, 4), (4, 3), (3, 3), (0, 2)])
@pytest.mark.parametrize("k", [0, 1, -1, 5, -3])
@pytest.mark.parametrize(
    "dtype,attr_dtype", [(np.float32, None), (np.int32, 1), (np.int64, None), (np.float64, 7)]
)
def test_eye_like(xshape, k, dtype, attr_dtype):
    attrs = {"k": k} if attr_dtype is None else {"k": k, "dtype": attr_dtype}
    check("EyeLike", [rand(xshape, dtype)], attrs, 9)


ONE_HOT_TYPES = [  # (indices, depth, values) combinations with an onnxruntime kernel
    (np.int64, np.int64, np.int64),
    (np.int64, np.int64, np.float32),
    (np.float32, np.int64, np.int64),
    (np.int64, np.float32, np.float32),
    (np.int32, np.float32, np.float32),
    (np.float32, np.float32, np.float32),
    (np.int64, np.int32, np.float32),
    (np.int32, np.float32, np.int32),
]


@pytest.mark.parametrize("types", ONE_HOT_TYPES)
@pytest.mark.parametrize("axis", [-1, 0, 1, -2])
def test_one_hot(types, axis):
    it, dt, vt = types
    indices = np.array([[1, -1, 5, 0], [2, -3, -4, 3]], it)
    if it == np.float32:
        indices = np.array([[1.0, -1.0, 5, 0.0], [2.0, -3, -4, 3]], it)
    check("OneHot", [indices, np.array(4, dt), np.array([2, 7], vt)], {"axis": axis}, 11)


def test_one_hot_declines():
    # non-integral float indices: onnxruntime's answer changed in 1.32 (left to the fallback)
    check_declines("OneHot", [np.array([1.5, 2], np.float32), np.array(4, np.int64),
                              np.array([0, 1], np.float32)], {}, 11)
    check_declines(
        "OneHot",
        [np.array([1, 2], np.int64), np.array(0, np.int64), np.array([0, 1], np.float32)],
        {},
        11,
    )
