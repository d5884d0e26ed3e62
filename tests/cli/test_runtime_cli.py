"""`onnxfold split` and `onnxfold run` from the shell."""

import json

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests.support import low_rank_models as lr
from tests.support.cli import run_cli
from tests.support.running import run_ort


def _model(path):
    d = 32
    nodes = [helper.make_node("DequantizeLinear", ["wq", "s"], ["w"]),
             helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "wt"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, d]),
                     helper.make_tensor_value_info("wq", TensorProto.INT8, [d, d]),
                     helper.make_tensor_value_info("s", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, d])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((1, d)).astype(np.float32),
            "wq": rng.integers(-100, 100, (d, d)).astype(np.int8),
            "s": np.array(0.02, np.float32)}


def test_split_writes_the_parts_and_manifest(tmp_path):
    _model(str(tmp_path / "m.onnx"))
    proc = run_cli("split", str(tmp_path / "m.onnx"), "--runtime-const", "wq", "s", "-o",
                   str(tmp_path / "parts"))
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((tmp_path / "parts" / "manifest.json").read_text())
    assert [o["name"] for o in manifest["runtime_fold"]["outputs"]] == ["wt"]
    fold = onnx.load(str(tmp_path / "parts" / "runtime_fold.onnx"))
    assert [n.op_type for n in fold.graph.node] == ["DequantizeLinear", "Transpose"]


def test_run_folds_once_and_writes_outputs(tmp_path):
    feeds = _model(str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "feeds.npz", **feeds)
    proc = run_cli("run", str(tmp_path / "m.onnx"), "--runtime-const", "wq", "s", "--inputs",
                   str(tmp_path / "feeds.npz"), "--repeat", "5", "-o", str(tmp_path / "y.npz"))
    assert proc.returncode == 0, proc.stderr
    assert "first call" in proc.stdout and "median" in proc.stdout
    want = (feeds["x"] @ (feeds["wq"].astype(np.float32) * feeds["s"]).T)
    np.testing.assert_allclose(np.load(tmp_path / "y.npz")["y"], want, rtol=1e-5, atol=1e-5)


def test_missing_backend_or_bad_name_is_one_line(tmp_path):
    feeds = _model(str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "feeds.npz", **feeds)
    for args in (["--runtime-const", "nope"], ["--runtime-const", "wq", "--backend",
                                                 "onnx-mlir"]):
        proc = run_cli("run", str(tmp_path / "m.onnx"), "--inputs", str(tmp_path / "feeds.npz"),
                       *args)
        if "onnx-mlir" in args and proc.returncode == 0:
            continue  # onnx-mlir is installed here
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


def test_run_takes_adapter_files_and_compares(tmp_path):
    """``--adapter`` files are the runtime constants; ``--compare`` prints every row with its
    ratio, the Session's costs, what merged and the switching time."""
    case = lr.scale_after()
    onnx.save(case.model, str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "x.npz", x=case.feeds["x"])
    paths = []
    for i in range(2):
        paths += ["--adapter", str(tmp_path / f"a{i}.onnx_adapter")]
        lr.write_adapter(lr.adapter(case, i), paths[-1])
    proc = run_cli("run", str(tmp_path / "m.onnx"), "--inputs", str(tmp_path / "x.npz"), *paths,
                   "--compare", "--repeat", "5", "--threads", "1", "-o", str(tmp_path / "y.npz"))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "low-rank branches merged into 1 weight(s)" in out
    for row in ("onnxruntime, runtime constants as inputs", "as initializers",
                "multi-LoRA (LoraAdapter)", "onnxfold.Session (ort), constants fed",
                "entry session alone", "a Session call / the entry session alone",
                "switching among 2 adapter files"):
        assert row in out, out
    want = {**case.feeds, **lr.adapter(case, 0)}
    np.testing.assert_allclose(np.load(tmp_path / "y.npz")["y"], run_ort(case.model, want)[0],
                               rtol=2e-5, atol=2e-5)


def test_run_leaves_nothing_in_the_temporary_directory(tmp_path):
    """The Session's directory (its entry model) is removed at the end, done or failed (a
    signal during its fold: ``tests/adversarial/test_signals_during_inference.py``)."""
    import os

    feeds = _model(str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "feeds.npz", **feeds)
    np.savez(tmp_path / "bad.npz", **feeds, extra=np.zeros(3, np.float32))  # no such input
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    runs = ((["--runtime-const", "wq", "s", "--inputs", str(tmp_path / "feeds.npz")], 0),
            (["--inputs", str(tmp_path / "bad.npz")], 2))  # onnxruntime refuses the feeds
    for args, code in runs:
        proc = run_cli("run", str(tmp_path / "m.onnx"), *args, env=env)
        assert proc.returncode == code, proc.stderr
        assert [p.name for p in scratch.iterdir() if p.name != ".ses"] == []
