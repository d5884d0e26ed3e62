"""The check's own reading of a rewrite (``check/rewrites/same_roundings.py``): a replacement
that rounds the same values the same way must give the bits of the window it replaced, whatever
the rule that made it declares; one that reorders float arithmetic need not."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnx import TensorProto, helper

from onnxfold.check.rewrites.same_roundings import Roundings
from onnxfold.rewrite.log import RewriteRecord, Window


def _window(nodes, outputs, constants=None, leaves=("x",)):
    return Window(nodes=nodes, outputs=outputs, originals={name: name for name in leaves},
                  constants=constants or {})


def _record(before, after):
    return RewriteRecord("some_rule", "n", before, after)


K = np.full((4,), 3.0, np.float32)
C = np.full((4,), 0.1, np.float32)
S = np.array([2, 2], np.int64)


def test_data_moved_across_an_elementwise_op_rounds_the_same():
    """Reshape(x * k) -> Reshape(x) * Reshape(k): every element rounded once, as before."""
    before = _window([helper.make_node("Mul", ["x", "k"], ["m"]),
                      helper.make_node("Reshape", ["m", "s"], ["y"])], ["y"],
                     {"k": K, "s": S})
    after = _window([helper.make_node("Reshape", ["x", "s"], ["xr"]),
                     helper.make_node("Reshape", ["k", "s"], ["kr"]),
                     helper.make_node("Mul", ["kr", "xr"], ["y2"])], ["y2"], {"k": K, "s": S})
    assert Roundings().same(_record(before, after))


def test_a_reassociation_rounds_otherwise():
    """(x * k) * c -> x * (k * c): another value is rounded (k * c)."""
    before = _window([helper.make_node("Mul", ["x", "k"], ["m"]),
                      helper.make_node("Mul", ["m", "c"], ["y"])], ["y"], {"k": K, "c": C})
    after = _window([helper.make_node("Mul", ["k", "c"], ["f"]),
                     helper.make_node("Mul", ["x", "f"], ["y2"])], ["y2"], {"k": K, "c": C})
    assert not Roundings().same(_record(before, after))
    other = _window([helper.make_node("Mul", ["x", "k"], ["m"]),
                     helper.make_node("Mul", ["m", "c2"], ["y"])], ["y"],
                    {"k": K, "c2": np.nextafter(C, np.float32(1))})  # a constant 1 ulp off
    assert not Roundings().same(_record(before, other))


def test_neutral_elements_are_seen_through_and_others_are_not():
    ones, zeros = np.ones((4,), np.float32), np.zeros((4,), np.float32)
    for op, constant, neutral in (("Mul", ones, True), ("Div", ones, True),
                                  ("Add", zeros, True), ("Sub", zeros, True),
                                  ("Mul", K, False), ("Add", C, False)):
        before = _window([helper.make_node(op, ["x", "k"], ["y"])], ["y"], {"k": constant})
        after = _window([], ["x"])
        assert Roundings().same(_record(before, after)) == neutral, (op, constant)


def test_a_node_that_is_not_exact_is_never_asked_for_bits():
    before = _window([helper.make_node("Exp", ["x"], ["y"])], ["y"])
    assert not Roundings().same(_record(before, before))


def test_the_originals_data_movement_is_seen_through_at_the_leaves():
    """A rewrite that merges two reshapes reads the first one's input where the window it
    replaced read its output: with the original graph at hand they are the same leaf."""
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([4]))
    s = ir.Value(name="s", const_value=ir.tensor(S))
    first = ir.Node("", "Reshape", [x, s], outputs=[ir.Value(name="r1")])
    graph = ir.Graph([x], [first.outputs[0]], nodes=[first], initializers=[s])
    before = Window([helper.make_node("Reshape", ["r1", "t"], ["y"])], ["y"], {"r1": "r1"},
                    {"t": np.array([4], np.int64)})
    after = Window([helper.make_node("Reshape", ["x", "t"], ["y2"])], ["y2"], {"x": "x"},
                   {"t": np.array([4], np.int64)})
    assert Roundings(graph).same(_record(before, after))
    assert not Roundings().same(_record(before, after))  # (without it: other leaves)


def test_a_cast_to_the_dtype_a_leaf_has_is_seen_through():
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([4]))
    graph = ir.Graph([x], [x], nodes=[])
    before = _window([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)], ["y"])
    to_half = _window([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16)], ["y"])
    assert Roundings(graph).same(_record(before, _window([], ["x"])))
    assert not Roundings(graph).same(_record(to_half, _window([], ["x"])))


def test_a_rules_word_that_it_rounds_differently_is_taken_only_where_the_windows_show_it():
    """The rewrite validation asks for bits where every op is exact and either the rule keeps
    the arithmetic or the windows show it does: a rule that says wrongly that it rounds
    differently (a data movement) is still asked for bits; one that says so and does is
    judged within a tolerance; one that does and does not say so is asked for bits."""
    from onnxfold.check.rewrites.validation import _exact

    moved = _record(_window([helper.make_node("Mul", ["x", "k"], ["m"]),
                             helper.make_node("Reshape", ["m", "s"], ["y"])], ["y"],
                            {"k": K, "s": S}),
                    _window([helper.make_node("Reshape", ["x", "s"], ["xr"]),
                             helper.make_node("Mul", ["xr", "k"], ["y2"])], ["y2"],
                            {"k": K, "s": S}))
    regrouped = _record(_window([helper.make_node("Mul", ["x", "k"], ["m"]),
                                 helper.make_node("Mul", ["m", "c"], ["y"])], ["y"],
                                {"k": K, "c": C}),
                        _window([helper.make_node("Mul", ["k", "c"], ["f"]),
                                 helper.make_node("Mul", ["x", "f"], ["y2"])], ["y2"],
                                {"k": K, "c": C}))
    says, silent = frozenset({"some_rule"}), frozenset()
    assert _exact(moved, says, Roundings()) and _exact(moved, silent, Roundings())
    assert not _exact(regrouped, says, Roundings()) and _exact(regrouped, silent, Roundings())


def test_an_initializer_a_caller_may_feed_is_no_neutral_constant():
    """``x * k`` with ``k`` all ones is ``x`` only where ``k`` is a constant: an initializer
    that is also a graph input is fed other values."""
    for overridable in (False, True):
        x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([4]))
        k = ir.Value(name="k", const_value=ir.tensor(np.ones((4,), np.float32)))
        scaled = ir.Node("", "Mul", [x, k], outputs=[ir.Value(name="xk")])
        graph = ir.Graph([x, k] if overridable else [x], [scaled.outputs[0]], nodes=[scaled],
                         initializers=[k])
        before = Window([helper.make_node("Reshape", ["xk", "s"], ["y"])], ["y"], {"xk": "xk"},
                        {"s": np.array([4], np.int64)})
        after = Window([helper.make_node("Reshape", ["x", "s"], ["y2"])], ["y2"], {"x": "x"},
                       {"s": np.array([4], np.int64)})
        assert Roundings(graph).same(_record(before, after)) == (not overridable)
