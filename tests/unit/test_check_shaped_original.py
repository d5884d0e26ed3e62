"""The original's copy with its shapes inferred again (``cones.reinferred``) is made once for
the fold verification and the rewrite validation of one check, where the optimized model pins
no dim; where it pins one, the fold verification reads a copy of its own with that dim pinned
(a fold that holds only there is verified there, not sampled)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnxfold
from onnxfold.check import compare as compare_module
from onnxfold.check.compare import compare_models
from onnxfold.check.folds import verification
from onnxfold.check.running.options import CompareOptions
from tests.support.checked_folds import transposed_layer_norm


def _counted(monkeypatch) -> list[int]:
    """How many times each of the check's steps inferred the original's shapes again."""
    made: list[int] = []
    for module in (compare_module, verification):
        real = module.reinferred

        def counted(model, real=real):
            made.append(1)
            return real(model)

        monkeypatch.setattr(module, "reinferred", counted)
    return made


def test_both_steps_read_one_copy_of_the_original(tmp_path, monkeypatch):
    onnx.save(transposed_layer_norm(64, 32, seed=1), tmp_path / "a.onnx")
    result = onnxfold.optimize(str(tmp_path / "a.onnx"), record_rewrites=True)
    result.save(str(tmp_path / "b.onnx"))
    made = _counted(monkeypatch)
    checked = compare_models(tmp_path / "a.onnx", tmp_path / "b.onnx", 3, CompareOptions(),
                             evidence=result.evidence)
    assert checked.ok and checked.folds is not None and checked.folds.tensors
    assert checked.rewrites is not None and checked.rewrites.rewrites  # both steps ran
    assert len(made) == 1


def test_a_fold_that_holds_at_a_pinned_dim_is_verified_there(tmp_path, monkeypatch):
    """y = x @ (Transpose(w) * n), n the first dim of x [n, 4]; the output pins x to [3, 4],
    so its fold of Transpose(w) * n holds for every input it takes."""
    w = numpy_helper.from_array(np.arange(8, dtype=np.float32).reshape(2, 4), "w")
    first = numpy_helper.from_array(np.array(0, np.int64), "first")
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "first"], ["n"]),
             helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
             helper.make_node("Transpose", ["w"], ["wt"]),
             helper.make_node("Mul", ["wt", "nf"], ["wn"]),
             helper.make_node("MatMul", ["x", "wn"], ["y"])]
    onnx.save(helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 2])], [w, first]),
        opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "a.onnx")
    result = onnxfold.optimize(str(tmp_path / "a.onnx"), input_shapes=["x:3,4"],
                               record_rewrites=True)
    result.save(str(tmp_path / "b.onnx"))
    made = _counted(monkeypatch)
    checked = compare_models(tmp_path / "a.onnx", tmp_path / "b.onnx", 3, CompareOptions(),
                             evidence=result.evidence)
    assert checked.ok and checked.folds is not None
    assert [(t.name, t.state, t.dims) for t in checked.folds.tensors] == \
        [("wn", "bitwise", "static")]
    assert len(made) == 1  # the fold verification's own (nothing to validate)
