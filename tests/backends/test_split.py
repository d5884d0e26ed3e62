"""Splitting around runtime constants: the two models compute what the original computes."""

import json

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

from onnxfold.errors import InputError
from onnxfold.runtime.split import split_model, write_split
from tests.support.running import run_ort
from tests.support.weight_models import RUNTIME, D, weight_feeds, weights_as_inputs_model


def _run_split(parts, feeds):
    fold = run_ort(ir.to_proto(parts.runtime_fold), {n: feeds[n] for n in parts.fold_inputs})
    entry = ir.serde.serialize_model(parts.entry)
    entry_feeds = {i.name: feeds[i.name] for i in entry.graph.input if i.name in feeds}
    entry_feeds.update(dict(zip(parts.fold_outputs, fold)))
    return run_ort(entry, entry_feeds)


def test_split_moves_weight_processing_into_runtime_fold(tmp_path):
    model = weights_as_inputs_model()
    parts = split_model(ir.serde.deserialize_model(model), RUNTIME)
    fold_ops = sorted(n.op_type for n in parts.runtime_fold.graph)
    assert fold_ops == ["Cast", "DequantizeLinear", "Transpose"]
    assert sorted(parts.fold_outputs) == ["bias", "wt"]
    assert [n.op_type for n in parts.entry.graph] == ["MatMul", "Add"]
    assert sorted(v.name for v in parts.entry.graph.inputs) == ["bias", "wt", "x"]
    feeds = weight_feeds()
    np.testing.assert_allclose(_run_split(parts, feeds)[0], run_ort(model, feeds)[0],
                               rtol=1e-6, atol=1e-6)
    written = write_split(parts, tmp_path / "out")
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["runtime_constants"] == RUNTIME
    assert {o["name"] for o in manifest["runtime_fold"]["outputs"]} == {"bias", "wt"}
    assert all(onnx.load(p) for p in written if p.endswith(".onnx"))


def test_split_hoists_runtime_constants_out_of_subgraphs():
    model = weights_as_inputs_model(with_if=True)
    parts = split_model(ir.serde.deserialize_model(model), RUNTIME)
    # the Cast of the runtime-constant bias inside both If branches is folded once
    assert [n.op_type for n in parts.runtime_fold.graph].count("Cast") == 2
    branch_ops = [n.op_type for n in parts.entry.graph if n.op_type == "If"]
    assert branch_ops == ["If"]
    for flag in (True, False):
        feeds = weight_feeds(flag=flag)
        np.testing.assert_allclose(_run_split(parts, feeds)[0], run_ort(model, feeds)[0],
                                   rtol=1e-6, atol=1e-6)


def test_expanding_op_at_the_frontier_stays_in_entry():
    n = 1024
    graph = helper.make_graph(
        [helper.make_node("Mul", ["row", "two"], ["row2"]),
         helper.make_node("Expand", ["row2", "shape"], ["big"]),
         helper.make_node("Add", ["x", "big"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n]),
         helper.make_tensor_value_info("row", TensorProto.FLOAT, [1, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
         helper.make_tensor("shape", TensorProto.INT64, [2], [n, n])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    parts = split_model(ir.serde.deserialize_model(model), ["row"])
    assert [n.op_type for n in parts.runtime_fold.graph] == ["Mul"]
    assert [n.op_type for n in parts.entry.graph] == ["Expand", "Add"]


def test_compiletime_fold_variant():
    model = weights_as_inputs_model()
    graph = model.graph
    graph.initializer.append(helper.make_tensor("c", TensorProto.FLOAT, [D], [1.0] * D))
    graph.node.insert(0, helper.make_node("Neg", ["c"], ["nc"]))
    graph.node.append(helper.make_node("Add", ["y", "nc"], ["y2"]))
    graph.output[0].name = "y2"
    parts = split_model(ir.serde.deserialize_model(model), RUNTIME,
                        separate_compile_time=True)
    assert parts.compiletime_fold is not None
    assert [n.op_type for n in parts.compiletime_fold.graph] == ["Neg"]
    assert "nc" in {v.name for v in parts.entry.graph.inputs}





def test_unknown_runtime_constant_is_a_clear_error():
    model = weights_as_inputs_model()
    with pytest.raises(InputError, match="no graph input matches"):
        split_model(ir.serde.deserialize_model(model), ["nope"])


def test_patterns_select_inputs():
    model = weights_as_inputs_model()
    parts = split_model(ir.serde.deserialize_model(model), ["w*", "scale", "zp", "bias_*"])
    assert parts.manifest["runtime_constants"] == RUNTIME


def test_parts_hold_their_data_and_describe_only_their_interface(tmp_path):
    # a weight read by the fold, stored as external data beside the input model
    model = weights_as_inputs_model()
    model.graph.initializer.append(onnx.numpy_helper.from_array(
        np.linspace(-1, 1, D * D, dtype=np.float32).reshape(D, D), "big"))
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.float32(0.5), "half"))
    model.graph.node.insert(2, helper.make_node("Add", ["wt", "big"], ["wtb"]))
    model.graph.node.insert(3, helper.make_node("Mul", ["wtb", "half"], ["wtm"]))
    model.graph.node[4].input[1] = "wtm"  # the MatMul
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True, location="m.data",
              size_threshold=1024)
    from onnxfold.io import load_model

    parts = split_model(load_model(tmp_path / "m.onnx"), RUNTIME)
    fold = parts.runtime_fold
    assert isinstance(fold, ir.Model)
    assert not any(isinstance(v.const_value, ir.ExternalTensor)
                   for v in fold.graph.initializers.values())
    proto = ir.to_proto(fold)  # self-contained: onnxruntime runs it from its bytes
    assert {i.name for i in proto.graph.initializer} == {"big", "half"}
    assert {v.name for v in proto.graph.value_info} == {"big", "half"}  # not wt, wtb
    original = onnx.load(str(tmp_path / "m.onnx"))  # with its data
    np.testing.assert_allclose(_run_split(parts, weight_feeds())[0],
                               run_ort(original, weight_feeds())[0], rtol=1e-5, atol=1e-5)


def test_a_constant_the_fold_declined_is_computed_by_the_runtime_fold():
    """``Cast(w16 -> float)`` folds at compile time but the policy declines it (it would
    double a float16 weight): the runtime fold that reads it computes it too (it failed:
    'value ... is neither an input nor a constant')."""
    from onnxfold.runtime.session import Session

    w16 = np.random.default_rng(0).standard_normal((2048, 512)).astype(np.float16)
    graph = helper.make_graph(
        [helper.make_node("Cast", ["w16"], ["w"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["w", "scale"], ["ws"]),
         helper.make_node("MatMul", ["x", "ws"], ["y"])], "declined",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 2048]),
         helper.make_tensor_value_info("scale", TensorProto.FLOAT, [512])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 512])],
        [onnx.numpy_helper.from_array(w16, "w16")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": np.ones((2, 2048), np.float32), "scale": np.full(512, 0.5, np.float32)}
    session = Session(model, ["scale"])
    assert sorted(n.op_type for n in session.parts.runtime_fold.graph) == ["Cast", "Mul"]
    np.testing.assert_allclose(session.run(None, feeds)[0], run_ort(model, feeds)[0],
                               rtol=1e-5, atol=1e-4)


def test_a_runtime_constant_read_only_inside_a_loop_body_is_a_fold_input(tmp_path):
    """``v = Loop(3){s += w}(0)`` with ``w`` a runtime constant: the Loop reads ``w`` only from
    its body (a captured value), and the runtime fold must still take it as an input (it was
    "value w is neither an input nor a constant")."""
    from bench import stop_models
    from onnxfold.runtime.session import Session

    path = tmp_path / "m.onnx"
    stop_models.endless_runtime_fold(path, tmp_path / "feeds.npz")
    model = onnx.load(path)
    for init in model.graph.initializer:
        if init.name == "M":
            init.CopyFrom(onnx.numpy_helper.from_array(np.array(3, np.int64), "M"))
    feeds = dict(np.load(tmp_path / "feeds.npz"))
    feeds["w"] = np.arange(stop_models.WIDTH, dtype=np.float32)
    parts = split_model(ir.serde.deserialize_model(model), ["w"])
    assert parts.fold_inputs == ["w"]
    want = run_ort(model, feeds)[0]
    np.testing.assert_array_equal(_run_split(parts, feeds)[0], want)
    np.testing.assert_array_equal(Session(model, ["w"]).run(None, feeds)[0], want)
