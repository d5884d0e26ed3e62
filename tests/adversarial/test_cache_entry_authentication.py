"""A Session ``cache_dir`` entry is used only as the fold of the feeds and the model it was
stored for.

Before, an entry's digest covered its own arrays only: an entry swapped with another, edited
and digested again, copied from another model's cache, or a symbolic link out of the
directory was used, and the Session returned another fold's outputs without a word. Now each
entry says what it is for (the fold model and the feeds) under an HMAC keyed by the directory's
secret key, and is opened through the directory, never through a link. Each tampering below
must be refused with one ``CorruptCacheWarning``, folded again (the outputs are the fold's,
bit for bit) and stored again (the next Session hits).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from onnxfold.runtime.feed_check import content_key
from onnxfold.runtime.fold_store import DIGEST, PURPOSE, CorruptCacheWarning
from onnxfold.runtime.session import Session
from tests.support import low_rank_models as lr

CASE = lr.scale_after()
ADAPTERS = [lr.adapter(CASE, 0), lr.adapter(CASE, 1)]


def _feeds(k: int) -> dict[str, np.ndarray]:
    return {**CASE.feeds, **ADAPTERS[k]}


def _other_model() -> onnx.ModelProto:
    """The same graph with another base weight: another fold model."""
    model = onnx.ModelProto()
    model.CopyFrom(CASE.model)
    weight = model.graph.initializer[0]
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) + 1.0, weight.name))
    return model


def _filled(cache: Path, model: onnx.ModelProto = CASE.model
            ) -> tuple[list[np.ndarray], list[Path]]:
    """Each adapter run in a Session of ``model`` over ``cache`` (so each is stored): their
    outputs and their entries."""
    session = Session(model, CASE.runtime, cache_dir=cache)
    outputs, entries = [], []
    for k in range(len(ADAPTERS)):
        before = set(cache.glob("*.npz"))
        outputs.append(session.run(None, _feeds(k))[0])
        (made,) = set(cache.glob("*.npz")) - before
        entries.append(made)
    return outputs, entries


def _swap(entries: list[Path], tmp: Path) -> None:
    a, b = entries
    os.rename(a, tmp / "a")
    os.rename(b, a)
    os.rename(tmp / "a", b)


def _redigest(entries: list[Path], tmp: Path) -> None:
    """Edit a value of adapter 0's entry and digest it again, as its format says, under a key
    that is not the directory's (someone without it)."""
    path = entries[0]
    with np.load(path) as stored:
        arrays = {k: stored[k].copy() for k in stored.files}
    purpose = arrays.pop(PURPOSE)
    arrays.pop(DIGEST)
    name = sorted(arrays)[0]
    arrays[name].reshape(-1)[0] += 1.0
    mac = hmac.new(os.urandom(32), purpose.tobytes(), hashlib.sha256)
    mac.update(b"\0" + bytes.fromhex(content_key(arrays)))
    np.savez(path, **arrays, **{PURPOSE: purpose,
                                DIGEST: np.frombuffer(mac.digest(), np.uint8)})


def _old_digest(entries: list[Path], tmp: Path) -> None:
    """Edit a value and digest the arrays alone again (the format before)."""
    path = entries[0]
    with np.load(path) as stored:
        arrays = {k: stored[k].copy() for k in stored.files if k not in (DIGEST, PURPOSE)}
    name = sorted(arrays)[0]
    arrays[name].reshape(-1)[0] += 1.0
    np.savez(path, **arrays, __onnxfold_sha256__=np.frombuffer(
        bytes.fromhex(content_key(arrays)), np.uint8))


def _another_models_entry(entries: list[Path], tmp: Path) -> None:
    """Adapter 0's entry of another model (the same graph, another weight) copied over this
    one's, with the key of this directory: only what it is for differs."""
    _, theirs = _filled(entries[0].parent, _other_model())
    shutil.copyfile(theirs[0], entries[0])


def _another_directorys_entry(entries: list[Path], tmp: Path) -> None:
    """The same model's and feeds' entry, written in another cache directory (another key)."""
    _, theirs = _filled(tmp / "other-cache")
    assert theirs[0].name == entries[0].name
    shutil.copyfile(theirs[0], entries[0])


def _symlink_out(entries: list[Path], tmp: Path) -> None:
    """The entry moved out of the directory, a symbolic link left in its place."""
    path = entries[0]
    outside = tmp / "outside.npz"
    os.rename(path, outside)
    os.symlink(outside, path)


def _truncated(entries: list[Path], tmp: Path) -> None:
    path = entries[0]
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


TAMPERINGS: dict[str, tuple[Callable[[list[Path], Path], None], str]] = {
    "swapped": (_swap, "other runtime constants"),
    "edited-redigested": (_redigest, "differs from the digest"),
    "edited-old-digest": (_old_digest, "does not say what it is for"),
    "another-models-entry": (_another_models_entry, "another model"),
    "another-directorys-entry": (_another_directorys_entry, "another cache directory's key"),
    "symlink-out": (_symlink_out, "symbolic link"),
    "truncated": (_truncated, "not an .npz archive"),
}


@pytest.mark.parametrize("tampering", list(TAMPERINGS))
def test_a_tampered_entry_is_refused_and_folded_again(tmp_path, tampering):
    cache, scratch = tmp_path / "cache", tmp_path / "scratch"
    scratch.mkdir()
    want, entries = _filled(cache)
    tamper, reason = TAMPERINGS[tampering]
    tamper(entries, scratch)
    outside = {p: p.read_bytes() for p in scratch.rglob("*") if p.is_file()}

    session = Session(CASE.model, CASE.runtime, cache_dir=cache)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = session.run(None, _feeds(0))[0]
    refused = [str(w.message) for w in caught if issubclass(w.category, CorruptCacheWarning)]
    assert len(refused) == 1 and reason in refused[0], refused
    np.testing.assert_array_equal(got, want[0])  # the fold's, not the entry's
    assert (session.cache_hits, session.cache_discarded, session.folds) == (0, 1, 1)
    assert {p: p.read_bytes() for p in outside} == outside  # a link's target is untouched

    fresh = Session(CASE.model, CASE.runtime, cache_dir=cache)  # stored again, whole
    with warnings.catch_warnings():
        warnings.simplefilter("error", CorruptCacheWarning)
        np.testing.assert_array_equal(fresh.run(None, _feeds(0))[0], want[0])
    assert fresh.cache_hits == 1
    with warnings.catch_warnings(record=True) as caught:  # a swap spoiled adapter 1's too
        warnings.simplefilter("always")
        np.testing.assert_array_equal(fresh.run(None, _feeds(1))[0], want[1])
    assert len(caught) == (tampering == "swapped"), [str(w.message) for w in caught]


def test_an_untampered_entry_is_a_hit_in_a_new_process_of_the_same_directory(tmp_path):
    cache = tmp_path / "cache"
    want, _ = _filled(cache)
    session = Session(CASE.model, CASE.runtime, cache_dir=cache)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CorruptCacheWarning)
        got = [session.run(None, _feeds(k))[0] for k in range(len(ADAPTERS))]
    assert session.cache_hits == 2 and session.folds == 2
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    key = cache / ".onnxfold-key"
    assert key.stat().st_mode & 0o777 == 0o600 and key.stat().st_size == 32


@pytest.mark.parametrize("damage", ["readable-by-others", "symlink", "short"])
def test_a_key_that_is_not_one_is_replaced_and_entries_fold_again(tmp_path, damage):
    """The key must be the user's alone: one others may read (or a link, or not 32 bytes) is
    replaced by a new one; the entries it signed then no longer verify (folded again)."""
    cache = tmp_path / "cache"
    want, _ = _filled(cache)
    key = cache / ".onnxfold-key"
    old = key.read_bytes()
    if damage == "readable-by-others":
        key.chmod(0o644)
    elif damage == "symlink":
        outside = tmp_path / "outside-key"
        outside.write_bytes(old)
        outside.chmod(0o600)
        key.unlink()
        key.symlink_to(outside)
    else:
        key.write_bytes(old[:16])
    session = Session(CASE.model, CASE.runtime, cache_dir=cache)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        np.testing.assert_array_equal(session.run(None, _feeds(0))[0], want[0])
    assert len([w for w in caught if issubclass(w.category, CorruptCacheWarning)]) == 1
    assert session.cache_hits == 0
    assert not key.is_symlink() and key.stat().st_mode & 0o777 == 0o600
    assert key.read_bytes() != old and len(key.read_bytes()) == 32
    if damage == "symlink":
        assert (tmp_path / "outside-key").read_bytes() == old  # the link's target untouched


def _key_of(directory: str, barrier, keys) -> None:
    from onnxfold.io.cache_dirs import directory_key
    from onnxfold.io.pinned import PinnedDirectory

    barrier.wait()
    with PinnedDirectory.of(directory) as pinned:
        keys.put(directory_key(pinned))


def test_processes_making_a_cache_key_at_once_get_one_key(tmp_path):
    """Eight processes find no key at once: each used to write its own over the others' (a
    rename), so the entries the first ones stored failed to verify for everyone after ("edited
    since written") and were folded again. Now the first key linked into place is everyone's."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    for round_ in range(20):
        directory = tmp_path / f"cache{round_}"
        directory.mkdir(mode=0o700)
        barrier, keys = context.Barrier(8), context.Queue()
        processes = [context.Process(target=_key_of, args=(str(directory), barrier, keys))
                     for _ in range(8)]
        for process in processes:
            process.start()
        got = {keys.get(timeout=60) for _ in processes}
        for process in processes:
            process.join(60)
        assert got == {(directory / ".onnxfold-key").read_bytes()}
        assert sorted(p.name for p in directory.iterdir()) == [".onnxfold-key"]  # no leftover
