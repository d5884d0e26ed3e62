"""``optimize --check`` and ``simplify(check_n=)`` on real exports with default settings.

float16 transformers and KV-cache decoders (dynamo and TorchScript, every dim dynamic, no
``--dim``) must pass with the default tolerances and guessed dims; a float16 weight moved by
4 ulps, and a folded float32 model with a weight off by 1e-3, must fail (exit 1). The models
are built here from transformers configs with random weights (``export_models``).
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
from tests.support import export_models
from tests.support.cli import run_cli

BUILDERS = {
    "bert_float16": export_models.bert_float16,
    "qwen2_float16": export_models.qwen2_float16,
    "qwen2_kv_dynamo": lambda path: export_models.qwen2_kv_cache(path, dynamo=True),
    "qwen2_kv_torchscript": lambda path: export_models.qwen2_kv_cache(path, dynamo=False),
}


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """Each model exported once per module, on first use."""
    made: dict[str, str] = {}
    directory = tmp_path_factory.mktemp("exports")

    def get(name: str) -> str:
        if name not in made:
            path = str(directory / f"{name}.onnx")
            BUILDERS[name](path)
            made[name] = path
        return made[name]

    return get


@pytest.mark.parametrize("name", list(BUILDERS))
def test_check_passes_with_defaults(exports, tmp_path, name):
    source, out = exports(name), tmp_path / "out.onnx"
    proc = run_cli("optimize", source, "-o", out, "--check", "3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all outputs within tolerance" in proc.stdout and out.exists()
    folded, ok = onnxfold.simplify(onnx.load(source), check_n=3)
    assert ok and isinstance(folded, onnx.ModelProto)


@pytest.mark.parametrize(("name", "relation"), [
    ("qwen2_kv_torchscript", ("total", ["past", "seq"])),
    ("qwen2_kv_dynamo", None)])
def test_the_mask_is_as_long_as_past_plus_sequence(exports, name, relation):
    """The decoder's mask length is derived from the graph, in each of the three bindings."""
    source = exports(name)
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


def _moved(arr: np.ndarray, ulps: int) -> np.ndarray:
    """Each element ``ulps`` float16 ulps further from zero."""
    out = arr.copy()
    for _ in range(ulps):
        out = np.nextafter(out, np.copysign(np.float16(np.inf), out)).astype(arr.dtype)
    return out


def test_a_float16_weight_moved_by_four_ulps_fails(exports, tmp_path):
    source = exports("bert_float16")
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


def test_a_float32_weight_off_by_a_thousandth_fails(exports, tmp_path):
    """The folded float32 decoder with its largest weight scaled by 1.001 (what a fold that
    computes a weight slightly wrong gives) is outside the float32 tolerance."""
    source = exports("qwen2_kv_dynamo")
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
