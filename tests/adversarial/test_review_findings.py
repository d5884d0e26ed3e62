"""Findings of the security review of the trust boundary (issue 11), one test each.

Each builds its own hostile or careless input in tmp_path. Memory tests measure the child's
peak RSS with ``os.wait4`` (and cap its address space, so a regression fails instead of
taking the machine down).
"""

import os
import resource
import subprocess
import sys
import threading

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxfold
from tests.support.cli_exit import TIMEOUT, assert_ok, assert_one_line_error, run_cli
from tests.support.external_weights import (
    D,
    feeds,
    mlp_proto,
    runtime_proto,
    save_external,
    weights,
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
from tests.support.models import make_model, tensor, vinfo


def _run_measured(args, cwd=None, address_space=None):
    """``python -m onnxfold ARGS`` -> (exit code, stderr, peak RSS of that child in bytes)."""
    def limit():
        if address_space:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    proc = subprocess.Popen([sys.executable, "-m", "onnxfold", *map(str, args)], cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=limit)
    timer = threading.Timer(TIMEOUT, proc.kill)
    timer.start()
    try:
        stderr = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        timer.cancel()
        proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, stderr, usage.ru_maxrss * 1024


# -- every output is compared with every input: the --inputs .npz too ----------------------
def _npz_case(tmp_path):
    model = save_external(runtime_proto(), tmp_path / "model")
    npz = tmp_path / "f.npz"
    np.savez(npz, **feeds())
    return model, npz


def test_run_output_over_its_inputs_npz_is_refused(tmp_path):
    model, npz = _npz_case(tmp_path)
    before = snapshot(tmp_path)
    code, _, err = run_cli(["run", model, "--runtime-const", "s", "--inputs", npz, "-o", npz])
    assert_one_line_error(code, err)
    assert_unchanged(before, snapshot(tmp_path))


def test_compare_json_over_its_inputs_npz_is_refused(tmp_path):
    model, npz = _npz_case(tmp_path)
    before = snapshot(tmp_path)
    code, _, err = run_cli(["compare", model, model, "--inputs", npz, "--json", npz])
    assert_one_line_error(code, err)
    assert_unchanged(before, snapshot(tmp_path))


# -- bounded memory ----------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["optimize", "inspect", "split"])
def test_declared_long_1d_input_does_not_blow_memory(tmp_path, command):
    """A 69-byte model declaring x: float[2^24] and Add(x, x): onnx's shape inference with
    data_prop=True allocates ~150 B per declared element (2.5 GB here, ~40 GB for 2^28)."""
    n = 1 << 24
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "g",
                              [vinfo("x", shape=[n])], [vinfo("y", shape=[n])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save_model(proto, str(path))
    args = {"optimize": ["optimize", path, "-o", tmp_path / "o.onnx"],
            "inspect": ["inspect", path],
            "split": ["split", path, "--runtime-const", "x", "-o", tmp_path / "split"]}[command]
    code, err, peak = _run_measured(args, address_space=6 << 30)
    assert code in (0, 2), err
    assert peak < 1 << 30, f"peak RSS {peak >> 20} MiB for a {os.path.getsize(path)}-byte model"


def test_sparse_initializers_are_bounded_in_total(tmp_path):
    """Five sparse initializers of 256 MiB dense each (a 429-byte file): each is under the
    per-tensor limit, together they need ~6.5 GB of RSS. The dense total must be bounded."""
    dims = [1 << 13, 1 << 13]
    sparse = []
    for k in range(5):
        values = helper.make_tensor(f"S{k}", TensorProto.FLOAT, [1], [1.0])
        indices = helper.make_tensor(f"S{k}_i", TensorProto.INT64, [1], [k])
        sparse.append(helper.make_sparse_tensor(values, indices, dims))
    nodes = [helper.make_node("Identity", [f"S{k}"], [f"y{k}"]) for k in range(5)]
    graph = helper.make_graph(nodes, "g", [], [vinfo(f"y{k}", shape=dims) for k in range(5)],
                              sparse_initializer=sparse)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save_model(proto, str(path))
    code, err, _ = _run_measured(["optimize", path, "-o", tmp_path / "o.onnx"],
                                 address_space=4 << 30)
    assert_one_line_error(code, err)
    assert "sparse" in err, err  # refused by the limit, not by running out of memory
    assert not (tmp_path / "o.onnx").exists()


# -- external data in Constant attributes and subgraphs ---------------------------------------
def _constant_external(model_dir, transpose=True):
    """W is a Constant node whose tensor attribute is external data in w.bin."""
    model_dir.mkdir(parents=True, exist_ok=True)
    w, _ = weights()
    (model_dir / "w.bin").write_bytes(w.tobytes())
    t = onnx.TensorProto(name="Wc", data_type=TensorProto.FLOAT, dims=[D, D],
                         data_location=TensorProto.EXTERNAL)
    t.external_data.add(key="location", value="w.bin")
    nodes = [helper.make_node("Constant", [], ["W"], value=t)]
    if transpose:
        nodes.append(helper.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0]))
    nodes.append(helper.make_node("MatMul", ["x", "Wt" if transpose else "W"], ["y"]))
    proto = make_model(nodes, [vinfo("x", shape=[1, D])], [vinfo("y", shape=[1, D])])
    path = model_dir / "m.onnx"
    onnx.save_model(proto, str(path))
    return path


def _ort(path, feed):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    return sess.run(None, {k: v for k, v in feed.items() if k in names})


def test_output_over_a_constant_attributes_data_file_is_refused(tmp_path):
    model = _constant_external(tmp_path / "model")
    before = snapshot(tmp_path)
    code, _, err = run_cli(["optimize", "m.onnx", "-o", "w.bin"], cwd=model.parent)
    assert_one_line_error(code, err)
    assert_unchanged(before, snapshot(tmp_path))


def test_unfolded_constant_with_external_data_gives_a_valid_output(tmp_path):
    """MatMul(x, Constant) folds nothing: the output still named w.bin beside itself (exit 0,
    onnxruntime cannot load it)."""
    model = _constant_external(tmp_path / "model", transpose=False)
    (tmp_path / "out").mkdir()
    out = tmp_path / "out" / "o.onnx"
    code, _, err = run_cli(["optimize", "m.onnx", "-o", out], cwd=model.parent)
    assert_ok(code, err)
    x = {"x": np.ones((1, D), np.float32)}
    np.testing.assert_allclose(_ort(out, x)[0], _ort(model, x)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("where", ["constant", "subgraph"])
def test_external_data_outside_the_main_graph_loads_from_any_cwd(tmp_path, where):
    """The checker resolves these locations against the working directory (only main-graph
    initializers are hidden from it): valid models are refused unless run from their dir."""
    model_dir = tmp_path / "model"
    if where == "constant":
        model = _constant_external(model_dir)
    else:
        w, _ = weights()
        then = helper.make_graph(
            [helper.make_node("Transpose", ["Wa"], ["Wat"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "Wat"], ["ya"])], "then", [],
            [vinfo("ya", shape=[1, D])], [tensor("Wa", w)])
        other = helper.make_graph([helper.make_node("Identity", ["x"], ["yb"])], "else", [],
                                  [vinfo("yb", shape=[1, D])])
        proto = make_model([helper.make_node("If", ["c"], ["y"], then_branch=then,
                                             else_branch=other)],
                           [vinfo("x", shape=[1, D]), vinfo("c", TensorProto.BOOL, [])],
                           [vinfo("y", shape=[1, D])])
        model_dir.mkdir()
        model = model_dir / "m.onnx"
        onnx.save_model(proto, str(model), save_as_external_data=True, location="w.bin",
                        size_threshold=0)
    out = tmp_path / "o.onnx"
    code, _, err = run_cli(["optimize", model, "-o", out], cwd=tmp_path)
    assert_ok(code, err)
    x = {"x": np.ones((1, D), np.float32), "c": np.array(True)}
    np.testing.assert_allclose(_ort(out, x)[0], _ort(model, x)[0], rtol=1e-5, atol=1e-6)


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
    try:
        onnxfold.io.save_model(loaded, str(out))
    except onnxfold.OnnxfoldError:
        pass
    assert_no_canary(tmp_path, canary)


# -- one-line errors -----------------------------------------------------------------------------
def test_string_tensor_with_external_data_is_one_line(tmp_path):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "w.bin").write_bytes(b"hello world!" * 10)
    t = onnx.TensorProto(name="s", data_type=TensorProto.STRING, dims=[2],
                         data_location=TensorProto.EXTERNAL)
    t.external_data.add(key="location", value="w.bin")
    proto = make_model([helper.make_node("Identity", ["s"], ["y"])], [],
                       [vinfo("y", TensorProto.STRING, [2])], [t])
    onnx.save_model(proto, str(model_dir / "m.onnx"))
    for args in (["optimize", model_dir / "m.onnx", "-o", tmp_path / "o.onnx"],
                 ["inspect", model_dir / "m.onnx"]):
        code, _, err = run_cli(args)
        assert_one_line_error(code, err)


def test_sparse_initializer_of_strings_is_one_line(tmp_path):
    values = helper.make_tensor("S", TensorProto.STRING, [1], [b"a"])
    indices = helper.make_tensor("S_i", TensorProto.INT64, [1], [1])
    graph = helper.make_graph([helper.make_node("Identity", ["S"], ["y"])], "g", [],
                              [vinfo("y", TensorProto.STRING, [4])],
                              sparse_initializer=[helper.make_sparse_tensor(values, indices,
                                                                            [4])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save_model(proto, str(path))
    code, _, err = run_cli(["optimize", path, "-o", tmp_path / "o.onnx"])
    if code == 0:
        return  # densified validly is fine too
    assert_one_line_error(code, err)
