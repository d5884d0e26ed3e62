"""The constness analysis (``analysis.constness.plan_graph``): which values of a graph are
constant, which nodes fold, and which nodes with constant inputs may never fold, and why."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from onnxfold.analysis.constness import plan_graph
from onnxfold.analysis.declines import DeclineKind
from onnxfold.declare.catalogue import load_catalogue
from onnxfold.io.reader import model_from_proto
from tests.support.models import constant_node, make_model, tensor, vinfo

W = np.ones((2, 3), np.float32)


def _analysed(nodes, inputs, outputs, initializers=(), **kwargs):
    model = model_from_proto(make_model(nodes, inputs, outputs, initializers), check=False)
    return plan_graph(model.graph, model.ir_version, facts=load_catalogue(), **kwargs)


def _names(nodes) -> list[str]:
    return [n.name for n in nodes]


def test_constants_fold_through_default_domain_ops_and_stop_at_inputs():
    nodes = [constant_node("c", np.array([2.0], np.float32)),
             helper.make_node("Mul", ["w", "c"], ["wc"], name="mul"),
             helper.make_node("Shape", ["x"], ["sx"], name="shape_of_static_input"),
             helper.make_node("Shape", ["y"], ["sy"], name="shape_of_dynamic_input"),
             helper.make_node("Add", ["x", "wc"], ["z"], name="add_of_input"),
             helper.make_node("Neg", ["sx"], ["n"], name="neg_of_shape")]
    plan = _analysed(nodes, [vinfo("x", shape=[2, 3]), vinfo("y", shape=["N", 3])],
                     [vinfo("z"), vinfo("n", TensorProto.INT64), vinfo("sy")], [tensor("w", W)])
    assert _names(plan.foldable) == ["mul", "shape_of_static_input", "neg_of_shape"]
    assert {v.name for v in plan.sources} == {"w", "c"}
    assert {v.name for v in plan.constant} == {"w", "c", "wc", "sx", "n"}
    assert plan.refused == []
    without_shapes = _analysed(nodes, [vinfo("x", shape=[2, 3]), vinfo("y", shape=["N", 3])],
                               [vinfo("z"), vinfo("n", TensorProto.INT64), vinfo("sy")],
                               [tensor("w", W)], shape_folding=False)
    assert _names(without_shapes.foldable) == ["mul"]


def test_nodes_that_may_never_fold_are_refused_only_when_their_inputs_are_constant():
    nodes = [helper.make_node("RandomUniformLike", ["w"], ["r"], name="random"),
             helper.make_node("Custom", ["w"], ["u"], domain="my.domain", name="custom"),
             helper.make_node("Neg", ["w"], ["n"], name="kept_neg"),
             helper.make_node("Custom", ["x"], ["v"], domain="my.domain", name="custom_of_x")]
    plan = _analysed(nodes, [vinfo("x", shape=[2, 3])],
                     [vinfo("r"), vinfo("u"), vinfo("n"), vinfo("v")], [tensor("w", W)],
                     keep=["kept_neg"])
    assert plan.foldable == []
    assert [(n.name, r.kind) for n, r in plan.refused] == [
        ("random", DeclineKind.NON_DETERMINISTIC), ("custom", DeclineKind.CUSTOM_DOMAIN),
        ("kept_neg", DeclineKind.KEPT)]


def test_a_node_folds_only_if_what_its_subgraphs_capture_is_constant():
    def branch(name: str, captured: str):
        return helper.make_graph([helper.make_node("Identity", [captured], [f"{name}_out"])],
                                 name, [], [vinfo(f"{name}_out", shape=[2, 3])])

    nodes = [helper.make_node("If", ["cond"], ["a"], name="if_of_constants",
                              then_branch=branch("t1", "w"), else_branch=branch("e1", "w")),
             helper.make_node("If", ["cond"], ["b"], name="if_of_input",
                              then_branch=branch("t2", "w"), else_branch=branch("e2", "x"))]
    plan = _analysed(nodes, [vinfo("x", shape=[2, 3])], [vinfo("a"), vinfo("b")],
                     [tensor("w", W), tensor("cond", np.array(True))])
    assert _names(plan.foldable) == ["if_of_constants"]


def test_an_overridable_initializer_is_constant_only_when_inputs_are():
    nodes = [helper.make_node("Neg", ["w"], ["n"], name="neg")]
    proto = make_model(nodes, [vinfo("w", shape=[2, 3])], [vinfo("n")], [tensor("w", W)])
    model = model_from_proto(proto, check=False)
    facts = load_catalogue()
    assert plan_graph(model.graph, model.ir_version, facts=facts).foldable == []
    assert _names(plan_graph(model.graph, model.ir_version, inputs_are_constant=True,
                             facts=facts).foldable) == ["neg"]
