"""A binding the original fails on as it failed on another is not run again: onnxruntime failed
at node N, and onnx's shape inference at the next binding's input shapes fails at N too (a text
recognizer whose height must be 32 ran its network at 16 sizes up to 1537 x 1537: 199 s). A
failure shape inference does not see still runs the larger sizes, so a size that runs is
found. Real onnxruntime; its runs are counted through the session the check opened."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnxfold.check.compare import CheckCouldNotRun, _Run
from onnxfold.check.running.options import CompareOptions
from tests.support.cli import run_cli


class _Counted:
    """The check's onnxruntime session, its runs counted."""

    def __init__(self, session) -> None:
        self.session, self.runs = session, 0

    def run(self, *args, **kwargs):
        self.runs += 1
        return self.session.run(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.session, name)


def _image_model(nodes, inits, out_shape=None):
    """x [?, 3, ?, ?] (unnamed dims, as Paddle writes them) -> ``nodes`` -> y."""
    return helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), *nodes], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, "?", "?"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], inits),
        opset_imports=[helper.make_opsetid("", 17)])


def _squeezed_height():
    """A recognizer's end: the height must be 1 (Squeeze of axis 2), at no guessed size."""
    return _image_model([helper.make_node("Squeeze", ["r", "axes"], ["y"], name="squeeze_h")],
                        [helper.make_tensor("axes", TensorProto.INT64, [1], [2])])


def _reflect_padded():
    """A reflect Pad of 300 on the width: onnxruntime refuses it below 301 (shape inference
    does not see it); it runs from the 385 guess on."""
    pads = [0, 0, 0, 300, 0, 0, 0, 300]
    return _image_model([helper.make_node("Pad", ["r", "pads"], ["y"], mode="reflect",
                                          name="pad_w")],
                        [helper.make_tensor("pads", TensorProto.INT64, [8], pads)])


def _reference_runs(path, n=3):
    run = _Run(str(path), str(path), CompareOptions(), lambda text: None)
    counted = _Counted(run.session)
    run.session = counted
    try:
        reference = run.reference(n)
    except CheckCouldNotRun as e:
        return counted.runs, None, str(e)
    return counted.runs, reference, ""


def test_a_failure_shape_inference_confirms_is_run_once(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_squeezed_height(), path)
    runs, reference, error = _reference_runs(path)
    assert reference is None
    assert runs == 1, runs  # every other binding: shape inference fails at squeeze_h too
    assert "squeeze_h" in error and re.search(r"x\[2\]=[\d,]*\b1537\b", error), error  # all
    done = run_cli("compare", path, path, "-n", "2")
    assert done.returncode == 2, done.stdout + done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert "onnxruntime failed to run it" in line and "squeeze_h" in line, line


def test_a_failure_shape_inference_does_not_see_still_tries_every_size(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_reflect_padded(), path)
    runs, reference, error = _reference_runs(path)
    assert reference is not None, error
    assert {shape["x"][3] for shape in reference.shapes} >= {385}, reference.shapes
    assert runs > 5, runs
    assert any("of the guessed dims" in note and "pad_w" in note
               for note in reference.notes), reference.notes


@pytest.mark.parametrize("build", [_squeezed_height, _reflect_padded])
def test_the_check_fails_the_same_way_without_the_shortcut(tmp_path, build, monkeypatch):
    """With the shortcut off (every binding run), the reference ends as it does with it: the
    same bindings run and, where none runs, the same error line (but for its numbers: the
    shortcut quotes onnxruntime's error at the first binding, not at the last one)."""
    from onnxfold.check.outputs import doomed_bindings
    path = tmp_path / "m.onnx"
    onnx.save(build(), path)
    runs_with, with_it, error_with = _reference_runs(path)
    monkeypatch.setattr(doomed_bindings.FailedNodes, "check", lambda self, shapes, label: None)
    runs_without, without, error_without = _reference_runs(path)
    assert runs_with < runs_without if build is _squeezed_height else runs_with == runs_without
    # (the guesses listed after it differ where the blocks tried follow the numbers quoted)
    said_with, said_without = (e.split("; dims guessed")[0] for e in (error_with, error_without))
    assert re.sub(r"\d+", "#", said_with) == re.sub(r"\d+", "#", said_without)
    assert (with_it is None) == (without is None)
    if with_it is not None and without is not None:
        assert [s["x"] for s in with_it.shapes] == [s["x"] for s in without.shapes]
        np.testing.assert_array_equal(with_it.outputs[0][0], without.outputs[0][0])
