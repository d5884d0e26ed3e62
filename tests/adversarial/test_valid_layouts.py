"""Valid layouts onnxruntime loads must load (issue 11: "Valid layouts refused with a traceback").

The trust boundary must not refuse: the Hugging Face hub cache (`snapshots/REV/model.onnx ->
../../blobs/HASH`, data likewise), a model file with a second hard link, a model run from
another working directory, `./w.bin` locations, a 250-character output name.
"""

import os

import numpy as np
import onnx
import pytest

from tests.support.cli import REFUSAL_TIMEOUT, assert_ok, run_cli
from tests.support.external_weights import (
    feeds,
    forge,
    ort_run,
    runtime_proto,
    save_external,
    save_inline,
)
from tests.support.files import assert_unchanged, sha256, snapshot

TOL = {"rtol": 1e-5, "atol": 1e-6}


def _hub(tmp_path, proto, external):
    """The hub cache layout: every file a blob named by its hash, reached through symlinks."""
    staging = tmp_path / "staging"
    if external:
        save_external(proto, staging, name="model.onnx", location="model.onnx.data")
    else:
        save_inline(proto, staging, name="model.onnx")
    blobs = tmp_path / "hub" / "blobs"
    snap = tmp_path / "hub" / "snapshots" / "0123abcd"
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    for f in sorted(staging.iterdir()):
        digest = sha256(f)
        os.replace(f, blobs / digest)
        os.symlink(f"../../blobs/{digest}", snap / f.name)
    staging.rmdir()
    return snap / "model.onnx"


@pytest.mark.parametrize("command,external", [("optimize", True), ("optimize", False),
                                              ("run", True)],
                         ids=["optimize-external", "optimize-inline", "run-external"])
def test_hub_cache_layout_loads(tmp_path, command, external):
    proto = runtime_proto()
    model = _hub(tmp_path, proto, external)
    out = tmp_path / "out"
    out.mkdir()
    f = feeds()
    np.savez(out / "feeds.npz", **f)
    before = snapshot(tmp_path / "hub")
    if command == "optimize":
        done = run_cli("optimize", model, "-o", out / "f.onnx", timeout=REFUSAL_TIMEOUT)
        assert_ok(done)
        got = ort_run(out / "f.onnx", f)[0]
    else:
        done = run_cli("run", model, "--runtime-const", "s", "--inputs", out / "feeds.npz", "-o",
                       out / "y.npz", timeout=REFUSAL_TIMEOUT)
        assert_ok(done)
        got = np.load(out / "y.npz")["y"]
    np.testing.assert_allclose(got, ort_run(proto, f)[0], **TOL)
    assert_unchanged(before, snapshot(tmp_path / "hub"))


@pytest.mark.parametrize("external", [True, False], ids=["external", "inline"])
def test_model_file_with_a_second_hard_link_folds(tmp_path, external):
    proto = runtime_proto()
    save = save_external if external else save_inline
    model = save(proto, tmp_path / "model")
    os.link(model, tmp_path / "model" / "m-link.onnx")
    before = snapshot(tmp_path / "model")
    done = run_cli("optimize", model, "-o", tmp_path / "f.onnx", timeout=REFUSAL_TIMEOUT)
    assert_ok(done)
    f = feeds()
    np.testing.assert_allclose(ort_run(tmp_path / "f.onnx", f)[0], ort_run(proto, f)[0], **TOL)
    assert_unchanged(before, snapshot(tmp_path / "model"))


def test_dot_slash_location_loads(tmp_path):
    proto = runtime_proto()
    model = save_external(proto, tmp_path / "model")
    forge(model, "W", location="./w.bin")
    done = run_cli("optimize", model, "-o", tmp_path / "f.onnx", timeout=REFUSAL_TIMEOUT)
    assert_ok(done)
    f = feeds()
    np.testing.assert_allclose(ort_run(tmp_path / "f.onnx", f)[0], ort_run(proto, f)[0], **TOL)


def test_split_from_another_working_directory(tmp_path):
    """Relative paths from cwd = tmp_path: w.bin is beside the model, not in the cwd."""
    save_external(runtime_proto(), tmp_path / "model")
    done = run_cli("split", "model/m.onnx", "--runtime-const", "s", "-o", "parts", cwd=tmp_path,
                   timeout=REFUSAL_TIMEOUT)
    assert_ok(done)
    for name in ("entry.onnx", "runtime_fold.onnx", "manifest.json"):
        assert (tmp_path / "parts" / name).is_file(), name
    onnx.checker.check_model(str(tmp_path / "parts" / "runtime_fold.onnx"))


def test_run_from_another_working_directory(tmp_path):
    """Absolute paths from cwd = /."""
    proto = runtime_proto()
    model = save_external(proto, tmp_path / "model")
    f = feeds()
    np.savez(tmp_path / "feeds.npz", **f)
    done = run_cli("run", model, "--runtime-const", "s", "--inputs", tmp_path / "feeds.npz", "-o",
                   tmp_path / "y.npz", cwd="/", timeout=REFUSAL_TIMEOUT)
    assert_ok(done)
    np.testing.assert_allclose(np.load(tmp_path / "y.npz")["y"], ort_run(proto, f)[0], **TOL)


@pytest.mark.parametrize("external", ["no", "yes"])
def test_output_name_of_250_characters(tmp_path, external):
    proto = runtime_proto()
    model = save_inline(proto, tmp_path / "model")
    out = tmp_path / ("a" * 245 + ".onnx")
    assert len(out.name) == 250
    done = run_cli("optimize", model, "-o", out, "--external-data", external,
                   timeout=REFUSAL_TIMEOUT)
    assert_ok(done)
    expected = {"model", out.name} | ({out.name + ".data"} if external == "yes" else set())
    assert set(os.listdir(tmp_path)) == expected
    f = feeds()
    np.testing.assert_allclose(ort_run(out, f)[0], ort_run(proto, f)[0], **TOL)
