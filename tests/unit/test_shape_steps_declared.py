"""Symbolic shape steps are declared per op in ``rules/`` and looked up in the value passed."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxfold.analysis.dim_algebra import Known, Sym
from onnxfold.analysis.shapes import infer_shapes
from onnxfold.analysis.step_inputs import ShapeSteps, StepInputs
from onnxfold.analysis.symbolic import shape_values
from onnxfold.declare.catalogue import Catalogue, load_catalogue
from onnxfold.declare.registry import RULES_ATTR, ShapeValueRule, shape_value
from onnxfold.ir.constants import source_array
from rules.shape_values import SHAPE_BUILDERS


def _shape_gather_model() -> ir.Model:
    """y = Shape(x)[1] + 2 with x of shape [N, 8]."""
    graph = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["s"]),
         helper.make_node("Gather", ["s", "one"], ["d"], axis=0),
         helper.make_node("Add", ["d", "two"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [])],
        [numpy_helper.from_array(np.array(1, np.int64), "one"),
         numpy_helper.from_array(np.array(2, np.int64), "two")])
    model = ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    infer_shapes(model)
    return model


def _output(model: ir.Model, op: str) -> ir.Value:
    return next(n for n in model.graph if n.op_type == op).outputs[0]


def test_the_catalogue_collects_the_shape_steps_of_the_rules():
    steps = load_catalogue().shape_steps
    assert {"Shape", "Gather", "Concat", "Reshape", "Where", "Size"} <= set(steps.values)
    assert {"Reshape", "MatMul", "Relu", "Add", "ReduceSum", "Concat"} <= set(steps.dims)
    assert set(steps.every_output_dims) == {"Split", "LSTM", "GRU", "RNN", "If"}


def test_shape_values_follow_the_steps_passed_and_only_those():
    model = _shape_gather_model()
    steps = load_catalogue().shape_steps
    known = shape_values(model.graph, source_array, steps=steps)
    assert known[_output(model, "Shape")].elements == (Sym(("dim", "N")), 8)
    assert known[_output(model, "Add")].elements == (10,)
    without_gather = dataclasses.replace(
        steps, values={op: fn for op, fn in steps.values.items() if op != "Gather"})
    known = shape_values(model.graph, source_array, steps=without_gather)
    assert _output(model, "Shape") in known
    assert _output(model, "Gather") not in known and _output(model, "Add") not in known


def test_a_declared_step_is_what_the_driver_calls():
    seen: list[str] = []

    @shape_value("Shape")
    def fixed_shape(step: StepInputs) -> Known | None:
        seen.append(step.node.op_type)
        return Known((3, 8))

    model = _shape_gather_model()
    steps = load_catalogue().shape_steps
    mine = ShapeSteps({**steps.values, "Shape": fixed_shape}, steps.dims, steps.every_output_dims)
    known = shape_values(model.graph, source_array, steps=mine)
    assert seen == ["Shape"]
    assert known[_output(model, "Add")].elements == (10,)
    rules = getattr(fixed_shape, RULES_ATTR)
    assert rules == (ShapeValueRule("Shape", fixed_shape, rules[0].source),)


def test_an_op_declared_twice_is_refused():
    existing = next(r for r in load_catalogue().of(ShapeValueRule) if r.op_type == "Shape")
    with pytest.raises(ValueError, match=r"shape_value\.Shape declared twice"):
        load_catalogue() + Catalogue((existing,))


def test_disabling_an_op_keeps_its_shape_steps():
    """Shape steps describe ops (like op facts): ``--disable-rule Gather`` stops folding
    Gather, not knowing what a Gather of a shape is."""
    catalogue = load_catalogue().without({"Gather", "Shape"})
    assert catalogue.shape_steps == load_catalogue().shape_steps


def test_the_known_shape_value_pattern_roots_at_ops_with_a_step():
    """Every root of ``known_shape_value`` has a shape-value step (a root without one could
    never match); ConstantOfShape's step only feeds other steps (torch's expand(-1))."""
    steps = load_catalogue().shape_steps
    assert set(SHAPE_BUILDERS) == set(steps.values) - {"ConstantOfShape"}


def test_a_filtered_catalogue_keeps_the_op_facts_its_folders_gave():
    """``shape_only`` describes ops: ``--disable-rule Shape`` drops Shape's folder, not the
    fact that Shape folds from a shape alone (``without``, ``only`` and ``+`` keep it)."""
    every = load_catalogue()
    assert {"Shape", "Size"} <= every.shape_only
    assert every.without({"Shape", "Size"}).shape_only == every.shape_only
    assert every.only("drop_noop").shape_only == every.shape_only
    assert (every.only() + Catalogue(())).shape_only == every.shape_only
    assert every.without({"Shape"}).folder("", "Shape", 21) is None
