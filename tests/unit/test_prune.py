"""remove_dead_nodes reaches the fixpoint whatever the node order: a graph out of order (a dead
reader listed before its dead producer), chains, ``--keep``, values read inside a subgraph, and
an outer value that only a dead node of a subgraph read (the one case that needs another walk
over every graph; a model without subgraphs stops after one, issue #16)."""

from __future__ import annotations

import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

from onnxfold.pipeline.passes import remove_dead_nodes


def _vi(name: str) -> object:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [2])


def _model(nodes: list, outputs: tuple[str, ...] = ("y",)) -> ir.Model:
    graph = helper.make_graph(nodes, "g", [_vi("x")], [_vi(o) for o in outputs])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return ir.serde.deserialize_model(proto)


def _names(model: ir.Model) -> list[str]:
    return [n.name for n in model.graph]


CHAIN = [helper.make_node("Neg", ["x"], ["a"], name="a"),
         helper.make_node("Abs", ["a"], ["b"], name="b"),  # dead chain a -> b -> c
         helper.make_node("Exp", ["b"], ["c"], name="c"),
         helper.make_node("Relu", ["x"], ["y"], name="live")]


# out of order: the dead reader "c" is listed first, so the backward walk sees its producers
# before it and needs another look
@pytest.mark.parametrize("order", [[0, 1, 2, 3], [2, 3, 1, 0]], ids=["in order", "out of order"])
def test_a_dead_chain_goes_whole_whatever_the_order(order):
    model = _model([CHAIN[i] for i in order])
    assert remove_dead_nodes(model) == 3
    assert _names(model) == ["live"]


def test_kept_nodes_and_what_they_read_stay():
    model = _model([
        helper.make_node("Neg", ["x"], ["a"], name="a"),
        helper.make_node("Abs", ["a"], ["b"], name="keep_me"),
        helper.make_node("Exp", ["x"], ["c"], name="c"),
        helper.make_node("Relu", ["x"], ["y"], name="live"),
    ])
    assert remove_dead_nodes(model, frozenset({"keep_me"})) == 1
    assert _names(model) == ["a", "keep_me", "live"]


def _if_model(then_nodes: list, outer_nodes: list) -> ir.Model:
    """``outer_nodes``, then ``y = If(cond)`` whose then-branch runs ``then_nodes`` and gives
    ``t`` (the else-branch gives ``x``)."""
    then = helper.make_graph(then_nodes, "then", [], [_vi("t")])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                              [_vi("e")])
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    branch = helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then,
                              else_branch=other)
    graph = helper.make_graph([*outer_nodes, branch], "g", [_vi("x"), cond], [_vi("y")])
    return ir.serde.deserialize_model(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))


def test_a_value_read_only_inside_a_live_subgraph_is_kept():
    model = _if_model([helper.make_node("Identity", ["a"], ["t"])], [
        helper.make_node("Neg", ["x"], ["a"], name="a"),  # read by the then-branch
        helper.make_node("Abs", ["x"], ["dead"], name="dead")])
    assert remove_dead_nodes(model) == 1
    assert _names(model) == ["a", "if"]


def test_a_dead_node_in_a_subgraph_goes_and_the_outer_value_it_read_then_goes_too():
    model = _if_model([helper.make_node("Identity", ["a"], ["unread"], name="inner_dead"),
                       helper.make_node("Identity", ["x"], ["t"], name="inner_live")],
                      [helper.make_node("Neg", ["x"], ["a"], name="a")])  # read by inner_dead
    assert remove_dead_nodes(model) == 2
    assert _names(model) == ["if"]


def test_a_dead_chain_listed_backwards_costs_one_look_per_node(monkeypatch):
    """Each removal looks again only at the producers it leaves unread: a dead chain listed
    last-to-first (the backward walk meets each node while its reader is still there) is not
    walked once per node it holds."""
    length = 300
    nodes = [helper.make_node("Neg", [f"v{i - 1}" if i else "x"], [f"v{i}"], name=f"n{i}")
             for i in range(length)]
    model = _model([*reversed(nodes), helper.make_node("Relu", ["x"], ["y"], name="live")])
    looks = 0
    uses = ir.Value.uses

    def counted(value: ir.Value):
        nonlocal looks
        looks += 1
        return uses(value)

    monkeypatch.setattr(ir.Value, "uses", counted)
    assert remove_dead_nodes(model) == length
    assert _names(model) == ["live"]
    assert looks <= 4 * length
