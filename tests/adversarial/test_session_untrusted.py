"""`onnxfold.Session` treats its cache as untrusted input (issue 11: "Session cache files ...").

In-process: a corrupted cache entry is discarded and refolded; a refold works whatever
``sess_options`` the caller passed; errors are ``OnnxfoldError`` subclasses.
"""

import os

import numpy as np
import onnxruntime as ort
import pytest

import onnxfold
from tests.support.external_weights import feeds, forge, ort_run, runtime_proto, save_external
from tests.support.files import assert_no_canary, make_canary

TOL = {"rtol": 1e-5, "atol": 1e-6}


def _cache_files(cache):
    """The cache's entries (its key, ``.onnxfold-key``, is no entry)."""
    return sorted(os.path.join(r, n) for r, _, ns in os.walk(cache) for n in ns
                  if n.endswith(".npz"))


def _truncate(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def _garbage(path):
    with open(path, "wb") as f:
        f.write(os.urandom(1000))


def _keys(path):
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def _wrong_shape(path):
    arrays = _keys(path)
    with open(path, "wb") as f:
        np.savez(f, **{k: np.zeros((3,), a.dtype) for k, a in arrays.items()})


def _wrong_dtype(path):
    arrays = _keys(path)
    with open(path, "wb") as f:
        np.savez(f, **{k: a.astype(np.float64) for k, a in arrays.items()})


def _missing_key(path):
    with open(path, "wb") as f:
        np.savez(f, not_a_fold_output=np.zeros(3, np.float32))


CORRUPTIONS = {"truncated": _truncate, "garbage": _garbage, "wrong-shape": _wrong_shape,
               "wrong-dtype": _wrong_dtype, "missing-key": _missing_key}


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_corrupted_cache_entry_is_refolded(tmp_path, corruption):
    proto = runtime_proto()
    model = save_external(proto, tmp_path / "model")
    cache = tmp_path / "cache"
    f = feeds()
    want = ort_run(proto, f)[0]
    first = onnxfold.Session(str(model), runtime_constants=["s"], cache_dir=str(cache))
    np.testing.assert_allclose(first.run(None, f)[0], want, **TOL)
    files = _cache_files(cache)
    assert files, "the first Session left nothing in cache_dir"
    for path in files:
        CORRUPTIONS[corruption](path)
    second = onnxfold.Session(str(model), runtime_constants=["s"], cache_dir=str(cache))
    np.testing.assert_allclose(second.run(None, f)[0], want, **TOL)
    third = onnxfold.Session(str(model), runtime_constants=["s"], cache_dir=str(cache))
    np.testing.assert_allclose(third.run(None, f)[0], want, **TOL)  # the refold was re-cached


def test_refold_with_callers_sess_options(tmp_path):
    proto = runtime_proto()
    model = save_external(proto, tmp_path / "model")
    session = onnxfold.Session(str(model), runtime_constants=["s"],
                               sess_options=ort.SessionOptions())
    for seed in (1, 2, 3):  # each call changes s: a refold on the same options object
        f = feeds(seed)
        np.testing.assert_allclose(session.run(None, f)[0], ort_run(proto, f)[0], **TOL)
    assert session.folds == 3


def test_session_errors_are_onnxfold_errors(tmp_path):
    canary = make_canary(tmp_path)
    proto = runtime_proto()
    model = save_external(proto, tmp_path / "model")
    session = onnxfold.Session(str(model), runtime_constants=["s"])
    bad = feeds()
    for s in (np.ones(7, np.float32), np.ones(32, np.float64)):  # wrong shape, wrong dtype
        with pytest.raises(onnxfold.OnnxfoldError):
            session.run(None, {**bad, "s": s})
    forge(model, "W", location="../secret/x.bin")
    with pytest.raises(onnxfold.OnnxfoldError):
        onnxfold.Session(str(model), runtime_constants=["s"], cache_dir=str(tmp_path / "c"))
    assert not (tmp_path / "c").exists()
    assert_no_canary(tmp_path, canary)


def test_a_planted_cache_entry_of_many_small_bombs_is_refused_before_it_inflates(tmp_path):
    """40 members of 2 MiB of zeros each pass the per-member bound: the archive's total
    ratio refuses them before a byte is inflated (the entry is discarded, the fold redone)."""
    proto = runtime_proto()
    model = save_external(proto, tmp_path / "model")
    cache = tmp_path / "cache"
    f = feeds()
    want = ort_run(proto, f)[0]
    first = onnxfold.Session(str(model), runtime_constants=["s"], cache_dir=str(cache))
    first.run(None, f)
    zeros = np.zeros(2 << 20, np.uint8)
    for path in _cache_files(cache):
        with open(path, "wb") as out:
            np.savez_compressed(out, **{f"m{i}": zeros for i in range(40)})
    second = onnxfold.Session(str(model), runtime_constants=["s"], cache_dir=str(cache))
    np.testing.assert_allclose(second.run(None, f)[0], want, **TOL)
    assert any("decompression bomb" in event for event in second.cache_events), \
        second.cache_events
