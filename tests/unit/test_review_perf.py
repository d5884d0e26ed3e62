"""Review of the performance changes (collector, reused reader proto, rewrite sweeps):
regressions found while attacking them."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxfold
from onnxfold import FoldOptions, collector
from onnxfold.io.reader import load_model
from onnxfold.pipeline import optimize
from tests.support.models import make_model, tensor, vinfo
from tests.support.running import run_ort


def _in_memory_model(n=64):
    """An ir.Model whose weight is a numpy array only the model holds; the weight folds away."""
    nodes = [helper.make_node("Mul", ["w", "two"], ["w2"]),
             helper.make_node("MatMul", ["x", "w2"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[1, n])], [vinfo("y", shape=[1, n])],
                       [tensor("w", np.zeros((1, 1), np.float32)),
                        tensor("two", np.array(2, np.float32))])
    model = ir.serde.deserialize_model(proto)
    weight = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    value = model.graph.initializers["w"]
    value.const_value = ir.Tensor(weight, name="w")
    value.shape = ir.Shape([n, n])
    return model, weakref.ref(weight)


def test_repeated_optimize_calls_do_not_keep_every_folded_model_alive(monkeypatch):
    # long_lived() froze the garbage of the call before (gc.freeze() at the next call's
    # start), so no collection ever reached it: every call's folded-away weights stayed
    monkeypatch.setattr(collector, "FREEZE_MIN_NODES", 0)  # freeze even this small model
    gc.collect()
    alive = []
    for _ in range(4):
        model, weight = _in_memory_model()
        result = optimize(model)  # not strict: a snapshot is taken for a restart
        result.to_proto()
        del model, result
        alive.append(weight)
    assert sum(w() is not None for w in alive) == 0


def test_a_folded_away_weight_is_freed_while_the_result_lives():
    # serialize_light added the large initializers to graph.inputs and removed them; onnx-ir
    # kept their (zero) count, and with it the value and its weight, as long as the graph
    model, weight = _in_memory_model()
    result = optimize(model, FoldOptions(strict=True))
    assert [n.op_type for n in result.model.graph] == ["MatMul"]
    gc.collect()
    assert weight() is None


def test_a_caller_s_own_threshold_equal_to_ours_is_not_mistaken_for_a_fold():
    # settled() froze whenever the young threshold was 50,000, i.e. also when the caller had
    # chosen that value: nothing ever unfroze those objects
    old, frozen = gc.get_threshold(), gc.get_freeze_count()
    gc.set_threshold(50_000, *old[1:])  # the fold's own threshold, then
    try:
        with collector.long_lived():
            collector.settled(10**6)
        onnxfold.optimize(_in_memory_model()[0])
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
        gc.set_threshold(*old)


def test_automatic_collection_turned_off_by_a_zero_threshold_stays_off():
    old = gc.get_threshold()
    gc.set_threshold(0)
    try:
        with collector.long_lived():
            assert gc.get_threshold()[0] == 0
    finally:
        gc.set_threshold(*old)


def test_value_info_contradicting_an_initializer_gives_the_same_output_either_way(tmp_path):
    w = np.random.default_rng(0).standard_normal((512, 4)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Shape", ["h"], ["s"]),
             helper.make_node("Reshape", ["h", "s"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=["N", 512])],
                       [vinfo("y", shape=["p", "q"]), vinfo("s", TensorProto.INT64, [2])],
                       [tensor("w", w)])
    proto.graph.value_info.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [3, 5]))
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    feeds = {"x": np.ones((2, 512), np.float32)}
    read_here = optimize(str(path), FoldOptions(strict=True)).to_proto()
    handed = optimize(load_model(path), FoldOptions(strict=True)).to_proto()
    for folded in (read_here, handed):
        for got, want in zip(run_ort(folded, feeds), run_ort(proto, feeds), strict=True):
            np.testing.assert_array_equal(got, want)
    assert read_here.SerializeToString() == handed.SerializeToString()


@pytest.mark.xfail(strict=True, reason="a value_info entry of an intermediate value is trusted "
                   "(onnxruntime's own optimizer trusts it too, and fails on this model); "
                   "dropping such claims before inference also drops the exporters' dim "
                   "names, which keep dims read from different inputs apart (see the closing "
                   "note of issue 15): not done yet")
def test_a_lying_value_info_of_an_intermediate_value_is_not_folded_into_shapes(tmp_path):
    """The file claims [1, 4] for a [N, 4] value: shape inference derives the value's shape
    from the inputs instead (what onnxruntime computes without its own optimizations, which
    trust the claim and fail), so Shape of it does not fold into [1, 4]."""
    nodes = [helper.make_node("Relu", ["x"], ["h"]),
             helper.make_node("Shape", ["h"], ["s"]),
             helper.make_node("Concat", ["s", "one"], ["s1"], axis=0),
             helper.make_node("Reshape", ["h", "s1"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=["N", 4])], [vinfo("y", shape=["N", 4, 1])],
                       [tensor("one", np.array([1], np.int64))])
    proto.graph.value_info.append(helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, 4]))
    feeds = {"x": np.ones((3, 4), np.float32)}
    folded = optimize(proto, FoldOptions(strict=True)).to_proto()
    plain = ort.SessionOptions()
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(proto.SerializeToString(), plain,
                                providers=["CPUExecutionProvider"]).run(None, feeds)
    for got, expected in zip(run_ort(folded, feeds), want, strict=True):
        np.testing.assert_array_equal(got, expected)
    assert [vi for vi in folded.graph.value_info if vi.name == "h"] == [] or all(
        d.dim_value != 1 for vi in folded.graph.value_info if vi.name == "h"
        for d in vi.type.tensor_type.shape.dim[:1])


def _both_ways(path):
    read_here = optimize(str(path), FoldOptions(strict=True)).to_proto()
    handed = optimize(load_model(path), FoldOptions(strict=True)).to_proto()
    return read_here, handed


def test_a_value_info_lying_about_a_small_initializer_is_read_the_same_either_way(tmp_path):
    """Review: the reader's proto kept the claim ([2, 5] for a [2, 4] weight) and onnx's
    inference then failed for the whole model, while the loaded model had been corrected."""
    w = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Shape", ["h"], ["s"]),
             helper.make_node("Reshape", ["h", "s"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=["N", 2])], [vinfo("y", shape=["a", "b"])],
                       [tensor("w", w)])
    proto.graph.value_info.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [2, 5]))
    onnx.save(proto, tmp_path / "m.onnx")
    read_here, handed = _both_ways(tmp_path / "m.onnx")
    assert read_here.SerializeToString() == handed.SerializeToString()
    assert "Reshape" not in [n.op_type for n in read_here.graph.node]


def test_a_small_external_initializer_is_read_the_same_either_way(tmp_path):
    """Review: a 24-byte Reshape target saved as external data was a typed input in the
    reader's proto (no data for inference) but data in the serialized model."""
    nodes = [helper.make_node("Reshape", ["x", "shp"], ["r"]),
             helper.make_node("Relu", ["r"], ["h"]),
             helper.make_node("Shape", ["h"], ["s"]),
             helper.make_node("Reshape", ["h", "s"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=["N", 4])], [vinfo("y", shape=["a", "b", "c"])],
                       [tensor("shp", np.array([-1, 2, 2], np.int64))])
    onnx.save(proto, tmp_path / "m.onnx", save_as_external_data=True, location="m.data",
              size_threshold=0)
    read_here, handed = _both_ways(tmp_path / "m.onnx")
    assert [n.op_type for n in read_here.graph.node] == [n.op_type for n in handed.graph.node]
    feeds = {"x": np.arange(12, dtype=np.float32).reshape(3, 4)}
    np.testing.assert_array_equal(run_ort(read_here, feeds)[0], run_ort(handed, feeds)[0])


def test_an_unknown_cast_type_after_a_zero_add_keeps_the_add(tmp_path):
    """Review: Cast(to=99) made the zero-sign check raise (the rule was then skipped for the
    whole model, or the run failed under --strict)."""
    from onnxfold.io.reader import model_from_proto

    nodes = [helper.make_node("Add", ["x", "z"], ["a"]),
             helper.make_node("Cast", ["a"], ["y"], to=99)]
    proto = make_model(nodes, [vinfo("x", shape=[3])], [vinfo("y", shape=[3])],
                       [tensor("z", np.zeros(3, np.float32))])
    result = optimize(model_from_proto(proto), FoldOptions(strict=True))
    assert [n.op_type for n in result.model.graph] == ["Add", "Cast"]


def test_a_caller_s_frozen_heap_with_a_round_threshold_is_left_alone():
    """Review: a caller with its own frozen heap and a threshold of 50,000 (the fold's own,
    then) made settled() freeze each fold's model for good; the fold's threshold is now an
    unusual number, and such a caller's heap is left as it is."""
    import gc

    from onnxfold.collector import long_lived, settled

    old = gc.get_threshold()
    gc.set_threshold(50_000, *old[1:])
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with long_lived():
            settled(10**6)
            assert gc.get_threshold()[0] == 50_000
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
        gc.set_threshold(*old)
