"""The ``ort`` backend: the fold model in an onnxruntime session (each run stopped by a signal
or the inference time limit: ``onnxfold.host.interruptible``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from onnxfold.host import interruptible


class Backend:
    name = "ort"

    def __init__(self, providers: list[str] | None = None) -> None:
        self.providers = providers or ["CPUExecutionProvider"]
        self.session: Any = None  # an onnxruntime.InferenceSession (untyped) once prepared

    def prepare(self, model: ir.Model) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.enable_cpu_mem_arena = False  # the fold's buffers go back to the system
        self.session = ort.InferenceSession(ir.to_proto(model).SerializeToString(), options,
                                            providers=self.providers)
        self.outputs = [o.name for o in self.session.get_outputs()]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        results = interruptible.run(lambda options: self.session.run(self.outputs, feeds, options),
                                    what="the runtime fold")
        return dict(zip(self.outputs, results))
