"""An output that would replace one of the input's own files is refused once the model is read,
before any pass runs, not after a whole fold (``optimize(..., loaded=...)``)."""

from __future__ import annotations

import hashlib

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.external_data_helper import convert_model_to_external_data

import onnxfold.pipeline.optimizer
from onnxfold.app import cli
from tests.support.models import make_model, tensor, vinfo


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_an_output_data_file_that_is_the_inputs_weights_is_refused_before_folding(
        tmp_path, monkeypatch, capsys):
    model = make_model([helper.make_node("Add", ["x", "W"], ["y"])], [vinfo("x", shape=[256])],
                       [vinfo("y", shape=[256])], [tensor("W", np.arange(256, dtype=np.float32))])
    # a.onnx's weights live in out.onnx.data: the name the output's own data file gets
    convert_model_to_external_data(model, all_tensors_to_one_file=True, location="out.onnx.data",
                                   size_threshold=0)
    onnx.save(model, tmp_path / "a.onnx")
    data = tmp_path / "out.onnx.data"
    before = _sha(data)

    def no_pass(*_args, **_kwargs):
        raise AssertionError("a pass ran before the clash was refused")

    monkeypatch.setattr(onnxfold.pipeline.optimizer, "_run", no_pass)
    code = cli.main(["optimize", str(tmp_path / "a.onnx"), "-o", str(tmp_path / "out.onnx"),
                     "--external-data", "yes"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("onnxfold: error: ") and "input" in err, err
    assert _sha(data) == before
    assert not (tmp_path / "out.onnx").exists()


def test_the_api_calls_loaded_once_with_the_model_before_any_pass(tmp_path):
    model = make_model([helper.make_node("Add", ["x", "W"], ["y"])], [vinfo("x", shape=[4])],
                       [vinfo("y", shape=[4])], [tensor("W", np.ones(4, np.float32))])
    onnx.save(model, tmp_path / "m.onnx")
    seen = []
    result = onnxfold.pipeline.optimizer.optimize(str(tmp_path / "m.onnx"),
                                        loaded=lambda m: seen.append(len(list(m.graph))))
    assert seen == [1]  # the model as read: its one node, before anything changed it
    assert result.report.nodes_after == 1


@pytest.mark.parametrize("source", ["proto", "bytes"])
def test_loaded_is_called_for_in_memory_models_too(source):
    model = make_model([helper.make_node("Neg", ["x"], ["y"])], [vinfo("x", shape=[4])],
                       [vinfo("y", shape=[4])])
    given = model if source == "proto" else model.SerializeToString()
    seen = []
    onnxfold.pipeline.optimizer.optimize(given, loaded=seen.append)
    assert len(seen) == 1 and seen[0].graph.name == model.graph.name
