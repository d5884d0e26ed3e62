"""What random graphs through the fold and ``onnxfold.compare`` found in the check (the
fuzzer's models, seeds 9200000..9200099: the fold right by the fuzzer's own comparison):

- an ``If`` was read as one node: every output read what any branch read, so a folded value
  of an output whose cones read only constants, beside an output that reads an input, was
  said to bake that input's values (``DIFFERS``: a false alarm, exit 1);
- an initializer that is also a graph input, captured by a branch in a folded value's cone,
  was looked up among the set's feeds, where a set that does not move it has none (an
  internal error, exit 3).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxfold
from onnxfold.check.inputs.input_reads import NONE, InputReads, Reads
from tests.support.cli import run_cli

I64, F32 = TensorProto.INT64, TensorProto.FLOAT


def _constant(name: str, array: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(array))


def _two_outputs(condition: list[onnx.NodeProto], cond: str = "cond") -> onnx.ModelProto:
    """``If(cond)`` with two outputs: the first reads input ``x`` in either branch, the
    second is ``[1, 2, 3]`` in the then branch and ``[3, 2, 1]`` in the else branch; the
    model's output adds the second squared to ``Shape`` of the first (a fold of the second's
    square reads no input where the condition is a constant)."""
    then_g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["t0"]),
         _constant("t1", np.array([1, 2, 3], np.int64))], "then", [],
        [helper.make_tensor_value_info("t0", F32, ["n"]),
         helper.make_tensor_value_info("t1", I64, [3])])
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e0"]),
         _constant("e1", np.array([3, 2, 1], np.int64))], "else", [],
        [helper.make_tensor_value_info("e0", F32, ["n"]),
         helper.make_tensor_value_info("e1", I64, [3])])
    graph = helper.make_graph(
        [*condition,
         helper.make_node("If", [cond], ["o0", "o1"], then_branch=then_g, else_branch=else_g),
         helper.make_node("Mul", ["o1", "o1"], ["sq"]),
         helper.make_node("Shape", ["o0"], ["s0"]),
         helper.make_node("Add", ["sq", "s0"], ["y"])],
        "g", [helper.make_tensor_value_info("x", F32, ["n"])],
        [helper.make_tensor_value_info("y", I64, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    return model


def test_an_if_output_is_read_by_its_own_cone_in_each_branch():
    model = ir.from_proto(_two_outputs([_constant("cond", np.array(True))]))
    reads = InputReads(model, [model.graph.inputs[0]])
    first, second = next(n for n in model.graph if n.op_type == "If").outputs
    assert reads.of(first).values_direct == 1  # x in either branch
    assert reads.of(second) == NONE  # constants in both


@pytest.mark.parametrize("branch", ["then_branch", "else_branch"])
def test_an_if_output_reads_what_its_cone_reads_in_either_branch(branch):
    """Sound as before: an output reads an input if either branch's cone reads it (the
    branch taken or not)."""
    proto = _two_outputs([_constant("cond", np.array(True))])
    graph = next(a.g for a in proto.graph.node[1].attribute if a.name == branch)
    graph.node[1].CopyFrom(helper.make_node("Shape", ["x"], [graph.output[1].name]))
    model = ir.from_proto(proto)
    reads = InputReads(model, [model.graph.inputs[0]])
    second = next(n for n in model.graph if n.op_type == "If").outputs[1]
    assert reads.of(second).values_direct == 1  # a captured value is read whole


def test_an_if_output_read_through_its_condition_reads_what_the_condition_reads():
    model = ir.from_proto(_two_outputs([
        helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
        _constant("zero", np.array(0.0, np.float32)),
        helper.make_node("Greater", ["m", "zero"], ["cond"])]))
    reads = InputReads(model, [model.graph.inputs[0]])
    second = next(n for n in model.graph if n.op_type == "If").outputs[1]
    assert reads.of(second).values_direct == 1  # which branch runs is x's values'


def test_a_fold_of_an_if_output_that_reads_no_input_passes_the_check(tmp_path):
    source = tmp_path / "m.onnx"
    onnx.save(_two_outputs([_constant("cond", np.array(True))]), source)
    proc = run_cli("optimize", source, "-o", tmp_path / "o.onnx", "--check", "2", "--json",
                   tmp_path / "r.json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _fold_states(tmp_path / "r.json") == ["bitwise"]


def test_a_default_a_branch_captures_is_its_default_where_a_set_does_not_feed_it(tmp_path):
    """``w`` (int64, an initializer and a graph input) is read in a then branch whose shape
    the fold folds; the check's sets feed no int64 default: its cone reads the default."""
    then_g = helper.make_graph([helper.make_node("Concat", ["w", "w"], ["t"], axis=0)], "then",
                               [], [helper.make_tensor_value_info("t", I64, [4])])
    else_g = helper.make_graph([_constant("e", np.arange(4, dtype=np.int64))], "else", [],
                               [helper.make_tensor_value_info("e", I64, [4])])
    graph = helper.make_graph(
        [_constant("cond", np.array(True)),
         helper.make_node("If", ["cond"], ["v"], then_branch=then_g, else_branch=else_g),
         helper.make_node("Shape", ["v"], ["s"]),
         helper.make_node("Add", ["x", "s"], ["y0"]),
         helper.make_node("Add", ["y0", "v"], ["y"])],
        "g", [helper.make_tensor_value_info("x", I64, ["n"]),
              helper.make_tensor_value_info("w", I64, [2])],
        [helper.make_tensor_value_info("y", I64, [4])],
        [numpy_helper.from_array(np.array([5, 7], np.int64), "w")])
    source = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), source)
    proc = run_cli("optimize", source, "-o", tmp_path / "o.onnx", "--check", "2", "--json",
                   tmp_path / "r.json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _fold_states(tmp_path / "r.json") == ["bitwise"]
    result = onnxfold.compare(str(source), str(tmp_path / "o.onnx"), n=1)
    assert result.ok and result.folds is not None
    assert [t.state for t in result.folds.tensors] == ["bitwise"]


def _fold_states(report: Path) -> list[str]:
    """The states of the fold verification's tensors in a ``--json`` report."""
    return [t["state"] for t in json.loads(report.read_text())["check"]["folds"]["tensors"]]


def test_a_read_only_through_an_op_read_whole_is_compared_not_failed_unrun():
    """``values_shown`` keeps apart the input values that reach a value only through an op the
    check reads whole (here the If's branches): a possible read, compared on the input sets."""
    model = ir.from_proto(_two_outputs([_constant("cond", np.array(True))]))
    reads = InputReads(model, [model.graph.inputs[0]])
    first = next(n for n in model.graph if n.op_type == "If").outputs[0]
    assert reads.of(first).values_direct == 1 and reads.of(first).values_shown == 0
    neg = next(n for n in model.graph if n.op_type == "Shape").outputs[0]
    assert reads.of(neg).values_direct == 0  # (a Shape reads no values)
    assert reads.of(model.graph.inputs[0]).values_shown == 1


def test_a_forged_fold_of_an_if_output_that_reads_an_input_is_caught_on_the_sets(tmp_path):
    """The If's output stands in the second model as a constant: a wrong fold (the output is
    ``x``), compared on the input sets and failed there, never passed."""
    x = helper.make_tensor_value_info("x", F32, [3])
    then_g = helper.make_graph([helper.make_node("Identity", ["x"], ["t0"])], "then", [],
                               [helper.make_tensor_value_info("t0", F32, [3])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e0"])], "else", [],
                               [helper.make_tensor_value_info("e0", F32, [3])])
    out = helper.make_tensor_value_info("y", F32, [3])
    onnx.save(helper.make_model(helper.make_graph(
        [_constant("cond", np.array(True)),
         helper.make_node("If", ["cond"], ["o0"], then_branch=then_g, else_branch=else_g),
         helper.make_node("Add", ["o0", "x"], ["y"])], "g", [x], [out]),
        opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "a.onnx")
    onnx.save(helper.make_model(helper.make_graph(
        [helper.make_node("Add", ["o0", "x"], ["y"])], "g", [x], [out],
        [numpy_helper.from_array(np.zeros(3, np.float32), "o0")]),
        opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "b.onnx")
    result = onnxfold.compare(str(tmp_path / "a.onnx"), str(tmp_path / "b.onnx"), n=2)
    assert not result.ok
    assert result.folds is not None
    assert [t.state for t in result.folds.tensors] == ["differs"], result.folds.tensors


def test_a_forged_fold_read_through_ops_the_spec_gives_fails_unrun(tmp_path):
    """``Neg(x)`` stands in the second model as the constant it is on the one input set the
    check runs (given by ``inputs``): equal there, yet a fold of an input's values, which the
    check shows by the graph and fails without running it."""
    x = helper.make_tensor_value_info("x", F32, [3])
    out = helper.make_tensor_value_info("y", F32, [3])
    given = np.array([1.5, -2.0, 0.25], np.float32)
    onnx.save(helper.make_model(helper.make_graph(
        [helper.make_node("Neg", ["x"], ["n0"]), helper.make_node("Add", ["n0", "x"], ["y"])],
        "g", [x], [out]), opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "a.onnx")
    onnx.save(helper.make_model(helper.make_graph(
        [helper.make_node("Add", ["n0", "x"], ["y"])], "g", [x], [out],
        [numpy_helper.from_array(-given, "n0")]), opset_imports=[helper.make_opsetid("", 17)]),
        tmp_path / "b.onnx")
    result = onnxfold.compare(str(tmp_path / "a.onnx"), str(tmp_path / "b.onnx"),
                              inputs={"x": given}, n=1)
    assert result.folds is not None and not result.ok
    [verdict] = result.folds.tensors
    assert verdict.state == "differs" and "a fold computes a value once" in verdict.reason


def _reads_of_y(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
                initializers: list[onnx.TensorProto] = ()) -> Reads:
    """The check's reads of value ``y`` of a graph of ``nodes``, every input fed."""
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", I64, None)],
                              list(initializers))
    model = ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    reads = InputReads(model, list(model.graph.inputs))
    return reads.of(next(v for n in model.graph for v in n.outputs if v.name == "y"))


@pytest.mark.parametrize(("picks", "values_read"), [
    ([False, False, False], 0), ([True, True, True], 1), ([True, False, True], 1)])
def test_a_where_picking_one_branch_everywhere_reads_the_others_shape_alone(picks,
                                                                           values_read):
    """Seed 9300232: ``Where(False, x, w)`` is ``w`` whatever ``x`` holds; a condition that
    picks ``x`` anywhere reads its values."""
    reads = _reads_of_y(
        [helper.make_node("Where", ["c", "x", "w"], ["y"])],
        [helper.make_tensor_value_info("x", I64, [])],
        [numpy_helper.from_array(np.array(picks), "c"),
         numpy_helper.from_array(np.array([-1, -2, 1], np.int64), "w")])
    assert reads.values_direct == values_read and reads.shapes == 1


@pytest.mark.parametrize(("dims", "values_read"), [([0], 0), (["n"], 1), ([2], 1)])
def test_an_input_declared_empty_has_no_values_to_read(dims, values_read):
    """Seed 9300373: ``Concat(w, x, x)`` of an ``x`` of shape ``[0]`` is ``w``."""
    reads = _reads_of_y(
        [helper.make_node("Concat", ["w", "x", "x"], ["y"], axis=0)],
        [helper.make_tensor_value_info("x", I64, dims)],
        [numpy_helper.from_array(np.array([0, 1, 1], np.int64), "w")])
    assert reads.values_direct == values_read


def test_a_fold_failed_unrun_names_the_inputs_the_graph_shows_it_reads(tmp_path):
    """``s = If(...)(b) + a`` stands as a constant: failed for ``a``, read by an ``Add``; ``b``
    is read only in the If's branch, where the check cannot show its values matter."""
    x = [helper.make_tensor_value_info(name, F32, [3]) for name in ("a", "b")]
    then_g = helper.make_graph([helper.make_node("Identity", ["b"], ["t0"])], "then", [],
                               [helper.make_tensor_value_info("t0", F32, [3])])
    else_g = helper.make_graph([helper.make_node("Neg", ["b"], ["e0"])], "else", [],
                               [helper.make_tensor_value_info("e0", F32, [3])])
    out = helper.make_tensor_value_info("y", F32, [3])
    onnx.save(helper.make_model(helper.make_graph(
        [_constant("cond", np.array(True)),
         helper.make_node("If", ["cond"], ["o0"], then_branch=then_g, else_branch=else_g),
         helper.make_node("Add", ["o0", "a"], ["s"]), helper.make_node("Add", ["s", "a"], ["y"])],
        "g", x, [out]), opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "a.onnx")
    onnx.save(helper.make_model(helper.make_graph(
        [helper.make_node("Add", ["s", "a"], ["y"])], "g", x, [out],
        [numpy_helper.from_array(np.zeros(3, np.float32), "s")]),
        opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "b.onnx")
    result = onnxfold.compare(str(tmp_path / "a.onnx"), str(tmp_path / "b.onnx"), n=2)
    assert result.folds is not None
    [verdict] = result.folds.tensors
    assert verdict.state == "differs"
    assert "reads the values of input a (" in verdict.reason, verdict.reason
