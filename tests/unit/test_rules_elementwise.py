"""rules/elementwise.py vs onnxruntime: bitwise for arithmetic, comparisons, logic and casts;
tight allclose for transcendental functions."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.ort_oracle import check, check_declines, rand, rng

FLOATS = [np.float32, np.float16, np.float64]
INTS = [np.int32, np.int64, np.int8, np.uint8]
SHAPES = [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((2, 3, 4), (4,)), ((), (3,)), ((0, 3), (1, 3))]


def _pair(shapes, dtype, lo=-50, hi=50, nonzero=False):
    rs = rng()
    a, b = rand(shapes[0], dtype, rs, lo, hi), rand(shapes[1], dtype, rs, lo, hi)
    if nonzero:
        b = np.where(b == 0, np.ones((), dtype), b)
    return a, b


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("shapes", SHAPES)
def test_arithmetic(op, dtype, shapes):
    a, b = _pair(shapes, dtype, nonzero=op == "Div")
    check(op, [a, b], {}, 14)


def test_integer_wraparound_and_division_by_zero():
    a = np.array([2**31 - 1, -(2**31), 7, -7], np.int32)
    b = np.array([1, -1, -2, 2], np.int32)
    for op in ("Add", "Sub", "Mul", "Div"):
        check(op, [a, b], {}, 14)
    check_declines("Div", [a, np.zeros(4, np.int32)], {}, 14)


def test_float_special_values():
    a = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1.0], np.float32)
    b = np.array([np.inf, 0.0, 1.0, 0.0, 0.0, -0.0], np.float32)
    for op in ("Add", "Sub", "Mul", "Div"):
        check(op, [a, b], {}, 14)


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_mod(fmod, dtype):
    if fmod == 0 and np.dtype(dtype).kind == "f":
        pytest.skip("fmod=0 is only defined for integers")
    a, b = _pair(((4, 5), (5,)), dtype, nonzero=True)
    check("Mod", [a, b], {"fmod": fmod}, 13)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_pow_float(dtype):
    rs = rng()
    a = rand((4, 5), dtype, rs, 0.1, 4)
    b = rand((5,), dtype, rs, -3, 3)
    check("Pow", [a, b], {}, 15, exact=False)
    check("Pow", [a, np.array([2, 3, 0, 1, 2], np.int64)], {}, 15, exact=False)
    check("Pow", [-a, np.array(2.0, dtype)], {}, 15, exact=False)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_pow_int(dtype):
    rs = rng()
    a = rand((4, 5), dtype, rs, -6, 6)
    b = rand((5,), dtype, rs, 0, 6)
    check("Pow", [a, b], {}, 15)
    check_declines("Pow", [a, np.array(-1, dtype)], {}, 15)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
def test_bit_shift(direction, dtype):
    bits = np.dtype(dtype).itemsize * 8
    rs = rng()
    a = rand((3, 4), dtype, rs, 0, 255)
    b = rs.integers(0, bits, size=(4,)).astype(dtype)
    check("BitShift", [a, b], {"direction": direction}, 11)


CMP = ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]


@pytest.mark.parametrize("op", CMP)
@pytest.mark.parametrize("dtype", FLOATS + INTS + [np.bool_])
@pytest.mark.parametrize("shapes", SHAPES[:3])
def test_comparisons(op, dtype, shapes):
    a, b = _pair(shapes, dtype, -3, 3)
    check(op, [a, b], {}, 19)


def test_comparisons_nan():
    a = np.array([np.nan, 1.0, np.inf, -0.0], np.float32)
    b = np.array([np.nan, np.nan, np.inf, 0.0], np.float32)
    for op in CMP:
        check(op, [a, b], {}, 19)


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
@pytest.mark.parametrize("shapes", SHAPES)
def test_logic(op, shapes):
    check(op, list(_pair(shapes, np.bool_)), {}, 7)


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize("dtype", [*INTS, np.uint64, np.int16])
def test_bitwise(op, dtype):
    a, b = _pair(((3, 4), (4,)), dtype, -100, 100)
    check(op, [a, b], {}, 18)


@pytest.mark.parametrize("dtype", [*INTS, np.uint64])
def test_bitwise_not(dtype):
    check("BitwiseNot", [rand((3, 4), dtype, lo=-100, hi=100)], {}, 18)


EXACT_UNARY = ["Abs", "Neg", "Floor", "Ceil", "Round", "Sign", "Sqrt", "Relu", "IsNaN"]
APPROX_UNARY = {  # op: input range
    "Exp": (-10, 10), "Log": (0.01, 100), "Sin": (-7, 7), "Cos": (-7, 7), "Tan": (-1.5, 1.5),
    "Asin": (-1, 1), "Acos": (-1, 1), "Atan": (-10, 10), "Sinh": (-5, 5), "Cosh": (-5, 5),
    "Asinh": (-10, 10), "Acosh": (1, 10), "Atanh": (-0.99, 0.99), "Tanh": (-5, 5),
    "Reciprocal": (0.1, 10), "Sigmoid": (-10, 10),
}


@pytest.mark.parametrize("op", EXACT_UNARY)
@pytest.mark.parametrize("dtype", FLOATS)
def test_unary_exact(op, dtype):
    x = rand((4, 6), dtype, lo=0 if op == "Sqrt" else -5, hi=5)
    x.reshape(-1)[:4] = [0.5, -0.5, 2.5, -1.5] if op != "Sqrt" else [0.5, 0, 2.5, 4]
    check(op, [x], {}, 13)


def test_unary_special_values():
    x = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40, -1e-40], np.float32)
    for op in ["Abs", "Neg", "Floor", "Ceil", "Round", "Sign", "Relu", "IsNaN", "Exp", "Sigmoid"]:
        check(op, [x], {}, 13)
    for attrs in ({}, {"detect_negative": 0}, {"detect_positive": 0}):
        check("IsInf", [x], attrs, 10)


@pytest.mark.parametrize("op", ["Abs", "Neg", "Sign", "Relu"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8])
def test_unary_int(op, dtype):
    check(op, [rand((4, 6), dtype, lo=-100, hi=100)], {}, 14)


@pytest.mark.parametrize("op", sorted(APPROX_UNARY))
@pytest.mark.parametrize("dtype", FLOATS)
def test_unary_approx(op, dtype):
    lo, hi = APPROX_UNARY[op]
    x = rand((4, 25), dtype, lo=lo, hi=hi)
    check(op, [x], {}, 13, exact=False, atol=1e-7)


def test_not():
    check("Not", [rand((3, 4), np.bool_)], {}, 1 + 5)


@pytest.mark.parametrize("dtype", FLOATS + INTS + [np.bool_])
def test_where(dtype):
    rs = rng()
    cond = rand((3, 1), np.bool_, rs)
    check("Where", [cond, rand((3, 4), dtype, rs), rand((4,), dtype, rs)], {}, 16)


@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_variadic(op, dtype, n):
    rs = rng()
    shapes = [(3, 4), (4,), (3, 1)][:n]
    xs = [rand(s, dtype, rs) for s in shapes]
    exact = op in ("Max", "Min") or np.dtype(dtype).kind != "f" or n < 3
    check(op, xs, {}, 13, exact=exact)


def test_max_min_nan():
    a = np.array([np.nan, 1.0, 2.0], np.float32)
    b = np.array([0.0, np.nan, 1.0], np.float32)
    check("Max", [a, b], {}, 13)
    check("Min", [a, b], {}, 13)


@pytest.mark.parametrize("dtype", [*FLOATS, np.int32, np.int64, np.uint8])
@pytest.mark.parametrize("bounds", [(None, None), (-1, None), (None, 2), (-2, 3), (3, -2)])
def test_clip(dtype, bounds):
    shift = 5 if np.dtype(dtype).kind == "u" else 0
    x = rand((4, 5), dtype, lo=-5 + shift, hi=5 + shift)
    lo, hi = (None if v is None else np.array(v + shift, dtype) for v in bounds)
    check("Clip", [x, lo, hi], {}, 13)


def test_clip_v6():
    x = rand((4, 5), np.float32)
    check("Clip", [x], {}, 6)
    check("Clip", [x], {"min": -1.5, "max": 2.25}, 6)
    check("Clip", [x], {"max": 0.5}, 6)


CASTS = [
    (np.float32, np.float16), (np.float16, np.float32), (np.float64, np.float32),
    (np.float32, np.float64), (np.float32, np.int32), (np.float32, np.int8),
    (np.float64, np.int64), (np.int64, np.float32), (np.int32, np.float16),
    (np.int64, np.int32), (np.int32, np.int8), (np.int8, np.uint8), (np.uint8, np.int64),
    (np.bool_, np.float32), (np.float32, np.bool_), (np.int64, np.bool_), (np.bool_, np.int32),
    (np.int64, np.int64), (np.float16, np.int32),
]


@pytest.mark.parametrize("src,dst", CASTS)
def test_cast(src, dst):
    from onnxfold.ir.dtypes import onnx_type

    x = rand((5, 6), src, lo=-100, hi=100)
    if np.dtype(src).kind == "f":
        x.reshape(-1)[:6] = [0.5, -0.5, 1.5, 2.7, -2.7, 0.0]
        if np.dtype(dst).kind == "f":
            x.reshape(-1)[6:10] = [1e-8, 70000.0, 1e39, np.nan]  # rounding, overflow to inf
    check("Cast", [x], {"to": onnx_type(np.dtype(dst))}, 13)
    check("CastLike", [x, np.zeros((), dst)], {}, 15)


def test_cast_declines_nan_to_int():
    check_declines("Cast", [np.array([np.nan], np.float32)], {"to": 6}, 13)


def test_clip_nan_passes_through():
    x = np.array([np.nan, -3.0, 0.5, 9.0, -np.inf], np.float32)
    check("Clip", [x, np.array(-1, np.float32), np.array(1, np.float32)], {}, 13)
    check("Clip", [x], {"min": -1.0, "max": 1.0}, 6)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_cast_declines_out_of_range_to_int(dtype):
    check_declines("Cast", [np.array([1.0, 300.0], dtype)], {"to": 3}, 13)  # int8
    check("Cast", [np.array([-128.9, 127.9, -0.5], dtype)], {"to": 3}, 13)  # truncates in range


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_sign_of_nan_as_onnxruntime(dtype):
    """onnxruntime's float16 and bfloat16 Sign give 0 for NaN, float and double keep NaN: a
    folded Sign of a float16 constant holding NaN gives what onnxruntime gives."""
    import ml_dtypes

    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    x = np.array([np.nan, -np.nan, 0.0, -0.0, 2.0, -3.0], np.float32).astype(np_dtype)
    got = check("Sign", [x], {}, 13)[0]
    assert np.isnan(np.asarray(got[:2], np.float32)).all() == (dtype in ("float32", "float64"))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("bounds", ["none", "min", "max"])
def test_clip_with_a_missing_bound_makes_infinities_finite_as_onnxruntime(dtype, bounds):
    """A missing bound is the type's lowest/highest finite value in onnxruntime: -inf becomes
    -65504 in float16, NaN stays."""
    x = np.array([-np.inf, np.inf, np.nan, 1.0, -3.0], dtype)
    lo = np.array(-2.0, dtype) if bounds == "min" else None
    hi = np.array(2.0, dtype) if bounds == "max" else None
    got = check("Clip", [x, lo, hi], {}, 13)[0]
    assert np.isfinite(got[:2]).all()
