"""The normalizations onnxruntime fuses in a model: its own optimized graph at the extended
level (``ORT_ENABLE_EXTENDED``, written with ``optimized_model_filepath``), counted by kind.

onnxruntime names one kind two ways (ONNX's ``RMSNormalization`` and its own
``SimplifiedLayerNormalization``), and fuses a residual Add into either (``Skip...``): each is
counted as its kind."""

from __future__ import annotations

import collections
import os
import tempfile

import onnx
import onnxruntime as ort

KINDS = {"LayerNormalization": "LayerNorm", "SkipLayerNormalization": "LayerNorm",
         "SimplifiedLayerNormalization": "RMSNorm", "RMSNormalization": "RMSNorm",
         "SkipSimplifiedLayerNormalization": "RMSNorm", "InstanceNormalization": "InstanceNorm",
         "GroupNormalization": "GroupNorm"}


def fused_normalizations(model: onnx.ModelProto | str) -> collections.Counter:
    """The normalization kernels of onnxruntime's extended-level graph of ``model`` (a proto
    or a path), by kind."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.log_severity_level = 3
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    with tempfile.TemporaryDirectory() as directory:
        options.optimized_model_filepath = os.path.join(directory, "ort.onnx")
        ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        nodes = onnx.load(options.optimized_model_filepath, load_external_data=False).graph.node
    return collections.Counter(KINDS[n.op_type] for n in nodes if n.op_type in KINDS)
