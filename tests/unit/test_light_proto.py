"""The first shape inference of a model ``optimize`` read itself uses the reader's proto
(``LIGHT_PROTO_KEY``) instead of serializing the model again, and the result is the same, byte
for byte, as from a model loaded and handed over (which serializes)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

from onnxfold import FoldOptions, InputError, shapes
from onnxfold.io.reader import LIGHT_PROTO_KEY, load_model
from onnxfold.pipeline import optimize
from tests.support.models import make_model, tensor, vinfo
from tests.support.running import run_ort


def _model():
    """Big (external-sized) and mid-sized (2 KiB, stays inline) weights, a shape scaffold."""
    nodes = [helper.make_node("Transpose", ["w"], ["wt"]),
             helper.make_node("MatMul", ["x", "wt"], ["h"]),
             helper.make_node("Add", ["h", "mid"], ["a"]),
             helper.make_node("Shape", ["a"], ["s"]),
             helper.make_node("Reshape", ["a", "s"], ["y"])]
    rng = np.random.default_rng(0)
    inits = [tensor("w", rng.standard_normal((512, 512)).astype(np.float32)),
             tensor("mid", rng.standard_normal((512,)).astype(np.float32))]
    return make_model(nodes, [vinfo("x", shape=["N", 512])], [vinfo("y", shape=["N", 512])],
                      inits)


def _bytes(result, path):
    result.save(str(path))
    return path.read_bytes()


@pytest.fixture
def calls(monkeypatch):
    seen = []
    real = shapes.serialize_light
    monkeypatch.setattr(shapes, "serialize_light", lambda m: seen.append(1) or real(m))
    return seen


def test_the_first_inference_reuses_the_read_proto_with_the_same_result(tmp_path, calls):
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    read_here = _bytes(optimize(str(path), FoldOptions(strict=True)), tmp_path / "a.onnx")
    first = len(calls)
    handed = _bytes(optimize(load_model(path), FoldOptions(strict=True)), tmp_path / "b.onnx")
    assert first < len(calls)  # the handed-over model was serialized for its first inference
    assert read_here == handed


@pytest.mark.parametrize("options", [{"input_shapes": ("x:2,512",)},
                                     {"inline_functions": True}])
def test_a_pass_that_changes_the_model_first_makes_inference_serialize_it(tmp_path, calls,
                                                                            options):
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    optimize(str(path), FoldOptions(strict=True, **options))
    assert calls  # the reader's proto no longer describes the model


def _unsorted(tmp_path):
    proto = _model()
    nodes = list(proto.graph.node)
    del proto.graph.node[:]
    proto.graph.node.extend(reversed(nodes))
    path = tmp_path / "unsorted.onnx"
    onnx.save(proto, path)
    return path


def test_an_unsorted_graph_is_checked_once_sorted_and_keeps_no_proto(tmp_path):
    """onnx's checker refuses a graph out of order, onnxruntime runs it: the model is sorted
    first, then checked (from a file and from memory); the reader's proto, in the file's
    order, is not kept for inference."""
    path = _unsorted(tmp_path)
    assert LIGHT_PROTO_KEY not in load_model(path, keep_light=True).meta
    onnx.save(_model(), tmp_path / "sorted.onnx")
    assert LIGHT_PROTO_KEY in load_model(tmp_path / "sorted.onnx", keep_light=True).meta
    feeds = {"x": np.ones((3, 512), np.float32)}
    want = run_ort(str(path), feeds)[0]
    for given in (str(path), onnx.load(str(path))):
        folded = optimize(given, FoldOptions(strict=True)).to_proto()
        onnx.checker.check_model(folded)
        np.testing.assert_allclose(run_ort(folded, feeds)[0], want, rtol=1e-5)


def test_an_unsorted_graph_that_is_also_invalid_is_still_refused(tmp_path):
    proto = onnx.load(str(_unsorted(tmp_path)))
    proto.graph.node[0].op_type = "Reshape"  # was Reshape(a, s) first: now reads 3 inputs
    proto.graph.node[0].input.append("x")
    path = tmp_path / "bad.onnx"
    onnx.save(proto, path)
    with pytest.raises(InputError, match="invalid model"):
        load_model(path)


def test_only_optimize_s_own_read_is_trusted(tmp_path, calls):
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    model = load_model(path, keep_light=True)  # then changed by the caller
    optimize(model, FoldOptions(strict=True))
    assert calls and LIGHT_PROTO_KEY not in model.meta


def test_lighten_moves_what_serialize_light_moves():
    proto = _model()
    proto.graph.initializer.append(tensor("small", np.arange(4, dtype=np.int64)))
    proto.graph.initializer.append(helper.make_tensor("txt", TensorProto.STRING, [1], [b"a"]))
    light = shapes.lighten(proto)
    assert [t.name for t in light.graph.initializer] == ["small", "txt"]
    assert [i.name for i in light.graph.input] == ["x", "w", "mid"]
    assert "mid" not in {t.name for t in shapes.serialize_light(
        ir.serde.deserialize_model(_model())).graph.initializer}  # the same cut (> 1 KiB)
