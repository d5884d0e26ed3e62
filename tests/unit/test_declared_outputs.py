"""A folded model's outputs keep the types and dim names they were declared with (issue 55):
a rewrite that puts another value in an output's place (``drop_neutral_element`` removing
``+ 0``) gave the output that value's inferred dims, ``unk__0`` for ``batch``. The exports:
``tests/exports/test_interface_on_exports.py``."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

import onnxfold
from tests.support.models import make_model, tensor, vinfo


def _dims(proto) -> list[list[str | int]]:
    return [[d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]
            for value in proto.graph.output]


def _plus_zero(declared):
    """``out = Relu(Expand(x, shape)) + 0``: inference cannot name Expand's dims."""
    nodes = [helper.make_node("Expand", ["x", "shape"], ["e"]),
             helper.make_node("Relu", ["e"], ["r"]),
             helper.make_node("Add", ["r", "zero"], ["out"])]
    return make_model(nodes, [vinfo("x", shape=["batch", 4]),
                              vinfo("shape", TensorProto.INT64, shape=[2])],
                      [vinfo("out", shape=declared)], [tensor("zero", np.zeros(4, np.float32))])


def test_an_output_a_rewrite_replaced_keeps_its_declared_dims():
    folded = onnxfold.optimize(_plus_zero(["batch", 4])).to_proto()
    assert [n.op_type for n in folded.graph.node] == ["Expand", "Relu"]  # the + 0 went
    assert _dims(folded) == [["batch", 4]]
    assert folded.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT


def test_a_declared_dim_without_a_name_takes_what_the_run_found():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "zero"], ["y"])]
    model = make_model(nodes, [vinfo("x", shape=["batch", 4])], [vinfo("y", shape=[None, 4])],
                       [tensor("zero", np.zeros(4, np.float32))])
    assert _dims(onnxfold.optimize(model).to_proto()) == [["batch", 4]]


def test_a_dim_the_run_made_static_stays_static():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "zero"], ["y"])]
    model = make_model(nodes, [vinfo("x", shape=["batch", 4])], [vinfo("y", shape=["batch", 4])],
                       [tensor("zero", np.zeros(4, np.float32))])
    assert _dims(onnxfold.optimize(model, input_shapes=["x:3,4"]).to_proto()) == [[3, 4]]
