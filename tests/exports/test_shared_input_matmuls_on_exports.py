"""On a real TorchScript T5 export, the MatMuls that share an input stay apart where they are
projections into attention heads (``rules/shared_input_matmuls.py``, ``rules/fusable.py``):
each attention's Q, K and V, and the cross-attention K and V of every decoder layer, read from
the encoder's output, each refused with its reason, so onnxruntime's transformer optimizer can
fuse them. The fold has the MatMuls of the fold without the rule; at a regular binding and a
one-token decoder step, onnxruntime gives the same bits as for it, and outputs within
``compare``'s tolerance of the original's. The model is built here from a transformers config
with random weights."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

pytest.importorskip("torch", reason="the exports tier needs torch (pip install .[exports])")
pytest.importorskip("transformers",
                    reason="the exports tier needs transformers (pip install .[exports])")

import onnxfold
from onnxfold.pipeline.options import FoldOptions
from tests.support import export_models

RULE = "merge_shared_input_matmuls"


def _fold(source: str, out: str, **options: object) -> onnxfold.Report:
    result = onnxfold.optimize(source, FoldOptions(strict=True, **options))
    result.save(out)
    return result.report


def _matmuls(path: str) -> int:
    return sum(n.op_type == "MatMul" for n in onnx.load(path).graph.node)


def _run(path: str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"]).run(
        None, feeds)


def _weight_bytes(path: str) -> int:
    return sum(len(t.raw_data) for t in onnx.load(path).graph.initializer)


def test_t5_projections_into_heads_stay_apart_and_compute_the_same(tmp_path):
    source = str(tmp_path / "t5.onnx")
    export_models.t5_torchscript(source)
    merged, separate = str(tmp_path / "merged.onnx"), str(tmp_path / "separate.onnx")
    report = _fold(source, merged)
    _fold(source, separate, disabled_rules={RULE})
    # 2 encoder and 2 decoder self-attentions, and one cross-attention group of 2 x 2
    assert report.pattern_hits.get(RULE) is None
    refused = [n for reason, n in report.patterns_rejected.items()
               if reason.startswith(RULE) and "attention heads" in reason]
    assert refused and sum(refused) >= 5, report.patterns_rejected
    assert _matmuls(merged) == _matmuls(separate)
    assert _weight_bytes(merged) == _weight_bytes(separate)
    rng = np.random.default_rng(0)
    for batch, seq, dec in ((2, 8, 5), (1, 6, 1)):
        feeds = {"input_ids": rng.integers(0, export_models.VOCAB, (batch, seq)),
                 "attention_mask": np.ones((batch, seq), np.int64),
                 "decoder_input_ids": rng.integers(0, export_models.VOCAB, (batch, dec))}
        for want, got in zip(_run(separate, feeds), _run(merged, feeds), strict=True):
            np.testing.assert_array_equal(got, want)
        assert onnxfold.compare(source, merged, inputs=feeds).ok
