"""A Session's folded tensors on disk (``cache_dir``): one ``.npz`` per set of runtime-constant
feeds, each authenticated as the fold of *these* feeds by *this* fold model.

The file is named by SHA-256 of the fold model and the feeds' content key, so a new process
with the same model and feeds finds it. What it holds becomes the model's weights, so it is used
only when it is exactly what the fold gives:

- it says what it is for: the fold model's SHA-256 and the feeds' content key, both equal to
  the Session's (an entry of another model's cache, or of other feeds renamed or swapped into
  this name, is refused);
- it carries an HMAC-SHA256 of what it is for and of its arrays (names, dtypes, shapes, bytes),
  keyed by the cache directory's secret key (``onnxfold.io.cache_dirs.directory_key``: 32
  random bytes, readable by the user alone): an entry edited and digested again by anything
  without that key, or copied from another cache directory, is refused;
- it has the names, dtypes and known dims of the fold's outputs;
- it is a regular file of the user's in the cache directory itself: opened through the
  directory's descriptor, never through a symbolic link (a link out of the directory is
  refused, the link removed, its target untouched).

A refused entry (also one truncated or not an archive at all) is a miss: it is removed, folded
again and stored again, with one :class:`CorruptCacheWarning` saying why. Someone who can read
the user's files can still forge an entry (the key is one of them); the directory itself is
trusted only as ``onnxfold.io.cache_dirs`` says (the user's own, writable by no one else).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from onnxfold.errors import InputError, OnnxfoldError
from onnxfold.io.cache_dirs import cache_dir_problem, directory_key, make_cache_dir
from onnxfold.io.feeds import read_arrays
from onnxfold.io.opener import open_regular
from onnxfold.io.pinned import PinnedDirectory, PinnedOutput
from onnxfold.io.tempfiles import write_atomic
from onnxfold.ir.dtypes import np_dtype
from onnxfold.runtime.feed_check import content_key

FORMAT = "onnxfold-fold-store/2"
PURPOSE = "__onnxfold_purpose__"  # the member saying what the entry is for (JSON bytes)
DIGEST = "__onnxfold_hmac__"  # the member holding the HMAC of the purpose and the arrays


class CorruptCacheWarning(UserWarning):
    """A cache entry was not what was stored (edited, truncated, foreign); it was not used."""


@dataclass(frozen=True)
class Purpose:
    """What an entry is for: the fold model (SHA-256 of its bytes) and the feeds (their
    content key, ``onnxfold.runtime.feed_check.content_key``)."""

    fold_model: str
    feeds: str

    def name(self) -> str:
        """The entry's file name in the cache directory."""
        return hashlib.sha256(f"{self.fold_model}\0{self.feeds}".encode()).hexdigest() + ".npz"

    def encoded(self) -> bytes:
        return json.dumps({"format": FORMAT, "fold_model": self.fold_model,
                           "feeds": self.feeds}, sort_keys=True).encode()


def _digest(key: bytes, purpose: bytes, arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    """The HMAC-SHA256 (under ``key``) of the purpose and of every array's name, dtype,
    shape and bytes."""
    mac = hmac.new(key, purpose, hashlib.sha256)
    mac.update(b"\0" + bytes.fromhex(content_key(arrays)))
    return np.frombuffer(mac.digest(), np.uint8)


def store(directory: str, purpose: Purpose, arrays: Mapping[str, np.ndarray]) -> str | None:
    """Write ``arrays`` as the entry for ``purpose`` in ``directory`` (atomically); None, or
    why it was not stored (a cache that cannot be written is only slower)."""
    try:
        if not make_cache_dir(directory):
            return f"not stored: {directory} is not a private directory"
        with PinnedDirectory.of(directory, "cache") as pinned:
            key = directory_key(pinned)
            if key is None:
                return f"not stored: {directory} has no key and cannot get one"
            encoded = purpose.encoded()
            members = {**arrays, PURPOSE: np.frombuffer(encoded, np.uint8),
                       DIGEST: _digest(key, encoded, arrays)}
            entry = PinnedOutput(pinned, purpose.name(), pinned.shown(purpose.name()))
            # numpy's stub: mypy fears **members could bind savez's allow_pickle: bool
            write_atomic(entry, lambda f: np.savez(f, **members))  # type: ignore[arg-type]
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


def _purpose_problem(stored: np.ndarray | None, purpose: Purpose) -> str | None:
    """Why the purpose stored in an entry is not ``purpose``."""
    if stored is None:
        return "it does not say what it is for (written by another version of onnxfold)"
    try:
        found = json.loads(stored.tobytes())
    except ValueError:
        return "what it is for is unreadable"
    if not isinstance(found, dict) or found.get("format") != FORMAT:
        return "written in another format"
    if found.get("fold_model") != purpose.fold_model:
        return "it is the entry of another model (another fold model)"
    if found.get("feeds") != purpose.feeds:
        return "it is the entry of other runtime constants (renamed or swapped)"
    return None


def _problem(stored: dict[str, np.ndarray], purpose: Purpose, outputs: Sequence[ir.Value],
             key: bytes | None) -> str | None:
    digest, said = stored.pop(DIGEST, None), stored.pop(PURPOSE, None)
    problem = _purpose_problem(said, purpose)
    if problem is not None:
        return problem
    if digest is None:
        return "it carries no digest"
    if key is None:
        return "the cache directory has no key to check it with"
    problem = _layout_problem(stored, outputs)
    if problem is not None:
        return problem
    assert said is not None  # _purpose_problem read it
    if not hmac.compare_digest(digest.tobytes(), _digest(key, said.tobytes(), stored).tobytes()):
        return "its content differs from the digest stored with it (edited since written, " \
            "or written with another cache directory's key)"
    return None


def _opened(pinned: PinnedDirectory, name: str) -> tuple[int | None, str | None]:
    """The entry's descriptor (None: no entry), or why it is refused unread (a link, a FIFO:
    never followed, never waited on, ``onnxfold.io.opener``)."""
    try:
        fd = open_regular(name, dir_fd=pinned.fd, follow=False)
    except InputError as e:
        problem = str(e).removeprefix(f"{name}: ")
        return None, None if problem == "no such file" else problem
    uid = os.fstat(fd).st_uid
    if hasattr(os, "getuid") and uid != os.getuid():
        os.close(fd)
        return None, f"owned by uid {uid}, not by this user"
    return fd, None


def load(directory: str, purpose: Purpose, outputs: Sequence[ir.Value]
         ) -> tuple[dict[str, np.ndarray] | None, str | None]:
    """The folded tensors stored for ``purpose`` in ``directory`` when they are what was stored
    for it and what a fold with ``outputs`` gives, and None; else None and why the entry was
    discarded (None too when there is no entry at all)."""
    if cache_dir_problem(directory) is not None:
        return None, None  # the directory changed since it was checked
    try:
        pinned = PinnedDirectory.of(directory, "cache")
    except OnnxfoldError:
        return None, None
    name = purpose.name()
    with pinned:
        fd, problem = _opened(pinned, name)
        if fd is None and problem is None:
            return None, None
        if fd is not None:
            with os.fdopen(fd, "rb") as f:
                try:
                    stored = read_arrays(f, pinned.shown(name))
                    problem = _problem(stored, purpose, outputs, directory_key(pinned))
                except InputError as e:
                    problem = str(e).removeprefix(f"{pinned.shown(name)}: ")
                except OSError as e:
                    problem = f"cannot read it ({e.strerror})"
            if problem is None:
                return stored, None
        shown = pinned.shown(name)
        warnings.warn(f"onnxfold: cache entry {shown} not used: {problem}; folding again",
                      CorruptCacheWarning, stacklevel=5)  # the caller of Session.run
        with contextlib.suppress(OSError):
            pinned.unlink(name)  # a link itself, never its target
    return None, f"discarded {shown}: {problem}"
