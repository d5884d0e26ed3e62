"""The Python API takes what users hold: a path, an onnx.ModelProto, its bytes, an ir.Model."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest

import onnxfold
from onnxfold.errors import InputError
from tests.support.models import MODELS, exp_model
from tests.support.running import random_feeds, run_ort

TINY_BERT = f"{MODELS}/tiny_bert_ts.onnx"


@pytest.mark.parametrize("kind", ["path", "proto", "bytes", "ir"])
def test_optimize_takes_what_users_hold(kind):
    proto = onnx.load(TINY_BERT)
    given = {"path": TINY_BERT, "proto": proto, "bytes": proto.SerializeToString(),
             "ir": ir.serde.deserialize_model(proto)}[kind]
    result = onnxfold.optimize(given)
    folded = result.to_proto()
    assert isinstance(folded, onnx.ModelProto)
    assert len(folded.graph.node) < len(proto.graph.node)
    feeds = random_feeds(TINY_BERT)
    for a, b in zip(run_ort(proto, feeds), run_ort(folded, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_the_result_saves(tmp_path):
    """``result.save`` writes the folded model, whole: the bytes it reports, a model
    onnxruntime runs, with the fold's nodes gone and the original's outputs."""
    result = onnxfold.optimize(TINY_BERT)
    info = result.save(tmp_path / "out.onnx")
    assert info.bytes_written == (tmp_path / "out.onnx").stat().st_size
    saved = onnx.load(str(tmp_path / "out.onnx"))
    assert len(saved.graph.node) == result.report.nodes_after < result.report.nodes_before
    check = onnxfold.compare(TINY_BERT, str(tmp_path / "out.onnx"), n=2)
    assert check.ok and check.rows and all(row.bitwise_equal for row in check.rows), \
        check.summary()


def test_bad_protos_and_bytes_are_one_error():
    with pytest.raises(InputError, match="not an ONNX model"):
        onnxfold.optimize(b"\x08\x01garbage that is not protobuf \xff\xff")
    model = onnx.load(TINY_BERT)
    model.graph.node[0].input[0] = "no_such_value"
    with pytest.raises(InputError):
        onnxfold.optimize(model)


def test_simplify_is_onnxsim_shaped(tmp_path):
    """``(ModelProto, ok)`` as onnxsim returns it: the folded model, and whether the check
    passed; ``ok`` is False when an output is outside tolerance."""
    folded, ok = onnxfold.simplify(onnx.load(TINY_BERT), check_n=1)
    assert ok is True and isinstance(folded, onnx.ModelProto)
    assert len(folded.graph.node) < len(onnx.load(TINY_BERT).graph.node)
    exp_model(tmp_path / "exp.onnx")  # Exp folds in numpy: its last bits differ
    folded, ok = onnxfold.simplify(str(tmp_path / "exp.onnx"), check_n=1, rtol=0, atol=0)
    assert ok is False and isinstance(folded, onnx.ModelProto)


def test_a_protos_sparse_initializer_is_densified_in_a_copy():
    from onnx import helper

    values = onnx.numpy_helper.from_array(np.float32([5.0, 7.0]), "s")
    indices = onnx.numpy_helper.from_array(np.int64([1, 3]), "s_idx")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "s"], ["y"])], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])],
        sparse_initializer=[helper.make_sparse_tensor(values, indices, [4])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    before = proto.SerializeToString()
    folded = onnxfold.optimize(proto, check=False).to_proto()
    assert proto.SerializeToString() == before  # the caller's object is not changed
    x = np.float32([1, 1, 1, 1])
    np.testing.assert_array_equal(run_ort(folded, {"x": x})[0], np.float32([1, 6, 1, 8]))


def test_to_proto_keeps_only_the_value_info_the_input_declared():
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["n"]),
             helper.make_node("Abs", ["n"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [2, 3])],
                              [helper.make_tensor_value_info("y", 1, [2, 3])],
                              value_info=[helper.make_tensor_value_info("r", TensorProto.FLOAT,
                                                                        [2, 3])])
    proto = onnxfold.optimize(helper.make_model(graph)).to_proto()
    assert [vi.name for vi in proto.graph.value_info] == ["r"]  # "n" was only inferred


def test_a_proto_too_big_for_the_checker_is_checked_without_its_weights(monkeypatch):
    """onnx's checker serializes what it checks, which protobuf refuses above 2 GiB: an
    in-memory proto that big is checked in its light form (large weights as typed inputs).
    Simulated by lowering the limit."""
    from onnx import helper

    from onnxfold.io import reader

    monkeypatch.setattr(reader, "CHECK_INLINE_LIMIT", 0)
    nodes = [helper.make_node("Neg", ["W"], ["n"]), helper.make_node("Add", ["x", "n"], ["y"])]
    weight = onnx.numpy_helper.from_array(np.ones((64, 64), np.float32), "W")
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [64, 64])],
                              [helper.make_tensor_value_info("y", 1, [64, 64])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert [n.op_type for n in onnxfold.optimize(model).to_proto().graph.node] == ["Add"]
    model.graph.node[0].attribute.append(helper.make_attribute("bogus", 1))
    with pytest.raises(InputError, match="invalid model"):
        onnxfold.optimize(model)
