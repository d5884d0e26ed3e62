"""Every numeric flag is parsed by one helper (``onnxfold.numbers``): values beyond int64,
non-ASCII digits (``²`` passes ``str.isdigit()`` but not ``int()``), NaN and infinity are one
line ``onnxfold: error: ...`` naming the flag, exit 2; so is every argparse error."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnxfold.app.cli import main

HUGE = "99999999999999999999999"


def _model(path: str, shape=(2, "n")) -> str:
    """Y = X + 1 with X of ``shape``."""
    one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "one"], ["Y"], name="add")], "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, list(shape))], [one])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's exits
        code = e.code if isinstance(e.code, int) else 2
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line(code: int, err: str, *words: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith("onnxfold: error: "), lines[0]
    for word in words:
        assert word in lines[0], lines[0]


@pytest.fixture
def model(tmp_path):
    return _model(str(tmp_path / "m.onnx"))


OPTIMIZE_FLAGS = ["-j", "--check", "--seed", "--rtol", "--atol", "--expansion-factor",
                  "--expansion-min", "--max-tensor", "--growth-factor", "--growth-min",
                  "--max-growth", "--memory-limit", "--pool-budget", "--fold-timeout"]
BAD_VALUES = [HUGE, "²", "١٢", "nan", "1e999", "-5"]


@pytest.mark.parametrize("flag", OPTIMIZE_FLAGS)
@pytest.mark.parametrize("value", BAD_VALUES)
def test_optimize_numeric_flag_refused_in_one_line(flag, value, model, tmp_path, capsys):
    if flag in ("--rtol", "--atol", "--expansion-factor", "--growth-factor",
                "--fold-timeout") and value == HUGE:
        pytest.skip("a large finite float is a valid factor")
    code, _, err = run(["optimize", model, "-o", str(tmp_path / "o.onnx"), flag, value],
                       capsys)
    assert_one_line(code, err, flag)
    assert not os.path.exists(tmp_path / "o.onnx")


@pytest.mark.parametrize("argv", [["-n", HUGE], ["-n", "²"], ["--seed", "¹"],
                                  ["--dim", "n=²"], ["--dim", f"n={HUGE}"],
                                  ["--int-range", f"X=0:{HUGE}"]])
def test_compare_numeric_flag_refused_in_one_line(argv, model, capsys):
    code, _, err = run(["compare", model, model, *argv], capsys)
    assert_one_line(code, err, argv[0])


@pytest.mark.parametrize("argv", [["--repeat", "²"], ["--repeat", HUGE]])
def test_run_numeric_flag_refused_in_one_line(argv, model, tmp_path, capsys):
    feeds = str(tmp_path / "in.npz")
    np.savez(feeds, X=np.ones((2, 3), np.float32))
    code, _, err = run(["run", model, "--inputs", feeds, *argv], capsys)
    assert_one_line(code, err, "--repeat")


@pytest.mark.parametrize("spec", [f"X:2,{HUGE}", "X:2,²", "X:2,١", f"n={HUGE}", "n=²"])  # noqa: RUF001 - Arabic-Indic one
def test_input_shape_value_refused_in_one_line(spec, model, tmp_path, capsys):
    code, _, err = run(["optimize", model, "-o", str(tmp_path / "o.onnx"),
                        "--input-shape", spec], capsys)
    assert_one_line(code, err, "--input-shape")


def test_check_dim_refused_in_one_line(model, tmp_path, capsys):
    code, _, err = run(["optimize", model, "-o", str(tmp_path / "o.onnx"), "--check", "1",
                        "--dim", "n=²"], capsys)
    assert_one_line(code, err, "--dim n")


def test_input_shape_contradicting_the_model_names_input_and_dim(model, tmp_path, capsys):
    code, _, err = run(["optimize", model, "-o", str(tmp_path / "o.onnx"),
                        "--input-shape", "X:3,4"], capsys)
    assert_one_line(code, err, "--input-shape X", "dim 0", "2", "3")
    code, _, err = run(["optimize", model, "-o", str(tmp_path / "o.onnx"),
                        "--input-shape", "X:2,4"], capsys)
    assert code == 0, err


def test_a_dim_name_never_relaxes_a_static_dim(model, tmp_path, capsys):
    """X is [2, n]: naming dim 0 would declare a dynamic length the model cannot run; naming
    the dynamic dim 1 is fine."""
    out = tmp_path / "o.onnx"
    code, _, err = run(["optimize", model, "-o", str(out), "--input-shape", "X:b,n"], capsys)
    assert_one_line(code, err, "--input-shape X", "dim 0 is 2", "b", "give 2 or ?")
    assert not out.exists()
    code, _, err = run(["optimize", model, "-o", str(out), "--input-shape", "X:?,m"], capsys)
    assert code == 0, err


@pytest.mark.parametrize("argv", [["optimize", "M", "-o", "O", "--bogus"],
                                  ["optimize", "M", "-o", "O", "--external-data", "maybe"],
                                  ["optimize", "M", "-o", "O", "--memory-limit", "lots"],
                                  ["frobnicate"], [], ["optimize"], ["compare", "A"],
                                  ["split", "M"]])
def test_argparse_errors_are_one_line(argv, capsys):
    code, _, err = run(argv, capsys)
    assert_one_line(code, err)


def test_no_command_lists_the_commands(capsys):
    code, _, err = run([], capsys)
    assert_one_line(code, err)
    assert "{optimize,compare,verify-folds,split,split-adapter,run,inspect,rules}" in err


def test_valid_numbers_still_accepted(model, tmp_path, capsys):
    code, _, err = run(["optimize", model, "-o", str(tmp_path / "o.onnx"), "-j", "1",
                        "--memory-limit", "1.5G", "--fold-timeout", "2.5",
                        "--expansion-factor", "1e1", "--check", "1", "--rtol", "1e-3"], capsys)
    assert code == 0, err


def _threads_argv(command: str, model: str, tmp_path) -> tuple[list[str], str]:
    feeds = str(tmp_path / "in.npz")
    np.savez(feeds, X=np.ones((2, 3), np.float32))
    flag = "--latency-threads" if command == "optimize" else "--threads"
    argv = ["optimize", model, "-o", str(tmp_path / "o.onnx"), "--latency", "1"] if \
        command == "optimize" else ["run", model, "--inputs", feeds]
    return argv, flag


@pytest.mark.parametrize("command", ["optimize", "run"])
@pytest.mark.parametrize("value", ["100000", "0", "²"])
def test_thread_counts_are_bounded_by_the_cores(command, value, model, tmp_path, capsys):
    """onnxruntime starts every thread asked for: ``--latency-threads 100000`` grew past 16 GB
    and died with SIGSEGV. Above the cores this process may run on is one line, before any
    work (and the Python API's ``measure_latency(threads=...)`` an InputError)."""
    argv, flag = _threads_argv(command, model, tmp_path)
    code, _, err = run([*argv, flag, value], capsys)
    assert_one_line(code, err, flag, *(["between 1 and"] if value != "²" else []))
    assert not os.path.exists(tmp_path / "o.onnx")


@pytest.mark.parametrize("command", ["optimize", "run"])
def test_as_many_threads_as_cores_run(command, model, tmp_path, capsys):
    from onnxfold.host.machine import usable_cores

    argv, flag = _threads_argv(command, model, tmp_path)
    code, _, err = run([*argv, flag, str(usable_cores())], capsys)
    assert code == 0, err


def test_the_api_bounds_latency_threads_too(model):
    import onnxfold

    with pytest.raises(onnxfold.InputError, match="cores this process may run on"):
        onnxfold.measure_latency(model, model, threads=100_000)


def test_a_latency_of_more_runs_than_a_machine_finishes_is_refused(model, tmp_path, capsys):
    """``--latency 1000000000000`` ran until killed (issue 82): at most a million runs, on
    the command line and in the Python API."""
    import onnxfold

    code, _, err = run(["optimize", model, "-o", str(tmp_path / "o.onnx"), "--latency",
                        "1000000000000"], capsys)
    assert code == 2 and "--latency" in err and "between 0 and 1000000" in err, err
    assert not (tmp_path / "o.onnx").exists()
    with pytest.raises(onnxfold.InputError, match="from 1 to 1,000,000"):
        onnxfold.measure_latency(model, model, runs=10**12)
