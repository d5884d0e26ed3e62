"""The ``mlir`` backend: IREE compiles the fold model (ONNX -> MLIR -> llvm-cpu) once.

The ONNX importer runs in-process (MLIR Python bindings); ``iree-compile`` runs as its own
process, so a compiler crash cannot take the caller down. Compiled modules are cached on disk
under a key of the model bytes, the flags, the compiler version and the CPU. float64 is kept
(IREE would demote it to float32 by default). A model IREE cannot compile is handed to the
``ort`` backend instead of failing; ``routed_to`` says so.
"""

from __future__ import annotations

import hashlib
import os
import platform

import numpy as np
import onnx

from onnxfold.arrays import c_contiguous
from onnxfold.backends.base import BackendUnavailable

FLAGS = ("--iree-hal-target-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host",
         "--iree-input-demote-f64-to-f32=false")


def _require():
    try:
        import iree.compiler as compiler
        import iree.runtime as runtime
        from iree.compiler.extras import onnx_importer
    except ImportError:
        raise BackendUnavailable(
            "backend 'mlir' needs IREE: pip install iree-base-compiler iree-base-runtime "
            "(or pip install 'onnxfold[mlir]')") from None
    return compiler, runtime, onnx_importer


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("model name", "flags")):
                    return line
    except OSError:
        pass
    return platform.processor() or platform.machine()


def default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache"))
    return os.path.join(base, "onnxfold", "iree")


class Backend:
    name = "mlir"

    def __init__(self, cache_dir: str | None = None, fallback: str = "ort") -> None:
        self.compiler, self.runtime, self.importer = _require()
        self.cache_dir = cache_dir or default_cache_dir()
        self.fallback = fallback
        self.routed_to: str | None = None
        self.route_reason: str | None = None
        self.cache_hit = False
        self._other = None

    def _key(self, data: bytes) -> str:
        from importlib.metadata import version

        h = hashlib.sha256(data)
        h.update(repr((FLAGS, version("iree-base-compiler"), _cpu())).encode())
        return h.hexdigest()

    def _import(self, model: onnx.ModelProto) -> str:
        from iree.compiler.ir import Context

        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
        info = self.importer.ModelInfo(inferred)
        module = info.create_module(context=Context()).operation
        self.importer.NodeImporter.define_function(info.main_graph, module).import_all()
        module.verify()
        return module.get_asm()

    def _compile(self, model: onnx.ModelProto, data: bytes) -> bytes:
        path = os.path.join(self.cache_dir, self._key(data) + ".vmfb")
        if os.path.exists(path):
            self.cache_hit = True
            with open(path, "rb") as f:
                return f.read()
        vmfb = self.compiler.compile_str(self._import(model), input_type="onnx",
                                         extra_args=list(FLAGS))
        os.makedirs(self.cache_dir, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(vmfb)
        os.replace(tmp, path)
        return vmfb

    def prepare(self, model: onnx.ModelProto) -> None:
        data = model.SerializeToString()
        self.inputs = [i.name for i in model.graph.input]
        self.outputs = [o.name for o in model.graph.output]
        try:
            vmfb = self._compile(model, data)
        except Exception as e:  # the importer and compiler raise many types; route elsewhere
            from onnxfold.backends import get_backend

            self.routed_to = self.fallback
            self.route_reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
            self._other = get_backend(self.fallback)
            self._other.prepare(model)
            return
        rt = self.runtime
        self.context = rt.SystemContext(config=rt.Config("local-task"))
        self.context.add_vm_module(rt.VmModule.copy_buffer(self.context.instance, vmfb))
        self.function = self.context.modules.module[model.graph.name]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._other is not None:
            return self._other.run(feeds)
        results = self.function(*[c_contiguous(feeds[n]) for n in self.inputs])
        if not isinstance(results, (list, tuple)):
            results = [results]
        return {name: r.to_host() for name, r in zip(self.outputs, results)}
