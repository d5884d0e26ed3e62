"""The export matrix checked in stages (``onnxfold.check.running.stages``): every export's fold
compared with the original stage by stage, with stages forced small (an eighth of the
weights: 7 to 20 stages a model): it passes as the whole check of the export matrix passes
(``tests/exports/test_check_matrix.py``), on every output; a wrong fold planted in a fold is
caught in stages as it is whole.

Stages are what lets the check run where a session over a whole model does not fit (a 7B
decoder in 8 GiB); this tier holds them to the same answers on one export of every family the
check knows: KV-cache decoders of both exporters, mixture-of-experts, encoders,
encoder-decoders, vision, speech, quantized, float16, recurrent and upsampling models, and
transformers' own exporter. The rest of the matrix is held out of CI for its time (~4 min of
CPU): ``python -m tools.check_matrix --stages`` runs every export in stages.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the exports tier needs torch (pip install .[exports])")
pytest.importorskip("transformers",
                    reason="the exports tier needs transformers (pip install .[exports])")
pytest.importorskip("onnxscript",
                    reason="the exports tier needs onnxscript (pip install .[exports])")

from onnxfold.check.compare import CheckCouldNotRun, compare_models
from onnxfold.check.running.models import graph_of
from onnxfold.check.running.options import CompareOptions
from tests.support import export_matrix, planted_folds
from tests.support.export_matrix import (
    FAMILY_REPRESENTATIVES,
    KNOWN_CHECK_FAILURES,
    MATRIX,
    PLANTED_CORE,
    families,
    staged_compare,
)

pytestmark = pytest.mark.slow

# the planted folds in stages, on a decoder, an encoder, a vision model, a quantized and a
# float16 model (every representative is planted on whole in tests/exports/test_check_matrix.py)
PLANTED_ON = ["llama_kv_dynamo", "bert_torchscript", "resnet_dynamo", "bert_static_qdq",
              "qwen2_float16_dynamo"]


@pytest.fixture(scope="module")
def folded(tmp_path_factory):
    made: dict = {}
    directory = tmp_path_factory.mktemp("windowed")

    def get(name: str):
        if name not in made:
            source = export_matrix.build(name)
            made[name] = source, planted_folds.fold(source, directory / f"{name}.onnx")
        return made[name]

    return get


def test_the_planted_exports_are_in_the_matrix():
    assert set(PLANTED_ON) <= set(FAMILY_REPRESENTATIVES) <= set(MATRIX) - set(KNOWN_CHECK_FAILURES)


def _whole(source, fold):
    """The whole comparison, or the line of a check that could not run."""
    try:
        return compare_models(str(source), str(fold), 2, CompareOptions())
    except CheckCouldNotRun as e:
        return str(e)


@pytest.mark.parametrize("name", families(FAMILY_REPRESENTATIVES,
                                          core=PLANTED_CORE - {"gpt2_kv_torchscript"}))
def test_in_stages_the_verdict_is_the_same(folded, name):
    """Whole, each export's check passes (``tests/exports/test_check_matrix.py`` runs
    ``optimize --check 3`` on every one): in stages it passes too, on the same outputs, or
    it could not run where the whole check could not (the original fails at the guessed
    dims). The whole comparison is not run again here: it is that tier's."""
    source, fold = folded(name)
    windowed = staged_compare(source, fold)
    if isinstance(windowed, str):  # the original does not run on the guessed dims
        whole = _whole(source, fold)
        assert windowed == whole, (windowed, whole)
        pytest.skip(f"{name}: {whole[:200]}")
    assert "compared stage by stage" in windowed.windows, windowed.summary()
    assert windowed.ok and not windowed.failing, windowed.summary()
    outputs = [str(v.name) for v in graph_of(str(source), "a").graph.outputs]
    assert [r.name for r in windowed.rows] == outputs


@pytest.mark.parametrize("name", families(PLANTED_ON))
def test_in_stages_a_planted_wrong_fold_is_caught(folded, tmp_path, name):
    """Both kinds planted in one fold: in stages the comparison fails, naming each."""
    source, fold = folded(name)
    states = planted_folds.verdicts(source, fold)
    try:
        what = planted_folds.planted_together(source, fold, states,
                                              tmp_path / "planted.onnx")
    except planted_folds.NoTarget as e:
        pytest.skip(f"{name}: {e}")
    result = staged_compare(source, tmp_path / "planted.onnx")
    assert not isinstance(result, str), result
    assert not result.ok and result.state == "failed", f"{what}\n{result.summary()}"
    for tensor, how in what.items():
        assert f"folded tensor {tensor}" in result.failing, f"{how}\n{result.summary()}"
