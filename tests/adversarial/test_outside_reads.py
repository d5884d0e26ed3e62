"""External data never reads outside the model directory (issue 11: "Reads outside the model").

A canary file sits beside the model directory; every trick points a weight at it. Each command
must refuse with one line (exit 2), write nothing, and the canary's bytes must appear nowhere.
"""

import contextlib
import os

import numpy as np
import onnx
import pytest

import onnxfold
from tests.support.cli import REFUSAL_TIMEOUT, assert_one_error_line, run_cli
from tests.support.external_weights import (
    D,
    feeds,
    forge,
    mlp_proto,
    runtime_proto,
    save_external,
)
from tests.support.files import (
    CANARY,
    CANARY_PROBE,
    PASSWD_PROBE,
    assert_no_canary,
    assert_unchanged,
    make_canary,
    snapshot,
)

UP = "../" * 24  # more than enough to reach / from any tmp_path


def _point_at_canary(trick, model_dir, canary):
    """The location string for W after setting up ``trick`` inside ``model_dir``."""
    if trick == "relative":
        return "../secret/x.bin"
    if trick == "nested":
        (model_dir / "sub").mkdir()
        return "sub/../../secret/x.bin"
    if trick == "absolute":
        return str(canary)
    if trick == "symlink":
        os.symlink(canary, model_dir / "evil.bin")
        return "evil.bin"
    if trick == "relative-symlink":
        os.symlink("../secret/x.bin", model_dir / "evil.bin")
        return "evil.bin"
    if trick == "hardlink":
        try:
            os.link(canary, model_dir / "evil.bin")
        except OSError as e:
            pytest.skip(f"no hard link possible here: {e}")
        return "evil.bin"
    if trick in ("hardlink-variant", "hardlink-variant-pair"):
        # the pair of names a kill may leave (m.onnx.data and a variant of it) is accepted
        # only where it is the file's only two names: here the canary's own name is a third
        names = ["w.data", "w.onnxfold-3f9a0c12.data"][trick == "hardlink-variant":]
        try:
            for name in names:
                os.link(canary, model_dir / name)
        except OSError as e:
            pytest.skip(f"no hard link possible here: {e}")
        return "w.onnxfold-3f9a0c12.data"
    raise AssertionError(trick)


@pytest.mark.parametrize("trick", ["relative", "nested", "absolute", "symlink",
                                   "relative-symlink", "hardlink", "hardlink-variant",
                                   "hardlink-variant-pair"])
def test_optimize_refuses_weights_outside_the_model_dir(tmp_path, trick):
    canary = make_canary(tmp_path)
    model_dir = tmp_path / "model"
    model = save_external(mlp_proto(), model_dir)
    forge(model, "W", location=_point_at_canary(trick, model_dir, canary), offset=0,
          length=4096)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    before = snapshot(model_dir, out_dir, canary.parent)
    done = run_cli("optimize", model, "-o", out_dir / "o.onnx", timeout=REFUSAL_TIMEOUT)
    assert_one_error_line(done)
    assert_unchanged(before, snapshot(model_dir, out_dir, canary.parent))
    assert_no_canary(tmp_path, canary)


@pytest.mark.parametrize("location", [UP + "etc/passwd", "/etc/passwd"],
                         ids=["dotdot-etc-passwd", "absolute-etc-passwd"])
def test_optimize_refuses_etc_passwd(tmp_path, location):
    if not os.path.isfile("/etc/passwd") or os.path.getsize("/etc/passwd") < 128:
        pytest.skip("no /etc/passwd of 128 bytes here")
    model_dir = tmp_path / "model"
    model = save_external(mlp_proto(), model_dir)
    forge(model, "b", location=location, offset=0, length=128)  # b is 32 float32
    before = snapshot(model_dir)
    done = run_cli("optimize", model, "-o", tmp_path / "o.onnx", timeout=REFUSAL_TIMEOUT)
    assert_one_error_line(done)
    assert not (tmp_path / "o.onnx").exists()
    assert_unchanged(before, snapshot(model_dir))
    assert_no_canary(tmp_path, probes=(PASSWD_PROBE,))


COMMANDS = ["optimize-ext-json", "split", "run-cache", "compare", "inspect"]


@pytest.mark.parametrize("trick", ["relative", "symlink"])
@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_refuses_weights_outside_the_model_dir(tmp_path, command, trick):
    canary = make_canary(tmp_path)
    model_dir = tmp_path / "model"
    clean = save_external(runtime_proto(), model_dir, name="clean.onnx", location="clean.bin")
    model = save_external(runtime_proto(), model_dir)
    forge(model, "W", location=_point_at_canary(trick, model_dir, canary), offset=0,
          length=4096)
    out = tmp_path / "out"
    out.mkdir()
    np.savez(out / "feeds.npz", **feeds(s_ones=True))  # s = 1: the folded Ws is W's bytes
    args = {
        "optimize-ext-json": ["optimize", model, "-o", out / "o.onnx", "--external-data", "yes",
                              "--json", out / "r.json"],
        "split": ["split", model, "--runtime-const", "s", "-o", out / "parts"],
        "run-cache": ["run", model, "--runtime-const", "s", "--inputs", out / "feeds.npz",
                      "-o", out / "y.npz", "--cache-dir", out / "cache"],
        "compare": ["compare", clean, model, "--json", out / "c.json"],
        "inspect": ["inspect", model],
    }[command]
    before = snapshot(model_dir, out, canary.parent)
    done = run_cli(*args, timeout=REFUSAL_TIMEOUT)
    assert_one_error_line(done)
    assert_unchanged(before, snapshot(model_dir, out, canary.parent))
    assert_no_canary(tmp_path, canary)


# -- Session given an onnx.ModelProto -------------------------------------------------------
def test_session_on_a_modelproto_never_reads_outside(tmp_path, monkeypatch):
    """A ModelProto has no directory: its external data must be refused (or checked against
    the working directory with the same rule), never read from ../ or absolute paths."""
    canary = make_canary(tmp_path)
    path = save_external(mlp_proto(), tmp_path / "work" / "m")
    proto = onnx.load(str(path), load_external_data=False)
    for t in proto.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = "../secret/x.bin" if t.name == "W" else "/etc/passwd"
            if e.key == "offset":
                e.value = "0"
    monkeypatch.chdir(tmp_path / "work")
    with pytest.raises(onnxfold.OnnxfoldError):
        session = onnxfold.Session(proto, [])
        session.run(None, {"x": np.ones((1, D), np.float32)})
    assert_no_canary(tmp_path, canary, probes=(CANARY_PROBE, PASSWD_PROBE))


# -- time of check, time of use ----------------------------------------------------------------
def test_data_file_swapped_for_a_symlink_after_the_check_is_not_read(tmp_path):
    """The checked file is reopened by name at read time: replacing it with a symlink to a
    file outside (a writable model directory, during a long fold) redirects the read."""
    canary = make_canary(tmp_path)
    canary.write_bytes(CANARY + bytes(4096))
    model = save_external(mlp_proto(), tmp_path / "model")
    loaded = onnxfold.io.load_model(str(model))
    os.replace(model.parent / "w.bin", tmp_path / "w.old")
    os.symlink(canary, model.parent / "w.bin")
    out = tmp_path / "o.onnx"
    with contextlib.suppress(onnxfold.OnnxfoldError):
        onnxfold.io.save_model(loaded, str(out))
    assert_no_canary(tmp_path, canary)
