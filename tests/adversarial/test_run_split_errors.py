"""`run` and `split` fail with one line, never a traceback (issue 11: "Tracebacks instead of ...").

The model takes its weights W [32, 32] and b [32] as graph inputs (runtime constants).
"""

import os

import numpy as np
import pytest

from tests.support.cli import REFUSAL_TIMEOUT, assert_ok, assert_one_error_line, run_cli
from tests.support.external_weights import D, ort_run, save_inline, weights, weights_as_inputs_proto
from tests.support.files import assert_unchanged, snapshot

TOL = {"rtol": 1e-5, "atol": 1e-6}


@pytest.fixture
def model(tmp_path):
    """(model path, feeds); the feeds are in tmp_path/feeds.npz."""
    proto = weights_as_inputs_proto()
    path = save_inline(proto, tmp_path / "model")
    w, b = weights()
    f = {"x": np.random.default_rng(1).standard_normal((1, D)).astype(np.float32), "W": w, "b": b}
    np.savez(tmp_path / "feeds.npz", **f)
    return path, f


def _with_feeds(tmp_path, f, **changes):
    np.savez(tmp_path / "bad.npz", **{**f, **changes})
    return tmp_path / "bad.npz"


def _regular_file(tmp_path, name):
    (tmp_path / name).write_bytes(b"user data")
    return tmp_path / name


BAD = {
    "run-o-missing-dir": lambda t, f: ["--inputs", t / "feeds.npz", "-o", t / "nodir" / "y.npz"],
    "run-inputs-npy": lambda t, f: ["--inputs", _npy(t, f)],
    "run-wrong-dtype": lambda t, f: ["--inputs",
                                     _with_feeds(t, f, W=f["W"].astype(np.float64))],
    "run-wrong-shape": lambda t, f: ["--inputs", _with_feeds(t, f, W=f["W"][:, :16])],
    "run-cache-dir-is-a-file": lambda t, f: ["--inputs", t / "feeds.npz",
                                             "--cache-dir", _regular_file(t, "cache")],
}


def _npy(tmp_path, f):
    np.save(tmp_path / "x.npy", f["x"])
    return tmp_path / "x.npy"


@pytest.mark.parametrize("case", list(BAD))
def test_bad_run_arguments_are_one_line(tmp_path, model, case):
    path, f = model
    extra = BAD[case](tmp_path, f)
    before = snapshot(tmp_path)
    done = run_cli("run", path, "--runtime-const", "W", "b", *extra, timeout=REFUSAL_TIMEOUT)
    assert_one_error_line(done)
    assert_unchanged(before, snapshot(tmp_path))


def test_split_into_an_existing_file_is_one_line(tmp_path, model):
    path, _ = model
    target = _regular_file(tmp_path, "parts")
    before = snapshot(tmp_path)
    done = run_cli("split", path, "--runtime-const", "W", "b", "-o", target,
                   timeout=REFUSAL_TIMEOUT)
    assert_one_error_line(done)
    assert_unchanged(before, snapshot(tmp_path))


def test_run_without_runtime_constants_just_runs(tmp_path, model):
    path, f = model
    done = run_cli("run", path, "--inputs", tmp_path / "feeds.npz", "-o", tmp_path / "y.npz",
                   timeout=REFUSAL_TIMEOUT)
    assert_ok(done)
    np.testing.assert_allclose(np.load(tmp_path / "y.npz")["y"], ort_run(path, f)[0], **TOL)


def test_corrupted_cache_dir_is_refolded(tmp_path, model):
    path, f = model
    cache = tmp_path / "cache"
    args = ["run", path, "--runtime-const", "W", "b", "--inputs", tmp_path / "feeds.npz",
            "--cache-dir", cache]
    done = run_cli(*args, "-o", tmp_path / "y1.npz", timeout=REFUSAL_TIMEOUT)
    assert_ok(done)
    files = [os.path.join(r, n) for r, _, ns in os.walk(cache) for n in ns]
    assert files, "the first run left nothing in --cache-dir"
    for name in files:
        with open(name, "wb") as fh:
            fh.write(os.urandom(257))
    done = run_cli(*args, "-o", tmp_path / "y2.npz", timeout=REFUSAL_TIMEOUT)
    assert_ok(done)
    y1, y2 = np.load(tmp_path / "y1.npz")["y"], np.load(tmp_path / "y2.npz")["y"]
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_allclose(y1, ort_run(path, f)[0], **TOL)
