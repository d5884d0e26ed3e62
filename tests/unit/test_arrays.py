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


_TRANSPOSED_SHAPES = [(300, 530), (531, 257), (7, 1000), (1000, 7), (17, 3), (2, 3, 129, 70)]


@pytest.mark.parametrize("dtype", ["<f2", ">f2", "<f4", "u1", "i8", "?", "<c8", "<u4"])
@pytest.mark.parametrize("shape", _TRANSPOSED_SHAPES)
def test_transposing_copy_is_bitwise(dtype, shape):
    """The packed-tile transpose moves bytes unchanged: random bit patterns (NaN payloads,
    negative zeros, subnormals) come out as numpy's own copy gives them, over tile edges,
    rows left over from a pack, leading axes and big-endian data."""
    dtype = np.dtype(dtype)
    raw = np.random.default_rng(1).integers(0, 256, (*shape, dtype.itemsize), np.uint8)
    if dtype.kind == "b":
        raw = raw % 2
    src = raw.view(dtype).reshape(shape)
    view = np.swapaxes(src, -1, -2)
    out = copy_c_order(view)
    assert out.dtype == view.dtype
    assert out.tobytes() == np.ascontiguousarray(view).tobytes()


def test_transposing_copy_into_a_block_of_a_larger_buffer():
    """A destination whose rows are not adjacent (a block of a concatenation) is written in
    place, and nothing around it is touched."""
    src = np.random.default_rng(2).standard_normal((96, 200)).astype(np.float16)
    whole = np.full((250, 120), 7, np.float16)
    block = whole[20:220, 10:106]
    copy_c_order(src.T, block)
    expected = np.full((250, 120), 7, np.float16)
    expected[20:220, 10:106] = src.T
    assert whole.tobytes() == expected.tobytes()
