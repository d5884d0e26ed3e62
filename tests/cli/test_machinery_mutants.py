"""Faults planted in the machinery under the rules (``tools/mutants.py``'s ``MACHINERY``: the
fold's onnxruntime runner, the buffer pool, materialization, the writer) are caught by every
part of the check, because the check runs onnxruntime through its own runner.

One model exercises them all: two ``Softplus -> Erf -> Mish`` chains over weights (no native
rule: one onnxruntime batch with two outputs of one shape), a native ``Transpose -> Add -> Mul``
chain (intermediates of one shape through the pool), each folded weight 16 KiB (streamed by
the writer). Each mutant must change the written model (it fired), then ``optimize --check 3``
exits 1 writing nothing, and ``verify-folds`` and ``compare`` run with the same fault exit 1 on
the model it wrote.
"""

from __future__ import annotations

import filecmp
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.support.cli import assert_ok, run_cli, run_python
from tools.mutants import MACHINERY

WIDTH = 64


def chains_model(path: Path) -> Path:
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((WIDTH, WIDTH)).astype(np.float32),
                                       f"w{k}") for k in range(5)]
    nodes = []
    for k in (0, 1):  # through onnxruntime, one batch
        nodes += [helper.make_node("Softplus", [f"w{k}"], [f"sp{k}"]),
                  helper.make_node("Erf", [f"sp{k}"], [f"erf{k}"]),
                  helper.make_node("Mish", [f"erf{k}"], [f"c{k}"])]
    nodes += [helper.make_node("Transpose", ["w2"], ["t"], perm=[1, 0]),  # native, pooled
              helper.make_node("Add", ["t", "w3"], ["s"]),
              helper.make_node("Mul", ["s", "w4"], ["c2"])]
    for k in range(3):
        nodes.append(helper.make_node("MatMul", ["x", f"c{k}"], [f"m{k}"]))
    nodes += [helper.make_node("Add", ["m0", "m1"], ["m01"]),
              helper.make_node("Add", ["m01", "m2"], ["y"])]
    graph = helper.make_graph(
        nodes, "chains", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", WIDTH])], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def with_mutant(name: str, *args: object):
    return run_python("-m", "tools.mutants", name, *args)


@pytest.fixture(scope="module")
def folded(tmp_path_factory) -> tuple[Path, Path]:
    """The model and its clean fold."""
    directory = tmp_path_factory.mktemp("machinery")
    model = chains_model(directory / "m.onnx")
    clean = directory / "clean.onnx"
    assert_ok(run_cli("optimize", model, "-o", clean, "-q"))
    return model, clean


@pytest.mark.parametrize("name", sorted(MACHINERY))
def test_a_machinery_fault_is_caught_by_every_check(name, folded, tmp_path):
    model, clean = folded
    bad = tmp_path / "bad.onnx"
    done = with_mutant(name, "optimize", model, "-o", bad, "-q")
    assert done.returncode == 0, done.stderr
    assert not filecmp.cmp(bad, clean, shallow=False), f"{name} did not fire here"

    out = tmp_path / "out.onnx"
    checked = with_mutant(name, "optimize", model, "-o", out, "--check", "3")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "DIFFERS" in checked.stdout or "outside tolerance" in checked.stdout, checked.stdout
    assert not out.exists()

    verified = with_mutant(name, "verify-folds", model, bad)
    assert verified.returncode == 1, verified.stdout + verified.stderr
    compared = with_mutant(name, "compare", model, bad)
    assert compared.returncode == 1, compared.stdout + compared.stderr


def test_the_fold_of_the_chains_is_right_without_a_fault(folded):
    """The clean fold passes what catches the faults (no false alarm)."""
    model, clean = folded
    assert_ok(run_cli("verify-folds", model, clean))
    assert_ok(run_cli("compare", model, clean))


def test_a_weight_written_wrong_where_nothing_folds_is_caught(tmp_path):
    """The writer's fault on a weight the fold passes through unchanged (nothing folds in this
    model): the check's own output holds other values under the original initializer's name,
    and that differs (it was "not verifiable: nothing says what it stands for", and the check
    passed a corrupted BERT export of transformers' exporter)."""
    side = 16  # 1 KiB: streamed by the writer, read into memory (not copied from the file)
    weight = np.random.default_rng(0).standard_normal((side, side)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "passthrough",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", side])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", side])],
        [numpy_helper.from_array(weight, "w")])
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), model)
    out = tmp_path / "out.onnx"
    checked = with_mutant("writer_ulps", "optimize", model, "-o", out, "--check", "3")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "DIFFERS w float[16, 16]" in checked.stdout, checked.stdout
    assert not out.exists()
    assert_ok(run_cli("optimize", model, "-o", out, "--check", "3"))
