"""onnxruntime's own ops are known ops: the default-domain ones onnx has no schema of
(SimplifiedLayerNormalization, which genai's builder emits) are not warned about as plugins,
the output's onnxruntime ops are listed on one line and in the JSON report, and their compute
is counted (contractions, normalizations, GroupQueryAttention)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

import onnxfold
from onnxfold.declare.catalogue import load_catalogue
from onnxfold.pipeline.report import runtime_ops_line
from onnxfold.signature.compute import formula
from tests.support.models import make_model, tensor, vinfo


def test_the_default_domain_list_is_onnxruntimes():
    """rules/contrib.py's list is onnxruntime's own default-domain ops with a kernel: those
    whose schema onnxruntime defines (its contrib_ops sources, not onnx's) and that onnx has
    no schema of, at any installed onnx (a newer onnx's CumProd is onnx's); a new release's
    addition fails here, not in a user's run."""
    from onnxruntime.capi import onnxruntime_pybind11_state as capi

    own = {s.name for s in capi.get_all_operator_schema()
           if s.domain in ("", "ai.onnx") and "contrib_ops" in s.file}
    kernels = {k.op_name for k in capi.get_all_opkernel_def() if k.domain in ("", "ai.onnx")}
    registered = {op for op in own & kernels if not onnx.defs.has(op, "")}
    assert load_catalogue().runtime_ops == registered


def _simplified_norm_model():
    nodes = [helper.make_node("SimplifiedLayerNormalization", ["x", "g"], ["n"], axis=-1,
                              epsilon=1e-5),
             helper.make_node("Transpose", ["W"], ["wt"]),
             helper.make_node("MatMul", ["n", "wt"], ["h"]),
             helper.make_node("SkipSimplifiedLayerNormalization", ["h", "x", "g"], ["y"],
                              domain="com.microsoft", epsilon=1e-5)]
    model = make_model(nodes, [vinfo("x", shape=["batch", "seq", 8])],
                       [vinfo("y", shape=["batch", "seq", 8])],
                       [tensor("g", np.ones(8, np.float32)),
                        tensor("W", np.arange(64, dtype=np.float32).reshape(8, 8) / 64)])
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


def test_onnxruntimes_ops_are_listed_not_warned_about():
    model = _simplified_norm_model()
    result = onnxfold.optimize(model)
    report = result.report
    assert not report.warnings, report.warnings
    assert report.runtime_ops == {"SimplifiedLayerNormalization": 1,
                                  "com.microsoft.SkipSimplifiedLayerNormalization": 1}
    assert "runtime ops  2 nodes of onnxruntime's own ops, kept: " \
        "SimplifiedLayerNormalization x1, SkipSimplifiedLayerNormalization x1" in report.summary()
    assert report.to_dict()["runtime_ops"] == report.runtime_ops
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3, 8)).astype(np.float32)}
    run = [ort.InferenceSession(m.SerializeToString()).run(None, feeds)[0]
           for m in (model, result.to_proto())]
    np.testing.assert_allclose(run[0], run[1], rtol=1e-5, atol=1e-6)


def test_an_unknown_default_domain_op_is_still_a_plugin():
    model = make_model([helper.make_node("MyOp", ["x"], ["y"])],
                       [vinfo("x", shape=[2])], [vinfo("y", shape=[2])])
    report = onnxfold.optimize(model).report
    assert report.warnings == ["MyOp is not an ONNX op of the default domain (a plugin?): kept "
                               "as it is, never folded"]
    assert report.runtime_ops == {}


def test_the_line_names_the_most_frequent_and_counts_the_rest():
    counts = {f"com.microsoft.Op{k}": 10 - k for k in range(8)}
    line = runtime_ops_line(counts)
    assert line.startswith("runtime ops  52 nodes of onnxruntime's own ops, kept: Op0 x10, ")
    assert line.endswith("Op5 x5 and 2 more")


def test_group_query_attention_is_counted_over_its_present_keys():
    """Output [B, S, N*H] = [1, 16, 64], present keys [B, KV, T, H] = [1, 2, 32, 16]: the
    scores and the weighted sum are 2 * 1*16*64 * 32 MACs, the softmax 5 FLOPs per score
    (1*16*4 heads * 32)."""
    cost = next(c for c in load_catalogue().costs.values() if c.op_type == "GroupQueryAttention")
    flops, macs = formula(cost, [1, 16, 64], [1, 2, 32, 16])
    assert macs == 2 * 16 * 64 * 32
    assert flops == 2 * macs + 5 * 16 * 4 * 32
    assert formula(cost, [1, 16, 64], None) is None


def test_a_4_bit_matmul_is_a_contraction_over_its_input():
    cost = load_catalogue().costs[("com.microsoft", "MatMulNBits")]
    assert formula(cost, [1, 16, 128], [1, 16, 64]) == (2 * 16 * 128 * 64, 16 * 128 * 64)

