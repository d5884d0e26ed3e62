"""``onnxfold.Session``: an onnxruntime session that folds runtime constants once.

The model is folded at compile time, then split around the inputs named in
``runtime_constants``. The first ``run`` evaluates ``runtime_fold`` on those feeds with a
backend, and builds the ``entry`` session with the results bound as initializers
(``SessionOptions.add_external_initializers``), so onnxruntime can prepack them. Later calls run
entry only.

Cache contract: each call checks the runtime-constant feeds against what was folded.
``check="fingerprint"`` (default) compares dtype, shape and a strided sample of the bytes and
refolds on a change; ``"hash"`` hashes every byte; ``"identity"`` only compares the array
objects' buffers; ``"refuse"`` raises instead of refolding. ``refold()`` forces a new fold,
``invalidate()`` drops the cached results. With ``cache_dir`` the folded tensors are stored on
disk under a key of the model and the full content hash of the runtime-constant feeds, so a new
process skips the fold; the directory is used only if ``onnxfold.io.cache_dirs`` trusts it (the
user's own, writable by no one else; else no cache and one warning). Feeds used only by the
fold are not kept after it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import onnx
import onnx_ir as ir

from onnxfold.analysis.expansion import refuse_onnxruntime_inlining
from onnxfold.errors import InputError, OnnxfoldError, one_line
from onnxfold.fold.options import FoldOptions
from onnxfold.io import load_model, save_model
from onnxfold.io.cache_dirs import cache_dir_problem, make_cache_dir, trusted_cache_dir
from onnxfold.io.feeds import load_arrays, runtime_constant
from onnxfold.io.reader import model_from_proto
from onnxfold.io.tempfiles import no_temp_directory, write_atomic
from onnxfold.ir.arrays import c_contiguous
from onnxfold.ir.dtypes import np_dtype
from onnxfold.runtime import custom_ops
from onnxfold.runtime.backends import get_backend
from onnxfold.runtime.split import optimize_and_split

CHECKS = ("fingerprint", "hash", "identity", "refuse")
_SAMPLE = 4096


@dataclass(frozen=True)
class NodeArg:
    """An input or output description, like onnxruntime's ``NodeArg``."""

    name: str
    type: str
    shape: list


def _node_args(values: Iterable[ir.Value]) -> list[NodeArg]:
    out = []
    for v in values:
        dtype = v.dtype.name.lower() if v.dtype is not None else "undefined"
        dtype = {"float": "float", "double": "double"}.get(dtype, dtype)
        shape = [d if isinstance(d, int) else (d.value if hasattr(d, "value") else None)
                 for d in (v.shape or [])]
        assert v.name is not None  # graph inputs and outputs are named
        out.append(NodeArg(v.name, f"tensor({dtype})", shape))
    return out


def _fingerprint(arr: np.ndarray, full: bool) -> tuple:
    flat = c_contiguous(arr).reshape(-1).view(np.uint8)
    if full or flat.size <= _SAMPLE:
        # numpy's stubs give ndarray __buffer__ only for Python >= 3.12
        digest = hashlib.blake2b(memoryview(flat), digest_size=16).hexdigest()  # type: ignore[arg-type]
    else:
        step = max(1, flat.size // _SAMPLE)
        sample = np.concatenate([flat[:1024], flat[::step], flat[-1024:]])
        digest = hashlib.blake2b(sample.tobytes(), digest_size=16).hexdigest()
    return arr.dtype.str, arr.shape, digest


class RuntimeConstantsChanged(OnnxfoldError):
    """Raised with ``check="refuse"`` when runtime-constant feeds differ from the folded ones."""


class Session:
    """A drop-in for ``onnxruntime.InferenceSession`` that folds runtime constants once.

    ``custom_op_libraries``: shared libraries of custom ops loaded into the entry session (a
    ``sess_options`` cannot carry them: it is copied setting by setting).
    """

    def __init__(self, model, runtime_constants: Sequence[str] = (), backend: str = "ort",
                 providers: Sequence[str] | None = None, sess_options=None,
                 check: str = "fingerprint", cache_dir: str | os.PathLike | None = None,
                 fold_compile_time: bool = True, backend_options: dict | None = None,
                 options: FoldOptions | None = None,
                 custom_op_libraries: Sequence[str | os.PathLike] = ()) -> None:
        if check not in CHECKS:
            raise InputError(f"check must be one of {', '.join(CHECKS)}")
        self.custom_op_libraries = custom_ops.checked_libraries(custom_op_libraries)
        label = "model" if isinstance(model, onnx.ModelProto | ir.Model) else os.fspath(model)
        if isinstance(model, onnx.ModelProto):
            model = model_from_proto(model)
        elif not isinstance(model, ir.Model):
            model = load_model(model)
        refuse_onnxruntime_inlining(model, label)  # each run would load it in onnxruntime
        self._inputs = _node_args(model.graph.inputs)
        self._outputs = _node_args(model.graph.outputs)
        self.parts = optimize_and_split(model, runtime_constants, options,
                                        "fold" if fold_compile_time else "keep")
        self.runtime_constants = list(self.parts.manifest["runtime_constants"])
        self.providers = list(providers or ["CPUExecutionProvider"])
        self.sess_options = sess_options
        self.check = check
        self.cache_dir: str | None = None
        if cache_dir is not None:
            given = os.path.abspath(cache_dir)  # the caller's current directory, now
            if os.path.lexists(given) and not os.path.isdir(given):
                raise InputError(f"{given}: the cache directory is not a directory")
            self.cache_dir = trusted_cache_dir(given, "Session cache_dir")
        self.backend = get_backend(backend, **(backend_options or {}))
        if self.parts.fold_outputs:  # nothing to fold: entry is the whole model
            try:
                self.backend.prepare(self.parts.runtime_fold)
            except OnnxfoldError:
                raise
            except Exception as e:  # the backend's compiler or runtime refuses the fold model
                raise InputError(f"backend {backend} cannot prepare the runtime fold: "
                                 f"{one_line(e, 300)}") from None
        try:
            self._tmp = tempfile.TemporaryDirectory(prefix="onnxfold-session-")
        except OSError as e:
            raise no_temp_directory(e) from None
        self._entry_path = os.path.join(self._tmp.name, "entry.onnx")
        self._entry_layout: dict | None = None
        graph = self.parts.entry.graph
        # bound as initializers: the fold's results, and runtime constants entry reads directly
        bound = set(self.parts.fold_outputs) | set(self.runtime_constants)
        self._fold_values = {cast(str, v.name): v for v in graph.inputs if v.name in bound}
        self._passthrough = [n for n in self._fold_values if n not in self.parts.fold_outputs]
        self._entry_inputs = {v.name for v in graph.inputs} - set(self._fold_values)
        self._lock = threading.Lock()
        self._entry: Any = None  # the entry onnxruntime.InferenceSession (untyped)
        self._folded_key: tuple | None = None
        self._fold_hash: Any = None  # a hashlib object (its type is private)
        self._pinned: list = []
        self.folds = 0
        self.fold_seconds = 0.0
        self.cache_hits = 0
        self.cache_discarded = 0
        self.cache_events: list[str] = []

    # -- onnxruntime's interface -----------------------------------------------------------
    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    def get_providers(self) -> list[str]:
        return list(self.providers)

    def run(self, output_names, input_feed: Mapping[str, np.ndarray], run_options=None):
        """Run the model; the first call (or a changed runtime constant) folds first."""
        missing = [n for n in self.runtime_constants if n not in input_feed]
        if missing:
            raise InputError(f"feeds lack the runtime constants {', '.join(missing)}")
        rt_feeds = {n: runtime_constant(n, input_feed[n]) for n in self.runtime_constants}
        key = self._key(rt_feeds)
        with self._lock:
            if self._entry is None or key != self._folded_key:
                if self._entry is not None and self.check == "refuse":
                    raise RuntimeConstantsChanged(
                        "runtime-constant inputs changed since the fold (check='refuse')")
                self._fold(rt_feeds, key)
            entry = self._entry
        feeds = {n: a for n, a in input_feed.items() if n in self._entry_inputs}
        try:
            return entry.run(output_names, feeds, run_options)
        except Exception as e:  # onnxruntime's errors for bad feeds (names, types, shapes)
            raise InputError(f"onnxruntime cannot run the model on these inputs: "
                             f"{one_line(e, 300)}") from None

    # -- folding -----------------------------------------------------------------------------
    def _key(self, feeds: dict[str, np.ndarray]) -> tuple:
        if self.check == "identity":
            return tuple((n, a.__array_interface__["data"][0], a.shape, a.dtype.str)
                         for n, a in sorted(feeds.items()))
        full = self.check == "hash"
        return tuple((n, *_fingerprint(a, full)) for n, a in sorted(feeds.items()))

    def refold(self, input_feed: Mapping[str, np.ndarray]) -> None:
        """Fold again now from ``input_feed``'s runtime constants."""
        rt_feeds = {n: runtime_constant(n, input_feed[n]) for n in self.runtime_constants}
        with self._lock:
            self._fold(rt_feeds, self._key(rt_feeds))

    def invalidate(self) -> None:
        """Forget the folded tensors; the next ``run`` folds again."""
        with self._lock:
            self._entry = None
            self._folded_key = None
            self._pinned = []

    def _disk_path(self, feeds: dict[str, np.ndarray]) -> str | None:
        if self.cache_dir is None:
            return None
        if self._fold_hash is None:  # the keys start from the fold model's bytes
            self._fold_hash = hashlib.sha256(
                ir.to_proto(self.parts.runtime_fold).SerializeToString())
        h = self._fold_hash.copy()
        for name, arr in sorted(feeds.items()):
            h.update(repr(_fingerprint(arr, full=True)).encode() + name.encode())
        return os.path.join(self.cache_dir, h.hexdigest() + ".npz")

    def _cached(self, disk: str | None) -> dict[str, np.ndarray] | None:
        """The folded tensors stored at ``disk`` if they are exactly what the fold gives: the
        same names, dtypes and known dims. Anything else is discarded (and counted)."""
        if disk is None or not os.path.exists(disk) or \
                cache_dir_problem(os.path.dirname(disk)) is not None:  # changed since checked
            return None
        try:
            stored = load_arrays(disk)
            problem = _layout_problem(stored, self.parts.runtime_fold.graph.outputs)
        except InputError as e:
            problem = str(e)
        if problem is None:
            return stored
        self.cache_discarded += 1
        self.cache_events.append(f"discarded {disk}: {problem}")
        with contextlib.suppress(OSError):
            os.unlink(disk)
        return None

    def _fold(self, rt_feeds: dict[str, np.ndarray], key: tuple) -> None:
        started = time.perf_counter()
        disk = self._disk_path(rt_feeds)
        folded = self._cached(disk)
        if folded is not None:
            self.cache_hits += 1
        else:
            fold_feeds = {n: rt_feeds[n] for n in self.parts.fold_inputs}
            try:
                folded = self.backend.run(fold_feeds) if self.parts.fold_outputs else {}
            except OnnxfoldError:
                raise
            except Exception as e:  # the backend's runtime rejects the feeds
                raise InputError(f"folding the runtime constants failed: {one_line(e, 300)}"
                                 ) from None
            if disk is not None:
                self._store(disk, folded)
        folded.update({n: rt_feeds[n] for n in self._passthrough})
        self._entry = self._entry_session(folded)
        self._folded_key = key
        self.folds += 1
        self.fold_seconds = time.perf_counter() - started

    def _store(self, disk: str, folded: dict[str, np.ndarray]) -> None:
        try:
            if not make_cache_dir(os.path.dirname(disk)):
                self.cache_events.append(f"not stored: {os.path.dirname(disk)} is not a "
                                         "private directory")
                return
            # numpy's stub: mypy fears **folded could bind savez's allow_pickle: bool
            write_atomic(disk, lambda f: np.savez(f, **folded))  # type: ignore[arg-type]
        except (OSError, OnnxfoldError) as e:  # a cache that cannot be written is only slower
            self.cache_events.append(f"not stored: {e}")

    def _entry_session(self, folded: dict[str, np.ndarray]):
        import onnxruntime as ort

        layout = {n: (a.dtype.str, a.shape) for n, a in folded.items()}
        if layout != self._entry_layout:
            self._write_entry(folded)
            self._entry_layout = layout
        options = _fresh_options(self.sess_options)
        custom_ops.register(options, self.custom_op_libraries)
        names = list(self._fold_values)
        values = [ort.OrtValue.ortvalue_from_numpy(c_contiguous(folded[n]))
                  for n in names]
        try:
            if names:
                options.add_external_initializers(names, values)
            session = ort.InferenceSession(self._entry_path, options, providers=self.providers)
        except Exception as e:  # onnxruntime refuses the folded tensors or the options
            raise InputError(f"onnxruntime cannot build the entry session: {one_line(e, 300)}"
                             ) from None
        self._pinned = values  # onnxruntime reads the buffers in place: keep them alive
        return session

    def _write_entry(self, folded: dict[str, np.ndarray]) -> None:
        """Entry with each fold output as a placeholder initializer of the folded layout."""
        graph = self.parts.entry.graph
        for name, value in self._fold_values.items():
            if value in graph.inputs:
                graph.inputs.remove(value)
            value.const_value = _Placeholder(name, folded[name])
            if name not in graph.initializers:
                graph.register_initializer(value)
        save_model(self.parts.entry, self._entry_path)


def _layout_problem(arrays: Mapping[str, np.ndarray], outputs: Sequence[ir.Value]
                    ) -> str | None:
    """Why ``arrays`` are not what a fold with these ``outputs`` gives."""
    want = {o.name: o for o in outputs}
    if set(arrays) != set(want):
        return "not the fold's outputs"
    for name, arr in arrays.items():
        value = want[name]
        if not isinstance(value.type, ir.TensorType):
            continue
        if value.type.dtype and np.dtype(arr.dtype) != np_dtype(value.type.dtype):
            return f"{name} is {arr.dtype}"
        if value.shape is not None:
            dims = [d if isinstance(d, int) else None for d in value.shape]
            if len(dims) != arr.ndim or any(d is not None and d != n
                                            for d, n in zip(dims, arr.shape)):
                return f"{name} has shape {list(arr.shape)}"
    return None


_OPTION_PROPERTIES = (
    "enable_cpu_mem_arena", "enable_mem_pattern", "enable_mem_reuse", "enable_profiling",
    "execution_mode", "execution_order", "graph_optimization_level", "inter_op_num_threads",
    "intra_op_num_threads", "log_severity_level", "log_verbosity_level", "logid",
    "optimized_model_filepath", "profile_file_prefix", "use_deterministic_compute",
    "use_per_session_threads")
_CONFIG_KEYS = (  # onnxruntime cannot list a SessionOptions' entries: the common ones are copied
    "session.disable_prepacking", "session.intra_op.allow_spinning",
    "session.inter_op.allow_spinning", "session.use_env_allocators",
    "session.set_denormal_as_zero", "session.disable_cpu_ep_fallback",
    "session.intra_op_thread_affinities", "optimization.disable_specified_optimizers",
    "session.use_device_allocator_for_initializers", "session.dynamic_block_base")


def _fresh_options(user):
    """A new SessionOptions with the caller's settings: the folded tensors are added to it, and
    onnxruntime allows adding a name only once per options object (a refold needs another)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if user is None:
        return options
    for name in _OPTION_PROPERTIES:
        with contextlib.suppress(AttributeError, TypeError, RuntimeError):
            setattr(options, name, getattr(user, name))
    for key in _CONFIG_KEYS:
        try:
            value = user.get_session_config_entry(key)
        except Exception:  # onnxruntime raises RuntimeError for a key that was never set
            continue
        options.add_session_config_entry(key, value)
    return options


class _Placeholder(ir.ExternalTensor):
    """An external tensor never read: onnxruntime receives its data at fold time."""

    is_placeholder = True

    def __init__(self, name: str, like: np.ndarray) -> None:
        super().__init__("onnxfold-runtime-constant", 0, like.nbytes,
                         ir.DataType.from_numpy(like.dtype), shape=ir.Shape(like.shape),
                         name=name)
