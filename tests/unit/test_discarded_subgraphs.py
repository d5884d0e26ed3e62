"""A subgraph a rewrite discards (the branch an ``If`` of a constant condition does not take,
inlined away) is not swept later in the same round: its nodes read nothing of the model any
more (their outer values were cut), so its rewrites and rejections would count for a graph that
is gone, and the driver's update of its shape values would keep what a whole walk no longer
gives (14 such sweeps on silero_vad)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper as nh

from onnxfold.declare.catalogue import load_catalogue
from onnxfold.rewrite import sweep
from onnxfold.rewrite.driver import rewrite


def _if_model(taken: bool) -> ir.Model:
    """y = If(taken, then: Identity(x), else: x + Transpose(Cast(c)) - each branch has nodes
    a rule can look at."""
    then_graph = h.make_graph([h.make_node("Identity", ["x"], ["t"])], "then", [],
                              [h.make_tensor_value_info("t", TensorProto.FLOAT, ["N", 4])])
    constant = nh.from_array(np.arange(4, dtype=np.float16).reshape(4, 1), "cv")
    else_graph = h.make_graph(
        [h.make_node("Constant", [], ["c"], value=constant),
         h.make_node("Cast", ["c"], ["w"], to=TensorProto.FLOAT),
         h.make_node("Transpose", ["w"], ["f"], perm=[1, 0]),
         h.make_node("Reshape", ["x", "shape"], ["r"]),
         h.make_node("Add", ["r", "f"], ["o"])], "else", [],
        [h.make_tensor_value_info("o", TensorProto.FLOAT, ["N", 4])],
        [nh.from_array(np.array([-1, 4], np.int64), "shape")])
    graph = h.make_graph(
        [h.make_node("Constant", [], ["cond"], value=nh.from_array(np.array(taken), "v")),
         h.make_node("If", ["cond"], ["y"], then_branch=then_graph, else_branch=else_graph)],
        "g", [h.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [h.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return ir.from_proto(model)


@pytest.mark.parametrize("taken", [True, False])
def test_a_branch_inlined_away_is_not_swept(monkeypatch, taken):
    model = _if_model(taken)
    node = next(n for n in model.graph if n.op_type == "If")
    branches = {name: node.attributes[name].as_graph()
                for name in ("then_branch", "else_branch")}
    swept: list[ir.Graph] = []
    run = sweep.Sweep.run
    monkeypatch.setattr(sweep.Sweep, "run", lambda self: swept.append(self.state.graph)
                        or run(self))
    result = rewrite(model, load_catalogue())
    assert result.hits["inline_constant_if"] == 1
    assert [n.op_type for n in model.graph][-1] == ("Identity" if taken else "Add")
    assert swept and all(g is model.graph for g in swept), \
        [g.name for g in swept]  # neither branch: one inlined, the other discarded
    assert not any(g in swept for g in branches.values())
