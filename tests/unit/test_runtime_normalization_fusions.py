"""A LayerNorm or RMSNorm an exporter wrote op by op stays one onnxruntime fuses
(``rules/normalizations.py``): its neutral affine tail (a fresh layer's scale of ones, bias of
zeros) is never dropped, and where the opset has the op (LayerNormalization from 17,
RMSNormalization from 23) the decomposition becomes that op. Each case counts the fused
normalizations in onnxruntime's own optimized graph (``ORT_ENABLE_EXTENDED``,
``optimized_model_filepath``) of the original and the folded model, and compares their outputs
at onnxruntime's default level, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests.support.models import make_model, tensor, vinfo
from tests.support.running import assert_same_bits, fold_proto, run_ort
from tests.support.runtime_fusions import fused_normalizations

C = 8


def _layer_norm(scale=1.0, bias=0.0, axes=(-1,), tail=True, dtype=np.float32, opset=13):
    """x [N, 4, C] -> ReduceMean, Sub, Pow, ReduceMean, Add(eps), Sqrt, Div (-> * scale +
    bias) -> Relu -> y."""
    reduce = (lambda i, o: helper.make_node("ReduceMean", [i, "axes"], [o])) if opset >= 18 \
        else (lambda i, o: helper.make_node("ReduceMean", [i], [o], axes=list(axes)))
    nodes = [reduce("x", "m"), helper.make_node("Sub", ["x", "m"], ["d"]),
             helper.make_node("Pow", ["d", "two"], ["sq"]), reduce("sq", "v"),
             helper.make_node("Add", ["v", "eps"], ["ve"]),
             helper.make_node("Sqrt", ["ve"], ["s"]), helper.make_node("Div", ["d", "s"], ["n"])]
    inits = [tensor("two", np.asarray(2, dtype)), tensor("eps", np.asarray(1e-5, dtype))]
    if opset >= 18:
        inits.append(tensor("axes", np.asarray(axes, np.int64)))
    last = "n"
    if tail:
        nodes += [helper.make_node("Mul", ["n", "w"], ["a"]),
                  helper.make_node("Add", ["a", "b"], ["t"])]
        inits += [tensor("w", np.full(C, scale, dtype)), tensor("b", np.full(C, bias, dtype))]
        last = "t"
    nodes.append(helper.make_node("Relu", [last], ["y"]))
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return make_model(nodes, [vinfo("x", elem, ["N", 4, C])], [vinfo("y", elem, ["N", 4, C])],
                      inits, opset=opset)


def _rms_norm(opset=17, scale=1.0, inverse="Div"):
    """T5's RMSNorm: x * (1 / sqrt(mean(x^2) + eps)) * w -> Relu -> y (dynamo's: ``inverse``
    Reciprocal)."""
    nodes = [helper.make_node("Pow", ["x", "two"], ["sq"]),
             helper.make_node("ReduceMean", ["sq", "axes"] if opset >= 18 else ["sq"], ["v"],
                              **({} if opset >= 18 else {"axes": [-1]})),
             helper.make_node("Add", ["v", "eps"], ["ve"]),
             helper.make_node("Sqrt", ["ve"], ["s"]),
             helper.make_node("Div", ["one", "s"], ["r"]) if inverse == "Div" else
             helper.make_node("Reciprocal", ["s"], ["r"]),
             helper.make_node("Mul", ["x", "r"], ["n"]), helper.make_node("Mul", ["w", "n"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    inits = [tensor("two", np.float32(2)), tensor("eps", np.float32(1e-6)),
             tensor("one", np.float32(1)), tensor("w", np.full(C, scale, np.float32))]
    if opset >= 18:
        inits.append(tensor("axes", np.asarray([-1], np.int64)))
    return make_model(nodes, [vinfo("x", shape=["N", 4, C])], [vinfo("y", shape=["N", 4, C])],
                      inits, opset=opset, ir_version=10)


def _feeds(dtype=np.float32):
    x = np.random.default_rng(0).standard_normal((3, 4, C)).astype(dtype) * 3 + 1
    x[0, 0, :] = 0.0  # a row of zeros: the variance is eps alone
    return {"x": x}


CASES = [  # (model, ops of the folded graph that must be there, ops that must not)
    (_layer_norm(opset=13), {"Mul", "Add", "Div"}, {"LayerNormalization"}),
    (_layer_norm(opset=17), {"LayerNormalization"}, {"Div", "Mul", "Sqrt"}),
    (_layer_norm(opset=18), {"LayerNormalization"}, {"Div", "Mul", "Sqrt"}),
    (_layer_norm(opset=17, scale=0.5, bias=0.25), {"LayerNormalization"}, {"Mul", "Div"}),
    (_layer_norm(opset=17, tail=False), {"LayerNormalization"}, {"Div"}),
    (_rms_norm(opset=17), {"Mul", "Div"}, {"RMSNormalization"}),
    (_rms_norm(opset=18), {"Mul", "Div"}, {"RMSNormalization"}),
    (_rms_norm(opset=23), {"RMSNormalization"}, {"Div", "Mul", "Sqrt"}),
    (_rms_norm(opset=23, scale=2.0), {"RMSNormalization"}, {"Div", "Mul", "Sqrt"}),
    (_rms_norm(opset=23, inverse="Reciprocal"), {"RMSNormalization"}, {"Reciprocal", "Mul"}),
]


@pytest.mark.parametrize("model, present, absent", CASES)
def test_every_normalization_onnxruntime_fuses_stays_fused(tmp_path, model, present, absent):
    folded, _, _ = fold_proto(model, tmp_path)
    ops = {n.op_type for n in folded.graph.node}
    assert present <= ops and not absent & ops, ops
    before, after = fused_normalizations(model), fused_normalizations(folded)
    assert all(after[op] >= n for op, n in before.items()), (before, after)
    assert sum(after.values()) >= 1
    if before:  # the original runs onnxruntime's fused kernel: so does the folded model
        assert_same_bits(model, folded, _feeds())
    else:  # the op's kernel rounds otherwise than the ops it replaces
        for want, got in zip(run_ort(model, _feeds()), run_ort(folded, _feeds()), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("axes, dtype", [
    ((1,), np.float32),  # over the middle axis only: LayerNormalization cannot
    ((-1,), np.float64),  # the op's epsilon is a float32 attribute
], ids=["middle-axis", "float64"])
def test_a_normalization_the_op_cannot_express_stays_written_out(tmp_path, axes, dtype):
    model = _layer_norm(opset=17, axes=axes, dtype=dtype)
    folded, _, _ = fold_proto(model, tmp_path)
    assert "LayerNormalization" not in {n.op_type for n in folded.graph.node}
    assert_same_bits(model, folded, _feeds(dtype))


def test_a_tail_onnxruntime_would_not_fuse_goes(tmp_path):
    # onnxruntime fuses no RMSNorm that multiplies by the Reciprocal of the deviation
    model = _rms_norm(opset=18, inverse="Reciprocal")
    folded, _, _ = fold_proto(model, tmp_path)
    assert len(folded.graph.node) == len(model.graph.node) - 1  # the Mul by ones
    assert fused_normalizations(model) == fused_normalizations(folded) == {}
    assert_same_bits(model, folded, _feeds())


def test_a_mean_read_outside_the_norm_keeps_the_decomposition(tmp_path):
    model = _layer_norm(opset=17)
    model.graph.output.append(vinfo("m", shape=["N", 4, 1]))
    folded, _, _ = fold_proto(model, tmp_path)
    assert "LayerNormalization" not in {n.op_type for n in folded.graph.node}
    assert_same_bits(model, folded, _feeds())


@pytest.mark.parametrize("opset, present", [(13, "Mul"), (17, "LayerNormalization")])
def test_a_tail_whose_weight_a_kept_identity_shares_stays_fused(tmp_path, opset, present):
    """TorchScript shares equal weights through an Identity (Qwen2's and T5's RMSNorm scales):
    under --keep Identity that value is no constant of the fold, but onnxruntime fuses the
    tail all the same (a merge of issue 58's --keep-honouring constness with issue 56's rule
    dropped 4 of 5 fused RMSNorms of a Qwen2 export, and 11 of 12 of a T5 export)."""
    from onnxfold import FoldOptions

    model = _layer_norm(opset=opset)
    w = next(t for t in model.graph.initializer if t.name == "w")
    w.name = "w_shared"
    model.graph.node.insert(0, helper.make_node("Identity", ["w_shared"], ["w"]))
    folded, _, _ = fold_proto(model, tmp_path, FoldOptions(strict=True, keep=["Identity"]))
    assert present in {n.op_type for n in folded.graph.node}
    assert fused_normalizations(folded) == fused_normalizations(model) == {"LayerNorm": 1}
    assert_same_bits(model, folded, _feeds())


def test_explain_names_the_kept_tail(tmp_path):
    from onnxfold import FoldOptions

    _, report, _ = fold_proto(_layer_norm(opset=13), tmp_path, FoldOptions(strict=True))
    rejected = str(report.patterns_rejected)
    assert "affine tail of a LayerNormalization" in rejected, rejected


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 1, 1, 1), (1, 1, 1, C)],
                         ids=["1x1x1x1", "2x1x1x1", "1x1x1xC"])
@pytest.mark.parametrize("tail_op", ["Mul", "Add"])
def test_a_tail_that_broadcasts_into_a_higher_rank_keeps_it(tmp_path, shape, tail_op):
    """A tail constant of a higher rank than x (``[1, 1, 1, 1]`` after a ``[N, 4, C]``
    LayerNorm) broadcasts the output into its rank: the fused op computes x's rank, so the
    tail must stay (or the rank be kept): the folded model's output has the original's shape
    and values at every onnxruntime level (issue 63 item 5: ``(3, 16)`` for ``(1, 3, 16)``)."""
    import onnxruntime as ort

    model = _layer_norm(opset=17, tail=False)
    relu = model.graph.node[-1]
    model.graph.node.insert(len(model.graph.node) - 1, helper.make_node(
        tail_op, ["n", "k"], ["t"]))
    relu.input[0] = "t"
    model.graph.initializer.append(tensor("k", np.full(shape, 0.5, np.float32)))
    del model.graph.output[0].type.tensor_type.shape.dim[:]
    folded, _, _ = fold_proto(model, tmp_path)
    assert "LayerNormalization" in {n.op_type for n in folded.graph.node}
    for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                  ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                  ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        options = ort.SessionOptions()
        options.graph_optimization_level, options.log_severity_level = level, 3
        want, got = (ort.InferenceSession(m.SerializeToString(), options).run(None, _feeds())[0]
                     for m in (model, folded))
        assert got.shape == want.shape == np.broadcast_shapes((3, 4, C), shape), level
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("build", "slot"), [(lambda: _layer_norm(opset=17), "eps"),
                                              (lambda: _layer_norm(opset=17), "two"),
                                              (lambda: _rms_norm(opset=23), "one")],
                         ids=["layer-norm-epsilon", "layer-norm-exponent", "rms-numerator"])
def test_a_constant_of_the_decomposition_that_raises_the_rank_keeps_it(tmp_path, build, slot):
    """Issue 82 item 4: epsilon, the exponent 2 or an RMSNorm's numerator 1 of shape
    ``[1, 1, 1, 1]`` broadcasts ``[N, 4, C]`` into ``[1, N, 4, C]``; the op would compute x's
    rank: the decomposition is left as it is. (onnxruntime 1.32's own fusions drop that axis
    from ``ORT_ENABLE_BASIC`` on, in the original as in the fold: the same at every level.)"""
    import onnxruntime as ort

    model = build()
    (init,) = [t for t in model.graph.initializer if t.name == slot]
    init.dims[:] = [1, 1, 1, 1]
    del model.graph.output[0].type.tensor_type.shape.dim[:]
    folded, _, _ = fold_proto(model, tmp_path)
    assert not {"LayerNormalization", "RMSNormalization"} & {n.op_type
                                                            for n in folded.graph.node}
    for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                  ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        options = ort.SessionOptions()
        options.graph_optimization_level, options.log_severity_level = level, 3
        want, got = (ort.InferenceSession(m.SerializeToString(), options).run(None, _feeds())[0]
                     for m in (model, folded))
        assert got.shape == want.shape, level
        np.testing.assert_array_equal(got, want)
        if level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL:
            assert got.shape == (1, 3, 4, C)
