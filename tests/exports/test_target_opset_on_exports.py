"""`--target-opset` on real exports from several opsets (TorchScript 17, dynamo 20, a
static-QDQ model, models shipped in wheels at opsets 14 and 15): converted up or down (down to
17 from torch's default exports, whose Gelu exists only from 20), folded, and run in
onnxruntime against the original by ``compare`` at two input sets."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the exports tier needs torch (pip install .[exports])")
pytest.importorskip("transformers",
                    reason="the exports tier needs transformers (pip install .[exports])")

import onnx

import onnxfold
from tests.support import export_matrix
from tests.support.wild_models import wild_model

CASES = [("bert_torchscript", 21), ("llama_kv_torchscript", 18), ("llama_kv_dynamo", 23),
         ("whisper_decoder_kv_dynamo", 21), ("bert_static_qdq", 19),
         # down from torch's default exports (opset 20): Gelu expanded from its body, Reduce
         # axes from inputs to attributes
         ("bert_dynamo", 17), ("llama_kv_dynamo_opt", 17), ("bert_float16_dynamo", 17),
         ("whisper_decoder_kv_dynamo", 17), ("vit_dynamo", 17),
         # axes computed in the graph (dynamo without its optimizer): folded at 20 first
         ("resnet_dynamo", 17), ("llama_kv_dynamo", 17)]
WILD = [("ppocrv5_rec", 17), ("silero_vad_16k_op15", 18)]


def _converted_matches(source, target, tmp_path):
    out = tmp_path / "converted.onnx"
    onnxfold.optimize(str(source), target_opset=target).save(out)
    assert {o.domain: o.version for o in onnx.load(str(out), load_external_data=False)
            .opset_import}[""] == target
    result = onnxfold.compare(str(source), str(out), n=2)
    assert result.ok, result.summary()


@pytest.mark.parametrize(("name", "target"), export_matrix.families(
    CASES, lambda case: case[0]))
def test_exports_convert_and_compute_the_same(name, target, tmp_path):
    _converted_matches(export_matrix.build(name), target, tmp_path)


@pytest.mark.parametrize(("name", "target"), WILD)
def test_wheel_shipped_models_convert_and_compute_the_same(name, target, tmp_path):
    _converted_matches(wild_model(name), target, tmp_path)
