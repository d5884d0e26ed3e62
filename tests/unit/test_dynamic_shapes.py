"""Models with dynamic axes: the known parts of shapes fold, the dynamic dims stay dynamic, and
the folded model computes what the original does for several values of every dynamic dim."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.support.models import make_model, tensor, vinfo
from tests.support.running import assert_same_bits, fold_proto, run_ort

X = vinfo("x", shape=["N", 3, 8, 8])


def _const(name, arr):
    return helper.make_node("Constant", [], [name], value=tensor(name + "_v", np.asarray(arr)))


def _same_for(proto, out, batches, shape=(3, 8, 8)):
    for n in batches:
        x = np.random.default_rng(n).standard_normal((n, *shape)).astype(np.float32)
        for a, b in zip(run_ort(proto, {"x": x}), run_ort(out, {"x": x})):
            np.testing.assert_array_equal(a, b)


def _ops(proto):
    return [n.op_type for n in proto.graph.node]


def test_flatten_by_known_size_folds_its_scaffolding(tmp_path):
    # Shape(x) -> Gather(1) -> Mul(64) feeding Concat([N], [192]) -> Reshape (the case)
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             _const("i0", np.array([0])), _const("i1", np.array(1)),
             _const("k64", np.array(64)),
             helper.make_node("Gather", ["s", "i0"], ["n"]),
             helper.make_node("Gather", ["s", "i1"], ["c"]),
             helper.make_node("Mul", ["c", "k64"], ["c64"]),
             _const("ax", np.array([0])),
             helper.make_node("Unsqueeze", ["c64", "ax"], ["c64u"]),
             helper.make_node("Concat", ["n", "c64u"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    proto = make_model(nodes, [X], [vinfo("y", shape=["N", 192])])
    folded, _report, out = fold_proto(proto, tmp_path)
    assert _ops(folded) == ["Reshape"]
    target = {t.name: onnx.numpy_helper.to_array(t) for t in folded.graph.initializer}
    assert [v.tolist() for v in target.values()] == [[0, 192]]
    assert folded.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"
    _same_for(proto, out, [1, 3])


def test_view_batch_minus_one(tmp_path):
    # torch's x.view(x.size(0), -1)
    nodes = [helper.make_node("Shape", ["x"], ["s"]), _const("i0", np.array(0)),
             helper.make_node("Gather", ["s", "i0"], ["n"]), _const("ax", np.array([0])),
             helper.make_node("Unsqueeze", ["n", "ax"], ["nu"]), _const("m1", np.array([-1])),
             helper.make_node("Concat", ["nu", "m1"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    proto = make_model(nodes, [X], [vinfo("y", shape=["N", 192])])
    folded, _, out = fold_proto(proto, tmp_path)
    assert _ops(folded) == ["Reshape"]
    _same_for(proto, out, [1, 2, 5])


def test_interpolate_to_another_tensors_static_size(tmp_path):
    # interpolate(x, size=a.shape[-2:]) with a: [N, 3, 16, 16]
    a = vinfo("a", shape=["N", 3, 16, 16])
    nodes = [helper.make_node("Shape", ["a"], ["sa"]),
             _const("st", np.array([-2])), _const("en", np.array([2**62])),
             helper.make_node("Slice", ["sa", "st", "en"], ["hw"]),
             helper.make_node("Shape", ["x"], ["sx"]),
             _const("z", np.array([0])), _const("two", np.array([2])),
             helper.make_node("Slice", ["sx", "z", "two"], ["nc"]),
             helper.make_node("Concat", ["nc", "hw"], ["sizes"], axis=0),
             helper.make_node("Resize", ["x", "", "", "sizes"], ["r"], mode="nearest"),
             helper.make_node("Add", ["r", "a"], ["y"])]
    proto = make_model(nodes, [X, a], [vinfo("y", shape=["N", 3, 16, 16])], opset=18)
    folded, _, out = fold_proto(proto, tmp_path)
    # Shape(a)[-2:] is [16, 16] for every N: it folds; Shape(x)[0:2] is [N, 3]: it stays
    assert _ops(folded).count("Shape") == 1 and _ops(folded).count("Slice") == 1
    for n in (1, 3):
        feeds = {"x": np.ones((n, 3, 8, 8), np.float32),
                 "a": np.ones((n, 3, 16, 16), np.float32)}
        for p, q in zip(run_ort(proto, feeds), run_ort(out, feeds)):
            np.testing.assert_array_equal(p, q)


def test_equal_dims_compare_equal(tmp_path):
    # Equal(Shape(x)[0], Shape(x)[0]) is true for every N; Sub of them is 0
    nodes = [helper.make_node("Shape", ["x"], ["s"]), _const("i0", np.array(0)),
             helper.make_node("Gather", ["s", "i0"], ["n"]),
             helper.make_node("Identity", ["n"], ["n2"]),
             helper.make_node("Sub", ["n", "n2"], ["zero"]),
             helper.make_node("Equal", ["n", "n2"], ["same"]),
             helper.make_node("Cast", ["same"], ["same_i"], to=TensorProto.INT64),
             helper.make_node("Add", ["zero", "same_i"], ["y"])]
    proto = make_model(nodes, [X], [vinfo("y", TensorProto.INT64, [])])
    folded, _, out = fold_proto(proto, tmp_path)
    assert "Shape" not in _ops(folded)
    _same_for(proto, out, [1, 4])


@pytest.mark.parametrize("dims", [("N", "M"), ("N", 4)])
def test_dynamic_dims_are_copied_by_position(tmp_path, dims):
    x = vinfo("x", shape=[dims[0], dims[1], 6])
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             _const("z", np.array([0])), _const("two", np.array([2])),
             helper.make_node("Slice", ["s", "z", "two"], ["nm"]), _const("six", np.array([6])),
             helper.make_node("Concat", ["nm", "six"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    proto = make_model(nodes, [x], [vinfo("y", shape=[dims[0], dims[1], 6])])
    folded, _report, out = fold_proto(proto, tmp_path)
    assert _ops(folded) == ["Reshape"]  # target [0, 0, 6] or [0, 4, 6]
    m = 4 if dims[1] == 4 else 2
    for n in (1, 3):
        feed = {"x": np.arange(n * m * 6, dtype=np.float32).reshape(n, m, 6)}
        np.testing.assert_array_equal(run_ort(proto, feed)[0], run_ort(out, feed)[0])


def _flatten_model():
    nodes = [helper.make_node("Shape", ["x"], ["s"]), _const("i0", np.array(0)),
             helper.make_node("Gather", ["s", "i0"], ["n"]), _const("ax", np.array([0])),
             helper.make_node("Unsqueeze", ["n", "ax"], ["nu"]), _const("m1", np.array([-1])),
             helper.make_node("Concat", ["nu", "m1"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["r"]),
             helper.make_node("Shape", ["r"], ["sr"]),
             helper.make_node("Cast", ["sr"], ["y"], to=TensorProto.FLOAT)]
    return make_model(nodes, [X], [vinfo("y", shape=[2])])


@pytest.mark.parametrize("spec", ["x:2,3,8,8", "N=2", "x:2,?,?,?"])
def test_input_shape_fixes_dims_and_everything_folds(tmp_path, spec):
    from onnxfold.pipeline.options import FoldOptions

    proto = _flatten_model()
    folded, _, out = fold_proto(proto, tmp_path, FoldOptions(strict=True, input_shapes=(spec,)))
    assert _ops(folded) == []  # the output is the constant [2, 192]
    dims = folded.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims] == [2, 3, 8, 8]
    x = np.ones((2, 3, 8, 8), np.float32)
    np.testing.assert_array_equal(run_ort(proto, {"x": x})[0], run_ort(out, {"x": x})[0])


@pytest.mark.parametrize("spec,message", [("y:1,2", "no such input"), ("x:1,2", "4"),
                                          ("M=3", "no input has a dim"), ("x", "expected")])
def test_bad_input_shapes_are_one_line(tmp_path, save, spec, message):
    import onnxfold
    from onnxfold.errors import InputError
    from onnxfold.pipeline.options import FoldOptions

    with pytest.raises(InputError, match=message):
        onnxfold.optimize(save(_flatten_model()), FoldOptions(input_shapes=(spec,)))


def test_no_shape_folding_leaves_dynamic_scaffolding(tmp_path):
    from onnxfold.pipeline.options import FoldOptions

    folded, _, _ = fold_proto(_flatten_model(), tmp_path,
                              FoldOptions(strict=True, shape_folding=False))
    assert "Concat" in _ops(folded)


def test_explain_and_inspect_name_the_blocking_dim(tmp_path, save):
    import onnxfold
    from onnxfold.app.inspection import inspect_model
    from onnxfold.pipeline.options import FoldOptions

    path = save(_flatten_model())
    info = inspect_model(path)
    assert info["dynamic_shape_nodes"] and all(
        "`N` of input x" in item["blocked_by"] for item in info["dynamic_shape_nodes"])
    report = onnxfold.optimize(path, FoldOptions(disabled_rules={"reshape_known_target"})).report
    assert "blocked by `N` of input x" in report.explain()
    assert report.explain() != "every constant-foldable node was folded"
    fixed = onnxfold.optimize(path, FoldOptions(input_shapes=("N=2",))).report
    assert fixed.explain() == "every constant-foldable node was folded"


def test_a_reshape_to_its_own_shape_goes(tmp_path):
    # the dynamo exporter's Reshape(input_ids, Concat(Reshape(batch, [1]), Reshape(seq, [1])))
    ids = vinfo("ids", TensorProto.INT64, ["batch", "seq"])
    nodes = [helper.make_node("Shape", ["ids"], ["s"]),
             _const("i0", np.array(0)), _const("i1", np.array(1)), _const("one", np.array([1])),
             helper.make_node("Gather", ["s", "i0"], ["b"]),
             helper.make_node("Gather", ["s", "i1"], ["q"]),
             helper.make_node("Reshape", ["b", "one"], ["b1"]),
             helper.make_node("Reshape", ["q", "one"], ["q1"]),
             helper.make_node("Concat", ["b1", "q1"], ["target"], axis=0),
             helper.make_node("Reshape", ["ids", "target"], ["r"]),
             helper.make_node("Neg", ["r"], ["y"])]
    proto = make_model(nodes, [ids], [vinfo("y", TensorProto.INT64, ["batch", "seq"])])
    folded, _, out = fold_proto(proto, tmp_path)
    assert _ops(folded) == ["Neg"]
    for shape in ((1, 5), (3, 2)):
        x = np.arange(np.prod(shape), dtype=np.int64).reshape(shape)
        np.testing.assert_array_equal(run_ort(proto, {"ids": x})[0], run_ort(out, {"ids": x})[0])


def test_reshape_known_target_minus_one_fails_on_empty_batch(tmp_path):
    # Reshape(x[N,K,4], [N, K*4]) -> Reshape(x, [0, -1]); onnxruntime refuses -1 when N == 0
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "z", "o"], ["n"]),
             helper.make_node("Slice", ["s", "o", "t"], ["k"]),
             helper.make_node("Mul", ["k", "four"], ["k4"]),
             helper.make_node("Concat", ["n", "k4"], ["tgt"], axis=0),
             helper.make_node("Reshape", ["x", "tgt"], ["y"])]
    model = make_model(nodes, [vinfo("x", shape=["N", "K", 4])], [vinfo("y", shape=[None, None])],
                       [tensor("z", np.array([0])), tensor("o", np.array([1])),
                        tensor("t", np.array([2])), tensor("four", np.array([4]))])
    folded, _, _ = fold_proto(model, tmp_path)
    for shape in [(2, 3, 4), (2, 0, 4), (0, 3, 4)]:
        assert_same_bits(model, folded, {"x": np.ones(shape, np.float32)})


def test_same_dim_param_on_two_inputs_is_not_the_same_size(tmp_path):
    # onnxruntime does not check that inputs sharing a dim_param agree: Shape(x) - Shape(w)
    # must not become 0
    nodes = [helper.make_node("Shape", ["x"], ["sx"]), helper.make_node("Shape", ["w"], ["sw"]),
             helper.make_node("Sub", ["sx", "sw"], ["d"]),
             helper.make_node("Add", ["d", "q"], ["y"])]
    model = make_model(nodes, [vinfo("x", shape=["N"]), vinfo("w", shape=["N"]),
                               vinfo("q", TensorProto.INT64, [1])],
                       [vinfo("y", TensorProto.INT64, [1])])
    folded, _, _ = fold_proto(model, tmp_path)
    # [6]; Shape(x) - Shape(w) folded to 0 would give [5]
    assert_same_bits(model, folded, {"x": np.ones(3, np.float32), "w": np.ones(2, np.float32),
                                     "q": np.array([5])})


def test_reshape_copy_of_another_inputs_dim_with_the_same_name(tmp_path):
    # Reshape(x[N,6], Concat(Shape(w[N]), [-1])) -> Reshape(x, [0, -1]): wrong when w's N != x's
    nodes = [helper.make_node("Shape", ["w"], ["sw"]),
             helper.make_node("Concat", ["sw", "m1"], ["tgt"], axis=0),
             helper.make_node("Reshape", ["x", "tgt"], ["y"])]
    model = make_model(nodes, [vinfo("x", shape=["N", 6]), vinfo("w", shape=["N"])],
                       [vinfo("y", shape=[None, None])], [tensor("m1", np.array([-1]))])
    folded, _, _ = fold_proto(model, tmp_path)
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    # wrong if the target copied x's N: the output is (3, 4), not (2, 6)
    assert_same_bits(model, folded, {"x": x, "w": np.ones(3, np.float32)})


def test_a_dim_inference_makes_static_joins_a_declared_dynamic_shape(tmp_path):
    # TorchScript declares a router's TopK outputs [unk__59, unk__60]; inference finds
    # [N, 2]. The 2 alone makes Shape(indices)[-1:] a constant, so the Reshape's target is
    # [-1, 2, 1] (a whole static shape was needed before: the chain stayed)
    nodes = [helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=-1),
             helper.make_node("Shape", ["i"], ["s"]),
             helper.make_node("Slice", ["s", "m1", "big"], ["last"]),
             helper.make_node("Concat", ["m1", "last", "one"], ["tgt"], axis=0),
             helper.make_node("Reshape", ["v", "tgt"], ["y"])]
    proto = make_model(
        nodes, [vinfo("x", shape=["N", 4])], [vinfo("y", shape=[None, None, None])],
        [tensor("k", np.array([2])), tensor("m1", np.array([-1])),
         tensor("big", np.array([2**63 - 1])), tensor("one", np.array([1]))])
    proto.graph.value_info.extend([vinfo("v", shape=["unk__59", "unk__60"]),
                                   vinfo("i", TensorProto.INT64, ["unk__61", "unk__62"])])
    folded, _, out = fold_proto(proto, tmp_path)
    assert _ops(folded) == ["TopK", "Reshape"]
    assert [d.dim_param or d.dim_value for d in
            next(v for v in folded.graph.value_info if v.name == "i").type.tensor_type.shape.dim
            ] == ["unk__61", 2]  # the dynamic dim keeps its declared name
    for n in (1, 3):
        x = np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
        assert_same_bits(proto, out, {"x": x})
