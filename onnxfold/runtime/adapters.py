"""onnxruntime's adapter files as a Session's runtime-constant feeds.

An ``.onnx_adapter`` file (written by ``onnxruntime.AdapterFormat.export_adapter``, the file
``onnxruntime.LoraAdapter`` memory-maps for ``RunOptions.add_active_adapter``) holds named
tensors: each names the graph input it feeds. ``onnxfold.Session(model, adapter=PATH)`` takes
them as the runtime-constant feeds, so a multi-LoRA user changes one line. The tensors are
copied out of the file's mapping (onnxruntime's ``OrtValue.numpy`` views it without keeping it
alive): an adapter is small beside its model.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

from onnxfold.errors import InputError, one_line

ADAPTER_SUFFIX = ".onnx_adapter"

AdapterSource = str | os.PathLike | Mapping[str, np.ndarray]


def read_adapter(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The tensors of the adapter file at ``path``, by name (InputError when it is none)."""
    import onnxruntime as ort

    shown = os.fspath(path)
    if not os.path.isfile(shown):
        raise InputError(f"{shown}: no such adapter file")
    try:
        adapter = ort.AdapterFormat.read_adapter(shown)
        return {str(name): np.array(value.numpy())
                for name, value in adapter.get_parameters().items()}
    except Exception as e:  # onnxruntime's reader raises RuntimeError for a foreign file
        raise InputError(f"{shown}: not an onnxruntime adapter file ({one_line(e, 200)})"
                         ) from None


def adapter_feeds(source: AdapterSource) -> dict[str, np.ndarray]:
    """The named arrays of ``source``: an adapter file's path, or a mapping of arrays."""
    if isinstance(source, Mapping):
        return {str(name): np.asarray(array) for name, array in source.items()}
    return read_adapter(source)
