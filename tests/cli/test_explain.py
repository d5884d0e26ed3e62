"""`onnxfold optimize --explain`, the JSON report's declined nodes, and provenance metadata."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.support.cli import run_cli
from tests.support.models import make_model, tensor, vinfo
from tests.support.running import run_ort

PROVENANCE = "onnxfold.folded_from"
V, D = 1024, 288  # a tied embedding of 1.125 MiB: its transpose would duplicate it


def _model():
    rng = np.random.default_rng(0)
    wte = rng.standard_normal((V, D)).astype(np.float32)
    wbig = rng.standard_normal((32, 32)).astype(np.float32)  # 4 KiB: streamed by the writer
    wq = rng.integers(-128, 127, (32, 8)).astype(np.int8)
    nodes = [helper.make_node("Gather", ["wte", "ids"], ["h"], name="embed"),
             helper.make_node("Transpose", ["wte"], ["wteT"], perm=[1, 0], name="tied_T"),
             helper.make_node("MatMul", ["h", "wteT"], ["logits"], name="lm_head"),
             helper.make_node("Transpose", ["wbig"], ["wbT"], perm=[1, 0], name="tr_big"),
             helper.make_node("Mul", ["wbT", "two"], ["wb2"], name="mul_big"),
             helper.make_node("MatMul", ["x", "wb2"], ["y"], name="mm"),
             helper.make_node("Neg", ["c"], ["nc"], name="neg_small"),
             helper.make_node("Add", ["y", "nc"], ["z"], name="add"),
             helper.make_node("DequantizeLinear", ["wq", "scale"], ["wd"], name="dq_w"),
             helper.make_node("MatMul", ["z", "wd"], ["q"], name="mm_q")]
    return make_model(
        nodes, [vinfo("ids", TensorProto.INT64, [2]), vinfo("x", shape=[1, 32])],
        [vinfo("logits", shape=[2, V]), vinfo("q", shape=[1, 8])],
        [tensor("wte", wte), tensor("wbig", wbig), tensor("two", np.float32(2)),
         tensor("c", np.arange(32, dtype=np.float32)), tensor("wq", wq),
         tensor("scale", np.float32(0.05))])


@pytest.fixture(scope="module")
def explained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("explain")
    src, out, report = tmp / "in.onnx", tmp / "out.onnx", tmp / "report.json"
    onnx.save(_model(), str(src))
    proc = run_cli("optimize", str(src), "-o", str(out), "--explain", "--json", str(report),
                   timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc, src, out, json.loads(report.read_text())


def test_explain_groups_reasons_and_names_nodes(explained):
    proc, *_ = explained
    lines = proc.stdout.splitlines()
    assert "growth: 1 node(s)" in lines
    assert "qdq policy: 1 node(s)" in lines
    growth = lines.index("growth: 1 node(s)")
    assert lines[growth + 1].startswith("  Transpose tied_T: growth: a 1.1 MiB copy of a "
                                        "constant; its source stays in use")
    # what leaving it costs, and the flag that trades the size for the speed
    assert "else it runs on every call; --allow-growth stores it (+1.1 MiB)" in \
        lines[growth + 1]
    qdq = lines.index("qdq policy: 1 node(s)")
    assert lines[qdq + 1].startswith("  DequantizeLinear dq_w: qdq policy")
    assert "not folded   2 (growth: 1, qdq policy: 1; --explain says why)" in proc.stdout


def test_json_report_carries_declined_nodes(explained):
    _, _, _, data = explained
    assert data["declined"] == {"growth": 1, "qdq policy": 1}
    by_node = {d["node"]: d for d in data["declined_nodes"]}
    assert set(by_node) == {"tied_T", "dq_w"}
    assert by_node["tied_T"]["op"] == "Transpose"
    assert by_node["tied_T"]["reason"].startswith("growth:")
    assert by_node["dq_w"]["op"] == "DequantizeLinear"
    assert by_node["dq_w"]["reason"].startswith("qdq policy:")
    assert data["initializer_bytes_after"] <= data["initializer_bytes_before"]


def test_folded_initializers_name_their_source_nodes(explained):
    _, src, out, _ = explained
    folded = onnx.load(str(out))
    inits = {t.name: t for t in folded.graph.initializer}
    props = {name: {p.key: p.value for p in t.metadata_props} for name, t in inits.items()}
    large = inits["wb2"]
    assert numpy_helper.to_array(large).nbytes > 1024  # written by the streaming path
    assert set(props["wb2"][PROVENANCE].split(",")) == {"mul_big", "tr_big"}
    assert numpy_helper.to_array(inits["nc"]).nbytes < 1024  # written by onnx-ir's serializer
    assert props["nc"][PROVENANCE] == "neg_small"
    assert PROVENANCE not in props["wte"]  # an original weight
    feeds = {"ids": np.array([3, 1000], np.int64), "x": np.ones((1, 32), np.float32)}
    for a, b in zip(run_ort(str(src), feeds), run_ort(str(out), feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_provenance_survives_external_data(tmp_path):
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(_model(), str(src))
    proc = run_cli("optimize", str(src), "-o", str(out), "-q", "--external-data", "yes",
                   timeout=120)
    assert proc.returncode == 0 and proc.stdout == "", proc.stderr
    assert (tmp_path / "out.onnx.data").exists()
    props = {t.name: {p.key: p.value for p in t.metadata_props}
             for t in onnx.load(str(out), load_external_data=False).graph.initializer}
    assert set(props["wb2"][PROVENANCE].split(",")) == {"mul_big", "tr_big"}
    assert props["nc"][PROVENANCE] == "neg_small"


def test_explain_lists_rejected_rewrites_and_says_when_all_folded(tmp_path):
    n = 1024  # Tile(c[2,2], [512,512]) + bias[1024]: the Tile cannot be postponed
    nodes = [helper.make_node("Tile", ["c", "reps"], ["t"], name="tile"),
             helper.make_node("Add", ["t", "bias"], ["a"], name="add_bias"),
             helper.make_node("Add", ["x", "a"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[n, n])], [vinfo("y", shape=[n, n])],
                       [tensor("c", np.ones((2, 2), np.float32)),
                        tensor("reps", np.array([n // 2, n // 2], np.int64)),
                        tensor("bias", np.arange(n, dtype=np.float32))])
    src = tmp_path / "tile.onnx"
    onnx.save(proto, str(src))
    proc = run_cli("optimize", str(src), "-o", str(tmp_path / "o1.onnx"), "-q", "--explain",
                   timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "growth: 2 node(s)" in lines
    assert any(line.startswith("  Tile tile: growth:") for line in lines)
    assert any(line.startswith("  Add add_bias: growth:") for line in lines)
    assert "rewrite not applied: postpone_expand: Tile with a non-scalar operand (1x)" in lines

    nodes = [helper.make_node("Neg", ["c"], ["nc"]), helper.make_node("Add", ["x", "nc"], ["y"])]
    proto = make_model(nodes, [vinfo("x", shape=[4])], [vinfo("y", shape=[4])],
                       [tensor("c", np.ones(4, np.float32))])
    onnx.save(proto, str(src))
    proc = run_cli("optimize", str(src), "-o", str(tmp_path / "o2.onnx"), "-q", "--explain",
                   timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == \
        "every constant-foldable node was folded"
