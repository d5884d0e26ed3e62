"""The original model as a check runs it beside the fold: its inputs fixed as ``--input-shape``
fixed the fold's, so that both take the same inputs (no computation changes). The load check
(``app/verify.py``) and ``simplify``'s check read it, from the same parsed shapes
(``analysis.input_shapes.InputShapes``)."""

from __future__ import annotations

import onnx

from onnxfold.analysis.input_shapes import InputShapes, apply
from onnxfold.io.writer import model_proto
from onnxfold.pipeline.optimizer import ModelInput, as_ir_model


def with_input_shapes(model: ModelInput, shapes: InputShapes) -> onnx.ModelProto:
    """``model`` as a proto whose inputs ``shapes`` fix, its weights held in the proto (read
    from the model's files)."""
    reference, _, _ = as_ir_model(model, check=False)
    apply(reference, shapes)
    return model_proto(reference)
