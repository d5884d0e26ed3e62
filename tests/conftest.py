"""Shared test helpers: tiny models built with onnx.helper and an onnxruntime runner."""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "models")


def make_model(nodes, inputs, outputs, initializers=(), opset=17, ir_version=8):
    graph = helper.make_graph(nodes, "test", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    return model


def tensor(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def vinfo(name, elem=TensorProto.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def run_ort(model_or_path, feeds):
    data = model_or_path.SerializeToString() if isinstance(model_or_path, onnx.ModelProto) \
        else model_or_path
    options = ort.SessionOptions()
    options.log_severity_level = 3
    sess = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def random_feeds(path, seed=0, dims=None):
    """Seeded inputs for every graph input of an .onnx file: onnxfold's own synthetic feeds
    (``onnxfold.app.comparison.synthetic_feeds``, the ones ``compare`` and ``bench/`` use)."""
    from onnxfold.app.comparison import synthetic_feeds

    return synthetic_feeds(path, seed, dims)[0]


def fold_proto(proto, tmp_path, options=None, name="out.onnx"):
    """Fold a ModelProto through the file path API; return (folded proto, report, path).

    Without options the fold is strict: a rule that raises fails the test.
    """
    import onnxfold
    from onnxfold.fold.folder import FoldOptions

    src = str(tmp_path / "in.onnx")
    out = str(tmp_path / name)
    onnx.save(proto, src)
    result = onnxfold.optimize(src, options or FoldOptions(strict=True))
    onnxfold.save_model(result.model, out)
    return onnx.load(out), result.report, out


@pytest.fixture
def save(tmp_path):
    """Save an onnx ModelProto in tmp_path and return its path."""

    def _save(model, name="model.onnx"):
        path = str(tmp_path / name)
        onnx.save(model, path)
        return path

    return _save
