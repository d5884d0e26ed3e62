"""What a QDQ model's structure is made of, for tests that a rewrite kept it: onnxruntime's
QDQ node units (``DequantizeLinear -> op -> QuantizeLinear``) counted in the graph, and the
integer kernels onnxruntime makes of them (read from the graph it writes after its own
optimizations, ``SessionOptions.optimized_model_filepath``)."""

from __future__ import annotations

import os
from collections import Counter

import onnx
import onnxruntime as ort

# onnxruntime's integer kernels (what its QDQ transformers turn node units into)
INTEGER_KERNELS = frozenset({
    "QLinearMatMul", "QLinearConv", "QLinearAdd", "QLinearMul", "QLinearSigmoid",
    "QLinearLeakyRelu", "QLinearAveragePool", "QLinearGlobalAveragePool", "QLinearConcat",
    "QLinearSoftmax", "QLinearWhere", "QGemm", "QAttention", "MatMulInteger", "ConvInteger",
    "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "MatMulNBits"})


def _producers(model: onnx.ModelProto) -> dict[str, onnx.NodeProto]:
    return {out: node for node in model.graph.node for out in node.output}


def _readers(model: onnx.ModelProto) -> dict[str, list[onnx.NodeProto]]:
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    return readers


def matmul_units(model: onnx.ModelProto) -> int:
    """MatMuls whose two inputs are ``DequantizeLinear`` outputs and whose product a
    ``QuantizeLinear`` reads: the units onnxruntime runs as ``QLinearMatMul``."""
    producers, readers = _producers(model), _readers(model)
    return sum(
        node.op_type == "MatMul"
        and all(name in producers and producers[name].op_type == "DequantizeLinear"
                for name in node.input)
        and any(r.op_type == "QuantizeLinear" for r in readers.get(node.output[0], []))
        for node in model.graph.node)


def activation_quantizations(model: onnx.ModelProto) -> int:
    """``QuantizeLinear`` nodes of values that depend on a graph input (those of constants
    fold to integer initializers, as docs/policy.md says)."""
    varying = {i.name for i in model.graph.input}
    for node in model.graph.node:  # graph order: producers first
        if any(name in varying for name in node.input):
            varying.update(node.output)
    return sum(n.op_type == "QuantizeLinear" and n.input[0] in varying
               for n in model.graph.node)


def concatenated_dequantizations(model: onnx.ModelProto) -> int:
    """``Concat`` nodes with a ``DequantizeLinear`` output among their inputs."""
    producers = _producers(model)
    return sum(node.op_type == "Concat" and any(
        name in producers and producers[name].op_type == "DequantizeLinear"
        for name in node.input) for node in model.graph.node)


def ort_kernels(model: onnx.ModelProto | str | os.PathLike, into: str | os.PathLike
                ) -> Counter[str]:
    """The integer kernels (by op type) in the graph onnxruntime's CPU provider runs for
    ``model`` with its default session options, written to ``into``."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = 1
    options.optimized_model_filepath = os.fspath(into)
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else os.fspath(model)
    ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    written = onnx.load(os.fspath(into), load_external_data=False)
    return Counter(n.op_type for n in written.graph.node if n.op_type in INTEGER_KERNELS)
