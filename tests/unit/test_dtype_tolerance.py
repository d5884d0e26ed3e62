"""``compare`` picks each output's tolerance from its dtype (real onnxruntime runs).

float16 outputs are compared in ulps, so a model that rounds to float16 once (through float32)
matches one that rounds after every op, while a weight moved by 4 ulps does not; float32 keeps
rtol 1e-4 / atol 1e-5 (and the magnitude of each element's summed terms where those fail:
``tests/unit/test_summed_magnitudes.py``), integer outputs must be equal, and ``rtol``/``atol``
still override.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxfold
from onnxfold.check.judging.tolerance import for_dtype, ulp

F16 = TensorProto.FLOAT16


def _model(nodes, initializers, elem=F16):
    graph = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info("x", elem, [64, 256])],
        [helper.make_tensor_value_info("y", elem, [64, 256])],
        [numpy_helper.from_array(a, n) for n, a in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _weights(dtype=np.float16):
    rng = np.random.default_rng(1)
    return rng.standard_normal(256).astype(dtype), rng.standard_normal(256).astype(dtype)


def half_rounded_each_op(w, b):
    """y = x*w + b with the product rounded to float16 before the Add (explicit Casts: ops
    without a float16 kernel run in float32, and onnxruntime drops the Casts it inserts)."""
    return _model([helper.make_node("Cast", ["x"], ["x32"], to=TensorProto.FLOAT),
                   helper.make_node("Cast", ["w"], ["w32"], to=TensorProto.FLOAT),
                   helper.make_node("Cast", ["b"], ["b32"], to=TensorProto.FLOAT),
                   helper.make_node("Mul", ["x32", "w32"], ["t32"]),
                   helper.make_node("Cast", ["t32"], ["t"], to=F16),
                   helper.make_node("Cast", ["t"], ["t_again"], to=TensorProto.FLOAT),
                   helper.make_node("Add", ["t_again", "b32"], ["y32"]),
                   helper.make_node("Cast", ["y32"], ["y"], to=F16)], {"w": w, "b": b})


def half_rounded_once(w, b):
    """The same y computed in float32 and rounded to float16 once (what a fused kernel does)."""
    return _model([helper.make_node("Cast", ["x"], ["x32"], to=TensorProto.FLOAT),
                   helper.make_node("Cast", ["w"], ["w32"], to=TensorProto.FLOAT),
                   helper.make_node("Cast", ["b"], ["b32"], to=TensorProto.FLOAT),
                   helper.make_node("Mul", ["x32", "w32"], ["t"]),
                   helper.make_node("Add", ["t", "b32"], ["y32"]),
                   helper.make_node("Cast", ["y32"], ["y"], to=F16)], {"w": w, "b": b})


def test_float16_rounding_differences_pass_by_default():
    w, b = _weights()
    result = onnxfold.compare(half_rounded_once(w, b), half_rounded_each_op(w, b), n=2)
    [row] = result.rows
    assert not row.bitwise_equal and row.max_ulps is not None and row.max_ulps > 0
    assert result.ok, result.summary()
    assert "ulp" in row.tolerance
    # the float32 tolerance, forced on float16 outputs, fails the same honest pair
    assert not onnxfold.compare(half_rounded_once(w, b), half_rounded_each_op(w, b),
                                rtol=1e-4).ok


def test_a_weight_moved_by_four_ulps_fails():
    w, b = _weights()
    moved = w.copy()
    for _ in range(4):
        moved = np.nextafter(moved, np.float16(np.inf) * np.sign(moved)).astype(np.float16)
    result = onnxfold.compare(half_rounded_once(w, b), half_rounded_once(moved, b), n=2)
    [row] = result.rows
    assert not result.ok and row.mismatches > 0 and row.max_ulps >= 3, result.summary()


def _affine32(w, b):
    return _model([helper.make_node("Mul", ["x", "w"], ["t"]),
                   helper.make_node("Add", ["t", "b"], ["y"])], {"w": w, "b": b},
                  TensorProto.FLOAT)


def test_float32_keeps_a_tight_tolerance_that_rtol_overrides():
    w, b = _weights(np.float32)
    nudged = w * np.float32(1 + 1e-3)
    result = onnxfold.compare(_affine32(w, b), _affine32(nudged, b))
    [row] = result.rows
    assert not result.ok and row.tolerance == "rtol 0.0001, atol 1e-05 + 64u of |terms|"
    assert onnxfold.compare(_affine32(w, b), _affine32(nudged, b), rtol=1e-2, atol=1e-2).ok


@pytest.mark.parametrize(("dtype", "expected"), [
    (np.float16, "2 ulp + 1 ulp of max |x|"),
    (np.float32, "rtol 0.0001, atol 1e-05 + 64u of |terms|"),
    (np.float64, "rtol 0.0001, atol 1e-05 + 64u of |terms|"),
    (np.int64, "exact"), (np.bool_, "exact")])
def test_tolerance_by_dtype(dtype, expected):
    assert for_dtype(np.dtype(dtype)).describe() == expected


def test_ulp_of_half_values():
    values = np.array([1.0, 2.0, 0.5, 0.0, 65504.0])
    assert ulp(values, "float16").tolist() == [2**-10, 2**-9, 2**-11, 2**-24, 32.0]
    assert ulp(values, "int64") is None
