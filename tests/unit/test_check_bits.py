"""The check's one test of equal bits (``onnxfold.check.judging.bits``): bytes in C order,
compared in place, never values (-0.0 is not 0.0, NaNs of other payloads differ)."""

from __future__ import annotations

import numpy as np
import pytest

from onnxfold.check.judging import bits
from onnxfold.check.judging.bits import same_bits


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.int64, np.uint16])
@pytest.mark.parametrize("size", [0, 1, 7, 8, 1001, 4096])
def test_equal_arrays_are_the_same_bits_and_one_flipped_bit_is_not(dtype, size):
    rng = np.random.default_rng(size)
    a = rng.integers(0, 100, size).astype(dtype)
    assert same_bits(a, a.copy())
    if size:
        b = a.copy()
        b.view(np.uint8)[-1] ^= 1
        assert not same_bits(a, b)


def test_values_equal_in_another_form_are_not_the_same_bits():
    assert not same_bits(np.array([0.0], np.float32), np.array([-0.0], np.float32))
    nan = np.array([np.nan], np.float32)
    other = nan.view(np.uint32) | np.uint32(1)
    assert not same_bits(nan, other.view(np.float32)) and same_bits(nan, nan.copy())
    assert not same_bits(np.zeros(4, np.float32), np.zeros(4, np.int32))  # dtype
    assert not same_bits(np.zeros((2, 2)), np.zeros(4))  # shape


def test_a_transposed_view_is_compared_in_c_order(monkeypatch):
    monkeypatch.setattr(bits, "CHUNK", 64)  # several chunks
    a = np.arange(40 * 30, dtype=np.float32).reshape(40, 30)
    assert same_bits(a.T, np.ascontiguousarray(a.T))
    assert not same_bits(a.T, np.ascontiguousarray(a).reshape(30, 40))
