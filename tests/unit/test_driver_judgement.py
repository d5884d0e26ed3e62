"""The driver judges every rewrite proposal before putting it in (``rewrite/judge.py``): each
test builds a rule that proposes what no rule may do, and finds the proposal refused, the
reason counted for ``--explain`` and the model as it was (the names a refused proposal took
given back, the nodes it built reading nothing); a control without the offence rewrites."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir
from onnx import TensorProto, helper

from onnxfold.analysis.settings import RunSettings
from onnxfold.declare import (
    KEEPS_QDQ_UNITS,
    REWRITES_CONSTANTS,
    GraphView,
    Match,
    OpBuilder,
    P,
    Reject,
    Replacement,
    Var,
)
from onnxfold.declare.catalogue import Catalogue, load_catalogue
from onnxfold.declare.pattern_rules import PatternRule
from onnxfold.declare.registry import OpFact
from onnxfold.ir.edits import names_for
from onnxfold.rewrite.driver import rewrite
from tests.support.models import make_model, tensor, vinfo


@dataclass(frozen=True)
class _Found:
    """What a check found, held in a dataclass (the driver must still see the node)."""

    inner: ir.Node


def _inner_producer(ctx: GraphView, x: ir.Value) -> Match | bool:
    """The node computing the Relu's input, found by the check (not by the pattern)."""
    producer = x.producer()
    return False if producer is None else Match(found=_Found(producer))


def _abs_of_its_input(op: OpBuilder, found: _Found) -> ir.Value:
    """Relu(Neg(a)) -> Abs(a) (not its meaning: a proposal that removes the Neg)."""
    inner_input = found.inner.inputs[0]
    assert inner_input is not None
    return op.Abs(inner_input, _name="abs")


SKIPPING_RULE = PatternRule("skip_the_inner_node", P("Relu", Var("x"), name="node"),
                            _abs_of_its_input, _inner_producer, "test:1")


def _forward(op: OpBuilder, x: ir.Value) -> ir.Value:
    return x


FORWARDING_RULE = PatternRule("forward_the_input", P("Neg", Var("x"), name="node"), _forward,
                              None, "test:2")


def _forward_after_building(op: OpBuilder, x: ir.Value) -> ir.Value:
    op.Relu(x, _name="unused")  # a node built: the Identity the output needs is the fix
    return x


BUILDING_RULE = PatternRule("forward_after_building", P("Neg", Var("x"), name="node"),
                            _forward_after_building, None, "test:3")


def _run(proto, rule: PatternRule, keep: frozenset[str] = frozenset()
         ) -> tuple[ir.Model, Counter, int]:
    """``proto`` rewritten with ``rule`` alone; the model, the rejections and the hits."""
    model = ir.serde.deserialize_model(proto)
    catalogue = Catalogue((rule, *load_catalogue().of(OpFact)))
    rejected: Counter = Counter()
    done = rewrite(model, catalogue, rejected, settings=RunSettings(keep=keep))
    return model, rejected, done.hits[rule.name]


def _neg_relu(outputs=("y",)):
    nodes = [helper.make_node("Neg", ["x"], ["n"], name="the_neg"),
             helper.make_node("Relu", ["n"], ["y"], name="the_relu")]
    return make_model(nodes, [vinfo("x", shape=[2, 3])],
                      [vinfo(name, shape=[2, 3]) for name in outputs])


def _ops(graph: ir.Graph) -> list[str]:
    return [node.op_type for node in graph]


def test_a_proposal_removing_a_kept_node_is_refused():
    """The check finds the Neg (in a dataclass); --keep names it: refused, nothing changed."""
    model, rejected, hits = _run(_neg_relu(), SKIPPING_RULE, keep=frozenset({"the_neg"}))
    assert hits == 0 and _ops(model.graph) == ["Neg", "Relu"]
    assert rejected == Counter({"skip_the_inner_node: it would remove a Neg --keep keeps": 1})
    x = model.graph.inputs[0]
    assert [use.node.op_type for use in x.uses()] == ["Neg"]  # the refused Abs reads nothing
    assert names_for(model).fresh("abs") == "abs__onnxfold0"  # its name was given back


def test_without_keep_the_same_proposal_rewrites():
    model, rejected, hits = _run(_neg_relu(), SKIPPING_RULE)
    assert hits == 1 and not rejected and _ops(model.graph) == ["Abs"]


def _with_branch():
    """y = If(cond) of a branch whose Relu reads n = Neg(x), computed by the main graph."""
    branch = helper.make_graph([helper.make_node("Relu", ["n"], ["r"])], "then", [],
                               [vinfo("r", shape=[2, 3])])
    other = helper.make_graph([helper.make_node("Identity", ["n"], ["e"])], "else", [],
                              [vinfo("e", shape=[2, 3])])
    nodes = [helper.make_node("Neg", ["x"], ["n"], name="the_neg"),
             helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=other)]
    return make_model(nodes, [vinfo("x", shape=[2, 3]), vinfo("cond", TensorProto.BOOL, [])],
                      [vinfo("y", shape=[2, 3])])


def test_a_proposal_removing_a_node_of_another_graph_is_refused():
    """The check, in the branch, finds the main graph's Neg: refused."""
    model, rejected, hits = _run(_with_branch(), SKIPPING_RULE)
    assert hits == 0 and _ops(model.graph) == ["Neg", "If"]
    branch = model.graph.node(1).attributes["then_branch"].as_graph()
    assert _ops(branch) == ["Relu"]
    assert rejected == Counter(
        {"skip_the_inner_node: it would change a Neg of another graph": 1})


def test_a_graph_output_forwarded_to_a_graph_input_is_refused():
    """Neg(x) -> x where the Neg's output is the graph's output and x its input: the output
    would need an Identity in the Neg's place."""
    nodes = [helper.make_node("Neg", ["x"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[2, 3])], [vinfo("y", shape=[2, 3])])
    model, rejected, hits = _run(proto, FORWARDING_RULE)
    assert hits == 0 and _ops(model.graph) == ["Neg"]
    assert rejected == Counter({"forward_the_input: a graph output would become an Identity "
                                "of a value computed elsewhere": 1})


def test_a_graph_output_forwarded_to_another_output_is_refused():
    """Neg(r) -> r where both are graph outputs: one value cannot be returned twice."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[2, 3])],
                       [vinfo("r", shape=[2, 3]), vinfo("y", shape=[2, 3])])
    model, rejected, hits = _run(proto, FORWARDING_RULE)
    assert hits == 0 and _ops(model.graph) == ["Relu", "Neg"]
    assert rejected == Counter(
        {"forward_the_input: a graph output would be returned twice": 1})


def test_a_forwarded_value_that_can_be_the_output_is_taken():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[2, 3])], [vinfo("y", shape=[2, 3])])
    model, rejected, hits = _run(proto, FORWARDING_RULE)
    assert hits == 1 and not rejected and _ops(model.graph) == ["Relu"]
    assert model.graph.outputs[0].name == "y"


def test_a_proposal_that_builds_gets_the_identity_from_the_driver():
    nodes = [helper.make_node("Neg", ["x"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[2, 3])], [vinfo("y", shape=[2, 3])])
    model, rejected, hits = _run(proto, BUILDING_RULE)
    assert hits == 1 and not rejected
    (out,) = model.graph.outputs
    producer = out.producer()
    assert out.name == "y" and producer is not None and producer.op_type == "Identity"
    assert producer.inputs[0] is model.graph.inputs[0]


def _inline_and_remove(op: OpBuilder, node: ir.Node, found: _Found) -> tuple[ir.Value, ...]:
    """The If's then-branch inlined, the check's node removed with it."""
    return op.inline(node.attributes["then_branch"].as_graph())


def _if_and_input(ctx: GraphView, node: ir.Node) -> Match | bool:
    producer = node.inputs[0].producer() if node.inputs[0] is not None else None
    return False if producer is None else Match(found=_Found(producer))


INLINING_RULE = PatternRule("inline_the_branch", P("If", Var("c"), name="node"),
                            _inline_and_remove, _if_and_input, "test:4")


def test_a_refused_inline_leaves_the_branch_as_it_was():
    """op.inline is part of the proposal: refused (the condition's kept producer would go),
    the branch keeps its nodes, initializers and outputs."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [2, 3], np.ones(6, np.float32))
    branch = helper.make_graph([helper.make_node("Add", ["x", "w"], ["r"])], "then", [],
                               [vinfo("r", shape=[2, 3])], [w])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                              [vinfo("e", shape=[2, 3])])
    nodes = [helper.make_node("Not", ["c0"], ["c"], name="the_not"),
             helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=other)]
    proto = make_model(nodes, [vinfo("x", shape=[2, 3]), vinfo("c0", TensorProto.BOOL, [])],
                       [vinfo("y", shape=[2, 3])], [tensor("unused", np.float32(0))])
    model, rejected, hits = _run(proto, INLINING_RULE, keep=frozenset({"the_not"}))
    assert hits == 0 and rejected == Counter(
        {"inline_the_branch: it would remove a Not --keep keeps": 1})
    then = model.graph.node(1).attributes["then_branch"].as_graph()
    assert _ops(then) == ["Add"] and list(then.initializers) == ["w"]
    assert [v.name for v in then.outputs] == ["r"]

    model, rejected, hits = _run(proto, INLINING_RULE)  # the control: inlined
    assert hits == 1 and _ops(model.graph) == ["Add"]
    assert [v.name for v in model.graph.outputs] == ["y"]


def _rewire_the_inner_node(op: OpBuilder, found: _Found) -> Replacement:
    """The check's Neg reads Abs(a) in place of a (not its meaning: a rewiring of it)."""
    inner_input = found.inner.inputs[0]
    assert inner_input is not None
    return Replacement(inputs={found.inner: [op.Abs(inner_input, _name="abs")]})


REWIRING_RULE = PatternRule("rewire_the_inner_node", P("Relu", Var("x"), name="node"),
                            _rewire_the_inner_node, _inner_producer, "test:5")


def test_a_proposal_rewiring_a_kept_node_is_refused():
    model, rejected, hits = _run(_neg_relu(), REWIRING_RULE, keep=frozenset({"the_neg"}))
    assert hits == 0 and _ops(model.graph) == ["Neg", "Relu"]
    assert rejected == Counter({"rewire_the_inner_node: it would rewire a Neg --keep keeps": 1})

    model, rejected, hits = _run(_neg_relu(), REWIRING_RULE)  # the control: rewired (at
    assert hits >= 1 and "Abs" in _ops(model.graph)  # every try: the rule never settles)


def _move_the_inner_node(op: OpBuilder, node: ir.Node, found: _Found) -> Replacement:
    """The check's Neg moved before the Relu (where it is: a move in name only)."""
    return Replacement(values={node.outputs[0]: op.Abs(node.inputs[0], _name="abs")},
                       moved=[found.inner])


MOVING_RULE = PatternRule("move_the_inner_node", P("Relu", Var("x"), name="node"),
                          _move_the_inner_node, _inner_producer, "test:6")


def test_a_proposal_moving_a_kept_node_is_refused():
    model, rejected, hits = _run(_neg_relu(), MOVING_RULE, keep=frozenset({"the_neg"}))
    assert hits == 0 and _ops(model.graph) == ["Neg", "Relu"]
    assert rejected == Counter({"move_the_inner_node: it would move a Neg --keep keeps": 1})

    model, rejected, hits = _run(_neg_relu(), MOVING_RULE)  # the control: moved
    assert hits == 1 and _ops(model.graph) == ["Neg", "Abs"]


def _dequantized(*nodes):
    """y = nodes(DequantizeLinear(q)), q an int8 input."""
    dq = helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["d"])
    return make_model([dq, *nodes], [vinfo("q", TensorProto.INT8, [2, 3])],
                      [vinfo("y", shape=[2, 3])],
                      [tensor("scale", np.float32(0.5)), tensor("zero", np.int8(0))])


def _tagged(rule: PatternRule, name: str) -> PatternRule:
    return PatternRule(name, rule.pattern, rule.rewrite, rule.check, rule.source,
                       tags=frozenset({KEEPS_QDQ_UNITS}))


def test_a_match_in_a_qdq_unit_is_refused_for_a_rule_that_keeps_them():
    """Relu(DQ(q)) -> Abs(...): the Relu is the op of a DQ -> op unit; the tagged rule is
    refused before its rewrite is asked, the untagged one rewrites."""
    proto = _dequantized(helper.make_node("Relu", ["d"], ["y"]))
    tagged = PatternRule("abs_in_units", P("Relu", Var("x"), name="node"),
                         lambda op, x: op.Abs(x), None, "test:7",
                         tags=frozenset({KEEPS_QDQ_UNITS}))
    model, rejected, hits = _run(proto, tagged)
    assert hits == 0 and _ops(model.graph) == ["DequantizeLinear", "Relu"]
    assert rejected == Counter({"abs_in_units: in a QDQ node unit onnxruntime runs as an "
                                "integer kernel: Relu reads a DequantizeLinear output": 1})
    untagged = PatternRule("abs", tagged.pattern, tagged.rewrite, None, "test:8")
    model, rejected, hits = _run(proto, untagged)
    assert hits == 1 and _ops(model.graph) == ["DequantizeLinear", "Abs"]


def test_a_proposal_removing_part_of_a_qdq_unit_is_refused_for_a_rule_that_keeps_them():
    """Relu(Neg(DQ(q))): the Relu is in no unit, but the Neg its check finds, and the
    proposal removes, is."""
    proto = _dequantized(helper.make_node("Neg", ["d"], ["n"]),
                         helper.make_node("Relu", ["n"], ["y"]))
    model, rejected, hits = _run(proto, _tagged(SKIPPING_RULE, "skip_in_units"))
    assert hits == 0 and _ops(model.graph) == ["DequantizeLinear", "Neg", "Relu"]
    assert rejected == Counter({"skip_in_units: in a QDQ node unit onnxruntime runs as an "
                                "integer kernel: Neg reads a DequantizeLinear output": 1})
    model, rejected, hits = _run(proto, SKIPPING_RULE)  # the control, untagged
    assert hits == 1 and _ops(model.graph) == ["DequantizeLinear", "Abs"]


def test_the_qdq_reason_comes_before_the_checks_own():
    """A tagged rule's check declining a match in a unit for a reason of its own: --explain
    shows that the match breaks a unit (what the user can act on: --fold-qdq)."""
    proto = _dequantized(helper.make_node("Relu", ["d"], ["y"]))
    declining = PatternRule("declines_in_units", P("Relu", Var("x"), name="node"),
                            lambda op, x: op.Abs(x), lambda ctx, x: Reject("its own"),
                            "test:9", tags=frozenset({KEEPS_QDQ_UNITS}))
    _, rejected, hits = _run(proto, declining)
    assert hits == 0 and rejected == Counter({
        "declines_in_units: in a QDQ node unit onnxruntime runs as an integer kernel: Relu "
        "reads a DequantizeLinear output": 1})


def _abs_of(op: OpBuilder, x: ir.Value) -> ir.Value:
    return op.Abs(x, _name="abs")


def _relu_of_neg(bypassed: bool) -> PatternRule:
    """Relu(Neg(x)) -> Abs(x) (not its meaning), the Neg a node of the pattern."""
    return PatternRule("abs_of_relu_of_neg",
                       P("Relu", P("Neg", Var("x"), name="inner", bypassed=bypassed),
                         name="node"), _abs_of, None, "test:10")


def test_a_proposal_leaving_a_matched_node_read_outside_the_match_is_refused():
    """The Neg is also a graph output: removing it is not the rewrite's to do, and keeping
    it would compute x's negation twice. Refused; a pattern that marks the Neg ``bypassed``
    (a rewrite composing past it) rewrites and leaves it for its other reader; with no other
    reader, the Neg goes."""
    model, rejected, hits = _run(_neg_relu(outputs=("y", "n")), _relu_of_neg(False))
    assert hits == 0 and _ops(model.graph) == ["Neg", "Relu"]
    assert rejected == Counter(
        {"abs_of_relu_of_neg: a Neg it removes stays read outside the match": 1})
    model, rejected, hits = _run(_neg_relu(outputs=("y", "n")), _relu_of_neg(True))
    assert hits == 1 and not rejected and _ops(model.graph) == ["Neg", "Abs"]
    model, rejected, hits = _run(_neg_relu(), _relu_of_neg(False))
    assert hits == 1 and not rejected and _ops(model.graph) == ["Abs"]


def _relu_reads_its_inner_input(op: OpBuilder, node: ir.Node, x: ir.Value) -> Replacement:
    """The Relu reads the Neg's input in place of the Neg (not its meaning: a proposal that
    stops reading a matched node by rewiring its reader, removing nothing)."""
    return Replacement(inputs={node: [x]})


def test_a_proposal_rewiring_away_from_a_matched_node_read_outside_the_match_is_refused():
    """The Relu rewired past the Neg, the Neg also a graph output: the Neg would stay only
    for the output, as if the rewrite had removed it. Refused; with no other reader it is
    taken (the Neg then goes with the cleanups)."""
    rule = PatternRule("rewire_past_the_neg", P("Relu", P("Neg", Var("x"), name="inner"),
                                                 name="node"),
                       _relu_reads_its_inner_input, None, "test:15")
    model, rejected, hits = _run(_neg_relu(outputs=("y", "n")), rule)
    assert hits == 0 and _ops(model.graph) == ["Neg", "Relu"]
    assert rejected == Counter(
        {"rewire_past_the_neg: a Neg it removes stays read outside the match": 1})
    model, rejected, hits = _run(_neg_relu(), rule)
    assert hits == 1 and not rejected


def test_a_proposal_removing_a_node_whose_other_result_is_read_is_refused():
    """Dropout(x) -> x where its mask is read: the Dropout would stay for the mask."""
    forward = PatternRule("forward_dropout", P("Dropout", Var("x"), name="node"), _forward,
                          None, "test:11")
    nodes = [helper.make_node("Dropout", ["x"], ["d", "mask"]),
             helper.make_node("Relu", ["d"], ["y"]), helper.make_node("Not", ["mask"], ["m"])]
    proto = make_model(nodes, [vinfo("x", shape=[2, 3])],
                       [vinfo("y", shape=[2, 3]), vinfo("m", TensorProto.BOOL, [2, 3])])
    model, rejected, hits = _run(proto, forward)
    assert hits == 0 and _ops(model.graph) == ["Dropout", "Relu", "Not"]
    assert rejected == Counter(
        {"forward_dropout: it would remove a Dropout whose other result stays read": 1})


def _reshaped(op: OpBuilder, node: ir.Node) -> Replacement:
    """The Neg's output declared [6] (not its meaning: a proposal that reshapes a value)."""
    return Replacement(shapes={node.inputs[0]: ir.Shape([6])})


def test_a_proposal_reshaping_a_value_read_outside_the_match_is_refused():
    rule = PatternRule("reshape_the_input", P("Relu", Var("x"), name="node"), _reshaped,
                       None, "test:12")
    model, rejected, hits = _run(_neg_relu(outputs=("y", "n")), rule)
    assert hits == 0 and rejected == Counter(
        {"reshape_the_input: a value it reshapes is read outside the match": 1})
    assert model.graph.node(0).outputs[0].shape == ir.Shape([2, 3])


def test_a_node_the_fold_computes_is_left_to_it():
    """Neg(c) of a constant c: the fold computes it, the driver tries no rule there but one
    tagged ``rewrites_constants``; a Neg of an input it tries."""
    nodes = [helper.make_node("Neg", ["c"], ["n"]), helper.make_node("Add", ["n", "x"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[2, 3])], [vinfo("y", shape=[2, 3])],
                       [tensor("c", np.ones((2, 3), np.float32))])
    model, rejected, hits = _run(proto, FORWARDING_RULE)
    assert hits == 0 and not rejected and _ops(model.graph) == ["Neg", "Add"]
    tagged = PatternRule(FORWARDING_RULE.name, FORWARDING_RULE.pattern, _forward, None,
                         "test:13", tags=frozenset({REWRITES_CONSTANTS}))
    model, rejected, hits = _run(proto, tagged)
    assert hits == 1 and _ops(model.graph) == ["Add"]
    model, rejected, hits = _run(_neg_relu(), FORWARDING_RULE)
    assert hits == 1 and _ops(model.graph) == ["Relu"]


def test_a_proposal_removing_more_than_the_identity_it_needs_is_taken():
    """Relu(Neg(x)) -> x at a graph output, x an input: the output needs an Identity, and
    the proposal removes two nodes, so one node is left (with one removed node, the
    Identity would only take its place: refused, as above)."""
    forward = PatternRule("forward_twice", P("Relu", P("Neg", Var("x"), name="inner"),
                                             name="node"), _forward, None, "test:14")
    model, rejected, hits = _run(_neg_relu(), forward)
    assert hits == 1 and not rejected and _ops(model.graph) == ["Identity"]
    (out,) = model.graph.outputs
    assert out.name == "y" and out.producer().inputs[0] is model.graph.inputs[0]
