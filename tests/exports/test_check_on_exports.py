"""``simplify(check_n=)`` and ``compare`` on real exports with default settings.

float16 transformers and KV-cache decoders (dynamo and TorchScript, every dim dynamic, no
``--dim``) must pass with the default tolerances and guessed dims; a float16 weight moved by
4 ulps, and a folded float32 model with a weight off by 1e-3, must fail (exit 1). The models
are the export matrix's (``export_matrix``, cached like the rest).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

pytest.importorskip("torch", reason="the exports tier needs torch (pip install .[exports])")
pytest.importorskip("transformers",
                    reason="the exports tier needs transformers (pip install .[exports])")

import onnxfold
from tests.support import export_matrix
from tests.support.cli import run_cli
from tests.support.stand_apart import calls_from_the_check


@pytest.mark.parametrize("name", export_matrix.families(
    ["bert_float16_dynamo", "qwen2_float16_dynamo", "qwen2_kv_dynamo_opt",
     "qwen2_kv_torchscript"]))
def test_the_api_check_passes_with_defaults(name):
    """``simplify(check_n=3)``, as ``optimize --check 3`` does on every export
    (tests/exports/test_check_matrix.py)."""
    folded, ok = onnxfold.simplify(onnx.load(export_matrix.build(name)), check_n=3)
    assert ok and isinstance(folded, onnx.ModelProto)


@pytest.mark.parametrize(("name", "relation"), [
    ("llama_kv_torchscript", ("total", ["past", "seq"])),
    ("gpt2_kv_torchscript", ("total", ["past", "seq"])),
    ("llama_kv_dynamo", None)])
def test_the_mask_is_as_long_as_past_plus_sequence(name, relation):
    """The decoder's mask length is derived from the graph, in every binding (each binding of
    the dims runs at least once, however few input sets are asked for). GPT-2's TorchScript
    export reshapes the mask to ``[batch, -1]`` before it flattens it: the fold's symbolic
    walk did not read that -1 as ``total``, the check's own walk does (the plan guessed 16
    for a mask of 32 before)."""
    source = str(export_matrix.build(name))
    result = onnxfold.compare(source, source, n=2)
    mask = next(i for i in result.inputs if i.name == "attention_mask")
    past = next(i for i in result.inputs if i.name.startswith("past_key_values"))
    ids = next(i for i in result.inputs if i.name == "input_ids")
    assert mask.shape[1] == past.shape[2] + ids.shape[1] and ids.shape[1] > 1
    assert len(result.bindings) == 3 and result.ok
    if relation is not None:
        total, parts = relation
        for binding in result.bindings:
            assert binding[total] == sum(binding[p] for p in parts)
    assert "dims related by the graph" in result.summary()


def test_the_check_of_a_kv_cache_export_never_calls_the_folds_shape_code():
    """``simplify(check_n=3)`` on a TorchScript KV-cache decoder: no call into the fold's
    symbolic walk or the rules' shape steps from a check module (issue 82 item 5: the
    planner called them 48 ways)."""
    source = str(export_matrix.build("llama_kv_torchscript"))
    result: list = []
    found = calls_from_the_check(lambda: result.append(onnxfold.simplify(source, check_n=3)))
    assert result[0][1] and not found, found


def _moved(arr: np.ndarray, ulps: int) -> np.ndarray:
    """Each element ``ulps`` float16 ulps further from zero."""
    out = arr.copy()
    for _ in range(ulps):
        out = np.nextafter(out, np.copysign(np.float16(np.inf), out)).astype(arr.dtype)
    return out


def test_a_float16_weight_moved_by_four_ulps_fails(tmp_path):
    source = str(export_matrix.build("bert_float16_dynamo"))
    proto = onnx.load(source)
    norms = [t for t in proto.graph.initializer
             if "LayerNorm.weight" in t.name and t.data_type == onnx.TensorProto.FLOAT16]
    weight = norms[-1]  # the last LayerNorm: its weight scales the output directly
    weight.CopyFrom(numpy_helper.from_array(_moved(numpy_helper.to_array(weight), 4),
                                            weight.name))
    changed = tmp_path / "changed.onnx"
    onnx.save(proto, str(changed))
    proc = run_cli("compare", source, changed, "-n", "3")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "outside tolerance" in proc.stderr and "Traceback" not in proc.stderr


def test_a_float32_weight_off_by_a_thousandth_fails(tmp_path):
    """The folded float32 decoder with its largest weight scaled by 1.001 (what a fold that
    computes a weight slightly wrong gives) is outside the float32 tolerance."""
    source = str(export_matrix.build("llama_kv_dynamo"))
    folded = onnxfold.optimize(source).to_proto()
    floats = [t for t in folded.graph.initializer if t.data_type == onnx.TensorProto.FLOAT]
    target = max(floats, key=lambda t: int(np.prod(t.dims)))
    arr = numpy_helper.to_array(target) * np.float32(1.001)
    target.CopyFrom(numpy_helper.from_array(arr, target.name))
    wrong = tmp_path / "wrong.onnx"
    onnx.save(folded, str(wrong))
    proc = run_cli("compare", source, wrong, "-n", "3")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "rtol 0.0001, atol 1e-05" in proc.stdout
