"""An attribute of another type than its op's schema gives it is bad input, one line and exit 2,
with onnx's checker off too (``--skip-check``, ``optimize(check=False)``): a ``Constant``
whose ``value`` was an int ended in an internal error (exit 3) where the fold read it as a
tensor. Every op's attributes are judged, and nothing else is refused: an op onnx does not
know, an attribute its schema does not name, a function body's reference to its caller's
attribute."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

import onnxfold
from onnxfold.errors import InputError
from tests.support.cli import assert_one_error_line, run_cli
from tests.support.files import snapshot

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _mistyped(op: str, name: str, value, inputs, outputs, extra=()) -> onnx.ModelProto:
    node = helper.make_node(op, [i.name for i in inputs], ["y"], name="the_node")
    node.attribute.append(helper.make_attribute(name, value))
    graph = helper.make_graph([node, *extra], "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


CASES = {
    "Constant value as an int": (
        "Constant", "value", 3, [], [helper.make_tensor_value_info("y", I64, [])],
        "attribute value is INT, the op's schema types it TENSOR"),
    "Constant value_ints as a tensor": (
        "Constant", "value_ints", helper.make_tensor("t", I64, [1], [1]), [],
        [helper.make_tensor_value_info("y", I64, [1])],
        "attribute value_ints is TENSOR, the op's schema types it INTS"),
    "ConstantOfShape value as a float": (
        "ConstantOfShape", "value", 1.0, [helper.make_tensor_value_info("x", I64, [2])],
        [helper.make_tensor_value_info("y", F, None)],
        "attribute value is FLOAT, the op's schema types it TENSOR"),
    "Cast to as a float": (
        "Cast", "to", 1.0, [helper.make_tensor_value_info("x", F, [2])],
        [helper.make_tensor_value_info("y", F, [2])],
        "attribute to is FLOAT, the op's schema types it INT"),
    "Transpose perm as an int": (
        "Transpose", "perm", 1, [helper.make_tensor_value_info("x", F, [2, 3])],
        [helper.make_tensor_value_info("y", F, None)],
        "attribute perm is INT, the op's schema types it INTS"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_mistyped_attribute_is_one_line_with_or_without_the_checker(tmp_path, case):
    op, name, value, inputs, outputs, said = CASES[case]
    src = tmp_path / "m.onnx"
    onnx.save(_mistyped(op, name, value, inputs, outputs), src)
    before = snapshot(tmp_path)
    done = run_cli("optimize", src, "-o", tmp_path / "o.onnx", "--skip-check")
    assert_one_error_line(done, "node 'the_node'", f"({op})", said)
    assert snapshot(tmp_path) == before  # nothing written
    assert_one_error_line(run_cli("optimize", src, "-o", tmp_path / "o.onnx"))  # the checker
    with pytest.raises(InputError, match=said):
        onnxfold.optimize(onnx.load(src), check=False)


def test_what_the_schema_does_not_type_is_not_refused(tmp_path):
    """An attribute no schema names (the checker's to judge), an op onnx does not know (of
    another domain), and a function body's Constant taking its caller's attribute."""
    x = helper.make_tensor_value_info("x", F, [2])
    relu = helper.make_node("Relu", ["x"], ["r"])
    relu.attribute.append(helper.make_attribute("unknown_to_onnx", 1.5))
    body_constant = helper.make_node("Constant", [], ["c"])
    body_constant.attribute.append(helper.make_attribute_ref("value", TensorProto.FLOAT))
    body_constant.attribute[0].ref_attr_name = "fill"
    function = helper.make_function(
        "local", "AddFill", ["a"], ["b"],
        [body_constant, helper.make_node("Add", ["a", "c"], ["b"])],
        [helper.make_opsetid("", 17)], attributes=[], attribute_protos=[
            helper.make_attribute("fill", helper.make_tensor("f", F, [1], [2.0]))])
    call = helper.make_node("AddFill", ["r"], ["y"], domain="local")
    graph = helper.make_graph([relu, call], "g", [x], [helper.make_tensor_value_info("y", F,
                                                                                       [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("local", 1)],
                              functions=[function], ir_version=8)
    result = onnxfold.optimize(model, check=False)  # read, not refused
    assert result.report.nodes_before == 2


@pytest.mark.parametrize("opset", [2**40, 0])
def test_an_opset_onnx_does_not_know_is_not_judged(tmp_path, opset):
    """A default opset past what the installed onnx knows (or below 1) types no attribute:
    the check passes over it (its ops may mean something new). It ended in an internal error
    (onnx's get_schema takes no version past int32)."""
    src = tmp_path / "m.onnx"
    model = _mistyped("Transpose", "perm", [1, 0], [helper.make_tensor_value_info("x", F, [2, 3])],
                      [helper.make_tensor_value_info("y", F, None)])
    model.opset_import[0].version = opset
    onnx.save(model, src)
    done = run_cli("optimize", src, "-o", tmp_path / "o.onnx", "--skip-check", "-q")
    assert done.returncode == 0, done.stderr


def _referring(op: str, inputs) -> helper.NodeProto:
    node = helper.make_node(op, [i.name for i in inputs], ["y"], name="the_node")
    taken = helper.make_attribute_ref("value", onnx.AttributeProto.TENSOR)
    taken.ref_attr_name = "nowhere"
    node.attribute.append(taken)
    return node


@pytest.mark.parametrize("where", ["Constant", "ConstantOfShape", "an If branch"])
def test_a_reference_to_a_callers_attribute_outside_a_function_is_one_line(tmp_path, where):
    """Only a function body has a caller: in a model's own graphs a reference stands for
    nothing (it ended in internal errors wherever its tensor was read)."""
    src = tmp_path / "m.onnx"
    shape = helper.make_tensor_value_info("x", I64, [2])
    if where == "an If branch":
        branch = helper.make_graph([_referring("Constant", [])], "b", [],
                                   [helper.make_tensor_value_info("y", F, None)])
        node = helper.make_node("If", ["flag"], ["out"], then_branch=branch, else_branch=branch)
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("flag", 9, [])],
                                  [helper.make_tensor_value_info("out", F, None)])
    else:
        inputs = [shape] if where == "ConstantOfShape" else []
        graph = helper.make_graph([_referring(where, inputs)], "g", inputs,
                                  [helper.make_tensor_value_info("y", F, None)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), src)
    done = run_cli("optimize", src, "-o", tmp_path / "o.onnx", "--skip-check")
    assert_one_error_line(done, "node 'the_node'", "refers to an attribute of a function's "
                          "caller ('nowhere') outside any function")
    with pytest.raises(InputError, match="outside any function"):
        onnxfold.optimize(onnx.load(src), check=False)


@pytest.mark.parametrize("name, value", [("value", 3), ("value_ints", 3),
                                         ("value_float", [1.0, 2.0])])
@pytest.mark.parametrize("opset", [29, None])
def test_a_constant_of_another_type_in_an_unjudged_opset_is_no_internal_error(
        tmp_path, name, value, opset):
    """Where no schema judges the types (an opset onnx does not know, or none for the
    default domain), a Constant's value of another type is read as no value: the model is
    written as it is (it ended in an internal error reading it as its schema types it)."""
    src = tmp_path / "m.onnx"
    node = helper.make_node("Constant", [], ["c"])
    node.attribute.append(helper.make_attribute(name, value))
    graph = helper.make_graph([node, helper.make_node("Identity", ["c"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", F, None)])
    opsets = [helper.make_opsetid("", opset)] if opset is not None else \
        [helper.make_opsetid("other", 1)]
    onnx.save(helper.make_model(graph, opset_imports=opsets, ir_version=8), src)
    done = run_cli("optimize", src, "-o", tmp_path / "o.onnx", "--skip-check", "-q")
    assert done.returncode == 0, done.stderr
