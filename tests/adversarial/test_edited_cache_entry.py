"""A Session ``cache_dir`` entry edited after it was written is never used (issue 34 item 3).

Each entry carries a SHA-256 of its arrays (names, dtypes, shapes, bytes), checked on read.
Before, only the directory's owner and mode and the arrays' names, dtypes and shapes were
checked: a value changed in place (same layout) became the model's weight, and the folded model
computed something else. Now such an entry is a miss with one ``CorruptCacheWarning``: it is
removed, folded again and stored again, and the result is the fold's.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

from onnxfold.runtime.fold_store import DIGEST, CorruptCacheWarning
from onnxfold.runtime.session import Session
from tests.support import low_rank_models as lr
from tests.support.running import run_ort


def _entry(cache) -> str:
    (found,) = [os.path.join(cache, n) for n in os.listdir(cache) if n.endswith(".npz")]
    return found


def _edit(path: str, keep_digest: bool) -> None:
    """Change one value of the first folded tensor, keeping every name, dtype and shape."""
    with np.load(path) as stored:
        arrays = {k: stored[k].copy() for k in stored.files}
    name = next(k for k in sorted(arrays) if k != DIGEST)
    arrays[name].reshape(-1)[0] += 1.0
    if not keep_digest:
        del arrays[DIGEST]
    np.savez(path, **arrays)


@pytest.mark.parametrize("keep_digest", [True, False], ids=["value-edited", "digest-dropped"])
def test_an_edited_entry_is_a_miss_with_one_warning(tmp_path, keep_digest):
    case = lr.scale_after()
    cache = tmp_path / "cache"
    want = Session(case.model, case.runtime, cache_dir=cache).run(None, case.feeds)[0]
    path = _entry(cache)
    written = os.path.getmtime(path)
    _edit(path, keep_digest)

    session = Session(case.model, case.runtime, cache_dir=cache)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = session.run(None, case.feeds)[0]
        session.run(None, case.feeds)
    corrupt = [w for w in caught if issubclass(w.category, CorruptCacheWarning)]
    assert len(corrupt) == 1, [str(w.message) for w in caught]
    assert "not used" in str(corrupt[0].message)
    np.testing.assert_array_equal(got, want)  # the fold's, not the edited entry's
    assert (session.cache_hits, session.cache_discarded, session.folds) == (0, 1, 1)
    np.testing.assert_allclose(got, run_ort(case.model, case.feeds)[0], rtol=1e-5, atol=1e-5)

    fresh = Session(case.model, case.runtime, cache_dir=cache)  # stored again, intact
    with warnings.catch_warnings():
        warnings.simplefilter("error", CorruptCacheWarning)
        np.testing.assert_array_equal(fresh.run(None, case.feeds)[0], want)
    assert fresh.cache_hits == 1 and os.path.getmtime(path) >= written
