"""The ``ort`` backend: the fold model in an onnxruntime session (each run stopped by a signal
or the inference time limit: ``onnxfold.host.interruptible``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from onnxfold.host import interruptible
from onnxfold.host.ort_sessions import CPU, open_session, session_options


class Backend:
    name = "ort"

    def __init__(self, providers: list[str] | None = None) -> None:
        self.providers = providers or list(CPU)
        self.session: Any = None  # an onnxruntime.InferenceSession (untyped) once prepared

    def prepare(self, model: ir.Model) -> None:
        # the fold's buffers go back to the system: no arena
        options = session_options(log_level=3, arena=False)
        self.session = open_session(ir.to_proto(model).SerializeToString(), options,
                                    self.providers)
        self.outputs = [o.name for o in self.session.get_outputs()]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        results = interruptible.run(lambda options: self.session.run(self.outputs, feeds, options),
                                    what="the runtime fold")
        return dict(zip(self.outputs, results))
