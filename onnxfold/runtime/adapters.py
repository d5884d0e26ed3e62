"""onnxruntime's adapter files as a Session's runtime-constant feeds.

An ``.onnx_adapter`` file (written by ``onnxruntime.AdapterFormat.export_adapter``, the file
``onnxruntime.LoraAdapter`` memory-maps for ``RunOptions.add_active_adapter``) holds named
tensors: each names the graph input it feeds. ``onnxfold.Session(model, adapter=PATH)`` takes
them as the runtime-constant feeds, so a multi-LoRA user changes one line. The tensors are
copied out of the file's mapping (onnxruntime's ``OrtValue.numpy`` views it without keeping it
alive): an adapter is small beside its model.

:class:`AdapterFiles` remembers the files it read by path and ``stat`` (device, inode, size,
modification time in ns) with their content key, so that switching back to a file read before
neither reads nor hashes it again; a file rewritten since is read again. It is shared by the
threads of a Session (a lock keeps its memory whole).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping

import numpy as np

from onnxfold.errors import InputError, OutputError, one_line
from onnxfold.io.feeds import runtime_constant
from onnxfold.io.opener import by_descriptor, open_regular
from onnxfold.io.pinned import PinnedOutput
from onnxfold.io.tempfiles import replacing
from onnxfold.runtime.feed_check import content_key

AdapterSource = str | os.PathLike | Mapping[str, np.ndarray]


def read_adapter(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The tensors of the adapter file at ``path``, by name (InputError when it is none)."""
    import onnxruntime as ort

    shown = os.fspath(path)
    fd = open_regular(shown, "adapter file")
    try:  # onnxruntime reads the descriptor checked, not what the path names by then
        adapter = ort.AdapterFormat.read_adapter(by_descriptor(fd, shown))
        return {str(name): np.array(value.numpy())
                for name, value in adapter.get_parameters().items()}
    except Exception as e:  # onnxruntime's reader raises RuntimeError for a foreign file
        raise InputError(f"{shown}: not an onnxruntime adapter file ({one_line(e, 200)})"
                         ) from None
    finally:
        os.close(fd)


def write_adapter(arrays: Mapping[str, np.ndarray], path: str | os.PathLike | PinnedOutput
                  ) -> None:
    """``arrays`` as an onnxruntime adapter file (``AdapterFormat``, what
    ``onnxruntime.LoraAdapter`` reads) at ``path``: written beside it, renamed in place."""
    import onnxruntime as ort

    adapter = ort.AdapterFormat()
    adapter.set_adapter_version(1)
    adapter.set_model_version(1)
    adapter.set_parameters({n: ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(a))
                            for n, a in arrays.items()})
    target = path if isinstance(path, PinnedOutput) else os.fspath(path)
    with replacing(target) as (fd, tmp):
        os.close(fd)
        where = target.directory.path_of(tmp) if isinstance(target, PinnedOutput) else \
            os.path.join(os.path.dirname(os.path.abspath(target)), tmp)
        try:
            adapter.export_adapter(where)
        except Exception as e:  # onnxruntime's writer raises RuntimeError
            shown = target.given if isinstance(target, PinnedOutput) else target
            raise OutputError(f"{shown}: cannot write the adapter file ({one_line(e, 200)})"
                              ) from None


class AdapterFiles:
    """Adapters as (arrays, content key), files remembered by ``stat`` (see the module doc)."""

    def __init__(self, limit: int = 16) -> None:
        self.limit = limit
        self._read: dict[tuple, tuple[dict[str, np.ndarray], str]] = {}
        self._lock = threading.Lock()

    def feeds(self, source: AdapterSource) -> tuple[dict[str, np.ndarray], str]:
        """``source``'s arrays (a file's path, or a mapping) and their content key."""
        if isinstance(source, Mapping):
            arrays = {str(n): runtime_constant(str(n), a) for n, a in source.items()}
            return arrays, content_key(arrays)
        path = os.path.realpath(source)
        try:
            info = os.stat(path)
        except OSError:
            info = None
        stamp = (path, info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns) \
            if info is not None else None
        with self._lock:
            known = self._read.get(stamp) if stamp is not None else None
        if known is not None:
            return known
        arrays = read_adapter(source)
        found = arrays, content_key(arrays)
        if stamp is not None:
            with self._lock:
                if stamp not in self._read and len(self._read) >= self.limit:
                    self._read.pop(next(iter(self._read)))
                self._read[stamp] = found
        return found
