"""Model-local functions: ``--inline-functions`` inlines them, then the constants in their
bodies fold with the rest; without it they are kept as they are."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from onnxfold import FoldOptions, optimize
from tests.support.models import tensor, vinfo


def _model():
    body = [helper.make_node("Constant", [], ["c"], value=tensor("cv", np.full(4, 2.0,
                                                                               np.float32))),
            helper.make_node("Neg", ["c"], ["nc"]),
            helper.make_node("Mul", ["a", "nc"], ["b"])]
    fn = helper.make_function("local", "scale", ["a"], ["b"], body,
                              [helper.make_opsetid("", 17)])
    graph = helper.make_graph([helper.make_node("scale", ["x"], ["y"], domain="local")], "g",
                              [vinfo("x", shape=[4])], [vinfo("y", shape=[4])])
    model = helper.make_model(graph, functions=[fn], opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    model.ir_version = 8
    return model


def _run(model):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": np.arange(4, dtype=np.float32)})[0]


def test_inlined_functions_fold():
    original = _model()
    folded = optimize(original, FoldOptions(inline_functions=True)).to_proto()
    assert [n.op_type for n in folded.graph.node] == ["Mul"] and not folded.functions
    np.testing.assert_array_equal(_run(folded), _run(original))


def test_functions_stay_without_the_flag():
    original = _model()
    folded = optimize(original).to_proto()
    assert [n.op_type for n in folded.graph.node] == ["scale"] and len(folded.functions) == 1
    onnx.checker.check_model(folded)
    np.testing.assert_array_equal(_run(folded), _run(original))
