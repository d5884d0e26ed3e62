"""The adversarial round on the check's own dim walk (``check/inputs/graph_dims``): each
graph here made the first version of the walk read a relation that is false (the check then
fed inputs the model cannot run, and gave up where the fold's walk had planned them), or run
for minutes. Each must now plan inputs the model runs (``compare`` of the model with itself
passes), in no time."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import onnxfold
from onnxfold.check.inputs import dim_relations
from onnxfold.check.inputs.dim_relations import _text
from onnxfold.check.inputs.feeds import synthetic_feeds

N = helper.make_node


def _ints(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _model(nodes, inputs, inits=(), opset=18):
    """One output ``z`` of unknown dims; ``inputs``: (name, elem type, shape)."""
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info("z", T.FLOAT, None)], list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _flatten_negative_axis():
    """Flatten(x [1, a, 5], axis=-1) is [a, 5] (not [5a, 1]): y [u, 5] broadcast with it."""
    return _model([N("Flatten", ["x"], ["f"], axis=-1), N("Add", ["f", "y"], ["z"])],
                  [("x", T.FLOAT, [1, "a", 5]), ("y", T.FLOAT, ["u", 5])], opset=17)


def _split_sizes_unknown():
    """Split sizes the walk cannot read (Abs of [2, 4]): no equal parts assumed."""
    return _model([N("Abs", ["sz"], ["sizes"]), N("Split", ["x", "sizes"], ["p", "q"], axis=0),
                   N("Add", ["p", "y"], ["z"])],
                  [("x", T.FLOAT, [6]), ("y", T.FLOAT, ["u"])], [_ints("sz", [2, 4])])


def _slice_steps_unknown():
    """Slice steps the walk cannot read (Abs of [2]): no step 1 assumed."""
    return _model([N("Abs", ["sp"], ["steps"]),
                   N("Slice", ["x", "st", "en", "ax", "steps"], ["sl"]),
                   N("Add", ["sl", "y"], ["z"])],
                  [("x", T.FLOAT, ["a", 8]), ("y", T.FLOAT, ["u", "v"])],
                  [_ints("st", [0]), _ints("en", [2**62]), _ints("ax", [1]), _ints("sp", [2])])


def _reduce_axes_unknown():
    """ReduceSum(noop_with_empty_axes=1) over axes the walk cannot read: no no-op assumed."""
    return _model([N("Abs", ["ax"], ["axes"]),
                   N("ReduceSum", ["x", "axes"], ["r"], keepdims=0, noop_with_empty_axes=1),
                   N("Add", ["r", "y"], ["z"])],
                  [("x", T.FLOAT, ["a", 5]), ("y", T.FLOAT, ["u"])], [_ints("ax", [1])])


def _cast_narrows():
    """Cast(2**63 - 1 to int32) is -1 in onnxruntime: a Slice to that end stops one short."""
    return _model([N("Cast", ["big"], ["e32"], to=T.INT32), N("Cast", ["e32"], ["end"], to=T.INT64),
                   N("Slice", ["x", "zero", "end", "ax"], ["sl"]), N("Add", ["sl", "y"], ["z"])],
                  [("x", T.FLOAT, ["a", 8]), ("y", T.FLOAT, ["u", "v"])],
                  [_ints("big", [2**63 - 1]), _ints("zero", [0]), _ints("ax", [1])])


def _empty_value_ints():
    """Constant(value_ints=[]) is an empty tensor, not [0]: the Range is b + 5 long."""
    empty = N("Constant", [], ["k"])
    attribute = onnx.AttributeProto(name="value_ints", type=onnx.AttributeProto.INTS)
    empty.attribute.append(attribute)
    return _model([empty, N("Shape", ["x"], ["s"]), N("Concat", ["s", "k"], ["c"], axis=0),
                   N("Gather", ["c", "m1"], ["last"]), N("Add", ["last", "five"], ["n"]),
                   N("Range", ["zero", "n", "one"], ["r"]), N("Cast", ["r"], ["rf"], to=T.FLOAT),
                   N("Add", ["rf", "y"], ["z"])],
                  [("x", T.FLOAT, ["a", "b"]), ("y", T.FLOAT, ["u"])],
                  [_ints("m1", -1), _ints("five", 5), _ints("zero", 0), _ints("one", 1)])


def _elements_of_other_shapes():
    """A [2, 1] plus a [2] integer tensor is [2, 2]: not two elements paired."""
    return _model([N("Shape", ["x"], ["s"]), N("Unsqueeze", ["s", "one1"], ["col"]),
                   N("Add", ["col", "s"], ["sq"]), N("Reshape", ["sq", "m1"], ["flat"]),
                   N("Gather", ["flat", "one"], ["n"]), N("Range", ["zero", "n", "one"], ["r"]),
                   N("Cast", ["r"], ["rf"], to=T.FLOAT), N("Add", ["rf", "y"], ["z"])],
                  [("x", T.FLOAT, ["a", "b"]), ("y", T.FLOAT, ["u"])],
                  [_ints("one1", [1]), _ints("m1", [-1]), _ints("one", 1), _ints("zero", 0)])


@pytest.mark.parametrize("build", [
    _flatten_negative_axis, _split_sizes_unknown, _slice_steps_unknown, _reduce_axes_unknown,
    _cast_narrows, _empty_value_ints, _elements_of_other_shapes])
def test_the_plan_runs_where_the_walk_could_misread_the_graph(build):
    model = build()
    result = onnxfold.compare(model, model, n=2)
    assert result.ok, result.summary()


def test_the_mask_length_after_an_empty_constant_is_derived():
    feeds, _ = synthetic_feeds(_empty_value_ints())
    assert feeds["y"].shape[0] == feeds["x"].shape[1] + 5


def test_a_layout_fan_out_is_walked_once_per_value(monkeypatch):
    """Six levels of Concat(v x 8) before a Gather: the walk from the Gather back towards an
    input visits each value once (it visited 8**6 of them, and hung at 12 levels)."""
    nodes = [N("Relu", ["x"], ["l0"])]  # (Relu moves no layout: the walk stops there)
    nodes += [N("Concat", [f"l{d}"] * 8, [f"l{d + 1}"], axis=0) for d in range(6)]
    nodes.append(N("Gather", ["l6", "idx"], ["z"], axis=0))
    graph = ir.from_proto(_model(nodes, [("x", T.FLOAT, [1]), ("idx", T.INT64, ["c"])]))
    gather = next(n for n in graph.graph if n.op_type == "Gather")
    visits = []
    real = ir.Value.is_graph_input
    monkeypatch.setattr(ir.Value, "is_graph_input",
                        lambda self: visits.append(self) or real(self))
    assert not dim_relations._reads_input(gather.inputs[0])
    assert len(visits) <= 7


def test_sums_of_many_terms_are_not_multiplied_out():
    """A Mul of two 31-name sums (961 products before the bounds) is unknown at once."""
    from onnxfold.check.inputs.graph_dims import MAX_TERMS, atom, mul
    wide = {(f"n{i}",): 1 for i in range(31)}
    assert mul(wide, wide) is None and len(wide) < MAX_TERMS
    assert mul(atom("a"), atom("b")) == {("a", "b"): 1}


def test_a_negative_term_is_written_with_its_sign():
    assert _text({"b": 1, "a": -1}) == "b - a"
    assert _text({"a": -1}) == "-a" and _text({"a": 2, "": -1}) == "2*a - 1"
