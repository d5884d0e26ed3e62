"""Dims whose product overflows int64: one line, exit 2, in every command, never an internal
error.

A value declared ``float[2**32, 2**32, 4]`` can hold no tensor (its bytes exceed 2**63 - 1),
and every size computed from it overflows: the check's feeds raised numpy's "array is too
big" as an internal error (exit 3), so did ``compare`` and ``--latency``. Such a declaration
(an input, a ``value_info``, a runtime constant; its known dims alone, beside a symbolic one)
is refused when the model is loaded, naming the value. A huge shape the graph only computes
(a constant Expand target) is folded around: the pool budget declines the Expand, the Size
folder declines a count beyond int64, onnxruntime refuses to run it in one line.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxfold
from tests.support.cli import assert_one_error_line, run_cli

HUGE = [2**32, 2**32, 4]


def _save(path, nodes, inputs, outputs, inits=(), value_info=()) -> str:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits),
                              value_info=list(value_info))
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def _float(name: str, dims) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


DECLARED = {
    "input": lambda p: _save(p, [helper.make_node("Relu", ["x"], ["y"])], [_float("x", HUGE)],
                             [_float("y", HUGE)]),
    "value_info": lambda p: _save(
        p, [helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        [_float("x", ["n"])], [_float("y", ["n"])], value_info=[_float("h", HUGE)]),
    "beside-a-symbolic-dim": lambda p: _save(
        p, [helper.make_node("Relu", ["x"], ["y"])], [_float("x", ["n", 2**32, 2**32])],
        [_float("y", ["n", 2**32, 2**32])]),
}
COMMANDS = {
    "optimize": ["optimize", "M", "-o", "O"], "check": ["optimize", "M", "-o", "O", "--check", "1"],
    "latency": ["optimize", "M", "-o", "O", "--latency", "1"], "inspect": ["inspect", "M"],
    "compare": ["compare", "M", "M"], "verify-folds": ["verify-folds", "M", "M"],
    "split": ["split", "M", "--runtime-const", "x", "-o", "P"],
    "run": ["run", "M", "--runtime-const", "x", "--inputs", "F"],
}


def _argv(command: str, model: str, tmp_path) -> list[str]:
    np.savez(tmp_path / "f.npz", x=np.ones((1, 1, 1), np.float32))
    given = {"M": model, "O": str(tmp_path / "o.onnx"), "P": str(tmp_path / "parts"),
             "F": str(tmp_path / "f.npz")}
    return [given.get(a, a) for a in COMMANDS[command]]


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("declared", list(DECLARED))
def test_a_declared_shape_past_int64_is_one_line_in_every_command(tmp_path, declared, command):
    model = DECLARED[declared](tmp_path / "m.onnx")
    done = run_cli(*_argv(command, model, tmp_path))
    assert_one_error_line(done, "is declared float[", "more than any tensor can hold")
    assert not (tmp_path / "o.onnx").exists() and not (tmp_path / "parts").exists()


def test_the_api_refuses_it_too(tmp_path):
    proto = onnx.load(DECLARED["input"](tmp_path / "m.onnx"))
    with pytest.raises(onnxfold.InputError, match="more than any tensor can hold"):
        onnxfold.optimize(proto)
    with pytest.raises(onnxfold.InputError, match="more than any tensor can hold"):
        onnxfold.Session(proto, ["x"])


def _computed(path) -> str:
    """``y = x + Cast(Size(Expand(1, [2**32, 2**32, 4])))``: the huge shape is computed."""
    return _save(path, [helper.make_node("Expand", ["one", "s"], ["c"]),
                        helper.make_node("Size", ["c"], ["n"]),
                        helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
                        helper.make_node("Add", ["x", "nf"], ["y"])],
                 [_float("x", [1])], [_float("y", [1])],
                 [numpy_helper.from_array(np.array(HUGE, np.int64), "s"),
                  numpy_helper.from_array(np.ones(1, np.float32), "one")])


def test_a_computed_shape_past_int64_is_declined_and_its_check_is_one_line(tmp_path):
    model = _computed(tmp_path / "m.onnx")
    done = run_cli("optimize", model, "-o", str(tmp_path / "o.onnx"), "--explain")
    assert done.returncode == 0, done.stderr
    assert "elements: more than int64 holds" in done.stdout  # Size declined, not an error
    assert "rule error" not in done.stdout
    for command in (["optimize", model, "-o", str(tmp_path / "c.onnx"), "--check", "1"],
                    ["compare", model, model]):
        assert_one_error_line(run_cli(*command), "onnxruntime")
