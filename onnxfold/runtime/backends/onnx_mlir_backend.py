"""The ``onnx-mlir`` backend: the fold model compiled to a shared library by onnx-mlir.

It uses an ``onnx-mlir`` binary on PATH (with its ``PyRuntime`` module importable), or a docker
engine with the image built from ``docker/Dockerfile.onnx-mlir`` (``ONNXFOLD_ONNX_MLIR_IMAGE``,
default ``onnxfold/onnx-mlir``), which compiles and runs the fold in a container.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import cast

import numpy as np
import onnx
import onnx_ir as ir

from onnxfold.io.tempfiles import scratch_directory
from onnxfold.ir.arrays import c_contiguous
from onnxfold.runtime.backends.base import BackendUnavailable

IMAGE = os.environ.get("ONNXFOLD_ONNX_MLIR_IMAGE", "onnxfold/onnx-mlir")


def _docker_engine() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def availability() -> str | None:
    """None when usable, else why not (the message a user sees)."""
    if shutil.which("onnx-mlir"):
        return None
    if _docker_engine():
        return None
    return ("backend 'onnx-mlir' needs an onnx-mlir binary on PATH or a running docker engine "
            f"with the {IMAGE} image (docker build -f docker/Dockerfile.onnx-mlir -t {IMAGE} .)")


class Backend:
    name = "onnx-mlir"

    def __init__(self) -> None:
        reason = availability()
        if reason:
            raise BackendUnavailable(reason)
        self.native = shutil.which("onnx-mlir") is not None
        self.workdir = scratch_directory("onnxfold-onnx-mlir-")

    def prepare(self, model: ir.Model) -> None:
        path = os.path.join(self.workdir, "fold.onnx")
        onnx.save(ir.to_proto(model), path)
        self.outputs = [cast(str, v.name) for v in model.graph.outputs]  # graph outputs: named
        self.inputs = [cast(str, v.name) for v in model.graph.inputs]
        if self.native:
            subprocess.run(["onnx-mlir", "--EmitLib", "-O3", path], check=True,
                           capture_output=True)
            from PyRuntime import OMExecutionSession  # shipped with onnx-mlir

            self.session = OMExecutionSession(os.path.join(self.workdir, "fold.so"))
        else:
            subprocess.run(["docker", "run", "--rm", "-v", f"{self.workdir}:/work", IMAGE,
                            "--EmitLib", "-O3", "/work/fold.onnx"], check=True,
                           capture_output=True)

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        arrays = [c_contiguous(feeds[n]) for n in self.inputs]
        if self.native:
            return dict(zip(self.outputs, self.session.run(arrays)))
        np.savez(os.path.join(self.workdir, "feeds.npz"), *arrays)
        script = ("import numpy as np; from PyRuntime import OMExecutionSession as S; "
                  "f=np.load('/work/feeds.npz'); s=S('/work/fold.so'); "
                  "np.savez('/work/out.npz', *s.run([f[k] for k in sorted(f.files, "
                  "key=lambda k: int(k.split('_')[1]))]))")
        subprocess.run(["docker", "run", "--rm", "-v", f"{self.workdir}:/work",
                        "--entrypoint", "python3", IMAGE, "-c", script], check=True,
                       capture_output=True)
        out = np.load(os.path.join(self.workdir, "out.npz"))
        return {name: out[f"arr_{i}"] for i, name in enumerate(self.outputs)}
