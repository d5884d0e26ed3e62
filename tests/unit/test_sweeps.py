"""A rewrite sweep builds on what it rewrote earlier in the same sweep: values it creates from
constants count as constants at once, and a node a pattern rewrote is tried again (chains used
to take one sweep per link, each recomputing the graph's shape values)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnx import TensorProto, helper

from onnxfold.analysis.shapes import infer_shapes
from onnxfold.declare.catalogue import load_catalogue
from onnxfold.rewrite.driver import rewrite
from tests.support.growth import SCALE, assert_linear_growth, cpu_seconds
from tests.support.models import make_model, tensor, vinfo


def _rewritten(proto):
    model = ir.serde.deserialize_model(proto)
    infer_shapes(model)
    return model, rewrite(model, load_catalogue())


def test_constant_of_shape_is_postponed_past_its_reader_in_one_sweep():
    value = helper.make_tensor("v", TensorProto.FLOAT, [1], [2.0])
    nodes = [helper.make_node("ConstantOfShape", ["s"], ["big"], value=value),
             helper.make_node("Mul", ["big", "k"], ["m"]),
             helper.make_node("Add", ["x", "m"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[64, 64])], [vinfo("y", shape=[64, 64])],
                       [tensor("s", np.array([64, 64], np.int64)),
                        tensor("k", np.float32(3))])
    model, done = _rewritten(proto)
    assert done.hits["constant_of_shape_as_expand"] == 1 and done.hits["postpone_expand"] == 1
    assert done.sweeps == 2  # one that rewrites both, one that finds nothing
    ops = [n.op_type for n in model.graph]
    assert ops.index("Mul") < ops.index("Expand")  # the Mul runs on the scalar now


def test_a_rewritten_node_is_tried_again_in_the_same_sweep():
    """Reshape(Relu(Reshape(x, [N, 12])), [N, 3, 4]): the outer Reshape reads x directly, then
    reshapes to x's own shape and goes (elementwise_between_reshapes, then drop_noop)."""
    nodes = [helper.make_node("Reshape", ["x", "flat"], ["f"]),
             helper.make_node("Relu", ["f"], ["r"]),
             helper.make_node("Reshape", ["r", "back"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[2, 3, 4])], [vinfo("y", shape=[2, 3, 4])],
                       [tensor("flat", np.array([2, 12], np.int64)),
                        tensor("back", np.array([2, 3, 4], np.int64))])
    model, done = _rewritten(proto)
    assert [n.op_type for n in model.graph] == ["Relu"]
    assert done.sweeps == 2


def test_a_later_sweep_tries_only_the_nodes_near_a_rewrite():
    """The worklist: the sweep after a rewrite tries the nodes within reach of it, not the 40
    untouched Tanh nodes after it (the old confirmation sweep tried every node again)."""
    chain = [helper.make_node("Tanh", [f"t{i}"], [f"t{i + 1}" if i < 39 else "y"])
             for i in range(40)]
    nodes = [helper.make_node("Reshape", ["x", "flat"], ["f"]),
             helper.make_node("Relu", ["f"], ["r"]),
             helper.make_node("Reshape", ["r", "back"], ["t0"]), *chain]
    proto = make_model(nodes, [vinfo("x", shape=[2, 3, 4])], [vinfo("y", shape=[2, 3, 4])],
                       [tensor("flat", np.array([2, 12], np.int64)),
                        tensor("back", np.array([2, 3, 4], np.int64))])
    model, done = _rewritten(proto)
    assert [n.op_type for n in model.graph] == ["Relu"] + ["Tanh"] * 40
    assert done.sweeps == 2
    first_sweep = len(nodes)
    assert first_sweep < done.tried <= first_sweep + 12, done.tried


def test_a_rewrite_next_to_a_widely_read_value_does_not_mark_its_readers():
    """A value read by 200 nodes (a dynamo export's sequence length, read by every layer): a
    rewrite of one of its readers changes their number by one, which no pattern can tell, so
    the sweep after it tries the nodes near the rewrite, not the 200 readers and theirs (each
    of the Llama's 515 such merges marked ~1,000 nodes)."""
    readers = [helper.make_node("Tanh", ["s"], [f"t{i}"]) for i in range(200)]
    nodes = [helper.make_node("Relu", ["x"], ["s"]), *readers,
             helper.make_node("Sum", [f"t{i}" for i in range(200)], ["total"]),
             helper.make_node("Transpose", ["s"], ["a"], perm=[1, 0, 2]),
             helper.make_node("Transpose", ["a"], ["b"], perm=[0, 2, 1])]
    proto = make_model(nodes, [vinfo("x", shape=[2, 3, 4])],
                       [vinfo("total", shape=[2, 3, 4]), vinfo("b", shape=[3, 4, 2])])
    model, done = _rewritten(proto)
    assert done.hits["merge_transposes"] == 1
    assert [n.op_type for n in model.graph].count("Transpose") == 1
    first_sweep = len(nodes)
    assert first_sweep < done.tried <= first_sweep + 12, done.tried


def test_the_inner_nodes_of_an_inlined_branch_are_tried():
    """If(true) inlines its branch, Reshape -> Relu -> Relu, before the If's reader: the
    no-op Reshape, two links above anything the rewrite touched, is removed in the same call."""
    branch_nodes = [helper.make_node("Reshape", ["x", "same"], ["r0"]),
                    helper.make_node("Relu", ["r0"], ["r1"]),
                    helper.make_node("Relu", ["r1"], ["r2"])]
    then_branch = helper.make_graph(branch_nodes, "then", [], [vinfo("r2", shape=[2, 3, 4])])
    else_branch = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                                    [vinfo("e", shape=[2, 3, 4])])
    nodes = [helper.make_node("If", ["cond"], ["b"], then_branch=then_branch,
                              else_branch=else_branch),
             helper.make_node("Tanh", ["b"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[2, 3, 4])], [vinfo("y", shape=[2, 3, 4])],
                       [tensor("cond", np.array(True)),
                        tensor("same", np.array([2, 3, 4], np.int64))])
    model, done = _rewritten(proto)
    assert done.hits["inline_constant_if"] == 1 and done.hits["drop_noop"] == 1
    assert [n.op_type for n in model.graph] == ["Relu", "Relu", "Tanh"]


def test_a_rewrite_next_to_a_wide_reader_does_not_mark_all_its_producers(monkeypatch):
    """n Mul(x, 1) read by one Sum: each Mul goes (x read in its place). Marking every
    producer of the Sum after each of those rewrites walked all n of them n times (a Sum of
    4,000: 16 s); the producers of what a rewrite gave the Sum are marked by name instead."""
    from onnxfold.rewrite import driver

    n = 400
    walked = []
    readers = driver.marked_readers
    monkeypatch.setattr(driver, "marked_readers", lambda v: walked.append(v) or readers(v))
    nodes = [helper.make_node("Mul", ["x", "one"], [f"m{i}"]) for i in range(n)]
    nodes.append(helper.make_node("Sum", [f"m{i}" for i in range(n)], ["y"]))
    proto = make_model(nodes, [vinfo("x", shape=["B", 4])], [vinfo("y", shape=["B", 4])],
                       [tensor("one", np.float32(1))])
    model, done = _rewritten(proto)
    assert done.hits["drop_neutral_element"] == n
    assert [node.op_type for node in model.graph] == ["Sum"]
    assert all(v is model.graph.inputs[0] for v in model.graph.node(0).inputs)
    assert len(walked) <= 20 * n, f"{len(walked)} reader walks for {n} rewrites"


def _constant_ifs(count: int):
    """``count`` If nodes on a constant True, one after the other, each branch one node on the
    value before: each If is inlined into the main graph (its then-branch's node)."""
    nodes, h = [], "x"
    for i in range(count):
        then = helper.make_graph([helper.make_node("Neg", [h], [f"t{i}"])], f"then{i}", [],
                                 [vinfo(f"t{i}", shape=[4])])
        other = helper.make_graph([helper.make_node("Abs", [h], [f"e{i}"])], f"else{i}", [],
                                  [vinfo(f"e{i}", shape=[4])])
        nodes.append(helper.make_node("If", ["c"], [f"h{i}"], then_branch=then,
                                      else_branch=other))
        h = f"h{i}"
    return make_model(nodes, [vinfo("x", shape=[4])], [vinfo(h, shape=[4])],
                      [tensor("c", np.array(True))])


def test_thousands_of_subgraphs_cost_linear_time():
    """Each graph's sweep takes the nodes rewrites changed in it; it used to look at every
    changed node of the model (2,000 constant Ifs: 4,000 graphs, 3 s of a 3.5 s rewrite)."""
    def run(model: ir.Model) -> None:
        done = rewrite(model, load_catalogue())
        assert done.hits["inline_constant_if"] == len(model.graph)
        assert {node.op_type for node in model.graph} == {"Neg"}

    def seconds(count: int) -> float:
        return cpu_seconds(run, lambda: ir.serde.deserialize_model(_constant_ifs(count)))

    assert_linear_growth(seconds(250), seconds(250 * SCALE), "constant Ifs", 250)


def _chain_state(count: int):
    """A chain of ``count`` Neg nodes and the driver's state of its graph for one sweep."""
    from collections import Counter

    from onnxfold.analysis.settings import DEFAULTS
    from onnxfold.rewrite.sweep import GraphState

    nodes = [helper.make_node("Neg", ["x" if i == 0 else f"h{i - 1}"], [f"h{i}"], f"n{i}")
             for i in range(count)]
    model = ir.serde.deserialize_model(
        make_model(nodes, [vinfo("x", shape=[4])], [vinfo(f"h{count - 1}", shape=[4])]))
    catalogue = load_catalogue()
    state = GraphState(model.graph, model, set(), catalogue, Counter(), None,
                       shape_steps=catalogue.shape_steps, settings=DEFAULTS)
    return model.graph, state


def test_in_order_follows_the_graph_after_moves_and_insertions():
    """``GraphView.in_order`` sorts by the places the sweep listed once; a node moved since
    loses its place and one inserted since has none: both are then found by a walk, so the
    order is always the graph's as it is now."""
    graph, state = _chain_state(6)
    n = list(graph)
    view = state.view
    assert view.in_order([n[4], n[1], n[3]]) == [n[1], n[3], n[4]]
    assert state.positions is not None  # listed once, at the first question
    graph.remove(n[4])  # n4 moves to the front (what a rewrite's Replacement.moved does)
    graph.insert_before(n[0], n[4])
    state.moved([n[4]])
    assert view.in_order([n[3], n[4], n[1]]) == [n[4], n[1], n[3]]
    built = ir.Node("", "Neg", [n[1].outputs[0]], name="built")
    graph.insert_after(n[2], built)
    assert view.in_order([n[3], built, n[0]]) == [n[0], built, n[3]]
    graph.remove(built)  # not in the graph any more: not in its order
    assert view.in_order([built, n[2]]) == [n[2]]
