"""``--shard K/N``: a batch split among N machines, each running the same command with its K.

A model zoo larger than one machine is folded by the schedulers users run already (a
Kubernetes indexed Job, a Slurm array, a CI matrix): N copies of one command, each given its
index K (0 to N-1). Each copy plans the whole batch as one machine would (the same inputs,
the same checks: two inputs that would write one output are refused by every shard alike),
then keeps the models of its shard.

The models are split by their paths as the batch names their outputs: relative to the input
directory a model was found in (``bert/model.onnx`` under ``zoo/``), or the file's name for a
model given by path. Sorted (by their bytes, the same on every platform and locale), the k-th
model goes to shard k mod N: every shard gets as many models as the next, to one, and every
host computes the same split whatever the zoo's mount point, since each sees the same names.
(A hash of each path alone would not depend on the other models, but gave 1, 2 and 5 of 8
models to 3 shards: the array waits for the fullest.)

Each shard's ``--json`` is its manifest: the shard, the models of the whole batch it saw (how
many, and a digest of their sorted paths, so that a step merging the manifests can check that
every shard saw the same zoo and that the shards' models add up to it), the models it took,
and how each ended.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from onnxfold.errors import InputError
from onnxfold.numbers import NumberError, parse_int


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (``--shard index/count``, index from 0)."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``K/N`` with 0 <= K < N (InputError naming the flag otherwise)."""
        index, slash, count = text.partition("/")
        try:  # ASCII digits, as every count (str.isdigit takes any script's digits)
            if not slash:
                raise NumberError(text)
            shard = cls(parse_int(index, minimum=0), parse_int(count, minimum=0))
        except NumberError:
            raise InputError(f"--shard {text}: expected K/N, shard K (from 0) of N, e.g. 0/4"
                             ) from None
        if not 0 <= shard.index < shard.count:
            raise InputError(f"--shard {text}: K must be from 0 to N-1 (a Kubernetes indexed "
                             "Job's JOB_COMPLETION_INDEX, a Slurm array's task id with "
                             "--array=0-(N-1))")
        return shard

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def taken(self, keys: Sequence[str]) -> list[bool]:
        """For each of a batch's ``keys`` (:func:`shard_key`), whether its model is in this
        shard: the k-th in sorted order goes to shard k mod N."""
        rank = {key: k for k, key in enumerate(sorted(set(keys), key=os.fsencode))}
        return [rank[key] % self.count == self.index for key in keys]


def shard_key(relative: str) -> str:
    """The path a model is sharded by: ``relative`` (to its input directory, or the file's
    name) with ``/`` between its parts on every platform."""
    return relative.replace(os.sep, "/")


def digest_of(keys: Sequence[str]) -> str:
    """A digest of a batch's models (their sorted keys): equal on every shard of one zoo."""
    hasher = hashlib.sha256()
    for key in sorted(keys, key=os.fsencode):
        hasher.update(os.fsencode(key) + b"\0")
    return hasher.hexdigest()


def manifest(shard: Shard, keys: Sequence[str], taken: Sequence[str],
             outcomes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A shard's ``--json``: the shard, the whole batch it saw, what it took and how each
    model ended (``outcomes``: the batch's rows, in the order of ``taken``)."""
    return {"shard": str(shard), "index": shard.index, "count": shard.count,
            "batch_models": len(keys), "batch_digest": digest_of(keys),
            "models": list(taken), "outcomes": list(outcomes)}
