"""``all_graphs`` lists a model's graphs in onnx-ir's ``Model.graphs()`` order (each graph
before the graphs inside it, a node's graphs in attribute order), through GRAPH and GRAPHS
attributes and nodes without attributes; ``subgraphs`` gives one node's; the node bound's walk
of the proto lists the same graphs as ``graph_protos`` and counts those of function bodies."""

from __future__ import annotations

import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

from onnxfold.errors import InputError
from onnxfold.io.node_bound import MAX_NODES_ENV, refuse_too_many_nodes
from onnxfold.ir.graph import all_graphs, subgraphs
from onnxfold.ir.protos import graph_protos


def _vi(name: str) -> object:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [1])


def _body(name: str, nodes: list | None = None) -> object:
    return helper.make_graph(nodes or [helper.make_node("Identity", ["x"], [f"{name}_o"])],
                             name, [], [_vi(f"{name}_o")])


def _proto() -> onnx.ModelProto:
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
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                   helper.make_opsetid("custom", 1)])


def _model() -> ir.Model:
    return ir.serde.deserialize_model(_proto())


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


def test_the_node_bound_lists_graph_protos_graphs():
    proto = _proto()
    assert [g.name for g in refuse_too_many_nodes(proto, "m")] == \
        [g.name for g in graph_protos(proto.graph)]


def test_the_node_bound_counts_subgraphs_of_function_bodies(monkeypatch):
    """Every node counts: the main graph's and its subgraphs', a local function's body and the
    graphs inside that body (which are not listed: they are not the main graph's)."""
    proto = _proto()
    branch = helper.make_node("If", ["c"], ["o"], then_branch=_body("ft"),
                              else_branch=_body("fe"))
    proto.functions.append(helper.make_function("local", "f", ["c"], ["o"], [branch],
                                                [helper.make_opsetid("", 18)]))
    nodes = sum(len(g.node) for g in graph_protos(proto.graph)) + 1 + 2  # body: If, 2 inside
    monkeypatch.setenv(MAX_NODES_ENV, str(nodes))
    assert [g.name for g in refuse_too_many_nodes(proto, "m")] == \
        [g.name for g in graph_protos(proto.graph)]
    monkeypatch.setenv(MAX_NODES_ENV, str(nodes - 1))
    with pytest.raises(InputError, match=f"more than {nodes - 1} nodes"):
        refuse_too_many_nodes(proto, "m")
