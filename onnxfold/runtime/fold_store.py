"""A Session's folded tensors on disk (``cache_dir``): one ``.npz`` per set of runtime-constant
feeds, each carrying a digest of its own content that is checked on every read.

The file is named by SHA-256 of the fold model and the feeds' content key, so a new process
with the same model and feeds finds it. What it holds becomes the model's weights, so it is
used only when it is exactly what the fold gives: the same names, dtypes and known dims as the
fold's outputs, and the SHA-256 of its arrays (names, dtypes, shapes, bytes) equal to the digest
stored in it when it was written. An entry edited since (a value changed in place, an array
swapped for another of the same shape), truncated or written by anything else is a miss: it is
removed, folded again and stored again, with one :class:`CorruptCacheWarning` saying why. The
directory itself is trusted only as ``onnxfold.io.cache_dirs`` says (the user's own, writable by
no one else).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import onnx_ir as ir

from onnxfold.errors import InputError, OnnxfoldError
from onnxfold.io.cache_dirs import cache_dir_problem, make_cache_dir
from onnxfold.io.feeds import load_arrays
from onnxfold.io.tempfiles import write_atomic
from onnxfold.ir.dtypes import np_dtype
from onnxfold.runtime.feed_check import content_key

DIGEST = "__onnxfold_sha256__"  # the member holding the digest of the others


class CorruptCacheWarning(UserWarning):
    """A cache entry was not what was stored (edited, truncated, foreign); it was not used."""


def entry_path(directory: str, fold_model_key: str, feeds_key: str) -> str:
    """Where the folded tensors of these feeds for this fold model are kept."""
    name = hashlib.sha256(f"{fold_model_key}\0{feeds_key}".encode()).hexdigest()
    return os.path.join(directory, name + ".npz")


def _digest(arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    return np.frombuffer(bytes.fromhex(content_key(arrays)), np.uint8)


def store(path: str, arrays: Mapping[str, np.ndarray]) -> str | None:
    """Write ``arrays`` and their digest at ``path`` (atomically); None, or why it was not
    stored (a cache that cannot be written is only slower)."""
    directory = os.path.dirname(path)
    try:
        if not make_cache_dir(directory):
            return f"not stored: {directory} is not a private directory"
        members = {**arrays, DIGEST: _digest(arrays)}
        # numpy's stub: mypy fears **members could bind savez's allow_pickle: bool
        write_atomic(path, lambda f: np.savez(f, **members))  # type: ignore[arg-type]
    except (OSError, OnnxfoldError) as e:
        return f"not stored: {e}"
    return None


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


def _problem(stored: dict[str, np.ndarray], outputs: Sequence[ir.Value]) -> str | None:
    digest = stored.pop(DIGEST, None)
    if digest is None:
        return "it carries no digest"
    problem = _layout_problem(stored, outputs)
    if problem is not None:
        return problem
    if not np.array_equal(digest, _digest(stored)):
        return "its content differs from the digest stored with it (edited since written)"
    return None


def load(path: str, outputs: Sequence[ir.Value]) -> tuple[dict[str, np.ndarray] | None, str | None]:
    """The folded tensors stored at ``path`` if they are what was stored there and what a fold
    with ``outputs`` gives, and None; else None and why the entry was discarded (None too
    when there is no usable entry at all)."""
    if not os.path.exists(path) or cache_dir_problem(os.path.dirname(path)) is not None:
        return None, None  # missing, or the directory changed since it was checked
    try:
        stored = load_arrays(path)
        problem = _problem(stored, outputs)
    except InputError as e:
        problem = str(e).removeprefix(f"{path}: ")
    if problem is None:
        return stored, None
    warnings.warn(f"onnxfold: cache entry {path} not used: {problem}; folding again",
                  CorruptCacheWarning, stacklevel=5)  # the caller of Session.run
    with contextlib.suppress(OSError):
        os.unlink(path)
    return None, f"discarded {path}: {problem}"
