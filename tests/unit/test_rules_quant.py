"""rules/quant.py against onnxruntime, bitwise (including float16 scales)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.ort_oracle import check, check_declines, rand, rng

QTYPES = [np.int8, np.uint8, np.int16, np.uint16]


def _scale(shape, dtype, rs):
    return np.asarray(rs.random(shape) * 0.2 + 0.01).astype(dtype)


@pytest.mark.parametrize("qtype", [*QTYPES, np.int32])
@pytest.mark.parametrize("stype", [np.float32, np.float16])
@pytest.mark.parametrize("axis", [None, 1, -1, 0])
@pytest.mark.parametrize("with_zp", [True, False])
def test_dequantize(qtype, stype, axis, with_zp):
    rs = rng()
    info = np.iinfo(qtype)
    x = rs.integers(info.min, info.max, size=(3, 4, 5), endpoint=True).astype(qtype)
    n = 1 if axis is None else x.shape[axis]
    scale = _scale(() if axis is None else (n,), stype, rs)
    zp = None
    if with_zp and qtype != np.int32:
        zp = rs.integers(info.min, info.max, size=scale.shape, endpoint=True).astype(qtype)
    attrs = {} if axis is None else {"axis": axis}
    opset = 21 if qtype in (np.int16, np.uint16) or stype == np.float16 else 13
    check("DequantizeLinear", [x, scale, zp], attrs, opset)
    if axis is None and opset == 13:
        check("DequantizeLinear", [x, scale, zp], {}, 10)


def test_dequantize_edge_cases():
    rs = rng()
    x = np.array([2**31 - 1, -(2**31), 5], np.int32)
    check("DequantizeLinear", [x, np.float32(0.1)], {}, 21)
    check("DequantizeLinear", [x, np.array(0.1, np.float32), np.array(1, np.int32)], {}, 21)
    q = rand((2, 3), np.int8, rs, -128, 127)
    one = np.array([0.5], np.float32)
    check("DequantizeLinear", [q, one, np.array([3], np.int8)], {"axis": 1}, 21)
    check("DequantizeLinear", [q, np.array(0.5, np.float32)], {"output_dtype": 1}, 23)
    check("DequantizeLinear", [np.zeros((0, 3), np.uint8), np.float32(2)], {}, 21)
    s = np.full((2, 3), 0.5, np.float32)
    check_declines("DequantizeLinear", [q, s], {"axis": 1, "block_size": 2}, 21)
    check_declines("DequantizeLinear", [q, one.repeat(2)], {"axis": 1}, 21)


@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize("xtype", [np.float32, np.float16])
@pytest.mark.parametrize("axis", [None, 1, -1])
def test_quantize(qtype, xtype, axis):
    rs = rng()
    info = np.iinfo(qtype)
    span = float(info.max) - float(info.min)
    n = 1 if axis is None else (3, 4, 5)[axis]
    scale = _scale(() if axis is None else (n,), xtype, rs)
    x = np.asarray((rs.random((3, 4, 5)) - 0.5) * 1.3 * span * float(scale.max())).astype(xtype)
    zp = rs.integers(info.min // 4, info.max // 4, size=scale.shape).astype(qtype)
    attrs = {} if axis is None else {"axis": axis}
    opset = 21 if qtype in (np.int16, np.uint16) or xtype == np.float16 else 13
    check("QuantizeLinear", [x, scale, zp], attrs, opset)
    if axis is None and opset == 13:
        check("QuantizeLinear", [x, scale, zp], {}, 10)


@pytest.mark.parametrize("qtype", [np.int8, np.uint8])
def test_quantize_rounds_half_to_even(qtype):
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 127.5, -128.5, 300, -300], np.float32)
    check("QuantizeLinear", [x, np.float32(1.0), np.zeros((), qtype)], {}, 13)
    check("QuantizeLinear", [x, np.float32(0.5), np.array(7, qtype)], {}, 13)


def test_quantize_output_dtype_and_defaults():
    x = rand((4, 5), np.float32, rng(), -40, 40)
    check("QuantizeLinear", [x, np.float32(0.3)], {}, 13)  # uint8 without zero point
    check("QuantizeLinear", [x, np.float32(0.3)], {"output_dtype": 3}, 21)  # int8
    check("QuantizeLinear", [x, np.float32(0.3)], {"output_dtype": 5}, 21)  # int16
    check("QuantizeLinear", [np.zeros((0, 2), np.float32), np.float32(0.3)], {}, 13)


def test_quantize_declines():
    x = np.array([1.0, np.nan], np.float32)
    check_declines("QuantizeLinear", [x, np.float32(0.5), np.int8(0)], {}, 21)
    y = np.ones((2, 4), np.float32)
    check_declines("QuantizeLinear", [y, np.ones((2, 3), np.float32)], {"block_size": 2}, 21)
    check_declines("QuantizeLinear", [y, np.float32(0.5)], {"output_dtype": 17}, 21)  # float8
    check_declines("QuantizeLinear", [y, np.float32(0.0)], {}, 21)
    # blocked scales and int4 fold (tests/unit/test_qdq.py compares them with onnxruntime)
    check("QuantizeLinear", [y, np.full((2, 2), 0.5, np.float32)], {"block_size": 2}, 21)
