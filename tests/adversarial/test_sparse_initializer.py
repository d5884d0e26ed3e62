"""A sparse initializer must not give an invalid output with exit 0 (issue 11, bullet 3)."""

import numpy as np
from onnx import helper

from tests.support.cli import REFUSAL_TIMEOUT, assert_ok, assert_one_error_line, run_cli
from tests.support.external_weights import D, ort_run, save_inline
from tests.support.files import assert_unchanged, snapshot
from tests.support.models import make_model, tensor, vinfo


def _sparse_proto():
    """y = x + S * 2, S a sparse [D] initializer with 3 non-zeros (S * 2 folds)."""
    values = tensor("S", np.array([1.5, -2.0, 4.0], np.float32))
    indices = tensor("S_indices", np.array([1, 7, 30], np.int64))
    sparse = helper.make_sparse_tensor(values, indices, [D])
    nodes = [helper.make_node("Mul", ["S", "two"], ["S2"]),
             helper.make_node("Add", ["x", "S2"], ["y"])]
    model = make_model(nodes, [vinfo("x", shape=[1, D])], [vinfo("y", shape=[1, D])],
                       [tensor("two", np.array(2.0, np.float32))])
    model.graph.sparse_initializer.append(sparse)
    return model


def test_sparse_initializer_folds_validly_or_is_refused(tmp_path):
    proto = _sparse_proto()
    model = save_inline(proto, tmp_path / "model")
    x = {"x": np.random.default_rng(0).standard_normal((1, D)).astype(np.float32)}
    want = ort_run(model, x)[0]  # onnxruntime densifies sparse initializers
    before = snapshot(tmp_path / "model")
    out = tmp_path / "o.onnx"
    done = run_cli("optimize", model, "-o", out, timeout=REFUSAL_TIMEOUT)
    assert_unchanged(before, snapshot(tmp_path / "model"))
    if done.returncode == 2:
        assert_one_error_line(done)
        assert not out.exists()
        return
    assert_ok(done)
    np.testing.assert_allclose(ort_run(out, x)[0], want, rtol=1e-6, atol=0)  # loads, same y
