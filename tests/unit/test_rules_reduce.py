"""rules/reduce.py vs onnxruntime: exact for integers and max/min, tight allclose for floats."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.ort_oracle import check, check_declines, rand, rng

REDUCE_OPS = [
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceSumSquare", "ReduceLogSumExp", "ReduceLogSum",
]
FLOAT_ONLY = {"ReduceL2", "ReduceLogSumExp", "ReduceLogSum"}
DTYPES = [np.float32, np.float16, np.float64, np.int32, np.int64]
AXES = [None, [1], [-1], [0, 2], [-1, 0, 1], []]


def _data(op, dtype, shape=(3, 4, 5)):
    if op == "ReduceProd":
        lo, hi = (-2, 2) if np.dtype(dtype).kind in "iu" else (0.5, 1.5)
    elif op == "ReduceLogSum":
        lo, hi = 0.1, 3
    else:
        lo, hi = -5, 5
    return rand(shape, dtype, lo=lo, hi=hi)


def _exact(op, dtype):
    return np.dtype(dtype).kind in "iub" or op in ("ReduceMax", "ReduceMin")


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axes", AXES)
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_axes_input(op, dtype, axes, keepdims):
    if op in FLOAT_ONLY and np.dtype(dtype).kind != "f":
        check_declines(op, [_data(op, dtype), None], {}, 18)
        return
    x = _data(op, dtype)
    attrs = {"keepdims": keepdims}
    axes_in = None if axes is None else np.array(axes, np.int64)
    check(op, [x, axes_in], attrs, 18, exact=_exact(op, dtype))
    if axes == []:
        attrs["noop_with_empty_axes"] = 1
        check(op, [x, axes_in], attrs, 18, exact=_exact(op, dtype))


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("axes", [None, [1], [-1, 0]])
def test_reduce_axes_attribute(op, axes):
    x = _data(op, np.float32)
    attrs = {"keepdims": 0} if axes is None else {"axes": axes}
    opset = 11 if op == "ReduceSum" else 13
    check(op, [x], attrs, opset, exact=_exact(op, np.float32))


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("shape,axes", [((0, 3), [1]), ((0, 3), [0]), ((0, 3), None), ((), None)])
def test_reduce_empty_and_scalar(op, shape, axes):
    x = _data(op, np.float32, shape)
    axes_in = None if axes is None else np.array(axes, np.int64)
    empty_reduction = x.size == 0 and (axes is None or shape[axes[0]] == 0)
    if empty_reduction and op in ("ReduceMax", "ReduceMin", "ReduceMean"):
        check_declines(op, [x, axes_in], {}, 18)  # onnxruntime gives -inf/+inf/0 here
        return
    check(op, [x, axes_in], {}, 18, exact=_exact(op, np.float32))


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.bool_])
def test_reduce_max_min_small_types(op, dtype):
    x = rand((3, 4), dtype)
    check(op, [x, np.array([1], np.int64)], {}, 20)


def test_reduce_max_nan_and_overflow():
    x = np.array([[3, np.nan, 7], [1, 2, 2]], np.float32)
    check_declines("ReduceMax", [x, np.array([1], np.int64)], {}, 18)
    big = np.full((4, 3), 2**30, np.int32)
    ax0 = np.array([0], np.int64)
    for op in ("ReduceSum", "ReduceMean", "ReduceProd", "ReduceSumSquare", "ReduceL1"):
        check_declines(op, [big, ax0], {}, 18)  # onnxruntime saturates
    check("ReduceSum", [big[:1], ax0], {}, 13)
    cancel = np.array([[2**62], [2**62], [-(2**62)], [-(2**62)]], np.int64)
    check_declines("ReduceSum", [cancel, ax0], {}, 13)  # beyond 2**53: onnxruntime uses double
    check_declines("ReduceSum", [np.array([2**62, 3], np.int64), None], {}, 18)  # it rounds
    check("ReduceMax", [cancel, ax0], {}, 18)  # max and min are exact
    check("ReduceProd", [np.array([[2**20, 2**20, 0]], np.int32), None], {}, 18)
    check("ReduceMean", [np.array([[-3, -4, 0, 5]], np.int64), None], {}, 18)


def test_reduce_log_sum_exp_infinities():
    x = np.array([[1000, 1000], [-1000, 3]], np.float32)
    check("ReduceLogSumExp", [x, np.array([1], np.int64)], {}, 18, exact=False)
    # onnxruntime's kernel gives -inf for [-inf, -1e4]: infinities are its
    for row in ([-np.inf, -np.inf], [np.inf, 1], [-np.inf, -1e4]):
        check_declines("ReduceLogSumExp", [np.array([row], np.float32), None], {}, 18)


ARG_DTYPES = [np.float32, np.float16, np.float64, np.int32, np.int64, np.int8, np.uint8]


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("dtype", ARG_DTYPES)
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_max_min(op, dtype, axis, keepdims, last):
    x = rand((3, 4, 5), dtype, lo=-2, hi=2)  # many ties
    x = np.round(x).astype(dtype)
    attrs = {"axis": axis, "keepdims": keepdims, "select_last_index": last}
    check(op, [x], attrs, 13)
    if not last:
        check(op, [x], {"axis": axis, "keepdims": keepdims}, 11)


def test_arg_max_edge_cases():
    check("ArgMax", [np.zeros((0, 3), np.float32)], {"axis": 1}, 13)
    check_declines("ArgMax", [np.zeros((2, 0), np.float32)], {"axis": 1}, 13)
    check_declines("ArgMin", [np.array([1, np.nan], np.float32)], {}, 13)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.float16])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
def test_cum_sum(dtype, axis, exclusive, reverse):
    x = rand((4, 6), dtype, rng())
    attrs = {"exclusive": exclusive, "reverse": reverse}
    exact = np.dtype(dtype).kind in "iu"
    check("CumSum", [x, np.array(axis, np.int64)], attrs, 14, exact=exact)
    check("CumSum", [x, np.array([axis], np.int32)], attrs, 11, exact=exact)


def test_cum_sum_empty():
    check("CumSum", [np.zeros((0, 3), np.float32), np.array(0, np.int64)], {"exclusive": 1}, 14)
    check("CumSum", [np.zeros((2, 0), np.int64), np.array(1, np.int64)], {"reverse": 1}, 14)


def test_large_float_reductions():
    rs = rng()
    x32 = rs.standard_normal((64, 300)).astype(np.float32)
    for op in ("ReduceSum", "ReduceMean", "ReduceL2", "ReduceLogSumExp", "ReduceSumSquare"):
        check(op, [x32, np.array([1], np.int64)], {}, 18, exact=False, rtol=1e-5, atol=1e-5)
        x16 = x32.astype(np.float16)
        check(op, [x16, np.array([1], np.int64)], {}, 18, exact=False, rtol=3e-3, atol=1e-2)


@pytest.mark.parametrize("opset", [18, 21])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_reduce_log_sum_exp_of_half_floats_folds_as_onnxruntime_computes_it(opset, dtype):
    """onnxruntime has no float16/bfloat16 kernel: in a model of opset 18 it runs the op's
    function body (exp in double, no maximum subtracted: 1e4 gives inf), at other opsets its
    float32 kernel (a number). The rule cannot see the opset: it
    declines where the two differ, and the model folds through onnxruntime, bit for bit."""
    import ml_dtypes
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from onnxfold import optimize

    np_dtype = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
    x = np.array([[-2.49, -2.92], [1.8, 1.0e4], [300.0, -1.0e4]], np.float32).astype(np_dtype)
    check_declines("ReduceLogSumExp", [x, np.array([0], np.int64)], {"keepdims": 0}, opset)
    small = np.array([[-2.49, 0.5], [1.8, 3.0]], np.float32).astype(np_dtype)
    check("ReduceLogSumExp", [small, np.array([0], np.int64)], {"keepdims": 0}, opset)
    if dtype == "bfloat16":
        return  # (onnxruntime's Python API hands no bfloat16 output back to compare)
    graph = helper.make_graph(
        [helper.make_node("ReduceLogSumExp", ["c", "axes"], ["y"], keepdims=0)], "g", [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2])],
        [numpy_helper.from_array(x, "c"), numpy_helper.from_array(np.array([0], np.int64),
                                                                  "axes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    folded = optimize(model).to_proto()
    assert [n.op_type for n in folded.graph.node] == []  # folded, through onnxruntime
    runs = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
            .run(None, {})[0] for m in (model, folded)]
    assert runs[0].tobytes() == runs[1].tobytes()
    assert bool(np.isinf(runs[0][1])) == (opset == 18)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_reduce_log_sum_exp_declines_a_nan_whose_place_decides(dtype):
    """onnxruntime's kernel gives inf for [inf, NaN] and NaN for [NaN, inf] (its maximum skips
    a NaN that comes after an inf): the rule declines, onnxruntime folds it."""
    for row in ([np.inf, np.nan], [np.nan, np.inf], [1.0, np.nan]):
        check_declines("ReduceLogSumExp", [np.array([row], dtype), None], {}, 18)
