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


def random_feeds(path, seed=0, int_high=100):
    """Seeded random inputs for every graph input of an .onnx file (symbolic dims -> 1).

    Integer inputs are token ids in [0, int_high), except attention masks (ones) and token
    type ids (zeros), whose valid ranges are tiny.
    """
    rng = np.random.default_rng(seed)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    sess = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        if "int" in i.type:
            high = 2 if "mask" in i.name else 1 if "type" in i.name else int_high
            feeds[i.name] = rng.integers(1 if "mask" in i.name else 0, high, shape).astype(
                np.int64 if "int64" in i.type else np.int32)
        elif "bool" in i.type:
            feeds[i.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def fold_proto(proto, tmp_path, options=None, name="out.onnx"):
    """Fold a ModelProto through the file path API; return (folded proto, report, path).

    Without options the fold is strict: a rule that raises fails the test.
    """
    import onnxfold
    from onnxfold.fold import FoldOptions

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
