"""A model-local function whose Constant takes its caller's attribute (``ref_attr_name``) is
a valid model (onnx's full check passes it, onnxruntime runs it); its check ended in an
internal error where the fold verification read that Constant's tensor, which only the call
gives (a hunt over models onnx's checker refuses found it, on this one it accepts)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

import onnxfold

F = TensorProto.FLOAT


def _caller_fills(kind: str) -> onnx.ModelProto:
    """y = x + fill, ``fill`` the call's attribute (a tensor, or floats), read in the body by
    a Constant's ``value`` or ``value_floats`` taking it."""
    attribute = "value" if kind == "tensor" else "value_floats"
    taken = helper.make_attribute_ref(
        attribute, onnx.AttributeProto.TENSOR if kind == "tensor" else onnx.AttributeProto.FLOATS)
    taken.ref_attr_name = "fill"
    body_constant = helper.make_node("Constant", [], ["c"])
    body_constant.attribute.append(taken)
    function = helper.make_function(
        "local", "AddFill", ["a"], ["b"], [body_constant, helper.make_node("Add", ["a", "c"],
                                                                           ["b"])],
        [helper.make_opsetid("", 17)], attributes=["fill"])
    fill = helper.make_tensor("f", F, [2], [2.0, 3.0]) if kind == "tensor" else [2.0, 3.0]
    call = helper.make_node("AddFill", ["x"], ["y"], domain="local", fill=fill)
    graph = helper.make_graph([call], "g", [helper.make_tensor_value_info("x", F, ["n", 2])],
                              [helper.make_tensor_value_info("y", F, ["n", 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("local", 1)],
                              functions=[function], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    return model


def test_a_body_constant_taking_its_callers_attribute_is_checked():
    for kind in ("tensor", "floats"):
        model = _caller_fills(kind)
        x = np.ones((3, 2), np.float32)
        want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
        np.testing.assert_array_equal(want, x + np.array([2.0, 3.0], np.float32))
        folded, ok = onnxfold.simplify(model, check_n=3)
        assert ok, kind
        got = ort.InferenceSession(folded.SerializeToString()).run(None, {"x": x})[0]
        np.testing.assert_array_equal(got, want)
