"""The output's external data is named by the input's convention: optimum and transformers write
``model.onnx_data`` (optimum's hub loader fetches ``<file>_data``: a folded model whose data
became ``.data`` loses its weights once pushed), torch ``model.onnx.data``; any other name
gives ``<output>.data``. The command line and the Python API's ``save`` alike."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

import onnxfold
from tests.support.cli import run_cli
from tests.support.models import MODELS
from tests.support.running import random_feeds, run_ort

TINY_BERT = os.path.join(MODELS, "tiny_bert_ts.onnx")


def _locations(path):
    return {e.value for t in onnx.load(path, load_external_data=False).graph.initializer
            for e in t.external_data if e.key == "location"}


@pytest.mark.parametrize(("data", "expected"), [("model.onnx_data", "out.onnx_data"),
                                                ("model.onnx.data", "out.onnx.data"),
                                                ("weights.bin", "out.onnx.data")])
@pytest.mark.parametrize("how", ["cli", "api"])
def test_the_output_data_follows_the_inputs_name(tmp_path, data, expected, how):
    src, out = tmp_path / "model.onnx", tmp_path / "out.onnx"
    onnx.save(onnx.load(TINY_BERT), src, save_as_external_data=True, location=data,
              size_threshold=1024)
    if how == "cli":
        done = run_cli(src, out, "-q")
        assert done.returncode == 0, done.stderr
    else:
        onnxfold.optimize(str(src)).save(str(out))
    assert _locations(str(out)) == {expected}
    assert sorted(os.listdir(tmp_path)) == sorted(["model.onnx", data, "out.onnx", expected])
    feeds = random_feeds(TINY_BERT)
    for a, b in zip(run_ort(str(src), feeds), run_ort(str(out), feeds), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_an_api_save_in_place_keeps_the_data_name(tmp_path):
    src = tmp_path / "model.onnx"
    onnx.save(onnx.load(TINY_BERT), src, save_as_external_data=True,
              location="model.onnx_data", size_threshold=1024)
    onnxfold.optimize(str(src)).save(str(src), replaces=[str(src)])
    assert sorted(os.listdir(tmp_path)) == ["model.onnx", "model.onnx_data"]
    assert _locations(str(src)) == {"model.onnx_data"}
