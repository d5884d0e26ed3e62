"""A value defined twice (two initializers of one name, a dense and a sparse one, a Constant
node and an initializer, two nodes' outputs, two inputs): no valid ONNX graph, and onnxruntime
runs one copy while onnx-ir keeps the other, so the check would verify what does not run. Every
command refuses it on load, one line naming the value, exit 2, a subgraph's node defining a name
visible in it (an input, an initializer or an earlier node's output of any enclosing graph)
too; what ONNX allows (an input that is also an initializer, a subgraph's input or initializer
shadowing an outer name, a name its holder or a later node defines) still loads."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxfold
from onnxfold.errors import InputError
from tests.support.cli import REFUSAL_TIMEOUT, assert_ok, assert_one_error_line, run_cli
from tests.support.models import make_model, tensor, vinfo

W = np.arange(16, dtype=np.float32).reshape(4, 4)
IO = ([vinfo("x", shape=["batch", 4])], [vinfo("y", shape=["batch", 4])])


def _matmul(inits, nodes=()):
    return make_model([*nodes, helper.make_node("MatMul", ["x", "Wt"], ["y"])], *IO, inits)


def _sparse(name, arr):
    flat = arr.reshape(-1)
    return helper.make_sparse_tensor(tensor(name, flat), tensor(name + "_i",
                                     np.arange(flat.size, dtype=np.int64)), list(arr.shape))


def _two_initializers():
    return _matmul([tensor("Wt", W), tensor("Wt", W + 1)])


def _dense_and_sparse():
    model = _matmul([tensor("Wt", W)])
    model.graph.sparse_initializer.append(_sparse("Wt", W + 1))
    return model


def _two_sparse():
    model = _matmul([])
    model.graph.sparse_initializer.extend([_sparse("Wt", W), _sparse("Wt", W + 1)])
    return model


def _constant_and_initializer():
    return _matmul([tensor("Wt", W)],
                   [helper.make_node("Constant", [], ["Wt"], value=tensor("v", W + 1))])


def _two_node_outputs():
    return make_model([helper.make_node("Relu", ["x"], ["h"]),
                       helper.make_node("Neg", ["x"], ["h"]),
                       helper.make_node("MatMul", ["h", "W"], ["y"])], *IO, [tensor("W", W)])


def _node_output_is_an_input():
    return make_model([helper.make_node("Relu", ["x"], ["x"]),
                       helper.make_node("MatMul", ["x", "W"], ["y"])], *IO, [tensor("W", W)])


def _two_inputs():
    model = _matmul([tensor("Wt", W)])
    model.graph.input.append(vinfo("x", shape=["batch", 4]))
    return model


def _in_a_branch():
    branch = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["b"]), helper.make_node("Neg", ["x"], ["b"])],
        "then", [], [vinfo("b", shape=["batch", 4])])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["c"])], "else", [],
                              [vinfo("c", shape=["batch", 4])])
    return make_model([helper.make_node("If", ["cond"], ["y"], then_branch=branch,
                                        else_branch=other)],
                      [vinfo("x", shape=["batch", 4])], [vinfo("y", shape=["batch", 4])],
                      [tensor("cond", np.array(True))])


def _branch_redefines_an_outer_value():
    """A branch's node defines ``h``, which a node of the enclosing graph defines already
    (onnx's checker and onnxruntime refuse it)."""
    branch = helper.make_graph([helper.make_node("Neg", ["x"], ["h"])], "then", [],
                               [vinfo("h", shape=["batch", 4])])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["h2"])], "else", [],
                              [vinfo("h2", shape=["batch", 4])])
    return make_model([helper.make_node("Relu", ["x"], ["h"]),
                       helper.make_node("If", ["cond"], ["z"], then_branch=branch,
                                        else_branch=other),
                       helper.make_node("Add", ["h", "z"], ["y"])], *IO,
                      [tensor("cond", np.array(True))])


def _nested_branch_redefines_an_input():
    """A Loop body inside an If branch defines ``x``, the main graph's input: visible two
    graphs up."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("Neg", ["v_in"], ["x"])], "body",
        [vinfo("i", TensorProto.INT64, []), vinfo("c_in", TensorProto.BOOL, []),
         vinfo("v_in", shape=["batch", 4])],
        [vinfo("c_out", TensorProto.BOOL, []), vinfo("x", shape=["batch", 4])])
    then = helper.make_graph([helper.make_node("Loop", ["n", "", "x"], ["b"], body=body)],
                             "then", [], [vinfo("b", shape=["batch", 4])])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["c"])], "else", [],
                              [vinfo("c", shape=["batch", 4])])
    return make_model([helper.make_node("If", ["cond"], ["y"], then_branch=then,
                                        else_branch=other)], *IO,
                      [tensor("cond", np.array(True)), tensor("n", np.array(2, np.int64))])


CASES = {"two_initializers": (_two_initializers, "'Wt'"),
         "dense_and_sparse": (_dense_and_sparse, "'Wt'"),
         "two_sparse": (_two_sparse, "'Wt'"),
         "constant_and_initializer": (_constant_and_initializer, "'Wt'"),
         "two_node_outputs": (_two_node_outputs, "'h'"),
         "node_output_is_an_input": (_node_output_is_an_input, "'x'"),
         "two_inputs": (_two_inputs, "'x'"),
         "in_a_branch": (_in_a_branch, "'b'"),
         "branch_redefines_an_outer_value": (_branch_redefines_an_outer_value, "'h'"),
         "nested_branch_redefines_an_input": (_nested_branch_redefines_an_input, "'x'")}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("command", ["optimize", "optimize --skip-check", "compare",
                                     "verify-folds", "compare B"])
def test_a_value_defined_twice_is_refused(tmp_path, case, command):
    build, name = CASES[case]
    bad, good = tmp_path / "bad.onnx", tmp_path / "good.onnx"
    onnx.save(build(), bad)
    onnx.save(_matmul([tensor("Wt", W)]), good)
    out = tmp_path / "o.onnx"
    args = {"optimize": ["optimize", bad, "-o", out],
            "optimize --skip-check": ["optimize", bad, "-o", out, "--skip-check"],
            "compare": ["compare", bad, good, "-n", "1"],
            "verify-folds": ["verify-folds", bad, good],
            "compare B": ["compare", good, bad, "-n", "1"]}[command]
    done = run_cli(*args, timeout=REFUSAL_TIMEOUT)
    assert_one_error_line(done, name, "defined twice", str(bad))
    assert not out.exists()


@pytest.mark.parametrize("case", CASES)
def test_an_in_memory_model_defined_twice_is_refused(case):
    build, name = CASES[case]
    with pytest.raises(InputError, match=f"value {name} is defined twice"):
        onnxfold.optimize(build())


def test_what_onnx_allows_still_loads(tmp_path):
    """An initializer listed among the inputs (an overridable default); an If branch with an
    initializer, and a Loop body with an input, named as values of the enclosing graph
    (onnxruntime reads the inner ones)."""
    listed = _matmul([tensor("Wt", W)])
    listed.graph.input.append(vinfo("Wt", shape=[4, 4]))
    then = helper.make_graph([helper.make_node("Identity", ["W"], ["b"])], "then", [],
                             [vinfo("b", shape=[4, 4])], [tensor("W", W + 1)])
    other = helper.make_graph([helper.make_node("Identity", ["W"], ["c"])], "else", [],
                              [vinfo("c", shape=[4, 4])])
    branch = make_model([helper.make_node("If", ["cond"], ["Wt"], then_branch=then,
                                          else_branch=other),
                         helper.make_node("MatMul", ["x", "Wt"], ["y"])], *IO,
                        [tensor("cond", np.array(True)), tensor("W", W)])
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("Neg", ["x"], ["x_out"])], "body",
        [vinfo("i", TensorProto.INT64, []), vinfo("c_in", TensorProto.BOOL, []),
         vinfo("x", shape=["batch", 4])],
        [vinfo("c_out", TensorProto.BOOL, []), vinfo("x_out", shape=["batch", 4])])
    loop = make_model([helper.make_node("Loop", ["n", "", "x"], ["y"], body=body)], *IO,
                      [tensor("n", np.array(2, np.int64))])
    for k, model in enumerate([listed, branch, loop]):
        path = tmp_path / f"m{k}.onnx"
        onnx.save(model, path)
        assert_ok(run_cli("compare", path, path, "-n", "1"))


def _two_values(where: str) -> onnx.ModelProto:
    """A Constant with two ``value`` attributes (onnxruntime reads the first, onnx-ir kept the
    last: the fold computed x + 2 where onnxruntime computes x + 1), in the main graph or a
    local function's body."""
    constant = helper.make_node("Constant", [], ["k"], name="two_values")
    constant.attribute.extend([
        helper.make_attribute("value", helper.make_tensor("t", TensorProto.FLOAT, [4], [1] * 4)),
        helper.make_attribute("value", helper.make_tensor("t", TensorProto.FLOAT, [4], [2] * 4))])
    if where == "graph":
        return make_model([constant, helper.make_node("Add", ["x", "k"], ["y"])], *IO)
    body = helper.make_function("local", "AddK", ["a"], ["b"],
                                [constant, helper.make_node("Add", ["a", "k"], ["b"])],
                                [helper.make_opsetid("", 17)])
    model = make_model([helper.make_node("AddK", ["x"], ["y"], domain="local")], *IO)
    model.opset_import.append(helper.make_opsetid("local", 1))
    model.functions.append(body)
    return model


@pytest.mark.parametrize("where", ["graph", "function"])
def test_two_attributes_of_one_name_are_refused(tmp_path, where):
    bad, out = tmp_path / "bad.onnx", tmp_path / "o.onnx"
    onnx.save(_two_values(where), bad)
    done = run_cli("optimize", bad, "-o", out, "--skip-check", timeout=REFUSAL_TIMEOUT)
    assert_one_error_line(done, "node 'two_values' (Constant) has two attributes named 'value'")
    assert not out.exists()
    with pytest.raises(InputError, match="two attributes named 'value'"):
        onnxfold.optimize(_two_values(where), check=False)


def test_a_value_a_function_body_never_defines_is_refused(tmp_path):
    """A body reading a name that is neither its input nor a node's output of it: onnxruntime
    refuses the model; the Python API ended in onnx-ir's RuntimeError (cloning the model)."""
    body = helper.make_function("local", "F", ["a"], ["b"],
                                [helper.make_node("Add", ["a", "zz"], ["b"], name="reads_zz")],
                                [helper.make_opsetid("", 17)])
    model = make_model([helper.make_node("F", ["x"], ["y"], domain="local")], *IO)
    model.opset_import.append(helper.make_opsetid("local", 1))
    model.functions.append(body)
    bad, out = tmp_path / "bad.onnx", tmp_path / "o.onnx"
    onnx.save(model, bad)
    said = "function 'F': value 'zz' read by Add node 'reads_zz' is never defined"
    assert_one_error_line(run_cli("optimize", bad, "-o", out, "--skip-check",
                                  timeout=REFUSAL_TIMEOUT), said)
    assert not out.exists()
    with pytest.raises(InputError, match=said):
        onnxfold.optimize(model, check=False)
