"""Pass-through is bitwise (issue 63, item 2): in a file that carries onnxfold's records, an
initializer under an original's name with other bytes and no record of what made it is a wrong
value, in ``verify-folds`` and ``compare`` alike (exit 1); in a file with no record (another
tool's, or stripped) it is not verifiable, and the words say why."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxfold
from tests.support.cli import run_cli
from tests.support.models import make_model, tensor, vinfo


def _model() -> onnx.ModelProto:
    """A doubled weight (folded) added to the input, then a MatMul by ``k`` (passed through)."""
    nodes = [helper.make_node("Mul", ["w", "two"], ["r"]),
             helper.make_node("Add", ["x", "r"], ["h"]),
             helper.make_node("MatMul", ["h", "k"], ["y"])]
    return make_model(nodes, [vinfo("x", TensorProto.FLOAT, ["n", 4])],
                      [vinfo("y", TensorProto.FLOAT, ["n", 4])], [
        tensor("w", np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)),
        tensor("two", np.array(2.0, np.float32)),
        tensor("k", np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32))])


def _edited(path, out, edit, strip: bool = False) -> None:
    model = onnx.load(str(path))
    for t in model.graph.initializer:
        if t.name == "k":
            array = onnx.numpy_helper.to_array(t).copy()
            edit(array)
            t.CopyFrom(onnx.numpy_helper.from_array(array, "k"))
        if strip:
            del t.metadata_props[:]
    if strip:  # the model's own record (onnxfold.run) too
        del model.metadata_props[:]
    onnx.save(model, str(out))


def _swap(a: np.ndarray) -> None:
    a.flat[0], a.flat[1] = a.flat[1], a.flat[0]


def _shift(a: np.ndarray) -> None:
    a.reshape(-1).view(np.int32)[3] += 1000


@pytest.mark.parametrize("edit", [_swap, _shift], ids=["swapped", "1000 ulps"])
def test_a_changed_original_weight_differs(tmp_path, edit):
    path, out, edited = tmp_path / "m.onnx", tmp_path / "o.onnx", tmp_path / "e.onnx"
    onnx.save(_model(), path)
    onnxfold.optimize(str(path)).save(str(out))
    _edited(out, edited, edit)
    for command in ("verify-folds", "compare"):
        done = run_cli(command, path, edited)
        assert done.returncode == 1, (command, done.stdout + done.stderr)
        assert "DIFFERS k" in done.stdout, (command, done.stdout)


def test_without_records_it_is_not_verifiable_and_says_why(tmp_path):
    path, out, edited = tmp_path / "m.onnx", tmp_path / "o.onnx", tmp_path / "e.onnx"
    onnx.save(_model(), path)
    onnxfold.optimize(str(path)).save(str(out))
    _edited(out, edited, _swap, strip=True)
    done = run_cli("verify-folds", path, edited)
    assert "no record of onnxfold" in done.stdout, done.stdout
