"""Whether a call's runtime-constant feeds are those the active folded set was made from, cheaply
enough for every call, and the content key each folded set is cached under.

A decode step of a small model takes a few milliseconds, and an adapter is a hundred arrays,
so the per-call check may cost a fraction of a microsecond per array (about 18 us for the 112
arrays of a bench decoder's adapter). :class:`FeedWatch`
remembers the arrays of the active set and answers, by ``check`` mode:

- ``"fingerprint"`` (the default): the same array objects as then (held by weak references, so
  a freed array whose memory a new one reuses is never taken for it), with the same bytes at a
  strided sample of 64 positions each (an array refilled in place, as a training step or a
  ``np.copyto`` of another adapter does, differs there). The samples of arrays up to
  ``KEPT_VIEW_BYTES`` are read through views made once (which keep those arrays alive), larger
  ones through views made per call. A change outside the sample is not seen: ``"hash"`` sees
  every byte;
- ``"identity"``: the same array objects, nothing read;
- ``"hash"``: the content key of every byte, each call (about 0.5 ms per MB).

Anything else (another object, a list) is a change: the caller then computes the content key
(:func:`content_key`, SHA-256 of every name, dtype, shape and byte) and looks the set up by it.
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Mapping, Sequence

import numpy as np

from onnxfold.ir.arrays import c_contiguous

CHECKS = ("fingerprint", "hash", "identity", "refuse")
SAMPLES = 64  # positions sampled per array by the fingerprint check
KEPT_VIEW_BYTES = 1 << 20  # arrays up to this size are sampled through views kept


def content_key(feeds: Mapping[str, np.ndarray]) -> str:
    """SHA-256 of the feeds' names, dtypes, shapes and bytes, in name order."""
    digest = hashlib.sha256()
    for name in sorted(feeds):
        array = feeds[name]
        digest.update(f"{name}\0{array.dtype.str}\0{array.shape}\0".encode())
        flat = c_contiguous(array).reshape(-1).view(np.uint8)
        digest.update(memoryview(flat))  # type: ignore[arg-type]  # numpy's stubs, Python < 3.12
    return digest.hexdigest()


def _sampled(array: np.ndarray) -> np.ndarray:
    """A strided view of at most ``SAMPLES`` bytes of a C-contiguous ``array`` (empty: none)."""
    flat = array.reshape(-1).view(np.uint8)
    return flat[::max(1, flat.size // SAMPLES)][:SAMPLES]


class FeedWatch:
    """The feeds a folded set was made from, as far as the check mode needs them."""

    def __init__(self, feeds: Mapping[str, np.ndarray], mode: str, key: str) -> None:
        self.mode = mode
        self.key = key
        self.names: Sequence[str] = sorted(feeds)
        self._refs: list[tuple[str, weakref.ref]] = []
        self._kept: list[np.ndarray] = []  # sample views of small arrays (keep them alive)
        self._later: list[str] = []  # large arrays, sampled per call
        self._sample = b""
        for name in self.names:
            array = feeds[name]
            if not isinstance(array, np.ndarray) or not array.flags.c_contiguous:
                self._refs = []  # not comparable by identity: every call looks it up
                return
            self._refs.append((name, weakref.ref(array)))
            if array.nbytes <= KEPT_VIEW_BYTES:
                self._kept.append(_sampled(array))
            else:
                self._later.append(name)
        self._sample = self._sample_of(feeds) if mode in ("fingerprint", "refuse") else b""

    def _sample_of(self, feeds: Mapping[str, object]) -> bytes:
        later = [_sampled(feeds[n]) for n in self._later]  # type: ignore[arg-type]  # checked
        return np.concatenate([*self._kept, *later]).tobytes() if self._kept or later else b""

    def same(self, feeds: Mapping[str, object]) -> bool:
        """Whether ``feeds`` hold what this set was made from (by the check mode)."""
        if not self._refs:
            return False
        for name, ref in self._refs:
            current = ref()
            if current is None or feeds.get(name) is not current:
                return False
        if self.mode == "identity":
            return True
        if self.mode == "hash":
            return content_key({n: feeds[n] for n in self.names}) == self.key  # type: ignore[misc]
        return self._sample_of(feeds) == self._sample
