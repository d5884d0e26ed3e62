"""bfloat16 through the native rules, bit for bit against onnxruntime (ml_dtypes arrays)."""

import ml_dtypes
import numpy as np
import pytest

from tests.support.ort_oracle import check, rand

BF16 = ml_dtypes.bfloat16


def bf16(shape, seed=0):
    return rand(shape, np.float32, np.random.default_rng(seed)).astype(BF16)


CASES = [
    ("Transpose", lambda: [bf16((2, 3, 4))], {"perm": [2, 0, 1]}),
    ("Reshape", lambda: [bf16((2, 6)), np.array([3, -1], np.int64)], {}),
    ("Flatten", lambda: [bf16((2, 3, 4))], {"axis": 2}),
    ("Squeeze", lambda: [bf16((1, 3, 1)), np.array([0, 2], np.int64)], {}),
    ("Unsqueeze", lambda: [bf16((3,)), np.array([0, -1], np.int64)], {}),
    ("Concat", lambda: [bf16((2, 3)), bf16((1, 3), 1)], {"axis": 0}),
    ("Slice", lambda: [bf16((5, 6)), np.array([1, -1], np.int64), np.array([4, 0], np.int64),
                       np.array([0, 1], np.int64), np.array([2, -2], np.int64)], {}),
    ("Gather", lambda: [bf16((5, 3)), np.array([[0, -1], [2, 2]], np.int64)], {"axis": 0}),
    ("Expand", lambda: [bf16((3, 1)), np.array([2, 3, 4], np.int64)], {}),
    ("Tile", lambda: [bf16((2, 3)), np.array([2, 1], np.int64)], {}),
    ("Identity", lambda: [bf16((4,))], {}),
    ("Where", lambda: [np.array([True, False, True]), bf16((3,)), bf16((3,), 1)], {}),
    ("Cast", lambda: [bf16((7,))], {"to": 1}),  # bfloat16 -> float32 is exact
    ("Cast", lambda: [rand((64,), np.float32)], {"to": 16}),  # float32 -> bfloat16 rounds
    ("Split", lambda: [bf16((6, 2)), np.array([2, 4], np.int64)], {"axis": 0}),
]


@pytest.mark.parametrize("op, make, attrs", CASES, ids=[f"{c[0]}-{i}" for i, c in
                                                        enumerate(CASES)])
def test_bfloat16_matches_onnxruntime(op, make, attrs):
    n_outputs = 2 if op == "Split" else 1
    outs = check(op, make(), attrs, opset=18, n_outputs=n_outputs)
    if not (op == "Cast" and attrs["to"] == 1):
        assert outs[0].dtype == BF16


def test_float32_to_bfloat16_rounds_to_nearest_even_like_onnxruntime():
    # halfway cases and values that overflow the bfloat16 range
    x = np.array([1.00390625, 1.01171875, -1.00390625, 3.4e38, np.inf, np.nan], np.float32)
    check("Cast", [x], {"to": 16}, opset=18)
