"""``all_graphs`` lists a model's graphs in onnx-ir's ``Model.graphs()`` order (each graph
before the graphs inside it, a node's graphs in attribute order), through GRAPH and GRAPHS
attributes and nodes without attributes; ``subgraphs`` gives one node's."""

from __future__ import annotations

import onnx_ir as ir
from onnx import TensorProto, helper

from onnxfold.ir.graph import all_graphs, subgraphs


def _vi(name: str) -> object:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [1])


def _body(name: str, nodes: list | None = None) -> object:
    return helper.make_graph(nodes or [helper.make_node("Identity", ["x"], [f"{name}_o"])],
                             name, [], [_vi(f"{name}_o")])


def _model() -> ir.Model:
    inner_if = helper.make_node("If", ["c"], ["i_o"], then_branch=_body("inner_then"),
                                else_branch=_body("inner_else"))
    outer_if = helper.make_node("If", ["c"], ["y"], name="outer",
                                then_branch=_body("then", [inner_if, helper.make_node(
                                    "Identity", ["i_o"], ["then_o"])]),
                                else_branch=_body("else"))
    listed = helper.make_node("Group", ["x"], ["z"], domain="custom",
                              bodies=[_body("first"), _body("second")])
    graph = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["n"]), outer_if, listed], "main",
        [_vi("x"), helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [_vi("y"), _vi("z")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                    helper.make_opsetid("custom", 1)])
    return ir.serde.deserialize_model(proto)


def test_all_graphs_is_onnx_ir_s_order():
    model = _model()
    names = [g.name for g in all_graphs(model)]
    assert names == [g.name for g in model.graphs()]
    # (onnx.helper writes a node's attributes sorted by name: else_branch first)
    assert names == ["main", "else", "then", "inner_else", "inner_then", "first", "second"]


def test_subgraphs_of_one_node():
    nodes = list(_model().graph)
    assert [[g.name for g in subgraphs(n)] for n in nodes] == [
        [], ["else", "then"], ["first", "second"]]
