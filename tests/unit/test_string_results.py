"""A fold whose result is a tensor of strings is not stored: its node stays and computes it at
run time. A Cast of a constant to STRING (onnxruntime computes it for the fold) ended in an
internal error when the model was written (onnx-ir cannot write a string tensor held as an
array), or, where the output was declared STRING, in a fold skipped with "please report"."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxfold
from tests.support.models import make_model, tensor, vinfo


@pytest.mark.parametrize("declared", [TensorProto.STRING, TensorProto.FLOAT])
def test_a_cast_of_a_constant_to_strings_stays(declared):
    model = make_model([helper.make_node("Cast", ["c"], ["y"], to=TensorProto.STRING),
                        helper.make_node("Identity", ["x"], ["z"])],
                       [vinfo("x", TensorProto.FLOAT, [2])],
                       [vinfo("y", declared, [2, 3]), vinfo("z", TensorProto.FLOAT, [2])],
                       [tensor("c", np.ones((2, 3), np.float32))])
    result = onnxfold.optimize(model)
    folded = result.to_proto()
    assert [n.op_type for n in folded.graph.node].count("Cast") == 1
    assert not any("please report" in w for w in result.report.warnings + result.report
                   .skipped_steps)
    assert "a tensor of strings is not stored" in str(result.report.declined_nodes)
    if declared == TensorProto.STRING:  # (onnxruntime refuses the other: its declared type)
        got = ort.InferenceSession(folded.SerializeToString()).run(
            ["y"], {"x": np.zeros(2, np.float32)})[0]
        assert got.tolist() == [["1"] * 3] * 2
