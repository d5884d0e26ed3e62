"""The blocked C-order copy gives exactly what numpy's copy gives, for any view."""

import numpy as np
import pytest

from onnxfold.ir.arrays import c_contiguous, copy_c_order


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.float64, np.bool_])
@pytest.mark.parametrize("shape, axes", [((37, 53), (1, 0)), ((5, 6, 7), (2, 0, 1)),
                                         ((3, 4, 5, 6), (0, 2, 3, 1)), ((1, 9), (1, 0)),
                                         ((0, 4), (1, 0)), ((300, 17), (1, 0))])
def test_copy_matches_numpy(dtype, shape, axes):
    src = (np.random.default_rng(0).random(shape) * 100).astype(dtype)
    view = src.transpose(axes)
    out = copy_c_order(view)
    assert out.flags.c_contiguous and out.dtype == view.dtype
    np.testing.assert_array_equal(out, np.ascontiguousarray(view))


def test_copy_into_a_given_buffer_and_of_strided_slices():
    src = np.arange(40 * 30, dtype=np.float32).reshape(40, 30)
    view = src[::2, 1::3].T
    buffer = np.empty(view.shape, view.dtype)
    assert copy_c_order(view, buffer) is buffer
    np.testing.assert_array_equal(buffer, np.ascontiguousarray(view))


def test_c_contiguous_keeps_0d_and_contiguous_arrays():
    scalar = np.array(3.0)
    assert c_contiguous(scalar).shape == ()
    arr = np.ones((2, 3))
    assert c_contiguous(arr) is arr
