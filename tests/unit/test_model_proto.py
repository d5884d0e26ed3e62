"""``OptimizeResult.to_proto`` (``io.writer.model_proto``): each weight still in the input's
file is read where the serializer reaches it, one at a time, so that the proto is the only
whole copy of the weights in memory (every weight was read before the serializer started:
BERT-base's ``to_proto`` peaked at 1.4 GiB for 418 MiB of weights, 1.3 GiB now); the bytes
written are the same."""

from __future__ import annotations

import weakref

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxfold.io import writer
from onnxfold.pipeline.optimizer import optimize


def _external_weights_model(path) -> None:
    """y = x + W0 + W1 + ... with every weight in the model's data file (nothing folds)."""
    weights = [numpy_helper.from_array(np.full((64, 64), i + 0.5, np.float32), f"W{i}")
               for i in range(6)]
    nodes, last = [], "x"
    for i in range(6):
        nodes.append(helper.make_node("Add", [last, f"W{i}"], [f"a{i}"]))
        last = f"a{i}"
    graph = helper.make_graph(nodes, "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])],
                              [helper.make_tensor_value_info(last, TensorProto.FLOAT, [64, 64])],
                              weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path), save_as_external_data=True, location="m.data",
              size_threshold=0)


def test_each_weight_is_read_where_it_is_serialized_and_let_go(tmp_path, monkeypatch):
    _external_weights_model(tmp_path / "m.onnx")
    result = optimize(str(tmp_path / "m.onnx"))
    references = {name: v.const_value for name, v in result.model.graph.initializers.items()}
    read: list[weakref.ref] = []
    alive_at_each_read: list[int] = []
    real = writer._read_tensor

    def counted(reader, dtype):
        alive_at_each_read.append(sum(r() is not None for r in read))
        tensor = real(reader, dtype)
        read.append(weakref.ref(tensor.raw))
        return tensor

    monkeypatch.setattr(writer, "_read_tensor", counted)
    proto = result.to_proto()
    assert len(alive_at_each_read) == 6 and alive_at_each_read == [0] * 6
    monkeypatch.undo()
    expected = onnx.load(str(tmp_path / "m.onnx"))
    got = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    for tensor in expected.graph.initializer:
        assert got[tensor.name].tobytes() == numpy_helper.to_array(tensor).tobytes()
    # the result's own model refers to its file again (the references restored)
    assert {name: v.const_value for name, v in result.model.graph.initializers.items()} == \
        references


def test_a_spent_result_lets_its_arrays_go_as_they_are_serialized():
    """``to_proto(spend=True)`` (``simplify``'s): the arrays the fold made are let go once
    serialized, so that the proto is the only copy; the same bytes as ``to_proto()``."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((64, 96)).astype(np.float32), f"W{i}")
               for i in range(3)]
    nodes = [helper.make_node("Transpose", [f"W{i}"], [f"t{i}"], perm=[1, 0]) for i in range(3)]
    nodes += [helper.make_node("MatMul", ["x", "t0"], ["y0"]),
              helper.make_node("MatMul", ["y0", "W1"], ["y1"]),
              helper.make_node("MatMul", ["y1", "t2"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 96])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    kept = optimize(model).to_proto()
    result = optimize(model)
    arrays = [weakref.ref(v.const_value.raw) for v in result.model.graph.initializers.values()
              if isinstance(getattr(v.const_value, "raw", None), np.ndarray)]
    assert arrays  # (the folded transposes)
    spent = result.to_proto(spend=True)
    assert spent.SerializeToString() == kept.SerializeToString()
    assert all(a() is None for a in arrays)
