"""The ``mlir`` backend: IREE compiles the fold model (ONNX -> MLIR -> llvm-cpu) once.

The ONNX importer runs in-process (MLIR Python bindings); ``iree-compile`` runs as its own
process, so a compiler crash cannot take the caller down. Compiled modules are cached on disk
under a key of the model bytes, the flags, the compiler version and the CPU, in a directory that
``onnxfold.io.cache_dirs`` trusts (absolute, the user's own, writable by no one else; else no
cache and one warning: a module is native code run in this process). float64 is kept
(IREE would demote it to float32 by default). A model IREE cannot compile is handed to the
``ort`` backend instead of failing; ``routed_to`` says so.

Where the time goes, and what this module does about it (48 BERT-size int8 weights,
DequantizeLinear + Transpose, 85 MB in, 340 MB out):

- IREE allocates every result afresh and frees it with the last reference, so each call
  page-faults all 340 MB of output back in (~150k faults, most of a call). Here the results are
  written into numpy arrays the backend passes in (``torch.overwrite.tensor.contents`` on extra
  ``!torch.tensor`` arguments, which IREE lowers to ``hal.tensor.alias``), and the arrays of the
  previous call are reused once the caller has dropped every reference to them (like an arena).
- The inputs are imported without a copy (the build assumes 16-byte aligned bindings, which
  numpy guarantees; IREE's default of 64 makes unaligned arrays segfault), else staged into
  persistent aligned buffers. The HAL buffer wrapping a numpy array keeps the array alive only
  as long as the *Python* ``HalBuffer`` object lives, not the C buffer: every wrapper is held
  until the call has returned (dropping it early gave the wrong results and crashes seen before).
- A 2-D transposing elementwise op (dequantize + transpose fused) gets [1, 16] vector tiles by
  default: 16 scattered stores per vector. Tiles of [16, 16] lower to in-register transposes
  (6x faster); ``Transpose(DequantizeLinear(q))`` is also rewritten to
  ``DequantizeLinear(Transpose(q))`` so the float output is written in order (bitwise equal).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import platform
import sys
import threading

import numpy as np
import onnx
import onnx_ir as ir

from onnxfold.declare.catalogue import Catalogue
from onnxfold.errors import OnnxfoldError
from onnxfold.io.cache_dirs import (
    cache_dir_problem,
    make_cache_dir,
    trusted_cache_dir,
    user_cache_home,
)
from onnxfold.io.tempfiles import write_atomic
from onnxfold.ir.arrays import c_contiguous
from onnxfold.runtime.backends import get_backend
from onnxfold.runtime.backends.base import BackendUnavailable, FoldBackend
from onnxfold.runtime.backends.iree_rewrites import (
    results_to_out_params,
    tile_2d_transposes,
    transpose_before_dequantize,
)

FLAGS = ("--iree-hal-target-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host",
         "--iree-input-demote-f64-to-f32=false")
# Buffers are bound with the alignment the compiler was told to assume: 64 bytes by default
# (an unaligned numpy array then segfaults in aligned vector loads). numpy guarantees 16, so
# the out-param build assumes 16 and numpy's arrays are imported without a copy.
ALIGN = 16
OUT_PARAM_FLAGS = (f"--iree-stream-resource-min-offset-alignment={ALIGN}",)
PIPELINE = "out-params+transpose-first+tile16x16 v1"  # part of the cache key
_OUT_DTYPES = {np.dtype(t) for t in (np.float16, np.float32, np.float64, np.int8, np.uint8,
                                     np.int16, np.int32, np.int64)}


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
    """Where compiled modules are kept unless the caller names a directory (used only when
    ``onnxfold.io.cache_dirs`` trusts it)."""
    return os.path.join(user_cache_home(), "onnxfold", "iree")


def aligned_block(nbytes: int) -> np.ndarray:
    """A fresh 64-byte aligned uint8 block.

    numpy's allocator asks for transparent huge pages on large blocks (``madvise``), which
    makes first-touch ~8x cheaper than the 4 KiB pages IREE's own allocations fault in.
    """
    raw = np.empty(nbytes + 64, np.uint8)
    start = (-raw.ctypes.data) % 64
    return raw[start:start + nbytes]


def _aligned(arr: np.ndarray) -> bool:
    return arr.flags.c_contiguous and arr.ctypes.data % ALIGN == 0


class _OutputBlock:
    """One block holding every output of a call; reused once nobody else refers to it."""

    def __init__(self, specs: list[tuple[tuple[int, ...], np.dtype]]) -> None:
        self.specs = specs
        self.offsets, size = [], 0
        for shape, dtype in specs:
            self.offsets.append(size)
            nbytes = math.prod(shape) * dtype.itemsize
            size += -(-nbytes // 64) * 64
        self.block = aligned_block(max(size, 64))
        self.owner = self.block.base  # what every view of the outputs refers to
        self.idle_refs = sys.getrefcount(self.owner)

    def free(self) -> bool:
        # views of the outputs (and views of views) keep a reference to the owning array
        return sys.getrefcount(self.owner) <= self.idle_refs

    def arrays(self) -> list[np.ndarray]:
        out = []
        for (shape, dtype), offset in zip(self.specs, self.offsets):
            nbytes = math.prod(shape) * dtype.itemsize
            out.append(self.block[offset:offset + nbytes].view(dtype).reshape(shape))
        return out


class Backend:
    name = "mlir"

    def __init__(self, catalogue: Catalogue, cache_dir: str | None = None,
                 fallback: str = "ort") -> None:
        self.catalogue = catalogue
        self.compiler, self.runtime, self.importer = _require()
        # None: no trustworthy directory (one warning said why), every module is compiled
        self.cache_dir = trusted_cache_dir(os.path.abspath(cache_dir) if cache_dir else
                                           default_cache_dir(), "IREE module cache")
        self.fallback = fallback
        self.routed_to: str | None = None
        self.route_reason: str | None = None
        self.cache_hit = False
        self._other: FoldBackend | None = None
        self._lock = threading.Lock()
        self._blocks: list[_OutputBlock] = []
        self._staging: dict[int, np.ndarray] = {}

    def _key(self, data: bytes, out_params: bool) -> str:
        from importlib.metadata import version

        h = hashlib.sha256(data)
        pipeline = (PIPELINE, OUT_PARAM_FLAGS) if out_params else None
        h.update(repr((FLAGS, pipeline, version("iree-base-compiler"), _cpu())).encode())
        return h.hexdigest()

    def _import(self, model: onnx.ModelProto) -> str:
        from iree.compiler.ir import Context

        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
        info = self.importer.ModelInfo(inferred)
        module = info.create_module(context=Context()).operation
        self.importer.NodeImporter.define_function(info.main_graph, module).import_all()
        module.verify()
        return module.get_asm()

    def _build(self, model: ir.Model, proto: onnx.ModelProto, out_params: bool) -> bytes:
        if not out_params:
            return self.compiler.compile_str(self._import(proto), input_type="onnx",
                                             extra_args=list(FLAGS))
        rewritten = transpose_before_dequantize(model, self.catalogue)
        asm = results_to_out_params(
            self._import(proto if rewritten is model else ir.to_proto(rewritten)),
            proto.graph.name)
        configured = self.compiler.compile_str(
            asm, input_type="onnx",
            extra_args=[*FLAGS, *OUT_PARAM_FLAGS, "--compile-to=executable-configurations"])
        configured = tile_2d_transposes(configured.decode())
        return self.compiler.compile_str(
            configured,
            extra_args=[*FLAGS, *OUT_PARAM_FLAGS, "--compile-from=executable-configurations"])

    def _compile(self, model: ir.Model, proto: onnx.ModelProto, data: bytes,
                 out_params: bool) -> bytes:
        """The compiled module, from the cache when it can be trusted (a module holds native
        code: only a directory that is the user's own and writable by no one else is used)."""
        if self.cache_dir is None:
            return self._build(model, proto, out_params)
        path = os.path.join(self.cache_dir, self._key(data, out_params) + ".vmfb")
        # checked again at each use: the directory may have changed since the backend was made
        trusted = cache_dir_problem(self.cache_dir) is None
        if trusted and os.path.isfile(path) and not os.path.islink(path):
            self.cache_hit = True
            with open(path, "rb") as f:
                return f.read()
        vmfb = self._build(model, proto, out_params)
        if trusted and make_cache_dir(self.cache_dir):
            with contextlib.suppress(OSError, OnnxfoldError):  # an unwritable cache is slower
                write_atomic(path, lambda f: f.write(vmfb))
        return vmfb

    @staticmethod
    def _output_specs(model: onnx.ModelProto):
        """(shape, dtype) of every output, or None when the out-param build does not apply:
        a shape not static, an empty tensor, or a dtype (of an input or output) not in
        ``_OUT_DTYPES`` (bool and string take the plain build)."""
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
        specs = []
        for value in [*inferred.graph.input, *inferred.graph.output]:
            t = value.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
            try:
                dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.elem_type))
            except (KeyError, TypeError, ValueError):
                return None
            if not t.HasField("shape") or None in dims or 0 in dims or dtype not in _OUT_DTYPES:
                return None
            specs.append((tuple(dims), dtype))
        return specs[len(inferred.graph.input):]

    def prepare(self, model: ir.Model) -> None:
        proto = ir.to_proto(model)  # the importer, onnx's shape inference and the cache key
        data = proto.SerializeToString()
        self.inputs = [i.name for i in proto.graph.input]
        self.outputs = [o.name for o in proto.graph.output]
        self.specs = self._output_specs(proto)
        vmfb, error = None, None
        for out_params in ((True, False) if self.specs else (False,)):
            try:
                vmfb = self._compile(model, proto, data, out_params)
                break
            except Exception as e:  # the importer and compiler raise many types; route elsewhere
                error = e
        if vmfb is None:
            self.routed_to = self.fallback
            self.route_reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
            self._other = get_backend(self.fallback, self.catalogue)
            self._other.prepare(model)
            return
        self.out_params = out_params
        rt = self.runtime
        self.device = rt.get_device("local-task")
        self.context = rt.SystemContext(config=rt.Config(device=self.device))
        self.context.add_vm_module(rt.VmModule.copy_buffer(self.context.instance, vmfb))
        self.function = self.context.modules.module[proto.graph.name]
        self._memory_type = int(rt.MemoryType.HOST_LOCAL) | int(rt.MemoryType.DEVICE_VISIBLE)
        self._usage = (int(rt.BufferUsage.TRANSFER) | int(rt.BufferUsage.DISPATCH_STORAGE)
                       | int(rt.BufferUsage.MAPPING_SCOPED))

    def _view(self, arr: np.ndarray, keep: list):
        rt = self.runtime
        buffer = self.device.allocator.import_host_allocation(
            arr, memory_type=self._memory_type, allowed_usage=self._usage)
        keep.append((arr, buffer))  # the import holds ``arr`` only while ``buffer`` lives
        return rt.HalBufferView(buffer, arr.shape,
                                rt.array_interop.map_dtype_to_element_type(arr.dtype))

    def _staged(self, index: int, arr: np.ndarray) -> np.ndarray:
        """``arr`` itself when IREE can import it (aligned, writable: IREE imports only
        writable host memory), else a persistent aligned copy."""
        if _aligned(arr) and arr.flags.writeable:
            return arr
        stage = self._staging.get(index)
        if stage is None or stage.shape != arr.shape or stage.dtype != arr.dtype:
            stage = aligned_block(arr.nbytes or 1)[:arr.nbytes].view(arr.dtype).reshape(arr.shape)
            self._staging[index] = stage
        np.copyto(stage, arr)
        return stage

    def _output_block(self) -> _OutputBlock:
        # reuse one idle block (the caller dropped every result of that call), release the rest
        idle = [b for b in self._blocks if b.free()]
        block = idle[0] if idle else _OutputBlock(self.specs)
        self._blocks = [b for b in self._blocks if b is block or not b.free()]
        if not idle:
            self._blocks.append(block)
        return block

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._other is not None:
            return self._other.run(feeds)
        if not self.out_params:
            results = self.function(*[np.require(feeds[n], requirements=["C", "W"])
                                      for n in self.inputs])
            if not isinstance(results, (list, tuple)):
                results = [results]
            return {name: r.to_host() for name, r in zip(self.outputs, results)}
        rt = self.runtime
        with self._lock:
            keep: list = []
            args = rt.VmVariantList(len(self.inputs) + len(self.outputs))
            for i, name in enumerate(self.inputs):
                arr = np.asarray(feeds[name])
                args.push_ref(self._view(self._staged(i, c_contiguous(arr)), keep))
            outputs = self._output_block().arrays()
            for arr in outputs:
                args.push_ref(self._view(arr, keep))
            self.context.vm_context.invoke(self.function.vm_function, args,
                                           rt.VmVariantList(0))
            del args, keep  # the call has completed: the arrays may go
        return dict(zip(self.outputs, outputs))
