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
