"""The Python API's errors name Python parameters (``dims[batch]``, ``target_opset=99``, ``the
model passed as a``), never a command-line flag, and it refuses what the command line refuses
(a dim of 0, which would compare no element and pass); the command line keeps its flags.

Every flag of the command line's parser is either spelled for Python or listed as one no Python
call takes, so a new flag cannot leak into a Python caller's error unnoticed.
"""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxfold
from onnxfold.app.parser import build_parser
from onnxfold.app.peer_flags import REFUSED, SAME_BY_DEFAULT, SAME_FLAG
from onnxfold.app.python_api import CLI_ONLY, WORDS, python_words
from onnxfold.errors import InputError
from tests.support.cli import assert_one_error_line, run_cli

FLAG = re.compile(r"(?<![\w-])--[a-z]")


def _model() -> onnx.ModelProto:
    """y = x + c, x float32[batch, 2]."""
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "c"], ["y"])], "g",
        [helper.make_tensor_value_info("x", f, ["batch", 2])],
        [helper.make_tensor_value_info("y", f, ["batch", 2])],
        [helper.make_tensor("c", f, [2], [1.0, 2.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture
def path(tmp_path):
    target = tmp_path / "m.onnx"
    onnx.save(_model(), target)
    return str(target)


def _message(call) -> str:
    with pytest.raises(InputError) as caught:
        call()
    text = str(caught.value)
    assert not FLAG.search(text), text
    return text


def test_every_flag_of_the_command_line_is_spelled_for_python_or_cli_only():
    parser = build_parser()
    flags = set()
    for sub in parser._subparsers._group_actions[0].choices.values():  # argparse keeps them
        for action in sub._actions:
            flags.update(o for o in action.option_strings if o.startswith("--"))
    # onnxsim's and onnxslim's: the command line's only
    peers = {*(name for others in SAME_FLAG.values() for name in others), *SAME_BY_DEFAULT,
             *REFUSED, *(o for group in parser._subparsers._group_actions[0].choices[
                 "optimize"]._action_groups if group.title.startswith("onnxsim's")
                 for action in group._group_actions for o in action.option_strings)}
    missing = sorted(flags - set(WORDS) - CLI_ONLY - peers)
    assert not missing, f"flags with no Python spelling, nor listed as CLI-only: {missing}"


@pytest.mark.parametrize("value", [0, -1, True, 2.5, "2"])
def test_a_dim_that_is_not_a_positive_integer_is_refused_by_every_call(path, value):
    for call in (lambda: onnxfold.compare(path, path, dims={"batch": value}),
                 lambda: onnxfold.simplify(path, check_n=1, dims={"batch": value}),
                 lambda: onnxfold.measure_latency(path, path, runs=1, dims={"batch": value})):
        assert _message(call).startswith(f"dims[batch]: {value!r}: must be an integer")


def test_a_numpy_integer_dim_is_a_dim(path):
    assert onnxfold.compare(path, path, dims={"batch": np.int64(3)}).ok


@pytest.mark.parametrize(("call", "start"), [
    (lambda p: onnxfold.compare(p, p, dims={"nope": 3}), "dims[nope]: no input of "),
    (lambda p: onnxfold.compare(_model(), p, dims={"nope": 3}),
     "dims[nope]: no input of the model passed as a has"),
    (lambda p: onnxfold.compare(p, p, int_ranges={"x": (0, 3)}), "int_ranges[x]: the input is"),
    (lambda p: onnxfold.compare(p, p, level="fast"), "level=fast: expected one of"),
    (lambda p: onnxfold.compare(p, p, custom_op_libraries=["/no/such.so"]), ""),
    (lambda p: onnxfold.optimize(p, target_opset=99), "target_opset=99: onnx "),
    (lambda p: onnxfold.optimize(p, input_shapes={"nope": [1, 2]}),
     "input_shapes[nope]: no such input"),
    (lambda p: onnxfold.simplify(_model(), check_n=1, dims={"nope": 2}),
     "dims[nope]: no input of the model given has"),
    (lambda p: onnxfold.Session(p, runtime_constants=["zz*"]),
     "runtime_constants entry zz*: no graph input matches"),
    (lambda p: onnxfold.split_model(onnxfold.load_model(p), ["zz*"]),
     "runtime_constants entry zz*: no graph input"),
])
def test_errors_name_the_python_parameter(path, call, start):
    assert _message(lambda: call(path)).startswith(start)


def test_session_methods_speak_python(path):
    session = onnxfold.Session(path)
    with pytest.raises(InputError) as caught:
        session.run(None, {"nope": np.zeros((1, 2), np.float32)})
    assert not FLAG.search(str(caught.value))


def test_the_command_line_keeps_its_flags(path):
    assert_one_error_line(run_cli("compare", path, path, "--dim", "batch=0"), "--dim batch: ")
    assert_one_error_line(run_cli("optimize", path, "--target-opset", "99"),
                          "--target-opset 99: ")


@pytest.mark.parametrize(("cli", "python"), [
    ("--dim batch: '0': must be", "dims[batch]: '0': must be"),
    ("--input-shape batch=...: no input has", "input_shapes[batch]: no input has"),
    ("--int-range x=3:1: LO must be below HI", "int_ranges[x] = 3:1: LO must be below HI"),
    ("dims guessed (--dim NAME=VALUE sets one)", "dims guessed (dims={NAME: VALUE} sets one)"),
    ("--latency-threads 0: at least 1", "threads=0: at least 1"),
    ("--allow-growth stores it", "growth_factor=None stores it"),
    ("--inline-functions: nothing inlined", "inline_functions: nothing inlined"),
    ("model A vs model B", "the model passed as a vs the model passed as b"),
    ("a --dimension-like word", "a --dimension-like word"),
])
def test_python_words(cli, python):
    assert python_words(cli) == python
