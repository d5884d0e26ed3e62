"""``onnxfold IN IN`` (in place) against hostile layouts: what a round of attacks on it found.

A report named after the input's own data file (or a link to it) is refused, never written
over the weights the new model reads; a data file of another model whose name looks like a
leftover of an earlier write (``model.20240101.onnx_data``, the data of
``model.20240101.onnx``) is never removed; a replaced file keeps its permission bits (a private
model stays private), a read-only one is refused; a symlinked input stays inline as its file
is; a symlinked data file keeps the name the model gave it; a path that is no file given twice
is one error line; hard links are not taken for data.
"""

from __future__ import annotations

import os
import stat
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.support.cli import Finished, assert_ok, assert_one_error_line, onnxfold_argv, run_cli


def _model(path, external: bool = False, seed: int = 0):
    """y = x @ (a + b), a and b float32[64, 64]: their Add folds; saved at ``path`` (with
    ``<file>_data`` as optimum names it where ``external``)."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), n)
             for n in "ab"]
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["w"]), helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    if external:
        onnx.save_model(model, str(path), save_as_external_data=True,
                        location=os.path.basename(path) + "_data", size_threshold=0)
    else:
        onnx.save_model(model, str(path))
    return path


def _contents(directory):
    return {p.name: (p.read_bytes() if p.is_file() and not p.is_symlink() else os.readlink(p))
            for p in sorted(directory.iterdir())}


@pytest.mark.parametrize("flag", ["--json", "--report"])
@pytest.mark.parametrize("target", ["data", "link-to-data"])
def test_a_report_on_the_inputs_own_data_is_refused(tmp_path, flag, target):
    _model(tmp_path / "m.onnx", external=True)
    if target == "link-to-data":
        os.symlink("m.onnx_data", tmp_path / "r.out")
    before = _contents(tmp_path)
    path = "m.onnx_data" if target == "data" else "r.out"
    proc = run_cli("m.onnx", "m.onnx", flag, path, cwd=tmp_path)
    assert_one_error_line(proc, "refusing to overwrite an input")
    assert _contents(tmp_path) == before


def test_a_report_on_a_hard_link_of_the_input_is_refused(tmp_path):
    _model(tmp_path / "m.onnx")
    os.link(tmp_path / "m.onnx", tmp_path / "r.json")
    before = _contents(tmp_path)
    proc = run_cli("m.onnx", "m.onnx", "--json", "r.json", cwd=tmp_path)
    assert_one_error_line(proc, "refusing to overwrite an input (m.onnx)")
    assert _contents(tmp_path) == before


@pytest.mark.parametrize("how", ["in place", "-o from elsewhere"])
def test_another_models_data_that_looks_like_a_leftover_is_kept(tmp_path, how):
    other = _model(tmp_path / "model.20240101.onnx", external=True, seed=1)
    kept = {name: (tmp_path / name).read_bytes() for name in
            ("model.20240101.onnx", "model.20240101.onnx_data")}
    (tmp_path / "m.deadbeef.onnx_data").write_bytes(b"a user's file")
    if how == "in place":
        _model(tmp_path / "model.onnx", external=True)
        proc = run_cli("model.onnx", "model.onnx", "-q", cwd=tmp_path)
    else:
        (tmp_path / "src").mkdir()
        _model(tmp_path / "src" / "model.onnx", external=True)
        proc = run_cli("optimize", "src/model.onnx", "-o", "model.onnx", "-q", cwd=tmp_path)
    assert_ok(proc)
    assert {name: (tmp_path / name).read_bytes() for name in kept} == kept
    assert (tmp_path / "m.deadbeef.onnx_data").read_bytes() == b"a user's file"
    onnx.checker.check_model(str(other), full_check=True)


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o755])
def test_a_model_replaced_in_place_keeps_its_permissions(tmp_path, mode):
    _model(tmp_path / "m.onnx", external=True)
    _model(tmp_path / "i.onnx")
    for name in ("m.onnx", "m.onnx_data", "i.onnx"):
        os.chmod(tmp_path / name, mode)
    for name in ("m.onnx", "i.onnx"):
        assert_ok(run_cli(name, name, "-q", cwd=tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["i.onnx", "m.onnx", "m.onnx_data"]
    for name in ("m.onnx", "m.onnx_data", "i.onnx"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == mode, name


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as another user (setpriv)")
def test_a_read_only_model_is_not_replaced_by_a_user_who_may_not_write_it():
    with tempfile.TemporaryDirectory() as made:  # outside pytest's base (only root enters it)
        _read_only_refused(Path(made))


def _read_only_refused(tmp_path: Path) -> None:
    tmp_path.chmod(0o777)  # a directory anyone may write to, a file only its owner may
    _model(tmp_path / "r.onnx")
    os.chmod(tmp_path / "r.onnx", 0o444)
    before = _contents(tmp_path)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    try:
        done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                               *onnxfold_argv("r.onnx", "r.onnx")], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
    except FileNotFoundError:
        pytest.skip("setpriv is not installed")
    assert_one_error_line(Finished(done.returncode, done.stdout, done.stderr), "read-only")
    assert _contents(tmp_path) == before


def test_a_symlinked_input_stays_inline_as_its_file_is(tmp_path):
    _model(tmp_path / "real.onnx")
    os.symlink("real.onnx", tmp_path / "link.onnx")
    assert_ok(run_cli("link.onnx", "link.onnx", "-q", cwd=tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["link.onnx", "real.onnx"]
    assert os.path.islink(tmp_path / "link.onnx")
    model = onnx.load(str(tmp_path / "real.onnx"), load_external_data=False)
    assert not any(t.data_location == TensorProto.EXTERNAL for t in model.graph.initializer)


def test_a_symlinked_data_file_keeps_its_name(tmp_path):
    _model(tmp_path / "model.onnx", external=True)
    (tmp_path / "blobs").mkdir()
    os.replace(tmp_path / "model.onnx_data", tmp_path / "blobs" / "DATA")
    os.symlink("blobs/DATA", tmp_path / "model.onnx_data")
    blob = (tmp_path / "blobs" / "DATA").read_bytes()
    assert_ok(run_cli("model.onnx", "model.onnx", "-q", cwd=tmp_path))
    model = onnx.load(str(tmp_path / "model.onnx"), load_external_data=False)
    locations = {e.value for t in model.graph.initializer for e in t.external_data
                 if e.key == "location"}
    assert locations == {"model.onnx_data"}
    assert (tmp_path / "blobs" / "DATA").read_bytes() == blob  # a blob others may share
    onnx.checker.check_model(str(tmp_path / "model.onnx"), full_check=True)


@pytest.mark.parametrize("what", ["fifo", "missing", "dangling"])
def test_a_path_that_is_no_file_given_twice_is_one_error_line(tmp_path, what):
    path = tmp_path / "p.onnx"
    if what == "fifo":
        os.mkfifo(path)
    elif what == "dangling":
        os.symlink("nowhere.onnx", path)
    proc = run_cli("p.onnx", "p.onnx", cwd=tmp_path)
    assert_one_error_line(proc, "p.onnx")


def test_a_missing_input_before_a_new_output_is_one_error_line(tmp_path):
    proc = run_cli("missing.onnx", "out.onnx", cwd=tmp_path)
    assert_one_error_line(proc, "missing.onnx: no such file")
    assert os.listdir(tmp_path) == []


def test_two_hard_links_of_one_model_are_not_taken_for_its_data(tmp_path):
    _model(tmp_path / "a.onnx")
    os.link(tmp_path / "a.onnx", tmp_path / "b.onnx")
    proc = run_cli("a.onnx", "b.onnx", "-q", cwd=tmp_path)
    assert_ok(proc)
    assert proc.stderr == ""
    assert sorted(os.listdir(tmp_path)) == ["a.onnx", "b.onnx"]
