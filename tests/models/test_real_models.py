"""Real exported models: fold completely (but for what the size policy keeps on purpose) and
compute what the original computes.

The tiny exports in models/ always run. Corpus models (``python ../shared/corpus/build.py DIR``)
run when ONNXFOLD_CORPUS points at that directory.
"""

import os
from collections import Counter

import pytest

import onnxfold
from onnxfold.analysis.shapes import infer_shapes
from onnxfold.app.inspection import foldable_ops
from onnxfold.declare.catalogue import load_catalogue
from onnxfold.io import load_model
from tests.support.models import MODELS

CORPUS = os.environ.get("ONNXFOLD_CORPUS")
CORPUS_MODELS = ["bert_base_ts", "bert_base_dynamo", "distilbert_ts", "gpt2_small_ts",
                 "gpt2_small_dynamo", "vit_base_ts", "vit_base_dynamo", "whisper_tiny_enc_ts",
                 "t5_small_enc_ts", "syn_chain_big"]


POLICY = ("growth", "model growth", "size", "qdq policy")


def fold_and_compare(src, out):
    """Fold ``src`` into ``out`` with the defaults; nothing foldable may remain but what the
    size policy keeps, and onnxruntime computes the same within each output dtype's tolerance
    (``onnxfold.compare``: two input sets at the sizes the check picks, every folded tensor
    re-derived from the original)."""
    result = onnxfold.optimize(src)
    onnxfold.save_model(result.model, out)
    folded = load_model(out)
    infer_shapes(folded)
    left = Counter(foldable_ops(folded, load_catalogue()))
    # what the size policy keeps on purpose (a tied embedding's Transpose: growth) may remain
    kept = Counter(d["op"] for d in result.report.declined_nodes if d["kind"] in POLICY)
    assert not left - kept, f"still foldable, not kept by the size policy: {dict(left - kept)}"
    check = onnxfold.compare(src, out, n=2)
    assert check.ok and check.folds is not None, check.summary()
    return result.report


@pytest.mark.parametrize("name", ["tiny_bert_ts", "tiny_gpt2_ts"])
def test_tiny_exports_fold_completely(tmp_path, name):
    report = fold_and_compare(os.path.join(MODELS, name + ".onnx"), str(tmp_path / "o.onnx"))
    assert report.nodes_after < report.nodes_before / 2
    assert report.folded_native > report.folded_fallback


@pytest.mark.slow
@pytest.mark.skipif(not CORPUS, reason="set ONNXFOLD_CORPUS to a built corpus directory")
@pytest.mark.parametrize("name", CORPUS_MODELS)
def test_corpus_model(tmp_path, name):
    src = os.path.join(CORPUS, name + ".onnx")
    if not os.path.exists(src):
        pytest.skip(f"{name} not built in {CORPUS}")
    fold_and_compare(src, str(tmp_path / "o.onnx"))
