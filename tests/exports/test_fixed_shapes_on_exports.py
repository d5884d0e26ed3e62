"""``optimize --input-shape ... --check N`` on real exports with dynamic dims: the check binds
the original at the shapes the user fixed (and says so), and passes. A BERT (its mask shares
the ids' dims), a KV-cache decoder (the past stays dynamic and is still varied) and a ViT (an
image of a fixed size), from the export matrix's cache."""

from __future__ import annotations

import onnx
import pytest

pytest.importorskip("torch", reason="the exports tier needs torch (pip install .[exports])")
pytest.importorskip("transformers",
                    reason="the exports tier needs transformers (pip install .[exports])")
pytest.importorskip("onnxscript",
                    reason="the exports tier needs onnxscript (pip install .[exports])")

from tests.support import export_matrix
from tests.support.cli import run_cli

pytestmark = pytest.mark.slow

CASES = {
    "bert_torchscript": ["input_ids:1,24"],
    "llama_kv_dynamo": ["input_ids:2,3"],
    "vit_dynamo": ["pixel_values:1,3,48,48"],
}


# CI: the encoder and vision exports (the dynamo decoder, 29 s, in the breadth tier)
@pytest.mark.parametrize("name", export_matrix.families(CASES, core=export_matrix.CORE - {
    "llama_kv_dynamo"}))
def test_a_fixed_shape_checks_where_the_user_fixed_it(name, tmp_path):
    source, out = export_matrix.build(name), tmp_path / "out.onnx"
    proc = run_cli("optimize", source, "-o", out, "--input-shape", *CASES[name], "--check", "3",
                   timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "--input-shape fixes dims the original leaves dynamic" in proc.stdout
    assert "all outputs within tolerance on 3 input sets" in proc.stdout
    spec = CASES[name][0]
    input_name, dims = spec.split(":")
    written = {v.name: [d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim]
               for v in onnx.load(out).graph.input}
    assert written[input_name] == [int(d) for d in dims.split(",")]
