"""The entry model's onnxruntime session with a set of folded tensors bound as initializers.

The entry model is written once per layout of the folded tensors (names, dtypes, shapes), each
of them an initializer whose data is in ``folded.data`` beside it, at an offset the layout
fixes. Each set of folded tensors then opens a session of its own: the tensors are written into
that file, onnxruntime loads them as the model's weights (it maps the file, prepacks the weights
of its MatMul/Gemm/Conv kernels and keeps only the packed copies, or the mapped pages of the
others), and the file is removed once the session exists (one set at a time). The Session then
drops its arrays: a folded set is held once, by onnxruntime, not twice (handing the arrays over
as ``OrtValue`` s, ``add_external_initializers``, kept them and the packed copies both). Where
no such file can be written (a full temporary directory), the arrays are handed over as before
and stay referenced as long as the session. Runtime constants the entry reads as they are (the
caller's arrays) are always handed over, without a copy.

``run`` calls the session's native ``run`` directly: ``InferenceSession.run`` re-validates the
feed names in Python on every call, which a Session has already routed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_ir as ir

from onnxfold.errors import InputError, one_line
from onnxfold.host.ort_sessions import open_session, session_options
from onnxfold.host.terminal import printable
from onnxfold.io import save_model
from onnxfold.ir.arrays import c_contiguous


@dataclass
class BoundEntry:
    """An entry session with its folded tensors: ``run(output_names, feeds, run_options)``,
    the ``OrtValue`` s it reads in place (handed over), the bytes of the tensors it was given
    and whether onnxruntime holds them itself (loaded from a file: the caller's arrays may
    go)."""

    session: Any  # onnxruntime.InferenceSession (untyped)
    run: Callable[..., list]
    pinned: list = field(repr=False)
    tensor_bytes: int
    owned: bool = False


DATA_NAME = "folded.data"
ALIGNMENT = 4096  # each tensor's offset in the data file (a page: mapped as it is)


def layout_of(folded: Mapping[str, np.ndarray], names: Sequence[str]) -> dict[str, int]:
    """Each of ``names``' offset in the data file, in that order, aligned."""
    offsets, end = {}, 0
    for name in names:
        end = -(-end // ALIGNMENT) * ALIGNMENT
        offsets[name] = end
        end += int(folded[name].nbytes)
    return offsets


class EntryModel:
    """The entry model on disk with placeholders for ``bound`` (fold outputs, and runtime
    constants entry reads as they are, ``handed``), and how sessions over it are opened."""

    def __init__(self, entry: ir.Model, bound: Mapping[str, ir.Value], path: str,
                 providers: list[str], sess_options: Any,
                 custom_op_libraries: Sequence[str], handed: Collection[str] = ()) -> None:
        self.entry, self.bound, self.path = entry, dict(bound), path
        self.providers, self.sess_options = providers, sess_options
        self.custom_op_libraries = custom_op_libraries
        self.handed = frozenset(handed)
        self._layout: dict | None = None
        self._offsets: dict[str, int] = {}

    def _written(self, folded: Mapping[str, np.ndarray]) -> None:
        """The entry model with each bound value an initializer of its folded layout in the
        data file, written unless it is there with this layout."""
        layout = {n: (a.dtype.str, a.shape) for n, a in folded.items()}
        if layout == self._layout:
            return
        self._offsets = layout_of(folded, [n for n in self.bound if n not in self.handed])
        graph = self.entry.graph
        for name, value in self.bound.items():
            if value in graph.inputs:
                graph.inputs.remove(value)
            value.const_value = _Placeholder(name, folded[name], self._offsets.get(name, 0))
            if name not in graph.initializers:
                graph.register_initializer(value)
        save_model(self.entry, self.path)
        self._layout = layout

    def open(self, folded: Mapping[str, np.ndarray]) -> BoundEntry:
        """A session over the entry model reading ``folded`` (every bound value's array):
        onnxruntime's own copy of the folded tensors, or, where their file cannot be written,
        the arrays themselves. One set at a time (the Session's lock): the data file is
        written beside the entry model, loaded, and removed."""
        self._written(folded)
        data = os.path.join(os.path.dirname(self.path), DATA_NAME)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(data)  # a set's that was cut short
        try:
            if self._offsets:
                self._write_data(folded, data)
        except OSError:  # no room for the set's file: handed over instead
            with contextlib.suppress(FileNotFoundError):
                os.unlink(data)
            return self._opened(folded, list(self.bound), False)
        try:
            return self._opened(folded, [n for n in self.bound if n in self.handed], True)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(data)  # onnxruntime maps what it keeps: the file can go

    def _write_data(self, folded: Mapping[str, np.ndarray], path: str) -> None:
        """The folded tensors at their offsets in ``path``."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as f:
            for name, offset in self._offsets.items():
                f.seek(offset)
                flat = c_contiguous(folded[name]).reshape(-1).view(np.uint8)
                f.write(memoryview(flat))  # type: ignore[arg-type]  # numpy's stubs, Python < 3.12

    def _opened(self, folded: Mapping[str, np.ndarray], handed: list[str], owned: bool
                ) -> BoundEntry:
        """The session over the entry model, with ``handed`` values given as ``OrtValue`` s
        (``owned``: the others are in the data file, onnxruntime's to load)."""
        import onnxruntime as ort

        # no options of the caller's: onnxruntime's warnings are not the caller's to act on
        # (a split base's LoRA defaults: "Initializer ... appears in graph inputs", one per
        # weight); the caller's own options keep their level
        options = session_options(like=self.sess_options,
                                  log_level=3 if self.sess_options is None else None,
                                  libraries=self.custom_op_libraries)
        values = [ort.OrtValue.ortvalue_from_numpy(c_contiguous(folded[n])) for n in handed]
        try:
            session = open_session(self.path, options, self.providers, dict(zip(handed, values)))
        except Exception as e:  # onnxruntime refuses the folded tensors or the options
            raise InputError(f"onnxruntime cannot build the entry session: "
                             f"{printable(one_line(e, 300))}") from None
        native = getattr(session, "_sess", None)
        run = native.run if native is not None and hasattr(native, "run") else session.run
        return BoundEntry(session, run, values, sum(int(folded[n].nbytes) for n in self.bound),
                          owned=owned)


class _Placeholder(ir.ExternalTensor):
    """A reference to a folded tensor in a set's data file (or, handed over, never read):
    written as it is, never read by onnxfold."""

    is_placeholder = True

    def __init__(self, name: str, like: np.ndarray, offset: int) -> None:
        super().__init__(DATA_NAME, offset, like.nbytes, ir.DataType.from_numpy(like.dtype),
                         shape=ir.Shape(like.shape), name=name)
