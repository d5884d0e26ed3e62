"""Running a model: in onnxruntime (the oracle), and through onnxfold's file path API."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort

import onnxfold
from onnxfold.check.inputs.feeds import synthetic_feeds
from onnxfold.pipeline.options import FoldOptions


def run_ort(model_or_path, feeds):
    """Every output of the model (a ModelProto or a path) on ``feeds``, in onnxruntime's CPU
    provider, its log quiet."""
    data = model_or_path.SerializeToString() if isinstance(model_or_path, onnx.ModelProto) \
        else model_or_path
    options = ort.SessionOptions()
    options.log_severity_level = 3
    sess = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def assert_same_bits(original, folded, feeds):
    """Both models give outputs of the same shape, dtype and values on ``feeds`` in
    onnxruntime, down to the sign of every float zero."""
    for exp, got in zip(run_ort(original, feeds), run_ort(folded, feeds), strict=True):
        assert exp.shape == got.shape and exp.dtype == got.dtype
        np.testing.assert_array_equal(exp, got)
        if exp.dtype.kind == "f":
            np.testing.assert_array_equal(np.signbit(exp), np.signbit(got))


def random_feeds(path, seed=0, dims=None):
    """Seeded inputs for every graph input of an .onnx file: onnxfold's own synthetic feeds
    (``onnxfold.check.inputs.feeds.synthetic_feeds``, the ones ``compare`` and ``bench/`` use)."""
    return synthetic_feeds(path, seed, dims)[0]


def fold_proto(proto, tmp_path, options=None, name="out.onnx"):
    """Fold a ModelProto through the file path API; return (folded proto, report, path).

    Without options the fold is strict: a rule that raises fails the test.
    """
    src = str(tmp_path / "in.onnx")
    out = str(tmp_path / name)
    onnx.save(proto, src)
    result = onnxfold.optimize(src, options or FoldOptions(strict=True))
    onnxfold.save_model(result.model, out)
    return onnx.load(out), result.report, out
