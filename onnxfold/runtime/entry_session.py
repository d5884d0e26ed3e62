"""The entry model's onnxruntime session with a set of folded tensors bound as initializers.

The entry model is written once per layout of the folded tensors (names, dtypes, shapes), each
of them a placeholder initializer whose data is never read; each set of folded tensors then
opens a session over that file with the tensors handed over as ``OrtValue`` s
(``SessionOptions.add_external_initializers``, no copy), so onnxruntime treats them as weights
and prepacks them. The ``OrtValue`` s stay referenced as long as the session (onnxruntime reads
their buffers in place).

``run`` calls the session's native ``run`` directly: ``InferenceSession.run`` re-validates the
feed names in Python on every call, which a Session has already routed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_ir as ir

from onnxfold.errors import InputError, one_line
from onnxfold.host.terminal import printable
from onnxfold.io import save_model
from onnxfold.ir.arrays import c_contiguous
from onnxfold.runtime import custom_ops


@dataclass
class BoundEntry:
    """An entry session with its folded tensors: ``run(output_names, feeds, run_options)``,
    the ``OrtValue`` s it reads, and the bytes of the tensors it was given."""

    session: Any  # onnxruntime.InferenceSession (untyped)
    run: Callable[..., list]
    pinned: list = field(repr=False)
    tensor_bytes: int


class EntryModel:
    """The entry model on disk with placeholders for ``bound`` (fold outputs, and runtime
    constants entry reads as they are), and how sessions over it are opened."""

    def __init__(self, entry: ir.Model, bound: Mapping[str, ir.Value], path: str,
                 providers: list[str], sess_options: Any,
                 custom_op_libraries: Sequence[str]) -> None:
        self.entry, self.bound, self.path = entry, dict(bound), path
        self.providers, self.sess_options = providers, sess_options
        self.custom_op_libraries = custom_op_libraries
        self._layout: dict | None = None

    def _written(self, folded: Mapping[str, np.ndarray]) -> None:
        """The entry model with each bound value a placeholder of its folded layout, written
        unless it is there with this layout."""
        layout = {n: (a.dtype.str, a.shape) for n, a in folded.items()}
        if layout == self._layout:
            return
        graph = self.entry.graph
        for name, value in self.bound.items():
            if value in graph.inputs:
                graph.inputs.remove(value)
            value.const_value = _Placeholder(name, folded[name])
            if name not in graph.initializers:
                graph.register_initializer(value)
        save_model(self.entry, self.path)
        self._layout = layout

    def open(self, folded: Mapping[str, np.ndarray]) -> BoundEntry:
        """A session over the entry model reading ``folded`` (every bound value's array)."""
        import onnxruntime as ort

        self._written(folded)
        options = fresh_options(self.sess_options)
        custom_ops.register(options, self.custom_op_libraries)
        names = list(self.bound)
        values = [ort.OrtValue.ortvalue_from_numpy(c_contiguous(folded[n])) for n in names]
        try:
            if names:
                options.add_external_initializers(names, values)
            session = ort.InferenceSession(self.path, options, providers=self.providers)
        except Exception as e:  # onnxruntime refuses the folded tensors or the options
            raise InputError(f"onnxruntime cannot build the entry session: "
                             f"{printable(one_line(e, 300))}") from None
        native = getattr(session, "_sess", None)
        run = native.run if native is not None and hasattr(native, "run") else session.run
        return BoundEntry(session, run, values, sum(int(folded[n].nbytes) for n in names))


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


def fresh_options(user: Any) -> Any:
    """A new SessionOptions with the caller's settings: the folded tensors are added to it, and
    onnxruntime allows adding a name only once per options object (each set needs another)."""
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
    """An external tensor never read: onnxruntime receives its data when a session opens."""

    is_placeholder = True

    def __init__(self, name: str, like: np.ndarray) -> None:
        super().__init__("onnxfold-runtime-constant", 0, like.nbytes,
                         ir.DataType.from_numpy(like.dtype), shape=ir.Shape(like.shape),
                         name=name)
