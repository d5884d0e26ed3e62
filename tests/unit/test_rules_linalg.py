"""rules/linalg.py vs onnxruntime: exact for integers and Trilu, allclose for float products."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.ort_oracle import check, check_declines, rand, rng

MM_DTYPES = [np.float32, np.float16, np.float64, np.int32, np.int64]
MM_SHAPES = [
    ((3, 4), (4, 5)),
    ((4,), (4, 5)),
    ((3, 4), (4,)),
    ((4,), (4,)),
    ((2, 1, 3, 4), (5, 4, 2)),
    ((2, 3, 4), (4, 6)),
    ((3, 0), (0, 2)),
    ((0, 4), (4, 2)),
    ((1, 16), (16, 1)),
]


def _exact(dtype):
    return np.dtype(dtype).kind in "iu"


@pytest.mark.parametrize("dtype", MM_DTYPES)
@pytest.mark.parametrize("a_shape,b_shape", MM_SHAPES)
def test_mat_mul(dtype, a_shape, b_shape):
    rs = rng()
    a, b = rand(a_shape, dtype, rs, -3, 3), rand(b_shape, dtype, rs, -3, 3)
    check("MatMul", [a, b], {}, 13, exact=_exact(dtype), atol=1e-5)


def test_gemm_integer_declines_fractional_alpha():
    a = rand((2, 2), np.int64)
    check_declines("Gemm", [a, a, a], {"alpha": 0.5}, 13)


def test_mat_mul_declines():
    check_declines("MatMul", [rand((2, 2), np.uint8), rand((2, 2), np.uint8)], {}, 13)
    check_declines("MatMul", [rand((2, 3), np.float32), rand((2, 3), np.float32)], {}, 13)


GEMM_CASES = [
    ({}, (3,)),
    ({"transA": 1}, (1, 3)),
    ({"transB": 1, "alpha": 0.5}, (2, 1)),
    ({"transA": 1, "transB": 1, "alpha": 2.0, "beta": 0.25}, (2, 3)),
    ({"beta": 0.0}, (2, 3)),
    ({"alpha": -1.5}, ()),
    ({}, None),
]


@pytest.mark.parametrize("attrs,c_shape", GEMM_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_gemm(attrs, c_shape, dtype):
    rs = rng()
    a = rand((4, 2) if attrs.get("transA") else (2, 4), dtype, rs, -3, 3)
    b = rand((3, 4) if attrs.get("transB") else (4, 3), dtype, rs, -3, 3)
    c = None if c_shape is None else rand(c_shape, dtype, rs, -3, 3)
    if attrs.get("beta") == 0.0:
        c[0, 0] = np.nan  # ignored when beta is 0
    check("Gemm", [a, b, c], attrs, 13, exact=False, atol=1e-5)
    if c is not None:
        check("Gemm", [a, b, c], attrs, 9, exact=False, atol=1e-5)


EINSUM = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("ij,jk", [(2, 3), (3, 4)]),
    ("bij,bjk->bik", [(2, 2, 3), (2, 3, 4)]),
    ("ii->i", [(3, 3)]),
    ("ij->ji", [(2, 3)]),
    ("i,i", [(5,), (5,)]),
    ("...ij,...jk->...ik", [(2, 2, 3), (2, 3, 2)]),
    ("ij,kj->ik", [(2, 3), (4, 3)]),
    ("bA,Ab", [(2, 3), (3, 2)]),
    ("i j , j k -> i k", [(2, 3), (3, 4)]),
    ("ijk->", [(2, 3, 4)]),
]


@pytest.mark.parametrize("equation,shapes", EINSUM)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.float16])
def test_einsum(equation, shapes, dtype):
    rs = rng()
    xs = [rand(s, dtype, rs, -3, 3) for s in shapes]
    check("Einsum", xs, {"equation": equation}, 12, exact=_exact(dtype), atol=1e-5)


@pytest.mark.parametrize("k", [None, 0, 1, -1, 3, -5])
@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_, np.float16, np.int8])
@pytest.mark.parametrize("shape", [(3, 4), (2, 4, 3), (0, 3), (3, 3)])
def test_trilu(k, upper, dtype, shape):
    x = rand(shape, dtype)
    check("Trilu", [x, None if k is None else np.array(k, np.int64)], {"upper": upper}, 14)
