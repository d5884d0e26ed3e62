"""The signature counts what a model computes whatever its exporter (issue 65, item 2): a
dynamic TorchScript BERT leaves its MatMuls' shapes to Shape, Gather and Concat chains that
no inference follows, and ``inspect`` counted 24 FLOPs on such an export (0 MACs, "not
counted: MatMul, ..."). The counts are held against the model's own arithmetic, written out.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch", reason="the exports tier needs torch (pip install .[exports])")

from tests.support import export_matrix
from tests.support.cli import run_cli
from tests.support.run_macs import run_macs


def test_inspect_counts_a_dynamic_torchscript_bert_by_hand():
    source = export_matrix.build("bert_torchscript")
    proc = run_cli("inspect", source, "--json")
    assert proc.returncode == 0, proc.stderr
    compute = json.loads(proc.stdout)["signature"]["compute"]
    shapes = compute["inputs"]
    assert shapes["input_ids"] == shapes["attention_mask"]
    batch, seq = shapes["input_ids"]
    hidden, ffn, layers = export_matrix.HIDDEN, 64, export_matrix.LAYERS
    per_layer = (4 * seq * hidden * hidden  # the Q, K, V and output projections
                 + 2 * seq * seq * hidden  # Q K^T and the weights times V, over every head
                 + 2 * seq * hidden * ffn)  # the feed-forward's two MatMuls
    matmul = compute["before"]["ops"]["MatMul"]
    assert matmul["macs"] == batch * layers * per_layer, (matmul, shapes)
    assert "MatMul" not in compute["before"]["not_counted"]


@pytest.mark.parametrize("name", export_matrix.families([
    "bert_torchscript", "llama_kv_torchscript", "gpt2_kv_torchscript", "bert_dynamo",
    "llama_kv_dynamo", "t5_torchscript"]))
def test_optimize_counts_what_onnxruntime_runs(name, tmp_path):
    """The signature ``optimize`` prints counts each export's MatMul and Gemm work within 5%
    of what a run at the same input shapes multiplies (issue 65's "Done when"), whichever
    exporter wrote it and whatever dims it keeps dynamic. With ``--check`` the shapes are those
    the check ran (a KV cache's mask spans past and new tokens: a guess may need a retry)."""
    from onnxfold.check.inputs.feeds import synthetic_feeds

    source = export_matrix.build(name)
    report = tmp_path / "r.json"
    proc = run_cli(source, tmp_path / "o.onnx", "--json", report, "--check", "1")
    assert proc.returncode == 0, proc.stderr
    compute = json.loads(report.read_text())["signature"]["compute"]
    feeds, _ = synthetic_feeds(str(source), dims=compute["dims"])
    assert {k: list(v.shape) for k, v in feeds.items()} == compute["inputs"]
    ran = run_macs(source, feeds)
    assert ran > 0
    # without a check, at the first set the check would try (a KV cache's guessed mask may
    # be one the check then retries: the products it counts do not read the mask's length)
    unchecked = tmp_path / "u.json"
    proc = run_cli(source, tmp_path / "u.onnx", "--json", unchecked)
    assert proc.returncode == 0, proc.stderr
    guessed = json.loads(unchecked.read_text())["signature"]["compute"]
    assert guessed["inputs"].keys() == compute["inputs"].keys()
    for found in (compute, guessed):
        ops = found["before"]["ops"]
        counted = sum(ops.get(op, {}).get("macs", 0) for op in ("MatMul", "Gemm"))
        assert abs(counted - ran) <= 0.05 * ran, (counted, ran, found)
