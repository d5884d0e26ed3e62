"""Shape values updated after an edit (``symbolic_update.updated_shape_values``, what the rewrite
driver uses between sweeps) equal a full computation, and compute again only the edited nodes
and what their changes reach."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx_ir as ir
import pytest
from onnx import helper

from onnxfold.analysis.step_inputs import REFINED_KEY, ShapeSteps, shared_dim_names
from onnxfold.analysis.symbolic import shape_values
from onnxfold.analysis.symbolic_update import updated_shape_values
from onnxfold.declare.catalogue import load_catalogue
from onnxfold.ir.constants import source_array
from tests.support.models import make_model, stale_named_sum_reshaped, tensor, vinfo


def _counting_steps(counts: Counter) -> ShapeSteps:
    """The catalogue's steps, counting the nodes whose shape value each op's step computes."""
    steps = load_catalogue().shape_steps

    def counted(op, step):
        def run(inputs):
            counts[inputs.node.name] += 1
            return step(inputs)
        return run

    return ShapeSteps({op: counted(op, step) for op, step in steps.values.items()},
                      steps.dims, steps.every_output_dims)


def _snapshot(graph, known):
    values = [v for node in graph for v in node.outputs]
    return ({v.name: dict.get(known, v) for v in values},
            {v.name: v.meta.get(REFINED_KEY) for v in values})


def _two_targets():
    """Two Reshape targets of x: [N, 4, 6]: Concat(Shape(x)[0:1], rest) and an unrelated
    Concat(Shape(x)[1:2], [6, 1])."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="head", end=1),
             helper.make_node("Concat", ["s", "rest"], ["t"], name="cat", axis=0),
             helper.make_node("Reshape", ["x", "t"], ["y"], name="reshape"),
             helper.make_node("Shape", ["x"], ["s2"], name="other", start=1, end=2),
             helper.make_node("Concat", ["s2", "more"], ["t2"], name="cat2", axis=0),
             helper.make_node("Reshape", ["x", "t2"], ["z"], name="reshape2")]
    return make_model(nodes, [vinfo("x", shape=["N", 4, 6])],
                      [vinfo("y", shape=["N", 2, 12]), vinfo("z", shape=[4, 6, 1])],
                      [tensor("rest", np.array([2, 12], np.int64)),
                       tensor("more", np.array([6, 1], np.int64))])


def test_an_edit_computes_again_only_what_it_reaches():
    model = ir.from_proto(_two_targets())
    graph, ambiguous = model.graph, shared_dim_names(model)
    counts: Counter = Counter()
    steps = _counting_steps(counts)
    before = shape_values(graph, source_array, ambiguous, steps=steps)
    cat = next(n for n in graph if n.name == "cat")
    rest2 = ir.Value(name="rest2", shape=ir.Shape([2]), type=ir.TensorType(ir.DataType.INT64),
                     const_value=ir.Tensor(np.array([3, 8], np.int64), name="rest2"))
    graph.register_initializer(rest2)
    cat.replace_input_with(1, rest2)
    counts.clear()
    known, changed = updated_shape_values(graph, before, {cat}, source_array, ambiguous,
                                          steps=steps)
    assert counts["other"] == counts["cat2"] == counts["head"] == 0  # not reached by the edit
    assert counts["cat"] == 1
    t = cat.outputs[0]
    assert t in changed and known[t].elements[1:] == (3, 8)
    updated = _snapshot(graph, known)
    assert updated == _snapshot(graph, shape_values(graph, source_array, ambiguous,
                                                    steps=load_catalogue().shape_steps))


def test_a_shared_stale_name_is_computed_whole_and_equal():
    """``a`` and ``r`` share the stale name ``unk__2``, which both refine to ``N``: an edit at
    the Relu updates to what a full computation gives."""
    proto = stale_named_sum_reshaped()
    model = ir.from_proto(proto)
    graph, ambiguous = model.graph, shared_dim_names(model)
    steps = load_catalogue().shape_steps
    before = shape_values(graph, source_array, ambiguous, steps=steps)
    relu = next(n for n in graph if n.name == "relu")
    known, _ = updated_shape_values(graph, before, {relu}, source_array, ambiguous, steps=steps)
    updated = _snapshot(graph, known)
    assert updated == _snapshot(graph, shape_values(graph, source_array, ambiguous, steps=steps))
    assert any(dims is not None for dims in updated[1].values())  # something was refined


def _constant_target():
    """x: [N, 4, 6] reshaped to Concat(Shape(x)[0:1], c), ``c`` a Constant node's [2, 12], and
    a Constant ``d`` no step reads: a constant's elements are read the first time a step or a
    rule asks (``symbolic.KnownValues``)."""
    nodes = [helper.make_node("Constant", [], ["c"], name="const",
                              value=helper.make_tensor("c", 7, [2], [2, 12])),
             helper.make_node("Shape", ["x"], ["s"], name="head", end=1),
             helper.make_node("Concat", ["s", "c"], ["t"], name="cat", axis=0),
             helper.make_node("Reshape", ["x", "t"], ["y"], name="reshape"),
             helper.make_node("Constant", [], ["d"], name="unread",
                              value=helper.make_tensor("d", 7, [1], [5]))]
    model = ir.from_proto(make_model(nodes, [vinfo("x", shape=["N", 4, 6])],
                                     [vinfo("y", shape=["N", 2, 12]), vinfo("d", shape=[1])]))
    for node in model.graph:
        if node.op_type == "Constant":  # typed as shape inference types them
            node.outputs[0].dtype = ir.DataType.INT64
            node.outputs[0].shape = ir.Shape([len(node.attributes["value"].as_tensor().numpy())])
    return model


def _const_array(value):
    """A constant's data: an initializer's or a Constant node's (what a sweep's view reads)."""
    producer = value.producer()
    if producer is not None and producer.op_type == "Constant":
        return producer.attributes["value"].as_tensor().numpy()
    return source_array(value)


@pytest.mark.parametrize("whole", [False, True])
def test_a_constant_edited_but_equal_is_not_a_change(whole):
    """An edited Constant node whose elements stay the same changes no shape value: its readers
    are not computed again, nor reported (the driver marks the readers of what it reports).
    A constant's elements are read lazily: read before the edit and not yet after, the two
    sides compare what a step or rule would read, not what each happened to read.
    ``whole``: the update falls back to a whole computation (no placeholders recorded), which
    compares the same way (``d``, read before by a rule, is not read by the walk)."""
    model = _constant_target()
    graph, ambiguous = model.graph, shared_dim_names(model)
    counts: Counter = Counter()
    steps = _counting_steps(counts)
    before = shape_values(graph, _const_array, ambiguous, steps=steps)
    const = next(n for n in graph if n.name == "const")
    c = const.outputs[0]
    assert dict.get(before, c) is not None  # read when the Concat's step asked
    d = next(n for n in graph if n.name == "unread").outputs[0]
    assert before.get(d) is not None  # read as a rule asks (no step reads it)
    if whole:
        before.placeholders = None
    counts.clear()
    known, changed = updated_shape_values(graph, before, {const}, _const_array, ambiguous,
                                          steps=steps)
    assert changed == set()
    if not whole:
        assert counts["cat"] == 0  # the reader of an unchanged value is kept
    assert known.get(c) is not None and known.get(c).elements == (2, 12)


def test_a_constant_whose_elements_change_is_a_change():
    """The same edit with other elements is a change, reported with what it reaches."""
    model = _constant_target()
    graph, ambiguous = model.graph, shared_dim_names(model)
    steps = load_catalogue().shape_steps
    before = shape_values(graph, _const_array, ambiguous, steps=steps)
    const = next(n for n in graph if n.name == "const")
    const.attributes["value"] = ir.AttrTensor(
        "value", ir.Tensor(np.array([3, 8], np.int64), name="c"))
    known, changed = updated_shape_values(graph, before, {const}, _const_array, ambiguous,
                                          steps=steps)
    t = next(n for n in graph if n.name == "cat").outputs[0]
    assert const.outputs[0] in changed and t in changed
    assert known[t].elements[1:] == (3, 8)
