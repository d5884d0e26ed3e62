"""Cache directories are trusted only when absolute, the user's own and writable by no one else.

An empty ``XDG_CACHE_HOME`` put the IREE module cache (native code run in-process) under
``./onnxfold/iree`` of whatever the current directory was, and later runs took hits from there.
Any directory that fails the rule is neither read nor written, with one warning; the work is
then just done again.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

import onnxfold
from onnxfold.io.cache_dirs import (
    UntrustedCacheWarning,
    cache_dir_problem,
    make_cache_dir,
    trusted_cache_dir,
    user_cache_home,
)

AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
NOBODY = 65534


def _private(path):
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def _refused(path) -> str:
    with pytest.warns(UntrustedCacheWarning) as caught:
        assert trusted_cache_dir(str(path), "test cache") is None
    assert len(caught) == 1
    return str(caught[0].message)


def test_a_private_directory_and_a_missing_one_below_it_are_trusted(tmp_path):
    home = _private(tmp_path / "home")
    assert cache_dir_problem(str(home)) is None
    assert cache_dir_problem(str(home / "onnxfold" / "iree")) is None
    assert make_cache_dir(str(home / "onnxfold" / "iree"))
    for made in (home / "onnxfold", home / "onnxfold" / "iree"):
        assert made.stat().st_mode & 0o777 == 0o700


def test_a_relative_directory_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(_private(tmp_path / "cwd"))
    assert "not an absolute path" in _refused("cache")


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702])
def test_a_directory_others_can_write_is_refused(tmp_path, mode):
    shared = _private(tmp_path / "shared")
    shared.chmod(mode)
    assert "writable by group or others" in _refused(shared)


def test_a_missing_directory_under_one_others_can_write_is_refused(tmp_path):
    shared = _private(tmp_path / "shared")
    shared.chmod(0o777)  # not sticky: anyone could rename what we create here
    assert "above it is writable" in _refused(shared / "cache")
    assert not make_cache_dir(str(shared / "cache")) or \
        cache_dir_problem(str(shared / "cache")) is not None


def test_a_missing_directory_under_a_sticky_shared_one_is_trusted(tmp_path):
    sticky = _private(tmp_path / "sticky")
    sticky.chmod(0o1777)  # like /tmp: others cannot rename or remove our entries
    assert cache_dir_problem(str(sticky / "mine")) is None


@pytest.mark.skipif(not AS_ROOT, reason="chown to another user needs root")
def test_a_directory_of_another_user_is_refused(tmp_path):
    theirs = _private(tmp_path / "theirs")
    os.chown(theirs, NOBODY, NOBODY)
    assert "not by this user" in _refused(theirs)


@pytest.mark.parametrize("value", ["", None])
def test_an_empty_or_unset_xdg_cache_home_means_the_home_cache(tmp_path, monkeypatch, value):
    monkeypatch.setenv("HOME", str(tmp_path))
    if value is None:
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_CACHE_HOME", value)
    assert user_cache_home() == os.path.join(str(tmp_path), ".cache")


# -- the caches themselves ---------------------------------------------------------------------
def _runtime_constant_model():
    """y = x + rc @ W: the fold computes rc @ W once per runtime constant rc."""
    w = helper.make_tensor("W", TensorProto.FLOAT, [4, 4], np.eye(4, dtype=np.float32) * 2)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["rc", "W"], ["m"]),
         helper.make_node("Add", ["x", "m"], ["y"])],
        "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4, 4]) for n in ("x", "rc")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run_session(cache_dir):
    session = onnxfold.Session(_runtime_constant_model(), runtime_constants=["rc"],
                               cache_dir=cache_dir)
    x = np.ones((4, 4), np.float32)
    np.testing.assert_array_equal(session.run(None, {"x": x, "rc": x})[0], x + 2)
    return session


@pytest.mark.parametrize("how", ["world-writable", "other owner"])
def test_a_session_cache_that_is_not_private_is_neither_read_nor_written(tmp_path, how):
    if how == "other owner" and not AS_ROOT:
        pytest.skip("chown to another user needs root")
    cache = _private(tmp_path / "cache")
    if how == "world-writable":
        cache.chmod(0o777)
    else:
        os.chown(cache, NOBODY, NOBODY)
    with pytest.warns(UntrustedCacheWarning, match="Session cache_dir"):
        session = _run_session(str(cache))
    assert session.cache_dir is None
    assert list(cache.iterdir()) == []


def test_a_relative_session_cache_is_the_callers_directory_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(_private(tmp_path / "work"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UntrustedCacheWarning)
        session = _run_session("cache")
    assert session.cache_dir == str(tmp_path / "work" / "cache")
    stored = sorted(os.listdir(session.cache_dir))  # the folded tensors, and the key
    assert len(stored) == 2 and stored[0] == ".onnxfold-key" and stored[1].endswith(".npz")
    assert (tmp_path / "work" / "cache").stat().st_mode & 0o777 == 0o700


def _iree_backend():
    pytest.importorskip("iree.compiler", reason="IREE is not installed")
    from onnxfold.runtime.backends.iree_backend import Backend

    return Backend


def load_catalogue():
    """The installed rules (what ``get_backend`` hands a backend by default)."""
    from onnxfold.declare.catalogue import load_catalogue as installed

    return installed()


@pytest.mark.parametrize("xdg", ["", "relative/cache"])
def test_the_iree_cache_never_lands_in_the_current_directory(tmp_path, monkeypatch, xdg):
    backend_class = _iree_backend()
    cwd = _private(tmp_path / "cwd")
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("HOME", str(_private(tmp_path / "home")))
    monkeypatch.setenv("XDG_CACHE_HOME", xdg)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        backend = backend_class(load_catalogue())
    refused = [w for w in caught if issubclass(w.category, UntrustedCacheWarning)]
    if xdg:
        assert backend.cache_dir is None and len(refused) == 1
    else:
        assert backend.cache_dir == str(tmp_path / "home" / ".cache" / "onnxfold" / "iree")
        assert refused == []
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Neg", ["a"], ["b"])], "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [4])]),
        opset_imports=[helper.make_opsetid("", 17)])
    backend.prepare(ir.from_proto(model))
    np.testing.assert_array_equal(backend.run({"a": np.ones(4, np.float32)})["b"], -np.ones(4))
    assert list(cwd.iterdir()) == [], "nothing written under the current directory"


def test_a_directory_reached_through_a_link_is_judged_where_it_is(tmp_path):
    """A private link to a directory under one others can write: refused (the link's own
    parent was judged, not the real one: another user could rename the real one away)."""
    shared = _private(tmp_path / "shared")
    shared.chmod(0o777)
    real = _private(shared / "cache")
    home = _private(tmp_path / "home")
    (home / "cache").symlink_to(real)
    assert "above it is writable" in _refused(home / "cache")
