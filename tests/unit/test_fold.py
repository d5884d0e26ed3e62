"""The fold pass on small graphs built with onnx.helper, checked against onnxruntime."""

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

import onnxfold
from onnxfold.pipeline.options import FoldOptions
from tests.support.models import make_model, tensor, vinfo
from tests.support.running import fold_proto, run_ort


def ops(proto):
    return [n.op_type for n in proto.graph.node]


def test_chain_folds_into_one_initializer(tmp_path):
    w = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
             helper.make_node("Mul", ["wt", "two"], ["w2"]),
             helper.make_node("Abs", ["w2"], ["w3"]),
             helper.make_node("MatMul", ["x", "w3"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[2, 8])], [vinfo("y", shape=[2, 4])],
                       [tensor("w", w), tensor("two", np.float32(2))])
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["MatMul"]
    assert report.folded_nodes == 3 and report.folded_fallback == 0
    x = np.ones((2, 8), np.float32)
    np.testing.assert_array_equal(run_ort(proto, {"x": x})[0], run_ort(out, {"x": x})[0])
    (init,) = list(folded.graph.initializer)
    np.testing.assert_array_equal(onnx.numpy_helper.to_array(init), np.abs(w.T * 2))


def test_overridable_initializer_is_not_a_constant(tmp_path):
    nodes = [helper.make_node("Neg", ["w"], ["nw"]), helper.make_node("Add", ["x", "nw"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[3]), vinfo("w", shape=[3])],
                       [vinfo("y", shape=[3])], [tensor("w", np.ones(3, np.float32))])
    folded, report, _ = fold_proto(proto, tmp_path)
    assert ops(folded) == ["Neg", "Add"] and report.folded_nodes == 0
    folded, report, out = fold_proto(proto, tmp_path,
                                     FoldOptions(inputs_are_constant=True, strict=True))
    assert ops(folded) == ["Add"]
    assert [i.name for i in folded.graph.input] == ["x"]  # no dangling input left
    np.testing.assert_array_equal(run_ort(out, {"x": np.zeros(3, np.float32)})[0], -np.ones(3))


def test_ir3_initializers_are_constants_and_inputs_stay_consistent(tmp_path):
    nodes = [helper.make_node("Neg", ["w"], ["nw"]), helper.make_node("Add", ["x", "nw"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[3]), vinfo("w", shape=[3])],
                       [vinfo("y", shape=[3])], [tensor("w", np.arange(3, dtype=np.float32))],
                       opset=7, ir_version=3)
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["Add"] and report.folded_nodes == 1
    inputs = {i.name for i in folded.graph.input}
    inits = {t.name for t in folded.graph.initializer}
    assert "w" not in inputs and inits <= inputs  # IR 3: every initializer is an input
    onnx.checker.check_model(folded)
    np.testing.assert_array_equal(run_ort(out, {"x": np.zeros(3, np.float32)})[0],
                                  -np.arange(3, dtype=np.float32))


@pytest.mark.parametrize("op", ["RandomNormal", "RandomUniform"])
def test_nondeterministic_ops_never_fold(tmp_path, op):
    nodes = [helper.make_node(op, [], ["r"], shape=[3], dtype=TensorProto.FLOAT),
             helper.make_node("Mul", ["r", "zero"], ["z"]),
             helper.make_node("Add", ["x", "z"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[3])], [vinfo("y", shape=[3])],
                       [tensor("zero", np.float32(0))])
    folded, report, _ = fold_proto(proto, tmp_path)
    assert ops(folded) == [op, "Mul", "Add"] and report.folded_nodes == 0
    assert report.declined == {"non-deterministic op": 1}


def test_random_like_ops_never_fold(tmp_path):
    nodes = [helper.make_node("RandomNormalLike", ["c"], ["r"]),
             helper.make_node("Add", ["x", "r"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[3])], [vinfo("y", shape=[3])],
                       [tensor("c", np.zeros(3, np.float32))])
    folded, _, _ = fold_proto(proto, tmp_path)
    assert ops(folded) == ["RandomNormalLike", "Add"]


def test_custom_domain_is_never_folded(tmp_path):
    nodes = [helper.make_node("Frobnicate", ["c"], ["f"], domain="com.example"),
             helper.make_node("Add", ["x", "f"], ["y"])]
    graph = helper.make_graph(nodes, "g", [vinfo("x", shape=[3])], [vinfo("y", shape=[3])],
                              [tensor("c", np.zeros(3, np.float32))])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.example", 1)])
    proto.ir_version = 8
    src = str(tmp_path / "in.onnx")
    onnx.save(proto, src)
    result = onnxfold.optimize(src, FoldOptions(strict=True), check=False)
    assert [n.op_type for n in result.model.graph] == ["Frobnicate", "Add"]
    assert result.report.declined == {"custom domain": 1}
    assert result.report.declined_nodes[0]["reason"] == "custom domain: 'com.example'"


def test_fallback_batches_neighbouring_nodes_into_one_session(tmp_path):
    c = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    nodes = [helper.make_node("Softmax", ["c"], ["s"], axis=-1),
             helper.make_node("HardSigmoid", ["s"], ["h"]),
             helper.make_node("Softsign", ["h"], ["g"]),
             helper.make_node("Add", ["x", "g"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[3, 4])], [vinfo("y", shape=[3, 4])],
                       [tensor("c", c)])
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["Add"]
    assert report.folded_fallback == 3 and report.fallback_sessions == 1
    x = np.zeros((3, 4), np.float32)
    np.testing.assert_array_equal(run_ort(proto, {"x": x})[0], run_ort(out, {"x": x})[0])


def test_disabled_rule_goes_through_fallback_or_stays(tmp_path):
    nodes = [helper.make_node("Neg", ["c"], ["n"]), helper.make_node("Add", ["x", "n"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[2])], [vinfo("y", shape=[2])],
                       [tensor("c", np.ones(2, np.float32))])
    _, report, _ = fold_proto(proto, tmp_path, FoldOptions(disabled_rules={"Neg"}))
    assert report.folded_fallback == 1 and report.folded_native == 0
    folded, report, _ = fold_proto(proto, tmp_path,
                                   FoldOptions(disabled_rules={"Neg"}, fallback=False))
    assert ops(folded) == ["Neg", "Add"] and report.declined == {"no rule": 1}


def test_shape_of_statically_shaped_dynamic_value_folds(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Shape", ["r"], ["s"]),
             helper.make_node("ReduceProd", ["s"], ["n"], keepdims=1),
             helper.make_node("Reshape", ["r", "n"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[2, 3])], [vinfo("y", shape=[6])])
    folded, _report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["Relu", "Reshape"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(run_ort(proto, {"x": x})[0], run_ort(out, {"x": x})[0])


def test_expansion_bound_refuses_blow_ups(tmp_path):
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["big"],
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
             helper.make_node("Add", ["x", "big"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[1024, 1024])], [vinfo("y", shape=[1024, 1024])],
                       [tensor("shape", np.array([1024, 1024], np.int64))])
    no_growth_policy = FoldOptions(growth_factor=None, strict=True)
    folded, report, _ = fold_proto(proto, tmp_path, no_growth_policy)
    assert ops(folded) == ["ConstantOfShape", "Add"]
    assert report.declined == {"size": 1}
    assert "4194304 B > 4x inputs 16 B" in report.declined_nodes[0]["reason"]
    folded, report, _ = fold_proto(proto, tmp_path)  # the growth policy refuses it first
    assert ops(folded) == ["ConstantOfShape", "Add"] and report.declined == {"growth": 1}
    folded, _, _ = fold_proto(proto, tmp_path, FoldOptions(expansion_min_bytes=8 << 20,
                                                           growth_factor=None))
    assert ops(folded) == ["Add"]


def test_pool_frees_chain_intermediates(tmp_path):
    w = np.random.default_rng(1).standard_normal((512, 1024)).astype(np.float32)  # 2 MiB
    nodes, cur = [], "w"
    for i, op in enumerate(["Abs", "Sqrt", "Neg", "Exp", "Abs", "Log", "Neg", "Abs"] * 2):
        nodes.append(helper.make_node(op, [cur], [f"c{i}"]))
        cur = f"c{i}"
    nodes.append(helper.make_node("MatMul", ["x", cur], ["y"], ))
    proto = make_model(nodes, [vinfo("x", shape=[1, 512])], [vinfo("y", shape=[1, 1024])],
                       [tensor("w", w)])
    folded, report, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["MatMul"]
    assert report.pool_peak_bytes <= 2 * w.nbytes  # one input and one output alive at a time
    x = np.ones((1, 512), np.float32)
    np.testing.assert_allclose(run_ort(proto, {"x": x})[0], run_ort(out, {"x": x})[0],
                               rtol=1e-5)


def test_constant_node_and_graph_output_that_folds(tmp_path):
    nodes = [helper.make_node("Constant", [], ["c"], value=tensor("cv", np.arange(4.0,
                                                                                    dtype=np.float32))),
             helper.make_node("Mul", ["c", "c"], ["sq"]),
             helper.make_node("Add", ["x", "sq"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[4])], [vinfo("y", shape=[4]),
                                                         vinfo("sq", shape=[4])])
    folded, _, out = fold_proto(proto, tmp_path)
    assert ops(folded) == ["Add"]
    _y, sq = run_ort(out, {"x": np.zeros(4, np.float32)})
    np.testing.assert_array_equal(sq, np.arange(4.0) ** 2)


def test_api_accepts_an_ir_model():
    nodes = [helper.make_node("Neg", ["c"], ["n"]), helper.make_node("Add", ["x", "n"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[2])], [vinfo("y", shape=[2])],
                       [tensor("c", np.ones(2, np.float32))])
    model = ir.serde.deserialize_model(proto)
    result = onnxfold.optimize(model)
    assert result.model is model and result.report.folded_nodes == 1
    assert "Folded" not in result.report.summary() and "nodes" in result.report.summary()


def test_dequantize_linear_of_weights_is_kept_unless_asked(tmp_path):
    wq = np.random.default_rng(3).integers(-128, 127, (8, 4)).astype(np.int8)
    nodes = [helper.make_node("Mul", ["s0", "two"], ["scale"]),
             helper.make_node("DequantizeLinear", ["wq", "scale"], ["w"]),
             helper.make_node("MatMul", ["x", "w"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[1, 8])], [vinfo("y", shape=[1, 4])],
                       [tensor("wq", wq), tensor("s0", np.float32(0.01)),
                        tensor("two", np.float32(2))])
    folded, report, _ = fold_proto(proto, tmp_path)
    assert ops(folded) == ["DequantizeLinear", "MatMul"]  # the scale arithmetic still folds
    assert report.declined == {"qdq policy": 1}
    folded, _, out = fold_proto(proto, tmp_path, FoldOptions(fold_qdq=True, strict=True))
    assert ops(folded) == ["MatMul"]
    x = np.ones((1, 8), np.float32)
    # MatMul with a constant weight runs a prepacked kernel: summation order may differ
    np.testing.assert_allclose(run_ort(proto, {"x": x})[0], run_ort(out, {"x": x})[0],
                               atol=1e-5)


def test_memory_limit_keeps_the_pool_under_it(tmp_path):
    w = np.random.default_rng(2).standard_normal((256, 1024)).astype(np.float32)  # 1 MiB
    nodes, cur = [], "w"
    for i, op in enumerate(["Abs", "Sqrt", "Neg", "Exp", "Abs", "Log"]):
        nodes.append(helper.make_node(op, [cur], [f"c{i}"]))
        cur = f"c{i}"
    nodes.append(helper.make_node("MatMul", ["x", cur], ["y"]))
    proto = make_model(nodes, [vinfo("x", shape=[1, 256])], [vinfo("y", shape=[1, 1024])],
                       [tensor("w", w)])
    limit = w.nbytes * 3 // 2  # room for one buffer, not for an input and its output
    _, unlimited, _ = fold_proto(proto, tmp_path)
    folded, report, out = fold_proto(proto, tmp_path, FoldOptions(memory_limit=limit,
                                                                  strict=True))
    assert unlimited.pool_peak_bytes == 2 * w.nbytes and unlimited.pool_spilled == 0
    assert report.pool_peak_bytes <= limit and report.pool_spilled >= 5
    assert ops(folded) == ["MatMul"]
    x = np.ones((1, 256), np.float32)
    np.testing.assert_allclose(run_ort(proto, {"x": x})[0], run_ort(out, {"x": x})[0],
                               rtol=1e-5)


def test_fallback_returns_bfloat16_results(tmp_path):
    import ml_dtypes

    w = np.arange(12, dtype=np.float32).reshape(3, 4).astype(ml_dtypes.bfloat16)
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
             helper.make_node("Cast", ["wt"], ["w32"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["x", "w32"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[4, 3])], [vinfo("y", shape=[4, 3])],
                       [tensor("w", w)])
    options = FoldOptions(disabled_rules={"Transpose"}, strict=True)  # through onnxruntime
    folded, report, out = fold_proto(proto, tmp_path, options)
    assert ops(folded) == ["Add"] and report.folded_fallback == 1
    x = np.zeros((4, 3), np.float32)
    np.testing.assert_array_equal(run_ort(out, {"x": x})[0], w.T.astype(np.float32))
