"""Every onnxruntime session the product opens, built one way: its options (graph
optimizations, log level, threads, the CPU memory arena, custom-op libraries, or a caller's
own options copied setting by setting), its providers, and the weights handed over as
``OrtValue`` s.

Runs go through :mod:`onnxfold.host.interruptible` (a signal or the inference time limit
stops them); the fold's memory guard (outputs sized before they are computed, outputs of
unknown size under an address-space bound) is ``fold/fallback_session.run_guarded``'s. The
check opens and runs its sessions its own way (``onnxfold/check/running/runner.py``): a
verifier shares no code with what it verifies; it takes only :func:`register_libraries`
(loading a user's library runs nothing of a model). ``onnxruntime`` is imported where a
session is made.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from onnxfold.errors import InputError, one_line

CPU = ("CPUExecutionProvider",)

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


def session_options(*, optimized: bool = True, log_level: int | None = 4,
                    threads: int | None = None, arena: bool = True,
                    libraries: Sequence[str] = (), like: Any = None) -> Any:
    """New onnxruntime ``SessionOptions``: a copy of ``like`` (a caller's own, setting by
    setting: onnxruntime lets a weight be handed over only once per options object, so each
    session needs its own), else onnxruntime's defaults; then ``optimized=False``: no graph
    optimization (onnxruntime's rewrites must not hide ours, nor compute other bits);
    ``log_level``: onnxruntime's log severity (4: fatal errors only; None: as it is);
    ``threads``: the intra- and inter-op pools' threads; ``arena=False``: no CPU memory arena
    (what a session allocates goes back to the system); ``libraries``: custom-op libraries
    loaded (checked by the caller; InputError where onnxruntime cannot load one)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if like is not None:
        for name in _OPTION_PROPERTIES:
            with contextlib.suppress(AttributeError, TypeError, RuntimeError):
                setattr(options, name, getattr(like, name))
        for key in _CONFIG_KEYS:
            try:
                value = like.get_session_config_entry(key)
            except Exception:  # onnxruntime raises RuntimeError for a key that was never set
                continue
            options.add_session_config_entry(key, value)
    if not optimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if log_level is not None:
        options.log_severity_level = log_level
    if threads is not None:
        options.intra_op_num_threads = options.inter_op_num_threads = threads
    if not arena:
        options.enable_cpu_mem_arena = False
    register_libraries(options, libraries)
    return options


def register_libraries(options: Any, paths: Sequence[str]) -> None:
    """Load each custom-op library into the onnxruntime ``SessionOptions`` ``options``
    (checked by the caller: ``runtime/custom_ops.py``); the check's sessions load theirs
    through it too."""
    for path in paths:
        try:
            options.register_custom_ops_library(path)
        except Exception as e:  # onnxruntime raises its own error types (or OSError)
            raise InputError(f"custom-op library {path}: onnxruntime cannot load it "
                             f"({one_line(e, 200)})") from None


def open_session(model: str | bytes, options: Any = None,
                 providers: Sequence[str] | None = None,
                 handed: Mapping[str, Any] | None = None) -> Any:
    """An ``InferenceSession`` of ``model`` (a path or the model's bytes) with ``options``
    (default: :func:`session_options`'), on ``providers`` (default: the CPU), reading the
    initializers ``handed`` (name -> ``OrtValue``, kept alive by the caller as long as the
    session) from the caller's memory. onnxruntime's own errors propagate."""
    import onnxruntime as ort

    options = session_options() if options is None else options
    if handed:
        options.add_external_initializers(list(handed), list(handed.values()))
    return ort.InferenceSession(model, options, providers=list(providers or CPU))
