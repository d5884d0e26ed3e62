"""Folding keeps every normalization onnxruntime fuses (``rules/normalizations.py``), on a
cheap subset of the export matrix with fresh-init norms (scales of ones, biases of zeros):
a TorchScript BERT (opset 17: each LayerNorm becomes the op), a TorchScript T5 and Llama
(RMSNorm, whose neutral scale stays: RMSNormalization is opset 23) and a dynamo Whisper
decoder (LayerNormalization ops, one fused with its residual Add). Counted in onnxruntime's
own extended-level graph of the original and of the fold
(``tests/support/runtime_fusions.py``)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the exports tier needs torch (pip install .[exports])")
pytest.importorskip("transformers",
                    reason="the exports tier needs transformers (pip install .[exports])")

import onnxfold
from onnxfold.pipeline.options import FoldOptions
from tests.support import export_matrix
from tests.support.runtime_fusions import fused_normalizations

SUBSET = ("bert_torchscript", "t5_torchscript", "llama_kv_torchscript",
          "whisper_decoder_kv_dynamo")


@pytest.mark.parametrize("name", export_matrix.families(SUBSET))
def test_every_fused_normalization_stays_fused(name):
    source = str(export_matrix.build(name))
    folded = onnxfold.optimize(source, FoldOptions(strict=True)).to_proto()
    before, after = fused_normalizations(source), fused_normalizations(folded)
    assert sum(before.values()) >= 5  # the subset has norms to keep
    assert after == before
