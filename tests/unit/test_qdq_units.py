"""No rewrite breaks a QDQ node unit (``onnxfold/ir/qdq_units.py``, issue 35): in a statically
quantized model every MatMul, Conv and their neighbours sit between ``DequantizeLinear`` and
``QuantizeLinear`` nodes that onnxruntime turns into integer kernels. The Q, K and V
projections of such a layer stay three MatMuls (merged, their weight was a ``Concat`` of
dequantized weights run in float on every call: 2.3x slower), and the fusions leave a
dequantized weight alone; the same graphs with float weights and no Q/DQ are still rewritten.
Checked in onnxruntime: the folded model gives the original's outputs bit for bit and runs as
many integer kernels (counted in the graph onnxruntime writes after its own optimizations)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxfold import FoldOptions, optimize
from tests.support.models import make_model, tensor, vinfo
from tests.support.qdq import (
    activation_quantizations,
    concatenated_dequantizations,
    matmul_units,
    ort_kernels,
)

MERGE = "merge_shared_input_matmuls"
K, N, ROWS = 48, 32, 7


class _Graph:
    """Nodes and initializers of a QDQ graph under construction, with onnxruntime's
    quantizer's naming of the quantization parameters."""

    def __init__(self) -> None:
        self.nodes: list = []
        self.inits: list = []
        self.rng = np.random.default_rng(0)

    def params(self, name: str, scale: float, zero_point: np.ndarray) -> list[str]:
        self.inits += [tensor(f"{name}_scale", np.array(scale, np.float32)),
                       numpy_helper.from_array(zero_point, f"{name}_zero_point")]
        return [f"{name}_scale", f"{name}_zero_point"]

    def qdq(self, value: str, scale: float = 0.05) -> str:
        """``value`` quantized to uint8 and dequantized (an activation, as quantize_static
        writes it)."""
        params = self.params(value, scale, np.array(128, np.uint8))
        self.nodes += [helper.make_node("QuantizeLinear", [value, *params], [f"{value}_q"]),
                       helper.make_node("DequantizeLinear", [f"{value}_q", *params],
                                        [f"{value}_dq"])]
        return f"{value}_dq"

    def weight(self, name: str, shape: tuple[int, ...], quantized: bool) -> str:
        """A weight: int8 with a per-tensor scale and its DequantizeLinear, or float."""
        if not quantized:
            self.inits.append(tensor(name, self.rng.standard_normal(shape).astype(np.float32)))
            return name
        self.inits.append(numpy_helper.from_array(
            self.rng.integers(-127, 128, shape).astype(np.int8), f"{name}_quantized"))
        params = self.params(name, 0.01, np.array(0, np.int8))
        self.nodes.append(helper.make_node("DequantizeLinear", [f"{name}_quantized", *params],
                                           [f"{name}_dq"]))
        return f"{name}_dq"

    def node(self, op: str, inputs: list[str], output: str, **attrs: object) -> str:
        self.nodes.append(helper.make_node(op, inputs, [output], **attrs))
        return output


def _projections(*, quantize_input=True, quantize_weights=True, quantize_outputs=True,
                 transposed=False, reshaped=False, biased=False):
    """An attention's Q, K and V projections of one input ``x`` [batch, 7, K], each a graph
    output ``y<i>``, in quantize_static's QDQ form by default: x quantized and dequantized,
    each weight an int8 initializer's DequantizeLinear (``transposed``: of a [N, K] weight,
    then a Transpose, as for a torch Linear), each product quantized and dequantized
    (``reshaped``: after a Reshape to rows, as onnxruntime's QDQ propagation allows;
    ``biased``: then added to its bias, dequantized from int32, and quantized again)."""
    g = _Graph()
    x = g.qdq("x") if quantize_input else "x"
    outputs = []
    for i in range(3):
        if transposed:
            w = g.node("Transpose", [g.weight(f"w{i}", (N, K), quantize_weights)], f"wt{i}",
                       perm=[1, 0])
        else:
            w = g.weight(f"w{i}", (K, N), quantize_weights)
        y = g.node("MatMul", [x, w], f"p{i}", name=f"mm{i}")
        if reshaped:
            g.inits.append(tensor(f"rows{i}", np.array([-1, N], np.int64)))
            y = g.node("Reshape", [y, f"rows{i}"], f"r{i}")
        if quantize_outputs:
            y = g.qdq(y)
        if biased:
            g.inits.append(numpy_helper.from_array(
                g.rng.integers(-500, 500, N).astype(np.int32), f"b{i}_quantized"))
            g.inits.append(tensor(f"b{i}_scale", np.array(0.05 * 0.01, np.float32)))
            bias = g.node("DequantizeLinear", [f"b{i}_quantized", f"b{i}_scale"], f"b{i}_dq")
            y = g.qdq(g.node("Add", [y, bias], f"a{i}"))
        outputs.append(g.node("Identity", [y], f"y{i}"))
    dims = [None, N] if reshaped else [None, ROWS, N]
    return make_model(g.nodes, [vinfo("x", TensorProto.FLOAT, ["batch", ROWS, K])],
                      [vinfo(o, TensorProto.FLOAT, dims) for o in outputs], g.inits, opset=17)


def _run(model, feeds, level):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = level
    sess = ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _ops(model) -> Counter:
    return Counter(n.op_type for n in model.graph.node)


def _assert_units_kept(original, folded, tmp_path, shape):
    """The folded model has the original's Q/DQ nodes, its QDQ MatMul units, no Concat of
    dequantized weights, the same integer kernels in onnxruntime, and the same outputs."""
    before, after = _ops(original), _ops(folded)
    for op in ("MatMul", "DequantizeLinear", "QuantizeLinear"):
        assert after[op] == before[op], op
    # more, not fewer: a weight's Transpose folds into its quantized initializer
    assert matmul_units(folded) >= matmul_units(original)
    assert activation_quantizations(folded) == activation_quantizations(original)
    assert concatenated_dequantizations(folded) == 0 and after["Split"] == 0
    assert ort_kernels(folded, tmp_path / "f.onnx") == ort_kernels(original, tmp_path / "o.onnx")
    feeds = {"x": np.random.default_rng(1).standard_normal(shape).astype(np.float32)}
    for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                  ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        for want, got in zip(_run(original, feeds, level), _run(folded, feeds, level),
                             strict=True):
            np.testing.assert_array_equal(got, want)


STATIC = {"quantize_static": {}, "transposed_weights": {"transposed": True},
          "quantized_after_reshape": {"reshaped": True}, "biased": {"biased": True}}


@pytest.mark.parametrize("case", STATIC)
def test_static_qdq_projections_stay_three_integer_matmuls(case, tmp_path):
    original = _projections(**STATIC[case])
    result = optimize(original, FoldOptions(strict=True))
    folded = result.to_proto()
    assert MERGE not in result.report.pattern_hits
    assert any(MERGE in why and "QDQ node unit" in why
               for why in result.report.patterns_rejected), result.report.patterns_rejected
    _assert_units_kept(original, folded, tmp_path, (2, ROWS, K))
    # onnxruntime moves the Q/DQ across the Transpose and the Reshape: three units each time
    assert ort_kernels(folded, tmp_path / "k.onnx")["QLinearMatMul"] == 3


PARTLY = {  # each alone makes a QDQ unit onnxruntime or an NPU provider takes
    "weights_only": {"quantize_input": False, "quantize_outputs": False},  # MatMulNBits-like
    "input_only": {"quantize_weights": False, "quantize_outputs": False},
    "outputs_only": {"quantize_input": False, "quantize_weights": False},
}


@pytest.mark.parametrize("case", PARTLY)
def test_products_reading_or_feeding_quantization_are_not_merged(case, tmp_path):
    original = _projections(**PARTLY[case])
    result = optimize(original, FoldOptions(strict=True))
    assert MERGE not in result.report.pattern_hits
    _assert_units_kept(original, result.to_proto(), tmp_path, (3, ROWS, K))


def test_float_projections_still_merge():
    """The guard is about quantization only: the same layer in float merges."""
    original = _projections(quantize_input=False, quantize_weights=False,
                            quantize_outputs=False)
    result = optimize(original, FoldOptions(strict=True))
    assert result.report.pattern_hits.get(MERGE) == 1
    assert _ops(result.to_proto())["MatMul"] == 1


def _fusion_case(name: str, quantized: bool):
    """A graph one fusion of ``rules/fusions.py`` rewrites when it is float; ``quantized``:
    its layer reads a dequantized input (and weight), as in a QDQ model. Returns the model,
    the rule and the input's shape."""
    g = _Graph()
    if name == "fuse_matmul_add_into_gemm":  # else a MatMulIntegerToFloat in onnxruntime
        shape: tuple[int, ...] = (5, K)
        x = g.qdq("x") if quantized else "x"
        product = g.node("MatMul", [x, g.weight("w", (K, N), quantized)], "p")
        g.inits.append(tensor("c", g.rng.standard_normal(N).astype(np.float32)))
        g.node("Add", [product, "c"], "y")
    elif name in ("fuse_mul_into_conv", "fuse_batch_norm_into_conv"):
        shape = (1, 4, 8, 8)
        x = g.qdq("x") if quantized else "x"
        conv = g.node("Conv", [x, g.weight("w", (8, 4, 3, 3), quantized)], "p")
        if name == "fuse_mul_into_conv":
            g.inits.append(tensor("c", g.rng.uniform(0.5, 2, (1, 8, 1, 1)).astype(np.float32)))
            g.node("Mul", [conv, "c"], "y")
        else:
            for part, low in (("scale", 0.5), ("bias", -1), ("mean", -1), ("var", 0.5)):
                g.inits.append(tensor(part, g.rng.uniform(low, 2, 8).astype(np.float32)))
            g.node("BatchNormalization", [conv, "scale", "bias", "mean", "var"], "y")
    else:  # (x * k) * c
        shape = (2, K)
        x = g.qdq("x") if quantized else "x"
        g.inits += [tensor("k", np.array([1.5], np.float32)),
                    tensor("c", np.array([0.25], np.float32))]
        g.node("Mul", [g.node("Mul", [x, "k"], "xk"), "c"], "y")
    model = make_model(g.nodes, [vinfo("x", TensorProto.FLOAT, list(shape))],
                       [vinfo("y", TensorProto.FLOAT, [None] * len(shape))], g.inits,
                       opset=17)
    return model, shape


FUSIONS = ("fuse_matmul_add_into_gemm", "fuse_mul_into_conv", "fuse_batch_norm_into_conv",
           "merge_constant_factors")


@pytest.mark.parametrize("rule", FUSIONS)
def test_fusions_leave_dequantized_layers_alone(rule, tmp_path):
    """The float graph fuses; with its input and weight dequantized, the layer and its
    weight's DequantizeLinear stay, for that reason (the Conv fusions also found no weight
    data at hand), and onnxruntime runs the same kernels."""
    floats, _ = _fusion_case(rule, quantized=False)
    assert optimize(floats, FoldOptions(strict=True)).report.pattern_hits.get(rule) == 1
    original, shape = _fusion_case(rule, quantized=True)
    result = optimize(original, FoldOptions(strict=True))
    assert rule not in result.report.pattern_hits
    assert any(why.startswith(rule) and "QDQ node unit" in why
               for why in result.report.patterns_rejected), result.report.patterns_rejected
    folded = result.to_proto()
    assert _ops(folded) == _ops(original)
    assert ort_kernels(folded, tmp_path / "f.onnx") == ort_kernels(original, tmp_path / "o.onnx")
    feeds = {"x": np.random.default_rng(2).standard_normal(shape).astype(np.float32)}
    for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                  ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        np.testing.assert_array_equal(_run(folded, feeds, level)[0],
                                      _run(original, feeds, level)[0])
