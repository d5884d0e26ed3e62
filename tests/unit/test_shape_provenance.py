"""Shape scaffolding that folds because each dim is traced to the graph input dim it comes
from (``onnxfold.analysis.symbolic``): through reductions, through commutative arithmetic written in
either order, into ``allowzero`` Reshape targets, and - under ``--assume-named-dims-equal`` -
across inputs that share a dim name. Every folded model is run in onnxruntime against the
original at a regular binding, a decode-like binding of 1s and an empty (0-sized) binding."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

import onnxfold
from onnxfold.analysis.shapes import infer_shapes
from onnxfold.analysis.symbolic import shape_values
from onnxfold.declare.catalogue import load_catalogue
from onnxfold.ir.constants import source_array
from onnxfold.pipeline.options import FoldOptions
from tests.support.running import run_ort


def _model(nodes: list, inputs: list, outputs: list, opset: int = 18) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _const(name: str, values: list[int] | int) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name],
                            value=numpy_helper.from_array(np.asarray(values, np.int64), name))


def _float(name: str, shape: list) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _fold(model: onnx.ModelProto, **options: bool) -> tuple[onnx.ModelProto, onnxfold.Report]:
    result = onnxfold.optimize(model, FoldOptions(strict=True, **options))
    return result.to_proto(), result.report


def _assert_same(original: onnx.ModelProto, folded: onnx.ModelProto,
                 bindings: list[dict[str, tuple[int, ...]]]) -> None:
    rng = np.random.default_rng(0)
    for binding in bindings:
        feeds = {name: rng.standard_normal(shape).astype(np.float32)
                 for name, shape in binding.items()}
        for want, got in zip(run_ort(original, feeds), run_ort(folded, feeds), strict=True):
            assert want.shape == got.shape
            np.testing.assert_array_equal(want, got)


def _ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node if n.op_type != "Constant"]


def _target_of(model: onnx.ModelProto, op: str = "Reshape") -> list[int]:
    node = next(n for n in model.graph.node if n.op_type == op)
    init = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    return init[node.input[1]].tolist()


def _layer_norm_then_split_heads() -> onnx.ModelProto:
    """x [N, S, 4] and m [N, S] (names shared by two inputs: they prove nothing by name);
    y = x * ReduceMean(x, -1) + m (T5's layer norm), Relu(y) reshaped to [N, S, 2, 2] by a
    target read from y's Shape (TorchScript's Shape -> Gather -> Unsqueeze -> Concat chain)."""
    nodes = [_const("axes", [-1]),
             helper.make_node("ReduceMean", ["x", "axes"], ["mean"], keepdims=1),
             helper.make_node("Mul", ["x", "mean"], ["y0"]),
             helper.make_node("Add", ["y0", "m1"], ["y"]),
             _const("last", [-1]),
             helper.make_node("Unsqueeze", ["m", "last"], ["m1"]),
             helper.make_node("Shape", ["y"], ["shape"]),
             _const("i0", 0), _const("i1", 1), _const("zero", [0]), _const("heads", [2, 2]),
             helper.make_node("Gather", ["shape", "i0"], ["n"]),
             helper.make_node("Gather", ["shape", "i1"], ["s"]),
             helper.make_node("Unsqueeze", ["n", "zero"], ["n1"]),
             helper.make_node("Unsqueeze", ["s", "zero"], ["s1"]),
             helper.make_node("Concat", ["n1", "s1", "heads"], ["target"], axis=0),
             helper.make_node("Relu", ["y"], ["z"]),
             helper.make_node("Reshape", ["z", "target"], ["out"])]
    return _model(nodes, [_float("x", ["N", "S", 4]), _float("m", ["N", "S"])],
                  [_float("out", ["N", "S", 2, 2])])


def test_a_reduction_keeps_the_dims_it_does_not_reduce():
    original = _layer_norm_then_split_heads()
    folded, report = _fold(original)
    assert _ops(folded) == ["ReduceMean", "Mul", "Unsqueeze", "Add", "Relu", "Reshape"]
    assert _target_of(folded) == [0, 0, 2, 2]
    assert report.dynamic_shapes == []
    _assert_same(original, folded, [{"x": (2, 3, 4), "m": (2, 3)},
                                    {"x": (1, 1, 4), "m": (1, 1)},
                                    {"x": (0, 3, 4), "m": (0, 3)}])


def _flatten_allowzero() -> onnx.ModelProto:
    """The dynamo exporter's flatten after global pooling: Reshape(pool [N, 3, 1, 1],
    Concat(Shape(x)[0:1], [3]), allowzero=1)."""
    nodes = [_const("hw", [2, 3]),
             helper.make_node("ReduceMean", ["x", "hw"], ["pool"], keepdims=1),
             helper.make_node("Shape", ["x"], ["batch"], start=0, end=1),
             _const("channels", [3]),
             helper.make_node("Concat", ["batch", "channels"], ["target"], axis=0),
             helper.make_node("Reshape", ["pool", "target"], ["out"], allowzero=1)]
    return _model(nodes, [_float("x", ["N", 3, "H", "W"])], [_float("out", ["N", 3])])


def test_an_allowzero_target_with_one_dynamic_element_beside_nonzero_ints_is_a_minus_1():
    original = _flatten_allowzero()
    folded, _ = _fold(original)
    assert _ops(folded) == ["ReduceMean", "Reshape"]
    assert _target_of(folded) == [-1, 3]
    _assert_same(original, folded, [{"x": (2, 3, 4, 5)}, {"x": (1, 3, 1, 1)},
                                    {"x": (0, 3, 4, 5)}])


def _attention_merge(allowzero: int) -> onnx.ModelProto:
    """Reshape(x [N, S, 4], Concat(Shape(x)[0:2], [2, 2]), allowzero): two dynamic elements,
    each x's own dim; with allowzero=1 a 0 cannot copy them."""
    nodes = [helper.make_node("Shape", ["x"], ["lead"], start=0, end=2),
             _const("heads", [2, 2]),
             helper.make_node("Concat", ["lead", "heads"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["out"], allowzero=allowzero)]
    return _model(nodes, [_float("x", ["N", "S", 4])], [_float("out", ["N", "S", 2, 2])])


def test_an_allowzero_target_with_two_dynamic_elements_stays_and_says_why():
    original = _attention_merge(allowzero=1)
    folded, report = _fold(original)
    assert _ops(folded) == ["Shape", "Concat", "Reshape"]
    assert any("allowzero: a 0 cannot copy a dim" in why for why in report.patterns_rejected)
    _assert_same(original, folded, [{"x": (2, 3, 4)}, {"x": (0, 3, 4)}])


def test_without_allowzero_the_same_target_copies_both_dims():
    original = _attention_merge(allowzero=0)
    folded, _ = _fold(original)
    assert _ops(folded) == ["Reshape"]
    assert _target_of(folded) == [0, 0, 2, 2]
    _assert_same(original, folded, [{"x": (2, 3, 4)}, {"x": (1, 1, 4)}, {"x": (0, 3, 4)}])


def _concat_then_reshape_by_reversed_sum() -> onnx.ModelProto:
    """c = Concat(x [N, S, 4], y [N, P, 4], axis 1) is [N, S + P, 4]; its target is built as
    Shape(y)[1] + Shape(x)[1], the other order of the same sum (a KV cache's past + seq)."""
    nodes = [helper.make_node("Concat", ["x", "y"], ["c"], axis=1),
             helper.make_node("Shape", ["c"], ["n"], start=0, end=1),
             helper.make_node("Shape", ["x"], ["s"], start=1, end=2),
             helper.make_node("Shape", ["y"], ["p"], start=1, end=2),
             helper.make_node("Add", ["p", "s"], ["total"]),
             _const("heads", [2, 2]),
             helper.make_node("Concat", ["n", "total", "heads"], ["target"], axis=0),
             helper.make_node("Reshape", ["c", "target"], ["out"])]
    return _model(nodes, [_float("x", ["N", "S", 4]), _float("y", ["N", "P", 4])],
                  [_float("out", ["N", None, 2, 2])])


def test_a_sum_written_in_either_order_is_the_same_dim():
    original = _concat_then_reshape_by_reversed_sum()
    folded, _ = _fold(original)
    assert _ops(folded) == ["Concat", "Reshape"]
    assert _target_of(folded) == [0, 0, 2, 2]
    _assert_same(original, folded, [{"x": (2, 3, 4), "y": (2, 5, 4)},
                                    {"x": (1, 1, 4), "y": (1, 7, 4)},
                                    {"x": (2, 3, 4), "y": (2, 0, 4)},
                                    {"x": (0, 3, 4), "y": (0, 5, 4)}])


def _reshape_by_another_inputs_dims() -> onnx.ModelProto:
    """b [N, S, 4] reshaped to [N, S, 2, 2] by the N and S read from a [N, S, 4]: the same
    names on two inputs (GPT-2's attention mask and ids)."""
    nodes = [helper.make_node("Shape", ["a"], ["lead"], start=0, end=2),
             _const("rest", [2, 2]),
             helper.make_node("Concat", ["lead", "rest"], ["target"], axis=0),
             helper.make_node("Reshape", ["b", "target"], ["out"]),
             helper.make_node("Relu", ["a"], ["a_out"])]
    return _model(nodes, [_float("a", ["N", "S", 4]), _float("b", ["N", "S", 4])],
                  [_float("out", ["N", "S", 2, 2]), _float("a_out", ["N", "S", 4])])


def test_dims_of_one_name_on_two_inputs_are_not_assumed_equal_by_default():
    original = _reshape_by_another_inputs_dims()
    folded, _ = _fold(original)
    assert "Shape" in _ops(folded)
    _assert_same(original, folded, [{"a": (2, 3, 4), "b": (2, 3, 4)},
                                    {"a": (0, 3, 4), "b": (0, 3, 4)}])


def test_assume_named_dims_equal_folds_across_inputs():
    original = _reshape_by_another_inputs_dims()
    folded, report = _fold(original, assume_named_dims_equal=True)
    assert _ops(folded) == ["Reshape", "Relu"]
    assert _target_of(folded) == [0, 0, 2, 2]
    assert report.to_dict()["options"]["assume_named_dims_equal"] is True
    _assert_same(original, folded, [{"a": (2, 3, 4), "b": (2, 3, 4)},
                                    {"a": (1, 1, 4), "b": (1, 1, 4)},
                                    {"a": (0, 3, 4), "b": (0, 3, 4)}])


def test_under_the_assumption_unequal_named_dims_may_compute_something_else():
    """The documented consequence (docs/policy.md): inputs that break the assumption are
    outside the folded model's contract. Here a [3, 2, 4] and b [2, 3, 4]: the original
    reshapes b by a's dims, the folded model keeps b's own."""
    original = _reshape_by_another_inputs_dims()
    folded, _ = _fold(original, assume_named_dims_equal=True)
    feeds = {"a": np.ones((3, 2, 4), np.float32), "b": np.ones((2, 3, 4), np.float32)}
    assert run_ort(original, feeds)[0].shape == (3, 2, 2, 2)
    assert run_ort(folded, feeds)[0].shape == (2, 3, 2, 2)


def _slice_to_own_length(step: int) -> onnx.ModelProto:
    """m [N, 1, S] sliced on axis 2 from 0 to Shape(x)[1] (x [N, S]: the causal mask's
    ``mask[:, :, :seq]``) with a step of ``step``."""
    nodes = [helper.make_node("Shape", ["x"], ["seq"], start=1, end=2),
             _const("starts", [0]), _const("axes", [2]), _const("steps", [step]),
             helper.make_node("Slice", ["m", "starts", "seq", "axes", "steps"], ["sliced"]),
             helper.make_node("Relu", ["sliced"], ["out"])]
    return _model(nodes, [_float("m", ["N", 1, "S"]), _float("x", ["N", "S"])],
                  [_float("out", ["N", 1, "S"])])


def test_a_slice_to_the_full_length_of_the_same_dim_goes():
    original = _slice_to_own_length(step=1)
    folded, _ = _fold(original, assume_named_dims_equal=True)
    assert _ops(folded) == ["Relu"]
    _assert_same(original, folded, [{"m": (2, 1, 5), "x": (2, 5)}, {"m": (1, 1, 1), "x": (1, 1)},
                                    {"m": (2, 1, 0), "x": (2, 0)}])


def test_a_slice_with_a_step_of_2_stays():
    original = _slice_to_own_length(step=2)
    folded, _ = _fold(original, assume_named_dims_equal=True)
    assert "Slice" in _ops(folded)
    _assert_same(original, folded, [{"m": (2, 1, 5), "x": (2, 5)}, {"m": (1, 1, 1), "x": (1, 1)}])


def _transpose(shape: list, perm: list[int]) -> onnx.ModelProto:
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=perm),
             helper.make_node("Relu", ["t"], ["out"])]
    return _model(nodes, [_float("x", shape)], [_float("out", [shape[p] for p in perm])])


def test_a_transpose_of_size_1_axes_only_goes():
    original = _transpose(["N", 1, 1, "S"], [0, 2, 1, 3])
    folded, _ = _fold(original)
    assert _ops(folded) == ["Relu"]
    _assert_same(original, folded, [{"x": (2, 1, 1, 3)}, {"x": (0, 1, 1, 3)}])


def test_a_transpose_of_equal_dims_stays_even_when_named_dims_are_equal():
    """[N, N] transposed has its input's shape, not its input's data."""
    original = _transpose(["N", "N"], [1, 0])
    folded, _ = _fold(original, assume_named_dims_equal=True)
    assert _ops(folded) == ["Transpose", "Relu"]
    _assert_same(original, folded, [{"x": (3, 3)}, {"x": (0, 0)}])


def _torch_expand_minus_1() -> onnx.ModelProto:
    """TorchScript's ``mask.expand(N, -1, S, S)``: Where(Equal(t, ConstantOfShape(Shape(t))
    * -1), ConstantOfShape(Shape(t)), t) with t = Concat(Shape(x)[0:1], [-1], Shape(x)[1:2] x2),
    whose Equal and ConstantOfShape are not constants until a fold."""
    nodes = [helper.make_node("Shape", ["x"], ["n"], start=0, end=1),
             helper.make_node("Shape", ["x"], ["s"], start=1, end=2),
             _const("minus_1", [-1]),
             helper.make_node("Concat", ["n", "minus_1", "s", "s"], ["t"], axis=0),
             helper.make_node("Shape", ["t"], ["rank"]),
             helper.make_node("ConstantOfShape", ["rank"], ["ones"],
                              value=numpy_helper.from_array(np.array([1], np.int64))),
             helper.make_node("Mul", ["ones", "minus_1"], ["minus_ones"]),
             helper.make_node("Equal", ["t", "minus_ones"], ["is_minus_1"]),
             helper.make_node("Where", ["is_minus_1", "ones", "t"], ["target"]),
             helper.make_node("Expand", ["m", "target"], ["out"])]
    return _model(nodes, [_float("x", ["N", "S"]), _float("m", [1, 1, 1, 1])],
                  [_float("out", ["N", 1, "S", "S"])])


def test_torchs_expand_minus_1_target_is_known_before_any_fold():
    """So the first rewrite round already sees it (what it reports names input dims)."""
    model = ir.from_proto(_torch_expand_minus_1())
    infer_shapes(model)
    known = shape_values(model.graph, source_array, steps=load_catalogue().shape_steps)
    target = next(n for n in model.graph if n.op_type == "Where").outputs[0]
    assert [str(e) for e in known[target].elements] == ["N", "1", "S", "S"]


def _tile(repeats: list[int]) -> onnx.ModelProto:
    """x [N, S] tiled by Concat(Shape(x)[0:1] - Shape(x)[0:1] + 1, [r1]): repeats only known
    as shape values, [1, r1]."""
    nodes = [helper.make_node("Shape", ["x"], ["n"], start=0, end=1),
             helper.make_node("Sub", ["n", "n"], ["zero"]),
             _const("one", [repeats[0]]),
             helper.make_node("Add", ["zero", "one"], ["first"]),
             _const("rest", repeats[1:]),
             helper.make_node("Concat", ["first", "rest"], ["repeats"], axis=0),
             helper.make_node("Tile", ["x", "repeats"], ["t"]),
             helper.make_node("Relu", ["t"], ["out"])]
    return _model(nodes, [_float("x", ["N", "S"])], [_float("out", ["N", None])])


def test_a_tile_by_ones_goes():
    original = _tile([1, 1])
    folded, _ = _fold(original)
    assert _ops(folded) == ["Relu"]
    _assert_same(original, folded, [{"x": (2, 3)}, {"x": (1, 1)}, {"x": (0, 3)}])


def test_a_tile_by_2_stays():
    original = _tile([1, 2])
    folded, _ = _fold(original)
    assert _ops(folded) == ["Tile", "Relu"]
    _assert_same(original, folded, [{"x": (2, 3)}, {"x": (0, 3)}])
