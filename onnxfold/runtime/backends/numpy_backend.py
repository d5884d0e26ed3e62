"""The ``numpy`` backend: onnxfold's own rules, with the fold inputs bound as constants."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxfold.declare.catalogue import Catalogue
from onnxfold.errors import OnnxfoldError
from onnxfold.ir.constants import constant_array
from onnxfold.pipeline.optimizer import optimize
from onnxfold.pipeline.options import FoldOptions


class Backend:
    name = "numpy"

    def __init__(self, catalogue: Catalogue, fallback: bool = True) -> None:
        self.catalogue, self.fallback = catalogue, fallback
        self.model: ir.Model | None = None

    def prepare(self, model: ir.Model) -> None:
        self.model = model

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        assert self.model is not None, "prepare first"
        model = self.model.clone()  # the fold changes it; the tensors are shared, not changed
        graph = model.graph
        for value in list(graph.inputs):
            assert value.name is not None  # graph inputs are named
            value.const_value = ir.Tensor(np.asarray(feeds[value.name]), name=value.name)
            graph.inputs.remove(value)
            graph.register_initializer(value)
        # a runtime fold has no size policy: its results are needed whatever their size
        optimize(model, FoldOptions.everything(fallback=self.fallback),
                 catalogue=self.catalogue)
        out: dict[str, np.ndarray] = {}
        for value in graph.outputs:
            array = constant_array(value)
            if array is None:
                raise OnnxfoldError(f"numpy backend could not fold {value.name}")
            assert value.name is not None  # onnx_ir names every value of a graph
            out[value.name] = array
        return out
