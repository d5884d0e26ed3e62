"""Where the optimized model runs short on every input set the original ran (an image guessed
at 224 x 224), the check compares both at smaller images; the steps that run the original's
cones (fold verification, rewrite validation) come after the optimized model's runs, so they
run once, at the sets both models were compared on, and the verdict says so."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxfold.check import compare as compare_module
from onnxfold.check.running.options import CompareOptions
from onnxfold.pipeline.optimizer import optimize


def _image_model() -> onnx.ModelProto:
    """x[n, 3, h, w] through a Conv whose weight is a constant times 2 (a fold)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    graph = helper.make_graph(
        [helper.make_node("Mul", ["w", "two"], ["w2"]),
         helper.make_node("Conv", ["x", "w2"], ["y"], pads=[1, 1, 1, 1])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4, "h", "w"])], [w, two])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _verified_widths(monkeypatch) -> list[list[int]]:
    """Per call of the fold verification, the image widths of the input sets it reads."""
    verified: list[list[int]] = []
    real_verify = compare_module.verify_folds

    def recorded(a, b, **kwargs):
        verified.append([feeds["x"].shape[-1] for feeds in kwargs["inputs"]])
        return real_verify(a, b, **kwargs)

    monkeypatch.setattr(compare_module, "verify_folds", recorded)
    return verified


def _compared(tmp_path):
    """compare_models on 2 input sets of the image model and its fold, its record at hand."""
    source = _image_model()
    result = optimize(source, record_rewrites=True)
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(source, a)
    onnx.save(result.to_proto(), b)
    return compare_module.compare_models(a, b, 2, CompareOptions(), evidence=result.evidence)


def test_the_folds_are_verified_once_at_the_images_both_models_ran(tmp_path, monkeypatch):
    real_run = compare_module._ran_optimized
    runs: list[int] = []

    def short_at_first(b, run, reference):
        runs.append(reference.feeds[0]["x"].shape[-1])
        if len(runs) == 1:  # the machine's: B ran short on every set at the guessed image
            return compare_module._OptimizedRun(short="out of memory (simulated)")
        return real_run(b, run, reference)

    monkeypatch.setattr(compare_module, "_ran_optimized", short_at_first)
    verified = _verified_widths(monkeypatch)
    compared = _compared(tmp_path)
    assert runs == [224, 112]
    assert verified == [[112, 112]]  # once, on the sets compared
    assert compared.ok, compared.summary()
    assert compared.folds is not None and compared.folds.summary().count("bitwise") >= 1
    assert any("compared at smaller images" in note for note in compared.notes)


def test_where_it_runs_short_at_every_image_the_check_says_so_with_its_folds(tmp_path,
                                                                             monkeypatch):
    """The optimized model short at every image tried: the check could not run, one line
    naming the machine, and the folds were still verified, once, at the last images."""
    monkeypatch.setattr(compare_module, "_ran_optimized", lambda b, run, reference:
                        compare_module._OptimizedRun(short="out of memory (simulated)"))
    verified = _verified_widths(monkeypatch)
    with pytest.raises(compare_module.CheckCouldNotRun) as raised:
        _compared(tmp_path)
    assert "ran short running it on every input set" in str(raised.value)
    assert len(verified) == 1 and verified[0][0] < 112
    checked = raised.value.result
    assert checked is not None and checked.folds is not None and checked.folds.ok
