"""The layout follows the input: a model read with external data is written with external data
(one data file named after the output), one read inline stays inline while it fits; a large
weight in a data file starts at a multiple of the page size, where onnxruntime maps it
instead of reading it into memory."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import onnxfold
from onnxfold.io.segments import ALIGNED_FROM
from onnxfold.io.writer import DATA_ALIGNMENT
from tests.support.models import make_model, vinfo

ROWS = [3, 256, 7, 512]  # weights [rows, 1024] float32: two of ALIGNED_FROM or more


def _model() -> onnx.ModelProto:
    """y_k = x @ Transpose(W_k) for weights of odd sizes between large ones, and a weight
    passed through unchanged (E, read by a Gather)."""
    rng = np.random.default_rng(0)
    nodes, inits, outputs = [], [], []
    for k, rows in enumerate(ROWS):
        inits.append(numpy_helper.from_array(
            rng.standard_normal((rows, 1024)).astype(np.float32), f"W{k}"))
        nodes += [helper.make_node("Transpose", [f"W{k}"], [f"T{k}"], perm=[1, 0]),
                  helper.make_node("MatMul", ["x", f"T{k}"], [f"y{k}"])]
        outputs.append(vinfo(f"y{k}", shape=[1, rows]))
    inits.append(numpy_helper.from_array(
        rng.standard_normal((300, 1001)).astype(np.float32), "E"))  # no page multiple
    nodes.append(helper.make_node("Gather", ["E", "idx"], ["g"]))
    return make_model(nodes, [vinfo("x", shape=[1, 1024]),
                              vinfo("idx", onnx.TensorProto.INT64, [1])],
                      [*outputs, vinfo("g", shape=[1, 1001])], inits)


def _external(proto: onnx.ModelProto, path) -> str:
    onnx.save_model(proto, str(path), save_as_external_data=True, location=path.name + ".bin",
                    size_threshold=0)
    return str(path)


def _offsets(path) -> dict[str, tuple[str, int, int]]:
    """Each external initializer's (location, offset, length)."""
    found = {}
    for tensor in onnx.load(str(path), load_external_data=False).graph.initializer:
        entries = {e.key: e.value for e in tensor.external_data}
        if entries:
            found[tensor.name] = (entries["location"], int(entries.get("offset", 0)),
                                  int(entries["length"]))
    return found


def test_external_data_in_is_external_data_out(tmp_path):
    source = _external(_model(), tmp_path / "m.onnx")
    out = tmp_path / "out.onnx"
    info = onnxfold.optimize(source).save(str(out))
    assert info.data_path is not None and info.data_path.endswith("out.onnx.data")
    placed = _offsets(out)
    assert placed and {location for location, _, _ in placed.values()} == {"out.onnx.data"}
    large = [offset for _, offset, length in placed.values() if length >= ALIGNED_FROM]
    assert len(large) >= 2 and all(offset % DATA_ALIGNMENT == 0 for offset in large)
    assert sum(length for _, _, length in placed.values()) % DATA_ALIGNMENT  # (padding needed)
    import onnxruntime as ort  # the output runs as the input does

    feeds = {"x": np.ones((1, 1024), np.float32), "idx": np.array([5])}
    want = ort.InferenceSession(source, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, feeds)
    for a, b in zip(want, got, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_inline_in_is_inline_out(tmp_path):
    source = tmp_path / "m.onnx"
    onnx.save_model(_model(), str(source))
    out = tmp_path / "out.onnx"
    info = onnxfold.optimize(str(source)).save(str(out))
    assert info.data_path is None and not _offsets(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "out.onnx"]


@pytest.mark.parametrize("asked", [False, True])
def test_what_is_asked_wins(tmp_path, asked):
    source = _external(_model(), tmp_path / "m.onnx") if not asked else str(tmp_path / "i.onnx")
    if asked:
        onnx.save_model(_model(), source)
    info = onnxfold.optimize(source).save(str(tmp_path / "out.onnx"), external_data=asked)
    assert (info.data_path is not None) is asked
