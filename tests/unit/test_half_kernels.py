"""Float16 folds onnxruntime would not round are declined (onnxfold/fold/half_kernels.py); the rest
fold, and every model computes bit for bit what its original computes in onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxfold import optimize
from onnxfold.fold.half_kernels import has_kernel, in_float32_by_onnxruntime

# the second row's reciprocals sum to 25.78 in float32 and to 25.77 once rounded to float16
C = np.array([[0.03455, 0.08215, 0.03305], [-0.1304, 0.0905, 0.04465]], np.float16)


def _node(op: str) -> ir.Node:
    return ir.Node("", op, [])


@pytest.mark.parametrize(("op", "dtype", "expected"), [
    ("Transpose", ir.DataType.FLOAT16, True), ("Cast", ir.DataType.FLOAT16, True),
    ("Sign", ir.DataType.BFLOAT16, True), ("Reciprocal", ir.DataType.FLOAT16, False),
    ("MatMul", ir.DataType.FLOAT16, False), ("ReduceSum", ir.DataType.FLOAT16, False)])
def test_onnxruntime_kernel_registry_is_read(op, dtype, expected):
    assert has_kernel(_node(op), dtype, 18) is expected


BFLOAT16 = ir.DataType.BFLOAT16.numpy()


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), np.dtype(">f2"), BFLOAT16])
def test_half_arguments_of_an_op_without_a_kernel_are_computed_in_float32(dtype):
    args = [None, np.ones(3, np.float32), np.ones(3, dtype)]
    assert in_float32_by_onnxruntime(_node("Reciprocal"), args, 18) == dtype
    assert in_float32_by_onnxruntime(_node("Transpose"), args, 18) is None  # it has a kernel


@pytest.mark.parametrize("args", [[np.ones(3, np.float32)], [(2, 3)], [None], []])
def test_arguments_without_half_floats_are_computed_as_given(args):
    assert in_float32_by_onnxruntime(_node("Reciprocal"), args, 18) is None


SHAPES = {"ReduceSum": [2], "Transpose": [3, 2], "Cast": [2, 3], None: [2, 3]}


def _model(reader: str | None):
    nodes = [helper.make_node("Reciprocal", ["c"], ["r"])]
    if reader == "ReduceSum":
        nodes.append(helper.make_node("ReduceSum", ["r", "axes"], ["y"], keepdims=0))
    elif reader == "Transpose":
        nodes.append(helper.make_node("Transpose", ["r"], ["y"]))
    elif reader == "Cast":
        nodes.append(helper.make_node("Cast", ["r"], ["y"], to=TensorProto.FLOAT))
    else:
        nodes.append(helper.make_node("Identity", ["r"], ["y"]))
    nodes.append(helper.make_node("Mul", ["y", "x"], ["z"]))  # keeps a runtime input
    out_type = TensorProto.FLOAT if reader == "Cast" else TensorProto.FLOAT16
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", out_type, [])],
        [helper.make_tensor_value_info("z", out_type, SHAPES[reader])],
        [numpy_helper.from_array(C, "c"), numpy_helper.from_array(np.array([1], np.int64),
                                                                   "axes")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize(("reader", "folded"), [
    ("ReduceSum", False),  # onnxruntime sums the unrounded float32 reciprocals
    ("Cast", False),  # it cancels the Cast pair: the float32 output is never rounded
    ("Transpose", False),  # a float16 kernel between two ops without one: run in float32 too
    (None, False)])  # an Identity, the same (Add -> Reshape -> Add)
def test_a_reciprocal_folds_only_where_onnxruntime_rounds_it(reader, folded):
    model = _model(reader)
    result = optimize(model)
    ops = [n.op_type for n in result.model.graph]
    assert ("Reciprocal" not in ops) is folded, ops
    if not folded:
        assert any("float16 rounding" in str(reason)
                   for *_, reason in result.stats.declined_nodes)
    x_type = np.float32 if reader == "Cast" else np.float16
    feeds = {"x": np.array(1, x_type)}
    runs = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
            .run(None, feeds)[0] for m in (model, result.to_proto())]
    assert runs[0].tobytes() == runs[1].tobytes()


def test_float32_is_not_affected():
    graph = helper.make_graph(
        [helper.make_node("Reciprocal", ["c"], ["r"]),
         helper.make_node("ReduceSum", ["r", "axes"], ["y"], keepdims=0),
         helper.make_node("Mul", ["y", "x"], ["z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(C.astype(np.float32), "c"),
         numpy_helper.from_array(np.array([1], np.int64), "axes")])
    result = optimize(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))
    assert [n.op_type for n in result.model.graph] == ["Mul"]



def test_a_reciprocal_that_is_the_graph_output_folds_rounded_once():
    graph = helper.make_graph(
        [helper.make_node("Reciprocal", ["c"], ["y"])], "g", [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2, 3])],
        [numpy_helper.from_array(C, "c")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    folded = optimize(model).to_proto()
    assert list(folded.graph.node) == []
    runs = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
            .run(None, {})[0] for m in (model, folded)]
    assert runs[0].tobytes() == runs[1].tobytes()


@pytest.mark.parametrize(("op", "values"), [
    ("Sum", [2048.0, 1.0, 1.0]), ("Mean", [2048.0, 1.0, 1.0]), ("Sigmoid", [-11.09])])
def test_an_op_without_a_float16_kernel_folds_in_float32_rounded_once(op, values):
    """Sum and Mean of three float16 inputs are not added pairwise in float16 (2048 + 1 + 1
    would give 2048, onnxruntime gives 2050); Sigmoid's exp must not overflow float16 (0 where
    onnxruntime gives 1.5e-5)."""
    if op == "Sigmoid":
        inits = [numpy_helper.from_array(np.array(values, np.float16), "a")]
        node = helper.make_node(op, ["a"], ["y"])
        shape = [len(values)]
    else:
        inits = [numpy_helper.from_array(np.array([v], np.float16), n)
                 for v, n in zip(values, "abc")]
        node = helper.make_node(op, ["a", "b", "c"], ["y"])
        shape = [1]
    graph = helper.make_graph([node], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, shape)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    folded = optimize(model).to_proto()
    assert list(folded.graph.node) == []
    runs = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
            .run(None, {})[0] for m in (model, folded)]
    assert runs[0].tobytes() == runs[1].tobytes(), (runs[0], runs[1])


def _size_cast_sub(n: int, k: float):
    graph = helper.make_graph(
        [helper.make_node("Size", ["x"], ["s"]),
         helper.make_node("Cast", ["s"], ["c"], to=TensorProto.FLOAT16),
         helper.make_node("Sub", ["c", "k"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [])],
        [numpy_helper.from_array(np.array(k, np.float16), "k")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _runs(model, feeds, level):
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.log_severity_level = 4
    return ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def _same_bits(model, folded, feeds, level) -> bool:
    """Whether both models give the same bits in onnxruntime at optimization ``level``."""
    return _runs(model, feeds, level).tobytes() == _runs(folded, feeds, level).tobytes()


@pytest.mark.parametrize("n", [2049, 70000])
def test_a_cast_to_float16_of_a_value_only_onnxfold_knows_is_not_folded(n):
    """onnxruntime cannot fold Size(x), so it merges the Cast to float16 with its own Cast
    before Sub and Sub sees 2049 exactly; folding both would give 2048. The Cast stays (with
    every optimization off the two agree bit for bit)."""
    model = _size_cast_sub(n, 2048.0 if n < 65504 else 65504.0)
    result = optimize(model)
    assert "Cast" in [node.op_type for node in result.model.graph]
    feeds = {"x": np.zeros(n, np.float16)}
    level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert _same_bits(model, result.to_proto(), feeds, level)


@pytest.mark.xfail(strict=True, reason="known: the folded Size is a constant onnxruntime's own "
                   "constant folding then casts to float16 (inf), where at run time it merges "
                   "the Cast away (70000); keeping Size for it is not done")
def test_a_cast_of_a_folded_size_float16_cannot_hold_matches_at_default_options():
    model = _size_cast_sub(70000, 65504.0)
    feeds = {"x": np.zeros(70000, np.float16)}
    level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    folded = optimize(model).to_proto()
    assert _same_bits(model, folded, feeds, level)


def _size_cast_sub_and_a_second_round():
    """``_size_cast_sub(2049, 2048)`` beside ``Relu(x2 * (0.5 + 0.5))``: folding the Add lets
    a rewrite drop the Mul by one, and that hit makes a second fold round."""
    model = _size_cast_sub(2049, 2048.0)
    graph = model.graph
    graph.node.extend([helper.make_node("Add", ["c1", "c2"], ["one"]),
                       helper.make_node("Mul", ["x2", "one"], ["m"]),
                       helper.make_node("Relu", ["m"], ["y2"])])
    graph.input.append(helper.make_tensor_value_info("x2", TensorProto.FLOAT, [3]))
    graph.output.append(helper.make_tensor_value_info("y2", TensorProto.FLOAT, [3]))
    graph.initializer.extend([numpy_helper.from_array(np.array(0.5, np.float32), "c1"),
                              numpy_helper.from_array(np.array(0.5, np.float32), "c2")])
    return model


@pytest.mark.xfail(strict=True, reason="known bug: a second fold round sees the folded Size "
                   "as an initializer and folds the Cast onnxruntime would merge (0 for 1)")
def test_a_second_round_does_not_fold_the_cast_the_first_declined():
    model = _size_cast_sub_and_a_second_round()
    result = optimize(model)
    feeds = {"x": np.zeros(2049, np.float16), "x2": np.ones(3, np.float32)}
    level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert _same_bits(model, result.to_proto(), feeds, level)


@pytest.mark.xfail(strict=True, reason="known bug: onnxruntime's own optimizer folds the Cast "
                   "of the folded Size (an initializer now), rounding 2049 to 2048, where on "
                   "the original it merges the Cast away; Size would have to stay unfolded")
def test_the_kept_cast_of_a_folded_size_agrees_at_onnxruntimes_default_level():
    model = _size_cast_sub(2049, 2048.0)
    result = optimize(model)
    feeds = {"x": np.zeros(2049, np.float16)}
    level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    assert _same_bits(model, result.to_proto(), feeds, level)
