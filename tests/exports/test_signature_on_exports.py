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


def _run_macs(path, feeds) -> int:
    """The MatMul and Gemm multiply-accumulates of one run of ``path`` in onnxruntime over
    ``feeds``, from the shapes their inputs take at run time (each input made an output): a
    count that shares nothing with the signature's inference."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    model = onnx.load(path)
    products = [n for n in model.graph.node if n.op_type in ("MatMul", "Gemm")]
    known = {o.name for o in model.graph.output}
    for name in dict.fromkeys(i for n in products for i in n.input[:2]):
        if name not in known:
            model.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    shapes = dict(zip(names, (np.shape(v) for v in session.run(names, feeds))))
    shapes.update({t.name: tuple(t.dims) for t in model.graph.initializer})
    macs = 0
    for node in products:
        a, b = shapes[node.input[0]], shapes[node.input[1]]
        if node.op_type == "Gemm":
            trans = {x.name: x.i for x in node.attribute}
            m, k = a[::-1] if trans.get("transA") else a
            n = b[0] if trans.get("transB") else b[1]
            macs += m * k * n
        else:
            out = np.matmul(np.empty(a, np.int8), np.empty(b, np.int8)).shape
            macs += int(np.prod(out)) * a[-1]
    return macs


@pytest.mark.parametrize("name", ["bert_torchscript", "llama_kv_torchscript",
                                  "gpt2_kv_torchscript", "bert_dynamo", "llama_kv_dynamo",
                                  "t5_torchscript"])
def test_optimize_counts_what_onnxruntime_runs(name, tmp_path):
    """The signature ``optimize`` prints counts each export's MatMul and Gemm work within 5%
    of what a run at the same input shapes multiplies (issue 65's "Done when"), whichever
    exporter wrote it and whatever dims it keeps dynamic. With ``--check`` the shapes are those
    the check ran (a KV cache's mask spans past and new tokens: a guess may need a retry)."""
    from onnxfold.check.running.feeds import synthetic_feeds

    source = export_matrix.build(name)
    report = tmp_path / "r.json"
    proc = run_cli(source, tmp_path / "o.onnx", "--json", report, "--check", "1")
    assert proc.returncode == 0, proc.stderr
    compute = json.loads(report.read_text())["signature"]["compute"]
    feeds, _ = synthetic_feeds(str(source), dims=compute["dims"])
    assert {k: list(v.shape) for k, v in feeds.items()} == compute["inputs"]
    ran = _run_macs(source, feeds)
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
