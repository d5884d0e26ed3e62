"""rules/shape_ops.py against onnxruntime: bitwise-equal results, views where numpy gives views."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.ort_oracle import check, check_declines, rand, rng, run_rule

DTYPES = [np.float32, np.float16, np.float64, np.int32, np.int64, np.int8, np.uint8, np.bool_]
INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min


def i64(*v):
    return np.array(v, dtype=np.int64)


def _view_of(out, x):
    return out.size == 0 or np.shares_memory(out, x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("perm", [None, [1, 0, 2], [2, 0, 1], [0, 1, 2]])
def test_transpose(dtype, perm):
    x = rand((2, 3, 4), dtype)
    attrs = {} if perm is None else {"perm": perm}
    (out,) = check("Transpose", [x], attrs, 13)
    assert _view_of(out, x)


def test_transpose_empty_and_scalar():
    check("Transpose", [np.zeros((0, 3), np.float32)], {}, 13)
    check("Transpose", [np.array(3.0, np.float32)], {}, 13)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape", [[4, -1], [0, -1], [-1], [2, 0, 2, 2], [24], [1, 2, 1, 3, 4], [-1, 1]]
)
def test_reshape(dtype, shape):
    x = rand((2, 3, 4), dtype)
    (out,) = check("Reshape", [x, i64(*shape)], {}, 14)
    assert _view_of(out, x)


@pytest.mark.parametrize(
    "xshape,shape,allowzero",
    [((0, 3, 4), [0, 12], 1), ((0, 3, 4), [-1, 4], 0), ((3, 0), [0, 3], 1), ((2, 3), [], 0)],
)
def test_reshape_edge(xshape, shape, allowzero):
    x = rand(xshape, np.float32)
    if x.size != 1 and shape == []:
        x = rand((1, 1), np.float32)
    check("Reshape", [x, i64(*shape)], {"allowzero": allowzero}, 14)


def test_reshape_v5_and_declines():
    check("Reshape", [rand((2, 3), np.int64), i64(3, 2)], {}, 5)
    check_declines("Reshape", [rand((2, 3), np.float32), i64(4, -1)], {}, 14)
    check_declines("Reshape", [rand((2, 3), np.float32), i64(-1, -1)], {}, 14)
    check_declines("Reshape", [rand((0, 3, 4), np.float32), i64(0, -1, 4)], {}, 14)


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -3])
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.bool_])
def test_flatten(axis, dtype):
    x = rand((2, 3, 4), dtype)
    (out,) = check("Flatten", [x], {"axis": axis}, 13)
    assert _view_of(out, x)
    check("Flatten", [rand((2, 0, 4), dtype)], {"axis": axis}, 13)


@pytest.mark.parametrize("axes", [None, [0], [-1], [0, 3], [3, -4]])
@pytest.mark.parametrize("dtype", DTYPES)
def test_squeeze(axes, dtype):
    x = rand((1, 3, 1, 1), dtype)
    check("Squeeze", [x], {} if axes is None else {"axes": axes}, 11)
    (out,) = check("Squeeze", [x, None if axes is None else i64(*axes)], {}, 13)
    assert _view_of(out, x)


def test_squeeze_declines_non_unit_axis():
    check_declines("Squeeze", [rand((1, 3), np.float32), i64(1)], {}, 13)


@pytest.mark.parametrize("axes", [[0], [-1], [1, -1], [0, 3], [3, 1], [-4, 2]])
@pytest.mark.parametrize("dtype", DTYPES)
def test_unsqueeze(axes, dtype):
    x = rand((2, 3), dtype)
    check("Unsqueeze", [x], {"axes": axes}, 11)
    (out,) = check("Unsqueeze", [x, i64(*axes)], {}, 13)
    assert _view_of(out, x)


def test_unsqueeze_scalar():
    check("Unsqueeze", [np.array(5, np.int64), i64(0)], {}, 13)
    check("Unsqueeze", [np.array(5, np.int64), i64(-1, 0)], {}, 13)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(dtype, axis):
    rs = rng()
    shapes = [(2, 3), (2, 3), (2, 3)]
    xs = [rand(s, dtype, rs) for s in shapes]
    check("Concat", xs, {"axis": axis}, 13)


def test_concat_empty_and_single():
    a, e = rand((2, 3), np.float32), np.zeros((0, 3), np.float32)
    check("Concat", [a, e, a], {"axis": 0}, 13)
    check("Concat", [a], {"axis": -2}, 13)
    check("Concat", [rand((3,), np.int64), rand((0,), np.int64)], {"axis": 0}, 4)


@pytest.mark.parametrize("dtype", DTYPES)
def test_split(dtype):
    x = rand((4, 7), dtype)
    outs = check("Split", [x, i64(2, 1, 4)], {"axis": -1}, 13, n_outputs=3)
    assert all(_view_of(o, x) for o in outs)
    check("Split", [x], {"axis": 0, "split": [1, 3]}, 11, n_outputs=2)
    check("Split", [x, i64(3, 0, 4)], {"axis": 1}, 18, n_outputs=3)
    check("Split", [x], {"axis": 1, "num_outputs": 3}, 18, n_outputs=3)
    check("Split", [x], {"axis": 0, "num_outputs": 2}, 18, n_outputs=2)
    check("Split", [x], {"axis": 0, "num_outputs": 4}, 18, n_outputs=4)


def test_split_declines():
    x = rand((4, 9), np.float32)
    check_declines("Split", [x], {"axis": 1}, 13)  # equal split: output count unknown
    check_declines("Split", [x], {"axis": 1, "num_outputs": 4}, 18)  # 3,3,3,0: ORT rejects
    check_declines("Split", [x, i64(2, 3)], {"axis": 1}, 13)


SLICES = [
    ([1], [4], [0], None),
    ([-3], [INT64_MAX], [1], None),
    ([10], [-10], [0], [-1]),
    ([-1], [INT64_MIN], [1], [-2]),
    ([0, 1], [5, -1], [-1, 0], [2, 1]),
    ([4], [1], None, [-1]),
    ([2], [2], [1], None),
    ([-100], [100], [0], [3]),
    ([5], [INT64_MAX], [0], [1]),
    ([INT64_MAX], [INT64_MIN], [1], [-3]),
    ([3, -2], [0, -6], [0, 1], [-1, -1]),
    ([0], [-1], [0], [1]),
]


@pytest.mark.parametrize("starts,ends,axes,steps", SLICES)
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_, np.float16])
def test_slice(starts, ends, axes, steps, dtype):
    x = rand((5, 6), dtype)
    inputs = [x, i64(*starts), i64(*ends), None if axes is None else i64(*axes)]
    inputs.append(None if steps is None else i64(*steps))
    (out,) = check("Slice", inputs, {}, 13)
    assert _view_of(out, x)


def test_slice_int32_params_and_v1():
    x = rand((5, 6, 2), np.float32)
    i32 = np.array
    check("Slice", [x, i32([1, -4], np.int32), i32([-1, 100], np.int32)], {}, 13)
    check("Slice", [x], {"starts": [1, -4], "ends": [-1, 100], "axes": [0, 1]}, 9)
    check("Slice", [x], {"starts": [1], "ends": [INT64_MAX]}, 1)
    check("Slice", [np.zeros((0, 3), np.float32), i64(0), i64(-1), i64(1), i64(-1)], {}, 13)
    check_declines("Slice", [x, i64(0), i64(3), i64(0), i64(0)], {}, 13)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "axis,indices",
    [
        (0, np.array([0, -1, 2, -4], np.int64)),
        (1, np.array([[1, -1], [0, 2]], np.int64)),
        (-1, np.array(-2, np.int64)),
        (0, np.array([3, -2], np.int32)),
        (1, np.zeros((0,), np.int64)),
    ],
)
def test_gather(dtype, axis, indices):
    x = rand((4, 3, 5), dtype)
    check("Gather", [x, indices], {"axis": axis}, 13)


def test_gather_declines_out_of_range():
    check_declines("Gather", [rand((4,), np.float32), i64(4)], {}, 13)
    check_declines("Gather", [rand((4,), np.float32), i64(-5)], {}, 13)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements(dtype, axis):
    x = rand((3, 4), dtype)
    idx = rng().integers(-3, 3, size=(2, 4)).astype(np.int64)
    if axis != 0:
        idx = rng().integers(-4, 4, size=(3, 2)).astype(np.int64)
    check("GatherElements", [x, idx], {"axis": axis}, 13)


@pytest.mark.parametrize(
    "xshape,indices,batch_dims",
    [
        ((2, 3), [[0, 1], [1, -1]], 0),
        ((2, 3, 4), [[1], [0]], 0),
        ((2, 3, 4), [[[1, 2]], [[0, -1]]], 0),
        ((2, 3, 4), [[1], [0]], 1),
        ((2, 3, 4), [[[2, 3], [0, 0]], [[1, 1], [-1, -1]]], 1),
        ((2, 3, 4), [[[2], [0]], [[1], [-3]]], 1),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
def test_gather_nd(xshape, indices, batch_dims, dtype):
    x = rand(xshape, dtype)
    attrs = {"batch_dims": batch_dims} if batch_dims else {}
    check("GatherND", [x, np.array(indices, np.int64)], attrs, 13)


@pytest.mark.parametrize(
    "xshape,shape",
    [((3, 1), [2, 1, 4]), ((1,), [3]), ((2, 3), [1]), ((3, 1), [3, 0]), ((), [2, 2]), ((2, 1), [])],
)
@pytest.mark.parametrize("dtype", DTYPES)
def test_expand(xshape, shape, dtype):
    x = rand(xshape, dtype)
    (out,) = check("Expand", [x, i64(*shape)], {}, 13)
    assert _view_of(out, x)


def test_expand_declines_incompatible():
    check_declines("Expand", [rand((3,), np.float32), i64(2)], {}, 13)


@pytest.mark.parametrize("repeats", [[2, 1], [1, 3], [0, 2], [2, 2]])
@pytest.mark.parametrize("dtype", DTYPES)
def test_tile(repeats, dtype):
    check("Tile", [rand((2, 3), dtype), i64(*repeats)], {}, 13)


@pytest.mark.parametrize(
    "attrs",
    [{}, {"start": 1}, {"end": -1}, {"start": -2, "end": 10}, {"start": 3, "end": 1},
     {"start": -10}, {"end": 0}],
)
@pytest.mark.parametrize("xshape", [(2, 3, 4), (), (0, 5)])
def test_shape(attrs, xshape):
    x = rand(xshape, np.float32)
    check("Shape", [x], attrs, 15)
    check("Shape", [x], {}, 13)


@pytest.mark.parametrize("xshape", [(2, 3, 4), (), (0, 5), (7,)])
def test_size(xshape):
    check("Size", [rand(xshape, np.int8)], {}, 13)


@pytest.mark.parametrize("dtype", DTYPES)
def test_identity(dtype):
    check("Identity", [rand((2, 3), dtype)], {}, 16)


PADS = [(1, 2, 1, 3), (0, 2, 0, 0), (2, 0, 0, 1), (0, -1, 0, 2), (-1, 0, 1, 0), (0, 0, 0, 0)]


@pytest.mark.parametrize("pads", PADS)
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.int8, np.uint8, np.bool_])
def test_pad(pads, mode, dtype):
    x = rand((3, 4), dtype)
    inputs = [x, i64(*pads)]
    if mode == "constant" and dtype != np.bool_:
        inputs.append(np.array(7, dtype))
    check("Pad", inputs, {"mode": mode}, 19)


def test_pad_axes_opset_versions_and_large_pads():
    x = rand((3, 4), np.float32)
    check("Pad", [x, i64(1, 2), np.array(7, np.float32), i64(-1)], {}, 18)
    check("Pad", [x, i64(1, 2), None, i64(0)], {"mode": "edge"}, 18)
    check("Pad", [x, i64(1, 2, 1, 0)], {}, 11)
    check("Pad", [x, i64(1, 2, 1, 0), np.array([4.0], np.float32)], {}, 13)
    check("Pad", [x], {"pads": [1, 2, 1, 0], "value": 2.5}, 2)
    check("Pad", [x], {"pads": [1, 2, 1, 0], "mode": "reflect"}, 10)
    check("Pad", [x, i64(0, 9, 5, 0)], {"mode": "wrap"}, 19)
    check("Pad", [x, i64(0, 9, 5, 0)], {"mode": "edge"}, 19)
    check("Pad", [np.zeros((0, 2), np.float32), i64(1, 1, 1, 1)], {}, 19)
    check_declines("Pad", [x, i64(0, 4, 0, 0)], {"mode": "reflect"}, 19)
    check_declines("Pad", [np.zeros((0, 2), np.float32), i64(1, 0, 1, 0)], {"mode": "edge"}, 19)


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("dtype", DTYPES)
def test_compress(axis, dtype):
    x = rand((3, 4), dtype)
    cond = np.array([True, False, True, True])[: 3 if axis == 0 else 4]
    attrs = {} if axis is None else {"axis": axis}
    check("Compress", [x, cond], attrs, 11)
    check("Compress", [x, np.array([False, True])], attrs, 11)  # shorter condition
    check("Compress", [x, np.array([True, False, True, False, False, True])], attrs, 11)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("xshape", [(3, 4), (5,), (), (0, 3), (2, 2, 2)])
def test_non_zero(dtype, xshape):
    x = rand(xshape, dtype, lo=-1, hi=1)
    if dtype in (np.float32, np.float16, np.float64):
        x = np.round(x)
    check("NonZero", [x], {}, 13)


@pytest.mark.parametrize("sorted_", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int8])
def test_unique(sorted_, dtype):
    x = rng().integers(-3, 4, size=(4, 5)).astype(dtype)
    check("Unique", [x], {"sorted": sorted_}, 11, n_outputs=4)


def test_unique_declines():
    check_declines("Unique", [np.array([1.0, np.nan], np.float32)], {}, 11)
    check_declines("Unique", [rand((2, 3), np.int64)], {"axis": 0}, 11)


def test_shape_rule_gets_shape_only():
    assert run_rule("Shape", [np.zeros((2, 5), np.float32)], {"start": -1}, 15)[0].tolist() == [5]


def test_gather_elements_with_indices_smaller_than_data():
    from tests.support.ort_oracle import check

    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    idx = np.array([[[0, 3, 1]], [[2, 2, 0]]], dtype=np.int64)  # (2, 1, 3): smaller off-axis
    check("GatherElements", [x, idx], {"axis": 2}, opset=13)
