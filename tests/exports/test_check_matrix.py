"""The export matrix (``tests/support/export_matrix.py``) through the check, with defaults.

Each real export (KV-cache decoders of six families and Whisper's, by both exporters; BERT,
DistilBERT, CLIP text; T5 and BART; ResNet, ViT, YOLOS, CLIP vision with dynamic height and
width; Wav2Vec2 and Whisper's encoder; static-QDQ and dynamically quantized BERT; float16;
BERT and a Llama with KV cache by transformers' own exporter, with and without onnxruntime's
fusions) must
pass ``python -m onnxfold optimize X -o OUT --check 3`` with no ``--dim`` and no
``--int-range``: the check guesses every dim and integer range itself. Exports whose check
fails today for a known limitation of the check's feeds are strict xfails
(``KNOWN_CHECK_FAILURES``, the exact line of the failure), so the tier stays green and the list
shrinks as the feeds are fixed; a different failure of the same export still fails.

The check must also catch a wrong fold: in the fold of one export of each family
(``FAMILY_REPRESENTATIVES``; ``python -m tools.check_matrix --mutations`` plants in all), one
element of a folded float tensor computed by bitwise ops only moved by 4 ulps, and a folded
Reshape target off by one
(``tests/support/planted_folds.py``), planted together, must make ``onnxfold compare ORIGINAL
PLANTED`` exit 1 naming each planted tensor as differing. An export whose fold has no such
tensor skips, saying why.

Exports are cached in ``~/.cache/onnxfold-matrix`` (``$ONNXFOLD_MATRIX_CACHE``) by a key of
the package versions and the builder's source. With ``-n 2`` on 2 cores the tier took 84 s
cold and 34 s cached (128 s and 58 s with the cores shared with other work);
``python -m tools.check_matrix`` prints the same matrix as a table.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the exports tier needs torch (pip install .[exports])")
pytest.importorskip("transformers",
                    reason="the exports tier needs transformers (pip install .[exports])")
pytest.importorskip("onnxscript",
                    reason="the exports tier needs onnxscript (pip install .[exports])")

from tests.support import export_matrix, planted_folds
from tests.support.cli import Finished, run_cli
from tests.support.export_matrix import (
    CORE,
    FAMILY_REPRESENTATIVES,
    KNOWN_CHECK_FAILURES,
    MATRIX,
    PLANTED_CORE,
    UNEXPORTABLE,
    families,
)
from tests.support.known_failures import with_known

pytestmark = pytest.mark.slow


class KnownCheckFailure(Exception):
    """The export failed the check with its line of ``KNOWN_CHECK_FAILURES``."""


def _params(names) -> list:
    return with_known(names, KNOWN_CHECK_FAILURES, raises=KnownCheckFailure)


def _raise_if_known(name: str, proc: Finished) -> None:
    known = KNOWN_CHECK_FAILURES.get(name)
    if known is not None and proc.returncode != 0 and known in proc.stdout + proc.stderr:
        raise KnownCheckFailure(known)


def test_the_matrix_is_large_enough():
    assert len(MATRIX) >= 24
    assert not set(KNOWN_CHECK_FAILURES) - set(MATRIX)
    assert not set(UNEXPORTABLE) & set(MATRIX)
    assert set(FAMILY_REPRESENTATIVES) <= set(MATRIX) - set(KNOWN_CHECK_FAILURES)


def test_a_changed_builder_changes_the_key(monkeypatch):
    """The cache key holds the source of the builder and of the helpers it reads."""
    build = export_matrix.ENTRIES["llama_kv_dynamo"].build
    parts = export_matrix.source_parts(build)
    assert {"tests.support.export_matrix.causal_kv", "tests.support.export_matrix._kv_decoder",
            "tests.support.export_models._Decoder"} <= set(parts)
    before = export_matrix.cache_key("llama_kv_dynamo")
    assert before != export_matrix.cache_key("mistral_kv_dynamo")  # same code, other arguments
    changed = {**parts, "tests.support.export_matrix._kv_decoder": "changed"}
    monkeypatch.setattr(export_matrix, "source_parts", lambda _: changed)
    assert export_matrix.cache_key("llama_kv_dynamo") != before


# CI: the core but the MoE decoder, the upsampling decoder, the float16 encoder, T5, dynamo's
# BERT and GPT-2 (their planted folds and windows are the breadth tier's too)
@pytest.mark.parametrize("name", families(_params(MATRIX), core=CORE - {
    "olmoe_kv_torchscript", "upsample_decoder_dynamo", "bert_float16_dynamo",
    "t5_torchscript", "bert_dynamo", "gpt2_kv_torchscript"}))
def test_check_passes_with_defaults(name, tmp_path):
    source, out = export_matrix.build(name), tmp_path / "out.onnx"
    proc = run_cli("optimize", source, "-o", out, "--check", "3", timeout=600)
    _raise_if_known(name, proc)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all outputs within tolerance" in proc.stdout and out.exists()
    assert " 0 differ" in next(line for line in proc.stdout.splitlines()
                               if line.startswith("fold verification:"))


@pytest.fixture(scope="module")
def folds(tmp_path_factory):
    """name -> (export, its fold with the defaults, fold verification states), on first use."""
    made: dict = {}
    directory = tmp_path_factory.mktemp("folds")

    def get(name: str):
        if name not in made:
            source = export_matrix.build(name)
            folded = planted_folds.fold(source, directory / f"{name}.onnx")
            made[name] = source, folded, planted_folds.verdicts(source, folded)
        return made[name]

    return get


@pytest.mark.parametrize("name", families(_params(FAMILY_REPRESENTATIVES),
                                          core=PLANTED_CORE - {"llama_kv_dynamo",
                                                               "gpt2_kv_torchscript"}))
def test_a_planted_wrong_fold_is_caught(folds, tmp_path, name):
    """Both kinds planted in one fold (where each has a target): the comparison fails and its
    fold verification names each planted tensor as differing (one run where there were two:
    the planted tensors are judged one by one all the same)."""
    source, folded, states = folds(name)
    planted = tmp_path / "planted.onnx"
    try:
        what = planted_folds.planted_together(source, folded, states, planted)
    except planted_folds.NoTarget as e:
        pytest.skip(f"{name}: {e}")
    proc = planted_folds.compare(source, planted)
    _raise_if_known(name, proc)
    assert proc.returncode == 1, f"{what}\n{proc.stdout}{proc.stderr}"
    assert "Traceback" not in proc.stderr
    for tensor, how in what.items():
        assert f"  DIFFERS {tensor} " in proc.stdout, f"{how}\n{proc.stdout}"


@pytest.mark.parametrize("name", list(UNEXPORTABLE))
def test_an_unexportable_model_still_fails(name):
    """When torch starts to export one of ``UNEXPORTABLE`` usably, it joins the matrix."""
    import onnxruntime as ort

    with pytest.raises(Exception) as failure:
        path = export_matrix.build(name)
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert UNEXPORTABLE[name] in str(failure.value), str(failure.value)
