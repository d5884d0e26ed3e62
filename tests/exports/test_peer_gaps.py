"""Exports where onnxfold left more nodes than a peer (issue 56, ``export_matrix.GAPS``): a
TorchScript MobileBERT, whose attention Reshapes read their targets back from Shape until a
Concat's agreed axes and a cut position table kept the sequence (140 nodes, onnxslim 125), and
a dynamo FNet, whose zero biases before its DFTs stayed (58, onnxsim 55). Each fold must stay
at or under the peer's count and compute what the original computes (``--check 2``)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the exports tier needs torch (pip install .[exports])")
pytest.importorskip("transformers",
                    reason="the exports tier needs transformers (pip install .[exports])")

from tests.support import export_matrix
from tests.support.cli import run_cli

PEERS = {"mobilebert_torchscript": 125, "fnet_dynamo": 55}  # the best peer's nodes


@pytest.mark.parametrize("name", sorted(PEERS))
def test_no_more_nodes_than_the_best_peer(tmp_path, name):
    out = tmp_path / "out.onnx"
    proc = run_cli("optimize", str(export_matrix.build(name)), "-o", str(out), "--check", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    nodes = next(line for line in proc.stdout.splitlines() if line.startswith("nodes"))
    assert int(nodes.split("->")[1].split()[0]) <= PEERS[name], nodes
